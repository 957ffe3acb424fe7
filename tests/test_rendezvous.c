/* test_rendezvous.c -- the rendezvous (common/rendezvous.h) between processes on loopback: SHA-256
 * and HMAC against their published vectors, the job secret, the TCP form (joins, refusals, and the
 * attacks a stray process on the network can try: hello first, idle and crowding connections, a
 * wrong or replayed proof, a hostile run id), the file form's guards (a planted symlink, the file's
 * mode), and a node's place from Slurm's variables. Host only, no GPU (CI runs it):
 * ./build/test_rendezvous. Every server listens on a port the kernel picked (port 0), so parallel
 * runs do not collide; a port "with nothing there" is one picked that way and closed again. A few
 * seconds. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/rendezvous.h"
#include "../common/sha256.h"
#include "test.h"

static unsigned char ID[RDV_ID_BYTES]; /* node 0's NCCL id, as bytes */
static RdvSecret KEY, OTHER;           /* this job's secret, and another job's */
static char logdir[64];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int listen_any(int *port) { /* a listening socket on 127.0.0.1, a port the kernel picked */
    char err[256];
    const int fd = rdv_tcp_listen("127.0.0.1", 0, err, sizeof err);
    if (fd < 0) { printf("cannot listen: %s\n", err); exit(1); }
    *port = rdv_tcp_port(fd);
    return fd;
}

static void slurp(const char *path, char *buf, size_t n) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    buf[fread(buf, 1, n - 1, f)] = 0;
    fclose(f);
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
    const int rc = rdv_tcp_serve(fd, &KEY, run_id, nnodes, 8, ID, &nonce, timeout, err, sizeof err);
    if (!rc) snprintf(err, sizeof err, "nonce %llu", (unsigned long long)nonce);
    if (write(k.out, err, strlen(err)) < 0) _exit(8);
    _exit(rc ? 1 : 0);
}

/* a node of key in this process: 0 when it got node 0's id, -1 + err (1: another id) */
static int join_as(const RdvSecret *key, int port, const char *run_id, int node_rank, int nnodes, double timeout,
                   char *err, size_t n) {
    RdvTcp t = {"127.0.0.1", port};
    unsigned char got[RDV_ID_BYTES] = {0};
    uint64_t nonce;
    err[0] = 0;
    const int rc = rdv_tcp_await(&t, key, run_id, node_rank, nnodes, 8, timeout, got, &nonce, err, n);
    if (!rc) snprintf(err, n, "nonce %llu", (unsigned long long)nonce);
    return rc ? rc : memcmp(got, ID, sizeof got) ? 1 : 0;
}
static int join(int port, const char *run_id, int node_rank, int nnodes, double timeout, char *err, size_t n) {
    return join_as(&KEY, port, run_id, node_rank, nnodes, timeout, err, n);
}

/* node node_rank in a child, after delay s: exit 0 and "nonce N" when it got node 0's id; else its error */
static Kid client(int port, const char *run_id, int node_rank, int nnodes, double timeout, double delay) {
    Kid k = spawn();
    if (k.pid) return k;
    usleep((useconds_t)(delay * 1e6));
    char err[512];
    const int rc = join(port, run_id, node_rank, nnodes, timeout, err, sizeof err);
    if (rc > 0) snprintf(err, sizeof err, "joined, with another id");
    if (write(k.out, err, strlen(err)) < 0) _exit(8);
    _exit(rc ? 1 : 0);
}

/* ---------------------------------------------------------------- the protocol by hand */
static int dial(int port) { /* a blocking connection to 127.0.0.1:port, 3 s limits; -1 (said) when refused */
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a)) return fd;
    perror("connect");
    if (fd >= 0) close(fd);
    return -1;
}
static size_t get_all(int fd, void *p, size_t n) {
    size_t done = 0;
    ssize_t r;
    while (done < n && (r = recv(fd, (char *)p + done, n - done, 0)) > 0) done += (size_t)r;
    return done;
}
static void put_all(int fd, const void *p, size_t n) {
    if (send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n) printf("warning: short send\n");
}
static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}

/* a hello in the layout of rendezvous.h for node 0's nonce n0, proved with key (NULL: a zero proof) */
static void make_hello(unsigned char *h, const unsigned char *n0, const RdvSecret *key, const char *run_id, uint32_t rank,
                       uint32_t nnodes) {
    memset(h, 0, RDV_TCP_HELLO);
    memcpy(h, RDV_TCP_MAGIC, 8);
    put32(h + 8, 1), put32(h + 12, rank), put32(h + 16, nnodes), put32(h + 20, 8);
    memcpy(h + 24, run_id, strnlen(run_id, 64));
    for (int i = 0; i < RDV_TCP_NONCE; i++) h[RDV_TCP_HEAD + i] = (unsigned char)(rand() & 255);
    if (key) rdv_tcp_proof(key, RDV_PROOF_HELLO, n0, h + RDV_TCP_HEAD, h, RDV_TCP_HELLO - 32, h + RDV_TCP_HELLO - 32);
}

/* one exchange by hand: the challenge read into ch, a hello sent (the bytes of say, or one made for
 * the challenge by make_hello, byte flip then XOR 1 when flip > 0) and kept in hello, the answer read
 * into a (RDV_TCP_ANSWER): the answer's bytes read */
static size_t by_hand(int port, const RdvSecret *key, const char *run_id, uint32_t rank, uint32_t nnodes,
                      const unsigned char *say, int flip, unsigned char *ch, unsigned char *hello, unsigned char *a) {
    const int fd = dial(port);
    if (fd < 0) return 0;
    size_t got = get_all(fd, ch, RDV_TCP_CHALLENGE);
    if (got == RDV_TCP_CHALLENGE) {
        if (say) memcpy(hello, say, RDV_TCP_HELLO);
        else make_hello(hello, ch + 16, key, run_id, rank, nnodes);
        if (flip > 0) hello[flip] ^= 1;
        put_all(fd, hello, RDV_TCP_HELLO);
        got = get_all(fd, a, RDV_TCP_ANSWER);
    } else got = 0;
    close(fd);
    return got;
}
/* the refusal's reason in an answer */
static const char *reason(const unsigned char *a) { return (const char *)a + RDV_TCP_ANSWER - 32 - RDV_TCP_WHY; }

/* ---------------------------------------------------------------- SHA-256, HMAC, escaping */
static int hex_is(const unsigned char *d, size_t n, const char *hex) {
    char s[2 * SHA256_BYTES + 1];
    for (size_t i = 0; i < n; i++) snprintf(s + 2 * i, 3, "%02x", d[i]);
    return !strncmp(s, hex, 2 * n) && strlen(hex) == 2 * n;
}

static void test_sha256(void) {
    static const struct { const char *msg, *hex; } fips[] = { /* FIPS 180-2, appendix B; and the empty message */
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    };
    unsigned char d[SHA256_BYTES];
    for (size_t i = 0; i < sizeof fips / sizeof fips[0]; i++) {
        sha256(fips[i].msg, strlen(fips[i].msg), d);
        EXPECT(hex_is(d, 32, fips[i].hex), "SHA-256(\"%s\") is FIPS 180-2's", fips[i].msg);
    }
    Sha256 s; /* a million 'a', fed in uneven pieces: the block boundaries fall everywhere */
    char a[997];
    memset(a, 'a', sizeof a);
    sha256_init(&s);
    for (size_t left = 1000000; left;) {
        const size_t k = left < sizeof a ? left : (left % 7) + 990;
        sha256_update(&s, a, k);
        left -= k;
    }
    sha256_final(&s, d);
    EXPECT(hex_is(d, 32, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
           "SHA-256 of a million 'a' is FIPS 180-2's");
    unsigned char k4[25], kaa[131], kb[20], kaa20[20], kc[20], dd[50], cd[50];
    for (int i = 0; i < 25; i++) k4[i] = (unsigned char)(i + 1);
    memset(kaa, 0xaa, sizeof kaa), memset(kb, 0x0b, sizeof kb), memset(kaa20, 0xaa, sizeof kaa20);
    memset(kc, 0x0c, sizeof kc), memset(dd, 0xdd, sizeof dd), memset(cd, 0xcd, sizeof cd);
    static const char big[] = "This is a test using a larger than block-size key and a larger than block-size data. The key "
                              "needs to be hashed before being used by the HMAC algorithm.";
    const struct { const void *k; size_t kn; const void *m; size_t mn; size_t bytes; const char *hex; } rfc[] = { /* RFC 4231 */
        {kb, 20, "Hi There", 8, 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?", 28, 32, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {kaa20, 20, dd, 50, 32, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {k4, 25, cd, 50, 32, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {kc, 20, "Test With Truncation", 20, 16, "a3b6167473100ee06e0c796c2955552b"},
        {kaa, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54, 32,
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {kaa, 131, big, sizeof big - 1, 32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (size_t i = 0; i < sizeof rfc / sizeof rfc[0]; i++) {
        hmac_sha256(rfc[i].k, rfc[i].kn, rfc[i].m, rfc[i].mn, d);
        EXPECT(hex_is(d, rfc[i].bytes, rfc[i].hex), "HMAC-SHA256 is RFC 4231's, test case %zu", i + 1);
    }
    EXPECT(same_bytes("abcd", "abcd", 4) && !same_bytes("abcd", "abce", 4), "same_bytes compares every byte");
}

static void test_escape(void) {
    char out[64];
    EXPECT(!strcmp(rdv_escape("job-7.a_b", 9, out, sizeof out), "job-7.a_b"), "printable text is as it was: %s", out);
    EXPECT(!strcmp(rdv_escape("a\x1b[2J\nb\x7f\xc3", 9, out, sizeof out), "a\\x1b[2J\\x0ab\\x7f\\xc3"),
           "escape sequences, newlines and bytes past ASCII become \\xNN: %s", out);
    char twice[64];
    EXPECT(!strcmp(rdv_escape(out, strlen(out), twice, sizeof twice), out), "escaped text escaped again is the same: %s", twice);
    char big[300];
    memset(big, 'x', sizeof big);
    rdv_escape(big, sizeof big, out, 20);
    EXPECT(strlen(out) == 19 && !strcmp(out + 16, "..."), "a long text is cut to fit, marked ...: %s", out);
    rdv_escape("\x01\x02\x03\x04\x05", 5, out, 12);
    EXPECT(strlen(out) < 12 && strstr(out, "..."), "... and never past its buffer in mid-escape: %s", out);
}

/* ---------------------------------------------------------------- the job secret */
static int secret_with(const char *value, const char *file, RdvSecret *s, char *err, size_t n) {
    unsetenv("LONGCTX_JOB_SECRET"), unsetenv("LONGCTX_JOB_SECRET_FILE");
    if (value) setenv("LONGCTX_JOB_SECRET", value, 1);
    if (file) setenv("LONGCTX_JOB_SECRET_FILE", file, 1);
    err[0] = 0;
    const int rc = rdv_secret(s, err, n);
    unsetenv("LONGCTX_JOB_SECRET"), unsetenv("LONGCTX_JOB_SECRET_FILE");
    return rc;
}

static void write_file(const char *path, const char *text, mode_t mode) {
    unlink(path);
    const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) { perror(path); exit(1); }
    fchmod(fd, mode);
    close(fd);
}

static void test_secret(void) {
    RdvSecret s;
    char err[512], f[128], g[128], l[128];
    EXPECT(secret_with(NULL, NULL, &s, err, sizeof err) == 0, "no secret set: none (a local or rehearsal run needs none)");
    EXPECT(secret_with("0123456789abcdef\n", NULL, &s, err, sizeof err) == 1 && s.len == 16 && !memcmp(s.key, "0123456789abcdef", 16)
               && !strcmp(s.from, "LONGCTX_JOB_SECRET"), "LONGCTX_JOB_SECRET, its trailing newline not part of it: %s", err);
    EXPECT(secret_with("short", NULL, &s, err, sizeof err) == -1 && strstr(err, "LONGCTX_JOB_SECRET holds 5 bytes") &&
               strstr(err, "16..1024"), "a secret of 5 bytes is refused by name: %s", err);
    snprintf(f, sizeof f, "%s/secret", logdir);
    write_file(f, "a-secret-from-a-file-of-mine\n", 0600);
    EXPECT(secret_with(NULL, f, &s, err, sizeof err) == 1 && s.len == 28 && !memcmp(s.key, "a-secret-from-a-file-of-mine", 28),
           "LONGCTX_JOB_SECRET_FILE, a file only this user can read: %s", err);
    snprintf(l, sizeof l, "%s/secret-link", logdir);
    if (symlink(f, l)) perror("symlink");
    EXPECT(secret_with(NULL, l, &s, err, sizeof err) == 1 && s.len == 28, "... named through a symbolic link: %s", err);
    snprintf(g, sizeof g, "%s/secret-644", logdir);
    write_file(g, "a-secret-anyone-on-the-machine-may-read\n", 0644);
    EXPECT(secret_with(NULL, g, &s, err, sizeof err) == -1 && strstr(err, "LONGCTX_JOB_SECRET_FILE=") && strstr(err, g) &&
               strstr(err, "group or others") && strstr(err, "0644"), "a secret file others can read is refused by name: %s", err);
    chmod(g, 0620);
    EXPECT(secret_with(NULL, g, &s, err, sizeof err) == -1 && strstr(err, "0620"), "... and one the group can write: %s", err);
    EXPECT(secret_with(NULL, logdir, &s, err, sizeof err) == -1 && strstr(err, "not a regular file"),
           "a directory is no secret file: %s", err);
    snprintf(g, sizeof g, "%s/none", logdir);
    EXPECT(secret_with(NULL, g, &s, err, sizeof err) == -1 && strstr(err, "LONGCTX_JOB_SECRET_FILE=") && strstr(err, "No such file"),
           "a missing secret file is refused by name: %s", err);
    EXPECT(secret_with("0123456789abcdef", f, &s, err, sizeof err) == -1 && strstr(err, "both set"),
           "both variables set: refused, not one picked silently: %s", err);
    char join_err[512];
    EXPECT(join_as(NULL, 9, "job", 1, 2, 0.1, join_err, sizeof join_err) == -1 && strstr(join_err, "LONGCTX_JOB_SECRET_FILE") &&
               strstr(join_err, "/dev/urandom"), "a node without a secret does not even connect; it says how to set one: %s", join_err);
    uint64_t nonce;
    EXPECT(rdv_tcp_serve(-1, NULL, "job", 2, 8, ID, &nonce, 0.1, err, sizeof err) == -1 && strstr(err, "LONGCTX_JOB_SECRET"),
           "node 0 without a secret does not serve: %s", err);
}

/* ---------------------------------------------------------------- --rendezvous, node 0's address */
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
    /* a 5000-character host: the spec is quoted cut, so the reason still fits the message */
    char spec[5100];
    snprintf(spec, sizeof spec, "tcp://%05000d:29500", 7);
    EXPECT(rdv_parse(spec, &t, err, sizeof err) == -1 && strstr(err, "the host is 5000 characters, at most 255") &&
               strstr(err, "...") && strlen(err) < 300, "a 5000-character host is refused with its reason: %s", err);
    memset(spec, 'p', sizeof spec - 1), spec[sizeof spec - 1] = 0;
    EXPECT(rdv_parse(spec, &t, err, sizeof err) == -1 && strstr(err, "path of 5099 characters, at most 4000"),
           "an over-long file path is refused, not cut: %s", err);
    EXPECT(rdv_parse("tcp://node\x1b[2J:2\n", &t, err, sizeof err) == -1 && !strchr(err, 0x1b) && !strchr(err, '\n') &&
               strstr(err, "\\x1b[2J"), "a spec's control characters are shown escaped: %s", err);
}

/* node 0 binds the address it was given, not every interface; another machine's is refused by name */
static void test_listen(void) {
    char err[512];
    const int fd = rdv_tcp_listen("127.0.0.1", 0, err, sizeof err);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    EXPECT(fd >= 0 && !getsockname(fd, (struct sockaddr *)&a, &len) && a.sin_addr.s_addr == htonl(INADDR_LOOPBACK),
           "tcp://127.0.0.1:PORT binds 127.0.0.1 only, not 0.0.0.0: %s", fd < 0 ? err : inet_ntoa(a.sin_addr));
    if (fd >= 0) close(fd);
    const double t0 = now();
    EXPECT(rdv_tcp_listen("192.0.2.1", 0, err, sizeof err) == -1 && strstr(err, "\"192.0.2.1\"") &&
               strstr(err, "not one of this machine's addresses") && strstr(err, "--node-rank 0"),
           "a host that is not this machine is refused by name: %s", err);
    EXPECT(rdv_tcp_listen("no-such-host.invalid", 0, err, sizeof err) == -1 && strstr(err, "\"no-such-host.invalid\"") &&
               strstr(err, "cannot be resolved"), "a host that does not resolve is refused by name: %s", err);
    EXPECT(now() - t0 < 5, "... at once (%.1f s)", now() - t0);
    char host[256] = "";
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int loop_only = !gethostname(host, sizeof host) && strcmp(host, "localhost") && !getaddrinfo(host, NULL, &hints, &res);
    for (struct addrinfo *r = res; r && loop_only; r = r->ai_next)
        loop_only = (ntohl(((struct sockaddr_in *)r->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    if (res) freeaddrinfo(res);
    if (loop_only) /* this machine's /etc/hosts maps its name to loopback, as Debian's does */
        EXPECT(rdv_tcp_listen(host, 0, err, sizeof err) == -1 && strstr(err, "loopback address the other nodes cannot reach"),
               "a name that resolves here only to loopback is refused: %s", err);
}

/* ---------------------------------------------------------------- joins and refusals */
/* nodes 1..3 start before node 0 listens and retry; each gets node 0's id and nonce; node 0 stops as
 * soon as the last is served; the port is free for a restart at once (SO_REUSEADDR) */
static void test_join(void) {
    int port;
    close(listen_any(&port)); /* a free port, nothing on it yet */
    Kid k[3];
    for (int i = 0; i < 3; i++) k[i] = client(port, "job7", i + 1, 4, 10, 0);
    usleep(400000); /* the nodes are knocking at a closed port */
    char err[512];
    const int fd = rdv_tcp_listen("127.0.0.1", port, err, sizeof err);
    EXPECT(fd >= 0, "node 0 listens on port %d: %s", port, err);
    if (fd < 0) return;
    uint64_t nonce = 0;
    const double t0 = now();
    const int rc = rdv_tcp_serve(fd, &KEY, "job7", 4, 8, ID, &nonce, 10, err, sizeof err);
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
    const int again = rdv_tcp_listen("127.0.0.1", port, err, sizeof err); /* the served connections are in TIME_WAIT */
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
enum { F_CLOSE, F_GARBAGE, F_SILENT, F_NO_CHECKS, F_IMPOSTOR, F_REPLAY };
static unsigned char RECORDED[RDV_TCP_CHALLENGE + RDV_TCP_ANSWER]; /* F_REPLAY's: a challenge and answer seen on the wire */
static Kid fake_server(int fd, int how) {
    Kid k = spawn();
    if (k.pid) { close(fd); return k; }
    fcntl(fd, F_SETFL, 0); /* blocking accept */
    const int c = accept(fd, NULL, NULL);
    unsigned char b[RDV_TCP_ANSWER] = {0}, ch[RDV_TCP_CHALLENGE] = {0}, h[RDV_TCP_HELLO];
    memcpy(ch, RDV_TCP_MAGIC, 8), ch[11] = 4;
    for (int i = 16; i < RDV_TCP_CHALLENGE; i++) ch[i] = (unsigned char)i;
    if (how == F_GARBAGE) {
        const char *http = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
        memset(b, ' ', sizeof b);
        memcpy(b, http, strlen(http));
        put_all(c, b, sizeof b);
    } else if (how == F_SILENT) {
        sleep(5); /* the client must not wait for this */
    } else if (how == F_REPLAY) { /* node 0's challenge and welcome as recorded, to a node that dials again */
        put_all(c, RECORDED, RDV_TCP_CHALLENGE);
        get_all(c, h, sizeof h);
        put_all(c, RECORDED + RDV_TCP_CHALLENGE, RDV_TCP_ANSWER);
    } else if (how == F_NO_CHECKS || how == F_IMPOSTOR) { /* a welcome of run "old-run" to anyone */
        put_all(c, ch, sizeof ch);
        if (get_all(c, h, sizeof h) != sizeof h) _exit(7);
        memcpy(b, RDV_TCP_MAGIC, 8);
        b[11] = 2;              /* kind: welcome */
        memcpy(b + 12, h + 12, 4);
        b[19] = 2, b[23] = 8;   /* 2 nodes x 8 GPUs, as asked */
        memcpy(b + 24, "old-run", 7);
        memcpy(b + RDV_TCP_HEAD + 8, ID, RDV_ID_BYTES);
        /* F_NO_CHECKS knows the secret (a server that skips its checks); F_IMPOSTOR does not */
        rdv_tcp_proof(how == F_NO_CHECKS ? &KEY : &OTHER, RDV_PROOF_ANSWER, ch + 16, h + RDV_TCP_HEAD, b,
                      RDV_TCP_ANSWER - 32, b + RDV_TCP_ANSWER - 32);
        put_all(c, b, sizeof b);
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
    EXPECT(join(port, "new-run", 1, 2, 5, err, sizeof err) == -1 && strstr(err, "node 0 at") && strstr(err, "refused node 1") &&
               strstr(err, "\"old-run\"") && strstr(err, "\"new-run\""),
           "node 0 of another run refuses this node, which says so and stops: %s", err);
    EXPECT(join(port, "old-run", 1, 3, 5, err, sizeof err) == -1 && strstr(err, "--nnodes 2") && strstr(err, "--nnodes 3"),
           "a node given another job shape is refused: %s", err);
    EXPECT(!join(port, "old-run", 1, 2, 5, err, sizeof err), "node 0 kept serving: its own node 1 joins: %s", err);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done once its node 1 came: %s", msg);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "refused a hello from 127.0.0.1") && strstr(text, "\"new-run\"") && strstr(text, "--nnodes 3"),
           "node 0 logs both refusals: %s", text);
    /* a server that knows the secret but skips the checks (a bug): the node checks the welcome itself */
    fd = listen_any(&port);
    s = fake_server(fd, F_NO_CHECKS);
    EXPECT(join(port, "new-run", 1, 2, 5, err, sizeof err) == -1 && strstr(err, "serves run \"old-run\"") &&
               strstr(err, "not joined"), "a welcome of another run is not joined: %s", err);
    reap(s, msg, sizeof msg);
    /* one that does not know it: its welcome, though of this run and shape, is not taken */
    fd = listen_any(&port);
    s = fake_server(fd, F_IMPOSTOR);
    EXPECT(join(port, "old-run", 1, 2, 5, err, sizeof err) == -1 && strstr(err, "does not prove this job's secret") &&
               strstr(err, "not joined"), "a welcome that does not prove the secret is not taken: %s", err);
    reap(s, msg, sizeof msg);
    /* not the protocol: garbage stops the node at once; a close or silence is tried again until the timeout */
    static const char *what[3] = {"closes at once", "answers HTTP", "says nothing"};
    static const char *says[3] = {"no node 0 at", "not a longctx node 0", "no node 0 at"};
    for (int how = F_CLOSE; how <= F_SILENT; how++) {
        fd = listen_any(&port);
        s = fake_server(fd, how);
        const double t0 = now(), limit = how == F_GARBAGE ? 10 : 1.5;
        const int rc = join(port, "job9", 1, 2, limit, err, sizeof err);
        const double took = now() - t0;
        EXPECT(rc == -1 && strstr(err, says[how]), "a server that %s is refused: %s", what[how], err);
        EXPECT(how == F_GARBAGE ? took < 2 : took > 1.4 && took < 3, how == F_GARBAGE ? "... at once (%.1f s)"
                                                          : "... at its timeout of 1.5 s, trying again, not hanging (%.1f s)", took);
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
    EXPECT(rdv_tcp_await(&t, &KEY, "job10", 1, 2, 8, 1.0, got, &nonce, err, sizeof err) == -1 &&
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
    EXPECT(strstr(text, "refused a hello") && strstr(text, "(node 1 of run") && strstr(text, "already joined"),
           "node 0 logs the duplicate: %s", text);
}

/* ---------------------------------------------------------------- what a stray process can try */
static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* a stray process says hello first as node 1 (the run id outside Slurm is empty; Slurm's is public):
 * without the secret it is refused and learns no id; the real node 1 is served after it */
static void test_stray(void) {
    int port;
    const int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[8192];
    snprintf(log, sizeof log, "%s/stray.log", logdir);
    Kid s = server(fd, "", 2, 5, log);
    unsigned char ch[RDV_TCP_CHALLENGE], hello[RDV_TCP_HELLO], a[RDV_TCP_ANSWER];
    EXPECT(by_hand(port, NULL, "", 1, 2, NULL, 0, ch, hello, a) == RDV_TCP_ANSWER && a[11] == 3 &&
               strstr(reason(a), "does not prove this job's secret") && all_zero(a + RDV_TCP_HEAD + 8, RDV_ID_BYTES),
           "a stray hello first as node 1, with no proof, is refused and gets no id: %s", reason(a));
    EXPECT(join_as(&OTHER, port, "", 1, 2, 5, err, sizeof err) == -1 && strstr(err, "does not prove this job's secret"),
           "a stray process with a secret of its own is refused: %s", err);
    Kid c = client(port, "", 1, 2, 5, 0);
    EXPECT(reap(c, msg, sizeof msg) == 0, "the real node 1 is served after them: %s", msg);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done, its node served, nobody locked out: %s", msg);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "refused a hello from 127.0.0.1") && strstr(text, "does not prove"), "node 0 logs the refusals: %s", text);
}

/* a hello whose proof is wrong in one bit, or whose run id, node rank or shape changed after it was
 * proved, is refused; the real node is still served */
static void test_wrong_proof(void) {
    int port;
    const int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[8192];
    snprintf(log, sizeof log, "%s/proof.log", logdir);
    Kid s = server(fd, "job14", 2, 5, log);
    unsigned char ch[RDV_TCP_CHALLENGE], hello[RDV_TCP_HELLO], a[RDV_TCP_ANSWER];
    static const struct { int at; const char *what; } flips[] = {
        {RDV_TCP_HELLO - 1, "the proof"}, {24, "the run id"}, {15, "the node rank"}, {19, "nnodes"}, {23, "gpus"},
        {RDV_TCP_HEAD + 3, "the node's nonce"}};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memset(a, 0, sizeof a);
        EXPECT(by_hand(port, &KEY, "job14", 1, 2, NULL, flips[i].at, ch, hello, a) == RDV_TCP_ANSWER && a[11] == 3 &&
                   strstr(reason(a), "does not prove") && all_zero(a + RDV_TCP_HEAD + 8, RDV_ID_BYTES),
               "a hello with one bit of %s changed after its proof is refused: %s", flips[i].what, reason(a));
    }
    EXPECT(!join(port, "job14", 1, 2, 5, err, sizeof err), "the real node 1 is served: %s", err);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done: %s", msg);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "refused a hello") && strstr(text, "does not prove"), "node 0 logs them: %.300s", text);
}

/* what one on the wire saw, sent again: node 0's nonce is new on every connection, a node's too */
static void test_replay(void) {
    int port;
    int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[8192];
    snprintf(log, sizeof log, "%s/replay.log", logdir);
    Kid s = server(fd, "job15", 3, 5, log);
    unsigned char ch[RDV_TCP_CHALLENGE], hello[RDV_TCP_HELLO], a[RDV_TCP_ANSWER];
    unsigned char ch2[RDV_TCP_CHALLENGE], hello2[RDV_TCP_HELLO], a2[RDV_TCP_ANSWER];
    EXPECT(by_hand(port, &KEY, "job15", 1, 3, NULL, 0, ch, hello, a) == RDV_TCP_ANSWER && a[11] == 2,
           "node 1 joins (by hand: its challenge, hello and welcome are what the wire carries)");
    EXPECT(!all_zero(a + RDV_TCP_HEAD + 8, RDV_ID_BYTES) && memcmp(a + RDV_TCP_HEAD + 8, ID, 16),
           "the id crosses the wire masked, not as it is");
    memcpy(RECORDED, ch, sizeof ch);
    memcpy(RECORDED + sizeof ch, a, sizeof a);
    EXPECT(by_hand(port, NULL, "", 0, 0, hello, 0, ch2, hello2, a2) == RDV_TCP_ANSWER && a2[11] == 3 &&
               strstr(reason(a2), "does not prove"), "node 1's hello replayed on a new connection is refused: %s", reason(a2));
    EXPECT(memcmp(ch + 16, ch2 + 16, RDV_TCP_NONCE), "... node 0's nonce was new");
    EXPECT(!join(port, "job15", 2, 3, 5, err, sizeof err), "node 2 joins: %s", err);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done with nodes 1 and 2: %s", msg);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "does not prove"), "node 0 logs the replay: %s", text);
    fd = listen_any(&port);
    s = fake_server(fd, F_REPLAY);
    EXPECT(join(port, "job15", 1, 3, 5, err, sizeof err) == -1 && strstr(err, "does not prove") && strstr(err, "not joined"),
           "node 0's challenge and welcome replayed to node 1: not taken (its own nonce is new): %s", err);
    reap(s, msg, sizeof msg);
}

/* seven connections that say nothing, then the real node: it is served at once, not after them;
 * node 0 drops an idle connection at its own deadline without delaying anyone */
static void test_idle(void) {
    int port;
    int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[8192];
    snprintf(log, sizeof log, "%s/idle.log", logdir);
    Kid s = server(fd, "job12", 2, 10, log);
    int idle[7];
    for (int i = 0; i < 7; i++) idle[i] = dial(port);
    usleep(100000);
    double t0 = now();
    EXPECT(!join(port, "job12", 1, 2, 3, err, sizeof err), "seven idle connections open, the real node joins: %s", err);
    EXPECT(now() - t0 < 1.5, "... at once, not after them (%.1f s)", now() - t0);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done: %s", msg);
    for (int i = 0; i < 7; i++)
        if (idle[i] >= 0) close(idle[i]);
    rdv_tcp_conn_s = 0.5; /* the server's child takes it */
    fd = listen_any(&port);
    snprintf(log, sizeof log, "%s/idle2.log", logdir);
    s = server(fd, "job12", 3, 10, log);
    rdv_tcp_conn_s = RDV_TCP_CONN_S;
    const int lone = dial(port);
    unsigned char ch[RDV_TCP_CHALLENGE];
    t0 = now();
    EXPECT(get_all(lone, ch, sizeof ch) == sizeof ch, "node 0 challenges a connection at once");
    EXPECT(!join(port, "job12", 1, 3, 3, err, sizeof err), "node 1 joins while an idle connection is open: %s", err);
    char x;
    const ssize_t r = recv(lone, &x, 1, 0);
    const double took = now() - t0;
    EXPECT(r == 0 && took > 0.4 && took < 2, "node 0 drops the idle one at its deadline of 0.5 s (after %.1f s)", took);
    if (lone >= 0) close(lone);
    EXPECT(!join(port, "job12", 2, 3, 3, err, sizeof err), "node 2 joins after: %s", err);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done: %s", msg);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "no whole hello within 0.5 s"), "node 0 logs the drop: %s", text);
}

/* two hundred connections, then the real node: node 0 keeps at most RDV_TCP_MAX_CONN open, the
 * oldest idle ones make room, and the real node is served */
static void test_crowd(void) {
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < 512 && rl.rlim_max >= 512) rl.rlim_cur = 512, setrlimit(RLIMIT_NOFILE, &rl);
    int port;
    const int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[8192];
    snprintf(log, sizeof log, "%s/crowd.log", logdir);
    Kid s = server(fd, "job13", 2, 20, log);
    enum { CROWD = 200 };
    int c[CROWD];
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET, a.sin_port = htons((uint16_t)port), a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < CROWD; i++) { /* without waiting for each: the kernel queues them for node 0 */
        c[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c[i] >= 0 && connect(c[i], (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS) perror("connect");
    }
    usleep(200000);
    const double t0 = now();
    EXPECT(!join(port, "job13", 1, 2, 5, err, sizeof err), "200 connections open, then the real node: it joins: %s", err);
    EXPECT(now() - t0 < 3, "... within seconds (%.1f s)", now() - t0);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done: %s", msg);
    for (int i = 0; i < CROWD; i++) close(c[i]);
    slurp(log, text, sizeof text);
    EXPECT(strstr(text, "to make room") && strstr(text, "not logged one by one"),
           "node 0 logs the connections it dropped for room, then only counts them: %.200s", text);
}

/* --comm-timeout 0 is forever: a connection node 0 closes unanswered (crowded, or not up yet) is
 * tried again, however long it takes, never given up on */
static void test_forever(void) {
    int port;
    const int fd = listen_any(&port);
    char err[512], msg[512];
    Kid s = spawn();
    if (!s.pid) { /* node 0 busy: three connections closed unanswered, then it serves on the same socket */
        fcntl(fd, F_SETFL, 0);
        for (int i = 0; i < 3; i++) close(accept(fd, NULL, NULL));
        fcntl(fd, F_SETFL, O_NONBLOCK); /* as rdv_tcp_listen made it */
        uint64_t nonce;
        const int rc = rdv_tcp_serve(fd, &KEY, "job16", 2, 8, ID, &nonce, 10, err, sizeof err);
        if (rc && write(s.out, err, strlen(err)) < 0) _exit(8);
        _exit(rc ? 1 : 0);
    }
    close(fd);
    const double t0 = now();
    const int rc = join(port, "job16", 1, 2, 0, err, sizeof err);
    EXPECT(rc == 0, "a node with no timeout joins after three dropped connections: %s", err);
    EXPECT(now() - t0 < 5, "... in %.1f s", now() - t0);
    if (rc) kill(s.pid, SIGKILL); /* node 0 would wait for it */
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 served it: %s", msg);
}

/* a run id of escape sequences and a newline reaches node 0's log and the node's message escaped */
static void test_hostile_run_id(void) {
    static const char evil[] = "\x1b]0;owned\x07\x1b[2J\nnode 0: served node 1 from 127.0.0.1:1";
    int port;
    const int fd = listen_any(&port);
    char log[128], err[512], msg[512], text[8192];
    snprintf(log, sizeof log, "%s/hostile.log", logdir);
    Kid s = server(fd, "job17", 2, 5, log);
    EXPECT(join(port, evil, 1, 2, 5, err, sizeof err) == -1 && strstr(err, "refused node 1") && !strchr(err, 0x1b) &&
               !strchr(err, 0x07) && !strchr(err, '\n') && strstr(err, "\\x1b]0;owned\\x07"),
           "a node of that run id is refused; the reason it prints is escaped: %s", err);
    unsigned char ch[RDV_TCP_CHALLENGE], hello[RDV_TCP_HELLO], a[RDV_TCP_ANSWER];
    EXPECT(by_hand(port, NULL, evil, 1, 2, NULL, 0, ch, hello, a) == RDV_TCP_ANSWER && a[11] == 3,
           "the same run id without the secret, by hand: refused");
    EXPECT(!join(port, "job17", 1, 2, 5, err, sizeof err), "the real node 1 joins: %s", err);
    EXPECT(reap(s, msg, sizeof msg) == 0, "node 0 is done: %s", msg);
    slurp(log, text, sizeof text);
    EXPECT(!strchr(text, 0x1b) && !strchr(text, 0x07) && !strstr(text, "\nnode 0: served") &&
               strstr(text, "\\x1b]0;owned\\x07\\x1b[2J\\x0anode 0: served node 1"),
           "node 0's log holds it escaped, on one line, twice: %s", text);
}

/* a run id longer than 63 characters is refused by name, never cut (two ids alike in their first 63
 * characters would otherwise join each other) */
static void test_run_id(void) {
    char id64[65], id63[64], err[512];
    memset(id64, 'r', 64), id64[64] = 0;
    memcpy(id63, id64, 63), id63[63] = 0;
    EXPECT(join(9, id64, 1, 2, 1, err, sizeof err) == -1 && strstr(err, "64 characters, at most 63"),
           "a node with a 64-character run id is refused, not cut: %s", err);
    uint64_t nonce;
    EXPECT(rdv_tcp_serve(-1, &KEY, id64, 2, 8, ID, &nonce, 1, err, sizeof err) == -1 && strstr(err, "64 characters"),
           "so is node 0 with one: %s", err);
    char path[128];
    snprintf(path, sizeof path, "%s/rdv-long", logdir);
    EXPECT(rdv_publish(path, id64, 2, 8, ID, &nonce, err, sizeof err) == -1 && strstr(err, "run id"),
           "... and the file form's node 0: %s", err);
    EXPECT(rdv_run_id_check(id64, err, sizeof err) == -1 && strstr(err, "--run-id \"rrrr") &&
               strstr(err, "64 characters, at most 63"), "--run-id of 64 characters is refused by name: %s", err);
    EXPECT(rdv_run_id_check(id63, err, sizeof err) == 0, "63 characters are fine: %s", err);
    char env[80];
    memset(env, 'e', 70), env[70] = 0;
    setenv("LONGCTX_RUN_ID", env, 1);
    EXPECT(rdv_run_id_check(NULL, err, sizeof err) == -1 && strstr(err, "LONGCTX_RUN_ID=\"eeee") &&
               strstr(err, "70 characters") && strstr(err, "--run-id"), "LONGCTX_RUN_ID of 70 characters is refused by name: %s", err);
    setenv("LONGCTX_RUN_ID", "a\x1b[2Jb", 1);
    EXPECT(rdv_run_id_check(NULL, err, sizeof err) == -1 && strstr(err, "control character \\x1b") && !strchr(err, 0x1b),
           "... and one holding an escape sequence: %s", err);
    unsetenv("LONGCTX_RUN_ID");
    int port;
    const int fd = listen_any(&port);
    char log[128], msg[512];
    snprintf(log, sizeof log, "%s/long.log", logdir);
    Kid s = server(fd, id63, 2, 5, log);
    EXPECT(!join(port, id63, 1, 2, 5, err, sizeof err), "a 63-character run id joins end to end: %s", err);
    reap(s, msg, sizeof msg);
}

/* ---------------------------------------------------------------- the file form's guards */
static void test_file_guard(void) {
    char path[128], tmp[160], victim[128], text[64], err[512];
    snprintf(path, sizeof path, "%s/rdv", logdir);
    snprintf(tmp, sizeof tmp, "%s.partial", path);
    snprintf(victim, sizeof victim, "%s/victim", logdir);
    write_file(victim, "precious\n", 0600);
    uint64_t nonce;
    unsigned char got[RDV_ID_BYTES];
    if (symlink(victim, tmp)) perror("symlink");
    EXPECT(rdv_publish(path, "job18", 2, 8, ID, &nonce, err, sizeof err) == -1 && strstr(err, tmp) &&
               strstr(err, "symbolic link"), "a symlink planted at PATH.partial is refused by name: %s", err);
    slurp(victim, text, sizeof text);
    EXPECT(!strcmp(text, "precious\n"), "... and the file it names is untouched (%zu bytes)", strlen(text));
    unlink(tmp);
    if (symlink(victim, path)) perror("symlink");
    EXPECT(rdv_publish(path, "job18", 2, 8, ID, &nonce, err, sizeof err) == -1 && strstr(err, path) &&
               strstr(err, "symbolic link"), "a symlink at PATH is refused by name: %s", err);
    EXPECT(rdv_await(path, "job18", 0, 2, 8, rdv_wall_s(), 0.3, got, err, sizeof err) == -1 && strstr(err, "symbolic link"),
           "... by a reader too: %s", err);
    slurp(victim, text, sizeof text);
    EXPECT(!strcmp(text, "precious\n"), "... and the file it names is untouched");
    unlink(path);
    write_file(tmp, "a leftover of a node 0 that died", 0644);
    const mode_t um = umask(0); /* the most open umask: the file must be 0600 anyway */
    const int rc = rdv_publish(path, "job18", 2, 8, ID, &nonce, err, sizeof err);
    umask(um);
    EXPECT(rc == 0, "node 0 publishes over a leftover PATH.partial: %s", err);
    struct stat st;
    EXPECT(!lstat(path, &st) && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
           "the file holding the NCCL id is 0600, whatever the umask (mode %o)", (unsigned)(st.st_mode & 0777));
    EXPECT(lstat(tmp, &st) != 0, "no PATH.partial is left");
    EXPECT(!rdv_await(path, "job18", 0, 2, 8, rdv_wall_s(), 0.3, got, err, sizeof err) && !memcmp(got, ID, sizeof got),
           "a reader takes it: %s", err);
    chmod(path, 0644);
    EXPECT(rdv_await(path, "job18", 0, 2, 8, rdv_wall_s(), 0.3, got, err, sizeof err) == -1 && strstr(err, "group or others"),
           "a reader does not take a file others can read: %s", err);
    unlink(path);
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
    static const char job[] = "the-secret-of-this-job-0123456789", other[] = "a-secret-of-another-job-987654321";
    memcpy(KEY.key, job, sizeof job - 1), KEY.len = sizeof job - 1;
    memcpy(OTHER.key, other, sizeof other - 1), OTHER.len = sizeof other - 1;
    snprintf(logdir, sizeof logdir, "/tmp/test_rdv.XXXXXX");
    if (!mkdtemp(logdir)) { perror("mkdtemp"); return 1; }
    const double t0 = now();
    test_sha256();
    test_escape();
    test_secret();
    test_forms();
    test_listen();
    test_place();
    test_join();
    test_missing();
    test_stale();
    test_no_server();
    test_duplicate();
    test_stray();
    test_wrong_proof();
    test_replay();
    test_idle();
    test_crowd();
    test_forever();
    test_hostile_run_id();
    test_run_id();
    test_file_guard();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", logdir);
    if (system(cmd)) printf("warning: could not remove %s\n", logdir);
    printf("(%.1f s)\n", now() - t0);
    return test_summary();
}
