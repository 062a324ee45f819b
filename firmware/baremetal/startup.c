/* Cortex-M start-up: vector table, reset handler (the BSP's hal_board_init, the stack guard,
 * copy .ram_text and .data, zero .bss, enable the FPU and MVE), the boot block a board's ROM may want, and a
 * fault handler that dumps the stacked registers and the fault status registers on the
 * console (whichever HAL: semihosting or UART) and exits with status 4; a stack overflow
 * gets one line of its own. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "hal.h"

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
/* code that runs from on-chip RAM (a flash driver's write sequence: section .ram_text) */
extern uint32_t __ram_text_load[], __ram_text_start[], __ram_text_end[];
/* templates/link.ld.j2: the main stack [__stack_bottom, __stack_top), the stack guard
 * [__stack_guard_start, __stack_guard_end) right below it (empty where MSPLIM guards the
 * stack) and the fault handler's own stack, below the guard. */
extern uint32_t __stack_bottom[], __stack_top[], __stack_guard_start[], __stack_guard_end[];
extern uint32_t __fault_stack_top[];

void hal_main(void) __attribute__((noreturn));
void hal_exit(int code) __attribute__((noreturn));

/* The stack guard: an overflow of the main stack faults before it writes .bss (docs/stack.md).
 *  The cheapest mechanism that faults reliably, per core:
 *   Armv8-M Mainline / Armv8.1-M (Cortex-M33, M55): MSPLIM, the core's stack-limit register.
 *     Any instruction that would move SP below it, and exception entry stacking below it,
 *     raises a UsageFault (CFSR.STKOF); nothing is written below the limit.  No RAM spent.
 *   Armv7-M (Cortex-M4, M7): an MPU region (PMSAv7) with no access, just below the stack
 *     (the linker script aligns it to its power-of-two size).  The first write into it is a
 *     MemManage fault.  A frame larger than the guard could step over it: the post-link
 *     check (generator/build/elfcheck.py) refuses an image whose largest frame is.
 *   Other cores: no guard (the post-link check says so in the memory report). */
#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
#define STACK_GUARD_MSPLIM 1
#elif defined(__ARM_ARCH_7M__) || defined(__ARM_ARCH_7EM__)
#define STACK_GUARD_MPU 1
#endif

#define SCB_SHCSR (*(volatile uint32_t *)0xE000ED24u)
#define SCB_SHCSR_MEMFAULTENA (1u << 16)    /* MemManage faults taken as MemManage, not HardFault */

#if STACK_GUARD_MPU
/* PMSAv7 MPU (Armv7-M ARM, B3.5) */
#define MPU_TYPE (*(volatile uint32_t *)0xE000ED90u)
#define MPU_CTRL (*(volatile uint32_t *)0xE000ED94u)
#define MPU_RNR  (*(volatile uint32_t *)0xE000ED98u)
#define MPU_RBAR (*(volatile uint32_t *)0xE000ED9Cu)
#define MPU_RASR (*(volatile uint32_t *)0xE000EDA0u)
#define MPU_TYPE_DREGION_Pos 8              /* number of regions, 0: no MPU */
#define MPU_CTRL_ENABLE      (1u << 0)
#define MPU_CTRL_PRIVDEFENA  (1u << 2)      /* the default memory map where no region matches */
#define MPU_RASR_ENABLE      (1u << 0)
#define MPU_RASR_SIZE_Pos    1              /* region size 2^(SIZE+1) bytes */
#define MPU_RASR_AP_NONE     (0u << 24)     /* no access, privileged or not */
#define MPU_RASR_XN          (1u << 28)     /* and no instruction fetch */

/* The guard region.  It takes the highest region number the MPU has: where regions overlap
 * the highest number wins, so a BSP region that covers the stack's RAM (hal_board_init may
 * map whole memories: cacheability, shareability) does not re-open the guard, and the BSP's
 * lower regions are left as they are.  Called after hal_board_init, so a BSP that programs
 * (or disables and re-enables) the MPU there cannot undo it; MPU_CTRL keeps the BSP's bits
 * and gains ENABLE and PRIVDEFENA (a BSP that ran the MPU without the default map as
 * background must now cover what it wants refused itself). */
static void stack_guard_mpu(void)
{
    uint32_t regions = (MPU_TYPE >> MPU_TYPE_DREGION_Pos) & 0xFFu;
    uint32_t base = (uint32_t)(uintptr_t)__stack_guard_start;
    uint32_t bytes = (uint32_t)((uint8_t *)__stack_guard_end - (uint8_t *)__stack_guard_start);
    if (regions == 0 || bytes == 0) return;             /* no MPU in this part: no guard */
    MPU_RNR = regions - 1u;
    MPU_RBAR = base;                                    /* aligned to its size (link.ld) */
    MPU_RASR = MPU_RASR_XN | MPU_RASR_AP_NONE | ((uint32_t)(__builtin_ctz(bytes) - 1) << MPU_RASR_SIZE_Pos)
               | MPU_RASR_ENABLE;
    MPU_CTRL |= MPU_CTRL_PRIVDEFENA | MPU_CTRL_ENABLE;
    /* MemManage enabled: an overflow is a MemManage fault (exception 4).  Left disabled, it
     * would escalate to HardFault, and a HardFault whose own stacking fails (it does here:
     * the guard is below SP) locks the core up.  UsageFault and BusFault stay disabled, so
     * those still escalate to HardFault as before. */
    SCB_SHCSR |= SCB_SHCSR_MEMFAULTENA;
    __asm__ volatile("dsb\n\tisb" ::: "memory");        /* the new map from the next instruction */
}
#endif

/* The BSP's hook, called first thing on reset, before .data and .bss are touched: the place
 * to bring up clocks and the external RAM that holds .data/.bss (SDRAM controller, PSRAM
 * chip select, memory-mapped QSPI, MPU attributes).  It runs on the stack of the vector
 * table (keep that stack in RAM that works out of reset: a "stack" region in the board
 * file) and must not rely on initialised or zeroed globals.  On Armv8-M MSPLIM already
 * guards its stack; on Armv7-M the MPU guard comes after it (stack_guard_mpu: its MPU
 * regions stay, region number MPU_TYPE.DREGION - 1 is ours).  Default: nothing (QEMU). */
void hal_board_init(void);
__attribute__((weak)) void hal_board_init(void) {}

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void)
{
#if STACK_GUARD_MSPLIM
    /* the limit first: hal_board_init runs guarded too */
    __asm__ volatile("msr msplim, %0" : : "r"(__stack_bottom) : "memory");
#endif
    hal_board_init();
#if STACK_GUARD_MPU
    stack_guard_mpu();
#endif
    memcpy(__ram_text_start, __ram_text_load, (size_t)((uint8_t *)__ram_text_end - (uint8_t *)__ram_text_start));
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

/* Faults: one dump on the console, then exit status 4 (docs/boards.md).
 *   needle: fault: hard fault (exception 3)
 *   needle: fault: r0=0x.. r1=0x.. r2=0x.. r3=0x..
 *   needle: fault: r12=0x.. lr=0x.. pc=0x.. xpsr=0x..
 *   needle: fault: cfsr=0x.. hfsr=0x.. mmfar=0x.. bfar=0x..
 * The registers are the ones the core stacked on entry (pc: the faulting instruction);
 * CFSR/HFSR say why, MMFAR/BFAR where (when CFSR marks them valid).
 * A stack overflow (the guard tripped) adds a line after the first:
 *   needle: fault: stack overflow (sp=0x.. at or below the stack's bottom 0x..): raise stack_bytes in the board file
 * and, when the core could not stack the registers (no room left: the usual case), says so
 * instead of printing the two register lines; the status registers stay reliable. */
#define FAULT_EXIT 4
#define SCB_CFSR  (*(volatile uint32_t *)0xE000ED28u)
#define SCB_HFSR  (*(volatile uint32_t *)0xE000ED2Cu)
#define SCB_MMFAR (*(volatile uint32_t *)0xE000ED34u)
#define SCB_BFAR  (*(volatile uint32_t *)0xE000ED38u)
#define SCB_CFSR_MSTKERR   (1u << 4)        /* MemManage fault while stacking on exception entry */
#define SCB_CFSR_MMARVALID (1u << 7)        /* MMFAR holds the faulting address */
#define SCB_CFSR_STKERR    (1u << 12)       /* BusFault while stacking on exception entry */
#define SCB_CFSR_STKOF     (1u << 20)       /* Armv8-M: SP went below its limit (MSPLIM) */
#define EXC_RETURN_SPSEL   (1u << 2)        /* the frame is on the process stack (PSP) */


/* Runs on the fault stack (Fault_Handler switched to it).  frame: SP at exception entry,
 * where the core stacked r0-r3, r12, lr, pc, xpsr if it could. */
void fault_dump(const uint32_t *frame, uint32_t ipsr, uint32_t exc_return) __attribute__((noreturn, used));
void fault_dump(const uint32_t *frame, uint32_t ipsr, uint32_t exc_return)
{
    static const char *const names[] = { "thread mode", "reset", "NMI", "hard fault",
                                         "memory management fault", "bus fault", "usage fault" };
    uint32_t cfsr = SCB_CFSR, sp = (uint32_t)(uintptr_t)frame;
    uint32_t bottom = (uint32_t)(uintptr_t)__stack_bottom, guard = (uint32_t)(uintptr_t)__stack_guard_start;
    int main_stack = !(exc_return & EXC_RETURN_SPSEL);
    /* Overflow: the limit check tripped (STKOF), or the entry SP or the faulting address lies
     * in the guard region below the stack. */
    int overflow = (cfsr & SCB_CFSR_STKOF) || (main_stack && sp >= guard && sp < bottom) ||
                   ((cfsr & SCB_CFSR_MMARVALID) && SCB_MMFAR >= guard && SCB_MMFAR < bottom);
    /* The frame is there unless stacking failed: a stacking fault, or an entry SP at or below
     * the stack's bottom (MSPLIM leaves SP at the limit and writes nothing below it). */
    int stacked = !(cfsr & (SCB_CFSR_MSTKERR | SCB_CFSR_STKERR)) && !(main_stack && sp <= bottom);
    unsigned exc = ipsr & 0x1FFu;
    hal_errf("needle: fault: %s (exception %u)\n", exc < 7 ? names[exc] : "unexpected exception", exc);
    if (overflow)
        hal_errf("needle: fault: stack overflow (sp=0x%x at or below the stack's bottom 0x%x): raise "
                   "stack_bytes in the board file\n", (unsigned)sp, (unsigned)bottom);
    if (stacked) {
        hal_errf("needle: fault: r0=0x%x r1=0x%x r2=0x%x r3=0x%x\n", frame[0], frame[1], frame[2], frame[3]);
        hal_errf("needle: fault: r12=0x%x lr=0x%x pc=0x%x xpsr=0x%x\n", frame[4], frame[5], frame[6], frame[7]);
    } else {
        hal_errf("needle: fault: the core could not stack r0-r3, r12, lr, pc, xpsr (no room): "
                   "only the status registers below are reliable\n");
    }
    hal_errf("needle: fault: cfsr=0x%x hfsr=0x%x mmfar=0x%x bfar=0x%x\n",
               (unsigned)cfsr, (unsigned)SCB_HFSR, (unsigned)SCB_MMFAR, (unsigned)SCB_BFAR);
    hal_exit(FAULT_EXIT);
}

/* Every fault and unexpected exception: the stacked frame (MSP or PSP, EXC_RETURN bit 2),
 * the exception number and EXC_RETURN go to fault_dump, which runs on its own stack
 * (__fault_stack_top, link.ld): the fault may be a stack overflow, with no room left on the
 * main stack.  On Armv8-M MSPLIM is cleared first, or the first push on the fault stack
 * (below the main stack's limit) would fault again.  Nothing here touches memory. */
__attribute__((naked)) void Fault_Handler(void)
{
    __asm__ volatile(
        "tst lr, #4\n\t"
        "ite eq\n\t"
        "mrseq r0, msp\n\t"
        "mrsne r0, psp\n\t"
        "mrs r1, ipsr\n\t"
        "mov r2, lr\n\t"
#if STACK_GUARD_MSPLIM
        "movs r3, #0\n\t"
        "msr msplim, r3\n\t"
#endif
        "movw r3, #:lower16:__fault_stack_top\n\t"
        "movt r3, #:upper16:__fault_stack_top\n\t"
        "mov sp, r3\n\t"
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
