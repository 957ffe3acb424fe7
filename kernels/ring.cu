/* ring.cu -- what ring attention needs beyond cuDNN: merging block results by log-sum-exp, and
 * accumulating block gradients (cuDNN overwrites its outputs). */
#include "common.cuh"

template <typename T> __device__ __forceinline__ float ld(const T *p, int64_t i);
template <> __device__ __forceinline__ float ld<float>(const float *p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float ld<bf16_t>(const bf16_t *p, int64_t i) { return bf(p, i); }
template <typename T> __device__ __forceinline__ void st(T *p, int64_t i, float v);
template <> __device__ __forceinline__ void st<float>(float *p, int64_t i, float v) { p[i] = v; }
template <> __device__ __forceinline__ void st<bf16_t>(bf16_t *p, int64_t i, float v) { st_bf(p, i, v); }

/* one warp per (row, head) */
template <typename T>
__global__ void lse_merge_kernel(T *o, float *lse, const bf16_t *ob, const float *lseb, int64_t n, int64_t q0,
                                 int64_t nq, int64_t H, int64_t D) {
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= nq * H) return;
    const int64_t t = w / H, h = w % H, row = q0 + t;
    const float l = lse[h * n + row], lb = lseb[h * nq + t];
    if (lb == -INFINITY) return; /* the block saw no key for this row */
    const float m = fmaxf(l, lb), a = l == -INFINITY ? 0.f : __expf(l - m), b = __expf(lb - m), z = a + b;
    for (int64_t d = lane; d < D; d += 32) {
        const int64_t i = (row * H + h) * D + d;
        st<T>(o, i, (a * (l == -INFINITY ? 0.f : ld<T>(o, i)) + b * bf(ob, (t * H + h) * D + d)) / z);
    }
    if (lane == 0) lse[h * n + row] = m + logf(z);
}

extern "C" void lse_merge(void *o, int o_f32, float *lse, const bf16_t *o_b, const float *lse_b, int64_t n, int64_t q0,
                          int64_t nq, int64_t H, int64_t D, cudaStream_t st) {
    const unsigned grid = grid_for(nq * H, 8, 1LL << 31);
    if (o_f32) lse_merge_kernel<float><<<grid, 256, 0, st>>>((float *)o, lse, o_b, lse_b, n, q0, nq, H, D);
    else lse_merge_kernel<bf16_t><<<grid, 256, 0, st>>>((bf16_t *)o, lse, o_b, lse_b, n, q0, nq, H, D);
    KCHECK();
}

template <typename T>
__global__ void add_into_kernel(T *acc, const bf16_t *x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        st<T>(acc, i, ld<T>(acc, i) + bf(x, i));
}
extern "C" void add_bf16_into(void *acc, int acc_f32, const bf16_t *x, int64_t n, cudaStream_t st) {
    if (acc_f32) add_into_kernel<float><<<grid_for(n, 256), 256, 0, st>>>((float *)acc, x, n);
    else add_into_kernel<bf16_t><<<grid_for(n, 256), 256, 0, st>>>((bf16_t *)acc, x, n);
    KCHECK();
}

__global__ void fill_f32_kernel(float *p, float v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}
extern "C" void fill_f32(float *p, float v, int64_t n, cudaStream_t st) {
    fill_f32_kernel<<<grid_for(n, 256), 256, 0, st>>>(p, v, n);
    KCHECK();
}
