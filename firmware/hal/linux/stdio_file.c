/* Whole-file read with stdio (see stdio_file.h). */
#define _POSIX_C_SOURCE 200809L   /* fileno, fstat under -std=c11 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "stdio_file.h"

int stdio_read_file(const char *path, char *buf, size_t cap, size_t *len, const char **why)
{
    FILE *f = fopen(path, "rb");
    if (!f) { *why = strerror(errno); return -1; }
    /* A directory opens for reading on Linux and fails only at fread ("read error"); a
     * device would be read as if it were the file.  Regular files and pipes (a FIFO, or
     * process substitution such as --tools <(...)) are read; anything else is named. */
    struct stat st;
    if (fstat(fileno(f), &st)) { *why = strerror(errno); fclose(f); return -1; }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        *why = S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file";
        fclose(f);
        return -1;
    }
    *len = fread(buf, 1, cap + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) { *why = "read error"; return -1; }
    if (*len > cap) { *why = "file too large"; return -1; }
    buf[*len] = 0;
    return 0;
}
