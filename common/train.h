/* train.h -- the bookkeeping around a training loop that every stage shares: wall-clock timer,
 * learning-rate schedule, the profile by kernel class (--profile), the shape trace (--trace), and
 * the step line with its JSON log. None of it is a lever; the stage files call it. */
#ifndef LONGCTX_TRAIN_H
#define LONGCTX_TRAIN_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"

double now_s(void); /* monotonic seconds */

/* lr at 1-based step: linear warmup, then cosine down to min_frac * lr at `steps`, or constant */
double lr_at(double lr, double min_frac, int64_t warmup, int64_t steps, const char *schedule, int64_t step);

/* AdamW's hyper-parameters and its learning-rate schedule: the same options in every stage */
typedef struct {
    double lr, min_lr_frac;  /* the peak; the cosine's floor as a fraction of it */
    int64_t warmup;          /* linear warmup steps */
    const char *schedule;    /* after warmup: cosine | constant */
    double wd, beta1, beta2, eps, clip; /* decoupled weight decay (matrices only), moments, epsilon, norm clip */
} AdamOpts;
#define ADAM_DEFAULTS {.lr = 3e-4, .min_lr_frac = 0.1, .warmup = 10, .schedule = "cosine", .wd = 0.1, .beta1 = 0.9, \
                       .beta2 = 0.95, .eps = 1e-8, .clip = 1.0}
#define ADAM_OPTIONS(a)                                                                                                  \
    {"--lr", OPT_DOUBLE, &(a).lr, "peak learning rate", "(0,1]"},                                                     \
    {"--warmup", OPT_INT, &(a).warmup, "linear warmup steps", "[0,1G]"},                                              \
    {"--schedule", OPT_STRING, &(a).schedule, "after warmup: cosine | constant", "cosine|constant"},                  \
    {"--min-lr-frac", OPT_DOUBLE, &(a).min_lr_frac, "cosine floor as a fraction of --lr", "[0,1]"},                   \
    {"--wd", OPT_DOUBLE, &(a).wd, "AdamW decoupled weight decay (matrices only)", "[0,1]"},                           \
    {"--beta1", OPT_DOUBLE, &(a).beta1, "AdamW beta1", "[0,1)"},                                                      \
    {"--beta2", OPT_DOUBLE, &(a).beta2, "AdamW beta2", "[0,1)"},                                                      \
    {"--eps", OPT_DOUBLE, &(a).eps, "AdamW epsilon", "(0,1]"},                                                        \
    {"--clip", OPT_DOUBLE, &(a).clip, "global gradient-norm clip (0: off)", "[0,inf)"}
/* the step's learning rate */
static inline double adam_lr(const AdamOpts *a, int64_t steps, int64_t step) {
    return lr_at(a->lr, a->min_lr_frac, a->warmup, steps, a->schedule, step);
}

/* --profile: the stage marks the step's regions -- the layers (K_ELEM), the loss, the optimizer, the
 * end -- and each region's time is charged to its class. Inside the layers the GEMM and attention
 * calls time themselves (prof_span_begin/end in common/gemm.c, common/sdpa.c, the gated delta rule),
 * moving their time to K_GEMM or K_ATTN; what is left is the norms, RoPE, SwiGLU, copies. Off (or on
 * a rank other than the printing one), each is a branch. */
enum { K_GEMM, K_ATTN, K_ELEM, K_LOSS, K_OPTIM, K_END, K_N };
void prof_enable(int on);
void mark(cudaStream_t st, int cls);
typedef struct { int prof, tl; } ProfSpan;
ProfSpan prof_span_begin(cudaStream_t st, int cls);
void prof_span_end(cudaStream_t st, ProfSpan s);
/* wait for the stream, print the step's time per class, start over */
void prof_report(cudaStream_t st);

/* --timeline FILE: one step's work on each stream, as spans: the compute stream's kernel classes
 * (mark()), every collective on the stream it runs on, every host copy (stage 4), and a marker where
 * each layer's forward and backward begin (progress_at). Step 1 warms up; step 2 is recorded and
 * written as "lane<TAB>what<TAB>start_ms<TAB>end_ms" lines (bench/plot_timeline.py draws one layer).
 * Only the printing rank records. */
void timeline_open(const char *path);
int tl_begin(cudaStream_t st, const char *lane, const char *what); /* -1 when not recording */
void tl_end(int span, cudaStream_t st);

/* --trace FILE: one line per GEMM, attention call and collective issued by the printing rank (its shapes
 * and sizes), so two runs can be compared for doing the same work in the same order. */
void trace_open(const char *path);
void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The rehearsal's ring check: events around each of the P ring blocks of one layer, forward (dir 0)
 * and backward (dir 1), read at the step's end (run_step) and set against the modelled transfer that
 * runs beneath each block. layer < 0: off. The timer is its rank thread's: a ring calls blocks_watch
 * before its P blocks, and sdpa_blocks_fwd / _bwd mark each block's start and end (blocks_tick). */
typedef struct {
    int P;
    int64_t layer;
    cudaEvent_t *ev;                /* [2, P, 2] */
    double kv_hop_ms, dkv_hop_ms;   /* the modelled hops: K/V, and the travelling dK/dV */
} BlockTimer;
void blocks_init(BlockTimer *b, int P, int64_t layer, double kv_hop_ms, double dkv_hop_ms);
void blocks_watch(BlockTimer *b, int64_t at, int dir);
void blocks_tick(cudaStream_t st, int end);
/* Forward: the K/V hop for block i+1 runs under block i. Backward: the K/V hop for block j+1 and the
 * dK/dV hop of block j-1 run under block j. Prints, per direction, whether every hop hides. */
void blocks_report(void);

/* --eval-data: one evaluation's result (labels 0: none ran) */
typedef struct {
    double loss;             /* mean NLL over the labels that count in the windows */
    int64_t labels, windows;
    double sec;              /* wall time of the evaluation */
} EvalResult;
/* evaluate after this step? every > 0: each `every` steps and after the last; 0: after the last */
int eval_due(int64_t every, int64_t step, int64_t last);
/* save after this step (--save-every; the last step's save is the run's final one)? */
int save_due(int64_t every, int64_t step, int64_t last);
/* an evaluation outside a step line (before the first step): its own line and JSON line */
void eval_report(int stage, int64_t after_step, const EvalResult *e, FILE *jsonl);
/* a step whose windows hold no label that counts (all prompt): no loss to divide, no update; its
 * evaluation (e->labels 0: none) is reported with it */
void step_skipped(int stage, int64_t step, const EvalResult *e, FILE *jsonl);
/* While paused (an evaluation between steps), this thread's work is left out of what the step
 * reports: --profile's marks, the ring's block timer and the rehearsal's collective counts. */
void measure_pause(int paused);
int measure_paused(void);

/* one step's numbers: the line on stdout and, with a log file, one JSON line */
typedef struct {
    int stage, ranks;        /* ranks 0: a one-GPU stage (not printed in the JSON) */
    const char *model;
    int64_t seq;             /* tokens per rank */
    int keep_attn;
    int64_t step, epoch;
    double loss, lr, grad_norm, sec, tokens, tflops, mem_used_gib, mem_plan_gib;
    double host_gib;         /* pinned host memory (0: none; not printed) */
    double attn_tflop;       /* --packing: the attention TFLOP of the step's blocks (forward and
                                backward, as model FLOPs count them; 0: unpacked, not printed) */
    double attn_tflop_full;  /* the same window's attention unpacked (causal over every token) */
    int64_t labels;          /* labels that counted (the loss's denominator, all ranks) */
    EvalResult eval;         /* an evaluation after this step (eval.labels 0: none) */
} StepLog;
void step_report(const StepLog *s, FILE *jsonl);
/* On a terminal, a line per layer as the GPU reaches it (a step at 1M tokens takes minutes):
 * progress_start once before training, progress_at(stream, 0 forward / 1 backward, layer) where a
 * layer begins; the next step, evaluation or skip line replaces it. Only the printing rank shows it. */
void progress_start(int64_t layers);
void progress_at(cudaStream_t st, int backward, int64_t l);

/* Preemption: SIGTERM or SIGUSR1 (what a scheduler such as Slurm sends before a time limit or a
 * preemption). With --save the run arms the handler as soon as its options are read; the first
 * signal only sets a flag: the run ends the step in flight, saves it and exits PREEMPT_EXIT (75,
 * EX_TEMPFAIL: "stopped, go on later"; a job script requeues on it), or, when the signal came
 * before the first step, stops there with nothing to save (the same status). Several ranks agree on
 * the step with a collective. A second signal ends the process at once: one line on stderr, status
 * 128 + the signal (143 for SIGTERM, 138 for SIGUSR1); the last complete save stays (a save is
 * renamed into place only once complete). Without --save the signals keep their default. */
#define PREEMPT_EXIT 75
void preempt_arm(void); /* once per process; later calls do nothing */
int preempt_pending(void); /* the signal's number, or 0 */
/* the line that says why the run stops early (its "done: X s" follows): which signal, after which
 * step, where the save is and how to go on; from then the process's exit status is PREEMPT_EXIT */
void preempt_report(int sig, int64_t step, int64_t start, const char *save);
/* Before any rank exists (no GPU, no communicator): a pending signal stops the process now, with
 * a line saying so ("while the inputs were read"), status PREEMPT_EXIT. */
void preempt_stop_early(const char *when);

#endif
