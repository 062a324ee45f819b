/* picolibc's hooks on the HAL, for a program of your own linked against the board support
 * library (libneedle_board.a, needle::board) on the RISC-V boards: printf, puts, fgets,
 * malloc and exit work in a user's main().  The twin of syscalls.c (newlib's system calls, the
 * Cortex-M boards); the engine calls none of this, and this file is only in
 * libneedle_board.a, never in the needle firmware's own link.
 *
 *   stdout   hal_out, buffered up to a newline or 64 bytes (a semihosting write is a trap)
 *   stderr   hal_err, unbuffered
 *   stdin    hal_console_read (semihosting's standard input)
 *   _exit    hal_exit: the exit status, as the board reports it
 *   malloc   picolibc's own sbrk hands out [__heap_start, __heap_end), the region the board
 *            file's heap_bytes reserves (templates/link.ld.j2); 0 bytes: malloc returns NULL.
 * The link names stdout (needle-board.pc, needle::board), so this object is pulled in before
 * the C library is searched. */
#include <stdio.h>
#include <stdlib.h>

#include "hal.h"

void hal_exit(int code) __attribute__((noreturn));

static char out_buf[64];
static size_t out_len;

static int out_flush(FILE *f)
{
    (void)f;
    hal_out(out_buf, out_len);
    out_len = 0;
    return 0;
}

static int out_put(char c, FILE *f)
{
    out_buf[out_len++] = c;
    if (c == '\n' || out_len == sizeof out_buf) out_flush(f);
    return (unsigned char)c;
}

static int err_put(char c, FILE *f)
{
    (void)f;
    hal_err(&c, 1);
    return (unsigned char)c;
}

static int in_get(FILE *f)
{
    char c;
    (void)f;
    out_flush(f);                       /* a prompt is on the console before the read waits */
    long n = hal_console_read(&c, 1);
    return n == 1 ? (unsigned char)c : n == 0 ? _FDEV_EOF : _FDEV_ERR;
}

static FILE console_out = FDEV_SETUP_STREAM(out_put, in_get, out_flush, _FDEV_SETUP_RW);
static FILE console_err = FDEV_SETUP_STREAM(err_put, NULL, NULL, _FDEV_SETUP_WRITE);
FILE *const stdin = &console_out;
FILE *const stdout = &console_out;
FILE *const stderr = &console_err;

void _exit(int code)
{
    out_flush(stdout);
    hal_exit(code);
}

/* hal_main's return path for a user's program: the C library's exit (atexit handlers). */
void hal_libc_exit(int code) { exit(code); }
