/* Whole-file read with stdio, shared by the Linux HAL and the soak driver's HAL. */
#ifndef NEEDLE_STDIO_FILE_H
#define NEEDLE_STDIO_FILE_H
#include <stddef.h>

/* Read `path` whole into buf (NUL-terminated, at most cap bytes).  0, or -1 with *why set.
 * A regular file or a pipe (FIFO); a directory is "is a directory", a device or a socket
 * "is not a regular file". */
int stdio_read_file(const char *path, char *buf, size_t cap, size_t *len, const char **why);

#endif
