/* ref_qwen35.h -- the Qwen3.5 hybrid text model in plain C and fp64 (issue 33): embeddings; decoder
 * layers of two kinds, Gated DeltaNet (linear attention) and gated full attention (tests/ref_gdn.h),
 * each with (1 + w) RMSNorms before its mixer and before its SwiGLU MLP, both residual; the final
 * norm; lm_head; the mean next-token NLL. Forward and full backward, checked against transformers'
 * Qwen3_5ForCausalLM (tests/golden/qwen35_tiny.safetensors). Written to be read, not to be fast. */
#ifndef LONGCTX_REF_QWEN35_H
#define LONGCTX_REF_QWEN35_H

#include <stdint.h>

#include "ref_gdn.h"

#define Q35_MAX_LAYERS 64

typedef struct {
    int64_t V, D, I, L;              /* vocabulary, hidden, MLP intermediate, layers */
    int linear[Q35_MAX_LAYERS];      /* layer l is linear attention (else full attention) */
    GdnLayer gdn;                    /* the linear layers' shape */
    GatedAttn attn;                  /* the full layers' shape */
    double eps;                      /* the (1 + w) RMSNorms' */
} Q35Config;

typedef struct {
    const double *in_norm, *post_norm; /* [D] */
    const double *gate, *up;           /* [I, D] */
    const double *down;                /* [D, I] */
    GdnWeights gdn;                    /* a linear layer's mixer */
    GatedAttnWeights attn;             /* a full layer's mixer */
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
} Q35LayerGrads;
typedef struct {                       /* the weights' shapes; added into */
    double *embed, *norm, *lm_head;
    Q35LayerGrads layer[Q35_MAX_LAYERS];
} Q35Grads;

/* tokens [T+1]: inputs tokens[0..T), labels tokens[1..T], positions 0..T-1. Returns the mean NLL;
 * logits [T, V] if not NULL; the gradients of every weight added into g if not NULL. */
double ref_q35(const Q35Config *c, const Q35Weights *w, int64_t T, const uint32_t *tokens, double *logits, Q35Grads *g);

#endif
