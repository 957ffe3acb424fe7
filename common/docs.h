/* docs.h -- packed documents (--packing). A window of the token file
 * holds several documents, each ended by <|endoftext|>. Packed, each attends only to itself,
 * causally, and its RoPE positions restart at 0, so a document computes exactly as it would alone.
 *
 * Attention then is a union of blocks. Take any attention call whose query rows and keys each come
 * as runs of consecutive global positions ("pieces": stage 1's whole sequence is one; a zigzag rank
 * holds two, and so does the K/V a ring step brings). For one query piece Q, one key piece K and
 * one document d, let q = Q n d and k = K n d (each an interval: documents are contiguous). The
 * pairs (query i, key j) that count are those with j <= i in q x k:
 *   - keys before every query (k ends at or before q starts): a full rectangle, no mask;
 *   - keys in the queries' own range ([a, b) = k n q): a causal square on [a, b), plus the queries
 *     after b against [a, b) as a rectangle;
 *   - keys after every query: nothing.
 * Every counted pair falls in exactly one block (docs.c says why), so the attention of the call is
 * the LSE merge of its blocks' results; a row no block reaches has LSE -inf and merges as nothing.
 * Documents that share nothing with a piece make no block at all: no kernel. */
#ifndef LONGCTX_DOCS_H
#define LONGCTX_DOCS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A padded cuDNN call (sdpa.h) reads its inputs in place, at the block's offset, and its flash
 * kernels load whole tiles: past a block's last row they read up to a tile's rows more, masked
 * out but multiplied (0 x NaN is NaN). So every buffer a block is read from is followed by this
 * many rows of finite values (zeros). Measured on the H200 (tests/test_gpu.c, packed documents):
 * 64 rows are too few at head dim 64, 128 suffice; twice that for margin. What that covers: the
 * reads of a block's own kernels past its last row. A padded plan's extent (sdpa_block_shape) can
 * reach further past the buffer; every test with blocks ending at a buffer's end gives exact
 * results, but whether cuDNN reads over the whole extent anywhere (its backward's preprocessing)
 * has not been measured: a compute-sanitizer run on exactly sized buffers would say. */
#define DOCS_SLACK_ROWS 256

/* --packing's value: NULL or "none" -> -1 (not packed); "" (the flag alone) -> the end of text the
 * token file `data` names in its tag (data/prepare.py's "eot=ID,..." for another generation's
 * tokenizer), else <|endoftext|> (TOKEN_ENDOFTEXT, what data/prepare.py writes after every document);
 * a token id < vocab -> that id (the tests' small vocabularies). -2 + message if bad. qwen3_tokens 0:
 * the model reads another tokenizer's ids (Qwen3.5), so the flag alone needs the file's tag. */
int64_t docs_eot_option(const char *v, int64_t vocab, int qwen3_tokens, const char *data, char *err, size_t errlen);

/* The line a --packing plan adds (the dry-run's too): what packing changes. */
void docs_plan_note(FILE *f, int64_t eot);

/* Where a window's documents start: 0, and after every end-of-text token but the last token.
 * start must hold S + 1 entries; start[n] = S. Returns n, the number of documents (>= 1). */
int64_t docs_split(const uint32_t *tok, int64_t S, uint32_t eot, int64_t *start);
/* Each token's RoPE position: its offset in its document. pos [S] */
void docs_positions(const int64_t *start, int64_t n, int32_t *pos);

/* A packed window on the host, and where each rank's rows sit in it. */
typedef struct {
    int64_t *start;     /* [seq + 1] where the window's documents start (docs_split) */
    int64_t n;          /* documents in the window */
    int32_t *pos;       /* [seq + S] each window position's RoPE position, from its document's start;
                         * after them, the S of this rank's rows (the stage fills them) */
    int64_t *rows;      /* [P, S] each rank's rows' positions in the window: one rank, 0..S-1 */
} DocsWindow;
/* for windows of seq tokens cut into P shares of S rows (rows set for one rank; more: the stage's) */
void docs_window_open(DocsWindow *d, int64_t seq, int64_t S, int P);
/* the window's documents and their positions: start, n, pos[0, seq) */
void docs_window_cut(DocsWindow *d, const uint32_t *tok, int64_t seq, uint32_t eot);

typedef struct {
    int64_t q0, nq;   /* query rows [q0, q0+nq) of the call (local rows) */
    int64_t k0, nk;   /* keys [k0, k0+nk) of the call (local rows) */
    int causal;       /* a square on one range (nq == nk): key j <= query i; else every pair */
} DocBlock;

/* The blocks of one attention call: query rows [q0, q0+nq) whose global positions are qpos[q0..],
 * keys [k0, k0+nk) at kpos[k0..]; documents start[0..n]. Writes at most cap blocks to out and
 * returns how many there are (more than cap: call again with room). */
int64_t docs_blocks(const int64_t *start, int64_t n, const int64_t *qpos, int64_t q0, int64_t nq, const int64_t *kpos,
                    int64_t k0, int64_t nk, DocBlock *out, int64_t cap);
/* The (query, key) pairs the blocks compute: the attention work actually done (FLOPs: 4 x pairs x
 * heads x head_dim forward). */
int64_t docs_pairs(const DocBlock *b, int64_t nb);

#endif
