/* test_gdn_chunked.c -- the chunked gated delta rule (kernels/gdn_chunked.cu) against the fp64
 * recurrence (tests/ref_gdn.c), on the cases tests/test_cpu.c's test_gdn_chunked uses for the
 * chunked reference, at the kernel's head dims (dk 32, 64 or 128; dv a multiple of 32): segments
 * not a multiple of the chunk, documents mid-chunk, on chunk edges and one token long, a document at
 * token 0 (the initial state forgotten), decay near -20 a token, near-parallel keys with beta near 1,
 * 128 x 128 heads, Qwen3.5-9B's and 27B's head counts (16 key heads, 32 or 48 value heads), and a
 * workspace budget small enough to cut the sequence into several groups. Per case: the forward (o,
 * the final state), the backward (dq, dk, dv, dbeta, the initial state's gradient; dg on a line of its
 * own), the maps M, B (gdn_chunked_maps) and C (gdn_chunked_bwd with c_only), each as test_gpu's
 * relative l2 error. Then, on the GPU, the chunked kernels against the tiled token-by-token ones on the
 * same inputs.
 *
 * Built two ways: build/test_gdn_chunked links the GPU kernels (tests/gdn_chunked_gpu.sh, on an
 * H100/H200); build/test_gdn_chunked_emu (GDN_EMU) links kernels/gdn_chunked.cu compiled for the CPU
 * emulation of tests/gdn_emu.h, and runs the smaller cases (`make test-gdn-emu`; no GPU).
 *
 * Bands (relative l2, as test_gpu's rel_d), from the fp32 simulation (tests/sim_gdn.c; its table in
 * docs/chunked_delta_rule.md §11) for the two precisions of gdn_chunked_precision:
 *   exact (the default: every operand that is not a bf16 input split into two tf32 numbers, about
 *   fp32): the simulation in fp32 with gamma in fp64 is within 4.1e-6 of fp64 on every tensor of its
 *   cases; the bands are the token-by-token rule's own (test_gpu): 1e-4 for every fp32 output (the
 *   final state, dq, dk, dg, dbeta, dS0, M, B, C), 1e-2 for o and dv, written in bf16 (their rounding
 *   alone is ~1.1e-3).
 *   fast (P, dP, dL, dY and the dO e0 / Q e0 products as one tf32 number, the state path still
 *   split): the simulation's "tf32 P dP dL only" row (test_cpu, GDN_SIM_ALL=1) is the measure; its
 *   worst over the cases times 4 is the band here (FAST_BAND below; the near-parallel-key cases set
 *   it).
 * Prints "N passed, M failed". GDN_CHUNKED_FAST=1 runs the fast precision too; GDN_CASE=i runs case i
 * alone (0-based, in CASES' order). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../common/check.h"
#include "../kernels/kernels.h"
#include "ref_gdn.h"
#include "test.h"

#define CK(call)                                                                                        \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) { printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); exit(1); } \
    } while (0)


static cudaStream_t st;

typedef struct {
    const char *name;
    int64_t T, Cs, Hk, Hv, dk, dv;
    int kind;              /* 0 random; 1 strong decay (g near -20); 2 near-parallel keys, beta near 1 */
    const int64_t *starts; /* document starts (pos 0 there) */
    int64_t ns;
    int64_t budget;        /* the workspace's bytes (0: the default); small: several groups */
    int emu;               /* run in the CPU emulation too */
} Case;

static const int64_t DOCS_64[] = {5, 63, 64, 65, 66, 128, 150, 199}; /* 64, 65: 1-token documents; 199 the last token */
static const int64_t DOCS_16[] = {0, 16, 17, 31, 40, 47, 48, 99};   /* 0: the initial state forgotten */
static const int64_t DOCS_Q35[] = {70, 71, 128};
static const int64_t DOCS_LONG[] = {300, 301, 640, 1000};
static const Case CASES[] = {
    {"random, segments of 16, 100 tokens", 100, 16, 1, 2, 32, 32, 0, NULL, 0, 0, 1},
    {"random, segments of 64, 150 tokens", 150, 64, 1, 2, 32, 32, 0, NULL, 0, 0, 1},
    {"random, segments of 100 (chunks of 64 and 36)", 250, 100, 1, 2, 32, 64, 0, NULL, 0, 0, 1},
    {"one token", 1, 16, 1, 2, 32, 32, 0, NULL, 0, 0, 1},
    {"65 tokens: a last chunk of one token", 65, 256, 1, 2, 64, 32, 0, NULL, 0, 0, 1},
    {"documents mid-chunk, on edges, 1 token long (64)", 200, 64, 1, 2, 32, 32, 0, DOCS_64, 8, 0, 1},
    {"documents from token 0, on edges (16)", 100, 16, 1, 2, 32, 32, 0, DOCS_16, 8, 0, 1},
    {"strong decay, g ~ -20 a token (64)", 150, 64, 1, 2, 32, 32, 1, NULL, 0, 0, 1},
    {"strong decay with documents (16)", 100, 16, 1, 2, 32, 32, 1, DOCS_16, 8, 0, 1},
    {"near-parallel keys, beta ~ 1 (64)", 200, 64, 1, 2, 32, 32, 2, NULL, 0, 0, 1},
    {"near-parallel keys, beta ~ 1, documents (64)", 200, 64, 1, 2, 32, 32, 2, DOCS_64, 8, 0, 1},
    {"near-parallel keys, beta ~ 1 (16)", 100, 16, 1, 2, 32, 32, 2, NULL, 0, 0, 1},
    {"dk 64, 3 value heads a key head (64)", 130, 64, 2, 6, 64, 32, 0, DOCS_Q35, 3, 0, 1},
    {"Qwen3.5 heads 128 x 128, documents (64)", 160, 64, 1, 2, 128, 128, 0, DOCS_Q35, 3, 0, 1},
    {"Qwen3.5 heads, near-parallel keys (64)", 160, 64, 1, 2, 128, 128, 2, NULL, 0, 0, 0},
    {"several groups: 1200 tokens, segments of 128, small workspace", 1200, 128, 1, 2, 32, 32, 0, DOCS_LONG, 4, 200000, 1},
    {"Qwen3.5-9B heads (16 / 32, 128 x 128), segments of 256", 600, 256, 16, 32, 128, 128, 0, DOCS_Q35, 3, 0, 0},
    {"Qwen3.5-27B heads (16 / 48, 128 x 128), segments of 256", 600, 256, 16, 48, 128, 128, 2, NULL, 0, 0, 0},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

/* the outputs compared, each a relative l2 error */
enum { E_O, E_S, E_DQ, E_DK, E_DV, E_DG, E_DB, E_DS0, E_M, E_B, E_C, E_N };
static const char *ENAME[E_N] = {"o (bf16)", "final state", "dq", "dk", "dv (bf16)", "dg", "dbeta", "dS0", "M", "B", "C"};
static const double EXACT_BAND[E_N] = {1e-2, 1e-4, 1e-4, 1e-4, 1e-2, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4};
/* the fast precision: 4 x the simulation's worst over test_cpu's cases in "tf32 P dP dL only, gamma fp64"
 * (o 1.3e-3, S 4.9e-7, dq 1.3e-3, dk 2.5e-4, dv 1.2e-3, dg 1.7e-3, dbeta 1.3e-3, dS0 2.4e-4, M 9.2e-7,
 * B 6.7e-7, C 2.2e-4: the near-parallel keys set them), with the exact bands as a floor (o and dv: their
 * bf16 rounding) */
static const double FAST_BAND[E_N] = {1e-2, 1e-4, 6e-3, 1e-3, 1e-2, 7e-3, 6e-3, 1e-3, 1e-4, 1e-4, 1e-3};

static uint64_t seed;
static double rnd(void) { /* [-0.5, 0.5) */
    seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
    return (double)(seed >> 11) / 9007199254740992.0 - 0.5;
}
static uint16_t to_bf16(double x) { /* nearest even */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static double of_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void *dput(const void *h, size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void *dzero(size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemset(d, 0, bytes));
    return d;
}
static void *dpoison(size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemset(d, 0xFF, bytes));
    return d;
}
static float *fget(const float *d, int64_t n) {
    float *h = xmalloc((size_t)n * 4);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(h, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    return h;
}
static float *bget(const bf16_t *d, int64_t n) {
    uint16_t *b = xmalloc((size_t)n * 2);
    float *h = xmalloc((size_t)n * 4);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(b, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) h[i] = (float)of_bf16(b[i]);
    free(b);
    return h;
}
/* ||a - b|| / ||b|| (||a|| where b is 0); NaN if a is not finite */
static double rel(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return NAN;
        num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
#ifndef GDN_EMU
static double rel_ff(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return NAN;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
#endif

/* a case's inputs on the host (what the device gets, and the reference's doubles of the same numbers) */
typedef struct {
    int64_t C;
    uint16_t *qkv, *dout;  /* raw bf16 [T, C], [T, Hv, dv] */
    float *g, *beta, *rq, *rk, *S0, *dSf;
    int32_t *pos;
} In;
static void make_inputs(const Case *c, In *in) {
    const int64_t T = c->T, Hk = c->Hk, Hv = c->Hv, dk = c->dk, dv = c->dv, C = 2 * Hk * dk + Hv * dv;
    in->C = C;
    in->qkv = xmalloc((size_t)(T * C) * 2), in->dout = xmalloc((size_t)(T * Hv * dv) * 2);
    in->g = xmalloc((size_t)(T * Hv) * 4), in->beta = xmalloc((size_t)(T * Hv) * 4);
    in->rq = xmalloc((size_t)(T * Hk) * 4), in->rk = xmalloc((size_t)(T * Hk) * 4);
    in->S0 = xmalloc((size_t)(Hv * dv * dk) * 4), in->dSf = xmalloc((size_t)(Hv * dv * dk) * 4);
    in->pos = xmalloc((size_t)T * 4);
    double *k0 = xmalloc((size_t)(Hk * dk) * 8);
    for (int64_t i = 0; i < Hk * dk; i++) k0[i] = rnd();
    for (int64_t kh = 0; kh < Hk; kh++) { /* near-parallel keys: k0's direction plus noise of norm ~0.032 */
        double n0 = 0;
        for (int64_t e = 0; e < dk; e++) n0 += k0[kh * dk + e] * k0[kh * dk + e];
        for (int64_t e = 0; e < dk; e++) k0[kh * dk + e] /= sqrt(n0);
    }
    for (int64_t t = 0; t < T; t++) {
        for (int64_t kh = 0; kh < Hk; kh++)
            for (int64_t e = 0; e < dk; e++) {
                in->qkv[t * C + kh * dk + e] = to_bf16(2 * rnd());
                in->qkv[t * C + (Hk + kh) * dk + e] =
                    to_bf16(c->kind == 2 ? k0[kh * dk + e] + 0.032 / sqrt((double)dk) * 2 * sqrt(3.0) * rnd() : 2 * rnd());
            }
        for (int64_t e = 0; e < Hv * dv; e++) in->qkv[t * C + 2 * Hk * dk + e] = to_bf16(2 * rnd());
        for (int64_t e = 0; e < Hv * dv; e++) in->dout[t * Hv * dv + e] = to_bf16(rnd());
        for (int64_t h = 0; h < Hv; h++) {
            const int64_t i = t * Hv + h;
            if (c->kind == 1) { /* -exp(A_log) softplus(a + dt_bias), A_log ~ 1.6, dt_bias ~ 4: about -20 */
                const double x = 4 + rnd();
                in->g[i] = (float)(-exp(1.6 + 0.2 * rnd()) * (x > 20 ? x : log1p(exp(x))));
            } else in->g[i] = (float)(c->kind == 2 ? -0.01 * (rnd() + 0.5) : -0.3 * (rnd() + 0.5));
            in->beta[i] = (float)(c->kind == 2 ? 0.995 + 0.009 * rnd() : 0.5 + rnd());
        }
    }
    for (int64_t t = 0; t < T; t++) /* rq, rk: 1 / sqrt(|x|^2 + 1e-6), as gdn_l2_fwd */
        for (int64_t kh = 0; kh < Hk; kh++) {
            double sq = 0, sk = 0;
            for (int64_t e = 0; e < dk; e++) {
                const double q = of_bf16(in->qkv[t * C + kh * dk + e]), k = of_bf16(in->qkv[t * C + (Hk + kh) * dk + e]);
                sq += q * q, sk += k * k;
            }
            in->rq[t * Hk + kh] = (float)(1 / sqrt(sq + 1e-6)), in->rk[t * Hk + kh] = (float)(1 / sqrt(sk + 1e-6));
        }
    for (int64_t i = 0; i < Hv * dv * dk; i++) in->S0[i] = (float)rnd(), in->dSf[i] = (float)rnd();
    /* documents: the tokens before the first start continue one begun earlier (positions from 1000) */
    int64_t last = -1;
    for (int64_t t = 0, d = 0; t < T; t++) {
        if (d < c->ns && c->starts[d] == t) last = t, d++;
        in->pos[t] = (int32_t)(last < 0 ? t + 1000 : t - last);
    }
    free(k0);
}
static void free_inputs(In *in) {
    free(in->qkv); free(in->dout); free(in->g); free(in->beta); free(in->rq); free(in->rk); free(in->S0); free(in->dSf);
    free(in->pos);
}

/* the fp64 truth: the recurrence token by token (ref_gdn, ref_gdn_bwd) with g = -inf at a document's
 * start, q and k prepared from the same bf16 numbers; the maps by ref_gdn_map and the backward from a
 * zero final gradient */
typedef struct { double *o, *S, *dq, *dk, *dv, *dg, *db, *dS0, *M, *B, *Cm; } Ref;
static void reference(const Case *c, const In *in, Ref *r) {
    const int64_t T = c->T, Hk = c->Hk, Hv = c->Hv, dk = c->dk, dv = c->dv, C = in->C, G = Hv / Hk, ms = dv * dk;
    const GdnHeads hh = {Hv, dk, dv};
    double *q = xmalloc((size_t)(T * Hv * dk) * 8), *k = xmalloc((size_t)(T * Hv * dk) * 8), *v = xmalloc((size_t)(T * Hv * dv) * 8);
    double *g = xmalloc((size_t)(T * Hv) * 8), *b = xmalloc((size_t)(T * Hv) * 8), *dO = xmalloc((size_t)(T * Hv * dv) * 8);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hv; h++) {
            for (int64_t e = 0; e < dk; e++) {
                q[(t * Hv + h) * dk + e] = of_bf16(in->qkv[t * C + (h / G) * dk + e]);
                k[(t * Hv + h) * dk + e] = of_bf16(in->qkv[t * C + (Hk + h / G) * dk + e]);
            }
            for (int64_t e = 0; e < dv; e++) {
                v[(t * Hv + h) * dv + e] = of_bf16(in->qkv[t * C + 2 * Hk * dk + h * dv + e]);
                dO[(t * Hv + h) * dv + e] = of_bf16(in->dout[(t * Hv + h) * dv + e]);
            }
            g[t * Hv + h] = in->pos[t] == 0 ? -INFINITY : in->g[t * Hv + h], b[t * Hv + h] = in->beta[t * Hv + h];
        }
    ref_gdn_prepare(&hh, T, q, k);
    r->o = xmalloc((size_t)(T * Hv * dv) * 8), r->S = xmalloc((size_t)(Hv * ms) * 8), r->dS0 = xmalloc((size_t)(Hv * ms) * 8);
    double *dqv = xcalloc((size_t)(T * Hv * dk), 8), *dkv = xcalloc((size_t)(T * Hv * dk), 8);
    r->dv = xcalloc((size_t)(T * Hv * dv), 8), r->dg = xcalloc((size_t)(T * Hv), 8), r->db = xcalloc((size_t)(T * Hv), 8);
    double *S0 = xmalloc((size_t)(Hv * ms) * 8);
    for (int64_t e = 0; e < Hv * ms; e++) r->S[e] = S0[e] = in->S0[e], r->dS0[e] = in->dSf[e];
    ref_gdn(&hh, T, q, k, v, g, b, r->S, r->o);
    ref_gdn_bwd(&hh, T, q, k, v, g, b, S0, dO, r->dS0, dqv, dkv, r->dv, r->dg, r->db);
    r->dq = xcalloc((size_t)(T * Hk * dk), 8), r->dk = xcalloc((size_t)(T * Hk * dk), 8);
    for (int64_t t = 0; t < T; t++) /* summed over the value heads of a key head */
        for (int64_t h = 0; h < Hv; h++)
            for (int64_t e = 0; e < dk; e++) {
                r->dq[(t * Hk + h / G) * dk + e] += dqv[(t * Hv + h) * dk + e];
                r->dk[(t * Hk + h / G) * dk + e] += dkv[(t * Hv + h) * dk + e];
            }
    r->M = xmalloc((size_t)(Hv * dk * dk) * 8), r->B = xmalloc((size_t)(Hv * ms) * 8), r->Cm = xcalloc((size_t)(Hv * ms), 8);
    ref_gdn_map(&hh, T, k, v, g, b, r->M, r->B);
    double *x1 = xcalloc((size_t)(T * Hv * dk), 8), *x2 = xcalloc((size_t)(T * Hv * dk), 8), *x3 = xcalloc((size_t)(T * Hv * dv), 8),
           *x4 = xcalloc((size_t)(T * Hv), 8), *x5 = xcalloc((size_t)(T * Hv), 8);
    ref_gdn_bwd(&hh, T, q, k, v, g, b, S0, dO, r->Cm, x1, x2, x3, x4, x5); /* from dS = 0: C */
    free(x1); free(x2); free(x3); free(x4); free(x5);
    free(q); free(k); free(v); free(g); free(b); free(dO); free(dqv); free(dkv); free(S0);
}
static void free_ref(Ref *r) {
    double *p[] = {r->o, r->S, r->dq, r->dk, r->dv, r->dg, r->db, r->dS0, r->M, r->B, r->Cm};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

/* what a rule's kernels give on a case's inputs (device copies made here) */
typedef struct { float *o, *S, *dq, *dk, *dv, *dg, *db, *dS0, *M, *B, *Cm; } Got;
static void free_got(Got *g) {
    float *p[] = {g->o, g->S, g->dq, g->dk, g->dv, g->dg, g->db, g->dS0, g->M, g->B, g->Cm};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}
/* tiled: kernels/gdn.cu's token-by-token rule instead of the chunked one (GPU build only) */
static void run_rule(const Case *c, const In *in, int tiled, Got *out) {
    const int64_t T = c->T, Hk = c->Hk, Hv = c->Hv, dk = c->dk, dv = c->dv, C = in->C, ms = dv * dk, Cs = c->Cs;
    bf16_t *qkv = dput(in->qkv, (size_t)(T * C) * 2), *dout = dput(in->dout, (size_t)(T * Hv * dv) * 2);
    float *g = dput(in->g, (size_t)(T * Hv) * 4), *beta = dput(in->beta, (size_t)(T * Hv) * 4);
    float *rq = dput(in->rq, (size_t)(T * Hk) * 4), *rk = dput(in->rk, (size_t)(T * Hk) * 4);
    int32_t *pos = dput(in->pos, (size_t)T * 4);
    float *S = dput(in->S0, (size_t)(Hv * ms) * 4), *dS = dput(in->dSf, (size_t)(Hv * ms) * 4);
    float *states = dpoison((size_t)((T + Cs - 1) / Cs * Hv * ms) * 4);
    bf16_t *o = dpoison((size_t)(T * Hv * dv) * 2), *dqkv = dpoison((size_t)(T * C) * 2);
    float *dq = dzero((size_t)(T * Hk * dk) * 4), *dk_ = dzero((size_t)(T * Hk * dk) * 4), *dg = dzero((size_t)(T * Hv) * 4),
          *db = dzero((size_t)(T * Hv) * 4);
    float *maps = dpoison((size_t)(Hv * (dv + dk) * dk) * 4), *Cm = dzero((size_t)(Hv * ms) * 4);
    float *scratch = NULL;
#ifndef GDN_EMU
    if (tiled) {
        scratch = dpoison((size_t)gdn_scratch_floats(Hv, dk, dv, Cs) * 4);
        gdn_rule_fwd(o, states, S, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, Cs, st);
        gdn_rule_bwd(dq, dk_, dqkv, dg, db, dS, dout, states, scratch, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, Cs, 0, st);
        gdn_rule_maps(maps, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, st);
        gdn_rule_bwd(NULL, NULL, NULL, NULL, NULL, Cm, dout, states, scratch, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, Cs, 1, st);
    } else
#endif
    {
        (void)tiled;
        gdn_chunked_fwd(o, states, S, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, Cs, st);
        gdn_chunked_bwd(dq, dk_, dqkv, dg, db, dS, dout, states, NULL, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, Cs, 0, st);
        gdn_chunked_maps(maps, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, st);
        gdn_chunked_bwd(NULL, NULL, NULL, NULL, NULL, Cm, dout, states, NULL, qkv, g, beta, rq, rk, pos, T, Hk, Hv, dk, dv, Cs, 1, st);
    }
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    out->o = bget(o, T * Hv * dv), out->S = fget(S, Hv * ms), out->dq = fget(dq, T * Hk * dk), out->dk = fget(dk_, T * Hk * dk);
    out->dg = fget(dg, T * Hv), out->db = fget(db, T * Hv), out->dS0 = fget(dS, Hv * ms), out->Cm = fget(Cm, Hv * ms);
    float *all = bget(dqkv, T * C), *mp = fget(maps, Hv * (dv + dk) * dk);
    out->dv = xmalloc((size_t)(T * Hv * dv) * 4), out->M = xmalloc((size_t)(Hv * dk * dk) * 4), out->B = xmalloc((size_t)(Hv * ms) * 4);
    for (int64_t t = 0; t < T; t++) memcpy(out->dv + t * Hv * dv, all + t * C + 2 * Hk * dk, (size_t)(Hv * dv) * 4);
    for (int64_t h = 0; h < Hv; h++) {
        memcpy(out->B + h * ms, mp + h * (dv + dk) * dk, (size_t)ms * 4);
        memcpy(out->M + h * dk * dk, mp + (h * (dv + dk) + dv) * dk, (size_t)(dk * dk) * 4);
    }
    free(all); free(mp);
    void *p[] = {qkv, dout, g, beta, rq, rk, pos, S, dS, states, o, dqkv, dq, dk_, dg, db, maps, Cm, scratch};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) if (p[i]) cudaFree(p[i]);
}
static void errors(const Case *c, const Got *x, const Ref *r, double *e) {
    const int64_t T = c->T, Hk = c->Hk, Hv = c->Hv, dk = c->dk, dv = c->dv, ms = Hv * dv * dk;
    e[E_O] = rel(x->o, r->o, T * Hv * dv), e[E_S] = rel(x->S, r->S, ms), e[E_DQ] = rel(x->dq, r->dq, T * Hk * dk);
    e[E_DK] = rel(x->dk, r->dk, T * Hk * dk), e[E_DV] = rel(x->dv, r->dv, T * Hv * dv), e[E_DG] = rel(x->dg, r->dg, T * Hv);
    e[E_DB] = rel(x->db, r->db, T * Hv), e[E_DS0] = rel(x->dS0, r->dS0, ms), e[E_M] = rel(x->M, r->M, Hv * dk * dk);
    e[E_B] = rel(x->B, r->B, ms), e[E_C] = rel(x->Cm, r->Cm, ms);
}

static void run_case(const Case *c, int exact, double *worst) {
    In in;
    Ref r;
    Got x;
    seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)(c - CASES) * 7919;
    make_inputs(c, &in);
    reference(c, &in, &r);
    gdn_chunked_precision(exact);
    gdn_chunked_workspace(c->budget);
    run_rule(c, &in, 0, &x);
    double e[E_N];
    errors(c, &x, &r, e);
    const double *band = exact ? EXACT_BAND : FAST_BAND;
    printf("  %s [%s, %lld tokens, Hk %lld Hv %lld, %lld x %lld, segments of %lld]\n", c->name, exact ? "exact" : "fast",
           (long long)c->T, (long long)c->Hk, (long long)c->Hv, (long long)c->dk, (long long)c->dv, (long long)c->Cs);
    printf("   ");
    for (int w = 0; w < E_N; w++)
        if (w != E_DG) printf(" %s %.1e%s", ENAME[w], e[w], e[w] <= band[w] ? "" : "!");
    printf("\n    dg %.2e (band %.0e)\n", e[E_DG], band[E_DG]);
    for (int w = 0; w < E_N; w++) {
        EXPECT_LE(e[w], band[w], "chunked %s, %s: %s rel err %.3e > %.0e", exact ? "exact" : "fast", c->name, ENAME[w], e[w], band[w]);
        if (worst) worst[w] = fmax(worst[w], e[w]);
    }
#ifndef GDN_EMU
    if (exact) { /* the same inputs through the tiled token-by-token kernels (gdn.cu): they must agree */
        Got y;
        run_rule(c, &in, 1, &y);
        double et[E_N], d[E_N];
        errors(c, &y, &r, et);
        const int64_t T = c->T, Hv = c->Hv, dv = c->dv, dk = c->dk, ms = Hv * dv * dk, Hk = c->Hk;
        d[E_O] = rel_ff(x.o, y.o, T * Hv * dv), d[E_S] = rel_ff(x.S, y.S, ms), d[E_DQ] = rel_ff(x.dq, y.dq, T * Hk * dk);
        d[E_DK] = rel_ff(x.dk, y.dk, T * Hk * dk), d[E_DV] = rel_ff(x.dv, y.dv, T * Hv * dv), d[E_DG] = rel_ff(x.dg, y.dg, T * Hv);
        d[E_DB] = rel_ff(x.db, y.db, T * Hv), d[E_DS0] = rel_ff(x.dS0, y.dS0, ms), d[E_M] = rel_ff(x.M, y.M, Hv * dk * dk);
        d[E_B] = rel_ff(x.B, y.B, ms), d[E_C] = rel_ff(x.Cm, y.Cm, ms);
        printf("    chunked vs tiled:");
        for (int w = 0; w < E_N; w++) printf(" %s %.1e", ENAME[w], d[w]);
        printf("\n    (tiled vs fp64:");
        for (int w = 0; w < E_N; w++) printf(" %s %.1e", ENAME[w], et[w]);
        printf(")\n");
        for (int w = 0; w < E_N; w++) /* both within their bands of the truth, so within the sum of each other */
            EXPECT_LE(d[w], 2 * band[w], "chunked vs tiled, %s: %s differ by %.3e > %.0e", c->name, ENAME[w], d[w], 2 * band[w]);
        free_got(&y);
    }
#endif
    free_got(&x);
    free_ref(&r);
    free_inputs(&in);
}

/* the tiles alone first (gdn_chunked_mma_check): small integers, exact in tf32, through plain and
 * transposed views; then numbers tf32 cannot hold, through split operands. A wrong fragment layout or
 * tf32 conversion fails here by O(1), before any case. */
static void test_mma_tiles(void) {
    float A[32 * 24], B[24 * 16], At[24 * 32], Bt[16 * 24], A3[32 * 24], B3[24 * 16], At3[24 * 32], Bt3[16 * 24];
    for (int i = 0; i < 32; i++)
        for (int k = 0; k < 24; k++) {
            A[i * 24 + k] = At[k * 32 + i] = (float)((i * 7 + k * 3) % 9 - 4);
            A3[i * 24 + k] = At3[k * 32 + i] = (float)(1.0 + (i * 24 + k) * 1.0e-5 + 3.0e-7 * (k % 5));
        }
    for (int k = 0; k < 24; k++)
        for (int j = 0; j < 16; j++) {
            B[k * 16 + j] = Bt[j * 24 + k] = (float)((k * 5 + j * 11) % 7 - 3);
            B3[k * 16 + j] = Bt3[j * 24 + k] = (float)(0.5 - (k * 16 + j) * 2.0e-5 + 1.0e-7 * (j % 3));
        }
    float *d[9];
    const float *h[8] = {A, B, At, Bt, A3, B3, At3, Bt3};
    const size_t n[8] = {sizeof A, sizeof B, sizeof At, sizeof Bt, sizeof A3, sizeof B3, sizeof At3, sizeof Bt3};
    for (int i = 0; i < 8; i++) d[i] = dput(h[i], n[i]);
    d[8] = dpoison(3 * 512 * 4);
    gdn_chunked_mma_check(d[8], d[0], d[1], d[2], d[3], st);
    float *o1 = fget(d[8], 3 * 512);
    gdn_chunked_mma_check(d[8], d[4], d[5], d[6], d[7], st);
    float *o2 = fget(d[8], 3 * 512);
    double e_plain = 0, e_t = 0, e_split = 0, e_one = 0, mag = 0;
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 16; j++) {
            double c = 0, c3 = 0;
            for (int k = 0; k < 24; k++) c += (double)A[i * 24 + k] * B[k * 16 + j], c3 += (double)A3[i * 24 + k] * B3[k * 16 + j];
            e_plain = fmax(e_plain, fabs(o1[i * 16 + j] - c)), e_t = fmax(e_t, fabs(o1[512 + i * 16 + j] - c));
            e_split = fmax(e_split, fabs(o2[1024 + i * 16 + j] - c3)), e_one = fmax(e_one, fabs(o2[i * 16 + j] - c3));
            mag = fmax(mag, fabs(c3));
            if (!isfinite(o1[i * 16 + j]) || !isfinite(o1[512 + i * 16 + j]) || !isfinite(o2[1024 + i * 16 + j])) e_plain = NAN;
        }
    printf("  tensor-core tiles: integers exact %.1e, through transposed views %.1e; split operands %.1e of %.1f "
           "(one tf32 number each: %.1e)\n", e_plain, e_t, e_split, mag, e_one);
    EXPECT_LE(e_plain, 0.0, "mma tiles: a product of small integers is off by %.3e (the fragment layout?)", e_plain);
    EXPECT_LE(e_t, 0.0, "mma tiles: the same through transposed views is off by %.3e", e_t);
    EXPECT_LE(e_split, 2e-6 * mag, "mma tiles: split operands off by %.3e of %.1f (the split or tf32 conversion?)", e_split, mag);
    EXPECT(e_one > 10 * e_split, "mma tiles: one tf32 number each (%.3e) should lose more than split operands (%.3e)", e_one, e_split);
    for (int i = 0; i < 9; i++) cudaFree(d[i]);
    free(o1); free(o2);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
#ifdef GDN_EMU
    const int emu = 1;
    printf("test_gdn_chunked: the chunked rule's kernels in the CPU emulation (tests/gdn_emu.h)\n");
#else
    const int emu = 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) { printf("test_gdn_chunked: no usable GPU\n"); return 1; }
    CK(cudaStreamCreate(&st));
#endif
    test_mma_tiles();
    const int fast = getenv("GDN_CHUNKED_FAST") != NULL, only = getenv("GDN_CASE") ? atoi(getenv("GDN_CASE")) : -1;
    double worst[2][E_N] = {{0}};
    for (int ci = 0; ci < NCASES; ci++) {
        if ((emu && !CASES[ci].emu && only < 0) || (only >= 0 && ci != only)) continue;
        run_case(&CASES[ci], 1, worst[0]);
        if (fast) run_case(&CASES[ci], 0, worst[1]);
    }
    for (int m = 0; m < 1 + fast; m++) {
        printf("  worst over the cases (%s):", m ? "fast" : "exact");
        for (int w = 0; w < E_N; w++) printf(" %s %.1e", ENAME[w], worst[m][w]);
        printf("\n");
    }
    gdn_chunked_precision(1);
    gdn_chunked_workspace(0);
    return test_summary();
}
