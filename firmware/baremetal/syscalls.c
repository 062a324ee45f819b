/* newlib's system calls on the HAL, for a program of your own linked against the board
 * support library (libneedle_board.a, needle::board): printf, puts, fgets, malloc and exit
 * work in a user's main().  The engine never calls any of these (it is heap-free and does its
 * own formatting: the post-link check refuses heap references in the needle firmware), and
 * this file is only in libneedle_board.a, never in the needle firmware's own link.
 *
 *   _write   fd 1 -> hal_out, fd 2 -> hal_err (the board's console: semihosting or a UART)
 *   _read    fd 0 -> hal_console_read (semihosting's standard input, or the UART)
 *   _exit    hal_exit: the exit status, as the board reports it
 *   _sbrk    the heap the board file reserves (heap_bytes, 0 by default: the linker script
 *            puts [__heap_start, __heap_end) after .bss).  With heap_bytes = 0 the region is
 *            empty and every allocation fails cleanly (malloc returns NULL, errno ENOMEM); the
 *            break never leaves the region, so the engine's static state is never touched.
 *   _close, _fstat, _isatty, _lseek, _open, _kill, _getpid: no file system and no processes:
 *            the console's descriptors 0-2 are character devices, anything else fails with
 *            errno set (EBADF, ENOSYS, ...).
 * The link names _write (needle-board.pc, needle::board), so this object is pulled in before
 * the C library is searched. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "hal.h"

#undef errno
extern int errno;

void hal_exit(int code) __attribute__((noreturn));

extern char __heap_start[], __heap_end[];   /* templates/link.ld.j2 */
static char *heap_break = __heap_start;

void *_sbrk(ptrdiff_t incr)
{
    char *old = heap_break;
    if (incr > __heap_end - heap_break || incr < __heap_start - heap_break) {
        errno = ENOMEM;
        return (void *)-1;
    }
    heap_break += incr;
    return old;
}

static int console_fd(int fd) { return fd >= 0 && fd <= 2; }

int _write(int fd, const char *buf, int n)
{
    if (n < 0) { errno = EINVAL; return -1; }
    if (fd == 1) hal_out(buf, (size_t)n);
    else if (fd == 2) hal_err(buf, (size_t)n);
    else { errno = EBADF; return -1; }
    return n;
}

int _read(int fd, char *buf, int n)
{
    if (fd != 0) { errno = EBADF; return -1; }
    if (n < 0) { errno = EINVAL; return -1; }
    long got = hal_console_read(buf, (size_t)n);
    if (got < 0) { errno = EIO; return -1; }
    return (int)got;
}

int _close(int fd)
{
    errno = console_fd(fd) ? EINVAL : EBADF;   /* the console stays open */
    return -1;
}

int _fstat(int fd, struct stat *st)
{
    if (!console_fd(fd)) { errno = EBADF; return -1; }
    st->st_mode = S_IFCHR;
    return 0;
}

int _isatty(int fd)
{
    if (console_fd(fd)) return 1;
    errno = EBADF;
    return 0;
}

int _lseek(int fd, int offset, int whence)
{
    (void)offset; (void)whence;
    errno = console_fd(fd) ? ESPIPE : EBADF;
    return -1;
}

int _open(const char *path, int flags, int mode)
{
    (void)path; (void)flags; (void)mode;
    errno = ENOSYS;                /* no file system behind the C library */
    return -1;
}

int _getpid(void) { return 1; }

int _kill(int pid, int sig)
{
    (void)pid; (void)sig;
    errno = EINVAL;
    return -1;
}

void _exit(int code) { hal_exit(code); }

/* hal_main's way out when this object is linked (a weak reference there): through the C
 * library's exit(), so atexit handlers run and buffered standard output is flushed. */
void hal_libc_exit(int code) { exit(code); }
