/* ref_model.c -- Qwen3 forward and backward, the plainest way. */
#include "ref_model.h"
#include "ref_qwen35.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/docs.h"

/* ------------------------------------------------------------------ building blocks */

/* y[S,O] = x[S,I] W[O,I]^T */
static void linear(float *y, const float *x, const float *W, int64_t S, int64_t I, int64_t O) {
    for (int64_t t = 0; t < S; t++)
        for (int64_t o = 0; o < O; o++) {
            double acc = 0;
            for (int64_t i = 0; i < I; i++) acc += (double)x[t * I + i] * W[o * I + i];
            y[t * O + o] = (float)acc;
        }
}
/* dx[S,I] += dy[S,O] W[O,I];  dW[O,I] += dy^T x */
static void linear_bwd(float *dx, float *dW, const float *dy, const float *x, const float *W, int64_t S, int64_t I,
                       int64_t O) {
    for (int64_t t = 0; t < S; t++)
        for (int64_t i = 0; i < I; i++) {
            double acc = 0;
            for (int64_t o = 0; o < O; o++) acc += (double)dy[t * O + o] * W[o * I + i];
            dx[t * I + i] += (float)acc;
        }
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            double acc = 0;
            for (int64_t t = 0; t < S; t++) acc += (double)dy[t * O + o] * x[t * I + i];
            dW[o * I + i] += (float)acc;
        }
}

/* RMSNorm over rows of n: y = w * x * rstd, rstd = 1/sqrt(mean(x^2) + eps) */
static void rmsnorm(float *y, float *rstd, const float *x, const float *w, int64_t rows, int64_t n, double eps) {
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
        double rs = 1.0 / sqrt(ss / n + eps);
        rstd[r] = (float)rs;
        for (int64_t i = 0; i < n; i++) y[r * n + i] = (float)(w[i] * (x[r * n + i] * rs));
    }
}
/* dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w, xhat = x * rstd;  dw += sum_r dy * xhat.
 * dx is accumulated (+=) so residual gradients can flow into the same buffer. */
static void rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *rstd, const float *w,
                        int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        double dot = 0;
        for (int64_t i = 0; i < n; i++) dot += (double)dy[r * n + i] * w[i] * x[r * n + i] * rstd[r];
        dot /= n;
        for (int64_t i = 0; i < n; i++) {
            double xhat = (double)x[r * n + i] * rstd[r];
            dx[r * n + i] += (float)(rstd[r] * (dy[r * n + i] * w[i] - xhat * dot));
            dw[i] += (float)(dy[r * n + i] * xhat);
        }
    }
}

/* rotate-half RoPE on rows of heads x hd, in place; dir = +1 forward, -1 backward (transpose) */
static void rope(float *x, const float *cos_t, const float *sin_t, int64_t S, int64_t heads, int64_t hd, int dir) {
    const int64_t half = hd / 2;
    for (int64_t t = 0; t < S; t++)
        for (int64_t h = 0; h < heads; h++) {
            float *v = x + (t * heads + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                double c = cos_t[t * half + i], s = dir * sin_t[t * half + i], a = v[i], b = v[i + half];
                v[i] = (float)(a * c - b * s);
                v[i + half] = (float)(b * c + a * s);
            }
        }
}

/* causal GQA attention. q [S,Hq,hd], k/v [S,Hkv,hd] -> o [S,Hq,hd]; P [Hq,S,S] probabilities kept.
 * first [S]: the first key each query may see (packed documents: its document's start); NULL: 0 */
static void attention(float *o, float *P, const float *q, const float *k, const float *v, const int64_t *first,
                      int64_t S, int64_t Hq, int64_t Hkv, int64_t hd) {
    const double scale = 1.0 / sqrt((double)hd);
    const int64_t g = Hq / Hkv;
    for (int64_t h = 0; h < Hq; h++) {
        const int64_t kh = h / g;
        for (int64_t i = 0; i < S; i++) {
            float *p = P + (h * S + i) * S;
            const int64_t j0 = first ? first[i] : 0;
            double m = -INFINITY, z = 0;
            for (int64_t j = j0; j <= i; j++) {
                double s = 0;
                for (int64_t d = 0; d < hd; d++) s += (double)q[(i * Hq + h) * hd + d] * k[(j * Hkv + kh) * hd + d];
                p[j] = (float)(s * scale);
                if (p[j] > m) m = p[j];
            }
            for (int64_t j = j0; j <= i; j++) z += exp(p[j] - m);
            for (int64_t j = 0; j < S; j++) p[j] = j >= j0 && j <= i ? (float)(exp(p[j] - m) / z) : 0.0f;
            for (int64_t d = 0; d < hd; d++) {
                double acc = 0;
                for (int64_t j = j0; j <= i; j++) acc += (double)p[j] * v[(j * Hkv + kh) * hd + d];
                o[(i * Hq + h) * hd + d] = (float)acc;
            }
        }
    }
}
static void attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *P, const float *q,
                          const float *k, const float *v, int64_t S, int64_t Hq, int64_t Hkv, int64_t hd) {
    const double scale = 1.0 / sqrt((double)hd);
    const int64_t g = Hq / Hkv;
    double *dp = xmalloc((size_t)S * sizeof(double));
    for (int64_t h = 0; h < Hq; h++) {
        const int64_t kh = h / g;
        for (int64_t i = 0; i < S; i++) {
            const float *p = P + (h * S + i) * S, *doi = dout + (i * Hq + h) * hd;
            double rowdot = 0;
            for (int64_t j = 0; j <= i; j++) {
                double acc = 0;
                for (int64_t d = 0; d < hd; d++) acc += (double)doi[d] * v[(j * Hkv + kh) * hd + d];
                dp[j] = acc;
                rowdot += p[j] * acc;
            }
            for (int64_t j = 0; j <= i; j++) {
                double ds = p[j] * (dp[j] - rowdot) * scale;
                for (int64_t d = 0; d < hd; d++) {
                    dq[(i * Hq + h) * hd + d] += (float)(ds * k[(j * Hkv + kh) * hd + d]);
                    dk[(j * Hkv + kh) * hd + d] += (float)(ds * q[(i * Hq + h) * hd + d]);
                    dv[(j * Hkv + kh) * hd + d] += (float)(p[j] * doi[d]);
                }
            }
        }
    }
    free(dp);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* ------------------------------------------------------------------ saved activations of one layer */
typedef struct {
    float *x;        /* [S,D] layer input */
    float *rstd1;    /* [S] */
    float *xn;       /* [S,D] */
    float *q, *k, *v;        /* [S,Hq*hd], [S,Hkv*hd] x2: projections (pre-norm) */
    float *q_rstd, *k_rstd;  /* [S*Hq], [S*Hkv] */
    float *qr, *kr;          /* normed + roped */
    float *P;        /* [Hq,S,S] */
    float *att;      /* [S,Hq*hd] */
    float *x_mid;    /* [S,D] after attention residual */
    float *rstd2;    /* [S] */
    float *xn2;      /* [S,D] */
    float *g, *u, *h;        /* [S,I] */
    /* MoE layers: the router's probabilities and choices, and each chosen expert's activations */
    double *prob;    /* [S,E] softmax of the router's logits */
    int64_t *sel;    /* [S,k] the chosen experts, by falling probability */
    double *wsel;    /* [S,k] their weights (renormalised to sum 1 with norm_topk_prob) */
    float *eg, *eu, *eh;     /* [S*k, Im] per (token, choice) */
    float *ey;       /* [S*k, D] the expert's output, before its weight */
} Saved;

static float *zalloc(int64_t n) { return xcalloc((size_t)n, sizeof(float)); }

/* ------------------------------------------------------------------ MoE (transformers' Qwen3MoeSparseMoeBlock) */
/* y[S,D] += sum over the top-k experts of weight x expert(xn2), expert = down(silu(gate x) * up x) */
static void moe_forward(const Qwen3Config *c, const ParamTable *pt, const float *params, int64_t l, Saved *s,
                        float *y, int64_t S) {
    const int64_t D = c->hidden, E = c->experts, k = c->top_k, Im = c->moe_intermediate;
    const float *Wr = params + params_get(pt, P_ROUTER, l)->offset;
    s->prob = xcalloc((size_t)(S * E), sizeof(double));
    s->sel = xcalloc((size_t)(S * k), sizeof(int64_t));
    s->wsel = xcalloc((size_t)(S * k), sizeof(double));
    s->eg = xcalloc((size_t)(S * k * Im), 4); s->eu = xcalloc((size_t)(S * k * Im), 4);
    s->eh = xcalloc((size_t)(S * k * Im), 4); s->ey = xcalloc((size_t)(S * k * D), 4);
    for (int64_t t = 0; t < S; t++) {
        const float *x = s->xn2 + t * D;
        double *p = s->prob + t * E, m = -INFINITY, z = 0, sum = 0;
        for (int64_t e = 0; e < E; e++) {
            double a = 0;
            for (int64_t i = 0; i < D; i++) a += (double)x[i] * Wr[e * D + i];
            p[e] = (float)a; /* the logits, as the fp32 linear gives them */
            m = p[e] > m ? p[e] : m;
        }
        for (int64_t e = 0; e < E; e++) z += (p[e] = exp(p[e] - m));
        for (int64_t e = 0; e < E; e++) p[e] /= z;
        for (int64_t j = 0; j < k; j++) { /* the largest not yet taken; ties to the lower index */
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                int taken = 0;
                for (int64_t i = 0; i < j; i++) taken |= s->sel[t * k + i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            s->sel[t * k + j] = best;
            sum += p[best];
        }
        for (int64_t j = 0; j < k; j++) s->wsel[t * k + j] = p[s->sel[t * k + j]] / (c->norm_topk ? sum : 1.0);
        for (int64_t j = 0; j < k; j++) {
            const int64_t e = s->sel[t * k + j], r = t * k + j;
            const float *Wg = params + params_expert(pt, P_EXP_GATE, l, e)->offset,
                        *Wu = params + params_expert(pt, P_EXP_UP, l, e)->offset,
                        *Wd = params + params_expert(pt, P_EXP_DOWN, l, e)->offset;
            linear(s->eg + r * Im, x, Wg, 1, D, Im);
            linear(s->eu + r * Im, x, Wu, 1, D, Im);
            for (int64_t i = 0; i < Im; i++) {
                const double g = s->eg[r * Im + i];
                s->eh[r * Im + i] = (float)(g * sigmoid(g) * s->eu[r * Im + i]);
            }
            linear(s->ey + r * D, s->eh + r * Im, Wd, 1, Im, D);
            for (int64_t i = 0; i < D; i++) y[t * D + i] += (float)(s->wsel[t * k + j] * s->ey[r * D + i]);
        }
    }
}

/* transformers' load_balancing_loss_func over all layers' router outputs (N = L*S rows):
 * aux = E * sum_e (choices of e / N) * (mean probability of e); count[E] gets the choices */
static double moe_aux(const Qwen3Config *c, const Saved *sv, int64_t S, double *count) {
    const int64_t E = c->experts, k = c->top_k, L = c->layers;
    const double N = (double)(L * S);
    double aux = 0;
    memset(count, 0, (size_t)E * sizeof(double));
    for (int64_t l = 0; l < L; l++)
        for (int64_t r = 0; r < S * k; r++) count[sv[l].sel[r]] += 1;
    for (int64_t e = 0; e < E; e++) {
        double pm = 0;
        for (int64_t l = 0; l < L; l++)
            for (int64_t t = 0; t < S; t++) pm += sv[l].prob[t * E + e];
        aux += count[e] / N * (pm / N);
    }
    return aux * (double)E;
}

/* dy[S,D] = d(loss)/d(the block's output): experts, weights, renormalisation, softmax, router;
 * d(xn2) into dxn (overwritten). aux_scale: d(loss)/d(prob[t,e]) from the aux loss is aux_scale * count[e]. */
static void moe_backward(const Qwen3Config *c, const ParamTable *pt, const float *params, float *grads, int64_t l,
                         const Saved *s, const float *dy, float *dxn, int64_t S, const double *count, double aux_scale) {
    const int64_t D = c->hidden, E = c->experts, k = c->top_k, Im = c->moe_intermediate;
    const float *Wr = params + params_get(pt, P_ROUTER, l)->offset;
    float *dWr = grads + params_get(pt, P_ROUTER, l)->offset;
    float *dout = zalloc(D), *dh = zalloc(Im), *dg = zalloc(Im), *du = zalloc(Im), *dlogit = zalloc(E);
    double *dw = xcalloc((size_t)k, sizeof(double)), *dp = xcalloc((size_t)E, sizeof(double));
    memset(dxn, 0, (size_t)(S * D) * 4);
    for (int64_t t = 0; t < S; t++) {
        const float *x = s->xn2 + t * D;
        for (int64_t j = 0; j < k; j++) {
            const int64_t e = s->sel[t * k + j], r = t * k + j;
            const ParamInfo *pg = params_expert(pt, P_EXP_GATE, l, e), *pu = params_expert(pt, P_EXP_UP, l, e),
                            *pd = params_expert(pt, P_EXP_DOWN, l, e);
            double acc = 0;
            for (int64_t i = 0; i < D; i++) {
                acc += (double)dy[t * D + i] * s->ey[r * D + i];
                dout[i] = (float)(s->wsel[t * k + j] * dy[t * D + i]);
            }
            dw[j] = acc;
            memset(dh, 0, (size_t)Im * 4);
            linear_bwd(dh, grads + pd->offset, dout, s->eh + r * Im, params + pd->offset, 1, Im, D);
            for (int64_t i = 0; i < Im; i++) {
                const double g = s->eg[r * Im + i], sg = sigmoid(g);
                du[i] = (float)(dh[i] * g * sg);
                dg[i] = (float)(dh[i] * s->eu[r * Im + i] * sg * (1.0 + g * (1.0 - sg)));
            }
            linear_bwd(dxn + t * D, grads + pg->offset, dg, x, params + pg->offset, 1, D, Im);
            linear_bwd(dxn + t * D, grads + pu->offset, du, x, params + pu->offset, 1, D, Im);
        }
        /* the weights: w_j = p_j / sum (norm_topk_prob) or p_j, then the softmax */
        const double *p = s->prob + t * E;
        double sum = 0, dot = 0;
        for (int64_t e = 0; e < E; e++) dp[e] = aux_scale * count[e];
        for (int64_t j = 0; j < k; j++) sum += p[s->sel[t * k + j]], dot += dw[j] * s->wsel[t * k + j];
        for (int64_t j = 0; j < k; j++) dp[s->sel[t * k + j]] += c->norm_topk ? (dw[j] - dot) / sum : dw[j];
        double pdp = 0;
        for (int64_t e = 0; e < E; e++) pdp += p[e] * dp[e];
        for (int64_t e = 0; e < E; e++) dlogit[e] = (float)(p[e] * (dp[e] - pdp));
        linear_bwd(dxn + t * D, dWr, dlogit, x, Wr, 1, D, E);
    }
    free(dout); free(dh); free(dg); free(du); free(dlogit); free(dw); free(dp);
}

RefResult ref_forward_backward(const Qwen3Config *c, const ParamTable *pt, const float *params,
                               const uint32_t *tokens, const int64_t *pos, int64_t S, int64_t loss_chunk,
                               float *logits, float *grads) {
    return ref_forward_backward_masked(c, pt, params, tokens, NULL, pos, S, loss_chunk, logits, grads);
}


RefResult ref_forward_backward_masked(const Qwen3Config *c, const ParamTable *pt, const float *params,
                                      const uint32_t *tokens, const uint8_t *weights, const int64_t *pos, int64_t S,
                                      int64_t loss_chunk, float *logits, float *grads) {
    return ref_forward_backward_docs(c, pt, params, tokens, weights, pos, NULL, S, loss_chunk, logits, grads);
}

/* Packed documents, as common/docs.h defines them: documents end at eot (docs_split); each
 * token's position is its offset in its document, each query sees its own document's keys only,
 * and a label predicting the next document's first token (the one after an eot) counts no loss. */
RefResult ref_forward_backward_packed(const Qwen3Config *c, const ParamTable *pt, const float *params,
                                      const uint32_t *tokens, const uint8_t *weights, uint32_t eot, int64_t S,
                                      int64_t loss_chunk, float *logits, float *grads) {
    int64_t *start = xmalloc((size_t)(S + 1) * 8), *pos = xmalloc((size_t)S * 8), *first = xmalloc((size_t)S * 8);
    int32_t *p32 = xmalloc((size_t)S * 4);
    uint8_t *w = xmalloc((size_t)(S + 1));
    const int64_t n = docs_split(tokens, S, eot, start);
    docs_positions(start, n, p32);
    for (int64_t d = 0; d < n; d++)
        for (int64_t t = start[d]; t < start[d + 1]; t++) first[t] = start[d], pos[t] = p32[t];
    for (int64_t t = 0; t <= S; t++) w[t] = weights ? weights[t] : 1;
    for (int64_t t = 0; t < S; t++)
        if (tokens[t] == eot) w[t + 1] = 0;
    const RefResult r = ref_forward_backward_docs(c, pt, params, tokens, w, pos, first, S, loss_chunk, logits, grads);
    free(start); free(pos); free(first); free(p32); free(w);
    return r;
}

RefResult ref_forward_backward_docs(const Qwen3Config *c, const ParamTable *pt, const float *params,
                                    const uint32_t *tokens, const uint8_t *weights, const int64_t *pos,
                                    const int64_t *first, int64_t S, int64_t loss_chunk, float *logits, float *grads) {
    if (c->lin_v_heads) return ref_q35_table(c, pt, params, tokens, weights, pos, first, S, logits, grads); /* Qwen3.5 */
    const int64_t D = c->hidden, Hq = c->heads, Hkv = c->kv_heads, hd = c->head_dim, I = c->intermediate,
                  V = c->vocab, L = c->layers, Q = Hq * hd, KV = Hkv * hd;
#define W(kind, l) (params + params_get(pt, kind, l)->offset)
#define G(kind, l) (grads + params_get(pt, kind, l)->offset)
    float *cos_t = zalloc(S * hd / 2), *sin_t = zalloc(S * hd / 2);
    rope_tables(c, pos, S, cos_t, sin_t);

    /* forward */
    Saved *sv = xcalloc((size_t)L, sizeof(Saved));
    float *x = zalloc(S * D);
    for (int64_t t = 0; t < S; t++) memcpy(x + t * D, W(P_EMBED, 0) + (int64_t)tokens[t] * D, (size_t)D * 4);
    for (int64_t l = 0; l < L; l++) {
        Saved *s = &sv[l];
        s->x = x;
        s->rstd1 = zalloc(S); s->xn = zalloc(S * D);
        rmsnorm(s->xn, s->rstd1, s->x, W(P_IN_NORM, l), S, D, c->eps);
        s->q = zalloc(S * Q); s->k = zalloc(S * KV); s->v = zalloc(S * KV);
        linear(s->q, s->xn, W(P_Q, l), S, D, Q);
        linear(s->k, s->xn, W(P_K, l), S, D, KV);
        linear(s->v, s->xn, W(P_V, l), S, D, KV);
        s->q_rstd = zalloc(S * Hq); s->k_rstd = zalloc(S * Hkv);
        s->qr = zalloc(S * Q); s->kr = zalloc(S * KV);
        rmsnorm(s->qr, s->q_rstd, s->q, W(P_Q_NORM, l), S * Hq, hd, c->eps);
        rmsnorm(s->kr, s->k_rstd, s->k, W(P_K_NORM, l), S * Hkv, hd, c->eps);
        rope(s->qr, cos_t, sin_t, S, Hq, hd, +1);
        rope(s->kr, cos_t, sin_t, S, Hkv, hd, +1);
        s->P = zalloc(Hq * S * S); s->att = zalloc(S * Q);
        attention(s->att, s->P, s->qr, s->kr, s->v, first, S, Hq, Hkv, hd);
        s->x_mid = zalloc(S * D);
        linear(s->x_mid, s->att, W(P_O, l), S, Q, D);
        for (int64_t i = 0; i < S * D; i++) s->x_mid[i] += s->x[i];
        s->rstd2 = zalloc(S); s->xn2 = zalloc(S * D);
        rmsnorm(s->xn2, s->rstd2, s->x_mid, W(P_POST_NORM, l), S, D, c->eps);
        x = zalloc(S * D);
        if (c->experts) {
            moe_forward(c, pt, params, l, s, x, S);
        } else {
            s->g = zalloc(S * I); s->u = zalloc(S * I); s->h = zalloc(S * I);
            linear(s->g, s->xn2, W(P_GATE, l), S, D, I);
            linear(s->u, s->xn2, W(P_UP, l), S, D, I);
            for (int64_t i = 0; i < S * I; i++) s->h[i] = (float)(s->g[i] * sigmoid(s->g[i]) * s->u[i]);
            linear(x, s->h, W(P_DOWN, l), S, I, D);
        }
        for (int64_t i = 0; i < S * D; i++) x[i] += s->x_mid[i];
    }
    float *rstdf = zalloc(S), *hf = zalloc(S * D);
    rmsnorm(hf, rstdf, x, W(P_FINAL_NORM, 0), S, D, c->eps);

    /* chunked NLL: logits of C rows at a time, loss and d(logits) in the same pass. With weights,
     * label t+1 counts only when weights[t+1] is 1 (a prompt's labels carry none), and the mean is
     * over the labels that count (transformers' labels = -100 elsewhere). */
    if (grads) memset(grads, 0, (size_t)pt->total * sizeof(float));
    const int64_t C = loss_chunk > 0 && loss_chunk < S ? loss_chunk : S;
    float *lg = zalloc(C * V), *dhf = zalloc(S * D);
    int64_t counted = 0;
    for (int64_t t = 1; t <= S; t++) counted += weights ? weights[t] != 0 : 1;
    const double n_labels = counted ? (double)counted : INFINITY; /* no label counts: loss 0, no gradient */
    double loss = 0;
    for (int64_t c0 = 0; c0 < S; c0 += C) {
        int64_t n = S - c0 < C ? S - c0 : C;
        linear(lg, hf + c0 * D, W(P_LM_HEAD, 0), n, D, V);
        if (logits) memcpy(logits + c0 * V, lg, (size_t)(n * V) * 4);
        for (int64_t r = 0; r < n; r++) {
            float *row = lg + r * V;
            double m = -INFINITY, z = 0;
            for (int64_t j = 0; j < V; j++) m = row[j] > m ? row[j] : m;
            for (int64_t j = 0; j < V; j++) z += exp(row[j] - m);
            const uint32_t y = tokens[c0 + r + 1];
            const double w = weights ? (weights[c0 + r + 1] != 0) : 1.0;
            loss += w * ((m + log(z)) - row[y]);
            for (int64_t j = 0; j < V; j++) row[j] = (float)(w * (exp(row[j] - m) / z - (j == y)) / n_labels);
        }
        if (grads) linear_bwd(dhf + c0 * D, G(P_LM_HEAD, 0), lg, hf + c0 * D, W(P_LM_HEAD, 0), n, D, V);
    }
    loss /= n_labels;
    /* MoE: transformers adds router_aux_loss_coef x the load-balancing loss when output_router_logits */
    double *count = c->experts ? xcalloc((size_t)c->experts, sizeof(double)) : NULL, aux = 0, aux_scale = 0;
    if (c->experts) {
        aux = moe_aux(c, sv, S, count);
        if (c->aux_loss) {
            loss += c->aux_coef * aux;
            aux_scale = c->aux_coef * (double)c->experts / ((double)(L * S) * (double)(L * S));
        }
    }

    if (grads) {
        /* backward, last layer first; dx holds d(loss)/d(residual stream) */
        float *dx = zalloc(S * D);
        rmsnorm_bwd(dx, G(P_FINAL_NORM, 0), dhf, x, rstdf, W(P_FINAL_NORM, 0), S, D);
        float *dh = zalloc(S * I), *dg = zalloc(S * I), *du = zalloc(S * I), *dxn = zalloc(S * D);
        float *datt = zalloc(S * Q), *dq = zalloc(S * Q), *dk = zalloc(S * KV), *dv = zalloc(S * KV);
        float *dqp = zalloc(S * Q), *dkp = zalloc(S * KV);
        for (int64_t l = L - 1; l >= 0; l--) {
            Saved *s = &sv[l];
            /* MLP: x_out = x_mid + down(silu(g) * u); dx is d(x_out) and becomes d(x_mid) */
            if (c->experts) {
                moe_backward(c, pt, params, grads, l, s, dx, dxn, S, count, aux_scale);
            } else {
                memset(dh, 0, (size_t)(S * I) * 4);
                linear_bwd(dh, G(P_DOWN, l), dx, s->h, W(P_DOWN, l), S, I, D);
                for (int64_t i = 0; i < S * I; i++) {
                    double sg = sigmoid(s->g[i]), silu = s->g[i] * sg;
                    du[i] = (float)(dh[i] * silu);
                    dg[i] = (float)(dh[i] * s->u[i] * sg * (1.0 + s->g[i] * (1.0 - sg)));
                }
                memset(dxn, 0, (size_t)(S * D) * 4);
                linear_bwd(dxn, G(P_GATE, l), dg, s->xn2, W(P_GATE, l), S, D, I);
                linear_bwd(dxn, G(P_UP, l), du, s->xn2, W(P_UP, l), S, D, I);
            }
            rmsnorm_bwd(dx, G(P_POST_NORM, l), dxn, s->x_mid, s->rstd2, W(P_POST_NORM, l), S, D);
            /* attention: x_mid = x + o_proj(att); dx is d(x_mid) and becomes d(x) */
            memset(datt, 0, (size_t)(S * Q) * 4);
            linear_bwd(datt, G(P_O, l), dx, s->att, W(P_O, l), S, Q, D);
            memset(dq, 0, (size_t)(S * Q) * 4);
            memset(dk, 0, (size_t)(S * KV) * 4);
            memset(dv, 0, (size_t)(S * KV) * 4);
            attention_bwd(dq, dk, dv, datt, s->P, s->qr, s->kr, s->v, S, Hq, Hkv, hd);
            rope(dq, cos_t, sin_t, S, Hq, hd, -1);
            rope(dk, cos_t, sin_t, S, Hkv, hd, -1);
            memset(dqp, 0, (size_t)(S * Q) * 4);
            memset(dkp, 0, (size_t)(S * KV) * 4);
            rmsnorm_bwd(dqp, G(P_Q_NORM, l), dq, s->q, s->q_rstd, W(P_Q_NORM, l), S * Hq, hd);
            rmsnorm_bwd(dkp, G(P_K_NORM, l), dk, s->k, s->k_rstd, W(P_K_NORM, l), S * Hkv, hd);
            memset(dxn, 0, (size_t)(S * D) * 4);
            linear_bwd(dxn, G(P_Q, l), dqp, s->xn, W(P_Q, l), S, D, Q);
            linear_bwd(dxn, G(P_K, l), dkp, s->xn, W(P_K, l), S, D, KV);
            linear_bwd(dxn, G(P_V, l), dv, s->xn, W(P_V, l), S, D, KV);
            rmsnorm_bwd(dx, G(P_IN_NORM, l), dxn, s->x, s->rstd1, W(P_IN_NORM, l), S, D);
        }
        /* embedding: scatter-add the rows */
        for (int64_t t = 0; t < S; t++)
            for (int64_t i = 0; i < D; i++) G(P_EMBED, 0)[(int64_t)tokens[t] * D + i] += dx[t * D + i];
        free(dx); free(dh); free(dg); free(du); free(dxn); free(datt);
        free(dq); free(dk); free(dv); free(dqp); free(dkp);
    }
    for (int64_t l = 0; l < L; l++) {
        Saved *s = &sv[l];
        free(s->x); free(s->rstd1); free(s->xn); free(s->q); free(s->k); free(s->v); free(s->q_rstd);
        free(s->k_rstd); free(s->qr); free(s->kr); free(s->P); free(s->att); free(s->x_mid); free(s->rstd2);
        free(s->xn2); free(s->g); free(s->u); free(s->h);
        free(s->prob); free(s->sel); free(s->wsel); free(s->eg); free(s->eu); free(s->eh); free(s->ey);
    }
    free(count);
    free(sv); free(x); free(rstdf); free(hf); free(lg); free(dhf); free(cos_t); free(sin_t);
#undef W
#undef G
    RefResult r = {loss, counted, aux};
    return r;
}

double ref_adamw(const ParamTable *pt, float *params, const float *grads, float *m, float *v, int64_t step,
                 double lr, double beta1, double beta2, double eps, double weight_decay, double clip) {
    double ss = 0;
    for (int64_t i = 0; i < pt->total; i++) ss += (double)grads[i] * grads[i];
    const double norm = sqrt(ss), scale = (clip > 0 && norm > clip) ? clip / (norm + 1e-6) : 1.0;
    const double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    for (int64_t k = 0; k < pt->n; k++) {
        const ParamInfo *p = &pt->p[k];
        const double wd = params_decays(p) ? weight_decay : 0.0;
        for (int64_t i = p->offset; i < p->offset + p->numel; i++) {
            double g = grads[i] * scale;
            m[i] = (float)(beta1 * m[i] + (1 - beta1) * g);
            v[i] = (float)(beta2 * v[i] + (1 - beta2) * g * g);
            double mh = m[i] / bc1, vh = v[i] / bc2;
            params[i] = (float)(params[i] - lr * (mh / (sqrt(vh) + eps) + wd * params[i]));
        }
    }
    return norm;
}
