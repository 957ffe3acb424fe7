/* inputs.h -- every file a run reads, opened and checked before any GPU memory is taken, and by
 * --dry-run too, so the dry-run refuses what the run would: the token file and the held-out file
 * (their header, every id, and that they hold the windows this job reads), the model directory
 * (config.json was read by the config; here every weight's header: each tensor present once, with
 * its shape and a float type), the --resume save (its step, every master/m/v tensor), and where
 * --save, --log, --trace, --timeline and --dump-grads will write. A problem stops the run (STOP:
 * "stage1: what is wrong and what to do"); nothing later finds it after minutes of GPU setup.
 * Training data in whose windows no label carries loss (every loss weight 0, or with --packing
 * every label after an end of text) is refused, as held-out data is: every step would be skipped.
 * A --resume save records the run that made it (SaveMeta): a run that reads it with another --seq,
 * --data (its tokens, by digest), --packing or model is refused by name, unless --resume-changes
 * allows that change. */
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
    int64_t data_digest;     /* tokens_content_digest of --data, with --save or --resume (else 0) */
} Inputs;

/* What a save records of the run that made it, beside its step: trainer_state.safetensors'
 * "__metadata__" (every value a string, as safetensors has it), and what --resume compares. */
typedef struct {
    int64_t step;
    int64_t seq;             /* tokens of a window (the whole sequence under context parallelism) */
    const char *data;        /* --data as given (its digest decides; the path is for messages) */
    int64_t data_tokens;
    int64_t data_digest;     /* tokens_content_digest: every id and loss weight */
    int64_t eot;             /* --packing's end of text; -1: not packed */
    const char *model;       /* the config's name */
    int64_t layers;
    double yarn_factor;      /* 0: no YaRN */
    int64_t yarn_original;
    int64_t model_digest;    /* config_run_digest */
} SaveMeta;
/* the metadata's version ("longctx" key): saves without it record the step alone (and a "seq" that
 * was this rank's share), and --resume compares nothing else with them */
#define SAVE_META_VERSION "2"
/* the metadata as a JSON object, escaped (any path round-trips, whatever its length or bytes, but
 * bytes that are not UTF-8, written as U+FFFD): malloc'd, free it */
char *inputs_save_meta_json(const SaveMeta *m);
/* what --resume may change (--resume-changes): a bit each */
enum { RESUME_SEQ = 1, RESUME_DATA = 2, RESUME_PACKING = 4, RESUME_MODEL = 8 };
#define RESUME_CHANGE_NAMES {"seq", "data", "packing", "model"}
/* The save's metadata (st) against this run (now): 0 when every field matches or its change is
 * allowed (a line per allowed change, or for an older save that records none, in note), -1 with
 * err naming each difference not allowed ("--resume DIR: saved with --seq 16384, this run has --seq
 * 32768; ..."). */
int inputs_resume_compare(const SafeTensors *st, const SaveMeta *now, unsigned allow, const char *dir, char *note,
                          size_t notelen, char *err, size_t errlen);

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
    int64_t eot;                    /* --packing's end of text (-1: not packed): which labels count */
    unsigned resume_changes;        /* RESUME_* bits: what --resume may change */
} InputsAsk;

/* Open and check everything the ask names (STOP on the first problem). */
void inputs_open(Inputs *in, const InputsAsk *a, const Qwen3Config *c, const ParamTable *t);
/* Each check alone, 0 or -1 + message (the tests and fuzzers call them): */
int inputs_check_weights(const SafeTensors *st, const char *prefix, const ParamTable *t, char *err, size_t errlen);
/* the step of a trainer state's metadata, strictly: decimal digits, 0 <= step < steps */
int inputs_state_step(const SafeTensors *st, int64_t steps, int64_t *step, char *err, size_t errlen);

#endif
