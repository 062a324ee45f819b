/* UART driver (uart_driver.h) for the Arm PL011 (register map: pl011_uart.h): RP2350's UART0,
 * QEMU's lm3s6965evb.  The UART's reference clock (UARTCLK: clk_peri on RP2350) is
 * NEEDLE_UART_CLOCK_HZ; on a real chip the BSP has it running, the UART out of reset and its
 * pins routed before main (the board file says how). */
#include "pl011_uart.h"
#include "uart_driver.h"

#define UART ((pl011_uart *)(uintptr_t)(NEEDLE_UART_BASE))

/* Baud divisor UARTCLK / (16 * baud) as 16.6 fixed point, rounded to nearest: 64ths of it are
 * 4 * UARTCLK / baud (computed in 64 bits at compile time: no run-time division). */
#define DIV_64THS ((8ull * NEEDLE_UART_CLOCK_HZ / UART_BAUD + 1u) / 2u)
#define IBRD ((uint32_t)(DIV_64THS >> 6))
#define FBRD ((uint32_t)(DIV_64THS & 63u))
_Static_assert(IBRD >= 1 && IBRD <= 0xFFFF, "PL011 IBRD out of range: check [uart] clock_hz");

void uart_init(void)
{
    /* The TRM's order: disable, let a byte in flight leave, set the divisor, then LCR_H
     * (whose write latches IBRD/FBRD), then enable.  The FIFOs stay off (FEN = 0, as out of
     * reset: one byte each way, "character mode"): polled at 115200 baud the core keeps up
     * with a typed line, and changing FEN empties the receive side, which under QEMU
     * (-serial stdio delivers the line from time zero, before this runs) loses the bytes
     * already there: turning FEN on here dropped one byte of a line in about 30 runs. */
    UART->cr = 0;
    while (UART->fr & PL011_FR_BUSY) {}
    UART->ibrd = IBRD;
    UART->fbrd = FBRD;
    UART->lcr_h = PL011_LCR_H_WLEN_8;
    UART->cr = PL011_CR_UARTEN | PL011_CR_TXE | PL011_CR_RXE;
}

void uart_put(uint8_t c)
{
    while (UART->fr & PL011_FR_TXFF) {}            /* with the FIFOs off: the holding register */
    UART->dr = c;
}

void uart_drain(void) { while (UART->fr & PL011_FR_BUSY) {} }
int uart_rx_ready(void) { return !(UART->fr & PL011_FR_RXFE); }

/* A byte with a framing or parity error (noise while a cable is plugged in) is taken as it
 * is: the command line that holds it is then wrong, and the CLI says so. */
uint8_t uart_get(void)
{
    while (!uart_rx_ready()) {}
    return (uint8_t)(UART->dr & PL011_DR_DATA);
}
