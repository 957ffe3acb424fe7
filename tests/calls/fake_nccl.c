/* fake_nccl.c -- NCCL faked on the host for the CPU harness (tests/calls), and the recorder of each
 * rank's collectives.
 *
 * NCCL: a job of one process, one thread per "GPU" (CALLS_GPUS=N, --gpus N), runs its NCCL path on
 * a CPU. A collective blocks its caller until every rank of the communicator has issued it (real
 * NCCL returns at once and its kernel waits; blocking is the stricter order, and a disagreement
 * shows the same way), then moves the bytes in host memory (device memory is host memory here):
 * all-gather, reduce-scatter and all-reduce (sum), send/recv in a group. The ranks must issue the
 * same call -- kind, count, type, operation; send/recv peers that pair up with equal sizes -- as
 * NCCL needs them to (it cannot check: it hangs or moves the wrong bytes); a disagreement, or a
 * rank waiting past CALLS_NCCL_WAIT_S (60), prints both calls and exits 3.
 *
 * The recorder: $CALLS_DIR/rank<R>.comm, one line per event of rank R's thread, in its order:
 *   C comm <call>   a collective of the communicator (comm.h), as its call returns (-Wl,--wrap of the
 *                   functions the tree's comm.h declares: every tree is recorded, old or new)
 *   C nccl <call>   a call into NCCL that a collective kernel would run (as it is issued)
 *   F <what>        a meeting of the process's rank threads (comm.c's comm_calls_note: fences,
 *                   and the barrier that ends an allocation phase, "C barrier")
 *   A <what>        an allocation or free that can wait for the GPU's work in flight (fake_cuda.c:
 *                   cudaMalloc, cudaFree, cudaMallocHost, cudaHostAlloc, cudaFreeHost; NCCL's own
 *                   in its init)
 * Peers are written relative to the rank (+1: the next rank), so every rank's line is the same.
 * tests/calls/check_comm.py reads them. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "calls.h"
#include "common/comm.h"

/* ---------------------------------------------------------------- the recorder */
/* comm.c's hook: its fences and phase-ending barriers */
void comm_calls_note(const char *line) {
    if (!strncmp(line, "barrier", 7)) calls_comm("C %s", line);
    else calls_comm("F %s", line);
}

/* the communicator's collectives, recorded as their calls return (a phase-ending fence and barrier
 * inside come first). Only the functions the tree declares are wrapped (build.sh: HAVE_name). The
 * five that carry tensors also go to the rank's call log, in stream order with its kernels: what
 * every rank must agree on (kind, count, stream; a send/recv's peers as offsets from this rank),
 * which tests/calls/layout_calls.sh compares across ranks. */
#ifdef HAVE_comm_all_gather_bf16
void __real_comm_all_gather_bf16(Comm *c, bf16_t *out, const bf16_t *in, int64_t n, cudaStream_t st);
void __wrap_comm_all_gather_bf16(Comm *c, bf16_t *out, const bf16_t *in, int64_t n, cudaStream_t st) {
    char s_[32];
    calls_log("collective all_gather_bf16 n=%lld %s", (long long)n, calls_stream(st, s_, sizeof s_));
    __real_comm_all_gather_bf16(c, out, in, n, st);
    calls_comm("C comm all-gather %lld bf16", (long long)n);
}
#endif
#ifdef HAVE_comm_reduce_scatter_f32
void __real_comm_reduce_scatter_f32(Comm *c, float *out, const float *in, int64_t n, float scale, cudaStream_t st);
void __wrap_comm_reduce_scatter_f32(Comm *c, float *out, const float *in, int64_t n, float scale, cudaStream_t st) {
    char s_[32];
    calls_log("collective reduce_scatter_f32 n=%lld scale=%.9g %s", (long long)n, (double)scale,
              calls_stream(st, s_, sizeof s_));
    __real_comm_reduce_scatter_f32(c, out, in, n, scale, st);
    calls_comm("C comm reduce-scatter %lld f32 scale %.9g", (long long)n, (double)scale);
}
#endif
#ifdef HAVE_comm_all_reduce_f64
void __real_comm_all_reduce_f64(Comm *c, double *buf, int64_t n, cudaStream_t st);
void __wrap_comm_all_reduce_f64(Comm *c, double *buf, int64_t n, cudaStream_t st) {
    char s_[32];
    calls_log("collective all_reduce_f64 n=%lld %s", (long long)n, calls_stream(st, s_, sizeof s_));
    __real_comm_all_reduce_f64(c, buf, n, st);
    calls_comm("C comm all-reduce %lld f64", (long long)n);
}
#endif
#ifdef HAVE_comm_sendrecv
void __real_comm_sendrecv(Comm *c, const void *send, int to, void *recv, int from, int64_t bytes, cudaStream_t st);
void __wrap_comm_sendrecv(Comm *c, const void *send, int to, void *recv, int from, int64_t bytes, cudaStream_t st) {
    const int r = comm_rank_id(c), P = comm_size(c);
    char s_[32];
    calls_log("collective sendrecv %lld bytes to +%d from -%d %s", (long long)bytes, (to - r + P) % P, (r - from + P) % P,
              calls_stream(st, s_, sizeof s_));
    __real_comm_sendrecv(c, send, to, recv, from, bytes, st);
    calls_comm("C comm send/recv %lld bytes to +%d from -%d", (long long)bytes, (to - r + P) % P, (r - from + P) % P);
}
#endif
#ifdef HAVE_comm_barrier
void __real_comm_barrier(Comm *c, cudaStream_t st);
void __wrap_comm_barrier(Comm *c, cudaStream_t st) {
    char s_[32];
    calls_log("collective barrier %s", calls_stream(st, s_, sizeof s_));
    __real_comm_barrier(c, st);
    calls_comm("C comm barrier");
}
#endif
#ifdef HAVE_comm_min_i64
int64_t __real_comm_min_i64(Comm *c, int64_t v, cudaStream_t st);
int64_t __wrap_comm_min_i64(Comm *c, int64_t v, cudaStream_t st) {
    const int64_t m = __real_comm_min_i64(c, v, st);
    calls_comm("C comm min_i64");
    return m;
}
#endif
#ifdef HAVE_comm_same_i64
int __real_comm_same_i64(Comm *c, int64_t v, cudaStream_t st);
int __wrap_comm_same_i64(Comm *c, int64_t v, cudaStream_t st) {
    const int same = __real_comm_same_i64(c, v, st);
    calls_comm("C comm same_i64");
    return same;
}
#endif
#ifdef HAVE_comm_warm_up
int64_t __real_comm_warm_up(Comm *c, cudaStream_t st);
int64_t __wrap_comm_warm_up(Comm *c, cudaStream_t st) {
    const int64_t b = __real_comm_warm_up(c, st);
    calls_comm("C comm warm-up");
    return b;
}
#endif

/* ---------------------------------------------------------------- NCCL */
#define MAX_RANKS 64
#define MAX_P2P 8

typedef enum { OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_ALL_REDUCE, OP_P2P } Op;
typedef struct { int peer; size_t bytes; void *p; } P2p;
typedef struct {
    Op op;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t red;
    const void *send;
    void *recv;
    int nsend, nrecv;
    P2p sends[MAX_P2P], recvs[MAX_P2P];
    char desc[160];
} Post;

typedef struct Clique {
    ncclUniqueId id;
    int n, joined;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    int64_t gen, calls;
    Post post[MAX_RANKS];
    struct Clique *next;
} Clique;

struct ncclComm {
    Clique *q;
    int rank;
};

static pthread_mutex_t cliques_mu = PTHREAD_MUTEX_INITIALIZER;
static Clique *cliques;

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}
static const char *type_name(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: return "int8";
    case ncclBfloat16: return "bf16";
    case ncclFloat32: return "f32";
    case ncclFloat64: return "f64";
    default: return "other";
    }
}

static double wait_s(void) { const char *s = getenv("CALLS_NCCL_WAIT_S"); return s ? atof(s) : 60; }

static _Noreturn void fail(const char *fmt, ...) {
    va_list ap;
    char msg[1024];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fake NCCL: %s\n", msg);
    calls_comm("X fake NCCL: %s", msg);
    fflush(NULL);
    _exit(3);
}

/* sums of n elements of type dt over the ranks' buffers at src[q] + off (elements) */
static void sum_into(void *dst, const Clique *q, size_t off, size_t n, ncclDataType_t dt) {
    if (dt == ncclFloat64) {
        double *d = dst;
        for (size_t i = 0; i < n; i++) {
            double a = 0;
            for (int r = 0; r < q->n; r++) a += ((const double *)q->post[r].send)[off + i];
            d[i] = a;
        }
    } else if (dt == ncclFloat32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++) {
            float a = 0;
            for (int r = 0; r < q->n; r++) a += ((const float *)q->post[r].send)[off + i];
            d[i] = a;
        }
    } else fail("sum of %s: not faked", type_name(dt));
}

/* every rank has posted the same call: move the bytes, or fail naming both ranks' calls */
static void execute(Clique *q) {
    const Post *a = &q->post[0];
    for (int r = 1; r < q->n; r++) {
        const Post *b = &q->post[r];
        if (b->op != a->op || (a->op != OP_P2P && (b->count != a->count || b->dt != a->dt || b->red != a->red)))
            fail("call #%lld: rank %d issues %s, rank 0 %s", (long long)q->calls, r, b->desc, a->desc);
    }
    const size_t sz = type_size(a->dt), n = a->count;
    if (a->op == OP_ALL_GATHER) {
        char *all = malloc(q->n * n * sz + 1);
        for (int r = 0; r < q->n; r++) memcpy(all + r * n * sz, q->post[r].send, n * sz);
        for (int r = 0; r < q->n; r++) memcpy(q->post[r].recv, all, q->n * n * sz);
        free(all);
    } else if (a->op == OP_REDUCE_SCATTER) {
        char *out = malloc(q->n * n * sz + 1);
        for (int r = 0; r < q->n; r++) sum_into(out + r * n * sz, q, r * n, n, a->dt);
        for (int r = 0; r < q->n; r++) memcpy(q->post[r].recv, out + r * n * sz, n * sz);
        free(out);
    } else if (a->op == OP_ALL_REDUCE) {
        char *out = malloc(n * sz + 1);
        sum_into(out, q, 0, n, a->dt);
        for (int r = 0; r < q->n; r++) memcpy(q->post[r].recv, out, n * sz);
        free(out);
    } else { /* each send meets its receiver's receive from it, of as many bytes */
        char *copy[MAX_RANKS][MAX_P2P] = {{0}};
        for (int r = 0; r < q->n; r++)
            for (int i = 0; i < q->post[r].nsend; i++) {
                const P2p *s = &q->post[r].sends[i];
                copy[r][i] = malloc(s->bytes + 1);
                memcpy(copy[r][i], s->p, s->bytes);
            }
        for (int r = 0; r < q->n; r++)
            for (int i = 0; i < q->post[r].nsend; i++) {
                const P2p *s = &q->post[r].sends[i];
                const Post *t = s->peer >= 0 && s->peer < q->n ? &q->post[s->peer] : NULL;
                int j = 0;
                while (t && j < t->nrecv && t->recvs[j].peer != r) j++;
                if (!t || j == t->nrecv || t->recvs[j].bytes != s->bytes)
                    fail("call #%lld: rank %d sends %zu bytes to rank %d, which %s", (long long)q->calls, r, s->bytes,
                         s->peer, !t ? "does not exist" : j == t->nrecv ? "receives nothing from it" : "receives another size");
                memcpy(t->recvs[j].p, copy[r][i], s->bytes);
            }
        for (int r = 0; r < q->n; r++) {
            for (int i = 0; i < q->post[r].nsend; i++) free(copy[r][i]);
            for (int j = 0; j < q->post[r].nrecv; j++) { /* every receive has its sender */
                const P2p *v = &q->post[r].recvs[j];
                const Post *f = v->peer >= 0 && v->peer < q->n ? &q->post[v->peer] : NULL;
                int i = 0;
                while (f && i < f->nsend && f->sends[i].peer != r) i++;
                if (!f || i == f->nsend)
                    fail("call #%lld: rank %d receives from rank %d, which sends it nothing", (long long)q->calls, r, v->peer);
            }
        }
    }
}

/* post this rank's call; return once every rank has and the bytes have moved */
static void meet(ncclComm_t c, const Post *p) {
    Clique *q = c->q;
    calls_comm("C nccl %s", p->desc);
    pthread_mutex_lock(&q->mu);
    const int64_t gen = q->gen;
    q->post[c->rank] = *p;
    if (++q->arrived == q->n) {
        execute(q);
        q->arrived = 0;
        q->gen++;
        q->calls++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        return;
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)wait_s();
    while (gen == q->gen)
        if (pthread_cond_timedwait(&q->cv, &q->mu, &dl) && gen == q->gen)
            fail("rank %d waited %.0f s at call #%lld (%s): another rank never issued it (NCCL would hang)", c->rank,
                 wait_s(), (long long)q->calls, p->desc);
    pthread_mutex_unlock(&q->mu);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int n;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "fake %d %d", (int)getpid(), __atomic_add_fetch(&n, 1, __ATOMIC_ACQ_REL));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) fail("init: rank %d of %d", rank, nranks);
    pthread_mutex_lock(&cliques_mu);
    Clique *q = cliques;
    while (q && memcmp(&q->id, &id, sizeof id)) q = q->next;
    if (!q) {
        q = calloc(1, sizeof *q);
        q->id = id, q->n = nranks;
        pthread_mutex_init(&q->mu, NULL);
        pthread_cond_init(&q->cv, NULL);
        q->next = cliques, cliques = q;
    }
    pthread_mutex_unlock(&cliques_mu);
    if (q->n != nranks) fail("init: rank %d joins a job of %d ranks as one of %d", rank, q->n, nranks);
    struct ncclComm *c = calloc(1, sizeof *c);
    c->q = q, c->rank = rank;
    pthread_mutex_lock(&q->mu); /* the bootstrap: every rank joins */
    if (++q->joined == q->n) pthread_cond_broadcast(&q->cv);
    while (q->joined < q->n) pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
    calls_comm("A nccl init: its buffers"); /* NCCL allocates once the ranks have met */
    *comm = c;
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *r) { *r = ncclSuccess; return ncclSuccess; }
ncclResult_t ncclCommFinalize(ncclComm_t comm) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t comm) { calls_comm("A nccl destroy: its buffers"); return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclSuccess; }
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "fake NCCL error"; }
const char *ncclGetLastError(ncclComm_t comm) { return ""; }

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclComm_t comm, cudaStream_t st) {
    Post p = {.op = OP_ALL_GATHER, .count = count, .dt = dt, .send = send, .recv = recv};
    snprintf(p.desc, sizeof p.desc, "all-gather %zu %s", count, type_name(dt));
    meet(comm, &p);
    return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t st) {
    Post p = {.op = OP_REDUCE_SCATTER, .count = count, .dt = dt, .red = op, .send = send, .recv = recv};
    snprintf(p.desc, sizeof p.desc, "reduce-scatter %zu %s op %d", count, type_name(dt), (int)op);
    meet(comm, &p);
    return ncclSuccess;
}
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t st) {
    Post p = {.op = OP_ALL_REDUCE, .count = count, .dt = dt, .red = op, .send = send, .recv = recv};
    snprintf(p.desc, sizeof p.desc, "all-reduce %zu %s op %d", count, type_name(dt), (int)op);
    meet(comm, &p);
    return ncclSuccess;
}

/* a group of sends and receives, issued at ncclGroupEnd */
static _Thread_local int group_depth;
static _Thread_local Post group;
static _Thread_local ncclComm_t group_comm;
ncclResult_t ncclGroupStart(void) {
    if (!group_depth++) memset(&group, 0, sizeof group), group.op = OP_P2P, group_comm = NULL;
    return ncclSuccess;
}
static void p2p(int send, const void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm) {
    if (!group_depth) fail("a send or receive outside a group: not faked");
    if (group_comm && group_comm != comm) fail("one group over two communicators: not faked");
    group_comm = comm;
    P2p *x = send ? &group.sends[group.nsend++] : &group.recvs[group.nrecv++];
    if (group.nsend > MAX_P2P || group.nrecv > MAX_P2P) fail("more than %d sends or receives in a group", MAX_P2P);
    *x = (P2p){peer, count * type_size(dt), (void *)buf};
}
ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t st) {
    p2p(1, buf, count, dt, peer, comm);
    return ncclSuccess;
}
ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t st) {
    p2p(0, buf, count, dt, peer, comm);
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (--group_depth || !group_comm) return ncclSuccess;
    const int r = group_comm->rank, n = group_comm->q->n;
    size_t o = (size_t)snprintf(group.desc, sizeof group.desc, "send/recv");
    for (int i = 0; i < group.nsend && o < sizeof group.desc; i++)
        o += (size_t)snprintf(group.desc + o, sizeof group.desc - o, " send %zu to +%d", group.sends[i].bytes,
                              (group.sends[i].peer - r + n) % n);
    for (int i = 0; i < group.nrecv && o < sizeof group.desc; i++)
        o += (size_t)snprintf(group.desc + o, sizeof group.desc - o, " recv %zu from -%d", group.recvs[i].bytes,
                              (r - group.recvs[i].peer + n) % n);
    meet(group_comm, &group);
    return ncclSuccess;
}
