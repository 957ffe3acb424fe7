/* test_comm.c -- the communicator's collectives on a GPU: the local backend with P = 2, 3, 4
 * threads on GPU 0, and NCCL with one rank per visible GPU. Every result is compared with the
 * value computed on the host; outputs are poisoned (0xFF) first. Prints "N passed, M failed". */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../common/check.h"
#include "../common/comm.h"
#include "../common/safetensors.h"
#include "test.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void record(int ok, const char *what, int P, int rank) {
    pthread_mutex_lock(&lock);
    EXPECT(ok, "%s, P=%d, rank %d", what, P, rank);
    pthread_mutex_unlock(&lock);
}

/* deterministic value of element i of rank r's input, exact in bf16 */
static float val(int r, int64_t i) { return (float)((r * 37 + i * 11) % 97 - 48) * 0.25f; }

typedef struct {
    CommWorld *w;
    int local, P, device;
} Args;

static void *rank_main(void *arg) {
    const Args *a = arg;
    CUDA_CHECK(cudaSetDevice(a->device));
    Comm *c = comm_rank(a->w, a->local);
    const int r = comm_rank_id(c), P = comm_size(c);
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int64_t n = 1000003; /* odd: no size happens to line up */
    /* all-gather (bf16) */
    uint16_t *h = xmalloc((size_t)(n * P) * 2);
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(val(r, i));
    bf16_t *in, *out;
    CUDA_CHECK(cudaMalloc((void **)&in, (size_t)n * 2));
    CUDA_CHECK(cudaMalloc((void **)&out, (size_t)(n * P) * 2));
    CUDA_CHECK(cudaMemcpy(in, h, (size_t)n * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(out, 0xFF, (size_t)(n * P) * 2));
    comm_all_gather_bf16(c, out, in, n, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(h, out, (size_t)(n * P) * 2, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int q = 0; q < P; q++)
        for (int64_t i = 0; i < n; i++) ok &= bf16_to_f32(h[q * n + i]) == val(q, i);
    record(ok, "all-gather bf16", P, r);
    /* reduce-scatter (fp32, scaled by 1/P): rank r gets the mean of every rank's slice r */
    float *f = xmalloc((size_t)(n * P) * 4), *fin, *fout;
    for (int64_t i = 0; i < n * P; i++) f[i] = val(r, i);
    CUDA_CHECK(cudaMalloc((void **)&fin, (size_t)(n * P) * 4));
    CUDA_CHECK(cudaMalloc((void **)&fout, (size_t)n * 4));
    CUDA_CHECK(cudaMemcpy(fin, f, (size_t)(n * P) * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(fout, 0xFF, (size_t)n * 4));
    comm_reduce_scatter_f32(c, fout, fin, n, 1.f / (float)P, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(f, fout, (size_t)n * 4, cudaMemcpyDeviceToHost));
    ok = 1;
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int q = 0; q < P; q++) want += val(q, (int64_t)r * n + i);
        want /= P;
        ok &= fabs(f[i] - want) <= 1e-5 * (1 + fabs(want));
    }
    record(ok, "reduce-scatter fp32 (mean)", P, r);
    /* all-reduce (fp64, in place) */
    double d[3] = {r + 1.0, 0.5 * r, -1.0}, *dd;
    CUDA_CHECK(cudaMalloc((void **)&dd, sizeof d));
    CUDA_CHECK(cudaMemcpy(dd, d, sizeof d, cudaMemcpyHostToDevice));
    comm_all_reduce_f64(c, dd, 3, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost));
    record(d[0] == P * (P + 1) / 2.0 && d[1] == 0.25 * P * (P - 1) && d[2] == -P, "all-reduce fp64", P, r);
    /* ring exchange: send to r+1, receive from r-1, twice in a row (buffers reused) */
    ok = 1;
    for (int round = 0; round < 2; round++) {
        for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(val(r + round, i));
        CUDA_CHECK(cudaMemcpy(in, h, (size_t)n * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(out, 0xFF, (size_t)n * 2));
        comm_sendrecv(c, in, (r + 1) % P, out, (r + P - 1) % P, n * 2, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        CUDA_CHECK(cudaMemcpy(h, out, (size_t)n * 2, cudaMemcpyDeviceToHost));
        const int from = (r + P - 1) % P;
        for (int64_t i = 0; i < n; i++) ok &= bf16_to_f32(h[i]) == val(from + round, i);
    }
    record(ok, "send/recv ring", P, r);
    comm_barrier(c, st);
    cudaFree(in); cudaFree(out); cudaFree(fin); cudaFree(fout); cudaFree(dd);
    free(h); free(f);
    comm_rank_free(c);
    return NULL;
}

static void run(CommWorld *w, int P, int local_backend) {
    pthread_t th[16];
    Args a[16];
    for (int r = 0; r < P; r++) {
        a[r] = (Args){w, r, P, local_backend ? 0 : r};
        if (pthread_create(&th[r], NULL, rank_main, &a[r])) DIE("pthread_create");
    }
    for (int r = 0; r < P; r++) pthread_join(th[r], NULL);
    comm_world_free(w);
}

int main(void) {
    int gpus = 0;
    CUDA_CHECK(cudaGetDeviceCount(&gpus));
    CUDA_CHECK(cudaSetDevice(0));
    for (int P = 2; P <= 4; P++) {
        printf("  local backend, %d ranks on GPU 0\n", P);
        run(comm_world_local(P), P, 1);
    }
    printf("  NCCL, %d rank(s), one per GPU\n", gpus);
    run(comm_world_nccl(gpus, 1, 0, NULL), gpus, 0);
    return test_summary();
}
