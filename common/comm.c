/* comm.c -- the communicator: NCCL, the one-GPU "local" backend, and the rehearsal (comm.h). */
#include "comm.h"

#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "gpu.h"
#include "rendezvous.h"
#include "train.h"

#define MAX_LOCAL COMM_MAX_HERE /* rank threads of one process */
#define LOCAL_SCRATCH 1024 /* doubles per rank for all-reduce (MoE statistics: one per expert) */
#define PENDING 1024     /* NCCL collectives in flight that a rank's watchdog follows */

const char *COLL_NAMES[C_KINDS] = {"all-gather", "reduce-scatter", "all-reduce", "send/recv"};

/* What a rank brings to a meeting of the process's rank threads: a local collective, a barrier or
 * a fence. The meeting checks that every rank brings the same one, as NCCL would need them to (it
 * cannot check: it hangs, or moves the wrong bytes). */
typedef struct {
    int64_t seq;           /* collectives this rank issued before this one */
    const char *what;      /* "all-gather", ..., "barrier", "the fence opening an allocation phase" */
    int64_t count;         /* elements a rank (send/recv: bytes); 0 for a barrier or fence */
    const char *dtype;     /* "bf16", "f32", "f64", "bytes", "" */
    int to, from;          /* send/recv: the global ranks it sends to and receives from; else -1 */
} Call;
#define CALL(c, w, n, t) ((Call){(c)->seq, (w), (n), (t), -1, -1})

/* The rank threads of this process meet here for every local collective, every barrier and every
 * fence: a barrier with a timeout that also checks that they all bring the same call. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived;
    int64_t generation;
    Call call[MAX_LOCAL];
    int here[MAX_LOCAL];
} Sync;

struct CommWorld {
    CommKind kind;
    int P;                 /* rank threads in this process */
    int size;              /* ranks in the job */
    int gpus, nnodes, node_rank;
    int rehearse_rank;
    CommOpts opt;
    ncclUniqueId id;
    Sync sync;
    int joined;            /* NCCL ranks of this process whose communicator is up */
    /* local backend: what each rank posted for the collective in flight */
    const void *in[MAX_LOCAL];
    cudaEvent_t ready[MAX_LOCAL], done[MAX_LOCAL];
    double *scratch;       /* device [MAX_LOCAL][LOCAL_SCRATCH] */
    void *nccl_stand_in;   /* rehearsal: GPU memory the size of NCCL's estimated buffers, never touched */
};

typedef struct {           /* one NCCL collective the watchdog follows */
    int64_t seq;
    const char *what;
    cudaEvent_t start, end; /* recorded on its stream just before and after it */
    double began;           /* when the watchdog first saw `start` complete (0: not yet) */
} Pending;

struct Comm {
    CommWorld *w;
    int local, rank, size, device;
    int64_t seq;           /* collectives issued by this rank */
    int phase;             /* 1: in an allocation phase (comm.h); its next collective ends it */
    ncclComm_t nccl;
    size_t free_before;    /* device memory free before the communicator existed */
    pthread_t watchdog;
    int stop;
    pthread_mutex_t mu;    /* guards pend, head, tail */
    Pending pend[PENDING];
    int64_t head, tail;    /* pend[head % PENDING] is the oldest unfinished one */
    CommStats stats;
    double *mins, *mins_h;  /* [2 size] comm_min_i64's slots on the device and the host */
    double *word;           /* the barrier's device word; all three taken with the communicator (comm.h) */
};
static _Thread_local Comm *this_thread; /* comm_of_thread() */

/* ---------------------------------------------------------------- accounting */
static int64_t wire_bytes(const Comm *c, CollKind k, int64_t bytes) { /* what this rank sends over its links */
    const int64_t P = c->size;
    switch (k) {
    case C_ALL_GATHER:
    case C_REDUCE_SCATTER: return (P - 1) * bytes; /* bytes: one shard */
    case C_ALL_REDUCE: return 2 * (P - 1) * bytes / P;
    default: return bytes;
    }
}
static double link_Bps(const Comm *c, int crosses_nodes) {
    const double g = crosses_nodes ? c->w->opt.net_gbps : c->w->opt.link_gbps;
    return (g > 0 ? g : 1) * 1e9;
}
double comm_ring_hop_s(const Comm *c, int64_t bytes) { return (double)bytes / link_Bps(c, c->w->nnodes > 1); }

static void account(Comm *c, CollKind k, int64_t bytes) {
    if (measure_paused()) return; /* an evaluation's collectives are not the step's */
    const int64_t wire = wire_bytes(c, k, bytes);
    c->stats.calls[k]++;
    c->stats.bytes[k] += wire;
    /* collectives over several nodes run at the network's rate (NCCL's rings cross the nodes) */
    const double s = k == C_SENDRECV ? comm_ring_hop_s(c, wire) : (double)wire / link_Bps(c, c->w->nnodes > 1);
    c->stats.model_s[k] += s;
    if (k == C_SENDRECV) { c->stats.hop_s = s; c->stats.hop_bytes = (double)wire; }
}

void comm_stats(Comm *c, CommStats *out, int reset) {
    *out = c->stats;
    if (reset) memset(&c->stats, 0, sizeof c->stats);
}

void comm_step_report(Comm *c, double step_s) {
    CommStats s;
    comm_stats(c, &s, 1);
    if (c->w->kind != COMM_REHEARSE || !rank_prints()) return;
    double total = 0;
    char net[64] = "";
    if (c->w->nnodes > 1) snprintf(net, sizeof net, " in a node, %.0f GB/s between nodes", c->w->opt.net_gbps);
    printf("  rehearsal, rank %d of %d (its loss and gradient norm are not the job's); collectives per step, modelled at "
           "%.0f GB/s%s:\n   ", c->rank, c->size, c->w->opt.link_gbps, net);
    for (int k = 0; k < C_KINDS; k++) {
        if (!s.calls[k]) continue;
        printf(" %s %lld x, %.2f GiB, %.3f s |", COLL_NAMES[k], (long long)s.calls[k], (double)s.bytes[k] / (1 << 30),
               s.model_s[k]);
        total += s.model_s[k];
    }
    printf(" total %.3f s = %.1f%% of the step's %.3f s if none of it overlapped compute\n", total, 100 * total / step_s,
           step_s);
}

int64_t nccl_buffers_estimate(int P, int64_t nnodes) {
    if (P <= 1) return 0;
    /* NCCL 2.22+ on H100/H200 (README, "NCCL buffers", has the sources): one NVLink connection is a
     * 10 MiB receive buffer (Simple 4 MiB + LL128 4.69 MiB + LL 0.5 MiB, in 2 MiB units) on the
     * receiver and a 2 MiB header on the sender; a ring channel connects each rank to two peers */
    const int64_t MiB = 1 << 20, conn = 12 * MiB;
    const int64_t ring = (nnodes > 1 ? 16 : 24) * conn;   /* collective channels (8x H100 logs: 24; multi-node: 16) */
    const int64_t p2p = 32 * conn;                        /* send/recv to the ring's neighbours: 32 p2p channels */
    /* NVLink SHARP (NVSwitch nodes, 2+ GPUs per node): published 8-GPU H100 logs show ~2.25 GiB per
     * GPU of NVLS buffers once all-gathers and reduce-scatters run; none with NCCL_NVLS_ENABLE=0.
     * Measured after the warm-up (comm_warm_up) and checked against this before the arenas. */
    const char *nvls_env = getenv("NCCL_NVLS_ENABLE");
    const int64_t per_node = P / (nnodes > 0 ? nnodes : 1);
    const int64_t nvls = per_node >= 2 && !(nvls_env && !strcmp(nvls_env, "0")) ? 2304 * MiB : 0;
    return ring + p2p + nvls + 64 * MiB;                  /* + an allowance for NCCL's own bookkeeping */
}

/* ---------------------------------------------------------------- local ranks meet */
static void sync_init(Sync *s, int n) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->n = n;
}

/* "all-gather of 4096 bf16 a rank", "send/recv of 800 bytes to rank 1 from rank 3", "barrier" */
static const char *describe(const Call *k, char *buf, size_t n) {
    if (k->to >= 0)
        snprintf(buf, n, "%s of %lld bytes to rank %d from rank %d", k->what, (long long)k->count, k->to, k->from);
    else if (k->dtype[0])
        snprintf(buf, n, "%s of %lld %s%s", k->what, (long long)k->count, k->dtype,
                 strcmp(k->what, "all-reduce") ? " a rank" : "");
    else snprintf(buf, n, "%s", k->what);
    return buf;
}

/* the rank threads' calls, all arrived: the same one everywhere, send/recv pairing up (0), else the
 * first disagreement in msg, naming both ranks and both calls (-1) */
static int calls_agree(const Sync *s, int base, char *msg, size_t n) {
    char a[160], b[160];
    for (int q = 1; q < s->n; q++) {
        const Call *x = &s->call[0], *y = &s->call[q];
        if (x->seq == y->seq && !strcmp(x->what, y->what) && (x->to >= 0 || (x->count == y->count && !strcmp(x->dtype, y->dtype))))
            continue;
        snprintf(msg, n, "the ranks disagree on the collectives: rank %d is at collective #%lld, %s; rank %d at #%lld, %s",
                 base + q, (long long)y->seq, describe(y, a, sizeof a), base, (long long)x->seq, describe(x, b, sizeof b));
        return -1;
    }
    for (int q = 0; q < s->n; q++) { /* send/recv: q's message is what its receiver expects from q */
        const Call *x = &s->call[q];
        const int t = x->to - base;
        if (x->to < 0 || t < 0 || t >= s->n) continue; /* not a send/recv, or its peer is on another node */
        const Call *y = &s->call[t];
        if (y->from == base + q && y->count == x->count) continue;
        snprintf(msg, n, "the ranks disagree on the collectives: rank %d is at collective #%lld, %s; rank %d at #%lld, %s",
                 base + q, (long long)x->seq, describe(x, a, sizeof a), base + t, (long long)y->seq, describe(y, b, sizeof b));
        return -1;
    }
    return 0;
}

/* Wait for every rank thread of the process at the same call k. timeout_s <= 0: forever. */
static void sync_wait(Comm *c, const Call *k, double timeout_s) {
    Sync *s = &c->w->sync;
    const char *what = k->what;
    pthread_mutex_lock(&s->mu);
    const int64_t gen = s->generation;
    s->call[c->local] = *k;
    s->here[c->local] = 1;
    if (++s->arrived == s->n) {
        char msg[512];
        if (calls_agree(s, c->w->node_rank * c->w->P, msg, sizeof msg)) DIE("%s", msg);
        s->arrived = 0;
        memset(s->here, 0, sizeof s->here);
        s->generation++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    const double t0 = now_s();
    while (gen == s->generation) {
        if (timeout_s <= 0) { pthread_cond_wait(&s->cv, &s->mu); continue; }
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 1; /* wake once a second to check the clock */
        pthread_cond_timedwait(&s->cv, &s->mu, &dl);
        if (gen == s->generation && now_s() - t0 > timeout_s) {
            char missing[256] = "";
            for (int q = 0; q < s->n; q++)
                if (!s->here[q]) snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %d", q);
            DIE("collective #%lld (%s) waited %.0f s for rank(s)%s, which never arrived: a rank stopped, or the ranks "
                "disagree on the collectives (--comm-timeout)", (long long)c->seq, what, timeout_s, missing);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- NCCL */
/* Every live NCCL communicator of the process, so that the fatal path (check.h: longctx_die) aborts
 * them all: a rank that stops must not leave the other ranks' kernels spinning in a collective
 * that will never complete. A slot is taken back with an atomic exchange, so each communicator is
 * aborted (or destroyed) exactly once, whichever thread gets there first. */
#define MAX_LIVE 64
static ncclComm_t live[MAX_LIVE];
static char live_rdv[RDV_PATH_MAX + 1]; /* node 0's rendezvous file while it may still be joined */
static uint64_t live_rdv_nonce;
static int live_listen = -1; /* node 0's TCP rendezvous socket while it serves */

/* close node 0's listening socket (once, whichever thread gets there): a restart binds the port again */
static void close_listen(void) {
    const int fd = __atomic_exchange_n(&live_listen, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0) close(fd);
}

static void abort_all(void) {
    close_listen();
    if (live_rdv[0]) rdv_remove_own(live_rdv, live_rdv_nonce); /* first: an abort may block */
    for (int i = 0; i < MAX_LIVE; i++) {
        ncclComm_t c = __atomic_exchange_n(&live[i], NULL, __ATOMIC_ACQ_REL);
        if (c) ncclCommAbort(c);
    }
}
static void hook_fatal(void) {
    static int hooked;
    if (!__atomic_exchange_n(&hooked, 1, __ATOMIC_ACQ_REL)) longctx_on_fatal(abort_all);
}
static void register_live(ncclComm_t c) {
    hook_fatal();
    for (int i = 0; i < MAX_LIVE; i++) {
        ncclComm_t none = NULL;
        if (__atomic_compare_exchange_n(&live[i], &none, c, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    }
    DIE("more than %d NCCL communicators in one process", MAX_LIVE);
}
/* take c out of the registry: 1 if this caller now owns it (to abort or destroy), 0 if the fatal
 * path already aborted it */
static int unregister_live(ncclComm_t c) {
    for (int i = 0; i < MAX_LIVE; i++) {
        ncclComm_t want = c;
        if (__atomic_compare_exchange_n(&live[i], &want, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
    }
    return 0;
}

/* A nonblocking communicator may answer ncclInProgress: wait until NCCL is done with the call,
 * for at most the timeout, then check the result. */
static void nccl_wait(Comm *c, ncclResult_t r, const char *call, const char *file, int line) {
    const double t0 = now_s(), limit = c->w->opt.timeout_s;
    while (r == ncclInProgress) {
        if (ncclCommGetAsyncError(c->nccl, &r) != ncclSuccess || r != ncclInProgress) break;
        if (limit > 0 && now_s() - t0 > limit) /* DIE's fatal path aborts every communicator */
            DIE("%s:%d: %s still in progress after %.0f s (--comm-timeout): communicators aborted", file, line, call, limit);
        usleep(1000);
        if (longctx_dying()) for (;;) pause(); /* another thread is aborting the communicators */
    }
    if (r != ncclSuccess) {
        const char *last = ncclGetLastError(c->nccl);
        DIE("%s:%d: %s: %s | %s -- hint: NCCL_DEBUG=WARN shows NCCL's view", file, line, call, ncclGetErrorString(r),
            last ? last : "");
    }
}
#define NCCL_DO(c, call) nccl_wait((c), (call), #call, __FILE__, __LINE__)

/* The watchdog: NCCL reports a failed peer through ncclCommGetAsyncError, but a peer that simply
 * stops (or ranks that disagree on the collectives) leaves a collective waiting forever. Every
 * NCCL collective is bracketed by two events; once its start event has completed (everything
 * before it on its stream is done), it has timeout_s to complete, else the watchdog aborts the
 * communicator and exits, naming the rank and the collective. */
static void *watchdog_main(void *arg) {
    Comm *c = arg;
    longctx_rank = c->rank;
    CUDA_CHECK(cudaSetDevice(c->device));
    const double limit = c->w->opt.timeout_s;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        if (longctx_dying()) for (;;) pause(); /* the communicators are being aborted: leave them be */
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(c->nccl, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            DIE("NCCL asynchronous error on rank %d: %s (a peer failed or the network broke)", c->rank,
                ncclGetErrorString(async));
        }
        pthread_mutex_lock(&c->mu);
        while (c->head < c->tail && cudaEventQuery(c->pend[c->head % PENDING].end) == cudaSuccess) c->head++;
        for (int64_t i = c->head; limit > 0 && i < c->tail; i++) {
            Pending *p = &c->pend[i % PENDING];
            if (cudaEventQuery(p->end) == cudaSuccess || cudaEventQuery(p->start) != cudaSuccess) continue;
            if (p->began == 0) p->began = now_s();
            else if (now_s() - p->began > limit) /* DIE aborts every communicator of the process, then exits */
                DIE("collective #%lld (%s) has not completed %.0f s after it could start: a peer stopped, or the ranks "
                    "disagree on the collectives (--comm-timeout); communicators aborted", (long long)p->seq, p->what, limit);
        }
        pthread_mutex_unlock(&c->mu);
        usleep(100000);
    }
    return NULL;
}

static int64_t nccl_begin(Comm *c, const char *what, cudaStream_t st) {
    for (;;) { /* the ring is full only if the host ran PENDING collectives ahead of the GPU */
        pthread_mutex_lock(&c->mu);
        if (c->tail - c->head < PENDING) break;
        pthread_mutex_unlock(&c->mu);
        usleep(1000);
    }
    const int64_t slot = c->tail;
    Pending *p = &c->pend[slot % PENDING];
    p->seq = c->seq;
    p->what = what;
    p->began = 0;
    pthread_mutex_unlock(&c->mu);
    CUDA_CHECK(cudaEventRecord(p->start, st));
    return slot;
}
static void nccl_end(Comm *c, int64_t slot, cudaStream_t st) {
    CUDA_CHECK(cudaEventRecord(c->pend[slot % PENDING].end, st));
    pthread_mutex_lock(&c->mu);
    c->tail = slot + 1;
    pthread_mutex_unlock(&c->mu);
}

/* ---------------------------------------------------------------- worlds */
static CommWorld *world_new(CommKind kind, int P, int size, const CommOpts *o) {
    /* ranks_check_opts refuses more by name, before any GPU call */
    if (P < 1 || P > MAX_LOCAL) DIE("internal: %d rank threads in one process, at most %d", P, MAX_LOCAL);
    CommWorld *w = xcalloc(1, sizeof *w);
    w->kind = kind;
    w->P = P;
    w->size = size;
    w->gpus = P;
    w->nnodes = 1;
    w->opt = *o;
    sync_init(&w->sync, P);
    return w;
}

CommWorld *comm_world_local(int P, const CommOpts *o) {
    if (P < 1 || P > MAX_LOCAL) DIE("local ranks must be 1..%d (got %d)", MAX_LOCAL, P);
    CommWorld *w = world_new(COMM_LOCAL, P, P, o);
    for (int r = 0; r < P; r++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&w->ready[r], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&w->done[r], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMalloc((void **)&w->scratch, sizeof(double) * MAX_LOCAL * LOCAL_SCRATCH));
    return w;
}

CommWorld *comm_world_rehearse(int gpus, int nnodes, int rank, const CommOpts *o) {
    if (gpus < 1 || nnodes < 1 || rank < 0 || rank >= gpus * nnodes)
        DIE("--rehearse %d: the job has %d x %d ranks", rank, nnodes, gpus);
    CommWorld *w = world_new(COMM_REHEARSE, 1, gpus * nnodes, o);
    w->gpus = gpus;
    w->nnodes = nnodes;
    w->node_rank = rank / gpus;
    w->rehearse_rank = rank;
    CUDA_CHECK(cudaMalloc((void **)&w->scratch, sizeof(double) * LOCAL_SCRATCH));
    /* the job's rank would hold NCCL's buffers too: hold as much, so the measured peak is the job's */
    const int64_t nccl = nccl_buffers_estimate(w->size, nnodes);
    if (nccl) CUDA_CHECK(cudaMalloc(&w->nccl_stand_in, (size_t)nccl));
    return w;
}

/* several nodes over TCP: the job secret, or STOP saying how to set one */
static void job_secret(RdvSecret *key) {
    char err[512];
    const int got = rdv_secret(key, err, sizeof err);
    if (got < 0) STOP("%s", err);
    if (!got) STOP("%s", RDV_SECRET_HOWTO);
}

/* node 0 over TCP: listen on HOST's address before anything else, so a HOST that is not this
 * machine is refused before an id is made; the fatal path closes the socket from now on */
static int listen_first(const RdvTcp *tcp) {
    char err[512];
    hook_fatal();
    const int fd = rdv_tcp_listen(tcp->host, tcp->port, err, sizeof err);
    if (fd < 0) STOP("node 0: %s", err);
    __atomic_store_n(&live_listen, fd, __ATOMIC_RELEASE);
    return fd;
}

CommWorld *comm_world_nccl(int gpus, int nnodes, int node_rank, const char *rendezvous, const CommOpts *o) {
    int have = 0;
    CUDA_CHECK(cudaGetDeviceCount(&have));
    if (gpus < 1 || gpus > have) DIE("--gpus %d: %d visible", gpus, have);
    if (nnodes > 1 && !rendezvous)
        STOP("several nodes need --rendezvous tcp://HOST:PORT (node 0's address) or FILE (a path all nodes share)");
    RdvTcp tcp;
    char err[512];
    const int is_tcp = rendezvous ? rdv_parse(rendezvous, &tcp, err, sizeof err) : 0;
    if (is_tcp < 0) STOP("--rendezvous %s", err);
    if (nnodes > 1 && rdv_run_id_check(o->run_id, err, sizeof err)) STOP("%s", err);
    RdvSecret key;
    memset(&key, 0, sizeof key);
    if (nnodes > 1 && is_tcp) job_secret(&key);
    const int fd = nnodes > 1 && is_tcp && node_rank == 0 ? listen_first(&tcp) : -1;
    CommWorld *w = world_new(COMM_NCCL, gpus, gpus * nnodes, o);
    w->nnodes = nnodes;
    w->node_rank = node_rank;
    const double started = rdv_wall_s();
    int from_env = 0;
    const char *run_id = rdv_run_id(o->run_id, &from_env);
    if (node_rank == 0) NCCL_CHECK(ncclGetUniqueId(&w->id));
    const double timeout = o->timeout_s > 0 ? o->timeout_s : 0; /* 0: forever, in both TCP directions */
    uint64_t nonce;
    if (nnodes > 1 && is_tcp && node_rank == 0) { /* serve every other node once, then join */
        printf("node 0: serving the NCCL id on %s:%d to %d other node(s)\n", tcp.host, tcp.port, nnodes - 1);
        fflush(stdout);
        if (rdv_tcp_serve(fd, &key, run_id, nnodes, gpus, &w->id, &nonce, timeout, err, sizeof err)) STOP("node 0: %s", err);
        close_listen();
    } else if (nnodes > 1 && is_tcp) {
        if (rdv_tcp_await(&tcp, &key, run_id, node_rank, nnodes, gpus, timeout, &w->id, &nonce, err, sizeof err))
            STOP("node %d: %s", node_rank, err);
        printf("node %d: joined node 0 at %s:%d (launch %016llx)\n", node_rank, tcp.host, tcp.port, (unsigned long long)nonce);
    } else if (nnodes > 1 && node_rank == 0) {
        hook_fatal();
        if (rdv_publish(rendezvous, run_id, nnodes, gpus, &w->id, &live_rdv_nonce, err, sizeof err)) STOP("node 0: %s", err);
        snprintf(live_rdv, sizeof live_rdv, "%s", rendezvous); /* every exit path removes it from now on */
        rdv_remove_on_signal(live_rdv, live_rdv_nonce);
    } else if (nnodes > 1 &&
               rdv_await(rendezvous, run_id, from_env, nnodes, gpus, started, o->timeout_s > 0 ? o->timeout_s : 1e9, &w->id, err,
                         sizeof err))
        STOP("node %d: %s", node_rank, err);
    rdv_secret_wipe(&key);
    return w;
}

/* ---------------------------------------------------------------- ranks */
/* poll a nonblocking communicator until NCCL is done with the last call; 0, or -1 after limit s */
static int nccl_settle(ncclComm_t comm, double limit, ncclResult_t *r) {
    const double t0 = now_s();
    while (*r == ncclInProgress) {
        if (ncclCommGetAsyncError(comm, r) != ncclSuccess || *r != ncclInProgress) break;
        if (limit > 0 && now_s() - t0 > limit) return -1;
        usleep(10000);
    }
    return 0;
}

/* the NCCL communicator, nonblocking so a join that cannot complete times out */
static void nccl_join(Comm *c) {
    CommWorld *w = c->w;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    size_t total;
    CUDA_CHECK(cudaMemGetInfo(&c->free_before, &total)); /* what NCCL takes is measured from here */
    ncclResult_t r = ncclCommInitRankConfig(&c->nccl, c->size, w->id, c->rank, &cfg);
    if (r == ncclSuccess || r == ncclInProgress) register_live(c->nccl); /* the fatal path aborts it */
    if (nccl_settle(c->nccl, w->opt.timeout_s, &r)) /* DIE aborts it and removes the rendezvous file */
        DIE("could not join the job of %d ranks within %.0f s: a node is missing, or joined from another run's "
            "rendezvous file (--comm-timeout, --run-id)", c->size, w->opt.timeout_s);
    if (r != ncclSuccess) DIE("joining the job of %d ranks failed: %s | %s", c->size, ncclGetErrorString(r), ncclGetLastError(c->nccl));
    for (int i = 0; i < PENDING; i++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&c->pend[i].start, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&c->pend[i].end, cudaEventDisableTiming));
    }
    pthread_mutex_init(&c->mu, NULL);
    if (pthread_create(&c->watchdog, NULL, watchdog_main, c)) DIE("cannot start the NCCL watchdog thread");
    /* once every rank of this process is in, every node is (init is collective): the rendezvous
     * file has done its work and must not outlive it */
    if (__atomic_add_fetch(&w->joined, 1, __ATOMIC_ACQ_REL) == w->P && live_rdv[0]) {
        rdv_signals_restore(); /* the signals act as before; the file is gone */
        rdv_remove_own(live_rdv, live_rdv_nonce);
        live_rdv[0] = 0;
    }
}

Comm *comm_rank(CommWorld *w, int local_rank) {
    Comm *c = xcalloc(1, sizeof *c);
    c->w = w;
    c->local = local_rank;
    c->size = w->size;
    c->rank = w->kind == COMM_REHEARSE ? w->rehearse_rank : w->node_rank * w->P + local_rank;
    c->phase = 1; /* until the first collective, which first meets the others: NCCL's join allocates too */
    CUDA_CHECK(cudaGetDevice(&c->device));
    longctx_rank = c->rank;
    this_thread = c;
    if (c->size > 1) { /* everything the collectives use, now (comm.h: nothing is allocated later) */
        c->mins = gpu_malloc(16 * (int64_t)c->size, "comm_min_i64");
        c->mins_h = xcalloc(2 * (size_t)c->size, sizeof(double));
    }
    c->word = gpu_malloc(8, "the barrier's word");
    if (w->kind == COMM_NCCL) nccl_join(c);
    return c;
}

Comm *comm_of_thread(void) { return this_thread; }

/* NCCL's teardown for a nonblocking communicator: finalize (flushes its last operations; answers
 * ncclInProgress), poll it to completion within the timeout, then destroy. A communicator the fatal
 * path already aborted is not touched again. */
static void nccl_leave(Comm *c) {
    if (!unregister_live(c->nccl)) return;
    ncclResult_t r = ncclCommFinalize(c->nccl);
    const double limit = c->w->opt.timeout_s > 0 ? c->w->opt.timeout_s : 600;
    if (nccl_settle(c->nccl, limit, &r) || r != ncclSuccess) {
        fprintf(stderr, "rank %d: warning: NCCL finalize %s (%s): communicator aborted instead\n", c->rank,
                r == ncclInProgress ? "did not complete" : "failed", ncclGetErrorString(r));
        ncclCommAbort(c->nccl);
        return;
    }
    r = ncclCommDestroy(c->nccl);
    if (r != ncclSuccess && r != ncclInProgress)
        fprintf(stderr, "rank %d: warning: ncclCommDestroy: %s\n", c->rank, ncclGetErrorString(r));
}

void comm_rank_free(Comm *c) {
    comm_alloc_begin(c); /* every rank thread is here: what any of them issued, this one did too */
    if (c->w->kind == COMM_NCCL) {
        __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
        pthread_join(c->watchdog, NULL);
        nccl_leave(c);
        for (int i = 0; i < PENDING; i++) { cudaEventDestroy(c->pend[i].start); cudaEventDestroy(c->pend[i].end); }
    }
    if (c->mins) CUDA_CHECK(cudaFree(c->mins));
    CUDA_CHECK(cudaFree(c->word));
    free(c->mins_h);
    if (this_thread == c) this_thread = NULL;
    free(c);
}

void comm_world_free(CommWorld *w) {
    if (w->kind == COMM_LOCAL)
        for (int r = 0; r < w->P; r++) { cudaEventDestroy(w->ready[r]); cudaEventDestroy(w->done[r]); }
    if (w->scratch) cudaFree(w->scratch);
    if (w->nccl_stand_in) cudaFree(w->nccl_stand_in);
    free(w);
}

int comm_rank_id(const Comm *c) { return c->rank; }
int comm_size(const Comm *c) { return c->size; }
CommKind comm_kind(const Comm *c) { return c->w->kind; }

/* ---------------------------------------------------------------- allocation phases */
static void note(const Comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const Comm *c, const char *fmt, ...) {
    if (!comm_calls_note) return; /* the trainers: nobody records */
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    comm_calls_note(line);
}

/* The barrier's limit: ranks may reach it minutes apart (checkpoint I/O, pinning hundreds of GiB
 * before the first step), so it is BARRIER_FACTOR times --comm-timeout (an hour at the default 600
 * s), still finite: a peer that hangs without failing must not hold the job forever. */
#define BARRIER_FACTOR 6
static double barrier_limit(const Comm *c) { return c->w->opt.timeout_s > 0 ? BARRIER_FACTOR * c->w->opt.timeout_s : 0; }

/* every rank thread of this process here (host only: no GPU work, nothing allocated) */
static void node_fence(Comm *c, const char *why) {
    note(c, "fence #%lld %s", (long long)c->seq, why);
    if (c->w->kind != COMM_REHEARSE) sync_wait(c, &CALL(c, why, 0, ""), barrier_limit(c));
}

void comm_alloc_begin(Comm *c) {
    node_fence(c, "the fence opening an allocation phase");
    c->phase = 1;
}

static void job_barrier(Comm *c, cudaStream_t st);
/* Every collective's first act: an allocation phase ends here, once every rank thread of the
 * process has done allocating, and every rank of the job has arrived (the barrier's own limit). */
static void phase_end(Comm *c, cudaStream_t st) {
    if (!c->phase) return;
    c->phase = 0;
    node_fence(c, "the fence closing an allocation phase");
    job_barrier(c, st);
}

/* ---------------------------------------------------------------- local backend */
/* Post this rank's input, wait until every rank has (at the same call), and make this stream wait
 * for their data. */
static void local_enter(Comm *c, const Call *k, const void *in, cudaStream_t st) {
    CommWorld *w = c->w;
    w->in[c->local] = in;
    CUDA_CHECK(cudaEventRecord(w->ready[c->local], st));
    sync_wait(c, k, w->opt.timeout_s);
    for (int q = 0; q < w->P; q++) CUDA_CHECK(cudaStreamWaitEvent(st, w->ready[q], 0));
}
/* Nobody may overwrite an input (or re-post) until every rank's reads of it are done. */
static void local_leave(Comm *c, const Call *k, cudaStream_t st) {
    CommWorld *w = c->w;
    CUDA_CHECK(cudaEventRecord(w->done[c->local], st));
    sync_wait(c, k, w->opt.timeout_s);
    for (int q = 0; q < w->P; q++) CUDA_CHECK(cudaStreamWaitEvent(st, w->done[q], 0));
    sync_wait(c, k, w->opt.timeout_s); /* the slots of this collective are read; the next may post */
}

static SlicePtrs slices(const CommWorld *w) {
    SlicePtrs s;
    memset(&s, 0, sizeof s);
    s.n = w->P;
    for (int q = 0; q < w->P; q++) s.p[q] = w->in[q];
    return s;
}
static SlicePtrs one_slice(const void *p) {
    SlicePtrs s;
    memset(&s, 0, sizeof s);
    s.n = 1;
    s.p[0] = p;
    return s;
}

/* ---------------------------------------------------------------- collectives */
void comm_all_gather_bf16(Comm *c, bf16_t *out, const bf16_t *in, int64_t n, cudaStream_t st) {
    phase_end(c, st);
    const char *what = "all-gather";
    trace("all_gather bf16 n=%lld", (long long)n);
    account(c, C_ALL_GATHER, 2 * n);
    const int tl = tl_begin(st, "communication", what);
    CommWorld *w = c->w;
    if (w->kind == COMM_NCCL) {
        const int64_t slot = nccl_begin(c, what, st);
        NCCL_DO(c, ncclAllGather(in, out, (size_t)n, ncclBfloat16, c->nccl, st));
        nccl_end(c, slot, st);
    } else if (w->kind == COMM_REHEARSE) { /* this rank's shard in every slot */
        for (int q = 0; q < c->size; q++)
            CUDA_CHECK(cudaMemcpyAsync(out + (int64_t)q * n, in, (size_t)n * 2, cudaMemcpyDeviceToDevice, st));
    } else {
        const Call k = CALL(c, what, n, "bf16");
        local_enter(c, &k, in, st);
        for (int q = 0; q < w->P; q++)
            CUDA_CHECK(cudaMemcpyAsync(out + (int64_t)q * n, w->in[q], (size_t)n * 2, cudaMemcpyDeviceToDevice, st));
        local_leave(c, &k, st);
    }
    tl_end(tl, st);
    c->seq++;
}

void comm_reduce_scatter_f32(Comm *c, float *out, const float *in, int64_t n, float scale, cudaStream_t st) {
    phase_end(c, st);
    const char *what = "reduce-scatter";
    trace("reduce_scatter f32 n=%lld", (long long)n);
    account(c, C_REDUCE_SCATTER, 4 * n);
    const int tl = tl_begin(st, "communication", what);
    CommWorld *w = c->w;
    if (w->kind == COMM_NCCL) {
        const int64_t slot = nccl_begin(c, what, st);
        NCCL_DO(c, ncclReduceScatter(in, out, (size_t)n, ncclFloat32, ncclSum, c->nccl, st));
        nccl_end(c, slot, st);
        if (scale != 1.f) scale_f32(out, n, scale, st);
    } else if (w->kind == COMM_REHEARSE) { /* P copies of this rank's own slice, summed */
        sum_slices_f32(out, one_slice(in), (int64_t)c->rank * n, n, scale * (float)c->size, st);
    } else {
        const Call k = CALL(c, what, n, "f32");
        local_enter(c, &k, in, st);
        sum_slices_f32(out, slices(w), (int64_t)c->local * n, n, scale, st);
        local_leave(c, &k, st);
    }
    tl_end(tl, st);
    c->seq++;
}

void comm_all_reduce_f64(Comm *c, double *buf, int64_t n, cudaStream_t st) {
    phase_end(c, st);
    const char *what = "all-reduce";
    trace("all_reduce f64 n=%lld", (long long)n);
    account(c, C_ALL_REDUCE, 8 * n);
    CommWorld *w = c->w;
    if (w->kind == COMM_NCCL) {
        const int64_t slot = nccl_begin(c, what, st);
        NCCL_DO(c, ncclAllReduce(buf, buf, (size_t)n, ncclFloat64, ncclSum, c->nccl, st));
        nccl_end(c, slot, st);
        c->seq++;
        return;
    }
    if (w->kind == COMM_REHEARSE) { /* P ranks holding this rank's values */
        scale_f64(buf, n, (double)c->size, st);
        c->seq++;
        return;
    }
    if (n > LOCAL_SCRATCH) DIE("local all-reduce of %lld doubles: at most %d", (long long)n, LOCAL_SCRATCH);
    /* in place: copy to this rank's scratch first, so nobody reads a buffer its owner overwrites */
    double *mine = w->scratch + (int64_t)c->local * LOCAL_SCRATCH;
    CUDA_CHECK(cudaMemcpyAsync(mine, buf, (size_t)n * 8, cudaMemcpyDeviceToDevice, st));
    const Call k = CALL(c, what, n, "f64");
    local_enter(c, &k, mine, st);
    sum_slices_f64(buf, slices(w), n, st);
    local_leave(c, &k, st);
    c->seq++;
}

void comm_sendrecv(Comm *c, const void *send, int to, void *recv, int from, int64_t bytes, cudaStream_t st) {
    phase_end(c, st);
    const char *what = "send/recv";
    trace("sendrecv bytes=%lld to=+%d from=-%d", (long long)bytes, (to - c->rank + c->size) % c->size,
          (c->rank - from + c->size) % c->size);
    account(c, C_SENDRECV, bytes);
    const int tl = tl_begin(st, "communication", what);
    CommWorld *w = c->w;
    if (w->kind == COMM_NCCL) {
        const int64_t slot = nccl_begin(c, what, st);
        NCCL_DO(c, ncclGroupStart());
        NCCL_DO(c, ncclSend(send, (size_t)bytes, ncclInt8, to, c->nccl, st));
        NCCL_DO(c, ncclRecv(recv, (size_t)bytes, ncclInt8, from, c->nccl, st));
        NCCL_DO(c, ncclGroupEnd());
        nccl_end(c, slot, st);
    } else if (w->kind == COMM_REHEARSE) { /* this rank's own message arrives */
        CUDA_CHECK(cudaMemcpyAsync(recv, send, (size_t)bytes, cudaMemcpyDeviceToDevice, st));
    } else { /* every rank posts what it sends; each copies from the rank it receives from */
        const Call k = {c->seq, what, bytes, "bytes", to, from};
        local_enter(c, &k, send, st);
        CUDA_CHECK(cudaMemcpyAsync(recv, w->in[from], (size_t)bytes, cudaMemcpyDeviceToDevice, st));
        local_leave(c, &k, st);
    }
    tl_end(tl, st);
    c->seq++;
}

/* wait for stream work that a peer's arrival completes, at most limit s (0: forever) */
static void await_stream(Comm *c, cudaStream_t st, double limit, const char *what) {
    const double t0 = now_s();
    for (;;) {
        const cudaError_t e = cudaStreamQuery(st);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        if (limit > 0 && now_s() - t0 > limit)
            DIE("%s: the other ranks did not arrive within %.0f s (%d x --comm-timeout): a rank hangs", what, limit,
                BARRIER_FACTOR);
        usleep(1000);
    }
}

/* comm_barrier's work: the job's ranks (NCCL: a one-word all-reduce on the word taken with the
 * communicator), then this process's rank threads, each with its stream drained */
static void job_barrier(Comm *c, cudaStream_t st) {
    note(c, "barrier #%lld", (long long)c->seq);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CommWorld *w = c->w;
    if (w->kind == COMM_NCCL) { /* untracked by the watchdog: its own, longer limit */
        CUDA_CHECK(cudaMemsetAsync(c->word, 0, 8, st));
        NCCL_DO(c, ncclAllReduce(c->word, c->word, 1, ncclFloat64, ncclSum, c->nccl, st));
        await_stream(c, st, barrier_limit(c), "barrier");
    }
    if (w->kind != COMM_REHEARSE) sync_wait(c, &CALL(c, "barrier", 0, ""), barrier_limit(c));
}

void comm_barrier(Comm *c, cudaStream_t st) {
    if (c->phase) phase_end(c, st); /* which is a barrier */
    else job_barrier(c, st);
}

/* ---------------------------------------------------------------- setup */
/* NCCL connects lazily: a kind of collective (and each algorithm and protocol it picks by size)
 * allocates its buffers the first time it runs. Run each kind the trainers issue once, small and
 * large, in the ring's direction, right after the join and before the arenas are allocated, so that
 * NCCL's memory is taken (and measured) now rather than inside the first step, after the plan's
 * arenas, and under the watchdog's clock. Its limit is the barrier's (the ranks left the join
 * together; connecting may take a while); an async error still stops it. Its buffer is taken in an
 * allocation phase and given back in another (comm.h), which stays open for the arenas. Returns
 * NCCL's device bytes: the device's free memory before the join less after the warm-up (0 for the
 * other backends). */
int64_t comm_warm_up(Comm *c, cudaStream_t st) {
    if (c->w->kind != COMM_NCCL || c->size < 2) return 0;
    /* stage 2 never issues send/recv; its warm-up connects it anyway, as the plan's estimate counts */
    const int64_t P = c->size, big = 2 << 20; /* elements per rank: 4 MiB bf16, 8 MiB fp32 shards */
    if (!c->phase) comm_alloc_begin(c);
    char *buf = gpu_malloc(P * big * 4 + big * 4, "NCCL warm-up");
    phase_end(c, st);
    const int to = (c->rank + 1) % c->size, from = (c->rank + c->size - 1) % c->size;
    for (int k = 0; k < 2; k++) {
        const int64_t n = k ? big : 64;
        NCCL_DO(c, ncclAllGather(buf + P * big * 4, buf, (size_t)n, ncclBfloat16, c->nccl, st));
        NCCL_DO(c, ncclReduceScatter(buf, buf + P * big * 4, (size_t)n, ncclFloat32, ncclSum, c->nccl, st));
        NCCL_DO(c, ncclAllReduce(buf, buf, (size_t)(k ? 1024 : 1), ncclFloat64, ncclSum, c->nccl, st));
        NCCL_DO(c, ncclGroupStart());
        NCCL_DO(c, ncclSend(buf, (size_t)(4 * n), ncclInt8, to, c->nccl, st));
        NCCL_DO(c, ncclRecv(buf + P * big * 4, (size_t)(4 * n), ncclInt8, from, c->nccl, st));
        NCCL_DO(c, ncclGroupEnd());
    }
    await_stream(c, st, barrier_limit(c), "NCCL warm-up");
    comm_alloc_begin(c);
    CUDA_CHECK(cudaFree(buf));
    size_t free_now, total;
    CUDA_CHECK(cudaMemGetInfo(&free_now, &total));
    return c->free_before > free_now ? (int64_t)(c->free_before - free_now) : 0;
}

/* The smallest v and the smallest -v over the ranks, in one all-reduce whatever v is (a rank must
 * never skip a collective that another issues because its value differed): each rank's value in its
 * own slot of a [2 size] vector, summed (one non-zero per slot: exact in fp64 below 2^53), read off
 * on the host. The rehearsal issues the all-reduce (the job's rank does) but is every rank: v. */
static void extremes(Comm *c, int64_t v, int64_t *lo, int64_t *hi, cudaStream_t st) {
    if (v > (1ll << 53) || v < -(1ll << 53)) /* the all-reduce carries doubles: larger values would round */
        DIE("comm_min_i64: %lld is past 2^53, which a double does not hold exactly", (long long)v);
    *lo = *hi = v;
    if (c->size < 2) return;
    const int64_t P = c->size;
    double *h = c->mins_h, *d = c->mins;
    memset(h, 0, (size_t)(16 * P));
    h[c->rank] = (double)v;
    h[P + c->rank] = -(double)v;
    gpu_upload(d, h, 16 * P, st);
    comm_all_reduce_f64(c, d, 2 * P, st);
    gpu_download(h, d, 16 * P, st);
    for (int64_t q = 0; q < P && c->w->kind != COMM_REHEARSE; q++) {
        if ((int64_t)h[q] < *lo) *lo = (int64_t)h[q];
        if (-(int64_t)h[P + q] > *hi) *hi = -(int64_t)h[P + q];
    }
}

int64_t comm_min_i64(Comm *c, int64_t v, cudaStream_t st) {
    int64_t lo, hi;
    extremes(c, v, &lo, &hi, st);
    return lo;
}

int comm_same_i64(Comm *c, int64_t v, cudaStream_t st) {
    int64_t lo, hi;
    extremes(c, v, &lo, &hi, st);
    return lo == v && hi == v;
}
