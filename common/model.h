/* model.h -- the parameter table: every tensor's HF name, shape and place in one flat buffer. The
 * reference model, the trainers, checkpoints and FSDP shards all use this one layout: embedding,
 * then per layer a contiguous block (so a layer is one flat range; a Qwen3.5 hybrid's two layer
 * kinds have blocks of different sizes), then the final norm and (untied) lm_head. Offsets are
 * multiples of 64 elements (128-byte aligned bf16).
 *
 * Qwen3.5's RMSNorms multiply by 1 + w and store w (zero-centred). The flat buffers hold 1 + w for
 * them (ParamInfo.shift), so every kernel and the optimizer see one kind of norm: the gradient is the
 * same, AdamW moves both alike (norm weights take no decay), and loading adds 1, saving takes it off. */
#ifndef LONGCTX_MODEL_H
#define LONGCTX_MODEL_H

#include <stdint.h>

#include "config.h"
#include "safetensors.h"

typedef enum {
    P_EMBED,        /* [vocab, hidden] */
    P_IN_NORM,      /* [hidden] input_layernorm */
    P_Q,            /* [heads*head_dim, hidden] */
    P_K,            /* [kv_heads*head_dim, hidden] */
    P_V,            /* [kv_heads*head_dim, hidden] */
    P_O,            /* [hidden, heads*head_dim] */
    P_Q_NORM,       /* [head_dim] */
    P_K_NORM,       /* [head_dim] */
    P_POST_NORM,    /* [hidden] post_attention_layernorm */
    P_GATE,         /* [intermediate, hidden] */
    P_UP,           /* [intermediate, hidden] */
    P_DOWN,         /* [hidden, intermediate] */
    P_FINAL_NORM,   /* [hidden] */
    P_LM_HEAD,      /* [vocab, hidden], absent when tied */
    /* Qwen3 MoE layers hold these in place of P_GATE, P_UP, P_DOWN (after P_POST_NORM, in this order;
     * each kind's E experts side by side, so expert e's matrix is expert 0's + e * its size) */
    P_ROUTER,       /* [experts, hidden] mlp.gate */
    P_EXP_GATE,     /* [experts] x [moe_intermediate, hidden] mlp.experts.E.gate_proj */
    P_EXP_UP,       /* [experts] x [moe_intermediate, hidden] */
    P_EXP_DOWN,     /* [experts] x [hidden, moe_intermediate] */
    /* a Qwen3.5 linear attention layer (linear_attn.*: Gated DeltaNet) in place of P_Q .. P_K_NORM, after
     * P_IN_NORM; C = conv channels = 2 lin_k_heads lin_k_dim + lin_v_heads lin_v_dim, Hv = lin_v_heads */
    P_LIN_QKV,      /* [C, hidden] in_proj_qkv: q, k, v channels */
    P_LIN_Z,        /* [Hv*dv, hidden] in_proj_z: the output gate */
    P_LIN_B,        /* [Hv, hidden] in_proj_b: beta = sigmoid(.) */
    P_LIN_A,        /* [Hv, hidden] in_proj_a: the decay's input */
    P_LIN_CONV,     /* [C, 1, conv_width] conv1d.weight (depthwise) */
    P_LIN_DT,       /* [Hv] dt_bias */
    P_LIN_ALOG,     /* [Hv] A_log */
    P_LIN_NORM,     /* [dv] norm.weight: the gated RMSNorm's (plain w, not 1 + w) */
    P_LIN_OUT,      /* [hidden, Hv*dv] out_proj */
    /* Qwen3.5 MoE: after the routed experts (held as Qwen3's, one tensor an expert and kind, as transformers
     * saves them; a release's fused ones are read by params_stored), the shared expert and its gate */
    P_SH_GATE,      /* [shared_inter, hidden] mlp.shared_expert.gate_proj */
    P_SH_UP,        /* [shared_inter, hidden] mlp.shared_expert.up_proj */
    P_SH_DOWN,      /* [hidden, shared_inter] mlp.shared_expert.down_proj */
    P_SH_ROUTE,     /* [1, hidden] mlp.shared_expert_gate: the shared expert's output times sigmoid(x . w) */
} ParamKind;
#define PER_LAYER (P_DOWN - P_IN_NORM + 1) /* entries of a dense layer */
/* is a kind one of a decoder layer's tensors? */
static inline int params_in_layer(int kind) { return (kind >= P_IN_NORM && kind <= P_DOWN) || kind >= P_ROUTER; }

typedef struct {
    char name[96];    /* HF name, e.g. model.layers.3.self_attn.q_proj.weight */
    ParamKind kind;
    int64_t layer;    /* -1 outside the decoder layers */
    int64_t expert;   /* MoE experts' tensors: which expert; else -1 */
    int ndim;
    int64_t shape[3];
    int shift;        /* 1: a zero-centred norm (Qwen3.5); the flat buffers hold 1 + the HF value */
    int64_t numel;
    int64_t offset;   /* elements from the start of the flat buffer */
} ParamInfo;

typedef struct {
    int64_t n;
    ParamInfo *p;         /* [n] in layout order */
    int64_t total;        /* elements in the flat buffer (with alignment padding) */
    int64_t layer_begin;  /* offset of layer 0's block */
    int64_t *layer_at;    /* [layers + 1] layer l's block is [layer_at[l], layer_at[l + 1]) of the flat buffer */
    int64_t *layer_first; /* [layers + 1] layer l's entries are p[layer_first[l] .. layer_first[l + 1]) */
    int64_t layers;       /* decoder layers */
    int64_t experts;      /* 0 when dense */
} ParamTable;

void params_build(const Qwen3Config *c, ParamTable *t);
void params_free(ParamTable *t);
/* The tensor of a kind (layer ignored outside layers). lm_head resolves to the embedding when tied. A
 * kind the layer does not have dies naming both. */
const ParamInfo *params_get(const ParamTable *t, ParamKind kind, int64_t layer);
/* An MoE layer's expert tensor (P_EXP_GATE, P_EXP_UP, P_EXP_DOWN) of expert e (experts stored apart). */
const ParamInfo *params_expert(const ParamTable *t, ParamKind kind, int64_t layer, int64_t e);
/* An MoE layer's tensors as element offsets in the flat layout: the router; expert 0's gate, up and
 * down (expert e's at + e * Im * D); the shared expert's gate, up, down and its gate's w (Qwen3.5),
 * -1 when the model has none. */
typedef struct {
    int64_t router, gate, up, down;
    int64_t sh_gate, sh_up, sh_down, sh_route;
} MoeLayout;
void params_moe_layout(const ParamTable *t, int64_t layer, MoeLayout *o);
/* Where an HF file holds tensor p (with prefix before its name): under its own name, or, for a routed
 * expert of a Qwen3.5 MoE release, as a slice of its layer's fused tensor (mlp.experts.gate_up_proj
 * [E, 2 Im, D]: expert e's gate rows, then its up rows; mlp.experts.down_proj [E, D, Im]), which the
 * Hub's checkpoints hold (transformers saves them apart, and reads both). 0 with the stored tensor's
 * name and shape and p's first element in it (at); -1 with a message naming what is missing or
 * mis-shaped. */
typedef struct {
    char name[192];
    int ndim;
    int64_t shape[3];
    int64_t at;
} StoredAt;
int params_stored(const SafeTensors *st, const char *prefix, const ParamTable *t, const ParamInfo *p, StoredAt *s,
                  char *err, size_t errlen);
/* Load every tensor from an HF directory / safetensors file into flat fp32 (padding zeroed). */
int params_load(const ParamTable *t, const char *path, float *flat, char *err, size_t errlen);
/* transformers-style init: matrices normal(0, std), norm weights 1. Deterministic in seed and the
 * same for any thread count (counter-based); params_init uses every core. */
void params_init(const ParamTable *t, double std, uint64_t seed, float *flat);
void params_init_threads(const ParamTable *t, double std, uint64_t seed, float *flat, int threads);
/* The same values for elements [elem0, elem0 + n) of tensor p only, into out[n], on `threads` threads:
 * how a rank initialises the pieces it holds without the whole model in memory. */
void params_init_piece(const ParamTable *t, const ParamInfo *p, double std, uint64_t seed, int64_t elem0, int64_t n,
                       float *out, int threads);

/* A run of one tensor's elements held by one rank: elements [elem0, elem0 + numel) of param, stored
 * from element `at` of the rank's flat state buffers (master weights, moments, gradients). Stage 1
 * holds every tensor whole at its table offset (params_pieces); FSDP ranks hold slices (shard.h). */
typedef struct {
    const ParamInfo *param;
    int64_t elem0, numel;
    int64_t at;
} Piece;
/* every tensor whole, at its offset in the flat layout; returns the count, *out malloc'd */
int64_t params_pieces(const ParamTable *t, Piece **out);

/* 1 for tensors that get weight decay (matrices and the conv), 0 for vectors (norms, dt_bias, A_log). */
int params_decays(const ParamInfo *p);
/* the value the flat buffers hold for an HF value of tensor p, and back (1 + w for Qwen3.5's norms) */
static inline float params_from_hf(const ParamInfo *p, float hf) { return p->shift ? hf + 1.0f : hf; }
static inline float params_to_hf(const ParamInfo *p, float v) { return p->shift ? v - 1.0f : v; }

#endif
