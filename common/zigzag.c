/* zigzag.c -- zigzag split and ring schedule. */
#include "zigzag.h"

#include <stdlib.h>

#include "check.h"

#include <math.h>
#include <stdio.h>

int zigzag_check(int64_t S, int P, char *err, size_t errlen) {
    if (P < 1 || S % (2 * (int64_t)P)) {
        snprintf(err, errlen, "sequence length %lld is not divisible by 2 x %d ranks (context parallelism cuts it into "
                 "%d chunks): use a multiple of %d", (long long)S, P, 2 * P, 2 * P);
        return -1;
    }
    return 0;
}

void zigzag_positions(int64_t S, int P, int r, int64_t *pos) {
    const int64_t c = S / (2 * (int64_t)P);
    for (int64_t t = 0; t < c; t++) {
        pos[t] = (int64_t)r * c + t;                        /* head: chunk r */
        pos[c + t] = (int64_t)(2 * P - 1 - r) * c + t;      /* tail: chunk 2P-1-r */
    }
}

RingBlock ring_block(int64_t S, int P, int r, int step) {
    const int64_t c = S / (2 * (int64_t)P);
    RingBlock b;
    b.src = ((r - step) % P + P) % P;
    if (step == 0) { b.causal = 1; b.q0 = 0; b.nq = 2 * c; b.k0 = 0; b.nk = 2 * c; }
    else if (step <= r) { b.causal = 0; b.q0 = 0; b.nq = 2 * c; b.k0 = 0; b.nk = c; }
    else { b.causal = 0; b.q0 = c; b.nq = c; b.k0 = 0; b.nk = 2 * c; }
    return b;
}

void lse_merge_row(double *o, double *lse, const double *o_b, double lse_b, int64_t d) {
    if (lse_b == -INFINITY) return;
    if (*lse == -INFINITY) {
        for (int64_t i = 0; i < d; i++) o[i] = o_b[i];
        *lse = lse_b;
        return;
    }
    const double m = fmax(*lse, lse_b), w = exp(*lse - m), wb = exp(lse_b - m), z = w + wb;
    for (int64_t i = 0; i < d; i++) o[i] = (w * o[i] + wb * o_b[i]) / z;
    *lse = m + log(z);
}

void zigzag_rope_positions(int64_t S, int P, int r, int32_t *pos) {
    int64_t *zz = xmalloc((size_t)(8 * (S / P)));
    zigzag_positions(S, P, r, zz);
    for (int64_t t = 0; t < S / P; t++) pos[t] = (int32_t)zz[t];
    free(zz);
}
