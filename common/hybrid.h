/* hybrid.h -- Qwen3.5's layers on the GPU (transformers' Qwen3_5GatedDeltaNet and Qwen3_5Attention):
 * the linear attention mixer whole, forward and backward, and the steps by which its gated full
 * attention differs from Qwen3's (q_proj's output gate, RoPE over part of a head). Kernels in
 * kernels/gdn.cu and kernels/gated_attn.cu; the fp64 reference in tests/ref_gdn.c.
 *
 * A linear layer, forward (S tokens, C = 2 Hk dk + Hv dv conv channels, VD = Hv dv):
 *     mix = xn Wqkv^T, z = xn Wz^T, b = xn Wb^T, a = xn Wa^T        the four projections
 *     qkv = silu(causal depthwise conv(mix))                        width 4, per channel
 *     g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)      the decay's log, the write strength
 *     o = the gated delta rule over q, k (l2-normalised), v, g, beta  state [Hv, dv, dk] token by token
 *     y = rmsnorm(o) w silu(z), per value head;  x_mid = x + y Wout^T
 * Everything the backward reads is kept from a forward run again just before it (the layer's
 * checkpoint is its input, as for attention). A token at position 0 starts a document: the conv
 * and the state start from zero there (--packing). */
#ifndef LONGCTX_HYBRID_H
#define LONGCTX_HYBRID_H

#include <stdint.h>

#include "config.h"
#include "gemm.h"
#include "tensor.h"

typedef struct {
    /* forward, kept for the backward */
    bf16_t *mix;        /* [S, C] in_proj_qkv(xn) */
    bf16_t *qkv;        /* [S, C] silu(conv(mix)): q, k, v */
    bf16_t *z;          /* [S, VD] in_proj_z(xn): the output gate */
    bf16_t *a, *b;      /* [S, Hv] in_proj_a(xn), in_proj_b(xn) */
    float *g, *beta;    /* [S, Hv] the decay's log, the write strength */
    float *rq, *rk;     /* [S, Hk] inverse l2 norms of q, k */
    bf16_t *o;          /* [S, VD] the rule's output */
    float *rstd;        /* [S Hv] the gated norm's */
    bf16_t *y;          /* [S, VD] the gated norm's output, out_proj's input */
    float *states;      /* [ceil(S / chunk), Hv, dk, dv] the state at each chunk's start */
    int64_t chunk;      /* tokens between kept states (hybrid_chunk) */
    /* backward */
    bf16_t *dy;         /* [S, VD] d(y) */
    bf16_t *d_o, *dz;   /* [S, VD] */
    bf16_t *dqkv;       /* [S, C] d(qkv), then d(conv's output before SiLU) */
    bf16_t *dmix;       /* [S, C] */
    float *dq, *dk;     /* [S, Hk, dk] d(prepared q, k), summed over value heads */
    float *dg, *dbeta;  /* [S, Hv] */
    bf16_t *da, *db;    /* [S, Hv] */
    float *scratch;     /* the backward's per-token states of a chunk (gdn_scratch_floats) */
} GdnWork;

/* a linear layer's weights (bf16) and gradients (fp32), in P_LIN_* order */
typedef struct { const bf16_t *qkv, *z, *b, *a, *conv, *dt_bias, *A_log, *norm, *out; } GdnWeights16;
typedef struct { float *qkv, *z, *b, *a, *conv, *dt_bias, *A_log, *norm, *out; } GdnGrads32;

/* tokens between the states the forward keeps: a power of two near sqrt(S), so the kept states
 * (S / chunk of them) and the backward's scratch (chunk per row group) are both ~sqrt(S) */
int64_t hybrid_chunk(int64_t S);
/* carve the forward's (kept) and the backward's buffers for S tokens (a NULL arena base only measures) */
void hybrid_carve_fwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S);
void hybrid_carve_bwd(GdnWork *g, Arena *a, const Qwen3Config *c, int64_t S);
/* A layer is one kind or the other, so a hybrid's linear buffers share memory with the attention's:
 * the forward's (bwd 0) or the backward's (1) carved from mark `from`, where the attention's began,
 * and the arena's top left at the larger of the two. Nothing for a model without linear layers. */
void hybrid_carve_over(GdnWork *g, Arena *a, int64_t from, const Qwen3Config *c, int64_t S, int bwd);

/* xn [S, D] (the input norm's output) -> x_mid = x + the mixer's output */
void hybrid_linear_forward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const bf16_t *xn,
                           const bf16_t *x, bf16_t *x_mid, const int32_t *pos, int64_t S, cudaStream_t st);
/* after hybrid_linear_forward of the same tokens: dy [S, D] (d of x_mid) -> d(xn) into dxn
 * (overwritten); the weights' gradients added into G */
void hybrid_linear_backward(Gemm *gm, GdnWork *g, const Qwen3Config *c, const GdnWeights16 *W, const GdnGrads32 *G,
                            const bf16_t *xn, const bf16_t *dy, bf16_t *dxn, const int32_t *pos, int64_t S,
                            cudaStream_t st);

/* ---- the full attention layers: q/k head norms and RoPE, the output gate. Qwen3 (no gate, every
 * dim rotated) takes its own kernel; Qwen3.5 reads q from q_proj's [S, Hq, 2 hd] rows. */
/* q_raw [S, config_q_rows], k_raw [S, Hkv hd] -> q, k [S, H, hd] and their rstd */
void hybrid_qk_fwd(const Qwen3Config *c, bf16_t *q, float *rstd_q, bf16_t *k, float *rstd_k, const bf16_t *q_raw,
                   const bf16_t *k_raw, const bf16_t *wq, const bf16_t *wk, const int32_t *pos, const float *inv_freq,
                   float attn_factor, int64_t S, cudaStream_t st);
/* dq, dk [S, H, hd] (the attention's backward) -> d(q_raw) into dq_raw (Qwen3: dq itself, in place)
 * and d(k_raw) in place of dk; dwq, dwk added into */
void hybrid_qk_bwd(const Qwen3Config *c, bf16_t *dq_raw, bf16_t *dq, bf16_t *dk, float *dwq, float *dwk,
                   const bf16_t *q_raw, const bf16_t *k_raw, const float *rstd_q, const float *rstd_k, const bf16_t *wq,
                   const bf16_t *wk, const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S,
                   cudaStream_t st);
/* what o_proj reads: o, or with the gate og = o sigmoid(gate) (written) */
const bf16_t *hybrid_gate_fwd(const Qwen3Config *c, bf16_t *og, const bf16_t *o, const bf16_t *q_raw, int64_t S,
                              cudaStream_t st);
/* d_o: d(o_proj's input) in, d(o) out; d(gate) into dq_raw's gate half (nothing without a gate) */
void hybrid_gate_bwd(const Qwen3Config *c, bf16_t *d_o, bf16_t *dq_raw, const bf16_t *o, const bf16_t *q_raw, int64_t S,
                     cudaStream_t st);

#endif
