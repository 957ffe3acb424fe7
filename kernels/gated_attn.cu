/* gated_attn.cu -- the pieces by which Qwen3.5's full attention layers differ from Qwen3's: q_proj
 * gives each head its query and, beside it, an output gate (rows [S, H, 2 hd]: query, then gate);
 * the q/k head norms feed a RoPE that turns only the first rot dims of a head (partial_rotary_factor);
 * the attention output is multiplied by sigmoid(gate) before o_proj. */
#include "common.cuh"

/* ---------------------------------------------------------------- head norm + partial RoPE */
/* One warp per (token, head): x from in (head h of token t at t * in_ld + h * in_hs), normalised over
 * hd, times w, the first rot dims rotated in pairs (i, i + rot/2) as transformers' rotate_half does
 * within them, the rest passed on. A warp's row goes through shared memory because a pair's partner
 * sits in another lane when rot/2 is not a multiple of 32. */
#define GA_WARPS 8
__global__ void ga_qk_fwd_kernel(bf16_t *out, float *rstd, const bf16_t *in, int64_t in_ld, int64_t in_hs,
                                 const bf16_t *w, const int32_t *pos, const float *inv_freq, float af, int64_t S,
                                 int64_t H, int hd, int rot, float eps) {
    __shared__ float rowbuf[GA_WARPS][256];
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5;
    const int64_t row = (int64_t)blockIdx.x * GA_WARPS + wi;
    if (row >= S * H) return;
    const int64_t t = row / H, h = row % H;
    const bf16_t *x = in + t * in_ld + h * in_hs;
    float *v = rowbuf[wi];
    float ss = 0.f;
    for (int i = lane; i < hd; i += 32) { const float f = bf(x, i); v[i] = f; ss += f * f; }
    const float r = rsqrtf(warp_sum(ss) / (float)hd + eps);
    if (lane == 0) rstd[row] = r;
    __syncwarp();
    for (int i = lane; i < hd; i += 32) v[i] *= r * bf(w, i);
    __syncwarp();
    const float p = (float)pos[t];
    const int half = rot / 2;
    for (int i = lane; i < hd; i += 32) {
        float y = v[i];
        if (i < rot) {
            const int f = i < half ? i : i - half;
            float c, s;
            sincosf(p * inv_freq[f], &s, &c);
            y = i < half ? v[i] * c * af - v[i + half] * s * af : v[i] * c * af + v[i - half] * s * af;
        }
        st_bf(out, row * hd + i, y);
    }
}

extern "C" void ga_qk_fwd(bf16_t *out, float *rstd, const bf16_t *in, int64_t in_ld, int64_t in_hs, const bf16_t *w,
                          const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, int64_t H, int64_t hd,
                          int64_t rot, float eps, cudaStream_t st) {
    if (hd > 256 || rot > hd || rot % 2) {
        fprintf(stderr, "error: ga_qk_fwd takes head_dim <= 256 and an even rot <= head_dim (%lld, %lld)\n",
                (long long)hd, (long long)rot);
        exit(1);
    }
    ga_qk_fwd_kernel<<<grid_for(S * H, GA_WARPS, 1LL << 31), 32 * GA_WARPS, 0, st>>>(out, rstd, in, in_ld, in_hs, w, pos,
                                                                                   inv_freq, attn_factor, S, H, (int)hd,
                                                                                   (int)rot, eps);
    KCHECK();
}

/* The backward: d [S, H, hd] (the gradient of out) in; the gradient of the raw head written to dx
 * (same placement as in: t * in_ld + h * in_hs); dw [hd] added into. RoPE transposed, then the norm's
 * backward: g = (R^T d) w, dx = r (g - xh mean(g xh)), dw += (R^T d) xh. */
__global__ void ga_qk_bwd_kernel(bf16_t *dx, float *dw, const bf16_t *d, const bf16_t *in, int64_t in_ld, int64_t in_hs,
                                 const float *rstd, const bf16_t *w, const int32_t *pos, const float *inv_freq, float af,
                                 int64_t S, int64_t H, int hd, int rot) {
    __shared__ float rowbuf[GA_WARPS][256], dw_s[256];
    for (int i = threadIdx.x; i < hd; i += blockDim.x) dw_s[i] = 0.f;
    __syncthreads();
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, half = rot / 2;
    float *v = rowbuf[wi];
    for (int64_t row = (int64_t)blockIdx.x * GA_WARPS + wi; row < S * H; row += (int64_t)gridDim.x * GA_WARPS) {
        const int64_t t = row / H, h = row % H;
        const float p = (float)pos[t], r = rstd[row];
        __syncwarp();
        for (int i = lane; i < hd; i += 32) v[i] = bf(d, row * hd + i);
        __syncwarp();
        float gr[8], xh[8], dot = 0.f; /* hd <= 256: 8 per lane */
        for (int m = 0; m < 8; m++) {
            const int i = m * 32 + lane;
            if (i >= hd) break;
            float g = v[i];
            if (i < rot) { /* R^T: the rotation by -angle */
                const int f = i < half ? i : i - half;
                float c, s;
                sincosf(p * inv_freq[f], &s, &c);
                g = i < half ? v[i] * c * af + v[i + half] * s * af : v[i] * c * af - v[i - half] * s * af;
            }
            xh[m] = bf(in, t * in_ld + h * in_hs + i) * r;
            atomicAdd(&dw_s[i], g * xh[m]);
            gr[m] = g * bf(w, i);
            dot += gr[m] * xh[m];
        }
        dot = warp_sum(dot) / (float)hd;
        for (int m = 0; m < 8; m++) {
            const int i = m * 32 + lane;
            if (i >= hd) break;
            st_bf(dx, t * in_ld + h * in_hs + i, r * (gr[m] - xh[m] * dot));
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) atomicAdd(&dw[i], dw_s[i]);
}

extern "C" void ga_qk_bwd(bf16_t *dx, float *dw, const bf16_t *d, const bf16_t *in, int64_t in_ld, int64_t in_hs,
                          const float *rstd, const bf16_t *w, const int32_t *pos, const float *inv_freq,
                          float attn_factor, int64_t S, int64_t H, int64_t hd, int64_t rot, cudaStream_t st) {
    int dev, sms;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const unsigned grid = grid_for(S * H, GA_WARPS, 8LL * sms);
    ga_qk_bwd_kernel<<<grid, 32 * GA_WARPS, 0, st>>>(dx, dw, d, in, in_ld, in_hs, rstd, w, pos, inv_freq, attn_factor, S,
                                                     H, (int)hd, (int)rot);
    KCHECK();
}

/* ---------------------------------------------------------------- the output gate */
/* og [S, H, hd] = o * sigmoid(gate), gate the second half of each head's 2 hd rows of q_raw */
__global__ void ga_gate_fwd_kernel(bf16_t *og, const bf16_t *o, const bf16_t *q_raw, int64_t n, int64_t hd) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t hh = e / hd, i = e % hd; /* (token, head) row, dim */
        const float g = bf(q_raw, hh * 2 * hd + hd + i);
        st_bf(og, e, bf(o, e) / (1.f + __expf(-g)));
    }
}

extern "C" void ga_gate_fwd(bf16_t *og, const bf16_t *o, const bf16_t *q_raw, int64_t S, int64_t H, int64_t hd,
                            cudaStream_t st) {
    ga_gate_fwd_kernel<<<grid_for(S * H * hd, 256), 256, 0, st>>>(og, o, q_raw, S * H * hd, hd);
    KCHECK();
}

/* From d(og): d(o) written in place of it, d(gate) into the gate half of dq_full [S, H, 2 hd] */
__global__ void ga_gate_bwd_kernel(bf16_t *d, bf16_t *dq_full, const bf16_t *o, const bf16_t *q_raw, int64_t n,
                                   int64_t hd) {
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t hh = e / hd, i = e % hd;
        const float g = bf(q_raw, hh * 2 * hd + hd + i), sg = 1.f / (1.f + __expf(-g)), dy = bf(d, e);
        st_bf(dq_full, hh * 2 * hd + hd + i, dy * bf(o, e) * sg * (1.f - sg));
        st_bf(d, e, dy * sg);
    }
}

extern "C" void ga_gate_bwd(bf16_t *d, bf16_t *dq_full, const bf16_t *o, const bf16_t *q_raw, int64_t S, int64_t H,
                            int64_t hd, cudaStream_t st) {
    ga_gate_bwd_kernel<<<grid_for(S * H * hd, 256), 256, 0, st>>>(d, dq_full, o, q_raw, S * H * hd, hd);
    KCHECK();
}
