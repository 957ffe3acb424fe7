/* gdn.cu -- Qwen3.5's linear attention (Gated DeltaNet) on the GPU: the causal depthwise conv, the
 * gates, the q/k l2 norms, the gated delta rule forward and backward, and the gated RMSNorm. The
 * rule is written plainly: token by token, as tests/ref_gdn.c reads it (a learner's first read of
 * linear attention, and the GPU's own reference for a chunked form later).
 *
 * Layouts (row-major, S tokens): qkv [S, C] with C = 2 Hk dk + Hv dv channels, q of key head kh at
 * channel kh dk, k at Hk dk + kh dk, v of value head h at 2 Hk dk + h dv; g, beta [S, Hv] fp32; the
 * state of value head h is S_h [dv, dk] fp32 (row i: value dim i). pos [S]: RoPE positions; a token
 * at position 0 starts a document (--packing), so the state and the conv start from zero there.
 *
 * The rule, per value head, with q and k of its key head l2-normalised (q also by 1/sqrt(dk)):
 *     S' = a_t S,  u = S' k_t,  d = b_t (v_t - u),  S = S' + d k_t^T,  o_t = S q_t,
 * a_t = exp(g_t), b_t = beta_t. Row i of S needs only k_t, q_t and v_t[i], so rows run side by side:
 * a row's dk floats are split over a quad of 4 lanes (registers), a warp holds 8 rows, and the only
 * sums are a row's dot products (two shuffles within the quad). */
#include "common.cuh"

/* ---------------------------------------------------------------- causal depthwise conv + SiLU */
/* Channel c at token t: pre = sum_j w[c, j] x[t - (K-1) + j, c] over taps inside the document (t's
 * document starts pos[t] tokens back; nothing before the sequence), out = silu(pre). A thread takes
 * one channel over a tile of tokens. */
#define CONV_TILE 64

__device__ __forceinline__ float silu_f(float x) { return x / (1.f + __expf(-x)); }
/* the grid's tiles of tokens (a kernel strides over more: a grid's y is at most 65535) */
static unsigned conv_tiles(int64_t S) {
    const int64_t n = (S + CONV_TILE - 1) / CONV_TILE;
    return (unsigned)(n < 65535 ? n : 65535);
}

/* input token t - back of channel c: x's row, or before x (t < back) the halo's, the K-1 tokens before
 * x (another rank's chunk under context parallelism; NULL: none) */
__device__ __forceinline__ float conv_in(const bf16_t *x, const bf16_t *halo, int64_t t, int64_t back, int64_t c,
                                         int64_t C, int K) {
    if (back <= t) return bf(x, (t - back) * C + c);
    return halo ? bf(halo, (K - 1 + t - back) * C + c) : 0.f;
}

__device__ __forceinline__ float conv_pre(const bf16_t *x, const bf16_t *halo, const float *w, const int32_t *pos,
                                          int64_t t, int64_t c, int64_t C, int K) {
    float acc = 0.f;
    for (int j = 0; j < K; j++) {
        const int64_t back = K - 1 - j; /* tokens before t */
        if (back <= pos[t]) acc += w[j] * conv_in(x, halo, t, back, c, C, K);
    }
    return acc;
}

__global__ void gdn_conv_fwd_kernel(bf16_t *out, const bf16_t *x, const bf16_t *halo, const bf16_t *wc,
                                    const int32_t *pos, int64_t S, int64_t C, int K) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float w[8];
    for (int j = 0; j < K; j++) w[j] = bf(wc, c * K + j);
    for (int64_t t0 = (int64_t)blockIdx.y * CONV_TILE; t0 < S; t0 += (int64_t)gridDim.y * CONV_TILE)
        for (int64_t t = t0; t < t0 + CONV_TILE && t < S; t++)
            st_bf(out, t * C + c, silu_f(conv_pre(x, halo, w, pos, t, c, C, K)));
}

extern "C" void gdn_conv_fwd(bf16_t *out, const bf16_t *x, const bf16_t *halo, const bf16_t *w, const int32_t *pos,
                             int64_t S, int64_t C, int64_t K, cudaStream_t st) {
    if (K > 8) { fprintf(stderr, "error: gdn_conv_fwd takes a width of at most 8 (%lld)\n", (long long)K); exit(1); }
    dim3 grid((unsigned)((C + 127) / 128), conv_tiles(S));
    gdn_conv_fwd_kernel<<<grid, 128, 0, st>>>(out, x, halo, w, pos, S, C, (int)K);
    KCHECK();
}

/* d is d(out) in, d(pre) = d(out) silu'(pre) out (pre recomputed); one pass per token. */
__global__ void gdn_conv_dpre_kernel(bf16_t *d, const bf16_t *x, const bf16_t *halo, const bf16_t *wc,
                                     const int32_t *pos, int64_t S, int64_t C, int K) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float w[8];
    for (int j = 0; j < K; j++) w[j] = bf(wc, c * K + j);
    for (int64_t t0 = (int64_t)blockIdx.y * CONV_TILE; t0 < S; t0 += (int64_t)gridDim.y * CONV_TILE)
        for (int64_t t = t0; t < t0 + CONV_TILE && t < S; t++) {
            const float p = conv_pre(x, halo, w, pos, t, c, C, K), sg = 1.f / (1.f + __expf(-p));
            st_bf(d, t * C + c, bf(d, t * C + c) * sg * (1.f + p * (1.f - sg)));
        }
}

/* dx[t', c] = sum_j w[c, j] dpre[t' + (K-1) - j, c] over the taps that read t'; dw[c, j] += sum_t
 * dpre[t, c] x[t - (K-1) + j, c]. A thread takes one channel over a tile: its dw partials stay in
 * registers and are added once. The tile starting at token 0 also writes dhalo [K-1, C], what the
 * first tokens' taps send back to the halo (its owner adds it to its own dx; NULL: not wanted). */
__global__ void gdn_conv_bwd_kernel(bf16_t *dx, bf16_t *dhalo, float *dw, const bf16_t *dpre, const bf16_t *x,
                                    const bf16_t *halo, const bf16_t *wc, const int32_t *pos, int64_t S, int64_t C,
                                    int K) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float w[8], acc[8];
    for (int j = 0; j < K; j++) { w[j] = bf(wc, c * K + j); acc[j] = 0.f; }
    for (int64_t t0 = (int64_t)blockIdx.y * CONV_TILE; t0 < S; t0 += (int64_t)gridDim.y * CONV_TILE) {
        for (int64_t s = t0 == 0 ? -(int64_t)(K - 1) : t0; s < t0 + CONV_TILE && s < S; s++) { /* tile 0: the halo's rows too */
            float sum = 0.f; /* token s as an input */
            for (int j = 0; j < K; j++) {
                const int64_t t = s + (K - 1 - j); /* the output that reads s through tap j */
                if (t >= 0 && t < S && K - 1 - j <= pos[t]) sum += w[j] * bf(dpre, t * C + c);
            }
            if (s >= 0) st_bf(dx, s * C + c, sum);
            else if (dhalo) st_bf(dhalo, (K - 1 + s) * C + c, sum);
            if (s < 0) continue;
            const float g = bf(dpre, s * C + c); /* token s as an output */
            for (int j = 0; j < K; j++) {
                const int64_t back = K - 1 - j;
                if (back <= pos[s]) acc[j] += g * conv_in(x, halo, s, back, c, C, K);
            }
        }
    }
    for (int j = 0; j < K; j++) atomicAdd(&dw[c * K + j], acc[j]);
}

extern "C" void gdn_conv_bwd(bf16_t *dx, bf16_t *dhalo, float *dw, bf16_t *d, const bf16_t *x, const bf16_t *halo,
                             const bf16_t *w, const int32_t *pos, int64_t S, int64_t C, int64_t K, cudaStream_t st) {
    dim3 grid((unsigned)((C + 127) / 128), conv_tiles(S));
    gdn_conv_dpre_kernel<<<grid, 128, 0, st>>>(d, x, halo, w, pos, S, C, (int)K);
    KCHECK();
    gdn_conv_bwd_kernel<<<grid, 128, 0, st>>>(dx, dhalo, dw, d, x, halo, w, pos, S, C, (int)K);
    KCHECK();
}

/* ---------------------------------------------------------------- gates */
/* g = -exp(A_log) softplus(a + dt_bias) (the log of the decay), beta = sigmoid(b); a, b [S, Hv] */
__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

__global__ void gdn_gates_fwd_kernel(float *g, float *beta, const bf16_t *a, const bf16_t *b, const bf16_t *A_log,
                                     const bf16_t *dt_bias, int64_t n, int64_t Hv) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t h = i % Hv;
        g[i] = -__expf(bf(A_log, h)) * softplus_f(bf(a, i) + bf(dt_bias, h));
        beta[i] = 1.f / (1.f + __expf(-bf(b, i)));
    }
}

extern "C" void gdn_gates_fwd(float *g, float *beta, const bf16_t *a, const bf16_t *b, const bf16_t *A_log,
                              const bf16_t *dt_bias, int64_t S, int64_t Hv, cudaStream_t st) {
    gdn_gates_fwd_kernel<<<grid_for(S * Hv, 256), 256, 0, st>>>(g, beta, a, b, A_log, dt_bias, S * Hv, Hv);
    KCHECK();
}

/* From dg, dbeta [S, Hv] fp32: da, db [S, Hv] bf16 written, dA_log and ddt_bias [Hv] added into.
 * dg/dA_log = g; dg/da = -exp(A_log) sigmoid(a + dt_bias) = dg/d dt_bias; dbeta/db = beta (1 - beta). */
__global__ void gdn_gates_bwd_kernel(bf16_t *da, bf16_t *db, float *dA_log, float *ddt, const float *dg,
                                     const float *dbeta, const float *g, const float *beta, const bf16_t *a,
                                     const bf16_t *A_log, const bf16_t *dt_bias, int64_t S, int64_t Hv) {
    const int64_t h = blockIdx.x;
    float sA = 0.f, sdt = 0.f;
    for (int64_t t = threadIdx.x; t < S; t += blockDim.x) {
        const int64_t i = t * Hv + h;
        const float x = bf(a, i) + bf(dt_bias, h), dd = -__expf(bf(A_log, h)) / (1.f + __expf(-x)) * dg[i];
        st_bf(da, i, dd);
        st_bf(db, i, dbeta[i] * beta[i] * (1.f - beta[i]));
        sA += dg[i] * g[i];
        sdt += dd;
    }
    __shared__ float red[32];
    sA = block_sum(sA, red);
    sdt = block_sum(sdt, red);
    if (threadIdx.x == 0) { atomicAdd(&dA_log[h], sA); atomicAdd(&ddt[h], sdt); }
}

extern "C" void gdn_gates_bwd(bf16_t *da, bf16_t *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                              const float *g, const float *beta, const bf16_t *a, const bf16_t *A_log,
                              const bf16_t *dt_bias, int64_t S, int64_t Hv, cudaStream_t st) {
    gdn_gates_bwd_kernel<<<(unsigned)Hv, 1024, 0, st>>>(da, db, dA_log, ddt_bias, dg, dbeta, g, beta, a, A_log, dt_bias,
                                                       S, Hv);
    KCHECK();
}

/* ---------------------------------------------------------------- l2 norms of q and k */
/* r[t, h] = 1 / sqrt(|x_h|^2 + 1e-6) for the H heads of d channels from channel c0 of rows of ld
 * (transformers' l2norm); one warp per (token, head). */
#define L2_EPS 1e-6f
__global__ void gdn_l2_fwd_kernel(float *r, const bf16_t *x, int64_t S, int64_t H, int64_t d, int64_t ld, int64_t c0) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= S * H) return;
    const bf16_t *xr = x + (row / H) * ld + c0 + (row % H) * d;
    float ss = 0.f;
    for (int64_t i = lane; i < d; i += 32) { const float v = bf(xr, i); ss += v * v; }
    ss = warp_sum(ss);
    if (lane == 0) r[row] = rsqrtf(ss + L2_EPS);
}

extern "C" void gdn_l2_fwd(float *r, const bf16_t *x, int64_t S, int64_t H, int64_t d, int64_t ld, int64_t c0,
                           cudaStream_t st) {
    gdn_l2_fwd_kernel<<<grid_for(S * H, 8, 1LL << 31), 256, 0, st>>>(r, x, S, H, d, ld, c0);
    KCHECK();
}

/* The gradient of the prepared head y = s x r (r as above) to the raw x: dx = s r (dy - u (u . dy)),
 * u = x r. dy [S, H, d] fp32 (what the rule's backward added up); dx written into rows of ld from c0. */
__global__ void gdn_l2_bwd_kernel(bf16_t *dx, const float *dy, const bf16_t *x, const float *r, float s, int64_t S,
                                  int64_t H, int64_t d, int64_t ld, int64_t c0) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= S * H) return;
    const int64_t at = (row / H) * ld + c0 + (row % H) * d;
    const float rr = r[row];
    float dot = 0.f;
    for (int64_t i = lane; i < d; i += 32) dot += bf(x, at + i) * rr * dy[row * d + i];
    dot = warp_sum(dot);
    for (int64_t i = lane; i < d; i += 32) st_bf(dx, at + i, s * rr * (dy[row * d + i] - bf(x, at + i) * rr * dot));
}

extern "C" void gdn_l2_bwd(bf16_t *dx, const float *dy, const bf16_t *x, const float *r, float scale, int64_t S,
                           int64_t H, int64_t d, int64_t ld, int64_t c0, cudaStream_t st) {
    gdn_l2_bwd_kernel<<<grid_for(S * H, 8, 1LL << 31), 256, 0, st>>>(dx, dy, x, r, scale, S, H, d, ld, c0);
    KCHECK();
}

/* ---------------------------------------------------------------- the gated delta rule */
/* What both directions read of token t for value head h (key head kh): the prepared k and q (k unit,
 * q unit / sqrt(dk)) and the gates. */
typedef struct {
    const bf16_t *qkv;        /* [S, C] the conv's output */
    const float *g, *beta;    /* [S, Hv] */
    const float *rq, *rk;     /* [S, Hk] inverse l2 norms */
    const int32_t *pos;       /* [S] */
    int64_t S, C;             /* tokens, channels (the row length of qkv) */
    int Hk, Hv, dv;
    float scale;              /* 1 / sqrt(dk) */
} GdnArgs;

/* A row's DK entries are split over a quad: lane = 4 r + p holds row r (of the warp's 8) and entries
 * [p P, (p + 1) P), P = DK / 4. k and q sit in shared memory padded per part, so the 4 parts of one
 * load fall in 4 banks. */
#define QUAD 4
#define ROWS_PER_WARP 8
template <int DK> struct Part { static constexpr int P = DK / QUAD, LD = DK / QUAD + 1; };

/* token t's prepared k and q of key head kh into shared memory, each lane loading DK/32 of them */
template <int DK>
__device__ __forceinline__ void load_kq(float *k, float *q, const GdnArgs &A, int64_t t, int kh, int lane) {
    constexpr int P = Part<DK>::P, LD = Part<DK>::LD;
    const bf16_t *row = A.qkv + t * A.C;
    const float fk = A.rk[t * A.Hk + kh], fq = A.rq[t * A.Hk + kh] * A.scale;
    __syncwarp(); /* the previous token's are read */
#pragma unroll
    for (int m = 0; m < DK / 32; m++) {
        const int j = m * 32 + lane, at = (j / P) * LD + j % P;
        k[at] = bf(row, (int64_t)(A.Hk + kh) * DK + j) * fk;
        q[at] = bf(row, (int64_t)kh * DK + j) * fq;
    }
    __syncwarp();
}

/* the sum over a row's quad */
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* one token through this lane's part of a row: s = S_{t-1} (after a document's reset) in, S_t out;
 * returns u = a S_{t-1} k; d = b (v - u), the value written */
template <int DK>
__device__ __forceinline__ float rule_step(float *s, const float *kp, float a, float b, float v, float *d_out) {
    constexpr int P = Part<DK>::P;
    float u0 = 0.f, u1 = 0.f; /* two chains */
#pragma unroll
    for (int e = 0; e < P; e += 2) { u0 += s[e] * kp[e]; u1 += s[e + 1] * kp[e + 1]; }
    const float u = a * quad_sum(u0 + u1), d = b * (v - u);
#pragma unroll
    for (int e = 0; e < P; e++) s[e] = a * s[e] + d * kp[e];
    *d_out = d;
    return u;
}

/* Forward. Block (h, row group of 8): lane 4 r + p holds part p of state row i = 8 blockIdx.y + r.
 * Writes o [S, Hv, dv]; states [ceil(S/Cs), Hv, DK, dv]: the state at the start of every chunk of Cs
 * tokens (what the backward starts from); S_io [Hv, dv, DK]: the initial state in (NULL: zero) and the
 * final one out (NULL: not kept).
 * MAPS: the chunk's state map instead (ref_gdn.h): S_end = S_start M + B. B is the chunk run from a
 * zero state; M = A_1 ... A_n, whose row j is the same recurrence with no value written (v = 0) from
 * the unit row e_j. So dv + DK rows run: B's, then M's, into S_io [Hv, dv + DK, DK]; nothing else. */
template <int DK, bool MAPS>
__global__ void __launch_bounds__(32) gdn_fwd_kernel(bf16_t *o, float *states, float *S_io, GdnArgs A, int64_t Cs) {
    constexpr int P = Part<DK>::P, LD = Part<DK>::LD;
    __shared__ float k[QUAD * LD], q[QUAD * LD];
    const int h = blockIdx.x, lane = threadIdx.x, p = lane % QUAD, i = blockIdx.y * ROWS_PER_WARP + lane / QUAD,
              kh = h / (A.Hv / A.Hk), j0 = p * P;
    const int rows = MAPS ? A.dv + DK : A.dv, m = i - A.dv; /* MAPS: row m of M when m >= 0 */
    const float *kp = k + p * LD, *qp = q + p * LD;
    float s[P];
#pragma unroll
    for (int e = 0; e < P; e++)
        s[e] = MAPS ? (m == j0 + e ? 1.f : 0.f) : S_io ? S_io[((int64_t)h * rows + i) * DK + j0 + e] : 0.f;
    const int64_t vc = 2 * (int64_t)A.Hk * DK + (int64_t)h * A.dv + i;
    for (int64_t t = 0; t < A.S; t++) {
        if (!MAPS && states && t % Cs == 0) {
            float *st = states + ((t / Cs) * A.Hv + h) * (int64_t)DK * A.dv + i;
#pragma unroll
            for (int e = 0; e < P; e++) st[(int64_t)(j0 + e) * A.dv] = s[e];
        }
        if (A.pos[t] == 0) { /* a document starts: nothing before it is seen (M too: S_end no longer depends on S_start) */
#pragma unroll
            for (int e = 0; e < P; e++) s[e] = 0.f;
        }
        load_kq<DK>(k, q, A, t, kh, lane);
        const int64_t th = t * A.Hv + h;
        float d;
        rule_step<DK>(s, kp, __expf(A.g[th]), A.beta[th], MAPS && m >= 0 ? 0.f : bf(A.qkv, t * A.C + vc), &d);
        if (MAPS) continue;
        float o0 = 0.f, o1 = 0.f;
#pragma unroll
        for (int e = 0; e < P; e += 2) { o0 += s[e] * qp[e]; o1 += s[e + 1] * qp[e + 1]; }
        const float out = quad_sum(o0 + o1);
        if (p == 0) st_bf(o, th * A.dv + i, out);
    }
    if (S_io) {
#pragma unroll
        for (int e = 0; e < P; e++) S_io[((int64_t)h * rows + i) * DK + j0 + e] = s[e];
    }
}

#define DK_DISPATCH(dk, CALL)                                                                       \
    switch (dk) {                                                                                   \
    case 32: { constexpr int DK = 32; CALL; break; }                                                \
    case 64: { constexpr int DK = 64; CALL; break; }                                                \
    case 128: { constexpr int DK = 128; CALL; break; }                                              \
    default: fprintf(stderr, "error: the gated delta rule takes dk 32, 64 or 128 (%lld)\n", (long long)dk); exit(1); \
    }

static GdnArgs args(const bf16_t *qkv, const float *g, const float *beta, const float *rq, const float *rk,
                    const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv) {
    if (dv % 32 || Hv % Hk) {
        fprintf(stderr, "error: the gated delta rule takes dv a multiple of 32 (%lld) and Hv a multiple of Hk (%lld, %lld)\n",
                (long long)dv, (long long)Hv, (long long)Hk);
        exit(1);
    }
    return (GdnArgs){qkv, g, beta, rq, rk, pos, S, 2 * Hk * dk + Hv * dv, (int)Hk, (int)Hv, (int)dv,
                     1.f / sqrtf((float)dk)};
}

extern "C" void gdn_rule_fwd(bf16_t *o, float *states, float *S_io, const bf16_t *qkv, const float *g,
                             const float *beta, const float *rq, const float *rk, const int32_t *pos, int64_t S,
                             int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t chunk, cudaStream_t st) {
    const GdnArgs A = args(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dk, dv);
    dim3 grid((unsigned)Hv, (unsigned)(dv / ROWS_PER_WARP));
    DK_DISPATCH(dk, (gdn_fwd_kernel<DK, false><<<grid, 32, 0, st>>>(o, states, S_io, A, chunk)));
    KCHECK();
}

extern "C" void gdn_rule_maps(float *maps, const bf16_t *qkv, const float *g, const float *beta, const float *rq,
                              const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk,
                              int64_t dv, cudaStream_t st) {
    const GdnArgs A = args(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dk, dv);
    dim3 grid((unsigned)Hv, (unsigned)((dv + dk) / ROWS_PER_WARP));
    DK_DISPATCH(dk, (gdn_fwd_kernel<DK, true><<<grid, 32, 0, st>>>(NULL, NULL, maps, A, 1)));
    KCHECK();
}

/* S_out [Hv, dv, dk] = S_in M + B, the maps [Hv, dv + dk, dk] (B's rows, then M's) of gdn_rule_maps:
 * the state after a chunk from the state before it. S_in NULL: zero (S_out = B). */
__global__ void gdn_compose_kernel(float *S_out, const float *S_in, const float *maps, int64_t Hv, int dv, int dk) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= Hv * dv * dk) return;
    const int64_t h = e / ((int64_t)dv * dk), i = (e / dk) % dv, j = e % dk;
    const float *mp = maps + h * (int64_t)(dv + dk) * dk;
    float acc = mp[i * (int64_t)dk + j];
    if (S_in)
        for (int k = 0; k < dk; k++) acc += S_in[(h * dv + i) * (int64_t)dk + k] * mp[(dv + k) * (int64_t)dk + j];
    S_out[e] = acc;
}

extern "C" void gdn_compose(float *S_out, const float *S_in, const float *maps, int64_t Hv, int64_t dk, int64_t dv,
                            cudaStream_t st) {
    gdn_compose_kernel<<<grid_for(Hv * dv * dk, 256), 256, 0, st>>>(S_out, S_in, maps, Hv, (int)dv, (int)dk);
    KCHECK();
}

/* the backward's: dS_out = dS_in M^T + Cb, dS_in the gradient of the state after a chunk, Cb [Hv, dv, dk]
 * the chunk's backward from a zero one (gdn_rule_bwd with c_only), dS_out the gradient of the state
 * before it. dS_in NULL: zero. */
__global__ void gdn_compose_bwd_kernel(float *dS_out, const float *dS_in, const float *maps, const float *Cb, int64_t Hv,
                                       int dv, int dk) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= Hv * dv * dk) return;
    const int64_t h = e / ((int64_t)dv * dk), i = (e / dk) % dv, j = e % dk;
    const float *M = maps + (h * (int64_t)(dv + dk) + dv) * dk; /* M's rows */
    float acc = Cb[e];
    if (dS_in)
        for (int k = 0; k < dk; k++) acc += dS_in[(h * dv + i) * (int64_t)dk + k] * M[j * (int64_t)dk + k];
    dS_out[e] = acc;
}

extern "C" void gdn_compose_bwd(float *dS_out, const float *dS_in, const float *maps, const float *Cb, int64_t Hv,
                                int64_t dk, int64_t dv, cudaStream_t st) {
    gdn_compose_bwd_kernel<<<grid_for(Hv * dv * dk, 256), 256, 0, st>>>(dS_out, dS_in, maps, Cb, Hv, (int)dv, (int)dk);
    KCHECK();
}

/* The sum over the warp's 8 rows of a part-vector v[P] (lanes with the same p), scattered: after
 * halving with the lanes 16, 8 and 4 away, this lane holds P/8 of the sums, entries (P/2) b4 + (P/4)
 * b3 + (P/8) b2 + m of its part (b: the lane's bits); they are added into out's part (out + p P). */
template <int DK>
__device__ __forceinline__ void add_rows(float *out, float *v, int lane) {
    constexpr int P = Part<DK>::P;
    int n = P, base = 0;
#pragma unroll
    for (int off = 16; off >= 4; off >>= 1) {
        const int half = n / 2;
        const bool upper = lane & off;
#pragma unroll
        for (int e = 0; e < P / 2; e++) {
            if (e >= half) break;
            const float send = upper ? v[e] : v[e + half], keep = upper ? v[e + half] : v[e];
            v[e] = keep + __shfl_xor_sync(0xffffffffu, send, off);
        }
        if (upper) base += half;
        n = half;
    }
#pragma unroll
    for (int e = 0; e < P / 8; e++) atomicAdd(&out[(lane % QUAD) * P + base + e], v[e]);
}

/* Backward, chunk by chunk from the last: the chunk's states run again from its saved start (each
 * S_{t-1} kept in scratch), then its tokens in reverse. Per token, with dS the gradient of S_t:
 *     dS += do q^T;  dq = S_t^T do;  dd = dS k;  dk = dS^T d + S'^T du;  dv = b dd;  du = -b dd;
 *     db = dd . (v - u);  dS' = dS + du k^T;  dg = a <dS', S_{t-1}>;  dS_{t-1} = a dS'
 * (S' = a S_{t-1}). A lane holds its part of a row of dS in registers; the row sums (u, dd, dg's
 * parts) are quad sums; the sums over rows (dq, dk: add_rows; db, dg: warp sums) are added into fp32
 * dq, dk [S, Hk, DK] (of the prepared q and k) and dg, dbeta [S, Hv] (the row groups of a head and the
 * value heads of a key head share them: zero them first). dv is one row's alone and written. */
template <int DK, bool C_ONLY>
__global__ void __launch_bounds__(32) gdn_bwd_kernel(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta,
                                                     float *dS_io, const bf16_t *dout, const float *states,
                                                     float *scratch, GdnArgs A, int64_t Cs) {
    constexpr int P = Part<DK>::P, LD = Part<DK>::LD;
    __shared__ float k[QUAD * LD], q[QUAD * LD];
    const int h = blockIdx.x, lane = threadIdx.x, p = lane % QUAD, i = blockIdx.y * ROWS_PER_WARP + lane / QUAD,
              kh = h / (A.Hv / A.Hk), j0 = p * P;
    const float *kp = k + p * LD, *qp = q + p * LD;
    float ds[P], x[P];
#pragma unroll
    for (int e = 0; e < P; e++) ds[e] = dS_io ? dS_io[((int64_t)h * A.dv + i) * DK + j0 + e] : 0.f;
    float *scr = scratch + ((int64_t)h * gridDim.y + blockIdx.y) * Cs * P * 32 + lane; /* [Cs][P][32 lanes] */
    const int64_t vc = 2 * (int64_t)A.Hk * DK + (int64_t)h * A.dv + i;
    for (int64_t c0 = (A.S - 1) / Cs * Cs; c0 >= 0; c0 -= Cs) {
        const int64_t c1 = c0 + Cs < A.S ? c0 + Cs : A.S;
        { /* the chunk's states again, from its start */
            float s[P];
            const float *st = states + ((c0 / Cs) * A.Hv + h) * (int64_t)DK * A.dv + i;
#pragma unroll
            for (int e = 0; e < P; e++) s[e] = st[(int64_t)(j0 + e) * A.dv];
            for (int64_t t = c0; t < c1; t++) {
                if (A.pos[t] == 0) {
#pragma unroll
                    for (int e = 0; e < P; e++) s[e] = 0.f;
                }
#pragma unroll
                for (int e = 0; e < P; e++) scr[((t - c0) * P + e) * 32] = s[e];
                load_kq<DK>(k, q, A, t, kh, lane);
                const int64_t th = t * A.Hv + h;
                float d;
                rule_step<DK>(s, kp, __expf(A.g[th]), A.beta[th], bf(A.qkv, t * A.C + vc), &d);
            }
        }
        for (int64_t t = c1 - 1; t >= c0; t--) {
            load_kq<DK>(k, q, A, t, kh, lane);
            const int64_t th = t * A.Hv + h;
            const float a = __expf(A.g[th]), b = A.beta[th], v = bf(A.qkv, t * A.C + vc), gi = bf(dout, th * A.dv + i);
            const float *sp = scr + (t - c0) * P * 32; /* this lane's part of S_{t-1} */
            float u = 0.f;
#pragma unroll
            for (int e = 0; e < P; e++) u += sp[e * 32] * kp[e];
            u = a * quad_sum(u);
            const float d = b * (v - u);
            float dd = 0.f;
#pragma unroll
            for (int e = 0; e < P; e++) {
                x[e] = (a * sp[e * 32] + d * kp[e]) * gi; /* dq's part of this row: S_t[i, j] do_i */
                ds[e] += gi * qp[e];
                dd += ds[e] * kp[e];
            }
            dd = quad_sum(dd);
            if (!C_ONLY) add_rows<DK>(dq + (t * A.Hk + kh) * DK, x, lane);
            const float du = -b * dd, dbe = dd * (v - u);
            float dga = 0.f;
#pragma unroll
            for (int e = 0; e < P; e++) {
                const float sprev = sp[e * 32];
                x[e] = ds[e] * d + a * sprev * du;       /* dk's part */
                ds[e] += du * kp[e];                      /* dS' */
                dga += ds[e] * sprev;
                ds[e] = A.pos[t] == 0 ? 0.f : a * ds[e];  /* dS_{t-1}; none before a document's first token */
            }
            if (C_ONLY) continue; /* only dS: the chunk's map of the state's gradient */
            add_rows<DK>(dk + (t * A.Hk + kh) * DK, x, lane);
            if (p == 0) st_bf(dqkv, t * A.C + vc, b * dd);
            const float sdb = warp_sum(p == 0 ? dbe : 0.f), sdg = warp_sum(a * dga); /* dga: parts of every row */
            if (lane == 0) { atomicAdd(&dbeta[th], sdb); atomicAdd(&dg[th], sdg); }
        }
    }
    if (dS_io) {
#pragma unroll
        for (int e = 0; e < P; e++) dS_io[((int64_t)h * A.dv + i) * DK + j0 + e] = ds[e];
    }
}

extern "C" int64_t gdn_scratch_floats(int64_t Hv, int64_t dk, int64_t dv, int64_t chunk) {
    return Hv * dv * chunk * dk; /* every row's S_{t-1} over a chunk */
}

extern "C" void gdn_rule_bwd(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta, float *dS_io,
                             const bf16_t *dout, const float *states, float *scratch, const bf16_t *qkv, const float *g,
                             const float *beta, const float *rq, const float *rk, const int32_t *pos, int64_t S,
                             int64_t Hk, int64_t Hv, int64_t dkh, int64_t dv, int64_t chunk, int c_only,
                             cudaStream_t st) {
    const GdnArgs A = args(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dkh, dv);
    dim3 grid((unsigned)Hv, (unsigned)(dv / ROWS_PER_WARP));
    if (c_only)
        DK_DISPATCH(dkh, (gdn_bwd_kernel<DK, true><<<grid, 32, 0, st>>>(dq, dk, dqkv, dg, dbeta, dS_io, dout, states,
                                                                        scratch, A, chunk)))
    else
        DK_DISPATCH(dkh, (gdn_bwd_kernel<DK, false><<<grid, 32, 0, st>>>(dq, dk, dqkv, dg, dbeta, dS_io, dout, states,
                                                                         scratch, A, chunk)))
    KCHECK();
}

/* ---------------------------------------------------------------- gated RMSNorm */
/* Per (token, value head) row of dv: y = w (x / rms(x)) silu(z) (transformers' Qwen3_5RMSNormGated:
 * plain w, not 1 + w); one warp a row. rstd [S Hv] kept for the backward. */
__global__ void gdn_norm_fwd_kernel(bf16_t *y, float *rstd, const bf16_t *x, const bf16_t *z, const bf16_t *w,
                                    int64_t rows, int64_t n, float eps) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int64_t at = row * n;
    float ss = 0.f;
    for (int64_t i = lane; i < n; i += 32) { const float v = bf(x, at + i); ss += v * v; }
    const float r = rsqrtf(warp_sum(ss) / (float)n + eps);
    if (lane == 0) rstd[row] = r;
    for (int64_t i = lane; i < n; i += 32) st_bf(y, at + i, bf(w, i) * bf(x, at + i) * r * silu_f(bf(z, at + i)));
}

extern "C" void gdn_norm_fwd(bf16_t *y, float *rstd, const bf16_t *x, const bf16_t *z, const bf16_t *w, int64_t rows,
                             int64_t n, float eps, cudaStream_t st) {
    gdn_norm_fwd_kernel<<<grid_for(rows, 8, 1LL << 31), 256, 0, st>>>(y, rstd, x, z, w, rows, n, eps);
    KCHECK();
}

/* From dy: dx and dz written (bf16), dw [n] added into. With xh = x r and sz = silu(z):
 * dz = dy w xh silu'(z); dxh = dy w sz; dw += dy xh sz; dx = r (dxh - xh mean(dxh xh)). */
__global__ void gdn_norm_bwd_kernel(bf16_t *dx, bf16_t *dz, float *dw, const bf16_t *dy, const bf16_t *x,
                                    const bf16_t *z, const float *rstd, const bf16_t *w, int64_t rows, int64_t n) {
    extern __shared__ float dw_s[];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dw_s[i] = 0.f;
    __syncthreads();
    const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
    for (int64_t row = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * wpb) {
        const int64_t at = row * n;
        const float r = rstd[row];
        float dot = 0.f;
        for (int64_t i = lane; i < n; i += 32) {
            const float zz = bf(z, at + i), sg = 1.f / (1.f + __expf(-zz)), xh = bf(x, at + i) * r;
            const float g = bf(dy, at + i) * bf(w, i);
            dot += g * zz * sg * xh;
        }
        dot = warp_sum(dot) / (float)n;
        for (int64_t i = lane; i < n; i += 32) {
            const float zz = bf(z, at + i), sg = 1.f / (1.f + __expf(-zz)), sz = zz * sg, xh = bf(x, at + i) * r;
            const float gy = bf(dy, at + i), g = gy * bf(w, i);
            st_bf(dz, at + i, g * xh * sg * (1.f + zz * (1.f - sg)));
            st_bf(dx, at + i, r * (g * sz - xh * dot));
            atomicAdd(&dw_s[i], gy * xh * sz);
        }
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&dw[i], dw_s[i]);
}

extern "C" void gdn_norm_bwd(bf16_t *dx, bf16_t *dz, float *dw, const bf16_t *dy, const bf16_t *x, const bf16_t *z,
                             const float *rstd, const bf16_t *w, int64_t rows, int64_t n, cudaStream_t st) {
    int dev, sms;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    int64_t blocks = (rows + 7) / 8;
    if (blocks > 4LL * sms) blocks = 4LL * sms;
    gdn_norm_bwd_kernel<<<(unsigned)blocks, 256, (size_t)n * sizeof(float), st>>>(dx, dz, dw, dy, x, z, rstd, w, rows, n);
    KCHECK();
}
