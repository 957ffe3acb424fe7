/* gdn_emu.h -- the few CUDA features kernels/gdn_chunked.cu uses, emulated on the CPU, so that its
 * kernels run (slowly, exactly as written) on a machine with no GPU: `make test-gdn-emu` compiles
 * kernels/gdn_chunked.cu as C++ with GDN_EMU defined and runs tests/test_gdn_chunked.c against it.
 *
 * A block's threads are fibers (ucontext) run one at a time, each until it waits at a barrier:
 * __syncthreads() for the block, and the warp's own barrier inside every warp-collective operation
 * (mma.sync, shuffles), where the last lane to arrive computes every lane's result. The tensor core's
 * mma.m16n8k8 (tf32 in, fp32 accumulate) is computed from the fragment layout that the kernel file
 * states (PTX ISA); tf32 rounding (cvt.rna) and bf16 conversion are done bit by bit. Shared memory is
 * filled with NaNs before each block, so a read of something never written shows.
 *
 * What it cannot show: whether that layout is the hardware's, races (threads run in one fixed order),
 * speed, and resource limits. docs/chunked_delta_rule.md §12 says what a GPU session checks first. */
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#include "../kernels/kernels.h"

/* CUDA's decorations mean nothing here */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define KCHECK() ((void)0)

namespace emu {
struct Thread {
    ucontext_t ctx;
    uint3 tid;
    bool done;
};
struct Block {
    uint3 bid;
    dim3 bdim, gdim;
    int n = 0, cur = 0;
    std::vector<Thread> th;
    std::vector<unsigned char> smem;
    ucontext_t sched;
    int bar_n = 0;
    long bar_gen = 0;
    int wn[32] = {};
    long wgen[32] = {};
    uint32_t in[32][32][6];  /* each lane's operands of a warp operation */
    float out[32][32][4];    /* and its results */
    std::function<void()> body;
};
inline Block *&blk() {
    static Block *b = nullptr;
    return b;
}
inline void yield() {
    Block *b = blk();
    swapcontext(&b->th[b->cur].ctx, &b->sched);
}
inline void syncthreads() {
    Block *b = blk();
    const long gen = b->bar_gen;
    if (++b->bar_n == b->n) {
        b->bar_n = 0, b->bar_gen++;
        return;
    }
    while (b->bar_gen == gen) yield();
}
/* the warp's barrier; the last lane to arrive runs last(warp) first */
template <class F> void warp_sync_last(F last) {
    Block *b = blk();
    const int w = b->cur / 32;
    const long gen = b->wgen[w];
    if (++b->wn[w] == 32) {
        last(w);
        b->wn[w] = 0, b->wgen[w]++;
        return;
    }
    while (b->wgen[w] == gen) yield();
}
inline int lane() { return blk()->cur & 31; }
inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
inline void tramp() {
    Block *b = blk();
    b->body();
    b->th[b->cur].done = true;
}
/* which thread runs u-th in a round: GDN_EMU_ORDER=reverse runs the last first, =shuffle a new random
 * order every round (a missing barrier shows in some order as a read of what another warp has not yet
 * written, or has already overwritten) */
inline int order(int u, int n) {
    static int mode = -1;
    static std::vector<int> perm;
    static uint64_t s = 0x2545F4914F6CDD1Dull;
    if (mode < 0) {
        const char *e = getenv("GDN_EMU_ORDER");
        mode = !e ? 0 : !strcmp(e, "reverse") ? 1 : !strcmp(e, "shuffle") ? 2 : 0;
    }
    if (mode == 0) return u;
    if (mode == 1) return n - 1 - u;
    if (u == 0) { /* a new round: Fisher-Yates */
        perm.resize((size_t)n);
        for (int i = 0; i < n; i++) perm[(size_t)i] = i;
        for (int i = n - 1; i > 0; i--) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            const int j = (int)(s % (uint64_t)(i + 1)), x = perm[(size_t)i];
            perm[(size_t)i] = perm[(size_t)j], perm[(size_t)j] = x;
        }
    }
    return perm[(size_t)u];
}
/* one block: its threads as fibers, run round by round until every one has returned */
inline void run_block(Block &b, char *stacks, size_t stack) {
    memset(b.smem.data(), 0xFF, b.smem.size()); /* NaN: unwritten shared memory shows */
    b.bar_n = 0;
    for (int w = 0; w < 32; w++) b.wn[w] = 0;
    for (int t = 0; t < b.n; t++) {
        Thread &th = b.th[(size_t)t];
        th.tid.x = (unsigned)t % b.bdim.x, th.tid.y = (unsigned)t / b.bdim.x % b.bdim.y, th.tid.z = (unsigned)t / (b.bdim.x * b.bdim.y);
        th.done = false;
        getcontext(&th.ctx);
        th.ctx.uc_stack.ss_sp = stacks + stack * (size_t)t;
        th.ctx.uc_stack.ss_size = stack;
        th.ctx.uc_link = &b.sched;
        makecontext(&th.ctx, tramp, 0);
    }
    for (;;) {
        bool any = false;
        for (int u = 0; u < b.n; u++) {
            const int t = order(u, b.n);
            if (!b.th[(size_t)t].done) {
                any = true;
                b.cur = t;
                swapcontext(&b.sched, &b.th[(size_t)t].ctx);
            }
        }
        if (!any) break;
    }
}
/* run body as every thread of every block of grid, blocks one after another */
inline void launch(dim3 grid, dim3 block, size_t smem, std::function<void()> body) {
    Block b;
    b.bdim = block, b.gdim = grid, b.n = (int)(block.x * block.y * block.z), b.body = body;
    if (b.n % 32) { fprintf(stderr, "emu: a block of %d threads\n", b.n); exit(1); }
    const size_t stack = 128 * 1024;
    static std::vector<char> stacks; /* kept from launch to launch: a fresh 32 MB each time costs more than the kernel */
    if (stacks.size() < stack * (size_t)b.n) stacks.resize(stack * (size_t)b.n);
    b.th.resize((size_t)b.n);
    b.smem.resize(smem + 16);
    blk() = &b;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                b.bid.x = x, b.bid.y = y, b.bid.z = z;
                run_block(b, stacks.data(), stack);
            }
    blk() = nullptr;
}
} // namespace emu

#define threadIdx (emu::blk()->th[(size_t)emu::blk()->cur].tid)
#define blockIdx (emu::blk()->bid)
#define blockDim (emu::blk()->bdim)
#define gridDim (emu::blk()->gdim)
#define __syncthreads() emu::syncthreads()
#define GDN_LAUNCH_T(kern, grid, threads, smem, st, ...) emu::launch((grid), dim3(threads), (smem), [=] { kern(__VA_ARGS__); })

inline float u2f(uint32_t u) { return emu::u2f(u); }
/* cvt.rna.tf32.f32: nearest, ties away from zero, at 10 stored mantissa bits */
inline uint32_t tf32_of(float x) {
    uint32_t u = emu::f2u(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return u; /* inf, NaN */
    u += 0x1000u;                                    /* half of the dropped 13 bits: ties away */
    return u & 0xffffe000u;
}
/* mma.m16n8k8.row.col.f32.tf32.tf32.f32, from the fragment layout of kernels/gdn_chunked.cu */
inline void mma_tf32(float *c, const uint32_t *a, const uint32_t *b) {
    emu::Block *B = emu::blk();
    const int l = emu::lane(), w = B->cur / 32;
    for (int e = 0; e < 4; e++) B->in[w][l][e] = a[e];
    B->in[w][l][4] = b[0], B->in[w][l][5] = b[1];
    emu::warp_sync_last([B](int w) {
        auto A = [&](int i, int k) { return emu::u2f(B->in[w][(i % 8) * 4 + k % 4][(i >= 8) + 2 * (k >= 4)] & 0xffffe000u); };
        auto Bm = [&](int k, int j) { return emu::u2f(B->in[w][j * 4 + k % 4][4 + (k >= 4)] & 0xffffe000u); };
        for (int L = 0; L < 32; L++) {
            const int g = L >> 2, q = L & 3;
            for (int e = 0; e < 4; e++) {
                const int i = g + 8 * (e >> 1), j = 2 * q + (e & 1);
                float s = 0.f;
                for (int k = 0; k < 8; k++) s += A(i, k) * Bm(k, j);
                B->out[w][L][e] = s;
            }
        }
    });
    for (int e = 0; e < 4; e++) c[e] += B->out[w][l][e];
}
inline float shfl_xor(float v, int m) {
    emu::Block *B = emu::blk();
    const int l = emu::lane(), w = B->cur / 32;
    B->in[w][l][0] = emu::f2u(v);
    emu::warp_sync_last([B, m](int w) {
        for (int L = 0; L < 32; L++) B->out[w][L][0] = emu::u2f(B->in[w][L ^ m][0]);
    });
    return B->out[w][l][0];
}
inline float bf2f(bf16_t x) { return emu::u2f((uint32_t)x << 16); }
inline bf16_t f2bf(float x) { /* nearest even */
    uint32_t u = emu::f2u(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return (bf16_t)((u >> 16) | ((u & 0xffff) ? 0x40 : 0));
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}
/* threads run one at a time: an atomic is a plain add */
inline float atomicAdd(float *p, float v) { const float o = *p; *p = o + v; return o; }
inline double atomicAdd(double *p, double v) { const double o = *p; *p = o + v; return o; }
inline void atomic_add2(float *p, float a, float b) { p[0] += a, p[1] += b; }
inline void prefetch_l2(const void *) {}
inline unsigned char *smem_base() { return emu::blk()->smem.data(); }
