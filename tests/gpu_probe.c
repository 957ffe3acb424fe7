/* gpu_probe: whether the CUDA runtime finds a GPU the GPU tests can run on, asked before they start
 * (make test-gpu, tests/run_gpu.sh). Exit 0 and one line naming GPU 0 when there is one; else exit 1
 * and one line saying why not: no driver, a driver older than this build's CUDA runtime, no device
 * visible, or GPU 0 older than the architecture the kernels were built for (GPU_ARCH). */
#include <cuda_runtime_api.h>
#include <stdio.h>

#ifndef GPU_ARCH
#define GPU_ARCH "sm_90"
#endif

/* "sm_90" or "sm_90a" -> 90; 0 when it names no number */
static int arch_number(const char *s) {
    int n = 0;
    for (; *s && (*s < '0' || *s > '9'); s++) {}
    for (; *s >= '0' && *s <= '9'; s++) n = n * 10 + (*s - '0');
    return n;
}

int main(void) {
    int n = 0, driver = 0, runtime = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaDriverGetVersion(&driver); /* 0: no driver installed */
        cudaRuntimeGetVersion(&runtime);
        if (driver == 0)
            printf("no NVIDIA driver is loaded (%s)\n", cudaGetErrorName(e));
        else if (e == cudaErrorInsufficientDriver)
            printf("the NVIDIA driver supports CUDA %d.%d, this build's CUDA runtime is %d.%d (%s)\n", driver / 1000,
                   driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, cudaGetErrorName(e));
        else
            printf("%s (%s)\n", cudaGetErrorString(e), cudaGetErrorName(e));
        return 1;
    }
    if (n < 1) {
        printf("the CUDA runtime sees no device\n");
        return 1;
    }
    struct cudaDeviceProp p;
    const cudaError_t pe = cudaGetDeviceProperties(&p, 0);
    if (pe != cudaSuccess) {
        printf("GPU 0 does not answer: %s (%s)\n", cudaGetErrorString(pe), cudaGetErrorName(pe));
        return 1;
    }
    const int cc = p.major * 10 + p.minor, need = arch_number(GPU_ARCH);
    if (cc < need) {
        printf("GPU 0 is %s (sm_%d); this build's kernels are for %s (GPU_ARCH) and newer\n", p.name, cc, GPU_ARCH);
        return 1;
    }
    printf("%d GPU(s); GPU 0 is %s (sm_%d)\n", n, p.name, cc);
    return 0;
}
