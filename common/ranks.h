/* ranks.h -- how the several-GPU stages (2 and up) run their ranks: how many the job has, one
 * thread per rank of this process on its GPU, the memory check every rank makes before any
 * communicator exists (if one rank's GPU or the host cannot hold the plan, every rank stops, with
 * the reason), and each rank's communicator (common/comm.h):
 *   --gpus N [--nnodes M --node-rank i --rendezvous tcp://HOST:PORT|FILE]   NCCL, one process per node
 *   --local-ranks P                                         P ranks as threads on GPU 0 (tests)
 *   --gpus N [--nnodes M] --rehearse R                      rank R of that job, alone on GPU 0
 * Under Slurm (srun, one task per node) --nnodes and --node-rank default to its step's node count
 * (SLURM_STEP_NUM_NODES; outside a step SLURM_NNODES) and SLURM_NODEID, and the run id to its job and
 * step (common/rendezvous.h); flags given win. A node runs at most COMM_MAX_HERE GPUs. Several nodes
 * over TCP need a job secret on every node (LONGCTX_JOB_SECRET_FILE; rendezvous.h), checked with
 * node 0's address before the GPU (ranks_run). */
#ifndef LONGCTX_RANKS_H
#define LONGCTX_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "comm.h"
#include "memplan.h"

typedef struct {                 /* the stage's options, as given */
    int64_t gpus;                /* ranks per node (0: every visible GPU) */
    int64_t local_ranks;         /* > 0: that many ranks on GPU 0 */
    int64_t nnodes, node_rank;
    int64_t rehearse;            /* >= 0: rehearse this rank of the job */
    const char *rendezvous;
    CommOpts comm;
    /* where nnodes, node_rank and gpus came from ("--nnodes", "SLURM_NNODES", "default", ...): set
     * once the place is resolved (ranks_check_opts or ranks_in_job, whichever runs first) */
    const char *nnodes_from, *node_rank_from, *gpus_from;
    int placed;
} RankOpts;

typedef struct {                 /* what a rank's thread is given */
    int local;                   /* its index among this process's ranks */
    int device;                  /* its GPU (current when fn runs) */
    int here;                    /* rank threads in this process */
    Comm *comm;
} Rank;

/* A rank's place in the job, the same struct in every stage (stage 1: JOB_ONE) */
typedef struct {
    int rank, P;        /* rank `rank` of P */
    int dp;             /* ranks reading windows of their own (data parallelism): P, or 1 when they share one */
    int share;          /* ranks on this rank's GPU (local ranks: all of them): speed and memory are per GPU */
    int here;           /* rank threads in this process: they share its CPU cores */
    Comm *comm;         /* NULL: the job is one rank */
} Job;
#define JOB_ONE ((Job){.rank = 0, .P = 1, .dp = 1, .share = 1, .here = 1, .comm = NULL})
/* the job's shape from the options (ranks_in_job): P ranks, each reading its own windows
 * (data_parallel) or all of them sharing each window */
Job job_plan(RankOpts *o, int data_parallel);
/* this rank's place in it, once its thread runs */
void job_join(Job *j, const Rank *r);
/* the rank among the dp that read their own windows whose windows this rank reads */
static inline int job_dp_rank(const Job *j) { return j->dp > 1 ? j->rank : 0; }
/* One GPU (stage 1): the plan checked against GPU 0, then fn on this thread (no communicator) */
void ranks_run_one(const MemPlan *mp, double gpu_gib, void (*fn)(const Rank *r, void *arg), void *arg);
/* a usable GPU is here, or STOP("no usable GPU: the reason") */
void ranks_need_gpu(void);

/* Take this node's place (--nnodes 0 / --node-rank -1, not given: Slurm's variables, else 1 / 0;
 * never for --local-ranks or --rehearse, one process on one GPU), then refuse, naming the flag or
 * variable, before any GPU call (a --dry-run refuses the same): contradictory options; more GPUs a
 * node than COMM_MAX_HERE; several nodes without --rendezvous; a --rendezvous that is malformed,
 * whose host does not resolve, or (node 0) whose file is a directory or lies in a directory that
 * is missing or not writable; Slurm running other than one task per node (SLURM_PROCID not the
 * node's index, SLURM_NTASKS not the step's node count) */
void ranks_check_opts(RankOpts *o, int saves);
/* ranks in the job. Resolves --gpus 0 (every visible GPU; a --dry-run's was resolved by
 * plan_machine) into o->gpus: call it once before ranks_here / ranks_per_node, which read it. A node of
 * a several-node job, or one placed by Slurm, first prints ranks_place_line(). */
int ranks_in_job(RankOpts *o);
/* "node 1 of 2 (SLURM_NODEID, SLURM_NNODES), 8 GPUs a node (--gpus), run id slurm-4242.0 (SLURM_JOB_ID,
 * SLURM_STEP_ID), rendezvous tcp://10.0.0.1:29500 (--rendezvous)": where each value came from; ""
 * when there is nothing to say (one node placed by flags or defaults, local ranks, a rehearsal) */
const char *ranks_place_line(const RankOpts *o, char *buf, size_t n);
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

/* The several-GPU options every stage from 2 on takes, into RankOpts r (an lvalue): the job's
 * shape, several nodes, the rendezvous, the collective timeout and the rehearsal. One block, the
 * same in every stage's option table; RANK_DEFAULTS is its starting value (--nnodes 0 and
 * --node-rank -1: not given, ranks_check_opts places the node). */
#define RANK_DEFAULTS                                                                                                  \
    {.nnodes = 0, .node_rank = -1, .rehearse = -1,                                                                     \
     .comm = {.timeout_s = 600, .link_gbps = LINK_GBPS, .net_gbps = NET_GBPS}}
#define RANK_OPTIONS(r)                                                                                                \
    {"--gpus", OPT_INT, &(r).gpus, "ranks on this node, one per GPU (0: all visible; --dry-run without a GPU: 8)", "[0,1K]"},        \
    {"--local-ranks", OPT_INT, &(r).local_ranks, "run this many ranks as threads on GPU 0 (tests)", "[0,16]"},         \
    {"--nnodes", OPT_INT, &(r).nnodes, "nodes, the same command on each (0: Slurm's SLURM_NNODES, else 1)",            \
     "[0,64K]"},                                                                                                       \
    {"--node-rank", OPT_INT, &(r).node_rank, "this node's index, 0..nnodes-1 (-1: Slurm's SLURM_NODEID, else 0)",      \
     "[-1,64K)"},                                                                                                      \
    {"--rendezvous", OPT_STRING, &(r).rendezvous,                                                                      \
     "with --nnodes > 1: tcp://HOST:PORT (node 0's address, where it listens; every node needs the job secret, "     \
     "LONGCTX_JOB_SECRET_FILE) or a file all nodes share"},                                                          \
    {"--run-id", OPT_STRING, &(r).comm.run_id,                                                                         \
     "a name all nodes of this run share (default: Slurm's job and step id): binds the rendezvous to it"},             \
    {"--comm-timeout", OPT_DOUBLE, &(r).comm.timeout_s,                                                                \
     "seconds a collective may wait once it can start; then abort, naming the rank (0: forever)", "[0,1e9]"},          \
    {"--rehearse", OPT_INT, &(r).rehearse,                                                                             \
     "run rank R of the --gpus x --nnodes job alone on this GPU: its memory and time, not its values", "[-1,64M)"},    \
    {"--link-gbps", OPT_DOUBLE, &(r).comm.link_gbps,                                                                   \
     "rehearsal: GB/s per GPU and direction inside a node, for the modelled link time", "(0,1e6]"},                    \
    {"--net-gbps", OPT_DOUBLE, &(r).comm.net_gbps, "rehearsal: GB/s per GPU and direction between nodes", "(0,1e6]"}

#endif
