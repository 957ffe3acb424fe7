/* advice.c -- the headline's check and the nearest commands that fit (advice.h). */
#include "advice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "check.h"
#include "config.h"
#include "gpu.h"

int gpus_visible(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* "  (~12.3 min a step here; --steps 24 ends in about 5 minutes)" for a job of tflop per rank */
static const char *estimate(double tflop, char *buf, size_t n) {
    const double s = tflop / ADVICE_STEP_TFLOPS, budget = 300;
    const long long steps = s >= budget ? 1 : (long long)(budget / s);
    if (s < 120) snprintf(buf, n, "   (~%.0f s a step here; --steps %lld ends in about 5 minutes)", s < 1 ? 1 : s, steps);
    else snprintf(buf, n, "   (~%.1f min a step here; --steps %lld takes about %.0f minutes)", s / 60, steps, s * steps / 60);
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
    const RankOpts *r = a->ranks;
    const int one_gpu = r->local_ranks > 0 || r->rehearse >= 0, need = one_gpu ? 1 : a->P / (int)r->nnodes;
    const double gib = 1 << 30, share = r->local_ranks > 0 ? a->P : 1,
                 gpu = visible ? (double)gpu_free_bytes(a->gpu_gib) : 0, peak = (double)memplan_peak(mp) * share,
                 host = (double)memplan_host(mp) * (r->rehearse >= 0 ? 1 : ranks_per_node(r)), budget = a->host_budget;
    char why[3][160];
    int n = 0;
    if (need > visible) snprintf(why[n++], sizeof why[0], "GPUs: the job needs %d on this node, %d visible", need, visible);
    if (visible && peak > gpu)
        snprintf(why[n++], sizeof why[0], "GPU memory: %.1f GiB per GPU planned, %.1f GiB free", peak / gib, gpu / gib);
    if (host > budget)
        snprintf(why[n++], sizeof why[0], "host memory: %.1f GiB pinned per node planned, %.1f GiB available",
                 host / gib, budget / gib);
    if (!n) return;
    say("this machine cannot run it -- short of\n");
    for (int i = 0; i < n; i++) say("  %s\n", why[i]);
    Qwen3Config full; /* the model's own depth: the rehearsal's --layers is chosen from it */
    char err[512], est[128];
    if (config_load(a->model, &full, err, sizeof err)) full.layers = a->depth;
    const int64_t seq = a->seq, L = full.layers, gpus = visible < need ? visible : need;
    if (!visible) {
        char job[96];
        job_words(a, need, job, sizeof job);
        say("nearest: the plan, without a GPU: %s --model %s --seq %lld %s --dry-run; on a machine with %d GPU(s) "
            "of %.0f GiB free and %.0f GiB of host memory, the same command runs as it is\n", a->prog, a->model,
            (long long)seq, job, need, ceil(peak / gib), ceil(host / gib));
        exit(1);
    }
    say("nearest commands that fit here (step times at ~%.0f model TFLOP/s, an H200's):\n", ADVICE_STEP_TFLOPS);
    const int64_t job = a->P > 1 ? a->P : HEADLINE_GPUS; /* rehearse the job, or the headline's 8 GPUs */
    double tf = 0;
    for (int64_t l = L; l >= 1; l = l > 4 ? l / 2 : l - 1)
        if (a->fits(a->ctx, a->model, seq, job, 0, l, gpu, budget, &tf)) {
            say("  rehearse rank 0 of %lld GPUs: %s --model %s --seq %lld --gpus %lld --rehearse 0%s%.0lld%s\n",
                (long long)job, a->prog, a->model, (long long)seq, (long long)job, l < L ? " --layers " : "",
                l < L ? (long long)l : 0, estimate(tf, est, sizeof est));
            break;
        }
    for (int64_t s = seq / 2; s >= 2 * gpus * 1024; s /= 2)
        if (a->fits(a->ctx, a->model, s, gpus, -1, 0, gpu, budget, &tf)) {
            say("  fewer tokens: %s --model %s --seq %lld --gpus %lld%s\n", a->prog, a->model, (long long)s,
                (long long)gpus, estimate(tf, est, sizeof est));
            break;
        }
    const char *smaller[] = {"32B", "14B", "8B", "4B", "1.7B", "0.6B"};
    int below = 0;
    for (int i = 0; i < 6; i++) {
        if (below && a->fits(a->ctx, smaller[i], seq, gpus, -1, 0, gpu, budget, &tf)) {
            say("  a smaller model: %s --model %s --seq %lld --gpus %lld%s\n", a->prog, smaller[i], (long long)seq,
                (long long)gpus, estimate(tf, est, sizeof est));
            break;
        }
        below = below || !strcmp(smaller[i], a->name);
    }
    exit(1);
}
