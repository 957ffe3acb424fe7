/* zigzag.h -- context parallelism's sequence split and ring schedule (stage 3).
 * A sequence of S tokens is cut into 2P chunks of c = S/(2P); rank r holds chunk r (its "head")
 * and chunk 2P-1-r (its "tail"), in that order. Tokens, shifted labels and RoPE positions are split
 * the same way.
 *
 * Why this split balances causal attention. Count work in block units: one c x c tile of
 * (query, key) pairs. Under the causal mask the query at position i*c + t of chunk i sees the
 * i*c + t + 1 keys up to itself, so chunk i's queries cost
 *     sum_{t<c} (i*c + t + 1) = i*c^2 + c(c+1)/2 ~ (i + 1/2) units:
 * i full tiles (the chunks before it) plus half of the diagonal tile. Rank r's two chunks cost
 *     (r + 1/2) + (2P-1-r + 1/2) = 2P units,
 * (exactly 2P*c^2 + c pairs), the same for every r, and 2P is the mean: the whole triangle is
 * (2P)^2/2 = 2P^2 units over P ranks. The contiguous split (rank r holds chunks 2r and 2r+1) costs
 *     (2r + 1/2) + (2r + 1 + 1/2) = 4r + 2 units:
 * rank 0 does 2 (1/P of the mean), rank P-1 does 4P-2, (2P-1)/P times the mean (1.875x at P = 8),
 * and a step waits for the slowest rank.
 *
 * The ring. At step i rank r holds the K/V of rank src = (r - i) mod P: chunks src and 2P-1-src.
 * A (query chunk qc, key chunk kc) pair is diagonal if qc = kc (causal mask), full if kc < qc
 * (every key is in every query's past: no mask), skipped if kc > qc (all future: no kernel).
 *   i = 0 (src = r): (head, head) and (tail, tail) diagonal, (tail, head) full, (head, tail)
 *       skipped. Local order head-then-tail is increasing in position, so one causal call over
 *       the 2c local rows and 2c local keys computes exactly these three.
 *   1 <= i <= r (src < r): src's head is chunk src < r < 2P-1-r: full for both query chunks. Its
 *       tail, 2P-1-src > 2P-1-r >= P > r, is after both: skipped. One call: all 2c queries against
 *       src's c head keys, no mask.
 *   i > r (src = r - i + P, so r < src <= P-1): src's head (src > r) and tail (2P-1-src >= P > r)
 *       are after rank r's head: skipped for it. Both are before rank r's tail (src <= P-1 <
 *       2P-1-r, and 2P-1-src < 2P-1-r): full. One call: the c tail queries against all 2c keys.
 * Each step is 2 units on every rank (two diagonal halves and one full tile; two full tiles; two
 * full tiles), so the ranks are balanced step by step, not only per layer, and no rank waits at
 * a ring hop for a slower neighbour. Every query row of a block sees at least one key (itself on
 * the diagonal, a whole chunk otherwise), so without packed documents no block row is empty.
 * Partial results are merged by log-sum-exp (kernels/ring.cu derives the merge). */
#ifndef LONGCTX_ZIGZAG_H
#define LONGCTX_ZIGZAG_H

#include <stddef.h>
#include <stdint.h>

/* S must split into 2P chunks. Returns 0, or -1 with a message. */
int zigzag_check(int64_t S, int P, char *err, size_t errlen);
/* the S/P global positions rank r holds, in its local order */
void zigzag_positions(int64_t S, int P, int r, int64_t *pos);
/* the same as RoPE takes them (int32) */
void zigzag_rope_positions(int64_t S, int P, int r, int32_t *pos);

typedef struct {
    int src;          /* the rank whose K/V this block uses */
    int causal;       /* only at step 0 */
    int64_t q0, nq;   /* local query rows [q0, q0+nq) */
    int64_t k0, nk;   /* rows [k0, k0+nk) of src's local K/V */
} RingBlock;

RingBlock ring_block(int64_t S, int P, int r, int step);
/* rank r's chunk k (k 0: its head, chunk r; k 1: its tail, chunk 2P-1-r) */
static inline int64_t zigzag_chunk(int P, int r, int k) { return k ? 2 * P - 1 - r : r; }
/* chunk ch's slot among the ranks' chunks, rank-major (rank * 2 + k): head of rank ch, or tail of rank 2P-1-ch */
static inline int64_t zigzag_slot(int P, int64_t ch) { return ch < P ? 2 * ch : 2 * (2 * P - 1 - ch) + 1; }

/* Merge a block's (o_b, lse_b) into the running (o, lse) for one row of d values:
 * lse' = log(e^lse + e^lse_b), o' = (e^lse o + e^lse_b o_b) / e^lse'. fp64 reference. */
void lse_merge_row(double *o, double *lse, const double *o_b, double lse_b, int64_t d);

#endif
