/* layout.h -- packed documents over context-parallel ranks, balanced (docs/packed_balance.md).
 *
 * The zigzag split (zigzag.h) balances ONE causal sequence: rank r's chunks r and 2P-1-r cost the
 * same. A packed window is many short causal sequences, and the zigzag over the whole window no longer
 * balances anything: the seed-1 1M window of bench/packed_window.py leaves rank 5 of 8 with 1.79x the
 * mean rank's (query, key) pairs and rank 0 with 0.34x, and a ring step waits for the busiest.
 *
 * The balanced layout. Count a rank's attention work as the causal pairs of the queries it holds:
 * a query at position p of its document (from 0) sees p + 1 keys, so a rank's pairs are the sum of
 * (p + 1) over its tokens, wherever their keys live. Call that a token's weight. In a document of L
 * tokens the tokens p and L-1-p weigh L+1 together: a "mirror pair". So any set of mirror pairs of a
 * document carries (L+1)/2 pairs per token, the document's own density, wherever they sit in it.
 *
 *  1. Split or whole. A document of L tokens stays whole when its pairs L (L+1)/2 are at most
 *     whole_frac x the mean rank's pairs (W / P, W the window's pairs), or L < 2P, or P = 1. The
 *     others are split: q = floor(L / 2P) and each rank gets one "slice" of q mirror pairs, a head
 *     piece [j q, (j+1) q) and its tail mirror [L - (j+1) q, L - j q) (slice j, j = 0 outermost):
 *     2q tokens and exactly q (L+1) pairs on every rank. What is left is the document's middle,
 *     [P q, L - P q), fewer than 2P tokens.
 *  2. The rest as one stream. The whole documents and the split documents' middles (the "items")
 *     are laid end to end in an order chosen to keep the stream's running pairs close to a
 *     straight line: with rho the stream's pairs per token and D the pairs so far minus rho x the
 *     tokens so far, the next item is one whose excess e = pairs - rho x tokens has the sign
 *     opposite to D (one with e >= 0 when D <= 0), the one that brings D closest to 0. (Such an
 *     item always exists: the excesses sum to 0.) Exact in integers.
 *  3. The stream is cut into P runs of R = S/P - 2 sum q tokens: rank r gets run r. An item that
 *     crosses a cut is split there (at most P-1 cuts). Every rank thus holds exactly S/P tokens.
 *  4. A split document's innermost slice goes to the rank that holds its middle's first token, so
 *     the slice and the middle join into one piece; the other slices go outward in rank order.
 *  5. A rank's pieces are held in window order (its local rows ascend in window position); two
 *     pieces of one document that touch are one piece.
 *
 * Balance. Every rank holds the same cores (2 sum q tokens, sum q (L+1) pairs), and its run of the
 * stream holds R tokens whose pairs are rho R + D(end) - D(start). The greedy keeps D, at every item
 * edge, in [min(0, e_min), max(0, e_max)], and inside an item it dips below its start by at most
 * that item's delta = max over j of -(j p + j (j+1)/2 - rho j) (p: the item's first position in its
 * document). Hence every rank's pairs are within
 *     B = max(0, e_max) + 2 delta_max
 * of the mean (layout.bound; proof in docs/packed_balance.md). When the stream's density rho is at
 * most (tau + 1)/2, tau the longest whole document (the usual case: whole documents hold most of the
 * stream), B <= tau (tau+1)/2 + 1.5 (2P-1) (L_max + 1): the pairs of the longest whole document,
 * themselves at most whole_frac x the mean, plus a term of the longest split document's length.
 * The seed-1 1M window at P = 8 split at 1/32: busiest rank 1.0084x the mean, B = 1.5% (zigzag: 1.788x).
 *
 * The ring on a layout. At step s rank r holds the K/V of rank src = (r - s) mod P, as under the
 * zigzag. A block is a (query piece of r, key piece of src) pair of the same document: DIAG (the
 * same piece, step 0 only: a causal square) or FULL (the key piece ends before the query piece
 * starts: a rectangle, no mask); a key piece after the query piece is nothing. Pieces never overlap,
 * so no other kind occurs. A block's rows fit DocBlock (docs.h): q0/nq are local query rows, k0/nk
 * rows of src's local K/V, causal = DIAG.
 *
 * State passing on a layout (Qwen3.5's linear layers, docs/context_parallel_state.md): a piece's
 * initial state is its document's state after the pieces before it (prev, prev's prev, ... in window
 * order), zero for a piece that starts its document; each piece's map (M, B) composes along the
 * document's pieces in window order; the backward composes dS M^T + C from the document's last piece. */
#ifndef LONGCTX_LAYOUT_H
#define LONGCTX_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "docs.h"
#include "tokens.h"
#include "zigzag.h"

/* What a block costs beyond its pairs. Every block is a cuDNN call (per head group, forward, recompute and
 * backward) plus its LSE merge, and small blocks run padded: on the H200 (stage 5, Qwen3-8B, 4 heads a call)
 * a block cost its rank 1.1-1.9 ms a step of 2 layers where a pair cost 2.3e-10 s, so a block weighs about
 * as much as this many pairs. Splitting a document evens the pairs and adds blocks at every ring step. */
#define LAYOUT_BLOCK_PAIRS 6000000
/* A layout whose busiest rank holds more than this times the mean rank's pairs is taken only when no
 * candidate holds less: the step waits for that rank, and a tiny window's blocks would otherwise
 * outweigh its pairs and pick an uneven cut. */
#define LAYOUT_MAX_BALANCE 1.10

typedef struct {
    int64_t doc;   /* its document, an index into the window's starts */
    int64_t start; /* the window position of its first token */
    int64_t len;   /* its tokens (>= 1) */
    int64_t pos;   /* its first token's position in its document: start - start[doc] */
    int64_t row;   /* its first token's local row on its rank */
    int64_t prev;  /* the piece of the same document just before it (index into piece[]), -1: it starts it */
    int64_t next;  /* the one just after it, -1: it ends it */
    int rank;
} LayoutPiece;

typedef struct {
    int P;
    int64_t S, n;        /* window tokens; rows a rank: n = S / P */
    int64_t ndocs;
    int64_t *start;      /* [ndocs + 1] a copy of the documents' starts */
    int64_t npieces;
    LayoutPiece *piece;  /* rank-major; a rank's in local row order (ascending window position) */
    int64_t *first;      /* [P + 1] rank r's pieces: piece[first[r] .. first[r+1]) */
    int64_t *order;      /* [npieces] piece indices in window order */
    int64_t *tokens;     /* [P] tokens a rank holds (n each) */
    int64_t *pairs;      /* [P] causal (query, key) pairs of the queries a rank holds */
    int64_t *core;       /* [ndocs] q: tokens of each of a split document's 2P core pieces; 0: not split */
    int64_t nsplit;      /* documents split over the ranks */
    int64_t W;           /* the window's pairs: sum L (L+1) / 2 */
    double bound;        /* B: every rank's pairs are within B of W / P (balanced layout; 0 for zigzag) */
    int zigzag;          /* 1: the whole-window zigzag (the old layout), for comparison */
} Layout;

/* The balanced layout of a window of S tokens whose ndocs documents start at start[0..ndocs-1]
 * (start[0] = 0, increasing, start[ndocs] = S), over P ranks; S % P == 0. whole_frac: see step 1
 * (0 splits every document of at least 2P tokens; layout_best chooses it for a window). Deterministic. Returns 0, or
 * -1 with a message. */
int layout_balanced(Layout *L, const int64_t *start, int64_t ndocs, int64_t S, int P, double whole_frac, char *err,
                    size_t errlen);
/* The layout a window gets (--layout balanced): of layout_balanced at whole_frac 1/64 .. 1/2 and none
 * split, and the whole-window zigzag (when S % 2P == 0), the one whose busiest rank costs least
 * (layout_cost) among those within LAYOUT_MAX_BALANCE of the mean pairs (none within: the most even).
 * The whole_frac it took to *frac (may be NULL): 0 for the zigzag (L->zigzag), INFINITY for none split;
 * L->nsplit says how many documents it split. */
int layout_best(Layout *L, const int64_t *start, int64_t ndocs, int64_t S, int P, double *frac, char *err,
                size_t errlen);
/* rank r's attention blocks over a step's ring (every step summed): its pieces, each against itself and
 * the pieces of its document before it */
int64_t layout_rank_blocks(const Layout *L, int r);
/* the busiest rank's modelled cost, its pairs + LAYOUT_BLOCK_PAIRS x its blocks, over the mean rank's pairs */
double layout_cost(const Layout *L);
/* The whole-window zigzag (zigzag.h) as a layout: rank r holds chunks r and 2P-1-r cut at the
 * document boundaries. S % 2P == 0. */
int layout_zigzag(Layout *L, const int64_t *start, int64_t ndocs, int64_t S, int P, char *err, size_t errlen);
void layout_free(Layout *L);

/* rank r's local rows: their window positions pos[n] (a rank's rows of the window), and their
 * RoPE positions (each from 0 at its document's start) */
void layout_positions(const Layout *L, int r, int64_t *pos);
void layout_rope_positions(const Layout *L, int r, int32_t *pos);

enum { LAYOUT_FULL = 0, LAYOUT_DIAG = 1 };
typedef struct {
    DocBlock b;      /* local query rows, rows of src's K/V; b.causal = (kind == LAYOUT_DIAG) */
    int kind;        /* LAYOUT_DIAG or LAYOUT_FULL */
    int64_t doc;
    int64_t qp, kp;  /* the query piece and the key piece (indices into piece[]) */
    int64_t pairs;   /* DIAG nq (nq+1)/2, FULL nq nk */
} LayoutBlock;

/* The ring source of rank r at step s: (r - s) mod P. */
int layout_src(const Layout *L, int r, int step);
/* The blocks rank r computes at ring step `step`, in local query order: writes at most cap to out,
 * returns how many there are. */
int64_t layout_blocks(const Layout *L, int r, int step, LayoutBlock *out, int64_t cap);
/* the pairs of those blocks */
int64_t layout_step_pairs(const Layout *L, int r, int step);
/* busiest rank's pairs / the mean (W / P); 1 when W = 0 */
double layout_balance(const Layout *L);
/* the ring's critical path: sum over steps of the busiest rank's pairs at that step (a step waits
 * for its slowest rank), over the mean rank's pairs */
double layout_ring_balance(const Layout *L);
/* "rank R: T tokens, Q pairs" a rank, then "balance: busiest rank X.XXx the mean" */
void layout_print(FILE *f, const Layout *L);

/* ------------------------------------------------------------------ a stage's windows (stages 3-5)
 * With --packing, a stage lays each window out anew: its documents cut, then the balanced layout
 * built and every rank's rows taken from it (docs/packed_balance.md, section 9). Without --packing a
 * window is one document, whose balanced layout is the zigzag: the stage keeps the zigzag (and layout_best
 * takes it for a packed window of one document too). */

/* --layout (zigzag | balanced; NULL: balanced when packed): 1 for the balanced layout. 0 without
 * --packing, and 0 for a Qwen3.5 hybrid (hybrid 1) whatever was asked: its linear layers pass their
 * state per zigzag chunk, and on a layout that walk is per piece (docs/packed_balance.md, section 9,
 * item 3), not written yet. */
int layout_option(const char *v, int packed, int hybrid);
/* The window positions of rank `rank`'s rows (pos[seq / P]) for the window tok[seq + 1]. Not packed
 * (eot < 0): the zigzag's. Packed: the window's documents are cut into d (docs_window_cut: d->start,
 * d->n, d->pos) and every rank's rows written to d->rows (its ring sources' too), from the balanced
 * layout (layout_best) or the zigzag. */
void layout_window(DocsWindow *d, const uint32_t *tok, int64_t seq, int64_t eot, int P, int rank, int balanced,
                   int64_t *pos);
/* Ring step `step`'s attention call of rank r: the zigzag's (ring_block), or on the balanced layout
 * every local row against every row of src (docs_blocks cuts that call into the layout's blocks:
 * DIAG at step 0, FULL after). */
RingBlock layout_ring_block(int64_t seq, int P, int r, int step, int balanced);
/* The plan's lines for --packing: the layout, and on the first window of tf (when open) each rank's
 * tokens and pairs and the balance (layout_print). */
void layout_plan(FILE *f, const TokenFile *tf, int64_t seq, int P, int64_t eot, int balanced, int hybrid);

#endif
