/* tensor.h -- arenas: one allocation per memory category, carved into tensors with a bump
 * pointer. Sizes are 64-bit; alignment 256 bytes (cuBLASLt/cuDNN want 16, we give more).
 * An arena has a place: GPU memory, or pinned host memory (offload, stage 4). An arena with a
 * NULL base is a planner: it only counts, so the same carving code computes the memory plan on
 * a machine without a GPU and allocates on one with (arenas_allocate, common/gpu.h). */
#ifndef LONGCTX_TENSOR_H
#define LONGCTX_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ON_GPU, ON_HOST } Place;

typedef struct {
    const char *name;   /* category, for the memory table */
    Place place;
    char *base;         /* NULL: planning only */
    int64_t cap;        /* bytes available (planning: unlimited) */
    int64_t used;       /* bytes carved so far */
    int64_t high;       /* high-water mark of used */
} Arena;

#define ARENA_ALIGN 256
#define BF(n) ((int64_t)(n) * 2)  /* bytes of n bf16 */
#define F32(n) ((int64_t)(n) * 4) /* bytes of n fp32 */

/* every arena of a stage: name and place, planning mode (base NULL, nothing used) */
typedef struct {
    const char *name;
    Place place;
} ArenaSpec;
void arenas_plan(Arena *a, const ArenaSpec *spec, int n);

/* bytes (rounded up to ARENA_ALIGN); returns NULL in planning mode. Dies if a real arena is full. */
void *arena_take(Arena *a, int64_t bytes, const char *what);
static inline int64_t arena_mark(const Arena *a) { return a->used; }
static inline void arena_release(Arena *a, int64_t mark) { a->used = mark; }

#endif
