/* ref_layout.h -- the fp64 references on a layout of packed documents (common/layout.h): what stages
 * 3-5 would compute once their ranks hold a layout's rows instead of the zigzag's. Each simulates
 * the P ranks in one process, each holding only its own rows.
 *   - Ring attention: tests/ref_ring.h's RefRing (the same buffers, the same poisoned ring pass),
 *     with each step's calls the layout's blocks (layout_blocks) instead of ring_block's.
 *   - Linear attention (Qwen3.5's gated delta rule, tests/ref_gdn.h): every piece's state map, an
 *     all-gather, and each document's maps composed along its pieces in window order: a piece
 *     starts from its document's state after the pieces before it (zero at the document's start),
 *     and its backward from the gradient the pieces after it send back (dS M^T + C from the
 *     document's last piece, whose final-state gradient is given). */
#ifndef LONGCTX_REF_LAYOUT_H
#define LONGCTX_REF_LAYOUT_H

#include <stdint.h>

#include "../common/layout.h"
#include "ref_gdn.h"
#include "ref_ring.h"

/* Give rank r the rows of layout L (its local rows at layout_positions): q, k, v, dO [S, ...] in
 * window order. Free with ref_ring_free. */
void ref_layout_ring_init(RefRing *R, const Layout *L, RefHeads a, const double *q, const double *k, const double *v,
                          const double *dO);
/* P ring steps; at step s rank r computes layout_blocks(L, r, s) with the K/V it holds (src's), merged
 * by LSE. drop_step >= 0 (planted): that step's blocks are left out. R->pairs counts the work. */
void ref_layout_ring_forward(RefRing *R, const Layout *L, int drop_step);
/* the same blocks backward: dQ at home, dK/dV travelling with their K/V, home after P passes */
void ref_layout_ring_backward(RefRing *R, const Layout *L, int drop_step);

/* Planted faults of the state passing (0: none) */
enum {
    REF_LAYOUT_PLANT_NONE = 0,
    REF_LAYOUT_PLANT_ZERO = 1,  /* every piece from a zero state: no map passed */
    REF_LAYOUT_PLANT_RANKS = 2, /* a document's maps composed in rank order (rank-major pieces), not window order */
};

/* The gated delta rule on layout L: q, k [S, H, dk] (prepared), v [S, H, dv], g, beta [S, H] in window
 * order; o [S, H, dv] written in window order, S_final [ndocs, H, dv, dk] each document's final state.
 * Returns the floats the busiest rank sends (the maps of its pieces that another piece needs). */
int64_t ref_layout_gdn(const GdnHeads *h, const Layout *L, int plant, const double *q, const double *k, const double *v,
                       const double *g, const double *beta, double *o, double *S_final);
/* Its backward: dout [S, H, dv], dS_final [ndocs, H, dv, dk] (each document's final state's gradient);
 * writes dq, dk [S, H, dk], dv [S, H, dv], dg, dbeta [S, H] (of the prepared q, k) and dS0
 * [ndocs, H, dv, dk] (the gradient of each document's initial state: its first piece's dS_start). */
void ref_layout_gdn_bwd(const GdnHeads *h, const Layout *L, int plant, const double *q, const double *k, const double *v,
                        const double *g, const double *beta, const double *dout, const double *dS_final, double *dq,
                        double *dk, double *dv, double *dg, double *dbeta, double *dS0);

#endif
