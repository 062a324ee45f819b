/* The firmware confirms its own MCUboot image, and only once its archive check has passed.
 *
 * An update arrives in the secondary slot and is marked for a test swap (mcumgr image test,
 * smpmgr, or MCUboot's serial recovery); at the next reset MCUboot swaps it into the primary
 * slot and boots it once.  Unless the running image then writes image_ok in the primary
 * slot's trailer, the reset after that swaps the previous image back.  needle_boot() (the
 * generated engine) calls needle_image_confirm() after the archive's tag, header hash and, on
 * a partition board, the SHA-256 of every archive byte all matched: an update whose archive
 * is missing or different never confirms, so MCUboot reverts it (docs/devices.md, "Updates in
 * the field").  A failed check is reported by the caller, as on any board.
 *
 * The trailer, read from MCUboot's design document ("Image trailer", swap modes): the last
 * bytes of the slot, each flag in a field of BOOT_MAX_ALIGN bytes (the flag byte first, the
 * rest erased), the magic in the last field, at that field's end:
 *
 *     ... | swap info | copy done | image ok | magic |   <- end of the slot
 *
 *   BOOT_MAX_ALIGN  max(8, the flash's write alignment): imgtool's default, and the value the
 *                   bootloader must be built with
 *   magic           16 bytes.  With BOOT_MAX_ALIGN 8, the fixed pattern below; otherwise
 *                   BOOT_MAX_ALIGN as a little-endian 16-bit number, then a fixed 14 bytes
 *   image ok        0x01 confirmed, 0xff (erased) not yet
 * The primary slot's trailer is in one of three states: erased (the image was flashed there
 * directly: MCUboot boots it as it is, nothing to confirm), magic good with image ok erased
 * (a test swap: confirm), magic good with image ok set (confirmed already).  Anything else is
 * a damaged trailer, left alone and reported.  Confirming is one write of the flash's write
 * alignment at the image-ok field: 0x01 and erased padding, as MCUboot itself writes it.
 *
 * Where the slot is comes from the board file's [slots] (generator/build/boards.py,
 * hal_defines): NEEDLE_MCUBOOT_PRIMARY_END is the primary slot's end address (origin +
 * length), NEEDLE_MCUBOOT_ALIGN the flash's write alignment (slots.align).  The trailer is
 * read through the memory map (execute-in-place flash) and written through
 * hal_flash_program(), which the board's flash driver provides (slots.flash_driver:
 * firmware/hal/flash/flash_<kind>.c); the weak default below refuses. */
#include <stddef.h>
#include <stdint.h>

#include "hal.h"

#if !defined(NEEDLE_MCUBOOT_PRIMARY_END) || !defined(NEEDLE_MCUBOOT_ALIGN)
#error "NEEDLE_MCUBOOT_PRIMARY_END and NEEDLE_MCUBOOT_ALIGN come from the board file's [slots]"
#endif

#define ERASED 0xFFu
#define IMAGE_OK_SET 0x01u
#define MAGIC_BYTES 16u
#define MAX_ALIGN (NEEDLE_MCUBOOT_ALIGN > 8u ? NEEDLE_MCUBOOT_ALIGN : 8u)
#define MAGIC_FIELD ((MAGIC_BYTES + MAX_ALIGN - 1u) / MAX_ALIGN * MAX_ALIGN)
#define IMAGE_OK_ADDR (NEEDLE_MCUBOOT_PRIMARY_END - MAGIC_FIELD - MAX_ALIGN)
#define MAGIC_ADDR (NEEDLE_MCUBOOT_PRIMARY_END - MAGIC_BYTES)

_Static_assert(NEEDLE_MCUBOOT_ALIGN >= 1u && NEEDLE_MCUBOOT_ALIGN <= 32u &&
               (NEEDLE_MCUBOOT_ALIGN & (NEEDLE_MCUBOOT_ALIGN - 1u)) == 0u,
               "slots.align is a power of two from 1 to 32 (imgtool --align)");

/* One piece of a console line (standard error). */
static void put(const char *s)
{
    size_t n = 0;
    while (s[n]) n++;
    hal_err(s, n);
}

/* The 16 bytes at the end of a trailer that MCUboot recognises as its own. */
static void expected_magic(uint8_t magic[MAGIC_BYTES])
{
    static const uint8_t align8[MAGIC_BYTES] = { 0x77, 0xc2, 0x95, 0xf3, 0x60, 0xd2, 0xef, 0x7f,
                                                 0x35, 0x52, 0x50, 0x0f, 0x2c, 0xb6, 0x79, 0x80 };
    static const uint8_t tail[MAGIC_BYTES - 2] = { 0x2d, 0xe1, 0x5d, 0x29, 0x41, 0x0b, 0x8d,
                                                   0x77, 0x67, 0x9c, 0x11, 0x0f, 0x1f, 0x8a };
    for (unsigned i = 0; i < MAGIC_BYTES; i++)
        magic[i] = MAX_ALIGN == 8u ? align8[i] : i < 2 ? (uint8_t)(MAX_ALIGN >> (8 * i)) : tail[i - 2];
}

/* The weak default: no flash driver, so nothing is written and the image stays unconfirmed. */
const char *hal_flash_program(uint32_t addr, const void *data, size_t n) __attribute__((weak));
const char *hal_flash_program(uint32_t addr, const void *data, size_t n)
{
    (void)addr; (void)data; (void)n;
    return "this board has no flash driver (hal_flash_program; board file slots.flash_driver)";
}

int mcuboot_confirm(const char **why)
{
    const volatile uint8_t *trailer = (const volatile uint8_t *)(uintptr_t)MAGIC_ADDR;
    uint8_t magic[MAGIC_BYTES];
    expected_magic(magic);
    int good = 1, erased = 1;
    for (unsigned i = 0; i < MAGIC_BYTES; i++) {
        good &= trailer[i] == magic[i];
        erased &= trailer[i] == ERASED;
    }
    uint8_t image_ok = *(const volatile uint8_t *)(uintptr_t)IMAGE_OK_ADDR;
    if (erased) return MCUBOOT_NOTHING;             /* flashed in place, not swapped in */
    if (!good) {
        *why = "the primary slot's trailer has no MCUboot magic (damaged, or the bootloader's "
               "BOOT_MAX_ALIGN is not max(8, slots.align))";
        return MCUBOOT_DAMAGED;
    }
    if (image_ok == IMAGE_OK_SET) return MCUBOOT_NOTHING;   /* confirmed already */
    if (image_ok != ERASED) {
        *why = "the primary slot's trailer holds an image_ok that is neither set nor erased";
        return MCUBOOT_DAMAGED;
    }
    uint8_t flag[NEEDLE_MCUBOOT_ALIGN];
    flag[0] = IMAGE_OK_SET;
    for (unsigned i = 1; i < NEEDLE_MCUBOOT_ALIGN; i++) flag[i] = ERASED;
    *why = hal_flash_program(IMAGE_OK_ADDR, flag, sizeof flag);
    if (!*why && *(const volatile uint8_t *)(uintptr_t)IMAGE_OK_ADDR != IMAGE_OK_SET)
        *why = "image_ok reads back unset after programming it";
    return *why ? MCUBOOT_NOT_WRITTEN : MCUBOOT_CONFIRMED;
}

void needle_image_confirm(void)
{
    const char *why = NULL;
    int state = mcuboot_confirm(&why);
    if (state == MCUBOOT_CONFIRMED)
        put("needle: confirmed this MCUboot image (its archive check passed): MCUboot keeps it\n");
    if (state < 0) {
        put("needle: warning: this MCUboot image is not confirmed: ");
        put(why);
        put(state == MCUBOOT_NOT_WRITTEN ? "; MCUboot swaps the previous image back at the next reset\n" : "\n");
    }
}
