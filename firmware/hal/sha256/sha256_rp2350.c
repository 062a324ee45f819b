/* hal_sha256 on the RP2350's SHA-256 accelerator (board file sha256 = "rp2350").  It replaces
 * the engine's weak software hash for the boot-time archive check (needle_boot).
 *
 * The block (RP2350 datasheet, "SHA-256 accelerator"; register layout as in the pico-sdk's
 * hardware/regs/sha256.h, addresses from its addressmap.h), at 0x400F8000:
 *   CSR   +0x00  START (bit 0, write 1: load the initial hash, clear the counters),
 *                WDATA_RDY (bit 1), SUM_VLD (bit 2), ERR_WDATA_NOT_RDY (bit 4, write 1 to
 *                clear), DMA_SIZE (bits 9:8), BSWAP (bit 12: each 32-bit word is byte-swapped
 *                before the core sees it, so a little-endian word of message bytes enters
 *                most significant byte first, as SHA-256 wants)
 *   WDATA +0x04  the message, 16 words a block; after the 16th WDATA_RDY drops while the
 *                block is digested
 *   SUM0..7 +0x08..+0x24  the hash words H0..H7, valid when SUM_VLD is set
 * The core does no padding: software appends 0x80, zeros and the 64-bit bit length itself.
 * The block is held in reset out of boot: RESETS (0x40020000) RESET bit 17 (SHA256) is
 * cleared, then RESET_DONE bit 17 awaited.
 *
 * Built and checked here (compile, link, the map names this object), never run: no RP2350 is
 * attached and QEMU has no model of it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hal.h"

#define SHA256_BASE 0x400F8000u
#define SHA256_CSR   (*(volatile uint32_t *)(SHA256_BASE + 0x00u))
#define SHA256_WDATA (*(volatile uint32_t *)(SHA256_BASE + 0x04u))
#define SHA256_SUM(i) (*(volatile uint32_t *)(SHA256_BASE + 0x08u + 4u * (uint32_t)(i)))
#define CSR_START     (1u << 0)
#define CSR_WDATA_RDY (1u << 1)
#define CSR_SUM_VLD   (1u << 2)
#define CSR_ERR_WDATA (1u << 4)
#define CSR_DMA_32BIT (2u << 8)
#define CSR_BSWAP     (1u << 12)

#define RESETS_BASE 0x40020000u
#define RESETS_RESET_CLR (*(volatile uint32_t *)(RESETS_BASE + 0x3000u + 0x0u))  /* atomic clear alias */
#define RESETS_RESET_DONE (*(volatile uint32_t *)(RESETS_BASE + 0x8u))
#define RESET_SHA256 (1u << 17)

/* One 64-byte block of message bytes, as 16 little-endian words (BSWAP turns each around). */
static void put_block(const uint8_t *p)
{
    while (!(SHA256_CSR & CSR_WDATA_RDY)) {}
    for (unsigned i = 0; i < 16; i++) {
        uint32_t w;
        memcpy(&w, p + 4u * i, 4);       /* the archive is 64-byte aligned; a copy keeps any buffer safe */
        SHA256_WDATA = w;
    }
}

void hal_sha256(const uint8_t *data, size_t n, uint8_t out[32])
{
    RESETS_RESET_CLR = RESET_SHA256;
    while (!(RESETS_RESET_DONE & RESET_SHA256)) {}
    SHA256_CSR = CSR_BSWAP | CSR_DMA_32BIT | CSR_ERR_WDATA;   /* byte order; clear a stale error */
    SHA256_CSR = CSR_BSWAP | CSR_DMA_32BIT | CSR_START;
    size_t full = n & ~(size_t)63;
    for (size_t i = 0; i < full; i += 64) put_block(data + i);
    uint8_t tail[128] = { 0 };           /* the padding: 0x80, zeros, the length in bits (big-endian) */
    size_t rest = n - full, len = rest + 9 <= 64 ? 64 : 128;
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    uint64_t bits = (uint64_t)n * 8u;
    for (unsigned i = 0; i < 8; i++) tail[len - 1 - i] = (uint8_t)(bits >> (8 * i));
    for (size_t i = 0; i < len; i += 64) put_block(tail + i);
    while (!(SHA256_CSR & CSR_SUM_VLD)) {}
    for (unsigned i = 0; i < 8; i++) {
        uint32_t h = SHA256_SUM(i);
        out[4 * i] = (uint8_t)(h >> 24); out[4 * i + 1] = (uint8_t)(h >> 16);
        out[4 * i + 2] = (uint8_t)(h >> 8); out[4 * i + 3] = (uint8_t)h;
    }
}
