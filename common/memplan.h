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
/* the end of a plan's title, after the stage's own words: ", --keep-attn" (kept: every layer's attention),
 * ", MoE GEMMs LOOP|GROUPED" (moe_gemm non-NULL), ", rehearsed", ", --packing" */
void memplan_title_tail(char *t, size_t n, int kept, const char *moe_gemm, int rehearsed, int packed);
/* --keep-attn's word, one meaning in every stage: alone or "all" keeps every layer's O and LSE,
 * "none" (or 0, or no --keep-attn) none; stage 4 adds a count N, "auto" (as many as fit) and the
 * split gpu:N,host:M. kept_all_or_none (stages 1-3): L or 0, -1 with err naming the stage that adds
 * the word. kept_parse (stages 4-5) for L layers: none or "gpu:N,host:M" (either part may go;
 * clamped to L) -> 1 with *gpu, *host (*asked_host: M before the clamp); alone, all or N -> 0,
 * *want = L or N (at most L), *counted; auto -> 0, *want = L; -1 with err otherwise.
 * kept_split: `want` layers kept, `g` of them fit the GPU's room above the plan, `room` the host's;
 * host_ok: --offload attn; counted: N was given (kept whether or not the plan fits). The GPU first,
 * where they cost no copies; host layers need two GPU slots, two layers' room, taken only when more
 * layers are kept that way. -> *gpu on the GPU, *host on the host. */
int kept_parse(const char *s, int64_t L, int64_t *want, int *counted, int64_t *gpu, int64_t *host,
               int64_t *asked_host, char *err, size_t n);
int64_t kept_all_or_none(const char *s, int64_t L, char *err, size_t n);
void kept_split(int64_t want, int64_t g, int64_t room, int host_ok, int counted, int64_t *gpu, int64_t *host);
/* whole layers of `per` bytes in `room` bytes, at most L (0 for no room) */
int64_t layers_in(double room, double per, int64_t L);
/* MemAvailable of /proc/meminfo (bytes; -1 if unknown) */
int64_t host_available_bytes(void);

/* The plan's line for kept attention (stages 4-5): where the kept layers sit and the attention
 * forwards they spare (2 seq^2 q_width FLOP a layer over P ranks), at the rate cuDNN's forward keeps
 * up in the ring's blocks on an H200 back to back (572-622 TFLOP/s at 32B 1M: build/sdpa_rate; one
 * call after an idle gap runs faster, until the power cap slows the clock). */
#define ATTN_FWD_TFLOPS 600.0
void kept_report(int64_t gpu, int64_t host, int64_t layers, int64_t seq, int64_t q_width, int P);
/* The host's plan per node (stage 4 on): the pinned bytes of ranks_per_node ranks against budget
 * (given: --host-gib, else what this machine has available); nothing when none is pinned. */
void memplan_host_report(const MemPlan *mp, int ranks_per_node, double budget, const char *whence);
/* where the host budget came from: --host-gib, the dry-run's planned machine (plan_machine), this machine */
const char *host_budget_whence(int argc, char **argv, int dry_run);
/* set by plan_machine (common/advice.h) when the plan is for a machine other than this one */
extern int memplan_machine_planned;
/* set by run_open_inputs when a dry-run's inputs are refused: its plan still prints (it is what a
 * dry-run is for), but a plan that fits says "fits, but the run is refused below (its inputs)" --
 * never a bare "fits" above a refusal -- and the refusal is its last line */
extern int memplan_inputs_refused;

#endif
