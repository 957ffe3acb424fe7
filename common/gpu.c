/* gpu.c -- device setup and helpers. */
#include "gpu.h"

#include <stdio.h>
#include <string.h>

void gpu_init(Gpu *g, int device) {
    memset(g, 0, sizeof *g);
    int n = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    if (device >= n) DIE("GPU %d requested, %d visible", device, n);
    CUDA_CHECK(cudaSetDevice(device));
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    g->device = device;
    snprintf(g->name, sizeof g->name, "%s", p.name);
    g->sms = p.multiProcessorCount;
    g->total_bytes = (int64_t)p.totalGlobalMem;
    if (p.major < 9)
        fprintf(stderr, "warning: %s is sm_%d%d; this build targets sm_90 (H100/H200)\n", p.name, p.major, p.minor);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
}

int64_t gpu_used_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return (int64_t)(total_b - free_b);
}

void *gpu_malloc(int64_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)(bytes > 0 ? bytes : 1));
    if (e != cudaSuccess)
        DIE("cudaMalloc of %.3f GiB for %s failed: %s -- the memory plan (--dry-run) says what fits",
            (double)bytes / (1 << 30), what, cudaGetErrorString(e));
    return p;
}

void gpu_upload(void *dst, const void *src, int64_t bytes, cudaStream_t st) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
}
void gpu_download(void *dst, const void *src, int64_t bytes, cudaStream_t st) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
}
