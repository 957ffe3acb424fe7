/* layout.c -- packed documents over context-parallel ranks, balanced (layout.h says how and why). */
#include "layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef __int128 i128;

static int64_t tri(int64_t l) { return l * (l + 1) / 2; }
/* the pairs of l tokens from position p of a document: sum_{j<l} (p + j + 1) */
static int64_t piece_pairs(int64_t p, int64_t l) { return l * p + tri(l); }

static int check_starts(const int64_t *start, int64_t ndocs, int64_t S, int P, int64_t div, char *err, size_t errlen) {
    if (P < 1 || S < 1 || ndocs < 1 || S % div) {
        snprintf(err, errlen, "layout: a window of %lld tokens over %d ranks needs a multiple of %lld tokens and at "
                 "least one document", (long long)S, P, (long long)div);
        return -1;
    }
    if (start[0] != 0) {
        snprintf(err, errlen, "layout: the first document starts at %lld, not 0", (long long)start[0]);
        return -1;
    }
    for (int64_t d = 0; d < ndocs; d++) {
        const int64_t e = d + 1 < ndocs ? start[d + 1] : S;
        if (e <= start[d]) {
            snprintf(err, errlen, "layout: document %lld starts at %lld and ends at %lld (starts must increase, "
                     "the last below %lld)", (long long)d, (long long)start[d], (long long)e, (long long)S);
            return -1;
        }
    }
    return 0;
}

static void open_common(Layout *L, const int64_t *start, int64_t ndocs, int64_t S, int P) {
    memset(L, 0, sizeof *L);
    L->P = P, L->S = S, L->n = S / P, L->ndocs = ndocs;
    L->start = xmalloc((size_t)(ndocs + 1) * 8);
    memcpy(L->start, start, (size_t)ndocs * 8);
    L->start[ndocs] = S;
    L->first = xcalloc((size_t)P + 1, 8);
    L->tokens = xcalloc((size_t)P, 8);
    L->pairs = xcalloc((size_t)P, 8);
    L->core = xcalloc((size_t)ndocs, 8);
    for (int64_t d = 0; d < ndocs; d++) L->W += tri(L->start[d + 1] - L->start[d]);
}

/* ------------------------------------------------------------------ pieces: sort, merge, index */

typedef struct { int64_t cap, n; LayoutPiece *p; } Pieces;
static void add_piece(Pieces *ps, int rank, int64_t doc, int64_t start, int64_t len, const int64_t *dstart) {
    if (len <= 0) return;
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 64;
        ps->p = realloc(ps->p, (size_t)ps->cap * sizeof *ps->p);
        if (!ps->p) DIE("out of memory");
    }
    ps->p[ps->n++] = (LayoutPiece){doc, start, len, start - dstart[doc], 0, -1, -1, rank};
}
static int by_rank_start(const void *a, const void *b) {
    const LayoutPiece *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}
typedef struct { int64_t start, i; } At;
static int by_at(const void *a, const void *b) {
    const At *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Sort the pieces rank by rank in window order, join touching pieces of one document on a rank,
 * number their rows, link each to its document's neighbours, count tokens and pairs. */
static void finish(Layout *L, Pieces *ps) {
    qsort(ps->p, (size_t)ps->n, sizeof *ps->p, by_rank_start);
    int64_t m = 0;
    for (int64_t i = 0; i < ps->n; i++) {
        LayoutPiece *a = m ? &ps->p[m - 1] : NULL;
        if (a && a->rank == ps->p[i].rank && a->doc == ps->p[i].doc && a->start + a->len == ps->p[i].start) a->len += ps->p[i].len;
        else ps->p[m++] = ps->p[i];
    }
    L->piece = ps->p, L->npieces = m;
    int64_t row = 0;
    for (int64_t i = 0; i < m; i++) {
        LayoutPiece *p = &L->piece[i];
        if (i == 0 || L->piece[i - 1].rank != p->rank) row = 0;
        p->row = row;
        row += p->len;
        L->tokens[p->rank] += p->len;
        L->pairs[p->rank] += piece_pairs(p->pos, p->len);
    }
    for (int r = 0, i = 0; r <= L->P; r++) {
        while (i < m && L->piece[i].rank < r) i++;
        L->first[r] = i;
    }
    L->order = xmalloc((size_t)(m ? m : 1) * 8);
    At *at = xmalloc((size_t)(m ? m : 1) * sizeof *at);
    for (int64_t i = 0; i < m; i++) at[i] = (At){L->piece[i].start, i};
    qsort(at, (size_t)m, sizeof *at, by_at);
    for (int64_t i = 0; i < m; i++) L->order[i] = at[i].i;
    free(at);
    for (int64_t i = 1; i < m; i++) {
        LayoutPiece *a = &L->piece[L->order[i - 1]], *b = &L->piece[L->order[i]];
        if (a->doc == b->doc) a->next = L->order[i], b->prev = L->order[i - 1];
    }
}

/* ------------------------------------------------------------------ the stream's order */

/* Alive-element search over a sorted array of len entries: the first alive index >= i (len if none)
 * and the last alive index <= i (-1 if none), by path-compressed skip pointers. */
typedef struct { int64_t len, *right, *left; } Alive;
static void alive_open(Alive *a, int64_t len) {
    a->len = len;
    a->right = xmalloc((size_t)(len + 1) * 8);
    a->left = xmalloc((size_t)(len + 1) * 8);
    for (int64_t i = 0; i <= len; i++) a->right[i] = i, a->left[i] = i; /* left is shifted by one: left[i + 1] <-> i */
}
static int64_t alive_right(Alive *a, int64_t i) {
    int64_t r = i;
    while (a->right[r] != r) r = a->right[r];
    while (a->right[i] != r) { const int64_t t = a->right[i]; a->right[i] = r; i = t; }
    return r;
}
static int64_t alive_left(Alive *a, int64_t i) { /* over shifted indices: 0 means none */
    int64_t j = i + 1, r = j;
    while (a->left[r] != r) r = a->left[r];
    while (a->left[j] != r) { const int64_t t = a->left[j]; a->left[j] = r; j = t; }
    return r - 1;
}
static void alive_kill(Alive *a, int64_t i) { a->right[i] = i + 1, a->left[i + 1] = i; }
static void alive_close(Alive *a) { free(a->right); free(a->left); }

typedef struct { i128 e; int64_t k; } Key;
static int by_key(const void *a, const void *b) {
    const Key *x = a, *y = b;
    if (x->e != y->e) return x->e < y->e ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* The item of the sorted keys a[0..len) whose e is closest to target, alive; -1 if none. Ties: the
 * larger e. */
static int64_t nearest(const Key *a, int64_t len, Alive *al, i128 target) {
    int64_t lo = 0, hi = len; /* first index with e >= target */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid].e < target) lo = mid + 1;
        else hi = mid;
    }
    const int64_t up = alive_right(al, lo), dn = lo > 0 ? alive_left(al, lo - 1) : -1;
    if (up >= len) return dn;
    if (dn < 0) return up;
    return a[up].e - target <= target - a[dn].e ? up : dn;
}

/* The order of the items (k = 0..K-1 with weight pairs w[k] over l[k] tokens) that keeps
 * D = (pairs so far) T - Ws (tokens so far) on the side of 0 opposite to each next item's excess
 * E = w T - Ws l, closest to 0 (layout.h, step 2). Writes out[K]. */
static void stream_order(const int64_t *w, const int64_t *l, int64_t K, int64_t *out) {
    i128 T = 0, Ws = 0;
    for (int64_t k = 0; k < K; k++) T += l[k], Ws += w[k];
    Key *pos = xmalloc((size_t)(K ? K : 1) * sizeof *pos), *neg = xmalloc((size_t)(K ? K : 1) * sizeof *neg);
    int64_t np = 0, nn = 0;
    for (int64_t k = 0; k < K; k++) {
        const i128 e = (i128)w[k] * T - Ws * l[k];
        if (e >= 0) pos[np++] = (Key){e, k};
        else neg[nn++] = (Key){e, k};
    }
    qsort(pos, (size_t)np, sizeof *pos, by_key);
    qsort(neg, (size_t)nn, sizeof *neg, by_key);
    Alive ap, an;
    alive_open(&ap, np);
    alive_open(&an, nn);
    int64_t lp = np, ln = nn;
    i128 D = 0;
    for (int64_t i = 0; i < K; i++) {
        /* D <= 0 takes an item with e >= 0, D > 0 one with e < 0: the excesses sum to exactly 0, so
         * the side needed is never empty while items remain */
        const int use_pos = D <= 0 ? lp > 0 : ln == 0;
        const Key *a = use_pos ? pos : neg;
        Alive *al = use_pos ? &ap : &an;
        const int64_t j = nearest(a, use_pos ? np : nn, al, -D);
        if (j < 0) DIE("layout: the stream ran out of items");
        alive_kill(al, j);
        if (use_pos) lp--;
        else ln--;
        D += a[j].e;
        out[i] = a[j].k;
    }
    alive_close(&ap);
    alive_close(&an);
    free(pos);
    free(neg);
}

/* B = max(0, e_max) + 2 delta_max in pairs (layout.h), from the items' first positions p[k] */
static double stream_bound(const int64_t *p, const int64_t *w, const int64_t *l, int64_t K) {
    double T = 0, Ws = 0, emax = 0, dmax = 0;
    for (int64_t k = 0; k < K; k++) T += (double)l[k], Ws += (double)w[k];
    if (K == 0) return 0;
    const double rho = Ws / T;
    for (int64_t k = 0; k < K; k++) {
        emax = fmax(emax, (double)w[k] - rho * (double)l[k]);
        /* g(j) = j p + j (j+1)/2 - rho j is least near j* = rho - p - 1/2: try its two integer neighbours */
        const double js = rho - (double)p[k] - 0.5;
        for (int t = 0; t < 2; t++) {
            double j = t ? ceil(js) : floor(js);
            j = fmin(fmax(j, 0), (double)l[k]);
            dmax = fmax(dmax, -(j * (double)p[k] + j * (j + 1) / 2 - rho * j));
        }
    }
    return emax + 2 * dmax;
}

/* ------------------------------------------------------------------ the balanced layout */

int layout_balanced(Layout *L, const int64_t *start, int64_t ndocs, int64_t S, int P, double whole_frac, char *err,
                    size_t errlen) {
    memset(L, 0, sizeof *L);
    if (check_starts(start, ndocs, S, P, P, err, errlen)) return -1;
    if (!(whole_frac >= 0)) {
        snprintf(err, errlen, "layout: whole_frac %g is not >= 0", whole_frac);
        return -1;
    }
    open_common(L, start, ndocs, S, P);
    const int64_t *st = L->start;
    /* 1. split or whole */
    const double theta = whole_frac * (double)L->W / P;
    int64_t cores = 0; /* 2 sum q: the core tokens on every rank */
    for (int64_t d = 0; d < ndocs; d++) {
        const int64_t len = st[d + 1] - st[d];
        if (P > 1 && len >= 2 * P && (double)tri(len) > theta) L->core[d] = len / (2 * P), L->nsplit++;
        cores += 2 * L->core[d];
    }
    /* 2. the items: whole documents and the split ones' middles */
    int64_t *idoc = xmalloc((size_t)ndocs * 8), *ip = xmalloc((size_t)ndocs * 8), *il = xmalloc((size_t)ndocs * 8),
            *iw = xmalloc((size_t)ndocs * 8), *ord = xmalloc((size_t)ndocs * 8), K = 0;
    for (int64_t d = 0; d < ndocs; d++) {
        const int64_t len = st[d + 1] - st[d], q = L->core[d], m = len - 2 * P * q;
        if (m > 0) idoc[K] = d, ip[K] = P * q, il[K] = m, iw[K] = piece_pairs(P * q, m), K++;
    }
    stream_order(iw, il, K, ord);
    L->bound = stream_bound(ip, iw, il, K);
    /* 3. cut into P runs of R tokens */
    const int64_t R = L->n - cores;
    Pieces ps = {0};
    int *inner = xmalloc((size_t)ndocs * sizeof(int));
    for (int64_t d = 0; d < ndocs; d++) inner[d] = P - 1;
    int64_t x = 0;
    for (int64_t i = 0; i < K; i++) {
        const int64_t k = ord[i], d = idoc[k];
        if (L->core[d]) inner[d] = (int)(x / R);
        for (int64_t o = 0; o < il[k];) {
            const int r = (int)(x / R);
            const int64_t take = il[k] - o < (r + 1) * R - x ? il[k] - o : (r + 1) * R - x;
            add_piece(&ps, r, d, st[d] + ip[k] + o, take, st);
            x += take, o += take;
        }
    }
    /* 4. the cores: slice j (outermost first) to the ranks in order, the middle's rank innermost */
    for (int64_t d = 0; d < ndocs; d++) {
        const int64_t q = L->core[d], len = st[d + 1] - st[d];
        if (!q) continue;
        for (int j = 0, r = 0; j < P; j++, r++) {
            if (r == inner[d]) r++;
            const int rank = j == P - 1 ? inner[d] : r;
            add_piece(&ps, rank, d, st[d] + j * q, q, st);
            add_piece(&ps, rank, d, st[d] + len - (j + 1) * q, q, st);
        }
    }
    /* 5. window order on each rank */
    finish(L, &ps);
    free(idoc); free(ip); free(il); free(iw); free(ord); free(inner);
    return 0;
}

int64_t layout_rank_blocks(const Layout *L, int r) {
    int64_t nb = 0;
    for (int64_t i = L->first[r]; i < L->first[r + 1]; i++)
        for (int64_t j = i; j >= 0; j = L->piece[j].prev) nb++;
    return nb;
}

double layout_cost(const Layout *L) {
    double mx = 0;
    for (int r = 0; r < L->P; r++) {
        const double c = (double)L->pairs[r] + (double)LAYOUT_BLOCK_PAIRS * (double)layout_rank_blocks(L, r);
        mx = c > mx ? c : mx;
    }
    return mx * L->P / (double)L->W;
}

/* Is candidate a a better layout than b? One whose busiest rank holds at most LAYOUT_MAX_BALANCE x the
 * mean pairs beats one that does not; between two that do, the cheaper (layout_cost); between two that do
 * not, the more even. Ties keep b, the earlier: the candidates' order decides, the same on every rank. */
static int layout_better(const Layout *a, const Layout *b) {
    const double ba = layout_balance(a), bb = layout_balance(b);
    const int oka = ba <= LAYOUT_MAX_BALANCE, okb = bb <= LAYOUT_MAX_BALANCE;
    if (oka != okb) return oka;
    return oka ? layout_cost(a) < layout_cost(b) : ba < bb;
}

/* Fewer splits, fewer blocks; more splits, pairs more even. The seed-1 1M window of bench/packed_window.py
 * at P = 8 takes 1/8 (13 documents split at 1/32, 8 at 1/8: 214 and 133 blocks on the busiest rank, pairs
 * 1.008x and 1.023x the mean). On a window of short documents (mean 4K) splitting pays nothing: 1/32 would
 * split 67 and give each rank about 1,030 blocks (the H200 measured 1.1 s more a step than the zigzag), and
 * with none split the stream's small documents pile 70 blocks on one rank; the zigzag's 1.09x pairs and 42
 * blocks cost least there, and it is taken. A one-document window takes the mirror slices of 1/64, the
 * zigzag row for row when 2P divides it. */
int layout_best(Layout *L, const int64_t *start, int64_t ndocs, int64_t S, int P, double *frac, char *err,
                size_t errlen) {
    static const double fracs[] = {1.0 / 64, 1.0 / 32, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, INFINITY};
    const int ncand = (int)(sizeof fracs / sizeof *fracs) + (S % (2 * (int64_t)P) == 0); /* the zigzag last */
    memset(L, 0, sizeof *L);
    double best = 0;
    for (int i = 0; i < ncand; i++) {
        Layout t;
        const int zig = i == (int)(sizeof fracs / sizeof *fracs);
        if (zig ? layout_zigzag(&t, start, ndocs, S, P, err, errlen)
                : layout_balanced(&t, start, ndocs, S, P, fracs[i], err, errlen)) {
            if (i) layout_free(L);
            return -1;
        }
        if (i == 0 || layout_better(&t, L)) {
            if (i) layout_free(L);
            *L = t, best = zig ? 0 : fracs[i];
        } else
            layout_free(&t);
    }
    if (frac) *frac = best;
    return 0;
}

int layout_zigzag(Layout *L, const int64_t *start, int64_t ndocs, int64_t S, int P, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    if (check_starts(start, ndocs, S, P, 2 * (int64_t)P, err, errlen)) return -1;
    open_common(L, start, ndocs, S, P);
    L->zigzag = 1;
    const int64_t c = S / (2 * P);
    Pieces ps = {0};
    for (int r = 0; r < P; r++)
        for (int h = 0; h < 2; h++) {
            const int64_t a = (h ? 2 * P - 1 - r : r) * c, b = a + c;
            int64_t lo = 0, hi = ndocs - 1; /* the document holding a */
            while (lo < hi) {
                const int64_t mid = (lo + hi + 1) / 2;
                if (L->start[mid] <= a) lo = mid;
                else hi = mid - 1;
            }
            for (int64_t d = lo; d < ndocs && L->start[d] < b; d++) {
                const int64_t s0 = L->start[d] > a ? L->start[d] : a, s1 = L->start[d + 1] < b ? L->start[d + 1] : b;
                add_piece(&ps, r, d, s0, s1 - s0, L->start);
            }
        }
    finish(L, &ps);
    return 0;
}

void layout_free(Layout *L) {
    free(L->start); free(L->piece); free(L->first); free(L->order); free(L->tokens); free(L->pairs); free(L->core);
    memset(L, 0, sizeof *L);
}

void layout_positions(const Layout *L, int r, int64_t *pos) {
    for (int64_t i = L->first[r]; i < L->first[r + 1]; i++)
        for (int64_t t = 0; t < L->piece[i].len; t++) pos[L->piece[i].row + t] = L->piece[i].start + t;
}

void layout_rope_positions(const Layout *L, int r, int32_t *pos) {
    for (int64_t i = L->first[r]; i < L->first[r + 1]; i++)
        for (int64_t t = 0; t < L->piece[i].len; t++) pos[L->piece[i].row + t] = (int32_t)(L->piece[i].pos + t);
}

/* ------------------------------------------------------------------ the ring on a layout */

int layout_src(const Layout *L, int r, int step) { return ((r - step) % L->P + L->P) % L->P; }

int64_t layout_blocks(const Layout *L, int r, int step, LayoutBlock *out, int64_t cap) {
    const int src = layout_src(L, r, step);
    int64_t nb = 0;
    for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) {
        const LayoutPiece *a = &L->piece[i];
        /* the document's pieces before a (and a itself), walked back through prev */
        for (int64_t j = i; j >= 0; j = L->piece[j].prev) {
            const LayoutPiece *b = &L->piece[j];
            if (b->rank != src || (j == i && step != 0)) continue;
            LayoutBlock k;
            k.doc = a->doc, k.qp = i, k.kp = j;
            k.kind = j == i ? LAYOUT_DIAG : LAYOUT_FULL;
            k.b = (DocBlock){a->row, a->len, b->row, b->len, k.kind == LAYOUT_DIAG};
            k.pairs = k.kind == LAYOUT_DIAG ? tri(a->len) : a->len * b->len;
            if (nb < cap) out[nb] = k;
            nb++;
        }
    }
    return nb;
}

int64_t layout_step_pairs(const Layout *L, int r, int step) {
    const int src = layout_src(L, r, step);
    int64_t p = 0;
    for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) {
        const LayoutPiece *a = &L->piece[i];
        if (step == 0) p += tri(a->len);
        for (int64_t j = a->prev; j >= 0; j = L->piece[j].prev)
            if (L->piece[j].rank == src) p += a->len * L->piece[j].len;
    }
    return p;
}

double layout_balance(const Layout *L) {
    int64_t mx = 0;
    for (int r = 0; r < L->P; r++) mx = L->pairs[r] > mx ? L->pairs[r] : mx;
    return L->W ? (double)mx * L->P / (double)L->W : 1;
}

double layout_ring_balance(const Layout *L) {
    double crit = 0;
    for (int s = 0; s < L->P; s++) {
        int64_t mx = 0;
        for (int r = 0; r < L->P; r++) {
            const int64_t p = layout_step_pairs(L, r, s);
            mx = p > mx ? p : mx;
        }
        crit += (double)mx;
    }
    return L->W ? crit * L->P / (double)L->W : 1;
}

void layout_print(FILE *f, const Layout *L) {
    for (int r = 0; r < L->P; r++)
        fprintf(f, "rank %d: %lld tokens, %lld pairs\n", r, (long long)L->tokens[r], (long long)L->pairs[r]);
    fprintf(f, "balance: busiest rank %.2fx the mean\n", layout_balance(L));
}

/* ------------------------------------------------------------------ a stage's windows */

int layout_option(const char *v, int packed, int hybrid) { return packed && !hybrid && (!v || !strcmp(v, "balanced")); }

void layout_window(DocsWindow *d, const uint32_t *tok, int64_t seq, int64_t eot, int P, int rank, int balanced,
                   int64_t *pos) {
    const int64_t n = seq / P;
    if (eot < 0) {
        zigzag_positions(seq, P, rank, pos);
        return;
    }
    docs_window_cut(d, tok, seq, (uint32_t)eot);
    if (balanced) {
        Layout L;
        char err[256];
        if (layout_best(&L, d->start, d->n, seq, P, NULL, err, sizeof err)) DIE("%s", err);
        for (int r = 0; r < P; r++) layout_positions(&L, r, d->rows + r * n);
        layout_free(&L);
    } else
        for (int r = 0; r < P; r++) zigzag_positions(seq, P, r, d->rows + r * n);
    memcpy(pos, d->rows + rank * n, (size_t)n * sizeof *pos);
}

RingBlock layout_ring_block(int64_t seq, int P, int r, int step, int balanced) {
    if (!balanced) return ring_block(seq, P, r, step);
    const int64_t n = seq / P;
    return (RingBlock){.src = ((r - step) % P + P) % P, .causal = step == 0, .q0 = 0, .nq = n, .k0 = 0, .nk = n};
}

/* the plan's line for the split a window took (layout_best) */
static void print_split(FILE *f, const Layout *L, double frac) {
    int64_t nb = 0;
    for (int r = 0; r < L->P; r++) {
        const int64_t b = layout_rank_blocks(L, r);
        nb = b > nb ? b : nb;
    }
    if (L->zigzag) fprintf(f, "split: the zigzag's chunks");
    else if (!L->nsplit) fprintf(f, "split: none of %lld documents", (long long)L->ndocs);
    else fprintf(f, "split: %lld of %lld documents, those over 1/%.0f of the mean rank's pairs", (long long)L->nsplit,
                 (long long)L->ndocs, 1 / frac);
    fprintf(f, "; at most %lld attention blocks a rank a ring pass. Of the layouts within %.2fx the mean pairs, "
            "this one costs the busiest rank least, a block's call weighing about %d pairs\n", (long long)nb,
            LAYOUT_MAX_BALANCE, LAYOUT_BLOCK_PAIRS);
}

void layout_plan(FILE *f, const TokenFile *tf, int64_t seq, int P, int64_t eot, int balanced, int hybrid) {
    if (balanced)
        fprintf(f, "packed layout (--layout balanced): each window's long documents split over the %d ranks in mirror "
                "slices, the rest whole and placed to even the ranks' attention pairs, %lld tokens a rank "
                "(common/layout.h)\n", P, (long long)(seq / P));
    else
        fprintf(f, "packed layout: the zigzag, rank r holding chunks r and 2P-1-r of each window%s\n",
                hybrid ? " (a Qwen3.5 hybrid: its linear layers pass their state per zigzag chunk; the balanced layout "
                         "is for dense and MoE models yet)" : " (--layout zigzag)");
    if (!tf || !tf->ids || tf->count < seq + 1) return; /* no token file opened (an advice's plan) */
    Loader ld;
    char err[512];
    if (loader_init(&ld, tf, seq, 1, 0, err, sizeof err)) return;
    uint32_t *ids = xmalloc((size_t)(seq + 1) * sizeof *ids);
    int64_t *start = xmalloc((size_t)(seq + 1) * 8);
    loader_window(&ld, 0, ids);
    const int64_t nd = docs_split(ids, seq, (uint32_t)eot, start);
    Layout L;
    double frac = 0;
    if (balanced ? layout_best(&L, start, nd, seq, P, &frac, err, sizeof err)
                 : layout_zigzag(&L, start, nd, seq, P, err, sizeof err))
        fprintf(f, "packed layout: %s\n", err);
    else {
        fprintf(f, "the first window: %lld documents, %.4f of the unpacked attention pairs; each rank's share:\n",
                (long long)nd, (double)L.W / ((double)seq * (double)(seq + 1) / 2));
        layout_print(f, &L);
        if (balanced) print_split(f, &L, frac);
        layout_free(&L);
    }
    free(ids);
    free(start);
}
