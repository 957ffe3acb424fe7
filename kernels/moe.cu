/* moe.cu -- what a mixture-of-experts block needs beyond GEMMs (transformers' Qwen3MoeSparseMoeBlock):
 * route each token (softmax over the router's logits, top-k, renormalised weights), sort the
 * (token, choice) pairs by expert so each expert's rows are contiguous for its GEMMs, gather the
 * inputs, combine the outputs with their weights, and the backward of each. The sort is stable and
 * every sum runs in a fixed order: the results do not depend on scheduling. */
#include <cub/block/block_scan.cuh>

#include "common.cuh"

/* one warp per token: p = softmax(logits) (fp32), the k largest (ties to the lower index), weights */
__global__ void moe_route_kernel(const float *logits, float *prob, int32_t *sel, float *w, int64_t T, int E, int k,
                                 int norm) {
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float *x = logits + t * E;
    float *p = prob + t * E;
    float m = -INFINITY, z = 0.f;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, x[e]);
    m = warp_max(m);
    for (int e = lane; e < E; e += 32) z += __expf(x[e] - m);
    z = warp_sum(z);
    for (int e = lane; e < E; e += 32) p[e] = __expf(x[e] - m) / z;
    __syncwarp();
    float sum = 0.f;
    int taken[32]; /* k <= 32 (config.c) */
    for (int j = 0; j < k; j++) {
        float best = -1.f;
        int bi = E;
        for (int e = lane; e < E; e += 32) {
            bool skip = false;
            for (int i = 0; i < j; i++) skip |= taken[i] == e;
            const float v = p[e];
            if (!skip && (v > best || (v == best && e < bi))) best = v, bi = e;
        }
        for (int o = 16; o > 0; o >>= 1) { /* the warp's best, lower index on ties */
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ob > best || (ob == best && oi < bi)) best = ob, bi = oi;
        }
        taken[j] = bi;
        sum += best;
    }
    if (lane < k) {
        sel[t * k + lane] = taken[lane];
        w[t * k + lane] = p[taken[lane]] / (norm ? sum : 1.f);
    }
}

extern "C" void moe_route(const float *logits, float *prob, int32_t *sel, float *w, int64_t T, int64_t E, int64_t k,
                          int norm, cudaStream_t st) {
    if (!T) return;
    moe_route_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(logits, prob, sel, w, T, (int)E, (int)k, norm);
    KCHECK();
}

/* block e: how many of the n pairs chose expert e (count[e]) */
__global__ void moe_count_kernel(const int32_t *sel, int64_t n, int32_t *count) {
    __shared__ float red[32];
    float c = 0.f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) c += sel[i] == (int32_t)blockIdx.x;
    c = block_sum(c, red);
    if (threadIdx.x == 0) count[blockIdx.x] = (int32_t)c;
}
/* offsets[0..E]: exclusive prefix sum of count (E is small: one thread) */
__global__ void moe_offsets_kernel(const int32_t *count, int32_t *offsets, int E) {
    int s = 0;
    for (int e = 0; e < E; e++) offsets[e] = s, s += count[e];
    offsets[E] = s;
}
/* block e: pair i with sel[i] == e goes to row offsets[e] + (pairs before i that chose e) */
__global__ void moe_positions_kernel(const int32_t *sel, int64_t n, const int32_t *offsets, int32_t *pos) {
    typedef cub::BlockScan<int, 256> Scan;
    __shared__ typename Scan::TempStorage tmp;
    int base = offsets[blockIdx.x];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t i = i0 + threadIdx.x;
        const int flag = i < n && sel[i] == (int32_t)blockIdx.x;
        int before, total;
        Scan(tmp).ExclusiveSum(flag, before, total);
        if (flag) pos[i] = base + before;
        base += total;
        __syncthreads();
    }
}

extern "C" void moe_sort(const int32_t *sel, int64_t n, int64_t E, int32_t *count, int32_t *offsets, int32_t *pos,
                         cudaStream_t st) {
    moe_count_kernel<<<(unsigned)E, 256, 0, st>>>(sel, n, count);
    KCHECK();
    moe_offsets_kernel<<<1, 1, 0, st>>>(count, offsets, (int)E);
    KCHECK();
    moe_positions_kernel<<<(unsigned)E, 256, 0, st>>>(sel, n, offsets, pos);
    KCHECK();
}

/* one warp per pair: xs[pos[i]] = x[i / k] */
__global__ void moe_gather_kernel(bf16_t *xs, const bf16_t *x, const int32_t *pos, int64_t n, int k, int64_t D) {
    const int lane = threadIdx.x & 31;
    const int64_t i = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (i >= n) return;
    const bf16_t *src = x + (i / k) * D;
    bf16_t *dst = xs + (int64_t)pos[i] * D;
    for (int64_t d = lane; d < D; d += 32) dst[d] = src[d];
}
extern "C" void moe_gather(bf16_t *xs, const bf16_t *x, const int32_t *pos, int64_t T, int64_t k, int64_t D,
                           cudaStream_t st) {
    if (!T) return;
    moe_gather_kernel<<<(unsigned)((T * k + 7) / 8), 256, 0, st>>>(xs, x, pos, T * k, (int)k, D);
    KCHECK();
}

/* one warp per token: out[t] = resid[t] + sum_j w[t,j] ys[pos[t,j]] (fp32, in choice order), and with
 * a shared expert (Qwen3.5) + sigmoid(sh_s[t]) sh_y[t] */
__global__ void moe_combine_kernel(bf16_t *out, const bf16_t *resid, const bf16_t *ys, const int32_t *pos,
                                   const float *w, int64_t T, int k, int64_t D, const bf16_t *sh_y, const float *sh_s) {
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float gate = sh_y ? 1.f / (1.f + __expf(-sh_s[t])) : 0.f;
    for (int64_t d = lane; d < D; d += 32) {
        float acc = 0.f;
        for (int j = 0; j < k; j++) acc += w[t * k + j] * bf(ys, (int64_t)pos[t * k + j] * D + d);
        if (sh_y) acc += gate * bf(sh_y, t * D + d);
        st_bf(out, t * D + d, bf(resid, t * D + d) + acc);
    }
}
extern "C" void moe_combine(bf16_t *out, const bf16_t *resid, const bf16_t *ys, const int32_t *pos, const float *w,
                            int64_t T, int64_t k, int64_t D, const bf16_t *sh_y, const float *sh_s, cudaStream_t st) {
    if (!T) return;
    moe_combine_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(out, resid, ys, pos, w, T, (int)k, D, sh_y, sh_s);
    KCHECK();
}

/* ---- the shared expert's gate (Qwen3.5): s[t] = <x[t], w>, its output times sigmoid(s[t]) */
/* one warp per token */
__global__ void moe_shared_score_kernel(float *s, const bf16_t *x, const bf16_t *w, int64_t T, int64_t D) {
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    float acc = 0.f;
    for (int64_t d = lane; d < D; d += 32) acc += bf(x, t * D + d) * bf(w, d);
    acc = warp_sum(acc);
    if (lane == 0) s[t] = acc;
}
extern "C" void moe_shared_score(float *s, const bf16_t *x, const bf16_t *w, int64_t T, int64_t D, cudaStream_t st) {
    if (!T) return;
    moe_shared_score_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(s, x, w, T, D);
    KCHECK();
}

/* one warp per token: ds[t] = sigmoid'(s[t]) <dy[t], y[t]>, then in place y[t] <- sigmoid(s[t]) dy[t]
 * (the row is read whole before it is written) */
__global__ void moe_shared_bwd_kernel(bf16_t *y_to_dy, float *ds, const bf16_t *dy, const float *s, int64_t T, int64_t D) {
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float g = 1.f / (1.f + __expf(-s[t]));
    float acc = 0.f;
    for (int64_t d = lane; d < D; d += 32) acc += bf(dy, t * D + d) * bf(y_to_dy, t * D + d);
    acc = warp_sum(acc);
    if (lane == 0) ds[t] = acc * g * (1.f - g);
    __syncwarp();
    for (int64_t d = lane; d < D; d += 32) st_bf(y_to_dy, t * D + d, g * bf(dy, t * D + d));
}
extern "C" void moe_shared_bwd(bf16_t *y_to_dy, float *ds, const bf16_t *dy, const float *s, int64_t T, int64_t D,
                               cudaStream_t st) {
    if (!T) return;
    moe_shared_bwd_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(y_to_dy, ds, dy, s, T, D);
    KCHECK();
}

/* the score's backward: dx[t, d] += ds[t] w[d]; dw[d] += sum over t of ds[t] x[t, d], each thread a
 * column over a block of 256 rows (fp32, one atomic a column and block) */
__global__ void moe_shared_score_bwd_kernel(bf16_t *dx, float *dw, const float *ds, const bf16_t *x, const bf16_t *w,
                                            int64_t T, int64_t D) {
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    const float wd = bf(w, d);
    for (int64_t t0 = (int64_t)blockIdx.y * 256; t0 < T; t0 += (int64_t)gridDim.y * 256) { /* past 65535 blocks */
        const int64_t t1 = t0 + 256 < T ? t0 + 256 : T;
        float acc = 0.f;
        for (int64_t t = t0; t < t1; t++) {
            acc += ds[t] * bf(x, t * D + d);
            st_bf(dx, t * D + d, bf(dx, t * D + d) + ds[t] * wd);
        }
        atomicAdd(dw + d, acc);
    }
}
extern "C" void moe_shared_score_bwd(bf16_t *dx, float *dw, const float *ds, const bf16_t *x, const bf16_t *w, int64_t T,
                                     int64_t D, cudaStream_t st) {
    if (!T) return;
    const int64_t blocks = (T + 255) / 256;
    dim3 grid((unsigned)((D + 127) / 128), (unsigned)(blocks < 65535 ? blocks : 65535));
    moe_shared_score_bwd_kernel<<<grid, 128, 0, st>>>(dx, dw, ds, x, w, T, D);
    KCHECK();
}

/* one warp per pair: dw[i] = <dy[t], ys[pos[i]]>, then ys[pos[i]] <- w[i] dy[t] (the row is read
 * whole before it is written: in place) */
__global__ void moe_combine_bwd_kernel(bf16_t *ys_to_dys, float *dw, const bf16_t *dy, const int32_t *pos,
                                       const float *w, int64_t n, int k, int64_t D) {
    const int lane = threadIdx.x & 31;
    const int64_t i = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (i >= n) return;
    const int64_t t = i / k, r = (int64_t)pos[i] * D;
    float acc = 0.f;
    for (int64_t d = lane; d < D; d += 32) acc += bf(dy, t * D + d) * bf(ys_to_dys, r + d);
    acc = warp_sum(acc);
    if (lane == 0) dw[i] = acc;
    __syncwarp();
    for (int64_t d = lane; d < D; d += 32) st_bf(ys_to_dys, r + d, w[i] * bf(dy, t * D + d));
}
extern "C" void moe_combine_bwd(bf16_t *ys_to_dys, float *dw, const bf16_t *dy, const int32_t *pos, const float *w,
                                int64_t T, int64_t k, int64_t D, cudaStream_t st) {
    if (!T) return;
    moe_combine_bwd_kernel<<<(unsigned)((T * k + 7) / 8), 256, 0, st>>>(ys_to_dys, dw, dy, pos, w, T * k, (int)k, D);
    KCHECK();
}

/* one warp per token: dx[t] = sum_j dxs[pos[t,j]] (fp32, in choice order) */
__global__ void moe_scatter_bwd_kernel(bf16_t *dx, const bf16_t *dxs, const int32_t *pos, int64_t T, int k, int64_t D) {
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    for (int64_t d = lane; d < D; d += 32) {
        float acc = 0.f;
        for (int j = 0; j < k; j++) acc += bf(dxs, (int64_t)pos[t * k + j] * D + d);
        st_bf(dx, t * D + d, acc);
    }
}
extern "C" void moe_scatter_bwd(bf16_t *dx, const bf16_t *dxs, const int32_t *pos, int64_t T, int64_t k, int64_t D,
                                cudaStream_t st) {
    if (!T) return;
    moe_scatter_bwd_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(dx, dxs, pos, T, (int)k, D);
    KCHECK();
}

/* one warp per token: the weights' gradient dw back through the renormalisation (w = p / sum of the
 * chosen p) and the softmax, plus the load-balancing loss's aux_grad[e] on every p[e]:
 * dlogits[t,e] = p[e] (dp[e] - sum p dp) */
__global__ void moe_router_bwd_kernel(bf16_t *dlogits, const float *prob, const int32_t *sel, const float *w,
                                      const float *dw, const float *aux_grad, int64_t T, int E, int k, int norm) {
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    const float *p = prob + t * E;
    float sum = 0.f, dot = 0.f;
    for (int j = 0; j < k; j++) sum += p[sel[t * k + j]], dot += dw[t * k + j] * w[t * k + j];
    float pdp = 0.f;
    for (int e = lane; e < E; e += 32) {
        float dp = aux_grad ? aux_grad[e] : 0.f;
        for (int j = 0; j < k; j++)
            if (sel[t * k + j] == e) dp += norm ? (dw[t * k + j] - dot) / sum : dw[t * k + j];
        pdp += p[e] * dp;
    }
    pdp = warp_sum(pdp);
    for (int e = lane; e < E; e += 32) {
        float dp = aux_grad ? aux_grad[e] : 0.f;
        for (int j = 0; j < k; j++)
            if (sel[t * k + j] == e) dp += norm ? (dw[t * k + j] - dot) / sum : dw[t * k + j];
        st_bf(dlogits, t * E + e, p[e] * (dp - pdp));
    }
}
extern "C" void moe_router_bwd(bf16_t *dlogits, const float *prob, const int32_t *sel, const float *w, const float *dw,
                               const float *aux_grad, int64_t T, int64_t E, int64_t k, int norm, cudaStream_t st) {
    if (!T) return;
    moe_router_bwd_kernel<<<(unsigned)((T + 7) / 8), 256, 0, st>>>(dlogits, prob, sel, w, dw, aux_grad, T, (int)E,
                                                                   (int)k, norm);
    KCHECK();
}

/* the load-balancing loss's statistics of one tile: choices[e] += count[e], psum[e] += sum_t prob[t,e] */
__global__ void moe_stats_kernel(double *choices, double *psum, const int32_t *count, const float *prob, int64_t T,
                                 int E) {
    __shared__ float red[32];
    const int e = blockIdx.x;
    float s = 0.f;
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) s += prob[t * E + e];
    s = block_sum(s, red);
    if (threadIdx.x == 0) {
        choices[e] += count[e];
        psum[e] += s;
    }
}
extern "C" void moe_stats(double *choices, double *psum, const int32_t *count, const float *prob, int64_t T, int64_t E,
                          cudaStream_t st) {
    moe_stats_kernel<<<(unsigned)E, 256, 0, st>>>(choices, psum, count, prob, T, (int)E);
    KCHECK();
}

/* one thread: E is small (<= 2^24, 128 in Qwen3-30B-A3B) and the order of the non-empty segments
 * must be the host's (gemm.c counts the same way) */
__global__ void segment_ptrs_kernel(void **ptrs, const int32_t *r, int64_t E, const char *A, int64_t a_seg,
                                    const char *B, int64_t b_row, char *C, int64_t c_row) {
    int64_t j = 0;
    for (int64_t e = 0; e < E; e++) {
        if (r[e + 1] == r[e]) continue;
        ptrs[j] = (void *)(A + e * a_seg);
        ptrs[E + j] = (void *)(B + (int64_t)r[e] * b_row);
        ptrs[2 * E + j] = (void *)(C + (int64_t)r[e] * c_row);
        j++;
    }
}
extern "C" void segment_ptrs(void **ptrs, const int32_t *r, int64_t E, const void *A, int64_t a_seg, const void *B,
                             int64_t b_row, void *C, int64_t c_row, cudaStream_t st) {
    segment_ptrs_kernel<<<1, 1, 0, st>>>(ptrs, r, E, (const char *)A, a_seg, (const char *)B, b_row, (char *)C, c_row);
    KCHECK();
}
