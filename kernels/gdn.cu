/* gdn.cu -- Qwen3.5's linear attention (Gated DeltaNet) on the GPU: the causal depthwise conv, the
 * gates, the q/k l2 norms, the gated delta rule forward and backward, and the gated RMSNorm. The
 * rule is written plainly first: token by token, as tests/ref_gdn.c reads it (a learner's first read
 * of linear attention, and the GPU's own reference). The stages run it tiled (below the plain
 * kernels): the same recurrence and the same per-token code (rule_step, row_dot, rule_back), with a
 * tile of tokens' inputs fetched while the previous tile runs; ./build/gdn_rate times both.
 * The chunked form (tensor-core GEMMs per 64-token chunk), derived and sized: docs/chunked_delta_rule.md.
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
template <int DK> struct Part { static constexpr int P = DK / QUAD, LD = DK / QUAD + 4; };
/* 4 entries of a part from shared memory in one load: parts start 16-byte aligned (LD a multiple of 4),
 * and LD = P + 4 still puts the 4 parts' loads in different banks */
struct F4 {
    float v[4];
};
__device__ __forceinline__ F4 ld4(const float *p) {
    const float4 f = *reinterpret_cast<const float4 *>(p);
    return F4{{f.x, f.y, f.z, f.w}};
}

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
    float k[P], u0 = 0.f, u1 = 0.f; /* two chains */
#pragma unroll
    for (int e = 0; e < P; e += 4) {
        const F4 f = ld4(kp + e);
#pragma unroll
        for (int m = 0; m < 4; m++) k[e + m] = f.v[m];
        u0 += s[e] * k[e] + s[e + 2] * k[e + 2];
        u1 += s[e + 1] * k[e + 1] + s[e + 3] * k[e + 3];
    }
    const float u = a * quad_sum(u0 + u1), d = b * (v - u);
#pragma unroll
    for (int e = 0; e < P; e++) s[e] = a * s[e] + d * k[e];
    *d_out = d;
    return u;
}

/* a row (this lane's part s, in registers) dotted with a vector's part in shared memory, summed over
 * the quad: o_t's entry is row_dot(S_t, q_t), the backward's u is a row_dot(S_{t-1}, k_t) */
template <int DK>
__device__ __forceinline__ float row_dot(const float *s, const float *qp) {
    constexpr int P = Part<DK>::P;
    float o0 = 0.f, o1 = 0.f;
#pragma unroll
    for (int e = 0; e < P; e += 4) {
        const F4 f = ld4(qp + e);
        o0 += s[e] * f.v[0] + s[e + 2] * f.v[2];
        o1 += s[e + 1] * f.v[1] + s[e + 3] * f.v[3];
    }
    return quad_sum(o0 + o1);
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
    __shared__ __align__(16) float k[QUAD * LD], q[QUAD * LD];
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
        const float out = row_dot<DK>(s, qp);
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

/* o[0..N) += v[0..N): one vector atomic where the GPU has them (sm_90: float2, float4), which is a
 * quarter of the backward's atomics at dk 128 */
template <int N>
__device__ __forceinline__ void add_n(float *o, const float *v) {
#if __CUDA_ARCH__ >= 900
    if constexpr (N == 4) atomicAdd(reinterpret_cast<float4 *>(o), make_float4(v[0], v[1], v[2], v[3]));
    else if constexpr (N == 2) atomicAdd(reinterpret_cast<float2 *>(o), make_float2(v[0], v[1]));
    else
        for (int e = 0; e < N; e++) atomicAdd(&o[e], v[e]);
#else
    for (int e = 0; e < N; e++) atomicAdd(&o[e], v[e]);
#endif
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
    add_n<P / 8>(out + (lane % QUAD) * P + base, v);
}

/* Token t's backward through this lane's part of a row, the formulas below: ds holds dS_t's part in
 * and dS_{t-1}'s out; sp is S_{t-1}'s part; xq, xk get this row's terms of dq and dk (summed over rows
 * by rule_back_add). Returns dd (the row's, quad-summed); *dbe, *dga: this row's term of dbeta (the
 * same on the quad's 4 lanes) and this lane's part of dg's. */
template <int DK>
__device__ __forceinline__ float rule_back(float *ds, float *xq, float *xk, const float *sp, const float *kp,
                                           const float *qp, float a, float b, float v, float gi, bool start,
                                           float *dbe, float *dga) {
    constexpr int P = Part<DK>::P;
    const float u = a * row_dot<DK>(sp, kp), d = b * (v - u);
    float dd0 = 0.f, dd1 = 0.f;
#pragma unroll
    for (int e = 0; e < P; e += 4) {
        const F4 k = ld4(kp + e), q = ld4(qp + e);
#pragma unroll
        for (int m = 0; m < 4; m++) {
            xq[e + m] = (a * sp[e + m] + d * k.v[m]) * gi; /* S_t[i, j] do_i */
            ds[e + m] += gi * q.v[m];
            if (m & 1) dd1 += ds[e + m] * k.v[m];
            else dd0 += ds[e + m] * k.v[m];
        }
    }
    const float dd = quad_sum(dd0 + dd1), du = -b * dd;
    float g0 = 0.f, g1 = 0.f;
#pragma unroll
    for (int e = 0; e < P; e += 4) {
        const F4 k = ld4(kp + e);
#pragma unroll
        for (int m = 0; m < 4; m++) {
            xk[e + m] = ds[e + m] * d + a * sp[e + m] * du;
            ds[e + m] += du * k.v[m]; /* dS' */
            if (m & 1) g1 += ds[e + m] * sp[e + m];
            else g0 += ds[e + m] * sp[e + m];
            ds[e + m] = start ? 0.f : a * ds[e + m]; /* dS_{t-1}; none before a document's first token */
        }
    }
    *dbe = dd * (v - u);
    *dga = a * (g0 + g1);
    return dd;
}

/* add_rows through shared memory (buf: ROWS_PER_WARP x QUAD LD floats): each lane writes its part of
 * its row, then sums 4 columns down the 8 rows -- half add_rows' instructions, which the tiled backward
 * is short of */
template <int DK>
__device__ __forceinline__ void add_rows_smem(float *out, const float *v, float *buf, int lane) {
    constexpr int P = Part<DK>::P, LD = Part<DK>::LD, RS = QUAD * LD;
    float *mine = buf + (lane / QUAD) * RS + (lane % QUAD) * LD;
#pragma unroll
    for (int e = 0; e < P; e += 4) *reinterpret_cast<float4 *>(mine + e) = make_float4(v[e], v[e + 1], v[e + 2], v[e + 3]);
    __syncwarp();
    for (int c = 4 * lane; c < DK; c += 128) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int r = 0; r < ROWS_PER_WARP; r++) {
            const F4 f = ld4(buf + r * RS + (c / P) * LD + c % P);
#pragma unroll
            for (int m = 0; m < 4; m++) acc[m] += f.v[m];
        }
        add_n<4>(out + c, acc);
    }
    __syncwarp(); /* buf is free again */
}

/* What token t's backward adds: dq, dk summed over the warp's rows (then over row groups and value heads
 * by atomics), dbeta and dg over them too; dv (b dd, one row's alone) written. buf: add_rows_smem's
 * (NULL: add_rows, by shuffles). */
template <int DK>
__device__ __forceinline__ void rule_back_add(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta, float *xq,
                                              float *xk, float dv, float dbe, float dga, const GdnArgs &A, int64_t t,
                                              int h, int kh, int64_t vc, int lane, float *buf = NULL) {
    if (buf) {
        add_rows_smem<DK>(dq + (t * A.Hk + kh) * DK, xq, buf, lane);
        add_rows_smem<DK>(dk + (t * A.Hk + kh) * DK, xk, buf, lane);
    } else {
        add_rows<DK>(dq + (t * A.Hk + kh) * DK, xq, lane);
        add_rows<DK>(dk + (t * A.Hk + kh) * DK, xk, lane);
    }
    if (lane % QUAD == 0) st_bf(dqkv, t * A.C + vc, dv);
    const float sdb = warp_sum(lane % QUAD == 0 ? dbe : 0.f), sdg = warp_sum(dga);
    if (lane == 0) { atomicAdd(&dbeta[t * A.Hv + h], sdb); atomicAdd(&dg[t * A.Hv + h], sdg); }
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
    __shared__ __align__(16) float k[QUAD * LD], q[QUAD * LD];
    const int h = blockIdx.x, lane = threadIdx.x, p = lane % QUAD, i = blockIdx.y * ROWS_PER_WARP + lane / QUAD,
              kh = h / (A.Hv / A.Hk), j0 = p * P;
    const float *kp = k + p * LD, *qp = q + p * LD;
    float ds[P];
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
            float sp[P], xq[P], xk[P], dbe, dga; /* sp: this lane's part of S_{t-1} */
#pragma unroll
            for (int e = 0; e < P; e++) sp[e] = scr[((t - c0) * P + e) * 32];
            const float b = A.beta[th];
            const float dd = rule_back<DK>(ds, xq, xk, sp, kp, qp, __expf(A.g[th]), b, bf(A.qkv, t * A.C + vc),
                                           bf(dout, th * A.dv + i), A.pos[t] == 0, &dbe, &dga);
            if (!C_ONLY) rule_back_add<DK>(dq, dk, dqkv, dg, dbeta, xq, xk, dd * b, dbe, dga, A, t, h, kh, vc, lane);
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

/* ---------------------------------------------------------------- the rule, tiled */
/* The same recurrence, with what its tokens read staged ahead. The plain kernels above wait on memory
 * once per token (k and q, the gates, v): at 32K tokens that wait, not the arithmetic, is their time.
 * Here a warp copies the next tile of tokens' k and q into shared memory (cp.async) and their gates and
 * v into registers while it runs the current tile from shared memory; rule_step, row_dot and
 * rule_back are the plain kernels' own. Needs qkv's rows (and dout's) 16-byte aligned: the launchers
 * fall back to the plain kernels otherwise, and gdn_rule_plain(1) asks for them (the tests compare).
 * A tile is TL = 16 tokens, or 8 where 16's shared memory would leave part of the grid for a second wave
 * (tile_for: 48 value heads' maps, 64's backward). */

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

template <int DK, int TL> struct Tile {
    bf16_t raw[TL][2 * DK];                          /* the key head's q, then k, as qkv holds them */
    float kq[TL][2][QUAD * Part<DK>::LD];            /* prepared k [0] and q [1], parts padded as load_kq's */
    float a[TL], b[TL], fq[TL], fk[TL];        /* exp(g), beta; q's and k's factors (norm, scale) */
    float v[TL][ROWS_PER_WARP], gi[TL][ROWS_PER_WARP]; /* the warp's 8 rows of v and of the output's gradient */
    int start[TL];                                   /* a document starts at the token */
};

/* what lane j < n of the warp loads of the tile's token j: its scalars, and the warp's 8 rows of v and
 * of dout as one 16-byte vector each */
struct TileRegs {
    float g, b, rq, rk;
    int pos;
    uint4 v, gi;
};

__device__ __forceinline__ void unpack8(float *out, uint4 u) {
    const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int m = 0; m < 4; m++) {
        const float2 f = __bfloat1622float2(p[m]);
        out[2 * m] = f.x, out[2 * m + 1] = f.y;
    }
}

/* start fetching tokens [t0, t0 + n): k and q by cp.async into T.raw, the rest into r (i0: the warp's
 * first row; v when has_v, dout's rows when dout) */
template <int DK, int TL>
__device__ __forceinline__ void tile_issue(Tile<DK, TL> &T, TileRegs &r, const GdnArgs &A, const bf16_t *dout, int64_t t0,
                                           int n, int h, int kh, int i0, bool has_v, int lane) {
    constexpr int PER = DK / 8; /* 16-byte pieces of one head's q (or k) */
    for (int e = lane; e < n * 2 * PER; e += 32) {
        const int j = e / (2 * PER), c = e % (2 * PER), part = c / PER, off = (c % PER) * 8;
        cp_async16(&T.raw[j][part * DK + off], A.qkv + (t0 + j) * A.C + (int64_t)(part ? A.Hk + kh : kh) * DK + off);
    }
    cp_async_commit();
    if (lane < n) {
        const int64_t t = t0 + lane, th = t * A.Hv + h;
        r.g = A.g[th], r.b = A.beta[th], r.rq = A.rq[t * A.Hk + kh], r.rk = A.rk[t * A.Hk + kh], r.pos = A.pos[t];
        if (has_v) r.v = *reinterpret_cast<const uint4 *>(A.qkv + t * A.C + 2 * (int64_t)A.Hk * DK + (int64_t)h * A.dv + i0);
        if (dout) r.gi = *reinterpret_cast<const uint4 *>(dout + th * A.dv + i0);
    }
}

/* the fetched tile into place: scalars into shared memory, k and q prepared (l2 norm, q's scale) */
template <int DK, int TL>
__device__ __forceinline__ void tile_land(Tile<DK, TL> &T, const TileRegs &r, const GdnArgs &A, int n, bool has_v,
                                          bool has_gi, int lane) {
    constexpr int P = Part<DK>::P, LD = Part<DK>::LD;
    __syncwarp(); /* the previous tile is read */
    if (lane < n) {
        T.a[lane] = __expf(r.g), T.b[lane] = r.b, T.fq[lane] = r.rq * A.scale, T.fk[lane] = r.rk;
        T.start[lane] = r.pos == 0;
        if (has_v) unpack8(T.v[lane], r.v);
        if (has_gi) unpack8(T.gi[lane], r.gi);
    }
    cp_async_wait_all();
    __syncwarp();
    /* a token's 2 DK entries are DK pairs: lane l takes pairs l, l + 32, ..., the same columns every token */
    for (int j = 0; j < n; j++) {
#pragma unroll
        for (int m = 0; m < DK / 32; m++) {
            const int c = 2 * (lane + 32 * m), x = c % DK, is_k = c >= DK;
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&T.raw[j][c]));
            const float mul = is_k ? T.fk[j] : T.fq[j];
            float *to = &T.kq[j][is_k ? 0 : 1][(x / P) * LD + x % P];
            to[0] = f.x * mul, to[1] = f.y * mul;
        }
    }
    __syncwarp();
}

__device__ __forceinline__ int64_t dmin64(int64_t a, int64_t b) { return a < b ? a : b; }

/* gdn_fwd_kernel's work, tiled (same block layout, same outputs) */
template <int DK, bool MAPS, int TL>
__global__ void __launch_bounds__(32) gdn_fwd_tiled_kernel(bf16_t *o, float *states, float *S_io, GdnArgs A,
                                                           int64_t Cs) {
    constexpr int P = Part<DK>::P, LD = Part<DK>::LD;
    __shared__ __align__(16) Tile<DK, TL> T;
    const int h = blockIdx.x, lane = threadIdx.x, p = lane % QUAD, r8 = lane / QUAD, i0 = blockIdx.y * ROWS_PER_WARP,
              i = i0 + r8, kh = h / (A.Hv / A.Hk), j0 = p * P;
    const int rows = MAPS ? A.dv + DK : A.dv, m = i - A.dv;
    const bool has_v = i0 < A.dv; /* MAPS: M's rows write no value */
    float s[P];
#pragma unroll
    for (int e = 0; e < P; e++)
        s[e] = MAPS ? (m == j0 + e ? 1.f : 0.f) : S_io ? S_io[((int64_t)h * rows + i) * DK + j0 + e] : 0.f;
    TileRegs r;
    int64_t save_at = 0; /* the next chunk's start (a 64-bit modulo a token costs more than the token) */
    tile_issue<DK, TL>(T, r, A, NULL, 0, (int)dmin64(TL, A.S), h, kh, i0, has_v, lane);
    for (int64_t t0 = 0; t0 < A.S; t0 += TL) {
        const int n = (int)dmin64(TL, A.S - t0);
        tile_land<DK, TL>(T, r, A, n, has_v, false, lane);
        if (t0 + TL < A.S) tile_issue<DK, TL>(T, r, A, NULL, t0 + TL, (int)dmin64(TL, A.S - t0 - TL), h, kh, i0, has_v, lane);
        for (int j = 0; j < n; j++) {
            const int64_t t = t0 + j;
            if (!MAPS && states && t == save_at) {
                float *st = states + ((t / Cs) * A.Hv + h) * (int64_t)DK * A.dv + i;
#pragma unroll
                for (int e = 0; e < P; e++) st[(int64_t)(j0 + e) * A.dv] = s[e];
                save_at += Cs;
            }
            if (T.start[j]) {
#pragma unroll
                for (int e = 0; e < P; e++) s[e] = 0.f;
            }
            float d;
            rule_step<DK>(s, T.kq[j][0] + p * LD, T.a[j], T.b[j], has_v ? T.v[j][r8] : 0.f, &d);
            if (MAPS) continue;
            const float out = row_dot<DK>(s, T.kq[j][1] + p * LD);
            if (p == 0) st_bf(o, (t * A.Hv + h) * A.dv + i, out);
        }
    }
    if (S_io) {
#pragma unroll
        for (int e = 0; e < P; e++) S_io[((int64_t)h * rows + i) * DK + j0 + e] = s[e];
    }
}

/* gdn_bwd_kernel's work, tiled: the chunk's states again (tiles forward), then its tokens in reverse
 * (tiles backward), each token's S_{t-1} read back from the scratch one token ahead */
template <int DK, bool C_ONLY, int TL>
__global__ void __launch_bounds__(32) gdn_bwd_tiled_kernel(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta,
                                                           float *dS_io, const bf16_t *dout, const float *states,
                                                           float *scratch, GdnArgs A, int64_t Cs) {
    constexpr int P = Part<DK>::P, LD = Part<DK>::LD;
    __shared__ __align__(16) Tile<DK, TL> T;
    __shared__ __align__(16) float rows[ROWS_PER_WARP * QUAD * LD]; /* add_rows_smem's */
    const int h = blockIdx.x, lane = threadIdx.x, p = lane % QUAD, r8 = lane / QUAD, i0 = blockIdx.y * ROWS_PER_WARP,
              i = i0 + r8, kh = h / (A.Hv / A.Hk), j0 = p * P;
    float ds[P];
#pragma unroll
    for (int e = 0; e < P; e++) ds[e] = dS_io ? dS_io[((int64_t)h * A.dv + i) * DK + j0 + e] : 0.f;
    float *scr = scratch + ((int64_t)h * gridDim.y + blockIdx.y) * Cs * P * 32 + lane; /* [Cs][P][32 lanes] */
    const int64_t vc = 2 * (int64_t)A.Hk * DK + (int64_t)h * A.dv + i;
    TileRegs r;
    for (int64_t c0 = (A.S - 1) / Cs * Cs; c0 >= 0; c0 -= Cs) {
        const int64_t c1 = dmin64(c0 + Cs, A.S);
        { /* the chunk's states again, from its start */
            float s[P];
            const float *st = states + ((c0 / Cs) * A.Hv + h) * (int64_t)DK * A.dv + i;
#pragma unroll
            for (int e = 0; e < P; e++) s[e] = st[(int64_t)(j0 + e) * A.dv];
            tile_issue<DK, TL>(T, r, A, NULL, c0, (int)dmin64(TL, c1 - c0), h, kh, i0, true, lane);
            for (int64_t t0 = c0; t0 < c1; t0 += TL) {
                const int n = (int)dmin64(TL, c1 - t0);
                tile_land<DK, TL>(T, r, A, n, true, false, lane);
                if (t0 + TL < c1) tile_issue<DK, TL>(T, r, A, NULL, t0 + TL, (int)dmin64(TL, c1 - t0 - TL), h, kh, i0, true, lane);
                for (int j = 0; j < n; j++) {
                    if (T.start[j]) {
#pragma unroll
                        for (int e = 0; e < P; e++) s[e] = 0.f;
                    }
#pragma unroll
                    for (int e = 0; e < P; e++) scr[((t0 + j - c0) * P + e) * 32] = s[e];
                    float d;
                    rule_step<DK>(s, T.kq[j][0] + p * LD, T.a[j], T.b[j], T.v[j][r8], &d);
                }
            }
        }
        /* its tokens in reverse: tile k holds [c0 + k TL, ...), fetched while tile k + 1 runs */
        const int64_t nt = (c1 - c0 + TL - 1) / TL;
        tile_issue<DK, TL>(T, r, A, dout, c0 + (nt - 1) * TL, (int)(c1 - c0 - (nt - 1) * TL), h, kh, i0, true, lane);
        float sp[P]; /* this lane's part of S_{t-1} */
#pragma unroll
        for (int e = 0; e < P; e++) sp[e] = scr[((c1 - 1 - c0) * P + e) * 32];
        for (int64_t k = nt - 1; k >= 0; k--) {
            const int64_t t0 = c0 + k * TL;
            const int n = (int)dmin64(TL, c1 - t0);
            tile_land<DK, TL>(T, r, A, n, true, true, lane);
            if (k > 0) tile_issue<DK, TL>(T, r, A, dout, t0 - TL, TL, h, kh, i0, true, lane);
            for (int j = n - 1; j >= 0; j--) {
                const int64_t t = t0 + j;
                float nsp[P], xq[P], xk[P], dbe, dga;
                if (t > c0) {
#pragma unroll
                    for (int e = 0; e < P; e++) nsp[e] = scr[((t - 1 - c0) * P + e) * 32];
                }
                const float b = T.b[j];
                const float dd = rule_back<DK>(ds, xq, xk, sp, T.kq[j][0] + p * LD, T.kq[j][1] + p * LD, T.a[j], b,
                                               T.v[j][r8], T.gi[j][r8], T.start[j], &dbe, &dga);
                if (!C_ONLY)
                    rule_back_add<DK>(dq, dk, dqkv, dg, dbeta, xq, xk, dd * b, dbe, dga, A, t, h, kh, vc, lane, rows);
#pragma unroll
                for (int e = 0; e < P; e++) sp[e] = nsp[e];
            }
        }
    }
    if (dS_io) {
#pragma unroll
        for (int e = 0; e < P; e++) dS_io[((int64_t)h * A.dv + i) * DK + j0 + e] = ds[e];
    }
}

static int plain_rule = 0, forced_tile = 0;
extern "C" void gdn_rule_plain(int on) { plain_rule = on; }
extern "C" void gdn_rule_tile(int tokens) { forced_tile = tokens; }

/* 16 tokens a tile where the whole grid is resident at once with them, else 8 (each block runs the whole
 * sequence: a second wave would double the time) */
template <typename K> static int tile_for(K kernel16, int64_t blocks) {
    if (forced_tile) return forced_tile;
    static int sms = 0;
    if (!sms) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            sms = 1;
    }
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel16, 32, 0) != cudaSuccess) return 8;
    return (int64_t)per * sms >= blocks ? 16 : 8;
}

template <int DK, bool MAPS>
static void fwd_tiled(dim3 grid, cudaStream_t st, bf16_t *o, float *states, float *S_io, const GdnArgs &A, int64_t Cs) {
    if (tile_for(gdn_fwd_tiled_kernel<DK, MAPS, 16>, (int64_t)grid.x * grid.y) == 16)
        gdn_fwd_tiled_kernel<DK, MAPS, 16><<<grid, 32, 0, st>>>(o, states, S_io, A, Cs);
    else
        gdn_fwd_tiled_kernel<DK, MAPS, 8><<<grid, 32, 0, st>>>(o, states, S_io, A, Cs);
}

template <int DK, bool C_ONLY>
static void bwd_plain(dim3 grid, cudaStream_t st, float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta,
                      float *dS_io, const bf16_t *dout, const float *states, float *scratch, const GdnArgs &A,
                      int64_t Cs) {
    gdn_bwd_kernel<DK, C_ONLY><<<grid, 32, 0, st>>>(dq, dk, dqkv, dg, dbeta, dS_io, dout, states, scratch, A, Cs);
}

template <int DK, bool C_ONLY>
static void bwd_tiled(dim3 grid, cudaStream_t st, float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta,
                      float *dS_io, const bf16_t *dout, const float *states, float *scratch, const GdnArgs &A,
                      int64_t Cs) {
    if (tile_for(gdn_bwd_tiled_kernel<DK, C_ONLY, 16>, (int64_t)grid.x * grid.y) == 16)
        gdn_bwd_tiled_kernel<DK, C_ONLY, 16><<<grid, 32, 0, st>>>(dq, dk, dqkv, dg, dbeta, dS_io, dout, states, scratch, A, Cs);
    else
        gdn_bwd_tiled_kernel<DK, C_ONLY, 8><<<grid, 32, 0, st>>>(dq, dk, dqkv, dg, dbeta, dS_io, dout, states, scratch, A, Cs);
}

/* the tiled kernels read 16-byte pieces of qkv's rows and of dout's, and add 16-byte pieces into dq, dk */
static bool tiled_ok(const GdnArgs &A, const bf16_t *dout, const float *dq = NULL, const float *dk = NULL) {
    return !plain_rule && (uintptr_t)A.qkv % 16 == 0 && A.C % 8 == 0 && (uintptr_t)dout % 16 == 0 &&
           (uintptr_t)dq % 16 == 0 && (uintptr_t)dk % 16 == 0;
}

extern "C" void gdn_rule_fwd(bf16_t *o, float *states, float *S_io, const bf16_t *qkv, const float *g,
                             const float *beta, const float *rq, const float *rk, const int32_t *pos, int64_t S,
                             int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t chunk, cudaStream_t st) {
    const GdnArgs A = args(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dk, dv);
    dim3 grid((unsigned)Hv, (unsigned)(dv / ROWS_PER_WARP));
    if (S <= 0) return;
    if (tiled_ok(A, NULL)) DK_DISPATCH(dk, (fwd_tiled<DK, false>(grid, st, o, states, S_io, A, chunk)))
    else DK_DISPATCH(dk, (gdn_fwd_kernel<DK, false><<<grid, 32, 0, st>>>(o, states, S_io, A, chunk)))
    KCHECK();
}

extern "C" void gdn_rule_maps(float *maps, const bf16_t *qkv, const float *g, const float *beta, const float *rq,
                              const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk,
                              int64_t dv, cudaStream_t st) {
    const GdnArgs A = args(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dk, dv);
    dim3 grid((unsigned)Hv, (unsigned)((dv + dk) / ROWS_PER_WARP));
    if (S <= 0) return;
    if (tiled_ok(A, NULL)) DK_DISPATCH(dk, (fwd_tiled<DK, true>(grid, st, NULL, NULL, maps, A, 1)))
    else DK_DISPATCH(dk, (gdn_fwd_kernel<DK, true><<<grid, 32, 0, st>>>(NULL, NULL, maps, A, 1)))
    KCHECK();
}

extern "C" void gdn_rule_bwd(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta, float *dS_io,
                             const bf16_t *dout, const float *states, float *scratch, const bf16_t *qkv, const float *g,
                             const float *beta, const float *rq, const float *rk, const int32_t *pos, int64_t S,
                             int64_t Hk, int64_t Hv, int64_t dkh, int64_t dv, int64_t chunk, int c_only,
                             cudaStream_t st) {
    const GdnArgs A = args(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dkh, dv);
    dim3 grid((unsigned)Hv, (unsigned)(dv / ROWS_PER_WARP));
    if (!dout) { fprintf(stderr, "error: gdn_rule_bwd needs the output's gradient (dout is NULL)\n"); exit(1); }
    if (S <= 0) return;
#define BWD(CALL, C_ONLY)                                                                                          \
    DK_DISPATCH(dkh, (CALL<DK, C_ONLY>(grid, st, dq, dk, dqkv, dg, dbeta, dS_io, dout, states, scratch, A, chunk)))
    const bool tiled = tiled_ok(A, dout, c_only ? NULL : dq, c_only ? NULL : dk);
    if (c_only && tiled) BWD(bwd_tiled, true)
    else if (c_only) BWD(bwd_plain, true)
    else if (tiled) BWD(bwd_tiled, false)
    else BWD(bwd_plain, false)
#undef BWD
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
