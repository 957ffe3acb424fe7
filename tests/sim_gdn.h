/* sim_gdn.h -- the chunked gated delta rule as a GPU kernel would compute it, simulated on the CPU in
 * float: every matrix product a GEMM with fp32 accumulation whose operands are first rounded to what
 * a tensor core would read (fp32, tf32 or bf16), the triangular solve by 16 x 16 diagonal blocks in
 * fp32 then merged to the chunk by block GEMMs, the state carried chunk to chunk in fp32. It tells a
 * kernel's author what accuracy the algorithm itself gives in fp32 (and with bf16 tensor-core inputs)
 * before any kernel exists; tests/test_cpu.c compares it with the fp64 reference (tests/ref_gdn.c)
 * in the bands the GPU rule's own tests use. docs/chunked_delta_rule.md, sections 11 and 12.
 *
 * Layouts as tests/ref_gdn.h (row-major): q, k [T, H, dk]; v, o [T, H, dv]; g, beta [T, H]; a state
 * [H, dv, dk]; documents as g = -inf at a document's first token. */
#ifndef LONGCTX_SIM_GDN_H
#define LONGCTX_SIM_GDN_H

#include <stdint.h>

#include "ref_gdn.h"

typedef enum { SIM_FP32, SIM_TF32, SIM_BF16 } SimPrec; /* what a GEMM's operands are rounded to */
typedef struct { /* what each GEMM operand is rounded to, by what it holds */
    SimPrec mma;    /* the inputs (q, k, v, dO: already bf16 in a kernel) and the other intermediates
                     * (P, dP, dL, dY, ...) */
    SimPrec solve;  /* the solve's merge GEMMs (the 16 x 16 diagonal blocks are always fp32 scalar code) */
    SimPrec tri;    /* (I + L)^-1 where U, W and their adjoints read it */
    SimPrec vals;   /* the values written D and their gradient dD (a sum of them telescopes: section 11) */
    SimPrec wy;     /* U, W and the scaled keys that U, W and the state update read (b e^gamma K, K~) */
    SimPrec state;  /* a state or a state's gradient (W S^T, Q S^T, K~ dS^T, dO S0, D dS, dD S0) */
    int dg_pairs;   /* 0: dg as the reverse cumulative sum of dgamma; 1: summed from the decay pairs that
                     * straddle each token (no cancelling terms: section 11) */
    int gam64;      /* gamma, the cumulative log-decay, summed in fp64 (else fp32: at g ~ -20 a token it
                     * reaches ~-1300 in a chunk, where an fp32 ulp is 1.2e-4) */
} SimOpts;

/* forward: S [H, dv, dk] the initial state in, the final one out; o written */
void sim_gdn_fwd(const SimOpts *op, const GdnHeads *h, int64_t T, int64_t C, const float *q, const float *k,
                 const float *v, const float *g, const float *beta, float *S, float *o);
/* backward (the forward again inside): S0 the initial state; dS the final state's gradient in, the
 * initial state's out; dq, dk, dv, dg, dbeta written */
void sim_gdn_bwd(const SimOpts *op, const GdnHeads *h, int64_t T, int64_t C, const float *q, const float *k,
                 const float *v, const float *g, const float *beta, const float *S0, const float *dout, float *dS,
                 float *dq, float *dk, float *dv, float *dg, float *dbeta);
/* the T tokens' maps for context parallelism: M [H, dk, dk], B [H, dv, dk] (S_end = S_start M + B) and
 * C [H, dv, dk] (dS_start = dS_end M^T + C), each chunk's from its GEMMs, chained in fp32 */
void sim_gdn_maps(const SimOpts *op, const GdnHeads *h, int64_t T, int64_t C, const float *q, const float *k,
                  const float *v, const float *g, const float *beta, const float *dout, float *M, float *B, float *Cm);

#endif
