/* comm.h -- the communicator every multi-GPU stage uses: one small interface, two backends.
 *   NCCL:  one thread per GPU (one process per node); ncclAllGather, ncclReduceScatter, ...
 *   local: P threads on ONE GPU (NCCL refuses two ranks on one device); collectives are device
 *          copies and a reduction kernel, ordered with CUDA events and host barriers between the
 *          threads. It exists so that stages 2 and 3 at P = 2, 4, 8 are tested on one GPU with
 *          exactly the stage code that runs on eight.
 * Collectives are issued on the stream given and are asynchronous like NCCL's; a rank's inputs
 * must stay valid until the call's stream work is done. Every rank calls every collective in the
 * same order. */
#ifndef LONGCTX_COMM_H
#define LONGCTX_COMM_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "../kernels/kernels.h"

typedef enum { COMM_LOCAL, COMM_NCCL } CommKind;

typedef struct CommWorld CommWorld; /* shared by all ranks of this process */
typedef struct Comm Comm;           /* one rank's handle */

/* local: P ranks as threads on the current GPU. */
CommWorld *comm_world_local(int P);
/* NCCL: gpus ranks per node on devices 0..gpus-1, nnodes nodes; node 0 writes the ncclUniqueId to
 * rendezvous (a path every node can read; NULL when nnodes == 1). */
CommWorld *comm_world_nccl(int gpus, int nnodes, int node_rank, const char *rendezvous);
/* Called once by each rank's thread (after cudaSetDevice): its handle. */
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
/* host-side barrier of all ranks of this process (and, for NCCL, a device-side all-reduce) */
void comm_barrier(Comm *c, cudaStream_t st);
/* NCCL: check for an asynchronous error (a dead peer); abort and exit naming the rank if so */
void comm_check(Comm *c);

#endif
