/* tokens.h -- the token file (README.md, section Data) and the step window loader.
 * Layout: 24-byte header {char magic[8] = "LCTOKENS"; uint32 version; uint32 token_bytes = 4;
 * int64 count}, then count little-endian uint32 token ids;
 *   version 1: nothing more (every label carries loss);
 *   version 2: then count uint8 loss weights, 0 or 1, one per token: weights[i] says whether token
 *              i counts as a label (is predicted with loss). A prompt's tokens carry 0, its
 *              completion's 1 (data/prepare.py --jsonl writes them);
 *   versions 3 and 4: 1 and 2 with a 32-byte tag after the header, naming the tokenizer that made the
 *              ids (NUL-padded ASCII: "qwen3" for Qwen2/Qwen3's, or "eot=ID,vocab=N" for another's,
 *              Qwen3.5's "eot=248044,vocab=248077"), so a model is not trained on another tokenizer's ids (data/prepare.py
 *              writes them; a file without a tag is taken as it is). */
#ifndef LONGCTX_TOKENS_H
#define LONGCTX_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#define TOKENS_MAGIC "LCTOKENS"
#define TOKENS_VERSION 1          /* ids only */
#define TOKENS_VERSION_WEIGHTS 2  /* ids, then a loss weight per token */
#define TOKENS_VERSION_TAGGED 3   /* 1 with the tokenizer's tag */
#define TOKENS_VERSION_TAGGED_WEIGHTS 4 /* 2 with the tokenizer's tag */
#define TOKENS_TAG_BYTES 32
#define TOKENS_TAG_QWEN3 "qwen3"  /* the Qwen2/Qwen3 tokenizer's tag (<|endoftext|> 151643) */
#define TOKENS_HEADER_BYTES 24
#define TOKEN_ENDOFTEXT 151643
#define TOKENS_SHIPPED "data/books.tok" /* the default --data: six novels, shipped with the repository */

typedef struct {
    char path[1024];
    int64_t count;     /* tokens in the file */
    uint32_t *ids;     /* [count], the whole file in host memory */
    uint8_t *weights;  /* [count] loss weights (0/1), or NULL: a version-1 file, every label counts */
    int64_t counted;   /* labels of weight 1 (count without weights) */
    char tokenizer[TOKENS_TAG_BYTES + 1]; /* the tag of the tokenizer that made the ids; "" when untagged */
} TokenFile;

/* Open and validate (magic, version, width, size, every id < vocab, every weight 0 or 1). A file
 * with loss weights is refused unless with_weights (a reader that cannot apply them must not score
 * every label silently). Returns 0 or -1 + message. The trainers pass with_weights 1. */
int tokens_open_file(const char *path, int64_t vocab, int with_weights, TokenFile *tf, char *err, size_t errlen);
/* for tools that use the ids alone: tokens_open_file without loss weights */
int tokens_open(const char *path, int64_t vocab, TokenFile *tf, char *err, size_t errlen);
void tokens_close(TokenFile *tf);
int tokens_write(const char *path, const uint32_t *ids, int64_t n, char *err, size_t errlen);
/* version 2 with weights[n] (0/1); weights NULL: version 1 */
int tokens_write_weighted(const char *path, const uint32_t *ids, const uint8_t *weights, int64_t n, char *err,
                          size_t errlen);
/* versions 3 and 4: the same with the tokenizer's tag (at most 32 ASCII bytes) */
int tokens_write_tagged(const char *path, const uint32_t *ids, const uint8_t *weights, int64_t n, const char *tag,
                        char *err, size_t errlen);
/* 0, or -1 with err when a tagged file's tokenizer is not the model's: Qwen3 models read Qwen3's ids
 * (tag "qwen3"), a Qwen3.5 hybrid another tokenizer's (qwen3_tokens 0) */
int tokens_check_tokenizer(const TokenFile *tf, int qwen3_tokens, const char *model, char *err, size_t errlen);
/* The end-of-text id a tag names ("eot=ID,vocab=N", what data/prepare.py writes for another
 * generation's tokenizer), or -1. tokens_file_eot reads it from a file's header alone (-1 when
 * untagged, or unreadable: tokens_open_file says why later). */
int64_t tokens_tag_eot(const char *tag);
/* the vocabulary such a tag names (its tokenizer's largest id + 1), or -1 */
int64_t tokens_tag_vocab(const char *tag);
int64_t tokens_file_eot(const char *path);

/* Windows of seq+1 tokens (inputs and shifted labels) that start seq tokens apart. Global window
 * g = step * world + rank, so data-parallel ranks read disjoint windows and the position follows
 * from the step alone (resume is exact); the file wraps around with a new epoch. */
typedef struct {
    const TokenFile *tf;
    int64_t seq;
    int world, rank;
    int64_t windows;   /* windows per epoch */
    int64_t eot;       /* --packing: the end-of-text id (a label after it, the next document's first
                        * token, counts no loss: common/docs.h); -1: not packed */
    int64_t epoch;     /* the epoch of the window loader_next read last (-1: none yet) */
} Loader;

int loader_init(Loader *ld, const TokenFile *tf, int64_t seq, int world, int rank, char *err, size_t errlen);
/* --packing: a label whose input is eot (the next document's first token) counts no loss, in the
 * weights and every count below. */
void loader_pack(Loader *ld, uint32_t eot);
/* Fill ids[seq+1] for the given step; returns the epoch (0-based) of that window. */
int64_t loader_window(const Loader *ld, int64_t step, uint32_t *ids);
/* the same, as a run reads its windows: ld->epoch set, and a line when a new epoch begins */
int64_t loader_next(Loader *ld, int64_t step, uint32_t *ids);
/* the lines a run's data prints once opened: its windows, and its loss mask if it has one */
void loader_report(const Loader *ld);
/* the same window's loss weights, w[seq+1] aligned with ids (all 1 for a file without weights);
 * returns the labels that count (w[1..seq]) */
int64_t loader_weights(const Loader *ld, int64_t step, uint8_t *w);
/* The labels that count in the whole step: over the windows of every data-parallel rank (world of
 * them). Each rank reads the others' weights from its own copy of the file, so every rank knows the
 * loss's denominator before its first kernel, with no collective. */
int64_t loader_counted_job(const Loader *ld, int64_t step);
/* The first step in [from, to) whose windows (every data-parallel rank's) hold a label that counts,
 * or -1 when none does. It looks at no more steps than cover every window of the file once, so it
 * is one pass over the file at most. */
int64_t loader_first_counted(const Loader *ld, int64_t from, int64_t to);
/* an evaluation of `steps` loader steps (steps * world windows from the file's start): every window
 * read once, and some label counts. Returns 0 or -1 + message. */
int loader_check_eval(const Loader *ld, int64_t steps, char *err, size_t errlen);
/* of the first `steps` steps, those with no label that counts (skipped, no update): a resumed run
 * counts AdamW's updates as the uninterrupted one did */
int64_t loader_skipped_before(const Loader *ld, int64_t steps);
/* a 52-bit digest of what decides a step's denominator and its skip: the token count, the labels
 * that count and every weight. Ranks compare it, since each reads its own copy of the file. */
int64_t tokens_digest(const TokenFile *tf);
/* A 52-bit digest of what a run reads from the file: the token count, every id and every loss
 * weight (not the header: a file tagged again trains the same). A save records it and --resume
 * compares it, so a resumed run reads the windows the saved one would have. One pass over the
 * file at memory speed (four independent lanes), done only when a run saves or resumes. */
int64_t tokens_content_digest(const TokenFile *tf);
/* the same for a loader: with --packing also where the end-of-text tokens are (they decide which
 * labels count), so ranks that compare it divide by the same counts and skip the same steps */
int64_t loader_digest(const Loader *ld);

#endif
