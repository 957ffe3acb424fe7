/* ref_qwen35.c -- the Qwen3.5 hybrid text model, forward and backward, plainly (ref_qwen35.h). */
#include "ref_qwen35.h"

#include <math.h>
#include <string.h>

#include "../common/check.h"

static double silu(double x) { return x / (1 + exp(-x)); }
static double dsilu(double x) { const double s = 1 / (1 + exp(-x)); return s * (1 + x * (1 - s)); }

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

/* SwiGLU MLP: y = down(silu(gate x) * up x); h [T, I] and the gate/up outputs kept for the backward */
static void mlp(const Q35Config *c, const Q35Layer *L, int64_t T, const double *x, double *g, double *u, double *y) {
    const int64_t D = c->D, I = c->I;
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
           *g = xmalloc((size_t)(NL * T * I) * 8), *u = xmalloc((size_t)(NL * T * I) * 8), *xn = xmalloc((size_t)(T * D) * 8),
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
    double *in = AT(P_IN_NORM), *post = AT(P_POST_NORM), *gate = AT(P_GATE), *up = AT(P_UP), *down = AT(P_DOWN);
    if (L) *L = (Q35Layer){.in_norm = in, .post_norm = post, .gate = gate, .up = up, .down = down};
    if (G) *G = (Q35LayerGrads){.in_norm = in, .post_norm = post, .gate = gate, .up = up, .down = down};
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
    Q35Config qc = {.V = c->vocab, .D = c->hidden, .I = c->intermediate, .L = c->layers, .eps = c->eps};
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
