/* expect_layout.c -- what a stage's packed run must hand the faked GPU, from common/layout.c alone
 * (tests/calls/layout_calls.sh compares it with the stage's call logs). For each step's window, as the
 * loader reads it, and each rank:
 *   data STEP RANK ids D labels D weights D pos D
 *       the uploads of its rows: token ids, labels, label weights and RoPE positions, each an FNV-1a
 *       digest of the bytes as tests/calls/fake_cuda.c logs a copy; the rows are layout_positions'
 *   call STEP RANK RING_STEP SQ SKV N [q0 nq k0 nk causal]...
 *       ring step RING_STEP's attention call: its shape (SQ x SKV) and its N blocks, sorted, from
 *       layout_blocks (a block's rows: this rank's query rows and the source rank's key rows)
 * The layout is built here from the window's documents (layout_best or layout_zigzag), not
 * through the stage's path (layout_window, docplan_add, docs_blocks), so the two agree only if the
 * stage loads the layout's rows and cuts its ring calls into the layout's blocks.
 *   expect_layout TOKENS SEQ P EOT balanced|zigzag STEPS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/docs.h"
#include "common/layout.h"
#include "common/tokens.h"
#include "common/zigzag.h"

static uint64_t digest(const void *p, size_t n) { /* fake_cuda.c's */
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int by_block(const void *a, const void *b) {
    const DocBlock *x = a, *y = b;
    const int64_t u[5] = {x->q0, x->nq, x->k0, x->nk, x->causal}, v[5] = {y->q0, y->nq, y->k0, y->nk, y->causal};
    for (int i = 0; i < 5; i++)
        if (u[i] != v[i]) return u[i] < v[i] ? -1 : 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s TOKENS SEQ P EOT balanced|zigzag STEPS\n", argv[0]);
        return 2;
    }
    const int64_t seq = atoll(argv[2]), eot = atoll(argv[4]), steps = atoll(argv[6]);
    const int P = atoi(argv[3]), balanced = !strcmp(argv[5], "balanced");
    const int64_t n = seq / P;
    char err[512];
    TokenFile tf;
    Loader ld;
    if (tokens_open_file(argv[1], (int64_t)1 << 32, 1, &tf, err, sizeof err) ||
        loader_init(&ld, &tf, seq, 1, 0, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    loader_pack(&ld, (uint32_t)eot);
    uint32_t *tok = malloc((size_t)(seq + 1) * 4), *ids = malloc((size_t)n * 4), *labels = malloc((size_t)n * 4);
    uint8_t *w = malloc((size_t)seq + 1), *lw = malloc((size_t)n);
    int64_t *start = malloc((size_t)(seq + 1) * 8), *pos = malloc((size_t)n * 8);
    int32_t *rope = malloc((size_t)n * 4);
    for (int64_t step = 0; step < steps; step++) {
        loader_window(&ld, step, tok);
        loader_weights(&ld, step, w);
        const int64_t nd = docs_split(tok, seq, (uint32_t)eot, start);
        Layout L;
        if (balanced ? layout_best(&L, start, nd, seq, P, NULL, err, sizeof err)
                     : layout_zigzag(&L, start, nd, seq, P, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        for (int r = 0; r < P; r++) {
            layout_positions(&L, r, pos);
            layout_rope_positions(&L, r, rope);
            for (int64_t t = 0; t < n; t++) ids[t] = tok[pos[t]], labels[t] = tok[pos[t] + 1], lw[t] = w[pos[t] + 1];
            printf("data %lld %d ids %016llx labels %016llx weights %016llx pos %016llx\n", (long long)step, r,
                   (unsigned long long)digest(ids, (size_t)n * 4), (unsigned long long)digest(labels, (size_t)n * 4),
                   (unsigned long long)digest(lw, (size_t)n), (unsigned long long)digest(rope, (size_t)n * 4));
            for (int s = 0; s < P; s++) {
                const int64_t nb = layout_blocks(&L, r, s, NULL, 0);
                LayoutBlock *lb = malloc((size_t)(nb ? nb : 1) * sizeof *lb);
                DocBlock *b = malloc((size_t)(nb ? nb : 1) * sizeof *b);
                layout_blocks(&L, r, s, lb, nb);
                for (int64_t i = 0; i < nb; i++) b[i] = lb[i].b;
                qsort(b, (size_t)nb, sizeof *b, by_block);
                const RingBlock rb = ring_block(seq, P, r, s); /* the zigzag's call shape; balanced: every row */
                printf("call %lld %d %d %lld %lld %lld", (long long)step, r, s, (long long)(balanced ? n : rb.nq),
                       (long long)(balanced ? n : rb.nk), (long long)nb);
                for (int64_t i = 0; i < nb; i++)
                    printf(" [%lld %lld %lld %lld %d]", (long long)b[i].q0, (long long)b[i].nq, (long long)b[i].k0,
                           (long long)b[i].nk, b[i].causal);
                printf("\n");
                free(lb);
                free(b);
            }
        }
        layout_free(&L);
    }
    tokens_close(&tf);
    return 0;
}
