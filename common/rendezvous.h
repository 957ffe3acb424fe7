/* rendezvous.h -- how the nodes of a several-node job find each other: node 0 writes the NCCL
 * unique id to a file every node can read (a shared filesystem) and the others wait for it.
 * The file is bound to its run, so a stale one from an earlier run is never joined:
 *   - it carries the run id (--run-id, e.g. the scheduler's job id) and node 0's wall-clock time;
 *   - node 0 removes any old file before writing (atomically: a temporary name, then rename) and
 *     removes its own once every node has joined;
 *   - a reader accepts only a file of its run: the same run id when one is given, else one written
 *     no earlier than RDV_SKEW_S before the reader started; a file describing another job shape
 *     (nodes x GPUs) is an error, not a wait;
 *   - a reader that finds no acceptable file within its timeout stops with a message.
 * Host-only: the CPU tests cover it. */
#ifndef LONGCTX_RENDEZVOUS_H
#define LONGCTX_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#define RDV_MAGIC "LCRDV01"
#define RDV_ID_BYTES 128   /* NCCL_UNIQUE_ID_BYTES */
#define RDV_SKEW_S 120.0   /* allowed clock difference between nodes and launch spread */

typedef struct {
    char magic[8];
    char run_id[64];
    int32_t nnodes, gpus;  /* the job's shape, as node 0 was told */
    double written;        /* node 0's CLOCK_REALTIME when it wrote the file */
    unsigned char id[RDV_ID_BYTES];
} RdvFile;

double rdv_wall_s(void); /* CLOCK_REALTIME in seconds */
/* node 0: remove an old file, then write this one (temporary name + rename). 0 or -1 + message. */
int rdv_publish(const char *path, const char *run_id, int nnodes, int gpus, const void *id, char *err, size_t n);
/* nodes > 0: wait up to timeout_s for the file of this run (started: the reader's rdv_wall_s() at
 * its start); 0 with the id copied out, or -1 + message (timeout, or a file of another job shape). */
int rdv_await(const char *path, const char *run_id, int nnodes, int gpus, double started, double timeout_s, void *id,
              char *err, size_t n);
void rdv_remove(const char *path);

#endif
