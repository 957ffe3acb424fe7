/* inputs.h -- every file a run reads, opened and checked before any GPU memory is taken, and by
 * --dry-run too, so the dry-run refuses what the run would: the token file and the held-out file
 * (their header, every id, and that they hold the windows this job reads), the model directory
 * (config.json was read by the config; here every weight's header: each tensor present once, with
 * its shape and a float type), the --resume save (its step, every master/m/v tensor), and where
 * --save, --log, --trace, --timeline and --dump-grads will write. A problem stops the run (STOP:
 * "stage1: what is wrong and what to do"); nothing later finds it after minutes of GPU setup. */
#ifndef LONGCTX_INPUTS_H
#define LONGCTX_INPUTS_H

#include <stdint.h>

#include "model.h"
#include "safetensors.h"
#include "tokens.h"

typedef struct {
    TokenFile data;          /* --data, whole in host memory: every rank of the process reads it */
    TokenFile eval;          /* --eval-data (count 0: none) */
    int64_t resume_step;     /* the step the --resume save holds (0: no --resume) */
} Inputs;

typedef struct {
    const char *data, *eval_data;   /* token files (eval_data NULL: none) */
    const char *model;              /* a size name or an HF directory */
    const char *resume;             /* a resolved save directory (ckpt_resume_dir), or NULL */
    const char *save, *log;         /* where the run will write, or NULL */
    const char *trace, *timeline, *dump_grads; /* the same, for the tests' and the profiler's files */
    int64_t window;                 /* tokens of one window (the whole sequence under context parallelism) */
    int world;                      /* ranks reading disjoint windows (stage 2's data parallelism), else 1 */
    int64_t eval_steps;             /* loader steps one evaluation reads */
    int64_t steps;                  /* the run's total steps */
} InputsAsk;

/* Open and check everything the ask names (STOP on the first problem). */
void inputs_open(Inputs *in, const InputsAsk *a, const Qwen3Config *c, const ParamTable *t);
/* Each check alone, 0 or -1 + message (the tests and fuzzers call them): */
int inputs_check_weights(const SafeTensors *st, const char *prefix, const ParamTable *t, char *err, size_t errlen);
/* the step of a trainer state's metadata, strictly: decimal digits, 0 <= step < steps */
int inputs_state_step(const SafeTensors *st, int64_t steps, int64_t *step, char *err, size_t errlen);

#endif
