/* check_stage.c -- compare a trainer's first step against the CPU reference model.
 *
 *   check_stage tokens GOLDEN_DIR OUT.tok          the golden config's tokens as a token file
 *   check_stage random VOCAB N SEED OUT.tok        N random tokens below VOCAB
 *   check_stage grads GOLDEN_DIR DUMP [STATE LR WD BETA1 BETA2 EPS CLIP]
 *       DUMP: --dump-grads output (loss + fp32 gradients of step 1) of a trainer run on the
 *       golden tokens; checks loss (rel err <= 1e-2) and every gradient (cosine >= 0.999)
 *       against the reference. With STATE (a --save directory after one step) it also checks
 *       the fp32 master weights after the update: the reference AdamW applied to the trainer's
 *       own gradients must give the trainer's weights (rel err <= 1e-5: both in fp32).
 *       With --tokens FILE --windows P --seq S (after the other arguments) the reference is the mean
 *       over the P windows a P-rank data-parallel step reads (window r = tokens [r*S, r*S+S]).
 *   check_stage same DUMP_A DUMP_B MIN_COSINE [LOSS_TOL]   two dumps agree: every gradient's cosine, and
 *       the loss within LOSS_TOL relative (default 1e-6)
 * Prints "N passed, M failed"; exits non-zero on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/config.h"
#include "../common/model.h"
#include "../common/safetensors.h"
#include "../common/tokens.h"
#include "ref_model.h"
#include "test.h"

static double cosine(const float *a, const float *b, int64_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return NAN;
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    if (aa == 0 && bb == 0) return 1.0;
    return ab / sqrt(aa * bb);
}

static void load_golden(const char *dir, Qwen3Config *c, ParamTable *pt, float **params, uint32_t **tokens,
                        int64_t *S) {
    char err[512], path[4200];
    if (config_load(dir, c, err, sizeof err)) DIE("%s", err);
    params_build(c, pt);
    *params = xmalloc((size_t)pt->total * 4);
    if (params_load(pt, dir, *params, err, sizeof err)) DIE("%s", err);
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) DIE("%s", err);
    const StTensor *t = st_find(&st, "tokens");
    if (!t) DIE("%s: no tokens", path);
    int32_t *tok = xmalloc((size_t)t->numel * 4);
    if (st_read_i32(&st, "tokens", t->numel, tok, err, sizeof err)) DIE("%s", err);
    *tokens = xmalloc((size_t)t->numel * 4);
    for (int64_t i = 0; i < t->numel; i++) (*tokens)[i] = (uint32_t)tok[i];
    *S = t->numel - 1;
    free(tok);
    st_close(&st);
}

static float *read_all(const SafeTensors *st, const ParamTable *pt, const char *prefix) {
    char err[512], name[160];
    float *out = xcalloc((size_t)pt->total, 4);
    for (int64_t i = 0; i < pt->n; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, pt->p[i].name);
        if (st_read_f32(st, name, pt->p[i].ndim, pt->p[i].shape, out + pt->p[i].offset, err, sizeof err)) DIE("%s", err);
    }
    return out;
}

static int cmd_grads(int argc, char **argv) {
    Qwen3Config c;
    ParamTable pt;
    float *params;
    uint32_t *tokens;
    int64_t S;
    char err[512];
    load_golden(argv[2], &c, &pt, &params, &tokens, &S);
    float *ref_g = xmalloc((size_t)pt.total * 4);
    const char *tokfile = NULL;
    int64_t windows = 1;
    int positional = argc;
    for (int i = 3; i < argc; i++) {
        if (!strncmp(argv[i], "--", 2) && positional == argc) positional = i; /* options end the positional list */
        if (i + 1 >= argc) continue;
        if (!strcmp(argv[i], "--tokens")) tokfile = argv[i + 1];
        if (!strcmp(argv[i], "--windows")) windows = atoll(argv[i + 1]);
        if (!strcmp(argv[i], "--seq")) S = atoll(argv[i + 1]);
    }
    argc = positional;
    RefResult r = {0, 0};
    if (!tokfile) r = ref_forward_backward(&c, &pt, params, tokens, NULL, S, 0, NULL, ref_g);
    else { /* the mean over the windows of P data-parallel ranks */
        TokenFile tf;
        if (tokens_open(tokfile, c.vocab, &tf, err, sizeof err)) DIE("%s", err);
        if (tf.count < windows * S + 1) DIE("%s: too few tokens for %lld windows", tokfile, (long long)windows);
        float *gw = xmalloc((size_t)pt.total * 4);
        memset(ref_g, 0, (size_t)pt.total * 4);
        for (int64_t w = 0; w < windows; w++) {
            RefResult rw = ref_forward_backward(&c, &pt, params, tf.ids + w * S, NULL, S, 0, NULL, gw);
            r.loss += rw.loss / (double)windows;
            for (int64_t i = 0; i < pt.total; i++) ref_g[i] += gw[i] / (float)windows;
        }
        free(gw);
        tokens_close(&tf);
        printf("  reference: mean over %lld windows of %lld tokens\n", (long long)windows, (long long)S);
    }
    SafeTensors dump;
    if (st_open(argv[3], &dump, err, sizeof err)) DIE("%s", err);
    float loss;
    const int64_t one[1] = {1};
    if (st_read_f32(&dump, "loss", 1, one, &loss, err, sizeof err)) DIE("%s", err);
    float *g = read_all(&dump, &pt, "grad.");
    const double lerr = fabs(loss - r.loss) / fabs(r.loss);
    /* 1e-2: bf16 activations and weights through the whole model */
    EXPECT_LE(lerr, 1e-2, "loss %.6f vs reference %.6f (rel %.2e)", loss, r.loss, lerr);
    printf("  loss %.6f vs reference %.6f (rel err %.2e)\n", loss, r.loss, lerr);
    double worst = 2;
    const char *wn = "";
    for (int64_t i = 0; i < pt.n; i++) {
        const ParamInfo *p = &pt.p[i];
        const double cs = cosine(g + p->offset, ref_g + p->offset, p->numel);
        /* 0.999: bf16 GEMM inputs and attention keep gradients within a few 1e-3 in angle */
        EXPECT(cs >= 0.999, "gradient %s cosine %.6f < 0.999", p->name, cs);
        if (!(cs >= worst)) { worst = cs; wn = p->name; }
    }
    printf("  %lld gradients: worst cosine %.6f (%s)\n", (long long)pt.n, worst, wn);
    if (argc >= 11) {
        char path[4200];
        snprintf(path, sizeof path, "%s/trainer_state.safetensors", argv[4]);
        SafeTensors st;
        if (st_open(path, &st, err, sizeof err)) DIE("%s", err);
        float *master = read_all(&st, &pt, "master.");
        float *m = xcalloc((size_t)pt.total, 4), *v = xcalloc((size_t)pt.total, 4);
        ref_adamw(&pt, params, g, m, v, 1, atof(argv[5]), atof(argv[7]), atof(argv[8]), atof(argv[9]), atof(argv[6]),
                  atof(argv[10]));
        const double e = rel_err(master, params, pt.total);
        EXPECT_LE(e, 1e-5, "weights after one AdamW step: rel err %.2e", e);
        printf("  weights after one AdamW step: rel err %.2e vs reference AdamW on the same gradients\n", e);
        st_close(&st);
        free(master); free(m); free(v);
    }
    st_close(&dump);
    return test_summary();
}

static int cmd_same(char **argv) {
    SafeTensors a, b;
    char err[512];
    if (st_open(argv[2], &a, err, sizeof err) || st_open(argv[3], &b, err, sizeof err)) DIE("%s", err);
    const double min_cos = atof(argv[4]), loss_tol = argv[5] ? atof(argv[5]) : 1e-6;
    double worst = 2;
    for (int64_t i = 0; i < a.n; i++) {
        const StTensor *ta = &a.t[i], *tb = st_find(&b, ta->name);
        EXPECT(tb && tb->numel == ta->numel, "%s present in both", ta->name);
        if (!tb) continue;
        float *x = xmalloc((size_t)ta->numel * 4), *y = xmalloc((size_t)ta->numel * 4);
        st_read_f32(&a, ta->name, ta->ndim, ta->shape, x, err, sizeof err);
        st_read_f32(&b, tb->name, tb->ndim, tb->shape, y, err, sizeof err);
        if (!strcmp(ta->name, "loss")) {
            EXPECT(fabs(x[0] - y[0]) <= loss_tol * fabs(y[0]), "loss %.9g vs %.9g", x[0], y[0]);
            printf("  loss %.9g vs %.9g\n", x[0], y[0]);
        } else {
            const double cs = cosine(x, y, ta->numel);
            EXPECT(cs >= min_cos, "%s cosine %.8f < %g", ta->name, cs, min_cos);
            if (!(cs >= worst)) worst = cs;
        }
        free(x); free(y);
    }
    printf("  %lld tensors: worst gradient cosine %.8f\n", (long long)a.n, worst);
    return test_summary();
}

int main(int argc, char **argv) {
    char err[512];
    if (argc >= 4 && !strcmp(argv[1], "tokens")) {
        Qwen3Config c;
        ParamTable pt;
        float *params;
        uint32_t *tokens;
        int64_t S;
        load_golden(argv[2], &c, &pt, &params, &tokens, &S);
        if (tokens_write(argv[3], tokens, S + 1, err, sizeof err)) DIE("%s", err);
        printf("%lld\n", (long long)S);
        return 0;
    }
    if (argc >= 6 && !strcmp(argv[1], "random")) {
        const int64_t V = atoll(argv[2]), n = atoll(argv[3]);
        uint64_t s = (uint64_t)atoll(argv[4]) * 0x9E3779B97F4A7C15ull + 1;
        uint32_t *ids = xmalloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            ids[i] = (uint32_t)(s % (uint64_t)V);
        }
        if (tokens_write(argv[5], ids, n, err, sizeof err)) DIE("%s", err);
        return 0;
    }
    if (argc >= 4 && !strcmp(argv[1], "grads")) return cmd_grads(argc, argv);
    if (argc >= 5 && !strcmp(argv[1], "same")) return cmd_same(argv);
    fprintf(stderr, "usage: see the comment at the top of tests/check_stage.c\n");
    return 2;
}
