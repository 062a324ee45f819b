/* grammar_walk: random walks through the C call grammar (firmware/lib/needle_tool_grammar.c),
 * many tool lists per process, for fuzz/grammar_schemas.py, which runs the same walks through
 * the Python twin (generator/tools/grammar.py) and validates every finished call list with
 * jsonschema (fuzz/README.md, "Random schemas").
 *
 *   grammar_walk < batch
 *
 * The batch is a sequence of records "LIST <force> <seed> <walks> <budget> <nbytes>\n" then
 * <nbytes> of tool-list JSON and "\n".  Per record it prints "ERR <message>" if the list does
 * not compile, else "OK <list min bytes>" and one line per walk: the bytes in hex, then " D"
 * (the list is complete) or " DEAD" (no byte was allowed before the end: a bug).
 *
 * A walk (the same steps in grammar_schemas.py walk()): B = min(4096, list_min + r % (budget
 * + 1)) bytes; at each step the allowed bytes are those the grammar takes whose shortest
 * completion still fits in B (the decoder's envelope rule), in ascending order; with one draw
 * in four only those of the smallest shortest completion are kept; then one is drawn.  r is
 * splitmix64 seeded with <seed>. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "needle_tool_grammar.h"

static needle_grammar g;
static char tools[1 << 20];
static unsigned char out[NEEDLE_CALL_MAX_JSON + 1];

static uint64_t rng_state;

static uint64_t rng(void)   /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void walk(uint32_t budget)
{
    uint32_t list_min = needle_grammar_list_min(&g);
    uint64_t B = list_min + rng() % ((uint64_t)budget + 1u);
    if (B > NEEDLE_CALL_MAX_JSON) B = NEEDLE_CALL_MAX_JSON;
    static needle_gstate s, nx, opt[256];   /* (static: 256 states are too big for a stack frame) */
    uint32_t m[256];
    uint8_t byte[256];
    size_t n = 0;
    needle_grammar_start(&g, &s);
    const char *end = " D";
    while (!needle_grammar_done(&s)) {
        uint32_t k = 0, best = UINT32_MAX;
        for (unsigned b = 0; b < 256; b++) {
            nx = s;
            if (needle_grammar_feed(&g, &nx, (uint8_t)b)) continue;
            uint32_t mb = needle_grammar_min_bytes(&g, &nx);
            if (n + 1u + mb > B) continue;
            opt[k] = nx; m[k] = mb; byte[k] = (uint8_t)b; k++;
            if (mb < best) best = mb;
        }
        if (k == 0) { end = " DEAD"; break; }
        if (rng() % 4u == 0) {
            uint32_t j = 0;
            for (uint32_t i = 0; i < k; i++)
                if (m[i] == best) { opt[j] = opt[i]; m[j] = m[i]; byte[j] = byte[i]; j++; }
            k = j;
        }
        uint32_t pick = (uint32_t)(rng() % k);
        s = opt[pick];
        out[n++] = byte[pick];
    }
    for (size_t i = 0; i < n; i++) printf("%02x", out[i]);
    printf("%s\n", end);
}

int main(void)
{
    int force;
    unsigned long long seed;
    unsigned walks, budget;
    size_t len;
    while (scanf("LIST %d %llu %u %u %zu", &force, &seed, &walks, &budget, &len) == 5) {
        if (getchar() != '\n' || len > sizeof tools || fread(tools, 1, len, stdin) != len || getchar() != '\n')
            return 2;
        char err[512];
        if (needle_grammar_compile(&g, tools, len, force, err, sizeof err)) {
            printf("ERR %s\n", err);
        } else {
            printf("OK %u\n", needle_grammar_list_min(&g));
            rng_state = seed;
            for (unsigned w = 0; w < walks; w++) walk(budget);
        }
        fflush(stdout);
    }
    return 0;
}
