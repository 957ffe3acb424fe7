/* safetensors.h -- read and write the safetensors format (8-byte little-endian header length,
 * a JSON header {name: {dtype, shape, data_offsets}}, then the raw data), single files and
 * sharded directories with model.safetensors.index.json. Every header is validated at open:
 * a corrupt or hostile file is refused with a message, never read past its end. */
#ifndef LONGCTX_SAFETENSORS_H
#define LONGCTX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { ST_F32, ST_BF16, ST_F16, ST_I32, ST_I64 } StDtype;

typedef struct {
    char *name;          /* HF tensor name */
    StDtype dtype;
    int ndim;
    int64_t shape[8];
    int64_t numel;
    int64_t offset;      /* absolute byte offset of the data in its file */
    int64_t nbytes;
    int file;            /* index into SafeTensors.paths */
} StTensor;

typedef struct {
    int nfiles;
    char **paths;        /* [nfiles] */
    int64_t n;
    StTensor *t;         /* [n] */
    int64_t nmeta;
    char **meta;         /* [2 * nmeta] key, value: the string entries of every file's "__metadata__" */
} SafeTensors;

/* path: a .safetensors file, or a directory holding model.safetensors or
 * model.safetensors.index.json (+ its shards). Returns 0, or -1 with a message. */
int st_open(const char *path, SafeTensors *st, char *err, size_t errlen);
void st_close(SafeTensors *st);
const StTensor *st_find(const SafeTensors *st, const char *name);
size_t st_dtype_size(StDtype d);
const char *st_dtype_name(StDtype d);
/* Read a tensor converted to fp32 (from F32, BF16 or F16) or to int32 (from I32/I64), checking
 * that its shape has exactly the dims given (ndim, shape). Missing tensor or mismatch: -1. */
int st_read_f32(const SafeTensors *st, const char *name, int ndim, const int64_t *shape, float *out, char *err,
                size_t errlen);
/* Elements [elem0, elem0 + n) of a float tensor (of the shape given), converted to fp32. */
int st_read_range_f32(const SafeTensors *st, const char *name, int ndim, const int64_t *shape, int64_t elem0,
                      int64_t n, float *out, char *err, size_t errlen);
/* A string value of the files' "__metadata__": 0 and the value in out, or -1 if absent. */
int st_metadata(const SafeTensors *st, const char *key, char *out, size_t outlen);
/* the same value where it is held (valid until st_close), or NULL if absent: any length */
const char *st_meta(const SafeTensors *st, const char *key);
int st_read_i32(const SafeTensors *st, const char *name, int64_t numel, int32_t *out, char *err, size_t errlen);

typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[8];
    const void *data;    /* host memory, numel x dtype size bytes */
} StWrite;

/* Writing by several writers (the ranks of a trainer, each holding pieces of every tensor): st_plan_*
 * lays out the files (every writer computes the same layout; data pointers are ignored), one
 * writer creates them (headers, index, files sized), then each writer fills the byte ranges it
 * holds, in any order (pwrite). */
typedef struct {
    int nfiles;
    char **paths;          /* [nfiles] */
    char **headers;        /* [nfiles] header JSON */
    int64_t *header_len;   /* [nfiles] */
    int64_t *size;         /* [nfiles] file sizes */
    int64_t n;
    int *file;             /* [n] the file of each tensor */
    int64_t *offset;       /* [n] absolute byte offset of its data in that file */
    char *index, *index_path; /* model.safetensors.index.json when sharded */
} StPlan;
void st_plan_file(StPlan *p, const char *path, const StWrite *t, int64_t n, const char *metadata);
void st_plan_dir(StPlan *p, const char *dir, const StWrite *t, int64_t n, int64_t max_shard_bytes);
int st_plan_create(const StPlan *p, char *err, size_t errlen);
/* bytes [byte0, byte0 + bytes) of tensor i's data */
int st_plan_fill(const StPlan *p, int64_t i, int64_t byte0, const void *src, int64_t bytes, char *err, size_t errlen);
/* fsync every file of the plan (and its index): what this writer filled is on disk */
int st_plan_sync(const StPlan *p, char *err, size_t errlen);
void st_plan_free(StPlan *p);

/* Write one file. metadata: NULL or a flat JSON object text for "__metadata__" (string values). */
int st_write(const char *path, const StWrite *t, int64_t n, const char *metadata, char *err, size_t errlen);
/* Write dir/model.safetensors, or shards model-0000i-of-0000N.safetensors + index when the
 * total exceeds max_shard_bytes. */
int st_write_dir(const char *dir, const StWrite *t, int64_t n, int64_t max_shard_bytes, char *err, size_t errlen);

/* bf16 <-> fp32 on the host (round to nearest even; NaN stays NaN). Inline: the host AdamW's
 * vectorised loop rounds with it. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
float bf16_to_f32(uint16_t h);

#endif
