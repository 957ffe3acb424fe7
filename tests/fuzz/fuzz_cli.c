/* fuzz_cli.c -- common/cli.c's cli_parse on a command line split from the input (words separated by
 * NUL or newline; argv[0] is "stage5"), over a copy of stage 5's option table (stage5_tiling_yarn.c
 * with common/ranks.h's RANK_OPTIONS: integers with K/M/G and ranges such as "[2,4G]", "[-1,64K)",
 * "[0,inf)", doubles such as "(0,1]", "[0,1e9]", strings, flags and the OPT_OPTSTR --keep-attn); then
 * what a stage does with the result: cli_given, cli_usage (the defaults printed from the parsed
 * values), cli_parse_set over --offload's names; and cli_parse_int and cli_parse_set on every word.
 * Checks: every number that was set lies in its option's range. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <math.h>

#include "cli.h"

typedef struct {
    const char *model, *data, *schedule, *keep_attn, *save, *resume, *log, *eval_data, *dump_grads, *trace,
        *rendezvous, *run_id, *merge, *offload, *moe_gemm;
    int64_t seq, steps, warmup, loss_chunk, layers, seed, save_every, save_keep, eval_every, eval_windows,
        yarn_original, gpus, local_ranks, nnodes, node_rank, rehearse, mlp_tile, attn_groups;
    double lr, min_lr_frac, wd, beta1, beta2, eps, clip, gpu_gib, yarn_factor, comm_timeout, link_gbps, net_gbps,
        host_gib;
    int dry_run, profile;
} Opts;

static const Opts DEFAULTS = {.model = "32B", .data = "data/books.tok", .schedule = "cosine", .keep_attn = "auto",
                              .merge = "fp32", .offload = "all", .moe_gemm = "loop", .seq = 1048576, .steps = 50,
                              .warmup = 10, .loss_chunk = 4096, .seed = 1234, .save_keep = 1, .eval_windows = 4,
                              .node_rank = -1, .rehearse = -1, .lr = 3e-4, .min_lr_frac = 0.1, .wd = 0.1,
                              .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .clip = 1.0, .comm_timeout = 600,
                              .link_gbps = 100, .net_gbps = 25};
static Opts o;

static const Opt TABLE[] = {
    {"--model", OPT_STRING, &o.model, "Qwen3 size or HF model directory", NULL},
    {"--data", OPT_STRING, &o.data, "token file", NULL},
    {"--seq", OPT_INT, &o.seq, "tokens per step", "[2,4G]"},
    {"--steps", OPT_INT, &o.steps, "optimizer steps", "[0,1G]"},
    {"--lr", OPT_DOUBLE, &o.lr, "peak learning rate", "(0,1]"},
    {"--warmup", OPT_INT, &o.warmup, "linear warmup steps", "[0,1G]"},
    {"--schedule", OPT_STRING, &o.schedule, "cosine | constant", NULL},
    {"--min-lr-frac", OPT_DOUBLE, &o.min_lr_frac, "cosine floor", "[0,1]"},
    {"--wd", OPT_DOUBLE, &o.wd, "weight decay", "[0,1]"},
    {"--beta1", OPT_DOUBLE, &o.beta1, "AdamW beta1", "[0,1)"},
    {"--beta2", OPT_DOUBLE, &o.beta2, "AdamW beta2", "[0,1)"},
    {"--eps", OPT_DOUBLE, &o.eps, "AdamW epsilon", "(0,1]"},
    {"--clip", OPT_DOUBLE, &o.clip, "gradient-norm clip", "[0,inf)"},
    {"--loss-chunk", OPT_INT, &o.loss_chunk, "logit rows at a time", "[1,4G]"},
    {"--keep-attn", OPT_OPTSTR, &o.keep_attn, "keep attention O and LSE", NULL},
    {"--layers", OPT_INT, &o.layers, "first N decoder layers", "[0,1K]"},
    {"--seed", OPT_INT, &o.seed, "random init seed", "[0,inf)"},
    {"--save", OPT_STRING, &o.save, "save directory", NULL},
    {"--save-every", OPT_INT, &o.save_every, "save every N steps", "[0,1G]"},
    {"--save-keep", OPT_INT, &o.save_keep, "keep the newest K saves", "[0,1G]"},
    {"--resume", OPT_STRING, &o.resume, "continue from a save", NULL},
    {"--dry-run", OPT_FLAG, &o.dry_run, "print the memory plan", NULL},
    {"--gpu-gib", OPT_DOUBLE, &o.gpu_gib, "GPU memory to plan for", "[0,1e6]"},
    {"--log", OPT_STRING, &o.log, "JSON lines log", NULL},
    {"--eval-data", OPT_STRING, &o.eval_data, "held-out token file", NULL},
    {"--eval-every", OPT_INT, &o.eval_every, "evaluate every N steps", "[0,1G]"},
    {"--eval-windows", OPT_INT, &o.eval_windows, "windows per evaluation", "[1,1G]"},
    {"--dump-grads", OPT_STRING, &o.dump_grads, "step 1's gradients", NULL},
    {"--profile", OPT_FLAG, &o.profile, "GPU time by kernel class", NULL},
    {"--trace", OPT_STRING, &o.trace, "GEMM and attention shapes", NULL},
    {"--yarn-factor", OPT_DOUBLE, &o.yarn_factor, "YaRN factor", "[0,1e6]"},
    {"--yarn-original", OPT_INT, &o.yarn_original, "YaRN original context", "[0,4G]"},
    {"--gpus", OPT_INT, &o.gpus, "ranks on this node", "[0,1K]"},
    {"--local-ranks", OPT_INT, &o.local_ranks, "ranks as threads on GPU 0", "[0,64]"},
    {"--nnodes", OPT_INT, &o.nnodes, "nodes", "[0,64K]"},
    {"--node-rank", OPT_INT, &o.node_rank, "this node's index", "[-1,64K)"},
    {"--rendezvous", OPT_STRING, &o.rendezvous, "tcp://HOST:PORT or a shared file", NULL},
    {"--run-id", OPT_STRING, &o.run_id, "the run's name", NULL},
    {"--comm-timeout", OPT_DOUBLE, &o.comm_timeout, "collective timeout", "[0,1e9]"},
    {"--rehearse", OPT_INT, &o.rehearse, "rehearse rank R", "[-1,64M)"},
    {"--link-gbps", OPT_DOUBLE, &o.link_gbps, "GB/s inside a node", "(0,1e6]"},
    {"--net-gbps", OPT_DOUBLE, &o.net_gbps, "GB/s between nodes", "(0,1e6]"},
    {"--merge", OPT_STRING, &o.merge, "fp32 | bf16", NULL},
    {"--offload", OPT_STRING, &o.offload, "all | none | ckpt,attn,states", NULL},
    {"--host-gib", OPT_DOUBLE, &o.host_gib, "host memory to plan for", "[0,1e9]"},
    {"--mlp-tile", OPT_INT, &o.mlp_tile, "MLP rows at a time", "[0,4G]"},
    {"--attn-groups", OPT_INT, &o.attn_groups, "attention head groups", "[0,1K]"},
    {"--moe-gemm", OPT_STRING, &o.moe_gemm, "loop | grouped", NULL},
};
#define NOPTS (int)(sizeof TABLE / sizeof TABLE[0])

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    devnull = fopen("/dev/null", "w");
    FUZZ_ASSERT(devnull, "/dev/null: %s", strerror(errno));
    return 0;
}

/* the range's bounds, read here independently of cli.c: "[lo,hi]" with K/M/G (powers of two) */
static double bound(const char *s, size_t n) {
    char w[32];
    snprintf(w, sizeof w, "%.*s", (int)n, s);
    if (!strcmp(w, "inf")) return INFINITY;
    char *end;
    double v = strtod(w, &end);
    if (*end == 'K') v *= 1024;
    else if (*end == 'M') v *= 1 << 20;
    else if (*end == 'G') v *= 1 << 30;
    return v;
}
static void check_range(const Opt *op) {
    const char *r = op->range, *comma = strchr(r, ',');
    const size_t len = strlen(r);
    const double lo = bound(r + 1, (size_t)(comma - r - 1)), hi = bound(comma + 1, (size_t)(r + len - 2 - comma));
    const double x = op->type == OPT_INT ? (double)*(int64_t *)op->dst : *(double *)op->dst;
    FUZZ_ASSERT(isfinite(x), "%s = %g", op->name, x);
    FUZZ_ASSERT(r[0] == '[' ? x >= lo : x > lo, "%s = %.17g below %s", op->name, x, r);
    FUZZ_ASSERT(r[len - 1] == ']' ? x <= hi : x < hi, "%s = %.17g above %s", op->name, x, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    /* argv: "stage5", then the words (a static argv[0]: cli_parse keeps a pointer to it in longctx_prog) */
    char *buf = xmalloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[514];
    int argc = 0;
    argv[argc++] = (char *)"stage5";
    for (size_t i = 0, start = 0; i <= size && argc < 513; i++)
        if (i == size || buf[i] == 0 || buf[i] == '\n') {
            buf[i] = 0;
            if (i > start || i < size) argv[argc++] = buf + start; /* an empty word between separators stays */
            start = i + 1;
        }
    argv[argc] = NULL;

    o = DEFAULTS;
    char err[256];
    err[0] = 0;
    const int rc = cli_parse(argc, argv, TABLE, NOPTS, err, sizeof err);
    FUZZ_ASSERT(rc == 0 || rc == 1 || (rc == -1 && err[0]), "cli_parse returned %d (%s)", rc, err);
    fuzz_say("%d words: %s\n", argc - 1, rc == 1 ? "--help" : rc ? err : "parsed");
    for (int k = 0; k < NOPTS; k++)
        if (TABLE[k].type == OPT_INT || TABLE[k].type == OPT_DOUBLE) check_range(&TABLE[k]);
    if (rc == 0) {
        volatile int g = cli_given(argc, argv, "--model") + cli_given(argc, argv, "--seq") + cli_given(argc, argv, "--keep-attn");
        (void)g;
        cli_usage(devnull, argv[0], "fuzz", TABLE, NOPTS);
        static const char *const names[] = {"ckpt", "attn", "states"};
        int ckpt, attn, states;
        int *const flags[] = {&ckpt, &attn, &states};
        cli_parse_set(o.offload, names, flags, 3, err, sizeof err);
    }
    for (int i = 1; i < argc; i++) {
        int64_t v;
        cli_parse_int(argv[i], &v);
        static const char *const names[] = {"ckpt", "attn", "states"};
        int a, b, c;
        int *const flags[] = {&a, &b, &c};
        if (cli_parse_set(argv[i], names, flags, 3, err, sizeof err) == 0)
            FUZZ_ASSERT(a >= 0 && a <= 1 && b >= 0 && b <= 1 && c >= 0 && c <= 1, "flags %d %d %d", a, b, c);
    }
    free(buf);
    return 0;
}
