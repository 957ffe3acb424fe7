/* advice.h -- the headline's check, before anything is allocated: can this machine run the job
 * (its GPUs, each GPU's free memory, the node's host memory)? If not: what is short, and the
 * nearest commands that fit here, each with the step time it would take and a --steps that ends in
 * about five minutes. Operations, not a lever: a stage calls advise_unless_fits() in one line and
 * lends it a way to plan another job (FitAsk.fits). */
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
    /* plan another job as the stage plans this one: 1 if it fits gpu_cap bytes per GPU and
     * host_cap per node, with its model TFLOP per rank and step in *tflop */
    int (*fits)(const void *ctx, const char *model, int64_t seq, int64_t gpus, int64_t rehearse, int64_t layers,
                double gpu_cap, double host_cap, double *tflop);
    const void *ctx;
    const char *prog;          /* "./stage5" */
    const char *model;         /* --model as given */
    const char *name;          /* its config's name ("32B") */
    int64_t seq, layers;       /* --seq; --layers (0: the model's own depth) */
    int64_t depth;             /* the layers this run has */
    int P;                     /* ranks in the job */
    const RankOpts *ranks;
    double gpu_gib;            /* --gpu-gib (0: none) */
    double host_budget;        /* host bytes per node to plan against */
} FitAsk;

/* GPUs this process sees (0 when CUDA finds none) */
int gpus_visible(void);
/* returns when the job fits this machine; otherwise prints why and the nearest commands, and exits 1 */
void advise_unless_fits(const FitAsk *a, const MemPlan *mp, int visible);

#endif
