/* fuzz_json.c -- common/json.c's json_parse on the input bytes as a document (not NUL-terminated:
 * the parser must stay inside [0, size)), then a walk over the tree it built: every string read
 * through, every object looked up by its own keys and by the keys the readers ask for, every
 * integer checked against its double; then json_free. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <math.h>

#include "json.h"

static const char *const KEYS[] = {"model_type", "vocab_size", "hidden_size", "rope_parameters", "rope_scaling",
                                   "dtype", "shape", "data_offsets", "__metadata__", "weight_map", ""};

static size_t walk(const JsonValue *v, int depth) {
    FUZZ_ASSERT(depth <= 65, "a tree deeper than the parser's limit of 64");
    size_t h = (size_t)v->type;
    switch (v->type) {
    case JSON_STRING: h += strlen(v->string); break;
    case JSON_NUMBER:
        FUZZ_ASSERT(isfinite(v->number), "a number that is not finite was accepted");
        /* the exact integer and the double agree to the double's precision */
        if (v->is_integer) FUZZ_ASSERT(fabs((double)v->integer - v->number) <= fabs(v->number) * 1e-15 + 0.5,
                                       "integer %lld vs double %.17g", (long long)v->integer, v->number);
        break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        FUZZ_ASSERT(v->n >= 0 && (v->n == 0 || v->items), "container of %lld items", (long long)v->n);
        for (int64_t i = 0; i < v->n; i++) {
            if (v->type == JSON_OBJECT) {
                h += strlen(v->keys[i]);
                /* the last of duplicate keys wins: the lookup finds this key or a later one */
                const JsonValue *got = json_get(v, v->keys[i]);
                FUZZ_ASSERT(got && got >= &v->items[i], "json_get(\"%s\") missed its own key", v->keys[i]);
            }
            h += walk(&v->items[i], depth + 1);
        }
        for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++) h += json_get(v, KEYS[k]) != NULL;
        break;
    default: break;
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    JsonValue v;
    char err[200];
    err[0] = 0;
    if (json_parse((const char *)data, size, &v, err, sizeof err)) {
        FUZZ_ASSERT(err[0] && !strncmp(err, "JSON: ", 6), "a refusal without a message: \"%s\"", err);
        fuzz_say("refused: %s\n", err);
        /* a refused parse leaves nothing to free (json_free of the zeroed value is a no-op) */
        json_free(&v);
        return 0;
    }
    volatile size_t h = walk(&v, 0);
    fuzz_say("accepted: type %d, %lld items\n", (int)v.type, (long long)v.n);
    (void)h;
    json_free(&v);
    return 0;
}
