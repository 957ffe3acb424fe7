/* safetensors.c -- validated safetensors reader and writer. */
#define _FILE_OFFSET_BITS 64
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "files.h"
#include "json.h"

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

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

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

/* No name twice among st->t[first..n): the safetensors library refuses such a file, and a reader
 * that took the first copy would load whichever one came first, silently. */
static int check_unique(const SafeTensors *st, int64_t first, char *err, size_t errlen) {
    const int64_t n = st->n - first;
    const StTensor **by = xmalloc((size_t)(n ? n : 1) * sizeof *by);
    for (int64_t i = 0; i < n; i++) by[i] = &st->t[first + i];
    qsort(by, (size_t)n, sizeof *by, cmp_name);
    int rc = 0;
    for (int64_t i = 1; i < n && !rc; i++)
        if (!strcmp(by[i]->name, by[i - 1]->name)) {
            if (by[i]->file == by[i - 1]->file)
                snprintf(err, errlen, "%s: tensor \"%s\" is named twice in its header", st->paths[by[i]->file], by[i]->name);
            else
                snprintf(err, errlen, "tensor \"%s\" is in two shards, %s and %s: the index names one, the files must "
                         "hold it once", by[i]->name, st->paths[by[i - 1]->file], st->paths[by[i]->file]);
            rc = -1;
        }
    free(by);
    return rc;
}

/* parse one file's header, appending its tensors to st */
static int open_file(SafeTensors *st, const char *path, char *err, size_t errlen) {
    char *hdr = NULL;
    JsonValue root = {0};
    FILE *f = file_open_regular(path, "safetensors file", err, errlen);
    if (!f) return -1;
    struct stat sb;
    if (fstat(fileno(f), &sb)) FAIL("%s: cannot stat", short_name(path));
    int64_t fsize = (int64_t)sb.st_size;
    uint8_t lb[8];
    if (fsize < 8 || fread(lb, 1, 8, f) != 8) FAIL("%s: truncated file (%lld bytes, no header length)", short_name(path), (long long)fsize);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lb[i];
    if (hlen > (uint64_t)(fsize - 8))
        FAIL("%s: header length %llu runs past the end of the file (%lld bytes)", short_name(path), (unsigned long long)hlen, (long long)fsize);
    if (hlen > (100u << 20)) FAIL("%s: header length %llu is over 100 MB", short_name(path), (unsigned long long)hlen);
    hdr = xmalloc((size_t)hlen + 1);
    if (fread(hdr, 1, (size_t)hlen, f) != hlen) FAIL("%s: truncated header", short_name(path));
    hdr[hlen] = 0;
    char jerr[400];
    if (json_parse(hdr, (size_t)hlen, &root, jerr, sizeof jerr)) FAIL("%s: bad header: %s", short_name(path), jerr);
    if (root.type != JSON_OBJECT) FAIL("%s: header is not a JSON object", short_name(path));
    const int64_t data_start = 8 + (int64_t)hlen, data_size = fsize - data_start;
    int file = st->nfiles;
    st->paths = realloc(st->paths, (size_t)(st->nfiles + 1) * sizeof(char *));
    st->paths[st->nfiles++] = strdup(path);
    st->t = realloc(st->t, (size_t)(st->n + root.n) * sizeof(StTensor));
    int64_t first = st->n;
    for (int64_t i = 0; i < root.n; i++) {
        const char *name = root.keys[i];
        const JsonValue *v = &root.items[i];
        if (!strcmp(name, "__metadata__")) {
            for (int64_t k = 0; v->type == JSON_OBJECT && k < v->n; k++) {
                if (v->items[k].type != JSON_STRING) continue;
                st->meta = realloc(st->meta, (size_t)(2 * st->nmeta + 2) * sizeof(char *));
                st->meta[2 * st->nmeta] = strdup(v->keys[k]);
                st->meta[2 * st->nmeta + 1] = strdup(v->items[k].string);
                st->nmeta++;
            }
            continue;
        }
        if (v->type != JSON_OBJECT) FAIL("%s: tensor \"%s\" entry is not an object", short_name(path), name);
        const JsonValue *dt = json_get(v, "dtype"), *sh = json_get(v, "shape"), *off = json_get(v, "data_offsets");
        if (!dt || dt->type != JSON_STRING || !sh || sh->type != JSON_ARRAY || !off || off->type != JSON_ARRAY ||
            off->n != 2)
            FAIL("%s: tensor \"%s\" lacks dtype, shape or data_offsets", short_name(path), name);
        StTensor t = {0};
        int known = 0;
        for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++)
            if (!strcmp(dt->string, DTYPES[d].name)) { t.dtype = DTYPES[d].d; known = 1; }
        if (!known) FAIL("%s: tensor \"%s\" has unsupported dtype \"%s\" (F32, BF16, F16, I32, I64)", short_name(path), name, dt->string);
        if (sh->n > 8) FAIL("%s: tensor \"%s\" has more than 8 dims", short_name(path), name);
        t.ndim = (int)sh->n;
        t.numel = 1;
        for (int d = 0; d < t.ndim; d++) {
            const JsonValue *x = &sh->items[d];
            if (x->type != JSON_NUMBER || !x->is_integer || x->integer < 0 || x->integer > (1ll << 40))
                FAIL("%s: tensor \"%s\" has a bad shape", short_name(path), name);
            t.shape[d] = x->integer;
            /* checked before the product: [2^40, 2^40] would wrap to 0 elements and pass */
            if (x->integer && t.numel > (1ll << 40) / x->integer) FAIL("%s: tensor \"%s\" is implausibly large (over 2^40 elements)", short_name(path), name);
            t.numel *= x->integer;
        }
        const JsonValue *b = &off->items[0], *e = &off->items[1];
        if (b->type != JSON_NUMBER || !b->is_integer || e->type != JSON_NUMBER || !e->is_integer || b->integer < 0 ||
            e->integer < b->integer)
            FAIL("%s: tensor \"%s\" has bad data_offsets", short_name(path), name);
        if (e->integer > data_size)
            FAIL("%s: tensor \"%s\" data_offsets [%lld, %lld] run past the end of the data (%lld bytes)", short_name(path), name,
                 (long long)b->integer, (long long)e->integer, (long long)data_size);
        t.nbytes = e->integer - b->integer;
        if (t.nbytes != t.numel * (int64_t)st_dtype_size(t.dtype))
            FAIL("%s: tensor \"%s\": shape needs %lld bytes of %s but data_offsets give %lld", short_name(path), name,
                 (long long)(t.numel * (int64_t)st_dtype_size(t.dtype)), dt->string, (long long)t.nbytes);
        t.offset = data_start + b->integer;
        t.file = file;
        t.name = strdup(name);
        st->t[st->n++] = t;
    }
    if (check_unique(st, first, err, errlen)) goto fail;
    /* overlapping tensors: sort this file's tensors by offset and check neighbours */
    qsort(st->t + first, (size_t)(st->n - first), sizeof(StTensor), cmp_offset);
    for (int64_t i = first + 1; i < st->n; i++)
        if (st->t[i].offset < st->t[i - 1].offset + st->t[i - 1].nbytes)
            FAIL("%s: tensors \"%s\" and \"%s\" overlap", short_name(path), st->t[i - 1].name, st->t[i].name);
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

/* sharded: read the index's weight_map, open each distinct shard once; every tensor is loaded
 * from the shard the index names, and a tensor held by two shards is refused */
static int open_index(SafeTensors *st, const char *dir, const char *index, char *err, size_t errlen) {
    size_t len;
    char *text = file_read_all(index, "safetensors index", 64 << 20, &len, err, errlen);
    if (!text) return -1;
    JsonValue root;
    char jerr[400];
    if (json_parse(text, len, &root, jerr, sizeof jerr)) {
        snprintf(err, errlen, "%s: unreadable index: %s", short_name(index), jerr);
        free(text);
        return -1;
    }
    free(text);
    const JsonValue *wm = json_get(&root, "weight_map");
    int rc = 0;
    if (!wm || wm->type != JSON_OBJECT) { snprintf(err, errlen, "%s: no weight_map object", short_name(index)); rc = -1; }
    for (int64_t i = 0; !rc && i < wm->n; i++) {
        const JsonValue *v = &wm->items[i];
        if (v->type != JSON_STRING || !v->string[0] || strchr(v->string, '/') || !strcmp(v->string, "..")) {
            snprintf(err, errlen, "%s: bad shard name for \"%s\"", short_name(index), wm->keys[i]);
            rc = -1;
            break;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, v->string);
        int seen = 0;
        for (int k = 0; k < st->nfiles; k++) seen |= !strcmp(st->paths[k], path);
        if (!seen) rc = open_file(st, path, err, errlen);
    }
    if (!rc) rc = check_unique(st, 0, err, errlen); /* across the shards */
    /* every tensor the index names must be in the shard it names */
    for (int64_t i = 0; !rc && i < wm->n; i++) {
        const StTensor *t = st_find(st, wm->keys[i]);
        const char *base = t ? strrchr(st->paths[t->file], '/') + 1 : NULL;
        if (!t || strcmp(base, wm->items[i].string)) {
            snprintf(err, errlen, "%s: tensor \"%s\" is listed in %s but %s", short_name(index), wm->keys[i], wm->items[i].string,
                     t ? "found in another shard" : "missing from it");
            rc = -1;
        }
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
        struct stat sb; /* lstat, not fopen: opening a FIFO would wait for a writer; open_index's read
                         * refuses anything but a regular file, naming the index */
        if (!lstat(p, &sb) || errno != ENOENT) rc = open_index(st, path, p, err, errlen);
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
    for (int64_t i = 0; i < 2 * st->nmeta; i++) free(st->meta[i]);
    free(st->meta);
    free(st->t);
    free(st->paths);
    memset(st, 0, sizeof *st);
}

const char *st_meta(const SafeTensors *st, const char *key) {
    for (int64_t i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[2 * i], key)) return st->meta[2 * i + 1];
    return NULL;
}

int st_metadata(const SafeTensors *st, const char *key, char *out, size_t outlen) {
    for (int64_t i = 0; i < st->nmeta; i++)
        if (!strcmp(st->meta[2 * i], key)) { snprintf(out, outlen, "%s", st->meta[2 * i + 1]); return 0; }
    return -1;
}

static const StTensor *find_exact(const SafeTensors *st, const char *name) {
    for (int64_t i = 0; i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}
/* A Qwen3.5 release is a vision-language model (Qwen3_5ForConditionalGeneration): its text model's
 * tensors are "model.language_model.X" where Qwen3_5ForCausalLM (and a save here) has "model.X" */
const StTensor *st_find(const SafeTensors *st, const char *name) {
    const StTensor *t = find_exact(st, name);
    if (t || strncmp(name, "model.", 6)) return t;
    char alt[512];
    if (snprintf(alt, sizeof alt, "model.language_model.%s", name + 6) >= (int)sizeof alt) return NULL;
    return find_exact(st, alt);
}

/* bytes [b0, b0 + nb) of tensor t's data */
static void *read_bytes(const SafeTensors *st, const StTensor *t, int64_t b0, int64_t nb, char *err, size_t errlen) {
    FILE *f = fopen(st->paths[t->file], "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open", short_name(st->paths[t->file])); return NULL; }
    void *buf = xmalloc((size_t)nb);
    if (fseeko(f, t->offset + b0, SEEK_SET) || fread(buf, 1, (size_t)nb, f) != (size_t)nb) {
        snprintf(err, errlen, "%s: short read of \"%s\"", short_name(st->paths[t->file]), t->name);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

int st_read_range_f32(const SafeTensors *st, const char *name, int ndim, const int64_t *shape, int64_t elem0,
                      int64_t n, float *out, char *err, size_t errlen) {
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
    if (elem0 < 0 || n < 0 || elem0 + n > t->numel) {
        snprintf(err, errlen, "tensor \"%s\": elements [%lld, %lld) outside its %lld", name, (long long)elem0,
                 (long long)(elem0 + n), (long long)t->numel);
        return -1;
    }
    const int64_t es = (int64_t)st_dtype_size(t->dtype);
    void *buf = read_bytes(st, t, elem0 * es, n * es, err, errlen);
    if (!buf) return -1;
    if (t->dtype == ST_F32) memcpy(out, buf, (size_t)(n * es));
    else if (t->dtype == ST_BF16) for (int64_t i = 0; i < n; i++) out[i] = bf16_to_f32(((uint16_t *)buf)[i]);
    else for (int64_t i = 0; i < n; i++) out[i] = f16_to_f32(((uint16_t *)buf)[i]);
    free(buf);
    return 0;
}

int st_read_f32(const SafeTensors *st, const char *name, int ndim, const int64_t *shape, float *out, char *err,
                size_t errlen) {
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    return st_read_range_f32(st, name, ndim, shape, 0, numel, out, err, errlen);
}

int st_read_i32(const SafeTensors *st, const char *name, int64_t numel, int32_t *out, char *err, size_t errlen) {
    const StTensor *t = st_find(st, name);
    if (!t) { snprintf(err, errlen, "tensor \"%s\" is missing", name); return -1; }
    if (t->numel != numel || (t->dtype != ST_I32 && t->dtype != ST_I64)) {
        snprintf(err, errlen, "tensor \"%s\": expected %lld integers, found %lld of %s", name, (long long)numel,
                 (long long)t->numel, st_dtype_name(t->dtype));
        return -1;
    }
    void *buf = read_bytes(st, t, 0, t->nbytes, err, errlen);
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
static int64_t bytes_of(const StWrite *t) { return numel_of(t) * (int64_t)st_dtype_size(t->dtype); }

/* one file's header for tensors t[0..n): JSON padded with spaces to a multiple of 8 (aligned data);
 * returns its length; the data offsets of the tensors (relative to the file) go to at[] */
static char *file_header(const StWrite *t, int64_t n, const char *metadata, size_t *len_out, int64_t *at) {
    size_t cap = 256 + (size_t)n * 400 + (metadata ? strlen(metadata) : 0), len = 0;
    char *h = xmalloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    if (metadata) len += (size_t)snprintf(h + len, cap - len, "\"__metadata__\":%s", metadata);
    int64_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t bytes = bytes_of(&t[i]);
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", (i || metadata) ? "," : "",
                                t[i].name, st_dtype_name(t[i].dtype));
        for (int d = 0; d < t[i].ndim; d++) len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        at[i] = off;
        off += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    *len_out = len;
    return h;
}

/* Lay the tensors out: greedy shards in tensor order when dir_mode and the total exceeds max_shard.
 * Headers are built here (every writer computes the same layout) and written by st_plan_create. */
static void plan(StPlan *p, const char *path, int dir_mode, const StWrite *t, int64_t n, int64_t max_shard,
                 const char *metadata) {
    memset(p, 0, sizeof *p);
    p->n = n;
    p->file = xcalloc((size_t)n, sizeof(int));
    p->offset = xcalloc((size_t)n, sizeof(int64_t));
    p->index = NULL;
    int64_t total = 0, cur = 0, nfiles = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = bytes_of(&t[i]);
        if (dir_mode && cur > 0 && cur + b > max_shard) { nfiles++; cur = 0; }
        p->file[i] = (int)nfiles;
        cur += b;
        total += b;
    }
    p->nfiles = (int)nfiles + 1;
    p->paths = xcalloc((size_t)p->nfiles, sizeof(char *));
    p->headers = xcalloc((size_t)p->nfiles, sizeof(char *));
    p->header_len = xcalloc((size_t)p->nfiles, sizeof(int64_t));
    p->size = xcalloc((size_t)p->nfiles, sizeof(int64_t));
    char buf[4200];
    for (int f = 0, i0 = 0; f < p->nfiles; f++) {
        int64_t i1 = i0;
        while (i1 < n && p->file[i1] == f) i1++;
        if (!dir_mode) snprintf(buf, sizeof buf, "%s", path);
        else if (p->nfiles == 1) snprintf(buf, sizeof buf, "%s/model.safetensors", path);
        else snprintf(buf, sizeof buf, "%s/model-%05d-of-%05d.safetensors", path, f + 1, p->nfiles);
        p->paths[f] = strdup(buf);
        size_t len;
        p->headers[f] = file_header(t + i0, i1 - i0, dir_mode ? "{\"format\":\"pt\"}" : metadata, &len, p->offset + i0);
        p->header_len[f] = (int64_t)len;
        int64_t end = 8 + (int64_t)len;
        for (int64_t i = i0; i < i1; i++) {
            p->offset[i] += 8 + (int64_t)len;
            end = p->offset[i] + bytes_of(&t[i]);
        }
        p->size[f] = end;
        i0 = (int)i1;
    }
    if (dir_mode && p->nfiles > 1) { /* model.safetensors.index.json */
        size_t cap = 256 + (size_t)n * 200, len = 0;
        p->index = xmalloc(cap);
        len += (size_t)snprintf(p->index + len, cap - len, "{\n  \"metadata\": {\"total_size\": %lld},\n  \"weight_map\": {\n",
                                (long long)total);
        for (int64_t i = 0; i < n; i++)
            len += (size_t)snprintf(p->index + len, cap - len, "    \"%s\": \"%s\"%s\n", t[i].name,
                                    strrchr(p->paths[p->file[i]], '/') + 1, i + 1 < n ? "," : "");
        snprintf(p->index + len, cap - len, "  }\n}\n");
        snprintf(buf, sizeof buf, "%s/model.safetensors.index.json", path);
        p->index_path = strdup(buf);
    }
}

void st_plan_file(StPlan *p, const char *path, const StWrite *t, int64_t n, const char *metadata) {
    plan(p, path, 0, t, n, 0, metadata);
}
void st_plan_dir(StPlan *p, const char *dir, const StWrite *t, int64_t n, int64_t max_shard_bytes) {
    plan(p, dir, 1, t, n, max_shard_bytes, NULL);
}

int st_plan_create(const StPlan *p, char *err, size_t errlen) {
    for (int f = 0; f < p->nfiles; f++) {
        FILE *fp = fopen(p->paths[f], "wb");
        if (!fp) { snprintf(err, errlen, "%s: cannot create: %s", short_name(p->paths[f]), strerror(errno)); return -1; }
        uint8_t lb[8];
        for (int i = 0; i < 8; i++) lb[i] = (uint8_t)((uint64_t)p->header_len[f] >> (8 * i));
        int ok = fwrite(lb, 1, 8, fp) == 8 && fwrite(p->headers[f], 1, (size_t)p->header_len[f], fp) == (size_t)p->header_len[f];
        ok = ok && ftruncate(fileno(fp), (off_t)p->size[f]) == 0; /* the data is filled in place by pwrite */
        ok = (fclose(fp) == 0) && ok;
        if (!ok) { snprintf(err, errlen, "%s: write failed: %s", short_name(p->paths[f]), strerror(errno)); return -1; }
    }
    if (p->index) {
        FILE *fp = fopen(short_name(p->index_path), "w");
        if (!fp || fputs(p->index, fp) < 0 || fclose(fp)) {
            snprintf(err, errlen, "%s: cannot write", short_name(p->index_path));
            return -1;
        }
    }
    return 0;
}

int st_plan_fill(const StPlan *p, int64_t i, int64_t byte0, const void *src, int64_t bytes, char *err, size_t errlen) {
    const char *path = p->paths[p->file[i]];
    const int fd = open(path, O_WRONLY);
    if (fd < 0) { snprintf(err, errlen, "%s: cannot open for writing: %s", short_name(path), strerror(errno)); return -1; }
    const char *s = src;
    int64_t done = 0;
    while (done < bytes) {
        const ssize_t w = pwrite(fd, s + done, (size_t)(bytes - done), (off_t)(p->offset[i] + byte0 + done));
        if (w <= 0) {
            snprintf(err, errlen, "%s: write failed (disk full?): %s", short_name(path), strerror(errno));
            close(fd);
            return -1;
        }
        done += w;
    }
    if (close(fd)) { snprintf(err, errlen, "%s: close failed: %s", short_name(path), strerror(errno)); return -1; }
    return 0;
}

int st_plan_sync(const StPlan *p, char *err, size_t errlen) {
    for (int f = 0; f <= p->nfiles; f++) {
        const char *path = f < p->nfiles ? p->paths[f] : p->index_path;
        if (!path) continue;
        const int fd = open(path, O_RDONLY);
        const int bad = fd < 0 || fsync(fd);
        const int e = errno;
        if ((fd >= 0 && close(fd)) || bad) { /* close once, whatever failed */
            snprintf(err, errlen, "%s: fsync failed: %s", short_name(path), strerror(bad ? e : errno));
            return -1;
        }
    }
    return 0;
}

void st_plan_free(StPlan *p) {
    for (int f = 0; f < p->nfiles; f++) { free(p->paths[f]); free(p->headers[f]); }
    free(p->paths); free(p->headers); free(p->header_len); free(p->size);
    free(p->file); free(p->offset); free(p->index); free(p->index_path);
    memset(p, 0, sizeof *p);
}

/* the one-writer forms: plan, create, fill every tensor */
static int write_all(StPlan *p, const StWrite *t, int64_t n, char *err, size_t errlen) {
    int rc = st_plan_create(p, err, errlen);
    for (int64_t i = 0; i < n && !rc; i++) rc = st_plan_fill(p, i, 0, t[i].data, bytes_of(&t[i]), err, errlen);
    st_plan_free(p);
    return rc;
}
int st_write(const char *path, const StWrite *t, int64_t n, const char *metadata, char *err, size_t errlen) {
    StPlan p;
    st_plan_file(&p, path, t, n, metadata);
    return write_all(&p, t, n, err, errlen);
}
int st_write_dir(const char *dir, const StWrite *t, int64_t n, int64_t max_shard_bytes, char *err, size_t errlen) {
    StPlan p;
    st_plan_dir(&p, dir, t, n, max_shard_bytes);
    return write_all(&p, t, n, err, errlen);
}
