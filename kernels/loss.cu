/* loss.cu -- cross entropy over a chunk of fp32 logits, fused with its gradient: one pass for
 * the row max and sum of exponentials (online), one pass writing softmax - onehot. The chunk's
 * logits are never needed again, so the loss needs no recompute. A label of weight 0 (a prompt
 * token under a loss mask) contributes nothing: its loss and its row of dlogits are exact zeros.
 *
 * The gradient and its scale. The step's loss is the mean over the labels that count in the whole
 * step, on every rank: loss = (1/N) sum_t w_t (lse_t - x_{t,y_t}), with x the logits, y_t row t's
 * label, w_t its 0/1 weight and N = sum_t w_t over all rows of all chunks of all ranks. Since
 * d lse_t / d x_{t,v} = softmax_{t,v},
 *     d loss / d x_{t,v} = (softmax_{t,v} - [v = y_t]) * w_t / N,
 * and the caller passes scale = 1/N. Not 1/(rows of this chunk) nor 1/(labels of this rank): the
 * chunks' dlogits feed GEMMs that add into one gradient (dW += dlogits^T h), and FSDP's
 * reduce-scatter sums the ranks' gradients, so each row must already carry its share of the job's
 * mean. A per-rank mean summed over P ranks would be P times too large, and averaging it instead
 * would weigh a rank with few counted labels (most of its window masked) as much as a full one.
 * loss[] is written unscaled (lse - x_y); the host sums it and divides by N.
 * Why dlogits may be bf16: softmax is in [0, 1] and softmax - 1 in [-1, 0], so every value lies in
 * [-1/N, 1/N]. bf16 keeps fp32's exponent range, so even e^-30 / 2^20 stays a normal number (fp16
 * would flush it to zero), and 8 significant bits: each value is off by at most 2^-8 of itself.
 * The GEMMs that consume dlogits (dW = dlogits^T h, dh = dlogits W) multiply and sum in fp32, so
 * the products carry that one rounding (fp32's own, 2^-24 an addition, is negligible): a sum is
 * off by at most 2^-8 of the sum of its terms' magnitudes, and typically far less, the roundings
 * having either sign (a bf16 accumulator would instead round again at every addition).
 * The chunk's buffers are then 6 bytes per logit (fp32 logits, bf16 dlogits), not 8. */
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
