/* moe.h -- the Qwen3 MoE block on the GPU (transformers' Qwen3MoeSparseMoeBlock): a router over E
 * experts, each token's top-k experts (weights renormalised with norm_topk_prob), each expert a
 * SwiGLU of width moe_intermediate, their outputs weighted and summed; transformers' load-balancing
 * loss over every layer's router outputs. Per tile of T rows (n = T*k (token, choice) pairs): route,
 * sort the pairs by expert (stable), gather each expert's rows together, one GEMM per expert and
 * projection over its contiguous rows (or, m->grouped, one cuBLAS grouped call for the bf16 ones);
 * backward through the experts, the weights, the renormalisation, the softmax and the router.
 * Qwen3.5's (Qwen3_5MoeSparseMoeBlock) adds a shared expert every token takes, a SwiGLU of width
 * shared_inter whose output is scaled by sigmoid(x . shared_expert_gate). Kernels in kernels/moe.cu. */
#ifndef LONGCTX_MOE_H
#define LONGCTX_MOE_H

#include <stdint.h>

#include "comm.h"
#include "config.h"
#include "gemm.h"
#include "model.h"
#include "tensor.h"

typedef struct {
    /* one tile (T rows) */
    float *logits;      /* [T, E] router logits (fp32) */
    float *prob;        /* [T, E] their softmax */
    int32_t *sel;       /* [T, k] the chosen experts */
    float *w;           /* [T, k] their weights */
    float *dw;          /* [T, k] d(loss)/d(weights) */
    int32_t *count;     /* [E] pairs per expert */
    int32_t *offsets;   /* [E+1] the experts' first rows in the sorted order */
    int32_t *pair_row;  /* [n] each pair's row in the sorted order */
    bf16_t *xs, *ys;    /* [n, D] the experts' inputs and outputs; backward: d(ys), then d(xs) */
    bf16_t *g, *u, *h;  /* [n, Im] gate, up, silu(g)*u; backward: dg, du, dh */
    bf16_t *dlogits;    /* [T, E] d(loss)/d(router logits) */
    /* Qwen3.5's shared expert (NULL without): Is = shared_inter */
    bf16_t *sh_g, *sh_u, *sh_h; /* [T, Is] its gate, up, silu(g)*u; backward: dg, du, dh */
    bf16_t *sh_y;       /* [T, D] its output; backward: d(output) */
    float *sh_s, *sh_ds; /* [T] its gate's score x . w, and d(loss)/d(score) */
    /* the step (persistent) */
    double *choices;    /* [E] choices of each expert, every layer and tile of the step */
    double *psum;       /* [E] sum of its probabilities over the same */
    float *aux_grad;    /* [E] the load-balancing loss's d(loss)/d(prob[t, e]) */
    int32_t *rows;      /* [E+1] host: the current tile's offsets (the experts' GEMM sizes) */
    void **ptrs;        /* [3, E] a grouped GEMM's A, B, C pointers (device) */
    int grouped;        /* the experts' bf16 GEMMs as one grouped call (--moe-gemm grouped) */
} MoeTile;

/* one layer's weights (or fp32 gradients): the router [E, D]; expert 0's gate and up [Im, D] and
 * down [D, Im], the others following it (expert e at + e * Im * D); the shared expert's gate, up
 * [Is, D], down [D, Is] and its gate's w [1, D] (Qwen3.5), NULL without */
typedef struct { const bf16_t *router, *gate, *up, *down, *sh_gate, *sh_up, *sh_down, *sh_route; } MoeWeights;
typedef struct { float *router, *gate, *up, *down, *sh_gate, *sh_up, *sh_down, *sh_route; } MoeGrads;
/* layer l's weights (gradients) from where a stage holds its router: a layer is one flat range in every
 * stage's buffers, so each of its tensors lies at the table's distance from the router. Fills and
 * returns w (g). */
const MoeWeights *moe_weights(MoeWeights *w, const ParamTable *t, int64_t l, const bf16_t *router);
const MoeGrads *moe_grads(MoeGrads *g, const ParamTable *t, int64_t l, float *router);

/* carve a tile's buffers of T rows / the step's statistics from an arena (a NULL base only measures) */
void moe_carve_tile(MoeTile *m, Arena *a, const Qwen3Config *c, int64_t T);
void moe_carve_step(MoeTile *m, Arena *a, const Qwen3Config *c);
/* bytes a tile needs per row */
int64_t moe_tile_row_bytes(const Qwen3Config *c);
/* The (token, expert) pairs of a tile are counted in float-exact sums, so fewer than 2^24: the most
 * rows a tile may have (INT64_MAX for a dense model), and 1, or 0 with err, for T rows */
#define MOE_MAX_PAIRS (1ll << 24)
int64_t moe_most_rows(const Qwen3Config *c);

/* An MLP tile of rows (stage 5), dense or MoE: its width (I; an MoE tile k experts' intermediates),
 * the bytes a row takes in the working set, the most rows a tile may hold (no tensor of it past 2^31
 * elements, the kernels' int32 risk; no more than 2^24 MoE pairs) and the fewest it should (4096; an
 * MoE tile 2048 rows per expert on average, E/k x 2048 tokens: below that its experts' GEMMs slow down
 * -- 30B-A3B, 4 layers at 32K: 146 ms of GEMMs a step in tiles of 8960 rows, 112 ms in one of 32768) */
typedef struct {
    int64_t width, row_bytes, most, least;
} MlpTileLimits;
MlpTileLimits mlp_tile_limits(const Qwen3Config *c);
int moe_rows_ok(const Qwen3Config *c, int64_t T, char *err, size_t errlen);

/* the step's statistics start at zero */
void moe_step_begin(MoeTile *m, const Qwen3Config *c, cudaStream_t st);
/* xn [T, D] -> the experts' outputs in m->ys (stats: count the choices, on the forward pass) */
void moe_forward(Gemm *gm, MoeTile *m, const Qwen3Config *c, const MoeWeights *W, const bf16_t *xn, int64_t T,
                 int stats, cudaStream_t st);
/* out[T, D] = resid + the weighted sum of each token's experts' outputs */
void moe_output(MoeTile *m, const Qwen3Config *c, bf16_t *out, const bf16_t *resid, int64_t T, cudaStream_t st);
/* after moe_forward of the same tile: dy [T, D] -> d(xn) into dxn (overwritten); gradients added to G */
void moe_backward(Gemm *gm, MoeTile *m, const Qwen3Config *c, const MoeWeights *W, const MoeGrads *G,
                  const bf16_t *xn, const bf16_t *dy, bf16_t *dxn, int64_t T, cudaStream_t st);
/* after the forward of every layer: the statistics summed over the ranks, the load-balancing loss
 * over N = layers x tokens router rows (returned) and its gradient for the backward (each rank's
 * router gets its own tokens' share; the reduce-scatter adds the ranks'); comm NULL: one rank */
double moe_step_aux(MoeTile *m, const Qwen3Config *c, double N, Comm *comm, cudaStream_t st);

#endif
