/* hal_sha256 on the STM32H7's HASH processor (board file sha256 = "stm32h7"; the STM32H750
 * has one).  It replaces the engine's weak software hash for the boot-time archive check
 * (needle_boot), over the QSPI partition the archive lives in.
 *
 * The peripheral (RM0433, "Hash processor (HASH)"; addresses and bits as in ST's CMSIS header
 * stm32h750xx.h): HASH at 0x48021400 (D2 AHB2), its clock RCC_AHB2ENR (0x58024400 + 0xDC)
 * bit 5 HASHEN.
 *   CR  +0x00  INIT (bit 2: start a new digest), DATATYPE (bits 5:4; 0b10: 8-bit data, each
 *              word byte-swapped, so little-endian words of message bytes hash as the byte
 *              string), MODE (bit 6: 0, hash), ALGO (bits 18 and 7; both set: SHA-256)
 *   DIN +0x04  the message, a word at a time (the peripheral pads it itself)
 *   STR +0x08  NBLW (bits 4:0: valid bits of the last word written, 0 for all 32), DCAL
 *              (bit 8: pad and compute the final digest)
 *   SR  +0x24  DINIS (bit 0), DCIS (bit 1: digest ready), BUSY (bit 3)
 *   HR0..HR7  +0x310..+0x32C  the digest words H0..H7 (big-endian bytes of the hash)
 *
 * Built and checked here (compile, link, the map names this object), never run: no
 * STM32H750B-DK is attached and QEMU 7.2 has no STM32H7. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hal.h"

#define RCC_AHB2ENR (*(volatile uint32_t *)(0x58024400u + 0xDCu))
#define RCC_AHB2ENR_HASHEN (1u << 5)

#define HASH_BASE 0x48021400u
#define HASH_CR  (*(volatile uint32_t *)(HASH_BASE + 0x00u))
#define HASH_DIN (*(volatile uint32_t *)(HASH_BASE + 0x04u))
#define HASH_STR (*(volatile uint32_t *)(HASH_BASE + 0x08u))
#define HASH_SR  (*(volatile uint32_t *)(HASH_BASE + 0x24u))
#define HASH_HR(i) (*(volatile uint32_t *)(HASH_BASE + 0x310u + 4u * (uint32_t)(i)))
#define CR_INIT        (1u << 2)
#define CR_DATATYPE_8  (2u << 4)
#define CR_ALGO_SHA256 ((1u << 18) | (1u << 7))
#define STR_DCAL       (1u << 8)
#define SR_DCIS        (1u << 1)
#define SR_BUSY        (1u << 3)

void hal_sha256(const uint8_t *data, size_t n, uint8_t out[32])
{
    RCC_AHB2ENR |= RCC_AHB2ENR_HASHEN;
    (void)RCC_AHB2ENR;                    /* read back: the clock is on before the first access */
    HASH_CR = CR_ALGO_SHA256 | CR_DATATYPE_8 | CR_INIT;
    size_t words = n / 4;
    for (size_t i = 0; i < words; i++) {
        uint32_t w;
        memcpy(&w, data + 4 * i, 4);
        while (HASH_SR & SR_BUSY) {}      /* the input FIFO takes a block while one is digested */
        HASH_DIN = w;
    }
    unsigned rest = (unsigned)(n % 4);
    if (rest) {
        uint32_t w = 0;
        memcpy(&w, data + 4 * words, rest);
        while (HASH_SR & SR_BUSY) {}
        HASH_DIN = w;
    }
    HASH_STR = 8u * rest;                 /* NBLW: valid bits of the last word (0: all 32) */
    HASH_STR = 8u * rest | STR_DCAL;
    while (!(HASH_SR & SR_DCIS)) {}
    for (unsigned i = 0; i < 8; i++) {
        uint32_t h = HASH_HR(i);
        out[4 * i] = (uint8_t)(h >> 24); out[4 * i + 1] = (uint8_t)(h >> 16);
        out[4 * i + 2] = (uint8_t)(h >> 8); out[4 * i + 3] = (uint8_t)h;
    }
}
