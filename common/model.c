/* model.c -- parameter table, loading and initialisation. */
#include "model.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "safetensors.h"

#define ALIGN_ELEMS 64

static int64_t align_up(int64_t x) { return (x + ALIGN_ELEMS - 1) / ALIGN_ELEMS * ALIGN_ELEMS; }

static void add(ParamTable *t, ParamKind kind, int64_t layer, const char *name, int64_t r, int64_t c) {
    ParamInfo *p = &t->p[t->n++];
    p->expert = -1;
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
    t->layers = c->layers;
    t->experts = c->experts;
    t->per_layer = c->experts ? PER_LAYER - 2 + 3 * c->experts : PER_LAYER;
    t->p = xcalloc((size_t)(c->layers * t->per_layer + 3), sizeof(ParamInfo));
    const int64_t D = c->hidden, q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim, I = c->intermediate,
                  E = c->experts, Im = c->moe_intermediate;
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
        if (!E) {
            L(P_GATE, "mlp.gate_proj.weight", I, D);
            L(P_UP, "mlp.up_proj.weight", I, D);
            L(P_DOWN, "mlp.down_proj.weight", D, I);
        } else { /* the router, then each kind's experts side by side (Im * D is a multiple of 64: no gaps) */
            if ((Im * D) % ALIGN_ELEMS) DIE("MoE: moe_intermediate_size x hidden_size must be a multiple of %d", ALIGN_ELEMS);
            L(P_ROUTER, "mlp.gate.weight", E, D);
            const char *proj[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int k = 0; k < 3; k++)
                for (int64_t e = 0; e < E; e++) {
                    char sfx[48];
                    snprintf(sfx, sizeof sfx, "mlp.experts.%lld.%s.weight", (long long)e, proj[k]);
                    L((ParamKind)(P_EXP_GATE + k), sfx, k == 2 ? D : Im, k == 2 ? Im : D);
                    t->p[t->n - 1].expert = e;
                }
        }
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
    const ParamInfo *lay = &t->p[1 + layer * t->per_layer];
    if (kind >= P_IN_NORM && kind <= P_POST_NORM) return lay + (kind - P_IN_NORM);
    if (kind >= P_GATE && kind <= P_DOWN) {
        if (t->experts) DIE("params_get: an MoE layer has no dense MLP tensor");
        return lay + (kind - P_IN_NORM);
    }
    if (kind == P_ROUTER) return lay + (P_POST_NORM - P_IN_NORM + 1);
    if (kind >= P_EXP_GATE) return params_expert(t, kind, layer, 0);
    const ParamInfo *fin = &t->p[1 + t->layers * t->per_layer];
    if (kind == P_FINAL_NORM) return fin;
    return fin + 1 < t->p + t->n ? fin + 1 : &t->p[0]; /* lm_head, or the tied embedding */
}

const ParamInfo *params_expert(const ParamTable *t, ParamKind kind, int64_t layer, int64_t e) {
    if (!t->experts || kind < P_EXP_GATE || e < 0 || e >= t->experts) DIE("params_expert: not an expert tensor");
    return &t->p[1 + layer * t->per_layer + (P_POST_NORM - P_IN_NORM + 2) + (kind - P_EXP_GATE) * t->experts + e];
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

/* Counter-based normal numbers: element i of tensor k depends only on (seed, k, i), through a
 * splitmix64 hash and Box-Muller, so any number of threads fills the model identically. */
static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double unit(uint64_t h) { return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); } /* (0, 1) */

/* element e of tensor p (index k in the table): pairs (2q, 2q+1) share one Box-Muller draw */
static float init_value(const ParamInfo *p, int64_t k, double std, uint64_t seed, int64_t e) {
    if (p->ndim == 1) return 1.0f; /* norm weights start at 1 */
    const uint64_t key = mix(seed ^ mix((uint64_t)k + 1)), q = (uint64_t)(e / 2);
    const double r = sqrt(-2.0 * log(unit(mix(key + 2 * q)))), a = 2.0 * M_PI * unit(mix(key + 2 * q + 1));
    return (float)(std * r * (e % 2 ? sin(a) : cos(a)));
}

typedef struct {
    const ParamTable *t;
    const ParamInfo *p;   /* one tensor's range, or NULL: every tensor, in place in the flat buffer */
    double std;
    uint64_t seed;
    int64_t elem0, n;
    float *out;
    int part, parts;
} InitJob;

static void *init_part(void *arg) {
    const InitJob *j = arg;
    for (int64_t k = 0; k < j->t->n; k++) {
        const ParamInfo *p = &j->t->p[k];
        if (j->p && p != j->p) continue;
        const int64_t e0 = j->p ? j->elem0 : 0, n = j->p ? j->n : p->numel;
        float *w = j->p ? j->out : j->out + p->offset;
        const int64_t lo = n * j->part / j->parts, hi = n * (j->part + 1) / j->parts;
        for (int64_t i = lo; i < hi; i++) w[i] = init_value(p, k, j->std, j->seed, e0 + i);
    }
    return NULL;
}

static void run_init(InitJob job, int threads) {
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    pthread_t th[64];
    InitJob jobs[64];
    for (int i = 0; i < threads; i++) {
        jobs[i] = job;
        jobs[i].part = i;
        jobs[i].parts = threads;
        if (i > 0 && pthread_create(&th[i], NULL, init_part, &jobs[i])) DIE("cannot start an init thread");
    }
    init_part(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(th[i], NULL);
}

void params_init_threads(const ParamTable *t, double std, uint64_t seed, float *flat, int threads) {
    memset(flat, 0, (size_t)t->total * sizeof(float));
    run_init((InitJob){t, NULL, std, seed, 0, 0, flat, 0, 1}, threads);
}

void params_init_piece(const ParamTable *t, const ParamInfo *p, double std, uint64_t seed, int64_t elem0, int64_t n,
                       float *out, int threads) {
    run_init((InitJob){t, p, std, seed, elem0, n, out, 0, 1}, n < (1 << 16) ? 1 : threads);
}

int64_t params_pieces(const ParamTable *t, Piece **out) {
    Piece *pc = xcalloc((size_t)t->n, sizeof *pc);
    for (int64_t i = 0; i < t->n; i++) pc[i] = (Piece){&t->p[i], 0, t->p[i].numel, t->p[i].offset};
    *out = pc;
    return t->n;
}

void params_init(const ParamTable *t, double std, uint64_t seed, float *flat) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    params_init_threads(t, std, seed, flat, cores > 0 ? (int)cores : 1);
}
