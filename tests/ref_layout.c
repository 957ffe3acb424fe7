/* ref_layout.c -- ring attention and the linear layers' state passing on a layout of packed
 * documents (common/layout.h), fp64, P ranks simulated in one process (ref_layout.h). */
#include "ref_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/zigzag.h"

/* ------------------------------------------------------------------ ring attention */

void ref_layout_ring_init(RefRing *R, const Layout *L, RefHeads a, const double *q, const double *k, const double *v,
                          const double *dO) {
    int64_t *pos = xmalloc((size_t)(L->P * L->n) * 8);
    for (int r = 0; r < L->P; r++) layout_positions(L, r, pos + r * L->n);
    ref_ring_init_rows(R, L->P, L->S, L->n, pos, a, q, k, v, dO);
    free(pos);
}


static LayoutBlock *blocks_of(const Layout *L, int r, int step, int64_t *nb) {
    *nb = layout_blocks(L, r, step, NULL, 0);
    LayoutBlock *b = xmalloc((size_t)(*nb ? *nb : 1) * sizeof *b);
    layout_blocks(L, r, step, b, *nb);
    return b;
}

static double dot(const double *x, const double *y, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

void ref_layout_ring_forward(RefRing *R, const Layout *L, int drop_step) {
    const int P = R->P;
    const int64_t n = R->n, D = R->a.D, H = R->a.Hq, QW = H * D, KW = R->a.Hkv * D, KVB = 2 * n * KW;
    double *ob = xmalloc((size_t)D * 8), lb;
    for (int r = 0; r < P; r++) {
        memcpy(R->kv_cur[r], R->own[r], (size_t)KVB * 8);
        R->kv_tag[r] = r;
        for (int64_t i = 0; i < n * H; i++) R->lse[r][i] = -INFINITY;
    }
    for (int step = 0; step < P; step++) {
        for (int r = 0; r < P; r++) {
            R->bad_src += R->kv_tag[r] != layout_src(L, r, step);
            if (step == drop_step) continue;
            const double *kk = R->kv_cur[r], *vv = R->kv_cur[r] + n * KW;
            int64_t nb;
            LayoutBlock *blk = blocks_of(L, r, step, &nb);
            for (int64_t i = 0; i < nb; i++) {
                const DocBlock *d = &blk[i].b;
                R->pairs += blk[i].pairs;
                for (int64_t t = d->q0; t < d->q0 + d->nq; t++)
                    for (int h = 0; h < H; h++) { /* a diagonal block's query t is key t - q0 + k0's row */
                        ref_attn_row(&R->a, R->q[r] + t * QW, kk, vv, d->k0, d->nk, h, d->causal, t - d->q0 + d->k0, ob, &lb);
                        lse_merge_row(R->o[r] + t * QW + h * D, R->lse[r] + t * H + h, ob, lb, D);
                    }
            }
            free(blk);
        }
        if (step + 1 < P) ref_ring_pass(P, R->kv_cur, R->kv_tag, R->kv_nxt, R->kv_tag_nxt, KVB);
    }
    free(ob);
}

void ref_layout_ring_backward(RefRing *R, const Layout *L, int drop_step) {
    const int P = R->P;
    const int64_t n = R->n, D = R->a.D, H = R->a.Hq, QW = H * D, KW = R->a.Hkv * D, KVB = 2 * n * KW;
    ref_ring_bwd_start(R);
    for (int step = 0; step < P; step++) {
        for (int r = 0; r < P; r++) {
            const int src = layout_src(L, r, step);
            R->bad_src += R->kv_tag[r] != src || R->dkv_tag[r] != src;
            if (step == drop_step) continue;
            const double *kk = R->kv_cur[r], *vv = R->kv_cur[r] + n * KW;
            double *dk = R->dkv_cur[r], *dv = R->dkv_cur[r] + n * KW;
            int64_t nb;
            LayoutBlock *blk = blocks_of(L, r, step, &nb);
            for (int64_t i = 0; i < nb; i++) {
                const DocBlock *d = &blk[i].b;
                for (int64_t t = d->q0; t < d->q0 + d->nq; t++)
                    for (int h = 0; h < H; h++) {
                        const double Dr = dot(R->dout[r] + t * QW + h * D, R->o[r] + t * QW + h * D, D);
                        ref_attn_row_bwd(&R->a, R->q[r] + t * QW, kk, vv, R->dout[r] + t * QW, R->lse[r][t * H + h], Dr,
                                         d->k0, d->nk, h, d->causal, t - d->q0 + d->k0, R->dq[r] + t * QW, dk, dv);
                    }
            }
            free(blk);
        }
        if (P > 1) ref_ring_pass(P, R->dkv_cur, R->dkv_tag, R->dkv_nxt, R->dkv_tag_nxt, KVB);
        if (step + 1 < P) ref_ring_pass(P, R->kv_cur, R->kv_tag, R->kv_nxt, R->kv_tag_nxt, KVB);
    }
    for (int r = 0; r < P; r++) {
        R->bad_src += R->dkv_tag[r] != r;
        R->dkv[r] = R->dkv_cur[r];
    }
}

/* ------------------------------------------------------------------ linear attention's state */


/* Each rank's rows of a window-order array x [S, w]: local[r] [n, w] */
static double **scatter_ranks(const Layout *L, const double *x, int64_t w) {
    double **loc = xcalloc((size_t)L->P, sizeof *loc);
    int64_t *pos = xmalloc((size_t)L->n * 8);
    for (int r = 0; r < L->P; r++) {
        loc[r] = xmalloc((size_t)(L->n * w) * 8);
        layout_positions(L, r, pos);
        for (int64_t t = 0; t < L->n; t++) memcpy(loc[r] + t * w, x + pos[t] * w, (size_t)w * 8);
    }
    free(pos);
    return loc;
}
/* ... and back: x [S, w] from every rank's local[r] (freed) */
static void gather_ranks(const Layout *L, double **loc, int64_t w, double *x) {
    int64_t *pos = xmalloc((size_t)L->n * 8);
    for (int r = 0; r < L->P; r++) {
        layout_positions(L, r, pos);
        for (int64_t t = 0; t < L->n; t++) memcpy(x + pos[t] * w, loc[r] + t * w, (size_t)w * 8);
        free(loc[r]);
    }
    free(loc);
    free(pos);
}
static void free_ranks(const Layout *L, double **loc) {
    for (int r = 0; r < L->P; r++) free(loc[r]);
    free(loc);
}

typedef struct {
    double **q, **k, **v, **g, **b, **dout; /* each rank's rows */
    double *M, *B, *C;                      /* every piece's maps, after the all-gather: [npieces, ...] */
} Ranks;

static void ranks_open(Ranks *x, const GdnHeads *h, const Layout *L, const double *q, const double *k, const double *v,
                       const double *g, const double *beta, const double *dout) {
    const int64_t H = h->H;
    x->q = scatter_ranks(L, q, H * h->dk), x->k = scatter_ranks(L, k, H * h->dk), x->v = scatter_ranks(L, v, H * h->dv);
    x->g = scatter_ranks(L, g, H), x->b = scatter_ranks(L, beta, H);
    x->dout = dout ? scatter_ranks(L, dout, H * h->dv) : NULL;
    /* 1. every rank: the state map (M, B) of each of its pieces, from its own rows alone; then the
     *    all-gather (here: one array every rank reads) */
    const int64_t mk = H * h->dk * h->dk, mb = H * h->dv * h->dk;
    x->M = xmalloc((size_t)(L->npieces * mk) * 8);
    x->B = xmalloc((size_t)(L->npieces * mb) * 8);
    x->C = NULL;
    for (int64_t i = 0; i < L->npieces; i++) {
        const LayoutPiece *p = &L->piece[i];
        const int r = p->rank;
        const int64_t t = p->row;
        ref_gdn_map(h, p->len, x->k[r] + t * H * h->dk, x->v[r] + t * H * h->dv, x->g[r] + t * H, x->b[r] + t * H,
                    x->M + i * mk, x->B + i * mb);
    }
}
static void ranks_close(Ranks *x, const Layout *L) {
    free_ranks(L, x->q); free_ranks(L, x->k); free_ranks(L, x->v); free_ranks(L, x->g); free_ranks(L, x->b);
    if (x->dout) free_ranks(L, x->dout);
    free(x->M); free(x->B); free(x->C);
}

static int by_index(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The pieces of piece i's document before it (dir 0: through prev, listed in window order) or after
 * it (dir 1: through next, listed from the document's last piece back), into list; returns how many.
 * Planted REF_LAYOUT_PLANT_RANKS: the same pieces, in rank-major order (their indices) instead. */
static int64_t walk(const Layout *L, int64_t i, int dir, int plant, int64_t *list) {
    int64_t m = 0;
    for (int64_t j = dir ? L->piece[i].next : L->piece[i].prev; j >= 0; j = dir ? L->piece[j].next : L->piece[j].prev)
        list[m++] = j;
    for (int64_t a = 0, b = m - 1; a < b; a++, b--) { /* dir 0: first piece first; dir 1: last piece first */
        const int64_t t = list[a];
        list[a] = list[b], list[b] = t;
    }
    if (plant == REF_LAYOUT_PLANT_RANKS) {
        qsort(list, (size_t)m, 8, by_index);
        if (dir)
            for (int64_t a = 0, b = m - 1; a < b; a++, b--) {
                const int64_t t = list[a];
                list[a] = list[b], list[b] = t;
            }
    }
    return m;
}

/* 2. every rank, for each of its pieces: the initial state, its document's maps before it composed
 *    in window order from zero. Writes start [npieces, H, dv, dk]. */
static void initial_states(const GdnHeads *h, const Layout *L, const Ranks *x, int plant, double *start) {
    const int64_t mk = h->H * h->dk * h->dk, mb = h->H * h->dv * h->dk;
    int64_t *list = xmalloc((size_t)(L->npieces ? L->npieces : 1) * 8);
    for (int64_t i = 0; i < L->npieces; i++) {
        double *S = start + i * mb;
        memset(S, 0, (size_t)mb * 8);
        if (plant == REF_LAYOUT_PLANT_ZERO) continue;
        const int64_t m = walk(L, i, 0, plant, list);
        for (int64_t a = 0; a < m; a++) ref_gdn_map_apply(h, S, x->M + list[a] * mk, x->B + list[a] * mb, 0);
    }
    free(list);
}

int64_t ref_layout_gdn(const GdnHeads *h, const Layout *L, int plant, const double *q, const double *k, const double *v,
                       const double *g, const double *beta, double *o, double *S_final) {
    const int64_t H = h->H, mk = H * h->dk * h->dk, mb = H * h->dv * h->dk;
    Ranks x;
    ranks_open(&x, h, L, q, k, v, g, beta, NULL);
    double *start = xmalloc((size_t)(L->npieces * mb) * 8);
    initial_states(h, L, &x, plant, start);
    /* 3. every rank runs each of its pieces from its initial state */
    double **lo = xcalloc((size_t)L->P, sizeof *lo);
    int64_t sent = 0;
    for (int r = 0; r < L->P; r++) {
        lo[r] = xmalloc((size_t)(L->n * H * h->dv) * 8);
        int64_t mine = 0;
        for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) {
            const LayoutPiece *p = &L->piece[i];
            const int64_t t = p->row;
            double *S = start + i * mb;
            ref_gdn(h, p->len, x.q[r] + t * H * h->dk, x.k[r] + t * H * h->dk, x.v[r] + t * H * h->dv, x.g[r] + t * H,
                    x.b[r] + t * H, S, lo[r] + t * H * h->dv);
            if (p->next < 0) memcpy(S_final + p->doc * mb, S, (size_t)mb * 8);
            else mine += mk + mb; /* a later piece of its document needs its map */
        }
        sent = mine > sent ? mine : sent;
    }
    gather_ranks(L, lo, H * h->dv, o);
    free(start);
    ranks_close(&x, L);
    return sent;
}

void ref_layout_gdn_bwd(const GdnHeads *h, const Layout *L, int plant, const double *q, const double *k, const double *v,
                        const double *g, const double *beta, const double *dout, const double *dS_final, double *dq,
                        double *dk, double *dv, double *dg, double *dbeta, double *dS0) {
    const int64_t H = h->H, dk_ = h->dk, dv_ = h->dv, mk = H * dk_ * dk_, mb = H * dv_ * dk_, n = L->n;
    Ranks x;
    ranks_open(&x, h, L, q, k, v, g, beta, dout);
    double *start = xmalloc((size_t)(L->npieces * mb) * 8), *zero = xcalloc((size_t)mb, 8);
    initial_states(h, L, &x, plant, start);
    /* 1. every rank: each piece's C, its backward from a zero final-state gradient (its outputs'
     *    gradients alone; independent of its initial state), then the all-gather */
    x.C = xcalloc((size_t)(L->npieces * mb), 8);
    double *sq = xmalloc((size_t)(n * H * dk_) * 8), *sk = xmalloc((size_t)(n * H * dk_) * 8),
           *sv = xmalloc((size_t)(n * H * dv_) * 8), *sg = xmalloc((size_t)(n * H) * 8), *sb = xmalloc((size_t)(n * H) * 8);
    for (int64_t i = 0; i < L->npieces; i++) {
        const LayoutPiece *p = &L->piece[i];
        const int r = p->rank;
        const int64_t t = p->row;
        ref_gdn_bwd(h, p->len, x.q[r] + t * H * dk_, x.k[r] + t * H * dk_, x.v[r] + t * H * dv_, x.g[r] + t * H,
                    x.b[r] + t * H, zero, x.dout[r] + t * H * dv_, x.C + i * mb, sq, sk, sv, sg, sb);
    }
    /* 2. and 3. every rank, for each of its pieces: the final state's gradient, from the document's
     *    final-state gradient back through the pieces after it (dS M^T + C, last piece first); then
     *    the piece's backward from its true initial state and that gradient */
    double **ldq = xcalloc((size_t)L->P, sizeof *ldq), **ldk = xcalloc((size_t)L->P, sizeof *ldk),
           **ldv = xcalloc((size_t)L->P, sizeof *ldv), **ldg = xcalloc((size_t)L->P, sizeof *ldg),
           **ldb = xcalloc((size_t)L->P, sizeof *ldb);
    int64_t *list = xmalloc((size_t)(L->npieces ? L->npieces : 1) * 8);
    double *dS = xmalloc((size_t)mb * 8);
    for (int r = 0; r < L->P; r++) {
        ldq[r] = xcalloc((size_t)(n * H * dk_), 8), ldk[r] = xcalloc((size_t)(n * H * dk_), 8);
        ldv[r] = xcalloc((size_t)(n * H * dv_), 8), ldg[r] = xcalloc((size_t)(n * H), 8), ldb[r] = xcalloc((size_t)(n * H), 8);
        for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) {
            const LayoutPiece *p = &L->piece[i];
            const int64_t t = p->row;
            memset(dS, 0, (size_t)mb * 8);
            if (plant != REF_LAYOUT_PLANT_ZERO || p->next < 0) {
                memcpy(dS, dS_final + p->doc * mb, (size_t)mb * 8);
                const int64_t m = walk(L, i, 1, plant, list);
                for (int64_t a = 0; a < m; a++) ref_gdn_map_apply(h, dS, x.M + list[a] * mk, x.C + list[a] * mb, 1);
            }
            ref_gdn_bwd(h, p->len, x.q[r] + t * H * dk_, x.k[r] + t * H * dk_, x.v[r] + t * H * dv_, x.g[r] + t * H,
                        x.b[r] + t * H, start + i * mb, x.dout[r] + t * H * dv_, dS, ldq[r] + t * H * dk_,
                        ldk[r] + t * H * dk_, ldv[r] + t * H * dv_, ldg[r] + t * H, ldb[r] + t * H);
            if (p->prev < 0) memcpy(dS0 + p->doc * mb, dS, (size_t)mb * 8);
        }
    }
    gather_ranks(L, ldq, H * dk_, dq);
    gather_ranks(L, ldk, H * dk_, dk);
    gather_ranks(L, ldv, H * dv_, dv);
    gather_ranks(L, ldg, H, dg);
    gather_ranks(L, ldb, H, dbeta);
    free(list); free(dS); free(start); free(zero); free(sq); free(sk); free(sv); free(sg); free(sb);
    ranks_close(&x, L);
}
