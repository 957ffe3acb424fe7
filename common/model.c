/* model.c -- parameter table, loading and initialisation. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "safetensors.h"

#define ALIGN_ELEMS 64

static int64_t align_up(int64_t x) { return (x + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS; }

static void add(ParamTable *t, ParamKind kind, int64_t layer, const char *name, int64_t r, int64_t c) {
    ParamInfo *p = &t->p[t->n++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->layer = layer;
    p->ndim = c ? 2 : 1;
    p->shape[0] = r;
    p->shape[1] = c;
    p->numel = c ? r * c : r;
    p->offset = t->total;
    t->total = align_up(t->total + p->numel);
}

void params_build(const Qwen3Config *c, ParamTable *t) {
    memset(t, 0, sizeof *t);
    t->p = xcalloc((size_t)(c->layers * PER_LAYER + 3), sizeof(ParamInfo));
    const int64_t D = c->hidden, q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim, I = c->intermediate;
    add(t, P_EMBED, -1, "model.embed_tokens.weight", c->vocab, D);
    t->layer_begin = t->total;
    char n[96];
    for (int64_t l = 0; l < c->layers; l++) {
#define L(kind, suffix, r, cc) snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, suffix), add(t, kind, l, n, r, cc)
        L(P_IN_NORM, "input_layernorm.weight", D, 0);
        L(P_Q, "self_attn.q_proj.weight", q, D);
        L(P_K, "self_attn.k_proj.weight", kv, D);
        L(P_V, "self_attn.v_proj.weight", kv, D);
        L(P_O, "self_attn.o_proj.weight", D, q);
        L(P_Q_NORM, "self_attn.q_norm.weight", c->head_dim, 0);
        L(P_K_NORM, "self_attn.k_norm.weight", c->head_dim, 0);
        L(P_POST_NORM, "post_attention_layernorm.weight", D, 0);
        L(P_GATE, "mlp.gate_proj.weight", I, D);
        L(P_UP, "mlp.up_proj.weight", I, D);
        L(P_DOWN, "mlp.down_proj.weight", D, I);
#undef L
        if (l == 0) t->layer_stride = t->total - t->layer_begin;
    }
    add(t, P_FINAL_NORM, -1, "model.norm.weight", D, 0);
    if (!c->tied) add(t, P_LM_HEAD, -1, "lm_head.weight", c->vocab, D);
}

void params_free(ParamTable *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

const ParamInfo *params_get(const ParamTable *t, ParamKind kind, int64_t layer) {
    if (kind == P_EMBED) return &t->p[0];
    if (kind >= P_IN_NORM && kind <= P_DOWN) return &t->p[1 + layer * PER_LAYER + (kind - P_IN_NORM)];
    int64_t nl = (t->n - 2) / PER_LAYER; /* layers */
    const ParamInfo *fin = &t->p[1 + nl * PER_LAYER];
    if (kind == P_FINAL_NORM) return fin;
    return fin + 1 < t->p + t->n ? fin + 1 : &t->p[0]; /* lm_head, or the tied embedding */
}

int params_decays(const ParamInfo *p) { return p->ndim == 2; }

int params_load(const ParamTable *t, const char *path, float *flat, char *err, size_t errlen) {
    SafeTensors st;
    if (st_open(path, &st, err, errlen)) return -1;
    memset(flat, 0, (size_t)t->total * sizeof(float));
    int rc = 0;
    for (int64_t i = 0; i < t->n && !rc; i++)
        rc = st_read_f32(&st, t->p[i].name, t->p[i].ndim, t->p[i].shape, flat + t->p[i].offset, err, errlen);
    st_close(&st);
    return rc;
}

/* splitmix64 -> Box-Muller: deterministic, portable */
static uint64_t next64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((double)(next64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void params_init(const ParamTable *t, double std, uint64_t seed, float *flat) {
    memset(flat, 0, (size_t)t->total * sizeof(float));
    uint64_t s = seed;
    for (int64_t i = 0; i < t->n; i++) {
        float *w = flat + t->p[i].offset;
        if (t->p[i].ndim == 1) {
            for (int64_t j = 0; j < t->p[i].numel; j++) w[j] = 1.0f;
            continue;
        }
        for (int64_t j = 0; j < t->p[i].numel; j += 2) {
            double r = sqrt(-2.0 * log(uniform01(&s))), a = 2.0 * M_PI * uniform01(&s);
            w[j] = (float)(std * r * cos(a));
            if (j + 1 < t->p[i].numel) w[j + 1] = (float)(std * r * sin(a));
        }
    }
}
