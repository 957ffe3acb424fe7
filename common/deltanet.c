/* deltanet.c -- Qwen3.5's linear attention layer and gated attention steps on the GPU (hybrid.h). */
#include "deltanet.h"

#include <math.h>
#include <stdio.h>

#include "check.h"
#include "gpu.h"
#include "train.h"


int64_t deltanet_chunk(int64_t seg) {
    int64_t c = 16;
    while (c * c < seg && c < 4096) c *= 2;
    return c;
}

int deltanet_chunk_ok(const Qwen3Config *c, int64_t n, char *err, size_t errlen) {
    if (!c->lin_v_heads || n >= c->conv_width - 1) return 0;
    snprintf(err, errlen, "zigzag chunks of %lld tokens: a linear attention layer's conv reads the %lld before a chunk "
             "from the previous chunk, so a chunk needs at least %lld", (long long)n, (long long)(c->conv_width - 1),
             (long long)(c->conv_width - 1));
    return -1;
}

/* the kept states of one segment: one per chunk, each [Hv, dk, dv] */
static int64_t states_per_seg(const Qwen3Config *c, int64_t seg) {
    const int64_t ch = deltanet_chunk(seg);
    return (seg + ch - 1) / ch * c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
}

void deltanet_carve_share(GdnShare *s, Arena *a, const Qwen3Config *c, int64_t P) {
    if (!c->lin_v_heads) return;
    const int64_t P2 = 2 * P, hl = (c->conv_width - 1) * config_conv_channels(c), ms = deltanet_state_size(c),
                  mm = ms + c->lin_v_heads * c->lin_k_dim * c->lin_k_dim;
    s->tails = arena_take(a, BF(2 * hl), "linear: our conv tails");
    s->tails_all = arena_take(a, BF(P2 * hl), "linear: every conv tail");
    s->dhalo = arena_take(a, BF(2 * hl), "linear: our halo gradients");
    s->dhalo_all = arena_take(a, BF(P2 * hl), "linear: every halo gradient");
    s->maps = arena_take(a, F32(2 * mm), "linear: our state maps");
    s->maps_all = arena_take(a, F32(P2 * mm), "linear: every state map");
    s->cmaps = arena_take(a, F32(2 * ms), "linear: our backward maps");
    s->cmaps_all = arena_take(a, F32(P2 * ms), "linear: every backward map");
    s->s_start = arena_take(a, F32(2 * ms), "linear: our initial states");
    s->compose = arena_take(a, F32(2 * ms), "linear: composition");
}

void deltanet_carve_fwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S, int64_t seg) {
    const int64_t C = config_conv_channels(c), Hv = c->lin_v_heads, VD = Hv * c->lin_v_dim, Hk = c->lin_k_heads;
    g->seg = seg;
    g->chunk = deltanet_chunk(seg);
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
    g->states = arena_take(a, F32(S / seg * states_per_seg(c, seg)), "linear: states");
}

void deltanet_carve_bwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S, int64_t seg) {
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
    g->scratch = arena_take(a, F32(gdn_scratch_floats(Hv, c->lin_k_dim, c->lin_v_dim, deltanet_chunk(seg))),
                            "linear: backward scratch");
}

void deltanet_carve_over(GdnWork *g, Arena *a, int64_t from, const Qwen3Config *c, int64_t S, int64_t seg, int bwd) {
    if (!c->lin_v_heads) return;
    const int64_t attn_end = arena_mark(a);
    arena_release(a, from);
    if (bwd) deltanet_carve_bwd(g, a, c, S, seg);
    else deltanet_carve_fwd(g, a, c, S, seg);
    if (arena_mark(a) < attn_end) arena_release(a, attn_end);
}

/* ---------------------------------------------------------------- the layer whole */
#define AT(base, k) ((base) + (params_get(t, k, l)->offset - params_get(t, P_LIN_QKV, l)->offset))
const GdnWeights16 *deltanet_weights(GdnWeights16 *w, const ParamTable *t, int64_t l, const bf16_t *qkv) {
    *w = (GdnWeights16){qkv, AT(qkv, P_LIN_Z), AT(qkv, P_LIN_B), AT(qkv, P_LIN_A), AT(qkv, P_LIN_CONV),
                        AT(qkv, P_LIN_DT), AT(qkv, P_LIN_ALOG), AT(qkv, P_LIN_NORM), AT(qkv, P_LIN_OUT)};
    return w;
}
const GdnGrads32 *deltanet_grads(GdnGrads32 *g, const ParamTable *t, int64_t l, float *qkv) {
    *g = (GdnGrads32){qkv, AT(qkv, P_LIN_Z), AT(qkv, P_LIN_B), AT(qkv, P_LIN_A), AT(qkv, P_LIN_CONV),
                      AT(qkv, P_LIN_DT), AT(qkv, P_LIN_ALOG), AT(qkv, P_LIN_NORM), AT(qkv, P_LIN_OUT)};
    return g;
}
#undef AT

void deltanet_forward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *xn,
                      const bf16_t *x, bf16_t *x_mid, const int32_t *pos, int64_t S, cudaStream_t st) {
    deltanet_project(gm, g, c, W, xn, S, st);
    deltanet_conv(g, c, W, pos, 0, NULL, st);
    deltanet_gates(g, c, W, S, st);
    deltanet_rule(g, c, pos, 0, NULL, st); /* from a zero state */
    deltanet_output(gm, g, c, W, x, x_mid, S, st);
}

void deltanet_backward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                       const bf16_t *xn, const bf16_t *dy, bf16_t *dxn, const int32_t *pos, int64_t S, cudaStream_t st) {
    deltanet_output_bwd(gm, g, c, W, G, dy, S, st);
    deltanet_rule_bwd(g, c, pos, 0, NULL, 0, st); /* the final state's gradient is zero */
    deltanet_gates_bwd(g, c, W, G, S, st);
    deltanet_conv_bwd(g, c, W, G, pos, 0, NULL, NULL, st);
    deltanet_project_bwd(gm, g, c, W, G, xn, dxn, S, st);
}

/* ---------------------------------------------------------------- forward */
void deltanet_project(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *xn, int64_t S,
                    cudaStream_t st) {
    const int64_t D = c->hidden, C = config_conv_channels(c), Hv = c->lin_v_heads, VD = Hv * c->lin_v_dim;
    linear_fwd(gm, g->mix, 0, xn, W->qkv, S, D, C, 0.f, st);
    linear_fwd(gm, g->z, 0, xn, W->z, S, D, VD, 0.f, st);
    linear_fwd(gm, g->b, 0, xn, W->b, S, D, Hv, 0.f, st);
    linear_fwd(gm, g->a, 0, xn, W->a, S, D, Hv, 0.f, st);
}

void deltanet_conv(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const int32_t *pos, int64_t k,
                 const bf16_t *halo, cudaStream_t st) {
    const int64_t C = config_conv_channels(c), t0 = k * g->seg;
    gdn_conv_fwd(g->qkv + t0 * C, g->mix + t0 * C, halo, W->conv, pos + t0, g->seg, C, c->conv_width, st);
}

void deltanet_gates(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, int64_t S, cudaStream_t st) {
    const int64_t C = config_conv_channels(c), Hk = c->lin_k_heads, dk = c->lin_k_dim;
    gdn_gates_fwd(g->g, g->beta, g->a, g->b, W->A_log, W->dt_bias, S, c->lin_v_heads, st);
    gdn_l2_fwd(g->rq, g->qkv, S, Hk, dk, C, 0, st);
    gdn_l2_fwd(g->rk, g->qkv, S, Hk, dk, C, Hk * dk, st);
}

/* segment k's rows of the rule's inputs, as the kernels take them */
#define SEG_ARGS(g, c, pos, t0)                                                                                   \
    (g)->qkv + (t0) * config_conv_channels(c), (g)->g + (t0) * (c)->lin_v_heads, (g)->beta + (t0) * (c)->lin_v_heads, \
        (g)->rq + (t0) * (c)->lin_k_heads, (g)->rk + (t0) * (c)->lin_k_heads, (pos) + (t0), (g)->seg, (c)->lin_k_heads, \
        (c)->lin_v_heads, (c)->lin_k_dim, (c)->lin_v_dim

void deltanet_rule(GdnWork *g, const Qwen3Config *c, const int32_t *pos, int64_t k, const float *S0, cudaStream_t st) {
    const int64_t t0 = k * g->seg, ms = c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
    float *S_io = NULL;
    if (S0) { /* the kernel writes the final state where it read the initial: a copy in the scratch */
        S_io = g->scratch;
        CUDA_CHECK(cudaMemcpyAsync(S_io, S0, (size_t)F32(ms), cudaMemcpyDeviceToDevice, st));
    }
    const ProfSpan span = prof_span_begin(st, K_ATTN); /* --profile: the rule is this layer's attention */
    gdn_rule_fwd(g->o + t0 * c->lin_v_heads * c->lin_v_dim, g->states + k * states_per_seg(c, g->seg), S_io,
                 SEG_ARGS(g, c, pos, t0), g->chunk, st);
    prof_span_end(st, span);
}

void deltanet_maps(GdnWork *g, const Qwen3Config *c, const int32_t *pos, int64_t k, float *maps, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_ATTN);
    gdn_rule_maps(maps, SEG_ARGS(g, c, pos, k * g->seg), st);
    prof_span_end(st, span);
}

void deltanet_output(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *x, bf16_t *x_mid,
                   int64_t S, cudaStream_t st) {
    const int64_t Hv = c->lin_v_heads, dv = c->lin_v_dim;
    gdn_norm_fwd(g->y, g->rstd, g->o, g->z, W->norm, S * Hv, dv, (float)c->eps, st);
    linear_fwd_add(gm, x_mid, x, g->y, W->out, S, Hv * dv, c->hidden, st);
}

/* ---------------------------------------------------------------- backward */
void deltanet_output_bwd(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                       const bf16_t *dy, int64_t S, cudaStream_t st) {
    const int64_t D = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim,
                  VD = Hv * dv;
    linear_dw(gm, G->out, dy, g->y, S, VD, D, st);
    linear_dx(gm, g->dy, dy, W->out, S, VD, D, 0.f, st);
    gdn_norm_bwd(g->d_o, g->dz, G->norm, g->dy, g->o, g->z, g->rstd, W->norm, S * Hv, dv, st);
    /* the rule's sums over rows and value heads add into these */
    CUDA_CHECK(cudaMemsetAsync(g->dq, 0, (size_t)F32(S * Hk * dk), st));
    CUDA_CHECK(cudaMemsetAsync(g->dk, 0, (size_t)F32(S * Hk * dk), st));
    CUDA_CHECK(cudaMemsetAsync(g->dg, 0, (size_t)F32(S * Hv), st));
    CUDA_CHECK(cudaMemsetAsync(g->dbeta, 0, (size_t)F32(S * Hv), st));
}

void deltanet_rule_bwd(GdnWork *g, const Qwen3Config *c, const int32_t *pos, int64_t k, float *dS, int c_only,
                     cudaStream_t st) {
    const int64_t t0 = k * g->seg, Hk = c->lin_k_heads, dk = c->lin_k_dim, Hv = c->lin_v_heads;
    const ProfSpan span = prof_span_begin(st, K_ATTN);
    gdn_rule_bwd(g->dq + t0 * Hk * dk, g->dk + t0 * Hk * dk, g->dqkv + t0 * config_conv_channels(c), g->dg + t0 * Hv,
                 g->dbeta + t0 * Hv, dS, g->d_o + t0 * Hv * c->lin_v_dim, g->states + k * states_per_seg(c, g->seg),
                 g->scratch, SEG_ARGS(g, c, pos, t0), g->chunk, c_only, st);
    prof_span_end(st, span);
}

void deltanet_gates_bwd(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G, int64_t S,
                      cudaStream_t st) {
    const int64_t C = config_conv_channels(c), Hk = c->lin_k_heads, dk = c->lin_k_dim;
    gdn_l2_bwd(g->dqkv, g->dq, g->qkv, g->rq, (float)(1 / sqrt((double)dk)), S, Hk, dk, C, 0, st);
    gdn_l2_bwd(g->dqkv, g->dk, g->qkv, g->rk, 1.f, S, Hk, dk, C, Hk * dk, st);
    gdn_gates_bwd(g->da, g->db, G->A_log, G->dt_bias, g->dg, g->dbeta, g->g, g->beta, g->a, W->A_log, W->dt_bias, S,
                  c->lin_v_heads, st);
}

void deltanet_conv_bwd(GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G, const int32_t *pos,
                     int64_t k, const bf16_t *halo, bf16_t *dhalo, cudaStream_t st) {
    const int64_t C = config_conv_channels(c), t0 = k * g->seg;
    gdn_conv_bwd(g->dmix + t0 * C, dhalo, G->conv, g->dqkv + t0 * C, g->mix + t0 * C, halo, W->conv, pos + t0, g->seg, C,
                 c->conv_width, st);
}

void deltanet_project_bwd(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                        const bf16_t *xn, bf16_t *dxn, int64_t S, cudaStream_t st) {
    const int64_t D = c->hidden, C = config_conv_channels(c), Hv = c->lin_v_heads, VD = Hv * c->lin_v_dim;
    linear_dw(gm, G->qkv, g->dmix, xn, S, D, C, st);
    linear_dw(gm, G->z, g->dz, xn, S, D, VD, st);
    linear_dw(gm, G->b, g->db, xn, S, D, Hv, st);
    linear_dw(gm, G->a, g->da, xn, S, D, Hv, st);
    linear_dx(gm, dxn, g->dmix, W->qkv, S, D, C, 0.f, st);
    linear_dx(gm, dxn, g->dz, W->z, S, D, VD, 1.f, st);
    linear_dx(gm, dxn, g->db, W->b, S, D, Hv, 1.f, st);
    linear_dx(gm, dxn, g->da, W->a, S, D, Hv, 1.f, st);
}
