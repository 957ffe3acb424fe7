/* golden.h -- one golden fixture of tests/golden/<name>/ (made by tests/make_golden.py with
 * transformers): config.json and model.safetensors (the model: config, parameter table, fp32
 * parameters) and golden.safetensors (tokens [S+1] I32, optionally weights [S+1] I32 0/1 (a loss
 * mask) and eot [1] I32 (packed documents), and transformers' loss [1], logits [S, V] and grad.<HF name> fp32 tensors). Used by test_cpu (reference model vs transformers) and
 * check_stage (trainers vs reference model on the same fixture). */
#ifndef LONGCTX_GOLDEN_H
#define LONGCTX_GOLDEN_H

#include <stddef.h>
#include <stdint.h>

#include "../common/config.h"
#include "../common/model.h"
#include "../common/safetensors.h"

typedef struct {
    Qwen3Config c;
    ParamTable pt;
    float *params;      /* [pt.total] fp32, ParamTable layout */
    uint32_t *tokens;   /* [S + 1]: inputs tokens[0..S), labels tokens[1..S] */
    uint8_t *weights;   /* [S + 1] loss weights (a masked fixture's "weights" tensor: label t+1 counts
                         * where weights[t+1] is 1; transformers had labels -100 elsewhere), or NULL */
    int64_t S;
    int64_t eot;        /* a packed fixture's (its "eot" tensor): documents end at this token; -1 */
    SafeTensors gold;   /* golden.safetensors, open until golden_free */
} Golden;

/* dir: the fixture's directory. Returns 0, or -1 with a message (nothing to free then). */
int golden_load(const char *dir, Golden *g, char *err, size_t errlen);
void golden_free(Golden *g);

/* transformers' values. Each returns 0, or -1 with a message naming the tensor. */
int golden_loss(const Golden *g, double *loss, char *err, size_t errlen);
int golden_logits(const Golden *g, float *logits /* [S, vocab] */, char *err, size_t errlen);
int golden_grad(const Golden *g, const ParamInfo *p, float *out /* [p->numel] */, char *err, size_t errlen);

#endif
