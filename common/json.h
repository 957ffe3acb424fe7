/* json.h -- a tiny JSON reader: enough for config.json, safetensors headers and index files.
 * Parses a whole document into a tree; numbers keep both a double and, when integral, an
 * exact int64 (safetensors offsets pass 2^53 only in theory, but we never round them). A refusal
 * says where: "JSON: bad number at line 3, column 18 (byte 43), in \"rope_scaling\".\"factor\"".
 * And a writer for the JSON the trainers make from values a user chose (a save's metadata holds
 * --data's path): every string escaped, no fixed buffer. */
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

/* Writing: text appended to a growing buffer (s, NUL-terminated; free it with json_out_free). */
typedef struct {
    char *s;
    size_t len, cap;
} JsonOut;
void json_out_raw(JsonOut *o, const char *text);
/* s as a JSON string: quoted; '"', '\\' and every control character escaped (U+0000-001F, and DEL
 * as \u007f); valid UTF-8 passed through; each byte that is not part of valid UTF-8 written as
 * U+FFFD (JSON is UTF-8: a strict reader, such as the safetensors library, refuses anything else) */
void json_out_string(JsonOut *o, const char *s);
/* "key":"value" with a leading ',' unless it is the object's first member (o->len <= 1) */
void json_out_member(JsonOut *o, const char *key, const char *value);
void json_out_free(JsonOut *o);

#endif
