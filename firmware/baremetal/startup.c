/* Cortex-M start-up: vector table, reset handler (copy .data, zero .bss, enable the FPU and
 * MVE), fault handlers that report through semihosting and exit with a status. */
#include <stdint.h>
#include <string.h>

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern uint32_t __stack_top[];

void hal_main(void) __attribute__((noreturn));
void hal_exit(int code) __attribute__((noreturn));
void hal_err(const char *s, size_t n);

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

static void fault(const char *what)
{
    hal_err(what, strlen(what));
    hal_exit(70);
}

void NMI_Handler(void) { fault("needle: error: NMI\n"); }
void HardFault_Handler(void) { fault("needle: error: hard fault\n"); }
void MemManage_Handler(void) { fault("needle: error: memory management fault\n"); }
void BusFault_Handler(void) { fault("needle: error: bus fault\n"); }
void UsageFault_Handler(void) { fault("needle: error: usage fault\n"); }
void Default_Handler(void) { fault("needle: error: unexpected exception\n"); }

typedef void (*vector)(void);
__attribute__((section(".vectors"), used)) const vector vector_table[16] = {
    (vector)(uintptr_t)__stack_top, Reset_Handler, NMI_Handler, HardFault_Handler,
    MemManage_Handler, BusFault_Handler, UsageFault_Handler, 0, 0, 0, 0,
    Default_Handler /* SVCall */, Default_Handler /* DebugMon */, 0,
    Default_Handler /* PendSV */, Default_Handler /* SysTick */,
};
