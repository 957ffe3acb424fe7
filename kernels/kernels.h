/* kernels.h -- the CUDA kernels, as plain C launchers (extern "C", one cudaStream_t each).
 * bf16 tensors are passed as bf16_t* (raw 16-bit storage); fp32 as float*. Shapes in the
 * comments are row-major; S = tokens, D = hidden, H = heads, hd = head_dim, I = intermediate.
 * Every launcher checks its launch (file:line on failure). */
#ifndef LONGCTX_KERNELS_H
#define LONGCTX_KERNELS_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned short bf16_t;

/* out[S,D] = table[ids[t], :] */
void embedding_fwd(bf16_t *out, const bf16_t *table, const uint32_t *ids, int64_t S, int64_t D, cudaStream_t st);
/* dtable[ids[t], :] += dx[t, :] (fp32 atomics) */
void embedding_bwd(float *dtable, const bf16_t *dx, const uint32_t *ids, int64_t S, int64_t D, cudaStream_t st);

/* y[rows,n] = w * x * rstd, rstd[rows] = 1/sqrt(mean(x^2) + eps), statistics in fp32 */
void rmsnorm_fwd(bf16_t *y, float *rstd, const bf16_t *x, const bf16_t *w, int64_t rows, int64_t n, float eps,
                 cudaStream_t st);
/* dx[rows,n] += rstd * (dy*w - xhat * mean(dy*w*xhat)) (accumulates into the residual gradient);
 * dw[n] += sum over rows of dy * xhat (fp32). n <= 8192. */
void rmsnorm_bwd(bf16_t *dx, float *dw, const bf16_t *dy, const bf16_t *x, const float *rstd, const bf16_t *w,
                 int64_t rows, int64_t n, cudaStream_t st);

/* Per-head RMSNorm (q_norm / k_norm) then rotate-half RoPE, fused: in/out [S, H*hd],
 * rstd [S*H]; angle = float(pos[t]) * inv_freq[i] in fp32, cos/sin scaled by attn_factor.
 * hd must be a multiple of 64. out may not alias in. */
void qk_norm_rope_fwd(bf16_t *out, float *rstd, const bf16_t *in, const bf16_t *w, const int32_t *pos,
                      const float *inv_freq, float attn_factor, int64_t S, int64_t H, int64_t hd, float eps,
                      cudaStream_t st);
/* d(in) from d(out), written in place over dout; dw[hd] += (fp32) */
void qk_norm_rope_bwd(bf16_t *dout_to_din, float *dw, const bf16_t *in, const float *rstd, const bf16_t *w,
                      const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, int64_t H, int64_t hd,
                      cudaStream_t st);

/* h = silu(g) * u over n elements */
void swiglu_fwd(bf16_t *h, const bf16_t *g, const bf16_t *u, int64_t n, cudaStream_t st);
/* in place: g <- dg, u <- du, from dh */
void swiglu_bwd(bf16_t *g_to_dg, bf16_t *u_to_du, const bf16_t *dh, int64_t n, cudaStream_t st);

/* Cross entropy over rows of fp32 logits [rows, V]: loss[r] = logsumexp - logit[label] (unscaled);
 * dlogits[r] = (softmax - onehot) * scale, bf16. weights [rows] (0/1, NULL: all 1): a row of
 * weight 0 gets loss 0 and dlogits 0. scale = 1/N, N the labels that count in the whole step (every
 * chunk, every rank): d(loss)/d(logit[t,v]) = (softmax[t,v] - [v = label t]) * w_t / N, so the
 * chunks' GEMMs and the ranks' reduce-scatter, which sum, give the gradient of the job's mean.
 * Values lie in [-1/N, 1/N]; bf16 (relative error 2^-8 each, fp32's range) suffices because the
 * GEMMs consuming dlogits accumulate in fp32 (loss.cu says more). */
void cross_entropy(bf16_t *dlogits, float *loss, const float *logits, const uint32_t *labels, const uint8_t *weights,
                   int64_t rows, int64_t V, float scale, cudaStream_t st);

/* out[0] += sum of x[0..n) in fp64 (deterministic two-level reduction; scratch >= 1024 doubles) */
void sum_f32(double *out, const float *x, int64_t n, double *scratch, cudaStream_t st);
/* out[0] = sum of x[i]^2 (fp64), scratch >= 1024 doubles */
void sumsq_f32(double *out, const float *x, int64_t n, double *scratch, cudaStream_t st);

/* AdamW on one tensor: g scaled by clip = min(1, max_norm / (sqrt(*sumsq) + 1e-6)) (max_norm <= 0: none),
 * m, v updated, master -= lr * (mhat / (sqrt(vhat) + eps) + wd * master), w = bf16(master). */
void adamw(float *master, bf16_t *w, float *m, float *v, const float *g, int64_t n, const double *sumsq,
           float max_norm, float lr, float beta1, float beta2, float eps, float wd, float bc1, float bc2,
           cudaStream_t st);

void cast_f32_to_bf16(bf16_t *out, const float *in, int64_t n, cudaStream_t st);
void cast_bf16_to_f32(float *out, const bf16_t *in, int64_t n, cudaStream_t st);
/* fill with a bit pattern (tests poison outputs with 0xFF: NaN in bf16 and fp32) */
void fill_u16(uint16_t *p, uint16_t v, int64_t n, cudaStream_t st);

/* ---- communication helpers (common/comm.c, local backend) */
#define MAX_SLICES 16
typedef struct {
    const void *p[MAX_SLICES]; /* one input per rank */
    int n;
} SlicePtrs;
/* out[i] = scale * sum over q of ((const float *)s.p[q])[offset + i], i < n */
void sum_slices_f32(float *out, SlicePtrs s, int64_t offset, int64_t n, float scale, cudaStream_t st);
/* out[i] = sum over q of ((const double *)s.p[q])[i] */
void sum_slices_f64(double *out, SlicePtrs s, int64_t n, cudaStream_t st);
/* x[i] *= scale */
void scale_f32(float *x, int64_t n, float scale, cudaStream_t st);
void scale_f64(double *x, int64_t n, double scale, cudaStream_t st);

/* ---- ring attention (stage 3) */
/* Merge a block's attention result into the running one for rows [q0, q0+nq) of n:
 * lse' = log(e^lse + e^lse_b), o' = (e^lse o + e^lse_b o_b) / e^lse'. o: running [n, H, D], fp32
 * (o_f32) or bf16; lse: running [H, n] fp32 (-inf before the first block); o_b [nq, H, D] bf16,
 * lse_b [H, nq] fp32 (a cuDNN block's output). D a multiple of 4, buffers 16-byte aligned. */
void lse_merge(void *o, int o_f32, float *lse, const bf16_t *o_b, const float *lse_b, int64_t n, int64_t q0,
               int64_t nq, int64_t H, int64_t D, cudaStream_t st);
/* The same with lse_b's rows ldb apart ([H, ldb]: a padded cuDNN call's, docs.h) */
void lse_merge_ld(void *o, int o_f32, float *lse, const bf16_t *o_b, const float *lse_b, int64_t ldb, int64_t n,
                  int64_t q0, int64_t nq, int64_t H, int64_t D, cudaStream_t st);
/* acc[i] += x[i] over n elements (a multiple of 4, 16-byte aligned); acc fp32 (acc_f32) or bf16 */
void add_bf16_into(void *acc, int acc_f32, const bf16_t *x, int64_t n, cudaStream_t st);
void fill_f32(float *p, float v, int64_t n, cudaStream_t st);

/* Mixture of experts (moe.cu). T tokens, E experts, k choices each, n = T*k (token, choice) pairs.
 * route: prob[T,E] = softmax(logits[T,E]); sel[T,k] the k largest (ties to the lower index),
 * w[T,k] their probabilities, divided by their sum when norm. */
void moe_route(const float *logits, float *prob, int32_t *sel, float *w, int64_t T, int64_t E, int64_t k, int norm,
               cudaStream_t st);
/* count[E] pairs per expert, offsets[E+1] their prefix sums, pos[n] each pair's row when the pairs are
 * sorted by expert (stable: in pair order within an expert) */
void moe_sort(const int32_t *sel, int64_t n, int64_t E, int32_t *count, int32_t *offsets, int32_t *pos, cudaStream_t st);
/* xs[pos[i], :] = x[i / k, :] */
void moe_gather(bf16_t *xs, const bf16_t *x, const int32_t *pos, int64_t T, int64_t k, int64_t D, cudaStream_t st);
/* out[t] = resid[t] + sum_j w[t,j] ys[pos[t,j]] (+ sigmoid(sh_s[t]) sh_y[t] when sh_y: Qwen3.5's shared
 * expert; out may be resid) */
void moe_combine(bf16_t *out, const bf16_t *resid, const bf16_t *ys, const int32_t *pos, const float *w, int64_t T,
                 int64_t k, int64_t D, const bf16_t *sh_y, const float *sh_s, cudaStream_t st);
/* the shared expert's gate score s[T] = x[T,D] w[D] (fp32) */
void moe_shared_score(float *s, const bf16_t *x, const bf16_t *w, int64_t T, int64_t D, cudaStream_t st);
/* ds[t] = sigmoid'(s[t]) <dy[t], y[t]>, then in place y[t] <- sigmoid(s[t]) dy[t] */
void moe_shared_bwd(bf16_t *y_to_dy, float *ds, const bf16_t *dy, const float *s, int64_t T, int64_t D, cudaStream_t st);
/* the score's backward: dx[T,D] += ds[t] w, dw[D] += ds^T x (fp32 atomics) */
void moe_shared_score_bwd(bf16_t *dx, float *dw, const float *ds, const bf16_t *x, const bf16_t *w, int64_t T, int64_t D,
                          cudaStream_t st);
/* dw[t,j] = <dy[t], ys[pos[t,j]]>, then in place ys[pos[t,j]] <- w[t,j] dy[t] */
void moe_combine_bwd(bf16_t *ys_to_dys, float *dw, const bf16_t *dy, const int32_t *pos, const float *w, int64_t T,
                     int64_t k, int64_t D, cudaStream_t st);
/* dx[t] = sum_j dxs[pos[t,j]] (overwrites) */
void moe_scatter_bwd(bf16_t *dx, const bf16_t *dxs, const int32_t *pos, int64_t T, int64_t k, int64_t D, cudaStream_t st);
/* dlogits[T,E] from dw[T,k] through the renormalisation and softmax; aux_grad[E] (or NULL) is added
 * to every d(prob[t,e]) (the load-balancing loss) */
void moe_router_bwd(bf16_t *dlogits, const float *prob, const int32_t *sel, const float *w, const float *dw,
                    const float *aux_grad, int64_t T, int64_t E, int64_t k, int norm, cudaStream_t st);
/* choices[e] += count[e]; psum[e] += sum over the T rows of prob[:, e] */
void moe_stats(double *choices, double *psum, const int32_t *count, const float *prob, int64_t T, int64_t E,
               cudaStream_t st);
/* a grouped GEMM's pointers, for each segment e with rows (r[e+1] > r[e]), j counting those only:
 * ptrs[j] = A + e*a_seg, ptrs[E+j] = B + r[e]*b_row, ptrs[2E+j] = C + r[e]*c_row (bytes) */
void segment_ptrs(void **ptrs, const int32_t *r, int64_t E, const void *A, int64_t a_seg, const void *B, int64_t b_row,
                  void *C, int64_t c_row, cudaStream_t st);

/* ---- Qwen3.5 linear attention (gdn.cu). qkv [S, C]: C = 2 Hk dk + Hv dv channels (q, k, v); pos [S]:
 * a token at position 0 starts a document (the conv and the state start from zero there). */
/* out [S, C] = silu(causal depthwise conv of x [S, C] with w [C, K]); halo [K-1, C]: the tokens before
 * x (context parallelism: the previous chunk's last; NULL: none) */
void gdn_conv_fwd(bf16_t *out, const bf16_t *x, const bf16_t *halo, const bf16_t *w, const int32_t *pos, int64_t S,
                  int64_t C, int64_t K, cudaStream_t st);
/* d: d(out) in, overwritten with d(pre-SiLU); dx [S, C] written; dhalo [K-1, C] (NULL: not wanted) the
 * halo's gradient written; dw [C, K] added into */
void gdn_conv_bwd(bf16_t *dx, bf16_t *dhalo, float *dw, bf16_t *d, const bf16_t *x, const bf16_t *halo, const bf16_t *w,
                  const int32_t *pos, int64_t S, int64_t C, int64_t K, cudaStream_t st);
/* g [S, Hv] = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) (a, b [S, Hv] the projections) */
void gdn_gates_fwd(float *g, float *beta, const bf16_t *a, const bf16_t *b, const bf16_t *A_log, const bf16_t *dt_bias,
                   int64_t S, int64_t Hv, cudaStream_t st);
/* da, db [S, Hv] written; dA_log, ddt_bias [Hv] added into */
void gdn_gates_bwd(bf16_t *da, bf16_t *db, float *dA_log, float *ddt_bias, const float *dg, const float *dbeta,
                   const float *g, const float *beta, const bf16_t *a, const bf16_t *A_log, const bf16_t *dt_bias,
                   int64_t S, int64_t Hv, cudaStream_t st);
/* r [S, H] = 1 / sqrt(|head|^2 + 1e-6) of the H heads of d channels from channel c0 of rows of ld */
void gdn_l2_fwd(float *r, const bf16_t *x, int64_t S, int64_t H, int64_t d, int64_t ld, int64_t c0, cudaStream_t st);
/* dy [S, H, d] fp32, the gradient of scale x r, to the raw heads' (written at channel c0 of rows of ld) */
void gdn_l2_bwd(bf16_t *dx, const float *dy, const bf16_t *x, const float *r, float scale, int64_t S, int64_t H,
                int64_t d, int64_t ld, int64_t c0, cudaStream_t st);
/* the gated delta rule, token by token: o [S, Hv, dv]; states [ceil(S/chunk), Hv, dk, dv] the state at
 * every chunk's start (for the backward); S_io [Hv, dv, dk] initial state in and final out (NULL: zero,
 * not kept). rq, rk [S, Hk]: gdn_l2_fwd's of q and k. dk 32/64/128, dv a multiple of 32. */
void gdn_rule_fwd(bf16_t *o, float *states, float *S_io, const bf16_t *qkv, const float *g, const float *beta,
                  const float *rq, const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk,
                  int64_t dv, int64_t chunk, cudaStream_t st);
/* its backward from dout [S, Hv, dv]: dq, dk [S, Hk, dk] fp32 (of the prepared q, k) and dg, dbeta
 * [S, Hv] fp32 added into (zero them first); dv into dqkv's v channels; dS_io [Hv, dv, dk]: the final
 * state's gradient in, the initial state's out (NULL: zero, not kept); scratch of gdn_scratch_floats */
void gdn_rule_bwd(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta, float *dS_io, const bf16_t *dout,
                  const float *states, float *scratch, const bf16_t *qkv, const float *g, const float *beta,
                  const float *rq, const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv,
                  int64_t dk_head, int64_t dv, int64_t chunk, int c_only, cudaStream_t st);
/* c_only: only dS_io (the chunk's backward map, with dS_io in zero: what it sends back from its own
 * outputs' gradients); nothing else written */
/* context parallelism's state maps: a chunk of S tokens maps its initial state to its final one,
 * S_end = S_start M + B; maps [Hv, dv + dk, dk] gets B's dv rows, then M's dk rows */
void gdn_rule_maps(float *maps, const bf16_t *qkv, const float *g, const float *beta, const float *rq, const float *rk,
                   const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, cudaStream_t st);
/* S_out [Hv, dv, dk] = S_in M + B (S_in NULL: zero) */
void gdn_compose(float *S_out, const float *S_in, const float *maps, int64_t Hv, int64_t dk, int64_t dv,
                 cudaStream_t st);
/* dS_out = dS_in M^T + Cb (dS_in NULL: zero): the gradient of a chunk's initial state from its final one's */
void gdn_compose_bwd(float *dS_out, const float *dS_in, const float *maps, const float *Cb, int64_t Hv, int64_t dk,
                     int64_t dv, cudaStream_t st);
int64_t gdn_scratch_floats(int64_t Hv, int64_t dk, int64_t dv, int64_t chunk);
/* 1: the plain kernels (token by token, each token's inputs read as it comes) for the rule's forward,
 * maps and backward; 0 (the default): the tiled ones, the same recurrence with a tile of tokens'
 * inputs fetched while the previous tile runs (the same per-token code; the backward sums dq and dk over
 * a warp's rows in another order). gdn_rule_tile(8 or 16) fixes the tile's tokens (0: chosen per launch
 * so the grid stays resident); for the tests and the bench. */
void gdn_rule_plain(int on);
void gdn_rule_tile(int tokens);
/* The same rule in chunks of 64 tokens on tensor cores (gdn_chunked.cu; docs/chunked_delta_rule.md):
 * gdn_rule_fwd's, gdn_rule_maps' and gdn_rule_bwd's contracts, one call for the other (the backward's
 * scratch unused; a workspace of their own, grown as needed up to gdn_chunked_workspace's bytes, 1 GB
 * by default, 0: the default; gdn_chunked_release frees it). dk 32, 64 or 128, dv a multiple of 32.
 * gdn_chunked_precision(1) (the default): about fp32 throughout; 0: the output side's products
 * (P, dP, dL, dY) in plain tf32 (tests/test_gdn_chunked.c states both bands). GDN_CHUNKED_ROWS=16 in the
 * environment: the sequential passes at 16 state rows a CTA instead of 32. Not yet run on a GPU. */
void gdn_chunked_fwd(bf16_t *o, float *states, float *S_io, const bf16_t *qkv, const float *g, const float *beta,
                     const float *rq, const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk,
                     int64_t dv, int64_t chunk, cudaStream_t st);
void gdn_chunked_maps(float *maps, const bf16_t *qkv, const float *g, const float *beta, const float *rq, const float *rk,
                      const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, cudaStream_t st);
void gdn_chunked_bwd(float *dq, float *dk, bf16_t *dqkv, float *dg, float *dbeta, float *dS_io, const bf16_t *dout,
                     const float *states, float *scratch, const bf16_t *qkv, const float *g, const float *beta,
                     const float *rq, const float *rk, const int32_t *pos, int64_t S, int64_t Hk, int64_t Hv,
                     int64_t dk_head, int64_t dv, int64_t chunk, int c_only, cudaStream_t st);
void gdn_chunked_precision(int exact);
void gdn_chunked_workspace(int64_t bytes);
void gdn_chunked_release(void);
/* 1: each of its launches timed (and waited for) by kind, printed and reset by gdn_chunked_profile_print */
void gdn_chunked_profile(int on);
void gdn_chunked_profile_print(const char *tag);
/* three small products through the chunked kernels' tensor-core tiles (out [3][32][16]; gdn_chunked.cu
 * says which): a wrong fragment layout shows here first */
void gdn_chunked_mma_check(float *out, const float *A, const float *B, const float *At, const float *Bt, cudaStream_t st);
/* the gated RMSNorm over rows of n: y = w (x / rms(x)) silu(z); rstd [rows] kept */
void gdn_norm_fwd(bf16_t *y, float *rstd, const bf16_t *x, const bf16_t *z, const bf16_t *w, int64_t rows, int64_t n,
                  float eps, cudaStream_t st);
/* dx, dz written; dw [n] added into */
void gdn_norm_bwd(bf16_t *dx, bf16_t *dz, float *dw, const bf16_t *dy, const bf16_t *x, const bf16_t *z,
                  const float *rstd, const bf16_t *w, int64_t rows, int64_t n, cudaStream_t st);

/* ---- Qwen3.5 gated full attention (gated_attn.cu) */
/* a head norm and RoPE over its first rot dims: head h of token t read at in + t in_ld + h in_hs,
 * out [S, H, hd] compact; rstd [S H] kept */
void ga_qk_fwd(bf16_t *out, float *rstd, const bf16_t *in, int64_t in_ld, int64_t in_hs, const bf16_t *w,
               const int32_t *pos, const float *inv_freq, float attn_factor, int64_t S, int64_t H, int64_t hd,
               int64_t rot, float eps, cudaStream_t st);
/* d [S, H, hd] -> dx at in's placement; dw [hd] added into */
void ga_qk_bwd(bf16_t *dx, float *dw, const bf16_t *d, const bf16_t *in, int64_t in_ld, int64_t in_hs,
               const float *rstd, const bf16_t *w, const int32_t *pos, const float *inv_freq, float attn_factor,
               int64_t S, int64_t H, int64_t hd, int64_t rot, cudaStream_t st);
/* og [S, H, hd] = o sigmoid(gate), the gate the second hd of each head's 2 hd rows of q_raw */
void ga_gate_fwd(bf16_t *og, const bf16_t *o, const bf16_t *q_raw, int64_t S, int64_t H, int64_t hd, cudaStream_t st);
/* d: d(og) in, d(o) out; d(gate) written into the gate half of dq_full [S, H, 2 hd] */
void ga_gate_bwd(bf16_t *d, bf16_t *dq_full, const bf16_t *o, const bf16_t *q_raw, int64_t S, int64_t H, int64_t hd,
                 cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
