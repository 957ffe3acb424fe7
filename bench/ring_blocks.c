/* ring_blocks.c -- what splitting attention into ring blocks costs (stage 3), on one GPU.
 *
 * Ring attention over P ranks replaces one causal call over S tokens by, summed over the ranks,
 * P causal blocks of 2c = S/P tokens and P(P-1)/2 non-causal blocks each of 2c x c and c x 2c
 * (c = S/2P) -- the same FLOPs. This times each block shape with cuDNN (fwd and bwd, median of
 * several calls after a warm-up, CUDA events) and prints the ring's total against the single call,
 * then what the ring adds around cuDNN (LSE merges, gradient accumulation, final casts) in each
 * --merge precision.
 *   ./build/ring_blocks [S] [Hq] [Hkv]        (default 131072 16 8: Qwen3-0.6B at 128K) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "../common/check.h"
#include "../common/gpu.h"
#include "../common/sdpa.h"
#include "../kernels/kernels.h"

static int cmp(const void *a, const void *b) { return *(const float *)a < *(const float *)b ? -1 : 1; }

typedef struct {
    bf16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse, *ssum, *acc, *acc_kv; /* acc [S, Hq*D], acc_kv [2, S, Hkv*D]: merge-precision accumulators */
    void *ws;
    int64_t ws_bytes;
} Bufs;

/* what one timed call runs */
typedef struct {
    Sdpa *sd;
    const Bufs *b;
    SdpaShape sh;
    int what;        /* 0 cuDNN fwd, 1 cuDNN bwd, 2 the ring's extras */
    int P, f32;      /* extras: ranks, accumulator precision */
    cudaStream_t st;
} Job;
static void run_job(const Job *j);

/* median ms of 7 runs after 2 warm-up runs, CUDA events around each */
static float median_ms(const Job *j) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float t[7];
    for (int rep = -2; rep < 7; rep++) {
        CUDA_CHECK(cudaEventRecord(e0, j->st));
        run_job(j);
        CUDA_CHECK(cudaEventRecord(e1, j->st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (rep >= 0) CUDA_CHECK(cudaEventElapsedTime(&t[rep], e0, e1));
    }
    qsort(t, 7, sizeof(float), cmp);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return t[3];
}

/* median ms of fwd and of bwd for one block shape */
static void time_block(Sdpa *sd, const Bufs *b, SdpaShape sh, cudaStream_t st, float *fwd, float *bwd) {
    Job j = {sd, b, sh, 0, 0, 0, st};
    *fwd = median_ms(&j);
    j.what = 1; /* backward reads the O and LSE the forward left */
    *bwd = median_ms(&j);
}

/* Everything the ring does besides cuDNN, summed over the P ranks of one layer (rank-local
 * length n = 2c): forward, one LSE merge per block into the running O (fp32 or bf16) and the
 * final cast; backward, dQ and dK/dV added into accumulators per block and the final casts
 * (bf16: copies). Block outputs come from b->o / b->dq / b->dk, whatever they hold. */
static void ring_extras(const Bufs *b, int P, int64_t c, int64_t H, int64_t Hkv, int64_t D, int f32, cudaStream_t st) {
    const int64_t n = 2 * c, Q = H * D, KV = Hkv * D, pairs = (int64_t)P * (P - 1) / 2, esz = f32 ? 4 : 2;
    void *o = f32 ? (void *)b->acc : (void *)b->o;
    for (int64_t blk = 0; blk < P + 2 * pairs; blk++) { /* P causal 2c x 2c, pairs 2c x c, pairs c x 2c */
        const int64_t nq = blk < P + pairs ? n : c, nk = blk < P ? n : blk < P + pairs ? c : n;
        if (blk < P) fill_f32(b->ssum, -INFINITY, H * n, st);
        lse_merge(o, f32, b->ssum, b->dout, b->lse, n, 0, nq, H, D, st);
        add_bf16_into(b->acc, f32, b->dq, nq * Q, st);
        add_bf16_into(b->acc_kv, f32, b->dk, 2 * nk * KV, st);
    }
    for (int r = 0; r < P; r++) {
        if (f32) {
            cast_f32_to_bf16(b->o, b->acc, n * Q, st);
            cast_f32_to_bf16(b->dq, b->acc, n * Q, st);
            cast_f32_to_bf16(b->dk, b->acc_kv, 2 * n * KV, st);
        } else {
            CUDA_CHECK(cudaMemcpyAsync(b->dq, b->acc, (size_t)(esz * n * Q), cudaMemcpyDeviceToDevice, st));
            CUDA_CHECK(cudaMemcpyAsync(b->dk, b->acc_kv, (size_t)(esz * 2 * n * KV), cudaMemcpyDeviceToDevice, st));
        }
    }
}

static void run_job(const Job *j) {
    const Bufs *b = j->b;
    const SdpaShape *sh = &j->sh;
    if (j->what == 0) sdpa_fwd(j->sd, sh, b->o, b->lse, b->q, b->k, b->v, b->ws, b->ws_bytes);
    else if (j->what == 1)
        sdpa_bwd(j->sd, sh, b->dq, b->dk, b->dv, b->q, b->k, b->v, b->o, b->dout, b->lse, b->ssum, b->acc, b->ws,
                 b->ws_bytes);
    else ring_extras(b, j->P, sh->Sq / 2, sh->Hq, sh->Hkv, sh->D, j->f32, j->st);
}

/* median ms of the ring's extras at P ranks (c = S / 2P tokens a chunk) */
static float time_extras(const Bufs *b, int P, int64_t c, int64_t H, int64_t Hkv, int64_t D, int f32, cudaStream_t st) {
    const Job j = {NULL, b, (SdpaShape){H, Hkv, 2 * c, 2 * c, D, 1, 0}, 2, P, f32, st};
    return median_ms(&j);
}

int main(int argc, char **argv) {
    const int64_t S = argc > 1 ? atoll(argv[1]) : 131072, Hq = argc > 2 ? atoll(argv[2]) : 16,
                  Hkv = argc > 3 ? atoll(argv[3]) : 8, D = 128;
    Gpu g;
    gpu_init(&g, 0);
    Sdpa sd;
    sdpa_init(&sd, g.stream);
    Bufs b;
    const int64_t nq = S * Hq * D, nk = S * Hkv * D;
    bf16_t **bf[] = {&b.q, &b.o, &b.dout, &b.dq};
    for (int i = 0; i < 4; i++) *bf[i] = gpu_malloc(2 * nq, "q-sized");
    bf16_t **kv[] = {&b.k, &b.v, &b.dk, &b.dv};
    for (int i = 0; i < 4; i++) *kv[i] = gpu_malloc(2 * nk, "kv-sized");
    b.lse = gpu_malloc(4 * Hq * S, "lse");
    b.ssum = gpu_malloc(4 * Hq * S, "softmax_sum");
    b.acc = gpu_malloc(4 * nq, "dq_accum");
    b.acc_kv = gpu_malloc(4 * 2 * nk, "dkv_accum");
    const SdpaShape full = {Hq, Hkv, S, S, D, 1, 0};
    b.ws_bytes = sdpa_bwd_workspace_estimate(&full);
    b.ws = gpu_malloc(b.ws_bytes, "workspace");
    /* random bf16 inputs (a fixed pattern is enough for timing, and never zeros) */
    uint16_t *h = xmalloc((size_t)nq * 2);
    uint64_t s = 7;
    for (int64_t i = 0; i < nq; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        h[i] = (uint16_t)(0x3C00 + (s & 0x3FF)) ^ (uint16_t)((s >> 20) & 0x8000); /* +-[0.0078, 0.0156) */
    }
    gpu_upload(b.q, h, 2 * nq, g.stream);
    gpu_upload(b.dout, h, 2 * nq, g.stream);
    gpu_upload(b.k, h, 2 * nk, g.stream);
    gpu_upload(b.v, h + 1, 2 * nk - 2, g.stream);
    free(h);
    float f1, b1;
    time_block(&sd, &b, full, g.stream, &f1, &b1);
    printf("one causal call, S %lld, heads %lld/%lld: fwd %.2f ms + bwd %.2f ms = %.2f ms\n", (long long)S,
           (long long)Hq, (long long)Hkv, f1, b1, f1 + b1);
    printf("{\"what\":\"ring_blocks\",\"S\":%lld,\"P\":1,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"ratio\":1.0}\n", (long long)S, f1, b1);
    for (int P = 2; P <= 8; P *= 2) {
        const int64_t c = S / (2 * P);
        float fc, bc, fa, ba, fb, bb;
        time_block(&sd, &b, (SdpaShape){Hq, Hkv, 2 * c, 2 * c, D, 1, 0}, g.stream, &fc, &bc);
        time_block(&sd, &b, (SdpaShape){Hq, Hkv, 2 * c, c, D, 0, 0}, g.stream, &fa, &ba);
        time_block(&sd, &b, (SdpaShape){Hq, Hkv, c, 2 * c, D, 0, 0}, g.stream, &fb, &bb);
        const double pairs = P * (P - 1) / 2.0;
        const double fwd = P * fc + pairs * (fa + fb), bwd = P * bc + pairs * (ba + bb);
        printf("P=%d: %d causal %lldx%lld + %.0f x (%lldx%lld + %lldx%lld) blocks: fwd %.2f ms + bwd %.2f ms = %.2f ms, "
               "%.3fx the single call\n",
               P, P, (long long)(2 * c), (long long)(2 * c), pairs, (long long)(2 * c), (long long)c, (long long)c,
               (long long)(2 * c), fwd, bwd, fwd + bwd, (fwd + bwd) / (f1 + b1));
        const float x32 = time_extras(&b, P, c, Hq, Hkv, D, 1, g.stream), x16 = time_extras(&b, P, c, Hq, Hkv, D, 0, g.stream);
        printf("     merges, accumulation, casts: fp32 %.2f ms, bf16 %.2f ms; ring total %.3fx (fp32) / %.3fx (bf16)\n",
               x32, x16, (fwd + bwd + x32) / (f1 + b1), (fwd + bwd + x16) / (f1 + b1));
        printf("{\"what\":\"ring_blocks\",\"S\":%lld,\"P\":%d,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"ratio\":%.4f,"
               "\"extras_fp32_ms\":%.3f,\"extras_bf16_ms\":%.3f}\n",
               (long long)S, P, fwd, bwd, (fwd + bwd) / (f1 + b1), x32, x16);
    }
    sdpa_destroy(&sd);
    return 0;
}
