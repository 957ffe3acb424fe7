/* files.h -- opening the files a user names. A path that should be a regular file is refused by
 * name when it is missing, a directory, a FIFO or a device: a directory "opens" on Linux and
 * measures 2^63 bytes, a FIFO blocks its reader forever, and either would otherwise surface as a
 * failed malloc or a "truncated file" far from the cause. */
#ifndef LONGCTX_FILES_H
#define LONGCTX_FILES_H

#include <stddef.h>
#include <stdio.h>

/* path opened for reading if it is a regular file; NULL + "PATH: ... (what)" in err. what names
 * the file's role for the message: "token file", "config.json", "safetensors file". */
FILE *file_open_regular(const char *path, const char *what, char *err, size_t errlen);
/* the whole of a regular file of at most max bytes, NUL-terminated (free it); NULL + message */
char *file_read_all(const char *path, const char *what, size_t max, size_t *len, char *err, size_t errlen);

#endif
