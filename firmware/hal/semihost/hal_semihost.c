/* HAL for bare-metal targets: semihosting (console, host files, command line, exit status),
 * served by QEMU's -semihosting or by a debug probe.  Arm's semihosting interface; RISC-V
 * adopted it unchanged (the RISC-V semihosting specification): the same operations and
 * parameter blocks, reached through another trap. */
#include <stdint.h>
#include <string.h>

#include "cmdline.h"
#include "hal.h"

enum {
    SYS_OPEN = 0x01, SYS_CLOSE = 0x02, SYS_WRITE = 0x05, SYS_READ = 0x06, SYS_REMOVE = 0x0E, SYS_FLEN = 0x0C,
    SYS_GET_CMDLINE = 0x15, SYS_EXIT_EXTENDED = 0x20,
};
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define OPEN_R   0u   /* "r": ":tt" opened so is standard input */
#define OPEN_R_B 1u   /* "rb" */
#define OPEN_W   4u   /* "w": ":tt" opened so is standard output */
#define OPEN_W_B 5u   /* "wb" */
#define OPEN_A   8u   /* "a": ":tt" opened so is standard error */

/* The semihosting trap: operation and parameter block in, result out.
 *   Arm (Thumb): r0, r1; BKPT 0xAB.
 *   RISC-V: a0, a1; EBREAK between the markers SLLI x0, x0, 0x1f and SRAI x0, x0, 7, all
 *   three uncompressed (norvc) and in one page, which 16-byte alignment of the sequence
 *   ensures: the debugger (or QEMU) tells a semihosting call from a breakpoint by them. */
static int32_t semihost(uint32_t op, const void *arg)
{
#if defined(__riscv)
    register uint32_t a0 __asm__("a0") = op;
    register const void *a1 __asm__("a1") = arg;
    /* the alignment before norvc: under RVC the assembler reserves the padding the linker's
     * relaxation may need (2-byte steps); under norvc it could not */
    __asm__ volatile(".balign 16\n\t.option push\n\t.option norvc\n\t"
                     "slli x0, x0, 0x1f\n\tebreak\n\tsrai x0, x0, 7\n\t.option pop"
                     : "+r"(a0) : "r"(a1) : "memory");
    return (int32_t)a0;
#else
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return (int32_t)r0;
#endif
}

static int32_t console_out = -1, console_err = -1, console_in = -2;   /* -2: not opened yet */
static const char *reason = "";
static const char *out_reason;   /* first failure writing standard output, sticky */

static int32_t open_file(const char *path, uint32_t mode)
{
    uint32_t args[3] = { (uint32_t)(uintptr_t)path, mode, (uint32_t)strlen(path) };
    return semihost(SYS_OPEN, args);
}

/* 0 when all n bytes were written, else -1 (SYS_WRITE returns the count NOT written). */
static int write_handle(int32_t handle, const char *s, size_t n)
{
    uint32_t args[3] = { (uint32_t)handle, (uint32_t)(uintptr_t)s, (uint32_t)n };
    if (!n) return 0;
    if (handle < 0) return -1;
    return semihost(SYS_WRITE, args) == 0 ? 0 : -1;
}

void hal_out(const char *s, size_t n)
{
    if (write_handle(console_out, s, n) && !out_reason)
        out_reason = console_out < 0 ? "the debugger console could not be opened" : "the debugger did not take the output";
}
void hal_err(const char *s, size_t n) { (void)write_handle(console_err, s, n); }
void hal_flush(void) {}

int hal_out_status(void)
{
    if (!out_reason) return 0;
    reason = out_reason;
    return -1;
}
const char *hal_reason(void) { return reason; }

long hal_console_read(char *buf, size_t n)
{
    if (console_in == -2) console_in = open_file(":tt", OPEN_R);
    if (console_in < 0) { reason = "the debugger's standard input could not be opened"; return -1; }
    if (!n) return 0;
    uint32_t args[3] = { (uint32_t)console_in, (uint32_t)(uintptr_t)buf, (uint32_t)n };
    int32_t left = semihost(SYS_READ, args);      /* the count NOT read */
    if (left < 0 || (size_t)left > n) { reason = "reading the debugger's standard input failed"; return -1; }
    return (long)(n - (size_t)left);
}

int hal_read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    int32_t h = open_file(path, OPEN_R_B);
    if (h < 0) { reason = "cannot open the file on the host"; return -1; }
    uint32_t flen_args[1] = { (uint32_t)h };
    int32_t size = semihost(SYS_FLEN, flen_args);
    uint32_t close_args[1] = { (uint32_t)h };
    if (size < 0 || (size_t)size > cap) {
        (void)semihost(SYS_CLOSE, close_args);
        reason = size < 0 ? "cannot size the file" : "file too large for this board's buffer (minify it)";
        return -1;
    }
    uint32_t read_args[3] = { (uint32_t)h, (uint32_t)(uintptr_t)buf, (uint32_t)size };
    int32_t left = semihost(SYS_READ, read_args);
    (void)semihost(SYS_CLOSE, close_args);
    if (left != 0) { reason = "short read"; return -1; }
    *len = (size_t)size;
    buf[size] = 0;
    return 0;
}

void *hal_create(const char *path)
{
    int32_t h = open_file(path, OPEN_W_B);
    if (h < 0) { reason = "cannot create the file on the host"; return 0; }
    return (void *)(uintptr_t)(h + 1);     /* handle 0 is valid: keep NULL for failure */
}

int hal_write(void *file, const void *data, size_t n)
{
    uint32_t args[3] = { (uint32_t)((uintptr_t)file - 1), (uint32_t)(uintptr_t)data, (uint32_t)n };
    if (semihost(SYS_WRITE, args) == 0) return 0;
    reason = "write failed";
    return -1;
}

int hal_close(void *file)
{
    uint32_t args[1] = { (uint32_t)((uintptr_t)file - 1) };
    return semihost(SYS_CLOSE, args) == 0 ? 0 : -1;
}

int hal_remove(const char *path)
{
    if (!strncmp(path, "/dev/", 5)) return -1;   /* never a device on the host */
    uint32_t args[2] = { (uint32_t)(uintptr_t)path, (uint32_t)strlen(path) };
    return semihost(SYS_REMOVE, args) == 0 ? 0 : -1;
}

void hal_exit(int code) __attribute__((noreturn));
void hal_exit(int code)
{
    uint32_t args[2] = { ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code };
    for (;;) (void)semihost(SYS_EXIT_EXTENDED, args);
}

/* The host command line, split by hal/cmdline.c (plain words, "double quotes", backslash
 * escapes \" and \\ inside quotes).  At most ARGS_MAX words (the program name
 * included) in at most CMDLINE_MAX - 1 bytes; more is a usage error, never a cut. */
#define CMDLINE_MAX 8192
#define ARGS_MAX CMDLINE_ARGS_MAX   /* the splitter: hal/cmdline.c */
static char cmdline[CMDLINE_MAX];
static char *argv_buf[ARGS_MAX + 1];
_Static_assert(CMDLINE_MAX == 8192 && ARGS_MAX == 32, "the usage errors below state these limits");

static void usage_error(const char *line) __attribute__((noreturn));
static void usage_error(const char *line)
{
    hal_err(line, strlen(line));
    hal_exit(2);
}

void hal_main(void) __attribute__((noreturn));
void hal_main(void)
{
    console_out = open_file(":tt", OPEN_W);
    console_err = open_file(":tt", OPEN_A);
    /* The host writes the line and its terminating zero, or fails when they do not fit. */
    uint32_t args[2] = { (uint32_t)(uintptr_t)cmdline, CMDLINE_MAX };
    if (semihost(SYS_GET_CMDLINE, args) != 0 || args[1] >= CMDLINE_MAX)
        usage_error("needle: error: the command line is longer than 8191 bytes (the firmware's "
                    "semihosting buffer): pass shorter arguments\n");
    cmdline[args[1]] = 0;
    int argc = cmdline_split(cmdline, argv_buf, 0);
    int status = main(argc, argv_buf);   /* no command line: argc 1 (the program decides) */
    if (hal_libc_exit) hal_libc_exit(status);   /* a user's program with the C library's stdio */
    hal_exit(status);
}
