/* cpu_adam.c -- AdamW, gradient norm and bf16 cast on the host, threaded (cpu_adam.h). */
#include "cpu_adam.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "safetensors.h"

#define MAX_THREADS 128

/* one job for every thread: part `part` of `parts` of each range */
typedef struct {
    int kind;                 /* 0 sumsq, 1 adamw, 2 cast */
    const Piece *pieces;
    int64_t npieces, n;
    float *master, *m, *v;
    uint16_t *w;
    const float *g, *src;     /* src: the cast's input */
    float clip, lr, b1, b2, eps, wd, bc1, bc2;
    int part, parts;
    double sum;               /* sumsq: this part's */
} Job;

/* one clone per vector width (resolved at load time): the same IEEE operations in every clone, no
 * contraction into FMA (ISO C mode), so results do not depend on the CPU */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void adamw_range(Job *j, int64_t at, int64_t n,
                                                                                      float wd) {
    float *restrict master = j->master + at, *restrict m = j->m + at, *restrict v = j->v + at;
    const float *restrict g = j->g + at;
    uint16_t *restrict w = j->w + at;
    const float clip = j->clip, lr = j->lr, b1 = j->b1, b2 = j->b2, eps = j->eps, bc1 = j->bc1, bc2 = j->bc2;
    for (int64_t i = 0; i < n; i++) { /* the kernel's expression, term for term */
        const float gi = g[i] * clip;
        const float mi = b1 * m[i] + (1.f - b1) * gi, vi = b2 * v[i] + (1.f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float p = master[i] - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * master[i]);
        master[i] = p;
        w[i] = f32_to_bf16(p);
    }
}

static void *run_part(void *arg) {
    Job *j = arg;
    if (j->kind == 1) {
        for (int64_t k = 0; k < j->npieces; k++) {
            const Piece *pc = &j->pieces[k];
            const int64_t lo = pc->numel * j->part / j->parts, hi = pc->numel * (j->part + 1) / j->parts;
            adamw_range(j, pc->at + lo, hi - lo, params_decays(pc->param) ? j->wd : 0.f);
        }
        return NULL;
    }
    const int64_t lo = j->n * j->part / j->parts, hi = j->n * (j->part + 1) / j->parts;
    if (j->kind == 0) {
        double s = 0;
        for (int64_t i = lo; i < hi; i++) s += (double)j->g[i] * j->g[i];
        j->sum = s;
    } else
        for (int64_t i = lo; i < hi; i++) j->w[i] = f32_to_bf16(j->src[i]);
    return NULL;
}

static double run(Job job, int threads) {
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    pthread_t th[MAX_THREADS];
    Job jobs[MAX_THREADS];
    for (int i = 0; i < threads; i++) {
        jobs[i] = job;
        jobs[i].part = i;
        jobs[i].parts = threads;
        if (i > 0 && pthread_create(&th[i], NULL, run_part, &jobs[i])) DIE("cannot start an optimizer thread");
    }
    run_part(&jobs[0]);
    double sum = jobs[0].sum;
    for (int i = 1; i < threads; i++) {
        pthread_join(th[i], NULL);
        sum += jobs[i].sum; /* in thread order: the same sum for the same thread count */
    }
    return sum;
}

double cpu_sumsq(const float *g, int64_t n, int threads) {
    return run((Job){.kind = 0, .n = n, .g = g}, threads);
}

void cpu_adamw(const Piece *pieces, int64_t npieces, float *master, uint16_t *w, float *m, float *v, const float *g,
               double sumsq, const AdamHP *hp, int threads) {
    float clip = 1.f; /* as the kernel: the norm in fp32 from the fp64 sum */
    if (hp->clip > 0) {
        const float norm = (float)sqrt(sumsq);
        if (norm > (float)hp->clip) clip = (float)hp->clip / (norm + 1e-6f);
    }
    Job j = {.kind = 1, .pieces = pieces, .npieces = npieces, .master = master, .m = m, .v = v, .w = w, .g = g,
             .clip = clip, .lr = (float)hp->lr, .b1 = (float)hp->beta1, .b2 = (float)hp->beta2, .eps = (float)hp->eps,
             .wd = (float)hp->wd, .bc1 = (float)(1.0 - pow(hp->beta1, (double)hp->step)),
             .bc2 = (float)(1.0 - pow(hp->beta2, (double)hp->step))};
    run(j, threads);
}

void cpu_cast_bf16(uint16_t *w, const float *master, int64_t n, int threads) {
    run((Job){.kind = 2, .n = n, .src = master, .w = w}, threads);
}

int cpu_threads_each(int ranks) {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > ranks ? (int)(cores / ranks) : 1;
}
