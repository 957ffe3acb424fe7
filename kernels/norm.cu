/* norm.cu -- RMSNorm over the hidden size, and the fused per-head q/k RMSNorm + RoPE. */
#include "common.cuh"

/* ---------------------------------------------------------------- RMSNorm over rows of n */
/* One warp per row; each lane moves 8 bf16 (16 bytes) at a time. n % 8 == 0. */
__global__ void rmsnorm_fwd_kernel(bf16_t *y, float *rstd, const bf16_t *x, const bf16_t *w, int64_t rows, int64_t n,
                                   float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const bf16_t *xr = x + row * n;
    float ss = 0.f;
    for (int64_t i = lane * 8; i < n; i += 256) {
        uint4 raw = *reinterpret_cast<const uint4 *>(xr + i);
        const __nv_bfloat16 *v = reinterpret_cast<const __nv_bfloat16 *>(&raw);
#pragma unroll
        for (int j = 0; j < 8; j++) { float f = __bfloat162float(v[j]); ss += f * f; }
    }
    const float r = rsqrtf(warp_sum(ss) / (float)n + eps);
    if (lane == 0) rstd[row] = r;
    for (int64_t i = lane * 8; i < n; i += 256) {
        uint4 raw = *reinterpret_cast<const uint4 *>(xr + i), wraw = *reinterpret_cast<const uint4 *>(w + i), out;
        const __nv_bfloat16 *v = reinterpret_cast<const __nv_bfloat16 *>(&raw), *wv = reinterpret_cast<const __nv_bfloat16 *>(&wraw);
        __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(&out);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = __float2bfloat16(__bfloat162float(wv[j]) * (__bfloat162float(v[j]) * r));
        *reinterpret_cast<uint4 *>(y + row * n + i) = out;
    }
}

extern "C" void rmsnorm_fwd(bf16_t *y, float *rstd, const bf16_t *x, const bf16_t *w, int64_t rows, int64_t n,
                            float eps, cudaStream_t st) {
    if (n % 8) { fprintf(stderr, "error: rmsnorm_fwd needs n %% 8 == 0 (n = %lld)\n", (long long)n); exit(1); }
    rmsnorm_fwd_kernel<<<grid_for(rows, 8, 1LL << 31), 256, 0, st>>>(y, rstd, x, w, rows, n, eps);
    KCHECK();
}

/* Warps take rows grid-stride; the block accumulates dw in shared memory (n floats), then adds
 * it to the fp32 gradient once. dx (the residual gradient) is read, added to, and written. */
__global__ void rmsnorm_bwd_kernel(bf16_t *dx, float *dw, const bf16_t *dy, const bf16_t *x, const float *rstd,
                                   const bf16_t *w, int64_t rows, int64_t n) {
    extern __shared__ float dw_s[];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dw_s[i] = 0.f;
    __syncthreads();
    const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
    for (int64_t row = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * wpb) {
        const float r = rstd[row];
        const bf16_t *xr = x + row * n, *dyr = dy + row * n;
        float dot = 0.f;
        for (int64_t i = lane; i < n; i += 32) dot += bf(dyr, i) * bf(w, i) * bf(xr, i) * r;
        dot = warp_sum(dot) / (float)n;
        for (int64_t i = lane; i < n; i += 32) {
            const float xhat = bf(xr, i) * r, g = bf(dyr, i);
            st_bf(dx, row * n + i, bf(dx, row * n + i) + r * (g * bf(w, i) - xhat * dot));
            atomicAdd(&dw_s[i], g * xhat);
        }
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&dw[i], dw_s[i]);
}

extern "C" void rmsnorm_bwd(bf16_t *dx, float *dw, const bf16_t *dy, const bf16_t *x, const float *rstd,
                            const bf16_t *w, int64_t rows, int64_t n, cudaStream_t st) {
    if (n > 8192) { fprintf(stderr, "error: rmsnorm_bwd supports n <= 8192 (n = %lld)\n", (long long)n); exit(1); }
    int dev, sms;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    int64_t blocks = (rows + 7) / 8;
    if (blocks > 4LL * sms) blocks = 4LL * sms;
    rmsnorm_bwd_kernel<<<(unsigned)blocks, 256, (size_t)n * sizeof(float), st>>>(dx, dw, dy, x, rstd, w, rows, n);
    KCHECK();
}

/* ---------------------------------------------------------------- q/k head norm + RoPE */
/* One warp per (token, head) row of hd = 32*E elements; lane holds elements j*32 + lane. The RoPE
 * partner of element j*32+lane (first half) is element (j+E/2)*32+lane: the same lane. */
/* cos and sin of position p at frequency i, angle in fp32 as transformers computes it, scaled by af */
__device__ __forceinline__ void rope_cos_sin(float p, const float *inv_freq, int i, float af, float *c, float *s) {
    sincosf(p * inv_freq[i], s, c);
    *c *= af;
    *s *= af;
}

template <int E>
__global__ void qk_norm_rope_fwd_kernel(bf16_t *out, float *rstd, const bf16_t *in, const bf16_t *w,
                                        const int32_t *pos, const float *inv_freq, float af, int64_t S, int64_t H,
                                        float eps) {
    constexpr int hd = 32 * E, half = hd / 2;
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= S * H) return;
    const int64_t t = row / H;
    float v[E], ss = 0.f;
#pragma unroll
    for (int j = 0; j < E; j++) { v[j] = bf(in, row * hd + j * 32 + lane); ss += v[j] * v[j]; }
    const float r = rsqrtf(warp_sum(ss) / (float)hd + eps);
    if (lane == 0) rstd[row] = r;
#pragma unroll
    for (int j = 0; j < E; j++) v[j] = v[j] * r * bf(w, j * 32 + lane);
    const float p = (float)pos[t];
#pragma unroll
    for (int j = 0; j < E / 2; j++) {
        const int i = j * 32 + lane;
        float c, s;
        rope_cos_sin(p, inv_freq, i, af, &c, &s);
        const float a = v[j], b = v[j + E / 2];
        st_bf(out, row * hd + i, a * c - b * s);
        st_bf(out, row * hd + i + half, b * c + a * s);
    }
}

template <int E>
__global__ void qk_norm_rope_bwd_kernel(bf16_t *d, float *dw, const bf16_t *in, const float *rstd, const bf16_t *w,
                                        const int32_t *pos, const float *inv_freq, float af, int64_t S, int64_t H) {
    constexpr int hd = 32 * E, half = hd / 2;
    const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
    float dw_acc[E];
#pragma unroll
    for (int j = 0; j < E; j++) dw_acc[j] = 0.f;
    for (int64_t row = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); row < S * H; row += (int64_t)gridDim.x * wpb) {
        const float p = (float)pos[row / H], r = rstd[row];
        float g[E], xh[E];
        /* RoPE transposed: d(normed) from d(out) */
#pragma unroll
        for (int j = 0; j < E / 2; j++) {
            const int i = j * 32 + lane;
            float c, s;
            rope_cos_sin(p, inv_freq, i, af, &c, &s);
            const float da = bf(d, row * hd + i), db = bf(d, row * hd + i + half);
            g[j] = da * c + db * s;
            g[j + E / 2] = db * c - da * s;
        }
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < E; j++) {
            xh[j] = bf(in, row * hd + j * 32 + lane) * r;
            dw_acc[j] += g[j] * xh[j];
            g[j] *= bf(w, j * 32 + lane);
            dot += g[j] * xh[j];
        }
        dot = warp_sum(dot) / (float)hd;
#pragma unroll
        for (int j = 0; j < E; j++) st_bf(d, row * hd + j * 32 + lane, r * (g[j] - xh[j] * dot));
    }
#pragma unroll
    for (int j = 0; j < E; j++) atomicAdd(&dw[j * 32 + lane], dw_acc[j]);
}

#define HD_DISPATCH(hd, CALL)                                                                      \
    switch (hd) {                                                                                  \
    case 64: { constexpr int E = 2; CALL; break; }                                                 \
    case 128: { constexpr int E = 4; CALL; break; }                                                \
    case 192: { constexpr int E = 6; CALL; break; }                                                \
    case 256: { constexpr int E = 8; CALL; break; }                                                \
    default: fprintf(stderr, "error: head_dim %lld unsupported (64, 128, 192, 256)\n", (long long)hd); exit(1); \
    }

extern "C" void qk_norm_rope_fwd(bf16_t *out, float *rstd, const bf16_t *in, const bf16_t *w, const int32_t *pos,
                                 const float *inv_freq, float attn_factor, int64_t S, int64_t H, int64_t hd, float eps,
                                 cudaStream_t st) {
    const unsigned grid = grid_for(S * H, 8, 1LL << 31);
    HD_DISPATCH(hd, (qk_norm_rope_fwd_kernel<E><<<grid, 256, 0, st>>>(out, rstd, in, w, pos, inv_freq, attn_factor, S, H, eps)));
    KCHECK();
}

extern "C" void qk_norm_rope_bwd(bf16_t *d, float *dw, const bf16_t *in, const float *rstd, const bf16_t *w,
                                 const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, int64_t H,
                                 int64_t hd, cudaStream_t st) {
    int dev, sms;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const unsigned grid = grid_for(S * H, 8, 8LL * sms);
    HD_DISPATCH(hd, (qk_norm_rope_bwd_kernel<E><<<grid, 256, 0, st>>>(d, dw, in, rstd, w, pos, inv_freq, attn_factor, S, H)));
    KCHECK();
}
