/* moe.c -- the Qwen3 MoE block on the GPU: routing, the experts' GEMMs over contiguous rows, the
 * backward, the load-balancing loss (moe.h). */
#include "moe.h"

#include <stdlib.h>

#include "check.h"
#include "gpu.h"
#include "train.h"


void moe_carve_tile(MoeTile *m, Arena *a, const Qwen3Config *c, int64_t T) {
    const int64_t E = c->experts, k = c->top_k, n = T * k, D = c->hidden, Im = c->moe_intermediate;
    m->logits = arena_take(a, F32(T * E), "router logits");
    m->prob = arena_take(a, F32(T * E), "router probabilities");
    m->sel = arena_take(a, 4 * T * k, "chosen experts");
    m->w = arena_take(a, F32(T * k), "expert weights");
    m->dw = arena_take(a, F32(T * k), "expert weight grads");
    m->count = arena_take(a, 4 * E, "expert counts");
    m->offsets = arena_take(a, 4 * (E + 1), "expert offsets");
    m->pair_row = arena_take(a, 4 * n, "pair rows");
    m->xs = arena_take(a, BF(n * D), "expert inputs");
    m->ys = arena_take(a, BF(n * D), "expert outputs");
    m->g = arena_take(a, BF(n * Im), "expert gate");
    m->u = arena_take(a, BF(n * Im), "expert up");
    m->h = arena_take(a, BF(n * Im), "expert h");
    m->dlogits = arena_take(a, BF(T * E), "router logit grads");
    const int64_t Is = c->shared_inter;
    if (!Is) return;
    m->sh_g = arena_take(a, BF(T * Is), "shared expert gate");
    m->sh_u = arena_take(a, BF(T * Is), "shared expert up");
    m->sh_h = arena_take(a, BF(T * Is), "shared expert h");
    m->sh_y = arena_take(a, BF(T * D), "shared expert output");
    m->sh_s = arena_take(a, F32(T), "shared expert scores");
    m->sh_ds = arena_take(a, F32(T), "shared expert score grads");
}

/* the distance of each tensor from the router, applied to where a stage holds it */
#define AT(base, off) ((off) < 0 ? NULL : (base) + ((off) - L.router))
const MoeWeights *moe_weights(MoeWeights *w, const ParamTable *t, int64_t l, const bf16_t *router) {
    MoeLayout L;
    params_moe_layout(t, l, &L);
    *w = (MoeWeights){router, AT(router, L.gate), AT(router, L.up), AT(router, L.down), AT(router, L.sh_gate), AT(router, L.sh_up), AT(router, L.sh_down), AT(router, L.sh_route)};
    return w;
}
const MoeGrads *moe_grads(MoeGrads *g, const ParamTable *t, int64_t l, float *router) {
    MoeLayout L;
    params_moe_layout(t, l, &L);
    *g = (MoeGrads){router, AT(router, L.gate), AT(router, L.up), AT(router, L.down), AT(router, L.sh_gate), AT(router, L.sh_up), AT(router, L.sh_down), AT(router, L.sh_route)};
    return g;
}
#undef AT

void moe_carve_step(MoeTile *m, Arena *a, const Qwen3Config *c) {
    m->choices = arena_take(a, 8 * c->experts, "expert choices");
    m->psum = arena_take(a, 8 * c->experts, "expert probabilities");
    m->aux_grad = arena_take(a, F32(c->experts), "load-balancing gradient");
    m->ptrs = arena_take(a, 3 * 8 * c->experts, "grouped GEMM pointers");
    /* carved for real (the arenas exist: the rank's set-up, an allocation phase, common/comm.h): the
     * experts' row offsets the host reads each layer, pinned, now -- never in a step, where another
     * rank thread's collective may be in flight */
    if (a->base && !m->rows) CUDA_CHECK(cudaMallocHost((void **)&m->rows, (size_t)(4 * (c->experts + 1))));
}

int64_t moe_tile_row_bytes(const Qwen3Config *c) {
    const int64_t E = c->experts, k = c->top_k;
    return F32(2 * E) + BF(E) + 16 * k + BF(2 * k * c->hidden) + BF(3 * k * c->moe_intermediate) +
           (c->shared_inter ? BF(3 * c->shared_inter + c->hidden) + F32(2) : 0);
}

int64_t moe_most_rows(const Qwen3Config *c) { return c->experts ? (MOE_MAX_PAIRS - 1) / c->top_k : INT64_MAX; }

int moe_rows_ok(const Qwen3Config *c, int64_t T, char *err, size_t errlen) {
    if (T <= moe_most_rows(c)) return 1;
    snprintf(err, errlen, "MoE: %lld tokens x top-%lld = %lld (token, expert) pairs, at most 2^24 - 1 in one pass "
             "(the expert counts are exact below 2^24): at most %lld tokens per GPU here; stage 5 tiles them",
             (long long)T, (long long)c->top_k, (long long)(T * c->top_k), (long long)moe_most_rows(c));
    return 0;
}

void moe_step_begin(MoeTile *m, const Qwen3Config *c, cudaStream_t st) {
    CUDA_CHECK(cudaMemsetAsync(m->choices, 0, (size_t)(8 * c->experts), st));
    CUDA_CHECK(cudaMemsetAsync(m->psum, 0, (size_t)(8 * c->experts), st));
    if (!m->rows) DIE("internal: moe_carve_step takes the experts' row offsets with the arenas");
}

/* ---- the experts' GEMMs over their rows r[e]..r[e+1] (m->rows, from moe_forward), weight e at
 * W + e*O*I: one cuBLASLt call per expert with rows (algorithms per bucket of row counts), or
 * --moe-gemm grouped: one cuBLAS grouped call (the weight gradients stay per expert: fp32 output) */
static void experts_fwd(Gemm *gm, const MoeTile *m, bf16_t *y, const bf16_t *x, const bf16_t *W, int64_t E, int64_t I,
                        int64_t O, cudaStream_t st) {
    const int32_t *r = m->rows;
    if (m->grouped) {
        linear_fwd_grouped(gm, y, x, W, r, m->offsets, E, I, O, m->ptrs, st);
        return;
    }
    gm->ragged = 1;
    for (int64_t e = 0; e < E; e++)
        if (r[e + 1] > r[e]) linear_fwd(gm, y + r[e] * O, 0, x + r[e] * I, W + e * O * I, r[e + 1] - r[e], I, O, 0.f, st);
    gm->ragged = 0;
}
static void experts_dx(Gemm *gm, const MoeTile *m, bf16_t *dx, const bf16_t *dy, const bf16_t *W, int64_t E, int64_t I,
                       int64_t O, float beta, cudaStream_t st) {
    const int32_t *r = m->rows;
    if (m->grouped) {
        linear_dx_grouped(gm, dx, dy, W, r, m->offsets, E, I, O, beta, m->ptrs, st);
        return;
    }
    gm->ragged = 1;
    for (int64_t e = 0; e < E; e++)
        if (r[e + 1] > r[e]) linear_dx(gm, dx + r[e] * I, dy + r[e] * O, W + e * O * I, r[e + 1] - r[e], I, O, beta, st);
    gm->ragged = 0;
}
static void experts_dw(Gemm *gm, const MoeTile *m, float *dW, const bf16_t *dy, const bf16_t *x, int64_t E, int64_t I,
                       int64_t O, cudaStream_t st) {
    const int32_t *r = m->rows;
    gm->ragged = 1;
    for (int64_t e = 0; e < E; e++)
        if (r[e + 1] > r[e]) linear_dw(gm, dW + e * O * I, dy + r[e] * O, x + r[e] * I, r[e + 1] - r[e], I, O, st);
    gm->ragged = 0;
}

/* Qwen3.5's shared expert on every row: sh_y = down(silu(gate xn) * up xn), its gate's score sh_s */
static void shared_fwd(Gemm *gm, MoeTile *m, const Qwen3Config *c, const MoeWeights *W, const bf16_t *xn, int64_t T,
                       cudaStream_t st) {
    const int64_t D = c->hidden, Is = c->shared_inter;
    linear_fwd(gm, m->sh_g, 0, xn, W->sh_gate, T, D, Is, 0.f, st);
    linear_fwd(gm, m->sh_u, 0, xn, W->sh_up, T, D, Is, 0.f, st);
    swiglu_fwd(m->sh_h, m->sh_g, m->sh_u, T * Is, st);
    moe_shared_score(m->sh_s, xn, W->sh_route, T, D, st);
    linear_fwd(gm, m->sh_y, 0, m->sh_h, W->sh_down, T, Is, D, 0.f, st);
}
/* its backward, once the routed experts' d(xn) is in dxn: adds the shared expert's and its gate's */
static void shared_bwd(Gemm *gm, MoeTile *m, const Qwen3Config *c, const MoeWeights *W, const MoeGrads *G,
                       const bf16_t *xn, const bf16_t *dy, bf16_t *dxn, int64_t T, cudaStream_t st) {
    const int64_t D = c->hidden, Is = c->shared_inter;
    moe_shared_bwd(m->sh_y, m->sh_ds, dy, m->sh_s, T, D, st); /* sh_y <- d(sh_y), the score's gradient */
    moe_shared_score_bwd(dxn, G->sh_route, m->sh_ds, xn, W->sh_route, T, D, st);
    linear_dw(gm, G->sh_down, m->sh_y, m->sh_h, T, Is, D, st);
    linear_dx(gm, m->sh_h, m->sh_y, W->sh_down, T, Is, D, 0.f, st); /* sh_h <- dh */
    swiglu_bwd(m->sh_g, m->sh_u, m->sh_h, T * Is, st);
    linear_dw(gm, G->sh_gate, m->sh_g, xn, T, D, Is, st);
    linear_dw(gm, G->sh_up, m->sh_u, xn, T, D, Is, st);
    linear_dx(gm, dxn, m->sh_g, W->sh_gate, T, D, Is, 1.f, st);
    linear_dx(gm, dxn, m->sh_u, W->sh_up, T, D, Is, 1.f, st);
}

void moe_forward(Gemm *gm, MoeTile *m, const Qwen3Config *c, const MoeWeights *W, const bf16_t *xn, int64_t T,
                 int stats, cudaStream_t st) {
    const int64_t D = c->hidden, E = c->experts, k = c->top_k, Im = c->moe_intermediate;
    if (T * k >= MOE_MAX_PAIRS) DIE("MoE tile of %lld pairs: the plan should have refused it", (long long)(T * k));
    linear_fwd(gm, m->logits, 1, xn, W->router, T, D, E, 0.f, st);
    moe_route(m->logits, m->prob, m->sel, m->w, T, E, k, c->norm_topk, st);
    moe_sort(m->sel, T * k, E, m->count, m->offsets, m->pair_row, st);
    if (stats) moe_stats(m->choices, m->psum, m->count, m->prob, T, E, st);
    moe_gather(m->xs, xn, m->pair_row, T, k, D, st);
    gpu_download(m->rows, m->offsets, 4 * (E + 1), st); /* the GEMMs' sizes */
    experts_fwd(gm, m, m->g, m->xs, W->gate, E, D, Im, st);
    experts_fwd(gm, m, m->u, m->xs, W->up, E, D, Im, st);
    swiglu_fwd(m->h, m->g, m->u, T * k * Im, st);
    experts_fwd(gm, m, m->ys, m->h, W->down, E, Im, D, st);
    if (c->shared_inter) shared_fwd(gm, m, c, W, xn, T, st);
}

void moe_output(MoeTile *m, const Qwen3Config *c, bf16_t *out, const bf16_t *resid, int64_t T, cudaStream_t st) {
    moe_combine(out, resid, m->ys, m->pair_row, m->w, T, c->top_k, c->hidden, c->shared_inter ? m->sh_y : NULL, m->sh_s,
                st);
}

void moe_backward(Gemm *gm, MoeTile *m, const Qwen3Config *c, const MoeWeights *W, const MoeGrads *G,
                  const bf16_t *xn, const bf16_t *dy, bf16_t *dxn, int64_t T, cudaStream_t st) {
    const int64_t D = c->hidden, E = c->experts, k = c->top_k, Im = c->moe_intermediate;
    moe_combine_bwd(m->ys, m->dw, dy, m->pair_row, m->w, T, k, D, st); /* ys <- d(ys) */
    /* down: dW += d(ys)^T h, then h <- dh */
    experts_dw(gm, m, G->down, m->ys, m->h, E, Im, D, st);
    experts_dx(gm, m, m->h, m->ys, W->down, E, Im, D, 0.f, st);
    swiglu_bwd(m->g, m->u, m->h, T * k * Im, st); /* g <- dg, u <- du */
    /* gate and up: dW += d^T xs, then ys <- d(xs) */
    experts_dw(gm, m, G->gate, m->g, m->xs, E, D, Im, st);
    experts_dw(gm, m, G->up, m->u, m->xs, E, D, Im, st);
    experts_dx(gm, m, m->ys, m->g, W->gate, E, D, Im, 0.f, st);
    experts_dx(gm, m, m->ys, m->u, W->up, E, D, Im, 1.f, st);
    moe_scatter_bwd(dxn, m->ys, m->pair_row, T, k, D, st);
    moe_router_bwd(m->dlogits, m->prob, m->sel, m->w, m->dw, c->aux_loss ? m->aux_grad : NULL, T, E, k, c->norm_topk,
                   st);
    linear_dw(gm, G->router, m->dlogits, xn, T, D, E, st);
    linear_dx(gm, dxn, m->dlogits, W->router, T, D, E, 1.f, st);
    if (c->shared_inter) shared_bwd(gm, m, c, W, G, xn, dy, dxn, T, st);
}

/* transformers' load_balancing_loss_func over the concatenated router outputs of every layer:
 * aux = E sum_e (choices_e / N)(sum of prob_e / N); d(aux)/d(prob[t, e]) = E choices_e / N^2 */
double moe_step_aux(MoeTile *m, const Qwen3Config *c, double N, Comm *comm, cudaStream_t st) {
    const int64_t E = c->experts;
    if (comm) { /* several ranks: every rank's tokens (stage 1 has one) */
        comm_all_reduce_f64(comm, m->choices, E, st);
        comm_all_reduce_f64(comm, m->psum, E, st);
    }
    double *ch = xmalloc((size_t)(16 * E)), *ps = ch + E, aux = 0;
    float *grad = xmalloc((size_t)F32(E));
    gpu_download(ch, m->choices, 8 * E, st);
    gpu_download(ps, m->psum, 8 * E, st);
    for (int64_t e = 0; e < E; e++) {
        aux += (double)E * (ch[e] / N) * (ps[e] / N);
        grad[e] = (float)(c->aux_coef * (double)E * ch[e] / (N * N));
    }
    gpu_upload(m->aux_grad, grad, F32(E), st);
    free(ch);
    free(grad);
    return aux;
}

MlpTileLimits mlp_tile_limits(const Qwen3Config *c) {
    const int64_t D = c->hidden, E = c->experts, k = c->top_k, I = E ? k * c->moe_intermediate : c->intermediate,
                  elems = ((1ll << 31) - 1) / (E ? (k * D > c->shared_inter ? k * D : c->shared_inter) : I),
                  most = elems < moe_most_rows(c) ? elems : moe_most_rows(c),
                  least = E && 2048 * E / k > 4096 ? (2048 * E / k + 255) / 256 * 256 : 4096;
    return (MlpTileLimits){I, (E ? moe_tile_row_bytes(c) : BF(3 * I)) + BF(2 * D), most, least};
}
