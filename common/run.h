/* run.h -- what a training run does besides training, the same in every stage: its options (saving,
 * resuming, evaluation, the step log, profiles), the rank's place in the job, and the calls the
 * stage's loop makes around its step -- begin, stop on a signal, report the step (evaluating and
 * saving when due), end. None of it is a lever: a stage's diff never touches it.
 *
 * The stage gives the run its model through three hooks: the training state (for saves and the
 * tests' gradient dumps) and one held-out window's summed loss (for evaluation). */
#ifndef LONGCTX_RUN_H
#define LONGCTX_RUN_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "comm.h"
#include "config.h"
#include "inputs.h"
#include "memplan.h"
#include "ranks.h"
#include "state.h"
#include "train.h"

/* ---------------------------------------------------------------- options */
/* --help's last line, the same in every stage */
#define STAGE_USAGE "\n--dry-run prints the memory plan (works without a GPU). Sizes take K/M suffixes: --seq 128K." \
    "\nExit status: 0 the run is done; 2 bad input (the last line says what and what to do); 1 an internal error; " \
    "75 stopped by SIGTERM or SIGUSR1 under --save, the step in flight saved (requeue, then --resume DIR); " \
    "128 + N a second signal N ended it at once (the last complete save stays)."

typedef struct {
    const char *save;        /* DIR: saves go to DIR/step-N (an HF model directory + trainer state) */
    int64_t save_every;      /* also every N steps (0: at the end only) */
    int64_t save_keep;       /* newest saves kept (0: all) */
    const char *resume;      /* the save to continue from (resolved to its step directory) */
    const char *resume_changes; /* what may differ from the save's run: seq,data,packing,model (all, none) */
    unsigned resume_allow;   /* its RESUME_* bits (common/inputs.h), set by run_opts_check */
    const char *log;         /* JSON lines, one per step */
    const char *eval_data;   /* held-out token file (forward only) */
    int64_t eval_every;      /* evaluate every N steps too (0: before the first and after the last) */
    int64_t eval_windows;    /* windows of eval_data per evaluation */
    const char *dump_grads;  /* tests: step 1's loss and fp32 gradients (safetensors) */
    int profile;             /* GPU time by kernel class, per step */
    const char *trace;       /* tests: every GEMM, attention call and collective, in order */
    const char *timeline;    /* step 2's spans of work on each stream */
    /* what run_open_inputs found, for the saves' record of the run (SaveMeta) */
    int64_t data_tokens, data_digest, eot;
} RunOpts;

#define RUN_DEFAULTS {.save_keep = 1, .eval_windows = 4}
#define RUN_OPTIONS(r)                                                                                                  \
    {"--save", OPT_STRING, &(r).save, "save at the end to DIR/step-N (an HF model directory + trainer state); DIR/latest points at the newest. SIGTERM or SIGUSR1 then stops the run after the step in flight, saved, exit 75 (Slurm: --signal=USR1@T, T above a step and a save, which the first step's line estimates)"}, \
    {"--save-every", OPT_INT, &(r).save_every, "also save every N steps (0: only at the end)", "[0,1G]"},              \
    {"--save-keep", OPT_INT, &(r).save_keep, "keep the newest K saves, remove older ones (0: keep all)", "[0,1G]"},    \
    {"--resume", OPT_STRING, &(r).resume, "continue from a --save DIR (its latest complete save) or a DIR/step-N; a run with another --seq, --data (its tokens), --packing or model than the save's is refused, naming each"}, \
    {"--resume-changes", OPT_STRING, &(r).resume_changes, "with --resume: what may differ from the save's run, a comma list of seq, data, packing, model (or all): the run goes on by step number (step N+1 reads its window of the new data or length)"}, \
    {"--log", OPT_STRING, &(r).log, "append one JSON line per step to this file"},                                    \
    {"--eval-data", OPT_STRING, &(r).eval_data, "held-out token file: its loss (forward only) before the first step and after the last"}, \
    {"--eval-every", OPT_INT, &(r).eval_every, "with --eval-data: also evaluate every N steps", "[0,1G]"},            \
    {"--eval-windows", OPT_INT, &(r).eval_windows, "with --eval-data: windows of --seq tokens per evaluation", "[1,1G]"}, \
    {"--dump-grads", OPT_STRING, &(r).dump_grads, "write step 1's loss and fp32 gradients (safetensors)"},             \
    {"--profile", OPT_FLAG, &(r).profile, "print each step's GPU time by kernel class (GEMM, attention, ...)"},        \
    {"--trace", OPT_STRING, &(r).trace, "write every GEMM, attention call and collective (shapes, bytes) this rank issues to FILE, in order (tests)"}, \
    {"--timeline", OPT_STRING, &(r).timeline, "write step 2's spans of work on each stream (compute, communication, host copies) to FILE"}

/* After the options are parsed: --resume resolved to its step directory (and the model it holds,
 * unless --model names another), --resume-changes read, the options that need one another checked;
 * with --save, SIGTERM and SIGUSR1 armed (preempt_arm) before anything long: a signal from here on
 * stops the run at the next point it can (the inputs checked, or the step in flight), exit 75. */
void run_opts_check(RunOpts *r, const char **model, int model_given, int64_t steps);

/* --profile, --trace, --timeline: armed once the plan is made and the run will go ahead */
void run_instruments(const RunOpts *r);

/* Every file the run reads, checked before the GPU is touched, before the plan is printed
 * (common/inputs.h): a run that refuses them stops here, its plan never shown. A dry-run checks the
 * same and, refused, still prints its plan -- what a dry-run is for -- but a plan that fits then
 * says "fits, but the run is refused below (its inputs)", never a bare "fits", and the refusal is
 * the dry-run's last line (exit 2). eot: --packing's end of text (-1: not packed). Records in r
 * what the saves will say of the run. A signal that came while the files were read stops the run
 * here (nothing trained), exit 75. */
void run_open_inputs(Inputs *in, RunOpts *r, const char *data, const char *model, int64_t seq, int64_t steps,
                     int64_t eot, int dry_run, const Job *j, const Qwen3Config *c, const ParamTable *t);

/* ---------------------------------------------------------------- the job (common/ranks.h) */
/* A rank's first call, before it allocates or loads (every rank of a job of several): the ranks
 * compare their options (cli_options_digest: every node runs the same command, only --node-rank and
 * the printing rank's outputs may differ), since options shape the collectives and a node that
 * issued other ones would hang the job or pair wrong messages; then, with --save, every rank opens a
 * file rank 0 made in DIR, so a DIR that another node cannot see or write is refused, naming the
 * rank, now rather than at the first save. A job of one process (local ranks, one node) and the
 * rehearsal skip both. */
void run_join(const RunOpts *o, const Job *j, cudaStream_t st);
/* Every rank must read the same token file and model: each counts every rank's labels in its own
 * copy (and, with --packing, its ends of text), and a layer's kind decides its collectives. One rank:
 * nothing to compare. */
void job_same_inputs(const Job *j, uint64_t digest, const char *path, int64_t tokens, int64_t counted,
                     int64_t layers, cudaStream_t st);

/* ---------------------------------------------------------------- the run */
/* The write rate a save's time is estimated at, every node's writers together (GB/s): an assumed
 * figure, a shared filesystem's order of magnitude; each save's line says its measured rate. */
#define RUN_SAVE_GBPS 1.0
typedef struct {
    void *model;
    StateIO (*state)(void *model);                               /* what this rank holds, for saves */
    double (*eval_window)(void *model, int64_t k, int64_t *labels); /* held-out window k's summed NLL over
                                                                      * every rank, and its labels (0: none) */
} RunHooks;

typedef struct {
    const RunOpts *o;
    RunHooks h;
    Job job;
    int stage;
    const Qwen3Config *c;
    const char *data;        /* --data, for the saves' metadata */
    int64_t seq, S;          /* tokens of a window, of this rank's share */
    int64_t steps, start;    /* the run's last step; the step it continues after */
    int64_t eval_passes;     /* windows each rank evaluates */
    const MemPlan *mp;
    cudaStream_t st;
    FILE *log;
    double flops, t0;        /* this rank's model FLOPs per unpacked step; the loop's start */
    cudaEvent_t ev[2];       /* the step's start and end on the compute stream */
} Run;

/* windows each rank evaluates: --eval-windows shared by the ranks that read their own */
static inline int64_t run_eval_passes(const RunOpts *o, const Job *j) { return (o->eval_windows + j->dp - 1) / j->dp; }

/* the held-out file, opened with the training's windows (and --packing's ends), holds what an
 * evaluation reads and a label that counts (DIE otherwise) */
void run_check_eval(const RunOpts *r, const Job *j, const Loader *ld);
/* The loop begins after step `start` (0, or the save resumed from): the log opened, the job's
 * ranks met (each allocated and loaded at its own pace), the held-out loss before the first step
 * reported. */
void run_begin(Run *r, int64_t start);
/* Before step + 1: a SIGTERM or SIGUSR1 (agreed by every rank) saves `step` and stops the run (1). */
int run_stopping(Run *r, int64_t step);
/* a step whose windows hold no label that counts: reported, evaluated and saved when due */
void run_skipped(Run *r, int64_t step);
/* the step's GPU time: its start and end on the compute stream */
void run_clock_start(Run *r);
void run_clock_stop(Run *r);
/* tests (--dump-grads): step 1's loss and fp32 gradients, before the update */
void run_dump(Run *r, int64_t step, const double *loss_sum, int64_t counted, double aux);
/* The step's report. The stage fills step, epoch, loss, lr, grad_norm, labels and keep_attn, and
 * attn_tflop with --packing (pairs: this rank's causal pairs); the rest is the run's. Then the
 * evaluation and the save this step asks for. With --save, the run's first step also says how long
 * a stop on a signal can take -- this step and a save at RUN_SAVE_GBPS -- and so what Slurm's
 * --signal=USR1@T needs. */
void run_step(Run *r, StepLog *s, double pairs);
/* after the loop: the time, the final save (unless a signal stopped the run) */
void run_end(Run *r, int64_t step);

#endif
