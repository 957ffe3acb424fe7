/* common.cuh -- helpers shared by the kernels: bf16 conversion, warp/block reductions,
 * launch checking, grid sizing with 64-bit element counts. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

#define KCHECK()                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = cudaGetLastError();                                                      \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "error %s:%d: kernel launch: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

__device__ __forceinline__ float bf(const bf16_t *p, int64_t i) {
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(p)[i]);
}
__device__ __forceinline__ void st_bf(bf16_t *p, int64_t i, float v) {
    reinterpret_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16(v);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* sum over the block; every thread gets the result. shared: >= 32 floats. */
__device__ __forceinline__ float block_sum(float v, float *shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads(); /* shared may still be read from a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nw ? shared[lane] : 0.f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nw ? shared[lane] : -INFINITY;
    return warp_max(v);
}

static inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 16) {
    int64_t b = (n + threads - 1) / threads;
    if (b > max_blocks) b = max_blocks;
    return (unsigned)(b < 1 ? 1 : b);
}
