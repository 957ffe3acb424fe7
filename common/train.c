/* train.c -- timers, lr schedule, profile, trace, step report. */
#include "train.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define PEAK_FLOPS 989e12 /* H100/H200 dense bf16 */

double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double lr_at(double lr, double min_frac, int64_t warmup, int64_t steps, const char *schedule, int64_t step) {
    if (step <= warmup) return lr * (double)step / (double)(warmup > 0 ? warmup : 1);
    if (!strcmp(schedule, "constant")) return lr;
    const double t = (double)(step - warmup) / (double)(steps - warmup > 0 ? steps - warmup : 1);
    const double floor = lr * min_frac;
    return floor + (lr - floor) * 0.5 * (1.0 + cos(M_PI * (t > 1 ? 1 : t)));
}

/* ---------------------------------------------------------------- profile */
static const char *K_NAMES[K_N] = {"GEMM", "attention", "norms/RoPE/SwiGLU/embedding", "loss (lm_head + CE)",
                                   "optimizer", "-"};
#define MAX_MARKS 8192
#define MAX_SPANS 65536
static struct {
    int on, n, cls[MAX_MARKS];
    cudaEvent_t ev[MAX_MARKS];
    double ms[K_N];
    int region;                  /* the class of the region marked last */
    int nspan, span_cls[MAX_SPANS];
    cudaEvent_t *span_ev;        /* [2 MAX_SPANS]: begin, end (made as first needed) */
} prof = {.region = K_ELEM};

void prof_enable(int on) { prof.on = on; }

static _Thread_local int paused; /* per rank thread: local ranks evaluate at their own pace */
static _Thread_local int span_depth; /* spans inside spans (a ring's blocks inside its call) are the outer one's */
void measure_pause(int p) { paused = p; }
int measure_paused(void) { return paused; }

/* ---------------------------------------------------------------- timeline */
#define TL_MAX 65536
static struct {
    FILE *f;
    int armed, on, n, compute;  /* compute: the open span of the compute stream's class (-1: none) */
    const char *lane[TL_MAX], *what[TL_MAX];
    char label[TL_MAX][24];     /* what, when it is made on the fly (a layer's marker) */
    cudaEvent_t ev[2 * TL_MAX]; /* begin, end */
} tl = {.compute = -1};

void timeline_open(const char *path) {
    if (!path) return;
    tl.f = fopen(path, "w");
    if (!tl.f) STOP("cannot write --timeline %s: %s", path, strerror(errno));
    tl.armed = 1;
}

int tl_begin(cudaStream_t st, const char *lane, const char *what) {
    if (!tl.on || tl.n == TL_MAX || !rank_prints() || paused) return -1;
    const int i = tl.n++;
    for (int k = 0; k < 2; k++)
        if (!tl.ev[2 * i + k]) CUDA_CHECK(cudaEventCreate(&tl.ev[2 * i + k]));
    tl.lane[i] = lane, tl.what[i] = what;
    CUDA_CHECK(cudaEventRecord(tl.ev[2 * i], st));
    CUDA_CHECK(cudaEventRecord(tl.ev[2 * i + 1], st)); /* a point, unless tl_end moves it */
    return i;
}

void tl_end(int i, cudaStream_t st) {
    if (i >= 0) CUDA_CHECK(cudaEventRecord(tl.ev[2 * i + 1], st));
}

/* at each step's end (prof_report): after step 1 start recording, after step 2 write and stop */
static void timeline_step(cudaStream_t st) {
    if (!tl.armed || !rank_prints()) return;
    if (!tl.on) { tl.on = 1; return; }
    CUDA_CHECK(cudaDeviceSynchronize()); /* every stream's events */
    for (int i = 0; i < tl.n; i++) {
        float a, b;
        CUDA_CHECK(cudaEventElapsedTime(&a, tl.ev[0], tl.ev[2 * i]));
        CUDA_CHECK(cudaEventElapsedTime(&b, tl.ev[0], tl.ev[2 * i + 1]));
        fprintf(tl.f, "%s\t%s\t%.4f\t%.4f\n", tl.lane[i], tl.what[i], a, b);
    }
    fclose(tl.f);
    printf("  timeline: %d spans of step 2 written (--timeline)\n", tl.n);
    tl.armed = tl.on = 0;
    (void)st;
}

void mark(cudaStream_t st, int cls) {
    if (!rank_prints() || paused) return; /* one rank profiles */
    if (tl.on) { /* the compute stream's spans, by class */
        tl_end(tl.compute, st);
        tl.compute = cls == K_END ? -1 : tl_begin(st, "compute", K_NAMES[cls]);
    }
    prof.region = cls;
    if (!prof.on || prof.n == MAX_MARKS) return;
    if (!prof.ev[prof.n]) CUDA_CHECK(cudaEventCreate(&prof.ev[prof.n]));
    CUDA_CHECK(cudaEventRecord(prof.ev[prof.n], st));
    prof.cls[prof.n++] = cls;
}

ProfSpan prof_span_begin(cudaStream_t st, int cls) {
    ProfSpan s = {-1, -1};
    if (span_depth++ || prof.region != K_ELEM || !rank_prints() || paused) return s; /* the outermost, in the layers */
    if (tl.on) s.tl = tl_begin(st, "compute", K_NAMES[cls]);
    if (!prof.on || prof.nspan == MAX_SPANS) return s;
    if (!prof.span_ev) prof.span_ev = xcalloc(2 * MAX_SPANS, sizeof *prof.span_ev);
    s.prof = prof.nspan++;
    for (int k = 0; k < 2; k++)
        if (!prof.span_ev[2 * s.prof + k]) CUDA_CHECK(cudaEventCreate(&prof.span_ev[2 * s.prof + k]));
    CUDA_CHECK(cudaEventRecord(prof.span_ev[2 * s.prof], st));
    prof.span_cls[s.prof] = cls;
    return s;
}

void prof_span_end(cudaStream_t st, ProfSpan s) {
    span_depth--;
    if (s.prof >= 0) CUDA_CHECK(cudaEventRecord(prof.span_ev[2 * s.prof + 1], st));
    tl_end(s.tl, st);
}

void prof_report(cudaStream_t st) {
    timeline_step(st);
    if (!prof.on || !rank_prints()) return;
    CUDA_CHECK(cudaStreamSynchronize(st));
    double total = 0;
    for (int i = 0; i < K_N; i++) prof.ms[i] = 0;
    for (int i = 0; i + 1 < prof.n; i++) {
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, prof.ev[i], prof.ev[i + 1]));
        prof.ms[prof.cls[i]] += ms;
        total += ms;
    }
    for (int i = 0; i < prof.nspan; i++) { /* a GEMM's or an attention call's time, out of the layers' rest */
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, prof.span_ev[2 * i], prof.span_ev[2 * i + 1]));
        prof.ms[prof.span_cls[i]] += ms;
        prof.ms[K_ELEM] -= ms;
    }
    prof.nspan = 0;
    printf("  profile:");
    for (int i = 0; i < K_END; i++)
        printf(" %s %.1f ms (%.1f%%)%s", K_NAMES[i], prof.ms[i], 100 * prof.ms[i] / total, i + 1 < K_END ? " |" : "\n");
    prof.n = 0;
}

/* ---------------------------------------------------------------- trace */
static FILE *trace_file;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;

void trace_open(const char *path) {
    if (!path) return;
    trace_file = fopen(path, "w");
    if (!trace_file) STOP("cannot write --trace %s: %s", path, strerror(errno));
}

void trace(const char *fmt, ...) {
    if (!trace_file || !rank_prints()) return; /* the printing rank's: rank 0, or the rehearsed one */
    pthread_mutex_lock(&trace_lock);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(trace_file, fmt, ap);
    va_end(ap);
    fputc('\n', trace_file);
    fflush(trace_file);
    pthread_mutex_unlock(&trace_lock);
}

/* ---------------------------------------------------------------- ring blocks */
static _Thread_local BlockTimer *blocks_mine; /* this rank thread's */
static _Thread_local struct { int on, dir, i; } watch;

void blocks_init(BlockTimer *b, int P, int64_t layer, double kv_hop_ms, double dkv_hop_ms) {
    *b = (BlockTimer){P, layer, NULL, kv_hop_ms, dkv_hop_ms};
    blocks_mine = b;
    if (layer < 0) return;
    b->ev = calloc((size_t)(4 * P), sizeof(cudaEvent_t));
    for (int i = 0; i < 4 * P; i++) CUDA_CHECK(cudaEventCreate(&b->ev[i]));
}

void blocks_watch(BlockTimer *b, int64_t at, int dir) {
    watch.on = at == b->layer && !paused, watch.dir = dir, watch.i = 0;
}

void blocks_tick(cudaStream_t st, int end) {
    const BlockTimer *b = blocks_mine;
    if (!watch.on || !b) return;
    CUDA_CHECK(cudaEventRecord(b->ev[(watch.dir * b->P + watch.i) * 2 + end], st));
    if (end && ++watch.i == b->P) watch.on = 0;
}

void blocks_report(void) {
    const BlockTimer *b = blocks_mine;
    if (!b || b->layer < 0 || b->P < 2 || !rank_prints()) return;
    const double kv_hop_ms = b->kv_hop_ms, dkv_hop_ms = b->dkv_hop_ms;
    for (int dir = 0; dir < 2; dir++) {
        const double hop = dir ? kv_hop_ms + dkv_hop_ms : kv_hop_ms;
        double lo = 1e30, hi = 0;
        int short_at = -1;
        for (int i = 0; i < b->P; i++) {
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, b->ev[(dir * b->P + i) * 2], b->ev[(dir * b->P + i) * 2 + 1]));
            lo = ms < lo ? ms : lo;
            hi = ms > hi ? ms : hi;
            const int under = dir ? i > 0 && i + 1 < b->P : i + 1 < b->P; /* a hop runs beneath this block */
            if (under && ms < hop && short_at < 0) short_at = i;
        }
        printf("  ring %s, layer %lld: hop %.3f ms (%s, modelled) under blocks of %.2f-%.2f ms (measured): ",
               dir ? "backward" : "forward", (long long)b->layer, hop, dir ? "K/V + dK/dV" : "K/V", lo, hi);
        if (short_at < 0) printf("hidden\n");
        else printf("NOT hidden under block %d\n", short_at);
    }
}

/* ---------------------------------------------------------------- the step line */
/* ---- the progress line: on a terminal, "forward: layer l of L" as the GPU gets there ---- */
static struct {
    char (*line)[64];    /* [2L]: forward layers 1..L, then backward L..1 */
    int64_t layers;
} progress;              /* a line on the terminal sets longctx_midline (check.h): the next report clears it */
static void CUDART_CB show_line(void *line) {
    fputs(line, stdout);
    fflush(stdout);
    __atomic_store_n(&longctx_midline, 1, __ATOMIC_RELEASE); /* CUDA's callback thread */
}
void progress_start(int64_t layers) {
    if (progress.line || !rank_prints() || !isatty(fileno(stdout))) return;
    progress.line = xcalloc((size_t)(2 * layers), sizeof *progress.line);
    progress.layers = layers;
    for (int64_t l = 0; l < 2 * layers; l++)
        snprintf(progress.line[l], sizeof *progress.line, "\r  %s: layer %lld of %lld ", l < layers ? "forward" : "backward",
                 (long long)(l < layers ? l + 1 : 2 * layers - l), (long long)layers);
}
void progress_at(cudaStream_t st, int backward, int64_t l) {
    const int m = tl_begin(st, "layer", ""); /* the timeline's marker: where layer l begins */
    if (m >= 0) snprintf(tl.label[m], sizeof tl.label[m], "%s %lld", backward ? "backward" : "forward", (long long)l),
                tl.what[m] = tl.label[m];
    if (rank_prints() && progress.line) /* only the printing rank's thread touches it */
        CUDA_CHECK(cudaLaunchHostFunc(st, show_line, progress.line[backward * progress.layers + l]));
}
static void progress_clear(void) {
    if (!__atomic_load_n(&longctx_midline, __ATOMIC_ACQUIRE)) return;
    fputs("\r\033[K", stdout);
    __atomic_store_n(&longctx_midline, 0, __ATOMIC_RELEASE);
}

static void eval_json(const EvalResult *e, char *out, size_t n);
void step_report(const StepLog *s, FILE *jsonl) {
    if (!rank_prints()) return;
    progress_clear();
    const double mfu = s->tflops * 1e12 / PEAK_FLOPS;
    printf("step %5lld | loss %.6f | lr %.3e | grad norm %.4f | %.3f s | %.0f tok/s | %.1f TFLOP/s | MFU %.1f%% | "
           "mem %.2f GiB (plan %.2f)",
           (long long)s->step, s->loss, s->lr, s->grad_norm, s->sec, s->tokens / s->sec, s->tflops, 100 * mfu,
           s->mem_used_gib, s->mem_plan_gib);
    if (s->host_gib > 0) printf(" | host %.2f GiB pinned", s->host_gib);
    if (s->attn_tflop > 0) printf(" | attention %.3g of %.3g TFLOP (packed)", s->attn_tflop, s->attn_tflop_full);
    if (s->eval.labels) printf(" | eval loss %.6f ppl %.3f (%.1f s)", s->eval.loss, exp(s->eval.loss), s->eval.sec);
    printf("\n");
    if (!jsonl) return;
    char ranks[32] = "";
    if (s->ranks) snprintf(ranks, sizeof ranks, "\"ranks\":%d,", s->ranks);
    char host[48] = "";
    if (s->host_gib > 0) snprintf(host, sizeof host, "\"host_pinned_gib\":%.3f,", s->host_gib);
    char eval[160] = "";
    if (s->eval.labels) eval_json(&s->eval, eval, sizeof eval);
    char attn[96] = "";
    if (s->attn_tflop > 0)
        snprintf(attn, sizeof attn, "\"attn_tflop\":%.6g,\"attn_tflop_unpacked\":%.6g,", s->attn_tflop, s->attn_tflop_full);
    fprintf(jsonl,
            "{\"stage\":%d,%s\"model\":\"%s\",\"seq\":%lld,\"keep_attn\":%d,\"step\":%lld,\"loss\":%.9g,"
            "\"loss_hex\":\"%a\",\"labels\":%lld,\"lr\":%.6g,\"grad_norm\":%.6g,\"step_s\":%.6f,\"tokens_per_s\":%.1f,"
            "\"model_tflops\":%.2f,\"mfu\":%.4f,\"mem_used_gib\":%.3f,\"mem_plan_gib\":%.3f,%s%s%s\"epoch\":%lld}\n",
            s->stage, ranks, s->model, (long long)s->seq, s->keep_attn, (long long)s->step, s->loss, s->loss,
            (long long)s->labels, s->lr, s->grad_norm, s->sec, s->tokens / s->sec, s->tflops, mfu, s->mem_used_gib,
            s->mem_plan_gib, host, attn, eval, (long long)s->epoch);
    fflush(jsonl);
}

/* ---------------------------------------------------------------- evaluation */
int eval_due(int64_t every, int64_t step, int64_t last) { return step == last || (every > 0 && step % every == 0); }
int save_due(int64_t every, int64_t step, int64_t last) { return every > 0 && step % every == 0 && step < last; }

static void eval_json(const EvalResult *e, char *out, size_t n) {
    snprintf(out, n, "\"eval_loss\":%.9g,\"eval_loss_hex\":\"%a\",\"eval_ppl\":%.6g,\"eval_labels\":%lld,"
             "\"eval_windows\":%lld,\"eval_s\":%.3f,", e->loss, e->loss, exp(e->loss), (long long)e->labels,
             (long long)e->windows, e->sec);
}

void eval_report(int stage, int64_t after_step, const EvalResult *e, FILE *jsonl) {
    if (!rank_prints()) return;
    progress_clear();
    printf("eval after step %lld | eval loss %.6f ppl %.3f | %lld windows, %lld labels | %.1f s\n", (long long)after_step,
           e->loss, exp(e->loss), (long long)e->windows, (long long)e->labels, e->sec);
    if (!jsonl) return;
    char eval[160];
    eval_json(e, eval, sizeof eval);
    eval[strlen(eval) - 1] = 0; /* the trailing comma */
    fprintf(jsonl, "{\"stage\":%d,\"step\":%lld,%s}\n", stage, (long long)after_step, eval);
    fflush(jsonl);
}

void step_skipped(int stage, int64_t step, const EvalResult *e, FILE *jsonl) {
    if (!rank_prints()) return;
    progress_clear();
    printf("step %5lld | skipped: no label in this step's windows carries loss (all masked), no update", (long long)step);
    if (e->labels) printf(" | eval loss %.6f ppl %.3f (%.1f s)", e->loss, exp(e->loss), e->sec);
    printf("\n");
    if (!jsonl) return;
    char eval[160] = "";
    if (e->labels) eval_json(e, eval, sizeof eval);
    fprintf(jsonl, "{\"stage\":%d,\"step\":%lld,\"skipped\":true,%s\"labels\":0}\n", stage, (long long)step, eval);
    fflush(jsonl);
}

/* ---------------------------------------------------------------- preemption */
static volatile sig_atomic_t preempt_sig;
static int preempt_stopped; /* the run stopped early on the signal: the process exits PREEMPT_EXIT */
static char second_msg[2][320]; /* what a second SIGTERM / SIGUSR1 prints, made before any signal can come */

/* The first signal sets a flag, read between steps. A second one ends the process at once: its
 * message by write(2) and _exit, the only calls a handler may make here (async-signal-safe). */
static void on_preempt(int sig) {
    if (!preempt_sig) { preempt_sig = sig; return; }
    const char *m = second_msg[sig == SIGUSR1];
    size_t n = 0;
    while (m[n]) n++;
    if (write(2, m, n) < 0) { /* nothing left to tell */ }
    _exit(128 + sig);
}

/* the process's exit status once the run stopped on a signal: main returns 0 and exit() runs this
 * last (registered first), after everything else has been torn down */
static void preempt_exit(void) {
    if (!preempt_stopped) return;
    fflush(NULL);
    _exit(PREEMPT_EXIT);
}

void preempt_arm(void) {
    static int armed;
    if (armed++) return;
    for (int k = 0; k < 2; k++)
        snprintf(second_msg[k], sizeof second_msg[k],
                 "\n%s: a second %s: stopping at once, status %d (the step in flight is not saved; the last complete "
                 "save stays, --resume goes on from it)\n", longctx_prog, k ? "SIGUSR1" : "SIGTERM",
                 128 + (k ? SIGUSR1 : SIGTERM));
    atexit(preempt_exit);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_preempt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

int preempt_pending(void) { return preempt_sig; }

static const char *sig_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal"; }

void preempt_report(int sig, int64_t step, int64_t start, const char *save) {
    preempt_stopped = 1;
    if (!rank_prints()) return;
    progress_clear();
    const char *name = sig_name(sig);
    if (step > start)
        printf("stopping after step %lld on %s (a time limit or a preemption): saved to %s/step-%lld; --resume %s "
               "continues from it (exit status %d)\n", (long long)step, name, save, (long long)step, save, PREEMPT_EXIT);
    else
        printf("stopping before step %lld on %s: nothing trained since the start, nothing new to save (exit status %d)\n",
               (long long)step + 1, name, PREEMPT_EXIT);
    fflush(stdout);
}

void preempt_stop_early(const char *when) {
    const int sig = preempt_sig;
    if (!sig) return;
    preempt_stopped = 1;
    printf("stopping on %s %s, before training: nothing trained, nothing to save (exit status %d)\n", sig_name(sig),
           when, PREEMPT_EXIT);
    exit(0); /* preempt_exit turns it into PREEMPT_EXIT */
}
