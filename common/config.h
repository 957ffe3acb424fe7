/* config.h -- the model configuration: Qwen3 dense or MoE, or a Qwen3.5 hybrid (linear attention in
 * most layers): the official sizes by name, or an HF config.json (transformers v4
 * "rope_theta"/"rope_scaling" or v5 "rope_parameters"; Qwen3.5's text_config), with refusal of what
 * the trainers do not implement, naming the field. */
#ifndef LONGCTX_CONFIG_H
#define LONGCTX_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define CONFIG_MAX_LAYERS 1024

typedef struct {
    char name[64];            /* "0.6B" or the directory it came from */
    int64_t vocab;            /* vocab_size (embedding rows) */
    int64_t hidden;           /* hidden_size */
    int64_t intermediate;     /* intermediate_size */
    int64_t layers;           /* num_hidden_layers */
    int64_t heads;            /* num_attention_heads */
    int64_t kv_heads;         /* num_key_value_heads */
    int64_t head_dim;         /* head_dim (NOT hidden/heads in general: 32B has 64 x 128 != 5120) */
    int tied;                 /* tie_word_embeddings: lm_head is the embedding */
    double eps;               /* rms_norm_eps */
    double rope_theta;        /* RoPE base */
    int64_t max_position;     /* max_position_embeddings */
    /* YaRN (rope_type "yarn"); inactive when yarn == 0 */
    int yarn;
    double yarn_factor;           /* factor */
    int64_t yarn_original_max;    /* original_max_position_embeddings */
    double yarn_beta_fast, yarn_beta_slow;
    double yarn_mscale, yarn_mscale_all_dim;  /* 0 when absent */
    double yarn_attention_factor;             /* 0 when absent: derived */
    int yarn_truncate;                        /* default 1 */
    double init_std;          /* initializer_range (random init) */
    /* Qwen3 MoE (model_type "qwen3_moe"): every layer's MLP is a router over experts; 0 when dense */
    int64_t experts;          /* num_experts (num_local_experts) */
    int64_t top_k;            /* num_experts_per_tok */
    int64_t moe_intermediate; /* moe_intermediate_size: each expert's SwiGLU width */
    int norm_topk;            /* norm_topk_prob: the top-k weights renormalised to sum 1 */
    int aux_loss;             /* output_router_logits: the load-balancing loss is added to the loss */
    double aux_coef;          /* router_aux_loss_coef */
    /* Qwen3.5 MoE (model_type "qwen3_5_moe"): every layer's MLP adds a shared expert, gated by
     * sigmoid(x . shared_expert_gate), to the routed ones */
    int64_t shared_inter;     /* shared_expert_intermediate_size: the shared expert's SwiGLU width; 0 when none */
    /* Qwen3.5 hybrids (model_type "qwen3_5_text", or "qwen3_5" with its text_config); lin_v_heads 0 when
     * not. Linear layers are Gated DeltaNet (tests/ref_gdn.h): q, k of lin_k_heads x lin_k_dim, v of
     * lin_v_heads x lin_v_dim, a causal depthwise conv of conv_width; the others gated full attention. */
    int64_t lin_k_heads, lin_v_heads;  /* linear_num_key_heads, linear_num_value_heads */
    int64_t lin_k_dim, lin_v_dim;      /* linear_key_head_dim, linear_value_head_dim */
    int64_t conv_width;                /* linear_conv_kernel_dim */
    uint8_t linear[CONFIG_MAX_LAYERS]; /* layer_types: 1 where layer l is "linear_attention" */
    int attn_gate;            /* attn_output_gate: q_proj gives each head its query and a sigmoid output gate */
    int norm_1p;              /* Qwen3.5's RMSNorms: stored w, multiplied by 1 + w (zero-centred) */
    int64_t rot;              /* rotated dims of a head: head_dim x partial_rotary_factor (head_dim for Qwen3) */
} Qwen3Config;

/* the hybrid's linear layers: their conv's channels (q, k and v), and whether layer l is one */
static inline int64_t config_conv_channels(const Qwen3Config *c) {
    return 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim;
}
static inline int config_is_linear(const Qwen3Config *c, int64_t l) { return c->lin_v_heads && c->linear[l]; }
/* the first full attention layer from l on (else the last before it): what a ring's timer can time */
static inline int64_t config_attn_layer(const Qwen3Config *c, int64_t l) {
    for (int64_t i = l; i < c->layers; i++)
        if (!config_is_linear(c, i)) return i;
    for (int64_t i = l - 1; i >= 0; i--)
        if (!config_is_linear(c, i)) return i;
    return -1;
}
/* Qwen3's attention heads: no output gate, every dim rotated (Qwen3.5's take kernels/gated_attn.cu) */
static inline int config_plain_heads(const Qwen3Config *c) { return !c->attn_gate && c->rot == c->head_dim; }
/* q_proj's rows per head: the query, and with attn_output_gate its gate beside it */
static inline int64_t config_q_rows(const Qwen3Config *c) { return c->heads * c->head_dim * (c->attn_gate ? 2 : 1); }

/* "0.6B", "1.7B", "4B", "8B", "14B", "32B", and the MoE "30B-A3B", in any case, with or without the
 * Hub's "Qwen3-" (Qwen3-32B); the Qwen3.5 text models by the Hub's name ("Qwen3.5-27B", and the MoE
 * "Qwen3.5-35B-A3B": config.c lists them). Returns 0, or -1 if the name is unknown. */
int config_from_name(const char *name, Qwen3Config *c);
/* Parse an HF config.json. Returns 0, or -1 with a message naming the offending field. */
int config_from_json_text(const char *text, size_t len, Qwen3Config *c, char *err, size_t errlen);
int config_from_file(const char *path, Qwen3Config *c, char *err, size_t errlen);
/* A size name or a directory holding config.json. */
int config_load(const char *model, Qwen3Config *c, char *err, size_t errlen);
/* A trainer's config: from --resume's directory if given, else the model (with both, and model not
 * the resume directory itself, the two must have the same shapes: a save of another model is
 * refused, naming both); --layers (> 0) keeps the first layers, --yarn-factor (> 0) sets YaRN;
 * refuses what the kernels cannot run (head_dim not a multiple of 64, hidden not a multiple of 8). */
int config_for_run(Qwen3Config *c, const char *model, const char *resume, int64_t layers, double yarn_factor,
                   int64_t yarn_original, char *err, size_t errlen);
/* 0, or -1 with err when a hybrid's linear layers have sizes the GPU kernels do not run */
int config_check_hybrid(const Qwen3Config *c, char *err, size_t errlen);
/* a digest of what decides the tensors and the collectives (sizes, layer kinds; not the name): the
 * ranks compare it, as each node reads its own config.json. 52 bits: comm_min_i64 carries doubles. */
int64_t config_digest(const Qwen3Config *c);
/* config_digest and what else decides the model's function: RoPE (theta, every YaRN field), the
 * norms' epsilon, MoE routing's renormalisation and load-balancing loss. A save records it; --resume
 * compares it (52 bits). */
int64_t config_run_digest(const Qwen3Config *c);
/* 1 if every tensor of a and b has the same shape (layer counts compared after a --layers cut) */
int config_same_shape(const Qwen3Config *a, const Qwen3Config *b, int64_t layers);
/* Write an HF config.json (v4 keys plus rope_parameters, so transformers v4 and v5 both load it). */
int config_write_json(const Qwen3Config *c, const char *path, const char *torch_dtype);
/* Apply YaRN from the command line (factor, original max positions: 0 takes
 * config_yarn_original's); factor <= 1 disables. */
void config_set_yarn(Qwen3Config *c, double factor, int64_t original_max);
/* the original context YaRN stretches when none is given (config.c says which) */
int64_t config_yarn_original(const Qwen3Config *c);
/* 0, or -1 with err when YaRN's factor or the positions it reaches pass what config.json may say
 * (a save must load back) */
int config_check_yarn(const Qwen3Config *c, char *err, size_t errlen);
/* Qwen3's pretraining context: the model cards extend it with YaRN from 32768 positions
 * (max_position_embeddings says 40960) */
#define QWEN3_ORIGINAL_CONTEXT 32768
#define QWEN3_CONTEXT 40960
/* YaRN from the sequence (stage 5's default): past the original context RoPE is YaRN with factor
 * seq / original, unless the config has YaRN of its own or factor (> 0) is given. The original
 * context: original (> 0), or the config's YaRN's, or 32768 for Qwen3's 40960 positions, or
 * max_position_embeddings of a model trained longer. */
void config_yarn_for_seq(Qwen3Config *c, int64_t seq, double factor, int64_t original);

/* Matmul parameter count incl. lm_head (for 6·N·T model FLOPs) and total parameter count. */
int64_t config_matmul_params(const Qwen3Config *c);
int64_t config_total_params(const Qwen3Config *c);
/* Model FLOPs of one training step of T tokens (3 x forward; causal attention at half of full). */
double config_step_flops(const Qwen3Config *c, int64_t T);
/* the same with the attention's (query, key) pairs given (packed documents: docs_pairs; causal
 * over T tokens: T^2/2): 3 x (2 T params + 4 pairs heads head_dim per layer) */
double config_step_flops_pairs(const Qwen3Config *c, int64_t T, double pairs);
/* the attention part alone: 3 x 4 pairs heads head_dim per full attention layer */
double config_attn_flops(const Qwen3Config *c, double pairs);
/* a hybrid's gated delta rule over T tokens: 3 x 6 dk dv per token, value head and linear layer */
double config_linear_flops(const Qwen3Config *c, int64_t T);
/* the layers of full attention (all of a Qwen3's) */
int64_t config_full_layers(const Qwen3Config *c);
/* layer l's place among the full attention layers (l is one): --keep-attn keeps the first N of them,
 * and a kept layer's O and LSE sit at that place (a Qwen3.5 hybrid's linear layers keep nothing) */
static inline int64_t config_full_ix(const Qwen3Config *c, int64_t l) {
    int64_t n = 0;
    for (int64_t i = 0; i < l; i++) n += !config_is_linear(c, i);
    return n;
}
void config_print(const Qwen3Config *c);

/* RoPE over the rotated dims (rot: head_dim, or Qwen3.5's quarter of it): inv_freq[rot/2] and the factor cos/sin are multiplied by (1 without YaRN),
 * exactly as transformers v5 computes them (fp64 here, stored as fp32 tables by callers). */
void rope_inv_freq(const Qwen3Config *c, double *inv_freq, double *attention_factor);
/* cos/sin tables [n_pos, rot/2] in fp32 for positions pos[0..n) (NULL: 0..n-1). */
void rope_tables(const Qwen3Config *c, const int64_t *pos, int64_t n, float *cos_t, float *sin_t);

#endif
