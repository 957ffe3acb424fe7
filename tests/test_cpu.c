/* test_cpu.c -- every CPU test: the reference model against transformers' golden files, the
 * chunked loss, safetensors (round trips and corrupt files), config.json, token files and the
 * loader, the CLI parser. Run from the repository root: ./build/test_cpu [golden_dir]. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <errno.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <sys/wait.h>

#include "../common/check.h"
#include "../common/ckpt.h"
#include "../common/cli.h"
#include "../common/config.h"
#include "../common/files.h"
#include "../common/json.h"
#include "../common/cpu_adam.h"
#include "../common/model.h"
#include "../common/numa.h"
#include "../common/rendezvous.h"
#include "../common/safetensors.h"
#include "../common/shard.h"
#include "../common/tokens.h"
#include "../common/zigzag.h"
#include "golden.h"
#include "ref_model.h"
#include "ref_gdn.h"
#include "sim_gdn.h"
#include "ref_qwen35.h"
#include "ref_ring.h"
#include "ref_layout.h"
#include "../common/docs.h"
#include "../common/layout.h"
#include "../common/inputs.h"
#include "test.h"

static const char *GOLDEN[] = {"tied_gqa2_hd128", "untied_gqa4_s100", "yarn4_orig32", "moe_e8_k2", "masked_gqa4_s128",
                               "packed_gqa4_s128", "q35_l2_s112", "q35_yarn4_l2_s112",
                               "q35_packed_l2_s112", "q35moe_l2_s112"};
static char tmpdir[256];

/* ------------------------------------------------------------------ golden files */
/* root/name, loaded (tests/golden.c); a failure prints FAIL with the message */
static int golden_open(const char *root, const char *name, Golden *g) {
    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    if (golden_load(dir, g, err, sizeof err)) { printf("FAIL %s\n", err); return -1; }
    return 0;
}

static void test_golden(const char *root) {
    for (size_t k = 0; k < sizeof GOLDEN / sizeof GOLDEN[0]; k++) {
        Golden g;
        int ok = !golden_open(root, GOLDEN[k], &g);
        EXPECT(ok, "%s: golden files load", GOLDEN[k]);
        if (!ok) continue;
        const int64_t S = g.S, V = g.c.vocab;
        float *logits = xmalloc((size_t)(S * V) * 4), *grads = xmalloc((size_t)g.pt.total * 4);
        RefResult r = g.eot >= 0 ? ref_forward_backward_packed(&g.c, &g.pt, g.params, g.tokens, g.weights,
                                                               (uint32_t)g.eot, S, 0, logits, grads)
                                 : ref_forward_backward_masked(&g.c, &g.pt, g.params, g.tokens, g.weights, NULL, S, 0,
                                                               logits, grads);
        char err[512] = "";
        float *want = xmalloc((size_t)(S * V) * 4);
        double gl = NAN;
        EXPECT(!golden_loss(&g, &gl, err, sizeof err), "%s: %s", GOLDEN[k], err);
        double lerr = fabs(r.loss - gl) / fabs(gl);
        /* 1e-5: fp32 storage on both sides, fp64 accumulation here vs fp32 GEMMs in torch */
        EXPECT_LE(lerr, 1e-5, "%s: loss %.7f vs transformers %.7f (rel %.2e)", GOLDEN[k], r.loss, gl, lerr);
        if (g.c.experts && g.c.aux_loss) { /* MoE: the load-balancing loss itself, as transformers computed it */
            float aux = NAN;
            const int64_t one[1] = {1};
            EXPECT(!st_read_f32(&g.gold, "aux_loss", 1, one, &aux, err, sizeof err), "%s: %s", GOLDEN[k], err);
            EXPECT_LE(fabs(r.aux - aux) / fabs(aux), 1e-5, "%s: aux loss %.7f vs transformers %.7f", GOLDEN[k], r.aux, aux);
        }
        const int lrd = golden_logits(&g, want, err, sizeof err);
        EXPECT(!lrd, "%s: %s", GOLDEN[k], err);
        double e = lrd ? NAN : rel_err(logits, want, S * V);
        EXPECT_LE(e, 1e-5, "%s: logits rel err %.2e", GOLDEN[k], e);
        double worst = 0;
        const char *worst_name = "";
        for (int64_t i = 0; i < g.pt.n; i++) {
            const ParamInfo *p = &g.pt.p[i];
            float *gw = xmalloc((size_t)p->numel * 4);
            int rd = golden_grad(&g, p, gw, err, sizeof err);
            EXPECT(!rd, "%s: %s", GOLDEN[k], err);
            double ge = rd ? NAN : rel_err(grads + p->offset, gw, p->numel);
            /* 1e-4: gradients pass through ~30 fp32 ops of both implementations */
            EXPECT_LE(ge, 1e-4, "%s: gradient %s rel err %.2e", GOLDEN[k], p->name, ge);
            if (!(ge <= worst)) { worst = ge; worst_name = p->name; }
            free(gw);
        }
        printf("  golden %-18s loss %.6f (rel %.1e)  logits rel %.1e  worst grad rel %.1e (%s)\n", GOLDEN[k], r.loss,
               lerr, e, worst, worst_name);
        free(logits); free(grads); free(want);
        golden_free(&g);
    }
}

/* the chunked loss must equal the unchunked one, gradients included */
static void test_chunked_loss(const char *root) {
    Golden g;
    if (golden_open(root, GOLDEN[1], &g)) { EXPECT(0, "load"); return; }
    float *g0 = xmalloc((size_t)g.pt.total * 4), *g1 = xmalloc((size_t)g.pt.total * 4);
    RefResult full = ref_forward_backward(&g.c, &g.pt, g.params, g.tokens, NULL, g.S, 0, NULL, g0);
    const int64_t chunks[] = {1, 7, 32, 99};
    for (int i = 0; i < 4; i++) {
        RefResult r = ref_forward_backward(&g.c, &g.pt, g.params, g.tokens, NULL, g.S, chunks[i], NULL, g1);
        double le = fabs(r.loss - full.loss) / full.loss, ge = rel_err(g1, g0, g.pt.total);
        EXPECT_LE(le, 1e-12, "chunk %lld: loss %.9f vs unchunked %.9f", (long long)chunks[i], r.loss, full.loss);
        EXPECT_LE(ge, 1e-6, "chunk %lld: grads rel err %.2e", (long long)chunks[i], ge);
    }
    free(g0); free(g1);
    golden_free(&g);
}

/* the loss mask in the reference: the mean over the labels that count, every gradient with it */
static void test_masked_loss(const char *root) {
    Golden g;
    if (golden_open(root, GOLDEN[1], &g)) { EXPECT(0, "load"); return; }
    const int64_t S = g.S, V = g.c.vocab, n = g.pt.total;
    float *g0 = xmalloc((size_t)n * 4), *ga = xmalloc((size_t)n * 4), *gb = xmalloc((size_t)n * 4);
    float *logits = xmalloc((size_t)(S * V) * 4);
    uint8_t *w = xcalloc((size_t)S + 1, 1), *wa = xcalloc((size_t)S + 1, 1), *wb = xcalloc((size_t)S + 1, 1);
    RefResult full = ref_forward_backward(&g.c, &g.pt, g.params, g.tokens, NULL, S, 0, logits, g0);
    for (int64_t t = 0; t <= S; t++) w[t] = 1;
    RefResult ones = ref_forward_backward_masked(&g.c, &g.pt, g.params, g.tokens, w, NULL, S, 0, NULL, ga);
    EXPECT(ones.loss == full.loss && ones.tokens == S && !memcmp(ga, g0, (size_t)n * 4),
           "weights all 1: the unmasked loss and gradients, bit for bit");
    /* a prompt of 37 labels, then the completion (and a second prompt inside it, labels 70-79) */
    int64_t na = 0, nb = 0;
    for (int64_t t = 1; t <= S; t++) {
        wa[t] = t > 37 && (t < 70 || t > 79);
        wb[t] = !wa[t];
        na += wa[t], nb += wb[t];
    }
    RefResult ra = ref_forward_backward_masked(&g.c, &g.pt, g.params, g.tokens, wa, NULL, S, 0, NULL, ga);
    RefResult rb = ref_forward_backward_masked(&g.c, &g.pt, g.params, g.tokens, wb, NULL, S, 7, NULL, gb);
    /* the loss: the mean of the per-label NLLs that count, read off the unmasked run's logits */
    double want = 0;
    for (int64_t t = 0; t < S; t++) {
        if (!wa[t + 1]) continue;
        const float *row = logits + t * V;
        double m = -INFINITY, z = 0;
        for (int64_t j = 0; j < V; j++) m = row[j] > m ? row[j] : m;
        for (int64_t j = 0; j < V; j++) z += exp(row[j] - m);
        want += m + log(z) - row[g.tokens[t + 1]];
    }
    want /= (double)na;
    EXPECT(ra.tokens == na && fabs(ra.loss - want) <= 1e-9 * want, "masked loss %.9f = the mean NLL of its %lld labels "
           "%.9f", ra.loss, (long long)na, want);
    /* complementary masks: na x grad(A) + nb x grad(B) = S x grad(all) (the loss is linear in the labels) */
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)na * ga[i] + (double)nb * gb[i] - (double)S * g0[i];
        num += d * d, den += (double)S * g0[i] * S * g0[i];
    }
    const double e = sqrt(num / den), le = fabs(na * ra.loss + nb * rb.loss - S * full.loss) / (S * full.loss);
    EXPECT_LE(e, 1e-5, "complementary masks: the gradients add back to the unmasked ones (rel %.2e)", e);
    EXPECT_LE(le, 1e-12, "complementary masks: the losses add back (rel %.2e; B chunked by 7)", le);
    memset(w, 0, (size_t)S + 1);
    RefResult none = ref_forward_backward_masked(&g.c, &g.pt, g.params, g.tokens, w, NULL, S, 0, NULL, ga);
    int zero = 1;
    for (int64_t i = 0; i < n; i++) zero &= ga[i] == 0.f;
    EXPECT(none.tokens == 0 && none.loss == 0 && zero, "no label counts: loss 0, every gradient 0, no NaN");
    free(g0); free(ga); free(gb); free(logits); free(w); free(wa); free(wb);
    golden_free(&g);
}

/* ------------------------------------------------------------------ safetensors */
static void write_raw(const char *path, const char *header, uint64_t declared_len, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    uint8_t lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (uint8_t)(declared_len >> (8 * i));
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}
static int opens(const char *path, char *err, size_t errlen) {
    SafeTensors st;
    int rc = st_open(path, &st, err, errlen);
    if (!rc) st_close(&st);
    return rc;
}

static void test_safetensors(void) {
    char path[600], err[512];
    /* round trip: F32, BF16, I32, 1-D and 2-D, single file and sharded directory */
    float a[6] = {1.5f, -2.25f, 3.0f, 1e-3f, -7.0f, 0.0f};
    uint16_t b[4];
    float bv[4] = {0.5f, -1.0f, 3.140625f, 100.0f};
    for (int i = 0; i < 4; i++) b[i] = f32_to_bf16(bv[i]);
    int32_t ids[3] = {7, 151643, 0};
    StWrite w[3] = {{"a.weight", ST_F32, 2, {2, 3}, a}, {"b.weight", ST_BF16, 1, {4}, b}, {"ids", ST_I32, 1, {3}, ids}};
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir);
    EXPECT(!st_write(path, w, 3, "{\"format\":\"pt\"}", err, sizeof err), "write: %s", err);
    SafeTensors st;
    int rc = st_open(path, &st, err, sizeof err);
    EXPECT(!rc, "reopen: %s", err);
    if (!rc) {
        float ra[6], rb[4];
        int32_t ri[3];
        int64_t sa[2] = {2, 3}, sb[1] = {4};
        EXPECT(!st_read_f32(&st, "a.weight", 2, sa, ra, err, sizeof err) && !memcmp(ra, a, sizeof a), "F32 round trip");
        EXPECT(!st_read_f32(&st, "b.weight", 1, sb, rb, err, sizeof err) && !memcmp(rb, bv, sizeof bv), "BF16 round trip");
        EXPECT(!st_read_i32(&st, "ids", 3, ri, err, sizeof err) && !memcmp(ri, ids, sizeof ids), "I32 round trip");
        int64_t wrong[2] = {3, 2};
        EXPECT(st_read_f32(&st, "a.weight", 2, wrong, ra, err, sizeof err) && strstr(err, "shape"),
               "shape mismatch refused: %s", err);
        EXPECT(st_read_f32(&st, "nope", 2, sa, ra, err, sizeof err) && strstr(err, "missing"),
               "missing tensor refused: %s", err);
        st_close(&st);
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sharded", tmpdir);
    if (mkdir(dir, 0755) && errno != EEXIST) { EXPECT(0, "mkdir"); return; }
    EXPECT(!st_write_dir(dir, w, 3, 10, err, sizeof err), "sharded write: %s", err);
    rc = st_open(dir, &st, err, sizeof err);
    EXPECT(!rc && st.nfiles == 3 && st.n == 3, "sharded reopen (%d files): %s", rc ? -1 : st.nfiles, err);
    if (!rc) {
        float ra[6];
        int64_t sa[2] = {2, 3};
        EXPECT(!st_read_f32(&st, "a.weight", 2, sa, ra, err, sizeof err) && !memcmp(ra, a, sizeof a), "sharded read");
        st_close(&st);
    }
    /* an index naming a tensor that is not in its shard */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"weight_map\": {\"a.weight\": \"model-00001-of-00003.safetensors\", "
               "\"ghost\": \"model-00001-of-00003.safetensors\"}}");
    fclose(f);
    EXPECT(opens(dir, err, sizeof err) && strstr(err, "ghost"), "index names a missing tensor: %s", err);

    /* corrupt single files, each refused with a message */
    uint8_t data[64] = {0};
    struct { const char *what, *header; int64_t declared; size_t ndata; const char *expect; } bad[] = {
        {"header length past the end", "{}", 4096, 0, "past the end"},
        {"out-of-range offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 8, "past the end"},
        {"overlapping offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                 "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, 16, "overlap"},
        {"unknown dtype", "{\"x\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", -1, 2, "dtype"},
        {"shape/byte-count mismatch", "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8, "bytes"},
        {"reversed offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", -1, 8, "data_offsets"},
        {"broken JSON", "{\"x\":{\"dtype\":\"F32\",", -1, 0, "JSON"},
        {"header not an object", "[1,2]", -1, 0, "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.safetensors", tmpdir, i);
        uint64_t len = bad[i].declared >= 0 ? (uint64_t)bad[i].declared : strlen(bad[i].header);
        write_raw(path, bad[i].header, len, data, bad[i].ndata);
        err[0] = 0;
        int r = opens(path, err, sizeof err);
        EXPECT(r && strstr(err, bad[i].expect), "%s refused (got: %s)", bad[i].what, r ? err : "accepted");
        printf("  safetensors %-28s -> %s\n", bad[i].what, err);
    }
    /* truncated: a valid file cut short inside its data, and a file shorter than 8 bytes */
    snprintf(path, sizeof path, "%s/rt.safetensors", tmpdir);
    FILE *src = fopen(path, "rb");
    fseek(src, 0, SEEK_END);
    long n = ftell(src);
    fseek(src, 0, SEEK_SET);
    char *buf = xmalloc((size_t)n);
    EXPECT(fread(buf, 1, (size_t)n, src) == (size_t)n, "read back");
    fclose(src);
    snprintf(path, sizeof path, "%s/trunc.safetensors", tmpdir);
    f = fopen(path, "wb");
    fwrite(buf, 1, (size_t)n - 5, f);
    fclose(f);
    EXPECT(opens(path, err, sizeof err) && strstr(err, "past the end"), "truncated data refused: %s", err);
    printf("  safetensors %-28s -> %s\n", "truncated data", err);
    f = fopen(path, "wb");
    fwrite(buf, 1, 5, f);
    fclose(f);
    EXPECT(opens(path, err, sizeof err) && strstr(err, "truncated"), "5-byte file refused: %s", err);
    printf("  safetensors %-28s -> %s\n", "5-byte file", err);
    free(buf);
    EXPECT(opens("/nonexistent/x.safetensors", err, sizeof err), "missing file refused");
}

/* ------------------------------------------------------------------ config */
static const char *BASE_JSON =
    "{\"model_type\":\"qwen3\",\"vocab_size\":1000,\"hidden_size\":64,\"intermediate_size\":128,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":32%s}";

static int parse_with(const char *extra, Qwen3Config *c, char *err, size_t errlen) {
    char text[2048];
    snprintf(text, sizeof text, BASE_JSON, extra);
    return config_from_json_text(text, strlen(text), c, err, errlen);
}

/* the digest the ranks compare: what decides tensors and collectives, the layer kinds too; not the name */
/* Qwen3.5's MoE: by name, from a fixture's config.json, its parameter table (the routed experts stored
 * as Qwen3's, then the shared expert), and what a qwen3_moe may not have */
static void test_qwen35_moe(const char *root) {
    Qwen3Config c;
    char err[512], dir[1024];
    EXPECT(!config_from_name("Qwen3.5-35B-A3B", &c) && c.experts == 256 && c.top_k == 8 && c.moe_intermediate == 512 &&
           c.shared_inter == 512 && c.norm_topk && c.lin_v_heads == 32 && config_full_layers(&c) == 10 &&
           fabs((double)config_total_params(&c) / 1e9 - 34.661) < 0.005,
           "Qwen3.5-35B-A3B by name: 256 experts of 512, top 8, a shared expert of 512, 10 of 40 layers full, "
           "34.661B parameters (%.3fB)", (double)config_total_params(&c) / 1e9);
    snprintf(dir, sizeof dir, "%s/q35moe_l2_s112", root);
    EXPECT(!config_load(dir, &c, err, sizeof err) && c.experts == 8 && c.top_k == 2 && c.moe_intermediate == 32 &&
           c.shared_inter == 48 && c.norm_topk && !c.aux_loss && c.lin_v_heads == 4 && !c.intermediate,
           "q35moe_l2_s112's config.json (qwen3_5_moe_text): 8 experts of 32, top 2, shared 48 (%s)", err);
    ParamTable t;
    params_build(&c, &t);
    MoeLayout m;
    params_moe_layout(&t, 1, &m);
    const ParamInfo *sg = params_get(&t, P_SH_GATE, 1), *sr = params_get(&t, P_SH_ROUTE, 1);
    EXPECT(m.sh_gate == sg->offset && m.sh_route == sr->offset && sr->shape[0] == 1 && sr->shape[1] == c.hidden &&
           m.gate == params_expert(&t, P_EXP_GATE, 1, 0)->offset && m.down == params_expert(&t, P_EXP_DOWN, 1, 0)->offset &&
           params_expert(&t, P_EXP_UP, 1, 3)->offset == m.up + 3 * c.moe_intermediate * c.hidden &&
           !strcmp(params_expert(&t, P_EXP_UP, 1, 3)->name, "model.layers.1.mlp.experts.3.up_proj.weight") &&
           !strcmp(sr->name, "model.layers.1.mlp.shared_expert_gate.weight"),
           "the MoE hybrid's table: experts one tensor each after the router, then the shared expert and its gate");
    params_free(&t);
    /* the whole 35B-A3B: 30 linear layers of 784 tensors (2 norms, 9 of Gated DeltaNet, the router, 3 x 256
     * experts', 4 of the shared expert) and 10 full ones of 781; their elements are the model's parameters
     * (a table sized for Qwen3's MoE layer overran here) */
    config_from_name("Qwen3.5-35B-A3B", &c);
    params_build(&c, &t);
    int64_t elems = 0;
    for (int64_t i = 0; i < t.n; i++) elems += t.p[i].numel;
    EXPECT(t.n == 30 * 784 + 10 * 781 + 3 && elems == config_total_params(&c),
           "Qwen3.5-35B-A3B's table: %lld tensors (want %d), %lld elements (config: %lld)", (long long)t.n,
           30 * 784 + 10 * 781 + 3, (long long)elems, (long long)config_total_params(&c));
    params_free(&t);
    /* a release's layout: the fixture's experts written fused (gate_up_proj [E, 2 Im, D], down_proj
     * [E, D, Im], as the Hub's Qwen3.5-35B-A3B holds them) load to the same flat weights */
    {
        config_load(dir, &c, err, sizeof err);
        params_build(&c, &t);
        float *a = xmalloc((size_t)t.total * 4), *b = xmalloc((size_t)t.total * 4);
        const int la = params_load(&t, dir, a, err, sizeof err);
        EXPECT(!la, "the fixture loads: %s", err);
        const int64_t E = c.experts, Im = c.moe_intermediate, D = c.hidden;
        StWrite *w = xcalloc((size_t)t.n, sizeof(StWrite));
        float *fused = xcalloc((size_t)(c.layers * 3 * E * Im * D), 4);
        int64_t n = 0;
        for (int64_t i = 0; i < t.n; i++) {
            const ParamInfo *p = &t.p[i];
            if (p->expert < 0) {
                float *v = xmalloc((size_t)p->numel * 4); /* the HF values (the flat buffer holds 1 + w) */
                for (int64_t e = 0; e < p->numel; e++) v[e] = params_to_hf(p, a[p->offset + e]);
                w[n++] = (StWrite){p->name, ST_F32, p->ndim, {p->shape[0], p->shape[1], p->shape[2]}, v};
                continue;
            }
            float *gu = fused + p->layer * 3 * E * Im * D, *dn = gu + 2 * E * Im * D; /* this layer's two */
            float *to = p->kind == P_EXP_DOWN ? dn + p->expert * D * Im
                                              : gu + p->expert * 2 * Im * D + (p->kind == P_EXP_UP ? Im * D : 0);
            memcpy(to, a + p->offset, (size_t)p->numel * 4);
        }
        static char names[64][96];
        for (int64_t l = 0; l < c.layers && l < 32; l++) {
            float *gu = fused + l * 3 * E * Im * D;
            snprintf(names[2 * l], 96, "model.language_model.layers.%lld.mlp.experts.gate_up_proj", (long long)l);
            snprintf(names[2 * l + 1], 96, "model.language_model.layers.%lld.mlp.experts.down_proj", (long long)l);
            w[n++] = (StWrite){names[2 * l], ST_F32, 3, {E, 2 * Im, D}, gu};
            w[n++] = (StWrite){names[2 * l + 1], ST_F32, 3, {E, D, Im}, gu + 2 * E * Im * D};
        }
        char fdir[1024], cfg[1100], path[1100];
        snprintf(fdir, sizeof fdir, "%s/q35moe_fused", tmpdir);
        mkdir(fdir, 0755);
        snprintf(cfg, sizeof cfg, "%s/config.json", fdir);
        snprintf(path, sizeof path, "%s/model.safetensors", fdir);
        EXPECT(!config_write_json(&c, cfg, "float32") && !st_write(path, w, n, NULL, err, sizeof err),
               "a fused copy of the fixture written: %s", err);
        const int lb = params_load(&t, fdir, b, err, sizeof err);
        int64_t diff = 0;
        for (int64_t i = 0; !la && !lb && i < t.total; i++) diff += a[i] != b[i];
        EXPECT(!la && !lb && !diff, "a release's fused experts load to the same weights (%lld differ; %s)", (long long)diff,
               lb ? err : "");
        SafeTensors st;
        EXPECT(!st_open(fdir, &st, err, sizeof err) && !inputs_check_weights(&st, "", &t, err, sizeof err),
               "the fused release passes the weights' check: %s", err);
        st_close(&st);
        /* a fused tensor of the wrong shape is refused, naming both shapes */
        w[n - 1].shape[2] = Im / 2;
        EXPECT(!st_write(path, w, n, NULL, err, sizeof err) && params_load(&t, fdir, b, err, sizeof err) &&
               strstr(err, "down_proj\" has the shape [8, 128, 16], the model's is [8, 128, 32]"),
               "a fused down_proj of the wrong shape refused by name: %s", err);
        for (int64_t i = 0; i < n; i++)
            if (w[i].ndim != 3 || !strstr(w[i].name, "experts")) free((void *)w[i].data);
        free(w); free(fused); free(a); free(b);
        params_free(&t);
    }
    { /* --resume beside a --model whose layer kinds differ: the refusal shows the difference */
        char d1[1024], d2[1024], p1[1100], p2[1100];
        Qwen3Config q, r;
        snprintf(dir, sizeof dir, "%s/q35_l2_s112", root);
        config_load(dir, &q, err, sizeof err);
        r = q;
        r.linear[0] = !r.linear[0], r.linear[1] = !r.linear[1];
        snprintf(d1, sizeof d1, "%s/kinds_a", tmpdir), snprintf(d2, sizeof d2, "%s/kinds_b", tmpdir);
        mkdir(d1, 0755), mkdir(d2, 0755);
        snprintf(p1, sizeof p1, "%s/config.json", d1), snprintf(p2, sizeof p2, "%s/config.json", d2);
        EXPECT(!config_write_json(&q, p1, "float32") && !config_write_json(&r, p2, "float32") &&
               config_for_run(&c, d1, d2, 0, 0, 0, err, sizeof err) && strstr(err, "leave --model out") &&
               strstr(err, "they differ in layer 0's kind full vs linear"),
               "a resume whose layer kinds differ, said in the refusal: %s", err);
    }
    config_from_name("30B-A3B", &c);
    params_build(&c, &t);
    params_moe_layout(&t, 0, &m);
    EXPECT(m.sh_gate == -1 && m.sh_route == -1, "Qwen3's MoE has no shared expert in its layout");
    params_free(&t);
    const char *bad = "{\"model_type\":\"qwen3_5_moe_text\",\"hidden_size\":128,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":64,\"linear_num_key_heads\":2,"
                      "\"linear_num_value_heads\":4,\"linear_key_head_dim\":32,\"linear_value_head_dim\":32,"
                      "\"linear_conv_kernel_dim\":4,\"num_experts\":8,\"num_experts_per_tok\":2,"
                      "\"moe_intermediate_size\":32,\"shared_expert_intermediate_size\":44}";
    EXPECT(config_from_json_text(bad, strlen(bad), &c, err, sizeof err) && strstr(err, "shared_expert_intermediate_size 44"),
           "a shared expert of 44 (rows not 16-byte aligned) refused by name: %s", err);
    char aux[1024];
    snprintf(aux, sizeof aux, "%.*s48,\"output_router_logits\":true}", (int)(strstr(bad, "44") - bad), bad);
    EXPECT(config_from_json_text(aux, strlen(aux), &c, err, sizeof err) && strstr(err, "load-balancing loss"),
           "the load-balancing loss with a Qwen3.5 MoE refused by name (unchecked): %s", err);
    aux[strlen(aux) - strlen(",\"output_router_logits\":true}")] = 0;
    strcat(aux, "}");
    EXPECT(!config_from_json_text(aux, strlen(aux), &c, err, sizeof err) && c.shared_inter == 48, "without it: taken (%s)", err);
}

static void test_config_digest(void) {
    Qwen3Config a, b;
    config_from_name("Qwen3.5-9B", &a);
    b = a;
    snprintf(b.name, sizeof b.name, "/another/mount/of/it");
    EXPECT(config_digest(&a) == config_digest(&b), "config_digest: the same model under another name, the same digest");
    /* the ranks compare digest ^ the data's (52 bits each) through doubles: 63 bits rounded, and equal
     * local ranks disagreed on an H200 (bench/results/2026-12-04_h200/call_t) */
    EXPECT(config_digest(&a) >= 0 && config_digest(&a) < (1ll << 52), "config_digest: 52 bits, exact as a double");
    b.linear[5] = !b.linear[5];
    EXPECT(config_digest(&a) != config_digest(&b), "config_digest: one layer's kind changed, another digest");
    b = a;
    b.rot = 2 * a.rot;
    EXPECT(config_digest(&a) != config_digest(&b), "config_digest: another rotation, another digest");
    config_from_name("8B", &b);
    EXPECT(config_digest(&a) != config_digest(&b), "config_digest: Qwen3.5-9B and Qwen3-8B differ");
}

static void test_config(const char *root) {
    Qwen3Config c;
    char err[512];
    EXPECT(!parse_with("", &c, err, sizeof err) && c.head_dim == 32 && c.kv_heads == 2 && !c.tied && !c.yarn,
           "minimal config.json parses: %s", err);
    EXPECT(!parse_with(",\"rope_theta\":10000,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":8,"
                       "\"original_max_position_embeddings\":4096}", &c, err, sizeof err) &&
               c.yarn && c.yarn_factor == 8 && c.yarn_original_max == 4096 && c.rope_theta == 10000,
           "v4 rope_scaling yarn parses: %s", err);
    EXPECT(!parse_with(",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":500000}", &c, err, sizeof err) &&
               !c.yarn && c.rope_theta == 500000,
           "v5 rope_parameters parses: %s", err);
    struct { const char *extra, *field; } refuse[] = {
        {",\"use_sliding_window\":true", "use_sliding_window"},
        {",\"layer_types\":[\"full_attention\",\"sliding_attention\"]", "layer_types"},
        {",\"num_experts\":8", "num_experts"},
        {",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2}", "rope_type"},
        {",\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8}", "rope_type"},
        {",\"rope_scaling\":{\"rope_type\":\"yarn\"}", "factor"},
        {",\"attention_bias\":true", "attention_bias"},
        {",\"hidden_act\":\"gelu\"", "hidden_act"},
        {",\"head_dim\":30", "head_dim"},
        {",\"num_key_value_heads\":3", "num_key_value_heads"},
    };
    for (size_t i = 0; i < sizeof refuse / sizeof refuse[0]; i++) {
        err[0] = 0;
        int r = parse_with(refuse[i].extra, &c, err, sizeof err);
        EXPECT(r && strstr(err, refuse[i].field), "refuse %s (got: %s)", refuse[i].extra, r ? err : "accepted");
        printf("  config %-48.48s -> %s\n", refuse[i].extra + 1, err);
    }
    /* qwen3_moe: read (the CPU reference runs it), and what it can say that is not implemented refused by name */
#define MOE_BASE "{\"model_type\":\"qwen3_moe\",\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":128," \
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":64," \
                 "\"num_local_experts\":8,\"moe_intermediate_size\":48,\"norm_topk_prob\":true," \
                 "\"output_router_logits\":true,\"router_aux_loss_coef\":0.05"
    const char *moe = MOE_BASE ",\"num_experts_per_tok\":2}";
    EXPECT(!config_from_json_text(moe, strlen(moe), &c, err, sizeof err) && c.experts == 8 && c.top_k == 2 &&
           c.moe_intermediate == 48 && c.norm_topk && c.aux_loss && c.aux_coef == 0.05, "qwen3_moe read: %s", err);
    const char *moe_bad[][2] = {
        {MOE_BASE "}", "num_experts_per_tok"},
        {MOE_BASE ",\"num_experts_per_tok\":2,\"decoder_sparse_step\":2}", "decoder_sparse_step"},
        {MOE_BASE ",\"num_experts_per_tok\":2,\"mlp_only_layers\":[1]}", "mlp_only_layers"},
        {MOE_BASE ",\"num_experts_per_tok\":2,\"shared_expert_intermediate_size\":64}", "shared_expert"},
        {MOE_BASE ",\"num_experts_per_tok\":9}", "num_experts_per_tok 9"},
        {"{\"model_type\":\"qwen3\",\"num_experts\":8}", "num_experts"},
    };
    for (size_t i = 0; i < sizeof moe_bad / sizeof moe_bad[0]; i++) {
        EXPECT(config_from_json_text(moe_bad[i][0], strlen(moe_bad[i][0]), &c, err, sizeof err) &&
               strstr(err, moe_bad[i][1]), "MoE config %zu refused naming %s: %s", i, moe_bad[i][1], err);
        printf("  config MoE %-44s -> %s\n", moe_bad[i][1], err);
    }
#undef MOE_BASE
    const char *nohidden = "{\"model_type\":\"qwen3\",\"vocab_size\":10}";
    EXPECT(config_from_json_text(nohidden, strlen(nohidden), &c, err, sizeof err) && strstr(err, "hidden_size"),
           "missing hidden_size refused: %s", err);
    EXPECT(config_load("7B", &c, err, sizeof err) && strstr(err, "neither"), "unknown size refused: %s", err);
    /* the official sizes: parameter counts of the published models */
    struct { const char *name; double billions; } sz[] = {{"0.6B", 0.596}, {"1.7B", 1.721}, {"4B", 4.022},
                                                         {"8B", 8.191}, {"14B", 14.768}, {"32B", 32.762}};
    for (int i = 0; i < 6; i++) {
        EXPECT(!config_from_name(sz[i].name, &c), "size %s known", sz[i].name);
        double b = (double)config_total_params(&c) / 1e9;
        EXPECT(fabs(b - sz[i].billions) < 0.005, "%s: %.3fB params, published %.3fB", sz[i].name, b, sz[i].billions);
    }
    config_from_name("32B", &c);
    EXPECT(c.heads * c.head_dim == 8192 && c.hidden == 5120, "32B: heads x head_dim 8192 != hidden 5120");
    /* golden configs parse, and a written config.json reads back the same */
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", root, GOLDEN[2]);
    EXPECT(!config_load(dir, &c, err, sizeof err) && c.yarn && c.yarn_factor == 4 && c.yarn_original_max == 32,
           "golden yarn config: %s", err);
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    Qwen3Config back;
    EXPECT(!config_write_json(&c, path, "bfloat16") && !config_from_file(path, &back, err, sizeof err) &&
               back.yarn == c.yarn && back.yarn_factor == c.yarn_factor && back.hidden == c.hidden &&
               back.head_dim == c.head_dim && back.tied == c.tied && back.rope_theta == c.rope_theta,
           "config.json write/read round trip: %s", err);
    /* the MoE golden config and the 30B-A3B size (30.5B parameters, 3.3B active per token: the layers' 2.73B,
     * lm_head's and the embedding's 0.31B each) */
    snprintf(dir, sizeof dir, "%s/%s", root, GOLDEN[3]);
    EXPECT(!config_load(dir, &c, err, sizeof err) && c.experts == 8 && c.top_k == 2 && c.moe_intermediate == 48 &&
           c.norm_topk && c.aux_loss && c.aux_coef == 0.05, "golden MoE config: %s", err);
    EXPECT(!config_write_json(&c, path, "bfloat16") && !config_from_file(path, &back, err, sizeof err) &&
               back.experts == c.experts && back.top_k == c.top_k && back.moe_intermediate == c.moe_intermediate &&
               back.norm_topk == c.norm_topk && back.aux_loss == c.aux_loss && back.aux_coef == c.aux_coef,
           "MoE config.json write/read round trip: %s", err);
    EXPECT(!config_from_name("30B-A3B", &c) && fabs((double)config_total_params(&c) / 1e9 - 30.532) < 0.005 &&
           fabs((double)(config_matmul_params(&c) + c.hidden * c.vocab) / 1e9 - 3.35) < 0.005,
           "30B-A3B: %.3fB params (published 30.5B), %.3fB active with the embedding (published 3.3B)",
           (double)config_total_params(&c) / 1e9, (double)(config_matmul_params(&c) + c.hidden * c.vocab) / 1e9);
}

/* ------------------------------------------------------------------ RoPE / YaRN */
/* YaRN inv_freq and attention factor against transformers' own values (tests/golden/yarn_inv_freq.h,
 * made by tests/make_yarn_golden.py): every element, by range -- extrapolated (left alone), blended
 * by the ramp, interpolated (divided by the factor) -- so a ramp end off by one (floor/ceil) or a
 * wrong blend fails in the range it breaks. */
#include "golden/yarn_inv_freq.h"
/* inv_freq: 4 fp32 ulps (2^-21 = 4.8e-7 relative), not 1e-12: both sides give fp32 values, but
 * transformers rounds every step in fp32 tensors (base ** (2i/d), 1 / that, the ramp, 1 - ramp, two
 * products and a sum), while rope_inv_freq evaluates the same formula in fp64 and rounds once.
 * Measured (transformers 5.24.0): at most 1 ulp (1.2e-7) outside the ramp, 2.2 ulps (2.7e-7) in
 * the blend. What this must catch is 5 orders above: a ramp end off by one moves the blended
 * elements by >= 1/16 of the extrapolated-to-interpolated gap (several %). */
#define YARN_INV_FREQ_TOL 0x1p-21
/* attention factor: fp64 on both sides (Python floats), the same formula: 1e-12 */
#define YARN_AF_TOL 1e-12

static void test_yarn(void) {
    Qwen3Config c;
    config_from_name("8B", &c);
    double plain[256], yarn[256], af;
    rope_inv_freq(&c, plain, &af);
    EXPECT(af == 1.0 && fabs(plain[0] - 1.0) < 1e-12 && fabs(plain[1] - pow(1e6, -2.0 / 128)) < 1e-7,
           "default inv_freq");
    const int ncases = (int)(sizeof YARN_GOLDEN / sizeof YARN_GOLDEN[0]);
    for (int k = 0; k < ncases; k++) {
        const YarnGolden *y = &YARN_GOLDEN[k];
        char err[512] = "";
        const int rc = config_from_json_text(y->config_json, strlen(y->config_json), &c, err, sizeof err);
        EXPECT(!rc && c.yarn && c.head_dim == y->head_dim, "yarn case %s: config parses: %s", y->name, err);
        if (rc) continue;
        rope_inv_freq(&c, yarn, &af);
        const double eaf = fabs(af - y->attention_factor) / y->attention_factor;
        EXPECT_LE(eaf, YARN_AF_TOL, "yarn %s: attention factor %.17g vs transformers %.17g (rel %.2e)", y->name, af,
                  y->attention_factor, eaf);
        const int half = y->head_dim / 2, ends[3] = {y->n_extrapolated, y->n_extrapolated + y->n_blended, half};
        const char *range[3] = {"extrapolated", "blended", "interpolated"};
        char line[512];
        int at = snprintf(line, sizeof line, "  yarn %-26s attention factor %.6f (rel %.1e)", y->name, af, eaf);
        for (int r = 0, i0 = 0; r < 3; i0 = ends[r++]) {
            double worst = 0;
            int wi = -1;
            for (int i = i0; i < ends[r]; i++) {
                const double e = fabs(yarn[i] - y->inv_freq[i]) / y->inv_freq[i];
                if (!(e <= worst)) { worst = e; wi = i; }
            }
            EXPECT_LE(worst, YARN_INV_FREQ_TOL, "yarn %s: %s inv_freq[%d..%d): worst rel err %.2e at %d (%.17g vs "
                      "transformers %.17g)", y->name, range[r], i0, ends[r], worst, wi, wi >= 0 ? yarn[wi] : 0.0,
                      wi >= 0 ? y->inv_freq[wi] : 0.0);
            at += snprintf(line + at, sizeof line - (size_t)at, ", %s [%d,%d) %.1e", range[r], i0, ends[r], worst);
        }
        printf("%s\n", line);
        if (k == 0) /* Qwen3's setting: all three ranges are there (24 extrapolated, 16 blended, 24 interpolated) */
            EXPECT(y->n_extrapolated == 24 && y->n_blended == 16, "qwen3 yarn ranges: %d extrapolated, %d blended",
                   y->n_extrapolated, y->n_blended);
    }
    printf("  (yarn values from transformers %s, tests/golden/yarn_inv_freq.h)\n", YARN_GOLDEN_TRANSFORMERS);
    config_from_name("8B", &c);
    config_set_yarn(&c, 32, 32768);
    rope_inv_freq(&c, yarn, &af);
    EXPECT(fabs(af - YARN_GOLDEN[0].attention_factor) < 1e-12 && fabs(yarn[30] - YARN_GOLDEN[0].inv_freq[30]) <=
           YARN_INV_FREQ_TOL * YARN_GOLDEN[0].inv_freq[30], "--yarn-factor 32 --yarn-original 32768 on 8B is the qwen3 case");
    float cs[64], sn[64];
    int64_t pos = 1000;
    rope_tables(&c, &pos, 1, cs, sn);
    EXPECT(fabs(cs[0] - (float)(cos((double)(float)(1000.0f * (float)yarn[0])) * af)) < 1e-6, "rope table at pos 1000");
}

/* ------------------------------------------------------------------ token files */
static void test_tokens(void) {
    char path[512], err[512];
    uint32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = (uint32_t)(i * 37 % 1000);
    snprintf(path, sizeof path, "%s/t.tok", tmpdir);
    EXPECT(!tokens_write(path, ids, 100, err, sizeof err), "token write: %s", err);
    TokenFile tf;
    int rc = tokens_open(path, 1000, &tf, err, sizeof err);
    EXPECT(!rc && tf.count == 100 && !memcmp(tf.ids, ids, sizeof ids), "token round trip: %s", err);
    if (!rc) {
        Loader ld0, ld1;
        EXPECT(!loader_init(&ld0, &tf, 10, 2, 0, err, sizeof err) && !loader_init(&ld1, &tf, 10, 2, 1, err, sizeof err),
               "loader init");
        uint32_t w0[11], w1[11];
        int64_t e0 = loader_window(&ld0, 0, w0), e1 = loader_window(&ld1, 0, w1);
        EXPECT(e0 == 0 && e1 == 0 && w0[0] == ids[0] && w1[0] == ids[10] && w0[10] == ids[10],
               "ranks read disjoint windows of S+1 (shared boundary token is the label)");
        /* 99/10 = 9 windows per epoch; step 4 rank 1 is window 9 -> epoch 1, window 0 */
        int64_t e = loader_window(&ld1, 4, w1);
        EXPECT(e == 1 && w1[0] == ids[0], "wrap-around starts epoch 1 (got epoch %lld)", (long long)e);
        EXPECT(loader_init(&ld0, &tf, 100, 1, 0, err, sizeof err) && strstr(err, "seq + 1"),
               "S+1 beyond the file refused: %s", err);
        printf("  tokens %-30s -> %s\n", "--seq 100 on 100 tokens", err);
        EXPECT(loader_init(&ld0, &tf, 60, 2, 0, err, sizeof err) && strstr(err, "disjoint"),
               "too few windows for the ranks refused: %s", err);
        tokens_close(&tf);
    }
    EXPECT(tokens_open(path, 500, &tf, err, sizeof err) && strstr(err, ">= vocab"), "id >= vocab refused: %s", err);
    printf("  tokens %-30s -> %s\n", "id >= vocab", err);
    /* wrong magic and truncation */
    FILE *f = fopen(path, "r+b");
    fwrite("NOTTOKEN", 1, 8, f);
    fclose(f);
    EXPECT(tokens_open(path, 1000, &tf, err, sizeof err) && strstr(err, "magic"), "wrong magic refused: %s", err);
    printf("  tokens %-30s -> %s\n", "wrong magic", err);
    tokens_write(path, ids, 100, err, sizeof err);
    EXPECT(truncate(path, 24 + 4 * 50) == 0, "truncate");
    EXPECT(tokens_open(path, 1000, &tf, err, sizeof err) && strstr(err, "truncated"), "truncated file refused: %s", err);
    printf("  tokens %-30s -> %s\n", "truncated", err);
    EXPECT(truncate(path, 10) == 0, "truncate");
    EXPECT(tokens_open(path, 1000, &tf, err, sizeof err) && strstr(err, "header"), "10-byte file refused: %s", err);
    EXPECT(tokens_open("/nonexistent.tok", 1000, &tf, err, sizeof err), "missing file refused");
    /* version 2: a loss weight per token */
    uint8_t wt[100];
    for (int i = 0; i < 100; i++) wt[i] = i % 10 >= 4; /* 4-token prompts, 6-token completions */
    EXPECT(!tokens_write_weighted(path, ids, wt, 100, err, sizeof err), "weighted token write: %s", err);
    EXPECT(tokens_open(path, 1000, &tf, err, sizeof err) && strstr(err, "loss weights"),
           "a trainer's reader refuses a weighted file, naming why: %s", err);
    printf("  tokens %-30s -> %s\n", "weighted, to a stage", err);
    rc = tokens_open_file(path, 1000, 1, &tf, err, sizeof err);
    EXPECT(!rc && tf.count == 100 && tf.weights && !memcmp(tf.weights, wt, 100) && !memcmp(tf.ids, ids, sizeof ids) &&
               tf.counted == 60,
           "weighted round trip: ids, weights, 60 labels count (%s)", err);
    if (!rc) {
        Loader ld;
        uint8_t w[11];
        EXPECT(!loader_init(&ld, &tf, 10, 1, 0, err, sizeof err), "loader init");
        const int64_t n = loader_weights(&ld, 3, w); /* window 3: tokens 30..40 */
        EXPECT(n == 6 && w[0] == wt[30] && w[10] == wt[40] && !w[3] && w[4], "a window's weights and its 6 labels (got %lld)",
               (long long)n);
        tokens_close(&tf);
    }
    /* versions 3 and 4: the tokenizer's tag after the header; a model of the other kind refuses it */
    EXPECT(!tokens_write_tagged(path, ids, wt, 100, "qwen3", err, sizeof err), "tagged write: %s", err);
    rc = tokens_open_file(path, 1000, 1, &tf, err, sizeof err);
    EXPECT(!rc && !strcmp(tf.tokenizer, "qwen3") && !memcmp(tf.ids, ids, sizeof ids) && !memcmp(tf.weights, wt, 100),
           "tagged round trip: the tag, ids and weights (%s)", err);
    if (!rc) {
        EXPECT(!tokens_check_tokenizer(&tf, 1, "0.6B", err, sizeof err), "Qwen3's ids for a Qwen3 model");
        EXPECT(tokens_check_tokenizer(&tf, 0, "Qwen3.5-9B", err, sizeof err) && strstr(err, "Qwen3 tokenizer"),
               "Qwen3's ids for a Qwen3.5 model refused, naming the tokenizer: %s", err);
        printf("  tokens %-30s -> %s\n", "Qwen3's ids, a Qwen3.5 model", err);
        tokens_close(&tf);
    }
    EXPECT(tokens_open(path, 1000, &tf, err, sizeof err) && strstr(err, "loss weights"),
           "a tagged file with weights (version 4) refused by a reader of ids alone: %s", err);
    EXPECT(!tokens_write_tagged(path, ids, NULL, 100, "eot=248044,vocab=248077", err, sizeof err), "tagged write");
    rc = tokens_open_file(path, 1000, 1, &tf, err, sizeof err);
    EXPECT(!rc && tokens_check_tokenizer(&tf, 1, "0.6B", err, sizeof err) && !tokens_check_tokenizer(&tf, 0, "9B", err,
                                                                                                    sizeof err),
           "another tokenizer's ids: refused by a Qwen3 model, taken by a Qwen3.5 one");
    if (!rc) tokens_close(&tf);
    /* --packing alone takes the end of text the tag names; past the model's vocabulary it is refused */
    EXPECT(tokens_tag_vocab("eot=248044,vocab=248077") == 248077 && tokens_tag_vocab("qwen3") == -1,
           "a tag's vocabulary (the ids a model must embed)");
    EXPECT(tokens_file_eot(path) == 248044 && tokens_tag_eot("qwen3") == -1 &&
           docs_eot_option("", 248320, 0, path, err, sizeof err) == 248044 &&
           docs_eot_option("", 151936, 1, path, err, sizeof err) == -2 && strstr(err, "past this model's vocabulary") &&
           docs_eot_option("", 248320, 0, NULL, err, sizeof err) == -2 && docs_eot_option("", 151936, 1, NULL, err, sizeof err) ==
           TOKEN_ENDOFTEXT && docs_eot_option("12", 248320, 0, path, err, sizeof err) == 12,
           "--packing alone: a tagged file's end of text (248044), Qwen3's without a tag, a given id as given");
    EXPECT(tokens_write_tagged(path, ids, NULL, 100, "a tag of more than thirty-two bytes!", err, sizeof err),
           "a tag past 32 bytes refused");
    { /* a tag that is not printable, and a tagged file cut inside its tag: refused, saying which */
        EXPECT(!tokens_write_tagged(path, ids, NULL, 100, "qwen3", err, sizeof err), "tagged write");
        FILE *f = fopen(path, "r+b");
        if (f) { fseek(f, TOKENS_HEADER_BYTES + 1, SEEK_SET); fputc(7, f); fclose(f); }
        EXPECT(tokens_open_file(path, 1000, 1, &tf, err, sizeof err) && strstr(err, "not printable"),
               "a tag with a control byte refused: %s", err);
        f = fopen(path, "wb");
        uint8_t h[TOKENS_HEADER_BYTES + 10] = "LCTOKENS";
        h[8] = 3, h[12] = 4; /* version 3, width 4, 0 tokens, and 10 of the tag's 32 bytes */
        if (f) { fwrite(h, 1, sizeof h, f); fclose(f); }
        EXPECT(tokens_open_file(path, 1000, 1, &tf, err, sizeof err) && strstr(err, "truncated"),
               "a file cut inside its tag refused: %s", err);
        printf("  tokens %-30s -> %s\n", "cut inside its tag", err);
    }
    /* the step's denominator: every data-parallel rank's window, read by any one rank */
    for (int i = 0; i < 100; i++) wt[i] = (i * 7 + i / 13) % 5 < 2;
    tokens_write_weighted(path, ids, wt, 100, err, sizeof err);
    if (!tokens_open_file(path, 1000, 1, &tf, err, sizeof err)) {
        Loader ld[3];
        uint8_t w[11];
        int same = 1;
        for (int r = 0; r < 3; r++) loader_init(&ld[r], &tf, 10, 3, r, err, sizeof err);
        for (int64_t step = 0; step < 5; step++) { /* 3 ranks x 5 steps: 15 windows of 9 per epoch, wraps */
            int64_t want = 0;
            for (int r = 0; r < 3; r++) want += loader_weights(&ld[r], step, w);
            for (int r = 0; r < 3; r++) same &= loader_counted_job(&ld[r], step) == want;
            if (step == 1) printf("  loader_counted_job step 1, 3 ranks: %lld labels\n", (long long)want);
        }
        EXPECT(same, "every rank counts the step's labels over all 3 ranks' windows (5 steps, across an epoch)");
        /* the ranks' agreement digest: equal for the same file, not for one weight moved (same counts) */
        const int64_t d0 = tokens_digest(&tf);
        int moved = -1;
        for (int i = 0; i + 1 < 100 && moved < 0; i++) if (tf.weights[i] != tf.weights[i + 1]) moved = i;
        uint8_t t = tf.weights[moved];
        tf.weights[moved] = tf.weights[moved + 1];
        tf.weights[moved + 1] = t;
        const int64_t d1 = tokens_digest(&tf);
        tf.weights[moved + 1] = tf.weights[moved];
        tf.weights[moved] = t; /* swapped back */
        EXPECT(d0 == tokens_digest(&tf) && d0 != d1 && d0 >= 0 && d0 < (1ll << 52),
               "tokens_digest: the same file the same, 52 bits, changed by two weights swapped (counts unchanged)");
        /* packed, the end-of-text tokens decide which labels count: the loader's digest sees one moved */
        Loader pk = ld[0];
        EXPECT(loader_digest(&pk) == d0, "loader_digest unpacked is tokens_digest");
        const uint32_t eot = tf.ids[10];
        loader_pack(&pk, eot);
        const int64_t p0 = loader_digest(&pk);
        int at = -1;
        for (int i = 11; i < 100 && at < 0; i++) if (tf.ids[i] != eot && tf.ids[i - 1] != eot) at = i;
        const uint32_t keep = tf.ids[at];
        tf.ids[at] = eot; /* one more document boundary, weights untouched */
        const int64_t p1 = loader_digest(&pk);
        tf.ids[at] = keep;
        EXPECT(p0 != d0 && p1 != p0 && p0 == loader_digest(&pk) && p1 >= 0 && p1 < (1ll << 52),
               "loader_digest packed: differs from the unpacked one and changes with one end-of-text token added");
        tokens_close(&tf);
    }
    EXPECT(truncate(path, 24 + 4 * 100 + 50) == 0, "truncate");
    EXPECT(tokens_open_file(path, 1000, 1, &tf, err, sizeof err) && strstr(err, "truncated"),
           "a weighted file missing weights is refused: %s", err);
    wt[7] = 2;
    tokens_write_weighted(path, ids, wt, 100, err, sizeof err);
    EXPECT(tokens_open_file(path, 1000, 1, &tf, err, sizeof err) && strstr(err, "weight 2"), "a weight of 2 is refused: %s",
           err);
    tokens_write(path, ids, 100, err, sizeof err);
    rc = tokens_open_file(path, 1000, 1, &tf, err, sizeof err);
    if (!rc) {
        Loader ld;
        uint8_t w[11];
        loader_init(&ld, &tf, 10, 1, 0, err, sizeof err);
        EXPECT(!tf.weights && tf.counted == 100 && loader_weights(&ld, 0, w) == 10 && w[0] == 1 && w[10] == 1,
               "a version-1 file: every label counts");
        tokens_close(&tf);
    }
}

/* ------------------------------------------------------------------ CLI */
static void test_cli(void) {
    int64_t seq = 4096;
    double lr = 1e-4;
    const char *model = "0.6B";
    int flag = 0;
    Opt opts[] = {{"--seq", OPT_INT, &seq, "tokens", "[2,4G]"}, {"--lr", OPT_DOUBLE, &lr, "lr", "(0,1]"},
                  {"--model", OPT_STRING, &model, "m"}, {"--keep-attn", OPT_FLAG, &flag, "k"}};
    char err[256];
    char *a1[] = {"x", "--seq", "1M", "--lr=3e-4", "--model", "8B", "--keep-attn"};
    EXPECT(!cli_parse(7, a1, opts, 4, err, sizeof err) && seq == 1048576 && lr == 3e-4 && !strcmp(model, "8B") && flag,
           "options parse: %s", err);
    char *a2[] = {"x", "--sqe", "5"};
    EXPECT(cli_parse(3, a2, opts, 4, err, sizeof err) == -1 && strstr(err, "unknown"), "unknown option: %s", err);
    char *a3[] = {"x", "--seq", "12x"};
    EXPECT(cli_parse(3, a3, opts, 4, err, sizeof err) == -1 && strstr(err, "integer"), "bad integer: %s", err);
    char *a4[] = {"x", "--seq"};
    EXPECT(cli_parse(2, a4, opts, 4, err, sizeof err) == -1 && strstr(err, "needs a value"), "missing value: %s", err);
    char *a5[] = {"x", "--help"};
    EXPECT(cli_parse(2, a5, opts, 4, err, sizeof err) == 1, "--help");
    /* an optional word takes a negative number (for the option to refuse by name), not another option */
    const char *pk = NULL;
    Opt po[] = {{"--packing", OPT_OPTSTR, &pk, "p"}, {"--seq", OPT_INT, &seq, "tokens", "[2,4G]"}};
    char *p1[] = {"x", "--packing", "-1"}, *p2[] = {"x", "--packing", "--seq", "8"}, *p3[] = {"x", "--packing"};
    EXPECT(!cli_parse(3, p1, po, 2, err, sizeof err) && pk && !strcmp(pk, "-1"), "--packing -1 takes -1: %s", err);
    EXPECT(!cli_parse(4, p2, po, 2, err, sizeof err) && pk && !pk[0] && seq == 8, "--packing --seq 8: alone: %s", err);
    EXPECT(!cli_parse(2, p3, po, 2, err, sizeof err) && pk && !pk[0], "--packing last: alone: %s", err);
    /* the options' digest: values, not spellings or order; a node's own options left out */
    const char *nr = NULL, *lg = NULL;
    int64_t node = -1;
    Opt jo[] = {{"--seq", OPT_INT, &seq, "t", "[2,4G]"}, {"--model", OPT_STRING, &model, "m"},
                {"--node-rank", OPT_INT, &node, "n", "[-1,64K)"}, {"--log", OPT_STRING, &lg, "l"},
                {"--packing", OPT_OPTSTR, &nr, "p"}, {"--keep-attn", OPT_FLAG, &flag, "k"}};
    int64_t dg[8];
    char *j0[] = {"x", "--seq", "16K", "--model", "8B"}, *j1[] = {"x", "--model", "8B", "--seq=16384"},
         *j2[] = {"x", "--seq", "16K", "--model", "8B", "--node-rank", "1", "--log", "n1.jsonl"},
         *j3[] = {"x", "--seq", "32K", "--model", "8B"}, *j4[] = {"x", "--seq", "16K", "--model", "4B"},
         *j5[] = {"x", "--seq", "16K", "--model", "8B", "--packing"}, *j6[] = {"x", "--seq", "16K", "--model", "8B", "--keep-attn"};
    char **js[] = {j0, j1, j2, j3, j4, j5, j6};
    const int jn[] = {5, 4, 9, 5, 5, 6, 6};
    for (int k = 0; k < 7; k++) {
        seq = 4096, model = "0.6B", node = -1, lg = NULL, nr = NULL, flag = 0; /* each parse from the defaults */
        EXPECT(!cli_parse(jn[k], js[k], jo, 6, err, sizeof err), "digest case %d parses: %s", k, err);
        dg[k] = cli_options_digest();
    }
    EXPECT(dg[0] == dg[1] && dg[0] == dg[2], "--seq 16K = --seq=16384 in any order; --node-rank and --log are a node's own");
    EXPECT(dg[3] != dg[0] && dg[4] != dg[0] && dg[5] != dg[0] && dg[6] != dg[0] && dg[0] >= 0 && dg[0] < (1ll << 52),
           "another --seq, --model, --packing or flag: another digest (52 bits)");
}

/* ------------------------------------------------------------------ a save's record of its run */
/* a trainer_state file holding one tensor and the metadata a save of this run writes */
static int write_state(const char *path, const SaveMeta *m) {
    static const float x[4] = {1, 2, 3, 4};
    const StWrite w = {"master.x", ST_F32, 1, {4}, x};
    char err[4096];
    char *meta = inputs_save_meta_json(m);
    const int rc = st_write(path, &w, 1, meta, err, sizeof err);
    if (rc) printf("  %s\n", err);
    free(meta);
    return rc;
}

/* Whatever --data was -- quotes, backslashes, newlines, every control byte, UTF-8, 4000 bytes -- the
 * save's metadata is JSON that reads back (the safetensors header, then the path itself), and
 * --resume of it with the same run compares equal. Its metadata was once printf'd into 1200 bytes:
 * a '"' gave a header no reader takes ("bad header"), a long path a truncated one. */
static void test_save_meta(void) {
    char path[1200], err[4096], note[4096];
    snprintf(path, sizeof path, "%s/trainer_state.safetensors", tmpdir);
    char ctl[40], big[4001], bad[16];
    for (int k = 1; k < 32; k++) ctl[k - 1] = (char)k;
    snprintf(ctl + 31, sizeof ctl - 31, "\x7f.tok");
    for (int k = 0; k < 4000; k++) big[k] = "abc/\"\\\n"[k % 7];
    big[4000] = 0;
    const char *hostile[] = {"data/books.tok", "a \"quoted\" name.tok", "back\\slash\\", "new\nline\r\t.tok", ctl,
                             "d\xc3\xa9j\xc3\xa0 \xe6\x96\x87\xe5\xad\x97 \xf0\x9f\x93\x9a.tok", big, "", "}\",\"step\":\"9"};
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++) {
        const SaveMeta m = {.step = 7, .seq = 16384, .data = hostile[i], .data_tokens = 1270101,
                            .data_digest = (1ll << 52) - 3, .eot = -1, .model = hostile[i], .layers = 28,
                            .yarn_factor = 4, .yarn_original = 32768, .model_digest = 12345};
        SafeTensors st;
        int64_t step = -1;
        const int ok = !write_state(path, &m) && !st_open(path, &st, err, sizeof err);
        const char *got = ok ? st_meta(&st, "data") : NULL, *model = ok ? st_meta(&st, "model") : NULL;
        EXPECT(ok && got && !strcmp(got, hostile[i]) && model && !strcmp(model, hostile[i]) &&
                   !inputs_state_step(&st, 100, &step, err, sizeof err) && step == 7 &&
                   !inputs_resume_compare(&st, &m, 0, "DIR", note, sizeof note, err, sizeof err) && !note[0],
               "--data of %zu bytes (case %zu) round-trips through the save's metadata and compares equal: %s", strlen(hostile[i]), i,
               ok ? err : err);
        if (ok) st_close(&st);
    }
    /* bytes that are not UTF-8: JSON cannot hold them; written as U+FFFD, the rest intact */
    snprintf(bad, sizeof bad, "a\xff" "b\xc3(");
    const SaveMeta mb = {.step = 1, .data = bad, .model = "m", .eot = -1};
    SafeTensors st;
    EXPECT(!write_state(path, &mb) && !st_open(path, &st, err, sizeof err) && st_meta(&st, "data") &&
               !strcmp(st_meta(&st, "data"), "a\xef\xbf\xbd" "b\xef\xbf\xbd("),
           "bytes that are not UTF-8 are written as U+FFFD: %s", err);
    st_close(&st);

    /* --resume compares seq, data, packing and the model, each by name, each allowed by its bit */
    const SaveMeta was = {.step = 5, .seq = 16384, .data = "a.tok", .data_tokens = 1000, .data_digest = 77, .eot = -1,
                          .model = "0.6B", .layers = 28, .model_digest = 99};
    EXPECT(!write_state(path, &was) && !st_open(path, &st, err, sizeof err), "a save to compare: %s", err);
    SaveMeta now = was;
    now.seq = 32768;
    EXPECT(inputs_resume_compare(&st, &now, 0, "CK", note, sizeof note, err, sizeof err) &&
               strstr(err, "--resume CK: saved with --seq 16384, this run has --seq 32768") &&
               strstr(err, "--resume-changes seq") && !strchr(err, '\n'),
           "another --seq is refused by name: %s", err);
    EXPECT(!inputs_resume_compare(&st, &now, RESUME_SEQ, "CK", note, sizeof note, err, sizeof err) &&
               strstr(note, "saved with --seq 16384") && strstr(note, "allowed by --resume-changes"),
           "... and allowed by --resume-changes seq, with a note: %s", note);
    now = was, now.data_digest = 78;
    EXPECT(inputs_resume_compare(&st, &now, RESUME_SEQ | RESUME_PACKING | RESUME_MODEL, "CK", note, sizeof note, err, sizeof err) &&
               strstr(err, "--data a.tok has changed since the save") && strstr(err, "--resume-changes data"),
           "the same --data path with other tokens is refused: %s", err);
    now.data = "b.tok", now.data_tokens = 2000;
    EXPECT(inputs_resume_compare(&st, &now, 0, "CK", note, sizeof note, err, sizeof err) &&
               strstr(err, "saved with --data a.tok (1000 tokens), this run has --data b.tok (2000 tokens"),
           "another --data is refused, both named: %s", err);
    now = was, now.data = "elsewhere/a.tok";
    EXPECT(!inputs_resume_compare(&st, &now, 0, "CK", note, sizeof note, err, sizeof err),
           "the same tokens under another path are the same data: %s", err);
    now = was, now.eot = 151643;
    EXPECT(inputs_resume_compare(&st, &now, 0, "CK", note, sizeof note, err, sizeof err) &&
               strstr(err, "saved with --packing none, this run has --packing 151643") && strstr(err, "--resume-changes packing"),
           "another --packing is refused: %s", err);
    now = was, now.layers = 2, now.model_digest = 98;
    EXPECT(inputs_resume_compare(&st, &now, 0, "CK", note, sizeof note, err, sizeof err) &&
               strstr(err, "saved with 28 layers of 0.6B, this run has 2 (--layers)") && strstr(err, "--resume-changes model"),
           "another --layers is refused: %s", err);
    now = was, now.yarn_factor = 4, now.yarn_original = 32768, now.model_digest = 97;
    EXPECT(inputs_resume_compare(&st, &now, 0, "CK", note, sizeof note, err, sizeof err) &&
               strstr(err, "saved with no YaRN, this run has YaRN x4 from 32768"),
           "another YaRN is refused: %s", err);
    now = was, now.seq = 8, now.eot = 7, now.model_digest = 1;
    EXPECT(inputs_resume_compare(&st, &now, RESUME_PACKING, "CK", note, sizeof note, err, sizeof err) &&
               strstr(err, "--seq 8") && !strstr(err, "--packing 7") && strstr(note, "--packing 7") &&
               strstr(err, "--resume-changes seq,model"),
           "several differences: the refused ones named together, the allowed one noted: %s | %s", err, note);
    st_close(&st);
    /* a save of the older kind records only its step: nothing else to compare, said in a note */
    const StWrite w = {"master.x", ST_F32, 1, {1}, (const float[]){0}};
    EXPECT(!st_write(path, &w, 1, "{\"step\":\"3\",\"seq\":\"64\"}", err, sizeof err) && !st_open(path, &st, err, sizeof err) &&
               !inputs_resume_compare(&st, &now, 0, "CK", note, sizeof note, err, sizeof err) && strstr(note, "an older save"),
           "an older save is not compared: %s", note);
    st_close(&st);
    /* a token file's content digest: every id and weight, not where the file is */
    TokenFile a = {.count = 5, .ids = (uint32_t[]){1, 2, 3, 4, 5}}, b = a;
    b.ids = (uint32_t[]){1, 2, 3, 4, 6};
    const int64_t da = tokens_content_digest(&a);
    uint8_t wts[5] = {1, 1, 1, 1, 1};
    TokenFile c = a;
    c.weights = wts;
    EXPECT(da == tokens_content_digest(&a) && da != tokens_content_digest(&b) && da != tokens_content_digest(&c) &&
               da >= 0 && da < (1ll << 52),
           "the data digest is the ids' and the weights' (52 bits)");
}

/* ------------------------------------------------------------------ where a refusal points */
static void test_messages(void) {
    JsonValue v;
    char err[512];
    const char *cfg = "{\n  \"model_type\": \"qwen3\",\n  \"rope_scaling\": {\"factor\": 4x},\n  \"vocab_size\": 8\n}";
    EXPECT(json_parse(cfg, strlen(cfg), &v, err, sizeof err) &&
               strstr(err, "at line 3, column 31 (byte 57), in \"rope_scaling\".\"factor\""),
           "a JSON refusal says line, column and the member it is in: %s", err);
    const char *arr = "{\"layer_types\": [\"a\", \"b\", 7x]}";
    EXPECT(json_parse(arr, strlen(arr), &v, err, sizeof err) && strstr(err, "in \"layer_types\"[2]"),
           "... or the element of an array: %s", err);
    /* config.json's refusals name the file */
    char dir[1024], file[1100];
    snprintf(dir, sizeof dir, "%s/cfg_syntax", tmpdir);
    mkdir(dir, 0755);
    snprintf(file, sizeof file, "%s/config.json", dir);
    FILE *f = fopen(file, "w");
    fputs(cfg, f);
    fclose(f);
    Qwen3Config c;
    EXPECT(config_load(dir, &c, err, sizeof err) && strstr(err, file) && strstr(err, ": JSON: ") &&
               strstr(err, "line 3, column 31"),
           "a config.json that is not JSON: the file, line and column: %s", err);
    f = fopen(file, "w");
    fputs("{\"model_type\": \"qwen3\", \"vocab_size\": 0}", f);
    fclose(f);
    EXPECT(config_load(dir, &c, err, sizeof err) && !strncmp(err, file, strlen(file)) && strstr(err, "vocab_size"),
           "a field past its bounds: the file and the field: %s", err);
    /* long names: head ... tail, cut on UTF-8 characters, the rest of a message kept */
    char name[5001];
    for (int k = 0; k < 5000; k++) name[k] = k < 2500 ? 'a' : 'b';
    name[5000] = 0;
    const char *sh = short_name(name);
    EXPECT(strlen(sh) <= NAME_SHOWN && strstr(sh, "a...b") && sh[0] == 'a' && sh[strlen(sh) - 1] == 'b',
           "a 5000-byte name is shown as its head and tail (%zu bytes)", strlen(sh));
    EXPECT(short_name("short") && !strcmp(short_name("short"), "short"), "a short name is itself");
    char u[400] = "", out[40];
    for (int k = 0; k < 100; k++) strcat(u, "\xc3\xa9"); /* e-acute, 2 bytes each */
    shorten_into(out, sizeof out, u, strlen(u));
    int whole = 1;
    for (size_t k = 0; out[k]; k++)
        if (out[k] == '.') continue;
        else if ((unsigned char)out[k] == 0xc3) whole &= (unsigned char)out[k + 1] == 0xa9, k++;
        else whole = 0;
    EXPECT(whole && strlen(out) < sizeof out, "a name is cut between characters, never inside one: %s", out);
    TokenFile tf;
    char longpath[5100];
    snprintf(longpath, sizeof longpath, "/tmp/%s", name);
    EXPECT(tokens_open_file(longpath, 100, 1, &tf, err, sizeof err) && strlen(err) < 400 && strstr(err, "too long"),
           "a 5000-byte path leaves the reason room: %s", err);
}

/* ------------------------------------------------------------------ training data with nothing to learn */
static void test_no_loss(void) {
    uint32_t ids[40];
    uint8_t w[40];
    for (int k = 0; k < 40; k++) ids[k] = 5, w[k] = 0;
    TokenFile tf = {.count = 40, .ids = ids, .weights = w, .counted = 0};
    Loader ld;
    char err[256];
    EXPECT(!loader_init(&ld, &tf, 8, 1, 0, err, sizeof err) && loader_first_counted(&ld, 0, 1000) == -1,
           "every weight 0: no step has a label that counts");
    w[30] = 1, tf.counted = 1; /* window 3 (tokens 24..32): label 6 */
    EXPECT(loader_first_counted(&ld, 0, 1000) == 3 && loader_first_counted(&ld, 0, 3) == -1 &&
               loader_first_counted(&ld, 4, 1000) == 7,
           "the first step that counts: 3; none in steps 0-2; 7 in the next epoch (4 windows)");
    TokenFile plain = {.count = 40, .ids = ids, .counted = 40};
    EXPECT(!loader_init(&ld, &plain, 8, 2, 0, err, sizeof err) && loader_first_counted(&ld, 0, 10) == 0,
           "without weights every label counts");
    loader_pack(&ld, 5);
    EXPECT(loader_first_counted(&ld, 0, 1000000) == -1, "--packing on a file of end-of-text tokens: none counts");
    ids[17] = 6;
    EXPECT(loader_first_counted(&ld, 0, 1000000) == 1, "one token that is not the end of text: its label counts");
}

/* ------------------------------------------------------------------ bounds on what is read */
/* Numbers nobody bounded once let a config of 2^62 plan 1.5 GiB and --seq 17179869185G wrap to 2^30:
 * the JSON reader, the option parser and the name lookup at their edges. */
static void test_bounds(void) {
    JsonValue v;
    char err[256];
    EXPECT(!json_parse("9223372036854775807", 19, &v, err, sizeof err) && v.is_integer && v.integer == INT64_MAX,
           "JSON: 2^63-1 is read exactly: %s", err);
    json_free(&v);
    EXPECT(!json_parse("-9223372036854775808", 20, &v, err, sizeof err) && v.integer == INT64_MIN,
           "JSON: -2^63 is read exactly: %s", err);
    json_free(&v);
    EXPECT(json_parse("9223372036854775808", 19, &v, err, sizeof err) && strstr(err, "outside int64's range"),
           "JSON: 2^63 is refused, not saturated: %s", err);
    EXPECT(json_parse("{\"a\": 1e400}", 12, &v, err, sizeof err) && strstr(err, "too large for a double"),
           "JSON: 1e400 (inf) is refused: %s", err);
    EXPECT(!json_parse("1e-400", 6, &v, err, sizeof err) && v.number == 0, "JSON: 1e-400 underflows to 0: %s", err);
    json_free(&v);

    int64_t n = 0;
    EXPECT(!cli_parse_int("8G", &n) && n == 8ll << 30, "8G is 2^33");
    EXPECT(cli_parse_int("17179869185G", &n), "17179869185G (past 2^63) is refused, not wrapped");
    EXPECT(cli_parse_int("9223372036854775808", &n), "2^63 is refused (strtoll's ERANGE)");
    int64_t x = 0;
    double d = 0;
    Opt o[] = {{"--x", OPT_INT, &x, "x", "[0,9007199254740992]"}, {"--d", OPT_DOUBLE, &d, "d", "(0,1)"}};
    char *a1[] = {"p", "--x", "9007199254740993"}; /* 2^53 + 1: equal to the bound as a double */
    EXPECT(cli_parse(3, a1, o, 2, err, sizeof err) == -1 && strstr(err, "outside"), "2^53+1 > 2^53 exactly: %s", err);
    char *a2[] = {"p", "--x", "9007199254740992"};
    EXPECT(!cli_parse(3, a2, o, 2, err, sizeof err) && x == 9007199254740992ll, "the bound itself is in: %s", err);
    const char *bad_d[] = {"nan", "inf", "-inf", "0", "1", "1e-400x", ""};
    for (size_t i = 0; i < sizeof bad_d / sizeof bad_d[0]; i++) {
        char *a[] = {"p", "--d", (char *)bad_d[i]};
        EXPECT(cli_parse(3, a, o, 2, err, sizeof err) == -1, "--d %s is refused (finite, in (0,1))", bad_d[i]);
    }
    /* a bound a double cannot hold, itself: 2^53 + 1 is in [0, 2^53 + 1] and 2^53 + 2 is not */
    Opt odd[] = {{"--x", OPT_INT, &x, "x", "[0,9007199254740993]"}};
    char *a4[] = {"p", "--x", "9007199254740993"}, *a5[] = {"p", "--x", "9007199254740994"};
    EXPECT(!cli_parse(3, a4, odd, 1, err, sizeof err) && x == 9007199254740993ll &&
               cli_parse(3, a5, odd, 1, err, sizeof err) == -1,
           "an integer bound of 2^53+1 is exact at both sides: %s", err);
    EXPECT(cli_parse_int(" 5", &n) && cli_parse_int("+5", &n) && !cli_parse_int("-5", &n) && n == -5,
           "integers: no leading space or +; a minus sign is read");
    char *a6[] = {"p", "--d", "0.5K"};
    EXPECT(cli_parse(3, a6, o, 2, err, sizeof err) == -1, "a double takes no K/M/G suffix: %s", err);
    char *a3[] = {"p", "--d=0.5", "--x", "7"};
    EXPECT(!cli_parse(4, a3, o, 2, err, sizeof err) && d == 0.5 && x == 7 && cli_given(4, a3, "--d") &&
               cli_given(4, a3, "--x") && !cli_given(4, a3, "--dd"),
           "values and cli_given: %s", err);

    Qwen3Config c;
    EXPECT(config_from_name("Qwen3", &c) && config_from_name("Qwen3-", &c) && config_from_name("", &c),
           "Qwen3, Qwen3- and \"\" are not sizes (and are read within their bytes)");
    EXPECT(!config_from_name("qwen3-0.6b", &c) && c.hidden == 1024 && !config_from_name("Qwen3-32B", &c) &&
               c.layers == 64 && !config_from_name("QWEN3-30B-A3B", &c) && c.experts == 128 &&
               !config_from_name("8b", &c) && c.hidden == 4096,
           "sizes by name in any case, with or without Qwen3-");

    char path[4096];
    snprintf(path, sizeof path, "%s/fifo", tmpdir);
    mkfifo(path, 0600);
    FILE *f = file_open_regular(path, "token file", err, sizeof err);
    EXPECT(!f && strstr(err, "a FIFO"), "a FIFO is refused without blocking: %s", err);
    f = file_open_regular(tmpdir, "config.json", err, sizeof err);
    EXPECT(!f && strstr(err, "a directory, where a config.json"), "a directory is refused: %s", err);
    TokenFile tf;
    EXPECT(tokens_open_file(tmpdir, 0, 1, &tf, err, sizeof err) && strstr(err, "a directory"),
           "a directory as a token file: %s", err);
    unlink(path);
}

/* ------------------------------------------------------------------ FSDP shard layout */
typedef struct {
    int64_t flat, numel;
    const ParamInfo *param;
} FlatPiece;
static int cmp_flat(const void *a, const void *b) {
    const FlatPiece *x = a, *y = b;
    return x->flat < y->flat ? -1 : x->flat > y->flat;
}

/* random init: the same model for any thread count, and normal(0, std) with norm weights 1 */
static void test_init(void) {
    Qwen3Config c;
    config_from_name("0.6B", &c);
    c.layers = 2;
    c.vocab = 4096; /* keeps the test fast; the layout is the real one */
    ParamTable t;
    params_build(&c, &t);
    float *a = xmalloc((size_t)t.total * 4), *b = xmalloc((size_t)t.total * 4);
    params_init_threads(&t, 0.02, 7, a, 1);
    params_init_threads(&t, 0.02, 7, b, 5);
    EXPECT(!memcmp(a, b, (size_t)t.total * 4), "init with 1 and 5 threads is identical");
    const ParamInfo *q = params_get(&t, P_Q, 1), *n = params_get(&t, P_IN_NORM, 0);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < q->numel; i++) { s1 += a[q->offset + i]; s2 += (double)a[q->offset + i] * a[q->offset + i]; }
    const double mean = s1 / q->numel, sd = sqrt(s2 / q->numel - mean * mean);
    EXPECT(fabs(mean) < 1e-4 && fabs(sd - 0.02) < 2e-4 && a[n->offset] == 1.0f && a[n->offset + n->numel - 1] == 1.0f,
           "init statistics: mean %.2e, std %.5f (want 0, 0.02), norms 1", mean, sd);
    /* a rank's piece (odd start and length) holds exactly the values of the whole-model init */
    const ParamInfo *up = params_get(&t, P_UP, 1);
    float *piece = xmalloc((size_t)up->numel * 4);
    params_init_piece(&t, up, 0.02, 7, 12345, up->numel - 12345 - 777, piece, 3);
    EXPECT(!memcmp(piece, a + up->offset + 12345, (size_t)(up->numel - 12345 - 777) * 4),
           "a piece's init (elements 12345.., 3 threads) equals the whole model's");
    params_init_piece(&t, n, 0.02, 7, 5, 9, piece, 1);
    EXPECT(piece[0] == 1.f && piece[8] == 1.f, "a norm weight's piece starts at 1");
    free(piece);
    params_init_threads(&t, 0.02, 8, b, 3);
    EXPECT(memcmp(a, b, (size_t)t.total * 4), "another seed, another model");
    free(a); free(b);
    params_free(&t);
}

static void test_shards(const char *root) {
    const char *models[] = {"0.6B", "8B", "32B", "golden"};
    for (int mi = 0; mi < 4; mi++) {
        Qwen3Config c;
        char err[512], dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", root, GOLDEN[1]);
        if (mi < 3) config_from_name(models[mi], &c);
        else config_load(dir, &c, err, sizeof err);
        if (mi < 3) c.layers = 3; /* the layout repeats per layer: three layers show it */
        ParamTable t;
        params_build(&c, &t);
        for (int P = 1; P <= 8; P *= 2) {
            ShardLayout s;
            shard_build(&t, P, &s);
            /* every element of every unit owned by exactly one rank, in rank order; pieces cover tensors */
            int64_t covered = 0, padding = 0, worst_imbalance = 0;
            int ok_units = s.nunits == c.layers + 2, ok_align = 1;
            for (int64_t i = 0; i < s.nunits; i++) {
                const ShardUnit *u = &s.u[i];
                ok_align &= u->shard % 64 == 0 && u->shard_offset % 64 == 0 && P * u->shard >= u->end - u->begin &&
                            (P - 1) * u->shard < u->end - u->begin + 64 * P;
                padding += P * u->shard - (u->end - u->begin);
                if (i > 0) ok_units &= u->begin == s.u[i - 1].end;
            }
            ok_units &= s.u[0].begin == 0 && s.u[s.nunits - 1].end == t.total;
            /* all pieces of all ranks, by flat position: they must tile every tensor exactly */
            int64_t npieces = 0, cap = 0, bad_elem0 = 0;
            FlatPiece *all = NULL;
            for (int r = 0; r < P; r++) {
                Piece *pc;
                int64_t np = shard_pieces(&s, &t, r, &pc);
                if (npieces + np > cap) { cap = 2 * (npieces + np); all = realloc(all, (size_t)cap * sizeof *all); }
                for (int64_t k = 0; k < np; k++) {
                    const ShardUnit *u = &s.u[shard_unit_of(&s, pc[k].param)];
                    /* flat position: unit begin + r*shard + (position within the rank's piece of the unit) */
                    all[npieces++] = (FlatPiece){u->begin + (int64_t)r * u->shard + (pc[k].at - u->shard_offset),
                                                 pc[k].numel, pc[k].param};
                    bad_elem0 += pc[k].param->offset + pc[k].elem0 != all[npieces - 1].flat; /* elem0 names the same place */
                    covered += pc[k].numel;
                }
                free(pc);
            }
            qsort(all, (size_t)npieces, sizeof *all, cmp_flat);
            int64_t params = 0, bad = 0, k = 0;
            for (int64_t i = 0; i < t.n; i++) {
                params += t.p[i].numel;
                int64_t at = t.p[i].offset;
                while (k < npieces && all[k].param == &t.p[i]) {
                    bad += all[k].flat != at;
                    at += all[k].numel;
                    k++;
                }
                bad += at != t.p[i].offset + t.p[i].numel;
            }
            free(all);
            for (int64_t i = 0; i < s.nunits; i++) {
                const int64_t last = (s.u[i].end - s.u[i].begin) - (int64_t)(P - 1) * s.u[i].shard;
                if (s.u[i].shard - last > worst_imbalance) worst_imbalance = s.u[i].shard - last;
            }
            EXPECT(ok_units && ok_align && covered == params && !bad && !bad_elem0 && k == npieces,
                   "%s P=%d: units contiguous, shards aligned, the ranks' pieces tile every tensor once (%lld/%lld, %lld gaps)",
                   models[mi], P, (long long)covered, (long long)params, (long long)bad);
            if (P == 8)
                printf("  shards %-6s P=8: shard %lld elements/rank, padding %lld, worst last-rank shortfall %lld\n",
                       models[mi], (long long)s.shard_total, (long long)padding, (long long)worst_imbalance);
            shard_free(&s);
        }
        params_free(&t);
    }
}

/* ------------------------------------------------------------------ zigzag split and ring attention */
/* Attention of a sequence split over P ranks by the zigzag and computed block by block on the ring
 * schedule, merged by LSE, backward with the final O and LSE, must equal plain causal attention
 * (fp64 both: 1e-12). The ring is tests/ref_ring.c: P simulated ranks with the data movement of
 * stage 3's ring_forward / ring_backward. Each rank holds only its own K/V; at step i it computes
 * with the K/V buffer it received (sent by rank r-1 at step i-1); in backward the running dK/dV sum
 * travels with the K/V it belongs to, and after P passes each rank's own total has come back to
 * it. Buffers move only by its ring_pass (send to r+1, receive from r-1; receive buffers are
 * poisoned with NaN first), so a wrong rotation or an addition into the wrong travelling buffer
 * fails. Checks the schedule (common/zigzag.c's ring_block), the merge, the block-backward algebra
 * that stage 3 runs with cuDNN blocks, and the ring's data movement. */
enum { RH = 4, RKV = 2, RD = 16 };
static double rnd(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return (double)(*s >> 11) / 9007199254740992.0 - 0.5;
}

static void test_ring(void) {
    char err[256];
    EXPECT(zigzag_check(100, 4, err, sizeof err) && strstr(err, "divisible by 2 x 4"), "S %% 2P != 0 refused: %s", err);
    printf("  zigzag --seq 100 on 4 ranks -> %s\n", err);
    int64_t pos[8];
    zigzag_positions(8, 2, 0, pos);
    int64_t pos1[4];
    zigzag_positions(8, 2, 1, pos1);
    EXPECT(pos[0] == 0 && pos[1] == 1 && pos[2] == 6 && pos[3] == 7 && pos1[0] == 2 && pos1[3] == 5,
           "P=2, S=8: rank 0 holds 0,1,6,7 and rank 1 holds 2,3,4,5 (the recipe's [0,7,1,6,...] chunk order)");
    const int64_t S = 48;
    const RefHeads hd = {RH, RKV, RD};
    uint64_t seed = 99;
    const int64_t QW = RH * RD, KW = RKV * RD;
    double *q = xmalloc((size_t)(S * QW) * 8), *k = xmalloc((size_t)(S * KW) * 8), *v = xmalloc((size_t)(S * KW) * 8),
           *dO = xmalloc((size_t)(S * QW) * 8);
    for (int64_t i = 0; i < S * QW; i++) { q[i] = 2 * rnd(&seed); dO[i] = rnd(&seed); }
    for (int64_t i = 0; i < S * KW; i++) { k[i] = 2 * rnd(&seed); v[i] = rnd(&seed); }
    /* plain causal attention, fp64 */
    double *O = xmalloc((size_t)(S * QW) * 8), *L = xmalloc((size_t)(S * RH) * 8), *dQ = xmalloc((size_t)(S * QW) * 8),
           *dK = xmalloc((size_t)(S * KW) * 8), *dV = xmalloc((size_t)(S * KW) * 8);
    ref_attention(&hd, S, q, k, v, dO, O, L, dQ, dK, dV);
    for (int P = 1; P <= 4; P++) {
        RefRing R;
        ref_ring_init(&R, P, S, hd, q, k, v, dO);
        ref_ring_forward(&R);
        ref_ring_backward(&R);
        const int64_t n = R.n;
        double eo = 0, el = 0, eq = 0, ek = 0, ev = 0, no = 0, nq = 0, nk = 0, nv = 0;
        for (int r = 0; r < P; r++)
            for (int64_t t = 0; t < n; t++) {
                const int64_t g = R.pos[r * n + t];
                for (int64_t e = 0; e < QW; e++) {
                    eo += pow(R.o[r][t * QW + e] - O[g * QW + e], 2); no += pow(O[g * QW + e], 2);
                    eq += pow(R.dq[r][t * QW + e] - dQ[g * QW + e], 2); nq += pow(dQ[g * QW + e], 2);
                }
                for (int64_t e = 0; e < KW; e++) {
                    ek += pow(R.dkv[r][t * KW + e] - dK[g * KW + e], 2); nk += pow(dK[g * KW + e], 2);
                    ev += pow(R.dkv[r][(n + t) * KW + e] - dV[g * KW + e], 2); nv += pow(dV[g * KW + e], 2);
                }
                for (int h = 0; h < RH; h++) el = fmax(el, fabs(R.lse[r][t * RH + h] - L[g * RH + h]));
            }
        const double worst = fmax(fmax(sqrt(eo / no), sqrt(eq / nq)), fmax(sqrt(ek / nk), fmax(sqrt(ev / nv), el)));
        EXPECT(!R.bad_src, "ring on %d ranks: %lld blocks computed with another rank's K/V or dK/dV than the schedule's src "
               "(or a dK/dV total not back home)", P, (long long)R.bad_src);
        EXPECT_LE(worst, 1e-12, "ring attention on %d zigzag ranks: rel err O %.2e, LSE %.2e (abs), dQ %.2e, dK %.2e, "
                  "dV %.2e", P, sqrt(eo / no), el, sqrt(eq / nq), sqrt(ek / nk), sqrt(ev / nv));
        printf("  ring attention, %d ranks, S %lld: O/LSE/dQ/dK/dV vs plain causal attention, worst %.1e\n", P,
               (long long)S, worst);
        ref_ring_free(&R);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L); free(dQ); free(dK); free(dV);
}

/* the worst gap between a ring's rows (O, dQ, dK, dV, LSE of every rank) and whole-sequence references
 * at the rows' window positions; infinite when a ring step read the wrong source */
static double ring_worst(const RefRing *R, int P, const double *O, const double *dQ, const double *dK, const double *dV,
                         const double *L) {
    const int64_t n = R->n, QW = RH * RD, KW = RKV * RD;
    double worst = R->bad_src ? INFINITY : 0;
    for (int r = 0; r < P; r++)
        for (int64_t t = 0; t < n; t++) {
            const int64_t g = R->pos[r * n + t];
            for (int64_t e = 0; e < QW; e++)
                worst = fmax(worst, fmax(fabs(R->o[r][t * QW + e] - O[g * QW + e]), fabs(R->dq[r][t * QW + e] - dQ[g * QW + e])));
            for (int64_t e = 0; e < KW; e++)
                worst = fmax(worst, fmax(fabs(R->dkv[r][t * KW + e] - dK[g * KW + e]),
                                         fabs(R->dkv[r][(n + t) * KW + e] - dV[g * KW + e])));
            for (int h = 0; h < RH; h++) worst = fmax(worst, fabs(R->lse[r][t * RH + h] - L[g * RH + h]));
        }
    return worst;
}

/* ------------------------------------------------------------------ packed documents */
/* Packed documents on the ring must equal each document run alone (plain causal attention on its
 * own rows, positions from 0), for P = 1, 2, 4, 8, with boundaries on and off chunk edges and
 * documents of one token: ref_ring cuts each step's call into common/docs.c's blocks. The work
 * done must be the documents' sum(len (len + 1) / 2) pairs, and a boundary moved by one in the
 * blocks (planted) must fail. */
static double ring_docs_err(const int64_t *start, int64_t nd, int P, int64_t S, const double *q, const double *k,
                            const double *v, const double *dO, const double *O, const double *L, const double *dQ,
                            const double *dK, const double *dV, int64_t *pairs) {
    const RefHeads hd = {RH, RKV, RD};
    RefRing R;
    ref_ring_init(&R, P, S, hd, q, k, v, dO);
    R.doc_start = start, R.ndocs = nd;
    ref_ring_forward(&R);
    ref_ring_backward(&R);
    double worst = ring_worst(&R, P, O, dQ, dK, dV, L);
    *pairs = R.pairs;
    ref_ring_free(&R);
    return isnan(worst) ? INFINITY : worst;
}

static void test_ring_docs(void) {
    /* docs_split / docs_positions: documents end at the end-of-text token (here 7) */
    const uint32_t tok[10] = {1, 2, 7, 3, 7, 7, 4, 5, 6, 7};
    int64_t st[11];
    int32_t pos[10];
    const int64_t nd0 = docs_split(tok, 10, 7, st);
    docs_positions(st, nd0, pos);
    EXPECT(nd0 == 4 && st[1] == 3 && st[2] == 5 && st[3] == 6 && st[4] == 10 && pos[2] == 2 && pos[3] == 0 &&
           pos[5] == 0 && pos[6] == 0 && pos[9] == 3, "documents of 1 2 <eot> | 3 <eot> | <eot> | 4 5 6 <eot>: "
           "%lld starts (3, 5, 6), positions restart", (long long)nd0);
    const int64_t S = 64;
    const int64_t QW = RH * RD, KW = RKV * RD;
    uint64_t seed = 7;
    double *q = xmalloc((size_t)(S * QW) * 8), *k = xmalloc((size_t)(S * KW) * 8), *v = xmalloc((size_t)(S * KW) * 8),
           *dO = xmalloc((size_t)(S * QW) * 8);
    for (int64_t i = 0; i < S * QW; i++) { q[i] = 2 * rnd(&seed); dO[i] = rnd(&seed); }
    for (int64_t i = 0; i < S * KW; i++) { k[i] = 2 * rnd(&seed); v[i] = rnd(&seed); }
    /* boundaries: 1-token documents (5, 6), one on a chunk edge at every P (16, 32), a long one
     * across several chunks (33..63) */
    const int64_t start[] = {0, 5, 6, 7, 16, 20, 21, 32, 33, S};
    const int64_t nd = sizeof start / sizeof start[0] - 1;
    const RefHeads hd = {RH, RKV, RD};
    double *O = xmalloc((size_t)(S * QW) * 8), *L = xmalloc((size_t)(S * RH) * 8), *dQ = xmalloc((size_t)(S * QW) * 8),
           *dK = xmalloc((size_t)(S * KW) * 8), *dV = xmalloc((size_t)(S * KW) * 8);
    int64_t want = 0;
    for (int64_t d = 0; d < nd; d++) { /* the truth: each document alone */
        const int64_t a = start[d], len = start[d + 1] - a;
        ref_attention(&hd, len, q + a * QW, k + a * KW, v + a * KW, dO + a * QW, O + a * QW, L + a * RH, dQ + a * QW,
                      dK + a * KW, dV + a * KW);
        want += len * (len + 1) / 2;
    }
    for (int P = 1; P <= 8; P *= 2) {
        int64_t pairs;
        const double e = ring_docs_err(start, nd, P, S, q, k, v, dO, O, L, dQ, dK, dV, &pairs);
        EXPECT_LE(e, 1e-12, "packed documents on %d zigzag ranks: O, LSE, dQ, dK, dV against each document alone, "
                  "worst abs err %.2e", P, e);
        EXPECT(pairs == want, "packed documents on %d ranks compute %lld (query, key) pairs, the documents' sum(len "
               "(len+1)/2) = %lld (S (S+1)/2 = %lld unpacked)", P, (long long)pairs, (long long)want,
               (long long)(S * (S + 1) / 2));
        printf("  packed documents, %d ranks, S %lld, %lld documents: ring vs each alone, worst %.1e; %lld of %lld pairs\n",
               P, (long long)S, (long long)nd, e, (long long)pairs, (long long)(S * (S + 1) / 2));
    }
    /* planted: the blocks told a boundary one token late (20 -> 21) must not match the truth */
    int64_t off[sizeof start / sizeof start[0]];
    memcpy(off, start, sizeof start);
    off[5] = 21;
    for (int P = 1; P <= 8; P *= 2) {
        int64_t pairs;
        const double e = ring_docs_err(off, nd, P, S, q, k, v, dO, O, L, dQ, dK, dV, &pairs);
        EXPECT(e > 1e-3, "planted: a document boundary off by one on %d ranks is caught (worst err %.2e)", P, e);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L); free(dQ); free(dK); free(dV);
}

/* The packed golden fixture (each document run alone through transformers) must catch what packing
 * can get wrong: keys of other documents seen, and the label across a boundary counted; each planted
 * reference must miss the golden loss. Positions not restarted it cannot catch, and this checks
 * that it does not: RoPE makes q_m . k_n a function of m - n alone, so within one document a shift
 * of every position changes nothing but rounding. A stage's positions are checked where they are
 * made (docs_positions above; tests/packing_gpu.sh compares a stage's traced positions). */
static void test_packed_planted(const char *root) {
    Golden g;
    if (golden_open(root, "packed_gqa4_s128", &g)) { EXPECT(0, "packed_gqa4_s128 loads"); return; }
    const int64_t S = g.S;
    double gl = NAN;
    char err[256];
    EXPECT(!golden_loss(&g, &gl, err, sizeof err), "%s", err);
    int64_t *start = xmalloc((size_t)(S + 1) * 8), *pos = xmalloc((size_t)S * 8), *first = xmalloc((size_t)S * 8);
    int32_t *p32 = xmalloc((size_t)S * 4);
    uint8_t *w = xmalloc((size_t)S + 1);
    const int64_t n = docs_split(g.tokens, S, (uint32_t)g.eot, start);
    docs_positions(start, n, p32);
    for (int64_t d = 0; d < n; d++)
        for (int64_t t = start[d]; t < start[d + 1]; t++) first[t] = start[d], pos[t] = p32[t];
    for (int64_t t = 0; t <= S; t++) w[t] = g.weights ? g.weights[t] : 1;
    uint8_t *wb = xmalloc((size_t)S + 1); /* the boundary labels counted */
    memcpy(wb, w, (size_t)S + 1);
    for (int64_t t = 0; t < S; t++)
        if (g.tokens[t] == (uint32_t)g.eot) w[t + 1] = 0;
    const struct { const char *what; const int64_t *pos, *first; const uint8_t *w; } plant[] = {
        {"positions not restarted (the same up to rounding)", NULL, first, w},
        {"other documents' keys seen", pos, NULL, w},
        {"the label after an end-of-text counted", pos, first, wb},
        {"nothing planted (the packed reference itself)", pos, first, w}};
    for (int i = 0; i < 4; i++) {
        const RefResult r = ref_forward_backward_docs(&g.c, &g.pt, g.params, g.tokens, plant[i].w, plant[i].pos,
                                                      plant[i].first, S, 0, NULL, NULL);
        const double e = fabs(r.loss - gl) / fabs(gl);
        if (i == 1 || i == 2)
            EXPECT(e > 1e-4, "planted (%s): the loss %.7f must miss transformers' %.7f (rel %.2e)", plant[i].what,
                   r.loss, gl, e);
        else EXPECT_LE(e, 1e-5, "%s: loss %.7f vs transformers %.7f (RoPE is relative)", plant[i].what, r.loss, gl);
        printf("  packed golden, %s: loss %.6f vs %.6f (rel %.1e)\n", plant[i].what, r.loss, gl, e);
    }
    free(start); free(pos); free(first); free(p32); free(w); free(wb);
    golden_free(&g);
}

/* ------------------------------------------------------------------ linear attention (Qwen3.5) */
/* The gated delta rule of tests/ref_gdn.c: against transformers' own torch fallback (golden file,
 * made by tests/make_golden_gdn.py), then its context parallelism: the sequence over P zigzag ranks,
 * each chunk's state map exchanged and composed, must give the plain recurrence (fp64: 1e-12), with
 * and without documents (a document's first token forgets: a = 0). Planted: chunks run from a zero
 * state (no map passed) must miss. */
static double *f64_of(const float *x, int64_t n) {
    double *d = xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static double max_abs_diff(const double *a, const double *b, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, isfinite(a[i] - b[i]) ? fabs(a[i] - b[i]) : INFINITY);
    return e;
}
/* |got - want| / |want| over n (inf if anything is not finite) */
static double rel_l2(const double *got, const double *want, int64_t n) {
    double en = 0, nn = 0;
    for (int64_t i = 0; i < n; i++) en += (got[i] - want[i]) * (got[i] - want[i]), nn += want[i] * want[i];
    return isfinite(en) && isfinite(nn) && nn > 0 ? sqrt(en / nn) : INFINITY;
}
/* the same against an fp32 golden tensor */
static double rel_l2_f(const double *got, const float *want, int64_t n) {
    double *w = f64_of(want, n);
    const double e = rel_l2(got, w, n);
    free(w);
    return e;
}

static void test_gdn(const char *root) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/gdn_rule.safetensors", root);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) { EXPECT(0, "%s", err); return; }
    const int64_t T = 37, H = 3, dk = 16, dv = 12;
    const GdnHeads hd = {H, dk, dv};
    const int64_t sq[4] = {1, T, H, dk}, sv[4] = {1, T, H, dv}, sg[3] = {1, T, H}, ss[4] = {1, H, dk, dv};
    float *fq = xmalloc((size_t)(T * H * dk) * 4), *fk = xmalloc((size_t)(T * H * dk) * 4),
          *fv = xmalloc((size_t)(T * H * dv) * 4), *fg = xmalloc((size_t)(T * H) * 4), *fb = xmalloc((size_t)(T * H) * 4),
          *fo = xmalloc((size_t)(T * H * dv) * 4), *fs = xmalloc((size_t)(H * dk * dv) * 4);
    const int bad = st_read_f32(&st, "q", 4, sq, fq, err, sizeof err) || st_read_f32(&st, "k", 4, sq, fk, err, sizeof err) ||
                    st_read_f32(&st, "v", 4, sv, fv, err, sizeof err) || st_read_f32(&st, "g", 3, sg, fg, err, sizeof err) ||
                    st_read_f32(&st, "beta", 3, sg, fb, err, sizeof err) || st_read_f32(&st, "o", 4, sv, fo, err, sizeof err) ||
                    st_read_f32(&st, "state", 4, ss, fs, err, sizeof err);
    EXPECT(!bad, "gdn golden: %s", err);
    if (bad) { st_close(&st); return; }
    double *q = f64_of(fq, T * H * dk), *k = f64_of(fk, T * H * dk), *v = f64_of(fv, T * H * dv), *g = f64_of(fg, T * H),
           *b = f64_of(fb, T * H), *o = xcalloc((size_t)(T * H * dv), 8), *S = xcalloc((size_t)(H * dv * dk), 8);
    ref_gdn_prepare(&hd, T, q, k);
    ref_gdn(&hd, T, q, k, v, g, b, S, o);
    double eo = 0, no = 0, es = 0, ns = 0;
    for (int64_t i = 0; i < T * H * dv; i++) eo += pow(o[i] - fo[i], 2), no += pow(fo[i], 2);
    for (int64_t j = 0; j < H; j++) /* transformers' state is [dk, dv]: ours transposed */
        for (int64_t r = 0; r < dv; r++)
            for (int64_t e = 0; e < dk; e++) {
                const double want = fs[(j * dk + e) * dv + r];
                es += pow(S[(j * dv + r) * dk + e] - want, 2), ns += want * want;
            }
    EXPECT_LE(sqrt(eo / no), 1e-5, "gated delta rule vs transformers: output rel err %.2e", sqrt(eo / no));
    EXPECT_LE(sqrt(es / ns), 1e-5, "gated delta rule vs transformers: final state rel err %.2e", sqrt(es / ns));
    printf("  gated delta rule (T %lld, H %lld, dk %lld, dv %lld) vs transformers: output %.1e, final state %.1e\n",
           (long long)T, (long long)H, (long long)dk, (long long)dv, sqrt(eo / no), sqrt(es / ns));
    { /* the backward, against transformers' autograd: the raw q and k's gradients through l2norm */
        float *fdo = xmalloc((size_t)(T * H * dv) * 4), *fds = xmalloc((size_t)(H * dk * dv) * 4),
              *gq = xmalloc((size_t)(T * H * dk) * 4), *gk = xmalloc((size_t)(T * H * dk) * 4),
              *gv = xmalloc((size_t)(T * H * dv) * 4), *gg = xmalloc((size_t)(T * H) * 4), *gb = xmalloc((size_t)(T * H) * 4);
        const int rd = st_read_f32(&st, "do", 4, sv, fdo, err, sizeof err) || st_read_f32(&st, "dstate", 4, ss, fds, err, sizeof err) ||
                       st_read_f32(&st, "grad_q", 4, sq, gq, err, sizeof err) || st_read_f32(&st, "grad_k", 4, sq, gk, err, sizeof err) ||
                       st_read_f32(&st, "grad_v", 4, sv, gv, err, sizeof err) || st_read_f32(&st, "grad_g", 3, sg, gg, err, sizeof err) ||
                       st_read_f32(&st, "grad_beta", 3, sg, gb, err, sizeof err);
        EXPECT(!rd, "gdn golden gradients: %s", err);
        if (!rd) {
            double *rq = f64_of(fq, T * H * dk), *rk = f64_of(fk, T * H * dk), *gout = f64_of(fdo, T * H * dv);
            double *dS = xmalloc((size_t)(H * dv * dk) * 8), *S0 = xcalloc((size_t)(H * dv * dk), 8),
                   *dq = xcalloc((size_t)(T * H * dk), 8), *dkk = xcalloc((size_t)(T * H * dk), 8),
                   *dvv = xcalloc((size_t)(T * H * dv), 8), *dg = xcalloc((size_t)(T * H), 8), *db = xcalloc((size_t)(T * H), 8);
            for (int64_t j = 0; j < H; j++)
                for (int64_t r = 0; r < dv; r++)
                    for (int64_t e = 0; e < dk; e++) dS[(j * dv + r) * dk + e] = fds[(j * dk + e) * dv + r];
            ref_gdn_bwd(&hd, T, q, k, v, g, b, S0, gout, dS, dq, dkk, dvv, dg, db);
            ref_gdn_prepare_bwd(&hd, T, rq, rk, dq, dkk);
            const struct { const char *n; const double *got; const float *want; int64_t len; } c[5] = {
                {"dq", dq, gq, T * H * dk}, {"dk", dkk, gk, T * H * dk}, {"dv", dvv, gv, T * H * dv}, {"dg", dg, gg, T * H},
                {"dbeta", db, gb, T * H}};
            double worst = 0;
            for (int w = 0; w < 5; w++) {
                const double e = rel_l2_f(c[w].got, c[w].want, c[w].len);
                EXPECT_LE(e, 1e-5, "gated delta rule backward vs transformers' autograd: %s rel err %.2e", c[w].n, e);
                worst = fmax(worst, e);
            }
            printf("  its backward vs transformers' autograd (q, k through l2norm; v, g, beta): worst %.1e\n", worst);
            free(rq); free(rk); free(gout); free(dS); free(S0); free(dq); free(dkk); free(dvv); free(dg); free(db);
        }
        free(fdo); free(fds); free(gq); free(gk); free(gv); free(gg); free(gb);
    }
    st_close(&st);

    /* context parallelism: a longer sequence of the same kind, plain vs zigzag maps */
    const int64_t L = 64;
    uint64_t seed = 3;
    double *q2 = xmalloc((size_t)(L * H * dk) * 8), *k2 = xmalloc((size_t)(L * H * dk) * 8),
           *v2 = xmalloc((size_t)(L * H * dv) * 8), *g2 = xmalloc((size_t)(L * H) * 8), *b2 = xmalloc((size_t)(L * H) * 8),
           *op = xmalloc((size_t)(L * H * dv) * 8), *oz = xmalloc((size_t)(L * H * dv) * 8),
           *Sp = xmalloc((size_t)(H * dv * dk) * 8), *Sz = xmalloc((size_t)(H * dv * dk) * 8);
    for (int64_t i = 0; i < L * H * dk; i++) q2[i] = rnd(&seed), k2[i] = rnd(&seed);
    for (int64_t i = 0; i < L * H * dv; i++) v2[i] = 2 * rnd(&seed);
    for (int64_t i = 0; i < L * H; i++) g2[i] = -0.3 * (rnd(&seed) + 0.5), b2[i] = 0.5 + rnd(&seed);
    ref_gdn_prepare(&hd, L, q2, k2);
    { /* the chunked form against the recurrence, chunks of 1, 5, 16 and past the sequence */
        double *oc = xmalloc((size_t)(L * H * dv) * 8), *Sc = xmalloc((size_t)(H * dv * dk) * 8);
        memset(Sp, 0, (size_t)(H * dv * dk) * 8);
        ref_gdn(&hd, L, q2, k2, v2, g2, b2, Sp, op);
        const int64_t cs[4] = {1, 5, 16, 100};
        for (int i = 0; i < 4; i++) {
            memset(Sc, 0, (size_t)(H * dv * dk) * 8);
            ref_gdn_chunked(&hd, L, cs[i], q2, k2, v2, g2, b2, Sc, oc);
            const double e = fmax(max_abs_diff(op, oc, L * H * dv), max_abs_diff(Sp, Sc, H * dv * dk));
            EXPECT_LE(e, 1e-12, "the chunked gated delta rule, chunks of %lld: worst abs err %.2e", (long long)cs[i], e);
            printf("  the chunked form (chunks of %lld tokens) vs the recurrence: %.1e\n", (long long)cs[i], e);
        }
        free(oc); free(Sc);
    }
    for (int docs = 0; docs < 2; docs++) {
        if (docs) /* documents starting at 5, 16 (a chunk edge at P = 4), 17, 40: each forgets the one before */
            for (int64_t j = 0; j < H; j++) g2[5 * H + j] = g2[16 * H + j] = g2[17 * H + j] = g2[40 * H + j] = -INFINITY;
        memset(Sp, 0, (size_t)(H * dv * dk) * 8);
        ref_gdn(&hd, L, q2, k2, v2, g2, b2, Sp, op);
        /* the backward: upstream gradients of the outputs and of the final state */
        double *gout = xmalloc((size_t)(L * H * dv) * 8), *gfin = xmalloc((size_t)(H * dv * dk) * 8),
               *pg[6], *zg[6];
        const int64_t len[6] = {L * H * dk, L * H * dk, L * H * dv, L * H, L * H, H * dv * dk};
        for (int w = 0; w < 6; w++) pg[w] = xcalloc((size_t)len[w], 8), zg[w] = xcalloc((size_t)len[w], 8);
        for (int64_t i = 0; i < L * H * dv; i++) gout[i] = rnd(&seed);
        for (int64_t i = 0; i < H * dv * dk; i++) gfin[i] = rnd(&seed);
        memcpy(pg[5], gfin, (size_t)(H * dv * dk) * 8);
        double *zero = xcalloc((size_t)(H * dv * dk), 8);
        ref_gdn_bwd(&hd, L, q2, k2, v2, g2, b2, zero, gout, pg[5], pg[0], pg[1], pg[2], pg[3], pg[4]);
        for (int P = 1; P <= 8; P *= 2) {
            ref_gdn_zigzag_bwd(&hd, L, P, q2, k2, v2, g2, b2, gout, gfin, zg[0], zg[1], zg[2], zg[3], zg[4], zg[5]);
            double e = 0;
            for (int w = 0; w < 6; w++) e = fmax(e, max_abs_diff(pg[w], zg[w], len[w]));
            EXPECT_LE(e, 1e-11, "linear attention's backward over %d zigzag ranks by state maps%s: worst abs err %.2e", P,
                      docs ? ", with documents" : "", e);
            printf("  its backward, %d ranks (dS_start = dS_end M^T + C, composed from the last chunk)%s: %.1e\n", P,
                   docs ? " (5 documents)" : "", e);
        }
        for (int w = 0; w < 6; w++) free(pg[w]), free(zg[w]);
        free(gout); free(gfin); free(zero);
        for (int P = 1; P <= 8; P *= 2) {
            const int64_t sent = ref_gdn_zigzag(&hd, L, P, q2, k2, v2, g2, b2, oz, Sz);
            const double e = fmax(max_abs_diff(op, oz, L * H * dv), max_abs_diff(Sp, Sz, H * dv * dk));
            EXPECT_LE(e, 1e-12, "linear attention over %d zigzag ranks by state maps%s: worst abs err %.2e", P,
                      docs ? ", with documents" : "", e);
            printf("  linear attention, %d ranks by state maps%s: vs the plain recurrence %.1e; %lld floats sent a rank "
                   "(any sequence length)\n", P, docs ? " (5 documents)" : "", e, (long long)sent);
        }
    }
    /* planted: every chunk from a zero state (the maps never passed), at P = 2 */
    {
        const int64_t c = L / 4;
        for (int64_t ch = 0; ch < 4; ch++) {
            memset(Sz, 0, (size_t)(H * dv * dk) * 8);
            ref_gdn(&hd, c, q2 + ch * c * H * dk, k2 + ch * c * H * dk, v2 + ch * c * H * dv, g2 + ch * c * H,
                    b2 + ch * c * H, Sz, oz + ch * c * H * dv);
        }
        const double e = max_abs_diff(op, oz, L * H * dv);
        EXPECT(e > 1e-3, "planted: chunks run from a zero state must miss the recurrence (err %.2e)", e);
    }
    free(fq); free(fk); free(fv); free(fg); free(fb); free(fo); free(fs);
    free(q); free(k); free(v); free(g); free(b); free(o); free(S);
    free(q2); free(k2); free(v2); free(g2); free(b2); free(op); free(oz); free(Sp); free(Sz);
}

/* Rank r's walk as stage 3 makes it (linear_states, bwd 0; linear_state_grads, bwd 1): from zero through
 * the chunks' maps in sequence order, chunk 0 up to its tail (2P-1-r), or chunk 2P-1 down to its head (r),
 * noting at each of its chunks what it holds there (got [2, H dv dk]: head's, tail's). BC: B (bwd 0) or C
 * (bwd 1) of every chunk. skip: a chunk whose map is left out (-1: none). Returns the maps composed. */
static int rank_walk(const GdnHeads *h, int P, int r, int bwd, int64_t skip, const double *M, const double *BC,
                     double *got) {
    const int64_t ms = h->H * h->dv * h->dk, mk = h->H * h->dk * h->dk;
    const int64_t from = bwd ? 2 * P - 1 : 0, to = zigzag_chunk(P, r, !bwd), step = bwd ? -1 : 1;
    double *cur = xcalloc((size_t)ms, 8);
    int n = 0;
    for (int64_t ch = from;; ch += step) {
        for (int k = 0; k < 2; k++)
            if (zigzag_chunk(P, r, k) == ch) memcpy(got + k * ms, cur, (size_t)ms * 8);
        if (ch == to) break;
        if (ch != skip) ref_gdn_map_apply(h, cur, M + ch * mk, BC + ch * ms, bwd), n++;
    }
    free(cur);
    return n;
}
/* Which maps a rank composes (docs/context_parallel_state.md): rank r of P composes 2P-1-r maps in the
 * forward (chunks 0 .. 2P-2-r, those before its tail) and 2P-1-r in the backward (chunks 2P-1 .. r+1,
 * those after its head), and from them alone has both its chunks' initial states and their final
 * states' gradients, as the plain recurrence and its backward (from a zero final-state gradient, as
 * stage 3) give them. Without documents every one of those maps matters: leave one out and the far
 * chunk misses. With documents (a_t = 0) the same walk is still exact. */
static void test_gdn_rank_walk(void) {
    const int64_t L = 64, H = 2, dk = 8, dv = 6, ms = H * dv * dk, mk = H * dk * dk;
    const GdnHeads hd = {H, dk, dv};
    uint64_t seed = 11;
    double *q = xmalloc((size_t)(L * H * dk) * 8), *k = xmalloc((size_t)(L * H * dk) * 8), *v = xmalloc((size_t)(L * H * dv) * 8),
           *g = xmalloc((size_t)(L * H) * 8), *b = xmalloc((size_t)(L * H) * 8), *dout = xmalloc((size_t)(L * H * dv) * 8);
    double *sq = xcalloc((size_t)(L * H * dk), 8), *sk = xcalloc((size_t)(L * H * dk), 8), *sv = xcalloc((size_t)(L * H * dv), 8),
           *sg = xcalloc((size_t)(L * H), 8), *sb = xcalloc((size_t)(L * H), 8), *got = xmalloc((size_t)(2 * ms) * 8);
    for (int64_t i = 0; i < L * H * dk; i++) q[i] = rnd(&seed), k[i] = rnd(&seed);
    for (int64_t i = 0; i < L * H * dv; i++) v[i] = 2 * rnd(&seed), dout[i] = rnd(&seed);
    for (int64_t i = 0; i < L * H; i++) g[i] = -0.3 * (rnd(&seed) + 0.5), b[i] = 0.5 + rnd(&seed);
    ref_gdn_prepare(&hd, L, q, k);
    for (int docs = 0; docs < 2; docs++) {
        if (docs) /* documents start at 5, 16 (a chunk edge at P = 2, 4, 8), 17, 40 */
            for (int64_t j = 0; j < H; j++) g[5 * H + j] = g[16 * H + j] = g[17 * H + j] = g[40 * H + j] = -INFINITY;
        for (int P = 1; P <= 8; P *= 2) {
            const int64_t n2 = 2 * P, c = L / n2;
            double *start = xcalloc((size_t)((n2 + 1) * ms), 8), *dend = xcalloc((size_t)(n2 * ms), 8),
                   *M = xmalloc((size_t)(n2 * mk) * 8), *B = xmalloc((size_t)(n2 * ms) * 8), *C = xcalloc((size_t)(n2 * ms), 8);
            for (int64_t ch = 0; ch < n2; ch++) { /* the truth: the recurrence through the chunks before ch */
                const int64_t t0 = ch * c;
                memcpy(start + (ch + 1) * ms, start + ch * ms, (size_t)ms * 8);
                ref_gdn(&hd, c, q + t0 * H * dk, k + t0 * H * dk, v + t0 * H * dv, g + t0 * H, b + t0 * H, start + (ch + 1) * ms, NULL);
            }
            for (int64_t ch = 0; ch < n2; ch++) { /* its backward over the chunks after ch; each chunk's M, B, C */
                const int64_t t1 = (ch + 1) * c, t0 = ch * c;
                ref_gdn_bwd(&hd, L - t1, q + t1 * H * dk, k + t1 * H * dk, v + t1 * H * dv, g + t1 * H, b + t1 * H,
                            start + (ch + 1) * ms, dout + t1 * H * dv, dend + ch * ms, sq, sk, sv, sg, sb);
                ref_gdn_map(&hd, c, k + t0 * H * dk, v + t0 * H * dv, g + t0 * H, b + t0 * H, M + ch * mk, B + ch * ms);
                ref_gdn_bwd(&hd, c, q + t0 * H * dk, k + t0 * H * dk, v + t0 * H * dv, g + t0 * H, b + t0 * H, start + ch * ms,
                            dout + t0 * H * dv, C + ch * ms, sq, sk, sv, sg, sb);
            }
            double worst = 0, least_miss = INFINITY;
            int wrong = 0; /* ranks whose walk composes other than 2P-1-r maps */
            for (int r = 0; r < P; r++)
                for (int bwd = 0; bwd < 2; bwd++) {
                    const double *want = bwd ? dend : start;
                    wrong += rank_walk(&hd, P, r, bwd, -1, M, bwd ? C : B, got) != 2 * P - 1 - r;
                    for (int kk = 0; kk < 2; kk++)
                        worst = fmax(worst, max_abs_diff(got + kk * ms, want + zigzag_chunk(P, r, kk) * ms, ms));
                    if (docs) continue;
                    const int64_t far = zigzag_chunk(P, r, !bwd); /* planted: each of those maps left out in turn */
                    for (int64_t s = bwd ? r + 1 : 0; s <= (bwd ? n2 - 1 : n2 - 2 - r); s++) {
                        rank_walk(&hd, P, r, bwd, s, M, bwd ? C : B, got);
                        least_miss = fmin(least_miss, max_abs_diff(got + (!bwd) * ms, want + far * ms, ms));
                    }
                }
            EXPECT(!wrong && worst <= 1e-12, "the walks at P %d%s: %d of %d compose other than 2P-1-r maps; worst abs err %.2e", P,
                   docs ? " (documents)" : "", wrong, 2 * P, worst);
            if (!docs)
                EXPECT(least_miss > 1e-9, "planted: at P %d a walk without one of its maps must miss its far chunk (err %.2e)", P,
                       least_miss);
            printf("  rank r of %d composes 2P-1-r maps each way (rank 0: %d, rank %d: %d)%s: its chunks' states and "
                   "gradients %.1e", P, 2 * P - 1, P - 1, P, docs ? " (5 documents)" : "", worst);
            if (!docs) printf("; one map left out misses by >= %.1e", least_miss);
            printf("\n");
            free(start); free(dend); free(M); free(B); free(C);
        }
    }
    free(q); free(k); free(v); free(g); free(b); free(dout); free(sq); free(sk); free(sv); free(sg); free(sb); free(got);
}

/* The chunked rule (tests/ref_gdn.c's ref_gdn_chunked, _chunked_bwd, _map_chunked, _cmap_chunked;
 * docs/chunked_delta_rule.md) against the token-by-token recurrence and its backward, fp64 both, on
 * the cases a kernel finds hard: lengths not a multiple of the chunk, documents (g = -inf) starting
 * mid-chunk, on chunk edges and one token long, decay near -20 a token, long runs of near-parallel
 * keys with beta near 1. Band: every tensor (o, the final state, dq, dk, dv, dg, dbeta, the initial
 * state's gradient; M, B, C) within 1e-10 of its largest entry. Planted: a dg without the cumulative
 * sum's adjoint, and a triangular solve that merges its 16 x 16 blocks without the blocks between. */
typedef struct {
    const char *name;
    int64_t T, C, H, dk, dv;
    int kind;              /* 0 random; 1 strong decay (g near -20); 2 near-parallel keys, beta near 1 */
    const int64_t *starts; /* document starts (g = -inf there) */
    int64_t ns;
} GdnCase;
typedef struct { double *q, *k, *v, *g, *b, *S0, *dout, *dSf; } GdnIn;
/* o, final state, dq, dk, dv, dg, dbeta, initial state's gradient */
enum { GO_O, GO_S, GO_DQ, GO_DK, GO_DV, GO_DG, GO_DB, GO_DS0, GO_N };
typedef struct { double *x[GO_N]; } GdnOut;
static int64_t gdn_out_len(const GdnCase *c, int w) {
    const int64_t T = c->T, H = c->H;
    const int64_t len[GO_N] = {T * H * c->dv, H * c->dv * c->dk, T * H * c->dk, T * H * c->dk, T * H * c->dv, T * H, T * H,
                               H * c->dv * c->dk};
    return len[w];
}
/* x rounded to bf16 (nearest even), as a double */
static double bf16_round(double x) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}
/* inputs of a case, every value one a GPU kernel reads exactly: q, k (prepared), v and dout bf16's, the
 * rest float's (the fp32 simulation and the fp64 references read the same numbers) */
static void gdn_case_make(const GdnCase *c, uint64_t seed, GdnIn *in) {
    const int64_t T = c->T, H = c->H, dk = c->dk, dv = c->dv;
    const GdnHeads hd = {H, dk, dv};
    in->q = xmalloc((size_t)(T * H * dk) * 8), in->k = xmalloc((size_t)(T * H * dk) * 8);
    in->v = xmalloc((size_t)(T * H * dv) * 8), in->dout = xmalloc((size_t)(T * H * dv) * 8);
    in->g = xmalloc((size_t)(T * H) * 8), in->b = xmalloc((size_t)(T * H) * 8);
    in->S0 = xmalloc((size_t)(H * dv * dk) * 8), in->dSf = xmalloc((size_t)(H * dv * dk) * 8);
    double *k0 = xmalloc((size_t)(H * dk) * 8);
    for (int64_t i = 0; i < H * dk; i++) k0[i] = rnd(&seed);
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < H; j++) {
            const int64_t i = t * H + j;
            double n0 = 0;
            for (int64_t e = 0; e < dk; e++) n0 += k0[j * dk + e] * k0[j * dk + e];
            for (int64_t e = 0; e < dk; e++) { /* near-parallel: k0's direction plus noise of norm ~0.032 */
                in->q[i * dk + e] = rnd(&seed);
                in->k[i * dk + e] = c->kind == 2 ? k0[j * dk + e] / sqrt(n0) + 0.032 / sqrt((double)dk) * 2 * sqrt(3.0) * rnd(&seed)
                                                 : rnd(&seed);
            }
            for (int64_t e = 0; e < dv; e++) in->v[i * dv + e] = 2 * rnd(&seed), in->dout[i * dv + e] = rnd(&seed);
            if (c->kind == 1) { /* -exp(A_log) softplus(a + dt_bias) with A_log ~ 1.6, dt_bias ~ 4: about -20 */
                const double x = 4 + rnd(&seed);
                in->g[i] = -exp(1.6 + 0.2 * rnd(&seed)) * (x > 20 ? x : log1p(exp(x)));
            } else in->g[i] = c->kind == 2 ? -0.01 * (rnd(&seed) + 0.5) : -0.3 * (rnd(&seed) + 0.5);
            in->b[i] = c->kind == 2 ? 0.995 + 0.009 * rnd(&seed) : 0.5 + rnd(&seed);
        }
    for (int64_t i = 0; i < H * dv * dk; i++) in->S0[i] = 0.5 * rnd(&seed), in->dSf[i] = 0.5 * rnd(&seed);
    ref_gdn_prepare(&hd, T, in->q, in->k);
    double *all[] = {in->q, in->k, in->v, in->g, in->b, in->S0, in->dout, in->dSf};
    const int64_t len[] = {T * H * dk, T * H * dk, T * H * dv, T * H, T * H, H * dv * dk, T * H * dv, H * dv * dk};
    for (int w = 0; w < 8; w++)
        for (int64_t i = 0; i < len[w]; i++) all[w][i] = w == 0 || w == 1 || w == 2 || w == 6 ? bf16_round(all[w][i]) : (float)all[w][i];
    for (int64_t d = 0; d < c->ns; d++)
        for (int64_t j = 0; j < H; j++) in->g[c->starts[d] * H + j] = -INFINITY;
    free(k0);
}
static void gdn_in_free(GdnIn *in) {
    free(in->q); free(in->k); free(in->v); free(in->g); free(in->b); free(in->S0); free(in->dout); free(in->dSf);
}
static void gdn_out_alloc(const GdnCase *c, GdnOut *o) {
    for (int w = 0; w < GO_N; w++) o->x[w] = xcalloc((size_t)gdn_out_len(c, w), 8);
}
static void gdn_out_free(GdnOut *o) {
    for (int w = 0; w < GO_N; w++) free(o->x[w]);
}
/* the forward and backward of a case: token by token (C 0) or chunked (C the case's) */
static void gdn_case_run(const GdnCase *c, const GdnIn *in, int chunked, GdnOut *o) {
    const GdnHeads hd = {c->H, c->dk, c->dv};
    const int64_t ms = c->H * c->dv * c->dk;
    memcpy(o->x[GO_S], in->S0, (size_t)ms * 8);
    memcpy(o->x[GO_DS0], in->dSf, (size_t)ms * 8);
    if (chunked) {
        ref_gdn_chunked(&hd, c->T, c->C, in->q, in->k, in->v, in->g, in->b, o->x[GO_S], o->x[GO_O]);
        ref_gdn_chunked_bwd(&hd, c->T, c->C, in->q, in->k, in->v, in->g, in->b, in->S0, in->dout, o->x[GO_DS0], o->x[GO_DQ],
                            o->x[GO_DK], o->x[GO_DV], o->x[GO_DG], o->x[GO_DB]);
    } else {
        ref_gdn(&hd, c->T, in->q, in->k, in->v, in->g, in->b, o->x[GO_S], o->x[GO_O]);
        ref_gdn_bwd(&hd, c->T, in->q, in->k, in->v, in->g, in->b, in->S0, in->dout, o->x[GO_DS0], o->x[GO_DQ], o->x[GO_DK],
                    o->x[GO_DV], o->x[GO_DG], o->x[GO_DB]);
    }
}
/* max |got - want| over the largest |want| (inf if anything is not finite) */
static double rel_max(const double *got, const double *want, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(want[i]));
    const double e = max_abs_diff(got, want, n);
    return isfinite(e) ? e / (m > 0 ? m : 1) : INFINITY;
}
static double gdn_out_err(const GdnCase *c, const GdnOut *got, const GdnOut *want, double *each) {
    double worst = 0;
    for (int w = 0; w < GO_N; w++) {
        each[w] = rel_max(got->x[w], want->x[w], gdn_out_len(c, w));
        worst = fmax(worst, each[w]);
    }
    return worst;
}
/* the mean cosine of neighbouring keys of head 0 (what "near-parallel" means in a case) */
static double gdn_key_cos(const GdnCase *c, const GdnIn *in) {
    double s = 0;
    for (int64_t t = 1; t < c->T; t++) {
        const double *a = in->k + (t - 1) * c->H * c->dk, *b = in->k + t * c->H * c->dk;
        double ab = 0, aa = 0, bb = 0;
        for (int64_t e = 0; e < c->dk; e++) ab += a[e] * b[e], aa += a[e] * a[e], bb += b[e] * b[e];
        s += ab / sqrt(aa * bb);
    }
    return s / (double)(c->T - 1);
}

static const int64_t DOCS_64[] = {5, 63, 64, 65, 66, 128, 150, 199}; /* 64, 65: 1-token documents; 199 the last token */
static const int64_t DOCS_16[] = {0, 16, 17, 31, 40, 47, 48, 99};   /* 0: the initial state forgotten */
static const int64_t DOCS_Q35[] = {70, 71, 128};
static const GdnCase GDN_CASES[] = {
    {"random, chunks of 16, 100 tokens", 100, 16, 2, 16, 12, 0, NULL, 0},
    {"random, chunks of 64, 150 tokens", 150, 64, 2, 16, 12, 0, NULL, 0},
    {"documents mid-chunk, on edges, 1 token long (64)", 200, 64, 2, 16, 12, 0, DOCS_64, 8},
    {"documents from token 0, on edges (16)", 100, 16, 2, 16, 12, 0, DOCS_16, 8},
    {"strong decay, g ~ -20 a token (64)", 150, 64, 2, 16, 12, 1, NULL, 0},
    {"strong decay with documents (16)", 100, 16, 2, 16, 12, 1, DOCS_16, 8},
    {"near-parallel keys, beta ~ 1 (64)", 200, 64, 2, 16, 12, 2, NULL, 0},
    {"near-parallel keys, beta ~ 1, documents (64)", 200, 64, 2, 16, 12, 2, DOCS_64, 8},
    {"near-parallel keys, beta ~ 1 (16)", 100, 16, 2, 16, 12, 2, NULL, 0},
    {"Qwen3.5 heads 128 x 128, documents (64)", 160, 64, 1, 128, 128, 0, DOCS_Q35, 3},
    {"Qwen3.5 heads, near-parallel keys (64)", 160, 64, 1, 128, 128, 2, NULL, 0},
};
#define GDN_NCASES ((int)(sizeof GDN_CASES / sizeof GDN_CASES[0]))

static void test_gdn_chunked(void) {
    double worst_all = 0, worst_dg = 0;
    for (int ci = 0; ci < GDN_NCASES; ci++) {
        const GdnCase *c = &GDN_CASES[ci];
        GdnIn in;
        GdnOut want, got;
        gdn_case_make(c, 101 + (uint64_t)ci, &in);
        gdn_out_alloc(c, &want), gdn_out_alloc(c, &got);
        gdn_case_run(c, &in, 0, &want);
        gdn_case_run(c, &in, 1, &got);
        double each[GO_N];
        const double e = gdn_out_err(c, &got, &want, each);
        EXPECT_LE(e, 1e-10, "the chunked rule, %s: worst %.2e (o %.1e, S_end %.1e, dq %.1e, dk %.1e, dv %.1e, dg %.1e, "
                  "dbeta %.1e, dS0 %.1e)", c->name, e, each[0], each[1], each[2], each[3], each[4], each[5], each[6], each[7]);
        printf("  chunked vs recurrence, %-48s worst %.1e (dg %.1e)", c->name, e, each[GO_DG]);
        if (c->kind == 2) printf(" [key cos %.4f]", gdn_key_cos(c, &in));
        printf("\n");
        worst_all = fmax(worst_all, e), worst_dg = fmax(worst_dg, each[GO_DG]);
        /* the maps of the sequence as one CP chunk: M, B; C from the backward with dS_end = 0. With documents
         * the tokens before the last start (M is exactly 0 past a start; B and C cross the others) */
        const GdnHeads hd = {c->H, c->dk, c->dv};
        const int64_t Tmap = c->ns ? c->starts[c->ns - 1] : c->T;
        const int64_t mk = c->H * c->dk * c->dk, ms = c->H * c->dv * c->dk;
        double *M = xmalloc((size_t)mk * 8), *B = xmalloc((size_t)ms * 8), *Mc = xmalloc((size_t)mk * 8),
               *Bc = xmalloc((size_t)ms * 8), *Cw = xcalloc((size_t)ms, 8), *Cc = xmalloc((size_t)ms * 8);
        ref_gdn_map(&hd, Tmap, in.k, in.v, in.g, in.b, M, B);
        ref_gdn_map_chunked(&hd, Tmap, c->C, in.k, in.v, in.g, in.b, Mc, Bc);
        ref_gdn_bwd(&hd, Tmap, in.q, in.k, in.v, in.g, in.b, in.S0, in.dout, Cw, got.x[GO_DQ], got.x[GO_DK], got.x[GO_DV],
                    got.x[GO_DG], got.x[GO_DB]);
        ref_gdn_cmap_chunked(&hd, Tmap, c->C, in.q, in.k, in.g, in.b, in.dout, Cc);
        const double em = rel_max(Mc, M, mk), eb = rel_max(Bc, B, ms), ec = rel_max(Cc, Cw, ms);
        EXPECT_LE(fmax(em, fmax(eb, ec)), 1e-10, "the chunked maps, %s: M %.2e, B %.2e, C %.2e", c->name, em, eb, ec);
        printf("    its maps over %lld tokens (M, B, C) vs the recurrence's: %.1e %.1e %.1e%s\n", (long long)Tmap, em, eb, ec,
               c->ns ? " (M exactly 0 past a start)" : "");
        free(M); free(B); free(Mc); free(Bc); free(Cw); free(Cc);
        gdn_out_free(&want), gdn_out_free(&got);
        gdn_in_free(&in);
    }
    printf("  the chunked rule: worst of every tensor %.1e, of dg %.1e (band 1e-10 of each tensor's largest entry)\n",
           worst_all, worst_dg);
    /* planted: each must miss the recurrence by far more than the band */
    const char *plant[3] = {"", "dg without the cumulative sum's adjoint", "the 16 x 16 blocks merged without those between"};
    for (int p = 1; p <= 2; p++) {
        double least = INFINITY;
        for (int ci = 0; ci < GDN_NCASES; ci++) {
            const GdnCase *c = &GDN_CASES[ci];
            /* a wrong merge needs a chunk of three blocks or more to show, and a decay that lets a block reach the
             * one after next: at g ~ -20 a token that coupling is e^-320, a merge without it as right */
            if (p == 2 && (c->C < 3 * 16 || c->T < 33 || c->kind == 1)) continue;
            GdnIn in;
            GdnOut want, got;
            gdn_case_make(c, 101 + (uint64_t)ci, &in);
            gdn_out_alloc(c, &want), gdn_out_alloc(c, &got);
            gdn_case_run(c, &in, 0, &want);
            ref_gdn_chunked_plant = p;
            gdn_case_run(c, &in, 1, &got);
            ref_gdn_chunked_plant = 0;
            double each[GO_N];
            const double e = p == 1 ? (gdn_out_err(c, &got, &want, each), each[GO_DG]) : gdn_out_err(c, &got, &want, each);
            least = fmin(least, e);
            EXPECT(e > 1e-6, "planted: %s must miss the recurrence in case %s (err %.2e)", plant[p], c->name, e);
            gdn_out_free(&want), gdn_out_free(&got);
            gdn_in_free(&in);
        }
        printf("  planted: %s misses every case by >= %.1e\n", plant[p], least);
    }
}

/* The chunked rule in float, GEMM by GEMM as a kernel would run it (tests/sim_gdn.c), against the fp64
 * recurrence on the same cases, in the bands the GPU rule's own tests use (tests/test_gpu.c): 2e-2 for
 * what the kernel writes in bf16 (o, dq, dk, dv), 1e-4 for what it writes in fp32 (the final state, dg,
 * dbeta, the initial state's gradient; the maps' S M + B and dS M^T + C). Errors relative l2, as
 * test_gpu's rel_d. All fp32 must hold them; tf32 and bf16 tensor-core inputs are reported (what a
 * kernel's author chooses between: docs/chunked_delta_rule.md, section 11). */
static float *f32_of(const double *x, int64_t n) {
    float *f = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}
/* test_gpu's rel_d: ||got - want|| / ||want||, or ||got|| where want is all 0; NaN if got is not finite */
static double rel_l2_32(const float *got, const double *want, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return NAN;
        num += (got[i] - want[i]) * (got[i] - want[i]), den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static void test_gdn_sim(void) {
    const struct { const char *name; SimOpts op; int check; } modes[] = {
        /* mma, solve, tri, vals, wy, state, dg_pairs, gam64 */
        {"fp32", {SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, 0, 0}, 1},
        {"fp32, dg by pairs", {SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, 1, 0}, 1},
        {"fp32, gamma in fp64", {SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, 0, 1}, 1},
        {"tf32", {SIM_TF32, SIM_TF32, SIM_TF32, SIM_TF32, SIM_TF32, SIM_TF32, 0, 0}, 0},
        {"bf16, fp32 solve", {SIM_BF16, SIM_FP32, SIM_BF16, SIM_BF16, SIM_BF16, SIM_BF16, 0, 0}, 0},
        {"bf16, bf16 solve", {SIM_BF16, SIM_BF16, SIM_BF16, SIM_BF16, SIM_BF16, SIM_BF16, 0, 0}, 0},
        {"bf16, fp32 D S T", {SIM_BF16, SIM_FP32, SIM_FP32, SIM_FP32, SIM_BF16, SIM_FP32, 0, 0}, 0},
        {"bf16, fp32 T U W K~", {SIM_BF16, SIM_FP32, SIM_FP32, SIM_BF16, SIM_FP32, SIM_BF16, 0, 0}, 0},
        {"bf16 P dP dL only", {SIM_BF16, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, 0, 0}, 0},
        /* kernels/gdn_chunked.cu's fast precision (gdn_chunked_precision(0)): its bands in tests/test_gdn_chunked.c */
        {"tf32 P dP dL only, gamma fp64", {SIM_TF32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, SIM_FP32, 0, 1}, 0},
    };
    const int nm = (int)(sizeof modes / sizeof modes[0]);
    /* o, S_end, dq, dk, dv, dg, dbeta, dS0, M, B, C */
    const double band[GO_N + 3] = {2e-2, 1e-4, 2e-2, 2e-2, 2e-2, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4};
    double worst[16][GO_N + 3];
    for (int m = 0; m < nm; m++)
        for (int w = 0; w < GO_N + 3; w++) worst[m][w] = 0;
    /* every mode's row of every case with GDN_SIM_ALL set; else fp32's and bf16's, and every mode's worst */
    const int all = getenv("GDN_SIM_ALL") != NULL;
    const char *col[GO_N + 3] = {"o", "S_end", "dq", "dk", "dv", "dg", "dbeta", "dS0", "M", "B", "C"};
    printf("  the chunked rule simulated in float (tests/sim_gdn.c) vs the fp64 recurrence, relative l2 error:\n");
    printf("  %-48s %-22s", "case", "GEMM operands");
    for (int w = 0; w < GO_N + 3; w++) printf("%s%8s ", w == GO_N ? " |" : "", col[w]);
    printf("\n");
    for (int ci = 0; ci < GDN_NCASES; ci++) {
        const GdnCase *c = &GDN_CASES[ci];
        const GdnHeads hd = {c->H, c->dk, c->dv};
        const int64_t T = c->T, H = c->H, dk = c->dk, dv = c->dv, mk = H * dk * dk, ms = H * dv * dk;
        GdnIn in;
        GdnOut want;
        gdn_case_make(c, 101 + (uint64_t)ci, &in);
        gdn_out_alloc(c, &want);
        gdn_case_run(c, &in, 0, &want);
        double *M = xmalloc((size_t)mk * 8), *B = xmalloc((size_t)ms * 8), *Cw = xcalloc((size_t)ms, 8);
        double *sq = xcalloc((size_t)(T * H * dk), 8), *sk = xcalloc((size_t)(T * H * dk), 8),
               *sv = xcalloc((size_t)(T * H * dv), 8), *sg = xcalloc((size_t)(T * H), 8), *sb = xcalloc((size_t)(T * H), 8);
        ref_gdn_map(&hd, T, in.k, in.v, in.g, in.b, M, B);
        ref_gdn_bwd(&hd, T, in.q, in.k, in.v, in.g, in.b, in.S0, in.dout, Cw, sq, sk, sv, sg, sb);
        float *q = f32_of(in.q, T * H * dk), *k = f32_of(in.k, T * H * dk), *v = f32_of(in.v, T * H * dv),
              *g = f32_of(in.g, T * H), *b = f32_of(in.b, T * H), *S0 = f32_of(in.S0, ms), *dout = f32_of(in.dout, T * H * dv);
        float *x[GO_N + 3];
        const int64_t len3[3] = {mk, ms, ms};
        for (int w = 0; w < GO_N + 3; w++) x[w] = xmalloc((size_t)(w < GO_N ? gdn_out_len(c, w) : len3[w - GO_N]) * 4);
        for (int m = 0; m < nm; m++) {
            const SimOpts *op = &modes[m].op;
            memcpy(x[GO_S], S0, (size_t)ms * 4);
            sim_gdn_fwd(op, &hd, T, c->C, q, k, v, g, b, x[GO_S], x[GO_O]);
            for (int64_t i = 0; i < ms; i++) x[GO_DS0][i] = (float)in.dSf[i];
            sim_gdn_bwd(op, &hd, T, c->C, q, k, v, g, b, S0, dout, x[GO_DS0], x[GO_DQ], x[GO_DK], x[GO_DV], x[GO_DG], x[GO_DB]);
            sim_gdn_maps(op, &hd, T, c->C, q, k, v, g, b, dout, x[GO_N], x[GO_N + 1], x[GO_N + 2]);
            double e[GO_N + 3];
            for (int w = 0; w < GO_N; w++) e[w] = rel_l2_32(x[w], want.x[w], gdn_out_len(c, w));
            e[GO_N] = rel_l2_32(x[GO_N], M, mk), e[GO_N + 1] = rel_l2_32(x[GO_N + 1], B, ms), e[GO_N + 2] = rel_l2_32(x[GO_N + 2], Cw, ms);
            int over = 0;
            for (int w = 0; w < GO_N + 3; w++) {
                worst[m][w] = fmax(worst[m][w], e[w]);
                over += !(e[w] <= band[w]);
            }
            if (modes[m].check)
                EXPECT(!over, "fp32 simulation (%s), %s: %d tensors outside the GPU rule's bands: o %.1e S %.1e dq %.1e dk %.1e "
                       "dv %.1e dg %.1e dbeta %.1e dS0 %.1e M %.1e B %.1e C %.1e", modes[m].name, c->name, over, e[0], e[1],
                       e[2], e[3], e[4], e[5], e[6], e[7], e[8], e[9], e[10]);
            if (!all && m != 0 && m != 4) continue;
            printf("  %-48s %-22s", m ? "" : c->name, modes[m].name);
            for (int w = 0; w < GO_N + 3; w++) printf("%s%8.1e%s", w == GO_N ? " |" : "", e[w], e[w] <= band[w] ? " " : "!");
            printf("\n");
        }
        for (int w = 0; w < GO_N + 3; w++) free(x[w]);
        free(q); free(k); free(v); free(g); free(b); free(S0); free(dout);
        free(M); free(B); free(Cw); free(sq); free(sk); free(sv); free(sg); free(sb);
        gdn_out_free(&want);
        gdn_in_free(&in);
    }
    for (int m = 0; m < nm; m++) {
        printf("  %-48s %-22s", "worst over the cases", modes[m].name);
        for (int w = 0; w < GO_N + 3; w++) printf("%s%8.1e%s", w == GO_N ? " |" : "", worst[m][w], worst[m][w] <= band[w] ? " " : "!");
        printf("\n");
    }
    printf("  (! : outside the GPU rule's band for that tensor: 2e-2 bf16 outputs, 1e-4 fp32 ones)\n");
}

/* The whole Gated DeltaNet layer (projections, causal conv + SiLU, l2norm, decay and beta, the rule,
 * gated RMSNorm, out_proj) against transformers' Qwen3_5GatedDeltaNet on random weights
 * (tests/golden/gdn_layer.safetensors, made by tests/make_golden_gdn.py). */
static double *gdn_tensor(const SafeTensors *st, const char *name, int ndim, const int64_t *shape, int *bad) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *f = xmalloc((size_t)n * 4);
    char err[256];
    if (st_read_f32(st, name, ndim, shape, f, err, sizeof err)) {
        EXPECT(0, "gdn layer golden: %s", err);
        *bad = 1;
    }
    double *d = f64_of(f, n);
    free(f);
    return d;
}

/* a layer's backward against its golden autograd gradients: dx against "grad.x" [1, T, D], and each
 * parameter's (got[i]) against "grad.<name>"; returns the worst rel err (each checked against tol) */
typedef struct { const char *n; int nd; const int64_t *shape; int64_t len; } GoldParam;
static double check_grads(const SafeTensors *st, const char *what, const double *dx, const int64_t *sx, const GoldParam *p,
                          int np, double *const *got, double tol) {
    int bad = 0;
    double *gx = gdn_tensor(st, "grad.x", 3, sx, &bad), worst = bad ? INFINITY : 0;
    const double ex = bad ? INFINITY : rel_l2(dx, gx, sx[1] * sx[2]);
    EXPECT_LE(ex, tol, "%s backward vs autograd: x rel err %.2e", what, ex);
    worst = fmax(worst, ex);
    for (int i = 0; i < np; i++) {
        char n[96];
        snprintf(n, sizeof n, "grad.%s", p[i].n);
        int b = 0;
        double *want = gdn_tensor(st, n, p[i].nd, p[i].shape, &b);
        const double e = b ? INFINITY : rel_l2(got[i], want, p[i].len);
        EXPECT_LE(e, tol, "%s backward vs autograd: %s rel err %.2e", what, p[i].n, e);
        worst = fmax(worst, e);
        free(want);
    }
    free(gx);
    return worst;
}

static void test_gdn_layer(const char *root) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/gdn_layer.safetensors", root);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) { EXPECT(0, "%s", err); return; }
    const GdnLayer L = {.D = 48, .Hk = 2, .Hv = 4, .dk = 8, .dv = 6, .K = 4, .eps = 1e-6};
    const int64_t T = 29, C = 2 * L.Hk * L.dk + L.Hv * L.dv, vd = L.Hv * L.dv;
    int bad = 0;
    const int64_t s_qkv[2] = {C, L.D}, s_z[2] = {vd, L.D}, s_h[2] = {L.Hv, L.D}, s_conv[2] = {C, L.K}, s_v[1] = {L.Hv},
                  s_n[1] = {L.dv}, s_out[2] = {L.D, vd}, s_x[3] = {1, T, L.D};
    double *qkv = gdn_tensor(&st, "in_proj_qkv.weight", 2, s_qkv, &bad), *z = gdn_tensor(&st, "in_proj_z.weight", 2, s_z, &bad),
           *b = gdn_tensor(&st, "in_proj_b.weight", 2, s_h, &bad), *a = gdn_tensor(&st, "in_proj_a.weight", 2, s_h, &bad),
           *conv = gdn_tensor(&st, "conv1d.weight", 2, s_conv, &bad), *dt = gdn_tensor(&st, "dt_bias", 1, s_v, &bad),
           *A = gdn_tensor(&st, "A_log", 1, s_v, &bad), *nw = gdn_tensor(&st, "norm.weight", 1, s_n, &bad),
           *out = gdn_tensor(&st, "out_proj.weight", 2, s_out, &bad), *x = gdn_tensor(&st, "x", 3, s_x, &bad),
           *want = gdn_tensor(&st, "y", 3, s_x, &bad), *y = xmalloc((size_t)(T * L.D) * 8);
    if (!bad) {
        const GdnWeights w = {qkv, z, b, a, conv, dt, A, nw, out};
        ref_gdn_layer(&L, &w, T, x, y, NULL);
        const double e = rel_l2(y, want, T * L.D);
        EXPECT_LE(e, 1e-5, "Gated DeltaNet layer vs transformers: output rel err %.2e", e);
        printf("  Gated DeltaNet layer (hidden 48, key heads 2x8, value heads 4x6, conv 4, T 29) vs transformers: %.1e\n", e);
        /* its backward against transformers' autograd: dx and every weight's gradient */
        double *dy = gdn_tensor(&st, "dy", 3, s_x, &bad), *dx = xmalloc((size_t)(T * L.D) * 8);
        const GoldParam p[9] = {
            {"in_proj_qkv.weight", 2, s_qkv, C * L.D}, {"in_proj_z.weight", 2, s_z, vd * L.D}, {"in_proj_b.weight", 2, s_h, L.Hv * L.D},
            {"in_proj_a.weight", 2, s_h, L.Hv * L.D}, {"conv1d.weight", 2, s_conv, C * L.K}, {"dt_bias", 1, s_v, L.Hv},
            {"A_log", 1, s_v, L.Hv}, {"norm.weight", 1, s_n, L.dv}, {"out_proj.weight", 2, s_out, L.D * vd}};
        double *gw_[9];
        for (int i = 0; i < 9; i++) gw_[i] = xcalloc((size_t)p[i].len, 8);
        if (!bad) {
            GdnGrads gw = {gw_[0], gw_[1], gw_[2], gw_[3], gw_[4], gw_[5], gw_[6], gw_[7], gw_[8]};
            ref_gdn_layer_bwd(&L, &w, T, x, dy, dx, &gw);
            const double worst = check_grads(&st, "Gated DeltaNet layer", dx, s_x, p, 9, gw_, 1e-5);
            printf("  its backward vs transformers' autograd (dx and the 9 weights): worst %.1e\n", worst);
        }
        for (int i = 0; i < 9; i++) free(gw_[i]);
        free(dy); free(dx);
    }
    free(qkv); free(z); free(b); free(a); free(conv); free(dt); free(A); free(nw); free(out); free(x); free(want); free(y);
    st_close(&st);
}

/* The hybrid's gated full attention against transformers' Qwen3_5Attention (q_proj with its output
 * gate, (1 + w) q/k norms, RoPE on 4 of 16 dims: partial_rotary_factor 0.25; gated_attn.safetensors) */
static void test_gated_attn(const char *root) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/gated_attn.safetensors", root);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) { EXPECT(0, "%s", err); return; }
    const GatedAttn A = {.D = 48, .Hq = 4, .Hkv = 2, .hd = 16, .rot = 4, .theta = 10000, .eps = 1e-6};
    const int64_t T = 21;
    int bad = 0;
    const int64_t sq[2] = {A.Hq * 2 * A.hd, A.D}, skv[2] = {A.Hkv * A.hd, A.D}, so[2] = {A.D, A.Hq * A.hd}, sn[1] = {A.hd},
                  sx[3] = {1, T, A.D};
    double *wq = gdn_tensor(&st, "q_proj.weight", 2, sq, &bad), *wk = gdn_tensor(&st, "k_proj.weight", 2, skv, &bad),
           *wv = gdn_tensor(&st, "v_proj.weight", 2, skv, &bad), *wo = gdn_tensor(&st, "o_proj.weight", 2, so, &bad),
           *qn = gdn_tensor(&st, "q_norm.weight", 1, sn, &bad), *kn = gdn_tensor(&st, "k_norm.weight", 1, sn, &bad),
           *x = gdn_tensor(&st, "x", 3, sx, &bad), *want = gdn_tensor(&st, "y", 3, sx, &bad), *y = xmalloc((size_t)(T * A.D) * 8);
    int64_t pos[21];
    for (int64_t t = 0; t < T; t++) pos[t] = t;
    if (!bad) {
        const GatedAttnWeights w = {wq, wk, wv, wo, qn, kn};
        ref_gated_attn(&A, &w, T, x, pos, y);
        const double e = rel_l2(y, want, T * A.D);
        EXPECT_LE(e, 1e-5, "gated full attention vs transformers: output rel err %.2e", e);
        printf("  gated full attention (4/2 heads of 16, 4 rotated dims, output gate) vs transformers: %.1e\n", e);
        /* its backward against autograd: dx and the six weights */
        double *dy = gdn_tensor(&st, "dy", 3, sx, &bad), *dx = xmalloc((size_t)(T * A.D) * 8);
        const GoldParam p[6] = {
            {"q_proj.weight", 2, sq, sq[0] * sq[1]}, {"k_proj.weight", 2, skv, skv[0] * skv[1]},
            {"v_proj.weight", 2, skv, skv[0] * skv[1]}, {"o_proj.weight", 2, so, so[0] * so[1]},
            {"q_norm.weight", 1, sn, A.hd}, {"k_norm.weight", 1, sn, A.hd}};
        double *g_[6];
        for (int i = 0; i < 6; i++) g_[i] = xcalloc((size_t)p[i].len, 8);
        if (!bad) {
            GatedAttnGrads gw = {g_[0], g_[1], g_[2], g_[3], g_[4], g_[5]};
            ref_gated_attn_bwd(&A, &w, T, x, pos, dy, dx, &gw);
            const double worst = check_grads(&st, "gated full attention", dx, sx, p, 6, g_, 1e-5);
            printf("  its backward vs transformers' autograd (dx and the 6 weights): worst %.1e\n", worst);
        }
        for (int i = 0; i < 6; i++) free(g_[i]);
        free(dy); free(dx);
    }
    free(wq); free(wk); free(wv); free(wo); free(qn); free(kn); free(x); free(want); free(y);
    st_close(&st);
}

/* The Qwen3.5 hybrid text model (tests/ref_qwen35.c): 3 Gated DeltaNet layers then a gated full
 * attention layer, against transformers' Qwen3_5ForCausalLM (tests/golden/qwen35_tiny.safetensors):
 * the loss, the logits and the gradient of every parameter. */
typedef struct { const char *name; int64_t len; } Q35Tensor; /* a parameter: its transformers name, elements */

static void test_qwen35(const char *root) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/qwen35_tiny.safetensors", root);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) { EXPECT(0, "%s", err); return; }
    Q35Config c = {.V = 128, .D = 48, .I = 64, .L = 4, .linear = {1, 1, 1, 0}, .eps = 1e-6};
    c.gdn = (GdnLayer){.D = 48, .Hk = 2, .Hv = 4, .dk = 8, .dv = 6, .K = 4, .eps = 1e-6};
    c.attn = (GatedAttn){.D = 48, .Hq = 4, .Hkv = 2, .hd = 16, .rot = 4, .theta = 10000, .eps = 1e-6};
    Q35Weights w = {0};
    Q35Grads g = {0};
    /* every parameter by its transformers name: where its weights and its gradient go */
    Q35Tensor list[80];
    int n = 0, bad = 0;
    double *tmp[80];
#define ADD(nm, wslot, gslot) do { snprintf(names[n], sizeof names[n], "%s", nm); list[n] = (Q35Tensor){names[n], 0}; \
    wptr[n] = (const double **)&(wslot); gptr[n] = &(gslot); n++; } while (0)
    static char names[80][96];
    const double **wptr[80];
    double **gptr[80];
    ADD("model.embed_tokens.weight", w.embed, g.embed);
    ADD("model.norm.weight", w.norm, g.norm);
    ADD("lm_head.weight", w.lm_head, g.lm_head);
    for (int l = 0; l < 4; l++) {
        char b[96];
        Q35Layer *L = &w.layer[l];
        Q35LayerGrads *G = &g.layer[l];
#define LAYER(suffix, ws, gs) do { snprintf(b, sizeof b, "model.layers.%d.%s", l, suffix); ADD(b, ws, gs); } while (0)
        LAYER("input_layernorm.weight", L->in_norm, G->in_norm);
        LAYER("post_attention_layernorm.weight", L->post_norm, G->post_norm);
        LAYER("mlp.gate_proj.weight", L->gate, G->gate);
        LAYER("mlp.up_proj.weight", L->up, G->up);
        LAYER("mlp.down_proj.weight", L->down, G->down);
        if (c.linear[l]) {
            LAYER("linear_attn.in_proj_qkv.weight", L->gdn.qkv, G->gdn.qkv);
            LAYER("linear_attn.in_proj_z.weight", L->gdn.z, G->gdn.z);
            LAYER("linear_attn.in_proj_b.weight", L->gdn.b, G->gdn.b);
            LAYER("linear_attn.in_proj_a.weight", L->gdn.a, G->gdn.a);
            LAYER("linear_attn.conv1d.weight", L->gdn.conv, G->gdn.conv);
            LAYER("linear_attn.dt_bias", L->gdn.dt_bias, G->gdn.dt_bias);
            LAYER("linear_attn.A_log", L->gdn.A_log, G->gdn.A_log);
            LAYER("linear_attn.norm.weight", L->gdn.norm, G->gdn.norm);
            LAYER("linear_attn.out_proj.weight", L->gdn.out, G->gdn.out);
        } else {
            LAYER("self_attn.q_proj.weight", L->attn.q, G->attn.q);
            LAYER("self_attn.k_proj.weight", L->attn.k, G->attn.k);
            LAYER("self_attn.v_proj.weight", L->attn.v, G->attn.v);
            LAYER("self_attn.o_proj.weight", L->attn.o, G->attn.o);
            LAYER("self_attn.q_norm.weight", L->attn.q_norm, G->attn.q_norm);
            LAYER("self_attn.k_norm.weight", L->attn.k_norm, G->attn.k_norm);
        }
#undef LAYER
    }
#undef ADD
    for (int i = 0; i < n; i++) { /* read each at its stored shape */
        const StTensor *t = st_find(&st, list[i].name);
        if (!t) { EXPECT(0, "qwen35 golden: no %s", list[i].name); bad = 1; continue; }
        float *f = xmalloc((size_t)t->numel * 4);
        if (st_read_f32(&st, list[i].name, t->ndim, t->shape, f, err, sizeof err)) { EXPECT(0, "%s", err); bad = 1; }
        tmp[i] = f64_of(f, t->numel);
        free(f);
        list[i].len = t->numel;
        *wptr[i] = tmp[i];
        *gptr[i] = xcalloc((size_t)t->numel, 8);
    }
    const StTensor *tt = st_find(&st, "tokens");
    int32_t tok32[24];
    uint32_t tok[24];
    const int64_t s1[1] = {1};
    if (!tt || tt->numel != 24 || st_read_i32(&st, "tokens", 24, tok32, err, sizeof err)) { EXPECT(0, "qwen35 golden: tokens"); bad = 1; }
    for (int i = 0; i < 24; i++) tok[i] = (uint32_t)tok32[i];
    float gl = NAN;
    if (st_read_f32(&st, "loss", 1, s1, &gl, err, sizeof err)) { EXPECT(0, "%s", err); bad = 1; }
    if (!bad) {
        const int64_t T = 23;
        double *logits = xmalloc((size_t)(T * c.V) * 8);
        const double loss = ref_q35(&c, &w, T, tok, logits, &g);
        const double le = fabs(loss - gl) / fabs(gl);
        EXPECT_LE(le, 1e-5, "Qwen3.5 hybrid model: loss %.7f vs transformers %.7f (rel %.2e)", loss, gl, le);
        float *fl = xmalloc((size_t)(T * c.V) * 4);
        const int64_t sl[2] = {T, c.V};
        const double lerr = st_read_f32(&st, "logits", 2, sl, fl, err, sizeof err) ? INFINITY : rel_l2_f(logits, fl, T * c.V);
        EXPECT_LE(lerr, 1e-5, "Qwen3.5 hybrid model: logits rel err %.2e", lerr);
        double worst = 0;
        const char *wn = "";
        for (int i = 0; i < n; i++) {
            char gn[128];
            snprintf(gn, sizeof gn, "grad.%s", list[i].name);
            const StTensor *t = st_find(&st, gn);
            float *f = t ? xmalloc((size_t)t->numel * 4) : NULL;
            const double e = t && !st_read_f32(&st, gn, t->ndim, t->shape, f, err, sizeof err)
                                 ? rel_l2_f(*gptr[i], f, list[i].len) : INFINITY;
            EXPECT_LE(e, 1e-4, "Qwen3.5 hybrid model: %s rel err %.2e", gn, e);
            if (!(e <= worst)) worst = e, wn = list[i].name;
            free(f);
        }
        printf("  Qwen3.5 hybrid (3 linear + 1 full attention layers) vs transformers: loss %.7f (rel %.1e), logits %.1e, "
               "worst of %d gradients %.1e (%s)\n", loss, le, lerr, n, worst, wn);
        free(logits); free(fl);
    }
    for (int i = 0; i < n; i++) free(tmp[i]), free(*gptr[i]);
    st_close(&st);
}

/* ------------------------------------------------------------------ host AdamW (stage 4) */
/* The host optimizer: bit-identical for any thread count, equal to the GPU kernel's fp32 expression
 * evaluated one element at a time, the norm in fp64 (test_gpu compares it with the kernel itself). */
static void test_cpu_adam(void) {
    const int64_t n = 70001, n0 = 30011;
    float *g = xmalloc(n * 4), *p0 = xmalloc(n * 4), *m0 = xmalloc(n * 4), *v0 = xmalloc(n * 4);
    uint64_t r = 99;
    for (int64_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        g[i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * 3.f;
        p0[i] = 0.02f * (float)((i % 101) - 50);
        m0[i] = 1e-3f * (float)(i % 7);
        v0[i] = 1e-4f * (float)(i % 5);
    }
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += (double)g[i] * g[i];
    const double s1 = cpu_sumsq(g, n, 1), s5 = cpu_sumsq(g, n, 5);
    EXPECT(fabs(s1 - want) <= 1e-12 * want && fabs(s5 - want) <= 1e-12 * want, "host gradient norm %.12g / %.12g vs %.12g", s1,
           s5, want);
    ParamInfo mat = {.ndim = 2}, norm = {.ndim = 1};
    const Piece pcs[2] = {{&mat, 0, n0, 0}, {&norm, 0, n - n0, n0}};
    const AdamHP hp = {1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 4};
    float *pa = xmalloc(n * 4), *ma = xmalloc(n * 4), *va = xmalloc(n * 4), *pb = xmalloc(n * 4), *mb = xmalloc(n * 4),
          *vb = xmalloc(n * 4);
    uint16_t *wa = xmalloc(n * 2), *wb = xmalloc(n * 2);
    memcpy(pa, p0, n * 4); memcpy(ma, m0, n * 4); memcpy(va, v0, n * 4);
    memcpy(pb, p0, n * 4); memcpy(mb, m0, n * 4); memcpy(vb, v0, n * 4);
    cpu_adamw(pcs, 2, pa, wa, ma, va, g, want, &hp, 1);
    cpu_adamw(pcs, 2, pb, wb, mb, vb, g, want, &hp, 6);
    EXPECT(!memcmp(pa, pb, n * 4) && !memcmp(ma, mb, n * 4) && !memcmp(va, vb, n * 4) && !memcmp(wa, wb, n * 2),
           "host AdamW: 1 and 6 threads give identical bits");
    /* the kernel's expression, element by element */
    const float norm2 = (float)sqrt(want), clip = norm2 > 1.f ? 1.f / (norm2 + 1e-6f) : 1.f;
    const float bc1 = (float)(1 - pow(0.9, 4)), bc2 = (float)(1 - pow(0.95, 4));
    int64_t differ = 0;
    for (int64_t i = 0; i < n; i++) {
        const float wd = i < n0 ? 0.1f : 0.f, gi = g[i] * clip;
        const float mi = 0.9f * m0[i] + (1.f - 0.9f) * gi, vi = 0.95f * v0[i] + (1.f - 0.95f) * gi * gi;
        const float pw = p0[i] - 1e-3f * ((mi / bc1) / (sqrtf(vi / bc2) + 1e-8f) + wd * p0[i]);
        differ += pa[i] != pw || ma[i] != mi || va[i] != vi || wa[i] != f32_to_bf16(pw);
    }
    EXPECT(differ == 0, "host AdamW equals the kernel's fp32 expression element by element (%lld differ)", (long long)differ);
    uint16_t *wc = xmalloc(n * 2);
    cpu_cast_bf16(wc, pa, n, 3);
    EXPECT(!memcmp(wc, wa, n * 2), "host bf16 cast equals AdamW's bf16 weights");
    free(g); free(p0); free(m0); free(v0); free(pa); free(ma); free(va); free(pb); free(mb); free(vb);
    free(wa); free(wb); free(wc);
}

/* ------------------------------------------------------------------ rendezvous (several nodes) */
static void test_rendezvous(void) {
    char path[1100], err[512];
    snprintf(path, sizeof path, "%s/rdv", tmpdir);
    unsigned char id[RDV_ID_BYTES], got[RDV_ID_BYTES];
    uint64_t nonce = 0;
    for (int i = 0; i < RDV_ID_BYTES; i++) id[i] = (unsigned char)(i * 7 + 1);
    const double t0 = rdv_wall_s();
    EXPECT(rdv_await(path, "job42", 0, 2, 8, t0, 0.5, got, err, sizeof err) && strstr(err, "no rendezvous file"),
           "no file: a reader gives up after its timeout with a message (%s)", err);
    EXPECT(!rdv_publish(path, "job41", 2, 8, id, &nonce, err, sizeof err), "node 0 publishes: %s", err);
    EXPECT(rdv_await(path, "job42", 0, 2, 8, t0, 0.5, got, err, sizeof err) && strstr(err, "another run"),
           "another run's file (run id job41) is not joined: %s", err);
    EXPECT(!rdv_publish(path, "job42", 2, 8, id, &nonce, err, sizeof err), "node 0 replaces the old file: %s", err);
    memset(got, 0, sizeof got);
    EXPECT(!rdv_await(path, "job42", 0, 2, 8, t0, 0.5, got, err, sizeof err) && !memcmp(got, id, sizeof id),
           "this run's file is joined and carries node 0's id");
    EXPECT(rdv_await(path, "job42", 0, 4, 8, t0, 0.5, got, err, sizeof err) && strstr(err, "--nnodes 4"),
           "a file describing another job shape is an error: %s", err);
    /* no run id: only a file written after the reader started (less the clock allowance) */
    EXPECT(!rdv_publish(path, "", 2, 8, id, &nonce, err, sizeof err), "published without a run id");
    EXPECT(!rdv_await(path, "", 0, 2, 8, rdv_wall_s(), 0.5, got, err, sizeof err), "a fresh file without run id is joined");
    EXPECT(rdv_await(path, "", 0, 2, 8, rdv_wall_s() + 2 * RDV_SKEW_S, 0.5, got, err, sizeof err),
           "a file written long before the reader started is stale: %s", err);
    rdv_remove(path);
    struct stat sb;
    EXPECT(stat(path, &sb) != 0, "node 0 removes the file once everyone joined");
    /* the nonce: a process removes only the file it published */
    uint64_t mine = 0, newer = 0;
    EXPECT(!rdv_publish(path, "job43", 2, 8, id, &mine, err, sizeof err), "an old launch publishes");
    EXPECT(!rdv_publish(path, "job43", 2, 8, id, &newer, err, sizeof err) && newer != mine,
           "a newer launch publishes with another nonce");
    rdv_remove_own(path, mine);
    EXPECT(stat(path, &sb) == 0, "the old launch dying does not remove the newer launch's file");
    rdv_remove_own(path, newer);
    EXPECT(stat(path, &sb) != 0, "the newer launch removes its own");
    /* a signal (SIGTERM from the scheduler, Ctrl-C) before everyone joined removes the file */
    fflush(NULL);
    const pid_t child = fork();
    if (child == 0) {
        uint64_t n1 = 0;
        char e[512];
        if (rdv_publish(path, "job44", 2, 8, id, &n1, e, sizeof e)) _exit(3);
        rdv_remove_on_signal(path, n1);
        raise(SIGTERM);
        _exit(4); /* not reached: SIGTERM's own action ends the process */
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM && stat(path, &sb) != 0,
           "node 0 killed by SIGTERM leaves no rendezvous file (status %d)", status);
    /* the run id every node of one launch shares without --run-id */
    int env = 0;
    setenv("SLURM_JOB_ID", "77", 1);
    setenv("SLURM_STEP_ID", "3", 1);
    EXPECT(!strcmp(rdv_run_id(NULL, &env), "slurm-77.3") && env, "no --run-id under Slurm: slurm-77.3 (got %s)",
           rdv_run_id(NULL, &env));
    setenv("SLURM_RESTART_COUNT", "2", 1);
    EXPECT(!strcmp(rdv_run_id(NULL, &env), "slurm-77.3r2"), "a requeued job's id carries its restart count (%s)",
           rdv_run_id(NULL, &env));
    setenv("LONGCTX_RUN_ID", "mine", 1);
    EXPECT(!strcmp(rdv_run_id("", &env), "mine") && env && !strcmp(rdv_run_id("given", &env), "given") && !env,
           "LONGCTX_RUN_ID before Slurm's, --run-id before both");
    /* an id from the environment survives a requeue: a file of that id must still be recent */
    uint64_t n2 = 0;
    EXPECT(!rdv_publish(path, "mine", 2, 8, id, &n2, err, sizeof err), "published under an environment id");
    EXPECT(rdv_await(path, "mine", 1, 2, 8, rdv_wall_s() + 2 * RDV_SKEW_S, 0.5, got, err, sizeof err),
           "an old file of an environment id is stale: %s", err);
    EXPECT(!rdv_await(path, "mine", 0, 2, 8, rdv_wall_s() + 2 * RDV_SKEW_S, 0.5, got, err, sizeof err),
           "an old file of a --run-id is joined (the id alone binds it)");
    rdv_remove(path);
    unsetenv("SLURM_JOB_ID"); unsetenv("SLURM_STEP_ID"); unsetenv("LONGCTX_RUN_ID"); unsetenv("SLURM_RESTART_COUNT");
    EXPECT(!strcmp(rdv_run_id(NULL, &env), "") && !env, "no id anywhere: none (the file's time binds it)");
    /* a signal the process ignores (nohup) stays ignored; restored actions after the join */
    fflush(NULL);
    const pid_t c2 = fork();
    if (c2 == 0) {
        uint64_t n3 = 0;
        char e[512];
        signal(SIGHUP, SIG_IGN);
        if (rdv_publish(path, "job45", 2, 8, id, &n3, e, sizeof e)) _exit(3);
        rdv_remove_on_signal(path, n3);
        raise(SIGHUP); /* ignored: the process goes on */
        rdv_signals_restore();
        struct sigaction now;
        sigaction(SIGTERM, NULL, &now);
        _exit(now.sa_handler == SIG_DFL ? 0 : 7);
    }
    waitpid(c2, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "under nohup SIGHUP stays ignored; after the join SIGTERM "
           "acts as before (status %d)", status);
    rdv_remove(path);
}

/* ------------------------------------------------------------------ NUMA */
static void test_numa(void) {
    unsigned char m[64];
    EXPECT(cpulist_parse("0-3,8,10-11\n", m, 64) == 7 && m[0] && m[3] && !m[4] && m[8] && !m[9] && m[11],
           "cpulist 0-3,8,10-11: 7 CPUs");
    EXPECT(cpulist_parse("5", m, 64) == 1 && m[5], "one CPU");
    EXPECT(cpulist_parse("0-1,1-2", m, 64) == 3, "overlapping ranges count once");
    EXPECT(cpulist_parse("3-1", m, 64) < 0 && cpulist_parse("a", m, 64) < 0 && cpulist_parse("0-99", m, 64) < 0 &&
               cpulist_parse("1,,2", m, 64) < 0,
           "malformed lists and CPUs past the mask are refused");
    /* a fake sysfs: the GPU's bus id as CUDA prints it (upper case) finds sysfs's lower-case entry */
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/sys/bus/pci/devices/0000:1a:00.0", tmpdir);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    EXPECT(!system(cmd), "fake sysfs made");
    snprintf(path, sizeof path, "%s/local_cpulist", dir);
    FILE *f = fopen(path, "w");
    if (f) { fputs("0-27,56-83\n", f); fclose(f); }
    snprintf(path, sizeof path, "%s/numa_node", dir);
    f = fopen(path, "w");
    if (f) { fputs("1\n", f); fclose(f); }
    snprintf(dir, sizeof dir, "%s/sys", tmpdir);
    unsigned char *mask = xcalloc(NUMA_MAX_CPUS, 1);
    int node = -9;
    EXPECT(numa_device_cpus(dir, "0000:1A:00.0", mask, &node) == 56 && node == 1 && mask[27] && !mask[28] && mask[56],
           "GPU 0000:1A:00.0: NUMA node 1, 56 CPUs (node %d)", node);
    EXPECT(numa_device_cpus(dir, "0000:99:00.0", mask, &node) < 0, "a device sysfs does not list: -1");
    /* binding to CPUs this thread may not use leaves it as it was */
    memset(mask, 0, NUMA_MAX_CPUS);
    mask[NUMA_MAX_CPUS - 1] = 1;
    char desc[128];
    EXPECT(numa_bind_thread(mask, desc, sizeof desc) == 0, "no CPU in common: left as it was (%s)", desc);
    free(mask);
}

/* ------------------------------------------------------------------ the fatal path */
static char fatal_mark[1100];
static void fatal_hook(void) { /* counts its runs: one line each; slow, so a second DIE overlaps it */
    FILE *f = fopen(fatal_mark, "a");
    if (f) { fputs("hook\n", f); fclose(f); }
    usleep(300000);
}
static void *die_now(void *arg) {
    (void)arg;
    DIE("a rank fails (test)");
    return NULL;
}
static void *spin(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}
/* a rank whose communicator the hook aborts: it fails too, as a consequence of the first */
static volatile int fatal_aborted;
static void abort_hook(void) {
    fatal_aborted = 1;
    usleep(300000);
}
static void *dies_after_abort(void *arg) {
    (void)arg;
    while (!fatal_aborted) usleep(1000);
    DIE("a consequence (test)");
    return NULL;
}

/* DIE from one thread while others run (or DIE too): the hooks run once, the process exits 1 at once */
static void test_fatal(void) {
    snprintf(fatal_mark, sizeof fatal_mark, "%s/fatal", tmpdir);
    for (int both = 0; both < 2; both++) {
        unlink(fatal_mark);
        const double t0 = (double)time(NULL);
        fflush(NULL);
        const pid_t child = fork();
        if (child == 0) {
            if (!freopen("/dev/null", "w", stderr)) _exit(5);
            longctx_on_fatal(fatal_hook);
            pthread_t t[4];
            for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, i == 0 || (both && i == 1) ? die_now : spin, NULL);
            for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
            _exit(6); /* not reached */
        }
        int status = 0;
        waitpid(child, &status, 0);
        int lines = 0;
        char line[64];
        FILE *f = fopen(fatal_mark, "r");
        while (f && fgets(line, sizeof line, f)) lines++;
        if (f) fclose(f);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1 && (double)time(NULL) - t0 < 30,
               "%s: the process exits 1 promptly while other threads still run (status %d)",
               both ? "two ranks DIE at once" : "one rank DIEs", status);
        EXPECT(lines == 1, "%s: the fatal hooks ran once (%d)", both ? "two ranks DIE at once" : "one rank DIEs", lines);
    }
    /* the reason is the last line: a rank failing because the hook aborted its communicator says nothing */
    char errfile[1200];
    snprintf(errfile, sizeof errfile, "%s/fatal.err", tmpdir);
    fflush(NULL);
    const pid_t child = fork();
    if (child == 0) {
        if (!freopen(errfile, "w", stderr)) _exit(5);
        longctx_on_fatal(abort_hook);
        pthread_t t[2];
        pthread_create(&t[1], NULL, dies_after_abort, NULL);
        pthread_create(&t[0], NULL, die_now, NULL);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        _exit(6);
    }
    int status = 0;
    waitpid(child, &status, 0);
    int lines = 0, reason = 0;
    char line[512];
    FILE *f = fopen(errfile, "r");
    while (f && fgets(line, sizeof line, f)) lines++, reason += strstr(line, "a rank fails") != NULL;
    if (f) fclose(f);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1 && lines == 1 && reason == 1,
           "a rank failing as a consequence prints nothing: stderr holds the one reason (%d lines, status %d)", lines,
           status);
}


/* ------------------------------------------------------------------ checkpoint directories */
/* a save's stand-in: DIR/step-N.partial with a trainer_state file, as state_save leaves it */
static int fake_save(const char *root, int64_t step, int commit, int64_t keep) {
    char err[CKPT_PATH + 512], dir[CKPT_PATH], f[CKPT_PATH + 64];
    if (ckpt_begin(root, step, err, sizeof err)) { printf("  %s\n", err); return -1; }
    ckpt_partial_dir(root, step, dir, sizeof dir);
    snprintf(f, sizeof f, "%s/trainer_state.safetensors", dir);
    FILE *fp = fopen(f, "w");
    if (!fp || fprintf(fp, "step %lld\n", (long long)step) < 0 || fclose(fp)) return -1;
    if (commit && ckpt_commit(root, step, keep, err, sizeof err)) { printf("  %s\n", err); return -1; }
    return 0;
}
static int exists(const char *root, const char *name) {
    char p[CKPT_PATH + 64];
    snprintf(p, sizeof p, "%s/%s", root, name);
    struct stat sb;
    return !lstat(p, &sb);
}

static void test_ckpt(void) {
    char root[1200], out[CKPT_PATH], want[CKPT_PATH], note[4096], err[CKPT_PATH + 512], p[CKPT_PATH + 64];
    snprintf(root, sizeof root, "%s/ck", tmpdir);
    EXPECT(ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && strstr(err, "no such directory"),
           "--resume of a missing directory is refused: %s", err);
    EXPECT(!fake_save(root, 1, 1, 2), "a first save commits");
    EXPECT(exists(root, "step-1") && !exists(root, "step-1.partial"), "the partial directory became step-1");
    const ssize_t len = readlink(strcat(strcpy(p, root), "/latest"), out, sizeof out - 1);
    if (len > 0) out[len] = 0;
    EXPECT(len > 0 && !strcmp(out, "step-1"), "latest is a link to step-1 (got %s)", len > 0 ? out : "none");
    ckpt_step_dir(root, 1, want, sizeof want);
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want) && !note[0],
           "--resume DIR takes DIR/latest: %s", out);
    /* a crash in the middle of step 2's save: its partial directory stays, step 1 is untouched */
    EXPECT(!fake_save(root, 2, 0, 2), "step 2's save begins (and is never committed)");
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want),
           "after a crash mid-save --resume DIR still takes step-1: %s", out);
    EXPECT(strstr(note, "ignoring") && strstr(note, "step-2.partial"), "the partial save is ignored with a message: %s",
           note);
    ckpt_partial_dir(root, 2, p, sizeof p);
    EXPECT(ckpt_resolve(p, out, sizeof out, note, sizeof note, err, sizeof err) && strstr(err, "incomplete save") &&
               strstr(err, "step-2.partial"),
           "--resume of the partial directory is refused by name: %s", err);
    strcat(p, "/");
    EXPECT(ckpt_resolve(p, out, sizeof out, note, sizeof note, err, sizeof err) && strstr(err, "incomplete save"),
           "... with a trailing slash too");
    /* the next save of step 2 starts from an empty partial directory */
    ckpt_partial_dir(root, 2, p, sizeof p);
    strcat(p, "/stale");
    FILE *fp = fopen(p, "w");
    if (fp) fclose(fp);
    EXPECT(!fake_save(root, 2, 1, 2), "step 2 saved again after the crash");
    EXPECT(!exists(root, "step-2/stale") && !exists(root, "step-2.partial"), "the stale partial's files are gone");
    EXPECT(exists(root, "step-1") && exists(root, "step-2"), "--save-keep 2: both saves kept");
    EXPECT(!fake_save(root, 3, 1, 2), "step 3 saved");
    EXPECT(!exists(root, "step-1") && exists(root, "step-2") && exists(root, "step-3"),
           "--save-keep 2: step-1 removed once step-3 is complete");
    ckpt_step_dir(root, 3, want, sizeof want);
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want),
           "latest follows the newest save: %s", out);
    /* re-saving a step that exists (a run resumed from an earlier step) replaces it */
    EXPECT(!fake_save(root, 3, 1, 2), "step 3 saved over an existing step-3");
    EXPECT(exists(root, "step-3") && !exists(root, "step-3.old"), "no step-3.old is left behind");
    /* latest pointing nowhere (deleted by hand): the newest complete save, with a message */
    snprintf(p, sizeof p, "%s/latest", root);
    unlink(p);
    EXPECT(!symlink("step-9", p), "latest made to point at a missing step-9");
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want) &&
               strstr(note, "not a complete save"),
           "a broken latest falls back to the newest complete save (%s): %s", out, note);
    unlink(p);
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want),
           "no latest at all: the newest complete save");
    /* a step directory without its trainer state is not a save; a step directory resolves to itself */
    snprintf(p, sizeof p, "%s/step-7", root);
    mkdir(p, 0755);
    int64_t steps[8];
    const int64_t n = ckpt_list(root, steps, 8);
    EXPECT(n == 2 && steps[0] == 3 && steps[1] == 2, "complete saves newest first: 3, 2 (got %lld: %lld %lld)",
           (long long)n, (long long)(n > 0 ? steps[0] : -1), (long long)(n > 1 ? steps[1] : -1));
    EXPECT(!ckpt_resolve(want, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want),
           "--resume DIR/step-3 is that step");
    /* an older partial save (a crash long ago) goes when a newer save completes */
    EXPECT(!fake_save(root, 1, 0, 0), "a stale step-1.partial");
    EXPECT(!fake_save(root, 4, 1, 0), "step 4 saved with --save-keep 0");
    EXPECT(!exists(root, "step-1.partial") && exists(root, "step-2") && exists(root, "step-3") && exists(root, "step-4"),
           "the older partial is removed, --save-keep 0 keeps every complete save");
    /* a run resumed from step 2 into the same DIR: its saves never remove the later 3 and 4 */
    EXPECT(!fake_save(root, 5, 1, 1) && !exists(root, "step-4") && exists(root, "step-5"), "keep 1 at step 5");
    EXPECT(!fake_save(root, 2, 1, 1) && exists(root, "step-5") && exists(root, "step-2"),
           "--save-keep 1 at step 2 (resumed from an earlier save) leaves the later step-5 alone");
    ckpt_step_dir(root, 2, want, sizeof want);
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want),
           "latest names the resumed run's step-2, not the later step-5: %s", out);
    /* a re-save stopped between moving the old step-N aside and renaming the new one into place */
    snprintf(p, sizeof p, "%s/step-2", root);
    snprintf(out, sizeof out, "%s/step-2.old", root);
    EXPECT(!rename(p, out), "step-2 moved aside as step-2.old (a crash follows)");
    snprintf(want, sizeof want, "%s/step-2.old", root);
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want) &&
               strstr(note, "missing"),
           "latest naming a missing step-2 takes step-2.old (%s): %s", out, note);
    snprintf(out, sizeof out, "%s/step-2.old", root);
    EXPECT(!rename(out, p), "restored");
    /* a removal a crash interrupted leaves no directory that looks complete */
    snprintf(p, sizeof p, "%s/step-1.removing", root);
    mkdir(p, 0755);
    EXPECT(ckpt_list(root, steps, 8) == 2, "step-1.removing is not a save (complete: 5, 2)");
    EXPECT(!fake_save(root, 6, 1, 0) && !exists(root, "step-1.removing"), "the next save clears it");
    /* a root that still holds a save of the older one-directory layout: its step-N saves win */
    snprintf(p, sizeof p, "%s/trainer_state.safetensors", root);
    fp = fopen(p, "w");
    if (fp) fclose(fp);
    ckpt_step_dir(root, 6, want, sizeof want);
    EXPECT(!ckpt_resolve(root, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, want),
           "a root with an old-layout trainer_state and step directories resolves to latest: %s", out);
    snprintf(p, sizeof p, "%s/old", tmpdir);
    mkdir(p, 0755);
    snprintf(out, sizeof out, "%s/old/trainer_state.safetensors", tmpdir);
    fp = fopen(out, "w");
    if (fp) fclose(fp);
    EXPECT(!ckpt_resolve(p, out, sizeof out, note, sizeof note, err, sizeof err) && !strcmp(out, p),
           "an old-layout save alone is still resumed from");
    snprintf(p, sizeof p, "%s/empty", tmpdir);
    mkdir(p, 0755);
    EXPECT(ckpt_resolve(p, out, sizeof out, note, sizeof note, err, sizeof err) && strstr(err, "no complete save"),
           "a directory with no save is refused: %s", err);
    snprintf(p, sizeof p, "%s/file", tmpdir);
    fp = fopen(p, "w");
    if (fp) fclose(fp);
    EXPECT(fake_save(p, 1, 0, 0), "--save onto a file is refused");
}

/* ------------------------------------------------------------------ packed documents, balanced (common/layout.c) */
/* The balanced layout of packed documents over context-parallel ranks: each rank holds exactly S/P
 * tokens, every window position once, in pieces of one document each whose positions restart per
 * document; the ring's blocks on it compute every causal pair of every document exactly once; each
 * rank's pairs are within the layout's bound B of the mean, and B within its closed form. Checked
 * token by token (brute force) over every window of up to 12 tokens (every way to cut it into
 * documents) at every P dividing it, then random windows, then 1M windows like bench/packed_window.py's.
 * The whole-window zigzag (layout_zigzag) passes every check but the balance: planted. */
typedef struct { int64_t cover, rows, rope, tokens, pairs, bound, closed, blocks, ring, determ; } LayoutFaults;

/* one layout of the window start[0..nd) of S tokens, counted token by token; pairs_grid: also each
 * causal pair's blocks (S <= 256) */
static void layout_check(const Layout *L, const int64_t *start, int64_t nd, int pairs_grid, LayoutFaults *f) {
    const int64_t S = L->S, n = L->n;
    const int P = L->P;
    int64_t *seen = xcalloc((size_t)S, 8), *pos = xmalloc((size_t)n * 8), *doc = xmalloc((size_t)S * 8);
    int32_t *rope = xmalloc((size_t)n * 4);
    for (int64_t d = 0; d < nd; d++)
        for (int64_t t = start[d]; t < (d + 1 < nd ? start[d + 1] : S); t++) doc[t] = d;
    int64_t W = 0;
    for (int64_t d = 0; d < nd; d++) {
        const int64_t l = (d + 1 < nd ? start[d + 1] : S) - start[d];
        W += l * (l + 1) / 2;
    }
    f->pairs += W != L->W;
    int64_t bad = 0; /* a rank of other than n rows: nothing below can be read safely */
    for (int r = 0; r < P; r++) {
        int64_t rows = 0;
        for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) rows += L->piece[i].len;
        bad += rows != n || L->tokens[r] != n;
    }
    if (bad) {
        f->tokens += bad;
        free(seen); free(pos); free(doc); free(rope);
        return;
    }
    for (int r = 0; r < P; r++) {
        layout_positions(L, r, pos);
        layout_rope_positions(L, r, rope);
        int64_t pairs = 0;
        for (int64_t t = 0; t < n; t++) {
            seen[pos[t]]++;
            f->rows += t > 0 && pos[t] <= pos[t - 1]; /* local rows in window order */
            f->rope += rope[t] != pos[t] - start[doc[pos[t]]];
            pairs += pos[t] - start[doc[pos[t]]] + 1;
        }
        f->tokens += L->tokens[r] != n;
        f->pairs += pairs != L->pairs[r];
        int64_t row = 0;
        for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) {
            const LayoutPiece *p = &L->piece[i];
            const int64_t d = p->doc, end = d + 1 < nd ? start[d + 1] : S;
            f->rows += p->rank != r || p->row != row || p->len < 1 || p->start < start[d] || p->start + p->len > end ||
                       p->pos != p->start - start[d];
            row += p->len;
        }
        f->rows += row != n;
    }
    for (int64_t t = 0; t < S; t++) f->cover += seen[t] != 1;
    /* prev/next: a document's pieces in window order */
    for (int64_t i = 0; i < L->npieces; i++) {
        const LayoutPiece *p = &L->piece[i];
        int64_t want_prev = -1, best = -1;
        for (int64_t j = 0; j < L->npieces; j++)
            if (L->piece[j].doc == p->doc && L->piece[j].start < p->start && L->piece[j].start > best)
                best = L->piece[j].start, want_prev = j;
        f->rows += p->prev != want_prev || (want_prev >= 0 && L->piece[want_prev].next != i) ||
                   (p->prev < 0) != (p->pos == 0);
    }
    if (!L->zigzag) {
        const double mean = (double)L->W / P;
        for (int r = 0; r < P; r++) f->bound += fabs((double)L->pairs[r] - mean) > L->bound * (1 + 1e-12) + 1e-6;
        /* the closed form: with tau the longest whole document and rho the stream's density, B <=
         * tau (tau+1)/2 + 1.5 (2P-1) (L_max + 1) when rho <= (tau+1)/2 */
        double T = 0, Ws = 0, tau = 0, lmax = 0;
        for (int64_t d = 0; d < nd; d++) {
            const int64_t l = (d + 1 < nd ? start[d + 1] : S) - start[d], q = L->core[d], m = l - 2 * P * q, p0 = P * q;
            T += (double)m, Ws += (double)(m * p0 + m * (m + 1) / 2);
            if (q) lmax = fmax(lmax, (double)l);
            else tau = fmax(tau, (double)l);
        }
        if (T > 0 && Ws / T <= (tau + 1) / 2)
            f->closed += L->bound > tau * (tau + 1) / 2 + 1.5 * (2 * P - 1) * (lmax + 1) + 1e-6;
    }
    /* the ring's blocks: kinds, rows, and (pairs_grid) each causal pair of each document exactly once */
    int32_t *grid = pairs_grid ? xcalloc((size_t)(S * S), 4) : NULL;
    int64_t *kpos = xmalloc((size_t)n * 8);
    for (int r = 0; r < P; r++) {
        layout_positions(L, r, pos);
        int64_t sum = 0;
        for (int s = 0; s < P; s++) {
            const int src = layout_src(L, r, s);
            layout_positions(L, src, kpos);
            const int64_t nb = layout_blocks(L, r, s, NULL, 0);
            LayoutBlock *b = xmalloc((size_t)(nb ? nb : 1) * sizeof *b);
            layout_blocks(L, r, s, b, nb);
            int64_t step = 0;
            for (int64_t i = 0; i < nb; i++) {
                const DocBlock *k = &b[i].b;
                const LayoutPiece *qp = &L->piece[b[i].qp], *kp = &L->piece[b[i].kp];
                const int diag = b[i].kind == LAYOUT_DIAG;
                f->blocks += qp->rank != r || kp->rank != src || qp->doc != kp->doc || b[i].doc != qp->doc ||
                             k->q0 != qp->row || k->nq != qp->len || k->k0 != kp->row || k->nk != kp->len ||
                             k->causal != diag || (diag && (s != 0 || b[i].qp != b[i].kp)) ||
                             (!diag && kp->start + kp->len > qp->start) ||
                             b[i].pairs != (diag ? k->nq * (k->nq + 1) / 2 : k->nq * k->nk);
                step += b[i].pairs;
                if (grid)
                    for (int64_t a = 0; a < k->nq; a++)
                        for (int64_t c = 0; c < k->nk; c++) {
                            const int64_t qi = pos[k->q0 + a], kj = kpos[k->k0 + c];
                            if (!diag || c <= a) grid[qi * S + kj]++;
                        }
            }
            f->blocks += step != layout_step_pairs(L, r, s);
            sum += step;
            free(b);
            /* what a stage's existing path computes (docs_blocks over the rows, as docplan_add cuts a call):
             * the whole step's call (every local row against every row of src) is the layout's blocks; and
             * the zigzag layout's blocks do the old ring's work (ring_block's call, cut by docs_blocks) */
            const int64_t m = docs_blocks(L->start, nd, pos, 0, n, kpos, 0, n, NULL, 0);
            DocBlock *db = xmalloc((size_t)(m ? m : 1) * sizeof *db);
            docs_blocks(L->start, nd, pos, 0, n, kpos, 0, n, db, m);
            f->ring += docs_pairs(db, m) != step;
            if (L->zigzag) {
                const RingBlock rb = ring_block(S, P, r, s);
                const int64_t mz = docs_blocks(L->start, nd, pos, rb.q0, rb.nq, kpos, rb.k0, rb.nk, db, m);
                f->ring += mz > m || docs_pairs(db, mz) != step;
            }
            free(db);
        }
        f->blocks += sum != L->pairs[r];
    }
    if (grid) {
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < S; j++) f->blocks += grid[i * S + j] != (j <= i && doc[i] == doc[j]);
        free(grid);
    }
    free(kpos); free(seen); free(pos); free(doc); free(rope);
}

/* the balanced layout built twice is the same */
static int layout_same(const Layout *a, const Layout *b) {
    if (a->npieces != b->npieces || a->bound != b->bound) return 0;
    for (int64_t i = 0; i < a->npieces; i++) {
        const LayoutPiece *x = &a->piece[i], *y = &b->piece[i];
        if (x->doc != y->doc || x->start != y->start || x->len != y->len || x->rank != y->rank) return 0;
    }
    return 1;
}

static void layout_one(const int64_t *start, int64_t nd, int64_t S, int P, double frac, int grid, LayoutFaults *f,
                       LayoutFaults *z, int64_t *built) {
    char err[256];
    Layout L, L2;
    if (!layout_balanced(&L, start, nd, S, P, frac, err, sizeof err)) {
        layout_check(&L, start, nd, grid, f);
        layout_balanced(&L2, start, nd, S, P, frac, err, sizeof err);
        f->determ += !layout_same(&L, &L2);
        layout_free(&L2);
        layout_free(&L);
        (*built)++;
    } else f->rows++;
    if (z && S % (2 * P) == 0 && !layout_zigzag(&L, start, nd, S, P, err, sizeof err)) {
        layout_check(&L, start, nd, grid, z);
        layout_free(&L);
    }
}

static void expect_faults(const LayoutFaults *f, const char *what, int64_t built) {
    EXPECT(!f->cover && !f->rows && !f->rope && !f->tokens, "%s: %lld layouts; every position once %lld, pieces and rows %lld, "
           "RoPE positions %lld, S/P tokens a rank %lld faults", what, (long long)built, (long long)f->cover,
           (long long)f->rows, (long long)f->rope, (long long)f->tokens);
    EXPECT(!f->pairs && !f->blocks && !f->ring, "%s: per-rank pairs vs token by token %lld, ring blocks (kinds, rows, each causal "
           "pair once) %lld, vs docs_blocks over the rows (and the zigzag's vs the old ring's) %lld faults", what, (long long)f->pairs,
           (long long)f->blocks, (long long)f->ring);
    EXPECT(!f->bound && !f->closed && !f->determ, "%s: a rank's pairs past the bound B %lld, B past its closed form %lld, "
           "not deterministic %lld", what, (long long)f->bound, (long long)f->closed, (long long)f->determ);
}

/* the split the balanced layout's tests build by hand: documents over 1/32 of a rank's pairs */
#define SPLIT_1_32 (1.0 / 32)
static void test_layout(void) {
    LayoutFaults f = {0}, z = {0};
    int64_t built = 0, st[16];
    const double fracs[3] = {0, SPLIT_1_32, 1e9};
    for (int64_t S = 1; S <= 12; S++) /* every window of up to 12 tokens, every cut into documents */
        for (int P = 1; P <= 8; P++) {
            if (S % P) continue;
            for (int64_t mask = 0; mask < ((int64_t)1 << (S - 1)); mask++) {
                int64_t nd = 0;
                st[nd++] = 0;
                for (int64_t t = 1; t < S; t++)
                    if (mask >> (t - 1) & 1) st[nd++] = t;
                for (int i = 0; i < 3; i++) layout_one(st, nd, S, P, fracs[i], 1, &f, i ? NULL : &z, &built);
            }
        }
    expect_faults(&f, "balanced, every window of 1..12 tokens at every P dividing it (P <= 8)", built);
    printf("  balanced layout, every window of 1..12 tokens cut every way, P | S, 3 split thresholds: %lld layouts, "
           "each checked token by token\n", (long long)built);
    const int64_t zb = built;
    expect_faults(&z, "the zigzag layout, the same windows", zb);
    uint64_t seed = 2024;
    built = 0;
    int64_t *rs = xmalloc(257 * 8);
    for (int w = 0; w < 400; w++) { /* random windows: documents of 1 token to longer than the window's share */
        const int P = 1 + (int)((rnd(&seed) + 0.5) * 8);
        const int64_t S = P * (1 + (int64_t)((rnd(&seed) + 0.5) * (240 / P)));
        const int64_t longest = 1 + (int64_t)((rnd(&seed) + 0.5) * S);
        int64_t nd = 0;
        for (int64_t t = 0; t < S; t += 1 + (int64_t)((rnd(&seed) + 0.5) * longest)) rs[nd++] = t;
        layout_one(rs, nd, S, P, fracs[w % 3], 1, &f, NULL, &built);
    }
    free(rs);
    expect_faults(&f, "balanced, 400 random windows of up to 240 tokens, P 1..8", built);
    printf("  balanced layout, 400 random windows of up to 240 tokens, P 1..8: every check token by token\n");
    /* one document (unpacked): the balanced layout is the zigzag itself, row for row */
    int64_t diff = 0;
    char err[256];
    for (int P = 1; P <= 8; P++)
        for (int64_t S = 2 * P; S <= 64 * P; S += 2 * P) {
            const int64_t zero = 0;
            Layout B, Z;
            layout_balanced(&B, &zero, 1, S, P, SPLIT_1_32, err, sizeof err);
            layout_zigzag(&Z, &zero, 1, S, P, err, sizeof err);
            int64_t *pb = xmalloc((size_t)B.n * 8), *pz = xmalloc((size_t)B.n * 8);
            for (int r = 0; r < P; r++) {
                layout_positions(&B, r, pb);
                zigzag_positions(S, P, r, pz);
                diff += memcmp(pb, pz, (size_t)B.n * 8) != 0;
            }
            free(pb); free(pz);
            layout_free(&B);
            layout_free(&Z);
        }
    EXPECT(!diff, "one document of S tokens (S %% 2P = 0, P 1..8): the balanced layout's rows are the zigzag's (%lld ranks "
           "differ)", (long long)diff);
    printf("  one document (unpacked): the balanced layout is the zigzag, row for row, at P 1..8\n");
}

/* bench/packed_window.py --seed 1: the first 1M window's 23 documents (1K-256K, log-uniform) */
static const int64_t SEED1_STARTS[] = {0, 2157, 38530, 48266, 50109, 69428, 70490, 128652, 130129, 233787, 338304, 364203,
                                       365235, 381572, 402857, 505707, 714271, 837774, 844382, 880952, 962811, 975639, 998812};

/* the balance a stage would check: every rank within tol of the mean rank's pairs */
static int layout_balanced_within(const Layout *L, double tol) { return layout_balance(L) <= 1 + tol; }

/* 1M windows: the balanced layout within 5% of the mean (and its bound), the zigzag not (planted) */
static void test_layout_balance(void) {
    char err[256];
    const int64_t nd1 = sizeof SEED1_STARTS / sizeof SEED1_STARTS[0];
    const int Ps[3] = {3, 4, 8};
    for (int i = 0; i < 3; i++) {
        const int P = Ps[i];
        const int64_t S = ((int64_t)1 << 20) - ((int64_t)1 << 20) % (2 * P); /* the last document a few tokens short */
        Layout B, Z;
        LayoutFaults f = {0}, zf = {0};
        int64_t built = 0;
        layout_one(SEED1_STARTS, nd1, S, P, SPLIT_1_32, 0, &f, &zf, &built);
        expect_faults(&f, "balanced, the seed-1 1M window", built);
        expect_faults(&zf, "zigzag, the seed-1 1M window", built);
        layout_balanced(&B, SEED1_STARTS, nd1, S, P, SPLIT_1_32, err, sizeof err);
        layout_zigzag(&Z, SEED1_STARTS, nd1, S, P, err, sizeof err);
        EXPECT(layout_balanced_within(&B, 0.05), "the seed-1 1M window on %d ranks, balanced: busiest rank %.4fx the mean "
               "(want <= 1.05)", P, layout_balance(&B));
        EXPECT(!layout_balanced_within(&Z, 0.05), "planted: the seed-1 1M window on %d ranks in the whole-window zigzag must "
               "fail the balance check (busiest %.4fx the mean)", P, layout_balance(&Z));
        printf("  the seed-1 1M window (23 documents) on %d ranks: busiest rank %.4fx the mean balanced (bound %.2f%%, %lld "
               "split), %.4fx zigzag (fails the 1.05 check, as planted)\n", P, layout_balance(&B),
               100 * B.bound * P / (double)B.W, (long long)B.nsplit, layout_balance(&Z));
        layout_free(&B);
        layout_free(&Z);
    }
    /* random 1M windows of two mixes: bench/packed_window.py's (1K-256K) and short documents (256-16K) */
    uint64_t seed = 77;
    int64_t *st = xmalloc((size_t)(1 << 20) * 8);
    for (int mix = 0; mix < 2; mix++) {
        const double lo = mix ? 256 : 1024, hi = mix ? 16384 : 262144;
        double worst = 0, zworst = 0;
        int zfail = 0, n = 0;
        LayoutFaults f = {0};
        int64_t built = 0;
        for (int w = 0; w < 8; w++)
            for (int i = 0; i < 3; i++) {
                const int P = Ps[i];
                const int64_t S = ((int64_t)1 << 20) - ((int64_t)1 << 20) % (2 * P);
                int64_t nd = 0;
                for (int64_t t = 0; t < S; t += (int64_t)(lo * pow(hi / lo, rnd(&seed) + 0.5))) st[nd++] = t;
                layout_one(st, nd, S, P, SPLIT_1_32, 0, &f, NULL, &built);
                Layout B, Z;
                layout_balanced(&B, st, nd, S, P, SPLIT_1_32, err, sizeof err);
                layout_zigzag(&Z, st, nd, S, P, err, sizeof err);
                worst = fmax(worst, layout_balance(&B)), zworst = fmax(zworst, layout_balance(&Z));
                zfail += !layout_balanced_within(&Z, 0.05), n++;
                layout_free(&B);
                layout_free(&Z);
            }
        expect_faults(&f, mix ? "balanced, random 1M windows of 256-16K documents" : "balanced, random 1M windows of 1K-256K "
                      "documents", built);
        EXPECT(worst <= 1.05, "random 1M windows of %g-%g token documents, P 3, 4, 8: the balanced layout's busiest rank "
               "%.4fx the mean (want <= 1.05)", lo, hi, worst);
        printf("  %d random 1M windows of %g-%g token documents at P 3, 4, 8: busiest rank at most %.4fx the mean balanced; "
               "zigzag up to %.4fx, %d of them past 1.05\n", n, lo, hi, worst, zworst, zfail);
    }
    free(st);
    /* planted, small: a long document then 1-token ones; the zigzag piles the long one's far end on one rank */
    {
        int64_t s[40];
        int64_t nd = 0;
        s[nd++] = 0;
        for (int64_t t = 32; t < 64; t++) s[nd++] = t;
        Layout B, Z;
        layout_balanced(&B, s, nd, 64, 4, SPLIT_1_32, err, sizeof err);
        layout_zigzag(&Z, s, nd, 64, 4, err, sizeof err);
        EXPECT(layout_balanced_within(&B, 0.05) && !layout_balanced_within(&Z, 0.05), "planted, 64 tokens on 4 ranks (one "
               "32-token document, then 32 of one token): balanced %.4fx the mean passes, zigzag %.4fx fails",
               layout_balance(&B), layout_balance(&Z));
        layout_free(&B);
        layout_free(&Z);
    }
}

/* The layout a window gets (layout_best): of the candidate splits and the zigzag, the cheapest (pairs plus
 * LAYOUT_BLOCK_PAIRS a block) within LAYOUT_MAX_BALANCE of the mean pairs, checked against 1/32 and the
 * zigzag by brute force. The seed-1 window: fewer documents split than at 1/32, within 1.05x. Short
 * documents (mean about 4K): none split and few blocks, where 1/32 gives each rank about 1,000 blocks a
 * ring pass (planted: that choice fails the block check). One document: the zigzag row for row. And
 * layout_rank_blocks against the ring's blocks counted step by step. */
static int64_t busiest_blocks(const Layout *L) {
    int64_t m = 0;
    for (int r = 0; r < L->P; r++) m = layout_rank_blocks(L, r) > m ? layout_rank_blocks(L, r) : m;
    return m;
}
/* faults of layout_best's choice B against a candidate C: C within the balance bound and cheaper, or
 * B out of the bound while C is in it */
static int64_t best_beaten(const Layout *B, const Layout *C) {
    const int okb = layout_balance(B) <= LAYOUT_MAX_BALANCE, okc = layout_balance(C) <= LAYOUT_MAX_BALANCE;
    return (okc && !okb) || (okc && layout_cost(C) < layout_cost(B) - 1e-12);
}
static void test_layout_best(void) {
    char err[256];
    uint64_t seed = 5;
    int64_t *st = xmalloc((size_t)(1 << 20) * 8);
    int64_t faults = 0, windows = 0;
    for (int mix = 0; mix < 3; mix++)
        for (int w = 0; w < 4; w++) {
            const int P = w % 2 ? 8 : 3;
            const int64_t S = ((int64_t)1 << 20) - ((int64_t)1 << 20) % (2 * P);
            const double lo = mix == 1 ? 256 : 1024, hi = mix == 1 ? 16384 : 262144;
            int64_t nd = 0;
            if (mix == 2) memcpy(st, SEED1_STARTS, sizeof SEED1_STARTS), nd = sizeof SEED1_STARTS / sizeof *SEED1_STARTS;
            else
                for (int64_t t = 0; t < S; t += (int64_t)(lo * pow(hi / lo, rnd(&seed) + 0.5))) st[nd++] = t;
            Layout B, F, Z;
            double frac = 0;
            layout_best(&B, st, nd, S, P, &frac, err, sizeof err);
            layout_balanced(&F, st, nd, S, P, SPLIT_1_32, err, sizeof err);
            layout_zigzag(&Z, st, nd, S, P, err, sizeof err);
            for (int r = 0; r < P; r++) {
                int64_t nb = 0;
                for (int s = 0; s < P; s++) nb += layout_blocks(&B, r, s, NULL, 0);
                faults += nb != layout_rank_blocks(&B, r);
            }
            faults += best_beaten(&B, &F) + best_beaten(&B, &Z) + ((frac == 0) != B.zigzag);
            windows++;
            const int64_t bmax = busiest_blocks(&B), fblocks = busiest_blocks(&F), few = 2 * nd / P + 16;
            if (mix != 1)
                EXPECT(layout_balance(&B) <= LAYOUT_MAX_BALANCE, "layout_best, a long-document window %d at P %d: busiest "
                       "rank %.4fx the mean pairs (want <= %.2f)", w, P, layout_balance(&B), LAYOUT_MAX_BALANCE);
            if (mix == 1) {
                EXPECT(B.nsplit == 0 && bmax <= few, "layout_best, short documents at P %d: %lld split, busiest rank %lld "
                       "blocks a ring pass (want none split and at most %lld)", P, (long long)B.nsplit, (long long)bmax,
                       (long long)few);
                EXPECT(!(fblocks <= few), "planted: splitting at 1/32 must fail the block check on short documents at P "
                       "%d (busiest rank %lld blocks)", P, (long long)fblocks);
            }
            if (mix == 2)
                EXPECT(B.nsplit < F.nsplit && layout_balance(&B) <= 1.05, "layout_best, the seed-1 window at P %d: %lld "
                       "split (1/32: %lld), busiest rank %.4fx the mean (want fewer split, within 1.05x)", P,
                       (long long)B.nsplit, (long long)F.nsplit, layout_balance(&B));
            if (w == 1)
                printf("  layout_best, %s at P 8: %s, %lld of %lld documents split, busiest rank %.4fx the mean pairs, "
                       "%lld blocks a ring pass (1/32: %lld split, %.4fx, %lld blocks)\n",
                       mix == 2 ? "the seed-1 window" : mix ? "a window of short documents" : "a window of long documents",
                       B.zigzag ? "the zigzag" : B.nsplit ? "split" : "none split", (long long)B.nsplit, (long long)nd,
                       layout_balance(&B), (long long)bmax, (long long)F.nsplit, layout_balance(&F), (long long)fblocks);
            layout_free(&B);
            layout_free(&F);
            layout_free(&Z);
        }
    EXPECT(!faults, "layout_best over %lld windows: %lld faults (a rank's blocks against the ring's step by step, a "
           "cheaper or better-balanced 1/32 or zigzag, the zigzag not reported)", (long long)windows, (long long)faults);
    /* one document: the zigzag row for row where 2P divides it; P = 1: one piece; S % 2P != 0: no zigzag */
    int64_t rows = 0, odd = 0;
    for (int P = 1; P <= 8; P++)
        for (int64_t S = 2 * P; S <= 4096; S = S * 3 + 2 * P) {
            const int64_t S2 = S - S % (2 * P), zero = 0;
            Layout B;
            layout_best(&B, &zero, 1, S2, P, NULL, err, sizeof err);
            int64_t *got = xmalloc((size_t)(S2 / P) * 8), *want = xmalloc((size_t)(S2 / P) * 8);
            for (int r = 0; r < P; r++) {
                layout_positions(&B, r, got);
                zigzag_positions(S2, P, r, want);
                rows += memcmp(got, want, (size_t)(S2 / P) * 8) != 0;
            }
            free(got), free(want);
            layout_free(&B);
            if (S2 + P <= 4096 && P > 1) { /* a multiple of P, not of 2P: the balanced candidates only */
                const int64_t S3 = S2 + P;
                odd += layout_best(&B, &zero, 1, S3, P, NULL, err, sizeof err) != 0 || B.zigzag || layout_balance(&B) > 1.5;
                layout_free(&B);
            }
        }
    EXPECT(!rows && !odd, "layout_best, one document at P = 1..8: %lld ranks' rows not the zigzag's; %lld windows of "
           "an odd number of chunks refused, zigzag or uneven", (long long)rows, (long long)odd);
    free(st);
}

/* Ring attention on the balanced layout (tests/ref_layout.c) equals each document alone, forward and
 * backward (fp64, 1e-12), at P = 1, 2, 3, 4, 8, with documents shorter than P, of exactly 2P tokens,
 * ending on piece edges, of one token; every document split (whole_frac 0) and some whole (0.2). Planted:
 * the ring's last step left out must miss. */
static int64_t ring_window(int P, int kind, uint64_t *seed, int64_t S, int64_t *st) {
    int64_t nd = 0, t = 0;
    if (kind == 0) { /* 1, P-1, 2P, 1, 3, 2P+1, 4P (2P pieces of 2: every edge a document's), then the rest */
        const int64_t lens[] = {1, P - 1, 2 * P, 1, 3, 2 * P + 1, 4 * P, 1, 1};
        for (size_t i = 0; i < sizeof lens / sizeof lens[0] && t < S; i++)
            if (lens[i] > 0) st[nd++] = t, t += lens[i];
    } else
        while (t < S) st[nd++] = t, t += 1 + (int64_t)((rnd(seed) + 0.5) * 4 * P);
    st[nd] = S; /* the last document ends at S */
    return nd;
}

/* every rank holds exactly n rows (what the references' buffers assume) */
static int layout_rows_ok(const Layout *L) {
    for (int r = 0; r < L->P; r++) {
        int64_t rows = 0;
        for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) rows += L->piece[i].len;
        if (rows != L->n || L->tokens[r] != L->n) return 0;
    }
    return 1;
}

static void test_layout_ring(void) {
    const int64_t SMAX = 48, QW = RH * RD, KW = RKV * RD;
    const RefHeads hd = {RH, RKV, RD};
    uint64_t seed = 31;
    double *q = xmalloc((size_t)(SMAX * QW) * 8), *k = xmalloc((size_t)(SMAX * KW) * 8), *v = xmalloc((size_t)(SMAX * KW) * 8),
           *dO = xmalloc((size_t)(SMAX * QW) * 8), *O = xmalloc((size_t)(SMAX * QW) * 8), *Lse = xmalloc((size_t)(SMAX * RH) * 8),
           *dQ = xmalloc((size_t)(SMAX * QW) * 8), *dK = xmalloc((size_t)(SMAX * KW) * 8), *dV = xmalloc((size_t)(SMAX * KW) * 8);
    for (int64_t i = 0; i < SMAX * QW; i++) { q[i] = 2 * rnd(&seed); dO[i] = rnd(&seed); }
    for (int64_t i = 0; i < SMAX * KW; i++) { k[i] = 2 * rnd(&seed); v[i] = rnd(&seed); }
    const int Ps[5] = {1, 2, 3, 4, 8};
    int64_t st[64];
    char err[256];
    for (int pi = 0; pi < 5; pi++) {
        double pworst = 0;
        int64_t ndocs = 0, nsplit = 0, npieces = 0;
        for (int kind = 0; kind < 2; kind++)
            for (int fi = 0; fi < 2; fi++) {
                const int P = Ps[pi];
                const int64_t S = P == 3 ? 45 : SMAX; /* P = 3: S/P odd, S % 2P != 0 */
                const double frac = fi ? 0.2 : 0;
                const int64_t nd = ring_window(P, kind, &seed, S, st);
                int64_t want = 0;
                for (int64_t d = 0; d < nd; d++) { /* the truth: each document alone */
                    const int64_t a = st[d], len = (d + 1 < nd ? st[d + 1] : S) - a;
                    ref_attention(&hd, len, q + a * QW, k + a * KW, v + a * KW, dO + a * QW, O + a * QW, Lse + a * RH,
                                  dQ + a * QW, dK + a * KW, dV + a * KW);
                    want += len * (len + 1) / 2;
                }
                Layout L;
                if (layout_balanced(&L, st, nd, S, P, frac, err, sizeof err)) { EXPECT(0, "%s", err); continue; }
                if (!layout_rows_ok(&L)) { EXPECT(0, "P %d window %d: a rank of other than S/P rows", P, kind); layout_free(&L); continue; }
                for (int plant = 0; plant < 2; plant++) {
                    RefRing R;
                    ref_layout_ring_init(&R, &L, hd, q, k, v, dO);
                    ref_layout_ring_forward(&R, &L, plant ? P - 1 : -1);
                    ref_layout_ring_backward(&R, &L, plant ? P - 1 : -1);
                    double worst = ring_worst(&R, P, O, dQ, dK, dV, Lse);
                    if (isnan(worst)) worst = INFINITY;
                    if (!plant) {
                        EXPECT_LE(worst, 1e-12, "ring attention on the balanced layout, P %d, window %d, %s: O, LSE, dQ, dK, dV "
                                  "vs each document alone, worst abs err %.2e", P, kind, fi ? "some whole" : "all split", worst);
                        EXPECT(R.pairs == want && !R.bad_src, "P %d window %d: the layout's blocks compute %lld pairs, the "
                               "documents' %lld; %lld blocks with a K/V not the schedule's", P, kind, (long long)R.pairs,
                               (long long)want, (long long)R.bad_src);
                        pworst = fmax(pworst, worst), ndocs += nd, nsplit += L.nsplit, npieces += L.npieces;
                    } else
                        EXPECT(worst > 1e-3, "planted: the ring's last step left out (P %d, window %d) must miss (err %.2e)", P,
                               kind, worst);
                    ref_ring_free(&R);
                }
                layout_free(&L);
            }
        printf("  ring attention on the balanced layout, %d ranks, 4 windows of %d tokens (%lld documents, %lld split, %lld "
               "pieces): O, LSE, dQ, dK, dV vs each document alone, worst %.1e; the last step left out misses\n", Ps[pi], Ps[pi] == 3 ? 45 : 48,
               (long long)ndocs, (long long)nsplit, (long long)npieces, pworst);
    }
    free(q); free(k); free(v); free(dO); free(O); free(Lse); free(dQ); free(dK); free(dV);
}

/* A stage's window (layout_option, layout_window, layout_ring_block: what stages 3-5 call with
 * --packing): the layout asked for only when packed and not a hybrid; unpacked rows are the zigzag's;
 * packed, the window is cut into documents and every rank's rows are the layout's (balanced: rows of
 * layout_best; zigzag: zigzag_positions), this rank's returned; a balanced ring call is every row
 * against every row of its source, and its docs_blocks are the layout's blocks; a zigzag call is
 * ring_block's. Windows of random documents (one of them a single document) at P = 1, 2, 3, 4, 8. */
static uint64_t window_rng(uint64_t *s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static void test_layout_window(void) {
    EXPECT(layout_option(NULL, 1, 0) && layout_option("balanced", 1, 0), "packed dense or MoE: balanced by default");
    EXPECT(!layout_option("zigzag", 1, 0) && !layout_option(NULL, 0, 0) && !layout_option("balanced", 0, 0),
           "--layout zigzag, or not packed: the zigzag");
    EXPECT(!layout_option(NULL, 1, 1) && !layout_option("balanced", 1, 1), "a hybrid stays on the zigzag");
    uint64_t rng = 7;
    int64_t faults = 0, windows = 0, blocks = 0;
    const int Ps[5] = {1, 2, 3, 4, 8};
    for (int pi = 0; pi < 5; pi++)
        for (int w = 0; w < 6; w++)
            for (int bal = 0; bal < 2; bal++) {
                const int P = Ps[pi];
                const int64_t seq = 2 * P * (5 + (int64_t)(window_rng(&rng) % 40)), n = seq / P, eot = 9;
                uint32_t *tok = xmalloc((size_t)(seq + 1) * 4);
                for (int64_t t = 0; t <= seq; t++) /* w 0: one document; else one ends every 1-16 tokens */
                    tok[t] = w && window_rng(&rng) % 8 == 0 ? (uint32_t)eot : (uint32_t)(window_rng(&rng) % 9);
                DocsWindow d;
                docs_window_open(&d, seq, n, P);
                int64_t *pos = xmalloc((size_t)n * 8), *want = xmalloc((size_t)n * 8), *zz = xmalloc((size_t)n * 8);
                const int r = (int)(window_rng(&rng) % (uint64_t)P);
                layout_window(NULL, tok, seq, -1, P, r, bal, pos); /* unpacked: the zigzag, d untouched */
                zigzag_positions(seq, P, r, zz);
                faults += memcmp(pos, zz, (size_t)n * 8) != 0;
                layout_window(&d, tok, seq, eot, P, r, bal, pos);
                int64_t *start = xmalloc((size_t)(seq + 1) * 8);
                const int64_t nd = docs_split(tok, seq, (uint32_t)eot, start);
                faults += nd != d.n || memcmp(start, d.start, (size_t)(nd + 1) * 8) != 0;
                Layout L;
                char err[256];
                if (bal ? layout_best(&L, start, nd, seq, P, NULL, err, sizeof err)
                        : layout_zigzag(&L, start, nd, seq, P, err, sizeof err)) DIE("%s", err);
                for (int q = 0; q < P; q++) {
                    layout_positions(&L, q, want);
                    faults += memcmp(d.rows + q * n, want, (size_t)n * 8) != 0;
                }
                faults += memcmp(pos, d.rows + r * n, (size_t)n * 8) != 0;
                for (int s = 0; s < P; s++) {
                    const RingBlock b = layout_ring_block(seq, P, r, s, bal), z = ring_block(seq, P, r, s);
                    faults += b.src != layout_src(&L, r, s);
                    if (bal) faults += b.q0 != 0 || b.nq != n || b.k0 != 0 || b.nk != n;
                    else faults += memcmp(&b, &z, sizeof b) != 0;
                    /* the stage's call, cut by docs_blocks, is the layout's blocks (as sets) */
                    const int64_t m = docs_blocks(d.start, d.n, pos, b.q0, b.nq, d.rows + b.src * n, b.k0, b.nk, NULL, 0),
                                  k = layout_blocks(&L, r, s, NULL, 0);
                    DocBlock *got = xmalloc((size_t)(m + 1) * sizeof *got);
                    LayoutBlock *lb = xmalloc((size_t)(k + 1) * sizeof *lb);
                    docs_blocks(d.start, d.n, pos, b.q0, b.nq, d.rows + b.src * n, b.k0, b.nk, got, m);
                    layout_blocks(&L, r, s, lb, k);
                    faults += m != k;
                    for (int64_t i = 0; i < k && m == k; i++) {
                        int found = 0;
                        for (int64_t j = 0; j < m && !found; j++) {
                            const DocBlock *x = &got[j], *y = &lb[i].b;
                            found = x->q0 == y->q0 && x->nq == y->nq && x->k0 == y->k0 && x->nk == y->nk && x->causal == y->causal;
                        }
                        faults += !found;
                    }
                    blocks += k;
                    free(got);
                    free(lb);
                }
                layout_free(&L);
                free(start); free(pos); free(want); free(zz); free(tok);
                free(d.start); free(d.pos); free(d.rows);
                windows++;
            }
    EXPECT(!faults, "a stage's windows: %lld faults over %lld windows (%lld blocks)", (long long)faults, (long long)windows,
           (long long)blocks);
    printf("  a stage's windows: layout_window's rows and layout_ring_block's calls are the layout's over %lld windows at "
           "P = 1, 2, 3, 4, 8 (%lld blocks), %lld faults\n", (long long)windows, (long long)blocks, (long long)faults);
}

/* Linear attention's state passing on the balanced layout (tests/ref_layout.c: tests/ref_gdn.c's maps
 * composed per document along its pieces in window order) equals the token-by-token rule run on each
 * document alone, forward (outputs, each document's final state) and backward (dq, dk, dv, dg, dbeta,
 * each document's initial-state gradient, from a random final-state gradient per document). Planted:
 * pieces from a zero state, and a document's maps composed in rank order, must miss. */
static void test_layout_gdn(void) {
    const int64_t SMAX = 48, H = 2, dk = 8, dv = 6, ms = H * dv * dk;
    const GdnHeads hd = {H, dk, dv};
    uint64_t seed = 5;
    double *q = xmalloc((size_t)(SMAX * H * dk) * 8), *k = xmalloc((size_t)(SMAX * H * dk) * 8), *v = xmalloc((size_t)(SMAX * H * dv) * 8),
           *g = xmalloc((size_t)(SMAX * H) * 8), *b = xmalloc((size_t)(SMAX * H) * 8), *dout = xmalloc((size_t)(SMAX * H * dv) * 8);
    for (int64_t i = 0; i < SMAX * H * dk; i++) q[i] = rnd(&seed), k[i] = rnd(&seed);
    for (int64_t i = 0; i < SMAX * H * dv; i++) v[i] = 2 * rnd(&seed), dout[i] = rnd(&seed);
    for (int64_t i = 0; i < SMAX * H; i++) g[i] = -0.3 * (rnd(&seed) + 0.5), b[i] = 0.5 + rnd(&seed);
    ref_gdn_prepare(&hd, SMAX, q, k);
    const int64_t len[5] = {SMAX * H * dk, SMAX * H * dk, SMAX * H * dv, SMAX * H, SMAX * H};
    double *want[5], *got[5], *o = xmalloc((size_t)(SMAX * H * dv) * 8), *ot = xmalloc((size_t)(SMAX * H * dv) * 8);
    for (int w = 0; w < 5; w++) want[w] = xmalloc((size_t)len[w] * 8), got[w] = xmalloc((size_t)len[w] * 8);
    double *dSf = xmalloc((size_t)(SMAX * ms) * 8), *Sf = xmalloc((size_t)(SMAX * ms) * 8), *Sft = xmalloc((size_t)(SMAX * ms) * 8),
           *dS0 = xmalloc((size_t)(SMAX * ms) * 8), *dS0t = xmalloc((size_t)(SMAX * ms) * 8), *zero = xcalloc((size_t)ms, 8);
    for (int64_t i = 0; i < SMAX * ms; i++) dSf[i] = rnd(&seed);
    const int Ps[5] = {1, 2, 3, 4, 8};
    int64_t st[64];
    char err[256];
    for (int pi = 0; pi < 5; pi++) {
        double fw = 0, bw = 0;
        int64_t maxsent = 0;
        for (int kind = 0; kind < 2; kind++)
            for (int fi = 0; fi < 2; fi++) {
                const int P = Ps[pi];
                const int64_t S = P == 3 ? 45 : SMAX; /* P = 3: S/P odd, S % 2P != 0 */
                const int64_t nd = ring_window(P, kind, &seed, S, st);
                for (int w = 0; w < 5; w++) memset(want[w], 0, (size_t)len[w] * 8);
                for (int64_t d = 0; d < nd; d++) { /* the truth: the rule token by token on each document alone */
                    const int64_t a = st[d], l = (d + 1 < nd ? st[d + 1] : S) - a;
                    memset(Sft + d * ms, 0, (size_t)ms * 8);
                    ref_gdn(&hd, l, q + a * H * dk, k + a * H * dk, v + a * H * dv, g + a * H, b + a * H, Sft + d * ms,
                            ot + a * H * dv);
                    memcpy(dS0t + d * ms, dSf + d * ms, (size_t)ms * 8);
                    ref_gdn_bwd(&hd, l, q + a * H * dk, k + a * H * dk, v + a * H * dv, g + a * H, b + a * H, zero,
                                dout + a * H * dv, dS0t + d * ms, want[0] + a * H * dk, want[1] + a * H * dk,
                                want[2] + a * H * dv, want[3] + a * H, want[4] + a * H);
                }
                Layout L;
                if (layout_balanced(&L, st, nd, S, P, fi ? 0.2 : 0, err, sizeof err)) { EXPECT(0, "%s", err); continue; }
                if (!layout_rows_ok(&L)) { EXPECT(0, "P %d window %d: a rank of other than S/P rows", P, kind); layout_free(&L); continue; }
                for (int plant = 0; plant < 3; plant++) {
                    const int64_t sent = ref_layout_gdn(&hd, &L, plant, q, k, v, g, b, o, Sf);
                    ref_layout_gdn_bwd(&hd, &L, plant, q, k, v, g, b, dout, dSf, got[0], got[1], got[2], got[3], got[4], dS0);
                    const double ef = fmax(max_abs_diff(o, ot, S * H * dv), max_abs_diff(Sf, Sft, nd * ms));
                    double eb = max_abs_diff(dS0, dS0t, nd * ms);
                    for (int w = 0; w < 5; w++) eb = fmax(eb, max_abs_diff(got[w], want[w], len[w] / SMAX * S));
                    if (!plant) {
                        EXPECT_LE(ef, 1e-12, "linear attention on the balanced layout, P %d, window %d, %s: outputs and final "
                                  "states vs each document alone, worst abs err %.2e", P, kind, fi ? "some whole" : "all split", ef);
                        EXPECT_LE(eb, 1e-11, "its backward, P %d, window %d, %s: dq dk dv dg dbeta dS0 vs each document alone, "
                                  "worst abs err %.2e", P, kind, fi ? "some whole" : "all split", eb);
                        fw = fmax(fw, ef), bw = fmax(bw, eb), maxsent = sent > maxsent ? sent : maxsent;
                    } else if (P >= 3 && !fi) /* every document split: pieces of a document on every rank */
                        EXPECT(ef > 1e-6 && eb > 1e-6, "planted (%s), P %d window %d: must miss (forward %.2e, backward %.2e)",
                               plant == 1 ? "pieces from a zero state" : "maps composed in rank order", P, kind, ef, eb);
                }
                layout_free(&L);
            }
        printf("  linear attention on the balanced layout, %d ranks, 4 windows of %d tokens: state maps composed per document "
               "vs each document token by token, forward %.1e, backward %.1e; the busiest rank sends %lld floats of maps%s\n",
               Ps[pi], Ps[pi] == 3 ? 45 : 48, fw, bw, (long long)maxsent, Ps[pi] >= 3 ? "; zero states and rank-order composition miss" : "");
    }
    for (int w = 0; w < 5; w++) free(want[w]), free(got[w]);
    free(q); free(k); free(v); free(g); free(b); free(dout); free(o); free(ot);
    free(dSf); free(Sf); free(Sft); free(dS0); free(dS0t); free(zero);
}

int main(int argc, char **argv) {
    const char *golden = argc > 1 ? argv[1] : "tests/golden";
    snprintf(tmpdir, sizeof tmpdir, "/tmp/longctx_test_%d", (int)getpid());
    if (mkdir(tmpdir, 0755)) DIE("cannot create %s", tmpdir);
    printf("[golden] reference model vs transformers\n");
    test_golden(golden);
    printf("[chunked loss]\n");
    test_chunked_loss(golden);
    printf("[masked loss]\n");
    test_masked_loss(golden);
    printf("[safetensors]\n");
    test_safetensors();
    printf("[config]\n");
    test_config(golden);
    test_config_digest();
    test_qwen35_moe(golden);
    printf("[yarn]\n");
    test_yarn();
    printf("[tokens]\n");
    test_tokens();
    printf("[cli]\n");
    test_cli();
    test_bounds();
    test_messages();
    printf("[saves' metadata]\n");
    test_save_meta();
    test_no_loss();
    printf("[init]\n");
    test_init();
    printf("[shards]\n");
    test_shards(golden);
    printf("[ring]\n");
    test_ring();
    test_ring_docs();
    test_packed_planted(golden);
    test_gdn(golden);
    test_gdn_rank_walk();
    test_gdn_chunked();
    test_gdn_sim();
    test_gdn_layer(golden);
    test_gated_attn(golden);
    test_qwen35(golden);
    printf("[packed documents balanced over the ranks]\n");
    test_layout();
    test_layout_balance();
    test_layout_best();
    test_layout_ring();
    test_layout_window();
    test_layout_gdn();
    printf("[host AdamW]\n");
    test_cpu_adam();
    printf("[rendezvous]\n");
    test_rendezvous();
    printf("[NUMA]\n");
    test_numa();
    printf("[fatal path]\n");
    test_fatal();
    printf("[checkpoint directories]\n");
    test_ckpt();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
    return test_summary();
}
