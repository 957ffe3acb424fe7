/* safetensors.c -- validated safetensors reader and writer. */
#define _FILE_OFFSET_BITS 64
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "json.h"

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        if (m == 0) u = s;
        else { /* subnormal */
            e = 127 - 15 + 1;
            while (!(m & 1024)) { m <<= 1; e--; }
            u = s | (e << 23) | ((m & 1023) << 13);
        }
    } else if (e == 31) u = s | 0x7f800000u | (m << 13);
    else u = s | ((e + 127 - 15) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const struct { const char *name; StDtype d; size_t size; } DTYPES[] = {
    {"F32", ST_F32, 4}, {"BF16", ST_BF16, 2}, {"F16", ST_F16, 2}, {"I32", ST_I32, 4}, {"I64", ST_I64, 8}};
size_t st_dtype_size(StDtype d) { return DTYPES[d].size; }
const char *st_dtype_name(StDtype d) { return DTYPES[d].name; }

/* ---------------------------------------------------------------- reading */
static int cmp_offset(const void *a, const void *b) {
    const StTensor *x = a, *y = b;
    if (x->file != y->file) return x->file - y->file;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* parse one file's header, appending its tensors to st */
static int open_file(SafeTensors *st, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    char *hdr = NULL;
    JsonValue root = {0};
    if (!f) { snprintf(err, errlen, "%s: cannot open", path); return -1; }
    struct stat sb;
    if (fstat(fileno(f), &sb)) FAIL("%s: cannot stat", path);
    int64_t fsize = (int64_t)sb.st_size;
    uint8_t lb[8];
    if (fsize < 8 || fread(lb, 1, 8, f) != 8) FAIL("%s: truncated file (%lld bytes, no header length)", path, (long long)fsize);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lb[i];
    if (hlen > (uint64_t)(fsize - 8))
        FAIL("%s: header length %llu runs past the end of the file (%lld bytes)", path, (unsigned long long)hlen, (long long)fsize);
    if (hlen > (100u << 20)) FAIL("%s: header length %llu is over 100 MB", path, (unsigned long long)hlen);
    hdr = xmalloc((size_t)hlen + 1);
    if (fread(hdr, 1, (size_t)hlen, f) != hlen) FAIL("%s: truncated header", path);
    hdr[hlen] = 0;
    char jerr[200];
    if (json_parse(hdr, (size_t)hlen, &root, jerr, sizeof jerr)) FAIL("%s: bad header: %s", path, jerr);
    if (root.type != JSON_OBJECT) FAIL("%s: header is not a JSON object", path);
    const int64_t data_start = 8 + (int64_t)hlen, data_size = fsize - data_start;
    int file = st->nfiles;
    st->paths = realloc(st->paths, (size_t)(st->nfiles + 1) * sizeof(char *));
    st->paths[st->nfiles++] = strdup(path);
    st->t = realloc(st->t, (size_t)(st->n + root.n) * sizeof(StTensor));
    int64_t first = st->n;
    for (int64_t i = 0; i < root.n; i++) {
        const char *name = root.keys[i];
        const JsonValue *v = &root.items[i];
        if (!strcmp(name, "__metadata__")) continue;
        if (v->type != JSON_OBJECT) FAIL("%s: tensor \"%s\" entry is not an object", path, name);
        const JsonValue *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *off = json_get(v, "data_offsets");
        if (!dt || dt->type != JSON_STRING || !sh || sh->type != JSON_ARRAY || !off || off->type != JSON_ARRAY ||
            off->n != 2)
            FAIL("%s: tensor \"%s\" lacks dtype, shape or data_offsets", path, name);
        StTensor t = {0};
        int known = 0;
        for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++)
            if (!strcmp(dt->string, DTYPES[d].name)) { t.dtype = DTYPES[d].d; known = 1; }
        if (!known) FAIL("%s: tensor \"%s\" has unsupported dtype \"%s\" (F32, BF16, F16, I32, I64)", path, name, dt->string);
        if (sh->n > 8) FAIL("%s: tensor \"%s\" has more than 8 dims", path, name);
        t.ndim = (int)sh->n;
        t.numel = 1;
        for (int d = 0; d < t.ndim; d++) {
            const JsonValue *x = &sh->items[d];
            if (x->type != JSON_NUMBER || !x->is_integer || x->integer < 0 || x->integer > (1ll << 40))
                FAIL("%s: tensor \"%s\" has a bad shape", path, name);
            t.shape[d] = x->integer;
            t.numel *= x->integer;
            if (t.numel > (1ll << 40)) FAIL("%s: tensor \"%s\" is implausibly large", path, name);
        }
        const JsonValue *b = &off->items[0], *e = &off->items[1];
        if (b->type != JSON_NUMBER || !b->is_integer || e->type != JSON_NUMBER || !e->is_integer || b->integer < 0 ||
            e->integer < b->integer)
            FAIL("%s: tensor \"%s\" has bad data_offsets", path, name);
        if (e->integer > data_size)
            FAIL("%s: tensor \"%s\" data_offsets [%lld, %lld] run past the end of the data (%lld bytes)", path, name,
                 (long long)b->integer, (long long)e->integer, (long long)data_size);
        t.nbytes = e->integer - b->integer;
        if (t.nbytes != t.numel * (int64_t)st_dtype_size(t.dtype))
            FAIL("%s: tensor \"%s\": shape needs %lld bytes of %s but data_offsets give %lld", path, name,
                 (long long)(t.numel * (int64_t)st_dtype_size(t.dtype)), dt->string, (long long)t.nbytes);
        t.offset = data_start + b->integer;
        t.file = file;
        t.name = strdup(name);
        st->t[st->n++] = t;
    }
    /* overlapping tensors: sort this file's tensors by offset and check neighbours */
    qsort(st->t + first, (size_t)(st->n - first), sizeof(StTensor), cmp_offset);
    for (int64_t i = first + 1; i < st->n; i++)
        if (st->t[i].offset < st->t[i - 1].offset + st->t[i - 1].nbytes)
            FAIL("%s: tensors \"%s\" and \"%s\" overlap", path, st->t[i - 1].name, st->t[i].name);
    json_free(&root);
    free(hdr);
    fclose(f);
    return 0;
fail:
    json_free(&root);
    free(hdr);
    fclose(f);
    return -1;
}

static int is_dir(const char *p) {
    struct stat sb;
    return !stat(p, &sb) && S_ISDIR(sb.st_mode);
}

/* sharded: read the index's weight_map, open each distinct shard once */
static int open_index(SafeTensors *st, const char *dir, const char *index, char *err, size_t errlen) {
    FILE *f = fopen(index, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open", index); return -1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = xmalloc((size_t)n + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    fclose(f);
    JsonValue root;
    char jerr[200];
    if (got != (size_t)n || json_parse(text, got, &root, jerr, sizeof jerr)) {
        snprintf(err, errlen, "%s: unreadable index: %s", index, got != (size_t)n ? "short read" : jerr);
        free(text);
        return -1;
    }
    free(text);
    const JsonValue *wm = json_get(&root, "weight_map");
    int rc = 0;
    if (!wm || wm->type != JSON_OBJECT) { snprintf(err, errlen, "%s: no weight_map object", index); rc = -1; }
    for (int64_t i = 0; !rc && i < wm->n; i++) {
        const JsonValue *v = &wm->items[i];
        if (v->type != JSON_STRING || strchr(v->string, '/')) {
            snprintf(err, errlen, "%s: bad shard name for \"%s\"", index, wm->keys[i]);
            rc = -1;
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, v->string);
        int seen = 0;
        for (int k = 0; k < st->nfiles; k++) seen |= !strcmp(st->paths[k], path);
        if (!seen) rc = open_file(st, path, err, errlen);
    }
    /* every tensor the index names must be in its shard */
    for (int64_t i = 0; !rc && i < wm->n; i++)
        if (!st_find(st, wm->keys[i])) {
            snprintf(err, errlen, "%s: tensor \"%s\" is listed in the index but missing from %s", index, wm->keys[i],
                     wm->items[i].string);
            rc = -1;
        }
    json_free(&root);
    return rc;
}

int st_open(const char *path, SafeTensors *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    int rc;
    if (is_dir(path)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
        FILE *f = fopen(p, "rb");
        if (f) { fclose(f); rc = open_index(st, path, p, err, errlen); }
        else {
            snprintf(p, sizeof p, "%s/model.safetensors", path);
            rc = open_file(st, p, err, errlen);
        }
    } else rc = open_file(st, path, err, errlen);
    if (rc) st_close(st);
    return rc;
}

void st_close(SafeTensors *st) {
    for (int64_t i = 0; i < st->n; i++) free(st->t[i].name);
    for (int i = 0; i < st->nfiles; i++) free(st->paths[i]);
    free(st->t);
    free(st->paths);
    memset(st, 0, sizeof *st);
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
    for (int64_t i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

static void *read_bytes(const SafeTensors *st, const StTensor *t, char *err, size_t errlen) {
    FILE *f = fopen(st->paths[t->file], "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open", st->paths[t->file]); return NULL; }
    void *buf = xmalloc((size_t)t->nbytes);
    if (fseeko(f, t->offset, SEEK_SET) || fread(buf, 1, (size_t)t->nbytes, f) != (size_t)t->nbytes) {
        snprintf(err, errlen, "%s: short read of \"%s\"", st->paths[t->file], t->name);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

int st_read_f32(const SafeTensors *st, const char *name, int ndim, const int64_t *shape, float *out, char *err,
                size_t errlen) {
    const StTensor *t = st_find(st, name);
    if (!t) { snprintf(err, errlen, "tensor \"%s\" is missing", name); return -1; }
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char want[128] = "", got[128] = "";
        for (int d = 0; d < ndim; d++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "", (long long)shape[d]);
        for (int d = 0; d < t->ndim; d++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)t->shape[d]);
        snprintf(err, errlen, "tensor \"%s\" has shape [%s], expected [%s]", name, got, want);
        return -1;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16) {
        snprintf(err, errlen, "tensor \"%s\" has dtype %s, expected a float type", name, st_dtype_name(t->dtype));
        return -1;
    }
    void *buf = read_bytes(st, t, err, errlen);
    if (!buf) return -1;
    if (t->dtype == ST_F32) memcpy(out, buf, (size_t)t->nbytes);
    else if (t->dtype == ST_BF16) for (int64_t i = 0; i < t->numel; i++) out[i] = bf16_to_f32(((uint16_t *)buf)[i]);
    else for (int64_t i = 0; i < t->numel; i++) out[i] = f16_to_f32(((uint16_t *)buf)[i]);
    free(buf);
    return 0;
}

int st_read_i32(const SafeTensors *st, const char *name, int64_t numel, int32_t *out, char *err, size_t errlen) {
    const StTensor *t = st_find(st, name);
    if (!t) { snprintf(err, errlen, "tensor \"%s\" is missing", name); return -1; }
    if (t->numel != numel || (t->dtype != ST_I32 && t->dtype != ST_I64)) {
        snprintf(err, errlen, "tensor \"%s\": expected %lld integers, found %lld of %s", name, (long long)numel,
                 (long long)t->numel, st_dtype_name(t->dtype));
        return -1;
    }
    void *buf = read_bytes(st, t, err, errlen);
    if (!buf) return -1;
    for (int64_t i = 0; i < numel; i++)
        out[i] = t->dtype == ST_I32 ? ((int32_t *)buf)[i] : (int32_t)((int64_t *)buf)[i];
    free(buf);
    return 0;
}

/* ---------------------------------------------------------------- writing */
static int64_t numel_of(const StWrite *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

int st_write(const char *path, const StWrite *t, int64_t n, const char *metadata, char *err, size_t errlen) {
    /* header: JSON, padded with spaces to a multiple of 8 so the data is aligned */
    size_t cap = 256 + (size_t)n * 400 + (metadata ? strlen(metadata) : 0), len = 0;
    char *h = xmalloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    if (metadata) len += (size_t)snprintf(h + len, cap - len, "\"__metadata__\":%s", metadata);
    int64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t bytes = numel_of(&t[i]) * (int64_t)st_dtype_size(t[i].dtype);
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", (i || metadata) ? "," : "",
                                t[i].name, st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++) len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) { snprintf(err, errlen, "%s: cannot create", path); free(h); return -1; }
    uint8_t lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (uint8_t)((uint64_t)len >> (8 * i));
    int ok = fwrite(lb, 1, 8, f) == 8 && fwrite(h, 1, len, f) == len;
    for (int64_t i = 0; ok && i < n; i++) {
        size_t bytes = (size_t)(numel_of(&t[i]) * (int64_t)st_dtype_size(t[i].dtype));
        ok = fwrite(t[i].data, 1, bytes, f) == bytes;
    }
    ok = (fclose(f) == 0) && ok;
    free(h);
    if (!ok) { snprintf(err, errlen, "%s: write failed (disk full?)", path); return -1; }
    return 0;
}

int st_write_dir(const char *dir, const StWrite *t, int64_t n, int64_t max_shard_bytes, char *err, size_t errlen) {
    char path[4096];
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += numel_of(&t[i]) * (int64_t)st_dtype_size(t[i].dtype);
    if (total <= max_shard_bytes) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return st_write(path, t, n, "{\"format\":\"pt\"}", err, errlen);
    }
    /* greedy shards in tensor order */
    int64_t *shard_of = xmalloc((size_t)n * sizeof(int64_t)), nshards = 0, cur = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = numel_of(&t[i]) * (int64_t)st_dtype_size(t[i].dtype);
        if (cur > 0 && cur + b > max_shard_bytes) { nshards++; cur = 0; }
        shard_of[i] = nshards;
        cur += b;
    }
    nshards++;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *idx = fopen(path, "w");
    if (!idx) { snprintf(err, errlen, "%s: cannot create", path); free(shard_of); return -1; }
    fprintf(idx, "{\n  \"metadata\": {\"total_size\": %lld},\n  \"weight_map\": {\n", (long long)total);
    int rc = 0;
    for (int64_t s = 0, i0 = 0; s < nshards && !rc; s++) {
        int64_t i1 = i0;
        while (i1 < n && shard_of[i1] == s) i1++;
        char name[64];
        snprintf(name, sizeof name, "model-%05lld-of-%05lld.safetensors", (long long)s + 1, (long long)nshards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        rc = st_write(path, t + i0, i1 - i0, "{\"format\":\"pt\"}", err, errlen);
        for (int64_t i = i0; i < i1; i++) fprintf(idx, "    \"%s\": \"%s\"%s\n", t[i].name, name, i + 1 < n ? "," : "");
        i0 = i1;
    }
    fprintf(idx, "  }\n}\n");
    if (fclose(idx) && !rc) { snprintf(err, errlen, "index write failed"); rc = -1; }
    free(shard_of);
    return rc;
}
