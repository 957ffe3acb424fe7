/* layout_grid.c -- how packed documents load the ranks of context parallelism, in two layouts
 * (common/layout.h): the whole-window zigzag (rank r holds chunks r and 2P-1-r of the window) and
 * the balanced layout (long documents split over every rank, the rest kept whole and placed so as
 * to even the load). For each: one line a rank, "rank R: T tokens, Q pairs" (Q: the causal
 * (query, key) pairs of the queries it holds, its attention work), then
 * "balance: busiest rank X.XXx the mean" and the ring's critical path (a ring step waits for its
 * slowest rank: the busiest rank of each step, summed). No GPU.
 *   ./build/layout_grid [OPTIONS] P S START...        documents starting at START... (the first 0) in S tokens
 *   ./build/layout_grid [OPTIONS] P --tok FILE.tok    the first window of a token file (bench/packed_window.py),
 *                                                     its documents ended by <|endoftext|>
 * OPTIONS: --seq S (with --tok: the window, default 1048576), --eot ID (default 151643),
 *          --whole F (a document whose pairs are at most F x the mean rank's stays whole; default: the stages'
 *                    choice for the window, layout_best),
 *          --pieces (also print each piece: piece layout rank doc start len pos row),
 *          --blocks (also print each ring block: block layout step rank q_start nq k_start nk diag doc,
 *                    window positions; bench/plot_layout.py reads them) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/docs.h"
#include "../common/layout.h"
#include "../common/tokens.h"

static void usage(const char *me) {
    fprintf(stderr, "usage: %s [--whole F] [--pieces] [--blocks] [--seq S] [--eot ID] P (S START... | --tok FILE.tok)\n", me);
    exit(2);
}

static void report(const Layout *L, const char *name, int pieces, int blocks) {
    const double mean = (double)L->W / L->P;
    int64_t nblocks = 0;
    for (int r = 0; r < L->P; r++) {
        printf("rank %d: %lld tokens, %lld pairs\n", r, (long long)L->tokens[r], (long long)L->pairs[r]);
        for (int s = 0; s < L->P; s++) nblocks += layout_blocks(L, r, s, NULL, 0);
    }
    const double bal = layout_balance(L);
    printf("balance: busiest rank %.2fx the mean (%.4f; mean %.0f pairs)\n", bal, bal, mean);
    printf("ring: the busiest rank of each step, summed: %.4fx the mean; %lld pieces, %lld blocks over all ranks and steps\n",
           layout_ring_balance(L), (long long)L->npieces, (long long)nblocks);
    printf("cost: the busiest rank's pairs + %d a block, %.4fx the mean rank's pairs\n", LAYOUT_BLOCK_PAIRS, layout_cost(L));
    if (!L->zigzag) {
        int64_t maps = 0; /* a linear layer's state maps a rank sends: its pieces whose document goes on after them */
        for (int r = 0; r < L->P; r++) {
            int64_t m = 0;
            for (int64_t i = L->first[r]; i < L->first[r + 1]; i++) m += L->piece[i].next >= 0;
            maps = m > maps ? m : maps;
        }
        printf("bound: every rank within B = %.0f pairs (%.2f%%) of the mean; %lld of %lld documents split over the ranks; "
               "state maps (Qwen3.5's linear layers): up to %lld a rank (the zigzag: 2)\n", L->bound,
               mean > 0 ? 100 * L->bound / mean : 0.0, (long long)L->nsplit, (long long)L->ndocs, (long long)maps);
    }
    if (pieces)
        for (int64_t i = 0; i < L->npieces; i++) {
            const LayoutPiece *p = &L->piece[i];
            printf("piece %s %d %lld %lld %lld %lld %lld\n", name, p->rank, (long long)p->doc, (long long)p->start,
                   (long long)p->len, (long long)p->pos, (long long)p->row);
        }
    if (blocks)
        for (int s = 0; s < L->P; s++)
            for (int r = 0; r < L->P; r++) {
                const int64_t nb = layout_blocks(L, r, s, NULL, 0);
                LayoutBlock *b = malloc((size_t)(nb ? nb : 1) * sizeof *b);
                layout_blocks(L, r, s, b, nb);
                for (int64_t i = 0; i < nb; i++) {
                    const LayoutPiece *q = &L->piece[b[i].qp], *k = &L->piece[b[i].kp];
                    printf("block %s %d %d %lld %lld %lld %lld %d %lld\n", name, s, r, (long long)q->start, (long long)q->len,
                           (long long)k->start, (long long)k->len, b[i].kind == LAYOUT_DIAG, (long long)b[i].doc);
                }
                free(b);
            }
}

int main(int argc, char **argv) {
    double whole = -1; /* -1: layout_best */
    int pieces = 0, blocks = 0, a = 1;
    int64_t seq = 1 << 20, eot = TOKEN_ENDOFTEXT;
    for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
        if (!strcmp(argv[a], "--pieces")) pieces = 1;
        else if (!strcmp(argv[a], "--blocks")) blocks = 1;
        else if (!strcmp(argv[a], "--whole") && a + 1 < argc) whole = atof(argv[++a]);
        else if (!strcmp(argv[a], "--seq") && a + 1 < argc) seq = atoll(argv[++a]);
        else if (!strcmp(argv[a], "--eot") && a + 1 < argc) eot = atoll(argv[++a]);
        else usage(argv[0]);
    }
    if (a + 1 >= argc) usage(argv[0]);
    const int P = atoi(argv[a++]);
    if (P < 1 || P > 1024) usage(argv[0]);
    int64_t S, nd, *start;
    char err[512];
    if (!strcmp(argv[a], "--tok")) {
        if (a + 1 >= argc) usage(argv[0]);
        TokenFile tf;
        /* the ids alone: a file's loss weights (a masked file) change nothing here */
        if (tokens_open_file(argv[a + 1], (int64_t)1 << 32, 1, &tf, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        S = tf.count < seq ? tf.count : seq;
        start = malloc((size_t)(S + 1) * 8);
        nd = docs_split(tf.ids, S, (uint32_t)eot, start);
        tokens_close(&tf);
    } else {
        S = atoll(argv[a++]);
        nd = argc - a;
        if (S < 1 || nd < 1) usage(argv[0]);
        start = malloc((size_t)(nd + 1) * 8);
        for (int64_t i = 0; i < nd; i++) start[i] = atoll(argv[a + i]);
        start[nd] = S;
    }
    int64_t W = 0;
    for (int64_t d = 0; d < nd; d++) W += (start[d + 1] - start[d]) * (start[d + 1] - start[d] + 1) / 2;
    printf("# P=%d S=%lld: %lld documents, mean %.0f tokens; %lld pairs, %.4f of the unpacked S (S+1)/2\n", P,
           (long long)S, (long long)nd, (double)S / nd, (long long)W, (double)W / ((double)S * (S + 1) / 2));
    Layout L;
    if (layout_zigzag(&L, start, nd, S, P, err, sizeof err)) printf("zigzag: not this window (%s)\n", err);
    else {
        printf("zigzag (rank r holds chunks r and 2P-1-r of the window):\n");
        report(&L, "zigzag", pieces, blocks);
        layout_free(&L);
    }
    if (whole < 0 ? layout_best(&L, start, nd, S, P, &whole, err, sizeof err)
                  : layout_balanced(&L, start, nd, S, P, whole, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (L.zigzag) printf("balanced (the zigzag costs least: no split pays for its blocks):\n");
    else if (!L.nsplit) printf("balanced (no document split: each kept whole):\n");
    else printf("balanced (documents of more than %g of the mean rank's pairs split over the ranks):\n", whole);
    report(&L, "balanced", pieces, blocks);
    layout_free(&L);
    free(start);
    return 0;
}
