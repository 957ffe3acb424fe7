/* golden.c -- loading a golden fixture (golden.h). */
#include "golden.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"

int golden_load(const char *dir, Golden *g, char *err, size_t errlen) {
    char path[4200];
    memset(g, 0, sizeof *g);
    if (config_load(dir, &g->c, err, errlen)) return -1;
    params_build(&g->c, &g->pt);
    g->params = xmalloc((size_t)g->pt.total * 4);
    if (params_load(&g->pt, dir, g->params, err, errlen)) goto fail;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    if (st_open(path, &g->gold, err, errlen)) goto fail;
    const StTensor *t = st_find(&g->gold, "tokens");
    if (!t || t->numel < 2) {
        snprintf(err, errlen, "%s: no \"tokens\" tensor of at least 2 ids", path);
        st_close(&g->gold);
        goto fail;
    }
    int32_t *tok = xmalloc((size_t)t->numel * 4);
    if (st_read_i32(&g->gold, "tokens", t->numel, tok, err, errlen)) {
        free(tok);
        st_close(&g->gold);
        goto fail;
    }
    g->tokens = xmalloc((size_t)t->numel * 4);
    for (int64_t i = 0; i < t->numel; i++) g->tokens[i] = (uint32_t)tok[i];
    g->S = t->numel - 1;
    const StTensor *wt = st_find(&g->gold, "weights");
    if (wt) { /* a masked fixture */
        if (wt->numel != t->numel || st_read_i32(&g->gold, "weights", wt->numel, tok, err, errlen)) {
            if (wt->numel != t->numel) snprintf(err, errlen, "%s: \"weights\" must have one entry per token", path);
            free(tok);
            free(g->tokens);
            st_close(&g->gold);
            goto fail;
        }
        g->weights = xmalloc((size_t)wt->numel);
        for (int64_t i = 0; i < wt->numel; i++) g->weights[i] = tok[i] != 0;
    }
    free(tok);
    g->eot = -1;
    const StTensor *et = st_find(&g->gold, "eot");
    int32_t eot;
    if (et) { /* a packed fixture */
        const int bad = et->numel != 1 || st_read_i32(&g->gold, "eot", 1, &eot, err, errlen);
        if (bad || eot < 0 || eot >= g->c.vocab) {
            if (et->numel != 1 || !bad) snprintf(err, errlen, "%s: \"eot\" must be one token id below the vocabulary", path);
            golden_free(g);
            memset(g, 0, sizeof *g);
            return -1;
        }
        g->eot = eot;
    }
    return 0;
fail:
    free(g->params);
    params_free(&g->pt);
    memset(g, 0, sizeof *g);
    return -1;
}

void golden_free(Golden *g) {
    free(g->params);
    free(g->tokens);
    free(g->weights);
    params_free(&g->pt);
    st_close(&g->gold);
    memset(g, 0, sizeof *g);
}

int golden_loss(const Golden *g, double *loss, char *err, size_t errlen) {
    const int64_t one[1] = {1};
    float l;
    if (st_read_f32(&g->gold, "loss", 1, one, &l, err, errlen)) return -1;
    *loss = l;
    return 0;
}

int golden_logits(const Golden *g, float *logits, char *err, size_t errlen) {
    const int64_t shape[2] = {g->S, g->c.vocab};
    return st_read_f32(&g->gold, "logits", 2, shape, logits, err, errlen);
}

int golden_grad(const Golden *g, const ParamInfo *p, float *out, char *err, size_t errlen) {
    char name[160];
    snprintf(name, sizeof name, "grad.%s", p->name);
    return st_read_f32(&g->gold, name, p->ndim, p->shape, out, err, errlen);
}
