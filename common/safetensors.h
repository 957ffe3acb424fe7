/* safetensors.h -- read and write the safetensors format (8-byte little-endian header length,
 * a JSON header {name: {dtype, shape, data_offsets}}, then the raw data), single files and
 * sharded directories with model.safetensors.index.json. Every header is validated at open:
 * a corrupt or hostile file is refused with a message, never read past its end. */
#ifndef LONGCTX_SAFETENSORS_H
#define LONGCTX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

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
int st_read_i32(const SafeTensors *st, const char *name, int64_t numel, int32_t *out, char *err, size_t errlen);

typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[8];
    const void *data;    /* host memory, numel x dtype size bytes */
} StWrite;

/* Write one file. metadata: NULL or a flat JSON object text for "__metadata__" (string values). */
int st_write(const char *path, const StWrite *t, int64_t n, const char *metadata, char *err, size_t errlen);
/* Write dir/model.safetensors, or shards model-0000i-of-0000N.safetensors + index when the
 * total exceeds max_shard_bytes. */
int st_write_dir(const char *dir, const StWrite *t, int64_t n, int64_t max_shard_bytes, char *err, size_t errlen);

/* bf16 <-> fp32 on the host (round to nearest even; NaN stays NaN) */
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);

#endif
