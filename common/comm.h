/* comm.h -- the communicator every several-GPU stage uses: one small interface, three backends.
 *   NCCL:      one thread per GPU (one process per node); ncclAllGather, ncclReduceScatter, ...
 *   local:     P threads on ONE GPU (NCCL refuses two ranks on one device); collectives are device
 *              copies and a reduction kernel, ordered with CUDA events and host barriers between
 *              the threads. It exists so that stages 2+ at P = 2, 4, 8 are tested on one GPU with
 *              exactly the stage code that runs on eight.
 *   rehearse:  rank R of an N-GPU job, alone on one GPU. Every collective writes the same number of
 *              bytes into the same buffers from this rank's own data (all-gather: its shard into
 *              every slot; reduce-scatter: P times its own slice, scaled; send/recv: its own buffer
 *              into the receive buffer), so the rank allocates and computes exactly what it would in
 *              the job -- its memory and compute time are the job's per-GPU figures -- while its
 *              values are not the job's. The bytes each collective would move are counted and their
 *              time at a stated link bandwidth is modelled (comm_stats).
 * Collectives are issued on the stream given and are asynchronous like NCCL's; a rank's inputs
 * must stay valid until the call's stream work is done. Every rank calls every collective in the
 * same order. A collective that does not complete within CommOpts.timeout_s (a peer stopped, or
 * the ranks disagree on the collectives) aborts the communicator and exits, naming the rank and
 * the collective; the local backend also checks that every rank is at the same collective. */
#ifndef LONGCTX_COMM_H
#define LONGCTX_COMM_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "../kernels/kernels.h"

typedef enum { COMM_LOCAL, COMM_NCCL, COMM_REHEARSE } CommKind;
typedef enum { C_ALL_GATHER, C_REDUCE_SCATTER, C_ALL_REDUCE, C_SENDRECV, C_KINDS } CollKind;

/* The rehearsal's default link rates (README, "Rehearsal": the sources of both figures) */
#define LINK_GBPS 360.0 /* H100 NVLink 4 through NVSwitch: nccl-tests bus bandwidth of large reduce-scatters */
#define NET_GBPS 50.0   /* one 400 Gb/s InfiniBand NDR port per GPU */

typedef struct {
    double timeout_s;       /* per collective, once it can start (0: wait forever) */
    double link_gbps;       /* rehearsal model: GB/s per GPU per direction inside a node */
    double net_gbps;        /* rehearsal model: GB/s per GPU per direction between nodes */
    const char *run_id;     /* several nodes: binds the rendezvous (file or TCP) to this run */
} CommOpts;

typedef struct CommWorld CommWorld; /* shared by all ranks of this process */
typedef struct Comm Comm;           /* one rank's handle */

/* local: P ranks as threads on the current GPU. */
CommWorld *comm_world_local(int P, const CommOpts *o);
/* NCCL: gpus ranks per node on devices 0..gpus-1, nnodes nodes; node 0 hands the ncclUniqueId to
 * the others through the rendezvous (common/rendezvous.h: tcp://HOST:PORT, where node 0 serves it
 * until every node has it, or a file path; NULL when nnodes == 1), within CommOpts.timeout_s. */
CommWorld *comm_world_nccl(int gpus, int nnodes, int node_rank, const char *rendezvous, const CommOpts *o);
/* rehearse: rank `rank` of a job of nnodes x gpus ranks, alone in this process. */
CommWorld *comm_world_rehearse(int gpus, int nnodes, int rank, const CommOpts *o);
/* Called once by each rank's thread (after cudaSetDevice): its handle. For NCCL this creates the
 * communicator (every rank of the job must call it; a join that cannot complete times out). */
Comm *comm_rank(CommWorld *w, int local_rank);
void comm_rank_free(Comm *c);
void comm_world_free(CommWorld *w);

int comm_rank_id(const Comm *c);   /* global rank */
int comm_size(const Comm *c);
CommKind comm_kind(const Comm *c);

/* out[P*n] = concatenation of every rank's in[n] (bf16) */
void comm_all_gather_bf16(Comm *c, bf16_t *out, const bf16_t *in, int64_t n, cudaStream_t st);
/* out[n] = (sum over ranks of in[rank*n .. rank*n+n)) * scale (fp32) */
void comm_reduce_scatter_f32(Comm *c, float *out, const float *in, int64_t n, float scale, cudaStream_t st);
/* buf[n] = sum over ranks of buf[n] (fp64, in place) */
void comm_all_reduce_f64(Comm *c, double *buf, int64_t n, cudaStream_t st);
/* Ring exchange: send bytes from `send` to rank `to` while receiving as many into `recv` from rank
 * `from` (one NCCL group: ncclSend + ncclRecv). Every rank calls it in the same step. */
void comm_sendrecv(Comm *c, const void *send, int to, void *recv, int from, int64_t bytes, cudaStream_t st);
/* Every rank of the job here (host) with its stream drained. Outside the per-collective clock:
 * ranks may arrive minutes apart around checkpoint I/O and set-up; its own limit is 6 x
 * --comm-timeout (an hour at the default; 0: forever), after which the job stops naming it. */
void comm_barrier(Comm *c, cudaStream_t st);

/* What this rank's collectives moved since the last reset: calls and bytes sent over its links per
 * kind (as NCCL's ring algorithms move them: all-gather and reduce-scatter (P-1) shards, all-reduce
 * 2(P-1)/P of the buffer, send/recv the message), and their time at the modelled link rates. */
typedef struct {
    int64_t calls[C_KINDS], bytes[C_KINDS];
    double model_s[C_KINDS];
    double hop_s;         /* the ring's slowest hop of the last send/recv (the ring moves in lockstep) */
    double hop_bytes;
} CommStats;
extern const char *COLL_NAMES[C_KINDS];
void comm_stats(Comm *c, CommStats *out, int reset);
/* Once per step: under the rehearsal, print what the collectives moved and their modelled time
 * against the step's measured time; every backend starts the next step's counts afresh. */
void comm_step_report(Comm *c, double step_s);
/* After comm_rank, before the arenas: run every kind of collective once (small and large, the
 * ring's send/recv too) so NCCL's lazily made connections exist now; returns the device bytes NCCL
 * holds (measured; 0 for the local and rehearsal backends) */
int64_t comm_warm_up(Comm *c, cudaStream_t st);
/* the smallest v over every rank of the job (a choice that shapes the collectives, made from a
 * node's own facts, must come out the same everywhere); the rehearsal returns v */
int64_t comm_min_i64(Comm *c, int64_t v, cudaStream_t st);
/* every rank holds v (two comm_min_i64: of v and of -v) */
int comm_same_i64(Comm *c, int64_t v, cudaStream_t st);
/* NCCL's own GPU memory for one rank of a job of P ranks over nnodes nodes: an estimate from its
 * documented buffer sizes and channel counts (README: NCCL buffers), until several GPUs measure it */
int64_t nccl_buffers_estimate(int P, int64_t nnodes);
/* modelled seconds for a send/recv of `bytes` around the job's ring (its slowest hop) */
double comm_ring_hop_s(const Comm *c, int64_t bytes);

#endif
