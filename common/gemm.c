/* gemm.c -- cuBLASLt wrapper. cuBLASLt is column-major: a row-major [r, c] matrix is a
 * column-major [c, r] one with the same memory, so each row-major product below is written as
 * the column-major product of the transposes. */
#include "gemm.h"

#include <cuda_runtime_api.h>
#include <cublas_api.h>
#include <string.h>

#include "check.h"
#include "train.h"

void gemm_init(Gemm *g, void *workspace, int64_t ws_bytes) {
    memset(g, 0, sizeof *g);
    CUBLAS_CHECK(cublasLtCreate(&g->lt));
    g->ws = workspace;
    g->ws_bytes = ws_bytes;
}
void gemm_destroy(Gemm *g) { cublasLtDestroy(g->lt); }

/* column-major D[m,n] = op(A) op(B) + beta C (C NULL: C = D); A, B bf16; C, D bf16 or fp32 */
static void gemm_cm(Gemm *g, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                    const void *B, int64_t ldb, const void *C, void *D, int d_f32, int64_t ldd, float beta,
                    cudaStream_t st) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t dt = d_f32 ? CUDA_R_32F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* stored shapes: op(A) is m x k, so A is k x m when transposed */
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd));
    const int64_t key[9] = {ta, tb, m, n, k, lda, ldb, ldd, d_f32 * 2 + (beta != 0.f)};
    GemmAlgo *hit = NULL;
    for (int i = 0; i < g->ncache; i++)
        if (!memcmp(g->cache[i].key, key, sizeof key)) hit = &g->cache[i];
    if (!hit) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t wsb = (uint64_t)g->ws_bytes;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, ld, ld, pref, 1, &res, &found));
        cublasLtMatmulPreferenceDestroy(pref);
        if (!found)
            DIE("cuBLASLt has no algorithm for %s%s m=%lld n=%lld k=%lld -> %s", ta ? "T" : "N", tb ? "T" : "N",
                (long long)m, (long long)n, (long long)k, d_f32 ? "fp32" : "bf16");
        hit = &g->cache[g->ncache < GEMM_CACHE ? g->ncache++ : GEMM_CACHE - 1];
        memcpy(hit->key, key, sizeof key);
        hit->algo = res.algo;
    }
    const float alpha = 1.f;
    CUBLAS_CHECK(cublasLtMatmul(g->lt, op, &alpha, A, la, B, lb, &beta, C ? C : D, ld, D, ld, &hit->algo, g->ws,
                                (size_t)g->ws_bytes, st));
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
}

/* y[S,O] = x[S,I] W[O,I]^T  ==  col-major y'[O,S] = (W'[I,O])^T x'[I,S] */
void linear_fwd(Gemm *g, void *y, int y_f32, const bf16_t *x, const bf16_t *W, int64_t S, int64_t I, int64_t O,
                float beta, cudaStream_t st) {
    trace("gemm fwd S=%lld I=%lld O=%lld out=%s beta=%g", (long long)S, (long long)I, (long long)O, y_f32 ? "f32" : "bf16", beta);
    gemm_cm(g, 1, 0, O, S, I, W, I, x, I, NULL, y, y_f32, O, beta, st);
}
/* y[S,O] = resid[S,O] + x[S,I] W[O,I]^T: the residual add fused into the GEMM epilogue */
void linear_fwd_add(Gemm *g, bf16_t *y, const bf16_t *resid, const bf16_t *x, const bf16_t *W, int64_t S, int64_t I,
                    int64_t O, cudaStream_t st) {
    trace("gemm fwd+residual S=%lld I=%lld O=%lld", (long long)S, (long long)I, (long long)O);
    gemm_cm(g, 1, 0, O, S, I, W, I, x, I, resid, y, 0, O, 1.f, st);
}
/* dx[S,I] = dy[S,O] W[O,I]  ==  col-major dx'[I,S] = W'[I,O] dy'[O,S] */
void linear_dx(Gemm *g, bf16_t *dx, const bf16_t *dy, const bf16_t *W, int64_t S, int64_t I, int64_t O, float beta,
               cudaStream_t st) {
    trace("gemm dx S=%lld I=%lld O=%lld beta=%g", (long long)S, (long long)I, (long long)O, beta);
    gemm_cm(g, 0, 0, I, S, O, W, I, dy, O, NULL, dx, 0, I, beta, st);
}
/* dW[O,I] += dy^T[O,S] x[S,I]  ==  col-major dW'[I,O] += x'[I,S] (dy'[O,S])^T */
void linear_dw(Gemm *g, float *dW, const bf16_t *dy, const bf16_t *x, int64_t S, int64_t I, int64_t O, cudaStream_t st) {
    trace("gemm dw S=%lld I=%lld O=%lld", (long long)S, (long long)I, (long long)O);
    gemm_cm(g, 0, 1, I, O, S, x, I, dy, O, NULL, dW, 1, I, 1.f, st);
}
