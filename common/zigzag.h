/* zigzag.h -- context parallelism's sequence split and ring schedule (stage 3).
 * A sequence of S tokens is cut into 2P chunks of c = S/(2P); rank r holds chunk r (its "head")
 * and chunk 2P-1-r (its "tail"), in that order, so causal work is balanced: every rank has one
 * early and one late chunk. Tokens, shifted labels and RoPE positions are split the same way.
 * Ring attention: at step i rank r holds the K/V of rank src = (r - i) mod P and computes
 *   i = 0:         all its queries against its own K/V, causal (head before tail locally);
 *   1 <= i <= r:   all its queries against src's head (wholly in the past), no mask;
 *   i > r:         its tail queries against all of src's K/V (wholly in the past), no mask.
 * Partial results are merged by log-sum-exp. */
#ifndef LONGCTX_ZIGZAG_H
#define LONGCTX_ZIGZAG_H

#include <stddef.h>
#include <stdint.h>

/* S must split into 2P chunks. Returns 0, or -1 with a message. */
int zigzag_check(int64_t S, int P, char *err, size_t errlen);
/* the S/P global positions rank r holds, in its local order */
void zigzag_positions(int64_t S, int P, int r, int64_t *pos);

typedef struct {
    int src;          /* the rank whose K/V this block uses */
    int causal;       /* only at step 0 */
    int64_t q0, nq;   /* local query rows [q0, q0+nq) */
    int64_t k0, nk;   /* rows [k0, k0+nk) of src's local K/V */
} RingBlock;

RingBlock ring_block(int64_t S, int P, int r, int step);

/* Merge a block's (o_b, lse_b) into the running (o, lse) for one row of d values:
 * lse' = log(e^lse + e^lse_b), o' = (e^lse o + e^lse_b o_b) / e^lse'. fp64 reference. */
void lse_merge_row(double *o, double *lse, const double *o_b, double lse_b, int64_t d);

#endif
