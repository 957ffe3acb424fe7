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

void ref_gdn_chunked(const GdnHeads *h, int64_t T, int64_t C, const double *q, const double *k, const double *v,
                     const double *g, const double *beta, double *S, double *o) {
    const int64_t H = h->H, dk = h->dk, dv = h->dv;
    double *gam = xmalloc((size_t)C * 8), *Tm = xmalloc((size_t)(C * C) * 8), *U = xmalloc((size_t)(C * dv) * 8),
           *Kd = xmalloc((size_t)(C * dk) * 8), *W = xmalloc((size_t)(C * dv) * 8), *Sn = xmalloc((size_t)(dv * dk) * 8);
    for (int64_t j = 0; j < H; j++) {
        double *S0 = S + j * dv * dk;
        for (int64_t c0 = 0; c0 < T; c0 += C) {
            const int64_t n = T - c0 < C ? T - c0 : C;
#define KV_(arr, t, d, e) arr[((c0 + (t)) * H + j) * (d) + (e)]
#define G_(arr, t) arr[(c0 + (t)) * H + j]
            for (int64_t t = 0; t < n; t++) gam[t] = (t ? gam[t - 1] : 0) + G_(g, t);
            /* (I + L)^-1 by forward substitution, row by row: Tm = (I + L)^-1 */
            for (int64_t t = 0; t < n; t++) {
                for (int64_t s2 = 0; s2 < n; s2++) Tm[t * C + s2] = t == s2;
                for (int64_t s2 = 0; s2 < t; s2++) {
                    double kk = 0;
                    for (int64_t e = 0; e < dk; e++) kk += KV_(k, t, dk, e) * KV_(k, s2, dk, e);
                    const double l = G_(beta, t) * exp(gam[t] - gam[s2]) * kk; /* L[t, s2] */
                    for (int64_t u = 0; u <= s2; u++) Tm[t * C + u] -= l * Tm[s2 * C + u];
                }
            }
            for (int64_t t = 0; t < n; t++) { /* U = Tm b V, Kd = Tm b e^gamma K */
                for (int64_t r = 0; r < dv; r++) {
                    double a = 0;
                    for (int64_t s2 = 0; s2 <= t; s2++) a += Tm[t * C + s2] * G_(beta, s2) * KV_(v, s2, dv, r);
                    U[t * dv + r] = a;
                }
                for (int64_t e = 0; e < dk; e++) {
                    double a = 0;
                    for (int64_t s2 = 0; s2 <= t; s2++) a += Tm[t * C + s2] * G_(beta, s2) * exp(gam[s2]) * KV_(k, s2, dk, e);
                    Kd[t * dk + e] = a;
                }
            }
            for (int64_t t = 0; t < n; t++) /* W = U - Kd S0^T */
                for (int64_t r = 0; r < dv; r++) {
                    double a = U[t * dv + r];
                    for (int64_t e = 0; e < dk; e++) a -= Kd[t * dk + e] * S0[r * dk + e];
                    W[t * dv + r] = a;
                }
            for (int64_t t = 0; t < n; t++) /* the outputs: from S0, then from the chunk's own writes */
                for (int64_t r = 0; r < dv; r++) {
                    double a = 0;
                    for (int64_t e = 0; e < dk; e++) a += S0[r * dk + e] * KV_(q, t, dk, e);
                    a *= exp(gam[t]);
                    for (int64_t s2 = 0; s2 <= t; s2++) {
                        double kq = 0;
                        for (int64_t e = 0; e < dk; e++) kq += KV_(k, s2, dk, e) * KV_(q, t, dk, e);
                        a += exp(gam[t] - gam[s2]) * kq * W[s2 * dv + r];
                    }
                    KV_(o, t, dv, r) = a;
                }
            for (int64_t r = 0; r < dv; r++) /* the state the next chunk starts from */
                for (int64_t e = 0; e < dk; e++) {
                    double a = exp(gam[n - 1]) * S0[r * dk + e];
                    for (int64_t s2 = 0; s2 < n; s2++) a += exp(gam[n - 1] - gam[s2]) * W[s2 * dv + r] * KV_(k, s2, dk, e);
                    Sn[r * dk + e] = a;
                }
            memcpy(S0, Sn, (size_t)(dv * dk) * 8);
#undef KV_
#undef G_
        }
    }
    free(gam); free(Tm); free(U); free(Kd); free(W); free(Sn);
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

/* S <- S M + B, per head */
static void apply_map(const GdnHeads *h, double *S, const double *M, const double *B) {
    const int64_t dk = h->dk, dv = h->dv;
    double *row = xmalloc((size_t)dk * 8);
    for (int64_t j = 0; j < h->H; j++)
        for (int64_t r = 0; r < dv; r++) {
            double *s = S + (j * dv + r) * dk;
            for (int64_t e = 0; e < dk; e++) {
                double a = B[(j * dv + r) * dk + e];
                for (int64_t f = 0; f < dk; f++) a += s[f] * M[(j * dk + f) * dk + e];
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
        apply_map(h, start + (ch + 1) * mb, M + ch * mk, B + ch * mb);
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
        apply_map(h, start + (ch + 1) * mb, M + ch * mk, B + ch * mb);
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
