/* run.c -- a run's operations around the training step (run.h). */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "gpu.h"

void run_opts_check(RunOpts *r, const char **model, int model_given, int64_t steps) {
    if (r->save) preempt_arm(); /* first: a signal during the long reads and loads ahead is kept for its stop */
    if (steps == 0 && !r->save) STOP("--steps 0 only with --save (it writes the initial weights); else at least 1");
    if (r->resume_changes) {
        static const char *const names[4] = RESUME_CHANGE_NAMES;
        int f[4];
        int *const flags[4] = {&f[0], &f[1], &f[2], &f[3]};
        char err[256];
        if (!r->resume) STOP("--resume-changes says what a resumed run may change: give --resume DIR too");
        if (cli_parse_set(r->resume_changes, names, flags, 4, err, sizeof err)) STOP("--resume-changes: %s", err);
        for (int k = 0; k < 4; k++) r->resume_allow |= f[k] ? 1u << k : 0;
    }
    const char *asked = r->resume;
    if (r->resume) r->resume = ckpt_resume_dir(r->resume); /* DIR/latest, or a step directory; never a partial one */
    if (r->resume && (!model_given || !strcmp(*model, asked))) *model = r->resume; /* its own model */
    if (r->eval_every && !r->eval_data) STOP("--eval-every needs --eval-data FILE (the held-out tokens)");
}

void run_instruments(const RunOpts *r) {
    prof_enable(r->profile);
    trace_open(r->trace);
    timeline_open(r->timeline);
}

/* a dry-run's refusal of its inputs, said last (after its plan), and its exit status */
static char refused[4096];
static void refuse_at_exit(void) {
    fflush(stdout);
    fprintf(stderr, "%s%s: %s\n", __atomic_load_n(&longctx_midline, __ATOMIC_ACQUIRE) ? "\n" : "", longctx_prog, refused);
    fflush(stderr);
    _exit(2);
}
typedef struct {
    Inputs *in;
    const InputsAsk *a;
    const Qwen3Config *c;
    const ParamTable *t;
} OpenAsk;
static void open_all(void *p) {
    const OpenAsk *o = p;
    inputs_open(o->in, o->a, o->c, o->t);
}

void run_open_inputs(Inputs *in, RunOpts *r, const char *data, const char *model, int64_t seq, int64_t steps,
                     int64_t eot, int dry_run, const Job *j, const Qwen3Config *c, const ParamTable *t) {
    const InputsAsk a = {.data = data, .eval_data = r->eval_data, .model = model, .resume = r->resume, .save = r->save,
                         .log = r->log, .trace = r->trace, .timeline = r->timeline, .dump_grads = r->dump_grads,
                         .window = seq, .world = j->dp, .eval_steps = run_eval_passes(r, j), .steps = steps, .eot = eot,
                         .resume_changes = r->resume_allow};
    if (!dry_run) inputs_open(in, &a, c, t); /* a refusal ends the run here, before its plan */
    else if (longctx_catch_stop(open_all, &(OpenAsk){in, &a, c, t}, refused, sizeof refused)) {
        memplan_inputs_refused = 1; /* the plan prints, not saying a bare "fits"; the refusal follows, last */
        atexit(refuse_at_exit);
        return;
    }
    r->data_tokens = in->data.count, r->data_digest = in->data_digest, r->eot = eot;
    preempt_stop_early("while the inputs were read"); /* before the plan, the GPU, the communicators */
}

/* ---------------------------------------------------------------- the job's ranks agree */
/* the options: two collectives when they agree; two more name a rank of each side when not */
static void same_options(const Job *j, cudaStream_t st) {
    const int64_t d = cli_options_digest(), lo = comm_min_i64(j->comm, d, st), hi = -comm_min_i64(j->comm, -d, st);
    if (lo == hi) return;
    const int64_t a = comm_min_i64(j->comm, d == lo ? j->rank : j->P, st), b = comm_min_i64(j->comm, d != lo ? j->rank : j->P, st);
    const int here = j->here > 0 ? j->here : 1;
    STOP("rank %lld (node %lld) and rank %lld (node %lld) were started with other options: every node runs the same "
         "command (only --node-rank, --log, --trace, --timeline and --profile may differ), since the options decide the "
         "collectives each rank issues; compare the nodes' command lines", (long long)a, (long long)(a / here),
         (long long)b, (long long)(b / here));
}

/* --save DIR where every rank can write a file rank 0 made: the ranks' pieces go into rank 0's files */
static void save_reachable(const char *dir, const Job *j, cudaStream_t st) {
    const int64_t NONE = 1ll << 52, OK = 1ll << 50; /* below 2^53: exact in comm_min_i64's doubles */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t mine = ((int64_t)getpid() << 20 ^ ts.tv_nsec ^ (int64_t)ts.tv_sec << 30) & (OK - 1),
                  nonce = comm_min_i64(j->comm, j->rank == 0 ? mine : NONE, st); /* rank 0's, everywhere */
    char probe[CKPT_PATH + 64];
    snprintf(probe, sizeof probe, "%s/.longctx-probe-%llx", dir, (long long)nonce);
    int64_t made = OK;
    if (j->rank == 0) {
        if (mkdir(dir, 0755) && errno != EEXIST) made = errno;
        else {
            const int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || fsync(fd)) made = errno;
            if (fd >= 0) close(fd);
        }
    }
    made = comm_min_i64(j->comm, made, st); /* rank 0's file exists before any rank looks */
    int64_t v = OK;
    if (made == OK && j->rank != 0) {
        const int fd = open(probe, O_WRONLY);
        if (fd < 0) v = (int64_t)j->rank << 16 | (errno & 0xffff);
        else close(fd);
    }
    v = comm_min_i64(j->comm, v, st); /* the lowest rank that could not, and why */
    if (j->rank == 0 && made == OK) unlink(probe);
    const int here = j->here > 0 ? j->here : 1;
    if (made != OK)
        STOP("--save %s: rank 0 cannot make a file there (%s): give a directory every node can write", dir,
             strerror((int)made));
    if (v != OK)
        STOP("--save %s: rank %lld (node %lld) cannot open the file rank 0 made there (%s): every node must see the "
             "same DIR, writable (a filesystem they share, at the same path), or the first save fails", dir,
             (long long)(v >> 16), (long long)((v >> 16) / here), strerror((int)(v & 0xffff)));
}

void run_join(const RunOpts *o, const Job *j, cudaStream_t st) {
    /* one process -- one rank, local ranks, a node's GPUs alone -- has one command and one filesystem;
     * the rehearsal is one rank, alone */
    if (!j->comm || comm_kind(j->comm) == COMM_REHEARSE || j->P <= j->here) return;
    same_options(j, st);
    if (o->save) save_reachable(o->save, j, st);
}

void job_same_inputs(const Job *j, uint64_t digest, const char *path, int64_t tokens, int64_t counted,
                     int64_t layers, cudaStream_t st) {
    if (!j->comm || comm_same_i64(j->comm, (int64_t)digest, st)) return;
    STOP("%s or the model's config differs between ranks (here: %lld tokens, %lld labels count; %lld layers): every "
         "node needs the same file and model", path, (long long)tokens, (long long)counted, (long long)layers);
}

/* ---------------------------------------------------------------- evaluation and saves */
/* --eval-data: the mean NLL over the labels that count in the file's first windows, divided by the
 * labels of every rank's windows (never a rank's share). The stage's forward runs in the training's
 * buffers; the step's profile and collective counts leave it out. */
static EvalResult evaluate(Run *r) {
    const double t0 = now_s();
    measure_pause(1);
    EvalResult e = {.windows = r->eval_passes * r->job.dp};
    double sum = 0;
    for (int64_t k = 0; k < r->eval_passes; k++) {
        int64_t labels = 0;
        const double s = r->h.eval_window(r->h.model, k, &labels);
        if (!labels) continue; /* windows of prompt only */
        sum += s;
        e.labels += labels;
    }
    measure_pause(0);
    e.loss = sum / (double)e.labels;
    e.sec = now_s() - t0;
    if (!isfinite(e.loss)) DIE("the evaluation's loss is %f -- stopping", e.loss);
    return e;
}
static EvalResult eval_after(Run *r, int64_t step) {
    if (!r->o->eval_data || !eval_due(r->o->eval_every, step, r->steps)) return (EvalResult){0};
    return evaluate(r);
}
/* what a save records of the run (common/inputs.h: SaveMeta) */
static SaveMeta save_meta(const Run *r, int64_t step) {
    const Qwen3Config *c = r->c;
    return (SaveMeta){.step = step, .seq = r->seq, .data = r->data, .data_tokens = r->o->data_tokens,
                      .data_digest = r->o->data_digest, .eot = r->o->eot, .model = c->name, .layers = c->layers,
                      .yarn_factor = c->yarn ? c->yarn_factor : 0, .yarn_original = c->yarn ? c->yarn_original_max : 0,
                      .model_digest = config_run_digest(c)};
}
static void save(Run *r, int64_t step) {
    StateIO io = r->h.state(r->h.model);
    const SaveMeta m = save_meta(r, step);
    state_save(&io, r->o->save, &m, r->o->save_keep);
}
static void save_if_due(Run *r, int64_t step) {
    if (r->o->save && save_due(r->o->save_every, step, r->steps)) save(r, step);
}

void run_check_eval(const RunOpts *r, const Job *j, const Loader *ld) {
    char err[512];
    if (loader_check_eval(ld, run_eval_passes(r, j), err, sizeof err)) DIE("%s", err);
}

/* ---------------------------------------------------------------- the loop's calls */
void run_begin(Run *r, int64_t start) {
    r->start = start;
    r->eval_passes = run_eval_passes(r->o, &r->job);
    r->log = r->o->log && rank_prints() ? fopen(r->o->log, "a") : NULL; /* the printing rank logs */
    if (r->o->log && rank_prints() && !r->log) DIE("cannot open --log %s", r->o->log);
    r->flops = config_step_flops(r->c, r->seq) / (r->job.P / r->job.dp); /* a shared window: this rank's share */
    CUDA_CHECK(cudaEventCreate(&r->ev[0]));
    CUDA_CHECK(cudaEventCreate(&r->ev[1]));
    if (r->job.P == 1 && r->stage == 1)
        say("training %lld steps of %lld tokens (%.3g model TFLOP per step)\n", (long long)r->steps, (long long)r->S,
            r->flops / 1e12);
    else
        say("training %lld steps of %d x %lld tokens (%.3g model TFLOP per rank and step)\n", (long long)r->steps,
            r->job.P, (long long)r->S, r->flops / 1e12);
    progress_start(r->c->layers); /* on a terminal: where the step is */
    /* ranks finish allocating (pinning), loading and planning minutes apart: meet here (the barrier's
     * own, longer limit), not in the first collective, whose clock starts on the fastest */
    if (r->job.comm) comm_barrier(r->job.comm, r->st);
    if (r->o->eval_data) { /* the held-out loss before the first step: where its curve starts */
        const EvalResult e0 = evaluate(r);
        eval_report(r->stage, start, &e0, r->log);
    }
    r->t0 = now_s(); /* SIGTERM and SIGUSR1 were armed with the options (run_opts_check) */
}

int run_stopping(Run *r, int64_t step) {
    if (!r->o->save) return 0;
    const int sig = r->job.comm ? (int)-comm_min_i64(r->job.comm, -(int64_t)preempt_pending(), r->st) /* one step, every rank */
                                : preempt_pending();
    if (!sig) return 0;
    if (step > r->start && !save_due(r->o->save_every, step, r->steps)) save(r, step);
    preempt_report(sig, step, r->start, r->o->save);
    return 1;
}

void run_skipped(Run *r, int64_t step) {
    const EvalResult e = eval_after(r, step);
    step_skipped(r->stage, step, &e, r->log);
    save_if_due(r, step);
}

void run_clock_start(Run *r) { CUDA_CHECK(cudaEventRecord(r->ev[0], r->st)); }
void run_clock_stop(Run *r) {
    mark(r->st, K_END);
    CUDA_CHECK(cudaEventRecord(r->ev[1], r->st));
}

void run_dump(Run *r, int64_t step, const double *loss_sum, int64_t counted, double aux) {
    if (!r->o->dump_grads || step != 1) return;
    double ls;
    gpu_download(&ls, loss_sum, 8, r->st);
    StateIO io = r->h.state(r->h.model);
    state_dump(&io, r->o->dump_grads, ls / (double)counted + aux);
}

/* After the first step: how long a stop on a signal may take -- the step in flight, then a save --
 * and so the lead Slurm's --signal=USR1@T needs (twice that: a step can run long, a disk slow) */
static void stop_time_note(const Run *r, double step_s) {
    const StateIO io = r->h.state(r->h.model);
    const double gb = (double)state_save_bytes(io.t) / 1e9, save_s = gb / RUN_SAVE_GBPS;
    say("a stop on SIGTERM/SIGUSR1 takes up to a step (%.1f s) and a save (%.2f GB, ~%.0f s at an assumed %g GB/s; each "
        "save's line says its time): under Slurm, --signal=USR1@%.0f or more\n", step_s, gb, save_s, RUN_SAVE_GBPS,
        ceil(2 * (step_s + save_s) + 10));
}

void run_step(Run *r, StepLog *s, double pairs) {
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, r->ev[0], r->ev[1]));
    const int packed = pairs >= 0, share = r->job.share;
    const double G = 1 << 30, sec = ms / 1e3,
                 fl = packed ? config_step_flops_pairs(r->c, r->S, pairs) : r->flops; /* --packing: the blocks' work */
    s->stage = r->stage, s->ranks = r->stage > 1 ? r->job.P : 0, s->model = r->c->name, s->seq = r->S;
    s->sec = sec, s->tokens = (double)(r->seq * r->job.dp), s->tflops = fl * share / sec / 1e12;
    s->attn_tflop = packed ? config_attn_flops(r->c, pairs) / 1e12 : 0;
    s->attn_tflop_full = config_attn_flops(r->c, (double)r->seq * r->seq / 2) / (r->job.P / r->job.dp) / 1e12;
    s->mem_used_gib = (double)gpu_used_bytes() / G;
    s->mem_plan_gib = (double)memplan_peak(r->mp) * share / G;
    s->host_gib = (double)memplan_host(r->mp) * share / G;
    s->eval = eval_after(r, s->step); /* after the step's numbers are read: it reuses their buffers */
    step_report(s, r->log);
    if (r->job.comm) comm_step_report(r->job.comm, sec); /* rehearsal only: bytes moved and their modelled time */
    blocks_report(); /* rehearsal only: do the ring's hops hide under its blocks? */
    prof_report(r->st);
    if (r->o->save && s->step == r->start + 1) stop_time_note(r, sec);
    fflush(stdout);
    save_if_due(r, s->step);
}

void run_end(Run *r, int64_t step) {
    say("done: %.1f s\n", now_s() - r->t0);
    if (r->o->save && step > r->steps) save(r, r->steps); /* not after a stop */
    if (r->log) fclose(r->log);
}
