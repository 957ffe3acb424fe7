/* comm_cpu.c -- the communicator (common/comm.c) on a CPU, against the faked GPU and NCCL
 * (fake_cuda.c, fake_nccl.c): what its ranks must agree on, and what it does when they do not.
 * Each case runs in a child process (the communicator's failures exit the process) with rank
 * threads on the local backend (--local-ranks) or on faked NCCL (one thread per "GPU"), and passes
 * on the child's exit status and its last line:
 *   - a value that differs between ranks (comm_same_i64, comm_min_i64) costs every rank the same
 *     collectives: each answers, and the next collective still pairs up;
 *   - ranks that disagree on a collective's size, type or send/recv peers stop the job, the
 *     message naming both ranks and both calls (the local backend; NCCL would hang);
 *   - (this tree's comm.h has allocation phases) ranks that begin one at different points stop too.
 * Built by tests/calls/build.sh; run by tests/calls/comm_calls.sh. Prints "N passed, M failed". */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common/check.h"
#include "common/comm.h"
#include "tests/test.h"

typedef void (*Body)(Comm *c, int r, int P, cudaStream_t st, void *buf);
typedef struct {
    CommWorld *w;
    int local, device, P;
    Body body;
} Thread;

static void *thread_main(void *arg) {
    const Thread *t = arg;
    CUDA_CHECK(cudaSetDevice(t->device));
    Comm *c = comm_rank(t->w, t->local);
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    void *buf; /* every rank's buffers, before its first collective */
    CUDA_CHECK(cudaMalloc(&buf, 1 << 16));
    t->body(c, comm_rank_id(c), t->P, st, buf);
    comm_rank_free(c);
    return NULL;
}

/* in the child: P rank threads on the backend, each running body */
static void ranks(int nccl, int P, Body body) {
    const CommOpts o = {5, 100.0, 10.0, NULL}; /* a hang shows within 5 s */
    char gpus[16];
    snprintf(gpus, sizeof gpus, "%d", P);
    setenv("CALLS_GPUS", gpus, 1);
    CUDA_CHECK(cudaSetDevice(0));
    CommWorld *w = nccl ? comm_world_nccl(P, 1, 0, NULL, &o) : comm_world_local(P, &o);
    pthread_t th[16];
    Thread t[16];
    for (int r = 0; r < P; r++) {
        t[r] = (Thread){w, r, nccl ? r : 0, P, body};
        if (pthread_create(&th[r], NULL, thread_main, &t[r])) DIE("pthread_create");
    }
    for (int r = 0; r < P; r++) pthread_join(th[r], NULL);
    comm_world_free(w);
    printf("every rank returned\n");
    fflush(stdout);
}

/* run a case in a child (20 s at most); its exit status, its output in out */
static int child(int nccl, int P, Body body, char *out, size_t n) {
    int fd[2];
    if (pipe(fd)) DIE("pipe");
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1), dup2(fd[1], 2);
        alarm(20);
        ranks(nccl, P, body);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t k;
    char sink[4096];
    while ((k = read(fd[0], got < n - 1 ? out + got : sink, got < n - 1 ? n - 1 - got : sizeof sink)) > 0)
        if (got < n - 1) got += (size_t)k;
    out[got] = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static const char *last_line(const char *out) {
    static char line[1024];
    const char *end = out + strlen(out);
    while (end > out && end[-1] == '\n') end--;
    const char *b = end;
    while (b > out && b[-1] != '\n') b--;
    snprintf(line, sizeof line, "%.*s", (int)(end - b), b);
    return line;
}

static const char *backend(int nccl) { return nccl ? "faked NCCL" : "local backend"; }

/* ---------------------------------------------------------------- values that differ */
static int answers[16][3];
static void same_differs(Comm *c, int r, int P, cudaStream_t st, void *buf) {
    const int64_t v = r == 0 ? 5 : 7; /* rank 0 holds the smallest */
    answers[r][0] = comm_same_i64(c, v, st);
    answers[r][1] = (int)comm_min_i64(c, 40 - 3 * r, st);
    double one = 1, *d = buf;
    CUDA_CHECK(cudaMemcpy(d, &one, 8, cudaMemcpyHostToDevice));
    comm_all_reduce_f64(c, d, 1, st); /* the next collective: every rank is at it */
    CUDA_CHECK(cudaMemcpy(&one, d, 8, cudaMemcpyDeviceToHost));
    answers[r][2] = (int)one;
    printf("rank %d: same %d, min %d, sum %d\n", r, answers[r][0], answers[r][1], answers[r][2]);
}
static void same_agrees(Comm *c, int r, int P, cudaStream_t st, void *buf) {
    printf("rank %d: same %d\n", r, comm_same_i64(c, 1ll << 40, st));
}

/* ---------------------------------------------------------------- ranks that disagree */
static void gather_sizes(Comm *c, int r, int P, cudaStream_t st, void *buf) {
    comm_all_gather_bf16(c, buf, (bf16_t *)buf + 1024, r == 1 ? 5 : 4, st);
}
static void reduce_sizes(Comm *c, int r, int P, cudaStream_t st, void *buf) {
    comm_all_reduce_f64(c, buf, r == 1 ? 2 : 1, st);
}
static void scatter_sizes(Comm *c, int r, int P, cudaStream_t st, void *buf) {
    comm_reduce_scatter_f32(c, buf, (float *)buf + 1024, r == 1 ? 6 : 4, 1.f, st);
}
static void kinds(Comm *c, int r, int P, cudaStream_t st, void *buf) {
    if (r == 1) comm_all_reduce_f64(c, buf, 1, st);
    else comm_all_gather_bf16(c, buf, (bf16_t *)buf + 1024, 1, st);
}
static void ring_peers(Comm *c, int r, int P, cudaStream_t st, void *buf) { /* rank 1 receives from 2, not 0 */
    comm_sendrecv(c, buf, (r + 1) % P, (char *)buf + 4096, r == 1 ? 2 : (r + P - 1) % P, 8, st);
}
static void ring_bytes(Comm *c, int r, int P, cudaStream_t st, void *buf) { /* rank 1 expects 16 bytes */
    comm_sendrecv(c, buf, (r + 1) % P, (char *)buf + 4096, (r + P - 1) % P, r == 1 ? 16 : 8, st);
}
static void ring_ok(Comm *c, int r, int P, cudaStream_t st, void *buf) {
    char *b = buf;
    b[0] = (char)('a' + r);
    comm_sendrecv(c, b, (r + 1) % P, b + 4096, (r + P - 1) % P, 8, st);
    printf("rank %d got %c\n", r, b[4096]);
}
#ifdef COMM_MAX_HERE /* a tree with allocation phases (comm.h) */
static void phase_points(Comm *c, int r, int P, cudaStream_t st, void *buf) { /* rank 1 begins its phase late */
    if (r != 1) comm_alloc_begin(c);
    comm_all_reduce_f64(c, buf, 1, st);
    if (r == 1) comm_alloc_begin(c);
}
#endif

int main(void) {
    if (!getenv("CALLS_DIR")) setenv("CALLS_DIR", "/tmp", 0);
    static char out[1 << 16];
    for (int nccl = 0; nccl < 2; nccl++)
        for (int P = 2; P <= 3; P++) {
            memset(answers, 0, sizeof answers);
            int rc = child(nccl, P, same_differs, out, sizeof out);
            int want = 0; /* every rank: not the same, min 34 - 3 (P - 2) ... */
            char line[64];
            for (int r = 0; r < P; r++) {
                snprintf(line, sizeof line, "rank %d: same 0, min %d, sum %d\n", r, 40 - 3 * (P - 1), P);
                want += strstr(out, line) != NULL;
            }
            EXPECT(rc == 0 && want == P,
                   "%s, %d ranks: comm_same_i64 of values that differ answers 0 on every rank, and the collectives "
                   "after it still pair up (exit %d; %s)", backend(nccl), P, rc, last_line(out));
            rc = child(nccl, P, same_agrees, out, sizeof out);
            EXPECT(rc == 0 && strstr(out, "rank 0: same 1") && strstr(out, "rank 1: same 1"),
                   "%s, %d ranks: comm_same_i64 of one value answers 1 (exit %d; %s)", backend(nccl), P, rc, last_line(out));
            rc = child(nccl, P, ring_ok, out, sizeof out);
            EXPECT(rc == 0 && strstr(out, "rank 1 got a") && strstr(out, "rank 0 got "),
                   "%s, %d ranks: a ring of send/recv delivers (exit %d; %s)", backend(nccl), P, rc, last_line(out));
        }
    static const struct {
        const char *what;
        Body body;
        int P;
        const char *words[2];
    } bad[] = {
        {"an all-gather of another size", gather_sizes, 2, {"all-gather of 5 bf16 a rank", "all-gather of 4 bf16 a rank"}},
        {"an all-reduce of another size", reduce_sizes, 2, {"all-reduce of 2 f64", "all-reduce of 1 f64"}},
        {"a reduce-scatter of another size", scatter_sizes, 2, {"reduce-scatter of 6 f32", "reduce-scatter of 4 f32"}},
        {"another kind of collective", kinds, 2, {"rank 1", "rank 0"}},
        {"a send/recv whose peers do not pair", ring_peers, 3, {"to rank 1 from rank 2", "to rank 2 from rank 2"}},
        {"a send/recv of another size", ring_bytes, 2, {"8 bytes to rank 1", "16 bytes to rank 0"}},
#ifdef COMM_MAX_HERE
        {"an allocation phase begun at another point", phase_points, 2, {"rank 1", "rank 0"}},
#endif
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int rc = child(0, bad[i].P, bad[i].body, out, sizeof out);
        const char *last = last_line(out);
        printf("  %s -> %s\n", bad[i].what, last);
        EXPECT(rc != 0 && rc < 128 && strstr(last, "disagree on the collectives") && strstr(last, bad[i].words[0]) &&
                   strstr(last, bad[i].words[1]),
               "local backend, %d ranks, %s: the job stops naming both ranks and both calls (exit %d; %s)", bad[i].P,
               bad[i].what, rc, last);
    }
    return test_summary();
}
