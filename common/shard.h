/* shard.h -- the FSDP / ZeRO-3 shard layout over P ranks. The parameter table (model.h) is cut
 * into units: the embedding, each decoder layer (one contiguous block), and the tail (final norm,
 * untied lm_head). Each unit is split evenly over the ranks, padded to P * shard elements, shard
 * a multiple of 64 (128-byte aligned bf16). Rank r owns elements [r*shard, (r+1)*shard) of each
 * unit; its optimizer state, fp32 master and gradient shards are the concatenation of its pieces
 * of every unit, in unit order. An all-gather of a unit's shards (in rank order) is the unit. */
#ifndef LONGCTX_SHARD_H
#define LONGCTX_SHARD_H

#include <stdint.h>

#include "model.h"

typedef struct {
    int64_t begin, end;   /* the unit's range in the flat parameter layout (elements) */
    int64_t shard;        /* elements per rank (padded) */
    int64_t shard_offset; /* where this unit's piece starts in every rank's shard buffers */
} ShardUnit;

typedef struct {
    int P;
    int64_t nunits;       /* layers + 2 */
    ShardUnit *u;         /* [0] embedding, [1 + l] layer l, [nunits-1] tail */
    int64_t shard_total;  /* elements of every rank's shard buffers */
    int64_t max_unit;     /* largest padded unit (P * shard): the size of a gathered buffer */
    int64_t max_layer;    /* largest padded decoder-layer unit */
} ShardLayout;

void shard_build(const ParamTable *t, int P, ShardLayout *s);
void shard_free(ShardLayout *s);
int64_t shard_unit_of(const ShardLayout *s, const ParamInfo *p); /* unit index holding p */
/* The pieces of every tensor that rank r owns (model.h: Piece.at is the offset in the rank's shard
 * buffers); AdamW and checkpoint I/O run per piece. Returns the count, *out malloc'd. */
int64_t shard_pieces(const ShardLayout *s, const ParamTable *t, int r, Piece **out);

#endif
