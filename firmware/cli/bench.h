/* Benchmark mode of the CLI (needle --bench N): prefill and decode speed.  Every board has
 * one: cli/bench.c on Linux (wall clock, memory bandwidth, or instructions under qemu-user),
 * baremetal/bench_mcu.c on bare metal (SysTick). */
#ifndef NEEDLE_BENCH_H
#define NEEDLE_BENCH_H
#include <stdint.h>
int needle_bench(uint32_t tokens);
#endif
