/* rendezvous.h -- how the nodes of a several-node job find each other: node 0 writes the NCCL
 * unique id to a file every node can read (a shared filesystem) and the others wait for it.
 * The file is bound to its run, so a stale one from an earlier run is never joined:
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
 * Host-only: the CPU tests cover it. */
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

#endif
