/* tokens.c -- token files: validated reader, writer, and the per-step window loader. */
#define _FILE_OFFSET_BITS 64
#include "tokens.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "files.h"

static void put_u32(uint8_t *b, uint32_t v) { for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i)); }
static uint32_t get_u32(const uint8_t *b) { return b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }

int tokens_open_file(const char *path, int64_t vocab, int with_weights, TokenFile *tf, char *err, size_t errlen) {
    memset(tf, 0, sizeof *tf);
    FILE *f = file_open_regular(path, "token file", err, errlen);
    if (!f) return -1;
    struct stat sb;
    uint8_t h[TOKENS_HEADER_BYTES];
    int64_t size = fstat(fileno(f), &sb) ? -1 : (int64_t)sb.st_size;
    if (size < TOKENS_HEADER_BYTES || fread(h, 1, sizeof h, f) != sizeof h) {
        snprintf(err, errlen, "%s: truncated token file (no %d-byte header)", short_name(path), TOKENS_HEADER_BYTES);
        fclose(f);
        return -1;
    }
    uint64_t raw_count = 0; /* unsigned: a count with its top bit set must not shift into int64's sign */
    for (int i = 7; i >= 0; i--) raw_count = (raw_count << 8) | h[16 + i];
    const int64_t count = raw_count > (uint64_t)INT64_MAX ? -1 : (int64_t)raw_count; /* -1: refused below */
    const uint32_t version = get_u32(h + 8);
    const int weighted = version == TOKENS_VERSION_WEIGHTS || version == TOKENS_VERSION_TAGGED_WEIGHTS;
    const int tagged = version == TOKENS_VERSION_TAGGED || version == TOKENS_VERSION_TAGGED_WEIGHTS;
    const int64_t head = TOKENS_HEADER_BYTES + (tagged ? TOKENS_TAG_BYTES : 0);
    const char *why = NULL;
    if (memcmp(h, TOKENS_MAGIC, 8)) why = "wrong magic (not a longctx token file; make one with data/prepare.py)";
    else if (version < TOKENS_VERSION || version > TOKENS_VERSION_TAGGED_WEIGHTS) why = "unsupported version";
    else if (get_u32(h + 12) != 4) why = "token width is not 4 bytes";
    else if (count < 0 || count > size / 4 || size < head || size != head + (weighted ? 5 : 4) * count) /* no overflow */
        why = "truncated: size does not match the token count";
    else if (weighted && !with_weights)
        why = "carries loss weights (version 2 or 4, a prompt/completion file): this reader takes the ids alone and "
              "would score the prompts too; data/prepare.py without --jsonl writes a file without them";
    else if (tagged && fread(tf->tokenizer, 1, TOKENS_TAG_BYTES, f) != TOKENS_TAG_BYTES)
        why = "truncated: no tokenizer tag";
    for (int i = 0; tagged && !why && i < TOKENS_TAG_BYTES && tf->tokenizer[i]; i++)
        if (tf->tokenizer[i] < 32 || tf->tokenizer[i] > 126) why = "its tokenizer tag is not printable ASCII";
    if (why) {
        snprintf(err, errlen, "%s: %s (header count %lld, file %lld bytes)", short_name(path), why, (long long)count, (long long)size);
        fclose(f);
        return -1;
    }
    tf->ids = xmalloc((size_t)count * 4);
    if (weighted) tf->weights = xmalloc((size_t)(count ? count : 1));
    uint8_t *raw = (uint8_t *)tf->ids;
    if (fread(raw, 1, (size_t)count * 4, f) != (size_t)count * 4 ||
        (weighted && fread(tf->weights, 1, (size_t)count, f) != (size_t)count)) {
        snprintf(err, errlen, "%s: short read", short_name(path));
        fclose(f);
        tokens_close(tf);
        return -1;
    }
    fclose(f);
    tf->counted = count;
    for (int64_t i = 0; i < count; i++) {
        tf->ids[i] = get_u32(raw + 4 * i); /* in place: same width, little-endian on disk */
        if (vocab > 0 && tf->ids[i] >= (uint64_t)vocab) {
            snprintf(err, errlen, "%s: token %lld has id %u >= vocab size %lld (tokenized for another model?)", short_name(path),
                     (long long)i, tf->ids[i], (long long)vocab);
            tokens_close(tf);
            return -1;
        }
        if (weighted && tf->weights[i] > 1) {
            snprintf(err, errlen, "%s: token %lld has loss weight %u (0 or 1)", short_name(path), (long long)i, tf->weights[i]);
            tokens_close(tf);
            return -1;
        }
        if (weighted) tf->counted -= !tf->weights[i];
    }
    tf->count = count;
    snprintf(tf->path, sizeof tf->path, "%s", path);
    return 0;
}

int tokens_check_tokenizer(const TokenFile *tf, int qwen3_tokens, const char *model, char *err, size_t errlen) {
    if (!tf->tokenizer[0]) return 0; /* untagged (versions 1 and 2): taken as it is */
    const int qwen3 = !strcmp(tf->tokenizer, TOKENS_TAG_QWEN3);
    if (qwen3 == !!qwen3_tokens) return 0;
    snprintf(err, errlen, "%s: its ids are %s (\"%s\"), and %s reads %s: make its token file with "
             "data/prepare.py --tokenizer %s", short_name(tf->path), qwen3 ? "the Qwen3 tokenizer's" : "another tokenizer's",
             tf->tokenizer, model,
             qwen3_tokens ? "Qwen3's" : "its own tokenizer's (a Qwen3.5 hybrid)",
             qwen3_tokens ? "qwen3" : "qwen3.5 (or its MODEL_DIR/tokenizer.json)");
    return -1;
}

int64_t tokens_tag_eot(const char *tag) {
    long long id;
    return tag && sscanf(tag, "eot=%lld,", &id) == 1 && id >= 0 && id <= UINT32_MAX ? (int64_t)id : -1;
}

int64_t tokens_tag_vocab(const char *tag) {
    long long id, n;
    return tag && sscanf(tag, "eot=%lld,vocab=%lld", &id, &n) == 2 && n > 0 ? (int64_t)n : -1;
}

int64_t tokens_file_eot(const char *path) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return -1;
    uint8_t h[TOKENS_HEADER_BYTES];
    char tag[TOKENS_TAG_BYTES + 1] = "";
    const int ok = fread(h, 1, sizeof h, f) == sizeof h && !memcmp(h, TOKENS_MAGIC, 8) &&
                   (get_u32(h + 8) == TOKENS_VERSION_TAGGED || get_u32(h + 8) == TOKENS_VERSION_TAGGED_WEIGHTS) &&
                   fread(tag, 1, TOKENS_TAG_BYTES, f) == TOKENS_TAG_BYTES;
    fclose(f);
    return ok ? tokens_tag_eot(tag) : -1;
}

int tokens_open(const char *path, int64_t vocab, TokenFile *tf, char *err, size_t errlen) {
    return tokens_open_file(path, vocab, 0, tf, err, errlen);
}

void tokens_close(TokenFile *tf) {
    free(tf->ids);
    free(tf->weights);
    memset(tf, 0, sizeof *tf);
}

int tokens_write_tagged(const char *path, const uint32_t *ids, const uint8_t *weights, int64_t n, const char *tag,
                        char *err, size_t errlen) {
    if (tag && strlen(tag) > TOKENS_TAG_BYTES) { snprintf(err, errlen, "%s: a tokenizer tag of over 32 bytes", short_name(path)); return -1; }
    FILE *f = fopen(short_name(path), "wb");
    if (!f) { snprintf(err, errlen, "%s: cannot create", short_name(path)); return -1; }
    uint8_t h[TOKENS_HEADER_BYTES] = {0};
    memcpy(h, TOKENS_MAGIC, 8);
    put_u32(h + 8, tag ? (weights ? TOKENS_VERSION_TAGGED_WEIGHTS : TOKENS_VERSION_TAGGED)
                       : (weights ? TOKENS_VERSION_WEIGHTS : TOKENS_VERSION));
    put_u32(h + 12, 4);
    for (int i = 0; i < 8; i++) h[16 + i] = (uint8_t)((uint64_t)n >> (8 * i));
    int ok = fwrite(h, 1, sizeof h, f) == sizeof h;
    if (tag && ok) {
        char t[TOKENS_TAG_BYTES] = {0};
        memcpy(t, tag, strlen(tag));
        ok = fwrite(t, 1, sizeof t, f) == sizeof t;
    }
    uint8_t b[4];
    for (int64_t i = 0; ok && i < n; i++) { put_u32(b, ids[i]); ok = fwrite(b, 1, 4, f) == 4; }
    if (weights && ok) ok = fwrite(weights, 1, (size_t)n, f) == (size_t)n;
    ok = !fclose(f) && ok;
    if (!ok) { snprintf(err, errlen, "%s: write failed", short_name(path)); return -1; }
    return 0;
}

int tokens_write_weighted(const char *path, const uint32_t *ids, const uint8_t *weights, int64_t n, char *err,
                          size_t errlen) {
    return tokens_write_tagged(path, ids, weights, n, NULL, err, errlen);
}

int tokens_write(const char *path, const uint32_t *ids, int64_t n, char *err, size_t errlen) {
    return tokens_write_weighted(path, ids, NULL, n, err, errlen);
}

int loader_init(Loader *ld, const TokenFile *tf, int64_t seq, int world, int rank, char *err, size_t errlen) {
    memset(ld, 0, sizeof *ld);
    if (seq <= 0) { snprintf(err, errlen, "sequence length must be positive"); return -1; }
    if (seq + 1 > tf->count) {
        snprintf(err, errlen, "%s holds %lld tokens; a step of --seq %lld needs %lld (seq + 1): use a shorter --seq or a larger token file",
                 short_name(tf->path), (long long)tf->count, (long long)seq, (long long)seq + 1);
        return -1;
    }
    ld->tf = tf;
    ld->seq = seq;
    ld->world = world;
    ld->rank = rank;
    ld->windows = (tf->count - 1) / seq;
    ld->eot = -1;
    ld->epoch = -1;
    if (ld->windows < world) {
        snprintf(err, errlen, "%s holds %lld window%s of %lld+1 tokens; %d data-parallel ranks need at least %d disjoint ones",
                 short_name(tf->path), (long long)ld->windows, ld->windows == 1 ? "" : "s", (long long)seq, world, world);
        return -1;
    }
    return 0;
}

/* the window of a step: its first token, and its epoch */
static int64_t window_start(const Loader *ld, int64_t step, int64_t *epoch) {
    const int64_t g = step * ld->world + ld->rank;
    if (epoch) *epoch = g / ld->windows;
    return g % ld->windows * ld->seq;
}

int64_t loader_window(const Loader *ld, int64_t step, uint32_t *ids) {
    int64_t epoch;
    memcpy(ids, ld->tf->ids + window_start(ld, step, &epoch), (size_t)(ld->seq + 1) * 4);
    return epoch;
}

void loader_pack(Loader *ld, uint32_t eot) { ld->eot = eot; }

/* the weight of label t (1..seq) of the window at `at`: the file's, and none after an eot if packed */
static uint8_t label_weight(const Loader *ld, int64_t at, int64_t t) {
    if (ld->eot >= 0 && ld->tf->ids[at + t - 1] == (uint32_t)ld->eot) return 0;
    return ld->tf->weights ? ld->tf->weights[at + t] : 1;
}

int64_t loader_weights(const Loader *ld, int64_t step, uint8_t *w) {
    const int64_t at = window_start(ld, step, NULL);
    w[0] = ld->tf->weights ? ld->tf->weights[at] : 1;
    int64_t n = 0;
    for (int64_t t = 1; t <= ld->seq; t++) n += w[t] = label_weight(ld, at, t);
    return n;
}

int64_t loader_counted_job(const Loader *ld, int64_t step) {
    if (!ld->tf->weights && ld->eot < 0) return ld->seq * ld->world;
    int64_t n = 0;
    for (int r = 0; r < ld->world; r++) {
        Loader other = *ld;
        other.rank = r;
        const int64_t at = window_start(&other, step, NULL);
        for (int64_t t = 1; t <= ld->seq; t++) n += label_weight(ld, at, t);
    }
    return n;
}

int64_t loader_first_counted(const Loader *ld, int64_t from, int64_t to) {
    const int64_t cover = (ld->windows + ld->world - 1) / ld->world + 1; /* steps that read every window */
    if (to - from > cover) to = from + cover;
    for (int64_t s = from; s < to; s++)
        if (loader_counted_job(ld, s)) return s;
    return -1;
}

int loader_check_eval(const Loader *ld, int64_t steps, char *err, size_t errlen) {
    if (steps > ld->windows / ld->world) {
        snprintf(err, errlen, "%s holds %lld window%s of %lld+1 tokens; an evaluation reads %lld, each once (--eval-windows, "
                 "%d rank%s a window each): lower --eval-windows or --seq, or use a longer file", short_name(ld->tf->path),
                 (long long)ld->windows, ld->windows == 1 ? "" : "s", (long long)ld->seq, (long long)steps * ld->world,
                 ld->world, ld->world == 1 ? "" : "s");
        return -1;
    }
    int64_t n = 0;
    for (int64_t s = 0; s < steps; s++) n += loader_counted_job(ld, s);
    if (!n) {
        snprintf(err, errlen, "%s: no label in its first %lld windows of %lld+1 tokens carries loss (all masked): nothing to evaluate",
                 short_name(ld->tf->path), (long long)(steps * ld->world), (long long)ld->seq);
        return -1;
    }
    return 0;
}

int64_t loader_skipped_before(const Loader *ld, int64_t steps) {
    if (!ld->tf->weights && ld->eot < 0) return 0;
    int64_t n = 0;
    for (int64_t s = 0; s < steps; s++) n += loader_counted_job(ld, s) == 0;
    return n;
}

int64_t tokens_digest(const TokenFile *tf) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)tf->count;
    const int64_t n = tf->weights ? tf->count : 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) { /* a word at a time: a large file's weights in about a second */
        uint64_t w;
        memcpy(&w, tf->weights + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ tf->weights[i]) * 0x100000001b3ull;
    h ^= (uint64_t)tf->counted * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
    return (int64_t)(h >> 12); /* 52 bits: exact through comm_min_i64's doubles */
}

/* four lanes of (h ^ word) * odd, folded: the multiplies of one lane do not wait for another's */
static void lanes(uint64_t h[4], const uint8_t *p, int64_t n) {
    const uint64_t K = 0x9e3779b97f4a7c15ull;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * k, 8);
            h[k] = (h[k] ^ w) * K;
            h[k] ^= h[k] >> 32;
        }
    for (; i < n; i++) h[i & 3] = (h[i & 3] ^ p[i]) * 0x100000001b3ull;
}
int64_t tokens_content_digest(const TokenFile *tf) {
    uint64_t h[4] = {0xcbf29ce484222325ull ^ (uint64_t)tf->count, 0x84222325cbf29ce4ull, 0x100000001b3ull,
                     tf->weights ? 0x2545f4914f6cdd1dull : 0x27bb2ee687b0b0fdull};
    lanes(h, (const uint8_t *)tf->ids, 4 * tf->count);
    if (tf->weights) lanes(h, tf->weights, tf->count);
    uint64_t d = h[0];
    for (int k = 1; k < 4; k++) d = (d ^ (h[k] + (uint64_t)k)) * 0x9e3779b97f4a7c15ull, d ^= d >> 29;
    return (int64_t)(d >> 12); /* 52 bits, as tokens_digest */
}

int64_t loader_digest(const Loader *ld) {
    const int64_t d = tokens_digest(ld->tf);
    if (ld->eot < 0) return d;
    uint64_t h = (uint64_t)d * 0x9e3779b97f4a7c15ull ^ (uint64_t)ld->eot;
    for (int64_t i = 0; i < ld->tf->count; i++)
        if (ld->tf->ids[i] == (uint32_t)ld->eot) {
            h = (h ^ (uint64_t)i) * 0x100000001b3ull;
            h ^= h >> 29;
        }
    h ^= h >> 31;
    return (int64_t)(h >> 12); /* 52 bits, as tokens_digest */
}

int64_t loader_next(Loader *ld, int64_t step, uint32_t *ids) {
    const int64_t e = loader_window(ld, step, ids);
    if (e != ld->epoch && ld->epoch >= 0) say("data: epoch %lld begins at step %lld\n", (long long)e, (long long)step + 1);
    return ld->epoch = e;
}

void loader_report(const Loader *ld) {
    say("data %s: %lld tokens, %lld windows of %lld+1 per epoch\n", ld->tf->path, (long long)ld->tf->count,
        (long long)ld->windows, (long long)ld->seq);
    if (ld->tf->weights) say("  with a loss mask: %lld of its labels carry loss\n", (long long)ld->tf->counted);
}
