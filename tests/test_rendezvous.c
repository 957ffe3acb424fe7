/* test_rendezvous.c -- the TCP rendezvous (common/rendezvous.h) between processes on loopback, and a
 * node's place from Slurm's variables. Host only, no GPU (CI runs it): ./build/test_rendezvous.
 * Every server listens on a port the kernel picked (port 0), so parallel runs do not collide; a port
 * "with nothing there" is one picked that way and closed again. About 5 s. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/rendezvous.h"
#include "test.h"

static unsigned char ID[RDV_ID_BYTES]; /* node 0's NCCL id, as bytes */
static char logdir[64];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int listen_any(int *port) { /* a listening socket on a port the kernel picked */
    char err[256];
    const int fd = rdv_tcp_listen(0, err, sizeof err);
    if (fd < 0) { printf("cannot listen: %s\n", err); exit(1); }
    *port = rdv_tcp_port(fd);
    return fd;
}

/* ---------------------------------------------------------------- child processes */
typedef struct {
    pid_t pid;
    int out;           /* the pipe the child writes its verdict to */
} Kid;

static Kid spawn(void) {
    int p[2];
    if (pipe(p)) { perror("pipe"); exit(1); }
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(1); }
    if (pid == 0) { close(p[0]); return (Kid){0, p[1]}; }
    close(p[1]);
    return (Kid){pid, p[0]};
}

/* the child's exit status (-1: not a normal exit) and what it wrote into msg */
static int reap(Kid k, char *msg, size_t n) {
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(k.out, msg + got, n - 1 - got)) > 0) got += (size_t)r;
    msg[got] = 0;
    close(k.out);
    int st = 0;
    waitpid(k.pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* node 0 in a child: serve on fd (closed in the parent), stderr into log; writes its error or "nonce N" */
static Kid server(int fd, const char *run_id, int nnodes, double timeout, const char *log) {
    Kid k = spawn();
    if (k.pid) { close(fd); return k; }
    if (!freopen(log, "w", stderr)) _exit(9);
    setvbuf(stderr, NULL, _IONBF, 0); /* line by line, and nothing left in a buffer at _exit */
    char err[512] = "";
    uint64_t nonce = 0;
    const int rc = rdv_tcp_serve(fd, run_id, nnodes, 8, ID, &nonce, timeout, err, sizeof err);
    if (!rc) snprintf(err, sizeof err, "nonce %llu", (unsigned long long)nonce);
    if (write(k.out, err, strlen(err)) < 0) _exit(8);
    _exit(rc ? 1 : 0);
}

/* node node_rank in a child, after delay s: exit 0 and "nonce N" when it got node 0's id; else its error */
static Kid client(int port, const char *run_id, int node_rank, int nnodes, double timeout, double delay) {
    Kid k = spawn();
    if (k.pid) return k;
    usleep((useconds_t)(delay * 1e6));
    RdvTcp t = {"127.0.0.1", port};
    unsigned char got[RDV_ID_BYTES] = {0};
    uint64_t nonce = 0;
    char err[512] = "";
    int rc = rdv_tcp_await(&t, run_id, node_rank, nnodes, 8, timeout, got, &nonce, err, sizeof err);
    if (!rc && memcmp(got, ID, sizeof got)) rc = 1, snprintf(err, sizeof err, "joined, with another id");
    else if (!rc) snprintf(err, sizeof err, "nonce %llu", (unsigned long long)nonce);
    if (write(k.out, err, strlen(err)) < 0) _exit(8);
    _exit(rc ? 1 : 0);
}

/* a node in this process: 0 or -1, err */
static int join(int port, const char *run_id, int node_rank, int nnodes, double timeout, char *err, size_t n) {
    RdvTcp t = {"127.0.0.1", port};
    unsigned char got[RDV_ID_BYTES] = {0};
    uint64_t nonce;
    err[0] = 0;
    const int rc = rdv_tcp_await(&t, run_id, node_rank, nnodes, 8, timeout, got, &nonce, err, n);
    return rc ? rc : memcmp(got, ID, sizeof got) ? 1 : 0;
}

static void slurp(const char *path, char *buf, size_t n) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    buf[fread(buf, 1, n - 1, f)] = 0;
    fclose(f);
}

/* ---------------------------------------------------------------- the tests */
static void test_forms(void) {
    RdvTcp t;
    char err[512];
    EXPECT(rdv_parse("tcp://10.0.0.1:29500", &t, err, sizeof err) == 1 && !strcmp(t.host, "10.0.0.1") && t.port == 29500,
           "tcp://10.0.0.1:29500 is host 10.0.0.1, port 29500");
    EXPECT(rdv_parse("tcp://node-a17.cluster:65535", &t, err, sizeof err) == 1 && !strcmp(t.host, "node-a17.cluster") &&
               t.port == 65535, "a host name and the highest port");
    EXPECT(rdv_parse("/shared/run7/rdv", &t, err, sizeof err) == 0 && rdv_parse("rdv", &t, err, sizeof err) == 0,
           "a path is the file form");
    static const struct { const char *spec, *says; } bad[] = {
        {"tcp://node0", "missing :PORT"},       {"tcp://node0:", "missing port"},
        {"tcp://:29500", "empty host"},         {"tcp://node0:0", "not in 1..65535"},
        {"tcp://node0:65536", "not in 1..65535"}, {"tcp://node0:-1", "not in 1..65535"},
        {"tcp://node0:29x", "not in 1..65535"}, {"tcp://node0:29500/x", "not in 1..65535"},
        {"tcp://[::1]:29500", "IPv6"},          {"tcp://fe80::1:29500", "IPv6"},
        {"udp://node0:29500", "only scheme"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        EXPECT(rdv_parse(bad[i].spec, &t, err, sizeof err) == -1 && strstr(err, bad[i].says) && strstr(err, bad[i].spec),
               "%s is refused, by name: \"%s\" (got \"%s\")", bad[i].spec, bad[i].says, err);
    }
}

/* nodes 1..3 start before node 0 listens and retry; each gets node 0's id and nonce; node 0 stops as
 * soon as the last is served; the port is free for a restart at once (SO_REUSEADDR) */
static void test_join(void) {
    int port;
    close(listen_any(&port)); /* a free port, nothing on it yet */
    Kid k[3];
    for (int i = 0; i < 3; i++) k[i] = client(port, "job7", i + 1, 4, 10, 0);
    usleep(400000); /* the nodes are knocking at a closed port */
    char err[512];
    const int fd = rdv_tcp_listen(port, err, sizeof err);
    EXPECT(fd >= 0, "node 0 listens on port %d: %s", port, err);
    if (fd < 0) return;
    uint64_t nonce = 0;
    const double t0 = now();
    const int rc = rdv_tcp_serve(fd, "job7", 4, 8, ID, &nonce, 10, err, sizeof err);
    const double took = now() - t0;
    close(fd);
    EXPECT(rc == 0, "node 0 serves nodes 1..3: %s", rc ? err : "");
    EXPECT(took < 5, "node 0 stops serving once every node came (%.1f s, timeout 10 s)", took);
    char want[64], msg[512];
    snprintf(want, sizeof want, "nonce %llu", (unsigned long long)nonce);
    for (int i = 0; i < 3; i++) {
        const int st = reap(k[i], msg, sizeof msg);
        EXPECT(st == 0 && !strcmp(msg, want), "node %d, started before node 0, got its id and nonce (%s)", i + 1, msg);
    }
    const double t1 = now();
    EXPECT(join(port, "job7", 1, 4, 0.5, err, sizeof err) && strstr(err, "no node 0"),
           "after the last node, nothing serves on the port any more: %s", err);
    EXPECT(now() - t1 < 3, "... and a late node gives up at its timeout (%.1f s)", now() - t1);
    const int again = rdv_tcp_listen(port, err, sizeof err); /* the served connections are in TIME_WAIT */
    EXPECT(again >= 0, "a restarted node 0 binds the same port at once: %s", again < 0 ? err : "");
    if (again >= 0) close(again);
}

/* node 0 times out naming exactly the node ranks that never came */
static void test_missing(void) {
    int port;
    const int fd = listen_any(&port);
    char log[128], err[512], msg[512];
    snprintf(log, sizeof log, "%s/missing.log", logdir);
    const double t0 = now();
    Kid s = server(fd, "job8", 6, 1.5, log);
    EXPECT(!join(port, "job8", 1, 6, 5, err, sizeof err), "node 1 joins: %s", err);
    EXPECT(!join(port, "job8", 3, 6, 5, err, sizeof err), "node 3 joins: %s", err);
    EXPECT(!join(port, "job8", 4, 6, 5, err, sizeof err), "node 4 joins: %s", err);
    const int st = reap(s, msg, sizeof msg);
    EXPECT(st == 1 && strstr(msg, "never came") && strstr(msg, "node rank(s): 2, 5;"),
           "node 0 stops at its timeout naming nodes 2 and 5, no other: %s", msg);
    EXPECT(now() - t0 > 1.4 && now() - t0 < 4, "... at its timeout (%.1f s of 1.5)", now() - t0);
}

/* a fake node 0 in a child: accepts one connection and answers as told, then exits */
enum { F_CLOSE, F_GARBAGE, F_SILENT, F_NO_CHECKS };
static Kid fake_server(int fd, int how) {
    Kid k = spawn();
    if (k.pid) { close(fd); return k; }
    fcntl(fd, F_SETFL, 0); /* blocking accept */
    const int c = accept(fd, NULL, NULL);
    unsigned char b[RDV_TCP_ANSWER] = {0};
    if (how == F_GARBAGE) {
        const char *http = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        memset(b, ' ', sizeof b);
        memcpy(b, http, strlen(http));
        if (write(c, b, sizeof b) < 0) _exit(8);
    } else if (how == F_SILENT) {
        sleep(5); /* the client must not wait for this */
    } else if (how == F_NO_CHECKS) { /* a welcome of run "old-run" to anyone, in the documented layout */
        if (read(c, b, RDV_TCP_HEAD) != RDV_TCP_HEAD) _exit(7);
        memcpy(b, RDV_TCP_MAGIC, 8);
        b[11] = 2;              /* kind: welcome */
        b[19] = 2, b[23] = 8;   /* 2 nodes x 8 GPUs, as asked */
        memset(b + 24, 0, 64);
        memcpy(b + 24, "old-run", 7);
        memcpy(b + RDV_TCP_HEAD + 8, ID, RDV_ID_BYTES);
        if (write(c, b, sizeof b) < 0) _exit(8);
    }
    close(c);
    _exit(0);
}

/* a node refuses what is not node 0 of its run, at once, rather than joining or hanging */
static void test_stale(void) {
    int port;
    int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[4096];
    snprintf(log, sizeof log, "%s/stale.log", logdir);
    Kid s = server(fd, "old-run", 2, 5, log);
    EXPECT(join(port, "new-run", 1, 2, 5, err, sizeof err) == -1 && strstr(err, "refused node 1") &&
               strstr(err, "\"old-run\"") && strstr(err, "\"new-run\""),
           "node 0 of another run refuses this node, which says so and stops: %s", err);
    EXPECT(join(port, "old-run", 1, 3, 5, err, sizeof err) == -1 && strstr(err, "--nnodes 2") && strstr(err, "--nnodes 3"),
           "a node given another job shape is refused: %s", err);
    EXPECT(!join(port, "old-run", 1, 2, 5, err, sizeof err), "node 0 kept serving: its own node 1 joins: %s", err);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done once its node 1 came: %s", msg);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "refused node 1 from 127.0.0.1") && strstr(text, "\"new-run\"") && strstr(text, "--nnodes 3"),
           "node 0 logs both refusals: %s", text);
    /* a server that skips the checks (another version, a bug): the node checks the welcome itself */
    fd = listen_any(&port);
    s = fake_server(fd, F_NO_CHECKS);
    EXPECT(join(port, "new-run", 1, 2, 5, err, sizeof err) == -1 && strstr(err, "serves run \"old-run\"") &&
               strstr(err, "not joined"),
           "a welcome of another run is not joined: %s", err);
    reap(s, msg, sizeof msg);
    /* not the protocol: closed at once, garbage, silence */
    static const char *what[3] = {"closes at once", "answers HTTP", "says nothing"};
    static const char *says[3] = {"answered nothing", "another protocol", "answered nothing"};
    for (int how = F_CLOSE; how <= F_SILENT; how++) {
        fd = listen_any(&port);
        s = fake_server(fd, how);
        const double t0 = now(), limit = how == F_SILENT ? 1.5 : 10;
        const int rc = join(port, "job9", 1, 2, limit, err, sizeof err);
        const double took = now() - t0;
        EXPECT(rc == -1 && strstr(err, "not a longctx node 0") && strstr(err, says[how]),
               "a server that %s is refused: %s", what[how], err);
        EXPECT(took < (how == F_SILENT ? 3 : 2), how == F_SILENT ? "... at its timeout of 1.5 s, not hanging (%.1f s)"
                                                            : "... at once, not at the timeout (%.1f s)", took);
        kill(s.pid, SIGKILL);
        reap(s, msg, sizeof msg);
    }
}

/* a node that reaches no server stops at its timeout naming HOST:PORT */
static void test_no_server(void) {
    int port;
    close(listen_any(&port));
    char err[512], where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    const double t0 = now();
    const int rc = join(port, "job10", 1, 2, 1.0, err, sizeof err);
    const double took = now() - t0;
    EXPECT(rc == -1 && strstr(err, "no node 0 at") && strstr(err, where), "no server: the node names %s: %s", where, err);
    EXPECT(took > 0.9 && took < 3, "... after its timeout of 1 s (%.1f s)", took);
    RdvTcp t = {"no-such-host.invalid", port};
    unsigned char got[RDV_ID_BYTES];
    uint64_t nonce;
    EXPECT(rdv_tcp_await(&t, "job10", 1, 2, 8, 1.0, got, &nonce, err, sizeof err) == -1 &&
               strstr(err, "no-such-host.invalid"), "an unknown host is named: %s", err);
}

/* two nodes given the same node rank: the second is refused; node 0 still waits for the real one */
static void test_duplicate(void) {
    int port;
    const int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[4096];
    snprintf(log, sizeof log, "%s/dup.log", logdir);
    Kid s = server(fd, "job11", 3, 5, log);
    EXPECT(!join(port, "job11", 1, 3, 5, err, sizeof err), "node 1 joins: %s", err);
    EXPECT(join(port, "job11", 1, 3, 5, err, sizeof err) == -1 && strstr(err, "node rank 1 has already joined"),
           "a second node 1 is refused: %s", err);
    EXPECT(join(port, "job11", 3, 3, 5, err, sizeof err) == -1 && strstr(err, "not in 1..2"),
           "node rank 3 of 3 nodes is refused: %s", err);
    Kid c = client(port, "job11", 2, 3, 5, 0);
    EXPECT(reap(c, msg, sizeof msg) == 0, "node 2 joins after them: %s", msg);
    EXPECT(reap(s, err, sizeof err) == 0, "node 0 is done with nodes 1 and 2 served: %s", err);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "refused node 1") && strstr(text, "already joined"), "node 0 logs the duplicate: %s", text);
}

/* a node's place: flags, else Slurm's variables (checked as the flags are), else one node */
static void test_place(void) {
    static const char *vars[] = {"SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NODEID", "SLURM_STEP_NUM_TASKS",
                                 "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "LONGCTX_RUN_ID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    char err[512];
    const char *nf, *rf;
    int64_t nn = 0, nr = -1;
    EXPECT(!rdv_place(&nn, &nr, 1, &nf, &rf, err, sizeof err) && nn == 1 && nr == 0 && !strcmp(nf, "default") &&
               !strcmp(rf, "default"), "no flags, no Slurm: node 0 of 1, by default");
    setenv("SLURM_NNODES", "2", 1), setenv("SLURM_NODEID", "1", 1);
    nn = 0, nr = -1;
    EXPECT(!rdv_place(&nn, &nr, 1, &nf, &rf, err, sizeof err) && nn == 2 && nr == 1 && !strcmp(nf, "SLURM_NNODES") &&
               !strcmp(rf, "SLURM_NODEID"), "under Slurm: node 1 of 2, from SLURM_NODEID and SLURM_NNODES (%s)", err);
    nn = 4, nr = 3;
    EXPECT(!rdv_place(&nn, &nr, 1, &nf, &rf, err, sizeof err) && nn == 4 && nr == 3 && !strcmp(nf, "--nnodes") &&
               !strcmp(rf, "--node-rank"), "flags given win over Slurm's variables");
    nn = 0, nr = -1;
    EXPECT(!rdv_place(&nn, &nr, 0, &nf, &rf, err, sizeof err) && nn == 1 && nr == 0,
           "--local-ranks / --rehearse (env off) do not read Slurm's variables");
    unsetenv("SLURM_NNODES"), setenv("SLURM_JOB_NUM_NODES", "3", 1), setenv("SLURM_NODEID", "2", 1);
    nn = 0, nr = -1;
    EXPECT(!rdv_place(&nn, &nr, 1, &nf, &rf, err, sizeof err) && nn == 3 && nr == 2 && !strcmp(nf, "SLURM_JOB_NUM_NODES"),
           "SLURM_JOB_NUM_NODES when SLURM_NNODES is absent");
    static const struct { const char *var, *val, *says; } bad[] = {
        {"SLURM_NODEID", "abc", "SLURM_NODEID=\"abc\" is not a decimal integer"},
        {"SLURM_NODEID", "1 ", "SLURM_NODEID=\"1 \""},
        {"SLURM_NODEID", "3", "SLURM_NODEID=3 is outside 0..2 (the job has 3 node(s), from SLURM_JOB_NUM_NODES)"},
        {"SLURM_NODEID", "-1", "SLURM_NODEID=-1 is outside"},
        {"SLURM_JOB_NUM_NODES", "0", "SLURM_JOB_NUM_NODES=0 is outside 1..65536"},
        {"SLURM_JOB_NUM_NODES", "2x", "SLURM_JOB_NUM_NODES=\"2x\""},
        {"SLURM_STEP_NUM_TASKS", "24", "Slurm runs 24 tasks on 3 node(s)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("SLURM_JOB_NUM_NODES", "3", 1), setenv("SLURM_NODEID", "2", 1), unsetenv("SLURM_STEP_NUM_TASKS");
        setenv(bad[i].var, bad[i].val, 1);
        nn = 0, nr = -1, err[0] = 0;
        EXPECT(rdv_place(&nn, &nr, 1, &nf, &rf, err, sizeof err) == -1 && strstr(err, bad[i].says),
               "%s=\"%s\" is refused by name: %s", bad[i].var, bad[i].val, err);
    }
    setenv("SLURM_STEP_NUM_TASKS", "3", 1);
    nn = 0, nr = -1;
    EXPECT(!rdv_place(&nn, &nr, 1, &nf, &rf, err, sizeof err), "srun with one task per node is fine: %s", err);
    setenv("SLURM_JOB_ID", "4242", 1), setenv("SLURM_STEP_ID", "0", 1);
    int env;
    EXPECT(!strcmp(rdv_run_id(NULL, &env), "slurm-4242.0") && !strcmp(rdv_run_id_from(NULL), "SLURM_JOB_ID, SLURM_STEP_ID")
               && !strcmp(rdv_run_id_from("mine"), "--run-id"), "the run id and where it came from: %s (%s)",
           rdv_run_id(NULL, &env), rdv_run_id_from(NULL));
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    EXPECT(!strcmp(rdv_run_id_from(NULL), ""), "no run id from anywhere");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < RDV_ID_BYTES; i++) ID[i] = (unsigned char)(i * 37 + 11);
    snprintf(logdir, sizeof logdir, "/tmp/test_rdv.XXXXXX");
    if (!mkdtemp(logdir)) { perror("mkdtemp"); return 1; }
    const double t0 = now();
    test_forms();
    test_place();
    test_join();
    test_missing();
    test_stale();
    test_no_server();
    test_duplicate();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", logdir);
    if (system(cmd)) printf("warning: could not remove %s\n", logdir);
    printf("(%.1f s)\n", now() - t0);
    return test_summary();
}
