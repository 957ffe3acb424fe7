/* sdpa.h -- cuDNN flash attention (fwd and bwd) through the cuDNN backend graph API from C.
 * cuDNN 9.19 offers no causal SDPA op and no engine for its SDPA backward op, so both
 * directions are the composite graphs that cuDNN's runtime-fusion flash engines recognise
 * (../shared/notes/cudnn_sdpa.md has the fact sheet). One builder per graph kind; plans are
 * cached by shape (a plan build compiles kernels: 50 ms to 1.5 s).
 *
 * Layout (B = 1): Q, O, dQ, dO bf16 [Sq, Hq, D] token-major; K, V, dK, dV bf16 [Skv, Hkv, D];
 * LSE fp32 [Hq, Sq] (natural log of sum exp(scale * q.k)). GQA: q head h reads kv head h/(Hq/Hkv). */
#ifndef LONGCTX_SDPA_H
#define LONGCTX_SDPA_H

#include <cudnn.h>
#include <stdint.h>

#include "../kernels/kernels.h"

typedef struct {
    int64_t Hq, Hkv, Sq, Skv, D;
    int causal;        /* mask keys after the query */
    int bottom_right;  /* causal diagonal aligned to the last key (query i sees keys <= i + Skv - Sq) */
    int padded;        /* Sq, Skv are maxima: the *_padded calls give the real lengths at run time, and
                          rows and keys past them are masked out (packed documents: one plan serves
                          every document's block; work past the lengths is skipped) */
} SdpaShape;

typedef struct SdpaPlan SdpaPlan;

typedef struct {
    cudnnHandle_t handle;
    SdpaPlan **plans;
    int nplans, cap;
    int verbose;       /* print plan builds */
} Sdpa;

void sdpa_init(Sdpa *s, cudaStream_t st);
void sdpa_destroy(Sdpa *s);

/* Planning without a GPU: bytes of workspace (upper estimate from measured plans) and of the
 * fp32 scratch the backward needs (softmax_sum [Hq,Sq] + dQ_accum [Hq,Sq,D]). */
int64_t sdpa_fwd_workspace_estimate(const SdpaShape *p);
int64_t sdpa_bwd_workspace_estimate(const SdpaShape *p);
int64_t sdpa_bwd_scratch_bytes(const SdpaShape *p);
/* The real workspace of a shape (builds and caches the plan). */
int64_t sdpa_fwd_workspace(Sdpa *s, const SdpaShape *p);
int64_t sdpa_bwd_workspace(Sdpa *s, const SdpaShape *p);
/* Refuse shapes cuDNN gets wrong: Sq*Hq*D > 2^31 in backward (measured: dQ wrong at 2^32). */
int sdpa_shape_ok(const SdpaShape *p, char *err, size_t errlen);

void sdpa_fwd(Sdpa *s, const SdpaShape *p, bf16_t *o, float *lse, const bf16_t *q, const bf16_t *k, const bf16_t *v,
              void *ws, int64_t ws_bytes);
/* cuDNN overwrites dq, dk, dv. softmax_sum [Hq*Sq] and dq_accum [Hq*Sq*D] are fp32 scratch. */
void sdpa_bwd(Sdpa *s, const SdpaShape *p, bf16_t *dq, bf16_t *dk, bf16_t *dv, const bf16_t *q, const bf16_t *k,
              const bf16_t *v, const bf16_t *o, const bf16_t *dout, const float *lse, float *softmax_sum,
              float *dq_accum, void *ws, int64_t ws_bytes);

/* A padded plan's call. lens: device int32, lens[0] the query rows, lens[4] the keys (each 16-byte
 * aligned), each >= 1 and <= the shape's Sq, Skv. Rows of o, lse, dq and keys of dk, dv past the
 * lengths are left undefined: they are scratch, and the caller reads only the real ones. */
void sdpa_fwd_padded(Sdpa *s, const SdpaShape *p, const int32_t *lens, bf16_t *o, float *lse, const bf16_t *q,
                     const bf16_t *k, const bf16_t *v, void *ws, int64_t ws_bytes);
void sdpa_bwd_padded(Sdpa *s, const SdpaShape *p, const int32_t *lens, bf16_t *dq, bf16_t *dk, bf16_t *dv,
                     const bf16_t *q, const bf16_t *k, const bf16_t *v, const bf16_t *o, const bf16_t *dout,
                     const float *lse, float *softmax_sum, float *dq_accum, void *ws, int64_t ws_bytes);

#endif
