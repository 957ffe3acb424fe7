/* tensor.c -- arena carving. */
#include "tensor.h"

#include "check.h"

_Thread_local int longctx_rank = -1;
int longctx_print_rank = 0;

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
