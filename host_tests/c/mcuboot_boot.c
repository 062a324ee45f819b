/* mcuboot_boot.c -- the firmware's boot check and MCUboot confirmation, built for the host
 * (host_tests/test_mcuboot.py): the generated engine's needle_boot() (tag, header hash, the
 * SHA-256 of every archive byte) and firmware/baremetal/mcuboot.c, unchanged, over a simulated
 * flash.
 *
 *   the primary slot   SLOT_BYTES mapped at its address on the board (it ends at
 *                      NEEDLE_MCUBOOT_PRIMARY_END), so mcuboot.c reads the trailer where it
 *                      would through execute-in-place flash; loaded from SLOT_IN
 *   the archive        needle_cact, from the assembler file the test writes (.incbin)
 *   hal_flash_program  a NOR flash: a write may only clear bits, and must be one aligned unit
 *                      of NEEDLE_MCUBOOT_ALIGN bytes inside the slot (as MCUboot writes flags).
 *                      Built with -DNO_FLASH_DRIVER the harness defines none, and mcuboot.c's
 *                      weak default refuses.
 *
 *   mcuboot_boot SLOT_IN SLOT_OUT
 * prints "needle_boot RC ERROR" and each write ("program ADDR N") on standard output, the
 * firmware's console lines on standard error, and writes the slot after boot to SLOT_OUT. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "hal.h"

int needle_boot(void);
const char *needle_error(void);

#define SLOT_ORIGIN (NEEDLE_MCUBOOT_PRIMARY_END - SLOT_BYTES)

static uint8_t *slot;

void hal_err(const char *s, size_t n) { fwrite(s, 1, n, stderr); }
void hal_out(const char *s, size_t n) { fwrite(s, 1, n, stdout); }

#ifndef NO_FLASH_DRIVER
const char *hal_flash_program(uint32_t addr, const void *data, size_t n)
{
    if (addr < SLOT_ORIGIN || addr + n > NEEDLE_MCUBOOT_PRIMARY_END || addr % NEEDLE_MCUBOOT_ALIGN
        || n != NEEDLE_MCUBOOT_ALIGN)
        return "harness: a write outside the slot or not one aligned unit";
    const uint8_t *bytes = data;
    for (size_t i = 0; i < n; i++) slot[addr - SLOT_ORIGIN + i] &= bytes[i];   /* NOR: 1 -> 0 only */
    printf("program 0x%08x %zu\n", (unsigned)addr, n);
    return NULL;
}
#endif

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: mcuboot_boot SLOT_IN SLOT_OUT\n");
        return 2;
    }
    slot = mmap((void *)(uintptr_t)SLOT_ORIGIN, SLOT_BYTES, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (slot != (uint8_t *)(uintptr_t)SLOT_ORIGIN) {
        fprintf(stderr, "harness: cannot map the slot at 0x%08x\n", (unsigned)SLOT_ORIGIN);
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    if (!in || fread(slot, 1, SLOT_BYTES, in) != SLOT_BYTES || fgetc(in) != EOF) {
        fprintf(stderr, "harness: %s is not %u bytes (the slot)\n", argv[1], (unsigned)SLOT_BYTES);
        return 2;
    }
    fclose(in);
    int rc = needle_boot();
    printf("needle_boot %d %s\n", rc, needle_error());
    FILE *out = fopen(argv[2], "wb");
    if (!out || fwrite(slot, 1, SLOT_BYTES, out) != SLOT_BYTES || fclose(out)) {
        fprintf(stderr, "harness: cannot write %s\n", argv[2]);
        return 2;
    }
    return 0;
}
