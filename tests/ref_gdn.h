/* ref_gdn.h -- the gated delta rule (Qwen3.5's linear attention, Gated DeltaNet) in plain C and
 * fp64, and its context parallelism by passing state maps, not K/V (docs/context_parallel_state.md
 * derives it). Written to be read: the recurrence token by token, then what a rank computes.
 *
 * Per head, a state S (dv x dk) is carried token by token:
 *     S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T,     o_t = S_t q_t,
 * with the decay a_t = exp(g_t) in (0, 1], the write strength b_t (beta) in (0, 1), and k_t of unit
 * length. (transformers' torch_recurrent_gated_delta_rule in the same words: decay the state, read
 * what it holds for k_t, write b_t (v_t - that) along k_t, read with q_t.) a_t = 0 forgets
 * everything before t: with --packing, a document's first token has a_t = 0.
 *
 * Why the state can cross ranks as a map. Write A_t = a_t (I - b_t k_t k_t^T) (dk x dk). Then
 * S_t = S_{t-1} A_t + b_t v_t k_t^T is affine in S_{t-1}, and a chunk of tokens t = 1..n maps its
 * initial state to its final one affinely too:
 *     S_n = S_0 M + B,    M = A_1 A_2 ... A_n,    B = the chunk run from S_0 = 0.
 * M depends on the chunk's k, g, b alone, B also on its v; neither on any other chunk. So each rank
 * computes (M, B) of its own chunks, the ranks exchange them (H (dk^2 + dv dk) numbers a chunk,
 * whatever the sequence length), each rank composes them in sequence order up to its own chunks,
 *     S_start(0) = 0,    S_start(c + 1) = S_start(c) M_c + B_c,
 * and runs its chunks again from their true initial states. No rank waits on a chain of the others.
 * Rank r composes the maps of chunks 0 .. 2P-2-r (those before its tail: 2P-1-r of them, dv dk^2
 * work a head each); the backward mirrors it (ref_gdn_zigzag_bwd: a chunk's backward is affine in
 * its final state's gradient), rank r composing chunks 2P-1 down to r+1, again 2P-1-r. The functions
 * below simulate every rank at once: they compose all 2P in one chain, the union of the ranks' walks.
 *
 * The chunked form a GPU kernel runs, its backward and its maps: docs/chunked_delta_rule.md.
 *
 * Layouts (row-major): q, k [T, H, dk]; v, o [T, H, dv]; g, beta [T, H]; S [H, dv, dk]. */
#ifndef LONGCTX_REF_GDN_H
#define LONGCTX_REF_GDN_H

#include <stdint.h>

typedef struct {
    int64_t H, dk, dv; /* heads, key and value head dims */
} GdnHeads;

/* l2-normalise q and k per head (eps 1e-6 under the root, as transformers' l2norm) and scale q by
 * 1/sqrt(dk): what transformers does before the rule (use_qk_l2norm_in_kernel) */
void ref_gdn_prepare(const GdnHeads *h, int64_t T, double *q, double *k);

/* The rule over T tokens, token by token: S (initial state in, final state out), o written. */
void ref_gdn(const GdnHeads *h, int64_t T, const double *q, const double *k, const double *v, const double *g,
             const double *beta, double *S, double *o);

/* The chunked form (what a GPU kernel runs: matrix products instead of a token-by-token chain), in
 * chunks of C tokens, the same result as ref_gdn; docs/chunked_delta_rule.md derives it. Within a
 * chunk from state S0, with gamma_t the cumulative log-decay (sum of g up to t) and d_t the value
 * actually written at t,
 *     d_t = b_t (v_t - e^{gamma_t} S0 k_t - sum_{s<t} e^{gamma_t - gamma_s} (k_s . k_t) d_s),
 * a unit lower-triangular system (I + L) D = diag(b) V - diag(b e^gamma) K S0^T, L[t,s] = b_t
 * e^{gamma_t - gamma_s} k_t . k_s. Solved once per chunk (by 16 x 16 diagonal blocks, then the blocks
 * below them), D = U - W S0^T with U = (I+L)^-1 diag(b) V and W = (I+L)^-1 diag(b e^gamma) K (both the
 * chunk's alone), and then
 *     o_t = e^{gamma_t} S0 q_t + sum_{s<=t} e^{gamma_t - gamma_s} (k_s . q_t) d_s,
 *     S_end = e^{gamma_n} S0 + sum_s e^{gamma_n - gamma_s} d_s k_s^T.
 * Documents as ref_gdn takes them (g = -inf at a document's first token): a decay across a document
 * start is exactly 0 (masked, never e^{-inf + inf}), and gamma restarts at each start. */
void ref_gdn_chunked(const GdnHeads *h, int64_t T, int64_t C, const double *q, const double *k, const double *v,
                     const double *g, const double *beta, double *S, double *o);
/* Its backward, chunk by chunk in reverse (the chunks' initial states from the forward again), with
 * ref_gdn_bwd's contract: dS the final state's gradient in, the initial state's out; adds into dq, dk,
 * dv, dg, dbeta. */
void ref_gdn_chunked_bwd(const GdnHeads *h, int64_t T, int64_t C, const double *q, const double *k, const double *v,
                         const double *g, const double *beta, const double *S0, const double *dout, double *dS,
                         double *dq, double *dk, double *dv, double *dg, double *dbeta);
/* ref_gdn_map's M [H, dk, dk] and B [H, dv, dk] from the chunked form: per chunk of C tokens M_c =
 * e^{gamma_n} I - W^T diag(e^{gamma_n - gamma}) K and B_c = U^T diag(e^{gamma_n - gamma}) K, chained
 * M <- M M_c, B <- B M_c + B_c. */
void ref_gdn_map_chunked(const GdnHeads *h, int64_t T, int64_t C, const double *k, const double *v, const double *g,
                         const double *beta, double *M, double *B);
/* The backward's map C [H, dv, dk] (dS_start = dS_end M^T + C: the backward from dS_end = 0) from the
 * chunked form: per chunk C_c = dO^T (diag(e^gamma) Q - P W), P[t,s] = e^{gamma_t - gamma_s} q_t . k_s
 * (s <= t), chained from the last chunk C <- C M_c^T + C_c. */
void ref_gdn_cmap_chunked(const GdnHeads *h, int64_t T, int64_t C, const double *q, const double *k, const double *g,
                          const double *beta, const double *dout, double *Cm);
/* Test only: 1 plants a lost dg (the cumulative sum's adjoint dropped), 2 a wrong block merge in the
 * triangular solve; 0 (the default) neither. tests/test_cpu.c checks that each is caught. */
extern int ref_gdn_chunked_plant;

/* A chunk's state map: S_end = S_start M + B, M [H, dk, dk], B [H, dv, dk]. */
void ref_gdn_map(const GdnHeads *h, int64_t T, const double *k, const double *v, const double *g, const double *beta,
                 double *M, double *B);

/* S <- S M + B (bwd 0) or S M^T + B (bwd 1, the backward's dS M^T + C), per head: S and B [H, dv, dk],
 * M [H, dk, dk] */
void ref_gdn_map_apply(const GdnHeads *h, double *S, const double *M, const double *B, int bwd);

/* The sequence of S tokens over P zigzag ranks (rank r holds chunks r and 2P-1-r of 2P): maps per
 * chunk, composed in sequence order, each chunk run from its initial state. o [S, H, dv] in sequence
 * order, S_final [H, dv, dk]. Returns the floats each rank sends (its two maps). */
int64_t ref_gdn_zigzag(const GdnHeads *h, int64_t S, int P, const double *q, const double *k, const double *v,
                       const double *g, const double *beta, double *o, double *S_final);

/* The backward, token by token in reverse, from the states the forward passes through (recomputed
 * from S0, the initial state). dout [T, H, dv]; dS: in, the final state's gradient; out, the initial
 * state's. Adds into dq, dk [T, H, dk], dv [T, H, dv], dg, dbeta [T, H] (prepared q and k: see
 * ref_gdn_prepare_bwd). Per token, with S' = a S, u = S' k, d = b (v - u), S'' = S' + d k^T, o = S'' q:
 *     dS'' += do q^T, dq = S''^T do;  dd = dS'' k, dk += dS''^T d;  dv = b dd, du = -b dd,
 *     db = dd . (v - u);  dS' = dS'' + du k^T, dk += S'^T du;  dS = a dS', dg = a <dS', S>. */
void ref_gdn_bwd(const GdnHeads *h, int64_t T, const double *q, const double *k, const double *v, const double *g,
                 const double *beta, const double *S0, const double *dout, double *dS, double *dq, double *dk,
                 double *dv, double *dg, double *dbeta);
/* ref_gdn_prepare's backward: q, k raw; dq, dk (gradients of the prepared ones) become the raw ones'. */
void ref_gdn_prepare_bwd(const GdnHeads *h, int64_t T, const double *q, const double *k, double *dq, double *dk);

/* The backward over P zigzag ranks, mirroring ref_gdn_zigzag. A chunk's backward is affine in the
 * gradient of its final state: dS_start = dS_end M^T + C, with C its backward from dS_end = 0 (its
 * outputs' gradients alone). Each rank computes C for its chunks, the ranks exchange them, every rank
 * composes from the last chunk back (dS_end of the last: the final state's gradient; of chunk c - 1:
 * dS_start of chunk c), and runs its chunks' backward again from their true dS_end. dS_final in;
 * writes dq, dk, dv, dg, dbeta (prepared q and k), and dS0 (the initial state's gradient). */
void ref_gdn_zigzag_bwd(const GdnHeads *h, int64_t S, int P, const double *q, const double *k, const double *v,
                        const double *g, const double *beta, const double *dout, const double *dS_final, double *dq,
                        double *dk, double *dv, double *dg, double *dbeta, double *dS0);

/* ---- the whole Gated DeltaNet layer (transformers' Qwen3_5GatedDeltaNet), forward */
typedef struct {
    int64_t D;         /* hidden size */
    int64_t Hk, Hv;    /* key heads, value heads (Hv a multiple of Hk: q and k repeat per value head) */
    int64_t dk, dv;    /* head dims */
    int64_t K;         /* the causal depthwise conv's width (4) */
    double eps;        /* the gated RMSNorm's */
} GdnLayer;
typedef struct {       /* row-major as transformers stores them */
    const double *qkv;    /* [2 Hk dk + Hv dv, D] in_proj_qkv: q, then k, then v channels */
    const double *z;      /* [Hv dv, D] in_proj_z: the output gate */
    const double *b;      /* [Hv, D] in_proj_b: beta = sigmoid(x b^T) */
    const double *a;      /* [Hv, D] in_proj_a: g = -exp(A_log) softplus(x a^T + dt_bias) */
    const double *conv;   /* [2 Hk dk + Hv dv, K] conv1d.weight (its middle dim of 1 dropped) */
    const double *dt_bias, *A_log; /* [Hv] */
    const double *norm;   /* [dv] the gated RMSNorm's weight */
    const double *out;    /* [D, Hv dv] out_proj */
} GdnWeights;
/* x [T, D] -> y [T, D]: projections; the causal conv (each channel over its last K inputs, zeros
 * before the sequence) and SiLU on q, k, v; q and k l2-normalised (q also by 1/sqrt(dk)) and repeated
 * over their value heads; the decay and beta; the rule from a zero state; per head RMSNorm times
 * weight times SiLU(z); out_proj. S_final [Hv, dv, dk] (NULL: not kept). */
void ref_gdn_layer(const GdnLayer *L, const GdnWeights *w, int64_t T, const double *x, double *y, double *S_final);

typedef struct {       /* the layer's gradients, GdnWeights' shapes; added into */
    double *qkv, *z, *b, *a, *conv, *dt_bias, *A_log, *norm, *out;
} GdnGrads;
/* The layer's backward from dy [T, D] (its forward run again inside): dx [T, D] written, the weights'
 * gradients added into gw. */
void ref_gdn_layer_bwd(const GdnLayer *L, const GdnWeights *w, int64_t T, const double *x, const double *dy, double *dx,
                       GdnGrads *gw);

/* ---- the hybrid's other layer kind: gated full attention (transformers' Qwen3_5Attention), forward.
 * q_proj gives each head its query and, beside it, a gate; q and k are RMS-normalised per head with
 * weight (1 + w); RoPE turns only the first rot dims of each head (partial_rotary_factor 0.25 in the
 * released models); causal GQA attention scaled by hd^-1/2; the output times sigmoid(gate); o_proj. */
typedef struct {
    int64_t D, Hq, Hkv, hd; /* hidden, query and K/V heads, head dim */
    int64_t rot;            /* rotated dims of a head (hd x partial_rotary_factor) */
    double theta, eps;
    const double *inv_freq; /* [rot/2] the frequencies (YaRN's), times attn_factor; NULL: theta^(-2i/rot) */
    double attn_factor;
} GatedAttn;
typedef struct {
    const double *q;        /* [Hq 2 hd, D]: per head its query rows, then its gate rows */
    const double *k, *v;    /* [Hkv hd, D] */
    const double *o;        /* [D, Hq hd] */
    const double *q_norm, *k_norm; /* [hd]: the norms multiply by 1 + w */
} GatedAttnWeights;
/* x [T, D] at RoPE positions pos [T] -> y [T, D] */
void ref_gated_attn(const GatedAttn *A, const GatedAttnWeights *w, int64_t T, const double *x, const int64_t *pos,
                    double *y);
typedef struct {       /* its gradients, GatedAttnWeights' shapes; added into */
    double *q, *k, *v, *o, *q_norm, *k_norm;
} GatedAttnGrads;
/* The backward from dy [T, D] (the forward run again inside): dx [T, D] written, gw added into. */
void ref_gated_attn_bwd(const GatedAttn *A, const GatedAttnWeights *w, int64_t T, const double *x, const int64_t *pos,
                        const double *dy, double *dx, GatedAttnGrads *gw);

/* small pieces the hybrid model (ref_qwen35.c) shares: y [T, O] = x [T, I] W^T (W [O, I]); its
 * backward dx += dy W, dW += dy^T x; x <- x / rms(x) * (1 + w) over n, and its backward (d: the
 * output's gradient in, the input's out, from the raw x; dw added into) */
void ref_linear(double *y, const double *x, const double *W, int64_t T, int64_t I, int64_t O);
void ref_linear_bwd(double *dx, double *dW, const double *dy, const double *x, const double *W, int64_t T, int64_t I,
                    int64_t O);
void ref_rms_1p(double *x, const double *w, int64_t n, double eps);
void ref_rms_1p_bwd(const double *x, const double *w, double *d, double *dw, int64_t n, double eps);

#endif
