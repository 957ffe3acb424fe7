/* attn.h -- the per-head steps of a full attention layer, for every model family: RMSNorm over each
 * query and key head, then RoPE (Qwen3: qk_norm_rope, every dim rotated; Qwen3.5's gated attention
                                  * reads each query from beside its output gate in q_proj's [S, H, 2 hd] rows, holds its norms as
 * 1 + w and rotates the first `rot` dims of a head), and the output gate (Qwen3.5: o sigmoid(gate);
                                                                           * Qwen3: none). H: the query heads of the call (all, or stage 5's head group). Kernels in
 * kernels/norm.cu and kernels/gated_attn.cu; the fp64 reference in tests/ref_model.c (Qwen3) and
 * tests/ref_gdn.c (ref_gated_attn). */
#ifndef LONGCTX_ATTN_H
#define LONGCTX_ATTN_H

#include <stdint.h>

#include "config.h"
#include "../kernels/kernels.h"

/* RoPE's inverse frequencies (YaRN's where the config asks), fp32, uploaded to inv_freq [rot / 2];
 * returns YaRN's attention factor (the cos/sin scale; 1 without YaRN) */
float attn_rope_upload(const Qwen3Config *c, float *inv_freq, cudaStream_t st);
/* q_raw [S, H * q_proj's rows per head] -> q [S, H, hd] and its rstd */
void attn_q_norm_rope(const Qwen3Config *c, bf16_t *q, float *rstd, const bf16_t *q_raw, const bf16_t *w, int64_t H,
                      const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, cudaStream_t st);
/* k_raw [S, Hkv hd] -> k [S, Hkv, hd] and its rstd */
void attn_k_norm_rope(const Qwen3Config *c, bf16_t *k, float *rstd, const bf16_t *k_raw, const bf16_t *w, const int32_t *pos,
                      const float *inv_freq, float attn_factor, int64_t S, cudaStream_t st);
/* dq [S, H, hd] (the attention's backward) -> d(q_raw)'s query rows into dq_raw (Qwen3: dq itself, in
 * place); dw added into */
void attn_q_norm_rope_bwd(const Qwen3Config *c, bf16_t *dq_raw, bf16_t *dq, float *dw, const bf16_t *q_raw, const float *rstd,
                          const bf16_t *w, int64_t H, const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S,
                          cudaStream_t st);
/* dk [S, Hkv, hd] -> d(k_raw) in place; dw added into */
void attn_k_norm_rope_bwd(const Qwen3Config *c, bf16_t *dk, float *dw, const bf16_t *k_raw, const float *rstd, const bf16_t *w,
                          const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, cudaStream_t st);
/* what o_proj reads: o, or with the gate og = o sigmoid(gate) (written; og may be o) */
const bf16_t *attn_out_gate(const Qwen3Config *c, bf16_t *og, const bf16_t *o, const bf16_t *q_raw, int64_t H,
                            int64_t S, cudaStream_t st);
/* d_o: d(o_proj's input) in, d(o) out; d(gate) into dq_raw's gate rows (nothing without a gate) */
void attn_out_gate_bwd(const Qwen3Config *c, bf16_t *d_o, bf16_t *dq_raw, const bf16_t *o, const bf16_t *q_raw, int64_t H,
                       int64_t S, cudaStream_t st);

#endif
