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
    /* 2. the exchange (an all-gather of 2P maps), then every rank composes the same prefix: the
     *    initial state of chunk ch is the maps of chunks 0..ch-1 applied to zero */
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
