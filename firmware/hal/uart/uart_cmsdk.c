/* UART driver (uart_driver.h) for the Arm CMSDK APB UART of QEMU's MPS2/MPS3 machines
 * (register map: cmsdk_uart.h).  It has a one-byte buffer each way and no "transmitter
 * busy" flag: a byte has left once the buffer is free again (QEMU sends it at once). */
#include "cmsdk_uart.h"
#include "uart_driver.h"

#define UART ((cmsdk_uart *)(uintptr_t)(NEEDLE_UART_BASE))
#define BAUDDIV (NEEDLE_UART_CLOCK_HZ / UART_BAUD)
_Static_assert(BAUDDIV >= 16, "the CMSDK UART needs BAUDDIV >= 16: [uart] clock_hz too low for 115200 baud");

void uart_init(void)
{
    UART->ctrl = 0;                                    /* BAUDDIV may change only while disabled */
    UART->bauddiv = BAUDDIV;
    UART->ctrl = CMSDK_UART_CTRL_TX_EN | CMSDK_UART_CTRL_RX_EN;
}

void uart_put(uint8_t c)
{
    while (UART->state & CMSDK_UART_STATE_TX_FULL) {}
    UART->data = c;
}

void uart_drain(void) { while (UART->state & CMSDK_UART_STATE_TX_FULL) {} }
int uart_rx_ready(void) { return (UART->state & CMSDK_UART_STATE_RX_FULL) != 0; }

uint8_t uart_get(void)
{
    while (!uart_rx_ready()) {}
    return (uint8_t)(UART->data & 0xFFu);
}
