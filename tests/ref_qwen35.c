/* ref_qwen35.c -- the Qwen3.5 hybrid text model, forward and backward, plainly (ref_qwen35.h). */
#include "ref_qwen35.h"

#include <math.h>
#include <string.h>

#include "../common/check.h"

static double silu(double x) { return x / (1 + exp(-x)); }
static double dsilu(double x) { const double s = 1 / (1 + exp(-x)); return s * (1 + x * (1 - s)); }
static double ref_dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* every row of x [T, n] through the (1 + w) RMSNorm, into y */
static void norm_rows(double *y, const double *x, const double *w, int64_t T, int64_t n, double eps) {
    memcpy(y, x, (size_t)(T * n) * 8);
    for (int64_t t = 0; t < T; t++) ref_rms_1p(y + t * n, w, n, eps);
}
/* its backward: d (the output's gradient) becomes the input's, added into dx; dw added into */
static void norm_rows_bwd(double *dx, const double *x, const double *w, double *d, double *dw, int64_t T, int64_t n,
                          double eps) {
    for (int64_t t = 0; t < T; t++) {
        ref_rms_1p_bwd(x + t * n, w, d + t * n, dw, n, eps);
        for (int64_t e = 0; e < n; e++) dx[t * n + e] += d[t * n + e];
    }
}

/* one SwiGLU of width I on one row: y = down(silu(gate x) * up x); with dy, its backward: the weights'
 * gradients added into dgate, dup, ddown and d(x) into dx */
static void swiglu_row(const double *gate, const double *up, const double *down, int64_t D, int64_t I, const double *x,
                       double *y, const double *dy, double *dx, double *dgate, double *dup, double *ddown) {
    double *g = xmalloc((size_t)(4 * I) * 8), *u = g + I, *h = u + I, *dh = h + I;
    ref_linear(g, x, gate, 1, D, I);
    ref_linear(u, x, up, 1, D, I);
    for (int64_t i = 0; i < I; i++) h[i] = silu(g[i]) * u[i];
    ref_linear(y, h, down, 1, I, D);
    if (dy) {
        memset(dh, 0, (size_t)I * 8);
        ref_linear_bwd(dh, ddown, dy, h, down, 1, I, D);
        for (int64_t i = 0; i < I; i++) { /* g <- dg, u <- du */
            const double dg = dh[i] * u[i] * dsilu(g[i]), du = dh[i] * silu(g[i]);
            g[i] = dg, u[i] = du;
        }
        ref_linear_bwd(dx, dgate, g, x, gate, 1, D, I);
        ref_linear_bwd(dx, dup, u, x, up, 1, D, I);
    }
    free(g);
}

/* Qwen3.5's MoE MLP on one row x [D] -> y [D] (overwritten): the router's softmax, the top k (ties to
 * the lower index) renormalised, each chosen expert weighted, plus the shared expert times
 * sigmoid(x . sroute). With dy: the backward, gradients added into G and d(x) into dx. */
static void moe_row(const Q35Config *c, const Q35Layer *L, const double *x, double *y, const double *dy, double *dx,
                    Q35LayerGrads *G) {
    const int64_t D = c->D, E = c->E, k = c->k, Im = c->Im;
    double *p = xmalloc((size_t)(2 * E + k + 2 * D) * 8), *dp = p + E, *dw = dp + E, *ey = dw + k, *dey = ey + D;
    int64_t *sel = xmalloc((size_t)k * 8);
    double mx = -INFINITY, z = 0, sum = 0;
    ref_linear(p, x, L->router, 1, D, E);
    for (int64_t e = 0; e < E; e++) mx = fmax(mx, p[e]);
    for (int64_t e = 0; e < E; e++) z += (p[e] = exp(p[e] - mx));
    for (int64_t e = 0; e < E; e++) p[e] /= z;
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best, sum += p[best];
    }
    /* the shared expert first: y = sigmoid(s) sy */
    const double s = ref_dot(x, L->sroute, D), gs = 1 / (1 + exp(-s));
    swiglu_row(L->sgate, L->sup, L->sdown, D, c->Is, x, ey, NULL, NULL, NULL, NULL, NULL);
    for (int64_t i = 0; i < D; i++) y[i] = gs * ey[i];
    if (dy) {
        const double ds = gs * (1 - gs) * ref_dot(dy, ey, D);
        for (int64_t i = 0; i < D; i++) dx[i] += ds * L->sroute[i], G->sroute[i] += ds * x[i], dey[i] = gs * dy[i];
        swiglu_row(L->sgate, L->sup, L->sdown, D, c->Is, x, ey, dey, dx, G->sgate, G->sup, G->sdown);
    }
    for (int64_t j = 0; j < k; j++) { /* expert e's tensors at e Im D from expert 0's */
        const int64_t e = sel[j], at = e * Im * D;
        const double w = p[e] / sum;
        for (int64_t i = 0; dy && i < D; i++) dey[i] = w * dy[i];
        swiglu_row(L->egate + at, L->eup + at, L->edown + at, D, Im, x, ey, dy ? dey : NULL, dx, G ? G->egate + at : NULL,
                   G ? G->eup + at : NULL, G ? G->edown + at : NULL);
        for (int64_t i = 0; i < D; i++) y[i] += w * ey[i];
        dw[j] = dy ? ref_dot(dy, ey, D) : 0;
    }
    if (dy) { /* through w_j = p_j / sum and the softmax to the router */
        double dot = 0, pdp = 0;
        memset(dp, 0, (size_t)E * 8);
        for (int64_t j = 0; j < k; j++) dot += dw[j] * p[sel[j]] / sum;
        for (int64_t j = 0; j < k; j++) dp[sel[j]] += (dw[j] - dot) / sum;
        for (int64_t e = 0; e < E; e++) pdp += p[e] * dp[e];
        for (int64_t e = 0; e < E; e++) dp[e] = p[e] * (dp[e] - pdp);
        ref_linear_bwd(dx, G->router, dp, x, L->router, 1, D, E);
    }
    free(p);
    free(sel);
}

/* SwiGLU MLP: y = down(silu(gate x) * up x); h [T, I] and the gate/up outputs kept for the backward.
 * Qwen3.5's MoE: each row through moe_row (the backward runs it again). */
static void mlp(const Q35Config *c, const Q35Layer *L, int64_t T, const double *x, double *g, double *u, double *y) {
    const int64_t D = c->D, I = c->I;
    if (c->E) {
        for (int64_t t = 0; t < T; t++) moe_row(c, L, x + t * D, y + t * D, NULL, NULL, NULL);
        return;
    }
    double *h = xmalloc((size_t)(T * I) * 8);
    ref_linear(g, x, L->gate, T, D, I);
    ref_linear(u, x, L->up, T, D, I);
    for (int64_t i = 0; i < T * I; i++) h[i] = silu(g[i]) * u[i];
    ref_linear(y, h, L->down, T, I, D);
    free(h);
}
static void mlp_bwd(const Q35Config *c, const Q35Layer *L, Q35LayerGrads *G, int64_t T, const double *x, const double *g,
                    const double *u, const double *dy, double *dx) {
    const int64_t D = c->D, I = c->I;
    if (c->E) {
        double *y = xmalloc((size_t)D * 8);
        for (int64_t t = 0; t < T; t++) moe_row(c, L, x + t * D, y, dy + t * D, dx + t * D, G);
        free(y);
        return;
    }
    double *h = xmalloc((size_t)(T * I) * 8), *dh = xcalloc((size_t)(T * I), 8), *dg = xmalloc((size_t)(T * I) * 8),
           *du = xmalloc((size_t)(T * I) * 8);
    for (int64_t i = 0; i < T * I; i++) h[i] = silu(g[i]) * u[i];
    ref_linear_bwd(dh, G->down, dy, h, L->down, T, I, D);
    for (int64_t i = 0; i < T * I; i++) dg[i] = dh[i] * u[i] * dsilu(g[i]), du[i] = dh[i] * silu(g[i]);
    ref_linear_bwd(dx, G->gate, dg, x, L->gate, T, D, I);
    ref_linear_bwd(dx, G->up, du, x, L->up, T, D, I);
    free(h); free(dh); free(dg); free(du);
}

double ref_q35(const Q35Config *c, const Q35Weights *w, int64_t T, const uint32_t *tokens, double *logits, Q35Grads *G) {
    int64_t n;
    return ref_q35_sum(c, w, T, tokens, NULL, 1 / (double)T, &n, logits, G) / (double)T;
}

double ref_q35_sum(const Q35Config *c, const Q35Weights *w, int64_t T, const uint32_t *tokens, const uint8_t *weights,
                   double scale, int64_t *counted, double *logits, Q35Grads *G) {
    const int64_t D = c->D, V = c->V, I = c->I, NL = c->L;
    int64_t *pos = xmalloc((size_t)T * 8);
    for (int64_t t = 0; t < T; t++) pos[t] = t;
    /* forward, keeping each layer's input x[l], its middle (after the mixer) m[l], and the MLP's g, u */
    double *x = xmalloc((size_t)((NL + 1) * T * D) * 8), *m = xmalloc((size_t)(NL * T * D) * 8),
           *g = xmalloc((size_t)(NL * T * I + 1) * 8), *u = xmalloc((size_t)(NL * T * I + 1) * 8), *xn = xmalloc((size_t)(T * D) * 8),
           *y = xmalloc((size_t)(T * D) * 8);
    for (int64_t t = 0; t < T; t++) memcpy(x + t * D, w->embed + (int64_t)tokens[t] * D, (size_t)D * 8);
    for (int64_t l = 0; l < NL; l++) {
        const Q35Layer *L = &w->layer[l];
        const double *xl = x + l * T * D;
        double *ml = m + l * T * D, *xo = x + (l + 1) * T * D;
        norm_rows(xn, xl, L->in_norm, T, D, c->eps);
        if (c->linear[l]) ref_gdn_layer(&c->gdn, &L->gdn, T, xn, y, NULL);
        else ref_gated_attn(&c->attn, &L->attn, T, xn, pos, y);
        for (int64_t i = 0; i < T * D; i++) ml[i] = xl[i] + y[i];
        norm_rows(xn, ml, L->post_norm, T, D, c->eps);
        mlp(c, L, T, xn, g + l * T * I, u + l * T * I, y);
        for (int64_t i = 0; i < T * D; i++) xo[i] = ml[i] + y[i];
    }
    double *hn = xmalloc((size_t)(T * D) * 8), *lg = xmalloc((size_t)(T * V) * 8);
    norm_rows(hn, x + NL * T * D, w->norm, T, D, c->eps);
    ref_linear(lg, hn, w->lm_head, T, D, V);
    if (logits) memcpy(logits, lg, (size_t)(T * V) * 8);
    /* the NLL summed over the labels that count; its gradient scale (softmax - onehot) lands in lg */
    double loss = 0;
    *counted = 0;
    for (int64_t t = 0; t < T; t++) {
        double *row = lg + t * V, mx = -INFINITY, z = 0;
        if (weights && !weights[t + 1]) { memset(row, 0, (size_t)V * 8); continue; }
        ++*counted;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, row[v]);
        for (int64_t v = 0; v < V; v++) z += exp(row[v] - mx);
        loss += mx + log(z) - row[tokens[t + 1]];
        for (int64_t v = 0; v < V; v++) row[v] = exp(row[v] - mx) / z * scale;
        row[tokens[t + 1]] -= scale;
    }
    if (G) { /* backward, layer by layer from the top */
        double *dh = xcalloc((size_t)(T * D), 8), *dx = xcalloc((size_t)(T * D), 8), *d2 = xmalloc((size_t)(T * D) * 8);
        ref_linear_bwd(dh, G->lm_head, lg, hn, w->lm_head, T, D, V);
        norm_rows_bwd(dx, x + NL * T * D, w->norm, dh, G->norm, T, D, c->eps); /* dx: d(loss)/d(x[L]) */
        for (int64_t l = NL - 1; l >= 0; l--) {
            const Q35Layer *L = &w->layer[l];
            Q35LayerGrads *LG = &G->layer[l];
            const double *xl = x + l * T * D, *ml = m + l * T * D;
            /* x[l+1] = m + mlp(norm(m)): dm = dx + the MLP's path */
            norm_rows(xn, ml, L->post_norm, T, D, c->eps);
            memset(d2, 0, (size_t)(T * D) * 8);
            mlp_bwd(c, L, LG, T, xn, g + l * T * I, u + l * T * I, dx, d2);
            norm_rows_bwd(dx, ml, L->post_norm, d2, LG->post_norm, T, D, c->eps); /* dx is now dm */
            /* m = x[l] + mixer(norm(x[l])) */
            norm_rows(xn, xl, L->in_norm, T, D, c->eps);
            if (c->linear[l]) ref_gdn_layer_bwd(&c->gdn, &L->gdn, T, xn, dx, d2, &LG->gdn);
            else ref_gated_attn_bwd(&c->attn, &L->attn, T, xn, pos, dx, d2, &LG->attn);
            norm_rows_bwd(dx, xl, L->in_norm, d2, LG->in_norm, T, D, c->eps); /* dx is now d(x[l]) */
        }
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < D; e++) G->embed[(int64_t)tokens[t] * D + e] += dx[t * D + e];
        free(dh); free(dx); free(d2);
    }
    free(pos); free(x); free(m); free(g); free(u); free(xn); free(y); free(hn); free(lg);
    return loss;
}

/* ---------------------------------------------------------------- from the trainers' parameter table */
/* a layer's tensors (or their gradients) in the table's flat layout, as ref_q35 takes them */
static void layer_views(const Qwen3Config *c, const ParamTable *pt, double *flat, int64_t l, Q35Layer *L, Q35LayerGrads *G) {
#define AT(kind) (flat + params_get(pt, kind, l)->offset)
    double *in = AT(P_IN_NORM), *post = AT(P_POST_NORM);
    if (c->experts) { /* Qwen3.5's MoE: the routed experts (model.h's MoeLayout) and the shared expert */
        MoeLayout m;
        params_moe_layout(pt, l, &m);
        double *r = flat + m.router, *eg = flat + m.gate, *eu = flat + m.up, *ed = flat + m.down, *sg = flat + m.sh_gate,
               *su = flat + m.sh_up, *sd = flat + m.sh_down, *sr = flat + m.sh_route;
        if (L) *L = (Q35Layer){.in_norm = in, .post_norm = post, .router = r, .egate = eg, .eup = eu, .edown = ed,
                               .sgate = sg, .sup = su, .sdown = sd, .sroute = sr};
        if (G) *G = (Q35LayerGrads){.in_norm = in, .post_norm = post, .router = r, .egate = eg, .eup = eu, .edown = ed,
                                    .sgate = sg, .sup = su, .sdown = sd, .sroute = sr};
    } else {
        double *gate = AT(P_GATE), *up = AT(P_UP), *down = AT(P_DOWN);
        if (L) *L = (Q35Layer){.in_norm = in, .post_norm = post, .gate = gate, .up = up, .down = down};
        if (G) *G = (Q35LayerGrads){.in_norm = in, .post_norm = post, .gate = gate, .up = up, .down = down};
    }
    if (config_is_linear(c, l)) {
        double *qkv = AT(P_LIN_QKV), *z = AT(P_LIN_Z), *b = AT(P_LIN_B), *a = AT(P_LIN_A), *conv = AT(P_LIN_CONV),
               *dt = AT(P_LIN_DT), *Al = AT(P_LIN_ALOG), *nw = AT(P_LIN_NORM), *out = AT(P_LIN_OUT);
        if (L) L->gdn = (GdnWeights){qkv, z, b, a, conv, dt, Al, nw, out};
        if (G) G->gdn = (GdnGrads){qkv, z, b, a, conv, dt, Al, nw, out};
    } else {
        double *q = AT(P_Q), *k = AT(P_K), *v = AT(P_V), *o = AT(P_O), *qn = AT(P_Q_NORM), *kn = AT(P_K_NORM);
        if (L) L->attn = (GatedAttnWeights){q, k, v, o, qn, kn};
        if (G) G->attn = (GatedAttnGrads){q, k, v, o, qn, kn};
    }
#undef AT
}

RefResult ref_q35_table(const Qwen3Config *c, const ParamTable *pt, const float *params, const uint32_t *tokens,
                        const uint8_t *weights, const int64_t *pos, const int64_t *first, int64_t S, float *logits,
                        float *grads) {
    if (c->layers > Q35_MAX_LAYERS) DIE("the hybrid reference takes at most %d layers", Q35_MAX_LAYERS);
    if (c->experts && (!c->shared_inter || c->aux_loss))
        DIE("the hybrid reference takes Qwen3.5's MoE (a shared expert) without the load-balancing loss");
    Q35Config qc = {.V = c->vocab, .D = c->hidden, .I = c->intermediate, .L = c->layers, .eps = c->eps,
                    .E = c->experts, .k = c->top_k, .Im = c->moe_intermediate, .Is = c->shared_inter};
    for (int64_t l = 0; l < c->layers; l++) qc.linear[l] = config_is_linear(c, l);
    qc.gdn = (GdnLayer){.D = c->hidden, .Hk = c->lin_k_heads, .Hv = c->lin_v_heads, .dk = c->lin_k_dim,
                        .dv = c->lin_v_dim, .K = c->conv_width, .eps = c->eps};
    double inv[512], af;
    rope_inv_freq(c, inv, &af); /* transformers' fp32 frequencies, YaRN's when it is on */
    qc.attn = (GatedAttn){.D = c->hidden, .Hq = c->heads, .Hkv = c->kv_heads, .hd = c->head_dim, .rot = c->rot,
                          .theta = c->rope_theta, .eps = c->eps, .inv_freq = inv, .attn_factor = af};
    /* the HF values (the table holds 1 + w for the zero-centred norms), and their gradients */
    double *w = xmalloc((size_t)pt->total * 8), *gd = grads ? xcalloc((size_t)pt->total, 8) : NULL;
    for (int64_t i = 0; i < pt->total; i++) w[i] = params[i];
    for (int64_t i = 0; i < pt->n; i++)
        for (int64_t e = 0; e < pt->p[i].numel && pt->p[i].shift; e++) w[pt->p[i].offset + e] -= 1.0;
    Q35Weights W = {.embed = w + params_get(pt, P_EMBED, 0)->offset, .norm = w + params_get(pt, P_FINAL_NORM, 0)->offset,
                    .lm_head = w + params_get(pt, P_LM_HEAD, 0)->offset};
    Q35Grads G = {0};
    if (gd) G = (Q35Grads){.embed = gd + params_get(pt, P_EMBED, 0)->offset, .norm = gd + params_get(pt, P_FINAL_NORM, 0)->offset,
                           .lm_head = gd + params_get(pt, P_LM_HEAD, 0)->offset};
    for (int64_t l = 0; l < c->layers; l++) {
        layer_views(c, pt, w, l, &W.layer[l], NULL);
        if (gd) layer_views(c, pt, gd, l, NULL, &G.layer[l]);
    }
    /* documents: the runs of equal first[t] (NULL: one); each runs alone from positions 0 */
    int64_t n = 0;
    for (int64_t t = 0; t < S; t++) n += !weights || weights[t + 1];
    RefResult r = {.tokens = n};
    double *lg = logits ? xmalloc((size_t)(S * c->vocab) * 8) : NULL;
    for (int64_t a = 0, b; a < S; a = b) {
        for (b = a + 1; b < S && (!first || first[b] == first[a]); b++) {}
        for (int64_t t = a; pos && t < b; t++)
            if (pos[t] != t - a) DIE("the hybrid reference runs each document from position 0 (token %lld at %lld)",
                                     (long long)t, (long long)pos[t]);
        int64_t counted;
        r.loss += ref_q35_sum(&qc, &W, b - a, tokens + a, weights ? weights + a : NULL, n ? 1 / (double)n : 0, &counted,
                              lg ? lg + a * c->vocab : NULL, gd ? &G : NULL);
    }
    r.loss = n ? r.loss / (double)n : 0;
    for (int64_t i = 0; lg && i < S * c->vocab; i++) logits[i] = (float)lg[i];
    for (int64_t i = 0; gd && i < pt->total; i++) grads[i] = (float)gd[i];
    free(w); free(gd); free(lg);
    return r;
}
