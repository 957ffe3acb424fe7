/* comm.cu -- reductions for the one-GPU "local" and "rehearse" communicator backends, and scale kernels. */
#include "common.cuh"

__global__ void sum_slices_f32_kernel(float *out, SlicePtrs s, int64_t offset, int64_t n, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float acc = 0.f;
        for (int q = 0; q < s.n; q++) acc += static_cast<const float *>(s.p[q])[offset + i];
        out[i] = acc * scale;
    }
}
__global__ void sum_slices_f64_kernel(double *out, SlicePtrs s, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0.0;
        for (int q = 0; q < s.n; q++) acc += static_cast<const double *>(s.p[q])[i];
        out[i] = acc;
    }
}
__global__ void scale_f32_kernel(float *x, int64_t n, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] *= scale;
}

__global__ void scale_f64_kernel(double *x, int64_t n, double scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] *= scale;
}

extern "C" void sum_slices_f32(float *out, SlicePtrs s, int64_t offset, int64_t n, float scale, cudaStream_t st) {
    sum_slices_f32_kernel<<<grid_for(n, 256), 256, 0, st>>>(out, s, offset, n, scale);
    KCHECK();
}
extern "C" void sum_slices_f64(double *out, SlicePtrs s, int64_t n, cudaStream_t st) {
    sum_slices_f64_kernel<<<grid_for(n, 256), 256, 0, st>>>(out, s, n);
    KCHECK();
}
extern "C" void scale_f32(float *x, int64_t n, float scale, cudaStream_t st) {
    scale_f32_kernel<<<grid_for(n, 256), 256, 0, st>>>(x, n, scale);
    KCHECK();
}
extern "C" void scale_f64(double *x, int64_t n, double scale, cudaStream_t st) {
    scale_f64_kernel<<<grid_for(n, 256), 256, 0, st>>>(x, n, scale);
    KCHECK();
}
