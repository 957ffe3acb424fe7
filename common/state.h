/* state.h -- the training state on disk, streamed piece by piece. Each rank reads and writes only
 * the pieces of tensors it holds (model.h: Piece), through a bounded host buffer, so no process
 * ever holds a full-model array in host memory (at 32B the fp32 master, m and v alone are 393 GB).
 * The rank's buffers may live on the GPU or in pinned host memory (offload): copies use
 * cudaMemcpyDefault.
 *   load:  fp32 master weights from an HF directory (config.json + safetensors, any float dtype,
 *          sharded or not) or a random init (the same values whatever the pieces), m and v zero;
 *          or, with resume, master, m, v and the step from a step directory written by state_save
 *          (the stage resolves --resume DIR to it first: ckpt_resume_dir)
 *   save:  DIR/step-N/ (common/ckpt.h): config.json + bf16 model safetensors (sharded over 4 GiB
 *          with an index: transformers loads it) + trainer_state.safetensors (fp32 master.*,
 *          adam_m.*, adam_v.*; metadata: the step and the run that made it, SaveMeta, whose --seq,
 *          --data digest, --packing and model --resume compares), written as DIR/step-N.partial, fsync'd
 *          by every rank, renamed once complete; DIR/latest then points at it; the newest `keep`
 *          saves stay (0: all)
 *   dump:  a step's loss and fp32 gradients (the GPU tests compare them with the CPU reference)
 * With several ranks, rank 0 lays out and creates the files, every rank fills its pieces (pwrite),
 * and comm_barrier separates the phases. */
#ifndef LONGCTX_STATE_H
#define LONGCTX_STATE_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "inputs.h"
#include "model.h"

typedef struct {
    const Qwen3Config *c;
    const ParamTable *t;
    const Piece *pieces;            /* what this rank holds */
    int64_t npieces;
    int64_t total;                  /* elements in each state buffer (padding included: zeroed on load) */
    float *master, *m, *v, *grad;   /* [total] this rank's buffers, GPU or pinned host */
    int rank;                       /* rank 0 creates the files and prints */
    int threads;                    /* CPU threads for the random init */
    Comm *comm;                     /* NULL: one rank holds everything */
    cudaStream_t st;
} StateIO;

/* returns the step training continues after (0 unless resume) */
int64_t state_load(StateIO *s, const char *model, const char *resume, double init_std, uint64_t seed);
/* m: the step and what the run was (inputs.h: SaveMeta), its metadata; the save's line says its time */
void state_save(StateIO *s, const char *root, const SaveMeta *m, int64_t keep);
/* bytes one save writes, every rank's together: 14 a parameter (bf16 weights, fp32 master, m, v) */
int64_t state_save_bytes(const ParamTable *t);
void state_dump(StateIO *s, const char *path, double loss);

#endif
