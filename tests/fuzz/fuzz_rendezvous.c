/* fuzz_rendezvous.c -- common/rendezvous.c's readers of what another node (or a stale file) says.
 * Byte 0 picks the reader (% 4); the rest is what it reads:
 *   0  the file form: rdv_await on a file holding the rest (an RdvFile as rdv_publish writes it; a
 *      file of this user, mode 0600, under the harness's temporary directory), with timeout 0, so it
 *      reads the file once and returns (no 200 ms poll). The reader's side: run id "fuzz-run", 2
 *      nodes x 8 GPUs, started at a fixed time (1.7e9 s: Nov 2023), unless bytes follow the RdvFile:
 *      their first says fresh (bit 0), the run id (bits 1-2: "fuzz-run", none, the following bytes,
 *      a 70-character id) and mode 0644 (bit 3: a file others can read, not to be joined).
 *   1  rdv_parse (--rendezvous SPEC) on the rest as a string.
 *   2  node 0's side as a node reads it: a server thread of the harness on 127.0.0.1 sends the rest's
 *      bytes 1..48 as its challenge, reads the hello, and answers bytes 49.. (RDV_TCP_ANSWER = 416
 *      make a whole answer); rest byte 0 bit 0: the harness proves the answer with the job secret
 *      over the challenge's nonce and the hello's (else the answer's proof is as given). rdv_tcp_try
 *      (one try of node 1 of 2 x 8 GPUs, run "fuzz-run", the harness's secret) reads it.
 *   3  the TCP hello: rdv_tcp_serve (node 0 of 3 x 8 GPUs, run "fuzz-run") on a listening socket of
 *      127.0.0.1; a client thread sends the rest's bytes 1.. as up to 3 hellos (152 bytes each, one
 *      connection each, after reading node 0's challenge), proved with the secret over that
 *      challenge when rest byte 0 bit 0 is set (else as given), reads each answer, then says a valid
 *      hello for each node rank the fuzzed ones did not get served, so rdv_tcp_serve returns without
 *      waiting for its timeout.
 * The harness's side never sends a FIN: it closes with an RST (SO_LINGER 0), after the reader has closed
 * or to end a short message, so no connection is left in TIME_WAIT (thousands of inputs a second
 * would otherwise fill the ephemeral ports). */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include "rendezvous.h"

#define RUN_ID "fuzz-run"
#define STARTED 1.7e9

static RdvSecret KEY; /* the job secret both sides of the harness hold */
static char file_path[600];
static int answer_fd = -1, serve_fd = -1; /* listening sockets on 127.0.0.1 */
static int answer_port, serve_port;

static int listen_loopback(int *port, int nonblock) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    FUZZ_ASSERT(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    FUZZ_ASSERT(!bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 16) && !getsockname(fd, (struct sockaddr *)&a, &len),
                "listen on 127.0.0.1: %s", strerror(errno));
    *port = ntohs(a.sin_port);
    return fd;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    signal(SIGPIPE, SIG_IGN);
    static const char secret[] = "the-fuzzing-harness-job-secret";
    memcpy(KEY.key, secret, sizeof secret - 1);
    KEY.len = sizeof secret - 1;
    snprintf(file_path, sizeof file_path, "%s/rdv", fuzz_tmpdir());
    answer_fd = listen_loopback(&answer_port, 0);
    struct timeval tv = {3, 0}; /* accept gives up if rdv_tcp_try never dials */
    setsockopt(answer_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    serve_fd = listen_loopback(&serve_port, 1); /* as rdv_tcp_listen makes it: nonblocking */
    return 0;
}

/* ---------------------------------------------------------------- sockets of the harness */
static size_t send_all(int fd, const uint8_t *p, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t w = send(fd, p + done, n - done, MSG_NOSIGNAL);
        if (w <= 0) break;
        done += (size_t)w;
    }
    return done;
}
static size_t recv_upto(int fd, uint8_t *p, size_t n) {
    size_t done = 0;
    while (done < n) {
        const ssize_t r = recv(fd, p + done, n - done, 0);
        if (r <= 0) break;
        done += (size_t)r;
    }
    return done;
}
/* close with an RST (SO_LINGER 0), never a FIN: a connection ends in TIME_WAIT on the side that sent
 * the first FIN, and thousands of inputs a second would fill the port space with them */
static void close_rst(int fd) {
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}
/* the other side closes first (its FIN, or its RST), then ours is an RST */
static void close_after_peer(int fd) {
    uint8_t sink[512];
    while (recv(fd, sink, sizeof sink, 0) > 0) {}
    close_rst(fd);
}
static int dial(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_ASSERT(fd >= 0, "socket: %s", strerror(errno));
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_ASSERT(!connect(fd, (struct sockaddr *)&a, sizeof a), "connect to 127.0.0.1:%d: %s", port, strerror(errno));
    return fd;
}
static void set_timeouts(int fd) {
    struct timeval tv = {3, 0}; /* a harness thread never waits forever on a reader that stopped */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

typedef struct {
    const uint8_t *p;
    size_t n;
    int prove; /* the harness proves the fuzzed message with KEY */
} Bytes;

/* mode 2's node 0: one connection; the challenge bytes, then (if the node said its hello) the
 * answer bytes. A whole answer: the reader closes once it has read it; a short one ends with an RST */
static void *answer_thread(void *arg) {
    const Bytes *b = arg;
    const int c = accept(answer_fd, NULL, NULL);
    FUZZ_ASSERT(c >= 0, "accept (did rdv_tcp_try not dial 127.0.0.1:%d?): %s", answer_port, strerror(errno));
    set_timeouts(c);
    const size_t nch = b->n < RDV_TCP_CHALLENGE ? b->n : RDV_TCP_CHALLENGE;
    send_all(c, b->p, nch);
    uint8_t hello[RDV_TCP_HELLO];
    if (nch < RDV_TCP_CHALLENGE || recv_upto(c, hello, sizeof hello) < sizeof hello) {
        close_rst(c);
        return NULL;
    }
    const size_t na = b->n - nch;
    uint8_t *a = xmalloc(na + 1);
    memcpy(a, b->p + nch, na);
    if (b->prove && na >= RDV_TCP_ANSWER)
        rdv_tcp_proof(&KEY, RDV_PROOF_ANSWER, b->p + 16, hello + RDV_TCP_HEAD, a, RDV_TCP_ANSWER - 32, a + RDV_TCP_ANSWER - 32);
    send_all(c, a, na);
    free(a);
    if (na >= RDV_TCP_ANSWER) close_after_peer(c);
    else close_rst(c);
    return NULL;
}

static void put32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v; }
static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* one connection to mode 3's node 0: its challenge read, a hello of n bytes sent (proved over the
 * challenge when prove), the answer's node rank returned when welcomed, else 0. A short hello ends
 * with an RST (node 0 reads the bytes, then the reset); after a whole one, node 0 answers (or drops
 * it) and closes, then ours is an RST */
static uint32_t say_hello(const uint8_t *p, size_t n, int prove) {
    const int c = dial(serve_port);
    set_timeouts(c);
    uint8_t ch[RDV_TCP_CHALLENGE], h[RDV_TCP_HELLO];
    FUZZ_ASSERT(recv_upto(c, ch, sizeof ch) == sizeof ch && !memcmp(ch, RDV_TCP_MAGIC, 8),
                "node 0 did not send its challenge");
    memcpy(h, p, n);
    if (prove && n == RDV_TCP_HELLO)
        rdv_tcp_proof(&KEY, RDV_PROOF_HELLO, ch + 16, h + RDV_TCP_HEAD, h, RDV_TCP_HELLO - 32, h + RDV_TCP_HELLO - 32);
    send_all(c, h, n);
    if (n < RDV_TCP_HELLO) {
        close_rst(c);
        return 0;
    }
    uint8_t a[RDV_TCP_ANSWER];
    const size_t got = recv_upto(c, a, sizeof a);
    close_after_peer(c);
    return got == RDV_TCP_ANSWER && !memcmp(a, RDV_TCP_MAGIC, 8) && get32(a + 8) == 2 ? get32(a + 12) : 0;
}

static void *hello_thread(void *arg) {
    const Bytes *b = arg;
    int served[3] = {0, 0, 0};
    for (size_t at = 0, k = 0; at < b->n && k < 3; at += RDV_TCP_HELLO, k++) {
        const size_t n = b->n - at < RDV_TCP_HELLO ? b->n - at : RDV_TCP_HELLO;
        const uint32_t r = say_hello(b->p + at, n, b->prove);
        if (r >= 1 && r <= 2) served[r] = 1;
        if (served[1] && served[2]) return NULL; /* node 0 has stopped serving */
    }
    for (uint32_t r = 1; r <= 2; r++) {
        if (served[r]) continue;
        uint8_t h[RDV_TCP_HELLO] = {0};
        memcpy(h, RDV_TCP_MAGIC, 8);
        put32(h + 8, 1), put32(h + 12, r), put32(h + 16, 3), put32(h + 20, 8);
        memcpy(h + 24, RUN_ID, sizeof RUN_ID - 1);
        FUZZ_ASSERT(say_hello(h, sizeof h, 1) == r, "node 0 did not welcome a valid hello of node %u", r);
    }
    return NULL;
}

/* ---------------------------------------------------------------- the readers */
static void file_form(const uint8_t *p, size_t n) {
    const char *run_id = RUN_ID;
    int fresh = 0, open_to_all = 0;
    char tail[80];
    const size_t whole = n < sizeof(RdvFile) ? n : sizeof(RdvFile);
    if (n > sizeof(RdvFile)) {
        const uint8_t t = p[sizeof(RdvFile)];
        fresh = t & 1;
        open_to_all = t >> 3 & 1;
        switch ((t >> 1) & 3) {
        case 1: run_id = ""; break;
        case 2: snprintf(tail, sizeof tail, "%.*s", (int)(n - sizeof(RdvFile) - 1), (const char *)p + sizeof(RdvFile) + 1);
                run_id = tail; break;
        case 3: run_id = "a-run-id-of-seventy-characters-which-is-longer-than-the-files-63-chars"; break;
        default: break;
        }
    }
    const int fd = open(file_path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    FUZZ_ASSERT(fd >= 0 && !fchmod(fd, open_to_all ? 0644 : 0600), "open %s: %s", file_path, strerror(errno));
    fuzz_write_all(fd, p, whole, 0);
    close(fd);
    unsigned char id[RDV_ID_BYTES];
    char err[600];
    err[0] = 0;
    const int rc = rdv_await(file_path, run_id, fresh, 2, 8, STARTED, 0, id, err, sizeof err);
    FUZZ_ASSERT(rc == 0 || err[0], "rdv_await refused without a message");
    FUZZ_ASSERT(rc || !open_to_all, "rdv_await took a file others can read");
    fuzz_say("file (run id \"%s\", fresh %d, mode %s): %s\n", run_id, fresh, open_to_all ? "0644" : "0600", rc ? err : "joined");
}

static void parse_form(const uint8_t *p, size_t n) {
    char *s = xmalloc(n + 1);
    memcpy(s, p, n);
    s[n] = 0;
    RdvTcp t;
    memset(&t, 0, sizeof t);
    char err[600];
    err[0] = 0;
    const int rc = rdv_parse(s, &t, err, sizeof err);
    FUZZ_ASSERT(rc == 0 || rc == 1 || (rc == -1 && err[0]), "rdv_parse returned %d (%s)", rc, err);
    for (const char *c = err; *c; c++) FUZZ_ASSERT((unsigned char)*c >= 0x20 && *c != 0x7f, "rdv_parse's message holds a control character");
    fuzz_say("spec \"%s\": %s\n", s, rc == 1 ? "tcp" : rc ? err : "a file");
    if (rc == 1) FUZZ_ASSERT(t.port >= 1 && t.port <= 65535 && t.host[0] && strlen(t.host) < sizeof t.host,
                             "tcp:// parsed to host \"%s\" port %d", t.host, t.port);
    free(s);
}

static void answer_form(const uint8_t *p, size_t n) {
    Bytes b = {p + (n > 0), n - (n > 0), n > 0 && (p[0] & 1)};
    pthread_t th;
    FUZZ_ASSERT(!pthread_create(&th, NULL, answer_thread, &b), "pthread_create");
    RdvTcp t;
    snprintf(t.host, sizeof t.host, "127.0.0.1");
    t.port = answer_port;
    unsigned char id[RDV_ID_BYTES];
    uint64_t nonce = 0;
    char err[600];
    err[0] = 0;
    const int rc = rdv_tcp_try(&t, &KEY, RUN_ID, 1, 2, 8, 2.0, id, &nonce, err, sizeof err);
    FUZZ_ASSERT(rc == 0 || err[0], "rdv_tcp_try %s without a message", rc < 0 ? "stopped" : "tries again");
    for (const char *c = err; *c; c++) FUZZ_ASSERT((unsigned char)*c >= 0x20 && *c != 0x7f, "a node's message holds a control character");
    fuzz_say("answer: %s%s\n", rc < 0 ? "stop: " : rc ? "again: " : "joined", rc ? err : "");
    pthread_join(th, NULL);
}

static void hello_form(const uint8_t *p, size_t n) {
    Bytes b = {p + (n > 0), n - (n > 0), n > 0 && (p[0] & 1)};
    pthread_t th;
    FUZZ_ASSERT(!pthread_create(&th, NULL, hello_thread, &b), "pthread_create");
    unsigned char id[RDV_ID_BYTES];
    memset(id, 0x5a, sizeof id);
    uint64_t nonce = 0;
    char err[600];
    err[0] = 0;
    const int rc = rdv_tcp_serve(serve_fd, &KEY, RUN_ID, 3, 8, id, &nonce, 2.0, err, sizeof err);
    pthread_join(th, NULL);
    fuzz_say("hello: served (%s)\n", rc ? err : "every node");
    FUZZ_ASSERT(rc == 0, "rdv_tcp_serve did not finish after every node said a valid hello: %s", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 2048) return 0;
    const uint8_t *p = data + 1;
    const size_t n = size - 1;
    switch (data[0] % 4) {
    case 0: file_form(p, n); break;
    case 1: parse_form(p, n); break;
    case 2: answer_form(p, n); break;
    default: hello_form(p, n); break;
    }
    return 0;
}
