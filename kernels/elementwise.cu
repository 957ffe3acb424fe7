/* elementwise.cu -- embedding, SwiGLU, casts, reductions and AdamW. */
#include "common.cuh"

/* ---------------------------------------------------------------- embedding */
__global__ void embedding_fwd_kernel(bf16_t *out, const bf16_t *table, const uint32_t *ids, int64_t S, int64_t D) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < S * D / 8; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / (D / 8), c = (e % (D / 8)) * 8;
        *reinterpret_cast<uint4 *>(out + t * D + c) = *reinterpret_cast<const uint4 *>(table + (int64_t)ids[t] * D + c);
    }
}
extern "C" void embedding_fwd(bf16_t *out, const bf16_t *table, const uint32_t *ids, int64_t S, int64_t D,
                              cudaStream_t st) {
    embedding_fwd_kernel<<<grid_for(S * D / 8, 256), 256, 0, st>>>(out, table, ids, S, D);
    KCHECK();
}

__global__ void embedding_bwd_kernel(float *dtable, const bf16_t *dx, const uint32_t *ids, int64_t S, int64_t D) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < S * D; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = e / D, c = e % D;
        atomicAdd(&dtable[(int64_t)ids[t] * D + c], bf(dx, e));
    }
}
extern "C" void embedding_bwd(float *dtable, const bf16_t *dx, const uint32_t *ids, int64_t S, int64_t D,
                              cudaStream_t st) {
    embedding_bwd_kernel<<<grid_for(S * D, 256), 256, 0, st>>>(dtable, dx, ids, S, D);
    KCHECK();
}

/* ---------------------------------------------------------------- SwiGLU */
__global__ void swiglu_fwd_kernel(bf16_t *h, const bf16_t *g, const bf16_t *u, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = bf(g, i);
        st_bf(h, i, x / (1.f + __expf(-x)) * bf(u, i));
    }
}
extern "C" void swiglu_fwd(bf16_t *h, const bf16_t *g, const bf16_t *u, int64_t n, cudaStream_t st) {
    swiglu_fwd_kernel<<<grid_for(n, 256), 256, 0, st>>>(h, g, u, n);
    KCHECK();
}

/* d/dg silu(g) u = u * sig(g) * (1 + g (1 - sig(g))); d/du = silu(g) */
__global__ void swiglu_bwd_kernel(bf16_t *g, bf16_t *u, const bf16_t *dh, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = bf(g, i), y = bf(u, i), d = bf(dh, i), s = 1.f / (1.f + __expf(-x));
        st_bf(g, i, d * y * s * (1.f + x * (1.f - s)));
        st_bf(u, i, d * x * s);
    }
}
extern "C" void swiglu_bwd(bf16_t *g_to_dg, bf16_t *u_to_du, const bf16_t *dh, int64_t n, cudaStream_t st) {
    swiglu_bwd_kernel<<<grid_for(n, 256), 256, 0, st>>>(g_to_dg, u_to_du, dh, n);
    KCHECK();
}

/* ---------------------------------------------------------------- casts and fills */
__global__ void cast_f32_bf16_kernel(bf16_t *out, const float *in, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        st_bf(out, i, in[i]);
}
__global__ void cast_bf16_f32_kernel(float *out, const bf16_t *in, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = bf(in, i);
}
__global__ void fill_u16_kernel(uint16_t *p, uint16_t v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}
extern "C" void cast_f32_to_bf16(bf16_t *out, const float *in, int64_t n, cudaStream_t st) {
    cast_f32_bf16_kernel<<<grid_for(n, 256), 256, 0, st>>>(out, in, n);
    KCHECK();
}
extern "C" void cast_bf16_to_f32(float *out, const bf16_t *in, int64_t n, cudaStream_t st) {
    cast_bf16_f32_kernel<<<grid_for(n, 256), 256, 0, st>>>(out, in, n);
    KCHECK();
}
extern "C" void fill_u16(uint16_t *p, uint16_t v, int64_t n, cudaStream_t st) {
    fill_u16_kernel<<<grid_for(n, 256), 256, 0, st>>>(p, v, n);
    KCHECK();
}

/* ---------------------------------------------------------------- reductions (fp64, deterministic) */
#define RED_BLOCKS 1024
template <bool SQUARE>
__global__ void partial_sum_kernel(double *partial, const float *x, int64_t n) {
    __shared__ double s[256];
    double acc = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += SQUARE ? (double)x[i] * x[i] : (double)x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
__global__ void final_sum_kernel(double *out, const double *partial, int n, bool accumulate) {
    __shared__ double s[RED_BLOCKS];
    s[threadIdx.x] = threadIdx.x < n ? partial[threadIdx.x] : 0.0;
    __syncthreads();
    for (int k = RED_BLOCKS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = accumulate ? out[0] + s[0] : s[0];
}
extern "C" void sum_f32(double *out, const float *x, int64_t n, double *scratch, cudaStream_t st) {
    partial_sum_kernel<false><<<RED_BLOCKS, 256, 0, st>>>(scratch, x, n);
    KCHECK();
    final_sum_kernel<<<1, RED_BLOCKS, 0, st>>>(out, scratch, RED_BLOCKS, true);
    KCHECK();
}
extern "C" void sumsq_f32(double *out, const float *x, int64_t n, double *scratch, cudaStream_t st) {
    partial_sum_kernel<true><<<RED_BLOCKS, 256, 0, st>>>(scratch, x, n);
    KCHECK();
    final_sum_kernel<<<1, RED_BLOCKS, 0, st>>>(out, scratch, RED_BLOCKS, false);
    KCHECK();
}

/* ---------------------------------------------------------------- AdamW */
__global__ void adamw_kernel(float *master, bf16_t *w, float *m, float *v, const float *g, int64_t n,
                             const double *sumsq, float max_norm, float lr, float b1, float b2, float eps, float wd,
                             float bc1, float bc2) {
    float clip = 1.f;
    if (max_norm > 0.f) {
        const float norm = (float)sqrt(*sumsq);
        if (norm > max_norm) clip = max_norm / (norm + 1e-6f);
    }
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float gi = g[i] * clip;
        const float mi = b1 * m[i] + (1.f - b1) * gi, vi = b2 * v[i] + (1.f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float p = master[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * master[i]);
        master[i] = p;
        st_bf(w, i, p);
    }
}
extern "C" void adamw(float *master, bf16_t *w, float *m, float *v, const float *g, int64_t n, const double *sumsq,
                      float max_norm, float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2,
                      cudaStream_t st) {
    adamw_kernel<<<grid_for(n, 256, 4096), 256, 0, st>>>(master, w, m, v, g, n, sumsq, max_norm, lr, beta1, beta2, eps,
                                                         wd, bc1, bc2);
    KCHECK();
}
