/* test_ranks.c -- how the several-GPU stages count their ranks, with the device count stubbed (no
 * GPU needed; CI runs it): --gpus omitted on an 8-GPU node is 8 ranks here and 8 per node, so the
 * host plan divides the node's memory by 8 (it once counted 1 and gave every rank the whole node).
 * Run from the repository root: ./build/test_ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "../common/ranks.h"
#include "test.h"

static int eight(void) { return 8; }
static int calls;
static int counted(void) { calls++; return 4; }

int main(void) {
    ranks_device_count = eight;
    RankOpts o = {.gpus = 0, .nnodes = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&o) == 8, "--gpus omitted on an 8-GPU node: 8 ranks in the job");
    EXPECT(ranks_here(&o) == 8 && ranks_per_node(&o) == 8, "... 8 here and 8 per node (got %d, %d)", ranks_here(&o),
           ranks_per_node(&o));
    RankOpts two = {.gpus = 0, .nnodes = 2, .node_rank = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&two) == 16 && ranks_per_node(&two) == 8 && ranks_here(&two) == 8,
           "two 8-GPU nodes: 16 in the job, 8 per node, 8 here");
    RankOpts dry = {.gpus = 8, .nnodes = 1, .rehearse = -1}; /* a dry-run's --gpus, as plan_machine resolved it */
    EXPECT(ranks_in_job(&dry) == 8 && ranks_per_node(&dry) == 8, "a dry-run's planned 8 GPUs: 8 ranks");
    RankOpts given = {.gpus = 2, .nnodes = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&given) == 2 && ranks_per_node(&given) == 2, "--gpus 2 on an 8-GPU node: 2 ranks");
    RankOpts reh = {.gpus = 8, .nnodes = 4, .rehearse = 9};
    EXPECT(ranks_in_job(&reh) == 32 && ranks_here(&reh) == 1 && ranks_per_node(&reh) == 8,
           "rehearsing rank 9 of 4 x 8: 32 in the job, 1 here, 8 per node (the rehearsed node's)");
    RankOpts loc = {.local_ranks = 4, .nnodes = 1, .rehearse = -1};
    EXPECT(ranks_in_job(&loc) == 4 && ranks_here(&loc) == 4 && ranks_per_node(&loc) == 4, "--local-ranks 4: 4 ranks");
    ranks_device_count = counted;
    RankOpts once = {.gpus = 0, .nnodes = 1, .rehearse = -1};
    const int a = ranks_in_job(&once), b = ranks_per_node(&once), c = ranks_here(&once);
    EXPECT(a == 4 && b == 4 && c == 4 && calls == 1, "the device count is read once and kept (calls %d)", calls);
    /* a node placed by Slurm: its variables when the flags are absent, and the first line says so */
    ranks_device_count = eight;
    setenv("SLURM_NNODES", "2", 1), setenv("SLURM_NODEID", "1", 1);
    setenv("SLURM_JOB_ID", "4242", 1), setenv("SLURM_STEP_ID", "0", 1);
    RankOpts sl = RANK_DEFAULTS;
    sl.gpus = 8, sl.rendezvous = "tcp://10.0.0.1:29500";
    ranks_check_opts(&sl, 0);
    char line[1024];
    EXPECT(ranks_in_job(&sl) == 16 && sl.nnodes == 2 && sl.node_rank == 1, "under Slurm: node 1 of 2, 16 ranks");
    EXPECT(!strcmp(ranks_place_line(&sl, line, sizeof line),
                   "node 1 of 2 (SLURM_NODEID, SLURM_NNODES), 8 GPUs a node (--gpus), run id slurm-4242.0 (SLURM_JOB_ID, "
                   "SLURM_STEP_ID), rendezvous tcp://10.0.0.1:29500 (--rendezvous)"),
           "the first line names where each value came from: %s", line);
    RankOpts fl = RANK_DEFAULTS;
    fl.nnodes = 4, fl.node_rank = 3, fl.comm.run_id = "r1", fl.rendezvous = "/shared/rdv";
    ranks_check_opts(&fl, 0);
    EXPECT(ranks_in_job(&fl) == 32 && !strcmp(ranks_place_line(&fl, line, sizeof line),
                                                  "node 3 of 4 (--node-rank, --nnodes), 8 GPUs a node (all visible), "
                                                  "run id r1 (--run-id), rendezvous /shared/rdv (--rendezvous)"),
           "flags given win over Slurm's variables: %s", line);
    RankOpts lr = RANK_DEFAULTS;
    lr.local_ranks = 2;
    ranks_check_opts(&lr, 0);
    EXPECT(lr.nnodes == 1 && lr.node_rank == 0 && !ranks_place_line(&lr, line, sizeof line)[0],
           "--local-ranks under Slurm is one process: node 0 of 1, nothing to say");
    unsetenv("SLURM_NNODES"), unsetenv("SLURM_NODEID"), unsetenv("SLURM_JOB_ID"), unsetenv("SLURM_STEP_ID");
    RankOpts one = RANK_DEFAULTS;
    ranks_check_opts(&one, 0);
    EXPECT(ranks_in_job(&one) == 8 && !ranks_place_line(&one, line, sizeof line)[0],
           "one node without Slurm prints no such line");
    return test_summary();
}
