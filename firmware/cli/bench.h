/* Benchmark mode of the CLI: prefill and decode speed against memory bandwidth. */
#ifndef NEEDLE_BENCH_H
#define NEEDLE_BENCH_H
#include <stdint.h>
int needle_bench(uint32_t tokens);
#endif
