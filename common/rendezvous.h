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
 * The file's own permission guards it: node 0 creates PATH.partial with O_CREAT | O_EXCL | O_NOFOLLOW
 * and mode 0600 and renames it to PATH, so it never writes through a symbolic link planted at either
 * name (a symlink at either is refused by name, by node 0 and by a reader; a leftover regular
 * PATH.partial of a node 0 that died is removed) and only this user can read the id; a reader takes
 * only a regular file of its own user that group and others cannot read (O_NOFOLLOW; another file
 * there is not joined, as a stale one is not). The file form needs no job secret: a
 * shared filesystem already says who may read what. Use TCP where the nodes share no such directory.
 *
 * The TCP form only the job can join: every node holds the same job secret, from its environment
 * (rdv_secret): LONGCTX_JOB_SECRET (the secret itself) or LONGCTX_JOB_SECRET_FILE (a file holding it,
 * a regular file of this user that group and others cannot read: chmod 600); 16..1024 bytes (a
 * trailing newline is not part of it); one of the two, not both. bench/slurm_2x8.sbatch makes a fresh
 * one per job. The secret never crosses the network: each side proves it holds it with an
 * HMAC-SHA256 over both sides' fresh random nonces and the message, so a stray process that connects
 * first (the port and the run id are no secret) is refused, a hello recorded on the wire does not
 * pass again (node 0's nonce is new for every connection), nor does a recorded answer (the node's
 * nonce is new too), and a node takes an id only from a node 0 that proved the secret back; the id
 * itself crosses masked by a keystream of the same key. Several
 * nodes over TCP without a secret are refused, saying how to set one (one node, local ranks and
 * rehearsals need none).
 *
 * Node 0 listens on HOST's address only (--rendezvous tcp://HOST:PORT; a HOST that is not one of this
 * machine's addresses is refused by name before anything else, and so is a name that resolves here
 * to a loopback address the other nodes cannot reach). It serves many connections at once (poll):
 * each has RDV_TCP_CONN_S from its accept to finish, and is dropped then without delaying any other;
 * at RDV_TCP_MAX_CONN open, the oldest that has not said its hello is dropped to make room, so idle
 * connections crowd out nobody for long. A node is served once its proof checked and its whole
 * welcome was written. A node connects, and connects again after a refused or dropped connection,
 * until its timeout (--comm-timeout; 0: forever), each try bounded by RDV_TCP_TRY_S. Messages are fixed-size,
 * integers big-endian, nonces 32 random bytes:
 *   challenge (node 0 -> node k, on accept, RDV_TCP_CHALLENGE = 48 bytes)
 *     0 magic "LCRDT02\0" (protocol version 2)  8 kind u32 = 4  12 zero u32  16 node 0's nonce N0
 *   hello   (node k -> node 0, RDV_TCP_HELLO = 152 bytes)
 *     0 magic  8 kind u32 = 1  12 node rank u32  16 nnodes u32  20 gpus u32  24 run id char[64] (NUL-
 *     padded)  88 node k's nonce Nk  120 proof = HMAC(secret, "LCRDT02 hello" N0 Nk bytes 0..119)
 *   answer  (node 0 -> node k, RDV_TCP_ANSWER = 416 bytes): a head as the hello's first 88 bytes
 *     (kind 2 = welcome, 3 = refused; node rank echoed; node 0's nnodes, gpus and run id), then
 *     88 nonce u64 (node 0's, one per launch)  96 id[128] (the NCCL unique id XOR the keystream
 *     HMAC(secret, "LCRDT02 id" N0 Nk i), i = 0..3, one byte each; zero when refused)
 *     224 reason char[160] (why refused, NUL-terminated; empty in a welcome)
 *     384 proof = HMAC(secret, "LCRDT02 answer" N0 Nk bytes 0..383)
 * A run id is at most 63 characters (RDV_RUN_ID_MAX); a longer one is refused by name, never cut.
 * Node 0 refuses (and logs to stderr, escaped, then keeps serving; past RDV_TCP_LOG lines of refusals
 * and drops it only counts them, so a flood does not fill the log) a hello whose proof fails, of
 * another run id or job shape, a node rank outside 1..nnodes-1, or one already served; it stops once
 * nodes 1..nnodes-1 have each been served, or at its timeout with a message naming the node ranks
 * that never came. A node stops at once at a refusal (proved or not: it says which), at a welcome
 * that does not prove the secret or is of another run, and at something that does not speak this
 * protocol; it tries again when the connection is refused, closed or silent, and at its timeout
 * names HOST:PORT and what the last try saw. Text from the network (run ids, reasons) is printed
 * escaped (rdv_escape).
 *
 * Host-only: the CPU tests cover both (tests/test_cpu.c: the file; tests/test_rendezvous.c: TCP
 * across processes on loopback with each attack above, the file's guards, the secret, SHA-256 and
 * HMAC against their published vectors, and a node's place from Slurm's variables). */
#ifndef LONGCTX_RENDEZVOUS_H
#define LONGCTX_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#define RDV_MAGIC "LCRDV02"
#define RDV_ID_BYTES 128   /* NCCL_UNIQUE_ID_BYTES */
#define RDV_SKEW_S 120.0   /* allowed clock difference between nodes and launch spread */
#define RDV_PATH_MAX 4000  /* characters of a rendezvous file's path (PATH.partial must fit too) */

typedef struct {
    char magic[8];
    char run_id[64];
    int32_t nnodes, gpus;  /* the job's shape, as node 0 was told */
    double written;        /* node 0's CLOCK_REALTIME when it wrote the file */
    uint64_t nonce;        /* random, one per publish: which launch's file this is */
    unsigned char id[RDV_ID_BYTES];
} RdvFile;

double rdv_wall_s(void); /* CLOCK_REALTIME in seconds */
/* node 0: remove an old file, then write this one (PATH.partial, created 0600 with O_EXCL |
 * O_NOFOLLOW, then renamed) with a fresh nonce (returned in *nonce, for rdv_remove_own). 0, or -1 +
 * message (a symbolic link at PATH or PATH.partial; a run id over RDV_RUN_ID_MAX; the filesystem). */
int rdv_publish(const char *path, const char *run_id, int nnodes, int gpus, const void *id, uint64_t *nonce, char *err,
                size_t n);
/* nodes > 0: wait up to timeout_s for the file of this run (started: the reader's rdv_wall_s() at
 * its start; fresh: the file must also be that recent, for a run id from the environment); 0 with
 * the id copied out, or -1 + message (timeout, a file of another job shape, a symbolic link at PATH). */
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
 * variables, else ""; *from_env says it came from the environment (readers then also check time).
 * Not checked here: rdv_run_id_check says whether it is usable. */
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

/* ---------------------------------------------------------------- the run id, text from the network */
#define RDV_RUN_ID_MAX 63 /* characters: the file and the messages hold it NUL-terminated in 64 bytes */
/* 0 when the run id rdv_run_id(given) would return is usable (at most RDV_RUN_ID_MAX characters, no
 * control characters), else -1 + message naming where it came from (--run-id, LONGCTX_RUN_ID,
 * Slurm's variables) and what to do */
int rdv_run_id_check(const char *given, char *err, size_t n);
/* len bytes of s for a log line: printable ASCII as it is, anything else as \xNN, cut with "..." to
 * fit out[n]; out */
const char *rdv_escape(const void *s, size_t len, char *out, size_t n);

/* ---------------------------------------------------------------- the job secret */
#define RDV_SECRET_MIN 16
#define RDV_SECRET_MAX 1024
typedef struct {
    unsigned char key[RDV_SECRET_MAX];
    size_t len;
    const char *from; /* the variable it came from, for messages */
} RdvSecret;
/* The job secret from LONGCTX_JOB_SECRET or LONGCTX_JOB_SECRET_FILE (see the top): 1 with it in *s,
 * 0 when neither is set, -1 + message naming the variable (both set; the file missing, not a
 * regular file, another user's, readable by group or others; fewer than RDV_SECRET_MIN or more than
 * RDV_SECRET_MAX bytes) */
int rdv_secret(RdvSecret *s, char *err, size_t n);
void rdv_secret_wipe(RdvSecret *s);
/* what to tell a user who has no secret (a sentence, no trailing period) */
#define RDV_SECRET_HOWTO                                                                                   \
    "several nodes over TCP need a job secret that only this job's nodes hold: on every node export "     \
    "LONGCTX_JOB_SECRET_FILE=FILE, a file only you can read on a filesystem all nodes see (umask 077; "   \
    "head -c 32 /dev/urandom | base64 > FILE), or LONGCTX_JOB_SECRET=the secret itself; "                 \
    "bench/slurm_2x8.sbatch makes one per job"

/* ---------------------------------------------------------------- TCP */
#define RDV_TCP_MAGIC "LCRDT02"
#define RDV_TCP_NONCE 32
#define RDV_TCP_HEAD 88      /* the hello's head, the answer's head */
#define RDV_TCP_CHALLENGE (16 + RDV_TCP_NONCE)                          /* 48 */
#define RDV_TCP_HELLO (RDV_TCP_HEAD + RDV_TCP_NONCE + 32)                 /* 152 */
#define RDV_TCP_WHY 160      /* a refusal's reason, in the answer */
#define RDV_TCP_ANSWER (RDV_TCP_HEAD + 8 + RDV_ID_BYTES + RDV_TCP_WHY + 32) /* 416 */
#define RDV_TCP_CONN_S 10.0   /* node 0 drops a connection that has not been answered by then */
#define RDV_TCP_TRY_S 20.0    /* a node gives up one try (and connects again) after this */
#define RDV_TCP_MAX_CONN 64   /* node 0's open connections at most: then the oldest idle one goes */
#define RDV_TCP_BACKLOG 1024  /* connections the kernel queues for node 0 (capped by somaxconn) */
#define RDV_TCP_LOG 64        /* node 0's log lines of refusals and drops; past them only a count */
enum { RDV_PROOF_HELLO, RDV_PROOF_ANSWER };
/* node 0's per-connection limit (RDV_TCP_CONN_S; tests lower it to see a drop in less time) */
extern double rdv_tcp_conn_s;

typedef struct {
    char host[256];
    int port;
} RdvTcp;

/* --rendezvous: 1 for tcp://HOST:PORT (into *t), 0 for a file path, -1 + message for a malformed
 * tcp:// (missing port, port outside 1..65535, empty or over-long host, IPv6), another scheme
 * (xyz://) or an over-long path. The spec is quoted escaped and cut, so the reason always fits. */
int rdv_parse(const char *spec, RdvTcp *t, char *err, size_t n);
/* node 0: a listening socket on host's address at port (host resolved; it must be one of this
 * machine's addresses; SO_REUSEADDR: a restart binds again at once; port 0: a free one, see
 * rdv_tcp_port). The fd, or -1 + message naming the host. */
int rdv_tcp_listen(const char *host, int port, char *err, size_t n);
int rdv_tcp_port(int fd); /* the port a listening socket is bound to (-1 on error) */
/* node 0: serve the id on fd (rdv_tcp_listen's; the caller closes it) to nodes that prove key until
 * nodes 1..nnodes-1 have each been served once: 0, with this launch's fresh nonce in *nonce. -1 +
 * message at timeout_s (<= 0: forever), naming the node ranks that never came, or without a key.
 * Refusals and drops are logged to stderr. */
int rdv_tcp_serve(int fd, const RdvSecret *key, const char *run_id, int nnodes, int gpus, const void *id,
                  uint64_t *nonce, double timeout_s, char *err, size_t n);
/* node node_rank > 0: node 0's id (and nonce) from t, proving key, trying again until timeout_s (<= 0:
 * forever). 0, or -1 + message (refused; not node 0 of this job; not this protocol; timeout). */
int rdv_tcp_await(const RdvTcp *t, const RdvSecret *key, const char *run_id, int node_rank, int nnodes, int gpus,
                  double timeout_s, void *id, uint64_t *nonce, char *err, size_t n);
/* one try of rdv_tcp_await within limit_s: 0 joined; -1 + message, stop; 1 try again, err saying
 * why (nothing listens, or the connection was closed or silent) */
int rdv_tcp_try(const RdvTcp *t, const RdvSecret *key, const char *run_id, int node_rank, int nnodes, int gpus,
                double limit_s, void *id, uint64_t *nonce, char *err, size_t n);
/* the proof of a hello or an answer (which: RDV_PROOF_*): HMAC(key, label N0 Nk msg[0..len)) */
void rdv_tcp_proof(const RdvSecret *key, int which, const unsigned char *n0, const unsigned char *nk, const void *msg,
                   size_t len, unsigned char out[32]);

#endif
