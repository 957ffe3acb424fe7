/* inputs.c -- the run's files, checked before the GPU (inputs.h). */
#include "inputs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "json.h"

/* ---------------------------------------------------------------- token files */
static void open_tokens(TokenFile *tf, const char *path, const char *flag, const Qwen3Config *c) {
    char err[1024];
    if (tokens_open_file(path, c->vocab, 1, tf, err, sizeof err))
        STOP("%s %s%s", flag, err,
             !strcmp(path, TOKENS_SHIPPED) ? " (run from the repository root, or pass --data)"
                                           : " (data/prepare.py makes token files)");
    /* another tokenizer's ids are in range too (Qwen3's all are in Qwen3.5's vocabulary): the tag says */
    if (tokens_check_tokenizer(tf, !c->lin_v_heads, c->name, err, sizeof err)) STOP("%s %s", flag, err);
    const int64_t tv = tokens_tag_vocab(tf->tokenizer); /* a tokenizer larger than the model's embedding */
    if (tv > c->vocab)
        STOP("%s %s: its tokenizer (\"%s\") has %lld ids, %s embeds %lld: a token file for another model", flag, path,
             tf->tokenizer, (long long)tv, c->name, (long long)c->vocab);
    if (c->lin_v_heads && !tf->tokenizer[0]) /* untagged: taken as it is, but a hybrid's text is another tokenizer's */
        say("note: %s %s records no tokenizer%s: a Qwen3.5 model reads Qwen3's ids as other tokens (right for "
            "measuring time and memory, not for learning text: data/books_q35.tok holds the books in Qwen3.5's "
            "ids, and data/prepare.py --tokenizer qwen3.5 makes such files)\n",
            flag, path, !strcmp(path, TOKENS_SHIPPED) ? " (its ids are Qwen3's)" : "");
}

/* the job's windows: every step reads world windows of window + 1 tokens (with --packing, the label
 * after an end of text counts none) */
static void check_windows(Loader *ld, const TokenFile *tf, const char *flag, const InputsAsk *a, int64_t eval_steps) {
    char err[1024];
    if (loader_init(ld, tf, a->window, a->world, 0, err, sizeof err)) STOP("%s %s", flag, err);
    if (a->eot >= 0) loader_pack(ld, (uint32_t)a->eot);
    if (eval_steps && loader_check_eval(ld, eval_steps, err, sizeof err)) STOP("%s %s", flag, err);
}

/* Training data whose windows hold no label that counts would skip every step of the run (steps
 * from + 1 .. to): refused as --eval-data is, naming why no label counts */
static void check_training_labels(const Loader *ld, int64_t from, int64_t to) {
    if (from >= to || loader_first_counted(ld, from, to) >= 0) return;
    const TokenFile *tf = ld->tf;
    const int whole = to - from >= (ld->windows + ld->world - 1) / ld->world; /* the run reads every window */
    char why[200];
    const long long e = (long long)ld->eot;
    if (tf->weights && !tf->counted) snprintf(why, sizeof why, "every loss weight in the file is 0");
    else if (!tf->weights) /* every label counts unless packed: each one follows an end of text */
        snprintf(why, sizeof why, "with --packing %lld, each label follows an end of text (%lld), which counts none", e, e);
    else if (whole && ld->eot >= 0)
        snprintf(why, sizeof why, "the labels of loss weight 1 all follow an end of text (%lld, --packing)", e);
    else snprintf(why, sizeof why, "their loss weights are 0%s", ld->eot >= 0 ? " or follow an end of text (--packing)" : "");
    char which[160];
    if (whole) snprintf(which, sizeof which, "no label of its %lld windows of %lld+1 tokens", (long long)ld->windows,
                        (long long)ld->seq);
    else snprintf(which, sizeof which, "no label in the windows of steps %lld to %lld", (long long)from + 1, (long long)to);
    STOP("--data %s: %s carries loss (%s): every step would be skipped and nothing trained; give a file whose labels "
         "count (data/prepare.py --jsonl weights completions 1)%s", short_name(tf->path), which, why,
         ld->eot >= 0 ? ", or another --packing id" : "");
}

/* ---------------------------------------------------------------- a save's record of its run */
static void member_i64(JsonOut *o, const char *key, int64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    json_out_member(o, key, b);
}

char *inputs_save_meta_json(const SaveMeta *m) {
    JsonOut o = {0};
    char b[64];
    json_out_raw(&o, "{");
    member_i64(&o, "step", m->step);
    json_out_member(&o, "longctx", SAVE_META_VERSION);
    member_i64(&o, "seq", m->seq);
    json_out_member(&o, "data", m->data ? m->data : "");
    member_i64(&o, "data_tokens", m->data_tokens);
    member_i64(&o, "data_digest", m->data_digest);
    if (m->eot >= 0) member_i64(&o, "packing", m->eot);
    else json_out_member(&o, "packing", "none");
    json_out_member(&o, "model", m->model ? m->model : "");
    member_i64(&o, "layers", m->layers);
    snprintf(b, sizeof b, "%.17g", m->yarn_factor);
    json_out_member(&o, "yarn_factor", b);
    member_i64(&o, "yarn_original", m->yarn_original);
    member_i64(&o, "model_digest", m->model_digest);
    json_out_raw(&o, "}");
    return o.s;
}

/* an integer of the metadata: 0, or -1 when absent or not one */
static int meta_i64(const SafeTensors *st, const char *key, int64_t *v) {
    const char *s = st_meta(st, key);
    char *end;
    if (!s || !s[0]) return -1;
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *v = x;
    return 0;
}
static void yarn_words(char *b, size_t n, double factor, int64_t original) {
    if (factor > 0) snprintf(b, n, "YaRN x%g from %lld", factor, (long long)original);
    else snprintf(b, n, "no YaRN");
}

int inputs_resume_compare(const SafeTensors *st, const SaveMeta *now, unsigned allow, const char *dir, char *note,
                          size_t notelen, char *err, size_t errlen) {
    note[0] = err[0] = 0;
    const char *ver = st_meta(st, "longctx");
    if (!ver) {
        snprintf(note, notelen, "note: --resume %s: an older save, which records no --seq, --data, --packing or model: "
                 "not compared with this run's\n", short_name(dir));
        return 0;
    }
    SaveMeta was = {.eot = -1};
    const char *pk = st_meta(st, "packing"), *yf = st_meta(st, "yarn_factor");
    was.data = st_meta(st, "data"), was.model = st_meta(st, "model");
    if (strcmp(ver, SAVE_META_VERSION) || meta_i64(st, "seq", &was.seq) || meta_i64(st, "data_tokens", &was.data_tokens) ||
        meta_i64(st, "data_digest", &was.data_digest) || !pk || (strcmp(pk, "none") && meta_i64(st, "packing", &was.eot)) ||
        meta_i64(st, "layers", &was.layers) || !yf || meta_i64(st, "yarn_original", &was.yarn_original) ||
        meta_i64(st, "model_digest", &was.model_digest) || !was.data || !was.model) {
        snprintf(err, errlen, "--resume %s: its metadata (version \"%s\") lacks or garbles what this version reads "
                 "(seq, data, packing, model): a save of another version of longctx.c, or edited", short_name(dir),
                 short_name(ver));
        return -1;
    }
    was.yarn_factor = strtod(yf, NULL);
    /* each difference in words, and whether it is allowed */
    char diff[4][1200];
    unsigned bit[4], nd = 0;
    if (was.seq != now->seq) {
        snprintf(diff[nd], sizeof diff[0], "saved with --seq %lld, this run has --seq %lld (the steps after the save "
                 "would read windows of another length)", (long long)was.seq, (long long)now->seq);
        bit[nd++] = RESUME_SEQ;
    }
    if (was.data_digest != now->data_digest || was.data_tokens != now->data_tokens) {
        if (!strcmp(was.data, now->data ? now->data : ""))
            snprintf(diff[nd], sizeof diff[0], "--data %s has changed since the save (%lld tokens then, %lld now, other "
                     "ids or loss weights)", short_name(was.data), (long long)was.data_tokens, (long long)now->data_tokens);
        else
            snprintf(diff[nd], sizeof diff[0], "saved with --data %s (%lld tokens), this run has --data %s (%lld tokens, "
                     "other ids or loss weights)", short_name(was.data), (long long)was.data_tokens,
                     short_name(now->data), (long long)now->data_tokens);
        bit[nd++] = RESUME_DATA;
    }
    if (was.eot != now->eot) {
        char a[32] = "none", b[32] = "none";
        if (was.eot >= 0) snprintf(a, sizeof a, "%lld", (long long)was.eot);
        if (now->eot >= 0) snprintf(b, sizeof b, "%lld", (long long)now->eot);
        snprintf(diff[nd], sizeof diff[0], "saved with --packing %s, this run has --packing %s (other labels count)", a, b);
        bit[nd++] = RESUME_PACKING;
    }
    if (was.model_digest != now->model_digest) {
        char a[96], b[96];
        yarn_words(a, sizeof a, was.yarn_factor, was.yarn_original);
        yarn_words(b, sizeof b, now->yarn_factor, now->yarn_original);
        if (was.layers != now->layers)
            snprintf(diff[nd], sizeof diff[0], "saved with %lld layers of %s, this run has %lld (--layers)",
                     (long long)was.layers, short_name(was.model), (long long)now->layers);
        else if (strcmp(a, b))
            snprintf(diff[nd], sizeof diff[0], "saved with %s, this run has %s (--yarn-factor, --yarn-original)", a, b);
        else
            snprintf(diff[nd], sizeof diff[0], "saved from model %s, this run's config differs (RoPE, norms or routing)",
                     short_name(was.model));
        bit[nd++] = RESUME_MODEL;
    }
    static const char *const names[4] = RESUME_CHANGE_NAMES;
    size_t no = 0, eo = 0;
    char refused[64] = "";
    for (unsigned k = 0; k < nd; k++) {
        if (allow & bit[k]) {
            no += (size_t)snprintf(note + no, no < notelen ? notelen - no : 0, "note: --resume %s: %s; allowed by "
                                   "--resume-changes\n", short_name(dir), diff[k]);
            continue;
        }
        eo += (size_t)snprintf(err + eo, eo < errlen ? errlen - eo : 0, "%s%s", eo ? "; " : "", diff[k]);
        for (int j = 0; j < 4; j++)
            if (bit[k] == 1u << j) snprintf(refused + strlen(refused), sizeof refused - strlen(refused), "%s%s",
                                             refused[0] ? "," : "", names[j]);
    }
    if (!eo) return 0;
    char body[4096];
    snprintf(body, sizeof body, "%s", err);
    snprintf(err, errlen, "--resume %s: %s: resume with the save's settings, or let the run go on with these "
             "(--resume-changes %s)", short_name(dir), body, refused);
    return -1;
}

/* ---------------------------------------------------------------- weights and saves */
int inputs_check_weights(const SafeTensors *st, const char *prefix, const ParamTable *t, char *err, size_t errlen) {
    for (int64_t i = 0; i < t->n; i++) {
        StoredAt s; /* its own name, or a Qwen3.5 MoE release's fused experts (common/model.h) */
        if (params_stored(st, prefix, t, &t->p[i], &s, err, errlen)) return -1;
    }
    return 0;
}

int inputs_state_step(const SafeTensors *st, int64_t steps, int64_t *step, char *err, size_t errlen) {
    char val[64], *end;
    if (st_metadata(st, "step", val, sizeof val)) { snprintf(err, errlen, "no step in its metadata"); return -1; }
    errno = 0;
    const long long v = val[0] >= '0' && val[0] <= '9' ? strtoll(val, &end, 10) : -1;
    if (v < 0 || errno || *end) { /* "-3" would read before the token array, "abc" resume after step 0 */
        snprintf(err, errlen, "its metadata's step \"%s\" is not a non-negative integer", val);
        return -1;
    }
    if (v >= steps) {
        snprintf(err, errlen, "the save is after step %lld and --steps (the total) is %lld: nothing to train (raise --steps)",
                 v, (long long)steps);
        return -1;
    }
    *step = v;
    return 0;
}

static void check_model(const char *model, const ParamTable *t) {
    struct stat sb;
    if (stat(model, &sb) || !S_ISDIR(sb.st_mode)) return; /* a size name: random init */
    char err[1024];
    SafeTensors st;
    if (st_open(model, &st, err, sizeof err)) STOP("--model %s: %s", model, err);
    if (inputs_check_weights(&st, "", t, err, sizeof err)) STOP("--model %s: %s", model, err);
    st_close(&st);
}

static void check_resume(Inputs *in, const InputsAsk *a, const Qwen3Config *c, const ParamTable *t) {
    const char *dir = a->resume;
    char path[4200], err[4096];
    snprintf(path, sizeof path, "%s/trainer_state.safetensors", dir);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) STOP("--resume %s: %s", dir, err);
    if (inputs_state_step(&st, a->steps, &in->resume_step, err, sizeof err)) STOP("--resume %s: %s", path, err);
    static const char *const prefix[3] = {"master.", "adam_m.", "adam_v."};
    for (int k = 0; k < 3; k++)
        if (inputs_check_weights(&st, prefix[k], t, err, sizeof err)) STOP("--resume %s: %s", path, err);
    /* the run that made the save against this one: --seq, --data, --packing, the model */
    const SaveMeta now = {.seq = a->window, .data = a->data, .data_tokens = in->data.count,
                          .data_digest = in->data_digest, .eot = a->eot, .model = c->name, .layers = c->layers,
                          .yarn_factor = c->yarn ? c->yarn_factor : 0, .yarn_original = c->yarn ? c->yarn_original_max : 0,
                          .model_digest = config_run_digest(c)};
    char note[8192];
    if (inputs_resume_compare(&st, &now, a->resume_changes, dir, note, sizeof note, err, sizeof err)) STOP("%s", err);
    say("%s", note);
    st_close(&st);
}

/* ---------------------------------------------------------------- outputs */
/* Can a new file be made in dir? Asked by making one (O_EXCL, a name of this process) and removing
 * it: access(W_OK) says yes to root on /proc and on a read-only export, where the save would fail
 * after the training it was to keep. */
static int probe_dir(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/.longctx-probe-%ld", dir, (long)getpid());
    const int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return -1;
    close(fd);
    unlink(p);
    return 0;
}

/* path's directory: "a/b" -> "a", "b" -> ".", "/b" -> "/" (trailing slashes dropped first) */
static void parent_of(const char *path, char *parent, size_t n) {
    snprintf(parent, n, "%s", path);
    for (size_t k = strlen(parent); k > 1 && parent[k - 1] == '/'; k--) parent[k - 1] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, n, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
}

/* Where the run will write: a directory (--save) or a file (--log, --trace, --timeline,
 * --dump-grads), existing or to be made in an existing directory; checked by trying, and
 * leaving nothing behind. */
static void check_writable(const char *flag, const char *path, int is_dir) {
    struct stat sb;
    const size_t len = strlen(path);
    if (!is_dir && len && path[len - 1] == '/') STOP("%s %s: ends in '/': give a file name", flag, path);
    if (!stat(path, &sb)) {
        if (is_dir && !S_ISDIR(sb.st_mode)) STOP("%s %s exists and is not a directory", flag, path);
        if (!is_dir && !S_ISREG(sb.st_mode) && !S_ISCHR(sb.st_mode)) /* /dev/null is fine */
            STOP("%s %s exists and is not a regular file", flag, path);
        if (is_dir ? probe_dir(path) : access(path, W_OK))
            STOP("%s %s: cannot write %s (%s)", flag, path, is_dir ? "in it" : "it", strerror(errno));
        if (!is_dir && S_ISREG(sb.st_mode)) { /* open it as the run will, changing nothing */
            const int fd = open(path, O_WRONLY | O_APPEND);
            if (fd < 0) STOP("%s %s: cannot write it (%s)", flag, path, strerror(errno));
            close(fd);
        }
        return;
    }
    if (errno != ENOENT) STOP("%s %s: %s", flag, path, strerror(errno)); /* "a/file/x": not a directory */
    char parent[4096];
    parent_of(path, parent, sizeof parent);
    if (stat(parent, &sb)) STOP("%s %s: its directory %s does not exist (create it first)", flag, path, parent);
    if (!S_ISDIR(sb.st_mode)) STOP("%s %s: %s is not a directory", flag, path, parent);
    if (probe_dir(parent)) STOP("%s %s: cannot create it in %s (%s)", flag, path, parent, strerror(errno));
}

/* ---------------------------------------------------------------- all of them */
void inputs_open(Inputs *in, const InputsAsk *a, const Qwen3Config *c, const ParamTable *t) {
    memset(in, 0, sizeof *in);
    /* a plan the advice asked for (advice.c: fits): the run that asked checked these files, and a
     * 40 GB token file read again by each of ten plans would cost minutes */
    if (getenv("LONGCTX_ADVISING")) return;
    Loader ld, eval;
    open_tokens(&in->data, a->data, "--data", c);
    check_windows(&ld, &in->data, "--data", a, 0);
    if (a->eval_data) {
        open_tokens(&in->eval, a->eval_data, "--eval-data", c);
        check_windows(&eval, &in->eval, "--eval-data", a, a->eval_steps);
    }
    if (a->save || a->resume) in->data_digest = tokens_content_digest(&in->data); /* what a save records */
    if (a->resume) check_resume(in, a, c, t);
    else check_model(a->model, t);
    check_training_labels(&ld, in->resume_step, a->steps); /* the steps this run trains */
    if (a->save) check_writable("--save", a->save, 1);
    const char *flag[4] = {"--log", "--trace", "--timeline", "--dump-grads"},
               *file[4] = {a->log, a->trace, a->timeline, a->dump_grads};
    for (int k = 0; k < 4; k++)
        if (file[k]) check_writable(flag[k], file[k], 0);
}
