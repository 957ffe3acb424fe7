/* test_run.c -- the run's host logic that needs the GPU objects to link, not a GPU to run
 * (common/run.c, common/train.c): stopping on SIGTERM and SIGUSR1. Each case runs in a child
 * process, which the signals and exit statuses are about:
 *   - with --save the handler is armed as the options are read (run_opts_check): a signal then is
 *     kept, not fatal, and the stop it asks for exits 75 (PREEMPT_EXIT), not 0;
 *   - a signal that came while the inputs were read stops the run there, exit 75;
 *   - a second signal ends the process at once: one line on stderr, status 128 + the signal;
 *   - a signal that came after the last step (during the final save) leaves the finished run's 0;
 *   - without --save a signal keeps its default (the process dies of it).
 * Prints "N passed, M failed". */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/check.h"
#include "../common/run.h"
#include "../common/train.h"
#include "test.h"

typedef struct {
    int status;
    char out[2048], err[2048];
} Child;

/* run fn in a child with stdout and stderr captured */
static Child in_child(void (*fn)(void)) {
    Child c = {0};
    int po[2], pe[2];
    if (pipe(po) || pipe(pe)) DIE("pipe");
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(po[1], 1), dup2(pe[1], 2);
        close(po[0]), close(pe[0]);
        fn();
        exit(0);
    }
    close(po[1]), close(pe[1]);
    waitpid(pid, &c.status, 0);
    ssize_t n = read(po[0], c.out, sizeof c.out - 1);
    c.out[n > 0 ? n : 0] = 0;
    n = read(pe[0], c.err, sizeof c.err - 1);
    c.err[n > 0 ? n : 0] = 0;
    close(po[0]), close(pe[0]);
    return c;
}

static void with_save(void) {
    RunOpts r = RUN_DEFAULTS;
    const char *model = "0.6B";
    r.save = "/tmp/unused";
    run_opts_check(&r, &model, 0, 10);
}

static void stop_after_step(void) {
    with_save();
    raise(SIGTERM);
    if (preempt_pending() != SIGTERM) _exit(3);
    preempt_report(preempt_pending(), 3, 0, "CK");
    say("done: 1.0 s\n"); /* main returns 0: the status is the stop's */
}
static void stop_while_reading(void) {
    with_save();
    raise(SIGUSR1);
    preempt_stop_early("while the inputs were read");
    _exit(4); /* not reached */
}
static void second_signal(void) {
    with_save();
    raise(SIGUSR1);
    raise(SIGUSR1);
    _exit(5); /* not reached */
}
static void signal_after_last_step(void) {
    with_save();
    raise(SIGTERM); /* during the final save: the run finished */
}
static void without_save(void) {
    RunOpts r = RUN_DEFAULTS;
    const char *model = "0.6B";
    run_opts_check(&r, &model, 0, 10);
    raise(SIGTERM);
    _exit(6); /* not reached */
}

int main(void) {
    longctx_prog = "stage1";
    Child c = in_child(stop_after_step);
    EXPECT(WIFEXITED(c.status) && WEXITSTATUS(c.status) == PREEMPT_EXIT &&
               strstr(c.out, "stopping after step 3 on SIGTERM") && strstr(c.out, "(exit status 75)"),
           "a stop on SIGTERM after a step exits 75 and says so (status %d): %s", c.status, c.out);
    c = in_child(stop_while_reading);
    EXPECT(WIFEXITED(c.status) && WEXITSTATUS(c.status) == PREEMPT_EXIT &&
               strstr(c.out, "stopping on SIGUSR1 while the inputs were read, before training"),
           "a signal while the inputs were read stops there, exit 75 (status %d): %s", c.status, c.out);
    c = in_child(second_signal);
    EXPECT(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 128 + SIGUSR1 &&
               strstr(c.err, "stage1: a second SIGUSR1: stopping at once, status 138"),
           "a second signal ends the process at once, 128 + the signal (status %d): %s", c.status, c.err);
    c = in_child(signal_after_last_step);
    EXPECT(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0,
           "a signal the loop never acted on (the run finished) leaves exit 0 (status %d)", c.status);
    c = in_child(without_save);
    EXPECT(WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGTERM,
           "without --save SIGTERM keeps its default: the process dies of it (status %d)", c.status);
    return test_summary();
}
