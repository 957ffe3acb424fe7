/* ref_model.h -- the Qwen3 reference in plain C, fp32 storage with fp64 accumulation: naive
 * causal GQA attention, dense or MoE MLPs (router, top-k, load-balancing loss), forward and full
 * backward to every parameter. It defines "correct"
 * for the project: it is checked against transformers' golden files, and the GPU trainers are
 * checked against it. Written to be read, not to be fast. */
#ifndef LONGCTX_REF_MODEL_H
#define LONGCTX_REF_MODEL_H

#include <stdint.h>

#include "../common/config.h"
#include "../common/model.h"

typedef struct {
    double loss;       /* mean next-token NLL over the predicted tokens that count (0 if none does) */
    int64_t tokens;    /* the labels that count: S, or those of weight 1 */
    double aux;        /* MoE: transformers' load-balancing loss (added x router_aux_loss_coef when the
                        * config's output_router_logits is true); 0 when dense */
} RefResult;

/* tokens[S+1]: inputs tokens[0..S), labels tokens[1..S]. pos[S]: RoPE positions (NULL: 0..S-1).
 * loss_chunk: rows of logits computed at a time (<= 0: all S at once).
 * logits: NULL or [S, vocab] fp32 out. grads: NULL (forward only) or the flat fp32 gradient
 * buffer (ParamTable layout), overwritten. */
RefResult ref_forward_backward(const Qwen3Config *c, const ParamTable *pt, const float *params,
                               const uint32_t *tokens, const int64_t *pos, int64_t S, int64_t loss_chunk,
                               float *logits, float *grads);

/* The same with a loss mask: weights[S+1] (aligned with tokens; 0 or 1), label tokens[t+1] counts
 * only where weights[t+1] is 1, the loss and every gradient averaged over the labels that count.
 * weights NULL: every label counts (ref_forward_backward). */
RefResult ref_forward_backward_masked(const Qwen3Config *c, const ParamTable *pt, const float *params,
                                      const uint32_t *tokens, const uint8_t *weights, const int64_t *pos, int64_t S,
                                      int64_t loss_chunk, float *logits, float *grads);

/* Packed documents (--packing): documents end at the token eot; positions restart at 0 in each,
 * each attends only to itself, and the label after an eot (the next document's first token) counts
 * no loss, on top of weights (NULL: all 1). Equals each document run alone, losses summed over the
 * labels that count and divided by their number. */
RefResult ref_forward_backward_packed(const Qwen3Config *c, const ParamTable *pt, const float *params,
                                      const uint32_t *tokens, const uint8_t *weights, uint32_t eot, int64_t S,
                                      int64_t loss_chunk, float *logits, float *grads);

/* What both are made of: RoPE positions pos (NULL: 0..S-1) and, for each query, the first key it
 * may see, first[S] (NULL: 0). Tests plant bugs through it (positions not restarted). */
RefResult ref_forward_backward_docs(const Qwen3Config *c, const ParamTable *pt, const float *params,
                                    const uint32_t *tokens, const uint8_t *weights, const int64_t *pos,
                                    const int64_t *first, int64_t S, int64_t loss_chunk, float *logits, float *grads);

/* AdamW on flat fp32 buffers, as the trainers do it (bias-corrected, decoupled weight decay on
 * matrices only, global-norm clipping when clip > 0). step is 1-based. Returns the grad norm. */
double ref_adamw(const ParamTable *pt, float *params, const float *grads, float *m, float *v, int64_t step,
                 double lr, double beta1, double beta2, double eps, double weight_decay, double clip);

#endif
