/* tokens.h -- the token file (DESIGN.md section 6) and the step window loader.
 * Layout: 24-byte header {char magic[8] = "LCTOKENS"; uint32 version = 1; uint32 token_bytes = 4;
 * int64 count}, then count little-endian uint32 token ids. */
#ifndef LONGCTX_TOKENS_H
#define LONGCTX_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#define TOKENS_MAGIC "LCTOKENS"
#define TOKENS_VERSION 1
#define TOKENS_HEADER_BYTES 24
#define TOKEN_ENDOFTEXT 151643

typedef struct {
    char path[1024];
    int64_t count;     /* tokens in the file */
    uint32_t *ids;     /* [count], the whole file in host memory */
} TokenFile;

/* Open and validate (magic, version, width, size, every id < vocab). Returns 0 or -1 + message. */
int tokens_open(const char *path, int64_t vocab, TokenFile *tf, char *err, size_t errlen);
void tokens_close(TokenFile *tf);
int tokens_write(const char *path, const uint32_t *ids, int64_t n, char *err, size_t errlen);

/* Windows of seq+1 tokens (inputs and shifted labels) that start seq tokens apart. Global window
 * g = step * world + rank, so data-parallel ranks read disjoint windows and the position follows
 * from the step alone (resume is exact); the file wraps around with a new epoch. */
typedef struct {
    const TokenFile *tf;
    int64_t seq;
    int world, rank;
    int64_t windows;   /* windows per epoch */
} Loader;

int loader_init(Loader *ld, const TokenFile *tf, int64_t seq, int world, int rank, char *err, size_t errlen);
/* Fill ids[seq+1] for the given step; returns the epoch (0-based) of that window. */
int64_t loader_window(const Loader *ld, int64_t step, uint32_t *ids);

#endif
