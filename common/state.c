/* state.c -- training state I/O, streamed through a bounded host buffer (state.h). */
#include "state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt.h"
#include "inputs.h"
#include "safetensors.h"
#include "train.h"

#define CHUNK (8ll << 20) /* elements per transfer: 32 MiB of fp32 staging per rank */
static const char *STATE_PREFIX[3] = {"master", "adam_m", "adam_v"};

static void copy(const StateIO *s, void *dst, const void *src, int64_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDefault, s->st));
    CUDA_CHECK(cudaStreamSynchronize(s->st));
}
static void zero(const StateIO *s, float *p) {
    struct cudaPointerAttributes a;
    CUDA_CHECK(cudaPointerGetAttributes(&a, p));
    if (a.type == cudaMemoryTypeDevice) CUDA_CHECK(cudaMemsetAsync(p, 0, (size_t)s->total * 4, s->st));
    else memset(p, 0, (size_t)s->total * 4);
}
static void barrier(const StateIO *s) {
    if (s->comm) comm_barrier(s->comm, s->st);
}
static int64_t index_of(const StateIO *s, const Piece *pc) { return pc->param - s->t->p; }

/* ---------------------------------------------------------------- load */
/* one source of a piece's values: a tensor of an open safetensors set, or the random init */
typedef struct {
    const SafeTensors *st;   /* NULL: random init */
    const char *prefix;      /* "master." etc. or "" */
    double std;
    uint64_t seed;
} Source;

static void fill_piece(StateIO *s, const Piece *pc, const Source *src, float *dst, float *buf) {
    char err[512];
    StoredAt at; /* its own name, or a Qwen3.5 MoE release's fused experts (common/model.h) */
    if (src->st && params_stored(src->st, src->prefix, s->t, pc->param, &at, err, sizeof err)) DIE("%s", err);
    for (int64_t off = 0; off < pc->numel; off += CHUNK) {
        const int64_t n = pc->numel - off < CHUNK ? pc->numel - off : CHUNK;
        if (!src->st) params_init_piece(s->t, pc->param, src->std, src->seed, pc->elem0 + off, n, buf, s->threads);
        else if (st_read_range_f32(src->st, at.name, at.ndim, at.shape, at.at + pc->elem0 + off, n, buf, err, sizeof err))
            DIE("%s", err);
        else if (!src->prefix[0]) /* an HF model's tensor: Qwen3.5's norms hold 1 + w here (common/model.h) */
            for (int64_t j = 0; j < n; j++) buf[j] = params_from_hf(pc->param, buf[j]);
        copy(s, dst + pc->at + off, buf, 4 * n);
    }
}

int64_t state_load(StateIO *s, const char *model, const char *resume, double init_std, uint64_t seed) {
    char err[512], path[4200];
    float *buf = xmalloc((size_t)CHUNK * 4);
    float *dst[3] = {s->master, s->m, s->v};
    for (int k = 0; k < 3; k++) zero(s, dst[k]);
    int64_t step = 0;
    struct stat sb;
    if (resume) {
        snprintf(path, sizeof path, "%s/trainer_state.safetensors", resume);
        SafeTensors st;
        if (st_open(path, &st, err, sizeof err)) DIE("--resume: %s", err);
        if (inputs_state_step(&st, INT64_MAX, &step, err, sizeof err)) DIE("--resume %s: %s", path, err); /* checked before */
        for (int k = 0; k < 3; k++) {
            char prefix[16];
            snprintf(prefix, sizeof prefix, "%s.", STATE_PREFIX[k]);
            const Source src = {&st, prefix, 0, 0};
            for (int64_t i = 0; i < s->npieces; i++) fill_piece(s, &s->pieces[i], &src, dst[k], buf);
        }
        st_close(&st);
        /* each node resolved DIR/latest on its own (a shared filesystem's caches may lag): every rank
         * must hold the same step, else its shards would come from another save. Both collectives run
         * on every rank, whatever the first one says: a rank that skipped the second would pair its
         * next collective with the others' second one. */
        if (s->comm) {
            const int64_t lo = comm_min_i64(s->comm, step, s->st), hi = -comm_min_i64(s->comm, -step, s->st);
            if (lo != step || hi != step)
                DIE("--resume %s: the ranks resumed from different steps (this rank: %lld; steps %lld to %lld) -- a node "
                    "saw another DIR/latest; resume from DIR/step-N", resume, (long long)step, (long long)lo, (long long)hi);
        }
        if (s->rank == 0) printf("resumed from %s after step %lld\n", resume, (long long)step);
    } else if (!stat(model, &sb) && S_ISDIR(sb.st_mode)) {
        if (s->rank == 0) printf("loading weights from %s\n", model);
        SafeTensors st;
        if (st_open(model, &st, err, sizeof err)) DIE("%s", err);
        const Source src = {&st, "", 0, 0};
        for (int64_t i = 0; i < s->npieces; i++) fill_piece(s, &s->pieces[i], &src, s->master, buf);
        st_close(&st);
    } else {
        if (s->rank == 0) printf("random init (normal 0, %g; norms 1), seed %lld\n", init_std, (long long)seed);
        const Source src = {NULL, "", init_std, seed};
        for (int64_t i = 0; i < s->npieces; i++) fill_piece(s, &s->pieces[i], &src, s->master, buf);
    }
    free(buf);
    return step;
}

/* ---------------------------------------------------------------- save */
int64_t state_save_bytes(const ParamTable *t) {
    int64_t n = 0;
    for (int64_t i = 0; i < t->n; i++) n += t->p[i].numel;
    return 14 * n; /* bf16 weights (2 bytes) + fp32 master, m and v (12) */
}

/* the tensors of the two files: [n] bf16 weights, and [3n] fp32 master, m, v */
static void specs(const StateIO *s, StWrite *model, StWrite *state, char (*names)[112]) {
    const ParamTable *t = s->t;
    for (int64_t i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        model[i] = (StWrite){p->name, ST_BF16, p->ndim, {p->shape[0], p->shape[1], p->shape[2]}, NULL};
        for (int k = 0; k < 3; k++) {
            snprintf(names[k * t->n + i], 112, "%s.%s", STATE_PREFIX[k], p->name);
            state[k * t->n + i] = (StWrite){names[k * t->n + i], ST_F32, p->ndim, {p->shape[0], p->shape[1], p->shape[2]}, NULL};
        }
    }
}

/* Buffers may have been written by other streams (gradient shards copied down on a communication
 * stream, offloaded states updated by the host): everything queued on the device lands first. */
static void settle(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

/* this rank's pieces of every tensor into both files' byte ranges */
static void fill_files(const StateIO *s, const StPlan *pm, const StPlan *ps) {
    const ParamTable *t = s->t;
    char err[512];
    float *buf = xmalloc((size_t)CHUNK * 4);
    uint16_t *bf = xmalloc((size_t)CHUNK * 2);
    const float *src[3] = {s->master, s->m, s->v};
    for (int64_t i = 0; i < s->npieces; i++) {
        const Piece *pc = &s->pieces[i];
        const int64_t ti = index_of(s, pc);
        for (int64_t off = 0; off < pc->numel; off += CHUNK) {
            const int64_t n = pc->numel - off < CHUNK ? pc->numel - off : CHUNK, e = pc->elem0 + off;
            for (int k = 0; k < 3; k++) {
                copy(s, buf, src[k] + pc->at + off, 4 * n);
                if (st_plan_fill(ps, k * t->n + ti, 4 * e, buf, 4 * n, err, sizeof err)) DIE("%s", err);
                if (k) continue;
                for (int64_t j = 0; j < n; j++) bf[j] = f32_to_bf16(params_to_hf(pc->param, buf[j])); /* HF's w */
                if (st_plan_fill(pm, ti, 2 * e, bf, 2 * n, err, sizeof err)) DIE("%s", err);
            }
        }
    }
    free(buf); free(bf);
}

/* A save is DIR/step-N (common/ckpt.h): rank 0 makes DIR/step-N.partial and lays out its files,
 * every rank fills and fsyncs its pieces, and only then does rank 0 rename it to step-N and point
 * DIR/latest at it. A crash at any moment leaves the previous complete save as it was. */
void state_save(StateIO *s, const char *root, const SaveMeta *m, int64_t keep) {
    const ParamTable *t = s->t;
    const int64_t step = m->step;
    const double t0 = now_s();
    settle();
    char dir[CKPT_PATH], path[CKPT_PATH + 64], err[CKPT_PATH + 512];
    StWrite *mw = xcalloc((size_t)t->n, sizeof(StWrite)), *sw = xcalloc((size_t)(3 * t->n), sizeof(StWrite));
    char (*names)[112] = xcalloc((size_t)(3 * t->n), 112);
    specs(s, mw, sw, names);
    char *meta = inputs_save_meta_json(m); /* escaped: any --data path round-trips */
    ckpt_partial_dir(root, step, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/trainer_state.safetensors", dir);
    StPlan pm, ps;
    st_plan_dir(&pm, dir, mw, t->n, 4ll << 30);
    st_plan_file(&ps, path, sw, 3 * t->n, meta);
    char cfg[CKPT_PATH + 64];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (s->rank == 0) {
        if (ckpt_begin(root, step, err, sizeof err)) DIE("%s", err);
        if (config_write_json(s->c, cfg, "bfloat16") || fsync_path(cfg)) DIE("cannot write %s", cfg);
        if (st_plan_create(&pm, err, sizeof err) || st_plan_create(&ps, err, sizeof err)) DIE("%s", err);
    }
    barrier(s); /* the files exist: every rank fills its pieces */
    fill_files(s, &pm, &ps);
    /* what this rank wrote is on disk before anyone may call the save complete */
    if (st_plan_sync(&pm, err, sizeof err) || st_plan_sync(&ps, err, sizeof err)) DIE("%s", err);
    barrier(s); /* every piece of every rank is durable */
    if (s->rank == 0) {
        if (ckpt_commit(root, step, keep, err, sizeof err)) DIE("%s", err);
        ckpt_step_dir(root, step, dir, sizeof dir);
        const double sec = now_s() - t0, gb = (double)state_save_bytes(t) / 1e9;
        printf("saved step %lld to %s in %.1f s (%.2f GB, %.2f GB/s; HF model + trainer state; %s/" CKPT_LATEST
               " points at it)\n", (long long)step, dir, sec, gb, gb / (sec > 1e-9 ? sec : 1e-9), root);
    }
    barrier(s);
    st_plan_free(&pm);
    st_plan_free(&ps);
    free(meta);
    free(mw); free(sw); free(names);
}

/* ---------------------------------------------------------------- dump */
void state_dump(StateIO *s, const char *path, double loss) {
    const ParamTable *t = s->t;
    settle();
    char err[512];
    StWrite *w = xcalloc((size_t)(t->n + 1), sizeof(StWrite));
    char (*names)[112] = xcalloc((size_t)t->n, 112);
    const float l = (float)loss;
    w[0] = (StWrite){"loss", ST_F32, 1, {1, 0}, &l};
    for (int64_t i = 0; i < t->n; i++) {
        const ParamInfo *p = &t->p[i];
        snprintf(names[i], 112, "grad.%s", p->name);
        w[i + 1] = (StWrite){names[i], ST_F32, p->ndim, {p->shape[0], p->shape[1], p->shape[2]}, NULL};
    }
    StPlan pl;
    st_plan_file(&pl, path, w, t->n + 1, NULL);
    if (s->rank == 0 && (st_plan_create(&pl, err, sizeof err) || st_plan_fill(&pl, 0, 0, &l, 4, err, sizeof err)))
        DIE("%s", err);
    barrier(s);
    float *buf = xmalloc((size_t)CHUNK * 4);
    for (int64_t i = 0; i < s->npieces; i++) {
        const Piece *pc = &s->pieces[i];
        for (int64_t off = 0; off < pc->numel; off += CHUNK) {
            const int64_t n = pc->numel - off < CHUNK ? pc->numel - off : CHUNK;
            copy(s, buf, s->grad + pc->at + off, 4 * n);
            if (st_plan_fill(&pl, 1 + index_of(s, pc), 4 * (pc->elem0 + off), buf, 4 * n, err, sizeof err)) DIE("%s", err);
        }
    }
    barrier(s);
    if (s->rank == 0) printf("wrote loss and gradients of this step to %s\n", path);
    st_plan_free(&pl);
    free(buf); free(w); free(names);
}
