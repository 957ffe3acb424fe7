/* fuzz_util.h -- what the libFuzzer harnesses of tests/fuzz/ share (tests/fuzz/README.md).
 *
 * The readers take paths, so an input becomes a file: a memfd (an anonymous regular file, named
 * /proc/self/fd/N, rewritten in place for every input) or files under one private temporary
 * directory made at start-up and removed at exit. Nothing is written anywhere else.
 *
 * The project's fatal path (DIE/STOP -> longctx_die -> _exit) would end a fuzzing run without a
 * report or a reproducer; fuzz_init registers a fatal hook that aborts instead, so libFuzzer reports
 * it as a crash and saves the input (a reader that DIEs on a bad file is a finding: it should refuse
 * with a message). */
#ifndef LONGCTX_FUZZ_UTIL_H
#define LONGCTX_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, nftw's FTW_PHYS */
#endif
#include <errno.h>
#include <sanitizer/common_interface_defs.h> /* __sanitizer_set_death_callback */
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char fuzz_tmp[512]; /* the private temporary directory (below), "" until made */
static inline void fuzz_tmp_cleanup(void);

/* a failed check of a harness: say so, remove the temporary directory, abort (libFuzzer reports it) */
#define FUZZ_ASSERT(cond, ...)                                                          \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz harness %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                               \
            fprintf(stderr, "\n");                                                      \
            fuzz_tmp_cleanup();                                                         \
            abort();                                                                    \
        }                                                                               \
    } while (0)

static inline void fuzz_on_fatal(void) {
    fprintf(stderr, "fuzz: the project's fatal path (DIE/STOP) was taken on this input: aborting so libFuzzer keeps it\n");
    fuzz_tmp_cleanup();
    abort();
}

/* ---------------------------------------------------------------- a private temporary directory */

static inline int fuzz_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb; (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}
/* rm -rf path: never follows a symbolic link (FTW_PHYS) nor leaves the file system (FTW_MOUNT) */
static inline int fuzz_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb)) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlink(path);
    return nftw(path, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}
static inline void fuzz_tmp_cleanup(void) {
    if (fuzz_tmp[0]) fuzz_rm_tree(fuzz_tmp);
    fuzz_tmp[0] = 0;
}
/* $TMPDIR (else /dev/shm, a tmpfs: directories made and removed for every input cost less there,
 * else /tmp)/longctx-fuzz-XXXXXX, removed at exit and when a sanitizer or a check stops the run */
static inline const char *fuzz_tmpdir(void) {
    if (fuzz_tmp[0]) return fuzz_tmp;
    const char *base = getenv("TMPDIR");
    if (!base || !base[0]) base = access("/dev/shm", W_OK | X_OK) ? "/tmp" : "/dev/shm";
    snprintf(fuzz_tmp, sizeof fuzz_tmp, "%s/longctx-fuzz-XXXXXX", base);
    FUZZ_ASSERT(mkdtemp(fuzz_tmp), "mkdtemp %s: %s", fuzz_tmp, strerror(errno));
    atexit(fuzz_tmp_cleanup);
    __sanitizer_set_death_callback(fuzz_tmp_cleanup);
    return fuzz_tmp;
}

/* ---------------------------------------------------------------- files from bytes */
typedef struct {
    int fd;
    char path[64]; /* /proc/self/fd/N: a regular file for stat, fopen and open */
} FuzzFile;

static inline void fuzz_file_open(FuzzFile *f, const char *name) {
    f->fd = memfd_create(name, MFD_CLOEXEC);
    FUZZ_ASSERT(f->fd >= 0, "memfd_create: %s", strerror(errno));
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}
static inline void fuzz_write_all(int fd, const void *data, size_t size, off_t at) {
    const char *p = data;
    while (size) {
        const ssize_t w = pwrite(fd, p, size, at);
        FUZZ_ASSERT(w > 0, "pwrite: %s", strerror(errno));
        p += w, size -= (size_t)w, at += w;
    }
}
/* the file's contents become data[0..size) followed by pad zero bytes (a hole: costs nothing) */
static inline void fuzz_file_set(FuzzFile *f, const void *data, size_t size, size_t pad) {
    FUZZ_ASSERT(!ftruncate(f->fd, 0), "ftruncate: %s", strerror(errno));
    fuzz_write_all(f->fd, data, size, 0);
    if (pad) FUZZ_ASSERT(!ftruncate(f->fd, (off_t)(size + pad)), "ftruncate: %s", strerror(errno));
}
/* a named file under a directory, created or replaced, holding data then pad zeros */
static inline void fuzz_write_path(const char *path, const void *data, size_t size, size_t pad) {
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    FUZZ_ASSERT(fd >= 0, "open %s: %s", path, strerror(errno));
    fuzz_write_all(fd, data, size, 0);
    if (pad) FUZZ_ASSERT(!ftruncate(fd, (off_t)(size + pad)), "ftruncate %s: %s", path, strerror(errno));
    close(fd);
}

/* LONGCTX_FUZZ_VERBOSE=1: each harness says what the reader answered (its message, or what it
 * accepted), e.g. to see what a seed or a reproducer reaches: build/fuzz/fuzz_NAME FILE... */
static inline int fuzz_verbose(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("LONGCTX_FUZZ_VERBOSE");
        v = e && e[0] == '1';
    }
    return v;
}
#define fuzz_say(...) (fuzz_verbose() ? fprintf(stderr, __VA_ARGS__) : 0)

/* LLVMFuzzerInitialize's shared part: DIE/STOP abort (see the top) */
static inline void fuzz_init(void) {
    static int done;
    if (done) return;
    done = 1;
    longctx_on_fatal(fuzz_on_fatal);
}

/* little-endian integers from the input */
static inline uint32_t fuzz_u24(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16; }

#endif
