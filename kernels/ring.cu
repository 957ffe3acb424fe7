/* ring.cu -- what ring attention needs beyond cuDNN: merging block results by log-sum-exp, and
 * accumulating block gradients (cuDNN overwrites its outputs). */
#include "common.cuh"

/* Four consecutive elements at a time (8- or 16-byte accesses): these kernels only stream memory,
 * and scalar 2-byte accesses left the bf16 accumulators far slower than the fp32 ones. */
struct F4 {
    float v[4];
};
__device__ __forceinline__ F4 ld4(const float *p, int64_t i) {
    const float4 a = *reinterpret_cast<const float4 *>(p + i);
    return F4{{a.x, a.y, a.z, a.w}};
}
__device__ __forceinline__ F4 ld4(const bf16_t *p, int64_t i) {
    const uint2 a = *reinterpret_cast<const uint2 *>(p + i);
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162 *>(&a.x), hi = *reinterpret_cast<const __nv_bfloat162 *>(&a.y);
    return F4{{__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)}};
}
__device__ __forceinline__ void st4(float *p, int64_t i, F4 x) {
    *reinterpret_cast<float4 *>(p + i) = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
}
__device__ __forceinline__ void st4(bf16_t *p, int64_t i, F4 x) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(x.v[0], x.v[1]), hi = __floats2bfloat162_rn(x.v[2], x.v[3]);
    uint2 a;
    a.x = *reinterpret_cast<const uint32_t *>(&lo);
    a.y = *reinterpret_cast<const uint32_t *>(&hi);
    *reinterpret_cast<uint2 *>(p + i) = a;
}

/* The LSE merge. Why it is exact: for one query row and one head, let s_j be the row's scaled score
 * against key j. A block's attention over a key set A is
 *     o_A = sum_{j in A} e^{s_j} v_j / Z_A,   Z_A = sum_{j in A} e^{s_j},   lse_A = log Z_A,
 * so Z_A o_A = sum_{j in A} e^{s_j} v_j: from (o_A, lse_A) the block's unnormalised sum comes back.
 * For disjoint A and B the attention over A u B is therefore
 *     o   = (Z_A o_A + Z_B o_B) / (Z_A + Z_B) = (e^{lse_A} o_A + e^{lse_B} o_B) / (e^{lse_A} + e^{lse_B})
 *     lse = log(Z_A + Z_B)                     = log(e^{lse_A} + e^{lse_B}).
 * The merge is associative and commutative, so P ring blocks merged in any order give the softmax
 * over all keys (up to rounding). e^{lse} overflows fp32 past lse ~ 88, so scale by m = max(lse_A,
 * lse_B): a = e^{lse_A - m}, b = e^{lse_B - m}, both in [0, 1] and one of them 1, so a + b is in
 * [1, 2]: no overflow, no division by zero, and
 *     o = (a o_A + b o_B) / (a + b),   lse = m + log(a + b).
 * A row with no key in a set has Z = 0, lse = -inf, and o undefined (0/0). It must merge as nothing:
 *   - the block has none (lse_b = -inf; packed documents, common/docs.h): return, touching
 *     neither o nor lse. Computing on would give m = -inf for a row also empty so far, and
 *     -inf - -inf = NaN;
 *   - the running result has none yet (lse = -inf: lse is filled with -inf before the ring's first
 *     block, and o holds whatever was there): a = 0 and o is read as 0, never loaded, since a
 *     NaN left in the buffer would survive 0 * NaN. The result is then exactly the block's.
 * Here (o, lse) is the running result, A the blocks merged so far, and (ob, lseb) this block, B.
 * lse is fp32 always. o is the accumulator the stage chose: fp32 (--merge fp32), rounded once by
 * the final cast, or bf16 (--merge bf16), rounded to 8 significant bits (relative error <= 2^-8)
 * at every one of the P merges. ob is cuDNN's bf16 output in both cases; the arithmetic is fp32. */
/* one warp per (row, head); each lane four consecutive elements of the head (D % 4 == 0) */
template <typename T>
__global__ void lse_merge_kernel(T *o, float *lse, const bf16_t *ob, const float *lseb, int64_t n, int64_t q0,
                                 int64_t nq, int64_t H, int64_t D, int64_t ldb) {
    const int lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= nq * H) return;
    const int64_t t = w / H, h = w % H, row = q0 + t;
    const float l = lse[h * n + row], lb = lseb[h * ldb + t];
    if (lb == -INFINITY) return; /* the block saw no key for this row */
    const float m = fmaxf(l, lb), a = l == -INFINITY ? 0.f : __expf(l - m), b = __expf(lb - m), rz = 1.f / (a + b);
    for (int64_t d = 4 * lane; d < D; d += 128) {
        const int64_t i = (row * H + h) * D + d;
        const F4 x = l == -INFINITY ? F4{{0.f, 0.f, 0.f, 0.f}} : ld4(o, i), y = ld4(ob, (t * H + h) * D + d);
        F4 r;
        for (int k = 0; k < 4; k++) r.v[k] = (a * x.v[k] + b * y.v[k]) * rz;
        st4(o, i, r);
    }
    if (lane == 0) lse[h * n + row] = m + logf(a + b);
}

static void need_aligned(const void *p, int64_t n, const char *what) {
    if (((uintptr_t)p & 15) || n % 4) {
        fprintf(stderr, "error %s:%d: %s needs 16-byte aligned buffers and a multiple of 4 elements\n", __FILE__, __LINE__, what);
        exit(1);
    }
}

extern "C" void lse_merge_ld(void *o, int o_f32, float *lse, const bf16_t *o_b, const float *lse_b, int64_t ldb,
                             int64_t n, int64_t q0, int64_t nq, int64_t H, int64_t D, cudaStream_t st) {
    need_aligned(o, D, "lse_merge");
    need_aligned(o_b, D, "lse_merge");
    const unsigned grid = grid_for(nq * H, 8, 1LL << 31);
    if (o_f32) lse_merge_kernel<float><<<grid, 256, 0, st>>>((float *)o, lse, o_b, lse_b, n, q0, nq, H, D, ldb);
    else lse_merge_kernel<bf16_t><<<grid, 256, 0, st>>>((bf16_t *)o, lse, o_b, lse_b, n, q0, nq, H, D, ldb);
    KCHECK();
}
extern "C" void lse_merge(void *o, int o_f32, float *lse, const bf16_t *o_b, const float *lse_b, int64_t n, int64_t q0,
                          int64_t nq, int64_t H, int64_t D, cudaStream_t st) {
    lse_merge_ld(o, o_f32, lse, o_b, lse_b, nq, n, q0, nq, H, D, st);
}

template <typename T>
__global__ void add_into_kernel(T *acc, const bf16_t *x, int64_t n4) {
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n4; j += (int64_t)gridDim.x * blockDim.x) {
        F4 a = ld4(acc, 4 * j);
        const F4 b = ld4(x, 4 * j);
        for (int k = 0; k < 4; k++) a.v[k] += b.v[k];
        st4(acc, 4 * j, a);
    }
}
extern "C" void add_bf16_into(void *acc, int acc_f32, const bf16_t *x, int64_t n, cudaStream_t st) {
    need_aligned(acc, n, "add_bf16_into");
    need_aligned(x, n, "add_bf16_into");
    if (acc_f32) add_into_kernel<float><<<grid_for(n / 4, 256), 256, 0, st>>>((float *)acc, x, n / 4);
    else add_into_kernel<bf16_t><<<grid_for(n / 4, 256), 256, 0, st>>>((bf16_t *)acc, x, n / 4);
    KCHECK();
}

__global__ void fill_f32_kernel(float *p, float v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}
extern "C" void fill_f32(float *p, float v, int64_t n, cudaStream_t st) {
    fill_f32_kernel<<<grid_for(n, 256), 256, 0, st>>>(p, v, n);
    KCHECK();
}
