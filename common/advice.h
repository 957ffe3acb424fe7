/* advice.h -- the headline's check, before anything is allocated: can this machine run the job
 * (its GPUs, each GPU's free memory, the node's host memory)? If not: what is short, and the
 * nearest commands that fit here, each with the step time it would take and a --steps that ends in
 * about five minutes. Whether a command fits is asked of the stage itself: its --dry-run, run with
 * this machine's memory as --gpu-gib and --host-gib, so a suggestion is what that command would
 * plan. Operations, not a lever: a stage calls advice_gpus() and advise_unless_fits(), a line each. */
#ifndef LONGCTX_ADVICE_H
#define LONGCTX_ADVICE_H

#include <stdint.h>

#include "memplan.h"
#include "ranks.h"

/* model TFLOP/s a stage-5 step keeps on an H200, for the estimates: 391 with attention recomputed,
 * 489 with it kept (rehearsed rank 0 of 8, 32B at 1M; RESULTS.md) -- the lower one */
#define ADVICE_STEP_TFLOPS 390.0
#define HEADLINE_GPUS 8 /* the headline's job when no GPU count is given */

typedef struct {
    const char *prog;          /* "./stage5": how the suggestions name the program */
    const char *exe;           /* the program whose --dry-run answers (NULL: this one; tests name another) */
    const char *model;         /* --model as given */
    const char *data;          /* --data as given: a suggestion must find its windows there too (NULL: the default) */
    int64_t seq, layers;       /* --seq; --layers (0: the model's own depth) */
    int P;                     /* ranks in the job */
    const RankOpts *ranks;
    double gpu_gib;            /* --gpu-gib (0: none) */
    double host_budget;        /* host bytes per node to plan against */
} FitAsk;

/* the GPUs this process sees (0 with --dry-run, or when CUDA finds none); with none and no rank
 * option given, the job is the headline's: r->gpus = HEADLINE_GPUS, so its plan says what it needs */
int advice_gpus(RankOpts *r, int dry_run);
/* returns when the job fits this machine; otherwise prints why and the nearest commands, and exits 1 */
void advise_unless_fits(const FitAsk *a, const MemPlan *mp, int visible);
/* the nearest commands that fit `gpus` GPUs of gpu_free bytes each and host_budget bytes of host
 * memory (advise_unless_fits' list, for a machine with GPUs; tests/test_advice.c calls it alone) */
void advise_nearest(const FitAsk *a, int gpus, double gpu_free, double host_budget);

#endif
