/* hybrid.c -- Qwen3.5's linear attention layer and gated attention steps on the GPU (hybrid.h). */
#include "hybrid.h"

#include <math.h>

#include "check.h"
#include "gpu.h"
#include "train.h"

#define BF(n) ((int64_t)(n) * 2)
#define F32(n) ((int64_t)(n) * 4)

int64_t hybrid_chunk(int64_t S) {
    int64_t c = 16;
    while (c * c < S && c < 4096) c *= 2;
    return c;
}

void hybrid_carve_over(GdnWork *g, Arena *a, int64_t from, const Qwen3Config *c, int64_t S, int bwd) {
    if (!c->lin_v_heads) return;
    const int64_t attn_end = arena_mark(a);
    arena_release(a, from);
    if (bwd) hybrid_carve_bwd(g, a, c, S);
    else hybrid_carve_fwd(g, a, c, S);
    if (arena_mark(a) < attn_end) arena_release(a, attn_end);
}

void hybrid_carve_fwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S) {
    const int64_t C = config_conv_channels(c), Hv = c->lin_v_heads, VD = Hv * c->lin_v_dim, Hk = c->lin_k_heads;
    g->chunk = hybrid_chunk(S);
    g->mix = arena_take(a, BF(S * C), "linear: mix");
    g->qkv = arena_take(a, BF(S * C), "linear: qkv");
    g->z = arena_take(a, BF(S * VD), "linear: z");
    g->a = arena_take(a, BF(S * Hv), "linear: a");
    g->b = arena_take(a, BF(S * Hv), "linear: b");
    g->g = arena_take(a, F32(S * Hv), "linear: g");
    g->beta = arena_take(a, F32(S * Hv), "linear: beta");
    g->rq = arena_take(a, F32(S * Hk), "linear: q norms");
    g->rk = arena_take(a, F32(S * Hk), "linear: k norms");
    g->o = arena_take(a, BF(S * VD), "linear: o");
    g->rstd = arena_take(a, F32(S * Hv), "linear: norm rstd");
    g->y = arena_take(a, BF(S * VD), "linear: y");
    g->states = arena_take(a, F32((S + g->chunk - 1) / g->chunk * Hv * c->lin_k_dim * c->lin_v_dim), "linear: states");
}

void hybrid_carve_bwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S) {
    const int64_t C = config_conv_channels(c), Hv = c->lin_v_heads, VD = Hv * c->lin_v_dim, Hk = c->lin_k_heads;
    g->dy = arena_take(a, BF(S * VD), "linear: dy");
    g->d_o = arena_take(a, BF(S * VD), "linear: do");
    g->dz = arena_take(a, BF(S * VD), "linear: dz");
    g->dqkv = arena_take(a, BF(S * C), "linear: dqkv");
    g->dmix = arena_take(a, BF(S * C), "linear: dmix");
    g->dq = arena_take(a, F32(S * Hk * c->lin_k_dim), "linear: dq");
    g->dk = arena_take(a, F32(S * Hk * c->lin_k_dim), "linear: dk");
    g->dg = arena_take(a, F32(S * Hv), "linear: dg");
    g->dbeta = arena_take(a, F32(S * Hv), "linear: dbeta");
    g->da = arena_take(a, BF(S * Hv), "linear: da");
    g->db = arena_take(a, BF(S * Hv), "linear: db");
    g->scratch = arena_take(a, F32(gdn_scratch_floats(Hv, c->lin_k_dim, c->lin_v_dim, hybrid_chunk(S))),
                            "linear: backward scratch");
}

void hybrid_linear_forward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *xn,
                           const bf16_t *x, bf16_t *x_mid, const int32_t *pos, int64_t S, cudaStream_t st) {
    const int64_t D = c->hidden, C = config_conv_channels(c), Hk = c->lin_k_heads, Hv = c->lin_v_heads,
                  dk = c->lin_k_dim, dv = c->lin_v_dim, VD = Hv * dv;
    mark(st, K_GEMM);
    linear_fwd(gm, g->mix, 0, xn, W->qkv, S, D, C, 0.f, st);
    linear_fwd(gm, g->z, 0, xn, W->z, S, D, VD, 0.f, st);
    linear_fwd(gm, g->b, 0, xn, W->b, S, D, Hv, 0.f, st);
    linear_fwd(gm, g->a, 0, xn, W->a, S, D, Hv, 0.f, st);
    mark(st, K_ELEM);
    gdn_conv_fwd(g->qkv, g->mix, W->conv, pos, S, C, c->conv_width, st);
    gdn_gates_fwd(g->g, g->beta, g->a, g->b, W->A_log, W->dt_bias, S, Hv, st);
    gdn_l2_fwd(g->rq, g->qkv, S, Hk, dk, C, 0, st);
    gdn_l2_fwd(g->rk, g->qkv, S, Hk, dk, C, Hk * dk, st);
    mark(st, K_ATTN);
    gdn_rule_fwd(g->o, g->states, NULL, g->qkv, g->g, g->beta, g->rq, g->rk, pos, S, Hk, Hv, dk, dv, g->chunk, st);
    mark(st, K_ELEM);
    gdn_norm_fwd(g->y, g->rstd, g->o, g->z, W->norm, S * Hv, dv, (float)c->eps, st);
    mark(st, K_GEMM);
    linear_fwd_add(gm, x_mid, x, g->y, W->out, S, VD, D, st);
}

void hybrid_linear_backward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                            const bf16_t *xn, const bf16_t *dy, bf16_t *dxn, const int32_t *pos, int64_t S,
                            cudaStream_t st) {
    const int64_t D = c->hidden, C = config_conv_channels(c), Hk = c->lin_k_heads, Hv = c->lin_v_heads,
                  dk = c->lin_k_dim, dv = c->lin_v_dim, VD = Hv * dv;
    mark(st, K_GEMM);
    linear_dw(gm, G->out, dy, g->y, S, VD, D, st);
    linear_dx(gm, g->dy, dy, W->out, S, VD, D, 0.f, st);
    mark(st, K_ELEM);
    gdn_norm_bwd(g->d_o, g->dz, G->norm, g->dy, g->o, g->z, g->rstd, W->norm, S * Hv, dv, st);
    /* the rule's sums over rows and value heads add into these */
    CUDA_CHECK(cudaMemsetAsync(g->dq, 0, (size_t)F32(S * Hk * dk), st));
    CUDA_CHECK(cudaMemsetAsync(g->dk, 0, (size_t)F32(S * Hk * dk), st));
    CUDA_CHECK(cudaMemsetAsync(g->dg, 0, (size_t)F32(S * Hv), st));
    CUDA_CHECK(cudaMemsetAsync(g->dbeta, 0, (size_t)F32(S * Hv), st));
    mark(st, K_ATTN);
    gdn_rule_bwd(g->dq, g->dk, g->dqkv, g->dg, g->dbeta, NULL, g->d_o, g->states, g->scratch, g->qkv, g->g, g->beta,
                 g->rq, g->rk, pos, S, Hk, Hv, dk, dv, g->chunk, st);
    mark(st, K_ELEM);
    gdn_l2_bwd(g->dqkv, g->dq, g->qkv, g->rq, (float)(1 / sqrt((double)dk)), S, Hk, dk, C, 0, st);
    gdn_l2_bwd(g->dqkv, g->dk, g->qkv, g->rk, 1.f, S, Hk, dk, C, Hk * dk, st);
    gdn_gates_bwd(g->da, g->db, G->A_log, G->dt_bias, g->dg, g->dbeta, g->g, g->beta, g->a, W->A_log, W->dt_bias, S, Hv,
                  st);
    gdn_conv_bwd(g->dmix, G->conv, g->dqkv, g->mix, W->conv, pos, S, C, c->conv_width, st);
    mark(st, K_GEMM);
    linear_dw(gm, G->qkv, g->dmix, xn, S, D, C, st);
    linear_dw(gm, G->z, g->dz, xn, S, D, VD, st);
    linear_dw(gm, G->b, g->db, xn, S, D, Hv, st);
    linear_dw(gm, G->a, g->da, xn, S, D, Hv, st);
    linear_dx(gm, dxn, g->dmix, W->qkv, S, D, C, 0.f, st);
    linear_dx(gm, dxn, g->dz, W->z, S, D, VD, 1.f, st);
    linear_dx(gm, dxn, g->db, W->b, S, D, Hv, 1.f, st);
    linear_dx(gm, dxn, g->da, W->a, S, D, Hv, 1.f, st);
}

/* ---------------------------------------------------------------- gated full attention */

void hybrid_qk_fwd(const Qwen3Config *c, bf16_t *q, float *rstd_q, bf16_t *k, float *rstd_k, const bf16_t *q_raw,
                   const bf16_t *k_raw, const bf16_t *wq, const bf16_t *wk, const int32_t *pos, const float *inv_freq,
                   float attn_factor, int64_t S, cudaStream_t st) {
    const int64_t hd = c->head_dim;
    if (config_plain_heads(c)) {
        qk_norm_rope_fwd(q, rstd_q, q_raw, wq, pos, inv_freq, attn_factor, S, c->heads, hd, (float)c->eps, st);
        qk_norm_rope_fwd(k, rstd_k, k_raw, wk, pos, inv_freq, attn_factor, S, c->kv_heads, hd, (float)c->eps, st);
        return;
    }
    const int64_t qs = c->attn_gate ? 2 * hd : hd; /* a head's rows in q_proj's output */
    ga_qk_fwd(q, rstd_q, q_raw, c->heads * qs, qs, wq, pos, inv_freq, attn_factor, S, c->heads, hd, c->rot,
              (float)c->eps, st);
    ga_qk_fwd(k, rstd_k, k_raw, c->kv_heads * hd, hd, wk, pos, inv_freq, attn_factor, S, c->kv_heads, hd, c->rot,
              (float)c->eps, st);
}

void hybrid_qk_bwd(const Qwen3Config *c, bf16_t *dq_raw, bf16_t *dq, bf16_t *dk, float *dwq, float *dwk,
                   const bf16_t *q_raw, const bf16_t *k_raw, const float *rstd_q, const float *rstd_k, const bf16_t *wq,
                   const bf16_t *wk, const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S,
                   cudaStream_t st) {
    const int64_t hd = c->head_dim;
    if (config_plain_heads(c)) {
        qk_norm_rope_bwd(dq, dwq, q_raw, rstd_q, wq, pos, inv_freq, attn_factor, S, c->heads, hd, st);
        qk_norm_rope_bwd(dk, dwk, k_raw, rstd_k, wk, pos, inv_freq, attn_factor, S, c->kv_heads, hd, st);
        return;
    }
    const int64_t qs = c->attn_gate ? 2 * hd : hd;
    ga_qk_bwd(dq_raw, dwq, dq, q_raw, c->heads * qs, qs, rstd_q, wq, pos, inv_freq, attn_factor, S, c->heads, hd, c->rot,
              st);
    ga_qk_bwd(dk, dwk, dk, k_raw, c->kv_heads * hd, hd, rstd_k, wk, pos, inv_freq, attn_factor, S, c->kv_heads, hd,
              c->rot, st);
}

const bf16_t *hybrid_gate_fwd(const Qwen3Config *c, bf16_t *og, const bf16_t *o, const bf16_t *q_raw, int64_t S,
                              cudaStream_t st) {
    if (!c->attn_gate) return o;
    ga_gate_fwd(og, o, q_raw, S, c->heads, c->head_dim, st);
    return og;
}

void hybrid_gate_bwd(const Qwen3Config *c, bf16_t *d_o, bf16_t *dq_raw, const bf16_t *o, const bf16_t *q_raw, int64_t S,
                     cudaStream_t st) {
    if (c->attn_gate) ga_gate_bwd(d_o, dq_raw, o, q_raw, S, c->heads, c->head_dim, st);
}
