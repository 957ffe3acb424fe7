/* json.h -- a tiny JSON reader: enough for config.json, safetensors headers and index files.
 * Parses a whole document into a tree; numbers keep both a double and, when integral, an
 * exact int64 (safetensors offsets pass 2^53 only in theory, but we never round them). */
#ifndef LONGCTX_JSON_H
#define LONGCTX_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue {
    JsonType type;
    int boolean;              /* JSON_BOOL */
    double number;            /* JSON_NUMBER */
    int64_t integer;          /* JSON_NUMBER, exact when is_integer */
    int is_integer;
    char *string;             /* JSON_STRING (NUL-terminated, unescaped) */
    int64_t n;                /* JSON_ARRAY / JSON_OBJECT: element count */
    char **keys;              /* JSON_OBJECT: [n] keys */
    struct JsonValue *items;  /* [n] elements / member values */
} JsonValue;

/* Parse text[0..len). Returns 0, or -1 with a message (with byte offset) in err. */
int json_parse(const char *text, size_t len, JsonValue *out, char *err, size_t errlen);
void json_free(JsonValue *v);
/* Member of an object by key, or NULL (also when v is not an object). */
const JsonValue *json_get(const JsonValue *v, const char *key);

#endif
