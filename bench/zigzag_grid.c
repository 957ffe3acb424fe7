/* zigzag_grid.c -- the ring schedule of context parallelism as a table, from common/zigzag.c itself:
 * for P ranks, which (query chunk, K/V chunk) pairs each rank computes at each ring step, and how:
 * "diag" (the causal diagonal, half a block), "full", or "skip" (wholly in the causal future).
 * bench/plot_zigzag.py draws it; no GPU needed.
 *   ./build/zigzag_grid P          # lines: step rank q_chunk kv_chunk kind
 * With packed documents (--packing), the blocks each rank's calls are cut into (common/docs.c):
 *   ./build/zigzag_grid P S START...   # a window of S tokens whose documents start at START...:
 *                                      # lines: block step rank q0 nq k0 nk causal (global positions) */
#include <stdio.h>
#include <stdlib.h>

#include "../common/docs.h"
#include "../common/zigzag.h"

/* rank r's local chunk 0 is global chunk r, its chunk 1 is 2P-1-r */
static int global_chunk(int P, int r, int local) { return local ? 2 * P - 1 - r : r; }

int main(int argc, char **argv) {
    const int P = argc > 1 ? atoi(argv[1]) : 4;
    if (P < 1 || P > 64) { fprintf(stderr, "usage: %s P (1..64)\n", argv[0]); return 2; }
    if (argc > 3) { /* packed documents: the blocks, in global positions */
        const int64_t S = atoll(argv[2]), n = S / P, nd = argc - 3;
        int64_t *start = malloc((size_t)(nd + 1) * 8), *pos = malloc((size_t)S * 8);
        DocBlock blk[4096];
        for (int i = 0; i < nd; i++) start[i] = atoll(argv[3 + i]);
        start[nd] = S;
        if (S % (2 * P) || start[0] != 0) { fprintf(stderr, "S %% 2P != 0, or the first start is not 0\n"); return 2; }
        for (int r = 0; r < P; r++) zigzag_positions(S, P, r, pos + r * n);
        printf("# P=%d S=%lld: block step rank q0 nq k0 nk causal\n", P, (long long)S);
        for (int step = 0; step < P; step++)
            for (int r = 0; r < P; r++) {
                const RingBlock b = ring_block(S, P, r, step);
                const int64_t *qp = pos + r * n, *kp = pos + b.src * n;
                const int64_t m = docs_blocks(start, nd, qp, b.q0, b.nq, kp, b.k0, b.nk, blk, 4096);
                for (int64_t i = 0; i < m && i < 4096; i++)
                    printf("block %d %d %lld %lld %lld %lld %d\n", step, r, (long long)qp[blk[i].q0], (long long)blk[i].nq,
                           (long long)kp[blk[i].k0], (long long)blk[i].nk, blk[i].causal);
            }
        return 0;
    }
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
