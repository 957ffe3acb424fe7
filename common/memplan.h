/* memplan.h -- the per-GPU memory plan: bytes by category and place (GPU or pinned host), printed
 * as a table and checked against the machine before the first step. Each stage fills it from its
 * arenas' high-water marks (memplan_of) and may add estimated rows (memplan_add). */
#ifndef LONGCTX_MEMPLAN_H
#define LONGCTX_MEMPLAN_H

#include <stdint.h>
#include <stdio.h>

#include "tensor.h"

#define MEMPLAN_ROWS 24

typedef struct {
    const char *name[MEMPLAN_ROWS];
    Place place[MEMPLAN_ROWS];
    int64_t bytes[MEMPLAN_ROWS];
    int n;
} MemPlan;

/* what CUDA, cuBLAS and cuDNN take beyond our arenas (context, handles, kernels): measured ~0.6 GiB */
#define MEMPLAN_RUNTIME_RESERVE (3ll << 29)

/* one row per arena that holds anything, in arena order */
MemPlan memplan_of(const Arena *a, int n);
void memplan_add(MemPlan *m, const char *name, Place place, int64_t bytes);
/* the GPU's peak for one rank: the GPU rows plus MEMPLAN_RUNTIME_RESERVE */
int64_t memplan_peak(const MemPlan *m);
/* pinned host bytes of one rank */
int64_t memplan_host(const MemPlan *m);
/* gpu_capacity <= 0: unknown (no GPU). Host rows, when there are any, follow the GPU total. */
void memplan_print(const MemPlan *m, FILE *f, const char *title, int64_t gpu_capacity);
/* MemAvailable of /proc/meminfo (bytes; -1 if unknown) */
int64_t host_available_bytes(void);

#endif
