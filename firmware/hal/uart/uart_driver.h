/* The register-level half of the UART console: hal_uart.c (console, command line, exit) is
 * the same on every board and calls only these; one small driver per UART kind implements
 * them, chosen by the board file's [uart] kind (generator/build/boards.py, hal_sources):
 *   uart_cmsdk.c  Arm CMSDK APB UART: QEMU's MPS2/MPS3 machines (watch-m4-uart, watch-m55-uart)
 *   uart_pl011.c  Arm PrimeCell PL011: RP2350 (rp2350-pico-plus2), QEMU's lm3s6965evb
 * A board with another UART IP adds uart_<kind>.c here (and the kind to boards.py).
 * Polled, no interrupts; the driver reads NEEDLE_UART_BASE and NEEDLE_UART_CLOCK_HZ. */
#ifndef NEEDLE_UART_DRIVER_H
#define NEEDLE_UART_DRIVER_H

#include <stdint.h>

#ifndef NEEDLE_UART_BASE
#error "NEEDLE_UART_BASE: the board file's [uart] base (SConstruct passes it)"
#endif
#ifndef NEEDLE_UART_CLOCK_HZ
#error "NEEDLE_UART_CLOCK_HZ: the board file's [uart] clock_hz (SConstruct passes it)"
#endif

#define UART_BAUD 115200u       /* 8 data bits, no parity, 1 stop bit */

void uart_init(void);           /* UART_BAUD from NEEDLE_UART_CLOCK_HZ, transmitter and receiver on */
void uart_put(uint8_t c);       /* waits for room in the transmitter */
void uart_drain(void);          /* waits until every byte put so far has left */
int uart_rx_ready(void);        /* nonzero when a received byte waits */
uint8_t uart_get(void);         /* waits for a received byte */

#endif
