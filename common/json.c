/* json.c -- recursive-descent JSON parser (RFC 8259, UTF-8 in and out). */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_DEPTH 8 /* members named in a message: "rope_scaling"."factor" */
typedef struct {
    const char *s;
    size_t len, pos;
    char *err;
    size_t errlen;
    int depth;
    int nin;                       /* containers entered, outermost first (the first PATH_DEPTH named) */
    const char *key[PATH_DEPTH];   /* the member being read in each: its key, or NULL in an array */
    int64_t index[PATH_DEPTH];     /* ... its index in an array */
} Parser;

/* where a refusal points: line and column (1-based, in bytes), the byte, and the member it is in */
static void where(const Parser *p, char *out, size_t n) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->len; i++) {
        if (p->s[i] == '\n') line++, col = 1;
        else col++;
    }
    size_t o = (size_t)snprintf(out, n, "at line %zu, column %zu (byte %zu)", line, col, p->pos);
    for (int d = 0; d < p->nin && d < PATH_DEPTH && o < n; d++) {
        if (p->key[d]) o += (size_t)snprintf(out + o, n - o, "%s\"%.60s\"", d ? "." : ", in ", p->key[d]);
        else if (p->index[d] >= 0) o += (size_t)snprintf(out + o, n - o, "%s[%lld]", d ? "" : ", in ", (long long)p->index[d]);
    }
}
static int fail(Parser *p, const char *what) {
    char at[256];
    where(p, at, sizeof at);
    snprintf(p->err, p->errlen, "JSON: %s %s", what, at);
    return -1;
}
/* a number the reader cannot hold exactly: refused, never saturated (2^63 would read as 2^63-1) */
static int fail_num(Parser *p, const char *num, const char *why) {
    char at[256];
    where(p, at, sizeof at);
    snprintf(p->err, p->errlen, "JSON: the number %.40s %s %s", num, why, at);
    return -1;
}
static void skip_ws(Parser *p) {
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                               p->s[p->pos] == '\r'))
        p->pos++;
}
static int peek(Parser *p) { return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1; }

static int parse_value(Parser *p, JsonValue *v);

static int hex4(Parser *p, unsigned *out) {
    if (p->pos + 4 > p->len) return fail(p, "truncated \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        u <<= 4;
        if (c >= '0' && c <= '9') u |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') u |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') u |= (unsigned)(c - 'A' + 10);
        else return fail(p, "bad \\u escape");
    }
    *out = u;
    return 0;
}
static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* the string's unescaped bytes are never longer than its escaped form */
static int parse_string(Parser *p, char **out) {
    if (peek(p) != '"') return fail(p, "expected string");
    p->pos++;
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] != '"') p->pos += (p->s[p->pos] == '\\') ? 2 : 1;
    if (p->pos >= p->len) return fail(p, "unterminated string");
    size_t end = p->pos;
    char *o = malloc(end - start + 1);
    if (!o) return fail(p, "out of memory");
    size_t n = 0;
    for (size_t i = start; i < end;) {
        char c = p->s[i++];
        if ((unsigned char)c < 0x20) { free(o); p->pos = i - 1; return fail(p, "control character in string"); }
        if (c != '\\') { o[n++] = c; continue; }
        char e = p->s[i++];
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            p->pos = i;
            if (hex4(p, &cp)) { free(o); return -1; }
            i = p->pos;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= end && p->s[i] == '\\' && p->s[i + 1] == 'u') {
                p->pos = i + 2;
                if (hex4(p, &lo)) { free(o); return -1; }
                if (lo >= 0xDC00 && lo < 0xE000) { cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00); i = p->pos; }
            }
            n += put_utf8(o + n, cp);
            break;
        }
        default: free(o); p->pos = i - 1; return fail(p, "bad escape");
        }
    }
    o[n] = 0;
    p->pos = end + 1;
    *out = o;
    return 0;
}

static int parse_number(Parser *p, JsonValue *v) {
    size_t start = p->pos;
    int integral = 1;
    if (peek(p) == '-') p->pos++;
    if (!(peek(p) >= '0' && peek(p) <= '9')) return fail(p, "bad number");
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c >= '0' && c <= '9') p->pos++;
        else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') { integral = 0; p->pos++; }
        else break;
    }
    char buf[64];
    size_t n = p->pos - start;
    if (n >= sizeof buf) return fail(p, "number too long");
    memcpy(buf, p->s + start, n);
    buf[n] = 0;
    char *endp;
    v->type = JSON_NUMBER;
    v->number = strtod(buf, &endp);
    if (*endp) return fail(p, "bad number");
    p->pos = start; /* errors below point at the number */
    if (!isfinite(v->number)) return fail_num(p, buf, "is too large for a double");
    if (integral) {
        errno = 0;
        v->integer = strtoll(buf, &endp, 10);
        if (errno == ERANGE) return fail_num(p, buf, "is outside int64's range"); /* strtoll saturates */
        v->is_integer = 1;
    }
    p->pos = start + n;
    return 0;
}

static int grow(JsonValue *v, int64_t *cap, int with_keys) {
    if (v->n < *cap) return 0;
    *cap = *cap ? *cap * 2 : 8;
    JsonValue *it = realloc(v->items, (size_t)*cap * sizeof *it);
    if (!it) return -1;
    v->items = it;
    if (with_keys) {
        char **k = realloc(v->keys, (size_t)*cap * sizeof *k);
        if (!k) return -1;
        v->keys = k;
    }
    return 0;
}

static int parse_members(Parser *p, JsonValue *v, int object);
static int parse_container(Parser *p, JsonValue *v, int object) {
    const int d = p->nin++;
    if (d < PATH_DEPTH) p->key[d] = NULL, p->index[d] = -1;
    const int rc = parse_members(p, v, object);
    if (!rc) p->nin--; /* on a refusal the path stays: the message is written where it failed */
    return rc;
}
static int parse_members(Parser *p, JsonValue *v, int object) {
    char close = object ? '}' : ']';
    const int d = p->nin - 1;
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    int64_t cap = 0;
    p->pos++;
    skip_ws(p);
    if (peek(p) == close) { p->pos++; return 0; }
    for (;;) {
        skip_ws(p);
        if (grow(v, &cap, object)) return fail(p, "out of memory");
        char *key = NULL;
        if (object) {
            if (parse_string(p, &key)) return -1;
            skip_ws(p);
            if (peek(p) != ':') { free(key); return fail(p, "expected ':'"); }
            p->pos++;
            skip_ws(p);
        }
        memset(&v->items[v->n], 0, sizeof(JsonValue));
        if (object) v->keys[v->n] = key;
        if (d < PATH_DEPTH) p->key[d] = key, p->index[d] = v->n; /* a refusal inside names this member */
        v->n++;
        if (parse_value(p, &v->items[v->n - 1])) return -1;
        skip_ws(p);
        int c = peek(p);
        if (c == ',') { p->pos++; continue; }
        if (c == close) { p->pos++; return 0; }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(Parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->pos + n > p->len || memcmp(p->s + p->pos, word, n)) return fail(p, "unexpected token");
    p->pos += n;
    return 0;
}

static int parse_value(Parser *p, JsonValue *v) {
    if (++p->depth > 64) return fail(p, "nesting too deep");
    skip_ws(p);
    int c = peek(p), rc;
    if (c == '{') rc = parse_container(p, v, 1);
    else if (c == '[') rc = parse_container(p, v, 0);
    else if (c == '"') { v->type = JSON_STRING; rc = parse_string(p, &v->string); }
    else if (c == 't') { v->type = JSON_BOOL; v->boolean = 1; rc = literal(p, "true"); }
    else if (c == 'f') { v->type = JSON_BOOL; rc = literal(p, "false"); }
    else if (c == 'n') { v->type = JSON_NULL; rc = literal(p, "null"); }
    else if (c == -1) rc = fail(p, "unexpected end of input");
    else rc = parse_number(p, v);
    p->depth--;
    return rc;
}

int json_parse(const char *text, size_t len, JsonValue *out, char *err, size_t errlen) {
    Parser p = {.s = text, .len = len, .err = err, .errlen = errlen};
    memset(out, 0, sizeof *out);
    if (parse_value(&p, out)) { json_free(out); return -1; }
    skip_ws(&p);
    if (p.pos != len) { json_free(out); return fail(&p, "trailing characters"); }
    return 0;
}

void json_free(JsonValue *v) {
    if (!v) return;
    for (int64_t i = 0; i < v->n; i++) {
        json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof *v);
}

const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT) return NULL;
    for (int64_t i = v->n - 1; i >= 0; i--) /* the last of duplicate keys wins, as in Python */
        if (!strcmp(v->keys[i], key)) return &v->items[i];
    return NULL;
}

/* ---------------------------------------------------------------- writing */
static void put(JsonOut *o, const char *b, size_t n) {
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (o->len + n + 1 > cap) cap *= 2;
        char *s = realloc(o->s, cap);
        if (!s) { fprintf(stderr, "JSON writer: out of memory (%zu bytes)\n", cap); abort(); }
        o->s = s, o->cap = cap;
    }
    memcpy(o->s + o->len, b, n);
    o->len += n;
    o->s[o->len] = 0;
}

void json_out_raw(JsonOut *o, const char *text) { put(o, text, strlen(text)); }

/* bytes of the valid UTF-8 sequence at s (1..4), or 0: not one (overlong, a surrogate, past U+10FFFF) */
static int utf8_len(const unsigned char *s) {
    const unsigned c = s[0];
    int n;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
    else return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp < 0xE000)) return 0;
    return n;
}

void json_out_string(JsonOut *o, const char *s) {
    put(o, "\"", 1);
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        const unsigned char c = *u;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\', esc[1] = (char)c; put(o, esc, 2); u++; continue; }
        if (c < 0x20 || c == 0x7F) {
            const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (named) put(o, named, 2);
            else { snprintf(esc, sizeof esc, "\\u%04x", c); put(o, esc, 6); }
            u++;
            continue;
        }
        const int n = utf8_len(u);
        if (n) { put(o, (const char *)u, (size_t)n); u += n; }
        else { put(o, "\\ufffd", 6); u++; }
    }
    put(o, "\"", 1);
}

void json_out_member(JsonOut *o, const char *key, const char *value) {
    if (o->len > 1) put(o, ",", 1);
    json_out_string(o, key);
    put(o, ":", 1);
    json_out_string(o, value);
}

void json_out_free(JsonOut *o) {
    free(o->s);
    memset(o, 0, sizeof *o);
}
