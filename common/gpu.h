/* gpu.h -- the device side of common/: device setup and facts, timing, host<->device helpers. */
#ifndef LONGCTX_GPU_H
#define LONGCTX_GPU_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "check.h"

typedef struct {
    int device;
    char name[256];
    int sms;
    int64_t total_bytes;    /* device memory */
    cudaStream_t stream;    /* the compute stream */
} Gpu;

void gpu_init(Gpu *g, int device);
/* bytes in use on the device right now (cudaMemGetInfo), CUDA context included */
int64_t gpu_used_bytes(void);
void *gpu_malloc(int64_t bytes, const char *what);
/* copy a host array up / down (synchronous on the compute stream) */
void gpu_upload(void *dst, const void *src, int64_t bytes, cudaStream_t st);
void gpu_download(void *dst, const void *src, int64_t bytes, cudaStream_t st);

#endif
