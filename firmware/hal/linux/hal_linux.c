/* HAL for Linux targets (the host and the Linux boards): stdio and errno. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hal.h"

static const char *reason = "";

void hal_out(const char *s, size_t n) { fwrite(s, 1, n, stdout); }
void hal_err(const char *s, size_t n) { fflush(stdout); fwrite(s, 1, n, stderr); }
void hal_flush(void) { fflush(stdout); }
const char *hal_reason(void) { return reason; }

int hal_read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) { reason = strerror(errno); return -1; }
    *len = fread(buf, 1, cap + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) { reason = "read error"; return -1; }
    if (*len > cap) { reason = "file too large"; return -1; }
    buf[*len] = 0;
    return 0;
}

void *hal_create(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) reason = strerror(errno);
    return f;
}

int hal_write(void *file, const void *data, size_t n)
{
    if (fwrite(data, 1, n, (FILE *)file) == n) return 0;
    reason = strerror(errno);
    return -1;
}

int hal_close(void *file)
{
    if (fclose((FILE *)file) == 0) return 0;
    reason = strerror(errno);
    return -1;
}

int main(int argc, char **argv) { return needle_cli(argc, argv); }
