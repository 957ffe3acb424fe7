/* sim_gdn.c -- the chunked rule in float, GEMM by GEMM, as a kernel would run it (sim_gdn.h says why;
 * docs/chunked_delta_rule.md derives each product, section numbers quoted). One head and one chunk
 * at a time; every matrix is a plain row-major float array. */
#include "sim_gdn.h"

#include <math.h>
#include <string.h>

#include "../common/check.h"

#define BLK 16 /* the solve's diagonal blocks */
/* a GEMM operand's precision, by what it holds (sim_gdn.h's SimOpts) */
#define PX op->mma   /* inputs (q, k, v, dO: exact in bf16) and the rest: P, dP, dL, dY, ... */
#define PT op->tri   /* (I + L)^-1 */
#define PD op->vals  /* the values written D, and dD */
#define PS op->state /* a state, or a state's gradient */
#define PW op->wy    /* the WY factors U, W and the scaled keys they and the state update read (b e0 K, K~) */

/* x rounded to nearest even at p's mantissa: bf16 keeps 8 bits (7 stored), tf32 11 (10 stored) */
static float round_to(SimPrec p, float x) {
    if (p == SIM_FP32 || !isfinite(x)) return x;
    const int drop = p == SIM_BF16 ? 16 : 13;
    uint32_t u;
    memcpy(&u, &x, 4);
    u += ((1u << (drop - 1)) - 1) + ((u >> drop) & 1);
    u &= ~((1u << drop) - 1);
    memcpy(&x, &u, 4);
    return x;
}

/* Cm [m, n] (ldc) = beta0 Cm + alpha op(A) op(B): op(A) [m, kk] is A [m, kk] (lda) or, ta, A^T with A
 * [kk, m]; op(B) [kk, n] is B or, tb, B^T with B [n, kk]. A rounded to pa, B to pb, the sum in float (a
 * tensor core's fp32 accumulator). */
static void gemm(SimPrec pa, SimPrec pb, float *Cm, int64_t ldc, const float *A, int64_t lda, int ta, const float *B, int64_t ldb,
                 int tb, int64_t m, int64_t n, int64_t kk, float alpha, float beta0) {
    float *a = xmalloc((size_t)(m * kk) * 4), *b = xmalloc((size_t)(kk * n) * 4);
    for (int64_t i = 0; i < m; i++)
        for (int64_t l = 0; l < kk; l++) a[i * kk + l] = round_to(pa, ta ? A[l * lda + i] : A[i * lda + l]);
    for (int64_t l = 0; l < kk; l++)
        for (int64_t j = 0; j < n; j++) b[l * n + j] = round_to(pb, tb ? B[j * ldb + l] : B[l * ldb + j]);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.f;
            for (int64_t l = 0; l < kk; l++) s += a[i * kk + l] * b[l * n + j];
            Cm[i * ldc + j] = (beta0 != 0.f ? beta0 * Cm[i * ldc + j] : 0.f) + alpha * s;
        }
    free(a); free(b);
}

typedef struct {
    int64_t n, K, V;
    float *q, *k, *v, *g, *b; /* the chunk's inputs */
    float *gam;               /* [n] log-decay since the chunk's or the current document's start (fp32 sum) */
    double *gam64;            /* the same summed in fp64 (SimOpts gam64) */
    int64_t *seg;             /* [n] document starts in the chunk up to t */
    float *e0, *r;            /* [n] decay from the chunk's start to t; from s to the chunk's end */
    float *Gm;                /* [n, n] decay from s to t, s <= t; 0 above the diagonal and across documents */
    float *A, *L, *Tm;        /* [n, n] K K^T; L; (I + L)^-1 */
    float *Y;                 /* [n, dv + dk] diag(b) V, then diag(b e0) K (U's and W's right-hand sides) */
    float *U, *W, *Kt, *D;    /* [n, dv], [n, dk], [n, dk] diag(r) K, [n, dv] the values written */
    float *QK, *P, *QS;       /* [n, n] Q K^T; Gm . Q K^T; [n, dv] Q S0^T */
} SChunk;

static void sc_alloc(SChunk *c, int64_t C, int64_t K, int64_t V) {
    c->K = K, c->V = V;
    float **f[] = {&c->q, &c->k, &c->v, &c->g, &c->b, &c->gam, &c->e0, &c->r, &c->Gm, &c->A, &c->L, &c->Tm, &c->Y,
                   &c->U, &c->W, &c->Kt, &c->D, &c->QK, &c->P, &c->QS};
    const int64_t len[] = {C * K, C * K, C * V, C, C, C, C, C, C * C, C * C, C * C, C * C, C * (V + K),
                           C * V, C * K, C * K, C * V, C * C, C * C, C * V};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = xcalloc((size_t)len[i], 4);
    c->seg = xcalloc((size_t)C, sizeof(int64_t));
    c->gam64 = xcalloc((size_t)C, 8);
}
static void sc_free(SChunk *c) {
    float *f[] = {c->q, c->k, c->v, c->g, c->b, c->gam, c->e0, c->r, c->Gm, c->A, c->L, c->Tm, c->Y,
                  c->U, c->W, c->Kt, c->D, c->QK, c->P, c->QS};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    free(c->seg); free(c->gam64);
}

/* (I + L)^-1 (section 4): each 16 x 16 diagonal block by forward substitution in fp32, then block row
 * I's blocks Tm_IJ = -Tm_II (L_I[J, I) Tm_[J, I)J), two GEMMs a block (the sum over the blocks from J
 * to I-1 is one GEMM of depth 16 (I - J)) */
static void solve(SimPrec p, int64_t n, const float *L, float *Tm) {
    memset(Tm, 0, (size_t)(n * n) * 4);
    float X[BLK * BLK];
    for (int64_t i0 = 0; i0 < n; i0 += BLK) {
        const int64_t bi = i0 + BLK < n ? BLK : n - i0;
        for (int64_t t = i0; t < i0 + bi; t++) {
            Tm[t * n + t] = 1.f;
            for (int64_t s = i0; s < t; s++) {
                float a = 0.f;
                for (int64_t m = s; m < t; m++) a += L[t * n + m] * Tm[m * n + s];
                Tm[t * n + s] = -a;
            }
        }
        for (int64_t j0 = 0; j0 < i0; j0 += BLK) {
            gemm(p, p, X, BLK, L + i0 * n + j0, n, 0, Tm + j0 * n + j0, n, 0, bi, BLK, i0 - j0, 1.f, 0.f);
            gemm(p, p, Tm + i0 * n + j0, n, Tm + i0 * n + i0, n, 0, X, BLK, 0, bi, BLK, bi, -1.f, 0.f);
        }
    }
}

/* gather the chunk and everything it needs whatever the state (sections 2-5): gam, seg, decays, K K^T,
 * L, the solve, U (V non-NULL), W, Kt; q non-NULL: Q K^T and P too */
static void sc_load(const SimOpts *op, SChunk *c, const GdnHeads *h, int64_t c0, int64_t n, int64_t j, const float *q,
                    const float *k, const float *v, const float *g, const float *beta) {
    const int64_t H = h->H, K = c->K, V = c->V;
    c->n = n;
    for (int64_t t = 0; t < n; t++) {
        const int64_t i = (c0 + t) * H + j;
        if (q) memcpy(c->q + t * K, q + i * K, (size_t)K * 4);
        memcpy(c->k + t * K, k + i * K, (size_t)K * 4);
        if (v) memcpy(c->v + t * V, v + i * V, (size_t)V * 4);
        c->g[t] = g[i], c->b[t] = beta[i];
        const int st = isinf(g[i]) && g[i] < 0;
        c->seg[t] = (t ? c->seg[t - 1] : 0) + st;
        c->gam[t] = st ? 0.f : (t ? c->gam[t - 1] : 0.f) + g[i];
        c->gam64[t] = st ? 0 : (t ? c->gam64[t - 1] : 0) + (double)g[i];
    }
    for (int64_t t = 0; t < n; t++) { /* exponents of differences, all <= 0; 0 by a select, never a product */
        c->e0[t] = c->seg[t] != 0 ? 0.f : op->gam64 ? (float)exp(c->gam64[t]) : expf(c->gam[t]);
        for (int64_t s = 0; s < n; s++)
            c->Gm[t * n + s] = s > t || c->seg[s] != c->seg[t] ? 0.f
                               : op->gam64                     ? (float)exp(c->gam64[t] - c->gam64[s])
                                                               : expf(c->gam[t] - c->gam[s]);
    }
    for (int64_t s = 0; s < n; s++) c->r[s] = c->Gm[(n - 1) * n + s];
    gemm(PX, PX, c->A, n, c->k, K, 0, c->k, K, 1, n, n, K, 1.f, 0.f);
    for (int64_t t = 0; t < n; t++)
        for (int64_t s = 0; s < n; s++) c->L[t * n + s] = s < t ? c->b[t] * c->Gm[t * n + s] * c->A[t * n + s] : 0.f;
    solve(op->solve, n, c->L, c->Tm);
    const int64_t ldy = V + K;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t e = 0; e < V; e++) c->Y[t * ldy + e] = v ? c->b[t] * c->v[t * V + e] : 0.f;
        for (int64_t e = 0; e < K; e++) c->Y[t * ldy + V + e] = c->b[t] * c->e0[t] * c->k[t * K + e];
        for (int64_t e = 0; e < K; e++) c->Kt[t * K + e] = c->r[t] * c->k[t * K + e];
    }
    if (v) gemm(PT, PW, c->U, V, c->Tm, n, 0, c->Y, ldy, 0, n, V, n, 1.f, 0.f);
    gemm(PT, PW, c->W, K, c->Tm, n, 0, c->Y + V, ldy, 0, n, K, n, 1.f, 0.f);
    if (q) {
        gemm(PX, PX, c->QK, n, c->q, K, 0, c->k, K, 1, n, n, K, 1.f, 0.f);
        for (int64_t m = 0; m < n * n; m++) c->P[m] = c->Gm[m] * c->QK[m];
    }
}

/* D = U - W S^T (section 3), S [V, K] */
static void sc_written(const SimOpts *op, SChunk *c, const float *S) {
    memcpy(c->D, c->U, (size_t)(c->n * c->V) * 4);
    gemm(PW, PS, c->D, c->V, c->W, c->K, 0, S, c->K, 1, c->n, c->V, c->K, -1.f, 1.f);
}

/* S <- e0[n-1] S + D^T Kt (section 6); o [n, V] = diag(e0) Q S^T + P D (NULL: not wanted) */
static void sc_forward(const SimOpts *op, SChunk *c, float *S, float *o) {
    const int64_t n = c->n, K = c->K, V = c->V;
    sc_written(op, c, S);
    if (o) {
        gemm(PX, PS, o, V, c->q, K, 0, S, K, 1, n, V, K, 1.f, 0.f);
        for (int64_t t = 0; t < n; t++)
            for (int64_t e = 0; e < V; e++) o[t * V + e] *= c->e0[t];
        gemm(PX, PD, o, V, c->P, n, 0, c->D, V, 0, n, V, n, 1.f, 1.f);
    }
    gemm(PD, PW, S, K, c->D, V, 1, c->Kt, K, 0, V, K, n, 1.f, c->e0[n - 1]);
}

void sim_gdn_fwd(const SimOpts *op, const GdnHeads *h, int64_t T, int64_t C, const float *q, const float *k,
                 const float *v, const float *g, const float *beta, float *S, float *o) {
    const int64_t H = h->H, K = h->dk, V = h->dv;
    SChunk c;
    sc_alloc(&c, C, K, V);
    float *oc = xmalloc((size_t)(C * V) * 4);
    for (int64_t j = 0; j < H; j++)
        for (int64_t c0 = 0; c0 < T; c0 += C) {
            const int64_t n = T - c0 < C ? T - c0 : C;
            sc_load(op, &c, h, c0, n, j, q, k, v, g, beta);
            sc_forward(op, &c, S + j * V * K, oc);
            for (int64_t t = 0; t < n; t++) memcpy(o + ((c0 + t) * H + j) * V, oc + t * V, (size_t)V * 4);
        }
    sc_free(&c);
    free(oc);
}

/* The chunk's backward (section 8) from S0 and dO [n, V]: dS the end state's gradient in, the start's
 * out; dq, dk [n, K], dv [n, V], dg, db [n] written. In a kernel the first part (dD and dS's update)
 * is the sequential pass over chunks; the rest runs on every chunk at once from dD and S0. */
static void sc_backward(const SimOpts *op, SChunk *c, const float *S0, const float *dO, float *dS, float *dq, float *dk,
                        float *dv, float *dg, float *db) {
    const int64_t n = c->n, K = c->K, V = c->V;
    sc_written(op, c, S0);
    float *dD = xmalloc((size_t)(n * V) * 4), *dS0 = xmalloc((size_t)(V * K) * 4), *dOe = xmalloc((size_t)(n * V) * 4),
          *dP = xmalloc((size_t)(n * n) * 4), *DdS = xmalloc((size_t)(n * K) * 4), *dW = xmalloc((size_t)(n * K) * 4),
          *dYu = xmalloc((size_t)(n * V) * 4), *dYw = xmalloc((size_t)(n * K) * 4), *dL = xmalloc((size_t)(n * n) * 4),
          *E = xcalloc((size_t)(n * n), 4), *single = xcalloc((size_t)n, 4), *dgam = xmalloc((size_t)n * 4);
    /* (8.1, 8.2) dD = Kt dS^T + P^T dO;  dS0 = e0[n-1] dS + (diag(e0) dO)^T Q - dD^T W  (8.3) */
    gemm(PW, PS, dD, V, c->Kt, K, 0, dS, K, 1, n, V, K, 1.f, 0.f);
    gemm(PX, PX, dD, V, c->P, n, 1, dO, V, 0, n, V, n, 1.f, 1.f);
    for (int64_t t = 0; t < n; t++)
        for (int64_t e = 0; e < V; e++) dOe[t * V + e] = c->e0[t] * dO[t * V + e];
    memcpy(dS0, dS, (size_t)(V * K) * 4);
    gemm(PX, PX, dS0, K, dOe, V, 1, c->q, K, 0, V, K, n, 1.f, c->e0[n - 1]);
    gemm(PD, PW, dS0, K, dD, V, 1, c->W, K, 0, V, K, n, -1.f, 1.f);
    /* the singles of dgamma: e0[n-1] <dS, S0>, e0_t dO_t . S0 q_t */
    float sd = 0.f; /* by rows, then over them (a reduction tree's order, roughly) */
    for (int64_t i = 0; i < V; i++) {
        float a = 0.f;
        for (int64_t e = 0; e < K; e++) a += dS[i * K + e] * S0[i * K + e];
        sd += a;
    }
    single[n - 1] = c->e0[n - 1] * sd;
    gemm(PX, PS, c->QS, V, c->q, K, 0, S0, K, 1, n, V, K, 1.f, 0.f);
    for (int64_t t = 0; t < n; t++) {
        float a = 0.f;
        for (int64_t e = 0; e < V; e++) a += dO[t * V + e] * c->QS[t * V + e];
        single[t] += c->e0[t] * a;
    }
    /* (8.2) dP = dO D^T (s <= t); dq = diag(e0) dO S0 + (dP . Gm) K; dk = (dP . Gm)^T Q; E = dP . P (s < t) */
    gemm(PX, PD, dP, n, dO, V, 0, c->D, V, 1, n, n, V, 1.f, 0.f);
    for (int64_t t = 0; t < n; t++)
        for (int64_t s = 0; s < n; s++) {
            if (s < t) E[t * n + s] = dP[t * n + s] * c->P[t * n + s];
            dP[t * n + s] *= c->Gm[t * n + s];
        }
    gemm(PX, PS, dq, K, dOe, V, 0, S0, K, 0, n, K, V, 1.f, 0.f);
    gemm(PX, PX, dq, K, dP, n, 0, c->k, K, 0, n, K, n, 1.f, 1.f);
    gemm(PX, PX, dk, K, dP, n, 1, c->q, K, 0, n, K, n, 1.f, 0.f);
    /* (8.1) dk += diag(r) D dS; the end pairs E[n-1, s] = r_s k_s . (dS^T d_s) */
    gemm(PD, PS, DdS, K, c->D, V, 0, dS, K, 0, n, K, V, 1.f, 0.f);
    for (int64_t s = 0; s < n; s++) {
        float a = 0.f;
        for (int64_t e = 0; e < K; e++) dk[s * K + e] += c->r[s] * DdS[s * K + e], a += c->k[s * K + e] * DdS[s * K + e];
        if (s < n - 1) E[(n - 1) * n + s] += c->r[s] * a;
    }
    /* (8.3) dW = -dD S0 */
    gemm(PD, PS, dW, K, dD, V, 0, S0, K, 0, n, K, V, -1.f, 0.f);
    /* (8.4) dYu = Tm^T dD, dYw = Tm^T dW; dL = -(dYu U^T + dYw W^T), strictly lower */
    gemm(PT, PD, dYu, V, c->Tm, n, 1, dD, V, 0, n, V, n, 1.f, 0.f);
    gemm(PT, PX, dYw, K, c->Tm, n, 1, dW, K, 0, n, K, n, 1.f, 0.f);
    gemm(PX, PW, dL, n, dYu, V, 0, c->U, V, 1, n, n, V, -1.f, 0.f);
    gemm(PX, PW, dL, n, dYw, K, 0, c->W, K, 1, n, n, K, -1.f, 1.f);
    for (int64_t t = 0; t < n; t++) {
        float yu = 0.f, yk = 0.f;
        for (int64_t e = 0; e < V; e++) dv[t * V + e] = c->b[t] * dYu[t * V + e], yu += dYu[t * V + e] * c->v[t * V + e];
        for (int64_t e = 0; e < K; e++) dk[t * K + e] += c->b[t] * c->e0[t] * dYw[t * K + e], yk += dYw[t * K + e] * c->k[t * K + e];
        db[t] = yu + c->e0[t] * yk;
        single[t] += c->b[t] * c->e0[t] * yk;
        /* (8.5) L = b Gm A: db_t += sum_s dL Gm A; E += b dL Gm A; dL <- b dL Gm for dk */
        for (int64_t s = 0; s < n; s++) {
            if (s >= t) { dL[t * n + s] = 0.f; continue; }
            const float G = dL[t * n + s] * c->Gm[t * n + s] * c->A[t * n + s];
            db[t] += G;
            E[t * n + s] += c->b[t] * G;
            dL[t * n + s] *= c->b[t] * c->Gm[t * n + s];
        }
    }
    gemm(PX, PX, dk, K, dL, n, 0, c->k, K, 0, n, K, n, 1.f, 1.f);
    gemm(PX, PX, dk, K, dL, n, 1, c->k, K, 0, n, K, n, 1.f, 1.f);
    /* (8.6) dg: per document, from the chunk's end back */
    if (!op->dg_pairs) {
        for (int64_t t = 0; t < n; t++) { /* dgamma_t = single_t + row t's pairs - column t's */
            float a = single[t];
            for (int64_t s = 0; s < t; s++) a += E[t * n + s];
            for (int64_t u = t + 1; u < n; u++) a -= E[u * n + t];
            dgam[t] = a;
        }
        for (int64_t t = n - 1; t >= 0; t--)
            dg[t] = dgam[t] + (t == n - 1 || c->seg[t + 1] != c->seg[t] ? 0.f : dg[t + 1]);
    } else { /* dg_t = the singles u >= t of t's document + the pairs (u >= t, s < t) */
        for (int64_t t = n - 1; t >= 0; t--)
            dgam[t] = single[t] + (t == n - 1 || c->seg[t + 1] != c->seg[t] ? 0.f : dgam[t + 1]);
        for (int64_t t = 0; t < n; t++) {
            float a = dgam[t];
            for (int64_t u = t; u < n; u++)
                for (int64_t s = 0; s < t; s++) a += E[u * n + s];
            dg[t] = a;
        }
    }
    for (int64_t t = 0; t < n; t++)
        if (isinf(c->g[t])) dg[t] = 0.f;
    memcpy(dS, dS0, (size_t)(V * K) * 4);
    free(dD); free(dS0); free(dOe); free(dP); free(DdS); free(dW); free(dYu); free(dYw); free(dL); free(E);
    free(single); free(dgam);
}

void sim_gdn_bwd(const SimOpts *op, const GdnHeads *h, int64_t T, int64_t C, const float *q, const float *k,
                 const float *v, const float *g, const float *beta, const float *S0, const float *dout, float *dS,
                 float *dq, float *dk, float *dv, float *dg, float *dbeta) {
    const int64_t H = h->H, K = h->dk, V = h->dv, ms = V * K, nc = (T + C - 1) / C;
    SChunk c;
    sc_alloc(&c, C, K, V);
    float *starts = xmalloc((size_t)((nc + 1) * ms) * 4), *dO = xmalloc((size_t)(C * V) * 4),
          *lq = xmalloc((size_t)(C * K) * 4), *lk = xmalloc((size_t)(C * K) * 4), *lv = xmalloc((size_t)(C * V) * 4),
          *lg = xmalloc((size_t)C * 4), *lb = xmalloc((size_t)C * 4);
    for (int64_t j = 0; j < H; j++) {
        memcpy(starts, S0 + j * ms, (size_t)ms * 4); /* the forward's state pass: each chunk's initial state (fp32) */
        for (int64_t ci = 0; ci < nc; ci++) {
            const int64_t c0 = ci * C;
            memcpy(starts + (ci + 1) * ms, starts + ci * ms, (size_t)ms * 4);
            sc_load(op, &c, h, c0, T - c0 < C ? T - c0 : C, j, NULL, k, v, g, beta);
            sc_forward(op, &c, starts + (ci + 1) * ms, NULL);
        }
        for (int64_t ci = nc - 1; ci >= 0; ci--) {
            const int64_t c0 = ci * C, n = T - c0 < C ? T - c0 : C;
            sc_load(op, &c, h, c0, n, j, q, k, v, g, beta);
            for (int64_t t = 0; t < n; t++) memcpy(dO + t * V, dout + ((c0 + t) * H + j) * V, (size_t)V * 4);
            sc_backward(op, &c, starts + ci * ms, dO, dS + j * ms, lq, lk, lv, lg, lb);
            for (int64_t t = 0; t < n; t++) {
                const int64_t i = (c0 + t) * H + j;
                memcpy(dq + i * K, lq + t * K, (size_t)K * 4), memcpy(dk + i * K, lk + t * K, (size_t)K * 4);
                memcpy(dv + i * V, lv + t * V, (size_t)V * 4);
                dg[i] = lg[t], dbeta[i] = lb[t];
            }
        }
    }
    sc_free(&c);
    free(starts); free(dO); free(lq); free(lk); free(lv); free(lg); free(lb);
}

void sim_gdn_maps(const SimOpts *op, const GdnHeads *h, int64_t T, int64_t C, const float *q, const float *k,
                  const float *v, const float *g, const float *beta, const float *dout, float *M, float *B, float *Cm) {
    const int64_t H = h->H, K = h->dk, V = h->dv, nc = (T + C - 1) / C;
    SChunk c;
    sc_alloc(&c, C, K, V);
    float *Mc = xmalloc((size_t)(nc * K * K) * 4), *Bc = xmalloc((size_t)(V * K) * 4), *X = xmalloc((size_t)(C * K) * 4),
          *tmp = xmalloc((size_t)((V > K ? V : K) * K) * 4);
    for (int64_t j = 0; j < H; j++) {
        float *Mj = M + j * K * K, *Bj = B + j * V * K, *Cj = Cm + j * V * K;
        memset(Mj, 0, (size_t)(K * K) * 4), memset(Bj, 0, (size_t)(V * K) * 4), memset(Cj, 0, (size_t)(V * K) * 4);
        for (int64_t e = 0; e < K; e++) Mj[e * K + e] = 1.f;
        for (int64_t ci = 0; ci < nc; ci++) { /* (section 9) M_c = e0[n-1] I - W^T Kt, B_c = U^T Kt; chained in fp32 */
            const int64_t c0 = ci * C, n = T - c0 < C ? T - c0 : C;
            float *Mi = Mc + ci * K * K;
            sc_load(op, &c, h, c0, n, j, q, k, v, g, beta);
            memset(Mi, 0, (size_t)(K * K) * 4);
            for (int64_t e = 0; e < K; e++) Mi[e * K + e] = c.e0[n - 1];
            gemm(PW, PW, Mi, K, c.W, K, 1, c.Kt, K, 0, K, K, n, -1.f, 1.f);
            gemm(PW, PW, Bc, K, c.U, V, 1, c.Kt, K, 0, V, K, n, 1.f, 0.f);
            memcpy(tmp, Mj, (size_t)(K * K) * 4);
            gemm(SIM_FP32, SIM_FP32, Mj, K, tmp, K, 0, Mi, K, 0, K, K, K, 1.f, 0.f);
            memcpy(tmp, Bj, (size_t)(V * K) * 4);
            memcpy(Bj, Bc, (size_t)(V * K) * 4);
            gemm(SIM_FP32, SIM_FP32, Bj, K, tmp, K, 0, Mi, K, 0, V, K, K, 1.f, 1.f);
        }
        for (int64_t ci = nc - 1; ci >= 0; ci--) { /* C <- C M_c^T + dO^T (diag(e0) Q - P W) */
            const int64_t c0 = ci * C, n = T - c0 < C ? T - c0 : C;
            sc_load(op, &c, h, c0, n, j, q, k, NULL, g, beta);
            for (int64_t t = 0; t < n; t++)
                for (int64_t e = 0; e < K; e++) X[t * K + e] = c.e0[t] * c.q[t * K + e];
            gemm(PX, PW, X, K, c.P, n, 0, c.W, K, 0, n, K, n, -1.f, 1.f);
            memcpy(tmp, Cj, (size_t)(V * K) * 4);
            gemm(SIM_FP32, SIM_FP32, Cj, K, tmp, K, 0, Mc + ci * K * K, K, 1, V, K, K, 1.f, 0.f);
            for (int64_t t = 0; t < n; t++) memcpy(c.D + t * V, dout + ((c0 + t) * H + j) * V, (size_t)V * 4);
            gemm(PX, PX, Cj, K, c.D, V, 1, X, K, 0, V, K, n, 1.f, 1.f);
        }
    }
    sc_free(&c);
    free(Mc); free(Bc); free(X); free(tmp);
}
