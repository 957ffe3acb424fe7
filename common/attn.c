/* attn.c -- a full attention layer's per-head steps (attn.h). */
#include "attn.h"

#include "gpu.h"

float attn_rope_upload(const Qwen3Config *c, float *inv_freq, cudaStream_t st) {
    double inv[512], af;
    float invf[512];
    rope_inv_freq(c, inv, &af);
    for (int64_t i = 0; i < c->rot / 2; i++) invf[i] = (float)inv[i];
    gpu_upload(inv_freq, invf, 4 * (c->rot / 2), st);
    return (float)af;
}

/* a head's rows in q_proj's output: its query, and its gate beside it */
static int64_t q_stride(const Qwen3Config *c) { return c->attn_gate ? 2 * c->head_dim : c->head_dim; }

void attn_q_norm_rope(const Qwen3Config *c, bf16_t *q, float *rstd, const bf16_t *q_raw, const bf16_t *w, int64_t H,
                      const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, cudaStream_t st) {
    if (config_plain_heads(c))
        qk_norm_rope_fwd(q, rstd, q_raw, w, pos, inv_freq, attn_factor, S, H, c->head_dim, (float)c->eps, st);
    else ga_qk_fwd(q, rstd, q_raw, H * q_stride(c), q_stride(c), w, pos, inv_freq, attn_factor, S, H, c->head_dim, c->rot,
                   (float)c->eps, st);
}

void attn_k_norm_rope(const Qwen3Config *c, bf16_t *k, float *rstd, const bf16_t *k_raw, const bf16_t *w, const int32_t *pos,
                      const float *inv_freq, float attn_factor, int64_t S, cudaStream_t st) {
    const int64_t H = c->kv_heads, hd = c->head_dim;
    if (config_plain_heads(c)) qk_norm_rope_fwd(k, rstd, k_raw, w, pos, inv_freq, attn_factor, S, H, hd, (float)c->eps, st);
    else ga_qk_fwd(k, rstd, k_raw, H * hd, hd, w, pos, inv_freq, attn_factor, S, H, hd, c->rot, (float)c->eps, st);
}

void attn_q_norm_rope_bwd(const Qwen3Config *c, bf16_t *dq_raw, bf16_t *dq, float *dw, const bf16_t *q_raw, const float *rstd,
                          const bf16_t *w, int64_t H, const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S,
                          cudaStream_t st) {
    if (config_plain_heads(c))
        qk_norm_rope_bwd(dq, dw, q_raw, rstd, w, pos, inv_freq, attn_factor, S, H, c->head_dim, st);
    else ga_qk_bwd(dq_raw, dw, dq, q_raw, H * q_stride(c), q_stride(c), rstd, w, pos, inv_freq, attn_factor, S, H,
                   c->head_dim, c->rot, st);
}

void attn_k_norm_rope_bwd(const Qwen3Config *c, bf16_t *dk, float *dw, const bf16_t *k_raw, const float *rstd, const bf16_t *w,
                          const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, cudaStream_t st) {
    const int64_t H = c->kv_heads, hd = c->head_dim;
    if (config_plain_heads(c)) qk_norm_rope_bwd(dk, dw, k_raw, rstd, w, pos, inv_freq, attn_factor, S, H, hd, st);
    else ga_qk_bwd(dk, dw, dk, k_raw, H * hd, hd, rstd, w, pos, inv_freq, attn_factor, S, H, hd, c->rot, st);
}

const bf16_t *attn_out_gate(const Qwen3Config *c, bf16_t *og, const bf16_t *o, const bf16_t *q_raw, int64_t H,
                            int64_t S, cudaStream_t st) {
    if (!c->attn_gate) return o;
    ga_gate_fwd(og, o, q_raw, S, H, c->head_dim, st);
    return og;
}

void attn_out_gate_bwd(const Qwen3Config *c, bf16_t *d_o, bf16_t *dq_raw, const bf16_t *o, const bf16_t *q_raw, int64_t H,
                       int64_t S, cudaStream_t st) {
    if (c->attn_gate) ga_gate_bwd(d_o, dq_raw, o, q_raw, S, H, c->head_dim, st);
}
