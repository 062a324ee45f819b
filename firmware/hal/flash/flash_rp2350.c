/* hal_flash_program on the RP2350 (board file slots.flash_driver = "rp2350"), through the boot
 * ROM's flash functions.  baremetal/mcuboot.c calls it to write MCUboot's image_ok.
 *
 * The ROM (RP2350 datasheet, "Bootrom APIs": "Locating the API functions" and the function
 * listings):
 *   0x00000010  'M', 'u', 2: the magic that says the fixed words below are valid
 *   0x00000016  a 16-bit pointer to rom_table_lookup(code, mask): code is two characters,
 *               c1 | c2 << 8, mask 0x0004 the Arm Secure entry (the boot ROM starts this
 *               firmware Secure and nothing here changes that)
 *   'I','F'  connect_internal_flash()  the QSPI pads back to the QMI
 *   'E','X'  flash_exit_xip()          the flash device back to serial commands (the QMI keeps
 *                                      a slow basic XIP mode meanwhile)
 *   'R','P'  flash_range_program(offset, data, count)  offset from the start of flash, offset
 *                                      and count 256-byte (page) multiples, nothing checked
 *   'F','C'  flash_flush_cache()       invalidate the whole XIP cache, so reads see the write
 * During the program operation the QMI is in direct mode and any XIP access (flash at
 * 0x10000000, the PSRAM on chip select 1 at 0x11000000) is a bus error, so that sequence runs
 * from on-chip SRAM (section .ram_text: templates/link.ld.j2 places it in the board's stack
 * region, startup.c copies it there) with its data on the SRAM stack and interrupts masked.
 * Around it, three things the ROM calls disturb:
 *   the XIP cache holds this firmware's writes to PSRAM (.data, .bss: the engine's state) and
 *       is write-back: flash_flush_cache() would drop them, so every line is cleaned first
 *       (XIP cache maintenance, datasheet "Cache maintenance": a write to 0x18000000 + offset
 *       whose low three bits are the operation, 1 = clean by set/way; over one cache-sized
 *       span at the top of the 64 MB XIP space, addresses that alias no cached data, the
 *       workaround of erratum RP2350-E11)
 *   the QMI's window registers: flash_exit_xip() and the ROM's XIP set-up rewrite both chip
 *       selects' timing and formats, which for chip select 1 are the BSP's PSRAM settings, and
 *       for chip select 0 the fast read mode the boot ROM found: all ten (M0/M1 TIMING, RFMT,
 *       RCMD, WFMT, WCMD at QMI 0x400D0000 + 0x0C..0x30) are saved and written back after
 *   the 256-byte page: flash_range_program writes whole pages, so the bytes to write go into
 *       a page of 0xFF (programming 0xFF leaves a NOR flash byte as it is)
 * This restores the read mode by register value, so it assumes the boot ROM's XIP modes (a
 * command prefix on every read, no continuous-read mode): what the ROM and a bootloader that
 * leaves the QMI alone set up.
 *
 * Built and checked here (compiled, linked into rp2350-pico-plus2-mcuboot, the map names this
 * object), never run: no RP2350 is attached and QEMU has no model of it. */
#include <stddef.h>
#include <stdint.h>

#include "hal.h"

#define XIP_BASE 0x10000000u
#define XIP_FLASH_END 0x11000000u           /* chip select 0's window: 16 MB */
#define PAGE 256u

#define ROM_MAGIC_ADDR 0x00000010u
#define ROM_MAGIC 0x02754Du                 /* 'M', 'u', 2 */
#define ROM_TABLE_LOOKUP_ADDR 0x00000016u
#define ROM_FUNC_ARM_SECURE 0x0004u
#define ROM_CODE(c1, c2) ((uint32_t)(c1) | (uint32_t)(c2) << 8)

#define XIP_MAINTENANCE 0x18000000u
#define XIP_CACHE_BYTES 0x4000u             /* 16 KB */
#define XIP_CACHE_LINE 8u
#define XIP_SPACE_BYTES 0x04000000u
#define XIP_CLEAN_BY_SET_WAY 1u

#define QMI_BASE 0x400D0000u
#define QMI_WINDOW_FIRST 0x0Cu              /* M0_TIMING */
#define QMI_WINDOW_REGS 10u                 /* M0 and M1: TIMING, RFMT, RCMD, WFMT, WCMD */

typedef void *(*rom_lookup_fn)(uint32_t code, uint32_t mask);
typedef void (*rom_void_fn)(void);
typedef void (*rom_program_fn)(uint32_t offset, const uint8_t *data, size_t count);

struct rom_flash {
    rom_void_fn connect, exit_xip, flush_cache;
    rom_program_fn program;
};

/* The write itself, from SRAM: nothing here fetches from or touches XIP flash or PSRAM. */
__attribute__((section(".ram_text"), noinline, long_call))
static void program_page(const struct rom_flash *rom, uint32_t offset, const uint8_t *page)
{
    uint32_t primask;
    __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask) : : "memory");
    for (uint32_t at = XIP_SPACE_BYTES - XIP_CACHE_BYTES; at < XIP_SPACE_BYTES; at += XIP_CACHE_LINE)
        *(volatile uint8_t *)(XIP_MAINTENANCE + at + XIP_CLEAN_BY_SET_WAY) = 0;
    __asm__ volatile("dsb\n\tisb" : : : "memory");
    volatile uint32_t *window = (volatile uint32_t *)(QMI_BASE + QMI_WINDOW_FIRST);
    uint32_t saved[QMI_WINDOW_REGS];
    for (unsigned i = 0; i < QMI_WINDOW_REGS; i++) saved[i] = window[i];
    rom->connect();
    rom->exit_xip();
    rom->program(offset, page, PAGE);
    rom->flush_cache();
    for (unsigned i = 0; i < QMI_WINDOW_REGS; i++) window[i] = saved[i];
    __asm__ volatile("dsb\n\tisb\n\tmsr primask, %0" : : "r"(primask) : "memory");
}

/* A pointer to the ROM's fixed words.  GCC takes a constant address in the first 4 KB for a
 * null-pointer dereference (-Warray-bounds); the empty asm makes it an opaque value. */
static const volatile void *rom_word(uintptr_t addr)
{
    __asm__("" : "+r"(addr));
    return (const volatile void *)addr;
}

const char *hal_flash_program(uint32_t addr, const void *data, size_t n)
{
    if (addr < XIP_BASE || addr >= XIP_FLASH_END || n == 0 || n > PAGE || (addr % PAGE) + n > PAGE)
        return "hal_flash_program: the bytes must lie within one 256-byte page of the QSPI flash "
               "(0x10000000..0x11000000)";
    if ((*(const volatile uint32_t *)rom_word(ROM_MAGIC_ADDR) & 0xFFFFFFu) != ROM_MAGIC)
        return "no RP2350 boot ROM found (the magic 'M','u',2 at 0x10)";
    rom_lookup_fn lookup = (rom_lookup_fn)(uintptr_t)*(const volatile uint16_t *)rom_word(ROM_TABLE_LOOKUP_ADDR);
    struct rom_flash rom = {
        (rom_void_fn)lookup(ROM_CODE('I', 'F'), ROM_FUNC_ARM_SECURE),
        (rom_void_fn)lookup(ROM_CODE('E', 'X'), ROM_FUNC_ARM_SECURE),
        (rom_void_fn)lookup(ROM_CODE('F', 'C'), ROM_FUNC_ARM_SECURE),
        (rom_program_fn)lookup(ROM_CODE('R', 'P'), ROM_FUNC_ARM_SECURE),
    };
    if (!rom.connect || !rom.exit_xip || !rom.flush_cache || !rom.program)
        return "the boot ROM's table lacks a flash function (connect_internal_flash, flash_exit_xip, "
               "flash_range_program or flash_flush_cache)";
    uint8_t page[PAGE];                      /* on the SRAM stack, never in PSRAM */
    for (unsigned i = 0; i < PAGE; i++) page[i] = 0xFFu;
    const uint8_t *bytes = data;
    for (size_t i = 0; i < n; i++) page[addr % PAGE + i] = bytes[i];
    program_page(&rom, (addr - XIP_BASE) & ~(PAGE - 1u), page);
    return NULL;
}
