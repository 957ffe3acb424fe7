/* deltanet.h -- Qwen3.5's linear attention layer, Gated DeltaNet, on the GPU (transformers'
 * Qwen3_5GatedDeltaNet): the layer whole, forward and backward, and in its steps, between which
 * context parallelism (stage 3) passes its state. Kernels in kernels/gdn.cu; the fp64 reference in
 * tests/ref_gdn.c. (The hybrids' other layer kind, gated full attention, is common/attn.h's.)
 *
 * A linear layer, forward (S tokens, C = 2 Hk dk + Hv dv conv channels, VD = Hv dv):
 *     mix = xn Wqkv^T, z = xn Wz^T, b = xn Wb^T, a = xn Wa^T        the four projections
 *     qkv = silu(causal depthwise conv(mix))                        width 4, per channel
 *     g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)      the decay's log, the write strength
 *     o = the gated delta rule over q, k (l2-normalised), v, g, beta  state [Hv, dv, dk] token by token
 *     y = rmsnorm(o) w silu(z), per value head;  x_mid = x + y Wout^T
 * Everything the backward reads is kept from a forward run again just before it (the layer's
 * checkpoint is its input, as for attention). A token at position 0 starts a document: the conv
 * and the state start from zero there (--packing). */
#ifndef LONGCTX_DELTANET_H
#define LONGCTX_DELTANET_H

#include <stdint.h>

#include "config.h"
#include "gemm.h"
#include "model.h"
#include "tensor.h"

typedef struct {
    /* forward, kept for the backward */
    bf16_t *mix;        /* [S, C] in_proj_qkv(xn) */
    bf16_t *qkv;        /* [S, C] silu(conv(mix)): q, k, v */
    bf16_t *z;          /* [S, VD] in_proj_z(xn): the output gate */
    bf16_t *a, *b;      /* [S, Hv] in_proj_a(xn), in_proj_b(xn) */
    float *g, *beta;    /* [S, Hv] the decay's log, the write strength */
    float *rq, *rk;     /* [S, Hk] inverse l2 norms of q, k */
    bf16_t *o;          /* [S, VD] the rule's output */
    float *rstd;        /* [S Hv] the gated norm's */
    bf16_t *y;          /* [S, VD] the gated norm's output, out_proj's input */
    float *states;      /* [segments, ceil(seg / chunk), Hv, dk, dv] the state at each chunk's start */
    int64_t seg;        /* tokens of a segment: the rule runs each alone from its own initial state
                         * (S in stages 1-2; a zigzag chunk, S / 2, under context parallelism) */
    int64_t chunk;      /* tokens between kept states (deltanet_chunk(seg)) */
    /* backward */
    bf16_t *dy;         /* [S, VD] d(y) */
    bf16_t *d_o, *dz;   /* [S, VD] */
    bf16_t *dqkv;       /* [S, C] d(qkv), then d(conv's output before SiLU) */
    bf16_t *dmix;       /* [S, C] */
    float *dq, *dk;     /* [S, Hk, dk] d(prepared q, k), summed over value heads */
    float *dg, *dbeta;  /* [S, Hv] */
    bf16_t *da, *db;    /* [S, Hv] */
    float *scratch;     /* the backward's per-token states of a chunk (gdn_scratch_floats) */
} GdnWork;

/* What context parallelism (stage 3 on) passes between the ranks for a linear layer, whatever the
 * sequence's length: each chunk's conv tail and state map (K = conv width, C = conv channels, ms =
 * Hv dv dk floats of a state; 2 chunks a rank, 2P in all, slot rank * 2 + k for rank's chunk k). */
typedef struct {
    bf16_t *tails;      /* [2, K-1, C] our chunks' last conv inputs; tails_all [2P, K-1, C] every chunk's */
    bf16_t *tails_all;
    bf16_t *dhalo;      /* [2, K-1, C] what our chunks' first tokens send back to their halos; dhalo_all every chunk's */
    bf16_t *dhalo_all;
    float *maps;        /* [2, Hv, dv + dk, dk] our chunks' state maps (B, then M); maps_all [2P, ...] */
    float *maps_all;
    float *cmaps;       /* [2, ms] our chunks' backward from a zero final gradient (C); cmaps_all [2P, ms] */
    float *cmaps_all;
    float *s_start;     /* [2, ms] our chunks' true initial states (forward), final states' gradients (backward) */
    float *compose;     /* [2, ms] the running composition, in turn */
} GdnShare;
/* carve them for P ranks (nothing for a model without linear layers) */
void deltanet_carve_share(GdnShare *s, Arena *a, const Qwen3Config *c, int64_t P);

/* a linear layer's weights (bf16) and gradients (fp32), in P_LIN_* order */
typedef struct { const bf16_t *qkv, *z, *b, *a, *conv, *dt_bias, *A_log, *norm, *out; } GdnWeights16;
typedef struct { float *qkv, *z, *b, *a, *conv, *dt_bias, *A_log, *norm, *out; } GdnGrads32;

/* 0, or -1 with err when a chunk of n tokens is shorter than the conv's halo (context parallelism:
 * a chunk's conv reads the K-1 tokens before it from the previous chunk alone) */
int deltanet_chunk_ok(const Qwen3Config *c, int64_t n, char *err, size_t errlen);
/* floats of one state, Hv dv dk */
static inline int64_t deltanet_state_size(const Qwen3Config *c) { return c->lin_v_heads * c->lin_v_dim * c->lin_k_dim; }
/* tokens between the states the forward keeps: a power of two near sqrt(seg), so the kept states
 * (seg / chunk of them) and the backward's scratch (chunk per row group) are both ~sqrt(seg) */
int64_t deltanet_chunk(int64_t seg);
/* carve the forward's (kept) and the backward's buffers for S tokens in segments of seg (a NULL arena
 * base only measures) */
void deltanet_carve_fwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S, int64_t seg);
void deltanet_carve_bwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S, int64_t seg);
/* A layer is one kind or the other, so a hybrid's linear buffers share memory with the attention's:
 * the forward's (bwd 0) or the backward's (1) carved from mark `from`, where the attention's began,
 * and the arena's top left at the larger of the two. Nothing for a model without linear layers. */
void deltanet_carve_over(GdnWork *g, Arena *a, int64_t from, const Qwen3Config *c, int64_t S, int64_t seg, int bwd);

/* Layer l's weights (bf16) and gradients (fp32), wherever a stage holds the layer: given its first
 * tensor (in_proj_qkv), the others lie where the parameter table puts them after it. */
const GdnWeights16 *deltanet_weights(GdnWeights16 *w, const ParamTable *t, int64_t l, const bf16_t *qkv);
const GdnGrads32 *deltanet_grads(GdnGrads32 *g, const ParamTable *t, int64_t l, float *qkv);

/* The whole layer on one sequence (a single segment, from a zero state): xn = input_layernorm(x)
 * [S, D] -> x_mid = x + out_proj(...). Its backward, after the forward ran again: dy = d(x_mid)
 * [S, D] -> d(xn) into dxn (overwritten), the weights' gradients added into. */
void deltanet_forward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *xn,
                      const bf16_t *x, bf16_t *x_mid, const int32_t *pos, int64_t S, cudaStream_t st);
void deltanet_backward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                       const bf16_t *xn, const bf16_t *dy, bf16_t *dxn, const int32_t *pos, int64_t S, cudaStream_t st);

/* The forward, in its steps (a stage runs them in this order; context parallelism adds its exchanges
 * between them). S tokens; segment k is rows [k seg, (k + 1) seg). */
/* xn [S, D] -> mix, z, a, b: the four projections */
void deltanet_project(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *xn, int64_t S,
                    cudaStream_t st);
/* segment k's conv: mix -> qkv; halo [K-1, C] the mix rows before it (NULL: none) */
void deltanet_conv(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const int32_t *pos, int64_t k,
                 const bf16_t *halo, cudaStream_t st);
/* the gates g, beta and the q/k norms, every row */
void deltanet_gates(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, int64_t S, cudaStream_t st);
/* segment k's rule from initial state S0 [Hv, dv, dk] (NULL: zero), keeping its chunks' states */
void deltanet_rule(GdnWork *g, const Qwen3Config *c, const int32_t *pos, int64_t k, const float *S0, cudaStream_t st);
/* segment k's state map (maps [Hv, dv + dk, dk]: S_end = S_start M + B; kernels.h gdn_rule_maps) */
void deltanet_maps(GdnWork *g, const Qwen3Config *c, const int32_t *pos, int64_t k, float *maps, cudaStream_t st);
/* o -> the gated norm -> x_mid = x + out_proj(y) */
void deltanet_output(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *x, bf16_t *x_mid,
                   int64_t S, cudaStream_t st);

/* The backward, after the forward of the same tokens ran again, in its steps. */
/* dy [S, D] (d of x_mid) -> d_o, dz; the sums the rule adds into zeroed */
void deltanet_output_bwd(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                       const bf16_t *dy, int64_t S, cudaStream_t st);
/* segment k's rule backward: dS [Hv, dv, dk] the final state's gradient in (NULL: zero), the initial
 * state's out (NULL: not kept); c_only: that alone (the segment's own part of it, dS zero in) */
void deltanet_rule_bwd(GdnWork *g, const Qwen3Config *c, const int32_t *pos, int64_t k, float *dS, int c_only,
                     cudaStream_t st);
/* the q/k norms' and the gates' backward, every row: dqkv's q, k channels, da, db; dA_log, ddt_bias */
void deltanet_gates_bwd(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G, int64_t S,
                      cudaStream_t st);
/* segment k's conv backward: dqkv -> dmix rows, the conv's gradient; dhalo [K-1, C] (NULL: not
 * wanted) what its first tokens send back to the halo */
void deltanet_conv_bwd(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G, const int32_t *pos,
                     int64_t k, const bf16_t *halo, bf16_t *dhalo, cudaStream_t st);
/* the projections' backward: dmix, dz, da, db -> d(xn) into dxn (overwritten); the four matrices' gradients */
void deltanet_project_bwd(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                        const bf16_t *xn, bf16_t *dxn, int64_t S, cudaStream_t st);

#endif
