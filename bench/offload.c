/* offload.c -- the host side of stage 4's offload, measured on one GPU:
 *   - pinned host <-> GPU copy bandwidth, each direction alone, both at once, and both while a
 *     GEMM loop keeps the GPU busy (what the checkpoint and gradient copies see during a step);
 *   - AdamW on the host CPUs (common/cpu_adam.c) in parameters per second, by thread count,
 *     against the same update streamed through the GPU (copies at the measured bandwidth + the
 *     kernel), which is the alternative the stage could have chosen.
 *   ./build/offload [GiB per copy (4)] [M params for AdamW (256)] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "../common/check.h"
#include "../common/cpu_adam.h"
#include "../common/gemm.h"
#include "../common/train.h"
#include "../kernels/kernels.h"

static double copy_gbps(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t st, int reps) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, st)); /* warm-up */
    CUDA_CHECK(cudaEventRecord(a, st));
    for (int i = 0; i < reps; i++) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, st));
    CUDA_CHECK(cudaEventRecord(b, st));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return (double)bytes * reps / (ms / 1e3) / 1e9;
}

int main(int argc, char **argv) {
    const double gib = argc > 1 ? atof(argv[1]) : 4.0;
    const int64_t mparams = argc > 2 ? atoll(argv[2]) : 256;
    const size_t bytes = (size_t)(gib * (1 << 30));
    CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t up, down, busy;
    CUDA_CHECK(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    void *h1, *h2, *d1, *d2;
    CUDA_CHECK(cudaHostAlloc(&h1, bytes, cudaHostAllocPortable));
    CUDA_CHECK(cudaHostAlloc(&h2, bytes, cudaHostAllocPortable));
    CUDA_CHECK(cudaMalloc(&d1, bytes));
    CUDA_CHECK(cudaMalloc(&d2, bytes));
    memset(h1, 1, bytes);
    memset(h2, 2, bytes);
    printf("pinned copies of %.1f GiB (3 each after a warm-up)\n", gib);
    printf("  host -> GPU alone            %6.1f GB/s\n", copy_gbps(d1, h1, bytes, cudaMemcpyHostToDevice, up, 3));
    printf("  GPU -> host alone            %6.1f GB/s\n", copy_gbps(h2, d2, bytes, cudaMemcpyDeviceToHost, down, 3));
    /* both directions at once: time the pair */
    for (int busy_gpu = 0; busy_gpu < 2; busy_gpu++) {
        Gemm g;
        void *ws;
        bf16_t *x = NULL, *w = NULL, *y = NULL;
        const int64_t n = 8192;
        if (busy_gpu) { /* a GEMM loop on its own stream: tensor cores busy, as during a step */
            CUDA_CHECK(cudaMalloc(&ws, GEMM_WORKSPACE_BYTES));
            gemm_init(&g, ws, GEMM_WORKSPACE_BYTES);
            CUDA_CHECK(cudaMalloc((void **)&x, n * n * 2));
            CUDA_CHECK(cudaMalloc((void **)&w, n * n * 2));
            CUDA_CHECK(cudaMalloc((void **)&y, n * n * 2));
            CUDA_CHECK(cudaMemset(x, 0, n * n * 2));
            CUDA_CHECK(cudaMemset(w, 0, n * n * 2));
            for (int i = 0; i < 200; i++) linear_fwd(&g, y, 0, x, w, n, n, n, 0.f, busy);
        }
        cudaEvent_t a, b, c;
        CUDA_CHECK(cudaEventCreate(&a));
        CUDA_CHECK(cudaEventCreate(&b));
        CUDA_CHECK(cudaEventCreate(&c));
        CUDA_CHECK(cudaEventRecord(a, up));
        CUDA_CHECK(cudaStreamWaitEvent(down, a, 0));
        for (int i = 0; i < 3; i++) {
            CUDA_CHECK(cudaMemcpyAsync(d1, h1, bytes, cudaMemcpyHostToDevice, up));
            CUDA_CHECK(cudaMemcpyAsync(h2, d2, bytes, cudaMemcpyDeviceToHost, down));
        }
        CUDA_CHECK(cudaEventRecord(b, up));
        CUDA_CHECK(cudaEventRecord(c, down));
        CUDA_CHECK(cudaEventSynchronize(b));
        CUDA_CHECK(cudaEventSynchronize(c));
        float ms_up, ms_down;
        CUDA_CHECK(cudaEventElapsedTime(&ms_up, a, b));
        CUDA_CHECK(cudaEventElapsedTime(&ms_down, a, c));
        const double ms = ms_up > ms_down ? ms_up : ms_down;
        printf("  both directions at once%s  %6.1f GB/s up, %6.1f down, %6.1f together\n",
               busy_gpu ? ", GEMMs running" : "               ", 3 * bytes / (ms_up / 1e3) / 1e9,
               3 * bytes / (ms_down / 1e3) / 1e9, 6 * bytes / (ms / 1e3) / 1e9);
        if (busy_gpu) {
            CUDA_CHECK(cudaStreamSynchronize(busy));
            cudaFree(x); cudaFree(w); cudaFree(y); cudaFree(ws);
        }
    }
    cudaFreeHost(h1); cudaFreeHost(h2); cudaFree(d1); cudaFree(d2);

    /* AdamW on the host: pinned buffers as stage 4 has them */
    const int64_t N = mparams << 20;
    float *master, *m, *v, *g;
    uint16_t *w;
    CUDA_CHECK(cudaHostAlloc((void **)&master, N * 4, 0));
    CUDA_CHECK(cudaHostAlloc((void **)&m, N * 4, 0));
    CUDA_CHECK(cudaHostAlloc((void **)&v, N * 4, 0));
    CUDA_CHECK(cudaHostAlloc((void **)&g, N * 4, 0));
    CUDA_CHECK(cudaHostAlloc((void **)&w, N * 2, 0));
    for (int64_t i = 0; i < N; i++) { master[i] = 0.01f * (float)(i % 97); m[i] = v[i] = 0; g[i] = 1e-3f * (float)(i % 13); }
    ParamInfo info = {.name = "bench", .ndim = 2, .numel = N};
    Piece pc = {&info, 0, N, 0};
    const AdamHP hp = {1e-4, 0.9, 0.95, 1e-8, 0.1, 1.0, 1};
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("AdamW on the host over %lld M parameters (read g, master, m, v; write master, m, v, bf16 w: 30 B each)\n",
           (long long)mparams);
    for (int t = 1; t <= cores; t *= 2) {
        cpu_adamw(&pc, 1, master, w, m, v, g, 1.0, &hp, t); /* warm-up: pages touched */
        const double t0 = now_s();
        for (int r = 0; r < 3; r++) cpu_adamw(&pc, 1, master, w, m, v, g, 1.0, &hp, t);
        const double s = (now_s() - t0) / 3, t1 = now_s();
        const double sq = cpu_sumsq(g, N, t);
        printf("  %3d threads: %6.2f G params/s (%.1f GB/s), gradient norm pass %.2f G/s (%g)\n", t, N / s / 1e9,
               30.0 * N / s / 1e9, N / (now_s() - t1) / 1e9, sqrt(sq));
        if (t * 2 > cores && t != cores) t = (int)cores / 2;
    }
    return 0;
}
