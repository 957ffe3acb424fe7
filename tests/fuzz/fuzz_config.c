/* fuzz_config.c -- common/config.c's config_from_json_text on the input bytes as a config.json. For a
 * config it accepts, the arithmetic the trainers do with it runs under UBSan: every accepted config
 * is bounded so that the products stay below 2^63, so a signed overflow here is a bug in the bounds
 * (or the counts), not in the harness:
 *   config_total_params, config_matmul_params, config_step_flops (T up to --seq's 4G), rope_inv_freq,
 *   config_same_shape, YaRN from the sequence (config_yarn_for_seq, --seq up to 4G, --yarn-factor up
 *   to 1M, --yarn-original up to 4G: the command line's ranges) and RoPE again, and, for a config the
 *   trainers would run (config_for_run's head_dim % 64, hidden % 8) of a modest size, params_build. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <math.h>

#include "config.h"
#include "model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    return 0;
}

static void check_rope(const Qwen3Config *c) {
    double inv[256 + 2], af = 0;
    FUZZ_ASSERT(c->head_dim > 0 && c->head_dim <= 256, "head_dim %lld", (long long)c->head_dim);
    inv[c->head_dim / 2] = 12345.0; /* a canary: rope_inv_freq writes head_dim / 2 entries */
    rope_inv_freq(c, inv, &af);
    FUZZ_ASSERT(inv[c->head_dim / 2] == 12345.0, "rope_inv_freq wrote past head_dim / 2 entries");
    volatile double s = af;
    for (int64_t i = 0; i < c->head_dim / 2; i++) s += inv[i];
    (void)s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Qwen3Config c;
    char err[512];
    err[0] = 0;
    if (config_from_json_text((const char *)data, size, &c, err, sizeof err)) {
        FUZZ_ASSERT(err[0], "a refused config without a message");
        fuzz_say("refused: %s\n", err);
        return 0;
    }
    fuzz_say("accepted: %lld layers, hidden %lld, %lld experts, yarn %d, %lld parameters\n", (long long)c.layers,
             (long long)c.hidden, (long long)c.experts, c.yarn, (long long)config_total_params(&c));
    /* what the bounds promise */
    FUZZ_ASSERT(c.vocab > 0 && c.hidden > 0 && c.intermediate > 0 && c.layers > 0 && c.heads > 0 && c.kv_heads > 0 &&
                    c.heads % c.kv_heads == 0 && c.head_dim >= 8 && c.head_dim % 8 == 0 && c.head_dim <= 256,
                "an accepted config out of its bounds");
    FUZZ_ASSERT(c.rope_theta > 1 && isfinite(c.rope_theta), "rope_theta %g accepted", c.rope_theta);
    volatile int64_t n = config_total_params(&c) + config_matmul_params(&c);
    FUZZ_ASSERT(config_total_params(&c) > 0, "a config of %lld parameters", (long long)config_total_params(&c));
    volatile double f = config_step_flops(&c, 1) + config_step_flops(&c, 4ll << 30);
    (void)n, (void)f;
    check_rope(&c);
    FUZZ_ASSERT(config_same_shape(&c, &c, 0) && config_same_shape(&c, &c, 1), "a config unlike itself");

    /* the command line's YaRN on top: --seq [2,4G], --yarn-factor [0,1M], --yarn-original [0,4G] */
    static const int64_t SEQ[] = {2, 4096, 40960, 1 << 20, 4ll << 30};
    static const double FACTOR[] = {0, 1, 4, 1e6};
    static const int64_t ORIG[] = {0, 32, 4ll << 30};
    for (size_t i = 0; i < sizeof SEQ / sizeof SEQ[0]; i++)
        for (size_t j = 0; j < sizeof FACTOR / sizeof FACTOR[0]; j++)
            for (size_t k = 0; k < sizeof ORIG / sizeof ORIG[0]; k++) {
                Qwen3Config y = c;
                config_yarn_for_seq(&y, SEQ[i], FACTOR[j], ORIG[k]);
                if ((i + j + k) % 7 == 0) check_rope(&y); /* RoPE on a sample of them (each costs pow x head_dim) */
            }

    /* the parameter table of a config a trainer would run (config_for_run's checks), when modest */
    if (c.head_dim % 64 == 0 && c.hidden % 8 == 0 && c.layers * (9 + 3 * c.experts) <= 4096) {
        ParamTable t;
        params_build(&c, &t);
        FUZZ_ASSERT(t.n > 0 && t.total >= config_total_params(&c), "table of %lld tensors, %lld elements for %lld",
                    (long long)t.n, (long long)t.total, (long long)config_total_params(&c));
        params_free(&t);
    }
    return 0;
}
