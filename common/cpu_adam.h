/* cpu_adam.h -- the optimizer on the host CPUs, for states offloaded to pinned host memory (stage
 * 4): the squared gradient norm, AdamW over a rank's pieces, and the bf16 copy of the weights. The
 * update is the GPU kernel's (kernels.h: adamw) element for element, in fp32: clip factor from the
 * global norm, bias-corrected moments, decoupled weight decay, bf16 rounded to nearest even. Work
 * is split over `threads` pthreads (each takes the same share of every piece); the loops are
 * plain fp32 arithmetic the compiler vectorises. */
#ifndef LONGCTX_CPU_ADAM_H
#define LONGCTX_CPU_ADAM_H

#include <stdint.h>

#include "model.h"

typedef struct {
    double lr, beta1, beta2, eps, wd, clip; /* wd applies to pieces whose tensor decays (params_decays) */
    int64_t step;                           /* 1-based: the bias corrections */
} AdamHP;

/* the host threads each of `ranks` ranks on this machine gets: its online cores shared, at least 1 */
int cpu_threads_each(int ranks);
/* sum of g[i]^2 in fp64 */
double cpu_sumsq(const float *g, int64_t n, int threads);
/* one AdamW step over every piece (at, numel) of the rank's flat buffers, given the global sumsq */
void cpu_adamw(const Piece *pieces, int64_t npieces, float *master, uint16_t *w, float *m, float *v, const float *g,
               double sumsq, const AdamHP *hp, int threads);
/* w[i] = bf16(master[i]) */
void cpu_cast_bf16(uint16_t *w, const float *master, int64_t n, int threads);

#endif
