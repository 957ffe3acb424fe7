/* sdpa_rate.c -- our cuDNN attention's rate against NVIDIA's published cuDNN 9.19 H200 rates, and why.
 *
 * NVIDIA (github.com/NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training, results/
 * h200_919_only_cudnn/llama3.1_20260227_034703.csv; H200, cuDNN 9.19.1 + frontend 1.19, bf16, batch 1,
 * 64 q / 8 kv heads, D 128, top-left causal, non-deterministic backward) reports fwd/bwd TFLOP/s
 * 673/579 at 16K and 688/581 at 32K (no mask: 702/612, 693/572). Its script times ONE call per
 * iteration by CUPTI kernel time, after a 256 MiB L2 flush and with fresh inputs, and reports the
 * median of iterations 5..9 of 10. FLOPs: fwd 4*Hq*D*nnz, bwd 2.5x that, nnz = the unmasked scores
 * (Sq*Skv, or the causal triangle with its diagonal: S(S+1)/2). Every rate printed here uses that.
 *
 * Per shape this times, forward and backward:
 *   ours      common/sdpa.c as the stages call it (token-major [S,H,D] tensors; heuristics mode A, then
 *             FALLBACK; the first plan that builds), two ways:
 *               b2b   --warmup calls, then --iters calls back to back, CUDA events, median
 *               cold  NVIDIA's way: per call an L2 flush, a --gap-ms idle gap, one call; 10 calls,
 *                     median of the last 5 (cold - b2b = what the GPU's clocks lose when kept busy)
 *   variants  the same graphs built here (a copy of sdpa.c's, so "bshd" must time like "ours") in
 *             other layouts, each with every engine config heuristics modes A, B and FALLBACK offer:
 *               bshd          ours                       bshd+dO-bhsd  NVIDIA's layout (dO head-major)
 *               bhsd          every tensor head-major    unified       non-causal fwd as one SDPA_FWD op
 *                                                                      (what cudnn-frontend uses unmasked)
 *   tune      (--tune) the bshd graphs with every value of every knob of those engines (autotuning)
 * Each line says the SM clock (mean, min) and board power NVML read while it ran, and the clock
 * limit reasons seen (power cap, thermal): a rate that falls with the clock is the GPU, not cuDNN.
 *
 *   ./build/sdpa_rate                       --all: NVIDIA's shapes and stage 5's ring blocks
 *   ./build/sdpa_rate --hq 8 --hkv 1 --sq 131072 --skv 65536 --causal 0 [--tune]
 * Other options: --hd 128 --iters 5 --warmup 2 --gap-ms 50 --fill normal|uniform|tiny --ours-only
 * --tune-max 48 --budget-s 560 --pass fwd|bwd|both. GPU memory stays under 40 GiB. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "../common/check.h"
#include "../common/gpu.h"
#include "../common/sdpa.h"
#include "../common/train.h"
#include "../kernels/kernels.h"

typedef cudnnBackendDescriptor_t Desc;
#define GIB (1024.0 * 1024 * 1024)
#define MAX_BYTES (40ll << 30) /* what this program may hold on the GPU */
#define MAXIT 64

/* ================================================================ options */
typedef struct {
    int64_t hq, hkv, sq, skv, hd;
    int causal, iters, warmup, tune, tune_max, ours_only, fwd, bwd;
    double gap_ms, budget_s;
    const char *fill;
} Opts;

static void usage(void) {
    printf("usage: sdpa_rate [--all] [--hq N --hkv N --sq N --skv N --causal 0|1] [--hd 128] [--iters 5]\n"
           "       [--warmup 2] [--gap-ms 50] [--fill normal|uniform|tiny] [--tune] [--tune-max 48]\n"
           "       [--ours-only] [--pass fwd|bwd|both] [--budget-s 560]\n");
    exit(2);
}

static Opts parse(int argc, char **argv) {
    Opts o = {0, 0, 0, 0, 128, 1, 5, 2, 0, 48, 0, 1, 1, 50, 560, "normal"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "--all")) { o.hq = 0; used = 0; }
        else if (!strcmp(a, "--tune")) { o.tune = 1; used = 0; }
        else if (!strcmp(a, "--ours-only")) { o.ours_only = 1; used = 0; }
        else if (!v) usage();
        else if (!strcmp(a, "--hq")) o.hq = atoll(v);
        else if (!strcmp(a, "--hkv")) o.hkv = atoll(v);
        else if (!strcmp(a, "--sq")) o.sq = atoll(v);
        else if (!strcmp(a, "--skv")) o.skv = atoll(v);
        else if (!strcmp(a, "--hd")) o.hd = atoll(v);
        else if (!strcmp(a, "--causal")) o.causal = atoi(v);
        else if (!strcmp(a, "--iters")) o.iters = atoi(v);
        else if (!strcmp(a, "--warmup")) o.warmup = atoi(v);
        else if (!strcmp(a, "--gap-ms")) o.gap_ms = atof(v);
        else if (!strcmp(a, "--fill")) o.fill = v;
        else if (!strcmp(a, "--tune-max")) o.tune_max = atoi(v);
        else if (!strcmp(a, "--budget-s")) o.budget_s = atof(v);
        else if (!strcmp(a, "--pass")) { o.fwd = strcmp(v, "bwd") != 0; o.bwd = strcmp(v, "fwd") != 0; }
        else usage();
        i += used;
    }
    if (o.hq && (!o.hkv || !o.sq)) DIE("--hq needs --hkv and --sq (--skv defaults to --sq)");
    if (o.hq && !o.skv) o.skv = o.sq;
    if (o.iters < 1 || o.iters > MAXIT || o.warmup < 0) DIE("--iters 1..%d, --warmup >= 0", MAXIT);
    if (strcmp(o.fill, "normal") && strcmp(o.fill, "uniform") && strcmp(o.fill, "tiny")) usage();
    return o;
}

/* ================================================================ NVML, loaded at run time */
/* The clock and power while a measurement runs tell a power- or heat-limited GPU from a slow kernel.
 * dlopen: nothing to link, and the program still runs (without those columns) where NVML is absent. */
typedef struct nvmlDevice_st *nvmlDevice_t;
static struct {
    nvmlDevice_t dev;
    int (*clock)(nvmlDevice_t, int, unsigned *); /* NVML_CLOCK_SM = 1 */
    int (*power)(nvmlDevice_t, unsigned *);      /* milliwatts */
    int (*reasons)(nvmlDevice_t, unsigned long long *);
} nv;

static void nvml_open(int cuda_dev) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) { printf("NVML: not loaded (%s): no clock/power columns\n", dlerror()); return; }
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*by_pci)(const char *, nvmlDevice_t *) = (int (*)(const char *, nvmlDevice_t *))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    int (*max_clock)(nvmlDevice_t, int, unsigned *) = (int (*)(nvmlDevice_t, int, unsigned *))dlsym(lib, "nvmlDeviceGetMaxClockInfo");
    int (*limit)(nvmlDevice_t, unsigned *) = (int (*)(nvmlDevice_t, unsigned *))dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
    int (*temp)(nvmlDevice_t, int, unsigned *) = (int (*)(nvmlDevice_t, int, unsigned *))dlsym(lib, "nvmlDeviceGetTemperature");
    nv.clock = (int (*)(nvmlDevice_t, int, unsigned *))dlsym(lib, "nvmlDeviceGetClockInfo");
    nv.power = (int (*)(nvmlDevice_t, unsigned *))dlsym(lib, "nvmlDeviceGetPowerUsage");
    nv.reasons = (int (*)(nvmlDevice_t, unsigned long long *))dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    char pci[32];
    if (!init || !by_pci || !nv.clock || init() || cudaDeviceGetPCIBusId(pci, sizeof pci, cuda_dev) ||
        by_pci(pci, &nv.dev)) {
        printf("NVML: no handle for the CUDA device: no clock/power columns\n");
        nv.dev = NULL;
        return;
    }
    unsigned mhz = 0, mw = 0, t = 0;
    if (max_clock) max_clock(nv.dev, 1, &mhz);
    if (limit) limit(nv.dev, &mw);
    if (temp) temp(nv.dev, 0, &t);
    printf("NVML: max SM clock %u MHz, enforced power limit %.0f W, %u C now (NVIDIA's SOL figure uses the max clock)\n",
           mhz, mw / 1000.0, t);
}

typedef struct { double clk, pwr; unsigned clk_min; int n; unsigned long long why; } Samples;

static void sample(Samples *s) {
    if (!nv.dev) return;
    unsigned mhz = 0, mw = 0;
    unsigned long long r = 0;
    if (nv.clock(nv.dev, 1, &mhz)) return;
    if (nv.power) nv.power(nv.dev, &mw);
    if (nv.reasons) nv.reasons(nv.dev, &r);
    s->clk += mhz;
    s->pwr += mw / 1000.0;
    s->clk_min = s->n && s->clk_min < mhz ? s->clk_min : mhz;
    s->why |= r & ~1ull; /* bit 0 is "idle" */
    s->n++;
}

/* wait for ev, reading NVML every ~2 ms while the GPU runs what was queued before it */
static void wait_sampling(cudaEvent_t ev, Samples *s) {
    for (;;) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        sample(s);
        const struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

static const char *why_str(unsigned long long w) {
    static char b[96];
    snprintf(b, sizeof b, "%s%s%s%s", w & 0x4 ? " power-cap" : "", w & 0x8 ? " hw-slowdown" : "",
             w & 0x60 ? " thermal" : "", w & 0x80 ? " power-brake" : "");
    return b[0] ? b : " none";
}

/* ================================================================ buffers and inputs */
typedef struct {
    bf16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse, *ssum, *acc; /* LSE [Hq,Sq], softmax_sum [Hq,Sq], dQ_accum [Hq,Sq,D] */
    void *ws;
    int64_t ws_bytes, held;  /* workspace; everything this case holds */
} Bufs;

static void *flush_buf;      /* 256 MiB, zeroed before each cold call: NVIDIA's L2 flush */
static const int64_t FLUSH_BYTES = 256ll << 20;
static void *pattern;        /* NBLK random bf16 values; tensors are tiled from it */
#define NBLK ((int64_t)(1 << 24) - 3) /* odd, so power-of-two offsets never line tensors up */

static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); /* round to nearest even */
}

/* normal: N(0,1) like NVIDIA's torch.randn; uniform: U[-1,1] like the probe that measured 604/539;
 * tiny: +-[2^-7, 2^-6) like bench/ring_blocks.c. Values change the board power, so maybe the clock. */
static void make_pattern(const char *fill, cudaStream_t st) {
    uint16_t *h = xmalloc((size_t)NBLK * 2);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < NBLK; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        const double u = (double)(s >> 11) / 9007199254740992.0, u2 = (double)((s * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0;
        float x = (float)(2 * u - 1);
        if (!strcmp(fill, "normal")) x = (float)(sqrt(-2 * log(u + 1e-300)) * cos(2 * M_PI * u2));
        h[i] = !strcmp(fill, "tiny") ? (uint16_t)((0x3C00 + (s & 0x3FF)) ^ ((s >> 20) & 0x8000)) : f2bf(x);
    }
    pattern = gpu_malloc(NBLK * 2, "input pattern");
    gpu_upload(pattern, h, NBLK * 2, st);
    free(h);
}

/* n bf16 values from element off of the pattern on (device-to-device tile copies) */
static void fill(bf16_t *dst, int64_t off, int64_t n, cudaStream_t st) {
    for (int64_t e = 0; e < n;) {
        const int64_t src = (off + e) % NBLK, len = NBLK - src < n - e ? NBLK - src : n - e;
        CUDA_CHECK(cudaMemcpyAsync(dst + e, (char *)pattern + 2 * src, (size_t)(2 * len), cudaMemcpyDeviceToDevice, st));
        e += len;
    }
}

static void *take(Bufs *b, int64_t bytes, const char *what) {
    if (b->held + bytes > MAX_BYTES) DIE("%s would take this case past %.0f GiB", what, MAX_BYTES / GIB);
    b->held += bytes;
    return gpu_malloc(bytes, what);
}

static void bufs_alloc(Bufs *b, const SdpaShape *p, cudaStream_t st) {
    memset(b, 0, sizeof *b);
    const int64_t nq = p->Sq * p->Hq * p->D, nk = p->Skv * p->Hkv * p->D;
    bf16_t **qs[] = {&b->q, &b->o, &b->dout, &b->dq}, **ks[] = {&b->k, &b->v, &b->dk, &b->dv};
    for (int i = 0; i < 4; i++) *qs[i] = take(b, 2 * nq, "q-sized bf16");
    for (int i = 0; i < 4; i++) *ks[i] = take(b, 2 * nk, "kv-sized bf16");
    b->lse = take(b, 4 * p->Hq * p->Sq, "lse");
    b->ssum = take(b, 4 * p->Hq * p->Sq, "softmax_sum");
    b->acc = take(b, 4 * nq, "dq_accum");
    fill(b->q, 0, nq, st);
    fill(b->k, 4194319, nk, st);
    fill(b->v, 9437189, nk, st);
    fill(b->dout, 13631497, nq, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
}

/* grow the workspace to need bytes; 0 if that would pass the memory cap (the caller skips) */
static int ensure_ws(Bufs *b, int64_t need) {
    if (need <= b->ws_bytes) return 1;
    if (b->held - b->ws_bytes + need > MAX_BYTES) return 0;
    if (b->ws) CUDA_CHECK(cudaFree(b->ws));
    b->held -= b->ws_bytes;
    b->ws = take(b, need, "cuDNN workspace");
    b->ws_bytes = need;
    return 1;
}

static void bufs_free(Bufs *b) {
    void *p[] = {b->q, b->k, b->v, b->o, b->dout, b->dq, b->dk, b->dv, b->lse, b->ssum, b->acc, b->ws};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i]) CUDA_CHECK(cudaFree(p[i]));
    memset(b, 0, sizeof *b);
}

/* ================================================================ timing */
typedef void (*RunFn)(void *ctx);
typedef struct { double med, min; Samples s; } Timing;

static int cmp_d(const void *a, const void *b) { return *(const double *)a < *(const double *)b ? -1 : 1; }

static void summarize(Timing *t, double *ms, int n) {
    qsort(ms, (size_t)n, sizeof *ms, cmp_d);
    t->med = ms[n / 2];
    t->min = ms[0];
}

/* warm-ups, then iters calls queued back to back with an event pair around each (how the probe
 * that measured 604/539 timed, and how a training step runs them) */
static Timing time_b2b(RunFn run, void *ctx, int warmup, int iters, cudaStream_t st) {
    Timing t = {0};
    cudaEvent_t ev[2 * MAXIT];
    for (int i = 0; i < 2 * iters; i++) CUDA_CHECK(cudaEventCreate(&ev[i]));
    for (int i = 0; i < warmup; i++) run(ctx);
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (int i = 0; i < iters; i++) {
        CUDA_CHECK(cudaEventRecord(ev[2 * i], st));
        run(ctx);
        CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], st));
    }
    wait_sampling(ev[2 * iters - 1], &t.s);
    double ms[MAXIT];
    for (int i = 0; i < iters; i++) {
        float f;
        CUDA_CHECK(cudaEventElapsedTime(&f, ev[2 * i], ev[2 * i + 1]));
        ms[i] = f;
    }
    for (int i = 0; i < 2 * iters; i++) CUDA_CHECK(cudaEventDestroy(ev[i]));
    summarize(&t, ms, iters);
    return t;
}

/* NVIDIA's way: each call alone after an L2 flush and an idle gap (their loop makes fresh inputs and
 * starts the profiler between calls); 10 calls, median of the last 5 */
static Timing time_cold(RunFn run, void *ctx, double gap_ms, cudaStream_t st) {
    enum { N = 10, SKIP = 5 };
    Timing t = {0};
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    double ms[N];
    for (int i = 0; i < N; i++) {
        CUDA_CHECK(cudaMemsetAsync(flush_buf, 0, (size_t)FLUSH_BYTES, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        const struct timespec gap = {(time_t)(gap_ms / 1000), (long)(fmod(gap_ms, 1000.0) * 1e6)};
        nanosleep(&gap, NULL);
        CUDA_CHECK(cudaEventRecord(e0, st));
        run(ctx);
        CUDA_CHECK(cudaEventRecord(e1, st));
        Samples s = {0};
        wait_sampling(e1, i >= SKIP ? &t.s : &s);
        float f;
        CUDA_CHECK(cudaEventElapsedTime(&f, e0, e1));
        ms[i] = f;
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    summarize(&t, ms + SKIP, N - SKIP);
    return t;
}

/* ================================================================ FLOPs and the report line */
/* unmasked scores, top-left causal: query i sees keys 0..i */
static double nnz(const SdpaShape *p) {
    if (!p->causal) return (double)p->Sq * (double)p->Skv;
    const double s = (double)(p->Sq < p->Skv ? p->Sq : p->Skv);
    return s * (s + 1) / 2 + (p->Sq > p->Skv ? (double)(p->Sq - p->Skv) * (double)p->Skv : 0);
}
static double flops(const SdpaShape *p, int bwd) { return 4.0 * p->Hq * p->D * nnz(p) * (bwd ? 2.5 : 1.0); }

/* one line for people, one JSON line for scripts */
static void report(const SdpaShape *p, int bwd, const char *variant, const char *how, const Timing *t,
                   const char *engine) {
    const double tf = flops(p, bwd) / (t->med * 1e-3) / 1e12;
    printf("  %s %-14s %-5s %9.3f ms (min %9.3f) %6.1f TFLOP/s", bwd ? "bwd" : "fwd", variant, how, t->med, t->min, tf);
    if (engine) printf(" | %s", engine);
    if (t->s.n)
        printf(" | clk %.0f MHz (min %u) %.0f W limits:%s", t->s.clk / t->s.n, t->s.clk_min, t->s.pwr / t->s.n,
               why_str(t->s.why));
    printf("\n{\"what\":\"sdpa_rate\",\"sq\":%lld,\"skv\":%lld,\"hq\":%lld,\"hkv\":%lld,\"d\":%lld,\"causal\":%d,"
           "\"pass\":\"%s\",\"variant\":\"%s\",\"timing\":\"%s\",\"ms\":%.4f,\"tflops\":%.1f,\"engine\":\"%s\","
           "\"clk_mhz\":%.0f,\"power_w\":%.0f}\n",
           (long long)p->Sq, (long long)p->Skv, (long long)p->Hq, (long long)p->Hkv, (long long)p->D, p->causal,
           bwd ? "bwd" : "fwd", variant, how, t->med, tf, engine ? engine : "", t->s.n ? t->s.clk / t->s.n : 0,
           t->s.n ? t->s.pwr / t->s.n : 0);
    fflush(stdout);
}

/* ================================================================ ours: common/sdpa.c */
typedef struct { Sdpa *sd; const SdpaShape *p; Bufs *b; } Ours;
static void ours_fwd(void *c) {
    Ours *x = c;
    sdpa_fwd(x->sd, x->p, x->b->o, x->b->lse, x->b->q, x->b->k, x->b->v, x->b->ws, x->b->ws_bytes);
}
static void ours_bwd(void *c) {
    Ours *x = c;
    Bufs *b = x->b;
    sdpa_bwd(x->sd, x->p, b->dq, b->dk, b->dv, b->q, b->k, b->v, b->o, b->dout, b->lse, b->ssum, b->acc, b->ws,
             b->ws_bytes);
}

/* ================================================================ the graphs, rebuilt with choices */
/* A copy of sdpa.c's graph builders (same ops, uids and virtual tensors) with the layout of each
 * tensor group as a choice, so the variants differ from ours only where they say. */
typedef struct {
    int qo_hm, kv_hm, do_hm; /* head-major [H,S,D] (BHSD) instead of token-major [S,H,D]: Q,O,dQ / K,V,dK,dV / dO */
    int unified;             /* non-causal forward as the one SDPA_FWD op instead of the composite */
} Layout;

enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF, U_SKV, U_SQ, U_ONE,
       U_DO = 101, U_DQ, U_DK, U_DV, U_SOFTMAX_SUM = 201, U_DQ_ACCUM };

typedef struct {
    cudnnHandle_t h;
    Desc *d;                 /* every descriptor of the graph and its plans, destroyed together */
    int n, cap;
    int64_t vuid;            /* next virtual tensor uid */
    SdpaShape p;
    Layout lay;
    int bwd;
    Desc g;                  /* the finalized operation graph */
} Graph;

#define TRY(call) do { cudnnStatus_t s_ = (call); if (s_ != CUDNN_STATUS_SUCCESS) return s_; } while (0)

/* the graph owns d from now on (destroyed with it) */
static void keep(Graph *G, Desc d) {
    if (G->n == G->cap) {
        G->cap = G->cap ? 2 * G->cap : 256;
        G->d = realloc(G->d, (size_t)G->cap * sizeof(Desc));
        if (!G->d) DIE("out of host memory");
    }
    G->d[G->n++] = d;
}
static cudnnStatus_t mk(Graph *G, cudnnBackendDescriptorType_t t, Desc *out) {
    TRY(cudnnBackendCreateDescriptor(t, out));
    keep(G, *out);
    return CUDNN_STATUS_SUCCESS;
}
static cudnnStatus_t set_desc(Desc d, cudnnBackendAttributeName_t n, Desc v) {
    return cudnnBackendSetAttribute(d, n, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}
static cudnnStatus_t tensor(Graph *G, Desc *out, int64_t uid, cudnnDataType_t dt, const int64_t dims[4],
                            const int64_t strides[4], bool is_virtual, bool by_value) {
    const int64_t align = 16;
    TRY(mk(G, CUDNN_BACKEND_TENSOR_DESCRIPTOR, out));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
    TRY(cudnnBackendSetAttribute(*out, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
    return cudnnBackendFinalize(*out);
}
static cudnnStatus_t scalar(Graph *G, Desc *out, int64_t uid, cudnnDataType_t dt) {
    static const int64_t one[4] = {1, 1, 1, 1};
    return tensor(G, out, uid, dt, one, one, false, true);
}
static cudnnStatus_t virt(Graph *G, Desc *out, cudnnDataType_t dt, const int64_t dims[4], const int64_t str[4]) {
    return tensor(G, out, G->vuid++, dt, dims, str, true, false);
}
static cudnnStatus_t pointwise(Graph *G, Desc *op, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                               Desc x, Desc b, Desc t, Desc y) {
    Desc p;
    TRY(mk(G, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &p));
    TRY(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    TRY(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    if (axis >= 0) TRY(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
    TRY(cudnnBackendFinalize(p));
    TRY(mk(G, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x));
    if (b) TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b));
    if (t) TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y));
    return cudnnBackendFinalize(*op);
}
static cudnnStatus_t reduction(Graph *G, Desc *op, cudnnReduceTensorOp_t mode, Desc x, Desc y) {
    Desc r;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    const bool det = false;
    TRY(mk(G, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &r));
    TRY(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f));
    TRY(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode));
    TRY(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det));
    TRY(cudnnBackendFinalize(r));
    TRY(mk(G, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r));
    return cudnnBackendFinalize(*op);
}
static cudnnStatus_t matmul(Graph *G, Desc *op, Desc A, Desc B, Desc C) {
    Desc m;
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    TRY(mk(G, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &m));
    TRY(cudnnBackendSetAttribute(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f));
    TRY(cudnnBackendFinalize(m));
    TRY(mk(G, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, A));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, B));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, C));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m));
    return cudnnBackendFinalize(*op);
}
static cudnnStatus_t reshape(Graph *G, Desc *op, Desc x, Desc y) {
    TRY(mk(G, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, op));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x));
    TRY(set_desc(*op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y));
    return cudnnBackendFinalize(*op);
}

/* logical [1,H,S,D] over token-major [S,H,D] (hm 0, sdpa.c's bhsd()) or head-major [H,S,D] memory (hm 1);
 * tr: the same memory seen as [1,H,D,S] (K^T, V^T: sdpa.c's bhds()) */
static void view(int hm, int tr, int64_t H, int64_t S, int64_t D, int64_t d[4], int64_t s[4]) {
    d[0] = 1; d[1] = H; d[2] = tr ? D : S; d[3] = tr ? S : D;
    s[0] = S * H * D; s[1] = hm ? S * D : D;
    const int64_t row = hm ? D : H * D;
    s[2] = tr ? 1 : row; s[3] = tr ? row : 1;
}

static cudnnStatus_t mask(Graph *G, Desc x, Desc *ops, int *n, Desc *out) { /* top-left causal, as sdpa.c */
    const SdpaShape *p = &G->p;
    const int64_t sd[4] = {1, p->Hq, p->Sq, p->Skv}, ss[4] = {p->Hq * p->Sq * p->Skv, p->Sq * p->Skv, p->Skv, 1};
    Desc row, col, m, y, ninf;
    TRY(scalar(G, &ninf, U_NEGINF, CUDNN_DATA_FLOAT));
    TRY(virt(G, &row, CUDNN_DATA_INT32, sd, ss));
    TRY(virt(G, &col, CUDNN_DATA_INT32, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, x, NULL, NULL, row));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, x, NULL, NULL, col));
    TRY(virt(G, &m, CUDNN_DATA_BOOLEAN, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, m));
    TRY(virt(G, &y, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, x, ninf, m, y));
    *out = y;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t fwd_ops(Graph *G, Desc *ops, int *n) {
    const SdpaShape *p = &G->p;
    const Layout *L = &G->lay;
    int64_t d[4], s[4];
    Desc Q, K, V, O, ST, SC;
    view(L->qo_hm, 0, p->Hq, p->Sq, p->D, d, s);            TRY(tensor(G, &Q, U_Q, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->kv_hm, !L->unified, p->Hkv, p->Skv, p->D, d, s); TRY(tensor(G, &K, U_K, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->kv_hm, 0, p->Hkv, p->Skv, p->D, d, s);          TRY(tensor(G, &V, U_V, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->qo_hm, 0, p->Hq, p->Sq, p->D, d, s);            TRY(tensor(G, &O, U_O, CUDNN_DATA_BFLOAT16, d, s, false, false));
    const int64_t rd[4] = {1, p->Hq, p->Sq, 1}, rs[4] = {p->Hq * p->Sq, p->Sq, 1, 1};
    TRY(tensor(G, &ST, U_STATS, CUDNN_DATA_FLOAT, rd, rs, false, false));
    TRY(scalar(G, &SC, U_SCALE, CUDNN_DATA_FLOAT));
    if (L->unified) { /* the single SDPA op: K untransposed, no mask attribute exists in 9.19 */
        Desc *op = &ops[(*n)++];
        TRY(mk(G, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, op));
        TRY(set_desc(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, Q));
        TRY(set_desc(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, K));
        TRY(set_desc(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, V));
        TRY(set_desc(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, O));
        TRY(set_desc(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, ST));
        TRY(set_desc(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, SC));
        return cudnnBackendFinalize(*op);
    }
    const int64_t sd[4] = {1, p->Hq, p->Sq, p->Skv}, ss[4] = {p->Hq * p->Sq * p->Skv, p->Sq * p->Skv, p->Skv, 1};
    Desc S0, S1, S2, MX, SUB, EX, SUM, LG, P;
    TRY(virt(G, &S0, CUDNN_DATA_FLOAT, sd, ss));
    TRY(matmul(G, &ops[(*n)++], Q, K, S0));
    TRY(virt(G, &S1, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, S0, SC, NULL, S1));
    S2 = S1;
    if (p->causal) TRY(mask(G, S1, ops, n, &S2));
    TRY(virt(G, &MX, CUDNN_DATA_FLOAT, rd, rs));
    TRY(reduction(G, &ops[(*n)++], CUDNN_REDUCE_TENSOR_MAX, S2, MX));
    TRY(virt(G, &SUB, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, S2, MX, NULL, SUB));
    TRY(virt(G, &EX, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, -1, SUB, NULL, NULL, EX));
    TRY(virt(G, &SUM, CUDNN_DATA_FLOAT, rd, rs));
    TRY(reduction(G, &ops[(*n)++], CUDNN_REDUCE_TENSOR_ADD, EX, SUM));
    TRY(virt(G, &LG, CUDNN_DATA_FLOAT, rd, rs));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, -1, SUM, NULL, NULL, LG));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, -1, MX, LG, NULL, ST));
    TRY(virt(G, &P, CUDNN_DATA_BFLOAT16, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, -1, EX, SUM, NULL, P));
    return matmul(G, &ops[(*n)++], P, V, O);
}

static cudnnStatus_t gqa_matmul(Graph *G, Desc *ops, int *n, Desc A, Desc B, Desc out) {
    const SdpaShape *p = &G->p;
    if (p->Hq == p->Hkv) return matmul(G, &ops[(*n)++], A, B, out);
    Desc full;
    const int64_t fd[4] = {1, p->Hq, p->Skv, p->D}, fs[4] = {p->Hq * p->Skv * p->D, p->Skv * p->D, p->D, 1};
    TRY(virt(G, &full, CUDNN_DATA_BFLOAT16, fd, fs));
    TRY(matmul(G, &ops[(*n)++], A, B, full));
    return reduction(G, &ops[(*n)++], CUDNN_REDUCE_TENSOR_ADD, full, out);
}

static cudnnStatus_t bwd_ops(Graph *G, Desc *ops, int *n, cudnnDataType_t kview_dt) {
    const SdpaShape *p = &G->p;
    const Layout *L = &G->lay;
    const int64_t Hq = p->Hq, Hk = p->Hkv, Sq = p->Sq, Skv = p->Skv, D = p->D;
    int64_t d[4], s[4];
    Desc Q, KT, VT, O, dO, ST, SC, ONE, dQ, dK, dV;
    view(L->qo_hm, 0, Hq, Sq, D, d, s);  TRY(tensor(G, &Q, U_Q, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->kv_hm, 1, Hk, Skv, D, d, s); TRY(tensor(G, &KT, U_K, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->kv_hm, 1, Hk, Skv, D, d, s); TRY(tensor(G, &VT, U_V, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->qo_hm, 0, Hq, Sq, D, d, s);  TRY(tensor(G, &O, U_O, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->do_hm, 0, Hq, Sq, D, d, s);  TRY(tensor(G, &dO, U_DO, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->qo_hm, 0, Hq, Sq, D, d, s);  TRY(tensor(G, &dQ, U_DQ, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->kv_hm, 0, Hk, Skv, D, d, s); TRY(tensor(G, &dK, U_DK, CUDNN_DATA_BFLOAT16, d, s, false, false));
    view(L->kv_hm, 0, Hk, Skv, D, d, s); TRY(tensor(G, &dV, U_DV, CUDNN_DATA_BFLOAT16, d, s, false, false));
    const int64_t rd[4] = {1, Hq, Sq, 1}, rs[4] = {Hq * Sq, Sq, 1, 1};
    TRY(tensor(G, &ST, U_STATS, CUDNN_DATA_FLOAT, rd, rs, false, false));
    TRY(scalar(G, &SC, U_SCALE, CUDNN_DATA_FLOAT));
    TRY(scalar(G, &ONE, U_ONE, CUDNN_DATA_FLOAT));
    const int64_t sd[4] = {1, Hq, Sq, Skv}, ss[4] = {Hq * Sq * Skv, Sq * Skv, Skv, 1};
    const int64_t td[4] = {1, Hq, Skv, Sq}, ts[4] = {Hq * Sq * Skv, Sq * Skv, 1, Skv};
    Desc t0, t1, SSUM; /* softmax_sum = rowsum(dO * O) */
    const int64_t od[4] = {1, Hq, Sq, D}, os[4] = {Hq * Sq * D, Sq * D, Hq * D, 1};
    TRY(virt(G, &t0, CUDNN_DATA_FLOAT, od, os));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, dO, O, NULL, t0));
    TRY(virt(G, &t1, CUDNN_DATA_FLOAT, rd, rs));
    TRY(reduction(G, &ops[(*n)++], CUDNN_REDUCE_TENSOR_ADD, t0, t1));
    TRY(tensor(G, &SSUM, U_SOFTMAX_SUM, CUDNN_DATA_FLOAT, rd, rs, false, false));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, t1, ONE, NULL, SSUM));
    Desc S0, S1, S2, S3, P; /* P = exp(mask(scale Q K^T - stats)) */
    TRY(virt(G, &S0, CUDNN_DATA_FLOAT, sd, ss));
    TRY(matmul(G, &ops[(*n)++], Q, KT, S0));
    TRY(virt(G, &S1, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, S0, SC, NULL, S1));
    TRY(virt(G, &S2, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, S1, ST, NULL, S2));
    S3 = S2;
    if (p->causal) TRY(mask(G, S2, ops, n, &S3));
    TRY(virt(G, &P, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, -1, S3, NULL, NULL, P));
    Desc PT; /* dV = P^T dO */
    TRY(virt(G, &PT, CUDNN_DATA_BFLOAT16, td, ts));
    TRY(reshape(G, &ops[(*n)++], P, PT));
    TRY(gqa_matmul(G, ops, n, PT, dO, dV));
    Desc dP, u1, u2, dS; /* dS = scale * P * (dO V^T - softmax_sum) */
    TRY(virt(G, &dP, CUDNN_DATA_FLOAT, sd, ss));
    TRY(matmul(G, &ops[(*n)++], dO, VT, dP));
    TRY(virt(G, &u1, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, -1, dP, SSUM, NULL, u1));
    TRY(virt(G, &u2, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, u1, P, NULL, u2));
    TRY(virt(G, &dS, CUDNN_DATA_FLOAT, sd, ss));
    TRY(pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, -1, u2, SC, NULL, dS));
    Desc dST; /* dK = dS^T Q */
    TRY(virt(G, &dST, CUDNN_DATA_BFLOAT16, td, ts));
    TRY(reshape(G, &ops[(*n)++], dS, dST));
    TRY(gqa_matmul(G, ops, n, dST, Q, dK));
    Desc K, ACC; /* dQ = dS K through the fp32 accumulator */
    view(L->kv_hm, 0, Hk, Skv, D, d, s);
    TRY(virt(G, &K, kview_dt, d, s));
    TRY(reshape(G, &ops[(*n)++], KT, K));
    const int64_t ad[4] = {1, Hq, Sq, D}, as[4] = {Hq * Sq * D, Sq * D, D, 1};
    TRY(tensor(G, &ACC, U_DQ_ACCUM, CUDNN_DATA_FLOAT, ad, as, false, false));
    TRY(matmul(G, &ops[(*n)++], dS, K, ACC));
    return pointwise(G, &ops[(*n)++], CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, -1, ACC, NULL, NULL, dQ);
}

static void graph_free(Graph *G) {
    while (G->n > 0) cudnnBackendDestroyDescriptor(G->d[--G->n]);
    free(G->d);
    memset(G, 0, sizeof *G);
}

static cudnnStatus_t graph_try(Graph *G, cudnnDataType_t kview_dt) {
    Desc ops[64];
    int n = 0;
    TRY(G->bwd ? bwd_ops(G, ops, &n, kview_dt) : fwd_ops(G, ops, &n));
    TRY(mk(G, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &G->g));
    TRY(cudnnBackendSetAttribute(G->g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops));
    TRY(cudnnBackendSetAttribute(G->g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &G->h));
    return cudnnBackendFinalize(G->g);
}

/* the finalized op graph, or 0 (printed why); the backward tries an fp32 K view, then bf16, as sdpa.c */
static int graph_build(Graph *G, cudnnHandle_t h, const SdpaShape *p, Layout lay, int bwd) {
    for (int attempt = 0; attempt < 2; attempt++) {
        graph_free(G);
        *G = (Graph){.h = h, .vuid = 1000, .p = *p, .lay = lay, .bwd = bwd};
        const cudnnStatus_t st = graph_try(G, attempt ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT);
        if (st == CUDNN_STATUS_SUCCESS) return 1;
        if (!bwd || attempt) {
            char m[512] = {0};
            cudnnGetLastErrorString(m, sizeof m);
            printf("  %s graph not built: %s | %s\n", bwd ? "bwd" : "fwd", cudnnGetErrorString(st), m);
        }
    }
    graph_free(G);
    return 0;
}

/* ================================================================ engine configs and plans */
typedef struct {
    Desc plan;
    int64_t ws, engine;
    int nk;
    int64_t ktype[8], kval[8];
    char how[16];    /* "A#0": heuristics mode A's result 0; "tune" */
    double build_s;
} Cand;

static void cand_name(const Cand *c, char *out, size_t n) {
    int w = snprintf(out, n, "%s engine %lld knobs [", c->how, (long long)c->engine);
    for (int i = 0; i < c->nk && w > 0 && (size_t)w < n; i++)
        w += snprintf(out + w, n - (size_t)w, "%s%lld=%lld", i ? " " : "", (long long)c->ktype[i], (long long)c->kval[i]);
    if (w > 0 && (size_t)w < n) snprintf(out + w, n - (size_t)w, "] ws %.0f MiB", c->ws / (1024.0 * 1024));
}

/* an engine config's engine index and knob choices (24 = KERNEL_CFG) */
static void cfg_info(Graph *G, Desc cfg, Cand *c) {
    Desc eng, kc[8];
    int64_t cnt = 0, got = 0;
    c->engine = -1;
    if (mk(G, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng) == 0)
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &c->engine);
    for (int i = 0; i < 8; i++) CUDNN_CHECK(mk(G, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &kc[i]));
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &got, kc)) got = 0;
    c->nk = 0;
    for (int64_t i = 0; i < got && i < 8; i++) {
        cudnnBackendKnobType_t t;
        int64_t v = 0;
        if (cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &t) ||
            cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &v))
            continue;
        c->ktype[c->nk] = t;
        c->kval[c->nk++] = v;
    }
}

/* finalize (compile) a plan for cfg; 0 if this engine config cannot run the graph */
static int plan_of(Graph *G, Desc cfg, Cand *c) {
    Desc plan;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) return 0;
    const double t0 = now_s();
    if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &G->h) ||
        set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg) || cudnnBackendFinalize(plan)) {
        cudnnBackendDestroyDescriptor(plan);
        return 0;
    }
    c->build_s = now_s() - t0;
    int64_t cnt = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &c->ws));
    keep(G, plan);
    c->plan = plan;
    return 1;
}

static int same_cfg(const Cand *a, const Cand *b) {
    if (a->engine != b->engine || a->nk != b->nk) return 0;
    for (int i = 0; i < a->nk; i++)
        if (a->ktype[i] != b->ktype[i] || a->kval[i] != b->kval[i]) return 0;
    return 1;
}

/* every distinct engine config heuristics modes A, B and FALLBACK list that builds, in that order: the
 * first is the one sdpa.c takes (its order: A, then FALLBACK; B is extra) */
static int heuristic_cands(Graph *G, Cand *out, int max) {
    static const struct { cudnnBackendHeurMode_t mode; const char *name; } M[] = {
        {CUDNN_HEUR_MODE_A, "A"}, {CUDNN_HEUR_MODE_B, "B"}, {CUDNN_HEUR_MODE_FALLBACK, "F"}};
    int n = 0;
    printf("  %s heuristics:", G->bwd ? "bwd" : "fwd");
    for (int m = 0; m < 3; m++) {
        Desc heur;
        int64_t count = 0, got = 0;
        CUDNN_CHECK(mk(G, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
        if (set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, G->g) ||
            cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &M[m].mode) ||
            cudnnBackendFinalize(heur) ||
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL)) {
            printf(" %s: none;", M[m].name);
            continue;
        }
        Desc cfg[16];
        if (count > 16) count = 16;
        for (int64_t i = 0; i < count; i++) CUDNN_CHECK(mk(G, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
        if (count) CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg));
        printf(" %s: %lld", M[m].name, (long long)got);
        for (int64_t i = 0; i < got && n < max; i++) {
            Cand c = {0};
            cfg_info(G, cfg[i], &c);
            snprintf(c.how, sizeof c.how, "%s#%lld", M[m].name, (long long)i);
            int dup = 0;
            for (int j = 0; j < n; j++) dup |= same_cfg(&out[j], &c);
            if (dup) { printf(" (#%lld repeats)", (long long)i); continue; }
            if (!plan_of(G, cfg[i], &c)) { printf(" (#%lld e%lld does not build)", (long long)i, (long long)c.engine); continue; }
            out[n++] = c;
        }
        printf(";");
    }
    printf(" %d distinct plan(s)\n", n);
    return n;
}

/* engine base->engine with each value of each of its knobs (the others as in base): autotuning's
 * search space around the heuristics' pick. Appends the configs that build to out. */
static int tune_cands(Graph *G, const Cand *base, Cand *out, int n, int max, int tune_max) {
    Desc eng, ki[32];
    int64_t nki = 0, cnt = 0;
    CUDNN_CHECK(mk(G, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    CUDNN_CHECK(set_desc(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, G->g));
    CUDNN_CHECK(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &base->engine));
    if (cudnnBackendFinalize(eng)) return n;
    for (int i = 0; i < 32; i++) CUDNN_CHECK(mk(G, CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, &ki[i]));
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_KNOB_INFO, CUDNN_TYPE_BACKEND_DESCRIPTOR, 32, &nki, ki)) nki = 0;
    for (int64_t k = 0; k < nki; k++) {
        cudnnBackendKnobType_t t;
        int64_t lo = 0, hi = 0, step = 1, tried = 0, built = 0;
        if (cudnnBackendGetAttribute(ki[k], CUDNN_ATTR_KNOB_INFO_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &t) ||
            cudnnBackendGetAttribute(ki[k], CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &lo) ||
            cudnnBackendGetAttribute(ki[k], CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &hi) ||
            cudnnBackendGetAttribute(ki[k], CUDNN_ATTR_KNOB_INFO_STRIDE, CUDNN_TYPE_INT64, 1, &cnt, &step))
            continue;
        if (step < 1) step = 1;
        const double t0 = now_s();
        for (int64_t v = lo; v <= hi && tried < tune_max && n < max; v += step, tried++) {
            Cand c = *base;
            int at = -1;
            for (int i = 0; i < c.nk; i++) if (c.ktype[i] == t) at = i;
            if (at < 0 && c.nk < 8) { at = c.nk++; c.ktype[at] = t; }
            if (at < 0 || c.kval[at] == v) continue;
            c.kval[at] = v;
            Desc choice[8], cfg;
            for (int i = 0; i < c.nk; i++) {
                const cudnnBackendKnobType_t ti = (cudnnBackendKnobType_t)c.ktype[i];
                CUDNN_CHECK(mk(G, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &choice[i]));
                CUDNN_CHECK(cudnnBackendSetAttribute(choice[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &ti));
                CUDNN_CHECK(cudnnBackendSetAttribute(choice[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c.kval[i]));
                CUDNN_CHECK(cudnnBackendFinalize(choice[i]));
            }
            CUDNN_CHECK(mk(G, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
            CUDNN_CHECK(set_desc(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, eng));
            CUDNN_CHECK(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, c.nk, choice));
            if (cudnnBackendFinalize(cfg) || !plan_of(G, cfg, &c)) continue;
            snprintf(c.how, sizeof c.how, "tune");
            out[n++] = c;
            built++;
        }
        printf("  tune engine %lld knob %d in [%lld, %lld] step %lld: %lld tried, %lld built (%.1f s)\n",
               (long long)base->engine, (int)t, (long long)lo, (long long)hi, (long long)step, (long long)tried,
               (long long)built, now_s() - t0);
    }
    return n;
}

/* run one of this file's plans on the same handle, buffers and scalars as sdpa.c would */
typedef struct { Sdpa *sd; Graph *G; const Cand *c; Bufs *b; } Exec;
static void exec_plan(void *ctx) {
    const Exec *x = ctx;
    Bufs *b = x->b;
    float scale = (float)(1.0 / sqrt((double)x->G->p.D)), neginf = -INFINITY, one = 1.f;
    int64_t fu[7] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEGINF};
    void *fp[7] = {b->q, b->k, b->v, b->o, b->lse, &scale, &neginf};
    int64_t bu[14] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_DO, U_DQ, U_DK, U_DV, U_ONE, U_SOFTMAX_SUM, U_DQ_ACCUM, U_NEGINF};
    void *bp[14] = {b->q, b->k, b->v, b->o, b->lse, &scale, b->dout, b->dq, b->dk, b->dv, &one, b->ssum, b->acc, &neginf};
    const int causal = x->G->p.causal && !x->G->lay.unified, n = x->G->bwd ? 13 + causal : 6 + causal;
    Desc vp;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, x->G->bwd ? bu : fu));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, x->G->bwd ? bp : fp));
    CUDNN_CHECK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b->ws));
    CUDNN_CHECK(cudnnBackendFinalize(vp));
    CUDNN_CHECK(cudnnBackendExecute(x->sd->handle, x->c->plan, vp));
    cudnnBackendDestroyDescriptor(vp);
}

/* ================================================================ one shape */
typedef struct {
    const char *name, *what;
    Layout lay;
    int fwd, bwd;            /* which passes this variant changes */
} Variant;

static const Variant VARIANTS[] = {
    {"bshd", "ours rebuilt here: every tensor token-major [S,H,D] (must time like 'ours')", {0, 0, 0, 0}, 1, 1},
    {"bshd+dO-bhsd", "NVIDIA's layout: as ours but dO head-major [H,S,D] (torch.randn(o.shape))", {0, 0, 1, 0}, 0, 1},
    {"bhsd", "every tensor head-major [H,S,D]", {1, 1, 1, 0}, 1, 1},
    {"unified", "non-causal fwd as the single SDPA_FWD op (cudnn-frontend's pick without a mask)", {0, 0, 0, 1}, 1, 0},
};

static const struct { int64_t s; int causal; double fwd_ms, bwd_ms, fwd, bwd; } NV[] = { /* 64/8 heads, D 128 */
    {16384, 1, 6.531, 19.002, 673, 579}, {32768, 1, 25.566, 75.688, 688, 581},
    {16384, 0, 12.524, 35.947, 702, 612}, {32768, 0, 50.769, 153.841, 693, 572}};

static double t_start;
static int over_budget(const Opts *o) {
    static int said;
    if (now_s() - t_start < o->budget_s) return 0;
    if (!said++) printf("  (--budget-s %.0f used up: the rest is skipped)\n", o->budget_s);
    return 1;
}

/* time every candidate of a graph back to back, then the fastest NVIDIA's way; returns the best index */
static int time_cands(const Opts *o, Sdpa *sd, Graph *G, Cand *c, int n, Bufs *b, const char *variant, int warmup,
                      int iters, cudaStream_t st) {
    int best = -1;
    double best_ms = 0;
    for (int i = 0; i < n && !over_budget(o); i++) {
        char name[192];
        cand_name(&c[i], name, sizeof name);
        if (!ensure_ws(b, c[i].ws)) { printf("  %s: skipped, workspace past %.0f GiB\n", name, MAX_BYTES / GIB); continue; }
        Exec x = {sd, G, &c[i], b};
        const Timing t = time_b2b(exec_plan, &x, warmup, iters, st);
        report(&G->p, G->bwd, variant, "b2b", &t, name);
        if (best < 0 || t.med < best_ms) { best = i; best_ms = t.med; }
    }
    return best;
}

static void run_variant(const Opts *o, Sdpa *sd, const Variant *v, const SdpaShape *p, Bufs *b, cudaStream_t st) {
    enum { MAXC = 96 };
    Cand fc[MAXC], bc[MAXC];
    Graph F = {0}, B = {0};
    printf(" variant %s: %s\n", v->name, v->what);
    /* the forward of this layout always runs: the backward needs its O and LSE */
    if (!graph_build(&F, sd->handle, p, v->lay, 0)) return;
    int nf = heuristic_cands(&F, fc, MAXC);
    if (nf && v->fwd && o->fwd) {
        int best = time_cands(o, sd, &F, fc, nf, b, v->name, o->warmup, o->iters, st);
        if (o->tune && !strcmp(v->name, "bshd") && best >= 0 && !over_budget(o)) {
            const int n0 = nf;
            for (int i = 0; i < n0; i++) nf = tune_cands(&F, &fc[i], fc, nf, MAXC, o->tune_max);
            const int bt = time_cands(o, sd, &F, fc + n0, nf - n0, b, "bshd-tune", 1, 3, st);
            if (bt >= 0) best = n0 + bt;
        }
        if (best >= 0 && !over_budget(o)) { /* the fastest again, NVIDIA's way */
            char name[192];
            cand_name(&fc[best], name, sizeof name);
            Exec x = {sd, &F, &fc[best], b};
            const Timing t = time_cold(exec_plan, &x, o->gap_ms, st);
            report(p, 0, v->name, "cold", &t, name);
        }
    }
    if (v->bwd && o->bwd && nf && !over_budget(o) && graph_build(&B, sd->handle, p, v->lay, 1)) {
        if (ensure_ws(b, fc[0].ws)) { /* O, LSE from this layout's forward */
            Exec x = {sd, &F, &fc[0], b};
            exec_plan(&x);
        }
        const int nb = heuristic_cands(&B, bc, MAXC);
        int best = time_cands(o, sd, &B, bc, nb, b, v->name, o->warmup, o->iters, st);
        int n = nb;
        if (o->tune && !strcmp(v->name, "bshd") && best >= 0 && !over_budget(o)) {
            for (int i = 0; i < nb; i++) n = tune_cands(&B, &bc[i], bc, n, MAXC, o->tune_max);
            const int bt = time_cands(o, sd, &B, bc + nb, n - nb, b, "bshd-tune", 1, 3, st);
            if (bt >= 0) best = nb + bt;
        }
        if (best >= 0 && !over_budget(o)) {
            char name[192];
            cand_name(&bc[best], name, sizeof name);
            Exec x = {sd, &B, &bc[best], b};
            const Timing t = time_cold(exec_plan, &x, o->gap_ms, st);
            report(p, 1, v->name, "cold", &t, name);
        }
    }
    graph_free(&B);
    graph_free(&F);
}

static void run_case(const Opts *o, Sdpa *sd, const SdpaShape *p, cudaStream_t st) {
    printf("\n== Sq %lld x Skv %lld, heads %lld/%lld, D %lld, %s: fwd %.3g FLOP, bwd %.3g FLOP (NVIDIA's convention)\n",
           (long long)p->Sq, (long long)p->Skv, (long long)p->Hq, (long long)p->Hkv, (long long)p->D,
           p->causal ? "causal (top-left)" : "no mask", flops(p, 0), flops(p, 1));
    for (size_t i = 0; i < sizeof NV / sizeof *NV; i++)
        if (p->Hq == 64 && p->Hkv == 8 && p->D == 128 && p->Sq == NV[i].s && p->Skv == NV[i].s && p->causal == NV[i].causal)
            printf("   NVIDIA H200 cuDNN 9.19 (CUPTI, cold): fwd %.3f ms %.0f TFLOP/s, bwd %.3f ms %.0f TFLOP/s\n",
                   NV[i].fwd_ms, NV[i].fwd, NV[i].bwd_ms, NV[i].bwd);
    char err[256];
    if (!sdpa_shape_ok(p, err, sizeof err)) { printf("  skipped: %s\n", err); return; }
    Bufs b;
    bufs_alloc(&b, p, st);
    const int64_t fws = sdpa_fwd_workspace(sd, p), bws = o->bwd ? sdpa_bwd_workspace(sd, p) : 0;
    if (!ensure_ws(&b, fws > bws ? fws : bws)) DIE("sdpa.c's workspace passes %.0f GiB", MAX_BYTES / GIB);
    printf("  GPU memory held for this shape: %.2f GiB\n", b.held / GIB);
    Ours x = {sd, p, &b};
    /* the forward first in any case: the backward reads its O and LSE */
    Timing t = time_b2b(ours_fwd, &x, o->warmup, o->iters, st);
    if (o->fwd) {
        report(p, 0, "ours", "b2b", &t, "sdpa.c: heuristics A then F, first plan that builds");
        t = time_cold(ours_fwd, &x, o->gap_ms, st);
        report(p, 0, "ours", "cold", &t, NULL);
    }
    if (o->bwd) {
        t = time_b2b(ours_bwd, &x, o->warmup, o->iters, st);
        report(p, 1, "ours", "b2b", &t, "sdpa.c: heuristics A then F, first plan that builds");
        t = time_cold(ours_bwd, &x, o->gap_ms, st);
        report(p, 1, "ours", "cold", &t, NULL);
    }
    for (size_t i = 0; !o->ours_only && i < sizeof VARIANTS / sizeof *VARIANTS && !over_budget(o); i++) {
        const Variant *v = &VARIANTS[i];
        if (v->lay.unified && (p->causal || !o->fwd)) continue; /* no causal attribute on the SDPA_FWD op */
        if ((!v->fwd || !o->fwd) && (!v->bwd || !o->bwd)) continue;
        run_variant(o, sd, v, p, &b, st);
    }
    bufs_free(&b);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const Opts o = parse(argc, argv);
    t_start = now_s();
    Gpu g;
    gpu_init(&g, 0);
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("sdpa_rate: %s, %d SMs, CUDA driver %d runtime %d, cuDNN %zu; inputs %s; b2b: %d warm-up + %d timed, "
           "cold: 10 calls after a 256 MiB L2 flush and %.0f ms idle, median of the last 5\n",
           g.name, g.sms, drv, rt, cudnnGetVersion(), o.fill, o.warmup, o.iters, o.gap_ms);
    printf("TFLOP/s as NVIDIA counts them: fwd 4*Hq*D*nnz, bwd 2.5x fwd; nnz = Sq*Skv, causal S(S+1)/2\n");
    nvml_open(g.device);
    Sdpa sd;
    sdpa_init(&sd, g.stream);
    sd.verbose = 1;
    make_pattern(o.fill, g.stream);
    flush_buf = gpu_malloc(FLUSH_BYTES, "L2 flush");
    if (o.hq) {
        const SdpaShape p = {o.hq, o.hkv, o.sq, o.skv, o.hd, o.causal, 0};
        run_case(&o, &sd, &p, g.stream);
    } else {
        /* NVIDIA's Llama 3.1 shapes, then stage 5's ring blocks for Qwen3-32B at 1M tokens on 8 ranks,
         * one head group (64/8 heads in 8 groups): 2c = 131072 tokens a rank, c = 65536 (common/zigzag.c) */
        const SdpaShape all[] = {
            {64, 8, 16384, 16384, o.hd, 1, 0},    {64, 8, 32768, 32768, o.hd, 1, 0},
            {64, 8, 32768, 32768, o.hd, 0, 0},    /* NVIDIA's no-mask figure: what ring off-diagonals could reach */
            {8, 1, 131072, 131072, o.hd, 1, 0},   /* ring step 0: causal diagonal block */
            {8, 1, 131072, 65536, o.hd, 0, 0},    /* steps 1..r: all queries x the source's head chunk */
            {8, 1, 65536, 131072, o.hd, 0, 0}};   /* steps > r: the tail queries x all the source's K/V */
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) run_case(&o, &sd, &all[i], g.stream);
    }
    printf("\nsdpa_rate done in %.1f s\n", now_s() - t_start);
    sdpa_destroy(&sd);
    return 0;
}
