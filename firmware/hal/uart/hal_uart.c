/* HAL for bare-metal Arm boards without a debugger: the console on a UART (polled), the
 * command line as one line received on it, no file system, exit = a last line and a stopped
 * core.  This file is the console logic, the same for every UART; the registers are a small
 * driver's (uart_driver.h: uart_cmsdk.c, uart_pl011.c), picked by the board file's [uart]
 * kind.  The board file (console = "uart", [uart]) sets, through SConstruct:
 *   NEEDLE_UART_BASE      the UART's base address
 *   NEEDLE_UART_CLOCK_HZ  its reference clock, for the baud divisor (115200 baud)
 *   NEEDLE_UART_CPU_CLOCK_HZ  the processor clock (SysTick's), for the command-line wait;
 *                         [uart] cpu_clock_hz, clock_hz when the board does not say
 *   NEEDLE_UART_SEMIHOST_EXIT=1  QEMU only: also report the exit status with semihosting
 *                         SYS_EXIT_EXTENDED.  A real board leaves it off: without a debugger
 *                         the semihosting trap (bkpt) is itself a fault. */
#include <stdarg.h>
#include <stdint.h>

#include "cmdline.h"
#include "hal.h"
#include "uart_driver.h"

#ifndef NEEDLE_UART_CPU_CLOCK_HZ
#define NEEDLE_UART_CPU_CLOCK_HZ NEEDLE_UART_CLOCK_HZ
#endif
#ifndef NEEDLE_UART_SEMIHOST_EXIT
#define NEEDLE_UART_SEMIHOST_EXIT 0
#endif

#define LINE_MAX 4096u             /* the command line, its end (CR or LF) not counted */
#define WAIT_MS 1000u              /* the demo runs when no command line starts within this */

static const char *reason = "";

static void put(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) uart_put((uint8_t)s[i]);
}

void hal_out(const char *s, size_t n) { put(s, n); }
void hal_err(const char *s, size_t n) { put(s, n); }   /* one wire: errors go to the console too */
void hal_flush(void) { uart_drain(); }
int hal_out_status(void) { return 0; }                 /* a UART takes every byte, in time */
const char *hal_reason(void) { return reason; }

long hal_console_read(char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        char c = (char)uart_get();
        buf[got++] = c;
        if (c == '\n') break;
    }
    return (long)got;
}

/* No file system: --tools, --logits, --heads and friends fail with this reason. */
static const char NO_FS[] = "no file system on this board: the UART console has none (file options "
                            "need the semihosting console, console = \"semihost\", under a debugger)";

int hal_read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    (void)path; (void)buf; (void)cap; (void)len;
    reason = NO_FS;
    return -1;
}
void *hal_create(const char *path) { (void)path; reason = NO_FS; return 0; }
int hal_write(void *file, const void *data, size_t n) { (void)file; (void)data; (void)n; reason = NO_FS; return -1; }
int hal_close(void *file) { (void)file; return -1; }
int hal_remove(const char *path) { (void)path; return -1; }

static size_t format(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = hal_vformat(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

/* The last line, then the core stops: nothing on a real board reads an exit status. */
void hal_exit(int code) __attribute__((noreturn));
void hal_exit(int code)
{
    char line[32];
    put(line, format(line, sizeof line, "needle: exit %d\n", code));
    hal_flush();
#if NEEDLE_UART_SEMIHOST_EXIT
    {   /* QEMU's semihosting SYS_EXIT_EXTENDED (ADP_Stopped_ApplicationExit, status) */
        uint32_t args[2] = { 0x20026u, (uint32_t)code };
        register uint32_t r0 __asm__("r0") = 0x20u;
        register const void *r1 __asm__("r1") = args;
        __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    }
#endif
    for (;;) __asm__ volatile("wfi");
}

/* ---- the command line: one line on the UART, within WAIT_MS of reset ------------------- */

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SYST_CSR_ENABLE    (1u << 0)
#define SYST_CSR_CLKSOURCE (1u << 2)   /* the processor clock, not the optional reference clock */
#define SYST_COUNTFLAG     (1u << 16)  /* wrapped since last read; reading clears it */
_Static_assert(NEEDLE_UART_CPU_CLOCK_HZ / 1000u - 1u <= 0xFFFFFFu, "SysTick's reload is 24 bits");

/* The first byte of the line, or -1 when none arrives within WAIT_MS (SysTick, polled, one
 * wrap a millisecond at the processor clock). */
static int first_byte(void)
{
    uint32_t ms = 0;
    SYST_CSR = 0;
    SYST_RVR = NEEDLE_UART_CPU_CLOCK_HZ / 1000u - 1u;
    SYST_CVR = 0;
    SYST_CSR = SYST_CSR_ENABLE | SYST_CSR_CLKSOURCE;   /* no interrupt */
    while (!uart_rx_ready()) {
        if ((SYST_CSR & SYST_COUNTFLAG) && ++ms >= WAIT_MS) { SYST_CSR = 0; return -1; }
    }
    SYST_CSR = 0;                                /* --bench N sets SysTick up its own way */
    return uart_get();
}

static char line_buf[LINE_MAX + 1];
static char *argv_buf[CMDLINE_ARGS_MAX + 1];
static char program[] = "needle";
_Static_assert(LINE_MAX == 4096u, "the usage error below states this limit");

void hal_main(void) __attribute__((noreturn));
void hal_main(void)
{
    uart_init();
    size_t n = 0;
    for (int c = first_byte(); c >= 0 && c != '\r' && c != '\n'; c = uart_get()) {
        if (n == LINE_MAX) {
            static const char msg[] = "needle: error: the command line is longer than 4096 bytes (the "
                                      "firmware's UART line buffer): send shorter arguments\n";
            hal_err(msg, sizeof msg - 1);
            hal_exit(2);
        }
        line_buf[n++] = (char)c;
    }
    line_buf[n] = 0;
    argv_buf[0] = program;
    int argc = cmdline_split(line_buf, argv_buf, 1);
    int status = main(argc, argv_buf);  /* no line: argc 1 (the CLI runs its demo prompt) */
    if (hal_libc_exit) hal_libc_exit(status);   /* a user's program with the C library's stdio */
    hal_exit(status);
}
