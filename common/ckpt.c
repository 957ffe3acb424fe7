/* ckpt.c -- checkpoint directories: partial, complete, latest, kept (ckpt.h). */
#define _GNU_SOURCE /* nftw's FTW_DEPTH / FTW_PHYS */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

#define STATE_FILE "trainer_state.safetensors"

void ckpt_step_dir(const char *root, int64_t step, char *out, size_t n) {
    snprintf(out, n, "%s/step-%lld", root, (long long)step);
}
void ckpt_partial_dir(const char *root, int64_t step, char *out, size_t n) {
    snprintf(out, n, "%s/step-%lld" CKPT_PARTIAL, root, (long long)step);
}

/* ---------------------------------------------------------------- file system helpers */
int fsync_path(const char *path) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    const int r = fsync(fd);
    return close(fd) || r ? -1 : 0;
}

static int unlink_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb; (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}
int remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb)) return errno == ENOENT ? 0 : -1;
    return nftw(path, unlink_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int is_dir(const char *p) {
    struct stat sb;
    return !stat(p, &sb) && S_ISDIR(sb.st_mode);
}
static int has_state(const char *dir) {
    char p[2 * CKPT_PATH];
    if (snprintf(p, sizeof p, "%s/" STATE_FILE, dir) >= (int)sizeof p) return 0;
    struct stat sb;
    return !stat(p, &sb) && S_ISREG(sb.st_mode);
}
static int ends_with(const char *s, const char *tail) {
    const size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* "step-N" -> N; "step-N.partial" -> N with *partial = 1; anything else -> -1. N as the writer
 * writes it: decimal digits, no sign, no space, no leading zero ("step-05" is not step-5's) */
static int64_t step_of(const char *name, int *partial) {
    const char *d = name + 5;
    if (strncmp(name, "step-", 5) || *d < '0' || *d > '9' || (d[0] == '0' && d[1] >= '0' && d[1] <= '9')) return -1;
    char *end;
    errno = 0;
    const long long v = strtoll(d, &end, 10);
    if (errno || end == d || v < 0) return -1;
    *partial = !strcmp(end, CKPT_PARTIAL);
    return *end && !*partial ? -1 : v;
}

/* ---------------------------------------------------------------- listing */
static int cmp_desc(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* steps of the complete (want_partial 0) or partial (1) step directories, the newest `max` of them,
 * newest first (every entry is read: readdir's order is no order, the first ones are not the newest) */
static int64_t list(const char *root, int want_partial, int64_t *steps, int64_t max) {
    DIR *d = opendir(root);
    if (!d) return 0;
    int64_t n = 0, cap = 64;
    int64_t *all = xmalloc(sizeof *all * (size_t)cap);
    char p[2 * CKPT_PATH];
    for (struct dirent *e; (e = readdir(d));) {
        int partial = 0;
        const int64_t s = step_of(e->d_name, &partial);
        if (s < 0 || partial != want_partial) continue;
        snprintf(p, sizeof p, "%s/%s", root, e->d_name);
        if (!is_dir(p) || (!partial && !has_state(p))) continue;
        if (n == cap) {
            cap *= 2;
            int64_t *more = realloc(all, sizeof *all * (size_t)cap);
            if (!more) DIE("out of host memory listing %s", root);
            all = more;
        }
        all[n++] = s;
    }
    closedir(d);
    qsort(all, (size_t)n, sizeof *all, cmp_desc);
    if (n > max) n = max;
    memcpy(steps, all, sizeof *all * (size_t)n);
    free(all);
    return n;
}
int64_t ckpt_list(const char *root, int64_t *steps, int64_t max) { return list(root, 0, steps, max); }

/* ---------------------------------------------------------------- writing */
int ckpt_begin(const char *root, int64_t step, char *err, size_t errlen) {
    char tmp[CKPT_PATH];
    ckpt_partial_dir(root, step, tmp, sizeof tmp);
    if (!mkdir(root, 0755)) { /* a new root: its own name must be durable too */
        char parent[CKPT_PATH];
        snprintf(parent, sizeof parent, "%s", root);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) *slash = 0;
        else snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
        fsync_path(parent);
    } else if (errno != EEXIST) {
        snprintf(err, errlen, "cannot create the save directory %s: %s", short_name(root), strerror(errno));
        return -1;
    }
    if (!is_dir(root)) {
        snprintf(err, errlen, "--save %s is not a directory", short_name(root));
        return -1;
    }
    if (remove_tree(tmp)) { /* an earlier run stopped while writing this step */
        snprintf(err, errlen, "cannot remove the stale %s: %s", short_name(tmp), strerror(errno));
        return -1;
    }
    if (mkdir(tmp, 0755)) {
        snprintf(err, errlen, "cannot create %s: %s", short_name(tmp), strerror(errno));
        return -1;
    }
    return 0;
}

/* root/latest -> step-N, replaced atomically: a new link under a temporary name, then rename */
static int point_latest(const char *root, int64_t step, char *err, size_t errlen) {
    char link[CKPT_PATH + 32], tmp[CKPT_PATH + 48], target[64];
    snprintf(link, sizeof link, "%s/" CKPT_LATEST, root);
    snprintf(tmp, sizeof tmp, "%s/." CKPT_LATEST ".new", root);
    snprintf(target, sizeof target, "step-%lld", (long long)step);
    unlink(tmp);
    if (symlink(target, tmp) || rename(tmp, link)) {
        snprintf(err, errlen, "cannot point %s at %s: %s", short_name(link), short_name(target), strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* rm -rf a step directory without ever leaving a partly removed one under its own name: rename it
 * to a name no listing accepts first (a crash mid-removal then leaves only that) */
static int remove_step(const char *path) {
    char gone[CKPT_PATH + 16];
    snprintf(gone, sizeof gone, "%s.removing", path);
    return rename(path, gone) ? -1 : remove_tree(gone);
}

/* After the save of `step`: of the complete saves before it, all but the newest keep - 1 (keep <= 0:
 * none removed); partial saves older than it (crash leftovers); leftovers of interrupted removals.
 * Saves after `step` (a run resumed from an earlier one, into the same DIR) are left alone: latest
 * no longer names them, and the user may want them. */
static void prune(const char *root, int64_t step, int64_t keep) {
    enum { MAX = 1 << 16 };
    int64_t *s = xmalloc(sizeof(int64_t) * MAX);
    char p[CKPT_PATH];
    const int64_t n = list(root, 0, s, MAX);
    int64_t older = 0, later = 0;
    for (int64_t i = 0; i < n; i++) {
        if (s[i] > step) { later++; continue; }
        if (s[i] == step || keep <= 0 || ++older < keep) continue; /* never the save just made */
        ckpt_step_dir(root, s[i], p, sizeof p);
        if (remove_step(p)) fprintf(stderr, "warning: could not remove %s: %s\n", p, strerror(errno));
        else printf("removed %s (--save-keep %lld)\n", p, (long long)keep);
    }
    if (later) printf("note: %s holds %lld save(s) after step %lld from an earlier run, left in place (latest names "
                      "step-%lld)\n", root, (long long)later, (long long)step, (long long)step);
    const int64_t m = list(root, 1, s, MAX);
    for (int64_t i = 0; i < m; i++) {
        if (s[i] >= step) continue;
        ckpt_partial_dir(root, s[i], p, sizeof p);
        if (!remove_tree(p)) printf("removed %s (an incomplete save of an earlier run)\n", p);
    }
    DIR *d = opendir(root);
    for (struct dirent *e; d && (e = readdir(d));) /* removals a crash interrupted */
        if (!strncmp(e->d_name, "step-", 5) && ends_with(e->d_name, ".removing")) {
            snprintf(p, sizeof p, "%s/%s", root, e->d_name);
            remove_tree(p);
        }
    if (d) closedir(d);
    free(s);
}

int ckpt_commit(const char *root, int64_t step, int64_t keep, char *err, size_t errlen) {
    char tmp[CKPT_PATH], dir[CKPT_PATH], old[CKPT_PATH + 16];
    ckpt_partial_dir(root, step, tmp, sizeof tmp);
    ckpt_step_dir(root, step, dir, sizeof dir);
    if (fsync_path(tmp)) { /* the directory's entries: its files' names are durable before the rename */
        snprintf(err, errlen, "cannot fsync %s: %s", short_name(tmp), strerror(errno));
        return -1;
    }
    /* A complete step-N already there (a run resumed from an earlier step reached it again): swap
     * the two atomically where the filesystem can (the old one lands under the partial name, which
     * nothing resumes from); else move the old aside first -- a crash between the two renames
     * leaves step-N.old, which ckpt_resolve takes when latest names a missing step-N. */
    snprintf(old, sizeof old, "%s.old", dir);
    int swapped = 0;
    if (is_dir(dir)) {
        swapped = !renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE);
        if (!swapped && (remove_tree(old) || rename(dir, old))) {
            snprintf(err, errlen, "cannot move the older %s aside: %s", short_name(dir), strerror(errno));
            return -1;
        }
    }
    if ((!swapped && rename(tmp, dir)) || fsync_path(root)) {
        snprintf(err, errlen, "cannot rename %s to %s: %s", short_name(tmp), short_name(dir), strerror(errno));
        return -1;
    }
    if (point_latest(root, step, err, errlen) || fsync_path(root)) {
        if (!err[0]) snprintf(err, errlen, "cannot fsync %s: %s", short_name(root), strerror(errno));
        return -1;
    }
    remove_tree(swapped ? tmp : old);
    prune(root, step, keep);
    return 0;
}

/* ---------------------------------------------------------------- resuming */
/* the partial saves under root, one note line each */
static void note_partials(const char *root, char *note, size_t n) {
    int64_t s[64];
    const int64_t m = list(root, 1, s, 64);
    char p[CKPT_PATH];
    for (int64_t i = 0; i < m; i++) {
        ckpt_partial_dir(root, s[i], p, sizeof p);
        const size_t at = strlen(note);
        snprintf(note + at, n - at, "ignoring %s: an incomplete save (its writer stopped before it was complete)\n", p);
    }
}

int ckpt_resolve(const char *path, char *out, size_t n, char *note, size_t notelen, char *err, size_t errlen) {
    note[0] = 0;
    char trimmed[CKPT_PATH];
    snprintf(trimmed, sizeof trimmed, "%s", path);
    for (size_t l = strlen(trimmed); l > 1 && trimmed[l - 1] == '/'; l--) trimmed[l - 1] = 0;
    if (ends_with(trimmed, CKPT_PARTIAL)) {
        snprintf(err, errlen, "--resume %s: an incomplete save (its writer stopped before every rank's pieces were on "
                 "disk); resume from the directory above it (its latest complete save) or a step-N directory", short_name(path));
        return -1;
    }
    if (!is_dir(trimmed)) {
        snprintf(err, errlen, "--resume %s: no such directory", short_name(path));
        return -1;
    }
    char latest[CKPT_PATH + 32], target[CKPT_PATH];
    snprintf(latest, sizeof latest, "%s/" CKPT_LATEST, trimmed);
    int64_t s[1];
    struct stat sb;
    const int is_root = !lstat(latest, &sb) || list(trimmed, 0, s, 1) > 0;
    if (!is_root && has_state(trimmed)) { /* a step directory (or a save of the older one-directory layout) */
        snprintf(out, n, "%s", trimmed);
        return 0;
    }
    /* a root (its own trainer_state, from the older layout, is older than any step-N in it): latest,
     * else the newest complete step directory */
    note_partials(trimmed, note, notelen);
    const ssize_t len = readlink(latest, target, sizeof target - 1);
    if (len > 0) {
        target[len] = 0;
        if (target[0] == '/') snprintf(out, n, "%s", target);
        else snprintf(out, n, "%s/%s", trimmed, target);
        int partial = 0;
        const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
        if (step_of(base, &partial) >= 0 && !partial && has_state(out)) return 0;
        char old[CKPT_PATH + 8]; /* a re-save of that step stopped between its two renames */
        snprintf(old, sizeof old, "%s.old", out);
        const size_t at = strlen(note);
        if (!partial && has_state(old) && strlen(old) < n) {
            snprintf(note + at, notelen - at, "%s points at %s, which is missing: taking %s\n", latest, out, old);
            snprintf(out, n, "%s", old);
            return 0;
        }
        snprintf(note + at, notelen - at, "%s points at %s, which is not a complete save: taking the newest one\n",
                 latest, out);
    }
    if (list(trimmed, 0, s, 1) < 1) {
        snprintf(err, errlen, "--resume %s: no complete save there (no %s, no step-N directory holding " STATE_FILE ")",
                 short_name(path), CKPT_LATEST);
        return -1;
    }
    ckpt_step_dir(trimmed, s[0], out, n);
    return 0;
}

const char *ckpt_resume_dir(const char *path) {
    static char out[CKPT_PATH];
    char note[4096], err[CKPT_PATH + 512];
    if (ckpt_resolve(path, out, sizeof out, note, sizeof note, err, sizeof err)) STOP("%s", err);
    fputs(note, stdout);
    if (strcmp(out, path)) printf("--resume %s: %s\n", path, out);
    return out;
}
