/* comm.c -- the communicator: NCCL and the one-GPU "local" backend. */
#include "comm.h"

#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define MAX_LOCAL 16
#define LOCAL_SCRATCH 64 /* doubles per rank for all-reduce */

struct CommWorld {
    CommKind kind;
    int P;                 /* ranks in this process */
    int nnodes, node_rank; /* NCCL */
    ncclUniqueId id;
    pthread_barrier_t bar;
    /* local backend: what each rank posted for the collective in flight */
    const void *in[MAX_LOCAL];
    cudaEvent_t ready[MAX_LOCAL], done[MAX_LOCAL];
    double *scratch;       /* device [MAX_LOCAL][LOCAL_SCRATCH] */
};

struct Comm {
    CommWorld *w;
    int local, rank, size;
    ncclComm_t nccl;
    pthread_t watchdog;  /* NCCL: polls for asynchronous errors while the rank waits on the GPU */
    int stop;
};

/* A peer that dies leaves this rank's collectives waiting forever; NCCL reports it through
 * ncclCommGetAsyncError (thread-safe). Poll it five times a second; on an error abort the
 * communicator and exit, naming the rank (exit ends every rank thread of the process). */
static void *watchdog_main(void *arg) {
    Comm *c = arg;
    longctx_rank = c->rank;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(c->nccl, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            ncclCommAbort(c->nccl);
            DIE("NCCL asynchronous error on rank %d: %s (a peer failed or the network broke)", c->rank,
                ncclGetErrorString(async));
        }
        usleep(200000);
    }
    return NULL;
}

/* ---------------------------------------------------------------- worlds */
CommWorld *comm_world_local(int P) {
    if (P < 1 || P > MAX_LOCAL) DIE("local ranks must be 1..%d (got %d)", MAX_LOCAL, P);
    CommWorld *w = xcalloc(1, sizeof *w);
    w->kind = COMM_LOCAL;
    w->P = P;
    w->nnodes = 1;
    pthread_barrier_init(&w->bar, NULL, (unsigned)P);
    for (int r = 0; r < P; r++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&w->ready[r], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&w->done[r], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMalloc((void **)&w->scratch, sizeof(double) * MAX_LOCAL * LOCAL_SCRATCH));
    return w;
}

/* node 0 writes the id to a temporary name and renames it, so readers never see half a file */
static void rendezvous(CommWorld *w, const char *path) {
    if (w->node_rank == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.partial", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&w->id, sizeof w->id, 1, f) != 1 || fclose(f)) DIE("cannot write rendezvous file %s", tmp);
        if (rename(tmp, path)) DIE("cannot rename %s", tmp);
        return;
    }
    for (int waited = 0;; waited++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            const size_t got = fread(&w->id, sizeof w->id, 1, f);
            fclose(f);
            if (got == 1) return;
        }
        if (waited == 600) DIE("node %d: no rendezvous file %s from node 0 after 300 s", w->node_rank, path);
        usleep(500000);
    }
}

CommWorld *comm_world_nccl(int gpus, int nnodes, int node_rank, const char *rendezvous_path) {
    int have = 0;
    CUDA_CHECK(cudaGetDeviceCount(&have));
    if (gpus < 1 || gpus > have) DIE("--gpus %d: %d visible", gpus, have);
    if (nnodes > 1 && !rendezvous_path) DIE("several nodes need --rendezvous FILE (a path all nodes share)");
    CommWorld *w = xcalloc(1, sizeof *w);
    w->kind = COMM_NCCL;
    w->P = gpus;
    w->nnodes = nnodes;
    w->node_rank = node_rank;
    if (node_rank == 0) NCCL_CHECK(ncclGetUniqueId(&w->id));
    if (nnodes > 1) rendezvous(w, rendezvous_path);
    pthread_barrier_init(&w->bar, NULL, (unsigned)gpus);
    return w;
}

Comm *comm_rank(CommWorld *w, int local_rank) {
    Comm *c = xcalloc(1, sizeof *c);
    c->w = w;
    c->local = local_rank;
    c->size = w->P * w->nnodes;
    c->rank = w->node_rank * w->P + local_rank;
    longctx_rank = c->rank;
    if (w->kind == COMM_NCCL) {
        NCCL_CHECK(ncclCommInitRank(&c->nccl, c->size, w->id, c->rank));
        if (pthread_create(&c->watchdog, NULL, watchdog_main, c)) DIE("cannot start the NCCL watchdog thread");
    }
    return c;
}

void comm_rank_free(Comm *c) {
    if (c->w->kind == COMM_NCCL) {
        __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
        pthread_join(c->watchdog, NULL);
        ncclCommDestroy(c->nccl);
    }
    free(c);
}

void comm_world_free(CommWorld *w) {
    if (w->kind == COMM_LOCAL) {
        for (int r = 0; r < w->P; r++) { cudaEventDestroy(w->ready[r]); cudaEventDestroy(w->done[r]); }
        cudaFree(w->scratch);
    }
    pthread_barrier_destroy(&w->bar);
    free(w);
}

int comm_rank_id(const Comm *c) { return c->rank; }
int comm_size(const Comm *c) { return c->size; }
CommKind comm_kind(const Comm *c) { return c->w->kind; }

/* ---------------------------------------------------------------- local backend */
/* Post this rank's input, wait until every rank has, and make this stream wait for their data. */
static void local_enter(Comm *c, const void *in, cudaStream_t st) {
    CommWorld *w = c->w;
    w->in[c->local] = in;
    CUDA_CHECK(cudaEventRecord(w->ready[c->local], st));
    pthread_barrier_wait(&w->bar);
    for (int q = 0; q < w->P; q++) CUDA_CHECK(cudaStreamWaitEvent(st, w->ready[q], 0));
}
/* Nobody may overwrite an input (or re-post) until every rank's reads of it are done. */
static void local_leave(Comm *c, cudaStream_t st) {
    CommWorld *w = c->w;
    CUDA_CHECK(cudaEventRecord(w->done[c->local], st));
    pthread_barrier_wait(&w->bar);
    for (int q = 0; q < w->P; q++) CUDA_CHECK(cudaStreamWaitEvent(st, w->done[q], 0));
    pthread_barrier_wait(&w->bar); /* the slots of this collective are read; the next may post */
}

static SlicePtrs slices(const CommWorld *w) {
    SlicePtrs s;
    memset(&s, 0, sizeof s);
    s.n = w->P;
    for (int q = 0; q < w->P; q++) s.p[q] = w->in[q];
    return s;
}

/* ---------------------------------------------------------------- collectives */
void comm_all_gather_bf16(Comm *c, bf16_t *out, const bf16_t *in, int64_t n, cudaStream_t st) {
    if (c->w->kind == COMM_NCCL) {
        NCCL_CHECK(ncclAllGather(in, out, (size_t)n, ncclBfloat16, c->nccl, st));
        return;
    }
    local_enter(c, in, st);
    for (int q = 0; q < c->w->P; q++)
        CUDA_CHECK(cudaMemcpyAsync(out + (int64_t)q * n, c->w->in[q], (size_t)n * 2, cudaMemcpyDeviceToDevice, st));
    local_leave(c, st);
}

void comm_reduce_scatter_f32(Comm *c, float *out, const float *in, int64_t n, float scale, cudaStream_t st) {
    if (c->w->kind == COMM_NCCL) {
        NCCL_CHECK(ncclReduceScatter(in, out, (size_t)n, ncclFloat32, ncclSum, c->nccl, st));
        if (scale != 1.f) scale_f32(out, n, scale, st);
        return;
    }
    local_enter(c, in, st);
    sum_slices_f32(out, slices(c->w), (int64_t)c->local * n, n, scale, st);
    local_leave(c, st);
}

void comm_all_reduce_f64(Comm *c, double *buf, int64_t n, cudaStream_t st) {
    if (c->w->kind == COMM_NCCL) {
        NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)n, ncclFloat64, ncclSum, c->nccl, st));
        return;
    }
    if (n > LOCAL_SCRATCH) DIE("local all-reduce of %lld doubles: at most %d", (long long)n, LOCAL_SCRATCH);
    /* in place: copy to this rank's scratch first, so nobody reads a buffer its owner overwrites */
    double *mine = c->w->scratch + (int64_t)c->local * LOCAL_SCRATCH;
    CUDA_CHECK(cudaMemcpyAsync(mine, buf, (size_t)n * 8, cudaMemcpyDeviceToDevice, st));
    local_enter(c, mine, st);
    sum_slices_f64(buf, slices(c->w), n, st);
    local_leave(c, st);
}

void comm_sendrecv(Comm *c, const void *send, int to, void *recv, int from, int64_t bytes, cudaStream_t st) {
    if (c->w->kind == COMM_NCCL) {
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(send, (size_t)bytes, ncclInt8, to, c->nccl, st));
        NCCL_CHECK(ncclRecv(recv, (size_t)bytes, ncclInt8, from, c->nccl, st));
        NCCL_CHECK(ncclGroupEnd());
        return;
    }
    (void)to; /* local: every rank posts what it sends; each copies from the rank it receives from */
    local_enter(c, send, st);
    CUDA_CHECK(cudaMemcpyAsync(recv, c->w->in[from], (size_t)bytes, cudaMemcpyDeviceToDevice, st));
    local_leave(c, st);
}

void comm_barrier(Comm *c, cudaStream_t st) {
    CUDA_CHECK(cudaStreamSynchronize(st));
    if (c->w->kind == COMM_NCCL) {
        double *d;
        CUDA_CHECK(cudaMalloc((void **)&d, 8));
        CUDA_CHECK(cudaMemsetAsync(d, 0, 8, st));
        NCCL_CHECK(ncclAllReduce(d, d, 1, ncclFloat64, ncclSum, c->nccl, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        cudaFree(d);
    }
    pthread_barrier_wait(&c->w->bar);
}

void comm_check(Comm *c) {
    if (c->w->kind != COMM_NCCL) return;
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(c->nccl, &async));
    if (async != ncclSuccess) {
        ncclCommAbort(c->nccl);
        DIE("NCCL asynchronous error on rank %d: %s (a peer failed or the network broke)", c->rank,
            ncclGetErrorString(async));
    }
}
