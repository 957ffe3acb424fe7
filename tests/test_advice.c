/* test_advice.c -- the headline's nearest commands (common/advice.c) on a pretend machine, no GPU
 * needed: tests/test_cli.sh runs it and then each command it suggests, with --dry-run on the same
 * pretend memory, and checks that every suggestion fits.
 *   ./build/test_advice PROG MODEL SEQ RANKS GPUS GPU_GIB HOST_GIB [DATA] */
#include <stdio.h>
#include <stdlib.h>

#include "../common/advice.h"
#include "../common/check.h"
#include "../common/config.h"

int main(int argc, char **argv) {
    if (argc != 8 && argc != 9) DIE("usage: %s PROG MODEL SEQ RANKS GPUS GPU_GIB HOST_GIB [DATA]", argv[0]);
    Qwen3Config c;
    char err[512];
    if (config_load(argv[2], &c, err, sizeof err)) DIE("%s", err);
    const RankOpts r = {.gpus = atoll(argv[4]), .nnodes = 1, .rehearse = -1};
    const FitAsk a = {.prog = argv[1], .exe = argv[1], .model = argv[2], .data = argc > 8 ? argv[8] : NULL,
                      .seq = atoll(argv[3]), .P = (int)r.gpus, .ranks = &r};
    const double gib = 1 << 30;
    advise_nearest(&a, atoi(argv[5]), atof(argv[6]) * gib, atof(argv[7]) * gib);
    return 0;
}
