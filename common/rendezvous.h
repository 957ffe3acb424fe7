/* rendezvous.h -- how the nodes of a several-node job find each other: node 0 makes the NCCL unique
 * id and hands it to the others, either over TCP (--rendezvous tcp://HOST:PORT, node 0's address) or
 * through a file every node can read (--rendezvous PATH, a shared filesystem).
 *
 * The file form: the others wait for the file. It is bound to its run, so a stale one from an
 * earlier run is never joined:
 *   - it carries the run id (--run-id; without it the scheduler's own: LONGCTX_RUN_ID, or Slurm's
 *     SLURM_JOB_ID.SLURM_STEP_ID, which every node of one launch shares) and node 0's wall-clock time;
 *   - node 0 removes any old file before writing (atomically: a temporary name, then rename) and
 *     removes its own once every node has joined, and on every exit path before that (a fatal
 *     error anywhere, SIGINT, SIGTERM, SIGHUP): the file also carries a random nonce of this
 *     launch, and node 0 removes a file only if it still holds its own nonce, so a dying old
 *     launch never removes a newer launch's file;
 *   - a reader accepts only a file of its run: the same run id when one is given (and, for an id
 *     taken from the environment, which a requeued job keeps, also written no earlier than
 *     RDV_SKEW_S before the reader started), else one written no earlier than that; a file describing another job shape
 *     (nodes x GPUs) is an error, not a wait;
 *   - a reader that finds no acceptable file within its timeout stops with a message.
 *
 * The TCP form: node 0 listens on PORT (every interface) and serves each other node once; a node
 * connects (retrying until its timeout: node 0 may start later) and says hello; node 0 answers with
 * the id or a refusal. Both messages are fixed-size, integers big-endian:
 *   hello   (node k -> node 0, RDV_TCP_HEAD = 88 bytes)
 *     0 magic "LCRDT01\0" (protocol version 1)  8 kind u32 = 1  12 node rank u32  16 nnodes u32
 *     20 gpus u32  24 run id char[64] (NUL-padded)
 *   answer  (node 0 -> node k, RDV_TCP_ANSWER = 384 bytes): the same 88-byte head (kind 2 = welcome,
 *     3 = refused; node rank echoed; node 0's nnodes, gpus and run id), then
 *     88 nonce u64 (node 0's, one per launch)  96 id[128] (the NCCL unique id; zero when refused)
 *     224 reason char[160] (why refused, NUL-terminated; empty in a welcome)
 * A run id is compared in its first 63 characters (as the file's is).
 * Node 0 refuses (and logs to stderr, then keeps serving) a hello of another run id or job shape, a
 * node rank outside 1..nnodes-1, or one already served; a connection that does not say hello within
 * RDV_TCP_HELLO_S is dropped. It stops once nodes 1..nnodes-1 have each been served, or at its
 * timeout with a message naming the node ranks that never came. A node stops at once when what
 * answers is not a welcome of its run (a refusal, a server of another run, something that does not
 * speak the protocol or closes at once; one that accepts and stays silent, after RDV_TCP_ANSWER_S or
 * its timeout), and at its timeout when nothing answers, naming HOST:PORT.
 *
 * Host-only: the CPU tests cover both (tests/test_cpu.c: the file; tests/test_rendezvous.c: TCP
 * across processes on loopback, and a node's place from Slurm's variables). */
#ifndef LONGCTX_RENDEZVOUS_H
#define LONGCTX_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#define RDV_MAGIC "LCRDV02"
#define RDV_ID_BYTES 128   /* NCCL_UNIQUE_ID_BYTES */
#define RDV_SKEW_S 120.0   /* allowed clock difference between nodes and launch spread */

typedef struct {
    char magic[8];
    char run_id[64];
    int32_t nnodes, gpus;  /* the job's shape, as node 0 was told */
    double written;        /* node 0's CLOCK_REALTIME when it wrote the file */
    uint64_t nonce;        /* random, one per publish: which launch's file this is */
    unsigned char id[RDV_ID_BYTES];
} RdvFile;

double rdv_wall_s(void); /* CLOCK_REALTIME in seconds */
/* node 0: remove an old file, then write this one (temporary name + rename) with a fresh nonce
 * (returned in *nonce, for rdv_remove_own). 0 or -1 + message. */
int rdv_publish(const char *path, const char *run_id, int nnodes, int gpus, const void *id, uint64_t *nonce, char *err,
                size_t n);
/* nodes > 0: wait up to timeout_s for the file of this run (started: the reader's rdv_wall_s() at
 * its start; fresh: the file must also be that recent, for a run id from the environment); 0 with
 * the id copied out, or -1 + message (timeout, or a file of another job shape). */
int rdv_await(const char *path, const char *run_id, int fresh, int nnodes, int gpus, double started, double timeout_s,
              void *id, char *err, size_t n);
void rdv_remove(const char *path);
/* remove path only if it is the file published with this nonce (async-signal-safe: open, read, unlink) */
void rdv_remove_own(const char *path, uint64_t nonce);
/* until rdv_signals_restore: SIGINT, SIGTERM and SIGHUP remove path (if still ours), then act as they
 * did before (a signal the process ignores, e.g. under nohup, stays ignored) */
void rdv_remove_on_signal(const char *path, uint64_t nonce);
void rdv_signals_restore(void);
/* the run id: given (--run-id), else LONGCTX_RUN_ID, else slurm-JOB[.STEP][rRESTARTS] from Slurm's
 * variables, else ""; *from_env says it came from the environment (readers then also check time) */
const char *rdv_run_id(const char *given, int *from_env);
/* where rdv_run_id(given) came from, for the log: "--run-id", "LONGCTX_RUN_ID", "SLURM_JOB_ID,
 * SLURM_STEP_ID" (and ", SLURM_RESTART_COUNT" when set), or "" (none) */
const char *rdv_run_id_from(const char *given);

/* A node's place in a several-node job: *nnodes and *node_rank as given on the command line when
 * they are (> 0 and >= 0: the flags win), else, with env set, Slurm's SLURM_NNODES (or
 * SLURM_JOB_NUM_NODES) and SLURM_NODEID, else 1 and 0. A variable's value is checked as the flag's
 * would be (a decimal integer; nodes in 1..65536, node id in 0..nnodes-1) and refused naming the
 * variable; so is Slurm running more tasks than nodes (this program is one process per node).
 * *nnodes_from, *node_rank_from: "--nnodes" / "--node-rank", the variable's name, or "default".
 * 0, or -1 + message. */
int rdv_place(int64_t *nnodes, int64_t *node_rank, int env, const char **nnodes_from, const char **node_rank_from,
              char *err, size_t n);

/* ---------------------------------------------------------------- TCP */
#define RDV_TCP_MAGIC "LCRDT01"
#define RDV_TCP_HEAD 88      /* the hello; the answer's head */
#define RDV_TCP_WHY 160      /* a refusal's reason, in the answer */
#define RDV_TCP_ANSWER (RDV_TCP_HEAD + 8 + RDV_ID_BYTES + RDV_TCP_WHY) /* 384 */
#define RDV_TCP_HELLO_S 5.0   /* node 0 drops a connection that has not said hello by then */
#define RDV_TCP_ANSWER_S 30.0 /* a node gives up on a server that accepted but does not answer */

typedef struct {
    char host[256];
    int port;
} RdvTcp;

/* --rendezvous: 1 for tcp://HOST:PORT (into *t), 0 for a file path, -1 + message for a malformed
 * tcp:// (missing port, port outside 1..65535, empty host, IPv6) or another scheme (xyz://) */
int rdv_parse(const char *spec, RdvTcp *t, char *err, size_t n);
/* node 0: a listening socket on every interface at port (SO_REUSEADDR: a restart binds again at
 * once; port 0: a free one, see rdv_tcp_port). The fd, or -1 + message. */
int rdv_tcp_listen(int port, char *err, size_t n);
int rdv_tcp_port(int fd); /* the port a listening socket is bound to (-1 on error) */
/* node 0: serve the id on fd (rdv_tcp_listen's; the caller closes it) until nodes 1..nnodes-1 have
 * each been served once: 0, with this launch's fresh nonce in *nonce. -1 + message at timeout_s
 * (<= 0: forever), naming the node ranks that never came. Refusals are logged to stderr. */
int rdv_tcp_serve(int fd, const char *run_id, int nnodes, int gpus, const void *id, uint64_t *nonce, double timeout_s,
                  char *err, size_t n);
/* node node_rank > 0: node 0's id (and nonce) from t, retrying a connection until timeout_s (<= 0:
 * forever). 0, or -1 + message (refused; a server of another run or not of this protocol; timeout). */
int rdv_tcp_await(const RdvTcp *t, const char *run_id, int node_rank, int nnodes, int gpus, double timeout_s, void *id,
                  uint64_t *nonce, char *err, size_t n);

#endif
