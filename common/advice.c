/* advice.c -- the headline's check and the nearest commands that fit (advice.h). */
#include "advice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "check.h"
#include "config.h"
#include "gpu.h"
#include "memplan.h"
#include "tokens.h"

static int gpus_visible(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* The least free memory of GPUs 0..n-1. Asking creates a context on each; a GPU that refuses one
 * (busy, exclusive mode) is judged by its total memory instead: a plan is no reason to die. */
static double least_free_bytes(int n) {
    double least = INFINITY;
    for (int d = 0; d < n; d++) {
        size_t free_b = 0, total_b = 0;
        struct cudaDeviceProp p;
        if (cudaSetDevice(d) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) least = fmin(least, (double)free_b);
        else if (cudaGetDeviceProperties(&p, d) == cudaSuccess) least = fmin(least, (double)p.totalGlobalMem);
        (void)cudaGetLastError(); /* neither failure is sticky: clear it */
    }
    (void)cudaSetDevice(0);
    return isfinite(least) ? least : 0;
}

void plan_machine(int dry_run, RankOpts *r, double *gpu_gib, double *host_gib) {
    const int local = r && r->local_ranks > 0, here = gpus_visible();
    if (!dry_run && here) return; /* a run plans against its own GPUs; with none here, as a dry-run would */
    memplan_machine_planned = !here;
    const double G = 1 << 30;
    char gpus_w[64] = "", host_w[96] = "";
    const char *whose;
    if (here) { /* this machine's own */
        whose = "this machine";
        if (r && !local && r->gpus <= 0) r->gpus = here;
        if (*gpu_gib <= 0) {
            const double least = least_free_bytes(r && !local ? (int)(r->gpus < here ? r->gpus : here) : 1);
            /* a GiB less: free memory moves; at least 0.1, so a busy GPU plans "does not fit" */
            *gpu_gib = fmax(0.1, floor(10 * (least - G) / G) / 10);
        }
        if (host_gib && *host_gib <= 0) *host_gib = floor(host_available_bytes() / G);
    } else { /* no GPU here: the headline's machine */
        whose = "the headline's machine, as no GPU is here";
        if (r && !local && r->gpus <= 0) r->gpus = HEADLINE_GPUS;
        if (*gpu_gib <= 0) *gpu_gib = HEADLINE_GPU_GIB;
        if (host_gib && *host_gib <= 0) *host_gib = HEADLINE_HOST_GIB;
    }
    if (r) snprintf(gpus_w, sizeof gpus_w, "%lld GPU%s", local ? 1ll : (long long)r->gpus, !local && r->gpus > 1 ? "s" : "");
    else snprintf(gpus_w, sizeof gpus_w, "1 GPU");
    if (host_gib) snprintf(host_w, sizeof host_w, " and %.0f GiB of host memory per node", *host_gib);
    say("planned for %s of %.1f GiB%s: %s (%s set%s %s own)\n", gpus_w, *gpu_gib, host_w, whose,
        !r ? "--gpu-gib" : host_gib ? "--gpus, --gpu-gib and --host-gib" : "--gpus and --gpu-gib", r ? "" : "s",
        r ? "their" : "its");
}

int advice_gpus(RankOpts *r, int dry_run) {
    const int visible = dry_run ? 0 : gpus_visible();
    if (!dry_run && !visible && !r->gpus && !r->local_ranks) r->gpus = HEADLINE_GPUS;
    return visible;
}

/* Does this command fit gpu_cap bytes per GPU and host_cap per node? The running program's own
 * --dry-run plans it (the GPU's memory as --gpu-gib: kept attention fills what the job would have)
 * and prints its peak per GPU and its pinned host memory per rank. *tflop: the job's model TFLOP
 * per rank and step. */
void advice_keep(int argc, char **argv, char *out, size_t n) {
    static const char *const KEEP[] = {"--offload", "--mlp-tile", "--attn-groups", "--keep-attn", "--merge", "--packing",
                                       "--yarn-factor", "--yarn-original", "--moe-gemm", "--loss-chunk", "--eval-data"};
    out[0] = 0;
    for (int i = 1; i < argc; i++)
        for (size_t k = 0; k < sizeof KEEP / sizeof KEEP[0]; k++) {
            const size_t len = strlen(KEEP[k]);
            if (strncmp(argv[i], KEEP[k], len) || (argv[i][len] && argv[i][len] != '=')) continue;
            /* as cli_parse reads them: "--x=v"; "--x v", v any word (-0 too); an optional word's flag
             * (--keep-attn, --packing) takes the next word unless it starts with '-' */
            const int optional = !strcmp(KEEP[k], "--keep-attn") || !strcmp(KEEP[k], "--packing");
            const char *v = argv[i][len] == '=' ? argv[i] + len + 1
                            : i + 1 < argc && (!optional || argv[i + 1][0] != '-') ? argv[++i] : NULL;
            if (v && strchr(v, '\'')) continue;
            const int plain = v && strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:,/+-") ==
                                       strlen(v); /* quoted only when the shell needs it */
            char one[1100];
            const int w = snprintf(one, sizeof one, !v ? " %s" : plain ? " %s=%s" : " %s='%s'", KEEP[k], v ? v : "");
            if (w < 0 || w >= (int)sizeof one || strlen(out) + (size_t)w >= n) continue; /* whole, or not at all */
            strcat(out, one);
        }
}

static int fits(const char *prog, const char *model, const char *data, const char *keep, int64_t seq, int64_t gpus,
                int64_t rehearse, int64_t layers, double gpu_cap, double host_cap, double *tflop) {
    char exe[4096], cmd[8192], line[512], dflag[4200] = "";
    const ssize_t n = prog ? (ssize_t)snprintf(exe, sizeof exe, "%s", prog) : readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || n >= (ssize_t)sizeof exe || strchr(model, '\'') || memchr(exe, '\'', (size_t)n)) return 0;
    exe[n] = 0;
    if (gpu_cap <= 0 || host_cap <= 0) return 0; /* 0 would read as "not given" */
    if (data && (strchr(data, '\'') || snprintf(dflag, sizeof dflag, " --data '%s'", data) >= (int)sizeof dflag)) return 0;
    /* --dry-run first: a command cut short must never run a real job; LONGCTX_ADVISING: a plan asked
     * for by advice gives none of its own (each would ask for more plans) */
    const int len = snprintf(cmd, sizeof cmd, "LONGCTX_ADVISING=1 '%s' --dry-run --model '%s' --seq %lld --gpus %lld --rehearse %lld --layers "
                             "%lld --gpu-gib %.17g --host-gib %.17g%s%s 2>&1", exe, model, (long long)seq, (long long)gpus,
                             (long long)rehearse, (long long)layers, gpu_cap / (1 << 30), host_cap / (1 << 30), dflag,
                             keep ? keep : "");
    if (len < 0 || len >= (int)sizeof cmd) return 0;
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    double peak = -1, host = 0;
    int on_host = 0, stops = 0;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "  total (peak) %lf", &peak) == 1) { /* its verdict against --gpu-gib, to the byte */
            stops = stops || strstr(line, "DOES NOT FIT");
            continue;
        }
        if (!strncmp(line, "pinned host memory per rank", 27)) on_host = 1;
        else if (on_host && sscanf(line, "  total %lf", &host) == 1) on_host = 0;
        stops = stops || strstr(line, "would stop before its first step"); /* e.g. past cuDNN's sizes */
    }
    if (pclose(p) || peak < 0 || stops) return 0;
    Qwen3Config c;
    char err[512];
    if (config_load(model, &c, err, sizeof err)) return 0;
    if (layers) c.layers = layers;
    *tflop = config_step_flops(&c, seq) / (double)gpus / 1e12;
    const double gib = 1 << 30;
    return host * gib * (rehearse >= 0 ? 1 : (double)gpus) <= host_cap; /* a rehearsal's node holds one rank */
}

/* "  (~12.3 min a step here; --steps 24 ends in about 5 minutes)" for a job of tflop per rank */
static const char *estimate(double tflop, char *buf, size_t n) {
    const double s = tflop / ADVICE_STEP_TFLOPS, budget = 300;
    const long long steps = s >= budget ? 1 : (long long)(budget / s);
    if (s < 120) snprintf(buf, n, "   (~%.0f s a step here; --steps %lld ends in about 5 minutes)", s < 1 ? 1 : s, steps);
    else snprintf(buf, n, "   (~%.1f min a step here; --steps %lld takes about %.0f minutes)", s / 60, steps, s * steps / 60);
    return buf;
}

/* " --data FILE" when the job reads another file than the shipped one: a suggestion names it too */
static const char *data_words(const FitAsk *a, char *buf, size_t n) {
    if (!a->data || !strcmp(a->data, TOKENS_SHIPPED)) return "";
    snprintf(buf, n, " --data %s", a->data);
    return buf;
}

/* the job as asked, for its --dry-run: the same ranks and depth */
static void job_words(const FitAsk *a, int need, char *job, size_t n) {
    const RankOpts *r = a->ranks;
    if (r->rehearse >= 0)
        snprintf(job, n, "--gpus %lld --nnodes %lld --rehearse %lld", (long long)r->gpus, (long long)r->nnodes,
                 (long long)r->rehearse);
    else if (r->local_ranks > 0) snprintf(job, n, "--local-ranks %lld", (long long)r->local_ranks);
    else snprintf(job, n, "--gpus %d", need);
    if (a->layers) snprintf(job + strlen(job), n - strlen(job), " --layers %lld", (long long)a->layers);
}

void advise_unless_fits(const FitAsk *a, const MemPlan *mp, int visible) {
    char keep[2048]; /* the job's own options that change a plan: its suggestions keep them */
    FitAsk given = *a;
    if (a->argv) advice_keep(a->argc, a->argv, keep, sizeof keep), given.keep = keep;
    a = &given;
    const RankOpts *r = a->ranks;
    const int one_gpu = r->local_ranks > 0 || r->rehearse >= 0, need = one_gpu ? 1 : a->P / (int)r->nnodes;
    if (a->dry_run && getenv("LONGCTX_ADVISING")) return; /* fits() asked for this plan: its numbers only */
    if (a->dry_run) visible = need; /* the planned machine (plan_machine) has the GPUs the job asks for */
    const double gib = 1 << 30, share = r->local_ranks > 0 ? a->P : 1,
                 gpu = a->dry_run ? a->gpu_gib * gib : visible ? (double)gpu_free_bytes(a->gpu_gib) : 0,
                 peak = (double)memplan_peak(mp) * share,
                 host = (double)memplan_host(mp) * (r->rehearse >= 0 ? 1 : ranks_per_node(r)), budget = a->host_budget;
    char why[3][160];
    int n = 0;
    if (need > visible) snprintf(why[n++], sizeof why[0], "GPUs: the job needs %d on this node, %d visible", need, visible);
    if (visible && peak > gpu)
        snprintf(why[n++], sizeof why[0], "GPU memory: %.1f GiB per GPU planned, %.1f GiB %s", peak / gib, gpu / gib,
                 a->dry_run ? "each" : "free");
    if (host > budget)
        snprintf(why[n++], sizeof why[0], "host memory: %.1f GiB pinned per node planned, %.1f GiB available",
                 host / gib, budget / gib);
    if (!n) return;
    say("%s cannot run it -- short of\n", a->dry_run ? "the planned machine" : "this machine");
    for (int i = 0; i < n; i++) say("  %s\n", why[i]);
    if (!visible) {
        char job[96], dw[4200];
        job_words(a, need, job, sizeof job);
        say("nearest: the plan, without a GPU: %s --model %s --seq %lld %s%s%s --dry-run; on a machine with %d GPU(s) "
            "of %.0f GiB free and %.0f GiB of host memory, the same command runs as it is\n", a->prog, a->model,
            (long long)a->seq, job, data_words(a, dw, sizeof dw), a->keep ? a->keep : "", need, ceil(peak / gib),
            ceil(host / gib));
        exit(1);
    }
    advise_nearest(a, visible < need ? visible : need, gpu, budget);
    if (!a->dry_run) exit(1); /* a dry-run says what the run would, and is done */
}

void advise_nearest(const FitAsk *a, int gpus, double gpu, double budget) {
    Qwen3Config full; /* the model's own depth and name: the rehearsal's --layers is chosen from it */
    char err[512], est[128], dw[4200], dk[8400];
    snprintf(dk, sizeof dk, "%s%s", data_words(a, dw, sizeof dw), a->keep ? a->keep : ""); /* the job's own options */
    const char *d = dk;
    if (config_load(a->model, &full, err, sizeof err)) return; /* the stage loaded it: cannot happen */
    /* the job's depth: the model's, or the --layers cut it asked for (advice for the whole model would
     * plan another job than the one asked) */
    const int64_t seq = a->seq, L = a->layers > 0 && a->layers < full.layers ? a->layers : full.layers;
    char cut[48] = "";
    if (L < full.layers) snprintf(cut, sizeof cut, " --layers %lld", (long long)L);
    say("nearest commands that fit %s (step times at ~%.0f model TFLOP/s, an H200's):\n",
        a->dry_run ? "the planned machine" : "here", ADVICE_STEP_TFLOPS);
    const int64_t job = a->P > 1 ? a->P : HEADLINE_GPUS; /* rehearse the job, or the headline's 8 GPUs */
    double tf = 0;
    /* the deepest rehearsal that fits and whose step ends within the five minutes (else the shallowest
     * that fits): a few layers already give the per-layer time the whole job's step is made of */
    int64_t rl = 0;
    double rtf = 0;
    for (int64_t l = L; l >= 1 && !(rl && rtf / ADVICE_STEP_TFLOPS <= 300); l = l > 4 ? l / 2 : l - 1)
        if (fits(a->exe, a->model, a->data, a->keep, seq, job, 0, l, gpu, budget, &tf)) rl = l, rtf = tf;
    if (rl)
        say("  rehearse rank 0 of %lld GPUs: %s --model %s --seq %lld --gpus %lld --rehearse 0%s%.0lld%s%s\n",
            (long long)job, a->prog, a->model, (long long)seq, (long long)job, rl < full.layers ? " --layers " : "",
            rl < full.layers ? (long long)rl : 0, d, estimate(rtf, est, sizeof est));
    for (int64_t s = seq / 2; s >= 2 * gpus * 1024; s /= 2)
        if (fits(a->exe, a->model, a->data, a->keep, s, gpus, -1, L < full.layers ? L : 0, gpu, budget, &tf)) {
            say("  fewer tokens: %s --model %s --seq %lld --gpus %lld%s%s%s\n", a->prog, a->model, (long long)s,
                (long long)gpus, cut, d, estimate(tf, est, sizeof est));
            break;
        }
    static const char *const QWEN3[] = {"32B", "14B", "8B", "4B", "1.7B", "0.6B"},
                             *const QWEN35[] = {"Qwen3.5-27B", "Qwen3.5-9B", "Qwen3.5-4B", "Qwen3.5-2B", "Qwen3.5-0.8B"};
    const char *const *smaller = full.lin_v_heads ? QWEN35 : QWEN3; /* the same family: its tokenizer, its data */
    const int sizes = full.lin_v_heads ? (int)(sizeof QWEN35 / sizeof *QWEN35) : (int)(sizeof QWEN3 / sizeof *QWEN3);
    int below = 0;
    for (int i = 0; i < sizes; i++) {
        if (below && fits(a->exe, smaller[i], a->data, a->keep, seq, gpus, -1, L < full.layers ? L : 0, gpu, budget, &tf)) {
            say("  a smaller model: %s --model %s --seq %lld --gpus %lld%s%s%s\n", a->prog, smaller[i], (long long)seq,
                (long long)gpus, cut, d, estimate(tf, est, sizeof est));
            break;
        }
        below = below || !strcmp(smaller[i], full.name);
    }
}
