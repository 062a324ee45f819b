/* HAL for Linux targets (the host and the Linux boards): stdio and errno. */
#define _POSIX_C_SOURCE 200809L   /* lstat under -std=c11 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hal.h"
#include "stdio_file.h"

static const char *reason = "";
static const char *out_reason;   /* first failure writing standard output, sticky */

static void out_failed(void)
{
    if (!out_reason) out_reason = errno ? strerror(errno) : "write error";
}

void hal_out(const char *s, size_t n)
{
    errno = 0;
    if (n && fwrite(s, 1, n, stdout) != n) out_failed();
}

void hal_flush(void)
{
    errno = 0;
    if (fflush(stdout)) out_failed();
}

void hal_err(const char *s, size_t n) { hal_flush(); fwrite(s, 1, n, stderr); }

int hal_out_status(void)
{
    hal_flush();
    if (!out_reason && ferror(stdout)) out_reason = "write error";
    if (!out_reason) return 0;
    reason = out_reason;
    return -1;
}

const char *hal_reason(void) { return reason; }

int hal_read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    return stdio_read_file(path, buf, cap, len, &reason);
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

int hal_remove(const char *path)
{
    struct stat st;
    /* Only regular files: never unlink a device such as /dev/full or /dev/null. */
    if (lstat(path, &st) || !S_ISREG(st.st_mode)) return -1;
    return remove(path) ? -1 : 0;
}

int hal_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
