/* RV32 machine-mode start-up: the entry (stack pointer, trap vector, the FPU on F cores), the
 * reset sequence (the BSP's hal_board_init, the PMP stack guard, copy .ram_text and .data,
 * zero .bss) and a trap handler that prints the cause and the trap registers on the console
 * (semihosting) and exits with status 4; a stack overflow gets one line of its own.  The
 * Cortex-M twin of this file is startup.c; the console, formatting and exit are the same HAL.
 *
 * The thread pointer (tp) points at the one thread's TLS block (templates/link.ld.j2, .tdata),
 * where picolibc keeps errno.
 *
 * Everything runs in machine mode, as a bare-metal image on the ESP32-C6/P4 cores and on
 * QEMU's virt machine with -bios none does (the reset vector jumps to the ELF entry).  CSR
 * instructions are written with `.option arch, +zicsr`: the board's -march names the base ISA
 * only (rv32imac, rv32imafc), which is how GCC 12 picks the matching multilib of picolibc. */
#include <stdint.h>
#include <string.h>

#include "hal.h"

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __ram_text_load[], __ram_text_start[], __ram_text_end[];
/* the thread-local block (picolibc's errno): one loaded section, tp points at its start */
extern uint32_t __tdata_load[], __tdata_start[], __tdata_end[];
/* templates/link.ld.j2: the main stack [__stack_bottom, __stack_top), the guard
 * [__stack_guard_start, __stack_guard_end) right below it, the trap handler's own stack below
 * the guard. */
extern uint32_t __stack_bottom[], __stack_top[], __stack_guard_start[], __stack_guard_end[];
extern uint32_t __fault_stack_top[];

void hal_main(void) __attribute__((noreturn));
void hal_exit(int code) __attribute__((noreturn));

#define CSR_READ(name) ({ uint32_t v_; __asm__ volatile(".option push\n\t.option arch, +zicsr\n\t"   \
    "csrr %0, " #name "\n\t.option pop" : "=r"(v_)); v_; })
#define CSR_WRITE(name, value) __asm__ volatile(".option push\n\t.option arch, +zicsr\n\t"          \
    "csrw " #name ", %0\n\t.option pop" : : "r"(value) : "memory")

/* The stack guard: a PMP entry (RISC-V privileged spec, "Physical Memory Protection") over
 * [__stack_guard_start, __stack_guard_end) with no permissions and the lock bit, which makes
 * it apply to machine mode too.  The first store into it is a store access fault (mcause 7),
 * taken on the trap handler's own stack.  NAPOT: the region is a power of two >= 8 bytes,
 * aligned to its size (link.ld).  Entry 0 has the highest priority; no other entry is used,
 * so machine mode keeps its full access everywhere else.  Like the Armv7-M MPU guard, a frame
 * larger than the guard could step over it: the post-link check refuses such an image. */
#define PMP_NAPOT 0x18u
#define PMP_LOCK 0x80u
static void stack_guard_pmp(void)
{
    uint32_t base = (uint32_t)(uintptr_t)__stack_guard_start;
    uint32_t bytes = (uint32_t)((uint8_t *)__stack_guard_end - (uint8_t *)__stack_guard_start);
    if (bytes < 8) return;                              /* no guard in this image */
    CSR_WRITE(pmpaddr0, (base | (bytes / 2u - 1u)) >> 2);
    CSR_WRITE(pmpcfg0, PMP_LOCK | PMP_NAPOT);           /* entry 0: locked, no R, W or X */
    __asm__ volatile("fence" ::: "memory");
}

/* The BSP's hook, called first in reset_c, before .data and .bss are touched (clocks, the
 * P4's PSRAM controller: the data region may live there).  It runs on the stack of the
 * entry (keep that in RAM that works out of reset: a "stack" region in the board file) and
 * must not rely on initialised or zeroed globals.  Default: nothing (QEMU). */
void hal_board_init(void);
__attribute__((weak)) void hal_board_init(void) {}

void reset_c(void) __attribute__((noreturn, used));
void reset_c(void)
{
    hal_board_init();
    stack_guard_pmp();
    memcpy(__ram_text_start, __ram_text_load, (size_t)((uint8_t *)__ram_text_end - (uint8_t *)__ram_text_start));
    memcpy(__data_start, __data_load, (size_t)((uint8_t *)__data_end - (uint8_t *)__data_start));
    memcpy(__tdata_start, __tdata_load, (size_t)((uint8_t *)__tdata_end - (uint8_t *)__tdata_start));
    memset(__bss_start, 0, (size_t)((uint8_t *)__bss_end - (uint8_t *)__bss_start));
    /* RISC-V TLS (variant I, no TCB): a thread-local's address is tp + its offset in the block */
    __asm__ volatile("mv tp, %0" : : "r"(__tdata_start) : "memory");
    hal_main();
}

/* Traps: one dump on the console, then exit status 4 (docs/boards.md).
 *   needle: fault: illegal instruction (mcause 2)
 *   needle: fault: mepc=0x.. mtval=0x.. ra=0x.. sp=0x..
 * mepc is the trapping instruction, mtval the faulting address (access faults) or the
 * instruction's bits (illegal instruction).  A store or load in the stack guard adds
 *   needle: fault: stack overflow (sp=0x.. at or below the stack's bottom 0x..): raise stack_bytes in the board file */
#define FAULT_EXIT 4

/* Runs on the fault stack (trap_entry switched to it): the trap CSRs, and ra and sp as they
 * were when the trap was taken. */
void fault_dump(uint32_t mcause, uint32_t mepc, uint32_t mtval, uint32_t sp, uint32_t ra)
    __attribute__((noreturn, used));
void fault_dump(uint32_t mcause, uint32_t mepc, uint32_t mtval, uint32_t sp, uint32_t ra)
{
    static const char *const names[] = {
        "instruction address misaligned", "instruction access fault", "illegal instruction", "breakpoint",
        "load address misaligned", "load access fault", "store address misaligned", "store access fault",
        "environment call from U-mode", "environment call from S-mode", "reserved", "environment call from M-mode",
        "instruction page fault", "load page fault", "reserved", "store page fault" };
    uint32_t bottom = (uint32_t)(uintptr_t)__stack_bottom, guard = (uint32_t)(uintptr_t)__stack_guard_start;
    int interrupt = (int)(mcause >> 31);
    uint32_t code = mcause & 0x7FFFFFFFu;
    int access = !interrupt && (code == 5u || code == 7u);
    int overflow = (access && mtval >= guard && mtval < bottom) || (sp >= guard && sp < bottom);
    hal_errf("needle: fault: %s (mcause %u%s)\n",
               interrupt ? "unexpected interrupt" : code < 16u ? names[code] : "unexpected exception",
               (unsigned)code, interrupt ? ", interrupt" : "");
    if (overflow)
        hal_errf("needle: fault: stack overflow (sp=0x%x at or below the stack's bottom 0x%x): raise "
                   "stack_bytes in the board file\n", (unsigned)sp, (unsigned)bottom);
    hal_errf("needle: fault: mepc=0x%x mtval=0x%x ra=0x%x sp=0x%x\n",
               (unsigned)mepc, (unsigned)mtval, (unsigned)ra, (unsigned)sp);
    hal_exit(FAULT_EXIT);
}

/* The entry (ENTRY(Reset_Handler) in link.ld, first in .vectors: where the boot ROM or
 * QEMU's reset vector jumps), and the trap vector (mtvec, direct mode: 4-byte aligned).
 * On an F core mstatus.FS goes to Initial before any floating-point instruction runs (with
 * FS = Off every one of them traps) and fcsr to round-to-nearest-even with no flags. */
__asm__(
    ".section .vectors, \"ax\", @progbits\n"
    ".globl Reset_Handler\n"
    ".type Reset_Handler, @function\n"
    "Reset_Handler:\n"
    ".option push\n"
    ".option norelax\n"
    ".option arch, +zicsr\n"
    "    la sp, __stack_top\n"
    "    la t0, trap_entry\n"
    "    csrw mtvec, t0\n"
#ifdef __riscv_flen
    "    li t0, 0x2000\n"          /* mstatus.FS = Initial (01) */
    "    csrs mstatus, t0\n"
    "    csrw fcsr, zero\n"
#endif
    "    j reset_c\n"
    ".size Reset_Handler, . - Reset_Handler\n"
    "\n"
    ".text\n"
    ".balign 4\n"
    ".globl trap_entry\n"
    ".type trap_entry, @function\n"
    "trap_entry:\n"
    "    csrw mscratch, sp\n"      /* sp at the trap: the stack may be the cause */
    "    la sp, __fault_stack_top\n"
    "    mv a4, ra\n"
    "    csrr a3, mscratch\n"
    "    csrr a2, mtval\n"
    "    csrr a1, mepc\n"
    "    csrr a0, mcause\n"
    "    j fault_dump\n"
    ".size trap_entry, . - trap_entry\n"
    ".option pop\n");
