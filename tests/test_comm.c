/* test_comm.c -- the communicator's collectives on a GPU: the local backend with P = 2, 3, 4
 * threads on GPU 0, NCCL with one rank per visible GPU, and the rehearsal (one rank of a larger
 * job alone on GPU 0). Every result is compared with the value computed on the host; outputs are
 * poisoned (0xFF) first. Prints "N passed, M failed".
 *   test_comm            the collectives
 *   test_comm skip T     two local ranks, rank 1 skips a collective: must exit non-zero within T s
 *                        naming the collective (the ranks disagree)
 *   test_comm stop T     two local ranks, rank 1 stops issuing collectives: rank 0's must time out
 *                        after --comm-timeout T s, naming the rank it waited for */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../common/check.h"
#include "../common/comm.h"
#include "../common/gpu.h"
#include "../common/safetensors.h"
#include "test.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void record(int ok, const char *what, int P, int rank) {
    pthread_mutex_lock(&lock);
    EXPECT(ok, "%s, P=%d, rank %d", what, P, rank);
    pthread_mutex_unlock(&lock);
}

/* host -> device on the stream the kernels use, waited for (gpu.h): a cudaMemcpy from pageable
 * memory may return before its DMA lands, and a non-blocking stream is not ordered after it */
#define upload(d, s_, n) gpu_upload((d), (s_), (int64_t)(n), st)

/* deterministic value of element i of rank r's input, exact in bf16 */
static float val(int r, int64_t i) { return (float)((r * 37 + i * 11) % 97 - 48) * 0.25f; }

typedef struct {
    CommWorld *w;
    int local, P, device;
    int misbehave;      /* 1: rank 1 skips its second collective; 2: rank 1 stops after its first */
} Args;

/* the failure drills: every rank issues all-gather, reduce-scatter, all-gather, barrier; rank 1 skips
 * or stops. The process must exit (the communicator's DIE), never reach the end. */
static void *drill_main(void *arg) {
    const Args *a = arg;
    CUDA_CHECK(cudaSetDevice(a->device));
    Comm *c = comm_rank(a->w, a->local);
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int64_t n = 1024;
    bf16_t *in, *out;
    float *fin, *fout;
    CUDA_CHECK(cudaMalloc((void **)&in, n * 2));
    CUDA_CHECK(cudaMalloc((void **)&out, n * 2 * a->P));
    CUDA_CHECK(cudaMalloc((void **)&fin, n * 4 * a->P));
    CUDA_CHECK(cudaMalloc((void **)&fout, n * 4));
    const int me = comm_rank_id(c) == 1;
    comm_all_gather_bf16(c, out, in, n, st);
    if (me && a->misbehave == 2) return NULL; /* this rank stops */
    if (!(me && a->misbehave == 1)) comm_reduce_scatter_f32(c, fout, fin, n, 1.f, st);
    comm_all_gather_bf16(c, out, in, n, st);
    comm_barrier(c, st);
    printf("the drill reached its end: no rank was stopped\n");
    exit(0);
}

static void *rank_main(void *arg) {
    const Args *a = arg;
    CUDA_CHECK(cudaSetDevice(a->device));
    Comm *c = comm_rank(a->w, a->local);
    const int r = comm_rank_id(c), P = comm_size(c);
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* the warm-up, right after the join (nothing else allocated since): NCCL's own memory, between
     * its smallest plausible size and 16 GiB with several GPUs; none without NCCL or with one rank
     * (on one GPU only these zero cases run) */
    const int64_t nccl = comm_warm_up(c, st);
    record(comm_kind(c) == COMM_NCCL && P > 1 ? nccl >= (16ll << 20) && nccl < (16ll << 30) : nccl == 0,
           "comm_warm_up measures NCCL's own memory", P, r);
    if (r == 0 && comm_kind(c) == COMM_NCCL) printf("  NCCL at %d rank(s): %.3f GiB after the warm-up\n", P, nccl / (double)(1 << 30));
    const int64_t n = 1000003; /* odd: no size happens to line up */
    /* every buffer now, in the allocation phase the warm-up leaves open (common/comm.h: with a
     * thread per GPU, an allocation while another thread's collective is in flight can hang) */
    bf16_t *in, *out;
    float *fin, *fout;
    double *dd;
    CUDA_CHECK(cudaMalloc((void **)&in, (size_t)n * 2));
    CUDA_CHECK(cudaMalloc((void **)&out, (size_t)(n * P) * 2));
    CUDA_CHECK(cudaMalloc((void **)&fin, (size_t)(n * P) * 4));
    CUDA_CHECK(cudaMalloc((void **)&fout, (size_t)n * 4));
    CUDA_CHECK(cudaMalloc((void **)&dd, 3 * sizeof(double)));
    /* all-gather (bf16) */
    uint16_t *h = xmalloc((size_t)(n * P) * 2);
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(val(r, i));
    upload(in, h, (size_t)n * 2);
    CUDA_CHECK(cudaMemsetAsync(out, 0xFF, (size_t)(n * P) * 2, st));
    comm_all_gather_bf16(c, out, in, n, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(h, out, (size_t)(n * P) * 2, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int q = 0; q < P; q++)
        for (int64_t i = 0; i < n; i++) ok &= bf16_to_f32(h[q * n + i]) == val(q, i);
    record(ok, "all-gather bf16", P, r);
    /* reduce-scatter (fp32, scaled by 1/P): rank r gets the mean of every rank's slice r */
    float *f = xmalloc((size_t)(n * P) * 4);
    for (int64_t i = 0; i < n * P; i++) f[i] = val(r, i);
    upload(fin, f, (size_t)(n * P) * 4);
    CUDA_CHECK(cudaMemsetAsync(fout, 0xFF, (size_t)n * 4, st));
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
    double d[3] = {r + 1.0, 0.5 * r, -1.0};
    upload(dd, d, sizeof d);
    comm_all_reduce_f64(c, dd, 3, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost));
    record(d[0] == P * (P + 1) / 2.0 && d[1] == 0.25 * P * (P - 1) && d[2] == -P, "all-reduce fp64", P, r);
    /* ring exchange: send to r+1, receive from r-1, twice in a row (buffers reused) */
    ok = 1;
    for (int round = 0; round < 2; round++) {
        for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(val(r + round, i));
        upload(in, h, (size_t)n * 2);
        CUDA_CHECK(cudaMemsetAsync(out, 0xFF, (size_t)n * 2, st));
        comm_sendrecv(c, in, (r + 1) % P, out, (r + P - 1) % P, n * 2, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        CUDA_CHECK(cudaMemcpy(h, out, (size_t)n * 2, cudaMemcpyDeviceToHost));
        const int from = (r + P - 1) % P;
        for (int64_t i = 0; i < n; i++) ok &= bf16_to_f32(h[i]) == val(from + round, i);
    }
    record(ok, "send/recv ring", P, r);
    /* the job-wide minimum of a per-rank choice (kept layers chosen from each node's memory) */
    const int64_t mine = 40 - 3 * ((r + 1) % P), least = 40 - 3 * (P - 1);
    const int64_t m = comm_min_i64(c, mine, st);
    record(m == (P > 1 ? least : mine), "comm_min_i64: every rank gets the smallest value", P, r);
    comm_barrier(c, st);
    comm_alloc_begin(c); /* the frees: every rank thread is past its last collective */
    cudaFree(in); cudaFree(out); cudaFree(fin); cudaFree(fout); cudaFree(dd);
    free(h); free(f);
    comm_rank_free(c);
    return NULL;
}

static void run(CommWorld *w, int P, int local_backend) {
    pthread_t th[16];
    Args a[16];
    for (int r = 0; r < P; r++) {
        a[r] = (Args){w, r, P, local_backend ? 0 : r, 0};
        if (pthread_create(&th[r], NULL, rank_main, &a[r])) DIE("pthread_create");
    }
    for (int r = 0; r < P; r++) pthread_join(th[r], NULL);
    comm_world_free(w);
}

/* the rehearsal: rank R of a job of P ranks alone; every collective from its own data */
static void test_rehearse(int gpus, int nnodes, int R) {
    const CommOpts o = {0, 100.0, 10.0, NULL};
    CommWorld *w = comm_world_rehearse(gpus, nnodes, R, &o);
    Comm *c = comm_rank(w, 0);
    const int P = gpus * nnodes;
    EXPECT(comm_rank_id(c) == R && comm_size(c) == P && comm_kind(c) == COMM_REHEARSE, "rehearsal is rank %d of %d", R, P);
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int64_t n = 4099;
    uint16_t *h = xmalloc((size_t)(n * P) * 2);
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(val(R, i));
    bf16_t *in, *out;
    CUDA_CHECK(cudaMalloc((void **)&in, (size_t)n * 2));
    CUDA_CHECK(cudaMalloc((void **)&out, (size_t)(n * P) * 2));
    upload(in, h, (size_t)n * 2);
    CUDA_CHECK(cudaMemsetAsync(out, 0xFF, (size_t)(n * P) * 2, st));
    comm_all_gather_bf16(c, out, in, n, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(h, out, (size_t)(n * P) * 2, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (int q = 0; q < P; q++)
        for (int64_t i = 0; i < n; i++) ok &= bf16_to_f32(h[q * n + i]) == val(R, i);
    EXPECT(ok, "rehearsal all-gather: the rank's shard in all %d slots", P);
    float *f = xmalloc((size_t)(n * P) * 4), *fin, *fout;
    for (int64_t i = 0; i < n * P; i++) f[i] = val(R, i);
    CUDA_CHECK(cudaMalloc((void **)&fin, (size_t)(n * P) * 4));
    CUDA_CHECK(cudaMalloc((void **)&fout, (size_t)n * 4));
    upload(fin, f, (size_t)(n * P) * 4);
    CUDA_CHECK(cudaMemsetAsync(fout, 0xFF, (size_t)n * 4, st));
    comm_reduce_scatter_f32(c, fout, fin, n, 1.f / (float)P, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(f, fout, (size_t)n * 4, cudaMemcpyDeviceToHost));
    int64_t bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (!(fabsf(f[i] - val(R, (int64_t)R * n + i)) <= 1e-6f * (1 + fabsf(val(R, (int64_t)R * n + i))))) bad = i;
    EXPECT(bad < 0, "rehearsal reduce-scatter (mean): the rank's own slice r = %d (first wrong element %lld: %g, want %g)",
           R, (long long)bad, bad < 0 ? 0.0 : f[bad], bad < 0 ? 0.0 : val(R, (int64_t)R * n + bad));
    double d[2] = {1.5, -2.0}, *dd;
    CUDA_CHECK(cudaMalloc((void **)&dd, sizeof d));
    upload(dd, d, sizeof d);
    comm_all_reduce_f64(c, dd, 2, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(d, dd, sizeof d, cudaMemcpyDeviceToHost));
    EXPECT(d[0] == 1.5 * P && d[1] == -2.0 * P, "rehearsal all-reduce: P copies of the rank's values (%g %g)", d[0], d[1]);
    CUDA_CHECK(cudaMemsetAsync(out, 0xFF, (size_t)n * 2, st));
    comm_sendrecv(c, in, (R + 1) % P, out, (R + P - 1) % P, n * 2, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(h, out, (size_t)n * 2, cudaMemcpyDeviceToHost));
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= bf16_to_f32(h[i]) == val(R, i);
    EXPECT(ok, "rehearsal send/recv: the rank's own message arrives");
    /* what the job would move: ring all-gather and reduce-scatter send P-1 shards, all-reduce 2(P-1)/P
     * of the buffer; over several nodes everything runs at the network's rate */
    CommStats s;
    comm_stats(c, &s, 1);
    const double rate = (nnodes > 1 ? 10.0 : 100.0) * 1e9;
    EXPECT(s.calls[C_ALL_GATHER] == 1 && s.bytes[C_ALL_GATHER] == (int64_t)(P - 1) * n * 2 &&
               s.bytes[C_REDUCE_SCATTER] == (int64_t)(P - 1) * n * 4 && s.bytes[C_ALL_REDUCE] == 2 * (P - 1) * 16 / P &&
               s.bytes[C_SENDRECV] == n * 2,
           "rehearsal byte counts (P = %d): %lld %lld %lld %lld", P, (long long)s.bytes[0], (long long)s.bytes[1],
           (long long)s.bytes[2], (long long)s.bytes[3]);
    EXPECT(fabs(s.model_s[C_REDUCE_SCATTER] - (double)(P - 1) * n * 4 / rate) < 1e-12 &&
               fabs(s.hop_s - (double)n * 2 / rate) < 1e-12,
           "rehearsal modelled times at %g GB/s", rate / 1e9);
    comm_stats(c, &s, 0);
    EXPECT(s.calls[C_ALL_GATHER] == 0, "rehearsal stats reset");
    cudaFree(in); cudaFree(out); cudaFree(fin); cudaFree(fout); cudaFree(dd);
    free(h); free(f);
    comm_rank_free(c);
    comm_world_free(w);
}

int main(int argc, char **argv) {
    int gpus = 0;
    CUDA_CHECK(cudaGetDeviceCount(&gpus));
    CUDA_CHECK(cudaSetDevice(0));
    if (argc == 3 && (!strcmp(argv[1], "skip") || !strcmp(argv[1], "stop"))) {
        const CommOpts o = {atof(argv[2]), 0, 0, NULL};
        CommWorld *w = comm_world_local(2, &o);
        pthread_t th[2];
        Args a[2];
        for (int r = 0; r < 2; r++) {
            a[r] = (Args){w, r, 2, 0, !strcmp(argv[1], "skip") ? 1 : 2};
            if (pthread_create(&th[r], NULL, drill_main, &a[r])) DIE("pthread_create");
        }
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        printf("the drill's ranks returned without an error\n");
        return 0;
    }
    const CommOpts o = {600, 0, 0, NULL};
    for (int P = 2; P <= 4; P++) {
        printf("  local backend, %d ranks on GPU 0\n", P);
        run(comm_world_local(P, &o), P, 1);
    }
    printf("  NCCL, %d rank(s), one per GPU\n", gpus);
    run(comm_world_nccl(gpus, 1, 0, NULL, &o), gpus, 0);
    printf("  rehearsal: rank 3 of 8, rank 13 of 2 x 8\n");
    test_rehearse(8, 1, 3);
    test_rehearse(8, 2, 13);
    return test_summary();
}
