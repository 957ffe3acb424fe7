/* loss.cu -- cross entropy over a chunk of fp32 logits, fused with its gradient: one pass for
 * the row max and sum of exponentials (online), one pass writing softmax - onehot. The chunk's
 * logits are never needed again, so the loss needs no recompute. A label of weight 0 (a prompt
 * token under a loss mask) contributes nothing: its loss and its row of dlogits are exact zeros. */
#include "common.cuh"

__global__ void cross_entropy_kernel(bf16_t *dlogits, float *loss, const float *logits, const uint32_t *labels,
                                     const uint8_t *weights, int64_t V, float scale) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    if (weights && !weights[row]) { /* masked: the whole block agrees, so returning early is safe */
        if (threadIdx.x == 0) loss[row] = 0.f;
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) st_bf(dlogits + row * V, j, 0.f);
        return;
    }
    const float *x = logits + row * V;
    float m = -INFINITY, z = 0.f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) { /* online max / sum of exp */
        const float v = x[j];
        if (v > m) { z = z * __expf(m - v) + 1.f; m = v; }
        else z += __expf(v - m);
    }
    const float M = block_max(m, red);
    const float Z = block_sum(m == -INFINITY ? 0.f : z * __expf(m - M), red);
    const float lse = M + logf(Z);
    const uint32_t y = labels[row];
    if (threadIdx.x == 0) loss[row] = lse - x[y];
    bf16_t *d = dlogits + row * V;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
        st_bf(d, j, (__expf(x[j] - lse) - (j == (int64_t)y ? 1.f : 0.f)) * scale);
}

extern "C" void cross_entropy(bf16_t *dlogits, float *loss, const float *logits, const uint32_t *labels,
                              const uint8_t *weights, int64_t rows, int64_t V, float scale, cudaStream_t st) {
    if (rows <= 0) return;
    cross_entropy_kernel<<<(unsigned)rows, 1024, 0, st>>>(dlogits, loss, logits, labels, weights, V, scale);
    KCHECK();
}
