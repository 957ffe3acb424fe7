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
#define HEADLINE_GPU_GIB 74.5   /* ... of 80 GB each (H100s: 80e9 bytes less what the driver keeps) */
#define HEADLINE_HOST_GIB 2048  /* ... in a node of 2 TiB */

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
    int dry_run;               /* judge the planned machine (plan_machine), print the advice, return */
    const char *keep;          /* the job's other options that change its plan (advice_keep), "" or NULL: none */
    int argc;                  /* argv given: keep is read from it (advice_keep) */
    char **argv;
} FitAsk;
/* The options given on the command line that change a plan and that advice does not choose itself
 * (--offload, --mlp-tile, --attn-groups, --keep-attn, --merge, --packing, --yarn-factor,
 * --yarn-original, --moe-gemm, --loss-chunk, --eval-data), shell-quoted, each after a space, into
 * out: a suggestion plans and prints them, so it is the same job but for what it changes. A value
 * holding a quote is left out (advice then plans without it, as before). */
void advice_keep(int argc, char **argv, char *out, size_t n);

/* The machine a --dry-run plans for, said in its first line: this machine when it has GPUs (their
 * count, the least free memory among them less a GiB, its available host memory), else the
 * headline's -- HEADLINE_GPUS GPUs of 80 GB and a 2 TiB node. A value given (--gpus, --gpu-gib,
 * --host-gib: non-zero) stays. r NULL: a one-GPU stage; host_gib NULL: a stage without host
 * memory in its plan. Nothing happens outside a dry-run. */
void plan_machine(int dry_run, RankOpts *r, double *gpu_gib, double *host_gib);
/* the GPUs this process sees (0 with --dry-run, or when CUDA finds none); with none and no rank
 * option given, the job is the headline's: r->gpus = HEADLINE_GPUS, so its plan says what it needs */
int advice_gpus(RankOpts *r, int dry_run);
/* returns when the job fits this machine; otherwise prints why and the nearest commands, and exits 1
 * (a dry-run: judges the planned machine, prints the same, returns) */
void advise_unless_fits(const FitAsk *a, const MemPlan *mp, int visible);
/* the nearest commands that fit `gpus` GPUs of gpu_free bytes each and host_budget bytes of host
 * memory (advise_unless_fits' list, for a machine with GPUs; tests/test_advice.c calls it alone) */
void advise_nearest(const FitAsk *a, int gpus, double gpu_free, double host_budget);

#endif
