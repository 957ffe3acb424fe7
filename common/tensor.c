/* tensor.c -- arena carving. */
#include "tensor.h"

#include "check.h"

#include <stdarg.h>
#include <unistd.h>

_Thread_local int longctx_rank = -1;
int longctx_print_rank = 0;
const char *longctx_prog = "longctx";
int longctx_midline;

/* ---------------------------------------------------------------- the fatal path (check.h) */
#define MAX_FATAL_HOOKS 8
static void (*fatal_hooks[MAX_FATAL_HOOKS])(void);
static int fatal_nhooks, dying;

void longctx_on_fatal(void (*fn)(void)) {
    const int i = __atomic_fetch_add(&fatal_nhooks, 1, __ATOMIC_ACQ_REL);
    if (i >= MAX_FATAL_HOOKS) { fprintf(stderr, "error: more than %d fatal hooks\n", MAX_FATAL_HOOKS); _exit(1); }
    __atomic_store_n(&fatal_hooks[i], fn, __ATOMIC_RELEASE);
}

int longctx_dying(void) { return __atomic_load_n(&dying, __ATOMIC_ACQUIRE); }

/* the first thread to call takes the process down; a later one (another rank failing on the
 * communicators the first one aborted) must not print: its message would be a consequence, and
 * would land below the reason, where the reader looks first */
static void claim_or_wait(void) {
    if (__atomic_exchange_n(&dying, 1, __ATOMIC_ACQ_REL))
        for (;;) pause();
}

static _Noreturn void run_hooks_and_exit(int code) {
    alarm(60); /* a hook that blocks (an abort waiting on a dead network) must not keep the process */
    const int n = __atomic_load_n(&fatal_nhooks, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n && i < MAX_FATAL_HOOKS; i++) {
        void (*fn)(void) = __atomic_load_n(&fatal_hooks[i], __ATOMIC_ACQUIRE);
        if (fn) fn();
    }
    fflush(NULL);
    _exit(code);
}

_Noreturn void longctx_fail(int code, const char *file, int line, const char *fmt, ...) {
    claim_or_wait();
    char msg[2048];
    int n = 0;
    if (longctx_rank >= 0 && file) n = snprintf(msg, sizeof msg, "rank %d: ", longctx_rank);
    if (file) n += snprintf(msg + n, sizeof msg - (size_t)n, "error %s:%d: ", file, line);
    else n += snprintf(msg + n, sizeof msg - (size_t)n, "%s: ", longctx_prog);
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    fflush(stdout); /* what the run printed first, then the reason it stops */
    fprintf(stderr, "%s%s\n", __atomic_load_n(&longctx_midline, __ATOMIC_ACQUIRE) ? "\n" : "", msg);
    run_hooks_and_exit(code);
}

_Noreturn void longctx_die(int code) {
    claim_or_wait();
    run_hooks_and_exit(code);
}

void arenas_plan(Arena *a, const ArenaSpec *spec, int n) {
    for (int i = 0; i < n; i++) a[i] = (Arena){spec[i].name, spec[i].place, NULL, 0, 0, 0};
}

void *arena_take(Arena *a, int64_t bytes, const char *what) {
    const int64_t n = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    const int64_t at = a->used;
    if (a->base && at + n > a->cap)
        DIE("arena \"%s\" full taking %s (%lld bytes; %lld of %lld used): the memory plan is wrong", a->name, what,
            (long long)bytes, (long long)at, (long long)a->cap);
    a->used += n;
    if (a->used > a->high) a->high = a->used;
    return a->base ? a->base + at : NULL;
}
