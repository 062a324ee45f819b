/* Cortex-M start-up: vector table, reset handler (copy .data, zero .bss, enable the FPU and
 * MVE), a fault handler that dumps the stacked registers and the fault status registers on
 * the console (whichever HAL: semihosting or UART) and exits with status 4. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "hal.h"

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __stack_top[];

void hal_main(void) __attribute__((noreturn));
void hal_exit(int code) __attribute__((noreturn));

void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void)
{
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

typedef void (*vector)(void);
__attribute__((section(".vectors"), used)) const vector vector_table[16] = {
    (vector)(uintptr_t)__stack_top, Reset_Handler, Fault_Handler /* NMI */, Fault_Handler /* HardFault */,
    Fault_Handler /* MemManage */, Fault_Handler /* BusFault */, Fault_Handler /* UsageFault */, 0, 0, 0, 0,
    Fault_Handler /* SVCall */, Fault_Handler /* DebugMon */, 0,
    Fault_Handler /* PendSV */, Fault_Handler /* SysTick */,
};
