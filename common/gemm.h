/* gemm.h -- cuBLASLt matrix products in bf16 with fp32 accumulation, as the three products of a
 * linear layer y = x W^T (row-major x [S, n_in], W [n_out, n_in], y [S, n_out]):
 *   linear_fwd  y  = x W^T        (+ beta y; y bf16 or fp32)
 *   linear_fwd_add  y = r + x W^T (residual add in the epilogue; y may not alias r)
 *   linear_dx   dx = dy W         (+ beta dx)
 *   linear_dw   dW += dy^T x      (fp32 gradient, always accumulated: beta = 1)
 * Algorithms come from cuBLASLt's heuristic once per shape and are cached. With g->ragged set (the
 * MoE experts' GEMMs, whose row counts change every tile), one algorithm serves a bucket of row
 * counts: asking the heuristic per exact count costs more than the small GEMM it picks for.
 * linear_*_grouped: one call for E weight segments, rows [r[e], r[e+1]) of x with weight e
 * (cuBLAS's grouped batched GEMM; --moe-gemm grouped). */
#ifndef LONGCTX_GEMM_H
#define LONGCTX_GEMM_H

#include <cublas_v2.h>
#include <cublasLt.h>
#include <stdint.h>

#include "../kernels/kernels.h"

#define GEMM_CACHE 1024 /* a hash table; half full, it starts over */

typedef struct {
    int64_t key[9];       /* transposes, m, n, k, leading dimensions, flags (fp32 out 2, beta 1, exact 4) */
    int used;
    cublasLtMatmulAlgo_t algo;
} GemmAlgo;

typedef struct {
    cublasLtHandle_t lt;
    cublasHandle_t blas;  /* for the grouped GEMM (created with the Lt handle: never inside a step) */
    void *ws;             /* workspace (device) */
    int64_t ws_bytes;
    GemmAlgo cache[GEMM_CACHE];
    int ncache;
    int ragged;           /* row counts vary call to call: algorithms per bucket of row counts */
    int64_t queries;      /* heuristic queries so far (the profile prints them) */
    int64_t retries;      /* ragged calls whose bucket's algorithm refused their count */
    void *group_host;     /* the grouped call's host arrays, for group_cap segments */
    int64_t group_cap;
} Gemm;

#define GEMM_WORKSPACE_BYTES (64ll << 20)

void gemm_init(Gemm *g, void *workspace, int64_t ws_bytes);
void gemm_destroy(Gemm *g);
void linear_fwd(Gemm *g, void *y, int y_f32, const bf16_t *x, const bf16_t *W, int64_t S, int64_t n_in, int64_t n_out,
                float beta, cudaStream_t st);
void linear_fwd_add(Gemm *g, bf16_t *y, const bf16_t *resid, const bf16_t *x, const bf16_t *W, int64_t S, int64_t n_in,
                    int64_t n_out, cudaStream_t st);
void linear_dx(Gemm *g, bf16_t *dx, const bf16_t *dy, const bf16_t *W, int64_t S, int64_t n_in, int64_t n_out, float beta,
               cudaStream_t st);
void linear_dw(Gemm *g, float *dW, const bf16_t *dy, const bf16_t *x, int64_t S, int64_t n_in, int64_t n_out, cudaStream_t st);

/* Grouped over E segments, r (host) [E+1] the segments' first rows and r_dev the same on the device,
 * W's segment e at W + e*n_out*n_in, ptrs device scratch of 3E pointers:
 *   linear_fwd_grouped  y[r_e.., n_out]  = x[r_e.., n_in] W_e^T
 *   linear_dx_grouped   dx[r_e.., n_in] = dy[r_e.., n_out] W_e (+ beta dx)
 * all bf16; empty segments skipped */
void linear_fwd_grouped(Gemm *g, bf16_t *y, const bf16_t *x, const bf16_t *W, const int32_t *r, const int32_t *r_dev,
                        int64_t E, int64_t n_in, int64_t n_out, void **ptrs, cudaStream_t st);
void linear_dx_grouped(Gemm *g, bf16_t *dx, const bf16_t *dy, const bf16_t *W, const int32_t *r, const int32_t *r_dev,
                       int64_t E, int64_t n_in, int64_t n_out, float beta, void **ptrs, cudaStream_t st);

#endif
