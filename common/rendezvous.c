/* rendezvous.c -- the several-node rendezvous: the file, TCP, a node's place (rendezvous.h). */
#include "rendezvous.h"

#include "sha256.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* n random bytes from the kernel: 0, or -1 when none can be had (a nonce must not be guessable) */
static int random_bytes(void *p, size_t n) {
    unsigned char *q = p;
    while (n) {
        const ssize_t r = getrandom(q, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        q += r, n -= (size_t)r;
    }
    return 0;
}

/* -1 + message when a symbolic link is at path: node 0 never writes through one (a planted link
 * would have it overwrite whatever the link names, with this user's rights) */
static int refuse_symlink(const char *path, char *err, size_t n) {
    struct stat st;
    if (lstat(path, &st) || !S_ISLNK(st.st_mode)) return 0;
    snprintf(err, n, "the rendezvous path %s is a symbolic link, which node 0 never writes through (someone may have "
             "planted it): remove it, or give --rendezvous a path in a directory only you can write", path);
    return -1;
}

/* path gone (absent is fine): 0, or -1 + message */
static int remove_old(const char *path, char *err, size_t n) {
    if (!unlink(path) || errno == ENOENT) return 0;
    snprintf(err, n, "cannot remove the old rendezvous file %s: %s (--rendezvous: a path this user may replace)", path,
             strerror(errno));
    return -1;
}

/* the file at tmp, created anew for this user alone (O_EXCL: never an existing file or a link) */
static int write_new(const char *tmp, const RdvFile *r, char *err, size_t n) {
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, n, "cannot create the rendezvous file %s: %s%s", tmp, strerror(errno),
                 errno == EEXIST ? " (something was created there meanwhile: another node 0 on the same --rendezvous?)" : "");
        return -1;
    }
    /* exactly 0600 whatever the umask: the readers check that group and others cannot read it */
    const int ok = !fchmod(fd, 0600) && write(fd, r, sizeof *r) == (ssize_t)sizeof *r;
    const int e = errno;
    if (close(fd) || !ok) {
        snprintf(err, n, "cannot write the rendezvous file %s: %s", tmp, strerror(ok ? errno : e));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int rdv_publish(const char *path, const char *run_id, int nnodes, int gpus, const void *id, uint64_t *nonce, char *err,
                size_t n) {
    if (!run_id) run_id = "";
    if (strlen(run_id) > RDV_RUN_ID_MAX || strlen(path) > RDV_PATH_MAX) {
        snprintf(err, n, "the run id (at most %d characters) or the rendezvous path (at most %d) is too long: %zu, %zu",
                 RDV_RUN_ID_MAX, RDV_PATH_MAX, strlen(run_id), strlen(path));
        return -1;
    }
    RdvFile r;
    memset(&r, 0, sizeof r);
    r.nonce = *nonce = fresh_nonce();
    memcpy(r.magic, RDV_MAGIC, sizeof r.magic);
    memcpy(r.run_id, run_id, strlen(run_id));
    r.nnodes = nnodes;
    r.gpus = gpus;
    r.written = rdv_wall_s();
    memcpy(r.id, id, RDV_ID_BYTES);
    char tmp[RDV_PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.partial", path);
    /* a regular PATH.partial is a node 0's that died before its rename: removed like an old file */
    if (refuse_symlink(path, err, n) || refuse_symlink(tmp, err, n) || remove_old(path, err, n) ||
        remove_old(tmp, err, n) || write_new(tmp, &r, err, n))
        return -1;
    if (rename(tmp, path)) {
        snprintf(err, n, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
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

/* the file at path into *r: 1 read, 0 not there or not to be read (*note says why when it is there),
 * -1 + message for a symbolic link (never followed: it could name anything) */
static int read_file(const char *path, RdvFile *r, const char **note, char *err, size_t n) {
    /* O_NONBLOCK: a FIFO planted at path must not block the open */
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ELOOP) {
        snprintf(err, n, "the rendezvous path %s is a symbolic link, which a node never reads through (node 0 writes a "
                 "file there): remove it", path);
        return -1;
    }
    if (fd < 0) return 0;
    struct stat st;
    int ok = !fstat(fd, &st);
    if (ok && !S_ISREG(st.st_mode)) ok = 0, *note = "something there is not a regular file";
    else if (ok && st.st_uid != geteuid()) ok = 0, *note = "the file there is another user's";
    else if (ok && (st.st_mode & 077)) ok = 0, *note = "the file there can be read by group or others";
    ok = ok && read(fd, r, sizeof *r) == (ssize_t)sizeof *r;
    close(fd);
    return ok;
}

int rdv_await(const char *path, const char *run_id, int fresh, int nnodes, int gpus, double started, double timeout_s,
              void *id, char *err, size_t n) {
    if (run_id && strlen(run_id) > RDV_RUN_ID_MAX) {
        snprintf(err, n, "the run id is %zu characters, at most %d: give a shorter --run-id", strlen(run_id), RDV_RUN_ID_MAX);
        return -1;
    }
    const double t0 = rdv_wall_s();
    const char *note = NULL; /* why a file there was not read: not this user's own 0600 file */
    int seen_stale = 0;
    for (;;) {
        RdvFile r;
        const int got = read_file(path, &r, &note, err, n);
        if (got < 0) return -1;
        if (got) {
            const int ok = check(&r, run_id, fresh, nnodes, gpus, started, err, n);
            if (ok < 0) return -1;
            if (ok) { memcpy(id, r.id, RDV_ID_BYTES); return 0; }
            seen_stale = 1;
        }
        if (rdv_wall_s() - t0 >= timeout_s) {
            char why[160] = "";
            if (note) snprintf(why, sizeof why, " (not joined: %s; node 0's is this user's, mode 0600)", note);
            snprintf(err, n, "no rendezvous file of this run at %s after %.0f s%s%s: is node 0 running%s?", path, timeout_s,
                     seen_stale ? " (a file from another run is there)" : "", why,
                     run_id && run_id[0] ? " with the same --run-id" : "");
            return -1;
        }
        usleep(200000);
    }
}

void rdv_remove(const char *path) { unlink(path); }

void rdv_remove_own(const char *path, uint64_t nonce) {
    RdvFile r;
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
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

/* the run id into id[n] (cut to fit; the checks use the length returned, the whole one) */
static size_t run_id_of(const char *given, char *id, size_t n, int *from_env) {
    *from_env = 0;
    if (given && given[0]) return (size_t)snprintf(id, n, "%s", given);
    const char *env = getenv("LONGCTX_RUN_ID"), *job = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID"),
               *again = getenv("SLURM_RESTART_COUNT");
    int len = 0;
    if (env && env[0]) len = snprintf(id, n, "%s", env);
    else if (job && job[0])
        len = snprintf(id, n, "slurm-%s%s%s%s%s", job, st && st[0] ? "." : "", st ? st : "", again && again[0] ? "r" : "",
                       again ? again : "");
    else id[0] = 0;
    *from_env = len > 0;
    return len > 0 ? (size_t)len : 0;
}

const char *rdv_run_id(const char *given, int *from_env) {
    if (given && given[0]) { *from_env = 0; return given; }
    static char id[256]; /* more than RDV_RUN_ID_MAX: an over-long id is refused, not quietly cut */
    run_id_of(given, id, sizeof id, from_env);
    return id;
}

int rdv_run_id_check(const char *given, char *err, size_t n) {
    char id[80], shown[64];
    int env;
    const size_t len = run_id_of(given, id, sizeof id, &env);
    const char *from = rdv_run_id_from(given);
    rdv_escape(id, strnlen(id, sizeof id - 1), shown, sizeof shown);
    size_t bad = 0;
    while (bad < len && bad < sizeof id - 1 && (unsigned char)id[bad] >= 0x20 && id[bad] != 0x7f) bad++;
    if (len <= RDV_RUN_ID_MAX && bad == len) return 0;
    char lead[128], what[64];
    if (!strcmp(from, "--run-id")) snprintf(lead, sizeof lead, "--run-id \"%s\"", shown);
    else if (!strcmp(from, "LONGCTX_RUN_ID")) snprintf(lead, sizeof lead, "LONGCTX_RUN_ID=\"%s\"", shown);
    else snprintf(lead, sizeof lead, "the run id \"%s\" (from %s)", shown, from);
    if (len > RDV_RUN_ID_MAX) snprintf(what, sizeof what, "%zu characters, at most %d", len, RDV_RUN_ID_MAX);
    else snprintf(what, sizeof what, "the control character \\x%02x", (unsigned char)id[bad]);
    snprintf(err, n, "%s has %s (the rendezvous carries a run id whole, never cut): give %s", lead, what,
             strcmp(from, "--run-id") ? "--run-id NAME, a shorter name all nodes share" : "a shorter one of printable characters");
    return -1;
}

const char *rdv_escape(const void *s, size_t len, char *out, size_t n) {
    const unsigned char *p = s;
    if (!n) return out;
    size_t whole = 0; /* the escaped length: all of it when it fits, else a cut marked "..." */
    for (size_t i = 0; i < len; i++) whole += p[i] >= 0x20 && p[i] < 0x7f ? 1 : 4;
    const size_t room = whole < n ? n : n > 4 ? n - 3 : 1; /* bytes for the text and its NUL */
    size_t at = 0;
    for (size_t i = 0; i < len; i++) {
        char one[8];
        const int plain = p[i] >= 0x20 && p[i] < 0x7f; /* escaping twice changes nothing */
        const size_t k = plain ? (one[0] = (char)p[i], 1) : (size_t)snprintf(one, sizeof one, "\\x%02x", p[i]);
        if (at + k + 1 > room) break;
        memcpy(out + at, one, k);
        at += k;
    }
    if (whole >= n && n > 4) memcpy(out + at, "...", 3), at += 3;
    out[at] = 0;
    return out;
}

const char *rdv_run_id_from(const char *given) {
    if (given && given[0]) return "--run-id";
    const char *env = getenv("LONGCTX_RUN_ID"), *job = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID"),
               *again = getenv("SLURM_RESTART_COUNT");
    if (env && env[0]) return "LONGCTX_RUN_ID";
    if (!job || !job[0]) return "";
    static const char *names[4] = {"SLURM_JOB_ID", "SLURM_JOB_ID, SLURM_STEP_ID", "SLURM_JOB_ID, SLURM_RESTART_COUNT",
                                   "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT"};
    return names[(st && st[0]) + 2 * (again && again[0])];
}

/* ---------------------------------------------------------------- the job secret */
/* LONGCTX_JOB_SECRET_FILE's bytes into s: 0, or -1 + message. The file must be this user's alone:
 * a secret others can read is no secret, and one others can write is theirs */
static int secret_file(const char *path, RdvSecret *s, char *err, size_t n) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(err, n, "LONGCTX_JOB_SECRET_FILE=%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    const char *bad = !S_ISREG(st.st_mode) ? "is not a regular file"
                      : st.st_uid != geteuid() ? "is another user's file: a secret must be your own"
                      : (st.st_mode & 077) ? "can be read or changed by group or others" : NULL;
    if (bad) {
        snprintf(err, n, "LONGCTX_JOB_SECRET_FILE=%s %s (mode %04o): make a new secret in a file only you can read "
                 "(umask 077; head -c 32 /dev/urandom | base64 > FILE)", path, bad, (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t r;
    while (got < sizeof s->key && (r = read(fd, s->key + got, sizeof s->key - got)) > 0) got += (size_t)r;
    unsigned char more;
    const int over = got == sizeof s->key && read(fd, &more, 1) == 1;
    close(fd);
    s->len = over ? sizeof s->key + 1 : got; /* one past the most: refused as too long by the caller */
    return 0;
}

int rdv_secret(RdvSecret *s, char *err, size_t n) {
    memset(s, 0, sizeof *s);
    const char *v = getenv("LONGCTX_JOB_SECRET"), *path = getenv("LONGCTX_JOB_SECRET_FILE");
    if (v && v[0] && path && path[0]) {
        snprintf(err, n, "LONGCTX_JOB_SECRET and LONGCTX_JOB_SECRET_FILE are both set: set one of them (the file keeps "
                 "the secret out of the environment)");
        return -1;
    }
    if (path && path[0]) {
        s->from = "LONGCTX_JOB_SECRET_FILE";
        if (secret_file(path, s, err, n)) return -1;
    } else if (v && v[0]) {
        s->from = "LONGCTX_JOB_SECRET";
        s->len = strlen(v) > sizeof s->key ? sizeof s->key + 1 : strlen(v);
        if (s->len <= sizeof s->key) memcpy(s->key, v, s->len);
    } else return 0;
    /* a newline at the end is how files and shells end a line, not part of the secret */
    if (s->len <= sizeof s->key && s->len && s->key[s->len - 1] == '\n') s->len--;
    if (s->len <= sizeof s->key && s->len && s->key[s->len - 1] == '\r') s->len--;
    if (s->len < RDV_SECRET_MIN || s->len > RDV_SECRET_MAX) {
        snprintf(err, n, "%s holds %s%zu bytes; a job secret is %d..%d bytes (head -c 32 /dev/urandom | base64 makes one)",
                 s->from, s->len > RDV_SECRET_MAX ? "more than " : "", s->len > RDV_SECRET_MAX ? (size_t)RDV_SECRET_MAX : s->len,
                 RDV_SECRET_MIN, RDV_SECRET_MAX);
        rdv_secret_wipe(s);
        return -1;
    }
    return 1;
}

void rdv_secret_wipe(RdvSecret *s) {
    wipe(s->key, sizeof s->key);
    s->len = 0;
}

/* ---------------------------------------------------------------- a node's place */
/* the variable's value as a decimal integer in [lo, hi]: 1 (into *v), 0 when unset or empty, -1 + message */
static int env_int(const char *name, int64_t lo, int64_t hi, int64_t *v, char *err, size_t n) {
    const char *s = getenv(name);
    if (!s || !s[0]) return 0;
    char *end;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno || !isdigit((unsigned char)s[s[0] == '-'])) { /* no spaces, no '+' */
        snprintf(err, n, "%s=\"%s\" is not a decimal integer", name, s);
        return -1;
    }
    if (x < lo || x > hi) {
        snprintf(err, n, "%s=%lld is outside %lld..%lld", name, x, (long long)lo, (long long)hi);
        return -1;
    }
    *v = x;
    return 1;
}

int rdv_place(int64_t *nnodes, int64_t *node_rank, int env, const char **nnodes_from, const char **node_rank_from,
              char *err, size_t n) {
    *nnodes_from = "--nnodes";
    if (*nnodes <= 0) { /* not given */
        int got = 0;
        if (env) {
            static const char *const names[2] = {"SLURM_NNODES", "SLURM_JOB_NUM_NODES"};
            for (int i = 0; i < 2 && !got; i++)
                if ((got = env_int(names[i], 1, 65536, nnodes, err, n)) < 0) return -1;
                else if (got) *nnodes_from = names[i];
        }
        if (!got) *nnodes = 1, *nnodes_from = "default";
    }
    *node_rank_from = "--node-rank";
    if (*node_rank < 0) { /* not given */
        const int got = env ? env_int("SLURM_NODEID", 0, *nnodes - 1, node_rank, err, n) : 0;
        if (got < 0) {
            snprintf(err + strlen(err), n - strlen(err), " (the job has %lld node(s), from %s)", (long long)*nnodes,
                     *nnodes_from);
            return -1;
        }
        if (got) *node_rank_from = "SLURM_NODEID";
        else *node_rank = 0, *node_rank_from = "default";
        int64_t tasks = 0; /* srun's step: one task per node, else several processes share a node's GPUs */
        if (got && env_int("SLURM_STEP_NUM_TASKS", 1, INT64_MAX, &tasks, err, n) < 0) return -1;
        if (tasks > *nnodes) {
            snprintf(err, n, "Slurm runs %lld tasks on %lld node(s) (SLURM_STEP_NUM_TASKS): this program is one process "
                     "per node, driving each of its GPUs; launch it with srun --ntasks-per-node=1",
                     (long long)tasks, (long long)*nnodes);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- TCP */
static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* poll()'s milliseconds for s seconds (INFINITY: -1, wait; capped at an hour: callers loop) */
static int poll_ms(double s) { return isinf(s) ? -1 : s <= 0 ? 0 : s > 3600 ? 3600000 : (int)(s * 1000) + 1; }

/* a spec for a message: escaped and cut, so that the reason after it always fits */
static const char *shown(const char *spec, char *buf, size_t n) { return rdv_escape(spec, strlen(spec), buf, n); }

int rdv_parse(const char *spec, RdvTcp *t, char *err, size_t n) {
    char q[100];
    shown(spec, q, sizeof q);
    const char *sep = strstr(spec, "://");
    if (!sep) { /* a file path */
        if (strlen(spec) <= RDV_PATH_MAX) return 0;
        snprintf(err, n, "\"%s\": a rendezvous file path of %zu characters, at most %d: give a shorter one", q, strlen(spec),
                 RDV_PATH_MAX);
        return -1;
    }
    if (strncmp(spec, "tcp://", 6)) {
        snprintf(err, n, "\"%s\": the only scheme is tcp://HOST:PORT (else a file path)", q);
        return -1;
    }
    const char *hp = spec + 6, *colon = strrchr(hp, ':');
    if (!colon) {
        snprintf(err, n, "\"%s\": missing :PORT (tcp://HOST:PORT)", q);
        return -1;
    }
    if (colon == hp) {
        snprintf(err, n, "\"%s\": empty host (tcp://HOST:PORT, HOST node 0's address)", q);
        return -1;
    }
    if (memchr(hp, ':', (size_t)(colon - hp)) || hp[0] == '[') {
        snprintf(err, n, "\"%s\": IPv6 is not supported; give node 0's IPv4 address or host name", q);
        return -1;
    }
    if ((size_t)(colon - hp) >= sizeof t->host) {
        snprintf(err, n, "\"%s\": the host is %zu characters, at most %zu: give node 0's address or a shorter name", q,
                 (size_t)(colon - hp), sizeof t->host - 1);
        return -1;
    }
    const char *p = colon + 1;
    if (!p[0]) {
        snprintf(err, n, "\"%s\": missing port after ':' (tcp://HOST:PORT)", q);
        return -1;
    }
    long port = 0;
    for (const char *c = p; *c; c++)
        if (!isdigit((unsigned char)*c) || (port = port * 10 + (*c - '0')) > 65535) { port = -1; break; }
    if (port < 1) {
        char pq[40];
        snprintf(err, n, "\"%s\": port \"%s\" is not in 1..65535", q, shown(p, pq, sizeof pq));
        return -1;
    }
    memcpy(t->host, hp, (size_t)(colon - hp));
    t->host[colon - hp] = 0;
    t->port = (int)port;
    return 1;
}

/* ---------------------------------------------------------------- node 0's socket */
static int is_loopback(struct in_addr a) { return (ntohl(a.s_addr) >> 24) == 127; }

/* 1 when a is an address of one of this machine's interfaces (all of 127/8 is: Linux answers there) */
static int is_local(struct in_addr a) {
    if (is_loopback(a)) return 1;
    struct ifaddrs *all;
    if (getifaddrs(&all)) return 0;
    int found = 0;
    for (struct ifaddrs *i = all; i && !found; i = i->ifa_next)
        found = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
                ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a.s_addr;
    freeifaddrs(all);
    return found;
}

/* host's IPv4 addresses (at most max): how many, or -1 + message */
static int resolve(const char *host, struct in_addr *out, int max, char *err, size_t n) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    const int g = getaddrinfo(host, NULL, &hints, &res);
    char q[80];
    if (g) {
        snprintf(err, n, "the --rendezvous host \"%s\" cannot be resolved here: %s (give node 0's address)",
                 shown(host, q, sizeof q), g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return -1;
    }
    int k = 0;
    for (struct addrinfo *a = res; a && k < max; a = a->ai_next) out[k++] = ((struct sockaddr_in *)a->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return k;
}

/* which of host's addresses node 0 binds: the first of this machine's that is not loopback; a loopback
 * one only when the host is spelled so (127.x, localhost): a name that resolves here to 127.0.1.1
 * (Debian's /etc/hosts) would leave node 0 unreachable from every other node. -1 + message. */
static int pick_address(const char *host, const struct in_addr *a, int k, char *err, size_t n) {
    int loop = -1;
    for (int i = 0; i < k; i++) {
        if (is_loopback(a[i])) { if (loop < 0) loop = i; }
        else if (is_local(a[i])) return i;
    }
    struct in_addr lit;
    const int spelled = !strcmp(host, "localhost") || (inet_pton(AF_INET, host, &lit) == 1 && is_loopback(lit));
    if (loop >= 0 && spelled) return loop;
    char list[160] = "", q[80], one[INET_ADDRSTRLEN];
    for (int i = 0; i < k && strlen(list) + 24 < sizeof list; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", inet_ntop(AF_INET, &a[i], one, sizeof one));
    if (loop >= 0)
        snprintf(err, n, "the --rendezvous host \"%s\" resolves here to %s, a loopback address the other nodes cannot reach "
                 "(/etc/hosts): give node 0's network address, tcp://ADDRESS:PORT", shown(host, q, sizeof q), list);
    else
        snprintf(err, n, "the --rendezvous host \"%s\" (%s) is not one of this machine's addresses: start node 0 "
                 "(--node-rank 0, or SLURM_NODEID 0) on that host, or give this machine's address", shown(host, q, sizeof q), list);
    return -1;
}

int rdv_tcp_listen(const char *host, int port, char *err, size_t n) {
    struct in_addr addrs[16];
    const int k = resolve(host, addrs, 16, err, n);
    if (k < 0) return -1;
    const int i = pick_address(host, addrs, k, err, n);
    if (i < 0) return -1;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, n, "socket: %s", strerror(errno));
        return -1;
    }
    const int one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr = addrs[i]; /* HOST's address only: not every interface this machine has */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        listen(fd, RDV_TCP_BACKLOG) || fcntl(fd, F_SETFL, O_NONBLOCK)) {
        const int e = errno;
        char ip[INET_ADDRSTRLEN];
        close(fd);
        snprintf(err, n, "cannot listen on %s:%d: %s%s", inet_ntop(AF_INET, &addrs[i], ip, sizeof ip), port, strerror(e),
                 e == EADDRINUSE ? " (another run's node 0 still there, or another program: pick another port)" : "");
        return -1;
    }
    return fd;
}

int rdv_tcp_port(int fd) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    return getsockname(fd, (struct sockaddr *)&a, &len) ? -1 : ntohs(a.sin_port);
}

/* ---------------------------------------------------------------- the messages (rendezvous.h) */
enum { K_HELLO = 1, K_WELCOME = 2, K_REFUSED = 3, K_CHALLENGE = 4 };
enum { AT_NONCE_K = RDV_TCP_HEAD, AT_LAUNCH = RDV_TCP_HEAD, AT_ID = RDV_TCP_HEAD + 8,
       AT_WHY = RDV_TCP_HEAD + 8 + RDV_ID_BYTES, PROOF = 32 };
typedef struct {
    uint32_t kind, node_rank, nnodes, gpus;
    char run_id[65]; /* the 64 bytes as sent, NUL-terminated here */
} Head;
static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}
static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void put_head(unsigned char *b, const Head *h) {
    memset(b, 0, RDV_TCP_HEAD);
    memcpy(b, RDV_TCP_MAGIC, sizeof RDV_TCP_MAGIC);
    put32(b + 8, h->kind), put32(b + 12, h->node_rank), put32(b + 16, h->nnodes), put32(b + 20, h->gpus);
    memcpy(b + 24, h->run_id, strnlen(h->run_id, RDV_RUN_ID_MAX)); /* callers checked the length */
}
static void get_head(const unsigned char *b, Head *h) {
    h->kind = get32(b + 8), h->node_rank = get32(b + 12), h->nnodes = get32(b + 16), h->gpus = get32(b + 20);
    memcpy(h->run_id, b + 24, 64);
    h->run_id[64] = 0;
}
/* 1 when the 64-byte run id field b + 24 holds exactly run_id, NUL-padded */
static int same_run(const unsigned char *b, const char *run_id) {
    unsigned char want[64] = {0};
    memcpy(want, run_id, strnlen(run_id, RDV_RUN_ID_MAX));
    return !memcmp(b + 24, want, sizeof want);
}
static const char *run_shown(const Head *h, char *buf, size_t n) { return rdv_escape(h->run_id, strnlen(h->run_id, 64), buf, n); }

static const char *const LABEL[3] = {"LCRDT02 hello", "LCRDT02 answer", "LCRDT02 id"};
static void keyed(const RdvSecret *key, int which, const unsigned char *n0, const unsigned char *nk, const void *msg,
                  size_t len, unsigned char out[PROOF]) {
    HmacSha256 h;
    hmac_sha256_init(&h, key->key, key->len);
    hmac_sha256_update(&h, LABEL[which], strlen(LABEL[which]));
    hmac_sha256_update(&h, n0, RDV_TCP_NONCE);
    hmac_sha256_update(&h, nk, RDV_TCP_NONCE);
    hmac_sha256_update(&h, msg, len);
    hmac_sha256_final(&h, out);
}
void rdv_tcp_proof(const RdvSecret *key, int which, const unsigned char *n0, const unsigned char *nk, const void *msg,
                   size_t len, unsigned char out[32]) {
    keyed(key, which == RDV_PROOF_ANSWER, n0, nk, msg, len, out);
}
/* the id XOR a keystream only the secret's holders can make: one on the wire learns nothing of it */
static void mask_id(const RdvSecret *key, const unsigned char *n0, const unsigned char *nk, unsigned char *id) {
    for (unsigned char i = 0; i < RDV_ID_BYTES / PROOF; i++) {
        unsigned char ks[PROOF];
        keyed(key, 2, n0, nk, &i, 1, ks);
        for (int j = 0; j < PROOF; j++) id[i * PROOF + j] ^= ks[j];
        wipe(ks, sizeof ks);
    }
}
/* the key is usable: 0, or -1 + how to set one */
static int need_key(const RdvSecret *key, char *err, size_t n) {
    if (key && key->len >= RDV_SECRET_MIN && key->len <= RDV_SECRET_MAX) return 0;
    snprintf(err, n, "%s", RDV_SECRET_HOWTO);
    return -1;
}
static int need_run_id(const char *run_id, char *err, size_t n) {
    if (strlen(run_id) <= RDV_RUN_ID_MAX) return 0;
    snprintf(err, n, "the run id is %zu characters, at most %d: give a shorter --run-id", strlen(run_id), RDV_RUN_ID_MAX);
    return -1;
}

/* ---------------------------------------------------------------- node 0: many connections at once */
double rdv_tcp_conn_s = RDV_TCP_CONN_S;

enum { C_FREE, C_CHALLENGE, C_HELLO, C_ANSWER }; /* a connection's phase: what moves next */
typedef struct {
    int fd, phase;
    int rank;          /* the node its welcome serves once written whole; -1 otherwise */
    size_t at;         /* bytes of this phase's message moved */
    double opened;     /* when accepted: dropped at opened + rdv_tcp_conn_s */
    char who[32];      /* ADDRESS:PORT */
    unsigned char n0[RDV_TCP_NONCE];
    unsigned char b[RDV_TCP_ANSWER]; /* the challenge, the hello, then the answer */
} Conn;

typedef struct {
    const RdvSecret *key;
    const char *run_id;
    int nnodes, gpus;
    const unsigned char *id;
    uint64_t launch;
    unsigned char *state; /* per node rank: 0 waiting, 1 its welcome being written, 2 served */
    int left, logged;
    Conn conn[RDV_TCP_MAX_CONN];
} Server;

/* one line "node 0: ..." to stderr, whole in one write (other threads may write there too) */
static void log_line(Server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(Server *s, const char *fmt, ...) {
    if (s->logged++ >= RDV_TCP_LOG) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "node 0: %s\n", line);
}

static void drop(Server *s, Conn *c, const char *why) {
    if (why) log_line(s, "dropped the connection from %s: %s", c->who, why);
    if (c->rank >= 0 && s->state[c->rank] == 1) s->state[c->rank] = 0; /* its welcome never went out whole */
    close(c->fd);
    c->fd = -1, c->phase = C_FREE, c->rank = -1;
}

/* a slot for a new connection: a free one, else the oldest that has not said its hello (then the
 * oldest of all): idle connections make room, so they never lock the real node out */
static Conn *slot(Server *s) {
    Conn *old = NULL;
    for (int i = 0; i < RDV_TCP_MAX_CONN; i++) {
        Conn *c = &s->conn[i];
        if (c->phase == C_FREE) return c;
        const int idle = c->phase != C_ANSWER, old_idle = old && old->phase != C_ANSWER;
        if (!old || (idle && !old_idle) || (idle == old_idle && c->opened < old->opened)) old = c;
    }
    char why[96];
    snprintf(why, sizeof why, "the oldest idle of %d open (the most node 0 holds), to make room", RDV_TCP_MAX_CONN);
    drop(s, old, why);
    return old;
}

static void open_conn(Server *s, int fd, const struct sockaddr_in *from) {
    Conn *c = slot(s);
    char ip[INET_ADDRSTRLEN];
    snprintf(c->who, sizeof c->who, "%s:%d", inet_ntop(AF_INET, &from->sin_addr, ip, sizeof ip), ntohs(from->sin_port));
    c->fd = fd, c->rank = -1, c->at = 0, c->opened = mono_s();
    fcntl(fd, F_SETFL, O_NONBLOCK);
    memset(c->b, 0, RDV_TCP_CHALLENGE);
    memcpy(c->b, RDV_TCP_MAGIC, sizeof RDV_TCP_MAGIC);
    put32(c->b + 8, K_CHALLENGE);
    c->phase = C_CHALLENGE;
    if (random_bytes(c->n0, RDV_TCP_NONCE)) { drop(s, c, "no random bytes for its nonce (getrandom)"); return; }
    memcpy(c->b + 16, c->n0, RDV_TCP_NONCE); /* fresh for every connection: a recorded hello never passes again */
}

/* why a hello (c->b) is refused, "" when it is welcome (*rank then its node) */
static void judge(Server *s, const Conn *c, const Head *h, char *why, size_t n) {
    unsigned char proof[PROOF];
    keyed(s->key, RDV_PROOF_HELLO, c->n0, c->b + AT_NONCE_K, c->b, RDV_TCP_HELLO - PROOF, proof);
    char theirs[48], ours[48];
    rdv_escape(s->run_id, strlen(s->run_id), ours, sizeof ours);
    run_shown(h, theirs, sizeof theirs);
    why[0] = 0;
    if (!same_bytes(proof, c->b + RDV_TCP_HELLO - PROOF, PROOF))
        snprintf(why, n, "the hello does not prove this job's secret (LONGCTX_JOB_SECRET or LONGCTX_JOB_SECRET_FILE): "
                 "a process outside the job, or a node given another secret");
    else if (!same_run(c->b, s->run_id))
        snprintf(why, n, "node 0 serves run \"%s\", this node is of run \"%s\" (--run-id)", ours, theirs);
    else if ((int)h->nnodes != s->nnodes || (int)h->gpus != s->gpus)
        snprintf(why, n, "node 0 was given --nnodes %d --gpus %d, this node --nnodes %u --gpus %u", s->nnodes, s->gpus,
                 h->nnodes, h->gpus);
    else if (h->node_rank < 1 || h->node_rank >= (uint32_t)s->nnodes) /* unsigned: 2^31 must not pass as negative */
        snprintf(why, n, "node rank %u is not in 1..%d", h->node_rank, s->nnodes - 1);
    else if (s->state[h->node_rank])
        snprintf(why, n, "node rank %u has already joined: two nodes were given the same --node-rank (or SLURM_NODEID)",
                 h->node_rank);
}

/* the hello in c->b read whole: the answer in its place (a welcome claims its node) */
static void answer(Server *s, Conn *c) {
    Head h;
    if (memcmp(c->b, RDV_TCP_MAGIC, sizeof RDV_TCP_MAGIC) || get32(c->b + 8) != K_HELLO) {
        drop(s, c, "not a longctx rendezvous hello (protocol " RDV_TCP_MAGIC ")");
        return;
    }
    get_head(c->b, &h);
    unsigned char nk[RDV_TCP_NONCE];
    memcpy(nk, c->b + AT_NONCE_K, sizeof nk);
    char why[RDV_TCP_WHY], theirs[4 * 64 + 4]; /* the log shows the run id whole, escaped */
    judge(s, c, &h, why, sizeof why);
    if (why[0]) log_line(s, "refused a hello from %s (node %u of run \"%s\"): %s", c->who, h.node_rank, run_shown(&h, theirs, sizeof theirs), why);
    Head a = {why[0] ? K_REFUSED : K_WELCOME, h.node_rank, (uint32_t)s->nnodes, (uint32_t)s->gpus, ""};
    memcpy(a.run_id, s->run_id, strlen(s->run_id) + 1);
    unsigned char *b = c->b;
    put_head(b, &a);
    memset(b + RDV_TCP_HEAD, 0, RDV_TCP_ANSWER - RDV_TCP_HEAD);
    for (int i = 0; i < 8; i++) b[AT_LAUNCH + i] = (unsigned char)(s->launch >> (56 - 8 * i));
    if (!why[0]) {
        memcpy(b + AT_ID, s->id, RDV_ID_BYTES);
        mask_id(s->key, c->n0, nk, b + AT_ID);
        c->rank = (int)h.node_rank;
        s->state[c->rank] = 1; /* a second hello of this node is refused while this welcome goes out */
    }
    memcpy(b + AT_WHY, why, strnlen(why, RDV_TCP_WHY - 1));
    keyed(s->key, RDV_PROOF_ANSWER, c->n0, nk, b, RDV_TCP_ANSWER - PROOF, b + RDV_TCP_ANSWER - PROOF);
    c->phase = C_ANSWER, c->at = 0;
}

/* move c's bytes as far as the socket lets them, phase after phase */
static void step(Server *s, Conn *c) {
    while (c->phase != C_FREE) {
        const int out = c->phase != C_HELLO;
        const size_t len = c->phase == C_CHALLENGE ? RDV_TCP_CHALLENGE : c->phase == C_HELLO ? RDV_TCP_HELLO : RDV_TCP_ANSWER;
        while (c->at < len) {
            const ssize_t r = out ? send(c->fd, c->b + c->at, len - c->at, MSG_NOSIGNAL) : recv(c->fd, c->b + c->at, len - c->at, 0);
            if (r > 0) { c->at += (size_t)r; continue; }
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            drop(s, c, c->phase == C_ANSWER ? "closed before its answer was written whole" : c->at ? "closed in mid-message"
                       : c->phase == C_HELLO ? "closed without a hello" : "closed at once");
            return;
        }
        if (c->phase == C_CHALLENGE) c->phase = C_HELLO, c->at = 0;
        else if (c->phase == C_HELLO) answer(s, c);
        else {
            if (c->rank >= 0) s->state[c->rank] = 2, s->left--; /* proved, and its welcome written whole */
            drop(s, c, NULL);
        }
    }
}

/* "2, 4-7, 9": the ranks in 1..nnodes-1 not yet served */
static void missing(const unsigned char *state, int nnodes, char *s, size_t n) {
    size_t at = 0;
    s[0] = 0;
    for (int a = 1; a < nnodes && at + 16 < n; a++) {
        if (state[a] == 2) continue;
        int b = a;
        while (b + 1 < nnodes && state[b + 1] != 2) b++;
        at += (size_t)snprintf(s + at, n - at, at ? ", %d" : "%d", a);
        if (b > a) at += (size_t)snprintf(s + at, n - at, "-%d", b);
        a = b;
    }
    if (at + 16 >= n) snprintf(s + at, n - at, ", ...");
}

/* drop the connections past their time; the earliest time one of the others runs out */
static double expire(Server *s, double now, double wake) {
    for (int i = 0; i < RDV_TCP_MAX_CONN; i++) {
        Conn *c = &s->conn[i];
        if (c->phase == C_FREE) continue;
        const double by = c->opened + rdv_tcp_conn_s;
        if (now < by) { wake = fmin(wake, by); continue; }
        char why[96];
        snprintf(why, sizeof why, "%s within %g s", c->phase == C_ANSWER ? "did not take its answer" : "no whole hello",
                 rdv_tcp_conn_s);
        drop(s, c, why);
    }
    return wake;
}

static void accept_some(Server *s, int fd) {
    for (int k = 0; k < RDV_TCP_MAX_CONN / 4; k++) { /* a few at a time: the open ones get their turn too */
        struct sockaddr_in from;
        socklen_t len = sizeof from;
        const int c = accept(fd, (struct sockaddr *)&from, &len);
        if (c < 0) return; /* EAGAIN: none left; ECONNABORTED, EMFILE: the next round */
        fcntl(c, F_SETFD, FD_CLOEXEC);
        open_conn(s, c, &from);
    }
}

static int serve_loop(Server *s, int fd, double timeout_s, char *err, size_t n) {
    const double deadline = timeout_s > 0 ? mono_s() + timeout_s : INFINITY;
    struct pollfd p[RDV_TCP_MAX_CONN + 1];
    Conn *who[RDV_TCP_MAX_CONN + 1];
    while (s->left > 0) {
        const double now = mono_s();
        if (now >= deadline) {
            char list[256];
            missing(s->state, s->nnodes, list, sizeof list);
            snprintf(err, n, "%d of the %d other node(s) never came within %g s (--comm-timeout), node rank(s): %s; "
                     "is each started with --nnodes %d, this --rendezvous and the same job secret, and can it reach "
                     "port %d here?", s->left, s->nnodes - 1, timeout_s, list, s->nnodes, rdv_tcp_port(fd));
            return -1;
        }
        const double wake = expire(s, now, deadline);
        int k = 0;
        p[k++] = (struct pollfd){fd, POLLIN, 0};
        for (int i = 0; i < RDV_TCP_MAX_CONN; i++) {
            Conn *c = &s->conn[i];
            if (c->phase == C_FREE) continue;
            who[k] = c;
            p[k++] = (struct pollfd){c->fd, (short)(c->phase == C_HELLO ? POLLIN : POLLOUT), 0};
        }
        if (poll(p, (nfds_t)k, poll_ms(wake - now)) <= 0) continue; /* a deadline, or EINTR */
        for (int i = 1; i < k; i++)
            if (p[i].revents) step(s, who[i]);
        if (p[0].revents & POLLIN) accept_some(s, fd);
    }
    return 0;
}

int rdv_tcp_serve(int fd, const RdvSecret *key, const char *run_id, int nnodes, int gpus, const void *id,
                  uint64_t *nonce, double timeout_s, char *err, size_t n) {
    if (!run_id) run_id = "";
    if (need_key(key, err, n) || need_run_id(run_id, err, n)) return -1;
    Server *s = calloc(1, sizeof *s);
    unsigned char *state = calloc((size_t)nnodes, 1);
    if (!s || !state) {
        free(s), free(state);
        snprintf(err, n, "out of memory");
        return -1;
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK); /* accept_some takes what is there, never waits */
    *nonce = fresh_nonce();
    *s = (Server){key, run_id, nnodes, gpus, id, *nonce, state, nnodes - 1, 0, {{0}}};
    for (int i = 0; i < RDV_TCP_MAX_CONN; i++) s->conn[i].fd = -1, s->conn[i].rank = -1;
    const int rc = serve_loop(s, fd, timeout_s, err, n);
    for (int i = 0; i < RDV_TCP_MAX_CONN; i++)
        if (s->conn[i].phase != C_FREE) close(s->conn[i].fd);
    if (s->logged > RDV_TCP_LOG)
        fprintf(stderr, "node 0: %d more refusals and drops, not logged one by one\n", s->logged - RDV_TCP_LOG);
    wipe(s, sizeof *s); /* the id and the masks were here */
    free(s), free(state);
    return rc;
}

/* ---------------------------------------------------------------- a node */
/* move len bytes over a nonblocking socket by the deadline (mono_s): the bytes moved (len, or fewer
 * at EOF, an error or the deadline) */
static size_t xfer(int fd, void *buf, size_t len, int out, double deadline) {
    size_t done = 0;
    while (done < len) {
        char *at = (char *)buf + done;
        const ssize_t r = out ? send(fd, at, len - done, MSG_NOSIGNAL) : recv(fd, at, len - done, 0);
        if (r > 0) { done += (size_t)r; continue; }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
        const double left = deadline - mono_s();
        if (left <= 0) break;
        struct pollfd p = {fd, (short)(out ? POLLOUT : POLLIN), 0};
        if (poll(&p, 1, poll_ms(left)) < 0 && errno != EINTR) break;
    }
    return done;
}

/* a connection to t by the deadline: the fd, -1 to try again (*why says why), -2 when the host
 * cannot be resolved at all */
static int dial(const RdvTcp *t, double deadline, char *why, size_t n) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char port[16];
    snprintf(port, sizeof port, "%d", t->port);
    const int g = getaddrinfo(t->host, port, &hints, &res);
    if (g) {
        snprintf(why, n, "%s", g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        return g == EAI_AGAIN || g == EAI_SYSTEM ? -1 : -2;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) { snprintf(why, n, "socket: %s", strerror(errno)); continue; }
        int e = connect(fd, a->ai_addr, a->ai_addrlen) ? errno : 0;
        if (e == EINPROGRESS) { /* wait for it, at most 5 s a try */
            struct pollfd p = {fd, POLLOUT, 0};
            const double left = fmin(deadline - mono_s(), 5.0);
            socklen_t len = sizeof e;
            e = poll(&p, 1, poll_ms(left)) == 1 ? (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len), e) : ETIMEDOUT;
        }
        if (e) snprintf(why, n, "%s", strerror(e)), close(fd), fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

typedef struct { /* what a node says and what it gets */
    const RdvTcp *t;
    const RdvSecret *key;
    const char *run_id;
    int node_rank, nnodes, gpus;
    void *id;
    uint64_t *nonce;
} Node;

/* -1 + message: what answered at HOST:PORT is not of this protocol (b: its first 8 or more bytes) */
static int not_protocol(const Node *k, const unsigned char *b, char *err, size_t n) {
    char said[40];
    rdv_escape(b, 8, said, sizeof said);
    const int older = !memcmp(b, "LCRDT01", 8);
    snprintf(err, n, "%s:%d answered \"%s\": not a longctx node 0 of this version (protocol %s); %s", k->t->host, k->t->port,
             said, RDV_TCP_MAGIC, older ? "node 0 runs an older build: run the same build on every node"
                                        : "is the port another program's?");
    return -1;
}

/* the welcome in b (proved): 0 with the id and nonce out, or -1 + message when it is another run's */
static int take(const Node *k, const unsigned char *b, const unsigned char *n0, const unsigned char *nk, char *err, size_t n) {
    Head h;
    get_head(b, &h);
    if (!same_run(b, k->run_id) || (int)h.nnodes != k->nnodes || (int)h.gpus != k->gpus || (int)h.node_rank != k->node_rank) {
        char theirs[48], ours[48];
        snprintf(err, n, "node 0 at %s:%d serves run \"%s\" of %u node(s) x %u GPU(s) (to node %u); this node is of run "
                 "\"%s\", %d x %d, node %d: not joined", k->t->host, k->t->port, run_shown(&h, theirs, sizeof theirs), h.nnodes,
                 h.gpus, h.node_rank, rdv_escape(k->run_id, strlen(k->run_id), ours, sizeof ours), k->nnodes, k->gpus, k->node_rank);
        return -1;
    }
    *k->nonce = 0;
    for (int i = 0; i < 8; i++) *k->nonce = *k->nonce << 8 | b[AT_LAUNCH + i];
    unsigned char id[RDV_ID_BYTES];
    memcpy(id, b + AT_ID, sizeof id);
    mask_id(k->key, n0, nk, id);
    memcpy(k->id, id, sizeof id);
    wipe(id, sizeof id);
    return 0;
}

/* node 0's answer in b, read whole: 0 joined, -1 + message */
static int judge_answer(const Node *k, const unsigned char *b, const unsigned char *n0, const unsigned char *nk, char *err,
                        size_t n) {
    const uint32_t kind = get32(b + 8);
    if (kind != K_WELCOME && kind != K_REFUSED) return not_protocol(k, b, err, n);
    unsigned char proof[PROOF];
    keyed(k->key, RDV_PROOF_ANSWER, n0, nk, b, RDV_TCP_ANSWER - PROOF, proof);
    const int proved = same_bytes(proof, b + RDV_TCP_ANSWER - PROOF, PROOF);
    if (kind == K_REFUSED) {
        char why[RDV_TCP_WHY * 4];
        rdv_escape(b + AT_WHY, strnlen((const char *)b + AT_WHY, RDV_TCP_WHY), why, sizeof why);
        snprintf(err, n, "%s at %s:%d refused node %d: %s", proved ? "node 0" : "a server that does not prove this job's "
                 "secret (node 0 with another secret, or not node 0)", k->t->host, k->t->port, k->node_rank, why);
        return -1;
    }
    if (!proved) {
        snprintf(err, n, "%s:%d answered a welcome that does not prove this job's secret: not node 0 of this job (another "
                 "program, or a node 0 given another LONGCTX_JOB_SECRET): not joined", k->t->host, k->t->port);
        return -1;
    }
    return take(k, b, n0, nk, err, n);
}

/* one try on an open connection: 0 joined, -1 stop (err), 1 try again (why says what happened) */
static int exchange(const Node *k, int fd, double by, char *why, size_t wn, char *err, size_t n) {
    unsigned char b[RDV_TCP_ANSWER], n0[RDV_TCP_NONCE], nk[RDV_TCP_NONCE];
    size_t got = xfer(fd, b, RDV_TCP_CHALLENGE, 0, by);
    if (got >= 8 && memcmp(b, RDV_TCP_MAGIC, 8)) return not_protocol(k, b, err, n);
    if (got < RDV_TCP_CHALLENGE) {
        snprintf(why, wn, "accepted the connection, then %s", got ? "closed it in mid-challenge"
                 : "closed it or sent no challenge (node 0 busy, or not node 0)");
        return 1;
    }
    if (get32(b + 8) != K_CHALLENGE) return not_protocol(k, b, err, n);
    memcpy(n0, b + 16, sizeof n0);
    if (random_bytes(nk, sizeof nk)) {
        snprintf(err, n, "no random bytes for this node's nonce (getrandom): %s", strerror(errno));
        return -1;
    }
    Head h = {K_HELLO, (uint32_t)k->node_rank, (uint32_t)k->nnodes, (uint32_t)k->gpus, ""};
    memcpy(h.run_id, k->run_id, strlen(k->run_id) + 1);
    put_head(b, &h);
    memcpy(b + AT_NONCE_K, nk, sizeof nk);
    keyed(k->key, RDV_PROOF_HELLO, n0, nk, b, RDV_TCP_HELLO - PROOF, b + RDV_TCP_HELLO - PROOF);
    if (xfer(fd, b, RDV_TCP_HELLO, 1, by) < RDV_TCP_HELLO) {
        snprintf(why, wn, "node 0 closed the connection before the hello was sent");
        return 1;
    }
    got = xfer(fd, b, RDV_TCP_ANSWER, 0, by);
    if (got >= 8 && memcmp(b, RDV_TCP_MAGIC, 8)) return not_protocol(k, b, err, n);
    if (got < RDV_TCP_ANSWER) { /* node 0 drops what it cannot serve in time, and the oldest when crowded */
        snprintf(why, wn, "node 0 took the hello but %s", got ? "closed in mid-answer" : "dropped the connection unanswered");
        return 1;
    }
    return judge_answer(k, b, n0, nk, err, n);
}

/* dial, then the exchange, by the deadline: 0 joined, -1 stop (err), 1 try again (why) */
static int try_once(const Node *k, double by, char *why, size_t wn, char *err, size_t n) {
    const int fd = dial(k->t, by, why, wn);
    if (fd == -2) {
        char q[80];
        snprintf(err, n, "cannot resolve node 0's host \"%s\" (--rendezvous tcp://HOST:%d): %s", shown(k->t->host, q, sizeof q),
                 k->t->port, why);
        return -1;
    }
    if (fd < 0) return 1;
    const int rc = exchange(k, fd, by, why, wn, err, n);
    close(fd);
    return rc;
}

int rdv_tcp_try(const RdvTcp *t, const RdvSecret *key, const char *run_id, int node_rank, int nnodes, int gpus,
                double limit_s, void *id, uint64_t *nonce, char *err, size_t n) {
    if (!run_id) run_id = "";
    if (need_key(key, err, n) || need_run_id(run_id, err, n)) return -1;
    const Node k = {t, key, run_id, node_rank, nnodes, gpus, id, nonce};
    return try_once(&k, mono_s() + limit_s, err, n, err, n); /* a retry's reason or a stop's message, never both */
}

int rdv_tcp_await(const RdvTcp *t, const RdvSecret *key, const char *run_id, int node_rank, int nnodes, int gpus,
                  double timeout_s, void *id, uint64_t *nonce, char *err, size_t n) {
    if (!run_id) run_id = "";
    if (need_key(key, err, n) || need_run_id(run_id, err, n)) return -1;
    const Node k = {t, key, run_id, node_rank, nnodes, gpus, id, nonce};
    const double deadline = timeout_s > 0 ? mono_s() + timeout_s : INFINITY; /* 0: forever, every try included */
    char why[200] = "nothing tried";
    for (;;) {
        const int rc = try_once(&k, fmin(deadline, mono_s() + RDV_TCP_TRY_S), why, sizeof why, err, n);
        if (rc <= 0) return rc;
        const double left = deadline - mono_s();
        if (left <= 0) {
            snprintf(err, n, "no node 0 at %s:%d after %g s (--comm-timeout; last try: %s): is node 0 running, with "
                     "--rendezvous tcp://%s:%d and the same job secret, and is the port open between the nodes?", t->host,
                     t->port, timeout_s, why, t->host, t->port);
            return -1;
        }
        usleep((useconds_t)(fmin(left, 0.25) * 1e6));
    }
}
