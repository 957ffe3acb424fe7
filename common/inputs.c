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

/* the job's windows: every step reads world windows of window + 1 tokens */
static void check_windows(const TokenFile *tf, const char *flag, const InputsAsk *a, int64_t eval_steps) {
    char err[1024];
    Loader ld;
    if (loader_init(&ld, tf, a->window, a->world, 0, err, sizeof err) ||
        (eval_steps && loader_check_eval(&ld, eval_steps, err, sizeof err)))
        STOP("%s %s", flag, err);
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

static void check_resume(Inputs *in, const char *dir, const ParamTable *t, int64_t steps) {
    char path[4200], err[1024];
    snprintf(path, sizeof path, "%s/trainer_state.safetensors", dir);
    SafeTensors st;
    if (st_open(path, &st, err, sizeof err)) STOP("--resume %s: %s", dir, err);
    if (inputs_state_step(&st, steps, &in->resume_step, err, sizeof err)) STOP("--resume %s: %s", path, err);
    static const char *const prefix[3] = {"master.", "adam_m.", "adam_v."};
    for (int k = 0; k < 3; k++)
        if (inputs_check_weights(&st, prefix[k], t, err, sizeof err)) STOP("--resume %s: %s", path, err);
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
    open_tokens(&in->data, a->data, "--data", c);
    check_windows(&in->data, "--data", a, 0);
    if (a->eval_data) {
        open_tokens(&in->eval, a->eval_data, "--eval-data", c);
        check_windows(&in->eval, "--eval-data", a, a->eval_steps);
    }
    if (a->resume) check_resume(in, a->resume, t, a->steps);
    else check_model(a->model, t);
    if (a->save) check_writable("--save", a->save, 1);
    const char *flag[4] = {"--log", "--trace", "--timeline", "--dump-grads"},
               *file[4] = {a->log, a->trace, a->timeline, a->dump_grads};
    for (int k = 0; k < 4; k++)
        if (file[k]) check_writable(flag[k], file[k], 0);
}
