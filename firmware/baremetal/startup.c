/* Cortex-M start-up: vector table, reset handler (the BSP's hal_board_init, copy .data, zero
 * .bss, enable the FPU and MVE), the boot block a board's ROM may want, a fault handler that dumps the stacked registers and the fault status registers on
 * the console (whichever HAL: semihosting or UART) and exits with status 4. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "hal.h"

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __stack_top[];

void hal_main(void) __attribute__((noreturn));
void hal_exit(int code) __attribute__((noreturn));

/* The BSP's hook, called first thing on reset, before .data and .bss are touched: the place
 * to bring up clocks and the external RAM that holds .data/.bss (SDRAM controller, PSRAM
 * chip select, memory-mapped QSPI, MPU attributes).  It runs on the stack of the vector
 * table (keep that stack in RAM that works out of reset: a "stack" region in the board
 * file) and must not rely on initialised or zeroed globals.  Default: nothing (QEMU). */
void hal_board_init(void);
__attribute__((weak)) void hal_board_init(void) {}

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void)
{
    hal_board_init();
    memcpy(__data_start, __data_load, (size_t)((uint8_t *)__data_end - (uint8_t *)__data_start));
    memset(__bss_start, 0, (size_t)((uint8_t *)__bss_end - (uint8_t *)__bss_start));
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    /* CPACR: full access to CP10 and CP11 (the FPU, and MVE on Armv8.1-M) */
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb" ::: "memory");   /* GCC 12's arm_acle.h lacks __dsb/__isb */
#endif
    hal_main();
}

/* Faults: one dump on the console, then exit status 4 (docs: README, "Boards").
 *   needle: fault: hard fault (exception 3)
 *   needle: fault: r0=0x.. r1=0x.. r2=0x.. r3=0x..
 *   needle: fault: r12=0x.. lr=0x.. pc=0x.. xpsr=0x..
 *   needle: fault: cfsr=0x.. hfsr=0x.. mmfar=0x.. bfar=0x..
 * The registers are the ones the core stacked on entry (pc: the faulting instruction);
 * CFSR/HFSR say why, MMFAR/BFAR where (when CFSR marks them valid). */
#define FAULT_EXIT 4
#define SCB_CFSR  (*(volatile uint32_t *)0xE000ED28u)
#define SCB_HFSR  (*(volatile uint32_t *)0xE000ED2Cu)
#define SCB_MMFAR (*(volatile uint32_t *)0xE000ED34u)
#define SCB_BFAR  (*(volatile uint32_t *)0xE000ED38u)

static void fault_line(const char *fmt, ...)
{
    char line[128];
    va_list ap;
    va_start(ap, fmt);
    size_t n = hal_vformat(line, sizeof line, fmt, ap);
    va_end(ap);
    hal_err(line, n);
}

void fault_dump(const uint32_t *frame, uint32_t ipsr) __attribute__((noreturn, used));
void fault_dump(const uint32_t *frame, uint32_t ipsr)
{
    static const char *const names[] = { "thread mode", "reset", "NMI", "hard fault",
                                         "memory management fault", "bus fault", "usage fault" };
    unsigned exc = ipsr & 0x1FFu;
    fault_line("needle: fault: %s (exception %u)\n", exc < 7 ? names[exc] : "unexpected exception", exc);
    fault_line("needle: fault: r0=0x%x r1=0x%x r2=0x%x r3=0x%x\n", frame[0], frame[1], frame[2], frame[3]);
    fault_line("needle: fault: r12=0x%x lr=0x%x pc=0x%x xpsr=0x%x\n", frame[4], frame[5], frame[6], frame[7]);
    fault_line("needle: fault: cfsr=0x%x hfsr=0x%x mmfar=0x%x bfar=0x%x\n",
               (unsigned)SCB_CFSR, (unsigned)SCB_HFSR, (unsigned)SCB_MMFAR, (unsigned)SCB_BFAR);
    hal_exit(FAULT_EXIT);
}

/* Every fault and unexpected exception: the stacked frame (MSP or PSP, EXC_RETURN bit 2)
 * and the exception number go to fault_dump. */
__attribute__((naked)) void Fault_Handler(void)
{
    __asm__ volatile(
        "tst lr, #4\n\t"
        "ite eq\n\t"
        "mrseq r0, msp\n\t"
        "mrsne r0, psp\n\t"
        "mrs r1, ipsr\n\t"
        "b fault_dump\n\t");
}

#if NEEDLE_BOOT_BLOCK_RP2350_IMAGE_DEF
/* RP2350 boot ROM: an image in flash is only entered if a block loop starting in its first
 * 4 KiB holds an IMAGE_DEF (RP2350 datasheet, "Bootrom" > "Concepts" > "Blocks and block
 * loops" / "Image definitions"; the item encodings of pico-sdk's boot/picobin.h).  This is
 * the smallest one: a single block that links to itself, with one IMAGE_TYPE item saying
 * "executable, Arm, Secure, RP2350".  Without a VECTOR_TABLE item the ROM takes the vector
 * table at the start of the image (0x10000000: .vectors, just before this block). */
#define PICOBIN_MARKER_START 0xFFFFDED3u   /* block start marker */
#define PICOBIN_MARKER_END   0xAB123579u   /* block end marker */
#define PICOBIN_ITEM_IMAGE_TYPE 0x42u      /* 1-byte-size item, size 1 word */
#define PICOBIN_ITEM_LAST       0xFFu      /* 2-byte-size item: total words of the items before it */
#define IMAGE_TYPE_EXE          0x0001u    /* bits 3:0  image type: executable */
#define IMAGE_TYPE_SECURE       0x0020u    /* bits 5:4  security: Secure (2) */
#define IMAGE_TYPE_CPU_ARM      0x0000u    /* bits 10:8 CPU: Arm (0) */
#define IMAGE_TYPE_CHIP_RP2350  0x1000u    /* bits 14:12 chip: RP2350 (1) */
__attribute__((section(".boot_block"), used)) const uint32_t rp2350_image_def[5] = {
    PICOBIN_MARKER_START,
    PICOBIN_ITEM_IMAGE_TYPE | (1u << 8) |
        ((IMAGE_TYPE_EXE | IMAGE_TYPE_SECURE | IMAGE_TYPE_CPU_ARM | IMAGE_TYPE_CHIP_RP2350) << 16),
    PICOBIN_ITEM_LAST | (1u << 8),          /* the items before LAST: one word */
    0,                                      /* offset to the next block of the loop: itself */
    PICOBIN_MARKER_END,
};
#endif

typedef void (*vector)(void);
__attribute__((section(".vectors"), used)) const vector vector_table[16] = {
    (vector)(uintptr_t)__stack_top, Reset_Handler, Fault_Handler /* NMI */, Fault_Handler /* HardFault */,
    Fault_Handler /* MemManage */, Fault_Handler /* BusFault */, Fault_Handler /* UsageFault */, 0, 0, 0, 0,
    Fault_Handler /* SVCall */, Fault_Handler /* DebugMon */, 0,
    Fault_Handler /* PendSV */, Fault_Handler /* SysTick */,
};
