/* needle --bench N: N-token prefill and N-token greedy decode, timed, next to a memcpy
 * bandwidth measured in the same run.  Prints one JSON object (the last line).
 *
 * With NEEDLE_BENCH=count in the environment the same 2N steps run without any clock,
 * memcpy or float formatting, so the executed instruction count depends on N alone: the
 * instruction-count benchmark under qemu-user (bench/host.py) subtracts two such runs. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"
#include "needle_kernels.h"   /* NK_KERNELS: the kernel family compiled in */
#include "needle_model.h"

#define COPY_BYTES ((size_t)64 << 20)   /* larger than any last-level cache we run on */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t argmax(const float *v)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < NEEDLE_OUT_VOCAB; i++) if (v[i] > v[best]) best = i;
    return best;
}

/* Best of five copies of 64 MiB: the memory bandwidth a streaming kernel can hope for.
 * The buffers are mapped for the measurement only, so they do not count as engine RAM. */
static double memcpy_gbs(void)
{
    uint8_t *copy_src = mmap(NULL, 2 * COPY_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy_src == MAP_FAILED) return 0.0;
    uint8_t *copy_dst = copy_src + COPY_BYTES;
    memset(copy_src, 1, COPY_BYTES);
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        memcpy(copy_dst, copy_src, COPY_BYTES);
        double dt = now() - t0;
        copy_src[r] = copy_dst[COPY_BYTES - 1 - r];   /* keep the copy observable */
        if (dt > 0 && (double)COPY_BYTES / dt > best) best = (double)COPY_BYTES / dt;
    }
    munmap(copy_src, 2 * COPY_BYTES);
    return best / 1e9;
}

int needle_bench(uint32_t tokens)
{
    if (2 * tokens > NEEDLE_MAX_SEQ) tokens = NEEDLE_MAX_SEQ / 2;
    const char *mode = getenv("NEEDLE_BENCH");
    const int count = mode && !strncmp(mode, "count", 5), prefill_only = mode && !strcmp(mode, "count-prefill");
    static uint32_t ids[NEEDLE_MAX_SEQ];       /* the prompt: BOS, then (t * 2654435761) mod vocab */
    for (uint32_t t = 0; t < tokens; t++) ids[t] = t == 0 ? NEEDLE_BOS_ID : (uint32_t)((t * 2654435761u) % NEEDLE_VOCAB);
    const float *lg = 0;
    needle_reset();
    if (count) {               /* deterministic: no clock, no memcpy, no float printing, and
                                * one thread (waiting workers would add a varying count).
                                * count: 2N single steps; count-prefill: the N-token prompt only,
                                * fed as needle_prefill does it (bench/host.py subtracts start-up) */
        needle_set_threads(1);
        if (prefill_only) {
            if (!(lg = needle_prefill(ids, tokens))) { fprintf(stderr, "needle: error: %s\n", needle_error()); return 2; }
        } else {
            for (uint32_t t = 0; t < 2 * tokens; t++) {
                uint32_t id = t < tokens ? ids[t] : argmax(lg);
                if (!(lg = needle_step(id))) { fprintf(stderr, "needle: error: %s\n", needle_error()); return 2; }
            }
        }
        printf("{\"tokens\": %u, \"last\": %u, \"kernels\": \"%s\"}\n", tokens, argmax(lg), NK_KERNELS);
        return 0;
    }
    double t0 = now();
    if (!(lg = needle_prefill(ids, tokens))) { fprintf(stderr, "needle: error: %s\n", needle_error()); return 2; }
    double t1 = now();
    for (uint32_t t = 0; t < tokens; t++)
        if (!(lg = needle_step(argmax(lg)))) { fprintf(stderr, "needle: error: %s\n", needle_error()); return 2; }
    double t2 = now();
    double gbs = memcpy_gbs();
    double prefill = tokens / (t1 - t0), decode = tokens / (t2 - t1);
    double streamed = (double)NEEDLE_STREAMED_BYTES;
    printf("{\"kernels\": \"%s\", \"threads\": %u, \"tokens\": %u, \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, "
           "\"bytes_per_token\": %u, \"memcpy_gb_s\": %.3f, \"roofline_tok_s\": %.1f, "
           "\"roofline_ratio\": %.4f}\n",
           NK_KERNELS, (unsigned)needle_threads(), tokens, prefill, decode, NEEDLE_STREAMED_BYTES, gbs, gbs * 1e9 / streamed,
           decode / (gbs * 1e9 / streamed));
    return 0;
}
