/* calls.h -- the call log of the CPU-faked GPU (fake_cuda.c, stubs made by gen_stubs.py) */
#ifndef LONGCTX_CALLS_H
#define LONGCTX_CALLS_H
#include <cuda_runtime_api.h>
#include <stddef.h>

void calls_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* one line of the calling rank thread's record of its collectives, fences and allocations
 * ($CALLS_DIR/rank<R>.comm; fake_nccl.c says what it holds) */
void calls_comm(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *calls_ptr(const void *p, char *buf, size_t n);      /* "tensor+offset", "host" or "null" */
const char *calls_stream(cudaStream_t s, char *buf, size_t n);  /* "streamN" */

#endif
