/* config.c -- Qwen3 and Qwen3.5 configurations: official sizes, config.json parsing and validation, RoPE. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "check.h"
#include "files.h"
#include "json.h"

/* ---------------------------------------------------------------- official sizes */
typedef struct {
    const char *name;
    int64_t hidden, intermediate, layers, heads, kv_heads;
    int tied;
} Size;
static const Size SIZES[] = {
    {"0.6B", 1024, 3072, 28, 16, 8, 1}, {"1.7B", 2048, 6144, 28, 16, 8, 1},
    {"4B", 2560, 9728, 36, 32, 8, 1},   {"8B", 4096, 12288, 36, 32, 8, 0},
    {"14B", 5120, 17408, 40, 40, 8, 0}, {"32B", 5120, 25600, 64, 64, 8, 0},
};

/* Qwen3-30B-A3B (the MoE of the recipe's table): its config.json on the Hub */
static void moe_30b_a3b(Qwen3Config *c) {
    c->hidden = 2048, c->intermediate = 6144, c->layers = 48, c->heads = 32, c->kv_heads = 4, c->tied = 0;
    c->experts = 128, c->top_k = 8, c->moe_intermediate = 768, c->norm_topk = 1, c->aux_coef = 0.001;
}

static void defaults(Qwen3Config *c) {
    memset(c, 0, sizeof *c);
    c->vocab = 151936;
    c->head_dim = 128;
    c->eps = 1e-6;
    c->rope_theta = 1e6;
    c->max_position = 40960;
    c->yarn_beta_fast = 32;
    c->yarn_beta_slow = 1;
    c->yarn_truncate = 1;
    c->init_std = 0.02;
}

/* ---------------------------------------------------------------- Qwen3.5 */
/* A hybrid's layers: linear attention in 3 of every 4, the 4th full attention (transformers'
 * default layer_types: full_attention_interval 4) */
static void hybrid_layers(Qwen3Config *c, int64_t interval) {
    for (int64_t l = 0; l < c->layers && l < CONFIG_MAX_LAYERS; l++) c->linear[l] = (l + 1) % interval != 0;
}

/* The dense Qwen3.5 text models: each Hub config.json's text_config (docs/qwen35_configs.md says where
 * each number was read). The MoE hybrid 35B-A3B follows them (moe_35b_a3b). */
typedef struct {
    const char *name;
    int64_t hidden, intermediate, layers, heads, kv_heads, lin_k_heads, lin_v_heads;
    int tied;
} HybridSize;
static const HybridSize HYBRID_SIZES[] = {
    {"0.8B", 1024, 3584, 24, 8, 2, 16, 16, 1}, {"2B", 2048, 6144, 24, 8, 2, 16, 16, 1},
    {"4B", 2560, 9216, 32, 16, 4, 16, 32, 1},  {"9B", 4096, 12288, 32, 16, 4, 16, 32, 0},
    {"27B", 5120, 17408, 64, 24, 4, 16, 48, 0},
};

static void hybrid_defaults(Qwen3Config *c) {
    c->vocab = 248320;
    c->head_dim = 256;
    c->rope_theta = 1e7;
    c->max_position = 262144;
    c->lin_k_dim = c->lin_v_dim = 128;
    c->conv_width = 4;
    c->attn_gate = 1;
    c->norm_1p = 1;
    c->rot = c->head_dim / 4; /* partial_rotary_factor 0.25 */
}

/* Qwen3.5-35B-A3B: transformers' Qwen3_5MoeTextConfig defaults, which its docstring names as that
 * checkpoint's; rope base, positions and the layer pattern as the dense sizes */
static void moe_35b_a3b(Qwen3Config *c) {
    c->hidden = 2048, c->layers = 40, c->heads = 16, c->kv_heads = 2, c->lin_k_heads = 16, c->lin_v_heads = 32;
    c->tied = 0, c->intermediate = 0; /* no dense MLP: every layer's is the MoE block */
    c->experts = 256, c->top_k = 8, c->moe_intermediate = 512, c->shared_inter = 512, c->norm_topk = 1;
    c->aux_coef = 0.001;
}

/* "32B", "32b", "Qwen3-32B", "qwen3-32b": a size by its name, the Hub's name, in any case */
static int same_name(const char *given, const char *size) {
    if (!strncasecmp(given, "Qwen3-", 6)) given += 6;
    return !strcasecmp(given, size);
}
/* "Qwen3.5-27B", "qwen3.5-27b": a hybrid by the Hub's name (the prefix is required: 27B alone could be either) */
static int hybrid_name(const char *given, const char *size) {
    return !strncasecmp(given, "Qwen3.5-", 8) && !strcasecmp(given + 8, size);
}

int config_from_name(const char *name, Qwen3Config *c) {
    for (size_t i = 0; i < sizeof HYBRID_SIZES / sizeof HYBRID_SIZES[0]; i++) {
        const HybridSize *s = &HYBRID_SIZES[i];
        if (!hybrid_name(name, s->name)) continue;
        defaults(c);
        hybrid_defaults(c);
        snprintf(c->name, sizeof c->name, "Qwen3.5-%s", s->name);
        c->hidden = s->hidden, c->intermediate = s->intermediate, c->layers = s->layers, c->heads = s->heads;
        c->kv_heads = s->kv_heads, c->lin_k_heads = s->lin_k_heads, c->lin_v_heads = s->lin_v_heads, c->tied = s->tied;
        hybrid_layers(c, 4);
        return 0;
    }
    if (hybrid_name(name, "35B-A3B")) {
        defaults(c);
        hybrid_defaults(c);
        snprintf(c->name, sizeof c->name, "Qwen3.5-35B-A3B");
        moe_35b_a3b(c);
        hybrid_layers(c, 4);
        return 0;
    }
    if (same_name(name, "30B-A3B")) {
        defaults(c);
        snprintf(c->name, sizeof c->name, "30B-A3B");
        moe_30b_a3b(c);
        c->rot = c->head_dim;
        return 0;
    }
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++) {
        const Size *s = &SIZES[i];
        if (!same_name(name, s->name)) continue;
        defaults(c);
        snprintf(c->name, sizeof c->name, "%s", s->name);
        c->hidden = s->hidden;
        c->intermediate = s->intermediate;
        c->layers = s->layers;
        c->heads = s->heads;
        c->kv_heads = s->kv_heads;
        c->tied = s->tied;
        c->rot = c->head_dim;
        return 0;
    }
    return -1;
}

/* ---------------------------------------------------------------- config.json */
#define REFUSE(...) do { snprintf(err, errlen, __VA_ARGS__); json_free(&root); return -1; } while (0)

/* Every size has a bound that leaves the largest real models room and keeps every product the
 * plan forms below 2^63: with a sequence of at most 2^32 tokens (the --seq range), L x S x heads x
 * head_dim x 2 bytes stays under 2^62. A field outside its bound is refused by name. */
#define MAX_VOCAB (1ll << 23)
#define MAX_HIDDEN (1ll << 17)
#define MAX_INTERMEDIATE (1ll << 20)
#define MAX_LAYERS CONFIG_MAX_LAYERS
#define MAX_HEADS 1024
#define MAX_POSITIONS (1ll << 40)
#define MAX_YARN_FACTOR 1e6

static int get_int(const JsonValue *o, const char *k, int64_t *out, int required, int64_t hi, char *err, size_t errlen) {
    const JsonValue *v = json_get(o, k);
    if (!v || v->type == JSON_NULL) {
        if (required) { snprintf(err, errlen, "config.json: missing required field \"%s\"", k); return -1; }
        return 0;
    }
    if (v->type != JSON_NUMBER || !v->is_integer || v->integer <= 0 || v->integer > hi) {
        snprintf(err, errlen, "config.json: field \"%s\" must be an integer in [1, %lld]", k, (long long)hi);
        return -1;
    }
    *out = v->integer;
    return 0;
}
/* a number in [lo, hi] (JSON has no inf or NaN, but 1e400 reads as inf: json.c refuses it) */
static int get_num(const JsonValue *o, const char *k, double *out, double lo, double hi, char *err, size_t errlen) {
    const JsonValue *v = json_get(o, k);
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_NUMBER || !isfinite(v->number) || v->number < lo || v->number > hi) {
        snprintf(err, errlen, "config.json: field \"%s\" must be a number in [%g, %g]", k, lo, hi);
        return -1;
    }
    *out = v->number;
    return 0;
}
static int is_true(const JsonValue *o, const char *k) {
    const JsonValue *v = json_get(o, k);
    return v && v->type == JSON_BOOL && v->boolean;
}

/* RoPE's base must be a number above 1: base^(2i/d) is the wavelength's growth, and at 1 or below
 * every pair turns at the same or a shrinking rate (the tables fill with NaN at 0) */
static int check_theta(const Qwen3Config *c, char *err, size_t errlen) {
    if (c->rope_theta > 1 && isfinite(c->rope_theta)) return 0;
    snprintf(err, errlen, "config.json: rope_theta %g must be a finite number above 1", c->rope_theta);
    return -1;
}

/* rope block: v4 "rope_scaling" (may be null) or v5 "rope_parameters" */
static int parse_rope(const JsonValue *root, Qwen3Config *c, char *err, size_t errlen) {
    const JsonValue *rp = json_get(root, "rope_parameters");
    const char *where = "rope_parameters";
    if (!rp || rp->type == JSON_NULL) { rp = json_get(root, "rope_scaling"); where = "rope_scaling"; }
    if (get_num(root, "rope_theta", &c->rope_theta, 1, 1e300, err, errlen)) return -1;
    if (!rp || rp->type == JSON_NULL) return check_theta(c, err, errlen);
    if (rp->type != JSON_OBJECT) { snprintf(err, errlen, "config.json: \"%s\" must be an object", where); return -1; }
    if (get_num(rp, "rope_theta", &c->rope_theta, 1, 1e300, err, errlen) || check_theta(c, err, errlen)) return -1;
    const JsonValue *t = json_get(rp, "rope_type");
    if (!t) t = json_get(rp, "type");
    const char *type = (t && t->type == JSON_STRING) ? t->string : "default";
    if (!strcmp(type, "default")) return 0;
    if (strcmp(type, "yarn")) {
        snprintf(err, errlen, "config.json: %s.rope_type \"%s\" is not supported (only \"default\" and \"yarn\")",
                 where, type);
        return -1;
    }
    c->yarn = 1;
    c->yarn_factor = 0;
    if (get_num(rp, "factor", &c->yarn_factor, 1, MAX_YARN_FACTOR, err, errlen)) return -1;
    if (!(c->yarn_factor >= 1.0)) {
        snprintf(err, errlen, "config.json: %s.factor must be a number in [1, 1e6] for yarn", where);
        return -1;
    }
    int64_t orig = 0;
    if (get_int(rp, "original_max_position_embeddings", &orig, 0, MAX_POSITIONS, err, errlen)) return -1;
    c->yarn_original_max = orig ? orig : c->max_position;
    if (get_num(rp, "beta_fast", &c->yarn_beta_fast, 1e-6, 1e6, err, errlen) ||
        get_num(rp, "beta_slow", &c->yarn_beta_slow, 1e-6, 1e6, err, errlen) ||
        get_num(rp, "mscale", &c->yarn_mscale, 0, 1e6, err, errlen) ||
        get_num(rp, "mscale_all_dim", &c->yarn_mscale_all_dim, 0, 1e6, err, errlen) ||
        get_num(rp, "attention_factor", &c->yarn_attention_factor, 0, 1e6, err, errlen))
        return -1;
    if (!(c->yarn_beta_fast > c->yarn_beta_slow)) { /* else the ramp between them runs backwards */
        snprintf(err, errlen, "config.json: %s.beta_fast (%g) must be larger than beta_slow (%g)", where,
                 c->yarn_beta_fast, c->yarn_beta_slow);
        return -1;
    }
    const JsonValue *tr = json_get(rp, "truncate");
    if (tr && tr->type == JSON_BOOL) c->yarn_truncate = tr->boolean;
    return 0;
}

/* qwen3_moe: the router and experts as transformers' Qwen3MoeSparseMoeBlock has them; qwen3_5_moe
 * (shared 1) as Qwen3_5MoeSparseMoeBlock: the top-k weights always renormalised, a gated shared expert.
 * What they can configure and the trainers do not implement is refused by name. */
static int parse_moe(const JsonValue *root, Qwen3Config *c, int shared, char *err, size_t errlen) {
    if (get_int(root, shared || json_get(root, "num_experts") ? "num_experts" : "num_local_experts", &c->experts, 1, 1024,
                err, errlen) ||
        get_int(root, "num_experts_per_tok", &c->top_k, 1, 32, err, errlen) ||
        get_int(root, "moe_intermediate_size", &c->moe_intermediate, 1, 1 << 16, err, errlen))
        return -1;
    c->norm_topk = shared || is_true(root, "norm_topk_prob");
    c->aux_loss = is_true(root, "output_router_logits");
    c->aux_coef = 0.001;
    if (get_num(root, "router_aux_loss_coef", &c->aux_coef, 0, 1e6, err, errlen)) return -1;
    int64_t step = 1;
    if (get_int(root, "decoder_sparse_step", &step, 0, MAX_LAYERS, err, errlen)) return -1;
    const JsonValue *dense = json_get(root, "mlp_only_layers");
    if (step != 1 || (dense && dense->type == JSON_ARRAY && dense->n > 0)) {
        snprintf(err, errlen, "config.json: %s: only every layer a MoE layer is supported",
                 step != 1 ? "\"decoder_sparse_step\" is not 1" : "\"mlp_only_layers\" is not empty");
        return -1;
    }
    const JsonValue *sh = json_get(root, "shared_expert_intermediate_size");
    if (!shared && sh && sh->type == JSON_NUMBER && sh->number > 0) {
        snprintf(err, errlen, "config.json: \"shared_expert_intermediate_size\": a qwen3_moe has no shared expert "
                 "(Qwen3.5's MoE, model_type qwen3_5_moe, does)");
        return -1;
    }
    if (shared && get_int(root, "shared_expert_intermediate_size", &c->shared_inter, 0, 1 << 16, err, errlen)) return -1;
    if (shared && !c->shared_inter) c->shared_inter = 512; /* Qwen3_5MoeTextConfig's default */
    if (shared && c->aux_loss) { /* the block is Qwen3's, but no fixture has checked the hybrid with it */
        snprintf(err, errlen, "config.json: \"output_router_logits\" true: the load-balancing loss with a Qwen3.5 MoE "
                 "is not checked against transformers yet (it is off as released)");
        return -1;
    }
    if (c->moe_intermediate % 8 || c->shared_inter % 8) { /* rows of [n, width] stay 16-byte aligned for cuBLASLt */
        snprintf(err, errlen, "config.json: %s %lld must be a multiple of 8",
                 c->moe_intermediate % 8 ? "moe_intermediate_size" : "shared_expert_intermediate_size",
                 (long long)(c->moe_intermediate % 8 ? c->moe_intermediate : c->shared_inter));
        return -1;
    }
    if (c->top_k > c->experts || c->top_k > 32 || c->experts > 1024) {
        snprintf(err, errlen, "config.json: num_experts_per_tok %lld of num_experts %lld: supported are top-k <= 32 "
                 "of at most 1024 experts", (long long)c->top_k, (long long)c->experts);
        return -1;
    }
    return 0;
}

/* Qwen3.5's linear-attention fields, and its layer_types (or full_attention_interval): what the kernels
 * run is checked in config_for_run, what the model cannot be here */
static int parse_hybrid(const JsonValue *cfg, Qwen3Config *c, char *err, size_t errlen) {
    if (get_int(cfg, "linear_num_key_heads", &c->lin_k_heads, 1, MAX_HEADS, err, errlen) ||
        get_int(cfg, "linear_num_value_heads", &c->lin_v_heads, 1, MAX_HEADS, err, errlen) ||
        get_int(cfg, "linear_key_head_dim", &c->lin_k_dim, 0, 1024, err, errlen) ||
        get_int(cfg, "linear_value_head_dim", &c->lin_v_dim, 0, 1024, err, errlen) ||
        get_int(cfg, "linear_conv_kernel_dim", &c->conv_width, 0, 64, err, errlen))
        return -1;
    if (c->lin_v_heads % c->lin_k_heads) {
        snprintf(err, errlen, "config.json: linear_num_value_heads (%lld) is not a multiple of linear_num_key_heads (%lld)",
                 (long long)c->lin_v_heads, (long long)c->lin_k_heads);
        return -1;
    }
    const JsonValue *lt = json_get(cfg, "layer_types");
    if (!lt || lt->type == JSON_NULL) {
        int64_t interval = 4;
        if (get_int(cfg, "full_attention_interval", &interval, 0, MAX_LAYERS, err, errlen)) return -1;
        hybrid_layers(c, interval);
        return 0;
    }
    if (lt->type != JSON_ARRAY || lt->n != c->layers) {
        snprintf(err, errlen, "config.json: \"layer_types\" must be a list of num_hidden_layers (%lld) strings",
                 (long long)c->layers);
        return -1;
    }
    for (int64_t i = 0; i < lt->n; i++) {
        const JsonValue *v = &lt->items[i];
        const int lin = v->type == JSON_STRING && !strcmp(v->string, "linear_attention");
        if (!lin && (v->type != JSON_STRING || strcmp(v->string, "full_attention"))) {
            snprintf(err, errlen, "config.json: \"layer_types\"[%lld] is \"%s\": expected \"linear_attention\" or "
                     "\"full_attention\"", (long long)i, v->type == JSON_STRING ? v->string : "?");
            return -1;
        }
        c->linear[i] = (uint8_t)lin;
    }
    return 0;
}

/* Qwen3.5 rotates only a part of each head: partial_rotary_factor, in rope_parameters (v5) or beside it */
static int parse_partial_rotary(const JsonValue *cfg, Qwen3Config *c, char *err, size_t errlen) {
    double f = c->norm_1p ? 0.25 : 1.0; /* Qwen3_5TextConfig's default */
    const JsonValue *rp = json_get(cfg, "rope_parameters");
    if (get_num(cfg, "partial_rotary_factor", &f, 1e-9, 1, err, errlen) ||
        (rp && rp->type == JSON_OBJECT && get_num(rp, "partial_rotary_factor", &f, 1e-9, 1, err, errlen)))
        return -1;
    c->rot = (int64_t)((double)c->head_dim * f); /* transformers: int(head_dim * partial_rotary_factor) */
    if (c->rot < 2 || c->rot % 2) {
        snprintf(err, errlen, "config.json: partial_rotary_factor %g of head_dim %lld rotates %lld dims: must be even and "
                 "at least 2", f, (long long)c->head_dim, (long long)c->rot);
        return -1;
    }
    return 0;
}

int config_from_json_text(const char *text, size_t len, Qwen3Config *c, char *err, size_t errlen) {
    JsonValue root;
    if (json_parse(text, len, &root, err, errlen)) return -1;
    defaults(c);
    if (root.type != JSON_OBJECT) REFUSE("config.json: top level is not an object");
    const JsonValue *mt = json_get(&root, "model_type");
    if (!mt || mt->type != JSON_STRING) REFUSE("config.json: missing \"model_type\" (expected \"qwen3\")");
    const int moe35 = !strcmp(mt->string, "qwen3_5_moe") || !strcmp(mt->string, "qwen3_5_moe_text"),
              moe = moe35 || !strcmp(mt->string, "qwen3_moe"),
              hybrid = moe35 || !strcmp(mt->string, "qwen3_5") || !strcmp(mt->string, "qwen3_5_text");
    if (strcmp(mt->string, "qwen3") && !moe && !hybrid)
        REFUSE("config.json: model_type \"%s\" is not supported (expected \"qwen3\", \"qwen3_moe\", \"qwen3_5\", "
               "\"qwen3_5_text\", \"qwen3_5_moe\" or \"qwen3_5_moe_text\")", mt->string);
    /* Qwen3_5(Moe)ForConditionalGeneration's config: the text model is its text_config (the vision tower is left out) */
    const JsonValue *cfg = &root;
    if (!strcmp(mt->string, "qwen3_5") || !strcmp(mt->string, "qwen3_5_moe")) {
        cfg = json_get(&root, "text_config");
        if (!cfg || cfg->type != JSON_OBJECT)
            REFUSE("config.json: model_type \"%s\" without a \"text_config\" object", mt->string);
    }
    if (hybrid) hybrid_defaults(c);
    if (!moe && (json_get(cfg, "num_experts") || json_get(cfg, "num_local_experts")))
        REFUSE("config.json: field \"num_experts\" present in a \"%s\" (dense) config", mt->string);
    if (is_true(cfg, "use_sliding_window"))
        REFUSE("config.json: \"use_sliding_window\" is true: sliding-window attention is not supported");
    const JsonValue *lt = json_get(cfg, "layer_types");
    if (!hybrid && lt && lt->type == JSON_ARRAY)
        for (int64_t i = 0; i < lt->n; i++)
            if (lt->items[i].type != JSON_STRING || strcmp(lt->items[i].string, "full_attention"))
                REFUSE("config.json: \"layer_types\"[%lld] is \"%s\": only full_attention layers are supported",
                       (long long)i, lt->items[i].type == JSON_STRING ? lt->items[i].string : "?");
    if (is_true(cfg, "attention_bias")) REFUSE("config.json: \"attention_bias\" is true: biases are not supported");
    const JsonValue *act = json_get(cfg, "hidden_act");
    if (act && (act->type != JSON_STRING || strcmp(act->string, "silu")))
        REFUSE("config.json: \"hidden_act\" must be \"silu\"");
    char e2[256];
    if (get_int(cfg, "vocab_size", &c->vocab, !hybrid, MAX_VOCAB, e2, sizeof e2) ||
        get_int(cfg, "hidden_size", &c->hidden, 1, MAX_HIDDEN, e2, sizeof e2) ||
        get_int(cfg, "intermediate_size", &c->intermediate, !moe35, MAX_INTERMEDIATE, e2, sizeof e2) ||
        get_int(cfg, "num_hidden_layers", &c->layers, 1, MAX_LAYERS, e2, sizeof e2) ||
        get_int(cfg, "num_attention_heads", &c->heads, 1, MAX_HEADS, e2, sizeof e2) ||
        get_int(cfg, "max_position_embeddings", &c->max_position, 0, MAX_POSITIONS, e2, sizeof e2))
        REFUSE("%s", e2);
    c->kv_heads = c->heads;
    if (!hybrid) c->head_dim = c->hidden / c->heads; /* Qwen3_5TextConfig's default is 256 */
    if (get_int(cfg, "num_key_value_heads", &c->kv_heads, 0, c->heads, e2, sizeof e2) ||
        get_int(cfg, "head_dim", &c->head_dim, 0, 256, e2, sizeof e2) ||
        get_num(cfg, "rms_norm_eps", &c->eps, 1e-30, 0.5, e2, sizeof e2) ||
        get_num(cfg, "initializer_range", &c->init_std, 0, 1, e2, sizeof e2))
        REFUSE("%s", e2);
    const JsonValue *tie = json_get(cfg, "tie_word_embeddings");
    if (!tie) tie = json_get(&root, "tie_word_embeddings");
    c->tied = tie && tie->type == JSON_BOOL ? tie->boolean : 0;
    if (c->heads % c->kv_heads)
        REFUSE("config.json: num_attention_heads (%lld) is not a multiple of num_key_value_heads (%lld)",
               (long long)c->heads, (long long)c->kv_heads);
    if (c->head_dim < 8 || c->head_dim % 8 || c->head_dim > 256)
        REFUSE("config.json: head_dim %lld unsupported (cuDNN flash attention needs a multiple of 8, at most 256)",
               (long long)c->head_dim);
    c->rot = c->head_dim;
    if (parse_rope(cfg, c, e2, sizeof e2) || (hybrid && parse_partial_rotary(cfg, c, e2, sizeof e2))) REFUSE("%s", e2);
    if (moe && parse_moe(cfg, c, moe35, e2, sizeof e2)) REFUSE("%s (%s, a mixture of experts: MoE)", e2, mt->string);
    if (hybrid && parse_hybrid(cfg, c, e2, sizeof e2)) REFUSE("%s (%s, a Qwen3.5 hybrid)", e2, mt->string);
    const JsonValue *gate = json_get(cfg, "attn_output_gate"); /* Qwen3.5's default: on */
    if (hybrid && gate && gate->type == JSON_BOOL) c->attn_gate = gate->boolean;
    json_free(&root);
    return 0;
}

int config_from_file(const char *path, Qwen3Config *c, char *err, size_t errlen) {
    size_t len;
    char *text = file_read_all(path, "config.json", 16 << 20, &len, err, errlen);
    if (!text) return -1;
    char why[1024];
    int rc = config_from_json_text(text, len, c, why, sizeof why);
    free(text);
    if (rc) { /* the file it is about: "DIR/config.json: field ..." (its reasons say "config.json: " or "JSON: ") */
        const char *r = !strncmp(why, "config.json: ", 13) ? why + 13 : why;
        snprintf(err, errlen, "%s: %s", short_name(path), r);
    }
    if (!rc) snprintf(c->name, sizeof c->name, "%.63s", path);
    return rc;
}

int config_load(const char *model, Qwen3Config *c, char *err, size_t errlen) {
    if (!config_from_name(model, c)) return 0;
    struct stat sb;
    if (stat(model, &sb) || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "--model %s: neither a size (0.6B 1.7B 4B 8B 14B 32B 30B-A3B, or Qwen3-32B and the like; "
                 "Qwen3.5-0.8B, -2B, -4B, -9B, -27B, -35B-A3B) nor a directory holding config.json", short_name(model));
        return -1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model);
    if (config_from_file(path, c, err, errlen)) return -1;
    snprintf(c->name, sizeof c->name, "%.63s", model);
    return 0;
}

/* the tensors' shapes agree (a save made with --layers N holds N layers: compared after the cut) */
int config_same_shape(const Qwen3Config *a, const Qwen3Config *b, int64_t layers) {
    const int64_t la = layers > 0 && layers < a->layers ? layers : a->layers,
                  lb = layers > 0 && layers < b->layers ? layers : b->layers;
    return la == lb && a->vocab == b->vocab && a->hidden == b->hidden && a->intermediate == b->intermediate &&
           a->heads == b->heads && a->kv_heads == b->kv_heads && a->head_dim == b->head_dim && a->tied == b->tied &&
           a->experts == b->experts && a->top_k == b->top_k && a->moe_intermediate == b->moe_intermediate &&
           a->shared_inter == b->shared_inter &&
           a->lin_k_heads == b->lin_k_heads && a->lin_v_heads == b->lin_v_heads && a->lin_k_dim == b->lin_k_dim &&
           a->lin_v_dim == b->lin_v_dim && a->conv_width == b->conv_width && a->attn_gate == b->attn_gate &&
           a->rot == b->rot && a->norm_1p == b->norm_1p &&
           !memcmp(a->linear, b->linear, (size_t)la);
}

/* what config_same_shape compares and differs between a and b, in words: "hidden 128 vs 256, layer
 * 0's kind linear vs full" (the first layer whose kind differs) */
static const char *shape_diff(const Qwen3Config *a, const Qwen3Config *b, int64_t layers, char *buf, size_t n) {
    const int64_t la = layers > 0 && layers < a->layers ? layers : a->layers,
                  lb = layers > 0 && layers < b->layers ? layers : b->layers;
    const struct { const char *name; int64_t x, y; } f[] = {
        {"layers", la, lb}, {"vocab", a->vocab, b->vocab}, {"hidden", a->hidden, b->hidden},
        {"intermediate", a->intermediate, b->intermediate}, {"heads", a->heads, b->heads},
        {"K/V heads", a->kv_heads, b->kv_heads}, {"head dim", a->head_dim, b->head_dim}, {"tied", a->tied, b->tied},
        {"experts", a->experts, b->experts}, {"top-k", a->top_k, b->top_k},
        {"expert width", a->moe_intermediate, b->moe_intermediate}, {"shared expert", a->shared_inter, b->shared_inter},
        {"linear key heads", a->lin_k_heads, b->lin_k_heads}, {"linear value heads", a->lin_v_heads, b->lin_v_heads},
        {"linear key dim", a->lin_k_dim, b->lin_k_dim}, {"linear value dim", a->lin_v_dim, b->lin_v_dim},
        {"conv width", a->conv_width, b->conv_width}, {"output gate", a->attn_gate, b->attn_gate},
        {"rotated dims", a->rot, b->rot}, {"(1 + w) norms", a->norm_1p, b->norm_1p}};
    buf[0] = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].x != f[i].y && strlen(buf) + 64 < n)
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s %lld vs %lld", buf[0] ? ", " : "", f[i].name,
                     (long long)f[i].x, (long long)f[i].y);
    for (int64_t l = 0; l < la && l < lb && l < CONFIG_MAX_LAYERS; l++)
        if (a->linear[l] != b->linear[l] && strlen(buf) + 64 < n) {
            snprintf(buf + strlen(buf), n - strlen(buf), "%slayer %lld's kind %s vs %s", buf[0] ? ", " : "",
                     (long long)l, a->linear[l] ? "linear" : "full", b->linear[l] ? "linear" : "full");
            break;
        }
    return buf;
}

int config_for_run(Qwen3Config *c, const char *model, const char *resume, int64_t layers, double yarn_factor,
                   int64_t yarn_original, char *err, size_t errlen) {
    if (config_load(resume ? resume : model, c, err, errlen)) return -1;
    if (resume && strcmp(model, resume)) { /* --model given beside --resume: they must be one model */
        Qwen3Config m;
        if (config_load(model, &m, err, errlen)) return -1;
        if (!config_same_shape(c, &m, layers)) {
            char d[320];
            snprintf(err, errlen, "--resume %s holds another model than --model %s: resume the save with its own model "
                     "(leave --model out); they differ in %s (the save's vs --model's)", resume, model,
                     shape_diff(c, &m, layers, d, sizeof d));
            return -1;
        }
    }
    if (layers > 0) {
        if (layers > c->layers) {
            snprintf(err, errlen, "--layers %lld: the model has %lld", (long long)layers, (long long)c->layers);
            return -1;
        }
        c->layers = layers;
    }
    if (yarn_factor > 0) config_set_yarn(c, yarn_factor, yarn_original);
    else if (yarn_original > 0 && c->yarn) config_set_yarn(c, c->yarn_factor, yarn_original);
    else if (yarn_original > 0) {
        snprintf(err, errlen, "--yarn-original %lld: the model has no YaRN; give --yarn-factor too",
                 (long long)yarn_original);
        return -1;
    }
    if (config_check_yarn(c, err, errlen)) return -1;
    if (c->head_dim % 64) {
        snprintf(err, errlen, "head_dim %lld: the RoPE kernel needs a multiple of 64", (long long)c->head_dim);
        return -1;
    }
    if (c->hidden % 8) {
        snprintf(err, errlen, "hidden_size %lld must be a multiple of 8", (long long)c->hidden);
        return -1;
    }
    return config_check_hybrid(c, err, errlen);
}

/* what the hybrid's GPU kernels run (kernels/gdn.cu): a warp holds 32 rows of a head's state, each
 * row's key dims in registers, so key and value head dims are 32, 64 or 128; the conv keeps its
 * taps in registers (width at most 8); the partial RoPE kernel rotates an even count of dims */
int config_check_hybrid(const Qwen3Config *c, char *err, size_t errlen) {
    if (!c->lin_v_heads) return 0;
    const int64_t dk = c->lin_k_dim, dv = c->lin_v_dim;
    if ((dk != 32 && dk != 64 && dk != 128) || (dv != 32 && dv != 64 && dv != 128)) {
        snprintf(err, errlen, "linear_key_head_dim %lld, linear_value_head_dim %lld: the gated delta rule kernels take "
                 "32, 64 or 128", (long long)dk, (long long)dv);
        return -1;
    }
    if (c->conv_width > 8) {
        snprintf(err, errlen, "linear_conv_kernel_dim %lld: the conv kernel takes at most 8", (long long)c->conv_width);
        return -1;
    }
    if (c->rot > c->head_dim || c->rot % 2) {
        snprintf(err, errlen, "%lld rotated dims of head_dim %lld", (long long)c->rot, (long long)c->head_dim);
        return -1;
    }
    return 0;
}

/* The context a model was trained on, which YaRN stretches: the config's own YaRN's (its
 * max_position is already scaled); else, for Qwen3's 40960 positions, the 32768 Qwen trained on
 * and names as YaRN's original_max_position_embeddings (the 8192 left are for generation);
 * else max_position itself. Every stage takes the same default, so a --yarn-factor means one RoPE. */
int64_t config_yarn_original(const Qwen3Config *c) {
    const int64_t mp = c->max_position;
    if (c->yarn) return c->yarn_original_max;
    if (mp <= QWEN3_CONTEXT) return mp < QWEN3_ORIGINAL_CONTEXT ? mp : QWEN3_ORIGINAL_CONTEXT;
    return mp;
}

int config_check_yarn(const Qwen3Config *c, char *err, size_t errlen) {
    if (!c->yarn) return 0;
    if (c->yarn_factor > MAX_YARN_FACTOR) {
        snprintf(err, errlen, "YaRN factor %g (from %lld positions): at most %g, as config.json allows", c->yarn_factor,
                 (long long)c->yarn_original_max, MAX_YARN_FACTOR);
        return -1;
    }
    if (c->yarn_factor * (double)c->yarn_original_max > (double)MAX_POSITIONS) {
        snprintf(err, errlen, "YaRN x%g from %lld reaches past %lld positions", c->yarn_factor,
                 (long long)c->yarn_original_max, (long long)MAX_POSITIONS);
        return -1;
    }
    return 0;
}

void config_set_yarn(Qwen3Config *c, double factor, int64_t original_max) {
    if (factor <= 1.0) { c->yarn = 0; return; }
    c->yarn_original_max = original_max > 0 ? original_max : config_yarn_original(c); /* before c->yarn is set */
    c->yarn = 1;
    c->yarn_factor = factor;
    /* the positions it reaches: transformers checks factor against max_position_embeddings /
     * original_max_position_embeddings (and warns), so a saved config.json says it both ways */
    c->max_position = (int64_t)ceil(factor * (double)c->yarn_original_max);
}

int config_write_json(const Qwen3Config *c, const char *path, const char *torch_dtype) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    char rope[640], extra[200] = ""; /* YaRN's optional fields, when the config had them: they change the scale */
    const char *opt[3] = {"mscale", "mscale_all_dim", "attention_factor"};
    const double optv[3] = {c->yarn_mscale, c->yarn_mscale_all_dim, c->yarn_attention_factor};
    for (int k = 0; k < 3; k++)
        if (optv[k] > 0) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", \"%s\": %.17g", opt[k], optv[k]);
    if (c->yarn)
        snprintf(rope, sizeof rope,
                 "{\"rope_type\": \"yarn\", \"rope_theta\": %.17g, \"factor\": %.17g, "
                 "\"original_max_position_embeddings\": %lld, \"beta_fast\": %.17g, \"beta_slow\": %.17g%s%s}",
                 c->rope_theta, c->yarn_factor, (long long)c->yarn_original_max, c->yarn_beta_fast,
                 c->yarn_beta_slow, c->yarn_truncate ? "" : ", \"truncate\": false", extra);
    else
        snprintf(rope, sizeof rope, "{\"rope_type\": \"default\", \"rope_theta\": %.17g}", c->rope_theta);
    if (c->lin_v_heads || c->rot != c->head_dim) /* Qwen3.5: rope_parameters carries partial_rotary_factor */
        snprintf(strrchr(rope, '}'), 96, ", \"partial_rotary_factor\": %.17g}", (double)c->rot / (double)c->head_dim);
    char moe[512] = "";
    if (c->experts) /* Qwen3MoeConfig's fields (Qwen3_5MoeTextConfig's: and its shared expert) */
        snprintf(moe, sizeof moe,
                 "  \"num_experts\": %lld,\n  \"num_experts_per_tok\": %lld,\n  \"moe_intermediate_size\": %lld,\n"
                 "  \"norm_topk_prob\": %s,\n  \"output_router_logits\": %s,\n  \"router_aux_loss_coef\": %.17g,\n"
                 "  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n",
                 (long long)c->experts, (long long)c->top_k, (long long)c->moe_intermediate,
                 c->norm_topk ? "true" : "false", c->aux_loss ? "true" : "false", c->aux_coef);
    if (c->shared_inter)
        snprintf(moe + strlen(moe), sizeof moe - strlen(moe), "  \"shared_expert_intermediate_size\": %lld,\n",
                 (long long)c->shared_inter);
    char *hyb = xcalloc(64 * CONFIG_MAX_LAYERS + 512, 1); /* Qwen3_5TextConfig's fields */
    if (c->lin_v_heads) {
        int n = snprintf(hyb, 512, "  \"linear_num_key_heads\": %lld,\n  \"linear_num_value_heads\": %lld,\n"
                         "  \"linear_key_head_dim\": %lld,\n  \"linear_value_head_dim\": %lld,\n"
                         "  \"linear_conv_kernel_dim\": %lld,\n  \"layer_types\": [",
                         (long long)c->lin_k_heads, (long long)c->lin_v_heads, (long long)c->lin_k_dim,
                         (long long)c->lin_v_dim, (long long)c->conv_width);
        for (int64_t l = 0; l < c->layers; l++)
            n += sprintf(hyb + n, "%s\"%s\"", l ? ", " : "", c->linear[l] ? "linear_attention" : "full_attention");
        sprintf(hyb + n, "],\n");
    }
    char inter[64] = ""; /* Qwen3.5's MoE has no dense MLP, and no intermediate_size */
    if (c->intermediate) snprintf(inter, sizeof inter, "  \"intermediate_size\": %lld,\n", (long long)c->intermediate);
    const char *arch = c->lin_v_heads ? (c->experts ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM")
                       : c->experts ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM",
               *type = c->lin_v_heads ? (c->experts ? "qwen3_5_moe_text" : "qwen3_5_text") : c->experts ? "qwen3_moe" : "qwen3";
    fprintf(f,
            "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n%s%s"
            "  \"vocab_size\": %lld,\n  \"hidden_size\": %lld,\n%s"
            "  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n"
            "  \"head_dim\": %lld,\n  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %lld,\n"
            "  \"rms_norm_eps\": %.17g,\n  \"initializer_range\": %.17g,\n  \"tie_word_embeddings\": %s,\n"
            "  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n  \"rope_theta\": %.17g,\n"
            "  \"rope_scaling\": %s,\n  \"rope_parameters\": %s,\n  \"bos_token_id\": %s,\n"
            "  \"eos_token_id\": %s,\n  \"torch_dtype\": \"%s\",\n  \"use_cache\": true\n}\n",
            arch, type, moe, hyb,
            (long long)c->vocab, (long long)c->hidden, inter, (long long)c->layers,
            (long long)c->heads, (long long)c->kv_heads, (long long)c->head_dim, (long long)c->max_position, c->eps,
            c->init_std, c->tied ? "true" : "false", c->rope_theta, c->yarn ? rope : "null", rope,
            !c->lin_v_heads && c->vocab > 151643 ? "151643" : "null",
            !c->lin_v_heads && c->vocab > 151645 ? "151645" : "null", torch_dtype);
    free(hyb);
    return fclose(f) ? -1 : 0;
}

/* ---------------------------------------------------------------- digest */
/* FNV-1a over what decides the tensors and the collectives (sizes, layer kinds), not the name: each
 * node reads its own config.json, and ranks that disagree would issue different collectives */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
    return h;
}
int64_t config_digest(const Qwen3Config *c) {
    const int64_t f[] = {c->vocab, c->hidden, c->intermediate, c->layers, c->heads, c->kv_heads, c->head_dim, c->tied,
                         c->experts, c->top_k, c->moe_intermediate, c->lin_k_heads, c->lin_v_heads, c->lin_k_dim,
                         c->lin_v_dim, c->conv_width, c->rot, c->attn_gate, c->norm_1p, c->shared_inter};
    uint64_t h = fnv(0xcbf29ce484222325ull, f, sizeof f);
    h = fnv(h, c->linear, (size_t)(c->layers < CONFIG_MAX_LAYERS ? c->layers : CONFIG_MAX_LAYERS));
    return (int64_t)(h >> 12); /* 52 bits, as the data's digest: the ranks compare them as doubles (comm_min_i64) */
}

int64_t config_run_digest(const Qwen3Config *c) {
    const double f[] = {c->eps, c->rope_theta, c->yarn ? c->yarn_factor : 0, c->yarn_beta_fast, c->yarn_beta_slow,
                        c->yarn_mscale, c->yarn_mscale_all_dim, c->yarn_attention_factor, c->aux_coef};
    const int64_t i[] = {config_digest(c), c->yarn, c->yarn ? c->yarn_original_max : 0, c->yarn_truncate, c->norm_topk,
                         c->aux_loss};
    uint64_t h = fnv(0xcbf29ce484222325ull, f, sizeof f);
    h = fnv(h, i, sizeof i);
    return (int64_t)(h >> 12);
}

/* ---------------------------------------------------------------- counts */
/* an MoE layer's MLP: the router and the top_k experts a token uses (active), or all experts (held);
 * Qwen3.5's shared expert and its gate, which every token uses */
static int64_t mlp_params(const Qwen3Config *c, int64_t experts) {
    if (!c->experts) return 3 * c->hidden * c->intermediate;
    return c->hidden * c->experts + experts * 3 * c->hidden * c->moe_intermediate +
           (c->shared_inter ? c->hidden * (3 * c->shared_inter + 1) : 0);
}
/* a layer's mixer, its matrices' parameters: gated full attention / Qwen3 attention, or Gated DeltaNet's
 * projections in (q k v, z, b, a) and out */
static int64_t mixer_params(const Qwen3Config *c, int64_t l) {
    if (config_is_linear(c, l)) {
        const int64_t vd = c->lin_v_heads * c->lin_v_dim;
        return c->hidden * (config_conv_channels(c) + vd + 2 * c->lin_v_heads) + c->hidden * vd;
    }
    const int64_t q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim;
    return c->hidden * (config_q_rows(c) + 2 * kv) + q * c->hidden;
}
/* a layer's vectors: two norms, and the mixer's (q/k norms; or the conv, dt_bias, A_log and the gated norm) */
static int64_t layer_vectors(const Qwen3Config *c, int64_t l) {
    if (config_is_linear(c, l))
        return 2 * c->hidden + config_conv_channels(c) * c->conv_width + 2 * c->lin_v_heads + c->lin_v_dim;
    return 2 * c->hidden + 2 * c->head_dim;
}
int64_t config_matmul_params(const Qwen3Config *c) {
    int64_t n = c->hidden * c->vocab;
    for (int64_t l = 0; l < c->layers; l++) n += mixer_params(c, l) + mlp_params(c, c->top_k);
    return n;
}
int64_t config_total_params(const Qwen3Config *c) {
    int64_t n = c->vocab * c->hidden * (c->tied ? 1 : 2) + c->hidden;
    for (int64_t l = 0; l < c->layers; l++) n += mixer_params(c, l) + mlp_params(c, c->experts) + layer_vectors(c, l);
    return n;
}
/* layers of full attention (the attention FLOPs' and the K/V ring's) */
int64_t config_full_layers(const Qwen3Config *c) {
    int64_t n = 0;
    for (int64_t l = 0; l < c->layers; l++) n += !config_is_linear(c, l);
    return n;
}
double config_attn_flops(const Qwen3Config *c, double pairs) {
    return 3.0 * (double)config_full_layers(c) * 4.0 * pairs * (double)(c->heads * c->head_dim);
}
/* the gated delta rule per token and value head: read the state with k, write the rank-1 update, read
 * with q: 3 x 2 dk dv FLOPs forward, x 3 for a training step, per linear layer */
double config_linear_flops(const Qwen3Config *c, int64_t T) {
    return 3.0 * (double)(c->layers - config_full_layers(c)) * 6.0 * (double)T * (double)c->lin_v_heads *
           (double)(c->lin_k_dim * c->lin_v_dim);
}
double config_step_flops_pairs(const Qwen3Config *c, int64_t T, double pairs) {
    return 3.0 * 2.0 * (double)T * (double)config_matmul_params(c) + config_attn_flops(c, pairs) +
           config_linear_flops(c, T);
}
double config_step_flops(const Qwen3Config *c, int64_t T) { return config_step_flops_pairs(c, T, (double)T * (double)T / 2); }

void config_print(const Qwen3Config *c) {
    printf("model %s: %lld layers, hidden %lld, intermediate %lld, heads %lld/%lld x %lld, vocab %lld, %s, "
           "%.3fB params",
           c->name, (long long)c->layers, (long long)c->hidden, (long long)c->intermediate, (long long)c->heads,
           (long long)c->kv_heads, (long long)c->head_dim, (long long)c->vocab, c->tied ? "tied" : "untied",
           (double)config_total_params(c) / 1e9);
    if (c->experts)
        printf(", MoE: %lld experts of %lld, top-%lld%s%s", (long long)c->experts, (long long)c->moe_intermediate,
               (long long)c->top_k, c->shared_inter ? ", a gated shared expert" : "",
               c->aux_loss ? ", load-balancing loss" : "");
    if (c->lin_v_heads)
        printf(", Qwen3.5 hybrid: %lld linear attention layers (Gated DeltaNet, %lld/%lld heads x %lld/%lld), "
               "%lld gated full attention (%lld of %lld dims rotated)", (long long)(c->layers - config_full_layers(c)),
               (long long)c->lin_k_heads, (long long)c->lin_v_heads, (long long)c->lin_k_dim, (long long)c->lin_v_dim,
               (long long)config_full_layers(c), (long long)c->rot, (long long)c->head_dim);
    if (c->yarn) printf(", YaRN x%g from %lld", c->yarn_factor, (long long)c->yarn_original_max);
    printf("\n");
}

/* ---------------------------------------------------------------- RoPE (transformers v5) */
static double yarn_get_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

void rope_inv_freq(const Qwen3Config *c, double *inv_freq, double *attention_factor) {
    const int64_t dim = c->rot, half = dim / 2; /* the rotated dims (all of a Qwen3 head) */
    const double base = c->rope_theta;
    /* transformers computes base ** (arange(0, dim, 2) / dim) in fp32 */
    for (int64_t i = 0; i < half; i++) inv_freq[i] = (float)(1.0 / pow(base, (double)(float)(2.0 * i / dim)));
    *attention_factor = 1.0;
    if (!c->yarn) return;
    const double factor = c->yarn_factor, L0 = (double)c->yarn_original_max;
    if (c->yarn_attention_factor > 0) *attention_factor = c->yarn_attention_factor;
    else if (c->yarn_mscale > 0 && c->yarn_mscale_all_dim > 0)
        *attention_factor = yarn_get_mscale(factor, c->yarn_mscale) / yarn_get_mscale(factor, c->yarn_mscale_all_dim);
    else *attention_factor = yarn_get_mscale(factor, 1.0);
    /* YaRN (transformers v5's _compute_yarn_parameters). Frequency pair i turns r_i = L0 / lambda_i
     * times over the original context L0, with wavelength lambda_i = 2 pi base^(2i/dim). Pairs that turn
     * more than beta_fast times keep their frequency (extrapolated), pairs that turn fewer than
     * beta_slow times are divided by the factor (interpolated), and a linear ramp blends between:
     *   dim(r) = dim * ln(L0 / (2 pi r)) / (2 ln base)      the pair index that turns r times
     *   low = dim(beta_fast), high = dim(beta_slow)         floor/ceil when truncate, clamped to [0, dim-1]
     *   ramp_i = clamp((i - low) / (high - low), 0, 1)
     *   inv_freq_i = (1 - ramp_i) inv_freq_i + ramp_i inv_freq_i / factor
     * and the attention factor 0.1 ln(factor) + 1 scales cos and sin (mscale). */
    double low = dim * log(L0 / (c->yarn_beta_fast * 2 * M_PI)) / (2 * log(base));
    double high = dim * log(L0 / (c->yarn_beta_slow * 2 * M_PI)) / (2 * log(base));
    if (c->yarn_truncate) { low = floor(low); high = ceil(high); }
    if (low < 0) low = 0;
    if (high > dim - 1) high = (double)(dim - 1);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; i++) {
        double pos_freq = pow(base, (double)(float)(2.0 * i / dim));
        double extra = (float)(1.0 / pos_freq), inter = (float)(1.0 / (factor * pos_freq));
        double ramp = ((double)i - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double extra_w = 1.0 - ramp;
        inv_freq[i] = (float)(inter * (1.0 - extra_w) + extra * extra_w);
    }
}

void rope_tables(const Qwen3Config *c, const int64_t *pos, int64_t n, float *cos_t, float *sin_t) {
    const int64_t half = c->rot / 2;
    double inv[512], af;
    rope_inv_freq(c, inv, &af);
    for (int64_t t = 0; t < n; t++) {
        float p = (float)(pos ? pos[t] : t);
        for (int64_t i = 0; i < half; i++) {
            float angle = p * (float)inv[i]; /* fp32 product, as transformers */
            cos_t[t * half + i] = (float)cos((double)angle) * (float)af;
            sin_t[t * half + i] = (float)sin((double)angle) * (float)af;
        }
    }
}

void config_yarn_for_seq(Qwen3Config *c, int64_t seq, double factor, int64_t original) {
    const int64_t orig = original > 0 ? original : config_yarn_original(c);
    if (factor > 0) config_set_yarn(c, factor, orig);
    else if (!c->yarn && seq > orig) config_set_yarn(c, (double)seq / (double)orig, orig);
    else if (c->yarn && original > 0) config_set_yarn(c, c->yarn_factor, orig);
}
