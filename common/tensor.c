/* tensor.c -- arena carving. */
#include "tensor.h"

#include "check.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
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

/* ---------------------------------------------------------------- long names in messages */
static int continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

void shorten_into(char *out, size_t n, const char *s, size_t len) {
    if (len < n) { memcpy(out, s, len); out[len] = 0; return; }
    size_t head = (n - 4) / 2, tail = n - 4 - head; /* head + "..." + tail + NUL */
    while (head > 0 && continuation((unsigned char)s[head])) head--; /* never half a character */
    size_t from = len - tail;
    while (from < len && continuation((unsigned char)s[from])) from++;
    memcpy(out, s, head);
    memcpy(out + head, "...", 3);
    memcpy(out + head + 3, s + from, len - from);
    out[head + 3 + len - from] = 0;
}

const char *short_name(const char *s) {
    static _Thread_local char buf[8][NAME_SHOWN + 1];
    static _Thread_local int next;
    if (!s) return "(null)";
    const size_t len = strlen(s);
    if (len <= NAME_SHOWN) return s;
    char *b = buf[next++ & 7];
    shorten_into(b, sizeof buf[0], s, len);
    return b;
}

/* every run of more than NAME_SHOWN non-blank bytes of msg shortened, into out[n] */
static void shorten_words(const char *msg, char *out, size_t n) {
    size_t o = 0;
    for (const char *p = msg; *p && o + 1 < n;) {
        size_t w = 0;
        while (p[w] && p[w] != ' ') w++;
        if (!w) { out[o++] = *p++; continue; }
        char word[NAME_SHOWN + 1];
        const char *src = p;
        size_t len = w;
        if (w > NAME_SHOWN) shorten_into(word, sizeof word, p, w), src = word, len = strlen(word);
        if (o + len >= n) len = n - o - 1;
        memcpy(out + o, src, len);
        o += len;
        p += w;
    }
    out[o] = 0;
}

static _Thread_local jmp_buf *stop_catcher;
static _Thread_local char *stop_msg;
static _Thread_local size_t stop_msg_n;

int longctx_catch_stop(void (*fn)(void *), void *arg, char *msg, size_t n) {
    jmp_buf jb, *const prev = stop_catcher;
    char *const prev_msg = stop_msg;
    const size_t prev_n = stop_msg_n;
    if (setjmp(jb)) {
        stop_catcher = prev, stop_msg = prev_msg, stop_msg_n = prev_n;
        return 2;
    }
    stop_catcher = &jb, stop_msg = msg, stop_msg_n = n;
    msg[0] = 0;
    fn(arg);
    stop_catcher = prev, stop_msg = prev_msg, stop_msg_n = prev_n;
    return 0;
}

_Noreturn void longctx_fail(int code, const char *file, int line, const char *fmt, ...) {
    if (code == 2 && !file && stop_catcher) { /* a STOP inside longctx_catch_stop: its message, then back there */
        char *m = NULL;
        va_list ap;
        va_start(ap, fmt);
        const int len = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (len >= 0 && (m = malloc((size_t)len + 1))) {
            va_start(ap, fmt);
            vsnprintf(m, (size_t)len + 1, fmt, ap);
            va_end(ap);
        }
        shorten_words(m ? m : "(out of memory formatting the message)", stop_msg, stop_msg_n);
        free(m);
        longjmp(*stop_catcher, 1);
    }
    claim_or_wait();
    char head[320], *msg, out[4096];
    if (longctx_rank >= 0 && file) snprintf(head, sizeof head, "rank %d: error %s:%d: ", longctx_rank, file, line);
    else if (file) snprintf(head, sizeof head, "error %s:%d: ", file, line);
    else snprintf(head, sizeof head, "%s: ", longctx_prog);
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int len = vsnprintf(NULL, 0, fmt, ap); /* the whole message, however long its names */
    va_end(ap);
    msg = malloc(len > 0 ? (size_t)len + 1 : 1);
    if (msg && len >= 0) vsnprintf(msg, (size_t)len + 1, fmt, ap2);
    else if (msg) msg[0] = 0;
    va_end(ap2);
    shorten_words(msg ? msg : "(out of memory formatting the message)", out, sizeof out);
    fflush(stdout); /* what the run printed first, then the reason it stops */
    fprintf(stderr, "%s%s%s\n", __atomic_load_n(&longctx_midline, __ATOMIC_ACQUIRE) ? "\n" : "", head, out);
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
