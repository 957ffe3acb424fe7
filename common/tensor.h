/* tensor.h -- arenas: one allocation per memory category, carved into tensors with a bump
 * pointer. Sizes are 64-bit; alignment 256 bytes (cuBLASLt/cuDNN want 16, we give more).
 * An arena with a NULL base is a planner: it only counts, so the same carving code computes
 * the memory plan on a machine without a GPU and allocates on one with. */
#ifndef LONGCTX_TENSOR_H
#define LONGCTX_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;   /* category, for the memory table */
    char *base;         /* NULL: planning only */
    int64_t cap;        /* bytes available (planning: unlimited) */
    int64_t used;       /* bytes carved so far */
    int64_t high;       /* high-water mark of used */
} Arena;

#define ARENA_ALIGN 256

static inline void arena_init(Arena *a, const char *name, void *base, int64_t cap) {
    a->name = name;
    a->base = (char *)base;
    a->cap = cap;
    a->used = a->high = 0;
}
/* bytes (rounded up to ARENA_ALIGN); returns NULL in planning mode. Dies if a real arena is full. */
void *arena_take(Arena *a, int64_t bytes, const char *what);
static inline int64_t arena_mark(const Arena *a) { return a->used; }
static inline void arena_release(Arena *a, int64_t mark) { a->used = mark; }

#endif
