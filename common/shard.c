/* shard.c -- FSDP shard layout. */
#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void shard_build(const ParamTable *t, int P, ShardLayout *s) {
    memset(s, 0, sizeof *s);
    const int64_t L = t->layers;
    s->P = P;
    s->nunits = L + 2;
    s->u = xcalloc((size_t)s->nunits, sizeof(ShardUnit));
    s->u[0] = (ShardUnit){0, t->layer_begin, 0, 0};
    for (int64_t l = 0; l < L; l++) s->u[1 + l] = (ShardUnit){t->layer_at[l], t->layer_at[l + 1], 0, 0};
    s->u[L + 1] = (ShardUnit){t->layer_at[L], t->total, 0, 0};
    for (int64_t i = 0; i < s->nunits; i++) {
        ShardUnit *u = &s->u[i];
        u->shard = cdiv(cdiv(u->end - u->begin, P), 64) * 64;
        u->shard_offset = s->shard_total;
        s->shard_total += u->shard;
        if (P * u->shard > s->max_unit) s->max_unit = P * u->shard;
        if (i >= 1 && i <= L && P * u->shard > s->max_layer) s->max_layer = P * u->shard;
    }
}

void shard_free(ShardLayout *s) {
    free(s->u);
    memset(s, 0, sizeof *s);
}

int64_t shard_unit_of(const ShardLayout *s, const ParamInfo *p) {
    for (int64_t i = 0; i < s->nunits; i++)
        if (p->offset >= s->u[i].begin && p->offset < s->u[i].end) return i;
    DIE("parameter %s outside every unit", p->name);
}

int64_t shard_pieces(const ShardLayout *s, const ParamTable *t, int r, Piece **out) {
    Piece *pc = xcalloc((size_t)t->n, sizeof *pc);
    int64_t n = 0;
    for (int64_t i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        const ShardUnit *u = &s->u[shard_unit_of(s, p)];
        /* the tensor's range and rank r's range, both relative to the unit */
        const int64_t a0 = p->offset - u->begin, a1 = a0 + p->numel, b0 = (int64_t)r * u->shard, b1 = b0 + u->shard;
        const int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
        if (hi > lo) pc[n++] = (Piece){p, lo - a0, hi - lo, u->shard_offset + (lo - b0)};
    }
    *out = pc;
    return n;
}
