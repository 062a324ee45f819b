/* needle --bench N on bare metal: the same N-token prefill and N-token greedy decode as the
 * Linux benchmark (firmware/cli/bench.c), timed with SysTick clocked by the CPU clock
 * (Cortex-M) or with minstret (RISC-V: instructions, below).
 *
 * Under `qemu-system-arm -icount shift=0` every instruction advances virtual time by 1 ns,
 * so a tick is 1e9 / (the machine's SysTick clock) instructions, deterministically; the
 * host side (bench/mcu.py) converts.  On silicon the same counts are CPU cycles
 * divided by the SysTick prescale (1 with CLKSOURCE = processor clock).  The 24-bit counter
 * wraps every 2^24 ticks: its interrupt counts the wraps, through a copy of the vector table
 * in RAM whose SysTick entry is ours (VTOR), so startup.c stays as it is.
 *
 * Prints one JSON object (the last line): tokens, prefill_ticks, decode_ticks,
 * macs_per_token, the kernel family and the bytes of weights streamed per token. */
#include <stdint.h>
#include <string.h>

#include "bench.h"
#include "hal.h"
#include "needle_kernels.h"
#include "needle_model.h"

#ifndef NEEDLE_MACS_PER_TOKEN
#define NEEDLE_MACS_PER_TOKEN 0ull
#endif

#if defined(__riscv)
/* RISC-V: minstret, the retired-instruction counter (minstreth its high half on RV32), read
 * in machine mode.  Under qemu-system-riscv32 -icount shift=0 QEMU derives it from its
 * instruction count, so a tick is one instruction; on silicon it counts instructions too
 * (mcycle would count cycles).  Nothing to start or stop: it runs from reset. */
#define ZICSR ".option push\n\t.option arch, +zicsr\n\t"
static void timer_start(void) {}
static void timer_stop(void) {}
static uint64_t ticks(void)
{
    uint32_t hi, lo, again;
    do {
        __asm__ volatile(ZICSR "csrr %0, minstreth\n\tcsrr %1, minstret\n\tcsrr %2, minstreth\n\t.option pop"
                         : "=r"(hi), "=r"(lo), "=r"(again));
    } while (hi != again);                       /* the low half wrapped between the reads: again */
    return ((uint64_t)hi << 32) | lo;
}
#else
#define SYST_CSR  (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR  (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR  (*(volatile uint32_t *)0xE000E018u)
#define SCB_VTOR  (*(volatile uint32_t *)0xE000ED08u)
#define SYST_RELOAD 0x00FFFFFFu

typedef void (*vector)(void);
extern const vector vector_table[16];          /* firmware/baremetal/startup.c */

static volatile uint32_t wraps;
static void systick_wrap(void) { wraps++; }

/* VTOR keeps bits [31:7]; 512-byte alignment also covers a table with external IRQs. */
static vector ram_vectors[16] __attribute__((aligned(512)));

static void timer_start(void)
{
    memcpy(ram_vectors, vector_table, sizeof ram_vectors);
    ram_vectors[15] = systick_wrap;
    SCB_VTOR = (uint32_t)(uintptr_t)ram_vectors;
    SYST_CSR = 0;
    SYST_RVR = SYST_RELOAD;
    SYST_CVR = 0;                                /* any write clears the counter */
    wraps = 0;
    SYST_CSR = 7u;                               /* enable, interrupt, processor clock */
    while (SYST_CVR == 0u) {}                    /* the first tick loads the reload value */
}

static uint64_t ticks(void)
{
    uint32_t w, v;
    do {
        w = wraps;
        v = SYST_CVR;
    } while (w != wraps);                        /* a wrap between the two reads: again */
    return (uint64_t)w * (SYST_RELOAD + 1u) + (SYST_RELOAD - v);
}

static void timer_stop(void)
{
    SYST_CSR = 0;
    SCB_VTOR = (uint32_t)(uintptr_t)vector_table;
}

#endif

static char *u64_text(char *end, uint64_t v)   /* decimal, written backwards from end */
{
    *--end = 0;
    do { *--end = (char)('0' + v % 10u); v /= 10u; } while (v);
    return end;
}

static uint32_t argmax(const float *v)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < NEEDLE_VOCAB; i++) if (v[i] > v[best]) best = i;
    return best;
}

int needle_bench(uint32_t tokens)
{
    if (2u * tokens > NEEDLE_MAX_SEQ) tokens = NEEDLE_MAX_SEQ / 2u;
    static uint32_t bench_ids[NEEDLE_MAX_SEQ];  /* the sequence of bench/host.py */
    for (uint32_t t = 0; t < tokens; t++)
        bench_ids[t] = t == 0 ? NEEDLE_BOS_ID : (uint32_t)((t * 2654435761u) % NEEDLE_VOCAB);
    const float *lg = 0;
    needle_reset();
    timer_start();
    uint64_t t0 = ticks();
    lg = needle_prefill(bench_ids, tokens);      /* the prompt, batched as a real one is */
    uint64_t t1 = ticks();
    for (uint32_t t = 0; lg && t < tokens; t++) lg = needle_step(argmax(lg));
    uint64_t t2 = ticks();
    timer_stop();
    if (!lg) {
        const char *why = needle_error();
        hal_err("needle: error: ", 15);
        hal_err(why, strlen(why));
        hal_err("\n", 1);
        return 2;
    }
    char a[24], b[24], c[24];
    hal_printf("{\"tokens\": %u, \"prefill_ticks\": %s, \"decode_ticks\": %s, \"macs_per_token\": %s, "
               "\"kernels\": \"%s\", \"bytes_per_token\": %u}\n", tokens,
               u64_text(a + sizeof a, t1 - t0), u64_text(b + sizeof b, t2 - t1),
               u64_text(c + sizeof c, (uint64_t)NEEDLE_MACS_PER_TOKEN), NK_KERNELS, NEEDLE_STREAMED_BYTES);
    return 0;
}
