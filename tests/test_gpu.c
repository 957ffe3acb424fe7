/* test_gpu.c -- GPU unit tests (H100/H200): every kernel and GEMM wrapper against a CPU
 * reference on random inputs, outputs poisoned (0xFF = NaN) before each call so an unwritten
 * element fails; cuDNN flash attention fwd/bwd against naive attention in fp64: causal, GQA,
 * lengths that are not multiples of 128, and one long case with spot-checked rows.
 * Prints "N passed, M failed". Tolerances: bf16 outputs carry ~2^-9 relative rounding per
 * element; 2e-2 relative Frobenius error is ~5x what a correct kernel shows (probe: 2-3e-3). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <cublasLt.h>
#include <cudnn.h>

#include "../common/check.h"
#include "../common/cpu_adam.h"
#include "../common/gemm.h"
#include "../common/docs.h"
#include "../common/gpu.h"
#include "../common/safetensors.h"
#include "../common/sdpa.h"
#include "../common/zigzag.h"
#include "../kernels/kernels.h"
#include "ref_gdn.h"
#include "test.h"

#define TOL_BF16 2e-2
static cudaStream_t st;
static uint64_t rng = 42;
/* host -> device on the stream the kernels use, waited for (gpu.h): a cudaMemcpy from pageable
 * memory may return before its DMA lands, and a non-blocking stream is not ordered after it */
#define upload(d, s_, n) gpu_upload((d), (s_), (int64_t)(n), st)


static double urand(void) { /* [0, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(2 * M_PI * urand()); }

/* random bf16 tensor: host copy (as float, exactly representable) and device copy */
static float *rand_bf16(bf16_t **dev, int64_t n, double scale) {
    float *h = xmalloc((size_t)n * 4);
    uint16_t *b = xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) { b[i] = f32_to_bf16((float)(scale * nrand())); h[i] = bf16_to_f32(b[i]); }
    CUDA_CHECK(cudaMalloc((void **)dev, (size_t)n * 2));
    upload(*dev, b, (size_t)n * 2);
    free(b);
    return h;
}
static float *rand_f32(float **dev, int64_t n, double scale) {
    float *h = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = (float)(scale * nrand());
    CUDA_CHECK(cudaMalloc((void **)dev, (size_t)n * 4));
    upload(*dev, h, (size_t)n * 4);
    return h;
}
static void *dalloc_poisoned(int64_t bytes) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, (size_t)bytes));
    CUDA_CHECK(cudaMemsetAsync(p, 0xFF, (size_t)bytes, st)); /* on the stream the kernels use: cudaMemset would be unordered with it */
    return p;
}
static float *down_bf16(const bf16_t *d, int64_t n) {
    uint16_t *b = xmalloc((size_t)n * 2);
    float *h = xmalloc((size_t)n * 4);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(b, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) h[i] = bf16_to_f32(b[i]);
    free(b);
    return h;
}
static float *down_f32(const float *d, int64_t n) {
    float *h = xmalloc((size_t)n * 4);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(h, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    return h;
}
static double rel_d(const float *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return NAN;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
#define REPORT(name, err, tol) do { double e_ = (err); EXPECT_LE(e_, tol, "%s: rel err %.3e > %.0e", name, e_, tol); \
                                    printf("  %-44s rel err %.2e\n", name, e_); } while (0)

/* ------------------------------------------------------------------ norms */
static void test_rmsnorm(int64_t rows, int64_t n) {
    bf16_t *x_d, *w_d, *dy_d, *dxr_d;
    float *x = rand_bf16(&x_d, rows * n, 1.0), *w = rand_bf16(&w_d, n, 1.0), *dy = rand_bf16(&dy_d, rows * n, 1.0);
    float *dxr = rand_bf16(&dxr_d, rows * n, 1.0); /* residual gradient the backward adds to */
    bf16_t *y_d = dalloc_poisoned(rows * n * 2);
    float *rstd_d = dalloc_poisoned(rows * 4), *dw_d;
    CUDA_CHECK(cudaMalloc((void **)&dw_d, (size_t)n * 4));
    CUDA_CHECK(cudaMemsetAsync(dw_d, 0, (size_t)n * 4, st));
    rmsnorm_fwd(y_d, rstd_d, x_d, w_d, rows, n, 1e-6f, st);
    rmsnorm_bwd(dxr_d, dw_d, dy_d, x_d, rstd_d, w_d, rows, n, st);
    double *y = xmalloc((size_t)(rows * n) * 8), *dx = xmalloc((size_t)(rows * n) * 8), *dw = xcalloc((size_t)n, 8);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0, dot = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)x[r * n + i] * x[r * n + i];
        const double rs = 1 / sqrt(ss / n + 1e-6);
        for (int64_t i = 0; i < n; i++) {
            y[r * n + i] = w[i] * x[r * n + i] * rs;
            dot += dy[r * n + i] * w[i] * x[r * n + i] * rs;
            dw[i] += dy[r * n + i] * x[r * n + i] * rs;
        }
        dot /= n;
        for (int64_t i = 0; i < n; i++)
            dx[r * n + i] = dxr[r * n + i] + rs * (dy[r * n + i] * w[i] - x[r * n + i] * rs * dot);
    }
    char name[96];
    float *g;
    snprintf(name, sizeof name, "rmsnorm_fwd rows %lld n %lld", (long long)rows, (long long)n);
    REPORT(name, rel_d(g = down_bf16(y_d, rows * n), y, rows * n), TOL_BF16); free(g);
    snprintf(name, sizeof name, "rmsnorm_bwd dx rows %lld n %lld", (long long)rows, (long long)n);
    REPORT(name, rel_d(g = down_bf16(dxr_d, rows * n), dx, rows * n), TOL_BF16); free(g);
    snprintf(name, sizeof name, "rmsnorm_bwd dw (fp32) rows %lld n %lld", (long long)rows, (long long)n);
    REPORT(name, rel_d(g = down_f32(dw_d, n), dw, n), 1e-3); free(g);
    free(x); free(w); free(dy); free(dxr); free(y); free(dx); free(dw);
    cudaFree(x_d); cudaFree(w_d); cudaFree(dy_d); cudaFree(dxr_d); cudaFree(y_d); cudaFree(rstd_d); cudaFree(dw_d);
}

static void test_qk_norm_rope(int64_t S, int64_t H, int64_t hd) {
    const int64_t n = S * H * hd, half = hd / 2;
    bf16_t *x_d, *w_d, *dy_d;
    float *x = rand_bf16(&x_d, n, 1.0), *w = rand_bf16(&w_d, hd, 1.0), *dy = rand_bf16(&dy_d, n, 1.0);
    int32_t *pos = xmalloc((size_t)S * 4), *pos_d;
    for (int64_t t = 0; t < S; t++) pos[t] = (int32_t)(urand() * 1048576); /* far positions: big angles */
    float *inv = xmalloc((size_t)half * 4), *inv_d;
    for (int64_t i = 0; i < half; i++) inv[i] = (float)(1.0 / pow(1e6, 2.0 * i / hd));
    CUDA_CHECK(cudaMalloc((void **)&pos_d, (size_t)S * 4));
    upload(pos_d, pos, (size_t)S * 4);
    CUDA_CHECK(cudaMalloc((void **)&inv_d, (size_t)half * 4));
    upload(inv_d, inv, (size_t)half * 4);
    const float af = 1.25f;
    bf16_t *y_d = dalloc_poisoned(n * 2);
    float *rstd_d = dalloc_poisoned(S * H * 4), *dw_d;
    CUDA_CHECK(cudaMalloc((void **)&dw_d, (size_t)hd * 4));
    CUDA_CHECK(cudaMemsetAsync(dw_d, 0, (size_t)hd * 4, st));
    qk_norm_rope_fwd(y_d, rstd_d, x_d, w_d, pos_d, inv_d, af, S, H, hd, 1e-6f, st);
    qk_norm_rope_bwd(dy_d, dw_d, x_d, rstd_d, w_d, pos_d, inv_d, af, S, H, hd, st);
    double *y = xmalloc((size_t)n * 8), *dx = xmalloc((size_t)n * 8), *dw = xcalloc((size_t)hd, 8);
    double *nv = xmalloc((size_t)hd * 8), *g = xmalloc((size_t)hd * 8);
    for (int64_t r = 0; r < S * H; r++) {
        const float *xr = x + r * hd, *dyr = dy + r * hd;
        double ss = 0;
        for (int64_t i = 0; i < hd; i++) ss += (double)xr[i] * xr[i];
        const double rs = 1 / sqrt(ss / hd + 1e-6);
        for (int64_t i = 0; i < hd; i++) nv[i] = w[i] * xr[i] * rs;
        const float p = (float)pos[r / H];
        for (int64_t i = 0; i < half; i++) {
            const float ang = p * inv[i]; /* fp32 angle, as transformers computes it */
            const double c = cos((double)ang) * af, s = sin((double)ang) * af;
            y[r * hd + i] = nv[i] * c - nv[i + half] * s;
            y[r * hd + i + half] = nv[i + half] * c + nv[i] * s;
            g[i] = dyr[i] * c + dyr[i + half] * s; /* RoPE transposed */
            g[i + half] = dyr[i + half] * c - dyr[i] * s;
        }
        double dot = 0;
        for (int64_t i = 0; i < hd; i++) {
            dw[i] += g[i] * xr[i] * rs;
            dot += g[i] * w[i] * xr[i] * rs;
        }
        dot /= hd;
        for (int64_t i = 0; i < hd; i++) dx[r * hd + i] = rs * (g[i] * w[i] - xr[i] * rs * dot);
    }
    char name[96];
    float *o;
    snprintf(name, sizeof name, "qk_norm_rope_fwd S %lld H %lld hd %lld", (long long)S, (long long)H, (long long)hd);
    REPORT(name, rel_d(o = down_bf16(y_d, n), y, n), TOL_BF16); free(o);
    snprintf(name, sizeof name, "qk_norm_rope_bwd dx S %lld H %lld hd %lld", (long long)S, (long long)H, (long long)hd);
    REPORT(name, rel_d(o = down_bf16(dy_d, n), dx, n), TOL_BF16); free(o);
    snprintf(name, sizeof name, "qk_norm_rope_bwd dw (fp32) hd %lld", (long long)hd);
    REPORT(name, rel_d(o = down_f32(dw_d, hd), dw, hd), 1e-3); free(o);
    free(x); free(w); free(dy); free(pos); free(inv); free(y); free(dx); free(dw); free(nv); free(g);
    cudaFree(x_d); cudaFree(w_d); cudaFree(dy_d); cudaFree(pos_d); cudaFree(inv_d); cudaFree(y_d); cudaFree(rstd_d);
    cudaFree(dw_d);
}

/* ------------------------------------------------------------------ elementwise, loss, optimizer */
static void test_swiglu_embedding(void) {
    const int64_t n = 100003;
    bf16_t *g_d, *u_d, *dh_d;
    float *g = rand_bf16(&g_d, n, 2.0), *u = rand_bf16(&u_d, n, 1.0), *dh = rand_bf16(&dh_d, n, 1.0);
    bf16_t *h_d = dalloc_poisoned(n * 2);
    swiglu_fwd(h_d, g_d, u_d, n, st);
    swiglu_bwd(g_d, u_d, dh_d, n, st);
    double *h = xmalloc((size_t)n * 8), *dg = xmalloc((size_t)n * 8), *du = xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        const double s = 1 / (1 + exp(-(double)g[i]));
        h[i] = g[i] * s * u[i];
        du[i] = dh[i] * g[i] * s;
        dg[i] = dh[i] * u[i] * s * (1 + g[i] * (1 - s));
    }
    float *o;
    REPORT("swiglu_fwd", rel_d(o = down_bf16(h_d, n), h, n), TOL_BF16); free(o);
    REPORT("swiglu_bwd dg", rel_d(o = down_bf16(g_d, n), dg, n), TOL_BF16); free(o);
    REPORT("swiglu_bwd du", rel_d(o = down_bf16(u_d, n), du, n), TOL_BF16); free(o);
    free(g); free(u); free(dh); free(h); free(dg); free(du);
    cudaFree(g_d); cudaFree(u_d); cudaFree(dh_d); cudaFree(h_d);

    const int64_t V = 1000, D = 256, S = 777;
    bf16_t *tab_d, *dx_d;
    float *tab = rand_bf16(&tab_d, V * D, 1.0), *dxh = rand_bf16(&dx_d, S * D, 1.0);
    uint32_t *ids = xmalloc((size_t)S * 4), *ids_d;
    for (int64_t t = 0; t < S; t++) ids[t] = (uint32_t)(urand() * 50); /* repeats: atomics must add up */
    CUDA_CHECK(cudaMalloc((void **)&ids_d, (size_t)S * 4));
    upload(ids_d, ids, (size_t)S * 4);
    bf16_t *out_d = dalloc_poisoned(S * D * 2);
    float *dtab_d;
    CUDA_CHECK(cudaMalloc((void **)&dtab_d, (size_t)(V * D) * 4));
    CUDA_CHECK(cudaMemsetAsync(dtab_d, 0, (size_t)(V * D) * 4, st));
    embedding_fwd(out_d, tab_d, ids_d, S, D, st);
    embedding_bwd(dtab_d, dx_d, ids_d, S, D, st);
    double *ref = xmalloc((size_t)(S * D) * 8), *dref = xcalloc((size_t)(V * D), 8);
    for (int64_t t = 0; t < S; t++)
        for (int64_t i = 0; i < D; i++) {
            ref[t * D + i] = tab[(int64_t)ids[t] * D + i];
            dref[(int64_t)ids[t] * D + i] += dxh[t * D + i];
        }
    REPORT("embedding_fwd (exact)", rel_d(o = down_bf16(out_d, S * D), ref, S * D), 0.0); free(o);
    REPORT("embedding_bwd (fp32 atomics)", rel_d(o = down_f32(dtab_d, V * D), dref, V * D), 1e-6); free(o);
    free(tab); free(dxh); free(ids); free(ref); free(dref);
    cudaFree(tab_d); cudaFree(dx_d); cudaFree(ids_d); cudaFree(out_d); cudaFree(dtab_d);
}

/* ------------------------------------------------------------------ ring attention helpers */
/* lse_merge of two blocks into a running O (fp32 or bf16), one row range at an offset, against
 * lse_merge_row in fp64; add_bf16_into in both accumulator precisions. */
static void test_ring_merge(int o_f32) {
    const int64_t n = 48, H = 3, D = 128, q0 = 8, nq = 32, Q = H * D;
    bf16_t *a_d, *b_d;
    float *la_d, *lb_d;
    float *a = rand_bf16(&a_d, nq * Q, 1.0), *b = rand_bf16(&b_d, nq * Q, 1.0);
    float *la = rand_f32(&la_d, H * nq, 3.0), *lb = rand_f32(&lb_d, H * nq, 3.0);
    lb[H * nq - 1] = -INFINITY; /* a row the second block did not see: left as it is */
    upload(lb_d, lb, (size_t)(H * nq) * 4);
    void *o_d = dalloc_poisoned(n * Q * (o_f32 ? 4 : 2));
    float *lse_d;
    CUDA_CHECK(cudaMalloc((void **)&lse_d, (size_t)(H * n) * 4));
    fill_f32(lse_d, -INFINITY, H * n, st);
    lse_merge(o_d, o_f32, lse_d, a_d, la_d, n, q0, nq, H, D, st);
    lse_merge(o_d, o_f32, lse_d, b_d, lb_d, n, q0, nq, H, D, st);
    double *o = xmalloc((size_t)(nq * Q) * 8), *ob = xmalloc((size_t)D * 8), *lse = xmalloc((size_t)(H * nq) * 8);
    for (int64_t t = 0; t < nq; t++)
        for (int64_t h = 0; h < H; h++) {
            double *row = o + (t * H + h) * D, *l = lse + h * nq + t;
            *l = -INFINITY;
            for (int64_t d = 0; d < D; d++) ob[d] = a[(t * H + h) * D + d];
            lse_merge_row(row, l, ob, la[h * nq + t], D);
            for (int64_t d = 0; d < D; d++) ob[d] = b[(t * H + h) * D + d];
            lse_merge_row(row, l, ob, lb[h * nq + t], D);
        }
    float *got = o_f32 ? down_f32((float *)o_d + q0 * Q, nq * Q) : down_bf16((bf16_t *)o_d + q0 * Q, nq * Q);
    float *gl = down_f32(lse_d, H * n), *gl_rows = xmalloc((size_t)(H * nq) * 4);
    for (int64_t h = 0; h < H; h++) memcpy(gl_rows + h * nq, gl + h * n + q0, (size_t)nq * 4);
    REPORT(o_f32 ? "lse_merge, fp32 running O" : "lse_merge, bf16 running O", rel_d(got, o, nq * Q), o_f32 ? 1e-6 : 5e-3);
    REPORT("lse_merge LSE", rel_d(gl_rows, lse, H * nq), 1e-6);
    EXPECT(gl[0] == -INFINITY && gl[H * n - 1] == -INFINITY, "rows outside [q0, q0+nq) untouched");
    free(a); free(b); free(la); free(lb); free(o); free(ob); free(lse); free(got); free(gl); free(gl_rows);
    cudaFree(a_d); cudaFree(b_d); cudaFree(la_d); cudaFree(lb_d); cudaFree(o_d); cudaFree(lse_d);

    const int64_t m = 100004;
    bf16_t *x_d, *acc16_d;
    float *acc32_d;
    float *x = rand_bf16(&x_d, m, 1.0), *acc = o_f32 ? rand_f32(&acc32_d, m, 1.0) : rand_bf16(&acc16_d, m, 1.0);
    add_bf16_into(o_f32 ? (void *)acc32_d : (void *)acc16_d, o_f32, x_d, m, st);
    add_bf16_into(o_f32 ? (void *)acc32_d : (void *)acc16_d, o_f32, x_d, m, st);
    double *ref = xmalloc((size_t)m * 8);
    for (int64_t i = 0; i < m; i++) ref[i] = (double)acc[i] + 2.0 * x[i];
    got = o_f32 ? down_f32(acc32_d, m) : down_bf16(acc16_d, m);
    REPORT(o_f32 ? "add_bf16_into, fp32 accumulator" : "add_bf16_into, bf16 accumulator", rel_d(got, ref, m), o_f32 ? 1e-6 : TOL_BF16);
    free(x); free(acc); free(ref); free(got);
    cudaFree(x_d); cudaFree(o_f32 ? (void *)acc32_d : (void *)acc16_d);
}

static void test_cross_entropy(int64_t rows, int64_t V, int masked) {
    float *lg_d;
    float *lg = rand_f32(&lg_d, rows * V, 3.0);
    uint32_t *lab = xmalloc((size_t)rows * 4), *lab_d;
    for (int64_t r = 0; r < rows; r++) lab[r] = (uint32_t)(urand() * V);
    CUDA_CHECK(cudaMalloc((void **)&lab_d, (size_t)rows * 4));
    upload(lab_d, lab, (size_t)rows * 4);
    bf16_t *dl_d = dalloc_poisoned(rows * V * 2);
    float *loss_d = dalloc_poisoned(rows * 4);
    const float scale = 1.f / 3.f;
    uint8_t *wt = xmalloc((size_t)rows), *wt_d = NULL;
    for (int64_t r = 0; r < rows; r++) wt[r] = !masked || r % 3 == 1; /* masked: two rows of three carry no loss */
    if (masked) {
        CUDA_CHECK(cudaMalloc((void **)&wt_d, (size_t)rows));
        upload(wt_d, wt, (size_t)rows);
    }
    cross_entropy(dl_d, loss_d, lg_d, lab_d, wt_d, rows, V, scale, st);
    double *loss = xmalloc((size_t)rows * 8), *dl = xmalloc((size_t)(rows * V) * 8);
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, z = 0;
        for (int64_t j = 0; j < V; j++) m = fmax(m, lg[r * V + j]);
        for (int64_t j = 0; j < V; j++) z += exp(lg[r * V + j] - m);
        loss[r] = wt[r] ? m + log(z) - lg[r * V + lab[r]] : 0.0;
        for (int64_t j = 0; j < V; j++) dl[r * V + j] = wt[r] ? (exp(lg[r * V + j] - m) / z - (j == lab[r])) * scale : 0.0;
    }
    char name[96];
    const char *tag = masked ? ", masked" : "";
    float *o;
    snprintf(name, sizeof name, "cross_entropy loss rows %lld V %lld%s", (long long)rows, (long long)V, tag);
    REPORT(name, rel_d(o = down_f32(loss_d, rows), loss, rows), 1e-5);
    if (masked) { /* a masked row is an exact zero, not a small number (the poison must be overwritten) */
        int64_t bad = 0;
        float *d = down_bf16(dl_d, rows * V);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < V && !wt[r]; j++) bad += d[r * V + j] != 0.f || o[r] != 0.f;
        snprintf(name, sizeof name, "cross_entropy masked rows exactly 0 (rows %lld V %lld): %lld nonzero", (long long)rows,
                 (long long)V, (long long)bad);
        EXPECT(bad == 0, "%s", name);
        free(d);
    }
    free(o);
    snprintf(name, sizeof name, "cross_entropy dlogits rows %lld V %lld%s", (long long)rows, (long long)V, tag);
    REPORT(name, rel_d(o = down_bf16(dl_d, rows * V), dl, rows * V), TOL_BF16); free(o);
    free(lg); free(lab); free(loss); free(dl); free(wt);
    cudaFree(lg_d); cudaFree(lab_d); cudaFree(dl_d); cudaFree(loss_d); cudaFree(wt_d);
}

static void test_adamw(void) {
    const int64_t n = 50001;
    float *p_d, *m_d, *v_d, *g_d;
    float *p = rand_f32(&p_d, n, 0.1), *g = rand_f32(&g_d, n, 10.0), *m = rand_f32(&m_d, n, 0.01), *v = rand_f32(&v_d, n, 0.0);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(0.01 * urand());
    upload(v_d, v, (size_t)n * 4);
    bf16_t *w_d = dalloc_poisoned(n * 2);
    double *ss_d, *red_d;
    CUDA_CHECK(cudaMalloc((void **)&ss_d, 8));
    CUDA_CHECK(cudaMalloc((void **)&red_d, 8 * 1024));
    sumsq_f32(ss_d, g_d, n, red_d, st);
    const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, clip = 1.0;
    const int step = 3;
    const double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
    adamw(p_d, w_d, m_d, v_d, g_d, n, ss_d, (float)clip, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
          (float)bc1, (float)bc2, st);
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    double got_ss;
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaMemcpy(&got_ss, ss_d, 8, cudaMemcpyDeviceToHost));
    EXPECT(fabs(got_ss - ss) <= 1e-9 * ss, "sumsq %.9g vs %.9g", got_ss, ss);
    const double scale = clip / (sqrt(ss) + 1e-6);
    double *pr = xmalloc((size_t)n * 8), *mr = xmalloc((size_t)n * 8), *vr = xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        const double gi = g[i] * scale;
        mr[i] = b1 * m[i] + (1 - b1) * gi;
        vr[i] = b2 * v[i] + (1 - b2) * gi * gi;
        pr[i] = p[i] - lr * ((mr[i] / bc1) / (sqrt(vr[i] / bc2) + eps) + wd * p[i]);
    }
    float *o;
    REPORT("adamw master (fp32)", rel_d(o = down_f32(p_d, n), pr, n), 1e-6); free(o);
    REPORT("adamw m", rel_d(o = down_f32(m_d, n), mr, n), 1e-6); free(o);
    REPORT("adamw v", rel_d(o = down_f32(v_d, n), vr, n), 1e-5); free(o);
    REPORT("adamw bf16 weights", rel_d(o = down_bf16(w_d, n), pr, n), 1e-2); free(o);
    free(p); free(g); free(m); free(v); free(pr); free(mr); free(vr);
    cudaFree(p_d); cudaFree(m_d); cudaFree(v_d); cudaFree(g_d); cudaFree(w_d); cudaFree(ss_d); cudaFree(red_d);
}

/* AdamW on the host (stage 4's offloaded optimizer) against the GPU kernel on the same inputs:
 * the same fp32 expression, so they differ by the last bit where nvcc contracts into FMA; two
 * pieces with and without weight decay, clipping active. */
static void test_cpu_adamw(void) {
    const int64_t n = 100003, n0 = 40000;
    float *p_d, *m_d, *v_d, *g_d;
    float *p = rand_f32(&p_d, n, 0.1), *g = rand_f32(&g_d, n, 10.0), *m = rand_f32(&m_d, n, 0.01), *v = rand_f32(&v_d, n, 0.0);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(0.01 * urand());
    upload(v_d, v, (size_t)n * 4);
    bf16_t *w_d = dalloc_poisoned(n * 2);
    double *ss_d, *red_d, ss = 0;
    CUDA_CHECK(cudaMalloc((void **)&ss_d, 8));
    CUDA_CHECK(cudaMalloc((void **)&red_d, 8 * 1024));
    for (int64_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    CUDA_CHECK(cudaMemcpyAsync(ss_d, &ss, 8, cudaMemcpyHostToDevice, st));
    const AdamHP hp = {1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 3};
    const float bc1 = (float)(1 - pow(hp.beta1, 3)), bc2 = (float)(1 - pow(hp.beta2, 3));
    ParamInfo mat = {.ndim = 2}, norm = {.ndim = 1}; /* decays / does not */
    Piece pcs[2] = {{&mat, 0, n0, 0}, {&norm, 0, n - n0, n0}};
    for (int k = 0; k < 2; k++)
        adamw(p_d + pcs[k].at, w_d + pcs[k].at, m_d + pcs[k].at, v_d + pcs[k].at, g_d + pcs[k].at, pcs[k].numel, ss_d,
              (float)hp.clip, (float)hp.lr, (float)hp.beta1, (float)hp.beta2, (float)hp.eps, k ? 0.f : (float)hp.wd, bc1,
              bc2, st);
    uint16_t *w = xmalloc((size_t)n * 2);
    cpu_adamw(pcs, 2, p, w, m, v, g, ss, &hp, 7);
    float *o;
    REPORT("host AdamW master vs the GPU kernel", rel_err(o = down_f32(p_d, n), p, n), 1e-7); free(o);
    REPORT("host AdamW m vs the GPU kernel", rel_err(o = down_f32(m_d, n), m, n), 1e-7); free(o);
    REPORT("host AdamW v vs the GPU kernel", rel_err(o = down_f32(v_d, n), v, n), 1e-7); free(o);
    float *wf = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) wf[i] = bf16_to_f32(w[i]);
    REPORT("host AdamW bf16 weights vs the GPU kernel", rel_err(o = down_bf16(w_d, n), wf, n), 1e-3); free(o);
    free(p); free(g); free(m); free(v); free(w); free(wf);
    cudaFree(p_d); cudaFree(m_d); cudaFree(v_d); cudaFree(g_d); cudaFree(w_d); cudaFree(ss_d); cudaFree(red_d);
}

/* ------------------------------------------------------------------ GEMM */
static void test_gemm(Gemm *gm, int64_t S, int64_t I, int64_t O) {
    bf16_t *x_d, *w_d, *dy_d, *r_d;
    float *x = rand_bf16(&x_d, S * I, 1.0), *w = rand_bf16(&w_d, O * I, 1.0), *dy = rand_bf16(&dy_d, S * O, 1.0);
    float *r = rand_bf16(&r_d, S * O, 1.0);
    float *y32_d = dalloc_poisoned(S * O * 4), *dw_d;
    bf16_t *y_d = dalloc_poisoned(S * O * 2), *dx_d = dalloc_poisoned(S * I * 2), *ya_d = dalloc_poisoned(S * O * 2);
    float *dw0 = rand_f32(&dw_d, O * I, 1.0); /* dW accumulates onto what is there */
    linear_fwd(gm, y32_d, 1, x_d, w_d, S, I, O, 0.f, st);
    linear_fwd(gm, y_d, 0, x_d, w_d, S, I, O, 0.f, st);
    linear_fwd_add(gm, ya_d, r_d, x_d, w_d, S, I, O, st);
    linear_dx(gm, dx_d, dy_d, w_d, S, I, O, 0.f, st);
    linear_dw(gm, dw_d, dy_d, x_d, S, I, O, st);
    double *y = xmalloc((size_t)(S * O) * 8), *ya = xmalloc((size_t)(S * O) * 8), *dx = xmalloc((size_t)(S * I) * 8),
           *dw = xmalloc((size_t)(O * I) * 8);
    for (int64_t t = 0; t < S; t++)
        for (int64_t o = 0; o < O; o++) {
            double a = 0;
            for (int64_t i = 0; i < I; i++) a += (double)x[t * I + i] * w[o * I + i];
            y[t * O + o] = a;
            ya[t * O + o] = a + r[t * O + o];
        }
    for (int64_t t = 0; t < S; t++)
        for (int64_t i = 0; i < I; i++) {
            double a = 0;
            for (int64_t o = 0; o < O; o++) a += (double)dy[t * O + o] * w[o * I + i];
            dx[t * I + i] = a;
        }
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            double a = dw0[o * I + i];
            for (int64_t t = 0; t < S; t++) a += (double)dy[t * O + o] * x[t * I + i];
            dw[o * I + i] = a;
        }
    char name[96];
    float *g;
    snprintf(name, sizeof name, "linear_fwd fp32 out S %lld I %lld O %lld", (long long)S, (long long)I, (long long)O);
    REPORT(name, rel_d(g = down_f32(y32_d, S * O), y, S * O), 1e-5); free(g);
    REPORT("linear_fwd bf16 out", rel_d(g = down_bf16(y_d, S * O), y, S * O), TOL_BF16); free(g);
    REPORT("linear_fwd_add (residual epilogue)", rel_d(g = down_bf16(ya_d, S * O), ya, S * O), TOL_BF16); free(g);
    REPORT("linear_dx", rel_d(g = down_bf16(dx_d, S * I), dx, S * I), TOL_BF16); free(g);
    REPORT("linear_dw (fp32, accumulated)", rel_d(g = down_f32(dw_d, O * I), dw, O * I), 1e-5); free(g);
    free(x); free(w); free(dy); free(r); free(dw0); free(y); free(ya); free(dx); free(dw);
    cudaFree(x_d); cudaFree(w_d); cudaFree(dy_d); cudaFree(r_d); cudaFree(y32_d); cudaFree(dw_d); cudaFree(y_d);
    cudaFree(dx_d); cudaFree(ya_d);
}

/* grouped over row segments, one empty (--moe-gemm grouped), against each segment's product */
static void test_gemm_grouped(Gemm *gm) {
    const int64_t E = 5, I = 256, O = 384;
    const int32_t r[6] = {0, 37, 37, 160, 161, 300}; /* segment 1 empty, segment 3 one row */
    const int64_t S = r[E];
    bf16_t *x_d, *w_d, *dy_d;
    float *x = rand_bf16(&x_d, S * I, 1.0), *w = rand_bf16(&w_d, E * O * I, 1.0), *dy = rand_bf16(&dy_d, S * O, 1.0);
    bf16_t *y_d = dalloc_poisoned(S * O * 2), *dx_d = dalloc_poisoned(S * I * 2);
    int32_t *r_d;
    void **ptrs;
    CUDA_CHECK(cudaMalloc((void **)&r_d, sizeof r));
    CUDA_CHECK(cudaMalloc((void **)&ptrs, (size_t)(3 * E) * sizeof(void *)));
    gpu_upload(r_d, r, (int64_t)sizeof r, st);
    linear_fwd_grouped(gm, y_d, x_d, w_d, r, r_d, E, I, O, ptrs, st);
    linear_dx_grouped(gm, dx_d, dy_d, w_d, r, r_d, E, I, O, 0.f, ptrs, st);
    double *y = xmalloc((size_t)(S * O) * 8), *dx = xmalloc((size_t)(S * I) * 8);
    for (int64_t e = 0; e < E; e++)
        for (int64_t t = r[e]; t < r[e + 1]; t++) {
            const float *we = w + e * O * I;
            for (int64_t o = 0; o < O; o++) {
                double a = 0;
                for (int64_t i = 0; i < I; i++) a += (double)x[t * I + i] * we[o * I + i];
                y[t * O + o] = a;
            }
            for (int64_t i = 0; i < I; i++) {
                double a = 0;
                for (int64_t o = 0; o < O; o++) a += (double)dy[t * O + o] * we[o * I + i];
                dx[t * I + i] = a;
            }
        }
    float *g;
    REPORT("linear_fwd_grouped (5 segments, one empty)", rel_d(g = down_bf16(y_d, S * O), y, S * O), TOL_BF16); free(g);
    REPORT("linear_dx_grouped", rel_d(g = down_bf16(dx_d, S * I), dx, S * I), TOL_BF16); free(g);
    linear_dx_grouped(gm, dx_d, dy_d, w_d, r, r_d, E, I, O, 1.f, ptrs, st); /* beta 1: twice the product */
    for (int64_t i = 0; i < S * I; i++) dx[i] *= 2;
    REPORT("linear_dx_grouped, beta 1 (accumulates)", rel_d(g = down_bf16(dx_d, S * I), dx, S * I), TOL_BF16); free(g);
    free(x); free(w); free(dy); free(y); free(dx);
    cudaFree(x_d); cudaFree(w_d); cudaFree(dy_d); cudaFree(y_d); cudaFree(dx_d); cudaFree(r_d); cudaFree(ptrs);
}

/* ------------------------------------------------------------------ GEMM past 2^31 elements */
/* Inputs from a hash of the element index (cheap to make on the host in parallel, every element
 * different): value in [-1, 1) x scale, rounded to bf16. */
typedef struct { uint16_t *dst; int64_t begin, end; uint64_t seed; float scale; } HashFill;
static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static void *hash_fill_part(void *arg) {
    const HashFill *h = arg;
    for (int64_t i = h->begin; i < h->end; i++) {
        const uint64_t r = mix64(h->seed + (uint64_t)i * 0x9E3779B97F4A7C15ull);
        h->dst[i] = f32_to_bf16(h->scale * ((float)(r >> 40) * (1.0f / 8388608.0f) - 1.0f));
    }
    return NULL;
}
static void hash_fill_bf16(uint16_t *dst, int64_t n, uint64_t seed, float scale) {
    enum { NT = 32 };
    pthread_t th[NT];
    HashFill part[NT];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int nt = cores < 1 ? 1 : cores > NT ? NT : (int)cores;
    for (int k = 0; k < nt; k++) {
        part[k] = (HashFill){dst, n * k / nt, n * (k + 1) / nt, seed, scale};
        if (pthread_create(&th[k], NULL, hash_fill_part, &part[k])) DIE("pthread_create failed");
    }
    for (int k = 0; k < nt; k++) pthread_join(th[k], NULL);
}
static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* worst |got - want| over samples, relative to the samples' RMS (a per-element check that near-zero
 * references cannot blow up); NaN if anything is non-finite or nothing was sampled */
static double sampled_err(const double *got, const double *want, int64_t n) {
    double ss = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(want[i])) return NAN;
        ss += want[i] * want[i];
        worst = fmax(worst, fabs(got[i] - want[i]));
    }
    return n && ss > 0 ? worst / sqrt(ss / (double)n) : NAN;
}

/* The three GEMMs of a linear layer with an operand over 2^31 elements (32B's MLP at 128K tokens per
 * GPU: x [S, I], W [O, I], y = dy [S, O] = 3.36e9 elements), checked on sampled elements against fp64
 * sums on the host: a 32-bit size, offset or leading dimension anywhere in the call chain shows as
 * wrong or unwritten (NaN-poisoned) elements past element 2^30 or 2^31 (bytes 2^31, 2^32 of y), which
 * the samples are placed on (the elements at those marks and next to them, the last rows and column). dy is y itself: the backward
 * products read the big tensor the forward wrote, and their references use its downloaded values. */
static void test_gemm_big(Gemm *gm) {
    enum { NS = 16 }; /* NS x NS samples per product */
    const int64_t S = 131072, I = 5120, O = 25600;
    const double t0 = wall_s();
    uint16_t *x = xmalloc((size_t)(S * I) * 2), *w = xmalloc((size_t)(O * I) * 2);
    hash_fill_bf16(x, S * I, 1, 1.0f);
    hash_fill_bf16(w, O * I, 2, 1.0f / sqrtf((float)I) * 1.7320508f); /* y, dx, dW of order 1, 1e2, 1e2 */
    bf16_t *x_d, *w_d;
    CUDA_CHECK(cudaMalloc((void **)&x_d, (size_t)(S * I) * 2));
    CUDA_CHECK(cudaMalloc((void **)&w_d, (size_t)(O * I) * 2));
    upload(x_d, x, (size_t)(S * I) * 2);
    upload(w_d, w, (size_t)(O * I) * 2);
    bf16_t *y_d = dalloc_poisoned(S * O * 2), *dx_d = dalloc_poisoned(S * I * 2);
    float *dw_d;
    CUDA_CHECK(cudaMalloc((void **)&dw_d, (size_t)(O * I) * 4));
    CUDA_CHECK(cudaMemsetAsync(dw_d, 0, (size_t)(O * I) * 4, st)); /* dW accumulates: start from 0 */
    const double t1 = wall_s();
    linear_fwd(gm, y_d, 0, x_d, w_d, S, I, O, 0.f, st);
    linear_dx(gm, dx_d, y_d, w_d, S, I, O, 0.f, st);
    linear_dw(gm, dw_d, y_d, x_d, S, I, O, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    CUDA_CHECK(cudaGetLastError());
    const double t2 = wall_s();
    /* sampled rows t (of y, dx) and columns o (of y, dW rows) and i (of x, W, dx, dW) */
    const int64_t e30 = (int64_t)1 << 30, e31 = (int64_t)1 << 31; /* y's elements at byte 2^31 and at byte 2^32 */
    int64_t ts[NS] = {0, e30 / O, e30 / O + 1, e31 / O, e31 / O + 1, S - 2, S - 1},
            os[NS] = {0, O - 1, e30 % O, e31 % O, e31 % O - 1, 1}, is[NS] = {0, I - 1, 1, I / 2};
    uint64_t h = 12345;
    for (int k = 7; k < NS; k++) ts[k] = (int64_t)(mix64(h++) % (uint64_t)S);
    for (int k = 6; k < NS; k++) os[k] = (int64_t)(mix64(h++) % (uint64_t)O);
    for (int k = 4; k < NS; k++) is[k] = (int64_t)(mix64(h++) % (uint64_t)I);
    /* downloads: rows ts of y (contiguous) and dx; columns os of y (strided); elements of dW */
    uint16_t *yrow = xmalloc((size_t)(NS * O) * 2), *dxrow = xmalloc((size_t)(NS * I) * 2),
             *ycol = xmalloc((size_t)(NS * S) * 2);
    float *dws = xmalloc((size_t)(NS * NS) * 4);
    for (int a = 0; a < NS; a++) {
        CUDA_CHECK(cudaMemcpy(yrow + a * O, y_d + ts[a] * O, (size_t)O * 2, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(dxrow + a * I, dx_d + ts[a] * I, (size_t)I * 2, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy2D(ycol + a * S, 2, y_d + os[a], (size_t)O * 2, 2, (size_t)S, cudaMemcpyDeviceToHost));
        for (int b = 0; b < NS; b++)
            CUDA_CHECK(cudaMemcpy(dws + a * NS + b, dw_d + os[a] * I + is[b], 4, cudaMemcpyDeviceToHost));
    }
    double *got = xmalloc((size_t)(NS * NS) * 8), *want = xmalloc((size_t)(NS * NS) * 8);
    /* y[t, o] = sum_i x[t, i] W[o, i]: rows ts against columns os */
    for (int a = 0; a < NS; a++)
        for (int b = 0; b < NS; b++) {
            double acc = 0;
            for (int64_t i = 0; i < I; i++) acc += (double)bf16_to_f32(x[ts[a] * I + i]) * bf16_to_f32(w[os[b] * I + i]);
            want[a * NS + b] = acc;
            got[a * NS + b] = bf16_to_f32(yrow[a * O + os[b]]);
        }
    char name[128];
    snprintf(name, sizeof name, "linear_fwd S %lld I %lld O %lld (y 2^%.2f elems)", (long long)S, (long long)I,
             (long long)O, log2((double)(S * O)));
    /* bf16 output: half an ulp is 2^-9 of the value, values reach ~4x the RMS: 2e-2 of the RMS
     * (measured on the H200: 6.4e-3 for y, 4.7e-3 for dx; wrong or unwritten elements: ~1 or NaN) */
    REPORT(name, sampled_err(got, want, NS * NS), TOL_BF16);
    /* dx[t, i] = sum_o dy[t, o] W[o, i], dy = y as downloaded */
    for (int a = 0; a < NS; a++)
        for (int b = 0; b < NS; b++) {
            double acc = 0;
            for (int64_t o = 0; o < O; o++) acc += (double)bf16_to_f32(yrow[a * O + o]) * bf16_to_f32(w[o * I + is[b]]);
            want[a * NS + b] = acc;
            got[a * NS + b] = bf16_to_f32(dxrow[a * I + is[b]]);
        }
    REPORT("linear_dx, dy of 2^31+ elements", sampled_err(got, want, NS * NS), TOL_BF16);
    /* dW[o, i] = sum_t dy[t, o] x[t, i] over all S rows, fp32 output */
    for (int a = 0; a < NS; a++)
        for (int b = 0; b < NS; b++) {
            double acc = 0;
            for (int64_t t = 0; t < S; t++) acc += (double)bf16_to_f32(ycol[a * S + t]) * bf16_to_f32(x[t * I + is[b]]);
            want[a * NS + b] = acc;
            got[a * NS + b] = dws[a * NS + b];
        }
    /* fp32 output summed over K = 131072 products (each exact in fp32: bf16 x bf16): measured on the
     * H200 2.8e-4 of the RMS (cuBLASLt's fp32 accumulation, worst of the 256 samples); 2e-3 leaves 7x.
     * A sum cut short at 2^31 elements of dy errs by ~1 (0.94 measured). */
    REPORT("linear_dw (fp32), dy of 2^31+ elements", sampled_err(got, want, NS * NS), 2e-3);
    printf("  (2^31+ GEMMs: inputs %.2f s, 3 GEMMs %.3f s, sampled checks %.2f s)\n", t1 - t0, t2 - t1, wall_s() - t2);
    free(x); free(w); free(yrow); free(dxrow); free(ycol); free(dws); free(got); free(want);
    cudaFree(x_d); cudaFree(w_d); cudaFree(y_d); cudaFree(dx_d); cudaFree(dw_d);
}

/* ------------------------------------------------------------------ attention */
/* naive attention for query rows [r0, r1) (all rows: 0, Sq), fp64; O [Sq,Hq,D], lse [Hq,Sq] */
static int64_t last_key(const SdpaShape *p, int64_t i) {
    if (!p->causal) return p->Skv - 1;
    const int64_t j = i + (p->bottom_right ? p->Skv - p->Sq : 0);
    return j < p->Skv - 1 ? j : p->Skv - 1;
}
static void ref_attn_row(const SdpaShape *p, const float *q, const float *k, const float *v, int64_t h, int64_t i,
                         double *P, double *o, double *lse) {
    const int64_t D = p->D, kh = h / (p->Hq / p->Hkv), jm = last_key(p, i);
    const double scale = 1 / sqrt((double)D);
    double m = -INFINITY, z = 0;
    for (int64_t j = 0; j <= jm; j++) {
        double s = 0;
        for (int64_t d = 0; d < D; d++) s += (double)q[(i * p->Hq + h) * D + d] * k[(j * p->Hkv + kh) * D + d];
        P[j] = s * scale;
        m = fmax(m, P[j]);
    }
    for (int64_t j = 0; j <= jm; j++) z += exp(P[j] - m);
    *lse = m + log(z);
    for (int64_t d = 0; d < D; d++) o[d] = 0;
    for (int64_t j = 0; j <= jm; j++) {
        P[j] = exp(P[j] - *lse);
        for (int64_t d = 0; d < D; d++) o[d] += P[j] * v[(j * p->Hkv + kh) * D + d];
    }
}

/* fwd + bwd. full: compare every element; else spot-check a few rows (long sequences). */
static void test_sdpa(Sdpa *sd, SdpaShape p, int full) {
    const int64_t nq = p.Sq * p.Hq * p.D, nk = p.Skv * p.Hkv * p.D, D = p.D;
    bf16_t *q_d, *k_d, *v_d, *do_d;
    float *q = rand_bf16(&q_d, nq, 1.0), *k = rand_bf16(&k_d, nk, 1.0), *v = rand_bf16(&v_d, nk, 1.0);
    float *dO = rand_bf16(&do_d, nq, 1.0);
    bf16_t *o_d = dalloc_poisoned(nq * 2), *dq_d = dalloc_poisoned(nq * 2), *dk_d = dalloc_poisoned(nk * 2),
           *dv_d = dalloc_poisoned(nk * 2);
    float *lse_d = dalloc_poisoned(p.Hq * p.Sq * 4), *ss_d = dalloc_poisoned(p.Hq * p.Sq * 4),
          *acc_d = dalloc_poisoned(p.Hq * p.Sq * D * 4);
    int64_t ws = sdpa_bwd_workspace(sd, &p), wf = sdpa_fwd_workspace(sd, &p);
    if (wf > ws) ws = wf;
    EXPECT(ws <= sdpa_bwd_workspace_estimate(&p), "workspace %lld within the planner's estimate %lld", (long long)ws,
           (long long)sdpa_bwd_workspace_estimate(&p));
    void *ws_d = dalloc_poisoned(ws > 0 ? ws : 16);
    sdpa_fwd(sd, &p, o_d, lse_d, q_d, k_d, v_d, ws_d, ws);
    sdpa_bwd(sd, &p, dq_d, dk_d, dv_d, q_d, k_d, v_d, o_d, do_d, lse_d, ss_d, acc_d, ws_d, ws);
    float *o = down_bf16(o_d, nq), *lse = down_f32(lse_d, p.Hq * p.Sq), *dq = down_bf16(dq_d, nq),
          *dk = down_bf16(dk_d, nk), *dv = down_bf16(dv_d, nk);
    /* reference rows: all (full) or a few; dK/dV reference needs every query of the key, so it is
     * computed over all rows in full mode and for two key rows otherwise */
    int64_t rows_full[] = {0, p.Sq / 2 + 17, p.Sq - 1};
    const int64_t nrows = full ? p.Sq : 3;
    double *P = xmalloc((size_t)p.Skv * 8), *dP = xmalloc((size_t)p.Skv * 8), *orow = xmalloc((size_t)D * 8), lse_r;
    double eo_num = 0, eo_den = 0, el = 0, eq_num = 0, eq_den = 0;
    double *dK = full ? xcalloc((size_t)nk, 8) : NULL, *dV = full ? xcalloc((size_t)nk, 8) : NULL;
    const double scale = 1 / sqrt((double)D);
    for (int64_t ri = 0; ri < nrows; ri++) {
        const int64_t i = full ? ri : rows_full[ri];
        for (int64_t h = 0; h < p.Hq; h++) {
            const int64_t kh = h / (p.Hq / p.Hkv), jm = last_key(&p, i);
            ref_attn_row(&p, q, k, v, h, i, P, orow, &lse_r);
            double Di = 0;
            for (int64_t d = 0; d < D; d++) {
                const double got = o[(i * p.Hq + h) * D + d];
                eo_num += isfinite(got) ? (got - orow[d]) * (got - orow[d]) : INFINITY;
                eo_den += orow[d] * orow[d];
                Di += (double)dO[(i * p.Hq + h) * D + d] * o[(i * p.Hq + h) * D + d]; /* cuDNN uses its bf16 O */
            }
            const double le = fabs(lse[h * p.Sq + i] - lse_r) / fmax(1.0, fabs(lse_r));
            el = isfinite(le) ? fmax(el, le) : INFINITY;
            for (int64_t j = 0; j <= jm; j++) { /* dP row, once */
                double dp = 0;
                for (int64_t e = 0; e < D; e++) dp += (double)dO[(i * p.Hq + h) * D + e] * v[(j * p.Hkv + kh) * D + e];
                dP[j] = dp;
            }
            for (int64_t d = 0; d < D; d++) {
                double a = 0;
                for (int64_t j = 0; j <= jm; j++) a += P[j] * (dP[j] - Di) * scale * k[(j * p.Hkv + kh) * D + d];
                const double got = dq[(i * p.Hq + h) * D + d];
                eq_num += isfinite(got) ? (got - a) * (got - a) : INFINITY;
                eq_den += a * a;
            }
            if (full) /* dK, dV contributions of this query row */
                for (int64_t j = 0; j <= jm; j++) {
                    const double ds = P[j] * (dP[j] - Di) * scale;
                    for (int64_t d = 0; d < D; d++) {
                        dK[(j * p.Hkv + kh) * D + d] += ds * q[(i * p.Hq + h) * D + d];
                        dV[(j * p.Hkv + kh) * D + d] += P[j] * dO[(i * p.Hq + h) * D + d];
                    }
                }
        }
    }
    char name[128];
    snprintf(name, sizeof name, "sdpa %s Sq %lld Skv %lld H %lld/%lld D %lld%s", p.causal ? (p.bottom_right ? "causal-br" : "causal") : "full",
             (long long)p.Sq, (long long)p.Skv, (long long)p.Hq, (long long)p.Hkv, (long long)D, full ? "" : " (rows)");
    char n2[160];
    snprintf(n2, sizeof n2, "%s O", name);
    REPORT(n2, sqrt(eo_num / eo_den), TOL_BF16);
    snprintf(n2, sizeof n2, "%s LSE", name);
    REPORT(n2, el, 1e-4);
    snprintf(n2, sizeof n2, "%s dQ", name);
    REPORT(n2, sqrt(eq_num / eq_den), TOL_BF16);
    if (full) {
        snprintf(n2, sizeof n2, "%s dK", name);
        REPORT(n2, rel_d(dk, dK, nk), TOL_BF16);
        snprintf(n2, sizeof n2, "%s dV", name);
        REPORT(n2, rel_d(dv, dV, nk), TOL_BF16);
    } else { /* spot-check dK/dV rows: key S-1 (few queries) and key S/2+17 */
        const int64_t keys[2] = {p.Skv - 1, p.Skv / 2 + 17};
        double ek_num = 0, ek_den = 0, ev_num = 0, ev_den = 0;
        for (int kk = 0; kk < 2; kk++) {
            const int64_t j = keys[kk];
            for (int64_t kh = 0; kh < p.Hkv; kh++) {
                double dkr[256] = {0}, dvr[256] = {0};
                for (int64_t h = kh * (p.Hq / p.Hkv); h < (kh + 1) * (p.Hq / p.Hkv); h++)
                    for (int64_t i = 0; i < p.Sq; i++) {
                        if (last_key(&p, i) < j) continue;
                        /* P[i, j] needs the row's lse: use the reference */
                        double s = 0, dp = 0, Di = 0;
                        for (int64_t e = 0; e < D; e++) {
                            s += (double)q[(i * p.Hq + h) * D + e] * k[(j * p.Hkv + kh) * D + e];
                            dp += (double)dO[(i * p.Hq + h) * D + e] * v[(j * p.Hkv + kh) * D + e];
                            Di += (double)dO[(i * p.Hq + h) * D + e] * o[(i * p.Hq + h) * D + e];
                        }
                        const double Pij = exp(s * scale - lse[h * p.Sq + i]); /* cuDNN's LSE, checked above */
                        const double ds = Pij * (dp - Di) * scale;
                        for (int64_t d = 0; d < D; d++) {
                            dkr[d] += ds * q[(i * p.Hq + h) * D + d];
                            dvr[d] += Pij * dO[(i * p.Hq + h) * D + d];
                        }
                    }
                for (int64_t d = 0; d < D; d++) {
                    const double gk = dk[(j * p.Hkv + kh) * D + d], gv = dv[(j * p.Hkv + kh) * D + d];
                    ek_num += isfinite(gk) ? (gk - dkr[d]) * (gk - dkr[d]) : INFINITY;
                    ev_num += isfinite(gv) ? (gv - dvr[d]) * (gv - dvr[d]) : INFINITY;
                    ek_den += dkr[d] * dkr[d];
                    ev_den += dvr[d] * dvr[d];
                }
            }
        }
        snprintf(n2, sizeof n2, "%s dK", name);
        REPORT(n2, sqrt(ek_num / ek_den), TOL_BF16);
        snprintf(n2, sizeof n2, "%s dV", name);
        REPORT(n2, sqrt(ev_num / ev_den), TOL_BF16);
    }
    free(q); free(k); free(v); free(dO); free(o); free(lse); free(dq); free(dk); free(dv); free(P); free(dP); free(orow);
    free(dK); free(dV);
    cudaFree(q_d); cudaFree(k_d); cudaFree(v_d); cudaFree(do_d); cudaFree(o_d); cudaFree(dq_d); cudaFree(dk_d);
    cudaFree(dv_d); cudaFree(lse_d); cudaFree(ss_d); cudaFree(acc_d); cudaFree(ws_d);
}

/* ------------------------------------------------------------------ packed documents */
/* Packed documents through padded cuDNN calls, as the stages run them: P zigzag ranks simulated
 * (their ring steps' calls cut into common/docs.c's blocks), every block one padded call whose
 * plan is the ring call's shape, its rows merged by LSE; backward block by block with the final O
 * and LSE. Against each document alone (fp64, causal, on its own rows). Also checks that a padded
 * call leaves the rows and keys past its lengths alone where they are not scratch: its inputs are
 * read in place, at offsets into the whole sequence. */
static void doc_truth(const int64_t *start, int64_t nd, int64_t H, int64_t Hk, int64_t D, const float *q,
                      const float *k, const float *v, const float *dO, double *O, double *L, double *dQ, double *dK,
                      double *dV) {
    const int64_t S = start[nd], Q = H * D, KV = Hk * D;
    const double scale = 1 / sqrt((double)D);
    double *p = xmalloc((size_t)S * 8);
    memset(dQ, 0, (size_t)(S * Q) * 8); memset(dK, 0, (size_t)(S * KV) * 8); memset(dV, 0, (size_t)(S * KV) * 8);
    for (int64_t d = 0; d < nd; d++)
        for (int64_t i = start[d]; i < start[d + 1]; i++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t kh = h / (H / Hk);
                const float *qi = q + i * Q + h * D, *gi = dO + i * Q + h * D;
                double m = -INFINITY, z = 0, Di = 0;
                for (int64_t j = start[d]; j <= i; j++) {
                    double s = 0;
                    for (int64_t e = 0; e < D; e++) s += (double)qi[e] * k[j * KV + kh * D + e];
                    p[j] = s * scale;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = start[d]; j <= i; j++) z += exp(p[j] - m);
                L[h * S + i] = m + log(z);
                double *o = O + i * Q + h * D;
                for (int64_t e = 0; e < D; e++) o[e] = 0;
                for (int64_t j = start[d]; j <= i; j++) {
                    p[j] = exp(p[j] - L[h * S + i]);
                    for (int64_t e = 0; e < D; e++) o[e] += p[j] * v[j * KV + kh * D + e];
                }
                for (int64_t e = 0; e < D; e++) Di += (double)gi[e] * o[e];
                for (int64_t j = start[d]; j <= i; j++) {
                    double dp = 0;
                    for (int64_t e = 0; e < D; e++) dp += (double)gi[e] * v[j * KV + kh * D + e];
                    const double ds = p[j] * (dp - Di) * scale;
                    for (int64_t e = 0; e < D; e++) {
                        dQ[i * Q + h * D + e] += ds * k[j * KV + kh * D + e];
                        dK[j * KV + kh * D + e] += ds * qi[e];
                        dV[j * KV + kh * D + e] += p[j] * gi[e];
                    }
                }
            }
    free(p);
}

/* a copy of x [rows, w] followed by slack rows of zeros and then 512 rows of NaN: a padded call
 * that reads further past its lengths than the slack turns its results into NaN */
static bf16_t *with_slack(bf16_t *x, int64_t rows, int64_t w, int64_t slack) {
    bf16_t *p = dalloc_poisoned(2 * (rows + slack + 512) * w);
    CUDA_CHECK(cudaMemsetAsync(p + rows * w, 0, (size_t)(2 * slack * w), st));
    CUDA_CHECK(cudaMemcpyAsync(p, x, (size_t)(2 * rows * w), cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    cudaFree(x);
    return p;
}

static void test_sdpa_docs(Sdpa *sd, int64_t H, int64_t Hk, int64_t D, const int64_t *start, int64_t nd, int64_t slack,
                           int informational) {
    const int64_t S = start[nd], Q = H * D, KV = Hk * D;
    bf16_t *q_d, *k_d, *v_d, *do_d;
    float *q = rand_bf16(&q_d, S * Q, 1.0), *k = rand_bf16(&k_d, S * KV, 1.0), *v = rand_bf16(&v_d, S * KV, 1.0);
    float *dO = rand_bf16(&do_d, S * Q, 1.0);
    q_d = with_slack(q_d, S, Q, slack), k_d = with_slack(k_d, S, KV, slack), v_d = with_slack(v_d, S, KV, slack);
    do_d = with_slack(do_d, S, Q, slack);
    double *O = xmalloc((size_t)(S * Q) * 8), *L = xmalloc((size_t)(H * S) * 8), *dQ = xmalloc((size_t)(S * Q) * 8),
           *dK = xmalloc((size_t)(S * KV) * 8), *dV = xmalloc((size_t)(S * KV) * 8);
    doc_truth(start, nd, H, Hk, D, q, k, v, dO, O, L, dQ, dK, dV);
    float *oacc_d = dalloc_poisoned(4 * S * Q), *lse_d = dalloc_poisoned(4 * H * S), *dq_d = dalloc_poisoned(4 * S * Q),
          *dk_d = dalloc_poisoned(4 * S * KV), *dv_d = dalloc_poisoned(4 * S * KV);
    bf16_t *o_d = with_slack(dalloc_poisoned(2 * S * Q), S, Q, slack), *blk_d = dalloc_poisoned(2 * S * Q),
           *dkv_d = dalloc_poisoned(4 * S * KV);
    float *lseb_d = dalloc_poisoned(4 * H * S), *ss_d = dalloc_poisoned(4 * H * S), *acc_d = dalloc_poisoned(4 * S * Q);
    const int64_t ws = sdpa_bwd_workspace_estimate(&(SdpaShape){H, Hk, S, S, D, 1, 0, 1});
    void *ws_d = dalloc_poisoned(ws);
    int64_t cap = 4 * (nd + 4) * 8;
    DocBlock *blk = xmalloc((size_t)cap * sizeof *blk);
    int32_t *lens = xcalloc((size_t)cap * 8, 4), *lens_d;
    CUDA_CHECK(cudaMalloc((void **)&lens_d, (size_t)cap * 32));
    for (int P = 1; P <= 4; P *= 2) {
        const int64_t n = S / P;
        int64_t *pos = xmalloc((size_t)(S * 8)), nb = 0, pairs = 0;
        for (int r = 0; r < P; r++) zigzag_positions(S, P, r, pos + r * n);
        /* every rank's blocks at every step, in global rows, with the ring call's shape */
        SdpaShape *shp = xmalloc((size_t)cap * sizeof *shp);
        for (int r = 0; r < P; r++)
            for (int i = 0; i < P; i++) {
                const RingBlock b = ring_block(S, P, r, i);
                const int64_t m = docs_blocks(start, nd, pos + r * n, b.q0, b.nq, pos + b.src * n, b.k0, b.nk, blk + nb,
                                              cap - nb);
                if (nb + m > cap) DIE("test: %lld blocks, room for %lld", (long long)(nb + m), (long long)cap);
                pairs += docs_pairs(blk + nb, m);
                for (int64_t j = nb; j < nb + m; j++) {
                    shp[j] = sdpa_block_shape(&(SdpaShape){H, Hk, b.nq, b.nk, D, b.causal, 0, 0}, &blk[j], 1);
                    lens[8 * j] = (int32_t)blk[j].nq;
                    lens[8 * j + 4] = (int32_t)blk[j].nk;
                    blk[j].q0 = pos[r * n + blk[j].q0]; /* global rows: a block's rows are consecutive */
                    blk[j].k0 = pos[b.src * n + blk[j].k0];
                }
                nb += m;
            }
        CUDA_CHECK(cudaMemcpy(lens_d, lens, (size_t)nb * 32, cudaMemcpyHostToDevice));
        fill_f32(lse_d, -INFINITY, H * S, st);
        for (int64_t j = 0; j < nb; j++) {
            const DocBlock *b = &blk[j];
            sdpa_fwd_padded(sd, &shp[j], lens_d + 8 * j, blk_d, lseb_d, q_d + b->q0 * Q, k_d + b->k0 * KV,
                            v_d + b->k0 * KV, ws_d, ws);
            lse_merge_ld(oacc_d, 1, lse_d, blk_d, lseb_d, shp[j].Sq, S, b->q0, b->nq, H, D, st);
        }
        cast_f32_to_bf16(o_d, oacc_d, S * Q, st);
        CUDA_CHECK(cudaMemset(dq_d, 0, (size_t)(4 * S * Q)));
        CUDA_CHECK(cudaMemset(dk_d, 0, (size_t)(4 * S * KV)));
        CUDA_CHECK(cudaMemset(dv_d, 0, (size_t)(4 * S * KV)));
        for (int64_t j = 0; j < nb; j++) {
            const DocBlock *b = &blk[j];
            const SdpaShape *sh = &shp[j];
            CUDA_CHECK(cudaMemcpy2DAsync(lseb_d, (size_t)sh->Sq * 4, lse_d + b->q0, (size_t)S * 4, (size_t)b->nq * 4,
                                         (size_t)H, cudaMemcpyDeviceToDevice, st));
            sdpa_bwd_padded(sd, sh, lens_d + 8 * j, blk_d, dkv_d, dkv_d + sh->Skv * KV, q_d + b->q0 * Q,
                            k_d + b->k0 * KV, v_d + b->k0 * KV, o_d + b->q0 * Q, do_d + b->q0 * Q, lseb_d, ss_d, acc_d,
                            ws_d, ws);
            add_bf16_into(dq_d + b->q0 * Q, 1, blk_d, b->nq * Q, st);
            add_bf16_into(dk_d + b->k0 * KV, 1, dkv_d, b->nk * KV, st);
            add_bf16_into(dv_d + b->k0 * KV, 1, dkv_d + sh->Skv * KV, b->nk * KV, st);
        }
        CUDA_CHECK(cudaStreamSynchronize(st));
        float *o = down_f32(oacc_d, S * Q), *lse = down_f32(lse_d, H * S), *dq = down_f32(dq_d, S * Q),
              *dk = down_f32(dk_d, S * KV), *dv = down_f32(dv_d, S * KV);
        double el = 0;
        for (int64_t i = 0; i < H * S; i++) el = fmax(el, isfinite(lse[i]) ? fabs(lse[i] - L[i]) : INFINITY);
        char name[160];
        snprintf(name, sizeof name, "packed docs (%lld, S %lld, H %lld/%lld, D %lld, slack %lld), %d ranks, %lld blocks:",
                 (long long)nd, (long long)S, (long long)H, (long long)Hk, (long long)D, (long long)slack, P,
                 (long long)nb);
        const double e[5] = {rel_d(o, O, S * Q), el, rel_d(dq, dQ, S * Q), rel_d(dk, dK, S * KV), rel_d(dv, dV, S * KV)};
        const char *what[5] = {"O", "LSE", "dQ", "dK", "dV"};
        for (int w = 0; w < 5; w++) {
            char n2[220];
            snprintf(n2, sizeof n2, "%s %s", name, what[w]);
            if (informational) printf("  (informational) %s rel err %.2e\n", n2, e[w]);
            else REPORT(n2, e[w], w == 1 ? 1e-4 : TOL_BF16);
        }
        int64_t want = 0;
        for (int64_t d = 0; d < nd; d++) want += (start[d + 1] - start[d]) * (start[d + 1] - start[d] + 1) / 2;
        EXPECT(pairs == want, "%s %lld pairs computed, the documents' %lld", name, (long long)pairs, (long long)want);
        free(o); free(lse); free(dq); free(dk); free(dv); free(pos); free(shp);
    }
    free(q); free(k); free(v); free(dO); free(O); free(L); free(dQ); free(dK); free(dV); free(blk); free(lens);
    cudaFree(q_d); cudaFree(k_d); cudaFree(v_d); cudaFree(do_d); cudaFree(oacc_d); cudaFree(lse_d); cudaFree(dq_d);
    cudaFree(dk_d); cudaFree(dv_d); cudaFree(o_d); cudaFree(blk_d); cudaFree(dkv_d); cudaFree(lseb_d); cudaFree(ss_d);
    cudaFree(acc_d); cudaFree(ws_d); cudaFree(lens_d);
}

/* ------------------------------------------------------------------ Qwen3.5: linear attention, gated attention */
static int32_t *positions_of(const int64_t *start, int64_t nd, int64_t S, int32_t **dev) {
    /* documents [start[d], start[d+1]); the first continues one begun 1000 tokens earlier (a
     * context-parallel chunk's): only a later document's first token is at position 0 */
    int32_t *pos = xmalloc((size_t)S * 4);
    for (int64_t d = 0; d < nd; d++)
        for (int64_t t = start[d]; t < (d + 1 < nd ? start[d + 1] : S); t++) pos[t] = (int32_t)(t - start[d] + (d ? 0 : 1000));
    CUDA_CHECK(cudaMalloc((void **)dev, (size_t)S * 4));
    upload(*dev, pos, (size_t)S * 4);
    return pos;
}

/* the causal depthwise conv + SiLU, forward and backward, against fp64 loops */
static void test_gdn_conv(int64_t S, int64_t C, int64_t K, const int64_t *start, int64_t nd) {
    bf16_t *x_d, *w_d, *dy_d;
    int32_t *pos_d;
    float *x = rand_bf16(&x_d, S * C, 1.0), *w = rand_bf16(&w_d, C * K, 0.5), *dy = rand_bf16(&dy_d, S * C, 1.0);
    int32_t *pos = positions_of(start, nd, S, &pos_d);
    bf16_t *y_d = dalloc_poisoned(S * C * 2), *dx_d = dalloc_poisoned(S * C * 2);
    float *dw_d;
    CUDA_CHECK(cudaMalloc((void **)&dw_d, (size_t)C * K * 4));
    CUDA_CHECK(cudaMemsetAsync(dw_d, 0, (size_t)C * K * 4, st));
    gdn_conv_fwd(y_d, x_d, NULL, w_d, pos_d, S, C, K, st);
    gdn_conv_bwd(dx_d, NULL, dw_d, dy_d, x_d, NULL, w_d, pos_d, S, C, K, st);
    double *y = xmalloc((size_t)(S * C) * 8), *dx = xcalloc((size_t)(S * C), 8), *dw = xcalloc((size_t)(C * K), 8);
    for (int64_t t = 0; t < S; t++)
        for (int64_t c = 0; c < C; c++) {
            double pre = 0;
            for (int64_t j = 0; j < K; j++) {
                const int64_t back = K - 1 - j;
                if (back <= t && back <= pos[t]) pre += (double)w[c * K + j] * x[(t - back) * C + c];
            }
            const double sg = 1 / (1 + exp(-pre)), dpre = dy[t * C + c] * sg * (1 + pre * (1 - sg));
            y[t * C + c] = pre * sg;
            for (int64_t j = 0; j < K; j++) {
                const int64_t back = K - 1 - j;
                if (back > t || back > pos[t]) continue;
                dx[(t - back) * C + c] += w[c * K + j] * dpre;
                dw[c * K + j] += dpre * x[(t - back) * C + c];
            }
        }
    char name[96];
    float *o;
    snprintf(name, sizeof name, "gdn_conv_fwd S %lld C %lld K %lld docs %lld", (long long)S, (long long)C, (long long)K,
             (long long)nd);
    REPORT(name, rel_d(o = down_bf16(y_d, S * C), y, S * C), TOL_BF16); free(o);
    REPORT("gdn_conv_bwd dx", rel_d(o = down_bf16(dx_d, S * C), dx, S * C), TOL_BF16); free(o);
    REPORT("gdn_conv_bwd dw (fp32)", rel_d(o = down_f32(dw_d, C * K), dw, C * K), TOL_BF16); free(o);
    free(x); free(w); free(dy); free(pos); free(y); free(dx); free(dw);
    cudaFree(x_d); cudaFree(w_d); cudaFree(dy_d); cudaFree(pos_d); cudaFree(y_d); cudaFree(dx_d); cudaFree(dw_d);
}

/* The conv over a sequence cut in two (context parallelism): the second half with the first's last K-1
 * rows as its halo equals the whole; its dhalo, added to the first half's dx, gives the whole's */
static void test_gdn_conv_halo(int64_t S, int64_t C, int64_t K, int64_t cut) {
    bf16_t *x_d, *w_d, *dy_d;
    int32_t *pos_d;
    const int64_t one[] = {0};
    float *x = rand_bf16(&x_d, S * C, 1.0), *w = rand_bf16(&w_d, C * K, 0.5), *dy = rand_bf16(&dy_d, S * C, 1.0);
    int32_t *pos = positions_of(one, 1, S, &pos_d);
    bf16_t *y_d = dalloc_poisoned(S * C * 2), *y2_d = dalloc_poisoned(S * C * 2), *dx_d = dalloc_poisoned(S * C * 2),
           *dx2_d = dalloc_poisoned(S * C * 2), *dh_d = dalloc_poisoned((K - 1) * C * 2), *dy2_d;
    float *dw_d, *dw2_d;
    CUDA_CHECK(cudaMalloc((void **)&dy2_d, (size_t)(S * C) * 2));
    CUDA_CHECK(cudaMemcpyAsync(dy2_d, dy_d, (size_t)(S * C) * 2, cudaMemcpyDeviceToDevice, st));
    CUDA_CHECK(cudaMalloc((void **)&dw_d, (size_t)(C * K) * 4));
    CUDA_CHECK(cudaMalloc((void **)&dw2_d, (size_t)(C * K) * 4));
    CUDA_CHECK(cudaMemsetAsync(dw_d, 0, (size_t)(C * K) * 4, st));
    CUDA_CHECK(cudaMemsetAsync(dw2_d, 0, (size_t)(C * K) * 4, st));
    gdn_conv_fwd(y_d, x_d, NULL, w_d, pos_d, S, C, K, st);
    gdn_conv_bwd(dx_d, NULL, dw_d, dy_d, x_d, NULL, w_d, pos_d, S, C, K, st);
    const bf16_t *halo = x_d + (cut - (K - 1)) * C; /* the first half's last K-1 rows */
    gdn_conv_fwd(y2_d, x_d, NULL, w_d, pos_d, cut, C, K, st);
    gdn_conv_fwd(y2_d + cut * C, x_d + cut * C, halo, w_d, pos_d + cut, S - cut, C, K, st);
    gdn_conv_bwd(dx2_d, NULL, dw2_d, dy2_d, x_d, NULL, w_d, pos_d, cut, C, K, st);
    gdn_conv_bwd(dx2_d + cut * C, dh_d, dw2_d, dy2_d + cut * C, x_d + cut * C, halo, w_d, pos_d + cut, S - cut, C, K, st);
    float *a = down_bf16(y_d, S * C), *b = down_bf16(y2_d, S * C), *da = down_bf16(dx_d, S * C), *db = down_bf16(dx2_d, S * C);
    float *dh = down_bf16(dh_d, (K - 1) * C), *wa = down_f32(dw_d, C * K), *wb = down_f32(dw2_d, C * K);
    double *want = xmalloc((size_t)(S * C) * 8), *wantw = xmalloc((size_t)(C * K) * 8);
    for (int64_t i = 0; i < S * C; i++) want[i] = a[i];
    char name[96];
    snprintf(name, sizeof name, "gdn_conv halo: cut at %lld of %lld, forward", (long long)cut, (long long)S);
    REPORT(name, rel_d(b, want, S * C), 1e-6);
    for (int64_t i = 0; i < (K - 1) * C; i++) db[(cut - (K - 1)) * C + i] += dh[i]; /* the halo's share, sent back */
    for (int64_t i = 0; i < S * C; i++) want[i] = da[i];
    REPORT("gdn_conv halo: dx with dhalo added back", rel_d(db, want, S * C), 1e-2); /* two bf16 roundings */
    for (int64_t i = 0; i < C * K; i++) wantw[i] = wa[i];
    REPORT("gdn_conv halo: dw (fp32)", rel_d(wb, wantw, C * K), 1e-5);
    free(x); free(w); free(dy); free(pos); free(a); free(b); free(da); free(db); free(dh); free(wa); free(wb);
    free(want); free(wantw);
    void *ptrs[] = {x_d, w_d, dy_d, dy2_d, pos_d, y_d, y2_d, dx_d, dx2_d, dh_d, dw_d, dw2_d};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
}

/* The gated delta rule through the GPU's whole path (l2 norms, rule forward, its backward, the norms'
 * backward) against tests/ref_gdn.c in fp64, document by document: an initial state in and its
 * gradient out, the final state out and its gradient in, GQA-like key heads shared by value heads. */
static const char *rule_kind = "tiled"; /* which of the rule's kernels runs (gdn_rule_plain) */
static void test_gdn_rule_one(int64_t S, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t chunk,
                              const int64_t *start, int64_t nd) {
    const int64_t C = 2 * Hk * dk + Hv * dv, G = Hv / Hk, ms = dv * dk;
    bf16_t *qkv_d, *do_d;
    float *qkv = rand_bf16(&qkv_d, S * C, 1.0), *dout = rand_bf16(&do_d, S * Hv * dv, 1.0);
    float *g = xmalloc((size_t)(S * Hv) * 4), *beta = xmalloc((size_t)(S * Hv) * 4), *g_d, *beta_d;
    for (int64_t i = 0; i < S * Hv; i++) g[i] = (float)(-0.3 * urand() - 0.01), beta[i] = (float)(0.05 + 0.9 * urand());
    CUDA_CHECK(cudaMalloc((void **)&g_d, (size_t)(S * Hv) * 4));
    CUDA_CHECK(cudaMalloc((void **)&beta_d, (size_t)(S * Hv) * 4));
    upload(g_d, g, (size_t)(S * Hv) * 4);
    upload(beta_d, beta, (size_t)(S * Hv) * 4);
    int32_t *pos_d, *pos = positions_of(start, nd, S, &pos_d);
    float *S0_d, *dSf_d, *S0 = rand_f32(&S0_d, Hv * ms, 0.5), *dSf = rand_f32(&dSf_d, Hv * ms, 0.5);
    const int64_t nck = (S + chunk - 1) / chunk;
    float *rq_d = dalloc_poisoned(S * Hk * 4), *rk_d = dalloc_poisoned(S * Hk * 4);
    float *states_d = dalloc_poisoned(nck * Hv * ms * 4), *scr_d = dalloc_poisoned(gdn_scratch_floats(Hv, dk, dv, chunk) * 4);
    bf16_t *o_d = dalloc_poisoned(S * Hv * dv * 2), *dqkv_d = dalloc_poisoned(S * C * 2);
    float *dq_d, *dk_d, *dg_d, *db_d;
    CUDA_CHECK(cudaMalloc((void **)&dq_d, (size_t)(S * Hk * dk) * 4));
    CUDA_CHECK(cudaMalloc((void **)&dk_d, (size_t)(S * Hk * dk) * 4));
    CUDA_CHECK(cudaMalloc((void **)&dg_d, (size_t)(S * Hv) * 4));
    CUDA_CHECK(cudaMalloc((void **)&db_d, (size_t)(S * Hv) * 4));
    CUDA_CHECK(cudaMemsetAsync(dq_d, 0, (size_t)(S * Hk * dk) * 4, st));
    CUDA_CHECK(cudaMemsetAsync(dk_d, 0, (size_t)(S * Hk * dk) * 4, st));
    CUDA_CHECK(cudaMemsetAsync(dg_d, 0, (size_t)(S * Hv) * 4, st));
    CUDA_CHECK(cudaMemsetAsync(db_d, 0, (size_t)(S * Hv) * 4, st));
    gdn_l2_fwd(rq_d, qkv_d, S, Hk, dk, C, 0, st);
    gdn_l2_fwd(rk_d, qkv_d, S, Hk, dk, C, Hk * dk, st);
    gdn_rule_fwd(o_d, states_d, S0_d, qkv_d, g_d, beta_d, rq_d, rk_d, pos_d, S, Hk, Hv, dk, dv, chunk, st); /* S0_d: final */
    float *dS_last = down_f32(dSf_d, Hv * ms); /* before the backward overwrites it */
    gdn_rule_bwd(dq_d, dk_d, dqkv_d, dg_d, db_d, dSf_d, do_d, states_d, scr_d, qkv_d, g_d, beta_d, rq_d, rk_d, pos_d, S,
                 Hk, Hv, dk, dv, chunk, 0, st);                                                                /* dSf_d: dS0 */
    gdn_l2_bwd(dqkv_d, dq_d, qkv_d, rq_d, 1.f / sqrtf((float)dk), S, Hk, dk, C, 0, st);
    gdn_l2_bwd(dqkv_d, dk_d, qkv_d, rk_d, 1.f, S, Hk, dk, C, Hk * dk, st);

    /* the reference: q and k repeated over their value heads, prepared, the rule per document */
    const GdnHeads hh = {Hv, dk, dv};
    double *q = xmalloc((size_t)(S * Hv * dk) * 8), *k = xmalloc((size_t)(S * Hv * dk) * 8), *v = xmalloc((size_t)(S * Hv * dv) * 8);
    double *gd = xmalloc((size_t)(S * Hv) * 8), *bd = xmalloc((size_t)(S * Hv) * 8), *dod = xmalloc((size_t)(S * Hv * dv) * 8);
    for (int64_t t = 0; t < S; t++)
        for (int64_t h = 0; h < Hv; h++) {
            const int64_t kh = h / G;
            for (int64_t e = 0; e < dk; e++) {
                q[(t * Hv + h) * dk + e] = qkv[t * C + kh * dk + e];
                k[(t * Hv + h) * dk + e] = qkv[t * C + (Hk + kh) * dk + e];
            }
            for (int64_t e = 0; e < dv; e++) {
                v[(t * Hv + h) * dv + e] = qkv[t * C + 2 * Hk * dk + h * dv + e];
                dod[(t * Hv + h) * dv + e] = dout[(t * Hv + h) * dv + e];
            }
            gd[t * Hv + h] = g[t * Hv + h], bd[t * Hv + h] = beta[t * Hv + h];
        }
    double *qr = xmalloc((size_t)(S * Hv * dk) * 8), *kr = xmalloc((size_t)(S * Hv * dk) * 8);
    memcpy(qr, q, (size_t)(S * Hv * dk) * 8);
    memcpy(kr, k, (size_t)(S * Hv * dk) * 8);
    ref_gdn_prepare(&hh, S, q, k);
    double *o = xmalloc((size_t)(S * Hv * dv) * 8), *Sst = xmalloc((size_t)(Hv * ms) * 8), *S0d = xmalloc((size_t)(Hv * ms) * 8);
    for (int64_t d = 0; d < nd; d++) {
        const int64_t a = start[d], n = (d + 1 < nd ? start[d + 1] : S) - a;
        for (int64_t e = 0; e < Hv * ms; e++) Sst[e] = d ? 0 : S0[e];
        ref_gdn(&hh, n, q + a * Hv * dk, k + a * Hv * dk, v + a * Hv * dv, gd + a * Hv, bd + a * Hv, Sst, o + a * Hv * dv);
    }
    double *dqv = xcalloc((size_t)(S * Hv * dk), 8), *dkv = xcalloc((size_t)(S * Hv * dk), 8), *dvv = xcalloc((size_t)(S * Hv * dv), 8);
    double *dg = xcalloc((size_t)(S * Hv), 8), *db = xcalloc((size_t)(S * Hv), 8), *dS = xmalloc((size_t)(Hv * ms) * 8);
    for (int64_t d = nd - 1; d >= 0; d--) {
        const int64_t a = start[d], n = (d + 1 < nd ? start[d + 1] : S) - a;
        for (int64_t e = 0; e < Hv * ms; e++) { dS[e] = d == nd - 1 ? dSf[e] : 0; S0d[e] = d ? 0 : S0[e]; }
        ref_gdn_bwd(&hh, n, q + a * Hv * dk, k + a * Hv * dk, v + a * Hv * dv, gd + a * Hv, bd + a * Hv, S0d,
                    dod + a * Hv * dv, dS, dqv + a * Hv * dk, dkv + a * Hv * dk, dvv + a * Hv * dv, dg + a * Hv, db + a * Hv);
        if (d == 0) memcpy(S0d, dS, (size_t)(Hv * ms) * 8); /* the initial state's gradient */
    }
    ref_gdn_prepare_bwd(&hh, S, qr, kr, dqv, dkv);
    double *dqkv = xcalloc((size_t)(S * C), 8); /* raw q, k summed over their value heads; v */
    for (int64_t t = 0; t < S; t++)
        for (int64_t h = 0; h < Hv; h++) {
            for (int64_t e = 0; e < dk; e++) {
                dqkv[t * C + (h / G) * dk + e] += dqv[(t * Hv + h) * dk + e];
                dqkv[t * C + (Hk + h / G) * dk + e] += dkv[(t * Hv + h) * dk + e];
            }
            for (int64_t e = 0; e < dv; e++) dqkv[t * C + 2 * Hk * dk + h * dv + e] = dvv[(t * Hv + h) * dv + e];
        }
    char name[128];
    float *out;
    snprintf(name, sizeof name, "gdn_rule_fwd (%s) o S %lld Hk %lld Hv %lld dk %lld dv %lld chunk %lld docs %lld",
             rule_kind, (long long)S, (long long)Hk, (long long)Hv, (long long)dk, (long long)dv, (long long)chunk,
             (long long)nd);
    REPORT(name, rel_d(out = down_bf16(o_d, S * Hv * dv), o, S * Hv * dv), TOL_BF16); free(out);
    REPORT("gdn_rule_fwd final state (fp32)", rel_d(out = down_f32(S0_d, Hv * ms), Sst, Hv * ms), 1e-4); free(out);
    REPORT("gdn_rule_bwd dq dk dv (raw, bf16)", rel_d(out = down_bf16(dqkv_d, S * C), dqkv, S * C), TOL_BF16); free(out);
    REPORT("gdn_rule_bwd dg (fp32)", rel_d(out = down_f32(dg_d, S * Hv), dg, S * Hv), 1e-4); free(out);
    REPORT("gdn_rule_bwd dbeta (fp32)", rel_d(out = down_f32(db_d, S * Hv), db, S * Hv), 1e-4); free(out);
    REPORT("gdn_rule_bwd initial state's gradient (fp32)", rel_d(out = down_f32(dSf_d, Hv * ms), S0d, Hv * ms), 1e-4);
    free(out);
    { /* the segment's state maps (context parallelism): S_final = S0 M + B forward; dS0 = dS_final M^T + C
       * backward, C its backward from a zero final gradient */
        float *maps_d = dalloc_poisoned(Hv * (dv + dk) * dk * 4), *S0c_d, *Sf_d = dalloc_poisoned(Hv * ms * 4);
        float *C_d, *dSl_d, *dS0_d = dalloc_poisoned(Hv * ms * 4);
        float *zero = xcalloc((size_t)(Hv * ms), 4);
        CUDA_CHECK(cudaMalloc((void **)&S0c_d, (size_t)(Hv * ms) * 4));
        CUDA_CHECK(cudaMalloc((void **)&C_d, (size_t)(Hv * ms) * 4));
        CUDA_CHECK(cudaMalloc((void **)&dSl_d, (size_t)(Hv * ms) * 4));
        upload(S0c_d, S0, (size_t)(Hv * ms) * 4);
        upload(C_d, zero, (size_t)(Hv * ms) * 4);
        upload(dSl_d, dS_last, (size_t)(Hv * ms) * 4);
        gdn_rule_maps(maps_d, qkv_d, g_d, beta_d, rq_d, rk_d, pos_d, S, Hk, Hv, dk, dv, st);
        gdn_compose(Sf_d, S0c_d, maps_d, Hv, dk, dv, st);
        REPORT("gdn_rule_maps: S0 M + B = the final state", rel_d(out = down_f32(Sf_d, Hv * ms), Sst, Hv * ms), 1e-4);
        free(out);
        gdn_rule_bwd(dq_d, dk_d, dqkv_d, dg_d, db_d, C_d, do_d, states_d, scr_d, qkv_d, g_d, beta_d, rq_d, rk_d, pos_d, S,
                     Hk, Hv, dk, dv, chunk, 1, st); /* c_only: writes nothing else */
        gdn_compose_bwd(dS0_d, dSl_d, maps_d, C_d, Hv, dk, dv, st);
        REPORT("gdn_compose_bwd: dS M^T + C = the initial state's gradient", rel_d(out = down_f32(dS0_d, Hv * ms), S0d,
                                                                                  Hv * ms), 1e-4);
        free(out);
        REPORT("gdn_rule_bwd c_only left dq dk dv as they were", rel_d(out = down_bf16(dqkv_d, S * C), dqkv, S * C), TOL_BF16);
        free(out); free(zero);
        cudaFree(maps_d); cudaFree(S0c_d); cudaFree(Sf_d); cudaFree(C_d); cudaFree(dSl_d); cudaFree(dS0_d);
    }
    free(dS_last);
    free(qkv); free(dout); free(g); free(beta); free(pos); free(S0); free(dSf); free(q); free(k); free(v); free(gd);
    free(bd); free(dod); free(qr); free(kr); free(o); free(Sst); free(S0d); free(dqv); free(dkv); free(dvv); free(dg);
    free(db); free(dS); free(dqkv);
    void *ptrs[] = {qkv_d, do_d, g_d, beta_d, pos_d, S0_d, dSf_d, rq_d, rk_d, states_d, scr_d, o_d, dqkv_d, dq_d, dk_d, dg_d, db_d};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
}

/* every kernel of the rule, each against the reference: the plain ones, then the tiled ones the stages
 * run, with tiles of 16 tokens and of 8 (what a grid too large for 16's shared memory gets) */
static void test_gdn_rule(int64_t S, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int64_t chunk, const int64_t *start,
                          int64_t nd) {
    gdn_rule_plain(1);
    rule_kind = "plain";
    test_gdn_rule_one(S, Hk, Hv, dk, dv, chunk, start, nd);
    gdn_rule_plain(0);
    gdn_rule_tile(16);
    rule_kind = "tiled 16";
    test_gdn_rule_one(S, Hk, Hv, dk, dv, chunk, start, nd);
    gdn_rule_tile(8);
    rule_kind = "tiled 8";
    test_gdn_rule_one(S, Hk, Hv, dk, dv, chunk, start, nd);
    gdn_rule_tile(0);
}

/* the gates and the gated RMSNorm against fp64 loops */
static void test_gdn_gates_norm(int64_t S, int64_t Hv, int64_t dv) {
    bf16_t *a_d, *b_d, *Al_d, *dt_d, *x_d, *z_d, *w_d, *dy_d;
    float *a = rand_bf16(&a_d, S * Hv, 1.0), *b = rand_bf16(&b_d, S * Hv, 1.0), *Al = rand_bf16(&Al_d, Hv, 1.0),
          *dt = rand_bf16(&dt_d, Hv, 1.0), *x = rand_bf16(&x_d, S * Hv * dv, 1.0), *z = rand_bf16(&z_d, S * Hv * dv, 1.0),
          *w = rand_bf16(&w_d, dv, 1.0), *dy = rand_bf16(&dy_d, S * Hv * dv, 1.0);
    float *dgf_d, *dbf_d, *dgf = rand_f32(&dgf_d, S * Hv, 1.0), *dbf = rand_f32(&dbf_d, S * Hv, 1.0);
    float *g_d = dalloc_poisoned(S * Hv * 4), *be_d = dalloc_poisoned(S * Hv * 4), *rstd_d = dalloc_poisoned(S * Hv * 4);
    bf16_t *da_d = dalloc_poisoned(S * Hv * 2), *db_d = dalloc_poisoned(S * Hv * 2), *y_d = dalloc_poisoned(S * Hv * dv * 2),
           *dx_d = dalloc_poisoned(S * Hv * dv * 2), *dz_d = dalloc_poisoned(S * Hv * dv * 2);
    float *dacc_d;
    CUDA_CHECK(cudaMalloc((void **)&dacc_d, (size_t)(2 * Hv + dv) * 4));
    CUDA_CHECK(cudaMemsetAsync(dacc_d, 0, (size_t)(2 * Hv + dv) * 4, st));
    gdn_gates_fwd(g_d, be_d, a_d, b_d, Al_d, dt_d, S, Hv, st);
    gdn_gates_bwd(da_d, db_d, dacc_d, dacc_d + Hv, dgf_d, dbf_d, g_d, be_d, a_d, Al_d, dt_d, S, Hv, st);
    gdn_norm_fwd(y_d, rstd_d, x_d, z_d, w_d, S * Hv, dv, 1e-6f, st);
    gdn_norm_bwd(dx_d, dz_d, dacc_d + 2 * Hv, dy_d, x_d, z_d, rstd_d, w_d, S * Hv, dv, st);
    const int64_t n = S * Hv, m = S * Hv * dv;
    double *g = xmalloc((size_t)n * 8), *be = xmalloc((size_t)n * 8), *da = xmalloc((size_t)n * 8), *db = xmalloc((size_t)n * 8);
    double *dacc = xcalloc((size_t)(2 * Hv + dv), 8), *y = xmalloc((size_t)m * 8), *dx = xmalloc((size_t)m * 8), *dz = xmalloc((size_t)m * 8);
    for (int64_t i = 0; i < n; i++) {
        const int64_t h = i % Hv;
        const double xx = (double)a[i] + dt[h], sp = log1p(exp(xx)), A = exp((double)Al[h]);
        g[i] = -A * sp;
        be[i] = 1 / (1 + exp(-(double)b[i]));
        da[i] = dgf[i] * -A / (1 + exp(-xx));
        db[i] = dbf[i] * be[i] * (1 - be[i]);
        dacc[h] += dgf[i] * g[i];
        dacc[Hv + h] += da[i];
    }
    for (int64_t r = 0; r < n; r++) {
        double ss = 0, dot = 0;
        for (int64_t e = 0; e < dv; e++) ss += (double)x[r * dv + e] * x[r * dv + e];
        const double rs = 1 / sqrt(ss / dv + 1e-6);
        for (int64_t e = 0; e < dv; e++) {
            const int64_t i = r * dv + e;
            const double sg = 1 / (1 + exp(-(double)z[i])), sz = z[i] * sg, xh = x[i] * rs, gg = dy[i] * (double)w[e];
            y[i] = w[e] * xh * sz;
            dz[i] = gg * xh * sg * (1 + z[i] * (1 - sg));
            dacc[2 * Hv + e] += dy[i] * xh * sz;
            dot += gg * sz * xh;
        }
        dot /= dv;
        for (int64_t e = 0; e < dv; e++) {
            const int64_t i = r * dv + e;
            const double sz = z[i] / (1 + exp(-(double)z[i]));
            dx[i] = rs * (dy[i] * (double)w[e] * sz - x[i] * rs * dot);
        }
    }
    float *o;
    REPORT("gdn_gates_fwd g (fp32)", rel_d(o = down_f32(g_d, n), g, n), 1e-5); free(o);
    REPORT("gdn_gates_fwd beta (fp32)", rel_d(o = down_f32(be_d, n), be, n), 1e-5); free(o);
    REPORT("gdn_gates_bwd da", rel_d(o = down_bf16(da_d, n), da, n), TOL_BF16); free(o);
    REPORT("gdn_gates_bwd db", rel_d(o = down_bf16(db_d, n), db, n), TOL_BF16); free(o);
    REPORT("gdn_gates_bwd dA_log, ddt_bias (fp32)", rel_d(o = down_f32(dacc_d, 2 * Hv), dacc, 2 * Hv), 1e-4); free(o);
    REPORT("gdn_norm_fwd", rel_d(o = down_bf16(y_d, m), y, m), TOL_BF16); free(o);
    REPORT("gdn_norm_bwd dx", rel_d(o = down_bf16(dx_d, m), dx, m), TOL_BF16); free(o);
    REPORT("gdn_norm_bwd dz", rel_d(o = down_bf16(dz_d, m), dz, m), TOL_BF16); free(o);
    REPORT("gdn_norm_bwd dw (fp32)", rel_d(o = down_f32(dacc_d + 2 * Hv, dv), dacc + 2 * Hv, dv), 1e-4); free(o);
    free(a); free(b); free(Al); free(dt); free(x); free(z); free(w); free(dy); free(dgf); free(dbf);
    free(g); free(be); free(da); free(db); free(dacc); free(y); free(dx); free(dz);
    void *ptrs[] = {a_d, b_d, Al_d, dt_d, x_d, z_d, w_d, dy_d, dgf_d, dbf_d, g_d, be_d, rstd_d, da_d, db_d, y_d, dx_d, dz_d, dacc_d};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
}

/* the gated attention's pieces: q's head norm and partial RoPE read from q_proj's [S, H, 2 hd] rows
 * (query, then gate), their backward written back there, and the output gate, against fp64 */
static void test_gated_attn_pieces(int64_t S, int64_t H, int64_t hd, int64_t rot) {
    const int64_t n = S * H * hd, half = rot / 2;
    bf16_t *qr_d, *w_d, *d_d, *o_d, *dog_d;
    float *qr = rand_bf16(&qr_d, 2 * n, 1.0), *w = rand_bf16(&w_d, hd, 1.0), *d = rand_bf16(&d_d, n, 1.0),
          *o = rand_bf16(&o_d, n, 1.0), *dog = rand_bf16(&dog_d, n, 1.0);
    int32_t *pos = xmalloc((size_t)S * 4), *pos_d;
    for (int64_t t = 0; t < S; t++) pos[t] = (int32_t)(urand() * 262144);
    float *inv = xmalloc((size_t)half * 4), *inv_d;
    for (int64_t i = 0; i < half; i++) inv[i] = (float)(1.0 / pow(1e7, 2.0 * i / rot));
    CUDA_CHECK(cudaMalloc((void **)&pos_d, (size_t)S * 4));
    upload(pos_d, pos, (size_t)S * 4);
    CUDA_CHECK(cudaMalloc((void **)&inv_d, (size_t)half * 4));
    upload(inv_d, inv, (size_t)half * 4);
    bf16_t *y_d = dalloc_poisoned(n * 2), *dq_d = dalloc_poisoned(2 * n * 2), *og_d = dalloc_poisoned(n * 2);
    float *rstd_d = dalloc_poisoned(S * H * 4), *dw_d;
    CUDA_CHECK(cudaMalloc((void **)&dw_d, (size_t)hd * 4));
    CUDA_CHECK(cudaMemsetAsync(dw_d, 0, (size_t)hd * 4, st));
    ga_qk_fwd(y_d, rstd_d, qr_d, H * 2 * hd, 2 * hd, w_d, pos_d, inv_d, 1.f, S, H, hd, rot, 1e-6f, st);
    ga_qk_bwd(dq_d, dw_d, d_d, qr_d, H * 2 * hd, 2 * hd, rstd_d, w_d, pos_d, inv_d, 1.f, S, H, hd, rot, st);
    ga_gate_fwd(og_d, o_d, qr_d, S, H, hd, st);
    ga_gate_bwd(dog_d, dq_d, o_d, qr_d, S, H, hd, st);
    double *y = xmalloc((size_t)n * 8), *dq = xmalloc((size_t)(2 * n) * 8), *dw = xcalloc((size_t)hd, 8);
    double *og = xmalloc((size_t)n * 8), *dob = xmalloc((size_t)n * 8), *nv = xmalloc((size_t)hd * 8), *gg = xmalloc((size_t)hd * 8);
    for (int64_t r = 0; r < S * H; r++) {
        const float *x = qr + r * 2 * hd, *dr = d + r * hd;
        double ss = 0;
        for (int64_t i = 0; i < hd; i++) ss += (double)x[i] * x[i];
        const double rs = 1 / sqrt(ss / hd + 1e-6);
        for (int64_t i = 0; i < hd; i++) nv[i] = w[i] * x[i] * rs, gg[i] = dr[i], y[r * hd + i] = nv[i];
        const float p = (float)pos[r / H];
        for (int64_t i = 0; i < half; i++) {
            const float ang = p * inv[i];
            const double c = cos((double)ang), s = sin((double)ang);
            y[r * hd + i] = nv[i] * c - nv[i + half] * s;
            y[r * hd + i + half] = nv[i + half] * c + nv[i] * s;
            gg[i] = dr[i] * c + dr[i + half] * s;
            gg[i + half] = dr[i + half] * c - dr[i] * s;
        }
        double dot = 0;
        for (int64_t i = 0; i < hd; i++) dw[i] += gg[i] * x[i] * rs, dot += gg[i] * w[i] * x[i] * rs;
        dot /= hd;
        for (int64_t i = 0; i < hd; i++) {
            dq[r * 2 * hd + i] = rs * (gg[i] * w[i] - x[i] * rs * dot);
            const int64_t e = r * hd + i;
            const double sg = 1 / (1 + exp(-(double)x[hd + i]));
            og[e] = o[e] * sg;
            dob[e] = dog[e] * sg;
            dq[r * 2 * hd + hd + i] = dog[e] * (double)o[e] * sg * (1 - sg);
        }
    }
    char name[96];
    float *out;
    snprintf(name, sizeof name, "ga_qk_fwd S %lld H %lld hd %lld rot %lld", (long long)S, (long long)H, (long long)hd,
             (long long)rot);
    REPORT(name, rel_d(out = down_bf16(y_d, n), y, n), TOL_BF16); free(out);
    REPORT("ga_qk_bwd + ga_gate_bwd: d(q_proj out)", rel_d(out = down_bf16(dq_d, 2 * n), dq, 2 * n), TOL_BF16); free(out);
    REPORT("ga_qk_bwd dw (fp32)", rel_d(out = down_f32(dw_d, hd), dw, hd), 1e-3); free(out);
    REPORT("ga_gate_fwd", rel_d(out = down_bf16(og_d, n), og, n), TOL_BF16); free(out);
    REPORT("ga_gate_bwd d(o)", rel_d(out = down_bf16(dog_d, n), dob, n), TOL_BF16); free(out);
    free(qr); free(w); free(d); free(o); free(dog); free(pos); free(inv); free(y); free(dq); free(dw); free(og); free(dob);
    free(nv); free(gg);
    void *ptrs[] = {qr_d, w_d, d_d, o_d, dog_d, pos_d, inv_d, y_d, dq_d, og_d, rstd_d, dw_d};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    Gpu gpu;
    gpu_init(&gpu, 0);
    st = gpu.stream;
    printf("GPU %s, %d SMs; cuDNN %zu; %s\n", gpu.name, gpu.sms, cudnnGetVersion(), quick ? "quick" : "full");
    printf("[kernels]\n");
    test_rmsnorm(300, 1024);
    test_rmsnorm(129, 96);
    test_rmsnorm(64, 5120);
    test_qk_norm_rope(77, 4, 128);
    test_qk_norm_rope(50, 3, 64);
    test_swiglu_embedding();
    test_cross_entropy(37, 1000, 0);
    test_cross_entropy(3, 151936, 0);
    test_cross_entropy(37, 1000, 1);
    test_cross_entropy(4, 151936, 1);
    test_adamw();
    test_cpu_adamw();
    test_ring_merge(1);
    test_ring_merge(0);
    printf("[Qwen3.5 linear attention and gated attention]\n");
    {
        const int64_t one[] = {0}, docs[] = {0, 1, 2, 37, 64, 65, 150, 299};
        test_gdn_conv(300, 96, 4, one, 1);
        test_gdn_conv(300, 200, 4, docs, 8);
        test_gdn_conv_halo(300, 96, 4, 150);
        test_gdn_conv_halo(64, 200, 4, 7);
        test_gdn_rule(150, 2, 4, 32, 64, 16, one, 1);     /* chunks of 16: the backward's chunk walk */
        test_gdn_rule(300, 2, 4, 64, 32, 64, docs, 8);    /* documents: 1-token ones, starts on chunk edges */
        test_gdn_rule(200, 1, 2, 128, 128, 64, one, 1);   /* the released models' head dims */
        test_gdn_rule(257, 2, 6, 128, 128, 32, docs, 7);
        test_gdn_rule(75, 1, 2, 32, 32, 20, one, 1);      /* chunks of 20: tiles cut short inside a chunk */
        test_gdn_rule(11, 1, 2, 64, 32, 16, one, 1);      /* fewer tokens than a tile */
        test_gdn_gates_norm(300, 6, 128);
        test_gdn_gates_norm(77, 4, 64);
        test_gated_attn_pieces(100, 3, 256, 64);           /* the released models' head: 64 of 256 rotated */
        test_gated_attn_pieces(77, 2, 64, 16);
    }
    printf("[gemm]\n");
    void *ws;
    CUDA_CHECK(cudaMalloc(&ws, GEMM_WORKSPACE_BYTES));
    Gemm gm;
    gemm_init(&gm, ws, GEMM_WORKSPACE_BYTES);
    test_gemm(&gm, 300, 256, 384);
    test_gemm(&gm, 100, 96, 320);
    test_gemm_big(&gm); /* an operand past 2^31 elements */
    /* ragged (the MoE experts' GEMMs): the algorithm chosen for a bucket of row counts (16 or 24 x
     * 2^j) serves every count in it -- 17 rows run 24's algorithm, 349 run 384's, ...; a second count
     * of a bucket asks the heuristic nothing, and no count needs the exact shape's algorithm */
    gm.ragged = 1;
    for (int64_t S = 17; S <= 1500; S = S * 3 + 49) test_gemm(&gm, S, 256, 384); /* 17, 100, 349, 1096 */
    const int64_t asked = gm.queries;
    test_gemm(&gm, 20, 256, 384); /* 24's bucket again */
    test_gemm(&gm, 1200, 256, 384); /* 1096's, 1536 */
    EXPECT_LE((double)(gm.queries - asked), 0, "ragged GEMMs asked the heuristic %lld more times for counts of known buckets",
              (long long)(gm.queries - asked));
    test_gemm(&gm, 100, 2048, 768); /* Qwen3-30B-A3B's expert shapes */
    test_gemm(&gm, 100, 768, 2048);
    EXPECT_LE((double)gm.retries, 0, "%lld ragged GEMMs fell back to their exact shape's algorithm", (long long)gm.retries);
    gm.ragged = 0;
    test_gemm_grouped(&gm);
    printf("[attention]\n");
    Sdpa sd;
    sdpa_init(&sd, st);
    test_sdpa(&sd, (SdpaShape){4, 2, 256, 256, 128, 1, 0}, 1);
    test_sdpa(&sd, (SdpaShape){8, 2, 200, 200, 64, 1, 0}, 1);   /* not a multiple of 128, GQA 4:1 */
    test_sdpa(&sd, (SdpaShape){4, 2, 100, 100, 64, 1, 0}, 1);   /* the golden config's shape */
    test_sdpa(&sd, (SdpaShape){16, 8, 1000, 1000, 128, 1, 0}, 1);
    test_sdpa(&sd, (SdpaShape){4, 2, 96, 320, 128, 1, 1}, 1);   /* bottom-right causal, Sq < Skv */
    test_sdpa(&sd, (SdpaShape){4, 2, 128, 384, 128, 0, 0}, 1);  /* non-causal, Sq != Skv */
    if (!quick) test_sdpa(&sd, (SdpaShape){16, 8, 131072, 131072, 128, 1, 0}, 0); /* long: spot-checked rows */
    printf("[packed documents]\n");
    { /* 1-token documents, boundaries on and off chunk edges (S/8 = 96), one across several chunks */
        const int64_t st1[] = {0, 1, 2, 40, 96, 97, 300, 384, 385, 700, 768};
        const int64_t st2[] = {0, 512, 1000, 1024}; /* few, long; GQA 4:1, D 64 */
        /* 64 rows of slack are too few at D 64 (informational: NaN, measured 2026-12-04); the
         * stages keep DOCS_SLACK_ROWS */
        const int64_t slack[2] = {64, DOCS_SLACK_ROWS};
        for (int i = 0; i < 2; i++) {
            test_sdpa_docs(&sd, 4, 2, 128, st1, 10, slack[i], i == 0);
            test_sdpa_docs(&sd, 8, 2, 64, st2, 3, slack[i], i == 0);
        }
    }
    sdpa_destroy(&sd);
    gemm_destroy(&gm);
    return test_summary();
}
