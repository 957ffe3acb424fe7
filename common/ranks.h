/* ranks.h -- how the several-GPU stages (2 and up) run their ranks: how many the job has, one
 * thread per rank of this process on its GPU, the memory check every rank makes before any
 * communicator exists (if one rank's GPU or the host cannot hold the plan, every rank stops, with
 * the reason), and each rank's communicator (common/comm.h):
 *   --gpus N [--nnodes M --node-rank i --rendezvous FILE]   NCCL, one process per node
 *   --local-ranks P                                         P ranks as threads on GPU 0 (tests)
 *   --gpus N [--nnodes M] --rehearse R                      rank R of that job, alone on GPU 0 */
#ifndef LONGCTX_RANKS_H
#define LONGCTX_RANKS_H

#include <stdint.h>

#include "comm.h"
#include "memplan.h"

typedef struct {                 /* the stage's options, as given */
    int64_t gpus;                /* ranks per node (0: every visible GPU) */
    int64_t local_ranks;         /* > 0: that many ranks on GPU 0 */
    int64_t nnodes, node_rank;
    int64_t rehearse;            /* >= 0: rehearse this rank of the job */
    const char *rendezvous;
    CommOpts comm;
} RankOpts;

typedef struct {                 /* what a rank's thread is given */
    int local;                   /* its index among this process's ranks */
    int device;                  /* its GPU (current when fn runs) */
    int here;                    /* rank threads in this process */
    Comm *comm;
} Rank;

/* Refuse contradictory options (a message naming the flags) */
void ranks_check_opts(const RankOpts *o, int saves);
/* ranks in the job. Resolves --gpus 0 (every visible GPU; under dry_run: 1, no GPU to count) into
 * o->gpus: call it once before ranks_here / ranks_per_node, which read the resolved count. */
int ranks_in_job(RankOpts *o, int dry_run);
/* the GPUs visible to this process (cudaGetDeviceCount; tests replace it to stub a node) */
extern int (*ranks_device_count)(void);
/* the plan's row for NCCL's own GPU memory per rank (comm.h's estimate; 0 for local ranks) */
int64_t ranks_nccl_estimate(const RankOpts *o, int P);
/* rank threads this process runs */
int ranks_here(const RankOpts *o);
/* ranks on one node of the job (a rehearsal's node too, though only one rank runs here) */
int ranks_per_node(const RankOpts *o);
/* Run fn on one thread per rank of this process, each with its GPU current, after every rank has
 * checked the plan (mp, per rank) against its GPU (capped at gpu_gib when > 0) and the host. */
void ranks_run(const RankOpts *o, const MemPlan *mp, double gpu_gib, void (*fn)(const Rank *r, void *arg), void *arg);

#endif
