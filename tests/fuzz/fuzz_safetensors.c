/* fuzz_safetensors.c -- common/safetensors.c's st_open on a file (or a sharded directory) made from
 * the input, then what the trainers do with an opened file: st_find and st_read_range_f32 /
 * st_read_i32 on tensors it found, st_metadata, inputs_state_step (a trainer state's step) and
 * inputs_check_weights against the parameter tables of three small models (the dense tiny model of
 * tests/make_bad_inputs.py, the golden MoE and the golden untied GQA model of tests/golden/), with the
 * prefixes a trainer state uses.
 *
 * Input (tests/fuzz/README.md; tests/fuzz/make_corpus.sh converts real files to it):
 *   byte 0      flags: bit 0 raw, bit 1 directory (bit 0 wins)
 *   bytes 1..3  PAD, little-endian: zero bytes appended to each file (the tensors' data, as a hole;
 *               at most 16 MiB - 1), so a seed of a real model is its header alone
 *   then
 *     raw:        the file's bytes (the 8-byte header length too)
 *     neither:    a header's JSON text, optionally NUL and data bytes; the file is the 8-byte length,
 *                 the header, the data, PAD zeros (so mutations of the JSON keep a valid length)
 *     directory:  NUL-separated parts: the index JSON (model.safetensors.index.json; empty: no
 *                 index, the one shard is model.safetensors), then each shard's header JSON, written as
 *                 model-0000K-of-0000N.safetensors with PAD zeros of data; st_open on the directory. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <math.h>

#include "config.h"
#include "inputs.h"
#include "model.h"
#include "safetensors.h"

/* the models whose parameter tables a file is checked against */
static const char *const CONFIGS[] = {
    /* tests/make_bad_inputs.py's tiny model */
    "{\"model_type\": \"qwen3\", \"vocab_size\": 1024, \"hidden_size\": 64, \"intermediate_size\": 64, "
    "\"num_hidden_layers\": 1, \"num_attention_heads\": 1, \"num_key_value_heads\": 1, \"head_dim\": 64, "
    "\"tie_word_embeddings\": true}",
    /* tests/golden/moe_e8_k2 */
    "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 128, "
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 64, "
    "\"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 48, \"norm_topk_prob\": true, "
    "\"tie_word_embeddings\": false}",
    /* tests/golden/untied_gqa4_s100 */
    "{\"model_type\": \"qwen3\", \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 128, "
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 64, "
    "\"tie_word_embeddings\": false}",
};
#define NCONFIGS (int)(sizeof CONFIGS / sizeof CONFIGS[0])
static ParamTable tables[NCONFIGS];
static FuzzFile file;
static char dir[600];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    for (int k = 0; k < NCONFIGS; k++) {
        Qwen3Config c;
        char err[512];
        FUZZ_ASSERT(!config_from_json_text(CONFIGS[k], strlen(CONFIGS[k]), &c, err, sizeof err), "config %d: %s", k, err);
        params_build(&c, &tables[k]);
    }
    fuzz_file_open(&file, "fuzz_safetensors");
    snprintf(dir, sizeof dir, "%s/model", fuzz_tmpdir());
    return 0;
}

/* one file of the structured form: 8-byte length, header, data; PAD zeros after */
static uint8_t *framed(const uint8_t *hdr, size_t hlen, const uint8_t *dat, size_t dlen, size_t *len) {
    uint8_t *b = xmalloc(8 + hlen + dlen);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, hdr, hlen);
    if (dlen) memcpy(b + 8 + hlen, dat, dlen);
    *len = 8 + hlen + dlen;
    return b;
}

/* directory form: parts split at NUL; returns the path st_open is given */
static const char *make_dir(const uint8_t *p, size_t n, size_t pad) {
    fuzz_rm_tree(dir);
    FUZZ_ASSERT(!mkdir(dir, 0755), "mkdir %s: %s", dir, strerror(errno));
    const uint8_t *part[9];
    size_t len[9];
    int parts = 0;
    for (size_t at = 0; parts < 9;) {
        const uint8_t *nul = memchr(p + at, 0, n - at);
        const size_t end = nul ? (size_t)(nul - p) : n;
        part[parts] = p + at, len[parts] = end - at, parts++;
        if (!nul) break;
        at = end + 1;
    }
    char path[700];
    const int shards = parts - 1;
    if (len[0]) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        fuzz_write_path(path, part[0], len[0], 0);
    }
    for (int k = 1; k <= shards; k++) {
        if (!len[0] && k == 1) snprintf(path, sizeof path, "%s/model.safetensors", dir);
        else snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, k, shards);
        size_t flen;
        uint8_t *b = framed(part[k], len[k], NULL, 0, &flen);
        fuzz_write_path(path, b, flen, pad);
        free(b);
    }
    return dir;
}

static void use(const SafeTensors *st) {
    char err[1024];
    float out[64];
    int32_t ints[64];
    /* (an index with an empty weight_map opens as no files and no tensors: inputs_check_weights refuses it) */
    FUZZ_ASSERT(st->n >= 0 && st->nfiles >= 0 && (st->n == 0 || st->nfiles >= 1), "an opened file of %lld tensors in %d files",
                (long long)st->n, st->nfiles);
    /* a few tensors: the first, the last, one in the middle */
    const int64_t pick[3] = {0, st->n / 2, st->n - 1};
    for (int k = 0; k < 3 && st->n > 0; k++) {
        const StTensor *t = &st->t[pick[k]];
        FUZZ_ASSERT(st_find(st, t->name) != NULL, "st_find misses \"%s\"", t->name);
        FUZZ_ASSERT(t->nbytes == t->numel * (int64_t)st_dtype_size(t->dtype), "\"%s\": %lld bytes of %lld elements",
                    t->name, (long long)t->nbytes, (long long)t->numel);
        const int64_t n = t->numel < 64 ? t->numel : 64;
        /* the head and the tail of its elements, as a rank reads its piece */
        st_read_range_f32(st, t->name, t->ndim, t->shape, 0, n, out, err, sizeof err);
        st_read_range_f32(st, t->name, t->ndim, t->shape, t->numel - n, n, out, err, sizeof err);
        /* refusals: past its end, a wrong shape */
        FUZZ_ASSERT(st_read_range_f32(st, t->name, t->ndim, t->shape, t->numel, 1, out, err, sizeof err) == -1,
                    "read past the end of \"%s\"", t->name);
        int64_t other[8];
        memcpy(other, t->shape, sizeof other);
        other[0] += 1;
        FUZZ_ASSERT(st_read_range_f32(st, t->name, t->ndim > 0 ? t->ndim : 1, other, 0, 1, out, err, sizeof err) == -1,
                    "\"%s\" read with another shape", t->name);
        if (t->numel <= 64) st_read_i32(st, t->name, t->numel, ints, err, sizeof err);
    }
    char val[128];
    st_metadata(st, "step", val, sizeof val);
    st_metadata(st, "format", val, sizeof val);
    int64_t step;
    inputs_state_step(st, INT64_MAX, &step, err, sizeof err);
    if (!inputs_state_step(st, 100, &step, err, sizeof err)) FUZZ_ASSERT(step >= 0 && step < 100, "step %lld", (long long)step);
    static const char *const PREFIX[4] = {"", "master.", "adam_m.", "adam_v."};
    fuzz_say("opened: %lld tensors in %d file(s); step: %s\n", (long long)st->n, st->nfiles,
             inputs_state_step(st, INT64_MAX, &step, err, sizeof err) ? err : "ok");
    for (int k = 0; k < NCONFIGS; k++)
        for (int p = 0; p < 4; p++) {
            const int rc = inputs_check_weights(st, PREFIX[p], &tables[k], err, sizeof err);
            fuzz_say("  model %d, prefix \"%s\": %s\n", k, PREFIX[p], rc ? err : "every weight there");
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    const int flags = data[0];
    const size_t pad = fuzz_u24(data + 1);
    const uint8_t *p = data + 4;
    const size_t n = size - 4;
    const char *path = file.path;
    if (flags & 1) fuzz_file_set(&file, p, n, pad);
    else if (flags & 2) path = make_dir(p, n, pad);
    else {
        const uint8_t *nul = memchr(p, 0, n);
        const size_t hlen = nul ? (size_t)(nul - p) : n;
        size_t flen;
        uint8_t *b = framed(p, hlen, nul ? nul + 1 : NULL, nul ? n - hlen - 1 : 0, &flen);
        fuzz_file_set(&file, b, flen, pad);
        free(b);
    }
    SafeTensors st;
    char err[1024];
    err[0] = 0;
    if (st_open(path, &st, err, sizeof err)) {
        FUZZ_ASSERT(err[0], "a refused file without a message");
        fuzz_say("refused: %s\n", err);
        FUZZ_ASSERT(st.n == 0 && st.t == NULL && st.paths == NULL, "a refused open left state behind");
        return 0;
    }
    use(&st);
    st_close(&st);
    return 0;
}
