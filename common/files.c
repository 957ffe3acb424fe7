/* files.c -- regular files only (files.h). */
#define _FILE_OFFSET_BITS 64
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

FILE *file_open_regular(const char *path, const char *what, char *err, size_t errlen) {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; the type is then read off the open
     * descriptor itself, so the file cannot be swapped between the check and the read */
    const int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) snprintf(err, errlen, "%s: no such file", short_name(path));
        else snprintf(err, errlen, "%s: cannot open the %s: %s", short_name(path), what, strerror(errno));
        return NULL;
    }
    struct stat sb;
    const char *kind = fstat(fd, &sb) ? "unreadable" : S_ISDIR(sb.st_mode) ? "a directory"
                       : S_ISFIFO(sb.st_mode)                              ? "a FIFO"
                       : !S_ISREG(sb.st_mode)                              ? "a device or socket"
                                                                           : NULL;
    if (kind) {
        snprintf(err, errlen, "%s: %s, where a %s was expected", short_name(path), kind, what);
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open the %s: %s", short_name(path), what, strerror(errno));
        close(fd);
    }
    return f;
}

char *file_read_all(const char *path, const char *what, size_t max, size_t *len, char *err, size_t errlen) {
    FILE *f = file_open_regular(path, what, err, errlen);
    if (!f) return NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb)) {
        snprintf(err, errlen, "%s: cannot read the %s's size: %s", short_name(path), what, strerror(errno));
        fclose(f);
        return NULL;
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > max) {
        snprintf(err, errlen, "%s: %lld bytes, more than a %s can be (%zu)", short_name(path), (long long)sb.st_size, what, max);
        fclose(f);
        return NULL;
    }
    const size_t n = (size_t)sb.st_size;
    char *buf = xmalloc(n + 1);
    const size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        snprintf(err, errlen, "%s: short read of the %s (%zu of %zu bytes)", short_name(path), what, got, n);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}
