/* gemm.c -- cuBLASLt wrapper. cuBLASLt is column-major: a row-major [r, c] matrix is a
 * column-major [c, r] one with the same memory, so each row-major product below is written as
 * the column-major product of the transposes. */
#include "gemm.h"

#include <cuda_runtime_api.h>
#include <cublas_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train.h"

void gemm_init(Gemm *g, void *workspace, int64_t ws_bytes) {
    memset(g, 0, sizeof *g);
    CUBLAS_CHECK(cublasLtCreate(&g->lt));
    /* cuBLAS's handle (--moe-gemm grouped) now, in the rank's set-up: creating it allocates on the
     * GPU, which inside a step could wait for another rank thread's collective (common/comm.h) */
    CUBLAS_CHECK(cublasCreate(&g->blas));
    g->ws = workspace;
    g->ws_bytes = ws_bytes;
}
void gemm_destroy(Gemm *g) {
    cublasLtDestroy(g->lt);
    if (g->blas) cublasDestroy(g->blas);
    free(g->group_host);
}

/* the rows of a ragged GEMM, rounded up to 16 x 2^j or 24 x 2^j: at most 1.5x, ~2 buckets per octave */
static int64_t row_bucket(int64_t n) {
    if (n > INT32_MAX) return n; /* not a row count of ours (int32); no bucket */
    int64_t b = 16;
    while (b < n) b = (b & (b - 1)) ? (b / 3) * 4 : (b / 2) * 3; /* 16, 24, 32, 48, 64, ... */
    return b;
}

/* the key's slot (open addressing; the table is never more than half full, so probing ends) */
static GemmAlgo *cache_slot(Gemm *g, const int64_t key[9]) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the key */
    for (int i = 0; i < 9; i++) h = (h ^ (uint64_t)key[i]) * 1099511628211ull;
    for (int64_t i = 0;; i++) {
        GemmAlgo *s = &g->cache[(h + (uint64_t)i) % GEMM_CACHE];
        if (!s->used || !memcmp(s->key, key, 9 * sizeof key[0])) return s;
    }
}

/* the cached algorithm for the key, or the heuristic's first for that shape (cached); NULL when
 * cuBLASLt has none */
static const cublasLtMatmulAlgo_t *lookup(Gemm *g, cublasLtMatmulDesc_t op, const int64_t key[9]) {
    GemmAlgo *hit = cache_slot(g, key);
    if (hit->used) return &hit->algo;
    if (g->ncache == GEMM_CACHE / 2) { /* half full: start over */
        memset(g->cache, 0, sizeof g->cache);
        g->ncache = 0;
        hit = cache_slot(g, key);
    }
    const int ta = (int)key[0], tb = (int)key[1], d_f32 = (int)(key[8] >> 1 & 1);
    const int64_t m = key[2], n = key[3], k = key[4];
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, key[5]));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, key[6]));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, d_f32 ? CUDA_R_32F : CUDA_R_16BF, m, n, key[7]));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = (uint64_t)g->ws_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, ld, ld, pref, 1, &res, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    g->queries++;
    if (!found) return NULL;
    memcpy(hit->key, key, 9 * sizeof key[0]);
    hit->algo = res.algo;
    hit->used = 1;
    g->ncache++;
    return &hit->algo;
}

/* column-major D[m,n] = op(A) op(B) + beta C (C NULL: C = D); A, B bf16; C, D bf16 or fp32.
 * rows: which of m (0), n (1), k (2) counts the rows of the row-major product (the ragged one).
 * A ragged GEMM runs its bucket's algorithm; where that refuses the count (or there is none), the
 * exact shape's, cached under the key marked exact (bit 2), which is looked up first from then on. */
static void gemm_cm(Gemm *g, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                    const void *B, int64_t ldb, const void *C, void *D, int d_f32, int64_t ldd, float beta, int rows,
                    cudaStream_t st) {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* stored shapes: op(A) is m x k, so A is k x m when transposed */
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, d_f32 ? CUDA_R_32F : CUDA_R_16BF, m, n, ldd));
    const int64_t flags = d_f32 * 2 + (beta != 0.f);
    int64_t exact[9] = {ta, tb, m, n, k, lda, ldb, ldd, flags}, bucket[9];
    const cublasLtMatmulAlgo_t *algo = NULL;
    cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
    if (g->ragged) {
        exact[8] |= 4;
        memcpy(bucket, exact, sizeof bucket);
        bucket[8] = flags;
        bucket[2 + rows] = row_bucket(bucket[2 + rows]);
        GemmAlgo *e = cache_slot(g, exact); /* this count refused its bucket's algorithm before */
        algo = e->used ? &e->algo : lookup(g, op, bucket);
    } else {
        algo = lookup(g, op, exact);
    }
    const float alpha = 1.f;
    if (algo)
        s = cublasLtMatmul(g->lt, op, &alpha, A, la, B, lb, &beta, C ? C : D, ld, D, ld, algo, g->ws,
                           (size_t)g->ws_bytes, st);
    if (s != CUBLAS_STATUS_SUCCESS && g->ragged && !cache_slot(g, exact)->used) { /* the exact shape's own */
        g->retries++;
        algo = lookup(g, op, exact);
        if (algo)
            s = cublasLtMatmul(g->lt, op, &alpha, A, la, B, lb, &beta, C ? C : D, ld, D, ld, algo, g->ws,
                               (size_t)g->ws_bytes, st);
    }
    if (!algo || s != CUBLAS_STATUS_SUCCESS)
        DIE("cuBLASLt %s for %s%s m=%lld n=%lld k=%lld -> %s%s", algo ? cublasGetStatusString(s) : "has no algorithm",
            ta ? "T" : "N", tb ? "T" : "N", (long long)m, (long long)n, (long long)k, d_f32 ? "fp32" : "bf16",
            g->ragged ? " (ragged: its bucket's algorithm and the exact shape's tried)" : "");
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
}

/* y[S,n_out] = x[S,n_in] W[n_out,n_in]^T  ==  col-major y'[n_out,S] = (W'[n_in,n_out])^T x'[n_in,S] */
void linear_fwd(Gemm *g, void *y, int y_f32, const bf16_t *x, const bf16_t *W, int64_t S, int64_t n_in, int64_t n_out,
                float beta, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_GEMM);
    trace("gemm fwd S=%lld I=%lld O=%lld out=%s beta=%g", (long long)S, (long long)n_in, (long long)n_out, y_f32 ? "f32" : "bf16", beta);
    gemm_cm(g, 1, 0, n_out, S, n_in, W, n_in, x, n_in, NULL, y, y_f32, n_out, beta, 1, st);
    prof_span_end(st, span);
}
/* y[S,n_out] = resid[S,n_out] + x[S,n_in] W[n_out,n_in]^T: the residual add fused into the GEMM epilogue */
void linear_fwd_add(Gemm *g, bf16_t *y, const bf16_t *resid, const bf16_t *x, const bf16_t *W, int64_t S, int64_t n_in,
                    int64_t n_out, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_GEMM);
    trace("gemm fwd+residual S=%lld I=%lld O=%lld", (long long)S, (long long)n_in, (long long)n_out);
    gemm_cm(g, 1, 0, n_out, S, n_in, W, n_in, x, n_in, resid, y, 0, n_out, 1.f, 1, st);
    prof_span_end(st, span);
}
/* dx[S,n_in] = dy[S,n_out] W[n_out,n_in]  ==  col-major dx'[n_in,S] = W'[n_in,n_out] dy'[n_out,S] */
void linear_dx(Gemm *g, bf16_t *dx, const bf16_t *dy, const bf16_t *W, int64_t S, int64_t n_in, int64_t n_out, float beta,
               cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_GEMM);
    trace("gemm dx S=%lld I=%lld O=%lld beta=%g", (long long)S, (long long)n_in, (long long)n_out, beta);
    gemm_cm(g, 0, 0, n_in, S, n_out, W, n_in, dy, n_out, NULL, dx, 0, n_in, beta, 1, st);
    prof_span_end(st, span);
}
/* dW[n_out,n_in] += dy^T[n_out,S] x[S,n_in]  ==  col-major dW'[n_in,n_out] += x'[n_in,S] (dy'[n_out,S])^T */
void linear_dw(Gemm *g, float *dW, const bf16_t *dy, const bf16_t *x, int64_t S, int64_t n_in, int64_t n_out, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_GEMM);
    trace("gemm dw S=%lld I=%lld O=%lld", (long long)S, (long long)n_in, (long long)n_out);
    gemm_cm(g, 0, 1, n_in, n_out, S, x, n_in, dy, n_out, NULL, dW, 1, n_in, 1.f, 2, st);
    prof_span_end(st, span);
}

/* ---- grouped: one cuBLAS call for every non-empty segment ---- */
/* column-major, segment j: D_j[m, n_j] = op(A_j) B_j + beta D_j, n_j the segment's rows; A_j, B_j,
 * D_j device pointers that segment_ptrs writes on the stream from r_dev */
static void gemm_grouped(Gemm *g, int ta, int64_t m, int64_t k, const int32_t *r, int64_t E, int64_t lda,
                         int64_t ldb, int64_t ldd, float beta, void **ptrs, cudaStream_t st) {
    CUBLAS_CHECK(cublasSetStream(g->blas, st)); /* resets the workspace to cuBLAS's own pool: ours again */
    CUBLAS_CHECK(cublasSetWorkspace(g->blas, g->ws, (size_t)g->ws_bytes));
    if (g->group_cap < E) { /* the call's host arrays, grown as needed */
        free(g->group_host);
        g->group_host = xmalloc((size_t)E * (2 * sizeof(cublasOperation_t) + 7 * sizeof(int) + 2 * sizeof(float)));
        g->group_cap = E;
    }
    cublasOperation_t *opa = g->group_host, *opb = opa + E;
    int *mm = (int *)(opb + E), *nn = mm + E, *kk = nn + E, *la = kk + E, *lb = la + E, *ld = lb + E, *one = ld + E;
    float *alpha = (float *)(one + E), *betas = alpha + E;
    int j = 0;
    for (int64_t e = 0; e < E; e++) {
        if (r[e + 1] == r[e]) continue;
        opa[j] = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb[j] = CUBLAS_OP_N;
        mm[j] = (int)m, nn[j] = r[e + 1] - r[e], kk[j] = (int)k;
        la[j] = (int)lda, lb[j] = (int)ldb, ld[j] = (int)ldd, one[j] = 1;
        alpha[j] = 1.f, betas[j] = beta;
        j++;
    }
    if (j)
        CUBLAS_CHECK(cublasGemmGroupedBatchedEx(g->blas, opa, opb, mm, nn, kk, alpha, (const void *const *)ptrs,
                                                CUDA_R_16BF, la, (const void *const *)(ptrs + E), CUDA_R_16BF, lb,
                                                betas, ptrs + 2 * E, CUDA_R_16BF, ld, j, one, CUBLAS_COMPUTE_32F));
}

void linear_fwd_grouped(Gemm *g, bf16_t *y, const bf16_t *x, const bf16_t *W, const int32_t *r, const int32_t *r_dev,
                        int64_t E, int64_t n_in, int64_t n_out, void **ptrs, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_GEMM);
    trace("gemm fwd grouped E=%lld rows=%d I=%lld O=%lld", (long long)E, r[E], (long long)n_in, (long long)n_out);
    const int64_t b = (int64_t)sizeof(bf16_t);
    segment_ptrs(ptrs, r_dev, E, W, b * n_out * n_in, x, b * n_in, y, b * n_out, st);
    gemm_grouped(g, 1, n_out, n_in, r, E, n_in, n_in, n_out, 0.f, ptrs, st);
    prof_span_end(st, span);
}

void linear_dx_grouped(Gemm *g, bf16_t *dx, const bf16_t *dy, const bf16_t *W, const int32_t *r, const int32_t *r_dev,
                       int64_t E, int64_t n_in, int64_t n_out, float beta, void **ptrs, cudaStream_t st) {
    const ProfSpan span = prof_span_begin(st, K_GEMM);
    trace("gemm dx grouped E=%lld rows=%d I=%lld O=%lld beta=%g", (long long)E, r[E], (long long)n_in, (long long)n_out, beta);
    const int64_t b = (int64_t)sizeof(bf16_t);
    segment_ptrs(ptrs, r_dev, E, W, b * n_out * n_in, dy, b * n_out, dx, b * n_in, st);
    gemm_grouped(g, 0, n_in, n_out, r, E, n_in, n_out, n_in, beta, ptrs, st);
    prof_span_end(st, span);
}
