/* gemm.h -- cuBLASLt matrix products in bf16 with fp32 accumulation, as the three products of a
 * linear layer y = x W^T (row-major x [S, I], W [O, I], y [S, O]):
 *   linear_fwd  y  = x W^T        (+ beta y; y bf16 or fp32)
 *   linear_fwd_add  y = r + x W^T (residual add in the epilogue; y may not alias r)
 *   linear_dx   dx = dy W         (+ beta dx)
 *   linear_dw   dW += dy^T x      (fp32 gradient, always accumulated: beta = 1)
 * Algorithms come from cuBLASLt's heuristic once per shape and are cached. */
#ifndef LONGCTX_GEMM_H
#define LONGCTX_GEMM_H

#include <cublasLt.h>
#include <stdint.h>

#include "../kernels/kernels.h"

#define GEMM_CACHE 128

typedef struct {
    int64_t key[9];
    cublasLtMatmulAlgo_t algo;
} GemmAlgo;

typedef struct {
    cublasLtHandle_t lt;
    void *ws;             /* workspace (device) */
    int64_t ws_bytes;
    GemmAlgo cache[GEMM_CACHE];
    int ncache;
} Gemm;

#define GEMM_WORKSPACE_BYTES (64ll << 20)

void gemm_init(Gemm *g, void *workspace, int64_t ws_bytes);
void gemm_destroy(Gemm *g);
void linear_fwd(Gemm *g, void *y, int y_f32, const bf16_t *x, const bf16_t *W, int64_t S, int64_t I, int64_t O,
                float beta, cudaStream_t st);
void linear_fwd_add(Gemm *g, bf16_t *y, const bf16_t *resid, const bf16_t *x, const bf16_t *W, int64_t S, int64_t I,
                    int64_t O, cudaStream_t st);
void linear_dx(Gemm *g, bf16_t *dx, const bf16_t *dy, const bf16_t *W, int64_t S, int64_t I, int64_t O, float beta,
               cudaStream_t st);
void linear_dw(Gemm *g, float *dW, const bf16_t *dy, const bf16_t *x, int64_t S, int64_t I, int64_t O, cudaStream_t st);

#endif
