/* ref_ring.c -- ring attention over the zigzag split, the plainest way: fp64, P ranks simulated in
 * one process. Read it next to stage 3's ring_forward and ring_backward; common/zigzag.h argues
 * why the split balances the work and which blocks the ring computes, kernels/ring.cu derives the
 * LSE merge. */
#include "ref_ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/docs.h"
#include "../common/zigzag.h"

/* ------------------------------------------------------------------ one row of attention */

/* the scaled score of query head h against key row j: q . k_j / sqrt(D) */
static double score(const RefHeads *a, const double *q, const double *k, int64_t j, int h) {
    const int64_t kh = h / (a->Hq / a->Hkv), D = a->D;
    double d = 0;
    for (int64_t e = 0; e < D; e++) d += q[h * D + e] * k[(j * a->Hkv + kh) * D + e];
    return d * (1 / sqrt((double)D));
}
static int allowed(int causal, int64_t j, int64_t qi) { return !causal || j <= qi; }

/* softmax over the allowed keys, in three passes for clarity: the max m, then Z = sum e^{s_j - m}
 * and lse = m + log Z, then o = sum_j e^{s_j - lse} v_j */
void ref_attn_row(const RefHeads *a, const double *q, const double *k, const double *v, int64_t k0, int64_t nk, int h,
                  int causal, int64_t qi, double *o, double *lse) {
    const int64_t kh = h / (a->Hq / a->Hkv), D = a->D;
    double m = -INFINITY, z = 0;
    for (int64_t j = k0; j < k0 + nk; j++)
        if (allowed(causal, j, qi)) m = fmax(m, score(a, q, k, j, h));
    for (int64_t e = 0; e < D; e++) o[e] = 0;
    if (m == -INFINITY) { /* no key: Z = 0, the row merges as nothing (kernels/ring.cu) */
        *lse = -INFINITY;
        return;
    }
    for (int64_t j = k0; j < k0 + nk; j++)
        if (allowed(causal, j, qi)) z += exp(score(a, q, k, j, h) - m);
    *lse = m + log(z);
    for (int64_t j = k0; j < k0 + nk; j++) {
        if (!allowed(causal, j, qi)) continue;
        const double p = exp(score(a, q, k, j, h) - *lse);
        for (int64_t e = 0; e < D; e++) o[e] += p * v[(j * a->Hkv + kh) * D + e];
    }
}

/* With p_j = e^{s_j - lse} and dp_j = dO . v_j, softmax's backward is ds_j = p_j (dp_j - Dr),
 * Dr = sum_j p_j dp_j = dO . O. Given the FINAL lse and O of the row (over every key of every
 * block), p_j is the true probability and Dr the true sum, so the keys of one block get exactly
 * their part of the whole attention's gradient, and the blocks' dq, dk, dv simply add up. */
void ref_attn_row_bwd(const RefHeads *a, const double *q, const double *k, const double *v, const double *dout,
                      double lse, double Dr, int64_t k0, int64_t nk, int h, int causal, int64_t qi, double *dq,
                      double *dk, double *dv) {
    const int64_t kh = h / (a->Hq / a->Hkv), D = a->D;
    const double scale = 1 / sqrt((double)D);
    for (int64_t j = k0; j < k0 + nk; j++) {
        if (!allowed(causal, j, qi)) continue;
        const double *kj = k + (j * a->Hkv + kh) * D, *vj = v + (j * a->Hkv + kh) * D;
        double dp = 0;
        for (int64_t e = 0; e < D; e++) dp += dout[h * D + e] * vj[e];
        const double p = exp(score(a, q, k, j, h) - lse), ds = p * (dp - Dr) * scale; /* d(loss)/d(q.k_j) */
        for (int64_t e = 0; e < D; e++) {
            dq[h * D + e] += ds * kj[e];
            dk[(j * a->Hkv + kh) * D + e] += ds * q[h * D + e];
            dv[(j * a->Hkv + kh) * D + e] += p * dout[h * D + e];
        }
    }
}

static double dot(const double *x, const double *y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

void ref_attention(const RefHeads *a, int64_t S, const double *q, const double *k, const double *v, const double *dO,
                   double *O, double *L, double *dQ, double *dK, double *dV) {
    const int64_t QW = a->Hq * a->D, KW = a->Hkv * a->D;
    memset(dQ, 0, (size_t)(S * QW) * 8);
    memset(dK, 0, (size_t)(S * KW) * 8);
    memset(dV, 0, (size_t)(S * KW) * 8);
    for (int64_t i = 0; i < S; i++)
        for (int h = 0; h < a->Hq; h++)
            ref_attn_row(a, q + i * QW, k, v, 0, S, h, 1, i, O + i * QW + h * a->D, L + i * a->Hq + h);
    for (int64_t i = 0; i < S; i++)
        for (int h = 0; h < a->Hq; h++) {
            const double Dr = dot(dO + i * QW + h * a->D, O + i * QW + h * a->D, a->D);
            ref_attn_row_bwd(a, q + i * QW, k, v, dO + i * QW, L[i * a->Hq + h], Dr, 0, S, h, 1, i, dQ + i * QW, dK, dV);
        }
}

/* ------------------------------------------------------------------ the zigzag split */

/* Rank r holds the rows pos[r * n .. r * n + n) of the sequence, in that order: its queries, their
 * output gradient and its own K/V rows. Everything else it will see arrives by the ring. */
void ref_ring_init_rows(RefRing *R, int P, int64_t S, int64_t n, const int64_t *pos, RefHeads a, const double *q,
                        const double *k, const double *v, const double *dO) {
    memset(R, 0, sizeof *R);
    R->P = P, R->S = S, R->n = n, R->a = a;
    const int64_t QW = a.Hq * a.D, KW = a.Hkv * a.D, KVB = 2 * n * KW;
    R->pos = xmalloc((size_t)(P * n) * 8);
    memcpy(R->pos, pos, (size_t)(P * n) * 8);
    double ***bufs[] = {&R->q, &R->dout, &R->own, &R->o, &R->lse, &R->dq, &R->dkv,
                        &R->kv_cur, &R->kv_nxt, &R->dkv_cur, &R->dkv_nxt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) *bufs[i] = xcalloc((size_t)P, sizeof(double *));
    int **tags[] = {&R->kv_tag, &R->kv_tag_nxt, &R->dkv_tag, &R->dkv_tag_nxt};
    for (size_t i = 0; i < 4; i++) *tags[i] = xcalloc((size_t)P, sizeof(int));
    for (int r = 0; r < P; r++) {
        R->q[r] = xmalloc((size_t)(n * QW) * 8);
        R->dout[r] = xmalloc((size_t)(n * QW) * 8);
        R->own[r] = xmalloc((size_t)KVB * 8);
        R->o[r] = xcalloc((size_t)(n * QW), 8);
        R->lse[r] = xmalloc((size_t)(n * a.Hq) * 8);
        R->dq[r] = xcalloc((size_t)(n * QW), 8);
        R->kv_cur[r] = xmalloc((size_t)KVB * 8);
        R->kv_nxt[r] = xmalloc((size_t)KVB * 8);
        R->dkv_cur[r] = xmalloc((size_t)KVB * 8);
        R->dkv_nxt[r] = xmalloc((size_t)KVB * 8);
        for (int64_t t = 0; t < n; t++) {
            const int64_t g = R->pos[r * n + t];
            memcpy(R->q[r] + t * QW, q + g * QW, (size_t)QW * 8);
            memcpy(R->dout[r] + t * QW, dO + g * QW, (size_t)QW * 8);
            memcpy(R->own[r] + t * KW, k + g * KW, (size_t)KW * 8);       /* K rows, then */
            memcpy(R->own[r] + (n + t) * KW, v + g * KW, (size_t)KW * 8); /* V rows */
        }
    }
}

/* The zigzag split: rank r holds chunks r and 2P-1-r of the 2P chunks, in that order (common/zigzag.c) */
void ref_ring_init(RefRing *R, int P, int64_t S, RefHeads a, const double *q, const double *k, const double *v,
                   const double *dO) {
    int64_t *pos = xmalloc((size_t)S * 8);
    for (int r = 0; r < P; r++) zigzag_positions(S, P, r, pos + r * (S / P));
    ref_ring_init_rows(R, P, S, S / P, pos, a, q, k, v, dO);
    free(pos);
}

/* ------------------------------------------------------------------ the ring */

/* One ring step for all P ranks, as stage 3's ring_pass: rank r sends cur[r] to rank r+1 and
 * receives rank r-1's into nxt[r]; then what arrived becomes its current buffer and the old one its
 * next receive buffer (double buffering). Receive buffers are poisoned with NaN first, so a rank
 * that received nothing computes with NaN. Tags travel with the data. */
void ref_ring_pass(int P, double **cur, int *tag, double **nxt, int *tag_nxt, int64_t len) {
    for (int r = 0; r < P; r++) {
        for (int64_t i = 0; i < len; i++) nxt[r][i] = NAN;
        tag_nxt[r] = -1;
    }
    for (int r = 0; r < P; r++) {
        const int to = (r + 1) % P;
        memcpy(nxt[to], cur[r], (size_t)len * 8);
        tag_nxt[to] = tag[r];
    }
    for (int r = 0; r < P; r++) {
        double *t = cur[r];
        cur[r] = nxt[r];
        nxt[r] = t;
        tag[r] = tag_nxt[r];
    }
}

/* At step i rank r holds the K/V of rank src = (r - i) mod P and runs one block, ring_block's
 * (common/zigzag.c; zigzag.h argues each case):
 *   i = 0       its own K/V: all 2c queries against all 2c keys, causal in local order (the two
 *               diagonal chunk pairs and its tail against its head; its head against its tail is
 *               in the future, masked);
 *   1 <= i <= r src < r: all 2c queries against src's head chunk, no mask (src's tail is in the
 *               future of both: skipped, never computed);
 *   i > r       src > r: only its tail's c queries, against all 2c keys, no mask (both of src's
 *               chunks are in its head's future: skipped).
 * Each block's (o_b, lse_b) merges into the running (o, lse) by log-sum-exp (lse_merge_row:
 * o = (e^lse o + e^lse_b o_b) / (e^lse + e^lse_b), lse = log(e^lse + e^lse_b)); lse starts at
 * -inf, "no key yet", so the first block is copied. After P steps every row has seen each of its
 * keys exactly once, and o, lse are the softmax over all of them. */
/* The blocks of rank r's call at a ring step: the step's one block unpacked; with documents, the
 * blocks docs_blocks cuts it into (rank r's positions for the queries, src's for the keys). count:
 * add their pairs to R->pairs (the forward's; the backward repeats the same blocks). */
static int64_t step_blocks(RefRing *R, int r, const RingBlock *b, DocBlock **out, int64_t *cap, int count) {
    if (!R->doc_start) {
        (*out)[0] = (DocBlock){b->q0, b->nq, b->k0, b->nk, b->causal};
        if (count) R->pairs += b->causal ? b->nq * (b->nq + 1) / 2 : b->nq * b->nk;
        return 1;
    }
    const int64_t *qpos = R->pos + r * R->n, *kpos = R->pos + b->src * R->n;
    int64_t nb;
    while ((nb = docs_blocks(R->doc_start, R->ndocs, qpos, b->q0, b->nq, kpos, b->k0, b->nk, *out, *cap)) > *cap) {
        *cap = nb;
        *out = realloc(*out, (size_t)nb * sizeof **out);
    }
    if (count) R->pairs += docs_pairs(*out, nb);
    return nb;
}

void ref_ring_bwd_start(RefRing *R) {
    const int64_t KVB = 2 * R->n * R->a.Hkv * R->a.D;
    for (int r = 0; r < R->P; r++) {
        memcpy(R->kv_cur[r], R->own[r], (size_t)KVB * 8);
        R->kv_tag[r] = r;
        memset(R->dkv_cur[r], 0, (size_t)KVB * 8);
        R->dkv_tag[r] = r;
    }
}

void ref_ring_forward(RefRing *R) {
    const int P = R->P;
    const int64_t n = R->n, D = R->a.D, H = R->a.Hq, QW = H * D, KW = R->a.Hkv * D, KVB = 2 * n * KW;
    double *ob = xmalloc((size_t)D * 8), lb;
    int64_t cap = 16;
    DocBlock *blk = xmalloc((size_t)cap * sizeof *blk);
    for (int r = 0; r < P; r++) {
        memcpy(R->kv_cur[r], R->own[r], (size_t)KVB * 8);
        R->kv_tag[r] = r;
        for (int64_t i = 0; i < n * H; i++) R->lse[r][i] = -INFINITY;
    }
    for (int step = 0; step < P; step++) {
        for (int r = 0; r < P; r++) {
            const RingBlock b = ring_block(R->S, P, r, step);
            R->bad_src += R->kv_tag[r] != b.src;
            const double *kk = R->kv_cur[r], *vv = R->kv_cur[r] + n * KW;
            const int64_t nb = step_blocks(R, r, &b, &blk, &cap, 1);
            for (int64_t i = 0; i < nb; i++) {
                const DocBlock *d = &blk[i];
                for (int64_t t = d->q0; t < d->q0 + d->nq; t++)
                    for (int h = 0; h < H; h++) { /* a square's query t is key t - q0 + k0's row */
                        ref_attn_row(&R->a, R->q[r] + t * QW, kk, vv, d->k0, d->nk, h, d->causal, t - d->q0 + d->k0,
                                     ob, &lb);
                        lse_merge_row(R->o[r] + t * QW + h * D, R->lse[r] + t * H + h, ob, lb, D);
                    }
            }
        }
        /* the K/V go on to the next rank (stage 3 sends them while the block computes); after the
         * last step nobody needs them */
        if (step + 1 < P) ref_ring_pass(P, R->kv_cur, R->kv_tag, R->kv_nxt, R->kv_tag_nxt, KVB);
    }
    free(ob);
    free(blk);
}

/* The same blocks, in the same order, backward, each with the row's FINAL o and lse (see
 * ref_attn_row_bwd). A block's dQ belongs to this rank's rows: it adds up at home. Its dK/dV belong
 * to src's K/V: they join the running dK/dV sum that travels with those K/V, and are passed on after
 * every step, P passes in all; after the P-th each rank holds the total for its own K/V. */
void ref_ring_backward(RefRing *R) {
    const int P = R->P;
    const int64_t n = R->n, D = R->a.D, H = R->a.Hq, QW = H * D, KW = R->a.Hkv * D, KVB = 2 * n * KW;
    int64_t cap = 16;
    DocBlock *blk = xmalloc((size_t)cap * sizeof *blk);
    ref_ring_bwd_start(R);
    for (int step = 0; step < P; step++) {
        for (int r = 0; r < P; r++) {
            const RingBlock b = ring_block(R->S, P, r, step);
            R->bad_src += R->kv_tag[r] != b.src || R->dkv_tag[r] != b.src;
            const double *kk = R->kv_cur[r], *vv = R->kv_cur[r] + n * KW;
            double *dk = R->dkv_cur[r], *dv = R->dkv_cur[r] + n * KW;
            const int64_t nb = step_blocks(R, r, &b, &blk, &cap, 0);
            for (int64_t i = 0; i < nb; i++) {
                const DocBlock *d = &blk[i];
                for (int64_t t = d->q0; t < d->q0 + d->nq; t++)
                    for (int h = 0; h < H; h++) {
                        const double Dr = dot(R->dout[r] + t * QW + h * D, R->o[r] + t * QW + h * D, D);
                        ref_attn_row_bwd(&R->a, R->q[r] + t * QW, kk, vv, R->dout[r] + t * QW, R->lse[r][t * H + h],
                                         Dr, d->k0, d->nk, h, d->causal, t - d->q0 + d->k0, R->dq[r] + t * QW, dk, dv);
                    }
            }
        }
        if (P > 1) ref_ring_pass(P, R->dkv_cur, R->dkv_tag, R->dkv_nxt, R->dkv_tag_nxt, KVB);
        if (step + 1 < P) ref_ring_pass(P, R->kv_cur, R->kv_tag, R->kv_nxt, R->kv_tag_nxt, KVB);
    }
    for (int r = 0; r < P; r++) {
        R->bad_src += R->dkv_tag[r] != r; /* after P passes: each rank's own total */
        R->dkv[r] = R->dkv_cur[r];
    }
    free(blk);
}

void ref_ring_free(RefRing *R) {
    for (int r = 0; r < R->P; r++) {
        free(R->q[r]); free(R->dout[r]); free(R->own[r]); free(R->o[r]); free(R->lse[r]); free(R->dq[r]);
        free(R->kv_cur[r]); free(R->kv_nxt[r]); free(R->dkv_cur[r]); free(R->dkv_nxt[r]); /* dkv[r] is one of these */
    }
    double **bufs[] = {R->q, R->dout, R->own, R->o, R->lse, R->dq, R->dkv, R->kv_cur, R->kv_nxt, R->dkv_cur, R->dkv_nxt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(R->kv_tag); free(R->kv_tag_nxt); free(R->dkv_tag); free(R->dkv_tag_nxt);
    free(R->pos);
    memset(R, 0, sizeof *R);
}
