/* sdpa.h -- cuDNN flash attention (fwd and bwd) through the cuDNN backend graph API from C.
 * cuDNN 9.19 offers no causal SDPA op and no engine for its SDPA backward op, so both
 * directions are the composite graphs that cuDNN's runtime-fusion flash engines recognise
 * (docs/cudnn_sdpa.md has the fact sheet). One builder per graph kind; plans are
 * cached by shape (a plan build compiles kernels: 50 ms to 1.5 s).
 *
 * Layout (B = 1): Q, O, dQ, dO bf16 [Sq, Hq, D] token-major; K, V, dK, dV bf16 [Skv, Hkv, D];
 * LSE fp32 [Hq, Sq] (natural log of sum exp(scale * q.k)). GQA: q head h reads kv head h/(Hq/Hkv). */
#ifndef LONGCTX_SDPA_H
#define LONGCTX_SDPA_H

#include <cudnn.h>
#include <stdint.h>

#include "../kernels/kernels.h"
#include "check.h"
#include "docs.h"

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
    cudaStream_t st;   /* the handle's: every call runs on it */
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

/* ---- packed documents: one attention call cut into blocks (docs.h), a padded call each */
typedef struct {
    const DocBlock *b; /* [n] host: the blocks, in the call's local rows */
    int64_t n;
    const int32_t *lens; /* device [8n]: block i's nq at 8i, nk at 8i + 4 (sdpa_*_padded's lens);
                          * NULL: one block, the whole call (unpacked) */
} SdpaBlocks;

/* A block's plan in a call of shape p: causal as the block is; padded (documents): its rows and keys
 * rounded up to powers of two from 1024 (at most p's), so a few plans serve every document and
 * the work a padded call does over its plan's extent stays within 2x of the block's. */
SdpaShape sdpa_block_shape(const SdpaShape *p, const DocBlock *b, int padded);
/* The call's shape p (Sq x Skv). Each block is one cuDNN call (a padded plan of that shape when the
 * blocks have lengths, lens; without, the one block is the whole call, p itself), its O and LSE
 * (blk [Sq, Hq*D], lse_blk [Hq, Sq] scratch) merged by LSE into o (fp32 or bf16, rows [n]) and lse
 * [Hq, n], which the caller filled with -inf before the call's first block set. Padded blocks read q
 * [n rows, ..], k and v [Skv rows, Hkv*D] in place: each needs DOCS_SLACK_ROWS finite rows after
 * its last (sdpa_zero_slack). */
void sdpa_blocks_fwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, const bf16_t *q, const bf16_t *k,
                     const bf16_t *v, bf16_t *blk, float *lse_blk, void *o, int o_f32, float *lse, int64_t n,
                     void *ws, int64_t ws_bytes, cudaStream_t st);
/* The blocks backward with the final o (bf16) and lse [Hq, n]: each block's dQ, dK, dV (scratch
 * blk, dkv_blk [2, Skv, Hkv*D]) added into dq [n, Hq*D], dk and dv [Skv, Hkv*D] (fp32 or bf16
 * acc_f32). softmax_sum [Hq, Sq], dq_accum [Hq, Sq, D]: cuDNN scratch. kv_ready (NULL: none) runs
 * once, before the first dK/dV addition, or at the end when there is no block (the ring waits
 * there for the travelling sum). */
void sdpa_blocks_bwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, const bf16_t *q, const bf16_t *k,
                     const bf16_t *v, const bf16_t *o, const bf16_t *dout, const float *lse, int64_t n, void *dq,
                     void *dk, void *dv, int acc_f32, bf16_t *blk, bf16_t *dkv_blk, float *lse_blk,
                     float *softmax_sum, float *dq_accum, void *ws, int64_t ws_bytes, void (*kv_ready)(void *),
                     void *ctx, cudaStream_t st);
/* One GPU's packed attention (stages 1-2): the call p (Sq = Skv rows) cut into its documents'
 * blocks. Forward: the slack after q, k, v zeroed, o (bf16) and lse [Hq, Sq] made (a row lies in
 * exactly one block: the bf16 merge copies it). Backward: the slack after q, k, v, o and dout zeroed, dq,
 * dk, dv zeroed and the blocks' gradients added (one block a row and a key: copies too). */
void sdpa_packed_fwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, bf16_t *q, bf16_t *k, bf16_t *v, bf16_t *blk,
                     float *lse_blk, bf16_t *o, float *lse, void *ws, int64_t ws_bytes, cudaStream_t st);
void sdpa_packed_bwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *bl, bf16_t *dq, bf16_t *dk, bf16_t *dv,
                     bf16_t *q, bf16_t *k, bf16_t *v, bf16_t *o, bf16_t *dout, const float *lse, bf16_t *blk,
                     bf16_t *dkv_blk, float *lse_blk, float *softmax_sum, float *dq_accum, void *ws, int64_t ws_bytes,
                     cudaStream_t st);

/* A step's packed-document blocks: one or more attention calls (stage 3: one per ring step), their
 * blocks in one host table, the lengths on the device. Built again for every window. */
typedef struct {
    DocBlock *b;        /* [cap] host */
    int32_t *lens_h;    /* [8 cap] host staging; lens [8 cap] device (grown as a window needs) */
    int32_t *lens;
    int64_t n, cap, dev_cap;
    int64_t *first;     /* [ncalls+1] call i's blocks are [first[i], first[i+1]) */
    int ncalls, calls_cap;
    int64_t pairs;      /* the (query, key) pairs the blocks compute: the attention work done */
    SdpaBlocks *call;   /* [ncalls] call i's blocks, as sdpa_blocks_* take them (set by docplan_upload) */
} DocPlan;
void docplan_reset(DocPlan *dp);
/* append one call: queries [q0, q0+nq) at global positions qpos[], keys [k0, k0+nk) at kpos[] */
void docplan_add(DocPlan *dp, const int64_t *start, int64_t ndocs, const int64_t *qpos, int64_t q0, int64_t nq,
                 const int64_t *kpos, int64_t k0, int64_t nk);
/* the lengths to the device, on st (synchronous: the staging buffer is reused next window) */
void docplan_upload(DocPlan *dp, cudaStream_t st);
const SdpaBlocks *docplan_call(const DocPlan *dp, int i);
/* --trace's line for a packed window: its documents, the plan's blocks, and the RoPE positions summed
 * over the window (win [seq]) and over this rank's rows (mine [S]); tests/packing_gpu.sh checks them
 * against the token file */
void docplan_trace(const DocPlan *dp, int64_t ndocs, const int32_t *win, int64_t seq, const int32_t *mine, int64_t S);

/* zero the DOCS_SLACK_ROWS rows after rows [0, rows) of a bf16 [rows, width] buffer */
void sdpa_zero_slack(bf16_t *x, int64_t rows, int64_t width, cudaStream_t st);

/* Causal attention over a window: whole (docs NULL), or a packed window's document blocks, each alone
 * (blk, lse_blk: their scratch; dkv_blk too, backward) */
static inline void sdpa_causal_fwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *docs, bf16_t *q, bf16_t *k, bf16_t *v,
                                   bf16_t *o, float *lse, bf16_t *blk, float *lse_blk, void *ws, int64_t ws_bytes,
                                   cudaStream_t st) {
    if (docs) sdpa_packed_fwd(s, p, docs, q, k, v, blk, lse_blk, o, lse, ws, ws_bytes, st);
    else sdpa_fwd(s, p, o, lse, q, k, v, ws, ws_bytes);
}
static inline void sdpa_causal_bwd(Sdpa *s, const SdpaShape *p, const SdpaBlocks *docs, bf16_t *dq, bf16_t *dk,
                                   bf16_t *dv, bf16_t *q, bf16_t *k, bf16_t *v, bf16_t *o, bf16_t *dout, const float *lse,
                                   float *softmax_sum, float *dq_accum, bf16_t *blk, bf16_t *dkv_blk, float *lse_blk,
                                   void *ws, int64_t ws_bytes, cudaStream_t st) {
    if (docs) sdpa_packed_bwd(s, p, docs, dq, dk, dv, q, k, v, o, dout, lse, blk, dkv_blk, lse_blk, softmax_sum, dq_accum,
                              ws, ws_bytes, st);
    else sdpa_bwd(s, p, dq, dk, dv, q, k, v, o, dout, lse, softmax_sum, dq_accum, ws, ws_bytes);
}

/* the real cuDNN workspaces of a shape's plans must fit the planned one (DIE otherwise) */
static inline void sdpa_check_workspace(Sdpa *s, const SdpaShape *p, int64_t planned) {
    const int64_t need = sdpa_bwd_workspace(s, p), fwd = sdpa_fwd_workspace(s, p);
    if (need > planned || fwd > planned)
        DIE("cuDNN wants %lld bytes of workspace, the plan has %lld", (long long)(need > fwd ? need : fwd), (long long)planned);
}

#endif
