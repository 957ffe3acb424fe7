/* memplan.h -- the per-GPU memory plan: bytes by category, printed as a table, checked against
 * the device before the first step. Each stage fills it from its arenas' high-water marks. */
#ifndef LONGCTX_MEMPLAN_H
#define LONGCTX_MEMPLAN_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *name[16];
    int64_t bytes[16];
    int n;
} MemPlan;

/* what CUDA, cuBLAS and cuDNN take beyond our arenas (context, handles, kernels): measured ~0.6 GiB */
#define MEMPLAN_RUNTIME_RESERVE (3ll << 29)

void memplan_add(MemPlan *m, const char *name, int64_t bytes);
int64_t memplan_total(const MemPlan *m);
/* the GPU's peak for one rank: the table plus MEMPLAN_RUNTIME_RESERVE */
int64_t memplan_peak(const MemPlan *m);
/* capacity <= 0: unknown (no GPU) */
void memplan_print(const MemPlan *m, FILE *f, const char *title, int64_t capacity);

#endif
