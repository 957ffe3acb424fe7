/* gdn_rate.c -- how long the gated delta rule's kernels take, plain (token by token, kernels/gdn.cu's
 * reference) and tiled (the same recurrence with its inputs staged a tile of tokens ahead), at the
 * stages' shapes: the forward (with its kept states), the maps (context parallelism), the backward and
 * its c_only form. Default shape: Qwen3.5-9B's linear layer (16 key heads, 32 value heads, 128 x 128).
 * The chunk between kept states is the stages' (deltanet_chunk of the sequence).
 *
 * What bounds it: a head's state is dv x dk fp32 (64 KB) and a token changes all of it, so the
 * recurrence does about 6 dv dk FLOPs a token and head forward (u = S k, the update, o = S q): at 32K
 * tokens and 32 heads, 0.1 TFLOP, a few ms of the H200's fp32 rate. The plain kernels wait on memory
 * once per token instead; the backward also writes and reads back every state of a chunk (dv dk x 4
 * bytes a token and head: 2 MB a token at this shape), which the tiled form does not change.
 *
 * --rule chunked times kernels/gdn_chunked.cu instead (the chunked form on tensor cores,
 * docs/chunked_delta_rule.md), in both its precisions (exact: every operand that is not a bf16 input
 * split into two tf32 numbers; fast: P, dP, dL and dY one tf32 number), and prints each call's FLOPs
 * and the rate they make: the chunked algorithm's matrix products as §10 of that page counts them
 * (forward about 91 K MAC a token and value head at 128 x 128, backward about 230 K: what any chunked
 * kernel does, without the recomputation or the split operands' extra products), 2 FLOPs a MAC.
 *
 *   ./build/gdn_rate [--seq 8192,32768] [--hk 16 --hv 32 --dk 128 --dv 128] [--iters 5] [--tile 8|16]
 *                    [--rule plain|tiled|chunked|all]
 * (--tile: the tiled kernels' tokens a tile; by default 16 where the grid stays resident, else 8;
 * --rule: which kernels; by default plain and tiled, as before; all: the three)
 * Each line: ms a call (median of --iters after 2 warm-up calls, CUDA events), and ns a token.
 * With GDN_CHUNKED_PROFILE set, each chunked measurement is followed by one more call with every kernel
 * timed on its own (gdn_chunked_profile): the time by kernel (prep, pass, back, grad). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "../common/check.h"
#include "../common/deltanet.h"
#include "../common/safetensors.h"
#include "../kernels/kernels.h"


#define MAXSEQ 16

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void *dev(size_t n) {
    void *p;
    CUDA_CHECK(cudaMalloc(&p, n));
    return p;
}

static void *up_bf16(int64_t n, double scale) {
    uint16_t *h = xmalloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16((float)(scale * (2 * urand() - 1)));
    void *d = dev((size_t)n * 2);
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float *up_f32(int64_t n, double lo, double hi) {
    float *h = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = (float)(lo + (hi - lo) * urand());
    float *d = dev((size_t)n * 4);
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * 4, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    bf16_t *qkv, *o, *dout, *dqkv;
    float *g, *beta, *rq, *rk, *states, *scratch, *maps, *dq, *dk, *dg, *dbeta, *dS;
    int32_t *pos;
    int64_t S, Hk, Hv, dk_, dv, chunk;
    int chunked; /* the chunked kernels (gdn_chunked.cu) */
} Bench;

/* which kernel: 0 forward, 1 maps, 2 backward, 3 backward c_only */
static void call(const Bench *b, int which, cudaStream_t st) {
    if (b->chunked) {
        if (which == 0)
            gdn_chunked_fwd(b->o, b->states, NULL, b->qkv, b->g, b->beta, b->rq, b->rk, b->pos, b->S, b->Hk, b->Hv, b->dk_,
                            b->dv, b->chunk, st);
        else if (which == 1)
            gdn_chunked_maps(b->maps, b->qkv, b->g, b->beta, b->rq, b->rk, b->pos, b->S, b->Hk, b->Hv, b->dk_, b->dv, st);
        else
            gdn_chunked_bwd(b->dq, b->dk, b->dqkv, b->dg, b->dbeta, b->dS, b->dout, b->states, b->scratch, b->qkv, b->g,
                            b->beta, b->rq, b->rk, b->pos, b->S, b->Hk, b->Hv, b->dk_, b->dv, b->chunk, which == 3, st);
        return;
    }
    switch (which) {
    case 0:
        gdn_rule_fwd(b->o, b->states, NULL, b->qkv, b->g, b->beta, b->rq, b->rk, b->pos, b->S, b->Hk, b->Hv, b->dk_, b->dv,
                     b->chunk, st);
        break;
    case 1:
        gdn_rule_maps(b->maps, b->qkv, b->g, b->beta, b->rq, b->rk, b->pos, b->S, b->Hk, b->Hv, b->dk_, b->dv, st);
        break;
    default:
        gdn_rule_bwd(b->dq, b->dk, b->dqkv, b->dg, b->dbeta, b->dS, b->dout, b->states, b->scratch, b->qkv, b->g, b->beta,
                     b->rq, b->rk, b->pos, b->S, b->Hk, b->Hv, b->dk_, b->dv, b->chunk, which == 3, st);
    }
}

static float time_ms(const Bench *b, int which, int iters, cudaStream_t st) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float t[64];
    for (int i = 0; i < 2; i++) call(b, which, st);
    for (int i = 0; i < iters; i++) {
        CUDA_CHECK(cudaEventRecord(e0, st));
        call(b, which, st);
        CUDA_CHECK(cudaEventRecord(e1, st));
        CUDA_CHECK(cudaEventSynchronize(e1));
        CUDA_CHECK(cudaEventElapsedTime(&t[i], e0, e1));
    }
    qsort(t, (size_t)iters, sizeof t[0], cmp_f);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return t[iters / 2];
}

/* the chunked algorithm's multiply-adds for one chunk of C tokens and one value head
 * (docs/chunked_delta_rule.md §10): which 0 forward, 1 maps, 2 backward, 3 backward c_only */
static double chunk_macs(int which, double C, double dk, double dv) {
    const double kk = C * C * dk, qk = C * C * dk, uw = C * C * (dv + dk), ws = C * dk * dv, dk_ = C * dv * dk,
                 qs = C * dk * dv, pd = C * C * dv;
    switch (which) {
    case 0: return kk + qk + uw + ws + dk_ + qs + pd;
    case 1: return kk + uw + ws + dk_ + C * dk * dk * 2; /* B's rows and M's: the state pass on dv + dk rows */
    case 3: return kk + qk + C * C * dk + C * dk * dv + C * C * dv + 2 * C * dv * dk; /* A, P, W; dD; dS */
    default: /* recompute A, Q K^T, U, W, D; dD; dS_0; dP and dq; dk from P and the end state; dW; T^T dU, T^T dW;
              * dL; dk from dL */
        return kk + qk + uw + ws + (C * dk * dv + C * C * dv) + 2 * C * dv * dk + (C * C * dv + C * dv * dk + C * C * dk) +
               (C * C * dk + C * dv * dk) + C * dv * dk + C * C * (dv + dk) + C * C * (dv + dk) + 2 * C * C * dk;
    }
}

static void run(int64_t S, int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, int iters, int rules, cudaStream_t st) {
    Bench b = {.S = S, .Hk = Hk, .Hv = Hv, .dk_ = dk, .dv = dv, .chunk = deltanet_chunk(S)};
    const int64_t C = 2 * Hk * dk + Hv * dv, ms = Hv * dv * dk;
    b.qkv = up_bf16(S * C, 1.0);
    b.dout = up_bf16(S * Hv * dv, 1.0);
    b.o = dev((size_t)(S * Hv * dv) * 2);
    b.dqkv = dev((size_t)(S * C) * 2);
    b.g = up_f32(S * Hv, -0.3, -0.01);
    b.beta = up_f32(S * Hv, 0.05, 0.95);
    b.rq = dev((size_t)(S * Hk) * 4);
    b.rk = dev((size_t)(S * Hk) * 4);
    gdn_l2_fwd(b.rq, b.qkv, S, Hk, dk, C, 0, st);
    gdn_l2_fwd(b.rk, b.qkv, S, Hk, dk, C, Hk * dk, st);
    int32_t *pos = xmalloc((size_t)S * 4);
    for (int64_t t = 0; t < S; t++) pos[t] = (int32_t)t; /* one document */
    b.pos = dev((size_t)S * 4);
    CUDA_CHECK(cudaMemcpy(b.pos, pos, (size_t)S * 4, cudaMemcpyHostToDevice));
    free(pos);
    b.states = dev((size_t)((S + b.chunk - 1) / b.chunk * ms) * 4);
    b.scratch = dev((size_t)gdn_scratch_floats(Hv, dk, dv, b.chunk) * 4);
    b.maps = dev((size_t)(Hv * (dv + dk) * dk) * 4);
    b.dq = dev((size_t)(S * Hk * dk) * 4);
    b.dk = dev((size_t)(S * Hk * dk) * 4);
    b.dg = dev((size_t)(S * Hv) * 4);
    b.dbeta = dev((size_t)(S * Hv) * 4);
    b.dS = dev((size_t)ms * 4);
    CUDA_CHECK(cudaMemset(b.dS, 0, (size_t)ms * 4));
    static const char *names[] = {"forward", "maps", "backward", "backward c_only"};
    for (int plain = 1; plain >= 0; plain--) {
        if (!(rules & (plain ? 1 : 2))) continue;
        gdn_rule_plain(plain);
        for (int w = 0; w < 4; w++) {
            const float t = time_ms(&b, w, iters, st);
            printf("gdn_rate: S %lld Hk %lld Hv %lld dk %lld dv %lld chunk %lld  %-6s %-16s %9.3f ms  %7.1f ns a token\n",
                   (long long)S, (long long)Hk, (long long)Hv, (long long)dk, (long long)dv, (long long)b.chunk,
                   plain ? "plain" : "tiled", names[w], t, 1e6 * t / (double)S);
            fflush(stdout);
        }
    }
    gdn_rule_plain(0);
    if (rules & 4) {
        b.chunked = 1;
        const double chunks = (double)((S + 63) / 64) * (double)Hv;
        for (int exact = 1; exact >= 0; exact--) {
            gdn_chunked_precision(exact);
            for (int w = 0; w < 4; w++) {
                const float t = time_ms(&b, w, iters, st);
                const double flop = 2 * chunks * chunk_macs(w, 64, (double)dk, (double)dv);
                printf("gdn_rate: S %lld Hk %lld Hv %lld dk %lld dv %lld chunk %lld  %-13s %-16s %9.3f ms  %7.1f ns a token  "
                       "%.3e FLOP  %6.1f TFLOP/s\n",
                       (long long)S, (long long)Hk, (long long)Hv, (long long)dk, (long long)dv, (long long)b.chunk,
                       exact ? "chunked/exact" : "chunked/fast", names[w], t, 1e6 * t / (double)S, flop, flop / (t * 1e-3) / 1e12);
                fflush(stdout);
                if (getenv("GDN_CHUNKED_PROFILE")) { /* one call more, each kernel timed: where the time goes */
                    gdn_chunked_profile(1);
                    call(&b, w, st);
                    CUDA_CHECK(cudaStreamSynchronize(st));
                    char tag[96];
                    snprintf(tag, sizeof tag, "S %lld Hv %lld %s %s", (long long)S, (long long)Hv, exact ? "exact" : "fast", names[w]);
                    gdn_chunked_profile_print(tag);
                    gdn_chunked_profile(0);
                }
            }
        }
        gdn_chunked_precision(1);
        b.chunked = 0;
    }
    void *ptrs[] = {b.qkv, b.dout, b.o, b.dqkv, b.g, b.beta, b.rq, b.rk, b.pos, b.states, b.scratch, b.maps, b.dq, b.dk,
                    b.dg, b.dbeta, b.dS};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) CUDA_CHECK(cudaFree(ptrs[i]));
}

int main(int argc, char **argv) {
    int64_t seq[MAXSEQ] = {8192, 32768}, nseq = 2, Hk = 16, Hv = 32, dk = 128, dv = 128;
    int iters = 5, rules = 3; /* 1 plain, 2 tiled, 4 chunked */
    longctx_prog = "gdn_rate"; /* bad input says "gdn_rate: ...", no source line */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: gdn_rate [--seq 8192,32768] [--hk 16] [--hv 32] [--dk 128] [--dv 128] [--iters 5] [--tile 8|16] "
                   "[--rule plain|tiled|chunked|all]\n");
            return 0;
        }
        if (!v) STOP("%s needs a value (--help)", a);
        char *end;
        if (!strcmp(a, "--rule")) {
            rules = !strcmp(v, "plain") ? 1 : !strcmp(v, "tiled") ? 2 : !strcmp(v, "chunked") ? 4 : !strcmp(v, "all") ? 7 : 0;
            if (!rules) STOP("--rule takes plain, tiled, chunked or all (%s)", v);
        } else if (!strcmp(a, "--seq")) {
            nseq = 0;
            for (const char *s = v;; s = end + 1) {
                if (nseq == MAXSEQ) STOP("--seq takes at most %d lengths (%s)", MAXSEQ, v);
                seq[nseq] = strtoll(s, &end, 10);
                if (end == s || (*end && *end != ',') || seq[nseq] < 1 || seq[nseq] > (1 << 22))
                    STOP("--seq takes lengths of 1 to 4194304 tokens, comma-separated (%s)", v);
                nseq++;
                if (!*end) break;
            }
        } else {
            const long long x = strtoll(v, &end, 10);
            if (*end || x < 1 || x > 4096) STOP("%s takes a number of 1 to 4096 (%s)", a, v);
            if (!strcmp(a, "--hk")) Hk = x;
            else if (!strcmp(a, "--hv")) Hv = x;
            else if (!strcmp(a, "--dk")) dk = x;
            else if (!strcmp(a, "--dv")) dv = x;
            else if (!strcmp(a, "--iters")) iters = (int)(x < 64 ? x : 64);
            else if (!strcmp(a, "--tile")) {
                if (x != 8 && x != 16) STOP("--tile takes 8 or 16 (%s)", v);
                gdn_rule_tile((int)x);
            }
            else STOP("unknown option %s (--help)", a);
        }
        i++;
    }
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) STOP("it times GPU kernels, and finds no usable GPU here");
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreate(&st));
    for (int64_t i = 0; i < nseq; i++) run(seq[i], Hk, Hv, dk, dv, iters, rules, st);
    CUDA_CHECK(cudaStreamDestroy(st));
    return 0;
}
