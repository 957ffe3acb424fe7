/* gpu.h -- the device side of common/: device setup and facts, timing, host<->device helpers. */
#ifndef LONGCTX_GPU_H
#define LONGCTX_GPU_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "check.h"
#include "memplan.h"
#include "tensor.h"

typedef struct {
    int device;
    char name[256];
    int sms;
    int64_t total_bytes;    /* device memory */
    cudaStream_t stream;    /* the compute stream */
} Gpu;

void gpu_init(Gpu *g, int device);
/* free bytes on the device now, no more than cap_gib when that is > 0 */
int64_t gpu_free_bytes(double cap_gib);
/* bytes a plan may fill on each of this process's first ngpus GPUs: cap_gib when > 0 (no more than
 * the least free on them, less a GiB), else that least free memory less a GiB; with plan_only set,
 * or no GPU visible, cap_gib or an H200's 139.8 GiB */
int64_t gpu_plan_bytes(double cap_gib, int plan_only, int ngpus);
/* bytes in use on the device right now (cudaMemGetInfo), CUDA context included */
int64_t gpu_used_bytes(void);
void *gpu_malloc(int64_t bytes, const char *what);
/* Allocate every arena's planned bytes (its high-water mark) in its place -- GPU memory, or pinned
 * host memory (cudaHostAlloc: the copy engines reach it at full speed) -- and rewind it for carving.
 * On a rank thread of several (common/comm.h) it begins an allocation phase first: the rank's set-up
 * allocates until its next collective, which meets the other ranks before it starts. */
void arenas_allocate(Arena *a, int n);
/* Does a plan fit this GPU (share ranks on it, each with the plan) and, if it has host rows, the
 * host (host_share ranks in this process)? cap_gib > 0 caps the GPU (--gpu-gib: rehearse an 80 GB
 * GPU on a larger one). 0, or -1 with the reason in why. */
int plan_fits(const MemPlan *mp, int share, int host_share, double cap_gib, const char *gpu, char *why, size_t n);
/* an asynchronous copy between pinned host memory and the GPU on stream st (down: to the host), a
 * "host copies" span of --timeline's */
void gpu_host_copy(void *dst, const void *src, int64_t bytes, int down, cudaStream_t st);
/* copy a host array up / down (synchronous on the compute stream) */
void gpu_upload(void *dst, const void *src, int64_t bytes, cudaStream_t st);
void gpu_download(void *dst, const void *src, int64_t bytes, cudaStream_t st);

/* Bind the calling (rank) thread to the CPUs of GPU device's NUMA node (common/numa.h), before it
 * pins host memory or starts its host threads; report: print where it went */
void gpu_bind_numa(int device, int report);

#endif
