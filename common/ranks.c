/* ranks.c -- one thread per rank, the fit check before any communicator, the communicator. */
#include "ranks.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gpu.h"
#include "rendezvous.h"

/* a Slurm variable as an integer in [lo, hi]: 1 (into *v), 0 when unset or empty, or STOP naming it */
static int slurm_var(const char *name, int64_t lo, int64_t hi, int64_t *v) {
    const char *s = getenv(name);
    if (!s || !s[0]) return 0;
    char *end;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (errno || *end || end == s || x < lo || x > hi)
        STOP("%s=%s: Slurm's variable must be an integer in [%lld, %lld]", name, s, (long long)lo, (long long)hi);
    *v = x;
    return 1;
}

/* this node's place in the job, once: the flags, else Slurm's variables (rdv_place), else 1 node.
 * Inside a job step (srun), the step's node count (SLURM_STEP_NUM_NODES) is the job's: the
 * allocation's (SLURM_NNODES) may hold more nodes than the step runs on. One task per node: a
 * task's SLURM_PROCID must be its node's index and the step's SLURM_NTASKS the node count, else
 * several processes would drive one node's GPUs, or a node would wait for ranks nobody runs. */
static void place(RankOpts *o) {
    if (o->placed) return;
    char err[512];
    /* --local-ranks and --rehearse are one process on one GPU, not a node of the Slurm job */
    const int slurm = !o->local_ranks && o->rehearse < 0;
    int64_t v;
    const int step_nodes = slurm && o->nnodes <= 0 && slurm_var("SLURM_STEP_NUM_NODES", 1, 65536, &v);
    if (step_nodes) o->nnodes = v;
    if (rdv_place(&o->nnodes, &o->node_rank, slurm, &o->nnodes_from, &o->node_rank_from, err, sizeof err)) STOP("%s", err);
    if (step_nodes) o->nnodes_from = "SLURM_STEP_NUM_NODES";
    if (slurm && !strcmp(o->node_rank_from, "SLURM_NODEID")) {
        if (slurm_var("SLURM_PROCID", 0, INT64_MAX, &v) && v != o->node_rank)
            STOP("Slurm's task %lld (SLURM_PROCID) runs on node %lld (SLURM_NODEID): this program is one process per "
                 "node, driving each of its GPUs; launch it with srun --ntasks-per-node=1", (long long)v,
                 (long long)o->node_rank);
        const int in_step = getenv("SLURM_STEP_ID") || getenv("SLURM_STEP_NUM_NODES"); /* srun's, not the batch script's */
        if (in_step && slurm_var("SLURM_NTASKS", 1, INT64_MAX, &v) && v != o->nnodes)
            STOP("Slurm's step runs %lld task(s) (SLURM_NTASKS) on %lld node(s) (%s): this program is one process per "
                 "node, driving each of its GPUs; launch it with srun --ntasks-per-node=1", (long long)v,
                 (long long)o->nnodes, o->nnodes_from);
    }
    if (!o->gpus_from && o->gpus > 0) o->gpus_from = "--gpus";
    o->placed = 1;
}

/* --rendezvous, as node `node_rank` will use it, refused now (before any GPU call) when it cannot
 * work: tcp://HOST:PORT whose HOST does not resolve here (a transient failure, EAI_AGAIN, is left to
 * the rendezvous, which retries); node 0's FILE that is a directory, or whose directory is missing
 * or not writable (node 0 writes it; the others wait for it to appear, so theirs is not checked) */
static void check_rendezvous(const char *spec, int64_t node_rank) {
    RdvTcp tcp;
    char err[512];
    const int is_tcp = rdv_parse(spec, &tcp, err, sizeof err);
    if (is_tcp < 0) STOP("--rendezvous %s", err);
    if (is_tcp) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_INET; /* as the rendezvous dials it */
        hints.ai_socktype = SOCK_STREAM;
        const int g = getaddrinfo(tcp.host, NULL, &hints, &res);
        if (res) freeaddrinfo(res);
        if (g && g != EAI_AGAIN && g != EAI_SYSTEM)
            STOP("--rendezvous %s: the host \"%s\" does not resolve (%s): give node 0's address as every node reaches it",
                 spec, tcp.host, gai_strerror(g));
        return;
    }
    if (node_rank != 0) return;
    struct stat sb;
    if (!stat(spec, &sb) && S_ISDIR(sb.st_mode))
        STOP("--rendezvous %s is a directory: give a file's path (node 0 writes it, every node reads it)", spec);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", spec);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0; /* "/name" */
    else *slash = 0;
    if (stat(dir, &sb))
        STOP("--rendezvous %s: its directory %s %s: node 0 writes the file there, on a filesystem every node reads",
             spec, dir, errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(sb.st_mode)) STOP("--rendezvous %s: %s is not a directory", spec, dir);
    if (access(dir, W_OK | X_OK))
        STOP("--rendezvous %s: node 0 cannot write in %s (%s)", spec, dir, strerror(errno));
}

/* Several nodes over TCP, before the GPU is touched: every node holds the job secret, and node 0's
 * HOST is this machine with PORT free (a trial listen), so neither is found out after a model loads */
static void check_job_secret(const RankOpts *o) {
    RdvTcp t;
    char err[512];
    if (o->local_ranks > 0 || o->rehearse >= 0 || o->nnodes < 2 || !o->rendezvous ||
        rdv_parse(o->rendezvous, &t, err, sizeof err) != 1)
        return;
    RdvSecret key;
    const int got = rdv_secret(&key, err, sizeof err);
    rdv_secret_wipe(&key);
    if (got < 0) STOP("%s", err);
    if (!got) STOP("%s", RDV_SECRET_HOWTO);
    if (o->node_rank != 0) return;
    const int fd = rdv_tcp_listen(t.host, t.port, err, sizeof err);
    if (fd < 0) STOP("node 0: %s", err);
    close(fd);
}

void ranks_check_opts(RankOpts *o, int saves) {
    place(o);
    if (o->local_ranks && (o->gpus || o->nnodes > 1 || o->rehearse >= 0))
        STOP("--local-ranks runs on one GPU: no --gpus, --nnodes or --rehearse with it");
    if (o->node_rank >= o->nnodes) /* both placed: a given --node-rank past a given or Slurm's node count */
        STOP("--node-rank %lld must be in 0..%lld (the job has %lld node(s), from %s)", (long long)o->node_rank,
             (long long)o->nnodes - 1, (long long)o->nnodes, o->nnodes_from);
    if (o->rehearse >= 0 && o->gpus < 1) STOP("--rehearse R needs the job it rehearses: --gpus N (and --nnodes M)");
    if (o->rehearse >= 0 && o->rehearse >= o->gpus * o->nnodes)
        STOP("--rehearse %lld: the job has %lld ranks", (long long)o->rehearse, (long long)(o->gpus * o->nnodes));
    if (o->rehearse >= 0 && saves)
        STOP("--rehearse computes one rank of the job with values that are not the job's: no --save, --resume or "
            "--dump-grads");
    if (o->comm.timeout_s < 0) STOP("--comm-timeout must be >= 0 (0: wait forever)");
    /* a process runs one thread per GPU of its node (a rehearsal runs one, and may plan larger nodes) */
    if (o->rehearse < 0 && o->gpus > COMM_MAX_HERE)
        STOP("--gpus %lld: at most %d GPUs a node, one rank thread each in one process (--rehearse R plans a "
             "rank of larger nodes)", (long long)o->gpus, COMM_MAX_HERE);
    const int nodes = o->nnodes > 1 && o->rehearse < 0 && !o->local_ranks; /* processes that meet */
    if (nodes && !o->rendezvous)
        STOP("%lld nodes (from %s) need --rendezvous tcp://HOST:PORT (node 0's address) or FILE (a path every node "
             "reads)", (long long)o->nnodes, o->nnodes_from);
    char err[512];
    if (o->rendezvous) {
        RdvTcp tcp;
        if (rdv_parse(o->rendezvous, &tcp, err, sizeof err) < 0) STOP("--rendezvous %s", err);
        if (nodes) check_rendezvous(o->rendezvous, o->node_rank);
    }
    /* a run id binds the rendezvous whole: one too long is refused, not cut (LONGCTX_RUN_ID and
     * Slurm's only matter between nodes) */
    if (((o->comm.run_id && o->comm.run_id[0]) || nodes) && rdv_run_id_check(o->comm.run_id, err, sizeof err))
        STOP("%s", err);
    check_job_secret(o); /* a dry-run too: it refuses what the run would */
}


const char *ranks_place_line(const RankOpts *o, char *buf, size_t n) {
    buf[0] = 0;
    /* a value from the environment: neither a flag ("--...") nor the default */
    const int env = (o->nnodes_from && o->nnodes_from[0] != '-' && strcmp(o->nnodes_from, "default")) ||
                    (o->node_rank_from && o->node_rank_from[0] != '-' && strcmp(o->node_rank_from, "default"));
    if (o->local_ranks > 0 || o->rehearse >= 0 || (o->nnodes <= 1 && !env)) return buf;
    size_t at = (size_t)snprintf(buf, n, "node %lld of %lld (%s, %s), %lld GPU%s a node (%s)", (long long)o->node_rank,
                                 (long long)o->nnodes, o->node_rank_from ? o->node_rank_from : "--node-rank",
                                 o->nnodes_from ? o->nnodes_from : "--nnodes", (long long)o->gpus,
                                 o->gpus == 1 ? "" : "s", o->gpus_from ? o->gpus_from : "--gpus");
    if (o->nnodes > 1 && at < n) { /* the run id and the rendezvous matter only between nodes */
        int from_env;
        const char *id = rdv_run_id(o->comm.run_id, &from_env), *from = rdv_run_id_from(o->comm.run_id);
        at += (size_t)snprintf(buf + at, n - at, ", run id %s (%s)", id[0] ? id : "none",
                               from[0] ? from : "no --run-id, LONGCTX_RUN_ID or SLURM_JOB_ID");
        if (at < n)
            snprintf(buf + at, n - at, ", rendezvous %s (%s)", o->rendezvous ? o->rendezvous : "none",
                     o->rendezvous ? "--rendezvous" : "give --rendezvous tcp://HOST:PORT");
    }
    return buf;
}

static int cuda_device_count(void) {
    int n = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    return n;
}
int (*ranks_device_count)(void) = cuda_device_count;

/* --gpus 0 means every visible GPU: resolved here once, into o->gpus, so that every later count
 * (ranks here, ranks per node: the host plan divides the node's memory by it) reads one number */
int ranks_in_job(RankOpts *o) {
    place(o);
    if (o->local_ranks > 0) return (int)o->local_ranks;
    if (o->gpus <= 0) o->gpus = ranks_device_count(), o->gpus_from = "all visible"; /* a dry-run's: plan_machine */
    else if (!o->gpus_from) o->gpus_from = "planned"; /* set since the options were read (stage 5's advice) */
    if (o->gpus <= 0) STOP("no GPU visible (--dry-run plans without one)");
    if (o->rehearse < 0 && o->gpus > COMM_MAX_HERE) /* --gpus 0 on a node of more: ranks_check_opts saw the others */
        STOP("%lld GPUs %s: at most %d GPUs a node, one rank thread each in one process; choose them with --gpus N "
             "or CUDA_VISIBLE_DEVICES", (long long)o->gpus, o->gpus_from && !strcmp(o->gpus_from, "all visible") ?
             "visible" : "planned", COMM_MAX_HERE);
    char line[1024];
    if (ranks_place_line(o, line, sizeof line)[0]) printf("%s\n", line); /* the run's first line: where it stands */
    return (int)(o->gpus * o->nnodes);
}

static int gpus_per_node(const RankOpts *o) {
    if (o->gpus <= 0) DIE("internal: ranks_in_job() resolves --gpus before the ranks are counted");
    return (int)o->gpus;
}

int ranks_here(const RankOpts *o) {
    if (o->local_ranks > 0) return (int)o->local_ranks;
    if (o->rehearse >= 0) return 1;
    return gpus_per_node(o);
}

typedef struct {
    const RankOpts *o;
    const MemPlan *mp;
    double gpu_gib;
    CommWorld *world;
    pthread_barrier_t *bar;
    char (*why)[512];          /* [here] the fit check's reason, empty when it fits */
    int here;
    void (*fn)(const Rank *, void *);
    void *arg;
    int local;
} Thread;

/* NCCL has made its connections (comm_warm_up measured them): the rest of the plan must still fit
 * beside them, else stop now, before the arenas, rather than inside NCCL in the first step */
static void nccl_fits(const Thread *t, int64_t nccl, int device) {
    if (!nccl) return;
    const double G = 1 << 30;
    const int64_t planned = ranks_nccl_estimate(t->o, (int)(t->o->gpus * t->o->nnodes)),
                  rest = memplan_peak(t->mp) - planned;
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (longctx_rank == 0)
        printf("NCCL holds %.2f GiB on GPU %d after every collective ran once (planned %.2f GiB)\n", nccl / G, device,
               planned / G);
    if (rest > (int64_t)free_b || (t->gpu_gib > 0 && rest + nccl > (int64_t)(t->gpu_gib * G)))
        DIE("GPU %d: NCCL took %.2f GiB (the plan allowed %.2f); the plan's other %.2f GiB no longer fit (%.2f GiB free%s): "
            "shorten --seq, keep fewer layers' attention, or set NCCL_NVLS_ENABLE=0 / a smaller NCCL_BUFFSIZE", device,
            nccl / G, planned / G, rest / G, free_b / G, t->gpu_gib > 0 ? ", within --gpu-gib" : "");
}

static void *rank_thread(void *p) {
    const Thread *t = p;
    const RankOpts *o = t->o;
    const int shared = o->local_ranks > 0 || o->rehearse >= 0; /* everything on GPU 0 */
    Rank r = {t->local, shared ? 0 : t->local, t->here, NULL};
    longctx_rank = o->rehearse >= 0 ? (int)o->rehearse : (int)o->node_rank * t->here + t->local;
    CUDA_CHECK(cudaSetDevice(r.device));
    /* before anything is pinned or a host thread started: this GPU's side of the node (ranks sharing
     * GPU 0 -- local ranks, the rehearsal -- stay unbound: they would crowd one node's cores) */
    if (!shared) gpu_bind_numa(r.device, o->node_rank == 0);
    /* before any communicator: NCCL's own buffers must not be what pushes a rank over */
    char name[64];
    snprintf(name, sizeof name, "GPU %d", r.device);
    if (!shared || t->local == 0) /* one check per GPU, of every rank it holds; the host holds this process's */
        plan_fits(t->mp, o->local_ranks > 0 ? t->here : 1, t->here, t->gpu_gib, name, t->why[t->local], sizeof t->why[0]);
    pthread_barrier_wait(t->bar);
    for (int q = 0; q < t->here; q++)
        if (t->why[q][0]) {
            if (t->local == 0) {
                longctx_rank = o->rehearse >= 0 ? (int)o->rehearse : (int)o->node_rank * t->here + q;
                STOP("%s -- no rank started", t->why[q]);
            }
            pause(); /* rank 0's exit ends the process */
        }
    r.comm = comm_rank(t->world, t->local);
    if (!shared) nccl_fits(t, comm_warm_up(r.comm, 0), r.device);
    t->fn(&r, t->arg);
    comm_rank_free(r.comm);
    return NULL;
}

int64_t ranks_nccl_estimate(const RankOpts *o, int P) {
    return o->local_ranks > 0 ? 0 : nccl_buffers_estimate(P, o->nnodes); /* local ranks: no NCCL at all */
}

int ranks_per_node(const RankOpts *o) {
    if (o->local_ranks > 0) return (int)o->local_ranks;
    return gpus_per_node(o);
}

void ranks_run(const RankOpts *o, const MemPlan *mp, double gpu_gib, void (*fn)(const Rank *r, void *arg), void *arg) {
    ranks_need_gpu();
    const int here = ranks_here(o);
    CommWorld *world;
    if (o->local_ranks > 0) {
        CUDA_CHECK(cudaSetDevice(0));
        world = comm_world_local(here, &o->comm);
    } else if (o->rehearse >= 0) {
        CUDA_CHECK(cudaSetDevice(0));
        world = comm_world_rehearse((int)o->gpus, (int)o->nnodes, (int)o->rehearse, &o->comm);
        longctx_print_rank = (int)o->rehearse; /* the one rank there is reports */
    } else
        world = comm_world_nccl(here, (int)o->nnodes, (int)o->node_rank, o->rendezvous, &o->comm);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)here);
    char (*why)[512] = xcalloc((size_t)here, sizeof *why);
    pthread_t *th = xcalloc((size_t)here, sizeof *th);
    Thread *args = xcalloc((size_t)here, sizeof *args);
    for (int r = 0; r < here; r++) {
        args[r] = (Thread){o, mp, gpu_gib, world, &bar, why, here, fn, arg, r};
        if (pthread_create(&th[r], NULL, rank_thread, &args[r])) DIE("cannot start rank thread %d", r);
    }
    for (int r = 0; r < here; r++) pthread_join(th[r], NULL);
    comm_world_free(world);
    pthread_barrier_destroy(&bar);
    free(th); free(args); free(why);
}

/* ---------------------------------------------------------------- the job */
Job job_plan(RankOpts *o, int data_parallel) {
    Job j = JOB_ONE;
    j.P = ranks_in_job(o);
    j.dp = data_parallel ? j.P : 1;
    j.share = o->local_ranks > 0 ? j.P : 1;
    j.here = ranks_here(o);
    return j;
}

void job_join(Job *j, const Rank *r) {
    j->comm = r->comm;
    j->rank = r->comm ? comm_rank_id(r->comm) : 0;
    j->here = r->here;
}

void ranks_need_gpu(void) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) return;
    (void)cudaGetLastError();
    STOP("no usable GPU: %s (--dry-run plans without one)", cuda_absent_why(e));
}

void ranks_run_one(const MemPlan *mp, double gpu_gib, void (*fn)(const Rank *r, void *arg), void *arg) {
    ranks_need_gpu();
    CUDA_CHECK(cudaSetDevice(0));
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    char why[512];
    if (plan_fits(mp, 1, 1, gpu_gib, p.name, why, sizeof why)) STOP("%s", why);
    const Rank r = {0, 0, 1, NULL};
    fn(&r, arg);
}
