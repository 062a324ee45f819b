/* Whole-file read with stdio (see stdio_file.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "stdio_file.h"

int stdio_read_file(const char *path, char *buf, size_t cap, size_t *len, const char **why)
{
    FILE *f = fopen(path, "rb");
    if (!f) { *why = strerror(errno); return -1; }
    *len = fread(buf, 1, cap + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) { *why = "read error"; return -1; }
    if (*len > cap) { *why = "file too large"; return -1; }
    buf[*len] = 0;
    return 0;
}
