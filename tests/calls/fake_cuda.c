/* fake_cuda.c -- the CUDA runtime a stage calls, faked on the host, and the log of every call that
 * touches the GPU: kernel launchers (stubs.c, made by gen_stubs.py), GEMMs, attention calls, copies,
 * memsets, events and streams. A stage linked with this in place of the GPU runs its whole loop on
 * a CPU: nothing is computed (a kernel writes nothing; device memory is zeroed host memory), but
 * every call is logged with its arguments, so two builds of the same configuration can be compared
 * call for call (tests/calls/same_calls.sh). A pointer is logged by name: the arena tensor it falls
 * in (arena_take's name) and its offset there, so a refactor that moves a buffer but passes the
 * same tensor logs the same line.
 *
 * One log per rank (the thread's longctx_rank; -1 the main thread): $CALLS_DIR/rank<R>.log; beside
 * it rank<R>.comm, the rank's collectives, fences and allocations in its order (fake_nccl.c). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls.h"

extern _Thread_local int longctx_rank;

/* ---------------------------------------------------------------- the logs */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define MAX_LOGS 72
static FILE *logs[2][MAX_LOGS]; /* rank<R>.log, rank<R>.comm */

static FILE *log_of_rank(int which) {
    const int r = longctx_rank + 1;
    if (r < 0 || r >= MAX_LOGS) return NULL;
    if (!logs[which][r]) {
        const char *dir = getenv("CALLS_DIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/rank%d.%s", dir ? dir : ".", r - 1, which ? "comm" : "log");
        logs[which][r] = fopen(path, "w");
    }
    return logs[which][r];
}

/* one line to the calling rank's log (comm: its record of collectives) */
static void log_line(int comm, const char *fmt, va_list ap) {
    pthread_mutex_lock(&lock);
    FILE *f = log_of_rank(comm);
    if (f) {
        vfprintf(f, fmt, ap);
        fputc('\n', f);
        fflush(f);
    }
    pthread_mutex_unlock(&lock);
}
void calls_comm(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line(1, fmt, ap);
    va_end(ap);
}
void calls_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line(0, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- names of memory, streams, events */
typedef struct {
    uintptr_t p;
    int64_t bytes;
    char name[96];
    int rank;
} Range;
static Range *ranges;
static int64_t nranges, capranges;

static void add_range(const void *p, int64_t bytes, const char *name) {
    pthread_mutex_lock(&lock);
    int seen = 0; /* the same name taken again by this rank: #k */
    for (int64_t i = 0; i < nranges; i++)
        if (ranges[i].rank == longctx_rank && !strncmp(ranges[i].name, name, strlen(name)) &&
            (ranges[i].name[strlen(name)] == '#' || !ranges[i].name[strlen(name)]))
            seen++;
    if (nranges == capranges) {
        capranges = capranges ? 2 * capranges : 1024;
        ranges = realloc(ranges, (size_t)capranges * sizeof *ranges);
    }
    Range *r = &ranges[nranges++];
    r->p = (uintptr_t)p, r->bytes = bytes, r->rank = longctx_rank;
    snprintf(r->name, sizeof r->name, seen ? "%s#%d" : "%s", name, seen);
    pthread_mutex_unlock(&lock);
}

/* every range holding p, "name+offset", sorted (arena regions overlay one another); "host" if none */
const char *calls_ptr(const void *p, char *buf, size_t n) {
    if (!p) return "null";
    const uintptr_t a = (uintptr_t)p;
    char parts[8][128];
    int k = 0;
    pthread_mutex_lock(&lock);
    for (int pass = 0; pass < 2 && !k; pass++) /* arena tensors first; a bare allocation only if none */
        for (int64_t i = nranges - 1; i >= 0 && k < 8; i--) {
            const Range *r = &ranges[i];
            if ((pass == 0) == !strncmp(r->name, "alloc", 5)) continue;
            if (a >= r->p && a < r->p + (uintptr_t)(r->bytes > 0 ? r->bytes : 1))
                snprintf(parts[k++], sizeof parts[0], "%s+%lld", r->name, (long long)(a - r->p));
        }
    pthread_mutex_unlock(&lock);
    if (!k) return "host";
    for (int i = 0; i < k; i++) /* sort: the overlay's order of carving must not matter */
        for (int j = i + 1; j < k; j++)
            if (strcmp(parts[i], parts[j]) > 0) {
                char t[128];
                memcpy(t, parts[i], sizeof t), memcpy(parts[i], parts[j], sizeof t), memcpy(parts[j], t, sizeof t);
            }
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < k && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? "|" : "", parts[i]);
    return buf;
}

/* arena_take is wrapped (-Wl,--wrap=arena_take): a carved tensor gets its name */
void *__real_arena_take(void *a, int64_t bytes, const char *what);
void *__wrap_arena_take(void *a, int64_t bytes, const char *what) {
    void *p = __real_arena_take(a, bytes, what);
    if (p) add_range(p, bytes, what ? what : "?");
    return p;
}

typedef struct Handle {
    int kind, rank, id;
} Handle;
static _Thread_local int nstreams, nevents;

const char *calls_stream(cudaStream_t s, char *buf, size_t n) {
    if (!s) return "stream0";
    const Handle *h = (const Handle *)s;
    snprintf(buf, n, "stream%d", h->id);
    return buf;
}
static const char *event_name(cudaEvent_t e, char *buf, size_t n) {
    const Handle *h = (const Handle *)e;
    snprintf(buf, n, "ev%d", h ? h->id : -1);
    return buf;
}

/* FNV-1a over bytes: what a copy carried */
static uint64_t digest(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---------------------------------------------------------------- the runtime */
#define DEVICE_BYTES (139ll << 30) /* an H200 */
static _Thread_local int device_now;
static _Thread_local int nalloc; /* per rank: the ranks' threads allocate side by side */

static void *dev_alloc(size_t bytes, const char *kind) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) return NULL;
    char name[32];
    const int k = nalloc++;
    snprintf(name, sizeof name, "alloc%d", k);
    add_range(p, (int64_t)bytes, name);
    calls_log("%s %lld", kind, (long long)bytes);
    return p;
}

cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) { *n = getenv("CALLS_GPUS") ? atoi(getenv("CALLS_GPUS")) : 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { device_now = d; return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = device_now; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "NVIDIA H200 (faked on the CPU)");
    p->totalGlobalMem = (size_t)DEVICE_BYTES;
    p->major = 9, p->minor = 0, p->multiProcessorCount = 132;
    p->sharedMemPerBlockOptin = 227 * 1024;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) { *v = a == cudaDevAttrMultiProcessorCount ? 132 : 0; return cudaSuccess; }
cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int d) { snprintf(id, (size_t)len, "0000:%02x:00.0", d); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *total_b = (size_t)DEVICE_BYTES;
    *free_b = (size_t)(DEVICE_BYTES - (2ll << 30)); /* constant: the run's own plan checks must not see our fake use */
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { calls_log("device sync"); return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e ? "fake error" : "no error"; }
const char *cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorFake" : "cudaSuccess"; }

/* the record's A lines: the calls that can wait for the GPU's work in flight (common/comm.h); the
 * stream-ordered ones (S) wait for nothing and are listed only */
cudaError_t cudaMalloc(void **p, size_t bytes) { calls_comm("A malloc %zu", bytes); *p = dev_alloc(bytes, "malloc"); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s) { calls_comm("S malloc async %zu", bytes); *p = dev_alloc(bytes, "malloc async"); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaMallocHost(void **p, size_t bytes) { calls_comm("A malloc host %zu", bytes); *p = dev_alloc(bytes, "malloc host"); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags) { calls_comm("A host alloc %zu", bytes); *p = dev_alloc(bytes, "host alloc"); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void *p) { calls_comm("A free"); calls_log("free"); return cudaSuccess; } /* kept: its name stays valid */
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) { calls_comm("S free async"); calls_log("free async"); return cudaSuccess; }
cudaError_t cudaFreeHost(void *p) { calls_comm("A free host"); calls_log("free host"); return cudaSuccess; }
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    char b[64];
    a->type = strcmp(calls_ptr(p, b, sizeof b), "host") ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    a->devicePointer = (void *)p, a->hostPointer = (void *)p;
    return cudaSuccess;
}

static cudaError_t copy(const char *what, void *dst, const void *src, size_t bytes, cudaStream_t s) {
    char a[512], b[512], c[32];
    memmove(dst, src, bytes);
    calls_log("%s %s <- %s %zu bytes %016llx %s", what, calls_ptr(dst, a, sizeof a), calls_ptr(src, b, sizeof b), bytes,
              (unsigned long long)digest(dst, bytes), calls_stream(s, c, sizeof c));
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k, cudaStream_t s) {
    return copy("copy", dst, src, bytes, s);
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind k) { return copy("copy sync", dst, src, bytes, NULL); }
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind k, cudaStream_t s) {
    for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    char a[512], b[512], c[32];
    calls_log("copy2d %s ld %zu <- %s ld %zu: %zu x %zu bytes %s", calls_ptr(dst, a, sizeof a), dpitch,
              calls_ptr(src, b, sizeof b), spitch, height, width, calls_stream(s, c, sizeof c));
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t bytes, cudaStream_t s) {
    memset(p, v, bytes);
    char a[512], c[32];
    calls_log("memset %s = %d, %zu bytes %s", calls_ptr(p, a, sizeof a), v, bytes, calls_stream(s, c, sizeof c));
    return cudaSuccess;
}

static Handle *handle(int kind, int id) {
    Handle *h = calloc(1, sizeof *h);
    h->kind = kind, h->rank = longctx_rank, h->id = id;
    return h;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    *s = (cudaStream_t)handle(1, ++nstreams);
    calls_log("stream create stream%d", nstreams);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { char c[32]; calls_log("sync %s", calls_stream(s, c, sizeof c)); return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    *e = (cudaEvent_t)handle(2, nevents++);
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    char a[32], c[32];
    calls_log("record %s on %s", event_name(e, a, sizeof a), calls_stream(s, c, sizeof c));
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    char a[32], c[32];
    calls_log("wait %s waits %s", calls_stream(s, c, sizeof c), event_name(e, a, sizeof a));
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = 1.f; return cudaSuccess; }
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg) {
    char c[32];
    calls_log("host func on %s", calls_stream(s, c, sizeof c));
    fn(arg);
    return cudaSuccess;
}

