/* gpu.c -- device setup and helpers. */
#include "gpu.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "numa.h"
#include "train.h"

void gpu_init(Gpu *g, int device) {
    memset(g, 0, sizeof *g);
    int n = 0;
    CUDA_CHECK(cudaGetDeviceCount(&n));
    if (device >= n) DIE("GPU %d requested, %d visible", device, n);
    CUDA_CHECK(cudaSetDevice(device));
    struct cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    g->device = device;
    snprintf(g->name, sizeof g->name, "%s", p.name);
    g->sms = p.multiProcessorCount;
    g->total_bytes = (int64_t)p.totalGlobalMem;
    if (p.major < 9)
        fprintf(stderr, "warning: %s is sm_%d%d; this build targets sm_90 (H100/H200)\n", p.name, p.major, p.minor);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
}

int64_t gpu_free_bytes(double cap_gib) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const int64_t cap = (int64_t)(cap_gib * (1 << 30));
    return cap > 0 && cap < (int64_t)free_b ? cap : (int64_t)free_b;
}

int64_t gpu_plan_bytes(double cap_gib, int plan_only, int ngpus) {
    const double G = 1 << 30, want = cap_gib > 0 ? (cap_gib < 1e9 ? cap_gib : 1e9) * G : 139.8 * G; /* no overflow */
    const int64_t cap = (int64_t)want;
    int n = 0, cur = 0;
    if (plan_only || cudaGetDeviceCount(&n) != cudaSuccess || n < 1 || cudaGetDevice(&cur) != cudaSuccess) {
        (void)cudaGetLastError(); /* no GPU here: plan for the cap */
        return cap;
    }
    int64_t least = INT64_MAX;
    for (int d = 0; d < (ngpus < n ? ngpus : n); d++) { /* the busiest of them decides */
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaSetDevice(d));
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        if ((int64_t)free_b < least) least = (int64_t)free_b;
    }
    CUDA_CHECK(cudaSetDevice(cur));
    /* planned against what is free: a GiB less, as free memory moves (other processes, the allocator) */
    least -= (int64_t)G;
    return cap_gib > 0 && cap < least ? cap : least;
}

int64_t gpu_used_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return (int64_t)(total_b - free_b);
}

void *gpu_malloc(int64_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)(bytes > 0 ? bytes : 1));
    if (e != cudaSuccess)
        DIE("cudaMalloc of %.3f GiB for %s failed: %s -- the memory plan (--dry-run) says what fits",
            (double)bytes / (1 << 30), what, cudaGetErrorString(e));
    return p;
}

void gpu_host_copy(void *dst, const void *src, int64_t bytes, int down, cudaStream_t st) {
    const int span = tl_begin(st, "host copies", down ? "down" : "up");
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, down ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, st));
    tl_end(span, st);
}

void gpu_upload(void *dst, const void *src, int64_t bytes, cudaStream_t st) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyHostToDevice, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
}
void gpu_download(void *dst, const void *src, int64_t bytes, cudaStream_t st) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
}

void arenas_allocate(Arena *a, int n) {
    Comm *c = comm_of_thread(); /* a rank of several: its allocation phase (comm.h), which its next collective ends */
    if (c) comm_alloc_begin(c);
    for (int i = 0; i < n; i++) {
        const int64_t bytes = a[i].high;
        void *p = NULL;
        if (bytes && a[i].place == ON_GPU) p = gpu_malloc(bytes, a[i].name);
        else if (bytes) {
            cudaError_t e = cudaHostAlloc(&p, (size_t)bytes, cudaHostAllocPortable);
            if (e != cudaSuccess)
                DIE("pinning %.3f GiB of host memory for %s failed: %s -- the memory plan (--dry-run) says what the "
                    "host needs", (double)bytes / (1 << 30), a[i].name, cudaGetErrorString(e));
        }
        a[i] = (Arena){a[i].name, a[i].place, p, bytes, 0, 0};
    }
}

int plan_fits(const MemPlan *mp, int share, int host_share, double cap_gib, const char *gpu, char *why, size_t n) {
    const double G = 1 << 30;
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const int64_t need = memplan_peak(mp) * share;
    if (cap_gib > 0 && need > (int64_t)(cap_gib * G)) {
        snprintf(why, n, "%d rank(s) on %s plan %.2f GiB, above --gpu-gib %.1f: shorten --seq, drop --keep-attn, use "
                 "more GPUs or a later stage", share, gpu, need / G, cap_gib);
        return -1;
    }
    if (need > (int64_t)free_b) {
        snprintf(why, n, "%d rank(s) on %s need %.2f GiB, %.2f GiB are free: shorten --seq, drop --keep-attn, use "
                 "more GPUs or a later stage", share, gpu, need / G, free_b / G);
        return -1;
    }
    const int64_t host = memplan_host(mp) * host_share, avail = host_available_bytes();
    if (host > 0 && avail >= 0 && host > avail) {
        snprintf(why, n, "%d rank(s) in this process pin %.2f GiB of host memory, the machine has %.2f GiB available "
                 "(short by %.2f GiB): fewer layers kept on the host, fewer tokens, or more nodes", host_share,
                 host / G, avail / G, (host - avail) / G);
        return -1;
    }
    return 0;
}

void gpu_bind_numa(int device, int report) {
    char bus[64], desc[128];
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) { (void)cudaGetLastError(); return; }
    unsigned char *mask = xcalloc(NUMA_MAX_CPUS, 1);
    int node = -1;
    const int cpus = numa_device_cpus("/sys", bus, mask, &node);
    if (cpus > 0 && numa_bind_thread(mask, desc, sizeof desc) && report)
        printf("GPU %d (%s): NUMA node %d, rank thread %s\n", device, bus, node, desc);
    free(mask);
}
