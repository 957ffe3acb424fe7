/* gdn_chunked.cu -- the gated delta rule in chunks of 64 tokens, its matrix products on tensor cores
 * (mma.sync, tf32 in, fp32 accumulate): forward, backward and context parallelism's state maps, behind
 * the same launchers' interface as kernels/gdn.cu's token-by-token rule (gdn_chunked_fwd for
 * gdn_rule_fwd, gdn_chunked_bwd for gdn_rule_bwd, gdn_chunked_maps for gdn_rule_maps), so a caller
 * switches by one call. The math is derived in docs/chunked_delta_rule.md; "§N" below is its section N.
 *
 * NOTES. Written without a GPU, then run on an H200 (docs/chunked_delta_rule.md §12): every check of
 * tests/test_gdn_chunked.c passes against the fp64 references, both precisions. Correct, not yet fast
 * (12.9 / 40.1 ms forward / backward at 9B's shape and 32K tokens, flash-linear-attention 1.9 / 5.7):
 * operands are read element by element from shared or global memory into fragments, and chunks are
 * staged without cp.async. The stages do not call it yet. tests/gdn_emu.h runs it on a CPU
 * (`make test-gdn-emu`); bench/gdn_chunked_device.sh builds, tests and times it in one device call.
 *
 * The plan (§12): per group of chunks (a whole number of the caller's checkpoint segments, sized to a
 * workspace budget),
 *   prep    every chunk and value head at once: gamma (fp64 sum, §2, §7), A = K K^T, L, the solve
 *           T = (I + L)^-1 by 16 x 16 diagonal blocks and block rows (§4, fp32 scalar code), the WY
 *           factors U = T diag(b) V and W = T diag(b e0) K (§5), and P = Gamma . Q K^T (§6): all to
 *           the workspace.
 *   pass    the sequential state pass, one CTA per (value head, 32 rows of the state; 16 with
 *           GDN_CHUNKED_ROWS=16): per chunk
 *           D = U - W S^T, o = diag(e0) Q S^T + P D, S <- e^{gamma_n} S + D^T K~ (§6). The maps are
 *           the same pass on dv + dk rows (B's from 0, M's from I with U = 0: §9); the backward runs
 *           it again from the kept states to keep every chunk's initial state.
 *   back    the reverse pass for the state's gradient (§8's closing paragraph): dD = K~ dS^T + P^T dO,
 *           dS <- e^{gamma_n} dS + (diag(e0) dO)^T Q - dD^T W; c_only is this pass alone (C, §9).
 *   grad    every chunk and value head at once: §8.1 to §8.6 from the chunk's S_0 and dS_n.
 *
 * Precision (§11): every operand that holds one of the kernel's bf16 inputs (raw q, k, v, dO) is
 * exact in tf32 and read as one tf32 number; every other operand is split, x = hi + lo with hi and lo
 * tf32, and a product of two split operands takes three tensor-core products (lo x lo dropped): the
 * "3 x tf32" of §11, about fp32's accuracy. With gdn_chunked_precision(0) the operands that the
 * simulation calls "the rest" (P, dP, dL, dY, the dO e0 and Q e0 products) are read as one tf32
 * number instead; the state path (T, U, W, D, S, the scaled keys) stays split either way, so the state
 * and the maps stay fp32-accurate (§11 item 3). Accumulation is fp32; gamma and dgamma are summed in
 * fp64.
 *
 * Layouts as kernels/gdn.cu: qkv [S, C], q of key head kh at channel kh dk, k at (Hk + kh) dk, v of
 * value head h at 2 Hk dk + h dv; g, beta [S, Hv]; pos [S] (a document starts at pos 0); S_io
 * [Hv, dv, dk]; states [ceil(S / Cs), Hv, dk, dv] (the state before every Cs-token segment). Chunks
 * of 64 tokens start at each segment's start (a segment of Cs < 64 tokens is one short chunk). */
#ifdef GDN_EMU
#include "../tests/gdn_emu.h"
#else
#include "common.cuh"
#endif
#include <math.h>
#include <string.h>

#include <mutex>

#define CH 64    /* tokens a chunk (§2) */
#define BLK 16   /* the solve's diagonal blocks (§4) */
#define NTHR 256 /* threads of the kernels here (8 warps), but grad: GRAD_THREADS */
#define GRAD_THREADS 512 /* 16 warps: one CTA an SM (its shared memory), the more warps to hide latency */
#define PASS_ROWS 32 /* rows of a state one CTA of a sequential pass carries, RS below (GDN_CHUNKED_ROWS=16: 16) */
#define LDS (CH + 4) /* row stride of a chunk x chunk fp32 matrix in shared memory */

/* ---------------------------------------------------------------- device primitives */
/* (tests/gdn_emu.h defines the same names for the CPU) */
#ifndef GDN_EMU
__device__ __forceinline__ float u2f(uint32_t u) { return __uint_as_float(u); }
/* x rounded to tf32 (nearest, ties away), as the 32-bit pattern the tensor core reads */
__device__ __forceinline__ uint32_t tf32_of(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* c[16 x 8] += a[16 x 8] b[8 x 8] for the warp (fragments below) */
__device__ __forceinline__ void mma_tf32(float *c, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ float bf2f(bf16_t x) { return __uint_as_float((uint32_t)x << 16); }
__device__ __forceinline__ bf16_t f2bf(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }
/* p[0] += a, p[1] += b (p 8-byte aligned: one vector atomic on sm_90) */
__device__ __forceinline__ void atomic_add2(float *p, float a, float b) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(p), make_float2(a, b));
#else
    atomicAdd(p, a), atomicAdd(p + 1, b);
#endif
}
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
__device__ __forceinline__ unsigned char *smem_base() {
    extern __shared__ __align__(16) unsigned char gdn_ck_smem[];
    return gdn_ck_smem;
}
#define GDN_LAUNCH_T(kern, grid, threads, smem, st, ...) kern<<<(grid), (threads), (smem), (st)>>>(__VA_ARGS__)
#endif
#define GDN_LAUNCH(kern, grid, smem, st, ...) GDN_LAUNCH_T(kern, grid, NTHR, smem, st, __VA_ARGS__)

__device__ __forceinline__ int lane_id() { return (int)(threadIdx.x & 31); }
__device__ __forceinline__ int warp_id() { return (int)(threadIdx.x >> 5); }
__device__ __forceinline__ int nthr() { return (int)blockDim.x; }
__device__ __forceinline__ int nwarp() { return (int)(blockDim.x >> 5); }
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16_t x) { return bf2f(x); }
__device__ __forceinline__ float warp_sum_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v += shfl_xor(v, o);
    return v;
}

/* ---------------------------------------------------------------- tensor-core tiles */
/* One warp computes a 16 x 8 tile with mma.m16n8k8 (PTX ISA, "Matrix fragments for mma.m16n8k8",
 * .tf32). With g = lane / 4 and q = lane % 4, a lane holds
 *     A (16 x 8):  a0 (g, q)   a1 (g + 8, q)   a2 (g, q + 4)   a3 (g + 8, q + 4)
 *     B (8 x 8):   b0 (k q, n g)   b1 (k q + 4, n g)
 *     C (16 x 8):  c0 (g, 2q)  c1 (g, 2q + 1)  c2 (g + 8, 2q)  c3 (g + 8, 2q + 1)
 * Operands are views of any matrix in shared or global memory (fp32 or bf16), read element by element
 * into fragments: a transpose is a view with its strides swapped, and a diagonal scaling of rows or
 * columns is applied as the element is read. */
template <class T> struct Mat {
    const T *p;
    int64_t rs, cs;     /* element (i, j) at p[i rs + j cs] */
    const float *ri;    /* times ri[i] (NULL: 1) */
    const float *ci;    /* times ci[j] (NULL: 1) */
    float mul;
    int split;          /* 1: read as hi + lo (about fp32); 0: one tf32 number (exact for bf16 inputs) */
    __device__ float at(int i, int j) const {
        float x = to_f(p[i * rs + j * cs]) * mul;
        if (ri) x *= ri[i];
        if (ci) x *= ci[j];
        return x;
    }
    __device__ Mat t() const { return Mat{p, cs, rs, ci, ri, mul, split}; }
    __device__ Mat rows(const float *v) const { Mat m = *this; m.ri = v; return m; }
    __device__ Mat cols(const float *v) const { Mat m = *this; m.ci = v; return m; }
    __device__ Mat neg() const { Mat m = *this; m.mul = -mul; return m; }
};
/* a row-major matrix with rows ld apart */
template <class T> __device__ Mat<T> mat(const T *p, int64_t ld, int split) { return Mat<T>{p, ld, 1, NULL, NULL, 1.f, split}; }

__device__ __forceinline__ void split_tf32(float x, uint32_t &hi, uint32_t &lo, int split) {
    hi = tf32_of(x);
    lo = split ? tf32_of(x - u2f(hi)) : 0u;
}

/* acc[t] (the 16 x 8 tile at rows m0, columns n0 + 8 t) += A[m0.., k] B[k, n0..] over k in [0, K)
 * (K a multiple of 8). Split operands take extra products, the small ones first. */
template <int NT, class TA, class TB>
__device__ void warp_gemm(float (&acc)[NT][4], const Mat<TA> &A, const Mat<TB> &B, int m0, int n0, int K) {
    const int lane = lane_id(), g = lane >> 2, q = lane & 3;
#pragma unroll 2 /* two k steps a loop: the second step's loads issue before the first's products wait */
    for (int k0 = 0; k0 < K; k0 += 8) {
        uint32_t ah[4], al[4];
        split_tf32(A.at(m0 + g, k0 + q), ah[0], al[0], A.split);
        split_tf32(A.at(m0 + g + 8, k0 + q), ah[1], al[1], A.split);
        split_tf32(A.at(m0 + g, k0 + q + 4), ah[2], al[2], A.split);
        split_tf32(A.at(m0 + g + 8, k0 + q + 4), ah[3], al[3], A.split);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            uint32_t bh[2], bl[2];
            split_tf32(B.at(k0 + q, n0 + 8 * t + g), bh[0], bl[0], B.split);
            split_tf32(B.at(k0 + q + 4, n0 + 8 * t + g), bh[1], bl[1], B.split);
            if (A.split) mma_tf32(acc[t], al, bh);
            if (B.split) mma_tf32(acc[t], ah, bl);
            mma_tf32(acc[t], ah, bh);
        }
    }
}

template <int NT> __device__ void zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int t = 0; t < NT; t++)
        for (int e = 0; e < 4; e++) acc[t][e] = 0.f;
}
/* f(i, j, value) for every element a lane holds of the tile at (m0, n0) */
template <int NT, class F> __device__ void tile_each(const float (&acc)[NT][4], int m0, int n0, F f) {
    const int lane = lane_id(), g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int t = 0; t < NT; t++)
        for (int e = 0; e < 4; e++) f(m0 + g + 8 * (e >> 1), n0 + 8 * t + 2 * q + (e & 1), acc[t][e]);
}
/* the tile's rows times s[row] */
template <int NT> __device__ void scale_rows(float (&acc)[NT][4], int m0, const float *s) {
    const int g = lane_id() >> 2;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        acc[t][0] *= s[m0 + g], acc[t][1] *= s[m0 + g];
        acc[t][2] *= s[m0 + g + 8], acc[t][3] *= s[m0 + g + 8];
    }
}
/* body(m0, n0) for each 16 x 8 NT tile of an M x N result this warp owns (tiles dealt round the warps) */
template <int NT, class F> __device__ void for_tiles(int M, int N, F body) {
    const int tn = N / (8 * NT), tiles = (M / 16) * tn;
    for (int tile = warp_id(); tile < tiles; tile += nwarp()) body(tile / tn * 16, tile % tn * 8 * NT);
}
/* out(i, j, v) for every element of the M x N product A B, K deep */
template <int NT, class TA, class TB, class F>
__device__ void block_gemm(int M, int N, int K, const Mat<TA> &A, const Mat<TB> &B, F out) {
    for_tiles<NT>(M, N, [&](int m0, int n0) {
        float acc[NT][4];
        zero(acc);
        warp_gemm<NT>(acc, A, B, m0, n0, K);
        tile_each<NT>(acc, m0, n0, out);
    });
}
/* rows[i] += the sum of a tile's values in row i, cols[j] -= the sum in column j (either NULL: not
 * wanted); shared-memory fp64 atomics, one per row (column) and tile after shuffles */
template <int NT> __device__ void tile_sums(const float (&v)[NT][4], int m0, int n0, double *rows, double *cols) {
    const int lane = lane_id(), g = lane >> 2, q = lane & 3;
    if (rows) {
        float r0 = 0.f, r1 = 0.f;
#pragma unroll
        for (int t = 0; t < NT; t++) r0 += v[t][0] + v[t][1], r1 += v[t][2] + v[t][3];
        for (int o = 1; o <= 2; o <<= 1) r0 += shfl_xor(r0, o), r1 += shfl_xor(r1, o);
        if (q == 0) atomicAdd(&rows[m0 + g], (double)r0), atomicAdd(&rows[m0 + g + 8], (double)r1);
    }
    if (cols) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            for (int e = 0; e < 2; e++) {
                float c = v[t][e] + v[t][e + 2];
                for (int o = 4; o <= 16; o <<= 1) c += shfl_xor(c, o);
                if (g == 0) atomicAdd(&cols[n0 + 8 * t + 2 * q + e], -(double)c);
            }
    }
}

/* ---------------------------------------------------------------- where things are */
/* what every kernel reads: the rule's inputs (kernels/gdn.cu's GdnArgs), the chunk map and the
 * workspace of the current group of chunks [c0, c0 + nc) */
struct ChunkInfo {     /* one chunk of one value head, written by prep */
    double gam[CH];    /* cumulative log-decay, restarted at documents (§7), fp64 */
    int seg[CH];       /* document number within the chunk (padding: unique) */
    float e0[CH];      /* e^{gamma_t} if t is in the chunk's first document, else 0 */
    float r[CH];       /* e^{gamma_n - gamma_s} if s is in the last document, else 0 */
    float b[CH];       /* beta (0 past the chunk's end) */
    float rk[CH];      /* k's inverse norm */
    float rqs[CH];     /* q's inverse norm times 1 / sqrt(dk) */
    int n;             /* tokens */
    float gn;          /* e^{gamma_n}: 0 if the chunk holds a document start */
};
struct Args {
    const bf16_t *qkv;
    const float *g, *beta, *rq, *rk;
    const int32_t *pos;
    int64_t S, C, Cs; /* tokens, qkv's channels, the caller's segment between kept states */
    int Hk, Hv, dk, dv, nsub, px; /* nsub: chunks a segment; px: the rest split (gdn_chunked_precision) */
    float scale;
    int64_t c0;       /* the group's first chunk and how many */
    int nc;
    float *W, *U, *P, *T, *Sst, *dSn; /* workspace [nc][Hv] x ([CH][dk], [CH][dv], [CH][CH], [CH][CH], [dv][dk], [dv][dk]) */
    ChunkInfo *info;  /* [nc][Hv] */
};
/* chunk c: tokens [t0, t0 + n); n 0 for the empty chunks past the end of a short last segment */
__host__ __device__ inline void chunk_span(const Args &a, int64_t c, int64_t &t0, int &n) {
    const int64_t seg = c / a.nsub, t = seg * a.Cs + (c % a.nsub) * CH, end = (seg + 1) * a.Cs < a.S ? (seg + 1) * a.Cs : a.S;
    t0 = t;
    n = end - t <= 0 ? 0 : end - t < CH ? (int)(end - t) : CH;
}
__device__ inline int64_t ws_at(const Args &a, int64_t c, int h) { return (c - a.c0) * a.Hv + h; }
__device__ inline float *ws_W(const Args &a, int64_t c, int h) { return a.W + ws_at(a, c, h) * CH * a.dk; }
__device__ inline float *ws_U(const Args &a, int64_t c, int h) { return a.U + ws_at(a, c, h) * CH * a.dv; }
__device__ inline float *ws_P(const Args &a, int64_t c, int h) { return a.P + ws_at(a, c, h) * CH * CH; }
__device__ inline float *ws_T(const Args &a, int64_t c, int h) { return a.T + ws_at(a, c, h) * CH * CH; }
__device__ inline float *ws_Sst(const Args &a, int64_t c, int h) { return a.Sst + ws_at(a, c, h) * a.dv * a.dk; }
__device__ inline float *ws_dSn(const Args &a, int64_t c, int h) { return a.dSn + ws_at(a, c, h) * a.dv * a.dk; }
__device__ inline ChunkInfo *ws_info(const Args &a, int64_t c, int h) { return a.info + ws_at(a, c, h); }

/* Gamma[t, s] (§7): the decay from s to t, 0 above the diagonal and across documents (a select, never
 * a product with a mask: above the diagonal the exponent is positive) */
__device__ __forceinline__ float decay(const double *gam, const int *seg, int t, int s) {
    return s <= t && seg[s] == seg[t] ? expf((float)(gam[t] - gam[s])) : 0.f;
}

/* shared memory carved in order, 16-byte aligned; with base NULL it only measures (the launchers) */
struct Carve {
    unsigned char *base, *p;
    template <class T> __host__ __device__ T *take(int64_t n) {
        T *r = (T *)p;
        p += (n * (int64_t)sizeof(T) + 15) & ~(int64_t)15;
        return r;
    }
    __host__ __device__ size_t used() const { return (size_t)(p - base); }
};

/* rows [t0, t0 + n) of d channels from channel ch of qkv (or another [S, ld] bf16 tensor) into dst
 * [CH][ldd] bf16, zero from row n on */
__device__ void stage_rows(bf16_t *dst, int ldd, const bf16_t *src, int64_t ld, int64_t t0, int64_t ch, int n, int d) {
    for (int e = threadIdx.x; e < CH * d / 2; e += nthr()) {
        const int t = e / (d / 2), j = 2 * (e % (d / 2));
        uint32_t v = 0;
        if (t < n) v = *reinterpret_cast<const uint32_t *>(src + (t0 + t) * ld + ch + j);
        *reinterpret_cast<uint32_t *>(dst + t * ldd + j) = v;
    }
}

/* the chunk's per-token scalars into shared memory from its ChunkInfo (n, gn returned) */
struct Scal {
    double *gam;
    int *seg;
    float *e0, *r, *b, *rk, *rqs, *rrk, *eq; /* rrk = r rk (K~'s row scale), eq = e0 rqs */
};
template <class C> __host__ __device__ void carve_scal(C &c, Scal &s) {
    s.gam = c.template take<double>(CH);
    s.seg = c.template take<int>(CH);
    float **f[] = {&s.e0, &s.r, &s.b, &s.rk, &s.rqs, &s.rrk, &s.eq};
    for (int i = 0; i < 7; i++) *f[i] = c.template take<float>(CH);
}
__device__ void load_scal(Scal &s, const ChunkInfo *ci) {
    for (int t = threadIdx.x; t < CH; t += nthr()) {
        s.gam[t] = ci->gam[t], s.seg[t] = ci->seg[t], s.e0[t] = ci->e0[t], s.r[t] = ci->r[t], s.b[t] = ci->b[t];
        s.rk[t] = ci->rk[t], s.rqs[t] = ci->rqs[t], s.rrk[t] = ci->r[t] * ci->rk[t], s.eq[t] = ci->e0[t] * ci->rqs[t];
    }
}

/* chunk c's inputs of the sequential passes into L2 while the current chunk computes: its W, P and
 * ChunkInfo, the raw k and q rows of key head kh, and (u0 >= 0) U's columns u0.. of the CTA's rows */
__device__ void prefetch_chunk(const Args &a, int64_t c, int h, int kh, int u0) {
    int64_t t0;
    int n;
    chunk_span(a, c, t0, n);
    const int DKf = a.dk;
    for (int e = threadIdx.x; e < CH * DKf / 32; e += nthr()) prefetch_l2(ws_W(a, c, h) + e * 32);
    for (int e = threadIdx.x; e < CH * CH / 32; e += nthr()) prefetch_l2(ws_P(a, c, h) + e * 32);
    for (int e = threadIdx.x; e < (int)(sizeof(ChunkInfo) / 128); e += nthr()) prefetch_l2((const char *)ws_info(a, c, h) + e * 128);
    for (int e = threadIdx.x; e < n * 2; e += nthr()) /* a head's row of k or q: dk bf16, one or two lines */
        for (int b = 0; b < DKf * 2; b += 128)
            prefetch_l2((const char *)(a.qkv + (t0 + e / 2) * a.C + (int64_t)(e % 2 ? kh : a.Hk + kh) * DKf) + b);
    if (u0 >= 0)
        for (int e = threadIdx.x; e < CH; e += nthr()) prefetch_l2(ws_U(a, c, h) + (int64_t)e * a.dv + u0);
}

/* ---------------------------------------------------------------- prep: each chunk alone (§2-§6) */
struct PrepSmem {
    bf16_t *k, *q, *v; /* [CH][d + 8] raw bf16, zero past the chunk's end */
    float *L, *T, *X;  /* [CH][LDS] L, then (I + L)^-1; X [CH][BLK] the solve's block products */
    Scal s;
    float *bek, *bb;   /* b e0 rk (W's column scale), b */
    float *gn;         /* [1] e^{gamma_n} */
};
template <class C> __host__ __device__ void carve_prep(C &c, PrepSmem &m, int dk, int dv) {
    m.k = c.template take<bf16_t>(CH * (dk + 8));
    m.q = c.template take<bf16_t>(CH * (dk + 8));
    m.v = c.template take<bf16_t>(CH * (dv + 8));
    m.L = c.template take<float>(CH * LDS);
    m.T = c.template take<float>(CH * LDS);
    m.X = c.template take<float>(CH * BLK);
    carve_scal(c, m.s);
    m.bek = c.template take<float>(CH);
    m.bb = c.template take<float>(CH);
    m.gn = c.template take<float>(4);
}

/* gamma_t = the sum of g since the chunk's or the document's start, in fp64 (§7, §11): one thread,
 * 64 adds; then the decays from the start (e0) and to the end (r), and e^{gamma_n} */
__device__ void chunk_decays(const Args &a, Scal &s, int64_t t0, int n, int h, float *gn) {
    if (threadIdx.x == 0) {
        double gam = 0;
        int seg = 0;
        for (int t = 0; t < CH; t++) {
            if (t < n) {
                if (a.pos[t0 + t] == 0) seg++, gam = 0; /* a document starts: its own g never counts */
                else gam += a.g[(t0 + t) * a.Hv + h];
                s.gam[t] = gam, s.seg[t] = seg;
            } else s.gam[t] = 0, s.seg[t] = 1000 + t; /* padding: a document of its own */
        }
        *gn = n > 0 && s.seg[n - 1] == 0 ? (float)exp(s.gam[n - 1]) : 0.f;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < CH; t += nthr()) {
        s.e0[t] = t < n && s.seg[t] == 0 ? (float)exp(s.gam[t]) : 0.f;
        s.r[t] = n > 0 ? decay(s.gam, s.seg, n - 1, t) : 0.f;
    }
}

/* T = (I + L)^-1 (§4), L strictly lower in m.L. The 16 x 16 diagonal blocks by forward substitution:
 * warp w inverts block w, lane s < 16 computing column s in registers (T[t, s] = -sum_{m<t} L[t, m]
 * T[m, s]; the column's entries above s are 0, so the sum may run over all m < t). Then block rows
 * I = 1, 2, 3 in order: X_IJ = sum_{J <= M < I} L_IM T_MJ, T_IJ = -T_II X_IJ (fp32 scalar code). */
__device__ void solve_unit_lower(const float *L, float *T, float *X) {
    for (int e = threadIdx.x; e < CH * CH; e += nthr()) T[(e / CH) * LDS + e % CH] = 0.f;
    __syncthreads();
    const int w = warp_id(), s = lane_id();
    if (w < CH / BLK && s < BLK) {
        const float *Lb = L + (w * BLK) * LDS + w * BLK;
        float col[BLK];
#pragma unroll
        for (int t = 0; t < BLK; t++) {
            float sum = 0.f;
#pragma unroll
            for (int m = 0; m < t; m++) sum += Lb[t * LDS + m] * col[m];
            col[t] = t < s ? 0.f : t == s ? 1.f : -sum;
        }
#pragma unroll
        for (int t = 0; t < BLK; t++) T[(w * BLK + t) * LDS + w * BLK + s] = col[t];
    }
    __syncthreads();
    for (int I = 1; I < CH / BLK; I++) {
        for (int e = threadIdx.x; e < I * BLK * BLK; e += nthr()) { /* X_IJ, J = e / 256, into X[16 J + row][col] */
            const int J = e / (BLK * BLK), i = (e / BLK) % BLK, j = e % BLK;
            float sum = 0.f;
            for (int m = J * BLK; m < I * BLK; m++) sum += L[(I * BLK + i) * LDS + m] * T[m * LDS + J * BLK + j];
            X[(J * BLK + i) * BLK + j] = sum;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < I * BLK * BLK; e += nthr()) { /* T_IJ = -T_II X_IJ */
            const int J = e / (BLK * BLK), i = (e / BLK) % BLK, j = e % BLK;
            float sum = 0.f;
            for (int m = 0; m <= i; m++) sum += T[(I * BLK + i) * LDS + I * BLK + m] * X[(J * BLK + m) * BLK + j];
            T[(I * BLK + i) * LDS + J * BLK + j] = -sum;
        }
        __syncthreads();
    }
}

/* One CTA per (chunk, value head): everything of the chunk that does not depend on the state --
 * gamma and the decays, L = tril(diag(b) Gamma . K K^T) (§3), T (§4), W = T diag(b e0) K and
 * U = T diag(b) V (§5), P = Gamma . Q K^T (§6) -- into the workspace. */
template <int DK>
__global__ void __launch_bounds__(NTHR) gdn_ck_prep_kernel(Args a) {
    const int64_t c = a.c0 + blockIdx.x;
    const int h = blockIdx.y, kh = h / (a.Hv / a.Hk), ldk = DK + 8, ldv = a.dv + 8;
    int64_t t0;
    int n;
    chunk_span(a, c, t0, n);
    Carve cv{smem_base(), smem_base()};
    PrepSmem m;
    carve_prep(cv, m, DK, a.dv);
    stage_rows(m.k, ldk, a.qkv, a.C, t0, (int64_t)(a.Hk + kh) * DK, n, DK);
    stage_rows(m.q, ldk, a.qkv, a.C, t0, (int64_t)kh * DK, n, DK);
    stage_rows(m.v, ldv, a.qkv, a.C, t0, 2 * (int64_t)a.Hk * DK + (int64_t)h * a.dv, n, a.dv);
    for (int t = threadIdx.x; t < CH; t += nthr()) {
        const bool in = t < n;
        m.s.b[t] = in ? a.beta[(t0 + t) * a.Hv + h] : 0.f;
        m.s.rk[t] = in ? a.rk[(t0 + t) * a.Hk + kh] : 0.f;
        m.s.rqs[t] = in ? a.rq[(t0 + t) * a.Hk + kh] * a.scale : 0.f;
    }
    chunk_decays(a, m.s, t0, n, h, m.gn);
    __syncthreads();
    for (int t = threadIdx.x; t < CH; t += nthr()) m.bek[t] = m.s.b[t] * m.s.e0[t] * m.s.rk[t], m.bb[t] = m.s.b[t];
    const Scal &s = m.s;
    /* L[t, s] = b_t Gamma[t, s] (k_t . k_s) for s < t: raw bf16 k (exact in tf32), the norms after */
    block_gemm<2>(CH, CH, DK, mat(m.k, ldk, 0), mat(m.k, ldk, 0).t(), [&](int t, int u, float v) {
        m.L[t * LDS + u] = u < t ? s.b[t] * decay(s.gam, s.seg, t, u) * s.rk[t] * s.rk[u] * v : 0.f;
    });
    /* P[t, s] = Gamma[t, s] (q_t . k_s), s <= t */
    float *P = ws_P(a, c, h);
    block_gemm<2>(CH, CH, DK, mat(m.q, ldk, 0), mat(m.k, ldk, 0).t(), [&](int t, int u, float v) {
        P[t * CH + u] = decay(s.gam, s.seg, t, u) * s.rqs[t] * s.rk[u] * v;
    });
    __syncthreads();
    solve_unit_lower(m.L, m.T, m.X);
    /* W = T diag(b e0 rk) K_raw, U = T diag(b) V (T split, the raw inputs exact) */
    float *W = ws_W(a, c, h), *U = ws_U(a, c, h), *Tg = ws_T(a, c, h);
    block_gemm<2>(CH, DK, CH, mat(m.T, LDS, 1).cols(m.bek), mat(m.k, ldk, 0), [&](int t, int j, float v) { W[t * DK + j] = v; });
    block_gemm<2>(CH, a.dv, CH, mat(m.T, LDS, 1).cols(m.bb), mat(m.v, ldv, 0),
                  [&](int t, int i, float v) { U[t * a.dv + i] = v; });
    for (int e = threadIdx.x; e < CH * CH; e += nthr()) Tg[e] = m.T[(e / CH) * LDS + e % CH];
    ChunkInfo *ci = ws_info(a, c, h);
    for (int t = threadIdx.x; t < CH; t += nthr()) {
        ci->gam[t] = s.gam[t], ci->seg[t] = s.seg[t], ci->e0[t] = s.e0[t], ci->r[t] = s.r[t], ci->b[t] = s.b[t];
        ci->rk[t] = s.rk[t], ci->rqs[t] = s.rqs[t];
    }
    if (threadIdx.x == 0) ci->n = n, ci->gn = *m.gn;
}

/* ---------------------------------------------------------------- the sequential state pass (§6, §9) */
enum { PASS_FWD = 0, PASS_MAPS = 1, PASS_KEEP = 2 };
struct PassSmem {
    float *S;         /* [RS][dk + 4] the CTA's rows of the state (fp32) */
    float *W;         /* [CH][dk + 4] */
    bf16_t *k, *q;    /* [CH][dk + 8] raw */
    float *U, *D;     /* [CH][RS + 4] the rows' columns of U; of D */
    Scal s;
};
template <class C> __host__ __device__ void carve_pass(C &c, PassSmem &m, int dk, int RS) {
    m.S = c.template take<float>(RS * (dk + 4));
    m.W = c.template take<float>(CH * (dk + 4));
    m.k = c.template take<bf16_t>(CH * (dk + 8));
    m.q = c.template take<bf16_t>(CH * (dk + 8));
    m.U = c.template take<float>(CH * (RS + 4));
    m.D = c.template take<float>(CH * (RS + 4));
    carve_scal(c, m.s);
}

/* One CTA per (value head, RS rows of its state, run of chunks). Rows [i0, i0 + RS) of the state
 * (of dv rows; for the maps, dv + dk rows: B's, then M's, §9) go through the run's chunks in order:
 *     D = U - W S^T;  o = diag(e0) Q S^T + P D (PASS_FWD);  S <- e^{gamma_n} S + D^T diag(r) K.
 * PASS_FWD: one run, from carry [Hv][rows][dk] (the initial state) back into it (the final), the
 *   state before each segment into states [seg][Hv][dk][dv] (NULL: not kept), o written.
 * PASS_MAPS: the same with rows = dv + dk, U = 0 on M's rows, no output.
 * PASS_KEEP: run z is segment z of the group, from states; each chunk's initial state into Sst. */
template <int DK, int RS>
__global__ void __launch_bounds__(NTHR) gdn_ck_pass_kernel(Args a, int mode, int rows, float *carry, float *states,
                                                           bf16_t *o) {
    const int h = blockIdx.x, i0 = blockIdx.y * RS, kh = h / (a.Hv / a.Hk), ldk = DK + 8, lds = DK + 4;
    const bool has_v = i0 < a.dv; /* M's rows write no value */
    Carve cv{smem_base(), smem_base()};
    PassSmem m;
    carve_pass(cv, m, DK, RS);
    int64_t cfirst = a.c0, cend = a.c0 + a.nc;
    if (mode == PASS_KEEP) cfirst = a.c0 + (int64_t)blockIdx.z * a.nsub, cend = cfirst + a.nsub < cend ? cfirst + a.nsub : cend;
    /* the initial rows */
    for (int e = threadIdx.x; e < RS * DK; e += nthr()) {
        const int i = e / DK, j = e % DK;
        m.S[i * lds + j] = mode == PASS_KEEP ? states[((cfirst / a.nsub) * a.Hv + h) * (int64_t)DK * a.dv + (int64_t)j * a.dv + i0 + i]
                                             : carry[((int64_t)h * rows + i0 + i) * DK + j];
    }
    for (int64_t c = cfirst; c < cend; c++) {
        int64_t t0;
        int n;
        chunk_span(a, c, t0, n);
        __syncthreads(); /* the previous chunk's update of S is done */
        if (mode == PASS_FWD && states && c % a.nsub == 0)
            for (int e = threadIdx.x; e < RS * DK; e += nthr()) { /* [dk][dv]: consecutive threads, consecutive rows i */
                const int j = e / RS, i = e % RS;
                states[((c / a.nsub) * a.Hv + h) * (int64_t)DK * a.dv + (int64_t)j * a.dv + i0 + i] = m.S[i * lds + j];
            }
        if (mode == PASS_KEEP) {
            float *dst = ws_Sst(a, c, h);
            for (int e = threadIdx.x; e < RS * DK; e += nthr()) dst[(int64_t)(i0 + e / DK) * DK + e % DK] = m.S[(e / DK) * lds + e % DK];
        }
        if (n == 0) continue;
        /* the chunk: W, raw k and q, U's columns i0.., the scalars */
        const float *Wg = ws_W(a, c, h), *Ug = ws_U(a, c, h);
        for (int e = threadIdx.x; e < CH * DK; e += nthr()) m.W[(e / DK) * lds + e % DK] = Wg[e];
        stage_rows(m.k, ldk, a.qkv, a.C, t0, (int64_t)(a.Hk + kh) * DK, n, DK);
        if (mode == PASS_FWD) stage_rows(m.q, ldk, a.qkv, a.C, t0, (int64_t)kh * DK, n, DK);
        for (int e = threadIdx.x; e < CH * RS; e += nthr())
            m.U[(e / RS) * (RS + 4) + e % RS] = has_v ? Ug[(e / RS) * a.dv + i0 + e % RS] : 0.f;
        const ChunkInfo *ci = ws_info(a, c, h);
        load_scal(m.s, ci);
        const float gn = ci->gn;
        if (c + 1 < cend) prefetch_chunk(a, c + 1, h, kh, has_v ? i0 : -1); /* the next chunk into L2 while this one runs */
        __syncthreads();
        /* D = U - W S^T  [CH x RS, dk deep] (§3, §5) */
        block_gemm<2>(CH, RS, DK, mat(m.W, lds, 1), mat(m.S, lds, 1).t(),
                      [&](int t, int i, float v) { m.D[t * (RS + 4) + i] = m.U[t * (RS + 4) + i] - v; });
        __syncthreads();
        if (mode == PASS_FWD) { /* o = diag(e0) Q S^T + P D  [CH x RS] (§6) */
            const float *P = ws_P(a, c, h);
            for_tiles<2>(CH, RS, [&](int m0, int n0) {
                float acc[2][4];
                zero(acc);
                warp_gemm<2>(acc, mat(m.q, ldk, 0), mat(m.S, lds, 1).t(), m0, n0, DK);
                scale_rows<2>(acc, m0, m.s.eq);
                warp_gemm<2>(acc, mat(P, CH, a.px), mat(m.D, RS + 4, 1), m0, n0, CH);
                tile_each<2>(acc, m0, n0, [&](int t, int i, float v) {
                    if (t < n) o[((t0 + t) * a.Hv + h) * a.dv + i0 + i] = f2bf(v);
                });
            });
            __syncthreads(); /* o read S */
        }
        /* S <- e^{gamma_n} S + D^T diag(r rk) K_raw  [RS x dk, CH deep] (§6) */
        block_gemm<2>(RS, DK, CH, mat(m.D, RS + 4, 1).t().cols(m.s.rrk), mat(m.k, ldk, 0),
                      [&](int i, int j, float v) { m.S[i * lds + j] = gn * m.S[i * lds + j] + v; });
    }
    __syncthreads();
    if (mode != PASS_KEEP)
        for (int e = threadIdx.x; e < RS * DK; e += nthr()) carry[((int64_t)h * rows + i0 + e / DK) * DK + e % DK] = m.S[(e / DK) * lds + e % DK];
}

/* ---------------------------------------------------------------- the reverse pass (§8, §9's C) */
struct BackSmem {
    float *dS;        /* [RS][dk + 4] the CTA's rows of the state's gradient */
    float *W;         /* [CH][dk + 4] */
    bf16_t *k, *q;    /* [CH][dk + 8] */
    float *dO, *dD;   /* [CH][RS + 4] the rows' columns of dO (exact), of dD */
    Scal s;
};
template <class C> __host__ __device__ void carve_back(C &c, BackSmem &m, int dk, int RS) {
    m.dS = c.template take<float>(RS * (dk + 4));
    m.W = c.template take<float>(CH * (dk + 4));
    m.k = c.template take<bf16_t>(CH * (dk + 8));
    m.q = c.template take<bf16_t>(CH * (dk + 8));
    m.dO = c.template take<float>(CH * (RS + 4));
    m.dD = c.template take<float>(CH * (RS + 4));
    carve_scal(c, m.s);
}

/* One CTA per (value head, RS rows of dv), the group's chunks from the last: with dS the gradient of
 * the chunk's final state (dcarry [Hv][dv][dk] in, the group's initial state's out),
 *     dD = diag(r) K dS^T + P^T dO,   dS <- e^{gamma_n} dS + (diag(e0) dO)^T Q - dD^T W
 * and each chunk's dS_n kept in dSn (NULL: c_only, §9's C). */
template <int DK, int RS>
__global__ void __launch_bounds__(NTHR) gdn_ck_back_kernel(Args a, const bf16_t *dout, float *dcarry, int keep) {
    const int h = blockIdx.x, i0 = blockIdx.y * RS, kh = h / (a.Hv / a.Hk), ldk = DK + 8, lds = DK + 4;
    Carve cv{smem_base(), smem_base()};
    BackSmem m;
    carve_back(cv, m, DK, RS);
    for (int e = threadIdx.x; e < RS * DK; e += nthr()) m.dS[(e / DK) * lds + e % DK] = dcarry[((int64_t)h * a.dv + i0 + e / DK) * DK + e % DK];
    for (int64_t c = a.c0 + a.nc - 1; c >= a.c0; c--) {
        int64_t t0;
        int n;
        chunk_span(a, c, t0, n);
        __syncthreads();
        if (keep) {
            float *dst = ws_dSn(a, c, h);
            for (int e = threadIdx.x; e < RS * DK; e += nthr()) dst[(int64_t)(i0 + e / DK) * DK + e % DK] = m.dS[(e / DK) * lds + e % DK];
        }
        if (n == 0) continue;
        const float *Wg = ws_W(a, c, h);
        for (int e = threadIdx.x; e < CH * DK; e += nthr()) m.W[(e / DK) * lds + e % DK] = Wg[e];
        stage_rows(m.k, ldk, a.qkv, a.C, t0, (int64_t)(a.Hk + kh) * DK, n, DK);
        stage_rows(m.q, ldk, a.qkv, a.C, t0, (int64_t)kh * DK, n, DK);
        for (int e = threadIdx.x; e < CH * RS; e += nthr()) {
            const int t = e / RS, i = e % RS;
            m.dO[t * (RS + 4) + i] = t < n ? bf2f(dout[((t0 + t) * a.Hv + h) * a.dv + i0 + i]) : 0.f;
        }
        const ChunkInfo *ci = ws_info(a, c, h);
        load_scal(m.s, ci);
        const float gn = ci->gn;
        if (c > a.c0) prefetch_chunk(a, c - 1, h, kh, -1);
        __syncthreads();
        /* dD = diag(r rk) (K_raw dS^T) + P^T dO  [CH x RS] (§8.1, §8.2) */
        const float *P = ws_P(a, c, h);
        for_tiles<2>(CH, RS, [&](int m0, int n0) {
            float acc[2][4];
            zero(acc);
            warp_gemm<2>(acc, mat(m.k, ldk, 0), mat(m.dS, lds, 1).t(), m0, n0, DK);
            scale_rows<2>(acc, m0, m.s.rrk);
            warp_gemm<2>(acc, mat(P, CH, a.px).t(), mat(m.dO, RS + 4, 0), m0, n0, CH);
            tile_each<2>(acc, m0, n0, [&](int t, int i, float v) { m.dD[t * (RS + 4) + i] = v; });
        });
        __syncthreads();
        /* dS <- e^{gamma_n} dS + dO^T diag(e0 rqs) Q_raw - dD^T W  [RS x dk] (§8, "dS_0, and C") */
        for_tiles<2>(RS, DK, [&](int m0, int n0) {
            float acc[2][4];
            zero(acc);
            warp_gemm<2>(acc, mat(m.dO, RS + 4, 0).t(), mat(m.q, ldk, a.px).rows(m.s.eq), m0, n0, CH);
            warp_gemm<2>(acc, mat(m.dD, RS + 4, 1).t().neg(), mat(m.W, lds, 1), m0, n0, CH);
            tile_each<2>(acc, m0, n0, [&](int i, int j, float v) { m.dS[i * lds + j] = gn * m.dS[i * lds + j] + v; });
        });
    }
    __syncthreads();
    for (int e = threadIdx.x; e < RS * DK; e += nthr()) dcarry[((int64_t)h * a.dv + i0 + e / DK) * DK + e % DK] = m.dS[(e / DK) * lds + e % DK];
}

/* ---------------------------------------------------------------- grad: each chunk alone (§8) */
struct GradSmem {
    bf16_t *k, *q, *dO; /* raw, [CH][d + 8], zero past the end */
    float *B1, *B2, *B3; /* [CH][ldb] (ldb = max(dk, dv) + 4): D then dY_w; dD; dW then dY_u */
    float *X3, *X4;      /* [CH][LDS]: dP . Gamma; Z = diag(b) (dL . Gamma) */
    Scal s;
    float *be0;          /* b e0 */
    double *dgam, *dbeta; /* [CH] */
    float *red;          /* [32]: a value per warp */
};
template <class C> __host__ __device__ void carve_grad(C &c, GradSmem &m, int dk, int dv) {
    const int ldb = (dk > dv ? dk : dv) + 4;
    m.k = c.template take<bf16_t>(CH * (dk + 8));
    m.q = c.template take<bf16_t>(CH * (dk + 8));
    m.dO = c.template take<bf16_t>(CH * (dv + 8));
    m.B1 = c.template take<float>(CH * ldb);
    m.B2 = c.template take<float>(CH * ldb);
    m.B3 = c.template take<float>(CH * ldb);
    m.X3 = c.template take<float>(CH * LDS);
    m.X4 = c.template take<float>(CH * LDS);
    carve_scal(c, m.s);
    m.be0 = c.template take<float>(CH);
    m.dgam = c.template take<double>(CH);
    m.dbeta = c.template take<double>(CH);
    m.red = c.template take<float>(32);
}

/* rows[t] += w[t] * (row t of A . row t of B) over d columns, t < n (one warp a row) */
template <class TA, class TB>
__device__ void row_dots(double *rows, const float *w, int n, const TA *A, int lda, const TB *B, int64_t ldb, int d) {
    for (int t = warp_id(); t < n; t += nwarp()) {
        float sum = 0.f;
        for (int j = lane_id(); j < d; j += 32) sum += to_f(A[t * lda + j]) * to_f(B[t * ldb + j]);
        sum = warp_sum_f(sum);
        if (lane_id() == 0) atomicAdd(&rows[t], (double)(w ? w[t] * sum : sum));
    }
}

/* One CTA per (chunk, value head): the chunk's gradients from its initial state S_0 (Sst), its final
 * state's gradient dS_n (dSn) and the prep's W, U, P, T. Writes dv (bf16, into dqkv's v channels);
 * adds dq, dk (of the prepared q, k; atomics: the value heads of a key head share them), dg, dbeta. */
template <int DK, int THR>
__global__ void __launch_bounds__(THR) gdn_ck_grad_kernel(Args a, const bf16_t *dout, float *dq, float *dk, bf16_t *dqkv,
                                                           float *dg, float *dbeta, int vec2) {
    const int64_t c = a.c0 + blockIdx.x;
    const int h = blockIdx.y, kh = h / (a.Hv / a.Hk), ldk = DK + 8, dv = a.dv, ldo = dv + 8, ldb = (DK > dv ? DK : dv) + 4;
    const int lane = lane_id();
    int64_t t0;
    int n;
    chunk_span(a, c, t0, n);
    if (n == 0) return; /* the whole block: no barrier is skipped by part of it */
    Carve cv{smem_base(), smem_base()};
    GradSmem m;
    carve_grad(cv, m, DK, dv);
    const ChunkInfo *ci = ws_info(a, c, h);
    const float gn = ci->gn;
    const Scal &s = m.s;
    const float *S0 = ws_Sst(a, c, h), *dSn = ws_dSn(a, c, h), *Wg = ws_W(a, c, h), *Ug = ws_U(a, c, h),
                *P = ws_P(a, c, h), *Tg = ws_T(a, c, h);
    const int64_t vc = 2 * (int64_t)a.Hk * DK + (int64_t)h * dv;
    stage_rows(m.k, ldk, a.qkv, a.C, t0, (int64_t)(a.Hk + kh) * DK, n, DK);
    stage_rows(m.q, ldk, a.qkv, a.C, t0, (int64_t)kh * DK, n, DK);
    stage_rows(m.dO, ldo, dout, (int64_t)a.Hv * dv, t0, (int64_t)h * dv, n, dv);
    load_scal(m.s, ci);
    for (int t = threadIdx.x; t < CH; t += nthr()) m.be0[t] = ci->b[t] * ci->e0[t], m.dgam[t] = 0, m.dbeta[t] = 0;
    __syncthreads();

    /* §8.1's single: dgamma_n += e^{gamma_n} <dS_n, S_0> */
    {
        float sum = 0.f;
        for (int64_t e = threadIdx.x; e < (int64_t)dv * DK; e += nthr()) sum += dSn[e] * S0[e];
        sum = warp_sum_f(sum);
        if (lane == 0) m.red[warp_id()] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
            double tot = 0;
            for (int w = 0; w < nwarp(); w++) tot += m.red[w];
            atomicAdd(&m.dgam[n - 1], gn * tot);
        }
    }
    /* D = U - W S_0^T -> B1 (§3) */
    block_gemm<2>(CH, dv, DK, mat(Wg, DK, 1), mat(S0, DK, 1).t(),
                  [&](int t, int i, float v) { m.B1[t * ldb + i] = Ug[t * dv + i] - v; });
    /* dD = diag(r rk) K_raw dS_n^T (§8.1) -> B2; its pairs (n, s): E = d_s . dD[s] */
    block_gemm<2>(CH, dv, DK, mat(m.k, ldk, 0), mat(dSn, DK, 1).t(),
                  [&](int t, int i, float v) { m.B2[t * ldb + i] = s.rrk[t] * v; });
    __syncthreads();
    for (int u = warp_id(); u < n - 1; u += nwarp()) {
        float sum = 0.f;
        for (int i = lane; i < dv; i += 32) sum += m.B1[u * ldb + i] * m.B2[u * ldb + i];
        sum = warp_sum_f(sum);
        if (lane == 0) atomicAdd(&m.dgam[n - 1], (double)sum), atomicAdd(&m.dgam[u], -(double)sum);
    }
    __syncthreads();
    /* dD += P^T dO (§8.2) */
    block_gemm<2>(CH, dv, CH, mat(P, CH, a.px).t(), mat(m.dO, ldo, 0), [&](int t, int i, float v) { m.B2[t * ldb + i] += v; });
    /* dP = dO D^T (s <= t): its pairs E = dP P (s < t); X3 = dP . Gamma (§8.2) */
    for_tiles<2>(CH, CH, [&](int m0, int n0) {
        float acc[2][4], E[2][4];
        zero(acc);
        warp_gemm<2>(acc, mat(m.dO, ldo, 0), mat(m.B1, ldb, 1).t(), m0, n0, dv);
        const int g = lane >> 2, q = lane & 3;
        for (int t = 0; t < 2; t++)
            for (int e = 0; e < 4; e++) {
                const int i = m0 + g + 8 * (e >> 1), j = n0 + 8 * t + 2 * q + (e & 1);
                E[t][e] = j < i ? acc[t][e] * P[i * CH + j] : 0.f;
                m.X3[i * LDS + j] = acc[t][e] * decay(s.gam, s.seg, i, j);
            }
        tile_sums<2>(E, m0, n0, m.dgam, m.dgam);
    });
    __syncthreads();
    /* dq = diag(e0) dO S_0 + (dP . Gamma) K (§8.2); its single: dgamma_t += q_t . (the first term) */
    for_tiles<4>(CH, DK, [&](int m0, int n0) {
        float acc[4][4], x[4][4];
        zero(acc);
        warp_gemm<4>(acc, mat(m.dO, ldo, 0), mat(S0, DK, 1), m0, n0, dv);
        scale_rows<4>(acc, m0, s.e0);
        const int g = lane >> 2, q = lane & 3;
        for (int t = 0; t < 4; t++)
            for (int e = 0; e < 4; e++) {
                const int i = m0 + g + 8 * (e >> 1), j = n0 + 8 * t + 2 * q + (e & 1);
                x[t][e] = acc[t][e] * s.rqs[i] * bf2f(m.q[i * ldk + j]);
            }
        tile_sums<4>(x, m0, n0, m.dgam, NULL);
        warp_gemm<4>(acc, mat(m.X3, LDS, a.px).cols(s.rk), mat(m.k, ldk, 0), m0, n0, CH);
        for (int t = 0; t < 4; t++)
            for (int e = 0; e < 4; e += 2) {
                const int i = m0 + g + 8 * (e >> 1), j = n0 + 8 * t + 2 * q;
                float *p = dq + ((t0 + i) * a.Hk + kh) * DK + j;
                if (i < n) {
                    if (vec2) atomic_add2(p, acc[t][e], acc[t][e + 1]);
                    else atomicAdd(p, acc[t][e]), atomicAdd(p + 1, acc[t][e + 1]);
                }
            }
    });
    /* dk, first part, kept in registers to the end: diag(r) D dS_n (§8.1) + (dP . Gamma)^T Q (§8.2) */
    constexpr int NW = THR / 32, KT = (CH / 16) * (DK / 32), KPW = (KT + NW - 1) / NW; /* 16 x 32 tiles of dk */
    float kacc[KPW][4][4];
#pragma unroll
    for (int u = 0; u < KPW; u++) {
        zero(kacc[u]);
        const int tile = warp_id() + u * NW, m0 = tile / (DK / 32) * 16, n0 = tile % (DK / 32) * 32;
        if (tile < KT) {
            warp_gemm<4>(kacc[u], mat(m.B1, ldb, 1).rows(s.r), mat(dSn, DK, 1), m0, n0, dv);
            warp_gemm<4>(kacc[u], mat(m.X3, LDS, a.px).t().cols(s.rqs), mat(m.q, ldk, 0), m0, n0, CH);
        }
    }
    /* dW = -dD S_0 -> B3 (§8.3) */
    block_gemm<2>(CH, DK, dv, mat(m.B2, ldb, 1), mat(S0, DK, 1), [&](int t, int j, float v) { m.B3[t * ldb + j] = -v; });
    __syncthreads(); /* B1 (D) and X3 read; B3 written */
    /* dY_w = T^T dW -> B1 (§8.4); dbeta_t += e0_t dY_w[t] . k_t, dgamma_t += b_t e0_t (the same) */
    block_gemm<2>(CH, DK, CH, mat(Tg, CH, 1).t(), mat(m.B3, ldb, a.px), [&](int t, int j, float v) { m.B1[t * ldb + j] = v; });
    __syncthreads();
    for (int t = warp_id(); t < n; t += nwarp()) {
        float sum = 0.f;
        for (int j = lane; j < DK; j += 32) sum += m.B1[t * ldb + j] * bf2f(m.k[t * ldk + j]);
        sum = warp_sum_f(sum) * s.rk[t] * s.e0[t];
        if (lane == 0) atomicAdd(&m.dbeta[t], (double)sum), atomicAdd(&m.dgam[t], (double)(s.b[t] * sum));
    }
    /* dY_u = T^T dD -> B3 (§8.4); dv = b dY_u written */
    block_gemm<2>(CH, dv, CH, mat(Tg, CH, 1).t(), mat(m.B2, ldb, 1), [&](int t, int i, float v) {
        m.B3[t * ldb + i] = v;
        if (t < n) dqkv[(t0 + t) * a.C + vc + i] = f2bf(s.b[t] * v);
    });
    __syncthreads();
    /* dbeta_t += dY_u[t] . v_t */
    row_dots(m.dbeta, NULL, n, m.B3, ldb, a.qkv + t0 * a.C + vc, a.C, dv);
    /* dL = -(dY_u U^T + dY_w W^T), strictly lower (§8.4), with A = K K^T beside it for §8.5:
     * G = dL Gamma A; dbeta_t += sum_s G; pairs E = b_t G; Z = diag(b) (dL . Gamma) -> X4 */
    for_tiles<2>(CH, CH, [&](int m0, int n0) {
        float acc[2][4], kk[2][4], G[2][4], E[2][4];
        zero(acc), zero(kk);
        warp_gemm<2>(acc, mat(m.B3, ldb, a.px).neg(), mat(Ug, dv, 1).t(), m0, n0, dv);
        warp_gemm<2>(acc, mat(m.B1, ldb, a.px).neg(), mat(Wg, DK, 1).t(), m0, n0, DK);
        warp_gemm<2>(kk, mat(m.k, ldk, 0), mat(m.k, ldk, 0).t(), m0, n0, DK);
        const int g = lane >> 2, q = lane & 3;
        for (int t = 0; t < 2; t++)
            for (int e = 0; e < 4; e++) {
                const int i = m0 + g + 8 * (e >> 1), j = n0 + 8 * t + 2 * q + (e & 1);
                const float gm = j < i ? decay(s.gam, s.seg, i, j) : 0.f;
                G[t][e] = acc[t][e] * gm * s.rk[i] * s.rk[j] * kk[t][e];
                E[t][e] = s.b[i] * G[t][e];
                m.X4[i * LDS + j] = s.b[i] * gm * acc[t][e];
            }
        tile_sums<2>(G, m0, n0, m.dbeta, NULL);
        tile_sums<2>(E, m0, n0, m.dgam, m.dgam);
    });
    __syncthreads();
    /* dk += diag(b e0) dY_w (§8.4) + Z K + Z^T K (§8.5); added into dk */
#pragma unroll
    for (int u = 0; u < KPW; u++) {
        const int tile = warp_id() + u * NW, m0 = tile / (DK / 32) * 16, n0 = tile % (DK / 32) * 32;
        if (tile >= KT) continue;
        warp_gemm<4>(kacc[u], mat(m.X4, LDS, a.px).cols(s.rk), mat(m.k, ldk, 0), m0, n0, CH);
        warp_gemm<4>(kacc[u], mat(m.X4, LDS, a.px).t().cols(s.rk), mat(m.k, ldk, 0), m0, n0, CH);
        const int g = lane >> 2, q = lane & 3;
        for (int t = 0; t < 4; t++)
            for (int e = 0; e < 4; e += 2) {
                const int i = m0 + g + 8 * (e >> 1), j = n0 + 8 * t + 2 * q;
                const float v0 = kacc[u][t][e] + m.be0[i] * m.B1[i * ldb + j], v1 = kacc[u][t][e + 1] + m.be0[i] * m.B1[i * ldb + j + 1];
                float *p = dk + ((t0 + i) * a.Hk + kh) * DK + j;
                if (i < n) {
                    if (vec2) atomic_add2(p, v0, v1);
                    else atomicAdd(p, v0), atomicAdd(p + 1, v1);
                }
            }
    }
    __syncthreads();
    /* dg: the reverse cumulative sum of dgamma within each document of the chunk, 0 at a start (§8.6) */
    if (threadIdx.x == 0) {
        double run = 0;
        for (int t = n - 1; t >= 0; t--) {
            if (t == n - 1 || s.seg[t + 1] != s.seg[t]) run = 0;
            run += m.dgam[t];
            const int64_t th = (t0 + t) * a.Hv + h;
            dg[th] += a.pos[t0 + t] == 0 ? 0.f : (float)run;
            dbeta[th] += (float)m.dbeta[t];
        }
    }
}

/* ---------------------------------------------------------------- a check of the tiles alone */
/* The first thing to run on a new GPU: three small products through block_gemm, whose inputs the host
 * knows (tests/test_gdn_chunked.c computes them again), so that a wrong fragment layout or tf32
 * conversion shows at once, apart from everything else. in: A [32][24], B [24][16], both row-major, and
 * the same numbers again as At [24][32] and Bt [16][24]; out [3][32][16]:
 *   0: A B read as one tf32 number each (the test's A and B are small integers: exact)
 *   1: At^T Bt^T through transposed views (the same product)
 *   2: A B with both split (the test passes numbers that tf32 cannot hold: about fp32's accuracy) */
__global__ void __launch_bounds__(NTHR) gdn_ck_mma_check_kernel(float *out, const float *A, const float *B, const float *At,
                                                                const float *Bt) {
    block_gemm<2>(32, 16, 24, mat(A, 24, 0), mat(B, 16, 0), [&](int i, int j, float v) { out[i * 16 + j] = v; });
    block_gemm<2>(32, 16, 24, mat(At, 32, 0).t(), mat(Bt, 24, 0).t(), [&](int i, int j, float v) { out[512 + i * 16 + j] = v; });
    block_gemm<2>(32, 16, 24, mat(A, 24, 1), mat(B, 16, 1), [&](int i, int j, float v) { out[1024 + i * 16 + j] = v; });
}
extern "C" void gdn_chunked_mma_check(float *out, const float *A, const float *B, const float *At, const float *Bt,
                                      cudaStream_t st) {
    GDN_LAUNCH(gdn_ck_mma_check_kernel, dim3(1), 0, st, out, A, B, At, Bt);
    KCHECK();
}

/* ---------------------------------------------------------------- launchers */
static int chunked_px = 1;
extern "C" void gdn_chunked_precision(int exact) { chunked_px = exact ? 1 : 0; }
static int64_t ws_budget = 1LL << 30;
extern "C" void gdn_chunked_workspace(int64_t bytes) { ws_budget = bytes > 0 ? bytes : 1LL << 30; }

/* The workspace, grown as needed (the interface has no argument for it): one per device and stream,
 * so that callers on several streams (local ranks sharing a GPU) never share one. Host threads may call
 * at once: the table is behind a lock. */
struct WsSlot {
    int dev;
    cudaStream_t st;
    void *buf;
    size_t have;
};
static WsSlot ws_slots[64];
static int ws_nslots;
static std::mutex ws_lock;
static void *ws_get(size_t bytes, cudaStream_t st) {
    int dev = 0;
    cudaGetDevice(&dev);
    std::lock_guard<std::mutex> hold(ws_lock);
    WsSlot *w = NULL;
    for (int i = 0; i < ws_nslots && !w; i++)
        if (ws_slots[i].dev == dev && ws_slots[i].st == st) w = &ws_slots[i];
    if (!w) {
        if (ws_nslots == 64) { fprintf(stderr, "error: gdn_chunked: workspaces for more than 64 streams\n"); exit(1); }
        w = &ws_slots[ws_nslots++];
        *w = WsSlot{dev, st, NULL, 0};
    }
    if (w->have < bytes) {
        if (w->buf) cudaStreamSynchronize(st), cudaFree(w->buf);
        if (cudaMalloc(&w->buf, bytes) != cudaSuccess) {
            fprintf(stderr, "error: gdn_chunked: cannot allocate its %.1f MB workspace (gdn_chunked_workspace sets the budget)\n",
                    bytes / 1e6);
            exit(1);
        }
        w->have = bytes;
    }
    return w->buf;
}
extern "C" void gdn_chunked_release(void) {
    std::lock_guard<std::mutex> hold(ws_lock);
    cudaDeviceSynchronize();
    for (int i = 0; i < ws_nslots; i++)
        if (ws_slots[i].buf) cudaFree(ws_slots[i].buf);
    ws_nslots = 0;
}

static size_t smem_of(int which, int dk, int dv, int rs = PASS_ROWS) {
    Carve c{NULL, NULL};
    if (which == 0) { PrepSmem m; carve_prep(c, m, dk, dv); }
    else if (which == 1) { PassSmem m; carve_pass(c, m, dk, rs); }
    else if (which == 2) { BackSmem m; carve_back(c, m, dk, rs); }
    else { GradSmem m; carve_grad(c, m, dk, dv); }
    return c.used();
}

/* the group's workspace: what each chunk and value head keeps, by what a call needs */
struct Plan {
    Args a;
    int64_t nchunks;  /* chunks in the sequence (empty ones included) */
    int64_t group;    /* chunks a group: whole segments */
    size_t per_chunk; /* bytes a chunk (all value heads) */
};
static Plan plan(const bf16_t *qkv, const float *g, const float *beta, const float *rq, const float *rk, const int32_t *pos,
                 int64_t S, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t Cs, int bwd) {
    if (dv % PASS_ROWS || Hv % Hk || (dk != 32 && dk != 64 && dk != 128) || Cs < 1) {
        fprintf(stderr, "error: gdn_chunked takes dk 32, 64 or 128 (%lld), dv a multiple of %d (%lld), Hv a multiple of Hk "
                "(%lld, %lld) and a segment of at least 1 token (%lld)\n", (long long)dk, PASS_ROWS, (long long)dv, (long long)Hv,
                (long long)Hk, (long long)Cs);
        exit(1);
    }
    Plan p;
    Args &a = p.a;
    memset(&a, 0, sizeof a);
    a.qkv = qkv, a.g = g, a.beta = beta, a.rq = rq, a.rk = rk, a.pos = pos;
    a.S = S, a.C = 2 * Hk * dk + Hv * dv, a.Cs = Cs, a.Hk = (int)Hk, a.Hv = (int)Hv, a.dk = (int)dk, a.dv = (int)dv;
    a.nsub = (int)((Cs + CH - 1) / CH), a.px = chunked_px, a.scale = 1.f / sqrtf((float)dk);
    const int64_t nseg = (S + Cs - 1) / Cs;
    p.nchunks = nseg * a.nsub;
    const size_t f = 4, head = (size_t)CH * (dk + dv) * f + 2 * (size_t)CH * CH * f + sizeof(ChunkInfo) +
                               (bwd ? 2 * (size_t)dv * dk * f : 0);
    p.per_chunk = head * (size_t)Hv;
    /* the backward's groups are whole segments (each starts from a kept state); the forward's any run */
    int64_t fit = (int64_t)(ws_budget / (int64_t)p.per_chunk);
    if (bwd) fit = fit / a.nsub * a.nsub;
    if (fit < (bwd ? a.nsub : 1)) fit = bwd ? a.nsub : 1;
    p.group = fit < p.nchunks ? fit : p.nchunks;
    return p;
}
/* the workspace's arrays for chunks [c0, c0 + nc) */
static float *carve_ws(Plan &p, int bwd, cudaStream_t st) {
    Args &a = p.a;
    const int64_t G = p.group * a.Hv, carry = (int64_t)a.Hv * a.dv * a.dk; /* a zero state where the caller keeps none */
    unsigned char *w = (unsigned char *)ws_get(p.per_chunk * (size_t)p.group + (size_t)carry * 4 + 512, st);
    Carve c{w, w};
    a.W = c.take<float>(G * CH * a.dk);
    a.U = c.take<float>(G * CH * a.dv);
    a.P = c.take<float>(G * CH * CH);
    a.T = c.take<float>(G * CH * CH);
    a.info = c.take<ChunkInfo>(G);
    a.Sst = bwd ? c.take<float>(G * a.dv * a.dk) : NULL;
    a.dSn = bwd ? c.take<float>(G * a.dv * a.dk) : NULL;
    return c.take<float>(carry);
}

/* gdn_chunked_profile(1): every launch timed by CUDA events (each waited for: the kernels no longer
 * overlap) and summed by kind until gdn_chunked_profile_print, which says where a call's time goes */
enum { K_PREP, K_PASS, K_KEEP, K_BACK, K_GRAD, K_N };
static int prof_on;
static double prof_ms[K_N];
static int prof_n[K_N];
extern "C" void gdn_chunked_profile(int on) {
    prof_on = on;
    for (int k = 0; k < K_N; k++) prof_ms[k] = 0, prof_n[k] = 0;
}
extern "C" void gdn_chunked_profile_print(const char *tag) {
    static const char *name[K_N] = {"prep", "pass", "pass (states again)", "back", "grad"};
    printf("gdn_chunked profile %s:", tag);
    for (int k = 0; k < K_N; k++)
        if (prof_n[k]) printf("  %s %.3f ms (%d launches)", name[k], prof_ms[k], prof_n[k]);
    printf("\n");
    gdn_chunked_profile(prof_on);
}
template <class F> static void timed(int kind, cudaStream_t st, F launch) {
    if (!prof_on) { launch(); return; }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaEventRecord(e0, st);
    launch();
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, e0, e1);
    prof_ms[kind] += ms, prof_n[kind]++;
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

template <typename K> static void allow_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024) cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <int DK> static void run_prep(const Args &a, cudaStream_t st) {
    const size_t sm = smem_of(0, DK, a.dv);
    allow_smem(gdn_ck_prep_kernel<DK>, sm);
    timed(K_PREP, st, [&] { GDN_LAUNCH(gdn_ck_prep_kernel<DK>, dim3((unsigned)a.nc, (unsigned)a.Hv), sm, st, a); });
    KCHECK();
}
/* rows of the state a CTA of the sequential passes carries: 32, or 16 with GDN_CHUNKED_ROWS=16 (twice
 * the CTAs, each a shorter step per chunk: a knob for the GPU session to time) */
static int pass_rows() {
    static int r = 0;
    if (!r) r = getenv("GDN_CHUNKED_ROWS") && atoi(getenv("GDN_CHUNKED_ROWS")) == 16 ? 16 : PASS_ROWS;
    return r;
}
template <int DK, int R>
static void run_pass_r(const Args &a, int mode, int rows, float *carry, float *states, bf16_t *o, cudaStream_t st) {
    const size_t sm = smem_of(1, DK, a.dv, R);
    allow_smem(gdn_ck_pass_kernel<DK, R>, sm);
    const unsigned runs = mode == PASS_KEEP ? (unsigned)((a.nc + a.nsub - 1) / a.nsub) : 1u;
    timed(mode == PASS_KEEP ? K_KEEP : K_PASS, st, [&] {
        GDN_LAUNCH((gdn_ck_pass_kernel<DK, R>), dim3((unsigned)a.Hv, (unsigned)(rows / R), runs), sm, st, a, mode, rows, carry,
                   states, o);
    });
    KCHECK();
}
template <int DK>
static void run_pass(const Args &a, int mode, int rows, float *carry, float *states, bf16_t *o, cudaStream_t st) {
    if (pass_rows() == 16) run_pass_r<DK, 16>(a, mode, rows, carry, states, o, st);
    else run_pass_r<DK, PASS_ROWS>(a, mode, rows, carry, states, o, st);
}
template <int DK, int R> static void run_back_r(const Args &a, const bf16_t *dout, float *dcarry, int keep, cudaStream_t st) {
    const size_t sm = smem_of(2, DK, a.dv, R);
    allow_smem(gdn_ck_back_kernel<DK, R>, sm);
    timed(K_BACK, st, [&] {
        GDN_LAUNCH((gdn_ck_back_kernel<DK, R>), dim3((unsigned)a.Hv, (unsigned)(a.dv / R)), sm, st, a, dout, dcarry, keep);
    });
    KCHECK();
}
template <int DK> static void run_back(const Args &a, const bf16_t *dout, float *dcarry, int keep, cudaStream_t st) {
    if (pass_rows() == 16) run_back_r<DK, 16>(a, dout, dcarry, keep, st);
    else run_back_r<DK, PASS_ROWS>(a, dout, dcarry, keep, st);
}
template <int DK>
static void run_grad(const Args &a, const bf16_t *dout, float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta,
                     cudaStream_t st) {
    const size_t sm = smem_of(3, DK, a.dv);
    allow_smem(gdn_ck_grad_kernel<DK, GRAD_THREADS>, sm);
    const int vec2 = (uintptr_t)dq % 8 == 0 && (uintptr_t)dk % 8 == 0;
    timed(K_GRAD, st, [&] {
        GDN_LAUNCH_T((gdn_ck_grad_kernel<DK, GRAD_THREADS>), dim3((unsigned)a.nc, (unsigned)a.Hv), GRAD_THREADS, sm, st, a, dout, dq, dk,
                     dqkv, dg, dbeta, vec2);
    });
    KCHECK();
}

#define CK_DISPATCH(dk, CALL)                                                                                         \
    switch (dk) {                                                                                                     \
    case 32: { constexpr int DK = 32; CALL; break; }                                                                  \
    case 64: { constexpr int DK = 64; CALL; break; }                                                                  \
    default: { constexpr int DK = 128; CALL; break; }                                                                 \
    }

/* gdn_rule_fwd's contract (kernels.h) */
extern "C" void gdn_chunked_fwd(bf16_t *o, float *states, float *S_io, const bf16_t *qkv, const float *g,
                                const float *beta, const float *rq, const float *rk, const int32_t *pos, int64_t S,
                                int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t chunk, cudaStream_t st) {
    if (S <= 0) return;
    Plan p = plan(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dk, dv, chunk, 0);
    float *zero = carve_ws(p, 0, st), *carry = S_io;
    if (!carry) carry = zero, cudaMemsetAsync(zero, 0, (size_t)(Hv * dv * dk) * 4, st);
    for (int64_t c0 = 0; c0 < p.nchunks; c0 += p.group) {
        p.a.c0 = c0, p.a.nc = (int)(c0 + p.group < p.nchunks ? p.group : p.nchunks - c0);
        CK_DISPATCH(dk, (run_prep<DK>(p.a, st), run_pass<DK>(p.a, PASS_FWD, (int)dv, carry, states, o, st)))
    }
}

/* gdn_rule_maps's contract: maps [Hv, dv + dk, dk], B's rows then M's */
extern "C" void gdn_chunked_maps(float *maps, const bf16_t *qkv, const float *g, const float *beta, const float *rq,
                                 const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk,
                                 int64_t dv, cudaStream_t st);

/* gdn_rule_bwd's contract; scratch is not used (the workspace is the launchers' own) */
extern "C" void gdn_chunked_bwd(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta, float *dS_io,
                                const bf16_t *dout, const float *states, float *scratch, const bf16_t *qkv, const float *g,
                                const float *beta, const float *rq, const float *rk, const int32_t *pos, int64_t S,
                                int64_t Hk, int64_t Hv, int64_t dkh, int64_t dv, int64_t chunk, int c_only,
                                cudaStream_t st) {
    (void)scratch;
    if (!dout) { fprintf(stderr, "error: gdn_chunked_bwd needs the output's gradient (dout is NULL)\n"); exit(1); }
    if (S <= 0) return;
    Plan p = plan(qkv, g, beta, rq, rk, pos, S, Hk, Hv, dkh, dv, chunk, 1);
    float *zero = carve_ws(p, 1, st), *dcarry = dS_io;
    if (!dcarry) dcarry = zero, cudaMemsetAsync(zero, 0, (size_t)(Hv * dv * dkh) * 4, st);
    const int64_t last = (p.nchunks - 1) / p.group * p.group;
    for (int64_t c0 = last; c0 >= 0; c0 -= p.group) {
        p.a.c0 = c0, p.a.nc = (int)(c0 + p.group < p.nchunks ? p.group : p.nchunks - c0);
        CK_DISPATCH(dkh, (run_prep<DK>(p.a, st),
                          c_only ? (void)0 : run_pass<DK>(p.a, PASS_KEEP, (int)dv, NULL, (float *)states, NULL, st),
                          run_back<DK>(p.a, dout, dcarry, !c_only, st),
                          c_only ? (void)0 : run_grad<DK>(p.a, dout, dq, dk, dqkv, dg, dbeta, st)))
    }
}

/* maps: B's dv rows from 0, M's dk rows from I (§9) */
__global__ void gdn_ck_maps_init_kernel(float *maps, int64_t Hv, int dv, int dk) {
    const int64_t rows = dv + dk;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < Hv * rows * dk; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = (e / dk) % rows, j = e % dk;
        maps[e] = i >= dv && i - dv == j ? 1.f : 0.f;
    }
}
extern "C" void gdn_chunked_maps(float *maps, const bf16_t *qkv, const float *g, const float *beta, const float *rq,
                                 const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk,
                                 int64_t dv, cudaStream_t st) {
    Plan p = plan(qkv, g, beta, rq, rk, pos, S > 0 ? S : 1, Hk, Hv, dk, dv, S > 0 ? S : 1, 0);
    const int64_t n = Hv * (dv + dk) * dk;
    GDN_LAUNCH(gdn_ck_maps_init_kernel, dim3((unsigned)((n + NTHR - 1) / NTHR < 4096 ? (n + NTHR - 1) / NTHR : 4096)), 0, st, maps,
               Hv, (int)dv, (int)dk);
    KCHECK();
    if (S <= 0) return;
    carve_ws(p, 0, st);
    for (int64_t c0 = 0; c0 < p.nchunks; c0 += p.group) {
        p.a.c0 = c0, p.a.nc = (int)(c0 + p.group < p.nchunks ? p.group : p.nchunks - c0);
        CK_DISPATCH(dk, (run_prep<DK>(p.a, st), run_pass<DK>(p.a, PASS_MAPS, (int)(dv + dk), maps, NULL, NULL, st)))
    }
}
