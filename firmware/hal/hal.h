/* The hardware seam of the CLI: console, files, exit.  Each target provides one
 * implementation (hal/linux: stdio; hal/semihost: Arm semihosting under a debugger or QEMU;
 * hal/uart: a UART (CMSDK or PL011 driver), no file system), plus, bare metal, hal_main()
 * and hal_exit().
 * The CLI itself (cli/main.c) uses nothing else, so it is the same program on every board. */
#ifndef NEEDLE_HAL_H
#define NEEDLE_HAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The program: argv[0] is the program name. Returns the exit status.  needle_cli is the
 * CLI (cli/main.c); main (cli/entry.c for the CLI, or a library user's own application) is
 * what the platform calls: the C runtime on Linux, hal_main() on bare metal, after the
 * HAL has set up its console and read the command line (argc 1 when there was none). */
int needle_cli(int argc, char **argv);
int main(int argc, char **argv);

void hal_out(const char *s, size_t n);          /* standard output */
void hal_err(const char *s, size_t n);          /* standard error */
void hal_flush(void);
/* Flush standard output: 0 if every write to it so far went through, else -1 with
 * hal_reason() set (e.g. a full disk or a closed pipe behind a redirection). */
int hal_out_status(void);
/* Bare metal: read up to n bytes of the console's input (semihosting's standard input, or the
 * UART: up to and including a line's '\n'; it waits for the first byte).  The count, 0 at
 * the end of the input, -1 on error.  newlib's _read (baremetal/syscalls.c) calls it. */
long hal_console_read(char *buf, size_t n);

/* Whole-file read into buf (NUL-terminated). 0, or -1 with hal_reason() set (Linux: a
 * regular file or a pipe is read; a directory is "is a directory", a device or socket "is
 * not a regular file"). */
int hal_read_file(const char *path, char *buf, size_t cap, size_t *len);

/* Write-only binary file: a handle, or NULL with hal_reason() set. */
void *hal_create(const char *path);
int hal_write(void *file, const void *data, size_t n);   /* 0, or -1 */
int hal_close(void *file);                               /* 0, or -1 */
int hal_remove(const char *path);                        /* drop a partial output file: 0, or -1 */
const char *hal_reason(void);                            /* why the last call failed */
/* 1 when both paths name one existing file (same device and inode: a hard link, a symbolic
 * link or another spelling of the path included), else 0.  Linux HAL; the CLI calls it only
 * in engines that read their archive from a file, to refuse an output that is the archive. */
int hal_same_file(const char *a, const char *b);

/* printf-like formatting of %s %.Ns %u %d %zu %x %%, into a bounded buffer (always
 * NUL-terminated); returns the length written. */
size_t hal_vformat(char *buf, size_t cap, const char *fmt, va_list ap);
void hal_printf(const char *fmt, ...);
/* One formatted line of at most 127 bytes on standard error, from a buffer small enough for
 * the bare-metal fault handlers' own stack (startup.c, startup_riscv.c). */
void hal_errf(const char *fmt, ...);

/* One error line, "needle: error: <fmt...>\n", on standard error; returns `code` (the exit
 * status the caller passes on). */
int hal_fail(int code, const char *fmt, ...);

/* The whole-archive SHA-256 a partition board's engine computes at boot (needle_boot): FIPS
 * 180-4's digest of data[0..n) into out.  The engine defines it weak (the software hash); a
 * board with a hash accelerator overrides it (board file sha256 = "rp2350" | "stm32h7":
 * hal/sha256/sha256_<kind>.c). */
void hal_sha256(const uint8_t *data, size_t n, uint8_t out[32]);

/* Bare metal, a board with [slots] (MCUboot; baremetal/mcuboot.c).  hal_flash_program
 * programs n bytes at addr (the address the CPU reads the flash at), all of them within one
 * write-alignment unit of the board file's slots.align, over bytes still erased: NULL, or why
 * not (one line).  Weak default: refuses (no flash driver); a board's driver overrides it
 * (slots.flash_driver = "rp2350": hal/flash/flash_rp2350.c).
 * mcuboot_confirm writes image_ok in the primary slot's trailer when the trailer says the
 * image came in by a test swap and is not confirmed yet; needle_image_confirm, which the
 * generated needle_boot() calls once every archive check has passed, does that and reports a
 * failure in one line on the console. */
const char *hal_flash_program(uint32_t addr, const void *data, size_t n);
enum {
    MCUBOOT_NOTHING = 0,        /* nothing to write: confirmed already, or flashed in place */
    MCUBOOT_CONFIRMED = 1,      /* image_ok written now */
    MCUBOOT_DAMAGED = -1,       /* the trailer is neither erased nor MCUboot's: left alone */
    MCUBOOT_NOT_WRITTEN = -2,   /* a test swap, but image_ok could not be written */
};
int mcuboot_confirm(const char **why);
void needle_image_confirm(void);

/* Bare metal: baremetal/syscalls.c (libneedle_board.a, a user's program only) defines it;
 * hal_main ends through it when it is linked, so the C library's exit() flushes stdio and
 * runs atexit handlers.  The needle firmware does not link it (a null weak reference). */
void hal_libc_exit(int code) __attribute__((weak, noreturn));

#ifdef __cplusplus
}
#endif

#endif
