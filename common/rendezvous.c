/* rendezvous.c -- the several-node rendezvous file (rendezvous.h). */
#include "rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double rdv_wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t fresh_nonce(void) {
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&v, sizeof v, 1, f) != 1) v = 0;
    if (f) fclose(f);
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* never 0, and distinct even without /dev/urandom */
    return (v ^ ((uint64_t)t.tv_nsec << 20) ^ (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 40)) | 1;
}

int rdv_publish(const char *path, const char *run_id, int nnodes, int gpus, const void *id, uint64_t *nonce, char *err,
                size_t n) {
    RdvFile r;
    memset(&r, 0, sizeof r);
    r.nonce = *nonce = fresh_nonce();
    memcpy(r.magic, RDV_MAGIC, sizeof r.magic);
    snprintf(r.run_id, sizeof r.run_id, "%s", run_id ? run_id : "");
    r.nnodes = nnodes;
    r.gpus = gpus;
    r.written = rdv_wall_s();
    memcpy(r.id, id, RDV_ID_BYTES);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.partial", path);
    if (unlink(path) && errno != ENOENT) {
        snprintf(err, n, "cannot remove the old rendezvous file %s: %s", path, strerror(errno));
        return -1;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(&r, sizeof r, 1, f) != 1 || fclose(f)) {
        snprintf(err, n, "cannot write rendezvous file %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (rename(tmp, path)) {
        snprintf(err, n, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        return -1;
    }
    return 0;
}

/* 1: the file is this run's; 0: not (yet); -1: an error worth stopping for */
static int check(const RdvFile *r, const char *run_id, int fresh, int nnodes, int gpus, double started, char *err,
                 size_t n) {
    if (memcmp(r->magic, RDV_MAGIC, sizeof r->magic)) return 0; /* not ours (or another version): wait */
    const int have_id = run_id && run_id[0];
    if (have_id && strncmp(r->run_id, run_id, sizeof r->run_id)) return 0;      /* another run's file */
    if ((!have_id || fresh) && r->written < started - RDV_SKEW_S) return 0;       /* written before we started */
    if (r->nnodes != nnodes || r->gpus != gpus) {
        snprintf(err, n, "the rendezvous file describes a job of %d node(s) x %d GPU(s); this node was given --nnodes %d "
                 "--gpus %d", r->nnodes, r->gpus, nnodes, gpus);
        return -1;
    }
    return 1;
}

int rdv_await(const char *path, const char *run_id, int fresh, int nnodes, int gpus, double started, double timeout_s,
              void *id, char *err, size_t n) {
    const double t0 = rdv_wall_s();
    int seen_stale = 0;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            RdvFile r;
            const size_t got = fread(&r, sizeof r, 1, f);
            fclose(f);
            if (got == 1) {
                const int ok = check(&r, run_id, fresh, nnodes, gpus, started, err, n);
                if (ok < 0) return -1;
                if (ok) { memcpy(id, r.id, RDV_ID_BYTES); return 0; }
                seen_stale = 1;
            }
        }
        if (rdv_wall_s() - t0 >= timeout_s) {
            snprintf(err, n, "no rendezvous file of this run at %s after %.0f s%s: is node 0 running%s?", path, timeout_s,
                     seen_stale ? " (a file from another run is there)" : "",
                     run_id && run_id[0] ? " with the same --run-id" : "");
            return -1;
        }
        usleep(200000);
    }
}

void rdv_remove(const char *path) { unlink(path); }

void rdv_remove_own(const char *path, uint64_t nonce) {
    RdvFile r;
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    const ssize_t got = read(fd, &r, sizeof r);
    close(fd);
    if (got == (ssize_t)sizeof r && !memcmp(r.magic, RDV_MAGIC, sizeof r.magic) && r.nonce == nonce) unlink(path);
}

static const char *sig_path;
static uint64_t sig_nonce;
static const int SIGS[3] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction sig_old[3];
static int sig_set[3];
static void on_signal(int sig) {
    if (sig_path) rdv_remove_own(sig_path, sig_nonce);
    for (int i = 0; i < 3; i++) /* the action the process had, then the signal again */
        if (SIGS[i] == sig && sig_set[i]) sigaction(sig, &sig_old[i], NULL);
    raise(sig);
}
void rdv_remove_on_signal(const char *path, uint64_t nonce) {
    sig_path = path;
    sig_nonce = nonce;
    for (int i = 0; i < 3; i++) {
        struct sigaction now;
        if (sigaction(SIGS[i], NULL, &now) || now.sa_handler == SIG_IGN) continue; /* nohup, `cmd &`: stay ignored */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sig_set[i] = !sigaction(SIGS[i], &sa, &sig_old[i]);
    }
}
void rdv_signals_restore(void) {
    for (int i = 0; i < 3; i++)
        if (sig_set[i]) sigaction(SIGS[i], &sig_old[i], NULL), sig_set[i] = 0;
    sig_path = NULL;
}

const char *rdv_run_id(const char *given, int *from_env) {
    static char id[64];
    *from_env = 0;
    if (given && given[0]) return given;
    const char *env = getenv("LONGCTX_RUN_ID"), *job = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID"),
               *again = getenv("SLURM_RESTART_COUNT");
    if (env && env[0]) snprintf(id, sizeof id, "%s", env);
    else if (job && job[0])
        snprintf(id, sizeof id, "slurm-%s%s%s%s%s", job, st && st[0] ? "." : "", st ? st : "", again && again[0] ? "r" : "",
                 again ? again : "");
    else id[0] = 0;
    *from_env = id[0] != 0;
    return id;
}
