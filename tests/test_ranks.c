/* test_ranks.c -- how the several-GPU stages count their ranks, with the device count stubbed (no
 * GPU needed; CI runs it): --gpus omitted on an 8-GPU node is 8 ranks here and 8 per node, so the
 * host plan divides the node's memory by 8 (it once counted 1 and gave every rank the whole node).
 * Then what the options check refuses before any GPU call (each in a child process: a refusal
 * exits): more GPUs a node than its rank threads can be, several nodes without a rendezvous, a
 * rendezvous that cannot work, Slurm running other than one task per node; and Slurm's step
 * node count preferred to its allocation's.
 * Run from the repository root: ./build/test_ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/ranks.h"
#include "test.h"

static int eight(void) { return 8; }
static int seventeen(void) { return 17; }
static int calls;
static int counted(void) { calls++; return 4; }

static const char *const SLURM_VARS[] = {"SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_NODES", "SLURM_NODEID",
                                         "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_JOB_ID",
                                         "SLURM_STEP_ID", "SLURM_RESTART_COUNT", "LONGCTX_RUN_ID"};
static void slurm_clear(void) {
    for (size_t i = 0; i < sizeof SLURM_VARS / sizeof *SLURM_VARS; i++) unsetenv(SLURM_VARS[i]);
}

/* the options check, then the rank count, in a child: its exit status (0: accepted; a refusal's is
 * 2) and the last line it printed, in last */
static int check_in_child(RankOpts o, char *last, size_t n) {
    int fd[2];
    if (pipe(fd)) return -1;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1), dup2(fd[1], 2);
        ranks_check_opts(&o, 0);
        ranks_in_job(&o);
        fflush(stdout);
        _exit(0);
    }
    close(fd[1]);
    char out[8192];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof out - 1 && (k = read(fd[0], out + got, sizeof out - 1 - got)) > 0) got += (size_t)k;
    out[got] = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    while (got && out[got - 1] == '\n') out[--got] = 0;
    const char *b = strrchr(out, '\n');
    snprintf(last, n, "%.1000s", b ? b + 1 : out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
#define REFUSES(o, words, ...)                                                                                         \
    do {                                                                                                               \
        char last_[1024];                                                                                              \
        const int rc_ = check_in_child((o), last_, sizeof last_);                                                      \
        EXPECT(rc_ == 2 && strstr(last_, (words)) && !strncmp(last_, "longctx: ", 9), __VA_ARGS__);                    \
        printf("  -> %s\n", last_);                                                                                    \
    } while (0)
#define ACCEPTS(o, ...)                                                                                                \
    do {                                                                                                               \
        char last_[1024];                                                                                              \
        const int rc_ = check_in_child((o), last_, sizeof last_);                                                      \
        EXPECT(rc_ == 0, __VA_ARGS__);                                                                                 \
        if (rc_) printf("  -> %s\n", last_);                                                                           \
    } while (0)

static void refusals(void) {
    ranks_device_count = eight;
    RankOpts o = RANK_DEFAULTS;
    o.gpus = 17;
    REFUSES(o, "--gpus 17: at most 16 GPUs a node", "--gpus 17 is refused by name (one rank thread a GPU, 16 at most)");
    o.rehearse = 3;
    ACCEPTS(o, "--gpus 17 --rehearse 3: a rehearsal plans a rank of a larger node");
    ranks_device_count = seventeen;
    RankOpts all = RANK_DEFAULTS;
    REFUSES(all, "17 GPUs visible: at most 16 GPUs a node", "--gpus omitted on a 17-GPU node is refused by name");
    all.gpus = 16;
    ACCEPTS(all, "--gpus 16 on a 17-GPU node runs 16 ranks");
    ranks_device_count = eight;
    RankOpts two = RANK_DEFAULTS;
    two.gpus = 8, two.nnodes = 2, two.node_rank = 0;
    REFUSES(two, "2 nodes (from --nnodes) need --rendezvous", "two nodes without --rendezvous are refused");
    two.rehearse = 9;
    ACCEPTS(two, "a rehearsal of two nodes needs no rendezvous");
    two.rehearse = -1;
    char dir[] = "/tmp/test_ranks_XXXXXX", path[256];
    if (!mkdtemp(dir)) { EXPECT(0, "mkdtemp"); return; }
    snprintf(path, sizeof path, "%s/missing/rdv", dir);
    two.rendezvous = path;
    REFUSES(two, "does not exist", "node 0's rendezvous file in a missing directory is refused (%s)", path);
    two.node_rank = 1;
    ACCEPTS(two, "node 1 waits for the file: its directory may appear (a shared filesystem)");
    two.node_rank = 0, two.rendezvous = dir;
    REFUSES(two, "is a directory", "a rendezvous path that is a directory is refused");
    snprintf(path, sizeof path, "%s/rdv", dir);
    two.rendezvous = path;
    ACCEPTS(two, "node 0's rendezvous file in an existing directory");
    rmdir(dir);
    two.rendezvous = "tcp://node..0:29500";
    REFUSES(two, "does not resolve", "a rendezvous host that does not resolve is refused");
    two.node_rank = 1;
    REFUSES(two, "does not resolve", "... on every node");
    two.rendezvous = "tcp://127.0.0.1:29500";
    ACCEPTS(two, "a rendezvous address that resolves");
    /* Slurm: one task per node, the step's node count */
    RankOpts sl = RANK_DEFAULTS;
    sl.gpus = 8, sl.rendezvous = "tcp://127.0.0.1:29500";
    setenv("SLURM_NNODES", "4", 1), setenv("SLURM_STEP_NUM_NODES", "2", 1), setenv("SLURM_NODEID", "1", 1);
    setenv("SLURM_JOB_ID", "77", 1), setenv("SLURM_STEP_ID", "0", 1);
    RankOpts st = sl;
    ranks_check_opts(&st, 0);
    EXPECT(st.nnodes == 2 && st.node_rank == 1 && !strcmp(st.nnodes_from, "SLURM_STEP_NUM_NODES"),
           "inside a step of 2 nodes of a 4-node allocation: node 1 of 2 (SLURM_STEP_NUM_NODES), got %lld of %lld (%s)",
           (long long)st.node_rank, (long long)st.nnodes, st.nnodes_from);
    setenv("SLURM_PROCID", "1", 1), setenv("SLURM_NTASKS", "2", 1);
    ACCEPTS(sl, "srun --ntasks-per-node=1: task 1 on node 1, 2 tasks on 2 nodes");
    setenv("SLURM_PROCID", "3", 1);
    REFUSES(sl, "SLURM_PROCID", "a task whose SLURM_PROCID is not its node's index is refused");
    setenv("SLURM_PROCID", "1", 1), setenv("SLURM_NTASKS", "16", 1);
    REFUSES(sl, "SLURM_NTASKS", "a step of 16 tasks on 2 nodes is refused");
    slurm_clear();
    setenv("SLURM_NNODES", "1", 1), setenv("SLURM_NODEID", "0", 1), setenv("SLURM_NTASKS", "8", 1);
    ACCEPTS(sl, "a batch script (no step) of a one-node job with 8 tasks: one process, accepted");
    slurm_clear();
}

int main(void) {
    slurm_clear(); /* a test run inside a Slurm job sees only what it sets */
    /* the nodes' checks below are about places and paths: every node holds the job secret */
    unsetenv("LONGCTX_JOB_SECRET_FILE");
    setenv("LONGCTX_JOB_SECRET", "a secret these tests' nodes share", 1);
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
    refusals();
    return test_summary();
}
