/* Arm PrimeCell UART (PL011, ARM DDI 0183): the registers the PL011 driver (uart_pl011.c)
 * uses, polled, no interrupts, no DMA.
 *
 * UART0 of the chips and machines it runs on (the board file's [uart] base):
 *   RP2350 (Raspberry Pi)                                   0x40070000 (UART1: 0x40078000)
 *   QEMU lm3s6965evb (Stellaris; QEMU's pl011_luminary)     0x4000C000
 * A board with another UART adds its own driver (uart_driver.h). */
#ifndef NEEDLE_PL011_UART_H
#define NEEDLE_PL011_UART_H

#include <stdint.h>

typedef struct {
    volatile uint32_t dr;          /* 0x000 UARTDR: write sends a byte; read takes one, bits 11:8 its errors */
    volatile uint32_t rsr;         /* 0x004 UARTRSR/ECR: receive status / error clear */
    uint32_t reserved0[4];         /* 0x008-0x014 */
    volatile uint32_t fr;          /* 0x018 UARTFR: flags */
    uint32_t reserved1;            /* 0x01C */
    volatile uint32_t ilpr;        /* 0x020 UARTILPR: IrDA low-power counter */
    volatile uint32_t ibrd;        /* 0x024 UARTIBRD: baud divisor, integer part (16 bits) */
    volatile uint32_t fbrd;        /* 0x028 UARTFBRD: baud divisor, fraction in 64ths (6 bits) */
    volatile uint32_t lcr_h;       /* 0x02C UARTLCR_H: line control; writing it latches IBRD/FBRD */
    volatile uint32_t cr;          /* 0x030 UARTCR: control */
} pl011_uart;

#define PL011_FR_BUSY      (1u << 3)    /* still sending: the TX FIFO or the shift register holds data */
#define PL011_FR_RXFE      (1u << 4)    /* receive FIFO (FIFOs off: holding register) empty */
#define PL011_FR_TXFF      (1u << 5)    /* transmit FIFO (FIFOs off: holding register) full */
#define PL011_LCR_H_FEN    (1u << 4)    /* FIFOs on (16 bytes each way on QEMU, 32 on RP2350); the
                                           driver leaves them off: uart_pl011.c says why */
#define PL011_LCR_H_WLEN_8 (3u << 5)    /* 8 data bits (no parity, 1 stop bit: the other bits 0) */
#define PL011_CR_UARTEN    (1u << 0)
#define PL011_CR_TXE       (1u << 8)
#define PL011_CR_RXE       (1u << 9)
#define PL011_DR_DATA      0xFFu        /* the byte; bits 11:8 are its framing/parity/break/overrun flags */

_Static_assert(sizeof(pl011_uart) == 0x34, "PL011 register map");

#endif
