/* alloc_order_gpu.c -- on one GPU: why a rank thread must not allocate or free while another rank
 * thread's collective is in flight (common/comm.h, "Allocation phases"), and that the
 * communicator's allocation phases keep it from happening.
 *
 * The stand-in for a collective (tests/alloc_order_spin.cu): a kernel that spins until the host
 * sets a flag, as a collective's kernel waits until every rank has launched its part, with a limit
 * of LIMIT_S so that a stuck thread makes a slow test, not a hung one. Two threads on GPU 0: A
 * launches it; B -- whose "part" the flag is -- makes one call, then sets the flag. Calls:
 * cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost, cudaMallocAsync + cudaFreeAsync.
 *   unordered  A launches and waits until the kernel runs; then B makes its call. A call that waits
 *              for the GPU's work in flight holds B, and so the kernel, until the kernel's limit: the
 *              hang of a node's rank threads, on one GPU (with several GPUs, NCCL's peer access makes
 *              more calls wait, and the kernels wait for each other). Reported per call, as this
 *              driver behaves: information, not a verdict.
 *   phased     A and B are two local ranks of the communicator (comm_world_local on GPU 0). B makes
 *              its call in its allocation phase, A launches after its next collective (comm_barrier,
 *              which ends the phase by meeting B); after the launch B sets the flag, both begin a
 *              phase (comm_alloc_begin) and B makes the call again. No call may wait for the kernel
 *              (each returns well before LIMIT_S) and every kernel must end released by B's flag.
 * Prints "N passed, M failed" (the phased runs); run by tests/alloc_order_gpu.sh (make test-gpu). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "../common/check.h"
#include "../common/comm.h"
#include "test.h"

void alloc_order_spin(volatile int *flag, volatile int *state, double limit_s, cudaStream_t st);

#define LIMIT_S 3.0
enum { MALLOC, FREE, MALLOC_HOST, FREE_HOST, ASYNC, NCALLS };
static const char *const NAMES[NCALLS] = {"cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost",
                                          "cudaMallocAsync + cudaFreeAsync"};

static volatile int *flag, *state; /* mapped pinned host memory: the kernel reads and writes it */
static void *dev_ptr[2], *host_ptr[2]; /* what B frees, taken before the threads start */

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* B's call k (the i-th time: what it frees); its seconds */
static double call(int k, int i, cudaStream_t st) {
    const double t0 = wall();
    void *p = NULL;
    switch (k) {
    case MALLOC: CUDA_CHECK(cudaMalloc(&p, 64 << 20)); break; /* kept: the process ends soon */
    case FREE: CUDA_CHECK(cudaFree(dev_ptr[i])); break;
    case MALLOC_HOST: CUDA_CHECK(cudaMallocHost(&p, 64 << 20)); break;
    case FREE_HOST: CUDA_CHECK(cudaFreeHost(host_ptr[i])); break;
    default:
        CUDA_CHECK(cudaMallocAsync(&p, 64 << 20, st));
        CUDA_CHECK(cudaFreeAsync(p, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
    }
    return wall() - t0;
}

static void until_running(void) {
    const double t0 = wall();
    while (!*state && wall() - t0 < 2 * LIMIT_S) usleep(100);
}

static void fresh(void) {
    *flag = 0, *state = 0;
    __sync_synchronize();
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMalloc(&dev_ptr[i], 64 << 20));
        CUDA_CHECK(cudaMallocHost(&host_ptr[i], 64 << 20));
    }
}

/* ---------------------------------------------------------------- unordered */
typedef struct {
    int k, b;
    pthread_barrier_t *bar;
    double secs;
} Unordered;

static void *unordered_main(void *arg) {
    Unordered *u = arg;
    CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (!u->b) { /* A: the collective in flight */
        alloc_order_spin(flag, state, LIMIT_S, st);
        until_running();
        pthread_barrier_wait(u->bar);
        pthread_barrier_wait(u->bar);
        CUDA_CHECK(cudaStreamSynchronize(st));
    } else { /* B: its call, then its part */
        pthread_barrier_wait(u->bar);
        u->secs = call(u->k, 0, st);
        *flag = 1;
        __sync_synchronize();
        pthread_barrier_wait(u->bar);
    }
    return NULL;
}

static void unordered(int k) {
    fresh();
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    Unordered u[2] = {{k, 0, &bar, 0}, {k, 1, &bar, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, unordered_main, &u[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&bar);
    printf("  unordered  %-32s %s (%.3f s; the kernel %s)\n", NAMES[k],
           u[1].secs > LIMIT_S / 2 ? "WAITED for the kernel in flight" : "returned while the kernel spun", u[1].secs,
           *state == 3 ? "ran to its limit" : "was released by the flag");
}

/* ---------------------------------------------------------------- phased */
typedef struct {
    CommWorld *w;
    int k, local;
    double secs[2];
    int kernel;
} Phased;

static void *phased_main(void *arg) {
    Phased *p = arg;
    CUDA_CHECK(cudaSetDevice(0));
    Comm *c = comm_rank(p->w, p->local); /* an allocation phase begins */
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    if (p->local == 1) p->secs[0] = call(p->k, 0, st);
    comm_barrier(c, st); /* ends it: both threads are here */
    if (p->local == 0) alloc_order_spin(flag, state, LIMIT_S, st); /* A's collective */
    else { *flag = 1; __sync_synchronize(); } /* B's part of it */
    comm_alloc_begin(c);
    if (p->local == 1) p->secs[1] = call(p->k, 1, st);
    comm_barrier(c, st);
    if (p->local == 0) p->kernel = *state;
    comm_rank_free(c);
    return NULL;
}

static void phased(int k) {
    fresh();
    const CommOpts o = {60, 0, 0, NULL};
    CommWorld *w = comm_world_local(2, &o);
    Phased p[2] = {{w, k, 0, {0, 0}, 0}, {w, k, 1, {0, 0}, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, phased_main, &p[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    comm_world_free(w);
    printf("  phased     %-32s %.3f s, then %.3f s (the kernel %s)\n", NAMES[k], p[1].secs[0], p[1].secs[1],
           p[0].kernel == 2 ? "was released by the flag" : p[0].kernel == 3 ? "ran to its limit" : "never ran");
    EXPECT(p[1].secs[0] < LIMIT_S / 2 && p[1].secs[1] < LIMIT_S / 2 && p[0].kernel == 2,
           "phased: %s never waits for another thread's kernel in flight (%.3f s, %.3f s; kernel state %d)", NAMES[k],
           p[1].secs[0], p[1].secs[1], p[0].kernel);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        printf("no GPU: nothing to run\n0 passed, 1 failed\n");
        return 1;
    }
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(0)); /* the context, before any timing */
    void *m;
    CUDA_CHECK(cudaHostAlloc(&m, 64, cudaHostAllocMapped));
    flag = m, state = (volatile int *)m + 16;
    printf("a kernel spinning in thread A (at most %.0f s) until thread B, after one call, sets its flag:\n", LIMIT_S);
    for (int k = 0; k < NCALLS; k++) unordered(k);
    printf("the same inside the communicator's allocation phases (local ranks, common/comm.h):\n");
    for (int k = 0; k < NCALLS; k++) phased(k);
    return test_summary();
}
