/* ref_qwen35.h -- the Qwen3.5 hybrid text model in plain C and fp64: embeddings; decoder
 * layers of two kinds, Gated DeltaNet (linear attention) and gated full attention (tests/ref_gdn.h),
 * each with (1 + w) RMSNorms before its mixer and before its SwiGLU MLP, both residual; the final
 * norm; lm_head; the mean next-token NLL. Forward and full backward, checked against transformers'
 * Qwen3_5ForCausalLM (tests/golden/qwen35_tiny.safetensors). Written to be read, not to be fast. */
#ifndef LONGCTX_REF_QWEN35_H
#define LONGCTX_REF_QWEN35_H

#include <stdint.h>

#include "../common/config.h"
#include "../common/model.h"
#include "ref_gdn.h"
#include "ref_model.h"

#define Q35_MAX_LAYERS 64

typedef struct {
    int64_t V, D, I, L;              /* vocabulary, hidden, MLP intermediate, layers */
    int linear[Q35_MAX_LAYERS];      /* layer l is linear attention (else full attention) */
    GdnLayer gdn;                    /* the linear layers' shape */
    GatedAttn attn;                  /* the full layers' shape */
    double eps;                      /* the (1 + w) RMSNorms' */
    /* Qwen3.5 MoE (E > 0): every MLP is E routed experts of width Im, a token's top k renormalised,
     * plus a shared expert of width Is scaled by sigmoid(x . w) (transformers' Qwen3_5MoeSparseMoeBlock) */
    int64_t E, k, Im, Is;
} Q35Config;

typedef struct {
    const double *in_norm, *post_norm; /* [D] */
    const double *gate, *up;           /* [I, D] */
    const double *down;                /* [D, I] */
    GdnWeights gdn;                    /* a linear layer's mixer */
    GatedAttnWeights attn;             /* a full layer's mixer */
    /* the MoE MLP in place of gate, up, down: the router [E, D]; expert 0's gate, up [Im, D] and down
     * [D, Im] (expert e's at + e Im D); the shared expert's gate, up [Is, D], down [D, Is], its gate's w [D] */
    const double *router, *egate, *eup, *edown, *sgate, *sup, *sdown, *sroute;
} Q35Layer;
typedef struct {
    const double *embed;               /* [V, D] */
    const double *norm;                /* [D] the final norm */
    const double *lm_head;             /* [V, D] */
    Q35Layer layer[Q35_MAX_LAYERS];
} Q35Weights;

typedef struct {
    double *in_norm, *post_norm, *gate, *up, *down;
    GdnGrads gdn;
    GatedAttnGrads attn;
    double *router, *egate, *eup, *edown, *sgate, *sup, *sdown, *sroute;
} Q35LayerGrads;
typedef struct {                       /* the weights' shapes; added into */
    double *embed, *norm, *lm_head;
    Q35LayerGrads layer[Q35_MAX_LAYERS];
} Q35Grads;

/* tokens [T+1]: inputs tokens[0..T), labels tokens[1..T], positions 0..T-1. Returns the mean NLL;
 * logits [T, V] if not NULL; the gradients of every weight added into g if not NULL. */
double ref_q35(const Q35Config *c, const Q35Weights *w, int64_t T, const uint32_t *tokens, double *logits, Q35Grads *g);
/* The same with a loss mask: weights [T+1] aligned with tokens (label tokens[t+1] counts where
 * weights[t+1] is 1; NULL: every label), the NLL summed over the labels that count (their number in
 * *counted), the gradients of scale x that sum added into g. */
double ref_q35_sum(const Q35Config *c, const Q35Weights *w, int64_t T, const uint32_t *tokens, const uint8_t *weights,
                   double scale, int64_t *counted, double *logits, Q35Grads *g);

/* The hybrid as ref_forward_backward_docs (tests/ref_model.h) takes a model: the trainers' parameter
 * table (Qwen3.5's norms held as 1 + w), weights (NULL: all), documents as the runs of equal first[t]
 * (NULL: one), each from position 0 (pos, if given, must say so); the mean over every label that
 * counts. logits [S, V] and grads (flat, the table's layout) overwritten when not NULL. */
RefResult ref_q35_table(const Qwen3Config *c, const ParamTable *pt, const float *params, const uint32_t *tokens,
                        const uint8_t *weights, const int64_t *pos, const int64_t *first, int64_t S, float *logits,
                        float *grads);

#endif
