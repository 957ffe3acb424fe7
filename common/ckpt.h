/* ckpt.h -- where checkpoints live on disk, and the rules that make a crash lose nothing.
 *
 * A --save DIR is a root of step directories:
 *   DIR/step-N/            one save: config.json, model*.safetensors (an HF model directory that
 *                          transformers loads), trainer_state.safetensors (fp32 master, m, v, step)
 *   DIR/step-N.partial/    a save being written; renamed to step-N only once every rank's pieces
 *                          are on disk and fsync'd, so a directory named step-N is complete
 *   DIR/latest             a symbolic link to the newest complete step-N, replaced (by rename)
 *                          after that rename: `--resume DIR` and `from_pretrained("DIR/latest")`
 * A crash mid-save leaves at most a step-N.partial beside the previous complete save; resuming
 * ignores it (with a message) and the next save of that step removes it. --save-keep K keeps the
 * newest K complete step directories (0: all).
 * Host-only, no GPU: the CPU tests exercise every rule. */
#ifndef LONGCTX_CKPT_H
#define LONGCTX_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_PATH 4096
#define CKPT_LATEST "latest"
#define CKPT_PARTIAL ".partial"

/* DIR/step-N and DIR/step-N.partial */
void ckpt_step_dir(const char *root, int64_t step, char *out, size_t n);
void ckpt_partial_dir(const char *root, int64_t step, char *out, size_t n);

/* Writer (one rank): make root, remove a stale DIR/step-N.partial, make it afresh. */
int ckpt_begin(const char *root, int64_t step, char *err, size_t errlen);
/* Writer (one rank), after every rank has fsync'd its pieces: fsync the partial directory, rename
 * it to step-N (an older step-N is replaced), fsync root, point latest at it, fsync root, and
 * remove all but the newest `keep` complete step directories (keep <= 0: none removed). */
int ckpt_commit(const char *root, int64_t step, int64_t keep, char *err, size_t errlen);

/* --resume PATH: a complete step directory (step-N, or any directory holding
 * trainer_state.safetensors that is not a .partial), or a root, meaning root/latest (or, when latest
 * is missing or broken, its newest complete step-N). An incomplete save is refused by name.
 * Partial directories found beside it are reported on `note` (one line each) and ignored. */
int ckpt_resolve(const char *path, char *out, size_t n, char *note, size_t notelen, char *err, size_t errlen);
/* the same for a stage's option: the resolved path (static storage), or DIE with the reason */
const char *ckpt_resume_dir(const char *path);

/* the complete step directories under root, newest first: steps[] (at most max), returns how many */
int64_t ckpt_list(const char *root, int64_t *steps, int64_t max);

/* fsync a file or a directory by path (0 on success) */
int fsync_path(const char *path);
/* rm -rf (0 on success; a missing path is success) */
int remove_tree(const char *path);

#endif
