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
 * same order, with the same sizes, whatever its own values. A collective that does not complete
 * within CommOpts.timeout_s (a peer stopped, or the ranks disagree on the collectives) aborts the
 * communicator and exits, naming the rank and the collective; the local backend also checks that
 * every rank is at the same collective, of the same kind and size, with send/recv peers that pair
 * up (what NCCL needs and cannot check: it hangs), and stops naming both ranks and both calls.
 *
 * Allocation phases. With one thread per GPU (NCCL), a cudaMalloc, cudaFree, cudaMallocHost or
 * cudaFreeHost in one rank thread can wait for kernels in flight on the node's GPUs, another rank
 * thread's included: cudaFree synchronizes, and with the peer access NCCL enables between the
 * node's GPUs the driver's updates of the mappings they share can wait too (a known pitfall of NCCL
 * with a thread per GPU). A collective's kernel waits in turn until every rank has launched its
 * part, so if one rank is the thread stuck in the allocation, neither moves: the job hangs. (The
 * stream-ordered cudaMallocAsync / cudaFreeAsync are left out: they do not synchronize, and the
 * packed documents' block lists grow with them inside a step; tests/alloc_order_gpu.sh shows, on a
 * GPU, which calls wait for another thread's kernel.)
 * Hence the rule every rank thread keeps: it allocates and frees only inside an allocation phase,
 * which lasts from the making of its communicator (comm_rank), or from comm_alloc_begin, until its
 * next collective. comm_alloc_begin, and the collective that ends a phase, first meet every rank
 * thread of the process (a host barrier, no GPU work): at the first, every collective another
 * thread issued, this one issued too, so none waits for it; at the second, every thread has done
 * allocating before any issues a collective. The collective ending a phase is also preceded by a
 * job-wide barrier under the barrier's own long limit (comm_barrier): the phases are where ranks
 * drift apart (pinning host memory, loading weights, node start-up), and the first collective
 * under the --comm-timeout clock must not start counting on the fastest rank. Every rank calls
 * comm_alloc_begin at the same point of its collectives (checked like a collective). */
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
/* Called once by each rank's thread (after cudaSetDevice): its handle, with every buffer its
 * collectives use (none is allocated later). For NCCL this creates the communicator (every rank of
 * the job must call it; a join that cannot complete times out). An allocation phase is open from
 * here until the rank's first collective. */
Comm *comm_rank(CommWorld *w, int local_rank);
/* Every rank thread of the process calls it at the end (an allocation phase: it frees). */
void comm_rank_free(Comm *c);
/* The rank threads of one process: at most this many (the local backend's reduction takes one
 * input per rank, kernels.h; NCCL's threads meet in arrays of this size). */
#define COMM_MAX_HERE MAX_SLICES
/* Begin an allocation phase (see above): every rank thread of the process calls it at the same
 * point; it returns once all have arrived. The phase ends at this rank's next collective. */
void comm_alloc_begin(Comm *c);
/* The calling thread's handle (comm_rank made it on this thread), else NULL: common/ code that
 * allocates for a rank (arenas_allocate) opens its allocation phase through it. */
Comm *comm_of_thread(void);
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
 * --comm-timeout (an hour at the default; 0: forever), after which the job stops naming it. The
 * collective that ends an allocation phase runs one first, with the same limit (above). */
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
 * node's own facts, must come out the same everywhere); the rehearsal returns v. |v| <= 2^53. */
int64_t comm_min_i64(Comm *c, int64_t v, cudaStream_t st);
/* every rank holds v: one all-reduce carrying the smallest v and the smallest -v, which every rank
 * issues whatever its own v (never a second collective that only some ranks would issue) */
int comm_same_i64(Comm *c, int64_t v, cudaStream_t st);
/* A recorder of each rank's fences and phase-ending barriers: tests/calls defines it (line: what
 * happened, on the calling rank thread) to check the allocation rule on a CPU; the trainers leave
 * it undefined (a weak symbol: NULL) */
extern void comm_calls_note(const char *line) __attribute__((weak));
/* NCCL's own GPU memory for one rank of a job of P ranks over nnodes nodes: an estimate from its
 * documented buffer sizes and channel counts (README: NCCL buffers), until several GPUs measure it */
int64_t nccl_buffers_estimate(int P, int64_t nnodes);
/* modelled seconds for a send/recv of `bytes` around the job's ring (its slowest hop) */
double comm_ring_hop_s(const Comm *c, int64_t bytes);

#endif
