/* rendezvous.c -- the several-node rendezvous: the file, TCP, a node's place (rendezvous.h). */
#include "rendezvous.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
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

int rdv_parse(const char *spec, RdvTcp *t, char *err, size_t n) {
    const char *sep = strstr(spec, "://");
    if (!sep) return 0; /* a file path */
    if (strncmp(spec, "tcp://", 6)) {
        snprintf(err, n, "\"%s\": the only scheme is tcp://HOST:PORT (else a file path)", spec);
        return -1;
    }
    const char *hp = spec + 6, *colon = strrchr(hp, ':');
    if (!colon) {
        snprintf(err, n, "\"%s\": missing :PORT (tcp://HOST:PORT)", spec);
        return -1;
    }
    if (colon == hp) {
        snprintf(err, n, "\"%s\": empty host (tcp://HOST:PORT, HOST node 0's address)", spec);
        return -1;
    }
    if (memchr(hp, ':', (size_t)(colon - hp)) || hp[0] == '[') {
        snprintf(err, n, "\"%s\": IPv6 is not supported; give node 0's IPv4 address or host name", spec);
        return -1;
    }
    if ((size_t)(colon - hp) >= sizeof t->host) {
        snprintf(err, n, "\"%s\": host longer than %zu characters", spec, sizeof t->host - 1);
        return -1;
    }
    const char *p = colon + 1;
    if (!p[0]) {
        snprintf(err, n, "\"%s\": missing port after ':' (tcp://HOST:PORT)", spec);
        return -1;
    }
    long port = 0;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q) || (port = port * 10 + (*q - '0')) > 65535) { port = -1; break; }
    if (port < 1) {
        snprintf(err, n, "\"%s\": port \"%s\" is not in 1..65535", spec, p);
        return -1;
    }
    memcpy(t->host, hp, (size_t)(colon - hp));
    t->host[colon - hp] = 0;
    t->port = (int)port;
    return 1;
}

int rdv_tcp_listen(int port, char *err, size_t n) {
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
    /* every interface: HOST is how the other nodes reach node 0, a name that may resolve differently
     * here (to 127.0.1.1 in /etc/hosts, or another network's address); the run id guards the door */
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        listen(fd, 128) || fcntl(fd, F_SETFL, O_NONBLOCK)) {
        const int e = errno;
        close(fd);
        snprintf(err, n, "cannot listen on port %d: %s%s", port, strerror(e),
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

/* the fixed messages: big-endian integers at fixed offsets (rendezvous.h) */
enum { K_HELLO = 1, K_WELCOME = 2, K_REFUSED = 3 };
typedef struct {
    uint32_t kind, node_rank, nnodes, gpus;
    char run_id[64];
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
    memcpy(b + 24, h->run_id, strnlen(h->run_id, 63));
}
/* 0, or -1 when b is not of the protocol (magic and version) */
static int get_head(const unsigned char *b, Head *h) {
    if (memcmp(b, RDV_TCP_MAGIC, sizeof RDV_TCP_MAGIC)) return -1;
    h->kind = get32(b + 8), h->node_rank = get32(b + 12), h->nnodes = get32(b + 16), h->gpus = get32(b + 20);
    memcpy(h->run_id, b + 24, 63);
    h->run_id[63] = 0;
    return 0;
}

/* move len bytes over a nonblocking socket by the deadline (mono_s; INFINITY: none): the bytes moved
 * (len, or fewer at EOF, an error or the deadline) */
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

/* "2, 4-7, 9": the ranks in 1..nnodes-1 not yet served */
static void missing(const unsigned char *served, int nnodes, char *s, size_t n) {
    size_t at = 0;
    s[0] = 0;
    for (int a = 1; a < nnodes && at + 16 < n; a++) {
        if (served[a]) continue;
        int b = a;
        while (b + 1 < nnodes && !served[b + 1]) b++;
        at += (size_t)snprintf(s + at, n - at, at ? ", %d" : "%d", a);
        if (b > a) at += (size_t)snprintf(s + at, n - at, "-%d", b);
        a = b;
    }
    if (at + 16 >= n) snprintf(s + at, n - at, ", ...");
}

/* one connection: read the hello, answer a welcome or a refusal (logged); 1 when a node was served */
static int serve_one(int c, const char *who, const char *run_id, int nnodes, int gpus, const void *id, uint64_t nonce,
                     unsigned char *served, double deadline) {
    unsigned char b[RDV_TCP_ANSWER];
    Head h;
    const double hello_by = fmin(deadline, mono_s() + RDV_TCP_HELLO_S);
    if (xfer(c, b, RDV_TCP_HEAD, 0, hello_by) < RDV_TCP_HEAD || get_head(b, &h) || h.kind != K_HELLO) {
        fprintf(stderr, "node 0: a connection from %s did not say a longctx rendezvous hello: dropped\n", who);
        return 0;
    }
    char why[RDV_TCP_WHY] = "";
    if (strncmp(h.run_id, run_id, sizeof h.run_id - 1))
        snprintf(why, sizeof why, "node 0 serves run \"%s\", this node is of run \"%s\" (--run-id)", run_id, h.run_id);
    else if ((int)h.nnodes != nnodes || (int)h.gpus != gpus)
        snprintf(why, sizeof why, "node 0 was given --nnodes %d --gpus %d, this node --nnodes %u --gpus %u", nnodes, gpus,
                 h.nnodes, h.gpus);
    else if (h.node_rank < 1 || h.node_rank >= (uint32_t)nnodes) /* unsigned: 2^31 must not pass as negative */
        snprintf(why, sizeof why, "node rank %u is not in 1..%d", h.node_rank, nnodes - 1);
    else if (served[h.node_rank])
        snprintf(why, sizeof why, "node rank %u has already joined: two nodes were given the same --node-rank (or SLURM_NODEID)",
                 h.node_rank);
    Head a = {why[0] ? K_REFUSED : K_WELCOME, h.node_rank, (uint32_t)nnodes, (uint32_t)gpus, ""};
    snprintf(a.run_id, sizeof a.run_id, "%s", run_id);
    put_head(b, &a);
    for (int i = 0; i < 8; i++) b[RDV_TCP_HEAD + i] = (unsigned char)(nonce >> (56 - 8 * i));
    if (!why[0]) memcpy(b + RDV_TCP_HEAD + 8, id, RDV_ID_BYTES);
    memcpy(b + RDV_TCP_ANSWER - RDV_TCP_WHY, why, sizeof why);
    const int sent = xfer(c, b, RDV_TCP_ANSWER, 1, fmin(deadline, mono_s() + RDV_TCP_HELLO_S)) == RDV_TCP_ANSWER;
    if (why[0]) fprintf(stderr, "node 0: refused node %u from %s: %s\n", h.node_rank, who, why);
    else if (!sent) fprintf(stderr, "node 0: node %u from %s left before the id was sent\n", h.node_rank, who);
    if (why[0] || !sent) return 0;
    served[h.node_rank] = 1;
    return 1;
}

int rdv_tcp_serve(int fd, const char *run_id, int nnodes, int gpus, const void *id, uint64_t *nonce, double timeout_s,
                  char *err, size_t n) {
    *nonce = fresh_nonce();
    if (!run_id) run_id = "";
    unsigned char *served = calloc((size_t)nnodes, 1);
    if (!served) { snprintf(err, n, "out of memory"); return -1; }
    const double deadline = timeout_s > 0 ? mono_s() + timeout_s : INFINITY;
    int left = nnodes - 1;
    while (left > 0) {
        const double wait = deadline - mono_s();
        if (wait <= 0) {
            char list[256];
            missing(served, nnodes, list, sizeof list);
            snprintf(err, n, "%d of the %d other node(s) never came within %g s (--comm-timeout), node rank(s): %s; "
                     "is each started with --nnodes %d and this --rendezvous, and can it reach port %d here?", left,
                     nnodes - 1, timeout_s, list, nnodes, rdv_tcp_port(fd));
            free(served);
            return -1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, poll_ms(wait)) <= 0) continue; /* the deadline, or EINTR */
        struct sockaddr_in from;
        socklen_t len = sizeof from;
        const int c = accept(fd, (struct sockaddr *)&from, &len);
        if (c < 0) continue; /* EAGAIN, ECONNABORTED: the next one */
        char who[64];
        snprintf(who, sizeof who, "%s:%d", inet_ntoa(from.sin_addr), ntohs(from.sin_port));
        fcntl(c, F_SETFL, O_NONBLOCK);
        left -= serve_one(c, who, run_id, nnodes, gpus, id, *nonce, served, deadline);
        close(c);
    }
    free(served);
    return 0;
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

int rdv_tcp_await(const RdvTcp *t, const char *run_id, int node_rank, int nnodes, int gpus, double timeout_s, void *id,
                  uint64_t *nonce, char *err, size_t n) {
    const double deadline = timeout_s > 0 ? mono_s() + timeout_s : INFINITY;
    char why[160] = "";
    if (!run_id) run_id = "";
    for (;;) {
        const int fd = dial(t, deadline, why, sizeof why);
        if (fd == -2) {
            snprintf(err, n, "cannot resolve node 0's host \"%s\" (tcp://%s:%d): %s", t->host, t->host, t->port, why);
            return -1;
        }
        if (fd >= 0) { /* something answers: node 0 of this run, or a refusal */
            unsigned char b[RDV_TCP_ANSWER];
            Head h = {K_HELLO, (uint32_t)node_rank, (uint32_t)nnodes, (uint32_t)gpus, ""};
            snprintf(h.run_id, sizeof h.run_id, "%s", run_id);
            put_head(b, &h);
            const double by = fmin(deadline, mono_s() + RDV_TCP_ANSWER_S);
            const size_t got = xfer(fd, b, RDV_TCP_HEAD, 1, by) == RDV_TCP_HEAD ? xfer(fd, b, RDV_TCP_ANSWER, 0, by) : 0;
            close(fd);
            if (got < RDV_TCP_ANSWER || get_head(b, &h) || (h.kind != K_WELCOME && h.kind != K_REFUSED)) {
                snprintf(err, n, "%s:%d %s: not a longctx node 0 (protocol %s), or one that stopped; is the port "
                         "another program's?", t->host, t->port,
                         got == 0 ? "accepted the connection but answered nothing (closed it, or kept silent)"
                         : got < RDV_TCP_ANSWER ? "answered a short message" : "answered in another protocol",
                         RDV_TCP_MAGIC);
                return -1;
            }
            if (h.kind == K_REFUSED) {
                b[RDV_TCP_ANSWER - 1] = 0;
                snprintf(err, n, "node 0 at %s:%d refused node %d: %s", t->host, t->port, node_rank,
                         (char *)b + RDV_TCP_ANSWER - RDV_TCP_WHY);
                return -1;
            }
            /* a welcome from a server that skipped its checks (another version, a bug): check it here */
            if (strncmp(h.run_id, run_id, sizeof h.run_id - 1) || (int)h.nnodes != nnodes || (int)h.gpus != gpus) {
                snprintf(err, n, "node 0 at %s:%d serves run \"%s\" of %u node(s) x %u GPU(s); this node is of run "
                         "\"%s\", %d x %d: not joined", t->host, t->port, h.run_id, h.nnodes, h.gpus, run_id, nnodes, gpus);
                return -1;
            }
            *nonce = 0;
            for (int i = 0; i < 8; i++) *nonce = *nonce << 8 | b[RDV_TCP_HEAD + i];
            memcpy(id, b + RDV_TCP_HEAD + 8, RDV_ID_BYTES);
            return 0;
        }
        if (mono_s() >= deadline) {
            snprintf(err, n, "no node 0 at %s:%d after %g s (--comm-timeout; last try: %s): is node 0 running, with "
                     "--rendezvous tcp://%s:%d, and is the port open between the nodes?", t->host, t->port, timeout_s, why,
                     t->host, t->port);
            return -1;
        }
        usleep(200000);
    }
}
