/* test_ranks.c -- how the several-GPU stages count their ranks, with the device count stubbed (no
 * GPU needed; CI runs it): --gpus omitted on an 8-GPU node is 8 ranks here and 8 per node, so the
 * host plan divides the node's memory by 8 (it once counted 1 and gave every rank the whole node).
 * Run from the repository root: ./build/test_ranks. */
#include <stdio.h>

#include "../common/check.h"
#include "../common/ranks.h"
#include "test.h"

static int eight(void) { return 8; }
static int calls;
static int counted(void) { calls++; return 4; }

int main(void) {
    ranks_device_count = eight;
    RankOpts o = {.gpus = 0, .nnodes = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&o, 0) == 8, "--gpus omitted on an 8-GPU node: 8 ranks in the job");
    EXPECT(ranks_here(&o) == 8 && ranks_per_node(&o) == 8, "... 8 here and 8 per node (got %d, %d)", ranks_here(&o),
           ranks_per_node(&o));
    RankOpts two = {.gpus = 0, .nnodes = 2, .node_rank = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&two, 0) == 16 && ranks_per_node(&two) == 8 && ranks_here(&two) == 8,
           "two 8-GPU nodes: 16 in the job, 8 per node, 8 here");
    RankOpts dry = {.gpus = 0, .nnodes = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&dry, 1) == 1 && ranks_per_node(&dry) == 1, "--dry-run without --gpus plans one GPU");
    RankOpts given = {.gpus = 2, .nnodes = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&given, 0) == 2 && ranks_per_node(&given) == 2, "--gpus 2 on an 8-GPU node: 2 ranks");
    RankOpts reh = {.gpus = 8, .nnodes = 4, .rehearse = 9};
    EXPECT(ranks_in_job(&reh, 0) == 32 && ranks_here(&reh) == 1 && ranks_per_node(&reh) == 8,
           "rehearsing rank 9 of 4 x 8: 32 in the job, 1 here, 8 per node (the rehearsed node's)");
    RankOpts loc = {.local_ranks = 4, .nnodes = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&loc, 0) == 4 && ranks_here(&loc) == 4 && ranks_per_node(&loc) == 4, "--local-ranks 4: 4 ranks");
    ranks_device_count = counted;
    RankOpts once = {.gpus = 0, .nnodes = 1, .rehearse = -1};
    const int a = ranks_in_job(&once, 0), b = ranks_per_node(&once), c = ranks_here(&once);
    EXPECT(a == 4 && b == 4 && c == 4 && calls == 1, "the device count is read once and kept (calls %d)", calls);
    return test_summary();
}
