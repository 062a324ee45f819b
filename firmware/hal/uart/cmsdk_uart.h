/* Arm CMSDK APB UART (Cortex-M System Design Kit, ARM DDI 0479): the register map the CMSDK
 * driver (uart_cmsdk.c) drives, polled, no interrupts.
 *
 * UART0 of the machines our watches model (the board file's [uart] base, clock_hz):
 *   MPS2 AN385/AN386/AN500 (QEMU mps2-an385/-an386/-an500)   0x40004000, PCLK 25 MHz (= CPU)
 *   MPS3 AN547 (QEMU mps3-an547), secure alias               0x59303000 (non-secure 0x49303000),
 *                                                            PCLK 25 MHz, CPU 32 MHz
 * (QEMU 7.2 hw/arm/mps2.c and hw/arm/mps2-tz.c: apb_periph_frq, sysclk_frq.)
 * A board with another UART adds its own driver (uart_driver.h). */
#ifndef NEEDLE_CMSDK_UART_H
#define NEEDLE_CMSDK_UART_H

#include <stdint.h>

typedef struct {
    volatile uint32_t data;        /* 0x00 DATA: write sends a byte, read takes the received one */
    volatile uint32_t state;       /* 0x04 STATE: bit 0 TX buffer full, bit 1 RX buffer full */
    volatile uint32_t ctrl;        /* 0x08 CTRL: bit 0 TX enable, bit 1 RX enable */
    volatile uint32_t intstatus;   /* 0x0C INTSTATUS (write 1 to clear) */
    volatile uint32_t bauddiv;     /* 0x10 BAUDDIV: PCLK / baud rate, at least 16 */
} cmsdk_uart;

#define CMSDK_UART_STATE_TX_FULL 0x1u
#define CMSDK_UART_STATE_RX_FULL 0x2u
#define CMSDK_UART_CTRL_TX_EN    0x1u
#define CMSDK_UART_CTRL_RX_EN    0x2u

_Static_assert(sizeof(cmsdk_uart) == 0x14, "CMSDK UART register map");

#endif
