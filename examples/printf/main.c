/* examples/printf -- the C library's stdio and heap in a program of your own on a bare-metal
 * board (or Linux, where they are the system's).
 *
 *   printf [QUERY [MAX_NEW [ALLOC_BYTES]]]   then, if a line follows on standard input, echoes it
 *
 * Boots the engine, feeds BOS and the query's tokens, and prints with printf: the engine's
 * state size (%lu), the greedy token ids, a 64-bit checksum of them (%lld, %llx); then what
 * malloc(ALLOC_BYTES) gives (NULL with errno ENOMEM on a board whose board file sets no
 * heap_bytes; memory on one that does); then the tokens' probabilities (%f, %e: newlib's
 * float conversion needs a little heap, so without one it says so instead); then it reads
 * one line with fgets and echoes it (end of input: "stdin: end").  On a bare-metal board the
 * system calls behind printf, fgets and malloc are the board support library's
 * (libneedle_board.a: firmware/baremetal/syscalls.c, on the board's console); the engine
 * itself never allocates. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "needle.h"

#define DEFAULT_QUERY "set a timer for 10 minutes"

static uint32_t ids[NEEDLE_MAX_SEQ];
static float probs[NEEDLE_MAX_SEQ];

static uint32_t argmax(const float *logits)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < NEEDLE_OUT_VOCAB; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int main(int argc, char **argv)
{
    const char *query = argc > 1 ? argv[1] : DEFAULT_QUERY;
    unsigned long max_new = argc > 2 ? strtoul(argv[2], NULL, 10) : 4;
    unsigned long alloc = argc > 3 ? strtoul(argv[3], NULL, 10) : 1024;

#ifdef NEEDLE_ARCHIVE_FILE   /* placement "file": the archive is a file next to the program */
    const char *archive = getenv("NEEDLE_ARCHIVE") ? getenv("NEEDLE_ARCHIVE") : "needle.cact";
    if (needle_archive_map(archive)) { fprintf(stderr, "printf: %s: %s\n", archive, needle_error()); return 2; }
#endif
    if (needle_boot()) { fprintf(stderr, "printf: archive: %s\n", needle_error()); return 2; }
    printf("state: %lu bytes\n", (unsigned long)needle_state_bytes());

    ids[0] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode(query, strlen(query), ids + 1, NEEDLE_MAX_SEQ - 2);
    if (n < 0) { fprintf(stderr, "printf: the query does not fit the context\n"); return 2; }
    uint32_t fed = (uint32_t)n + 1;
    if (max_new > NEEDLE_MAX_SEQ - fed) max_new = NEEDLE_MAX_SEQ - fed;
    const float *logits = needle_prefill(ids, fed);
    unsigned long long sum = 0;
    for (unsigned long i = 0; i < max_new && logits; i++) {
        uint32_t next = argmax(logits);
        probs[i] = needle_token_prob(logits, next);
        printf("token %lu: %" PRIu32 "\n", i, next);
        sum = sum * 1000003u + next;
        logits = i + 1 < max_new ? needle_step(next) : logits;
    }
    if (!logits) { fprintf(stderr, "printf: engine: %s\n", needle_error()); return 2; }
    printf("checksum: %llu (0x%llx, half negated %lld)\n", sum, sum, -(long long)(sum >> 1));

    errno = 0;
    char *p = malloc(alloc);
    if (p) {
        memset(p, 0x5a, alloc);
        printf("malloc(%lu): ok\n", alloc);
        free(p);
    } else {
        printf("malloc(%lu): NULL (%s)\n", alloc, errno == ENOMEM ? "ENOMEM" : "another error");
    }

    /* newlib's %f (and %e, %g) takes a few hundred bytes of big-number scratch from the heap:
     * a bare-metal board needs heap_bytes in its board file for it (docs/library.md) */
    void *scratch = malloc(256);
    if (scratch) {
        free(scratch);
        for (unsigned long i = 0; i < max_new; i++) printf("p[%lu] = %f (%.9e)\n", i, (double)probs[i], (double)probs[i]);
    } else {
        printf("floats: no heap for printf's %%f (set heap_bytes in the board file)\n");
    }

    char line[128];
    if (fgets(line, sizeof line, stdin)) printf("stdin: %s", line);
    else printf("stdin: end\n");
    return 0;
}
