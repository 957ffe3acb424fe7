/* alloc_order_spin.cu -- tests/alloc_order_gpu.c's stand-in for a collective's kernel: one thread
 * that spins until the host sets *flag (a collective's kernel waits so for every rank's part),
 * with its own limit so that a stuck host ends nothing worse than a slow test. It writes *state: 1
 * once running, 2 released by the flag, 3 at its limit. flag and state are mapped pinned host memory. */
#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>

__device__ static unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ static void spin(volatile int *flag, volatile int *state, unsigned long long limit_ns) {
    const unsigned long long t0 = now_ns();
    *state = 1;
    __threadfence_system();
    while (!*flag) {
        if (now_ns() - t0 > limit_ns) { *state = 3; __threadfence_system(); return; }
        __nanosleep(1000);
    }
    *state = 2;
    __threadfence_system();
}

extern "C" void alloc_order_spin(volatile int *flag, volatile int *state, double limit_s, cudaStream_t st) {
    spin<<<1, 1, 0, st>>>(flag, state, (unsigned long long)(limit_s * 1e9));
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) { fprintf(stderr, "alloc_order_spin: %s\n", cudaGetErrorString(e)); exit(1); }
}
