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

static ParamInfo *add(ParamTable *t, ParamKind kind, int64_t layer, const char *name, int64_t r, int64_t c) {
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
    return p;
}

/* a Qwen3.5 linear attention layer's mixer, in transformers' order */
static void add_linear(ParamTable *t, const Qwen3Config *c, int64_t l) {
    const int64_t D = c->hidden, C = config_conv_channels(c), Hv = c->lin_v_heads, VD = Hv * c->lin_v_dim;
    char n[96];
#define L(kind, suffix, r, cc) (snprintf(n, sizeof n, "model.layers.%lld.linear_attn.%s", (long long)l, suffix), \
                                add(t, kind, l, n, r, cc))
    L(P_LIN_QKV, "in_proj_qkv.weight", C, D);
    L(P_LIN_Z, "in_proj_z.weight", VD, D);
    L(P_LIN_B, "in_proj_b.weight", Hv, D);
    L(P_LIN_A, "in_proj_a.weight", Hv, D);
    ParamInfo *conv = L(P_LIN_CONV, "conv1d.weight", C, c->conv_width);
    conv->ndim = 3; /* nn.Conv1d(groups = C) keeps a middle dim of 1: [C, 1, width] */
    conv->shape[1] = 1, conv->shape[2] = c->conv_width;
    L(P_LIN_DT, "dt_bias", Hv, 0);
    L(P_LIN_ALOG, "A_log", Hv, 0);
    L(P_LIN_NORM, "norm.weight", c->lin_v_dim, 0);
    L(P_LIN_OUT, "out_proj.weight", D, VD);
#undef L
}

void params_build(const Qwen3Config *c, ParamTable *t) {
    memset(t, 0, sizeof *t);
    t->layers = c->layers;
    t->experts = c->experts;
    /* at most: two norms, a linear mixer's 9 tensors (attention's 6), and the MLP's 3 or an MoE's router,
     * 3 E experts' tensors and Qwen3.5's 4 of the shared expert */
    const int64_t per_layer = 2 + 9 + (c->experts ? 1 + 3 * c->experts + 4 : 3);
    t->p = xcalloc((size_t)(c->layers * per_layer + 3), sizeof(ParamInfo));
    t->layer_at = xcalloc((size_t)c->layers + 1, sizeof(int64_t));
    t->layer_first = xcalloc((size_t)c->layers + 1, sizeof(int64_t));
    const int64_t D = c->hidden, q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim, I = c->intermediate,
                  E = c->experts, Im = c->moe_intermediate;
    add(t, P_EMBED, -1, "model.embed_tokens.weight", c->vocab, D);
    t->layer_begin = t->total;
    char n[96];
    for (int64_t l = 0; l < c->layers; l++) {
        t->layer_at[l] = t->total;
        t->layer_first[l] = t->n;
#define L(kind, suffix, r, cc) (snprintf(n, sizeof n, "model.layers.%lld.%s", (long long)l, suffix), add(t, kind, l, n, r, cc))
        L(P_IN_NORM, "input_layernorm.weight", D, 0)->shift = c->norm_1p;
        if (config_is_linear(c, l)) add_linear(t, c, l);
        else {
            L(P_Q, "self_attn.q_proj.weight", config_q_rows(c), D);
            L(P_K, "self_attn.k_proj.weight", kv, D);
            L(P_V, "self_attn.v_proj.weight", kv, D);
            L(P_O, "self_attn.o_proj.weight", D, q);
            L(P_Q_NORM, "self_attn.q_norm.weight", c->head_dim, 0)->shift = c->norm_1p;
            L(P_K_NORM, "self_attn.k_norm.weight", c->head_dim, 0)->shift = c->norm_1p;
        }
        L(P_POST_NORM, "post_attention_layernorm.weight", D, 0)->shift = c->norm_1p;
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
            if (c->shared_inter) { /* Qwen3.5: the shared expert, and its gate */
                L(P_SH_GATE, "mlp.shared_expert.gate_proj.weight", c->shared_inter, D);
                L(P_SH_UP, "mlp.shared_expert.up_proj.weight", c->shared_inter, D);
                L(P_SH_DOWN, "mlp.shared_expert.down_proj.weight", D, c->shared_inter);
                L(P_SH_ROUTE, "mlp.shared_expert_gate.weight", 1, D);
            }
        }
#undef L
        if (t->n - t->layer_first[l] > per_layer) /* a new kind of tensor must grow per_layer too */
            DIE("params_build: layer %lld has %lld tensors, the table %lld", (long long)l,
                (long long)(t->n - t->layer_first[l]), (long long)per_layer);
    }
    t->layer_at[c->layers] = t->total;
    t->layer_first[c->layers] = t->n;
    add(t, P_FINAL_NORM, -1, "model.norm.weight", D, 0)->shift = c->norm_1p;
    if (!c->tied) add(t, P_LM_HEAD, -1, "lm_head.weight", c->vocab, D);
}

void params_free(ParamTable *t) {
    free(t->p);
    free(t->layer_at);
    free(t->layer_first);
    memset(t, 0, sizeof *t);
}

static const char *KIND_NAMES[] = {"embed", "input_layernorm", "q_proj", "k_proj", "v_proj", "o_proj", "q_norm",
                                   "k_norm", "post_attention_layernorm", "gate_proj", "up_proj", "down_proj", "norm",
                                   "lm_head", "router", "experts.gate_proj", "experts.up_proj", "experts.down_proj",
                                   "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "conv1d", "dt_bias", "A_log",
                                   "linear_attn.norm", "out_proj", "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                                   "shared_expert_gate"};

const ParamInfo *params_get(const ParamTable *t, ParamKind kind, int64_t layer) {
    if (kind == P_EMBED) return &t->p[0];
    if (kind >= P_EXP_GATE && kind <= P_EXP_DOWN) return params_expert(t, kind, layer, 0);
    if (kind == P_FINAL_NORM || kind == P_LM_HEAD) {
        const ParamInfo *fin = &t->p[t->layer_first[t->layers]];
        if (kind == P_FINAL_NORM) return fin;
        return fin + 1 < t->p + t->n ? fin + 1 : &t->p[0]; /* lm_head, or the tied embedding */
    }
    if (layer < 0 || layer >= t->layers) DIE("params_get: layer %lld of %lld", (long long)layer, (long long)t->layers);
    for (int64_t i = t->layer_first[layer]; i < t->layer_first[layer + 1]; i++)
        if (t->p[i].kind == kind) return &t->p[i];
    DIE("params_get: layer %lld has no %s tensor", (long long)layer, KIND_NAMES[kind]);
}

const ParamInfo *params_expert(const ParamTable *t, ParamKind kind, int64_t layer, int64_t e) {
    if (!t->experts || kind < P_EXP_GATE || kind > P_EXP_DOWN || e < 0 || e >= t->experts)
        DIE("params_expert: not an expert tensor");
    const ParamInfo *r = params_get(t, P_ROUTER, layer); /* the experts follow the router */
    return r + 1 + (kind - P_EXP_GATE) * t->experts + e;
}

void params_moe_layout(const ParamTable *t, int64_t layer, MoeLayout *o) {
    const ParamInfo *r = params_get(t, P_ROUTER, layer), *sh = r + 1 + 3 * t->experts;
    const int has = sh < t->p + t->layer_first[layer + 1] && sh->kind == P_SH_GATE;
    *o = (MoeLayout){r->offset, r[1].offset, r[1 + t->experts].offset, r[1 + 2 * t->experts].offset,
                     has ? sh[0].offset : -1, has ? sh[1].offset : -1, has ? sh[2].offset : -1, has ? sh[3].offset : -1};
}

int params_decays(const ParamInfo *p) { return p->ndim >= 2; }

/* a shape as "[a, b, c]" */
static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    int k = snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < (int)n; d++) k += snprintf(buf + k, n - (size_t)k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < (int)n) snprintf(buf + k, n - (size_t)k, "]");
    return buf;
}

int params_stored(const SafeTensors *st, const char *prefix, const ParamTable *t, const ParamInfo *p, StoredAt *s,
                  char *err, size_t errlen) {
    snprintf(s->name, sizeof s->name, "%s%s", prefix, p->name);
    s->ndim = p->ndim, s->at = 0;
    memcpy(s->shape, p->shape, sizeof s->shape);
    const StTensor *f = st_find(st, s->name);
    if (!f && p->expert >= 0 && !prefix[0]) { /* a Qwen3.5 MoE release: the layer's experts in one tensor a kind */
        const int down = p->kind == P_EXP_DOWN;
        const int64_t E = t->experts, rows = p->shape[0], cols = p->shape[1]; /* Im x D, or D x Im */
        snprintf(s->name, sizeof s->name, "%smodel.layers.%lld.mlp.experts.%s", prefix, (long long)p->layer,
                 down ? "down_proj" : "gate_up_proj");
        s->ndim = 3, s->shape[0] = E, s->shape[1] = down ? rows : 2 * rows, s->shape[2] = cols;
        s->at = p->expert * s->shape[1] * cols + (p->kind == P_EXP_UP ? rows * cols : 0);
        f = st_find(st, s->name);
        if (!f) {
            snprintf(err, errlen, "tensor \"%s%s\" is missing (and so is the fused \"%s\")", prefix, p->name, s->name);
            return -1;
        }
    }
    if (!f) { snprintf(err, errlen, "tensor \"%s\" is missing", s->name); return -1; }
    int same = f->ndim == s->ndim;
    for (int d = 0; same && d < s->ndim; d++) same = f->shape[d] == s->shape[d];
    if (!same) {
        char a[96], b[96];
        snprintf(err, errlen, "tensor \"%s\" has the shape %s, the model's is %s", s->name,
                 shape_str(a, sizeof a, f->ndim, f->shape), shape_str(b, sizeof b, s->ndim, s->shape));
        return -1;
    }
    if (f->dtype != ST_F32 && f->dtype != ST_BF16 && f->dtype != ST_F16) {
        snprintf(err, errlen, "tensor \"%s\" is %s, not a float type (F32, BF16, F16)", s->name, st_dtype_name(f->dtype));
        return -1;
    }
    return 0;
}

int params_load(const ParamTable *t, const char *path, float *flat, char *err, size_t errlen) {
    SafeTensors st;
    if (st_open(path, &st, err, errlen)) return -1;
    memset(flat, 0, (size_t)t->total * sizeof(float));
    int rc = 0;
    for (int64_t i = 0; i < t->n && !rc; i++) {
        StoredAt s;
        rc = params_stored(&st, "", t, &t->p[i], &s, err, errlen) ||
             st_read_range_f32(&st, s.name, s.ndim, s.shape, s.at, t->p[i].numel, flat + t->p[i].offset, err, errlen);
    }
    for (int64_t i = 0; i < t->n && !rc; i++)
        for (int64_t e = 0; e < t->p[i].numel && t->p[i].shift; e++) flat[t->p[i].offset + e] += 1.0f;
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
    if (p->kind == P_LIN_ALOG) /* transformers: A = uniform(0, 16), A_log = log(A) */
        return (float)log(16.0 * unit(mix(mix(seed ^ mix((uint64_t)k + 1)) + (uint64_t)e)));
    if (p->ndim == 1) return 1.0f; /* norm weights (1 + w with w = 0 for Qwen3.5's) and dt_bias start at 1 */
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
