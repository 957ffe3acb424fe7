/* check.h -- checked-call macros: every failing call names file:line, the call, the library's
 * own error string and, where one helps, a hint. Host code only; include the library headers
 * you use before this one (the CUDA/cuBLAS/cuDNN/NCCL macros appear only when their headers did). */
#ifndef LONGCTX_CHECK_H
#define LONGCTX_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rank of the calling thread (-1 outside multi-GPU stages); set by comm_rank(), so a fatal
 * error names the rank that failed. Defined in tensor.c. */
extern _Thread_local int longctx_rank;
/* The rank that prints progress and reports (0; a rehearsal's one rank otherwise). */
extern int longctx_print_rank;
static inline int rank_prints(void) { return longctx_rank < 0 || longctx_rank == longctx_print_rank; }
/* the trainers' stdout: every rank runs the same code and only the printing rank speaks (errors, on
 * stderr, print from any rank) */
#define say(...) (rank_prints() ? printf(__VA_ARGS__) : 0)

/* The one way out on a fatal error, from any thread: the first caller runs the registered hooks
 * (abort every NCCL communicator of the process, so no other rank's kernels keep spinning; remove
 * the rendezvous file), flushes stdio and _exits(code); a second caller (another rank failing at the
 * same moment) waits for it. exit() would run atexit handlers and CUDA's teardown while other
 * ranks' kernels and threads still run. Defined in tensor.c. */
_Noreturn void longctx_die(int code);
/* run fn once on the fatal path, before the process exits (at most 8; fn must not DIE) */
void longctx_on_fatal(void (*fn)(void));
/* 1 once a thread has entered the fatal path (loops that poll NCCL stop touching it) */
int longctx_dying(void);
/* the program's name for user-facing messages ("stage1"; cli_parse sets it from argv[0]) */
extern const char *longctx_prog;
/* 1 while stdout holds a line without its newline (the progress line): a message starts below it */
extern int longctx_midline;

/* Print one fatal message and leave through longctx_die(code). stdout is flushed first, so the
 * message is the last thing the run printed: a pipe or a file buffers stdout, and an error written
 * to stderr before that buffer is flushed would sit above the plan in the log, where nobody looks.
 * file NULL: a user's error, printed as "stage1: message" with no source line. */
_Noreturn void longctx_fail(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Names in messages: a path or a host of any length leaves the reason room. longctx_fail shortens
 * every run of more than NAME_SHOWN non-blank bytes in its message to its head and tail around
 * "..."; short_name does the same to one name before it goes into a bounded buffer (an err[512]
 * that a 5000-byte path would fill). It returns s itself when short, else one of 8 thread-local
 * buffers used in turn (up to 8 names in one message). Defined in tensor.c. */
#define NAME_SHOWN 160
const char *short_name(const char *s);
/* the same into out[n] (n > 16): the head and tail of s around "...", cut on UTF-8 boundaries */
void shorten_into(char *out, size_t n, const char *s, size_t len);

/* Run fn(arg) on this thread with a user's error caught: a STOP inside it returns here (2), its
 * message -- what STOP would have printed after "prog: " -- in msg, instead of ending the process;
 * 0 when fn returns. A DIE is never caught. For checks whose refusal may wait (a dry-run shows its
 * plan first, common/run.c); what fn held when it stopped is left as it was. Defined in tensor.c. */
int longctx_catch_stop(void (*fn)(void *), void *arg, char *msg, size_t n);

/* DIE: an internal fault (a library call failed, a plan was wrong): "error file:line: message",
 * exit 1, and every rank's thread of the process ends with it, so a failing rank never leaves the
 * others hanging. */
#define DIE(...) longctx_fail(1, __FILE__, __LINE__, __VA_ARGS__)
/* STOP: the user's input is wrong (an option, a file, a config field): "stage1: message", which
 * says what is wrong and what to do, exit 2, by the same way out as DIE. */
#define STOP(...) longctx_fail(2, NULL, 0, __VA_ARGS__)

/* libc calls that return -1 on failure and set errno */
#define CHECK_POSIX(call)                                                                   \
    do {                                                                                    \
        if ((call) < 0) DIE("%s failed: %s", #call, strerror(errno));                       \
    } while (0)

/* allocation and fopen that never return NULL: the caller's file:line is in the message */
#define xmalloc(n) xmalloc_at((n), __FILE__, __LINE__)
#define xcalloc(n, s) xcalloc_at((n), (s), __FILE__, __LINE__)
static inline void *xmalloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        longctx_fail(1, file, line, "malloc(%zu bytes) failed: %s", n, strerror(errno));
    }
    return p;
}
static inline void *xcalloc_at(size_t n, size_t s, const char *file, int line) {
    void *p = calloc(n ? n : 1, s ? s : 1);
    if (!p) {
        longctx_fail(1, file, line, "calloc(%zu x %zu bytes) failed: %s", n, s, strerror(errno));
    }
    return p;
}

#ifdef __CUDA_RUNTIME_API_H__
/* why no GPU is usable, in a user's words: with no driver at all CUDA says "driver version is
 * insufficient", which sends people to upgrade a driver they do not have */
static inline const char *cuda_absent_why(cudaError_t e) {
    int driver = 0;
    if (e == cudaSuccess) return "none is visible";
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return "no NVIDIA driver is loaded";
    return cudaGetErrorString(e);
}
/* a CUDA call that fails: the file and line in the log; no usable GPU at all is the user's to
 * hear, and said without them */
#define CUDA_CHECK(call)                                                                    \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ == cudaErrorNoDevice || e_ == cudaErrorInsufficientDriver)                   \
            STOP("no usable GPU: %s (--dry-run plans without one)", cuda_absent_why(e_));    \
        if (e_ != cudaSuccess)                                                              \
            DIE("%s: %s (%s)%s", #call, cudaGetErrorName(e_), cudaGetErrorString(e_),       \
                e_ == cudaErrorMemoryAllocation                                             \
                    ? " -- hint: run with --dry-run to see the memory plan" : "");          \
    } while (0)
/* after a kernel launch: launch-configuration errors surface here, not at the next sync */
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())
#endif

#ifdef CUBLAS_API_H_
#define CUBLAS_CHECK(call)                                                                  \
    do {                                                                                    \
        cublasStatus_t s_ = (call);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            DIE("%s: %s (%s)", #call, cublasGetStatusName(s_), cublasGetStatusString(s_));  \
    } while (0)
#endif

#ifdef CUDNN_GRAPH_H_
#define CUDNN_CHECK(call)                                                                   \
    do {                                                                                    \
        cudnnStatus_t s_ = (call);                                                          \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                   \
            char m_[1024] = {0};                                                            \
            cudnnGetLastErrorString(m_, sizeof m_);                                         \
            DIE("%s: %s | %s -- hint: CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr "         \
                "prints cuDNN's reasons",                                                   \
                #call, cudnnGetErrorString(s_), m_);                                        \
        }                                                                                   \
    } while (0)
#endif

#ifdef NCCL_H_
#define NCCL_CHECK(call)                                                                    \
    do {                                                                                    \
        ncclResult_t r_ = (call);                                                           \
        if (r_ != ncclSuccess)                                                              \
            DIE("%s: %s | %s -- hint: NCCL_DEBUG=WARN shows NCCL's view", #call,           \
                ncclGetErrorString(r_), ncclGetLastError(NULL));                            \
    } while (0)
#endif

#endif /* LONGCTX_CHECK_H */
