/* ref_gdn.c -- the gated delta rule and its state maps, plainly (ref_gdn.h says why it works). */
#include "ref_gdn.h"

#include <math.h>
#include <string.h>

#include "../common/check.h"

void ref_gdn_prepare(const GdnHeads *h, int64_t T, double *q, double *k) {
    for (int64_t i = 0; i < T * h->H; i++) {
        double sq = 0, sk = 0;
        for (int64_t e = 0; e < h->dk; e++) sq += q[i * h->dk + e] * q[i * h->dk + e], sk += k[i * h->dk + e] * k[i * h->dk + e];
        const double rq = 1 / sqrt(sq + 1e-6) / sqrt((double)h->dk), rk = 1 / sqrt(sk + 1e-6);
        for (int64_t e = 0; e < h->dk; e++) q[i * h->dk + e] *= rq, k[i * h->dk + e] *= rk;
    }
}

/* one token, one head: S <- a S (I - b k k^T) + b v k^T, written as transformers does it:
 * decay, read u = S k, write b (v - u) along k; then o = S q */
static void step(int64_t dk, int64_t dv, double *S, const double *q, const double *k, const double *v, double a,
                 double b, double *o) {
    for (int64_t i = 0; i < dv * dk; i++) S[i] *= a;
    for (int64_t r = 0; r < dv; r++) {
        double u = 0;
        for (int64_t e = 0; e < dk; e++) u += S[r * dk + e] * k[e];
        const double d = b * (v[r] - u);
        for (int64_t e = 0; e < dk; e++) S[r * dk + e] += d * k[e];
    }
    if (o)
        for (int64_t r = 0; r < dv; r++) {
            double s = 0;
            for (int64_t e = 0; e < dk; e++) s += S[r * dk + e] * q[e];
            o[r] = s;
        }
}

void ref_gdn(const GdnHeads *h, int64_t T, const double *q, const double *k, const double *v, const double *g,
             const double *beta, double *S, double *o) {
    const int64_t H = h->H, dk = h->dk, dv = h->dv;
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < H; j++) {
            const int64_t i = t * H + j;
            step(dk, dv, S + j * dv * dk, q + i * dk, k + i * dk, v + i * dv, exp(g[i]), beta[i], o ? o + i * dv : NULL);
        }
}

/* ---------------------------------------------------------------- the chunked form
 * docs/chunked_delta_rule.md derives every line below; its section numbers are quoted. One head and
 * one chunk of n <= C tokens at a time, the chunk's inputs gathered into a Chunk. Documents: a token
 * with g = -inf starts one. Inside a chunk the decay from token s to token t >= s is
 *     dec(t, s) = e^{gam_t - gam_s} if no document starts in (s, t], else exactly 0,
 * and from the chunk's start (the state it was handed) to t, dec0(t) = e^{gam_t} or 0 likewise, with
 * gam the log-decay summed since the chunk's start or since the last document start in it (section 7:
 * no -inf ever enters an exponent, so no NaN, and every exponent is <= 0). */
int ref_gdn_chunked_plant;
#define SOLVE_BLOCK 16 /* the diagonal blocks of the triangular solve (section 4) */

typedef struct {
    int64_t n, dk, dv;
    double *q, *k, *v, *g, *b; /* the chunk's inputs: [n, dk], [n, dk], [n, dv], [n], [n] */
    double *gam;               /* [n] log-decay since the chunk's start or the last document start in it */
    int64_t *seg;              /* [n] documents started in the chunk up to and including t */
    double *L, *Tm;            /* [n, n] L (strictly lower) and (I + L)^-1 */
    double *U, *W, *D;         /* [n, dv] U, [n, dk] W, [n, dv] the values written */
} Chunk;

static void chunk_alloc(Chunk *c, int64_t C, int64_t dk, int64_t dv) {
    c->dk = dk, c->dv = dv;
    c->q = xmalloc((size_t)(C * dk) * 8), c->k = xmalloc((size_t)(C * dk) * 8), c->v = xmalloc((size_t)(C * dv) * 8);
    c->g = xmalloc((size_t)C * 8), c->b = xmalloc((size_t)C * 8), c->gam = xmalloc((size_t)C * 8);
    c->seg = xmalloc((size_t)C * sizeof(int64_t));
    c->L = xmalloc((size_t)(C * C) * 8), c->Tm = xmalloc((size_t)(C * C) * 8);
    c->U = xmalloc((size_t)(C * dv) * 8), c->W = xmalloc((size_t)(C * dk) * 8), c->D = xmalloc((size_t)(C * dv) * 8);
}
static void chunk_free(Chunk *c) {
    free(c->q); free(c->k); free(c->v); free(c->g); free(c->b); free(c->gam); free(c->seg);
    free(c->L); free(c->Tm); free(c->U); free(c->W); free(c->D);
}
static int is_start(double g) { return isinf(g) && g < 0; }
static double dec(const Chunk *c, int64_t t, int64_t s) { /* s <= t */
    return c->seg[t] == c->seg[s] ? exp(c->gam[t] - c->gam[s]) : 0;
}
static double dec0(const Chunk *c, int64_t t) { return c->seg[t] == 0 ? exp(c->gam[t]) : 0; }
static double dotn(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t e = 0; e < n; e++) s += a[e] * b[e];
    return s;
}

/* Tm = (I + L)^-1, L strictly lower [n, n], by blocks of SOLVE_BLOCK (section 4): each diagonal block
 * by forward substitution alone, then block row I's off-diagonal blocks
 *     Tm_IJ = -Tm_II sum_{J <= M < I} L_IM Tm_MJ      (planted 2: the M = J term alone) */
static void solve_blocks(int64_t n, const double *L, double *Tm) {
    memset(Tm, 0, (size_t)(n * n) * 8);
    double *X = xmalloc((size_t)(SOLVE_BLOCK * SOLVE_BLOCK) * 8);
    for (int64_t i0 = 0; i0 < n; i0 += SOLVE_BLOCK) {
        const int64_t i1 = i0 + SOLVE_BLOCK < n ? i0 + SOLVE_BLOCK : n;
        for (int64_t t = i0; t < i1; t++) {
            Tm[t * n + t] = 1;
            for (int64_t s = i0; s < t; s++) {
                double a = 0;
                for (int64_t m = s; m < t; m++) a += L[t * n + m] * Tm[m * n + s];
                Tm[t * n + s] = -a;
            }
        }
        for (int64_t j0 = 0; j0 < i0; j0 += SOLVE_BLOCK) {
            const int64_t j1 = j0 + SOLVE_BLOCK, mend = ref_gdn_chunked_plant == 2 ? j1 : i0;
            for (int64_t t = i0; t < i1; t++) /* X = sum_M L_IM Tm_MJ */
                for (int64_t s = j0; s < j1; s++) {
                    double a = 0;
                    for (int64_t m = j0; m < mend; m++) a += L[t * n + m] * Tm[m * n + s];
                    X[(t - i0) * SOLVE_BLOCK + (s - j0)] = a;
                }
            for (int64_t t = i0; t < i1; t++) /* Tm_IJ = -Tm_II X */
                for (int64_t s = j0; s < j1; s++) {
                    double a = 0;
                    for (int64_t u = i0; u <= t; u++) a += Tm[t * n + u] * X[(u - i0) * SOLVE_BLOCK + (s - j0)];
                    Tm[t * n + s] = -a;
                }
        }
    }
    free(X);
}

/* gather chunk [c0, c0 + n) of head j; then gam, seg, L, Tm, U (v non-NULL) and W (sections 2-5) */
static void chunk_load(Chunk *c, const GdnHeads *h, int64_t c0, int64_t n, int64_t j, const double *q, const double *k,
                       const double *v, const double *g, const double *beta) {
    const int64_t H = h->H, dk = h->dk, dv = h->dv;
    c->n = n;
    for (int64_t t = 0; t < n; t++) {
        const int64_t i = (c0 + t) * H + j;
        if (q) memcpy(c->q + t * dk, q + i * dk, (size_t)dk * 8);
        memcpy(c->k + t * dk, k + i * dk, (size_t)dk * 8);
        if (v) memcpy(c->v + t * dv, v + i * dv, (size_t)dv * 8);
        c->g[t] = g[i], c->b[t] = beta[i];
        const int st = is_start(g[i]);
        c->seg[t] = (t ? c->seg[t - 1] : 0) + st;
        c->gam[t] = st ? 0 : (t ? c->gam[t - 1] : 0) + g[i]; /* a start: the decay restarts (its own is never read) */
    }
    for (int64_t t = 0; t < n; t++)
        for (int64_t s = 0; s < n; s++)
            c->L[t * n + s] = s < t ? c->b[t] * dec(c, t, s) * dotn(c->k + t * dk, c->k + s * dk, dk) : 0;
    solve_blocks(n, c->L, c->Tm);
    for (int64_t t = 0; t < n; t++) { /* U = Tm diag(b) V, W = Tm diag(b dec0) K */
        if (v)
            for (int64_t r = 0; r < dv; r++) {
                double a = 0;
                for (int64_t s = 0; s <= t; s++) a += c->Tm[t * n + s] * c->b[s] * c->v[s * dv + r];
                c->U[t * dv + r] = a;
            }
        for (int64_t e = 0; e < dk; e++) {
            double a = 0;
            for (int64_t s = 0; s <= t; s++) a += c->Tm[t * n + s] * c->b[s] * dec0(c, s) * c->k[s * dk + e];
            c->W[t * dk + e] = a;
        }
    }
}

/* D = U - W S0^T: the values written (section 3) */
static void chunk_written(Chunk *c, const double *S0) {
    const int64_t dk = c->dk, dv = c->dv;
    for (int64_t t = 0; t < c->n; t++)
        for (int64_t r = 0; r < dv; r++) c->D[t * dv + r] = c->U[t * dv + r] - dotn(c->W + t * dk, S0 + r * dk, dk);
}

/* The chunk from S (its initial state in, its final state out): o [n, dv] (NULL: not wanted) (section 6) */
static void chunk_forward(Chunk *c, double *S, double *o, double *Sn) {
    const int64_t n = c->n, dk = c->dk, dv = c->dv;
    chunk_written(c, S);
    if (o)
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < dv; r++) {
                double a = dec0(c, t) * dotn(S + r * dk, c->q + t * dk, dk);
                for (int64_t s = 0; s <= t; s++) a += dec(c, t, s) * dotn(c->k + s * dk, c->q + t * dk, dk) * c->D[s * dv + r];
                o[t * dv + r] = a;
            }
    for (int64_t r = 0; r < dv; r++)
        for (int64_t e = 0; e < dk; e++) {
            double a = dec0(c, n - 1) * S[r * dk + e];
            for (int64_t s = 0; s < n; s++) a += dec(c, n - 1, s) * c->D[s * dv + r] * c->k[s * dk + e];
            Sn[r * dk + e] = a;
        }
    memcpy(S, Sn, (size_t)(dv * dk) * 8);
}

void ref_gdn_chunked(const GdnHeads *h, int64_t T, int64_t C, const double *q, const double *k, const double *v,
                     const double *g, const double *beta, double *S, double *o) {
    const int64_t H = h->H, dk = h->dk, dv = h->dv;
    Chunk c;
    chunk_alloc(&c, C, dk, dv);
    double *oc = xmalloc((size_t)(C * dv) * 8), *Sn = xmalloc((size_t)(dv * dk) * 8);
    for (int64_t j = 0; j < H; j++)
        for (int64_t c0 = 0; c0 < T; c0 += C) {
            const int64_t n = T - c0 < C ? T - c0 : C;
            chunk_load(&c, h, c0, n, j, q, k, v, g, beta);
            chunk_forward(&c, S + j * dv * dk, o ? oc : NULL, Sn);
            if (o)
                for (int64_t t = 0; t < n; t++) memcpy(o + ((c0 + t) * H + j) * dv, oc + t * dv, (size_t)dv * 8);
        }
    chunk_free(&c);
    free(oc); free(Sn);
}

/* The chunk's backward (section 8), from S0 (its initial state) and dO [n, dv]: dS is the final state's
 * gradient in, the initial state's out; dq, dk [n, dk], dv [n, dv], dg, db [n] written. */
static void chunk_backward(Chunk *c, const double *S0, const double *dO, double *dS, double *dq, double *dk,
                           double *dv, double *dg, double *db) {
    const int64_t n = c->n, K = c->dk, V = c->dv;
    chunk_written(c, S0);
    double *dS0 = xcalloc((size_t)(V * K), 8), *dD = xcalloc((size_t)(n * V), 8), *dW = xmalloc((size_t)(n * K) * 8),
           *dYu = xmalloc((size_t)(n * V) * 8), *dYw = xmalloc((size_t)(n * K) * 8), *dgam = xcalloc((size_t)n, 8),
           *x = xmalloc((size_t)K * 8);
    memset(dq, 0, (size_t)(n * K) * 8), memset(dk, 0, (size_t)(n * K) * 8), memset(dv, 0, (size_t)(n * V) * 8);
    memset(db, 0, (size_t)n * 8);
    /* (8.1) S_n = dec0(n-1) S0 + sum_s r_s d_s k_s^T, r_s = dec(n-1, s) */
    const double en = dec0(c, n - 1);
    for (int64_t m = 0; m < V * K; m++) dS0[m] = en * dS[m];
    dgam[n - 1] += en * dotn(dS, S0, V * K);
    for (int64_t s = 0; s < n; s++) {
        const double r = dec(c, n - 1, s);
        for (int64_t i = 0; i < V; i++) dD[s * V + i] += r * dotn(dS + i * K, c->k + s * K, K);
        for (int64_t e = 0; e < K; e++) { /* x = dS^T d_s */
            double a = 0;
            for (int64_t i = 0; i < V; i++) a += dS[i * K + e] * c->D[s * V + i];
            x[e] = a;
            dk[s * K + e] += r * a;
        }
        const double E = r * dotn(c->k + s * K, x, K); /* the pair (n-1, s) */
        if (s < n - 1) dgam[n - 1] += E, dgam[s] -= E;
    }
    /* (8.2) o_t = dec0(t) S0 q_t + sum_{s<=t} P[t, s] d_s, P[t, s] = dec(t, s) k_s . q_t */
    for (int64_t t = 0; t < n; t++) {
        const double e0 = dec0(c, t), *go = dO + t * V, *qt = c->q + t * K;
        for (int64_t e = 0; e < K; e++) {
            double a = 0;
            for (int64_t i = 0; i < V; i++) a += S0[i * K + e] * go[i];
            x[e] = a;
            dq[t * K + e] += e0 * a;
        }
        dgam[t] += e0 * dotn(qt, x, K);
        for (int64_t i = 0; i < V; i++)
            for (int64_t e = 0; e < K; e++) dS0[i * K + e] += e0 * go[i] * qt[e];
        for (int64_t s = 0; s <= t; s++) {
            const double d = dec(c, t, s), P = d * dotn(c->k + s * K, qt, K), dP = dotn(go, c->D + s * V, V);
            for (int64_t i = 0; i < V; i++) dD[s * V + i] += P * go[i];
            for (int64_t e = 0; e < K; e++) dq[t * K + e] += dP * d * c->k[s * K + e], dk[s * K + e] += dP * d * qt[e];
            if (s < t) dgam[t] += dP * P, dgam[s] -= dP * P;
        }
    }
    /* (8.3) D = U - W S0^T */
    for (int64_t t = 0; t < n; t++) {
        for (int64_t e = 0; e < K; e++) {
            double a = 0;
            for (int64_t i = 0; i < V; i++) a += S0[i * K + e] * dD[t * V + i];
            dW[t * K + e] = -a;
        }
        for (int64_t i = 0; i < V; i++)
            for (int64_t e = 0; e < K; e++) dS0[i * K + e] -= dD[t * V + i] * c->W[t * K + e];
    }
    /* (8.4) U = Tm diag(b) V, W = Tm diag(b dec0) K: dY = Tm^T dU (and dW), dL = -(dYu U^T + dYw W^T) */
    for (int64_t t = 0; t < n; t++) {
        for (int64_t i = 0; i < V; i++) {
            double a = 0;
            for (int64_t u = t; u < n; u++) a += c->Tm[u * n + t] * dD[u * V + i];
            dYu[t * V + i] = a;
        }
        for (int64_t e = 0; e < K; e++) {
            double a = 0;
            for (int64_t u = t; u < n; u++) a += c->Tm[u * n + t] * dW[u * K + e];
            dYw[t * K + e] = a;
        }
    }
    for (int64_t t = 0; t < n; t++) {
        const double e0 = dec0(c, t), bt = c->b[t];
        for (int64_t i = 0; i < V; i++) dv[t * V + i] += bt * dYu[t * V + i];
        const double yk = dotn(dYw + t * K, c->k + t * K, K);
        db[t] += dotn(dYu + t * V, c->v + t * V, V) + e0 * yk;
        for (int64_t e = 0; e < K; e++) dk[t * K + e] += bt * e0 * dYw[t * K + e];
        dgam[t] += bt * e0 * yk;
        /* (8.5) L[t, s] = b_t dec(t, s) k_t . k_s, s < t */
        for (int64_t s = 0; s < t; s++) {
            const double dL = -(dotn(dYu + t * V, c->U + s * V, V) + dotn(dYw + t * K, c->W + s * K, K));
            const double d = dec(c, t, s), kk = dotn(c->k + t * K, c->k + s * K, K), G = dL * d * kk;
            db[t] += G;
            dgam[t] += bt * G, dgam[s] -= bt * G;
            for (int64_t e = 0; e < K; e++)
                dk[t * K + e] += dL * bt * d * c->k[s * K + e], dk[s * K + e] += dL * bt * d * c->k[t * K + e];
        }
    }
    /* (8.6) gam_t = the sum of g over (the segment's start, t]: dg_t = the sum of dgam_u over u >= t of t's
     * segment; a document's first token's g is -inf, its gradient 0 (planted 1: dg = dgam) */
    for (int64_t t = n - 1; t >= 0; t--) {
        const int last = t == n - 1 || c->seg[t + 1] != c->seg[t];
        dg[t] = ref_gdn_chunked_plant == 1 ? dgam[t] : dgam[t] + (last ? 0 : dg[t + 1]);
    }
    for (int64_t t = 0; t < n; t++)
        if (is_start(c->g[t])) dg[t] = 0;
    memcpy(dS, dS0, (size_t)(V * K) * 8);
    free(dS0); free(dD); free(dW); free(dYu); free(dYw); free(dgam); free(x);
}

void ref_gdn_chunked_bwd(const GdnHeads *h, int64_t T, int64_t C, const double *q, const double *k, const double *v,
                         const double *g, const double *beta, const double *S0, const double *dout, double *dS,
                         double *dq, double *dk, double *dv, double *dg, double *dbeta) {
    const int64_t H = h->H, dk_ = h->dk, dv_ = h->dv, ms = dv_ * dk_, nc = (T + C - 1) / C;
    Chunk c;
    chunk_alloc(&c, C, dk_, dv_);
    double *starts = xmalloc((size_t)((nc + 1) * ms) * 8), *Sn = xmalloc((size_t)ms * 8), *dO = xmalloc((size_t)(C * dv_) * 8),
           *lq = xmalloc((size_t)(C * dk_) * 8), *lk = xmalloc((size_t)(C * dk_) * 8), *lv = xmalloc((size_t)(C * dv_) * 8),
           *lg = xmalloc((size_t)C * 8), *lb = xmalloc((size_t)C * 8);
    for (int64_t j = 0; j < H; j++) {
        memcpy(starts, S0 + j * ms, (size_t)ms * 8); /* the forward again: every chunk's initial state */
        for (int64_t ci = 0; ci < nc; ci++) {
            const int64_t c0 = ci * C, n = T - c0 < C ? T - c0 : C;
            memcpy(starts + (ci + 1) * ms, starts + ci * ms, (size_t)ms * 8);
            chunk_load(&c, h, c0, n, j, q, k, v, g, beta);
            chunk_forward(&c, starts + (ci + 1) * ms, NULL, Sn);
        }
        for (int64_t ci = nc - 1; ci >= 0; ci--) { /* then the chunks backward, dS carried */
            const int64_t c0 = ci * C, n = T - c0 < C ? T - c0 : C;
            chunk_load(&c, h, c0, n, j, q, k, v, g, beta);
            for (int64_t t = 0; t < n; t++) memcpy(dO + t * dv_, dout + ((c0 + t) * H + j) * dv_, (size_t)dv_ * 8);
            chunk_backward(&c, starts + ci * ms, dO, dS + j * ms, lq, lk, lv, lg, lb);
            for (int64_t t = 0; t < n; t++) {
                const int64_t i = (c0 + t) * H + j;
                for (int64_t e = 0; e < dk_; e++) dq[i * dk_ + e] += lq[t * dk_ + e], dk[i * dk_ + e] += lk[t * dk_ + e];
                for (int64_t e = 0; e < dv_; e++) dv[i * dv_ + e] += lv[t * dv_ + e];
                dg[i] += lg[t], dbeta[i] += lb[t];
            }
        }
    }
    chunk_free(&c);
    free(starts); free(Sn); free(dO); free(lq); free(lk); free(lv); free(lg); free(lb);
}

/* One chunk's map (section 9): M_c = dec0(n-1) I - sum_s r_s W_s k_s^T [dk, dk], B_c = sum_s r_s U_s
 * k_s^T [dv, dk] (r_s = dec(n-1, s)); (U NULL: B_c not wanted) */
static void chunk_map(const Chunk *c, double *Mc, double *Bc) {
    const int64_t n = c->n, K = c->dk, V = c->dv;
    for (int64_t e = 0; e < K; e++)
        for (int64_t f = 0; f < K; f++) {
            double a = e == f ? dec0(c, n - 1) : 0;
            for (int64_t s = 0; s < n; s++) a -= dec(c, n - 1, s) * c->W[s * K + e] * c->k[s * K + f];
            Mc[e * K + f] = a;
        }
    if (Bc)
        for (int64_t i = 0; i < V; i++)
            for (int64_t f = 0; f < K; f++) {
                double a = 0;
                for (int64_t s = 0; s < n; s++) a += dec(c, n - 1, s) * c->U[s * V + i] * c->k[s * K + f];
                Bc[i * K + f] = a;
            }
}
/* X [rows, K] <- X Mc (tr 0) or X Mc^T (tr 1), Mc [K, K] */
static void times_map(double *X, const double *Mc, int64_t rows, int64_t K, int tr) {
    double *row = xmalloc((size_t)K * 8);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t f = 0; f < K; f++) {
            double a = 0;
            for (int64_t e = 0; e < K; e++) a += X[i * K + e] * (tr ? Mc[f * K + e] : Mc[e * K + f]);
            row[f] = a;
        }
        memcpy(X + i * K, row, (size_t)K * 8);
    }
    free(row);
}

void ref_gdn_map_chunked(const GdnHeads *h, int64_t T, int64_t C, const double *k, const double *v, const double *g,
                         const double *beta, double *M, double *B) {
    const int64_t H = h->H, K = h->dk, V = h->dv;
    Chunk c;
    chunk_alloc(&c, C, K, V);
    double *Mc = xmalloc((size_t)(K * K) * 8), *Bc = xmalloc((size_t)(V * K) * 8);
    for (int64_t j = 0; j < H; j++) {
        double *Mj = M + j * K * K, *Bj = B + j * V * K;
        memset(Mj, 0, (size_t)(K * K) * 8), memset(Bj, 0, (size_t)(V * K) * 8);
        for (int64_t e = 0; e < K; e++) Mj[e * K + e] = 1;
        for (int64_t c0 = 0; c0 < T; c0 += C) { /* M <- M M_c, B <- B M_c + B_c */
            chunk_load(&c, h, c0, T - c0 < C ? T - c0 : C, j, NULL, k, v, g, beta);
            chunk_map(&c, Mc, Bc);
            times_map(Mj, Mc, K, K, 0);
            times_map(Bj, Mc, V, K, 0);
            for (int64_t m = 0; m < V * K; m++) Bj[m] += Bc[m];
        }
    }
    chunk_free(&c);
    free(Mc); free(Bc);
}

void ref_gdn_cmap_chunked(const GdnHeads *h, int64_t T, int64_t C, const double *q, const double *k, const double *g,
                          const double *beta, const double *dout, double *Cm) {
    const int64_t H = h->H, K = h->dk, V = h->dv, nc = (T + C - 1) / C;
    Chunk c;
    chunk_alloc(&c, C, K, V);
    double *Mc = xmalloc((size_t)(K * K) * 8), *x = xmalloc((size_t)K * 8);
    for (int64_t j = 0; j < H; j++) {
        double *Cj = Cm + j * V * K;
        memset(Cj, 0, (size_t)(V * K) * 8);
        for (int64_t ci = nc - 1; ci >= 0; ci--) { /* C <- C M_c^T + C_c, C_c = dO^T (diag(dec0) Q - P W) */
            const int64_t c0 = ci * C, n = T - c0 < C ? T - c0 : C;
            chunk_load(&c, h, c0, n, j, q, k, NULL, g, beta);
            chunk_map(&c, Mc, NULL);
            times_map(Cj, Mc, V, K, 1);
            for (int64_t t = 0; t < n; t++) {
                for (int64_t e = 0; e < K; e++) x[e] = dec0(&c, t) * c.q[t * K + e];
                for (int64_t s = 0; s <= t; s++) {
                    const double P = dec(&c, t, s) * dotn(c.k + s * K, c.q + t * K, K);
                    for (int64_t e = 0; e < K; e++) x[e] -= P * c.W[s * K + e];
                }
                const double *go = dout + ((c0 + t) * H + j) * V;
                for (int64_t i = 0; i < V; i++)
                    for (int64_t e = 0; e < K; e++) Cj[i * K + e] += go[i] * x[e];
            }
        }
    }
    chunk_free(&c);
    free(Mc); free(x);
}

/* M <- M A_t = a (M - b (M k) k^T), one head */
static void map_step(int64_t dk, double *M, const double *k, double a, double b) {
    for (int64_t r = 0; r < dk; r++) {
        double u = 0;
        for (int64_t e = 0; e < dk; e++) u += M[r * dk + e] * k[e];
        for (int64_t e = 0; e < dk; e++) M[r * dk + e] = a * (M[r * dk + e] - b * u * k[e]);
    }
}

void ref_gdn_map(const GdnHeads *h, int64_t T, const double *k, const double *v, const double *g, const double *beta,
                 double *M, double *B) {
    const int64_t H = h->H, dk = h->dk, dv = h->dv;
    memset(M, 0, (size_t)(H * dk * dk) * 8);
    for (int64_t j = 0; j < H; j++)
        for (int64_t e = 0; e < dk; e++) M[(j * dk + e) * dk + e] = 1; /* the empty product: I */
    memset(B, 0, (size_t)(H * dv * dk) * 8);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < H; j++) {
            const int64_t i = t * H + j;
            map_step(dk, M + j * dk * dk, k + i * dk, exp(g[i]), beta[i]);
        }
    ref_gdn(h, T, NULL, k, v, g, beta, B, NULL); /* B: the chunk from a zero state (no outputs needed) */
}

void ref_gdn_map_apply(const GdnHeads *h, double *S, const double *M, const double *B, int bwd) {
    const int64_t dk = h->dk, dv = h->dv;
    double *row = xmalloc((size_t)dk * 8);
    for (int64_t j = 0; j < h->H; j++)
        for (int64_t r = 0; r < dv; r++) {
            double *s = S + (j * dv + r) * dk;
            for (int64_t e = 0; e < dk; e++) {
                double a = B[(j * dv + r) * dk + e];
                for (int64_t f = 0; f < dk; f++) a += s[f] * (bwd ? M[(j * dk + e) * dk + f] : M[(j * dk + f) * dk + e]);
                row[e] = a;
            }
            memcpy(s, row, (size_t)dk * 8);
        }
    free(row);
}

int64_t ref_gdn_zigzag(const GdnHeads *h, int64_t S, int P, const double *q, const double *k, const double *v,
                       const double *g, const double *beta, double *o, double *S_final) {
    const int64_t H = h->H, dk = h->dk, dv = h->dv, n = 2 * (int64_t)P, c = S / n;
    const int64_t mk = H * dk * dk, mb = H * dv * dk;
    /* 1. every rank, alone: the maps of its chunks r and 2P-1-r (here all 2P, in chunk order) */
    double *M = xmalloc((size_t)(n * mk) * 8), *B = xmalloc((size_t)(n * mb) * 8);
    for (int r = 0; r < P; r++)
        for (int side = 0; side < 2; side++) {
            const int64_t ch = side ? n - 1 - r : r, t0 = ch * c;
            ref_gdn_map(h, c, k + t0 * H * dk, v + t0 * H * dv, g + t0 * H, beta + t0 * H, M + ch * mk, B + ch * mb);
        }
    /* 2. the exchange (an all-gather of 2P maps), then the composition: the initial state of chunk
     *    ch is the maps of chunks 0..ch-1 applied to zero. Rank r walks this chain up to its tail
     *    (chunks 0..2P-2-r); here the whole chain, once, for every rank */
    double *start = xcalloc((size_t)((n + 1) * mb), 8);
    for (int64_t ch = 0; ch < n; ch++) {
        memcpy(start + (ch + 1) * mb, start + ch * mb, (size_t)mb * 8);
        ref_gdn_map_apply(h, start + (ch + 1) * mb, M + ch * mk, B + ch * mb, 0);
    }
    /* 3. every rank runs its chunks from their true initial states */
    double *St = xmalloc((size_t)mb * 8);
    for (int r = 0; r < P; r++)
        for (int side = 0; side < 2; side++) {
            const int64_t ch = side ? n - 1 - r : r, t0 = ch * c;
            memcpy(St, start + ch * mb, (size_t)mb * 8);
            ref_gdn(h, c, q + t0 * H * dk, k + t0 * H * dk, v + t0 * H * dv, g + t0 * H, beta + t0 * H, St,
                    o + t0 * H * dv);
        }
    memcpy(S_final, start + n * mb, (size_t)mb * 8);
    free(M); free(B); free(start); free(St);
    return 2 * (mk + mb);
}

/* ---------------------------------------------------------------- backward */
void ref_gdn_bwd(const GdnHeads *h, int64_t T, const double *q, const double *k, const double *v, const double *g,
                 const double *beta, const double *S0, const double *dout, double *dS, double *dq, double *dk,
                 double *dv, double *dg, double *dbeta) {
    const int64_t H = h->H, dk_ = h->dk, dv_ = h->dv, ms = dv_ * dk_;
    /* the state before each token, per head: states[t] = S_{t-1} */
    double *states = xmalloc((size_t)((T + 1) * H * ms) * 8);
    memcpy(states, S0, (size_t)(H * ms) * 8);
    for (int64_t t = 0; t < T; t++) {
        memcpy(states + (t + 1) * H * ms, states + t * H * ms, (size_t)(H * ms) * 8);
        ref_gdn(h, 1, q + t * H * dk_, k + t * H * dk_, v + t * H * dv_, g + t * H, beta + t * H,
                states + (t + 1) * H * ms, NULL);
    }
    double *Sp = xmalloc((size_t)ms * 8), *u = xmalloc((size_t)dv_ * 8), *dd = xmalloc((size_t)dv_ * 8),
           *du = xmalloc((size_t)dv_ * 8);
    for (int64_t t = T - 1; t >= 0; t--)
        for (int64_t j = 0; j < H; j++) {
            const int64_t i = t * H + j;
            const double *S = states + (t * H + j) * ms, *S2 = states + ((t + 1) * H + j) * ms; /* S_{t-1}, S_t */
            const double *qt = q + i * dk_, *kt = k + i * dk_, *vt = v + i * dv_, *go = dout + i * dv_;
            const double a = exp(g[i]), b = beta[i];
            double *G = dS + j * ms; /* dS'' on entry: the gradient of S_t */
            for (int64_t r = 0; r < dv_; r++)
                for (int64_t e = 0; e < dk_; e++) G[r * dk_ + e] += go[r] * qt[e];
            for (int64_t e = 0; e < dk_; e++) {
                double s = 0;
                for (int64_t r = 0; r < dv_; r++) s += S2[r * dk_ + e] * go[r];
                dq[i * dk_ + e] += s;
            }
            for (int64_t m = 0; m < ms; m++) Sp[m] = a * S[m];
            double dbt = 0;
            for (int64_t r = 0; r < dv_; r++) {
                double uu = 0, d = 0;
                for (int64_t e = 0; e < dk_; e++) uu += Sp[r * dk_ + e] * kt[e], d += G[r * dk_ + e] * kt[e];
                u[r] = uu, dd[r] = d;
                dv[i * dv_ + r] += b * d;
                du[r] = -b * d;
                dbt += d * (vt[r] - uu);
            }
            dbeta[i] += dbt;
            for (int64_t e = 0; e < dk_; e++) { /* dk from d k^T and from u = S' k */
                double s = 0;
                for (int64_t r = 0; r < dv_; r++) s += G[r * dk_ + e] * b * (vt[r] - u[r]) + Sp[r * dk_ + e] * du[r];
                dk[i * dk_ + e] += s;
            }
            double da = 0;
            for (int64_t r = 0; r < dv_; r++)
                for (int64_t e = 0; e < dk_; e++) {
                    const double gp = G[r * dk_ + e] + du[r] * kt[e]; /* dS' */
                    da += gp * S[r * dk_ + e];
                    G[r * dk_ + e] = a * gp; /* dS: the gradient of S_{t-1} */
                }
            dg[i] += a * da;
        }
    free(states); free(Sp); free(u); free(dd); free(du);
}

void ref_gdn_prepare_bwd(const GdnHeads *h, int64_t T, const double *q, const double *k, double *dq, double *dk) {
    const int64_t dk_ = h->dk;
    for (int64_t i = 0; i < T * h->H; i++)
        for (int w = 0; w < 2; w++) { /* x^ = s x r, r = (|x|^2 + eps)^-1/2: dx = s (r dx^ - r^3 (x . dx^) x) */
            const double *x = (w ? k : q) + i * dk_;
            double *d = (w ? dk : dq) + i * dk_, n2 = 0, xd = 0;
            const double sc = w ? 1 : 1 / sqrt((double)dk_);
            for (int64_t e = 0; e < dk_; e++) n2 += x[e] * x[e], xd += x[e] * d[e];
            const double r = 1 / sqrt(n2 + 1e-6);
            for (int64_t e = 0; e < dk_; e++) d[e] = sc * (r * d[e] - r * r * r * xd * x[e]);
        }
}

void ref_gdn_zigzag_bwd(const GdnHeads *h, int64_t S, int P, const double *q, const double *k, const double *v,
                        const double *g, const double *beta, const double *dout, const double *dS_final, double *dq,
                        double *dk, double *dv, double *dg, double *dbeta, double *dS0) {
    const int64_t H = h->H, dk_ = h->dk, dv_ = h->dv, n = 2 * (int64_t)P, c = S / n;
    const int64_t mk = H * dk_ * dk_, mb = H * dv_ * dk_;
    /* the forward's maps and each chunk's initial state, as ref_gdn_zigzag made them */
    double *M = xmalloc((size_t)(n * mk) * 8), *B = xmalloc((size_t)(n * mb) * 8);
    double *start = xcalloc((size_t)((n + 1) * mb), 8);
    for (int64_t ch = 0; ch < n; ch++) {
        const int64_t t0 = ch * c;
        ref_gdn_map(h, c, k + t0 * H * dk_, v + t0 * H * dv_, g + t0 * H, beta + t0 * H, M + ch * mk, B + ch * mb);
    }
    for (int64_t ch = 0; ch < n; ch++) {
        memcpy(start + (ch + 1) * mb, start + ch * mb, (size_t)mb * 8);
        ref_gdn_map_apply(h, start + (ch + 1) * mb, M + ch * mk, B + ch * mb, 0);
    }
    /* 1. every rank, alone: C of its chunks, the backward from a zero final-state gradient */
    double *C = xcalloc((size_t)(n * mb), 8);
    double *sq = xcalloc((size_t)(c * H * dk_), 8), *sk = xcalloc((size_t)(c * H * dk_), 8),
           *sv = xcalloc((size_t)(c * H * dv_), 8), *sg = xcalloc((size_t)(c * H), 8), *sb = xcalloc((size_t)(c * H), 8);
    for (int64_t ch = 0; ch < n; ch++) {
        const int64_t t0 = ch * c;
        ref_gdn_bwd(h, c, q + t0 * H * dk_, k + t0 * H * dk_, v + t0 * H * dv_, g + t0 * H, beta + t0 * H,
                    start + ch * mb, dout + t0 * H * dv_, C + ch * mb, sq, sk, sv, sg, sb); /* scratch grads */
    }
    /* 2. exchanged, composed from the last chunk back: dS_end(c - 1) = dS_end(c) M_c^T + C_c */
    double *dend = xmalloc((size_t)((n + 1) * mb) * 8);
    memcpy(dend + n * mb, dS_final, (size_t)mb * 8); /* dend[ch + 1]: the gradient of chunk ch's final state */
    for (int64_t ch = n - 1; ch >= 0; ch--) {
        double *out = dend + ch * mb;
        const double *in = dend + (ch + 1) * mb;
        for (int64_t j = 0; j < H; j++)
            for (int64_t r = 0; r < dv_; r++)
                for (int64_t e = 0; e < dk_; e++) {
                    double a = C[ch * mb + (j * dv_ + r) * dk_ + e];
                    for (int64_t f = 0; f < dk_; f++) a += in[(j * dv_ + r) * dk_ + f] * M[ch * mk + (j * dk_ + e) * dk_ + f];
                    out[(j * dv_ + r) * dk_ + e] = a;
                }
    }
    /* 3. every rank runs its chunks' backward again from their true dS_end */
    memset(dq, 0, (size_t)(S * H * dk_) * 8), memset(dk, 0, (size_t)(S * H * dk_) * 8);
    memset(dv, 0, (size_t)(S * H * dv_) * 8), memset(dg, 0, (size_t)(S * H) * 8), memset(dbeta, 0, (size_t)(S * H) * 8);
    double *G = xmalloc((size_t)mb * 8);
    for (int r = 0; r < P; r++)
        for (int side = 0; side < 2; side++) {
            const int64_t ch = side ? n - 1 - r : r, t0 = ch * c;
            memcpy(G, dend + (ch + 1) * mb, (size_t)mb * 8);
            ref_gdn_bwd(h, c, q + t0 * H * dk_, k + t0 * H * dk_, v + t0 * H * dv_, g + t0 * H, beta + t0 * H,
                        start + ch * mb, dout + t0 * H * dv_, G, dq + t0 * H * dk_, dk + t0 * H * dk_, dv + t0 * H * dv_,
                        dg + t0 * H, dbeta + t0 * H);
            if (ch == 0) memcpy(dS0, G, (size_t)mb * 8);
        }
    free(M); free(B); free(start); free(C); free(sq); free(sk); free(sv); free(sg); free(sb); free(dend); free(G);
}

/* ---------------------------------------------------------------- the layer */
static double silu(double x) { return x / (1 + exp(-x)); }
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); } /* torch's threshold */
static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double dsilu(double x) { const double s = sigm(x); return s * (1 + x * (1 - s)); }

/* y [T, O] = x [T, I] W^T, W [O, I] */
void ref_linear(double *y, const double *x, const double *W, int64_t T, int64_t I, int64_t O) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < O; o++) {
            double s = 0;
            for (int64_t i = 0; i < I; i++) s += x[t * I + i] * W[o * I + i];
            y[t * O + o] = s;
        }
}
/* dx [T, I] += dy [T, O] W, dW [O, I] += dy^T x */
void ref_linear_bwd(double *dx, double *dW, const double *dy, const double *x, const double *W, int64_t T, int64_t I,
                    int64_t O) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < O; o++) {
            const double d = dy[t * O + o];
            for (int64_t i = 0; i < I; i++) dx[t * I + i] += d * W[o * I + i], dW[o * I + i] += d * x[t * I + i];
        }
}

/* The layer's forward up to out_proj's input, keeping what the backward reads. */
typedef struct {
    double *mixed, *pre;    /* [T, C] in_proj_qkv's output, the conv's (before SiLU) */
    double *z, *bb, *aa;    /* [T, Hv dv] the gate; [T, Hv] b and a */
    double *q0, *k0;        /* [T, Hv, dk] q and k after the conv and SiLU, repeated over the value heads */
    double *q, *k, *v;      /* prepared q, k (l2norm, q scaled); v [T, Hv dv] */
    double *g, *beta;       /* [T, Hv] */
    double *o, *rs, *o2;    /* the rule's output, its norm's 1/rms [T, Hv], the gated norm's output */
    double *S;              /* [Hv, dv, dk] the final state */
} GdnFwd;

static void gdn_fwd(const GdnLayer *L, const GdnWeights *w, int64_t T, const double *x, GdnFwd *f) {
    const int64_t D = L->D, Hk = L->Hk, Hv = L->Hv, dk = L->dk, dv = L->dv, K = L->K, kd = Hk * dk, vd = Hv * dv,
                  C = 2 * kd + vd, rep = Hv / Hk;
    f->mixed = xmalloc((size_t)(T * C) * 8), f->pre = xmalloc((size_t)(T * C) * 8), f->z = xmalloc((size_t)(T * vd) * 8);
    f->bb = xmalloc((size_t)(T * Hv) * 8), f->aa = xmalloc((size_t)(T * Hv) * 8);
    ref_linear(f->mixed, x, w->qkv, T, D, C);
    ref_linear(f->z, x, w->z, T, D, vd);
    ref_linear(f->bb, x, w->b, T, D, Hv);
    ref_linear(f->aa, x, w->a, T, D, Hv);
    for (int64_t t = 0; t < T; t++) /* causal depthwise conv (SiLU follows where it is read) */
        for (int64_t ch = 0; ch < C; ch++) {
            double s = 0;
            for (int64_t j = 0; j < K; j++) {
                const int64_t src = t - (K - 1) + j;
                if (src >= 0) s += w->conv[ch * K + j] * f->mixed[src * C + ch];
            }
            f->pre[t * C + ch] = s;
        }
    const GdnHeads h = {Hv, dk, dv};
    f->q0 = xmalloc((size_t)(T * Hv * dk) * 8), f->k0 = xmalloc((size_t)(T * Hv * dk) * 8);
    f->q = xmalloc((size_t)(T * Hv * dk) * 8), f->k = xmalloc((size_t)(T * Hv * dk) * 8), f->v = xmalloc((size_t)(T * vd) * 8);
    f->g = xmalloc((size_t)(T * Hv) * 8), f->beta = xmalloc((size_t)(T * Hv) * 8), f->o = xmalloc((size_t)(T * vd) * 8);
    f->rs = xmalloc((size_t)(T * Hv) * 8), f->o2 = xmalloc((size_t)(T * vd) * 8), f->S = xcalloc((size_t)(Hv * dv * dk), 8);
    for (int64_t t = 0; t < T; t++) { /* q, k repeated over the value heads; v; beta, g */
        for (int64_t j = 0; j < Hv; j++)
            for (int64_t e = 0; e < dk; e++) {
                f->q0[(t * Hv + j) * dk + e] = silu(f->pre[t * C + (j / rep) * dk + e]);
                f->k0[(t * Hv + j) * dk + e] = silu(f->pre[t * C + kd + (j / rep) * dk + e]);
            }
        for (int64_t i = 0; i < vd; i++) f->v[t * vd + i] = silu(f->pre[t * C + 2 * kd + i]);
        for (int64_t j = 0; j < Hv; j++) {
            f->beta[t * Hv + j] = sigm(f->bb[t * Hv + j]);
            f->g[t * Hv + j] = -exp(w->A_log[j]) * softplus(f->aa[t * Hv + j] + w->dt_bias[j]);
        }
    }
    memcpy(f->q, f->q0, (size_t)(T * Hv * dk) * 8);
    memcpy(f->k, f->k0, (size_t)(T * Hv * dk) * 8);
    ref_gdn_prepare(&h, T, f->q, f->k);
    ref_gdn(&h, T, f->q, f->k, f->v, f->g, f->beta, f->S, f->o);
    for (int64_t i = 0; i < T * Hv; i++) { /* gated RMSNorm per head: norm first, then the gate */
        double ms = 0;
        for (int64_t e = 0; e < dv; e++) ms += f->o[i * dv + e] * f->o[i * dv + e];
        f->rs[i] = 1 / sqrt(ms / (double)dv + L->eps);
        for (int64_t e = 0; e < dv; e++) f->o2[i * dv + e] = f->o[i * dv + e] * f->rs[i] * w->norm[e] * silu(f->z[i * dv + e]);
    }
}
static void gdn_fwd_free(GdnFwd *f) {
    double *all[] = {f->mixed, f->pre, f->z, f->bb, f->aa, f->q0, f->k0, f->q, f->k, f->v, f->g, f->beta, f->o, f->rs, f->o2, f->S};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

void ref_gdn_layer(const GdnLayer *L, const GdnWeights *w, int64_t T, const double *x, double *y, double *S_final) {
    GdnFwd f;
    gdn_fwd(L, w, T, x, &f);
    ref_linear(y, f.o2, w->out, T, L->Hv * L->dv, L->D);
    if (S_final) memcpy(S_final, f.S, (size_t)(L->Hv * L->dv * L->dk) * 8);
    gdn_fwd_free(&f);
}

void ref_gdn_layer_bwd(const GdnLayer *L, const GdnWeights *w, int64_t T, const double *x, const double *dy, double *dx,
                       GdnGrads *gw) {
    const int64_t D = L->D, Hk = L->Hk, Hv = L->Hv, dk = L->dk, dv = L->dv, K = L->K, kd = Hk * dk, vd = Hv * dv,
                  C = 2 * kd + vd, rep = Hv / Hk;
    const GdnHeads h = {Hv, dk, dv};
    GdnFwd f; /* the forward again, keeping what the backward reads */
    gdn_fwd(L, w, T, x, &f);
    double *do2 = xcalloc((size_t)(T * vd), 8), *dz = xcalloc((size_t)(T * vd), 8), *dout = xcalloc((size_t)(T * vd), 8);
    memset(dx, 0, (size_t)(T * D) * 8);
    ref_linear_bwd(do2, gw->out, dy, f.o2, w->out, T, vd, D); /* out_proj's input gradient: do2 */
    /* gated RMSNorm: o2 = n nw silu(z), n = o r; do = r (dn - n mean(dn n)) */
    for (int64_t i = 0; i < T * Hv; i++) {
        double dot = 0;
        for (int64_t e = 0; e < dv; e++) {
            const double n = f.o[i * dv + e] * f.rs[i], sz = silu(f.z[i * dv + e]), d = do2[i * dv + e];
            dz[i * dv + e] = d * n * w->norm[e] * dsilu(f.z[i * dv + e]);
            gw->norm[e] += d * sz * n;
            const double dn = d * sz * w->norm[e];
            dout[i * dv + e] = dn;
            dot += dn * n;
        }
        for (int64_t e = 0; e < dv; e++)
            dout[i * dv + e] = f.rs[i] * (dout[i * dv + e] - f.o[i * dv + e] * f.rs[i] * dot / (double)dv);
    }
    /* the rule, then l2norm, then the repeat over value heads (its gradient sums) */
    double *dq = xcalloc((size_t)(T * Hv * dk), 8), *dkk = xcalloc((size_t)(T * Hv * dk), 8), *dvv = xcalloc((size_t)(T * vd), 8),
           *dg = xcalloc((size_t)(T * Hv), 8), *db = xcalloc((size_t)(T * Hv), 8), *dS = xcalloc((size_t)(Hv * dv * dk), 8),
           *S0 = xcalloc((size_t)(Hv * dv * dk), 8);
    ref_gdn_bwd(&h, T, f.q, f.k, f.v, f.g, f.beta, S0, dout, dS, dq, dkk, dvv, dg, db);
    ref_gdn_prepare_bwd(&h, T, f.q0, f.k0, dq, dkk);
    double *dpre = xcalloc((size_t)(T * C), 8), *dmixed = xcalloc((size_t)(T * C), 8), *dbb = xmalloc((size_t)(T * Hv) * 8),
           *daa = xmalloc((size_t)(T * Hv) * 8);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < Hv; j++)
            for (int64_t e = 0; e < dk; e++) {
                dpre[t * C + (j / rep) * dk + e] += dq[(t * Hv + j) * dk + e];
                dpre[t * C + kd + (j / rep) * dk + e] += dkk[(t * Hv + j) * dk + e];
            }
        for (int64_t i = 0; i < vd; i++) dpre[t * C + 2 * kd + i] = dvv[t * vd + i];
        for (int64_t ch = 0; ch < C; ch++) dpre[t * C + ch] *= dsilu(f.pre[t * C + ch]); /* through SiLU */
        for (int64_t j = 0; j < Hv; j++) { /* beta = sigmoid(b); g = -exp(A_log) softplus(a + dt_bias) */
            const int64_t i = t * Hv + j;
            dbb[i] = db[i] * f.beta[i] * (1 - f.beta[i]);
            gw->A_log[j] += dg[i] * f.g[i];
            daa[i] = dg[i] * -exp(w->A_log[j]) * sigm(f.aa[i] + w->dt_bias[j]);
            gw->dt_bias[j] += daa[i];
        }
    }
    for (int64_t t = 0; t < T; t++) /* the conv: each output reads its channel's last K inputs */
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t j = 0; j < K; j++) {
                const int64_t src = t - (K - 1) + j;
                if (src < 0) continue;
                gw->conv[ch * K + j] += dpre[t * C + ch] * f.mixed[src * C + ch];
                dmixed[src * C + ch] += dpre[t * C + ch] * w->conv[ch * K + j];
            }
    ref_linear_bwd(dx, gw->qkv, dmixed, x, w->qkv, T, D, C);
    ref_linear_bwd(dx, gw->z, dz, x, w->z, T, D, vd);
    ref_linear_bwd(dx, gw->b, dbb, x, w->b, T, D, Hv);
    ref_linear_bwd(dx, gw->a, daa, x, w->a, T, D, Hv);
    gdn_fwd_free(&f);
    free(do2); free(dz); free(dout); free(dq); free(dkk); free(dvv); free(dg); free(db); free(dS); free(S0);
    free(dpre); free(dmixed); free(dbb); free(daa);
}

/* ---------------------------------------------------------------- gated full attention */
void ref_rms_1p(double *x, const double *w, int64_t n, double eps) { /* x <- x / rms(x) * (1 + w) */
    double ms = 0;
    for (int64_t e = 0; e < n; e++) ms += x[e] * x[e];
    const double r = 1 / sqrt(ms / (double)n + eps);
    for (int64_t e = 0; e < n; e++) x[e] = x[e] * r * (1 + w[e]);
}
/* pair i's angle at position p and the factor cos and sin take: theta^(-2i/rot), or A's own
 * frequencies (YaRN's) with their attention factor */
static double rope_angle(const GatedAttn *A, int64_t i, int64_t p, double *af) {
    *af = A->inv_freq ? A->attn_factor : 1.0;
    return (double)p * (A->inv_freq ? A->inv_freq[i] : pow(A->theta, -2.0 * (double)i / (double)A->rot));
}
/* the first rot dims: halves (a, b) -> (a cos - b sin, b cos + a sin) */
static void rope_partial(double *x, const GatedAttn *A, int64_t p) {
    const int64_t rot = A->rot;
    for (int64_t i = 0; i < rot / 2; i++) {
        double af;
        const double f = rope_angle(A, i, p, &af), c = cos(f) * af, s = sin(f) * af;
        const double a = x[i], b = x[i + rot / 2];
        x[i] = a * c - b * s;
        x[i + rot / 2] = b * c + a * s;
    }
}

/* The forward up to o_proj's input, keeping what the backward reads. */
typedef struct {
    double *qg;             /* [T, Hq, 2 hd] q_proj's output: each head's raw query, then its gate */
    double *kraw, *v;       /* [T, Hkv, hd] */
    double *q, *k;          /* normed and rotated */
    double *att, *attg;     /* [T, Hq, hd] the attention's output, times sigmoid(gate) */
    double *P;              /* [Hq, T, T] the probabilities (0 above the diagonal) */
} AttnFwd;

static void attn_fwd(const GatedAttn *A, const GatedAttnWeights *w, int64_t T, const double *x, const int64_t *pos,
                     AttnFwd *f) {
    const int64_t D = A->D, Hq = A->Hq, Hk = A->Hkv, hd = A->hd, grp = Hq / Hk, QG = Hq * 2 * hd, KV = Hk * hd;
    f->qg = xmalloc((size_t)(T * QG) * 8), f->kraw = xmalloc((size_t)(T * KV) * 8), f->v = xmalloc((size_t)(T * KV) * 8);
    f->q = xmalloc((size_t)(T * Hq * hd) * 8), f->k = xmalloc((size_t)(T * KV) * 8);
    f->att = xmalloc((size_t)(T * Hq * hd) * 8), f->attg = xmalloc((size_t)(T * Hq * hd) * 8);
    f->P = xmalloc((size_t)(Hq * T * T) * 8);
    ref_linear(f->qg, x, w->q, T, D, QG);
    ref_linear(f->kraw, x, w->k, T, D, KV);
    ref_linear(f->v, x, w->v, T, D, KV);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < Hq; j++) {
            double *qq = f->q + (t * Hq + j) * hd;
            memcpy(qq, f->qg + (t * Hq + j) * 2 * hd, (size_t)hd * 8);
            ref_rms_1p(qq, w->q_norm, hd, A->eps);
            rope_partial(qq, A, pos[t]);
        }
        for (int64_t j = 0; j < Hk; j++) {
            double *kk = f->k + (t * Hk + j) * hd;
            memcpy(kk, f->kraw + (t * Hk + j) * hd, (size_t)hd * 8);
            ref_rms_1p(kk, w->k_norm, hd, A->eps);
            rope_partial(kk, A, pos[t]);
        }
    }
    const double scale = 1 / sqrt((double)hd);
    for (int64_t j = 0; j < Hq; j++)
        for (int64_t t = 0; t < T; t++) {
            double *p = f->P + (j * T + t) * T, m = -INFINITY, z = 0;
            const int64_t kh = j / grp;
            for (int64_t u = 0; u < T; u++) {
                if (u > t) { p[u] = 0; continue; }
                double s = 0;
                for (int64_t e = 0; e < hd; e++) s += f->q[(t * Hq + j) * hd + e] * f->k[(u * Hk + kh) * hd + e];
                p[u] = s * scale;
                m = fmax(m, p[u]);
            }
            for (int64_t u = 0; u <= t; u++) z += p[u] = exp(p[u] - m);
            for (int64_t u = 0; u <= t; u++) p[u] /= z;
            for (int64_t e = 0; e < hd; e++) {
                double a = 0;
                for (int64_t u = 0; u <= t; u++) a += p[u] * f->v[(u * Hk + kh) * hd + e];
                f->att[(t * Hq + j) * hd + e] = a;
                f->attg[(t * Hq + j) * hd + e] = a * sigm(f->qg[(t * Hq + j) * 2 * hd + hd + e]);
            }
        }
}
static void attn_fwd_free(AttnFwd *f) {
    free(f->qg); free(f->kraw); free(f->v); free(f->q); free(f->k); free(f->att); free(f->attg); free(f->P);
}

void ref_gated_attn(const GatedAttn *A, const GatedAttnWeights *w, int64_t T, const double *x, const int64_t *pos,
                    double *y) {
    AttnFwd f;
    attn_fwd(A, w, T, x, pos, &f);
    ref_linear(y, f.attg, w->o, T, A->Hq * A->hd, A->D);
    attn_fwd_free(&f);
}

/* rope_partial's transpose: the rotation by -f */
static void rope_partial_bwd(double *d, const GatedAttn *A, int64_t p) {
    const int64_t rot = A->rot;
    for (int64_t i = 0; i < rot / 2; i++) {
        double af;
        const double f = rope_angle(A, i, p, &af), c = cos(f) * af, s = sin(f) * af;
        const double a = d[i], b = d[i + rot / 2];
        d[i] = a * c + b * s;
        d[i + rot / 2] = b * c - a * s;
    }
}
/* rms_1p's backward: x raw, d the output's gradient in, the input's out; dw added into */
void ref_rms_1p_bwd(const double *x, const double *w, double *d, double *dw, int64_t n, double eps) {
    double ms = 0, dot = 0;
    for (int64_t e = 0; e < n; e++) ms += x[e] * x[e];
    const double r = 1 / sqrt(ms / (double)n + eps);
    for (int64_t e = 0; e < n; e++) {
        dw[e] += d[e] * x[e] * r;
        d[e] *= 1 + w[e]; /* dn */
        dot += d[e] * x[e] * r;
    }
    for (int64_t e = 0; e < n; e++) d[e] = r * (d[e] - x[e] * r * dot / (double)n);
}

void ref_gated_attn_bwd(const GatedAttn *A, const GatedAttnWeights *w, int64_t T, const double *x, const int64_t *pos,
                        const double *dy, double *dx, GatedAttnGrads *gw) {
    const int64_t D = A->D, Hq = A->Hq, Hk = A->Hkv, hd = A->hd, grp = Hq / Hk, QG = Hq * 2 * hd, KV = Hk * hd;
    const double scale = 1 / sqrt((double)hd);
    AttnFwd f; /* the forward again, keeping what the backward reads */
    attn_fwd(A, w, T, x, pos, &f);
    const double *qg = f.qg, *kraw = f.kraw, *v = f.v, *q = f.q, *k = f.k, *att = f.att, *attg = f.attg, *P = f.P;
    /* o_proj, then the gate */
    double *dattg = xcalloc((size_t)(T * Hq * hd), 8), *dqg = xcalloc((size_t)(T * QG), 8), *dq = xcalloc((size_t)(T * Hq * hd), 8),
           *dk = xcalloc((size_t)(T * KV), 8), *dv = xcalloc((size_t)(T * KV), 8), *datt = xmalloc((size_t)(T * Hq * hd) * 8);
    ref_linear_bwd(dattg, gw->o, dy, attg, w->o, T, Hq * hd, D);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < Hq; j++)
            for (int64_t e = 0; e < hd; e++) {
                const int64_t i = (t * Hq + j) * hd + e;
                const double sg = sigm(qg[(t * Hq + j) * 2 * hd + hd + e]);
                datt[i] = dattg[i] * sg;
                dqg[(t * Hq + j) * 2 * hd + hd + e] = dattg[i] * att[i] * sg * (1 - sg);
            }
    /* softmax attention's backward: dS = P (dP - rowsum(dO . O)), GQA sums into the K/V heads */
    for (int64_t j = 0; j < Hq; j++)
        for (int64_t t = 0; t < T; t++) {
            const double *p = P + (j * T + t) * T, *go = datt + (t * Hq + j) * hd, *o = att + (t * Hq + j) * hd;
            const int64_t kh = j / grp;
            double Di = 0;
            for (int64_t e = 0; e < hd; e++) Di += go[e] * o[e];
            for (int64_t u = 0; u <= t; u++) {
                double dp = 0;
                for (int64_t e = 0; e < hd; e++) dp += go[e] * v[(u * Hk + kh) * hd + e];
                const double ds = p[u] * (dp - Di) * scale;
                for (int64_t e = 0; e < hd; e++) {
                    dq[(t * Hq + j) * hd + e] += ds * k[(u * Hk + kh) * hd + e];
                    dk[(u * Hk + kh) * hd + e] += ds * q[(t * Hq + j) * hd + e];
                    dv[(u * Hk + kh) * hd + e] += p[u] * go[e];
                }
            }
        }
    /* RoPE and the norms back to the raw projections */
    for (int64_t t = 0; t < T; t++) {
        for (int64_t j = 0; j < Hq; j++) {
            double *d = dq + (t * Hq + j) * hd;
            rope_partial_bwd(d, A, pos[t]);
            ref_rms_1p_bwd(qg + (t * Hq + j) * 2 * hd, w->q_norm, d, gw->q_norm, hd, A->eps);
            memcpy(dqg + (t * Hq + j) * 2 * hd, d, (size_t)hd * 8);
        }
        for (int64_t j = 0; j < Hk; j++) {
            double *d = dk + (t * Hk + j) * hd;
            rope_partial_bwd(d, A, pos[t]);
            ref_rms_1p_bwd(kraw + (t * Hk + j) * hd, w->k_norm, d, gw->k_norm, hd, A->eps);
        }
    }
    memset(dx, 0, (size_t)(T * D) * 8);
    ref_linear_bwd(dx, gw->q, dqg, x, w->q, T, D, QG);
    ref_linear_bwd(dx, gw->k, dk, x, w->k, T, D, KV);
    ref_linear_bwd(dx, gw->v, dv, x, w->v, T, D, KV);
    attn_fwd_free(&f);
    free(dattg); free(dqg); free(dq); free(dk); free(dv); free(datt);
}
