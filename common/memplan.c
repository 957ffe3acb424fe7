/* memplan.c -- memory plan table. */
#include "memplan.h"

void memplan_add(MemPlan *m, const char *name, int64_t bytes) {
    for (int i = 0; i < m->n; i++)
        if (m->name[i] == name) { m->bytes[i] += bytes; return; }
    if (m->n < 16) { m->name[m->n] = name; m->bytes[m->n++] = bytes; }
}
int64_t memplan_total(const MemPlan *m) {
    int64_t t = 0;
    for (int i = 0; i < m->n; i++) t += m->bytes[i];
    return t;
}
int64_t memplan_peak(const MemPlan *m) { return memplan_total(m) + MEMPLAN_RUNTIME_RESERVE; }
void memplan_print(const MemPlan *m, FILE *f, const char *title, int64_t capacity) {
    const double G = 1 << 30;
    fprintf(f, "memory plan per GPU (%s)\n", title);
    for (int i = 0; i < m->n; i++) fprintf(f, "  %-28s %9.3f GiB\n", m->name[i], m->bytes[i] / G);
    fprintf(f, "  %-28s %9.3f GiB\n", "CUDA/cuBLAS/cuDNN runtime", MEMPLAN_RUNTIME_RESERVE / G);
    const int64_t total = memplan_peak(m);
    fprintf(f, "  %-28s %9.3f GiB", "total (peak)", total / G);
    if (capacity > 0) fprintf(f, "  of %.1f GiB on the device: %s", capacity / G, total <= capacity ? "fits" : "DOES NOT FIT");
    fprintf(f, "\n");
}
