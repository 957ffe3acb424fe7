/* zigzag_grid.c -- the ring schedule of context parallelism as a table, from common/zigzag.c itself:
 * for P ranks, which (query chunk, K/V chunk) pairs each rank computes at each ring step, and how:
 * "diag" (the causal diagonal, half a block), "full", or "skip" (wholly in the causal future).
 * bench/plot_zigzag.py draws it; no GPU needed.
 *   ./build/zigzag_grid P          # lines: step rank q_chunk kv_chunk kind */
#include <stdio.h>
#include <stdlib.h>

#include "../common/zigzag.h"

/* rank r's local chunk 0 is global chunk r, its chunk 1 is 2P-1-r */
static int global_chunk(int P, int r, int local) { return local ? 2 * P - 1 - r : r; }

int main(int argc, char **argv) {
    const int P = argc > 1 ? atoi(argv[1]) : 4;
    if (P < 1 || P > 64) { fprintf(stderr, "usage: %s P (1..64)\n", argv[0]); return 2; }
    const int64_t c = 1024, S = 2 * P * c; /* any chunk length: the schedule is in chunks */
    printf("# P=%d: step rank q_chunk kv_chunk kind\n", P);
    for (int step = 0; step < P; step++)
        for (int r = 0; r < P; r++) {
            const RingBlock b = ring_block(S, P, r, step);
            for (int lq = 0; lq < 2; lq++)
                for (int lk = 0; lk < 2; lk++) {
                    const int64_t q0 = lq * c, k0 = lk * c;
                    const int in = q0 >= b.q0 && q0 < b.q0 + b.nq && k0 >= b.k0 && k0 < b.k0 + b.nk;
                    const int qc = global_chunk(P, r, lq), kc = global_chunk(P, b.src, lk);
                    /* within a computed block: a causal block's diagonal pairs are half, its future pairs none */
                    const char *kind = !in ? "skip" : !b.causal ? "full" : qc == kc ? "diag" : qc > kc ? "full" : "skip";
                    printf("%d %d %d %d %s\n", step, r, qc, kc, kind);
                }
        }
    return 0;
}
