/* fuzz/prompt.c -- libFuzzer harness of the prompt renderer (firmware/lib/needle_tool_prompt.c).
 *
 * The input is split at NUL bytes:  TOOLS_JSON [NUL QUERY [NUL SYSTEM]]
 * (no NUL: query "hi" and no system; one NUL: no system).  Every part is passed in an
 * exact-size heap copy so AddressSanitizer sees any read past tools_json[len] or past the
 * NUL of query/system.  The renderer runs with a roomy output buffer, then with an output
 * exactly the right size, one byte too small, and a small one, and with small error
 * buffers; the documented results (needle_tool_prompt.h) are checked and a broken one abort()s.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "needle_tool_prompt.h"

#define OUT_CAP (1u << 20)

static char big[OUT_CAP];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "prompt invariant broken: %s\n", what);
        abort();
    }
}

static char *dup_n(const uint8_t *p, size_t n, int nul)
{
    char *s = malloc(n + (size_t)nul > 0 ? n + (size_t)nul : 1u);
    if (!s) abort();
    memcpy(s, p, n);
    if (nul) s[n] = '\0';
    return s;
}

static int render(const char *tools, size_t len, const char *q, const char *sys, char *out,
                  size_t cap, char *err, size_t errcap)
{
    int r = needle_render_prompt(tools, len, q, sys, out, cap, err, errcap);
    check(r >= 0 || r == NEEDLE_PROMPT_E_JSON || r == NEEDLE_PROMPT_E_SPACE ||
          r == NEEDLE_PROMPT_E_TEXT, "result code");
    if (r < 0 && errcap > 0) check(memchr(err, '\0', errcap) != NULL, "err NUL-terminated");
    if (r >= 0 && cap > 0) check((size_t)r < cap && out[r] == '\0', "out NUL-terminated");
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *z1 = memchr(data, 0, size);
    size_t tlen = z1 ? (size_t)(z1 - data) : size;
    char *tools = dup_n(data, tlen, 0);
    char *query, *sys = NULL;
    if (!z1) {
        query = dup_n((const uint8_t *)"hi", 2, 1);
    } else {
        const uint8_t *q = z1 + 1, *end = data + size;
        const uint8_t *z2 = memchr(q, 0, (size_t)(end - q));
        query = dup_n(q, (size_t)((z2 ? z2 : end) - q), 1);
        if (z2) sys = dup_n(z2 + 1, (size_t)(end - z2 - 1), 1);  /* rest; cut at a NUL */
    }

    char err[256];
    int n = render(tools, tlen, query, sys, big, sizeof big, err, sizeof err);
    if (n >= 0) {
        /* json.dumps escapes every control character and the query/system are C strings,
         * so the prompt has no NUL inside. */
        check(strlen(big) == (size_t)n, "no NUL inside the prompt");
        char *exact = malloc((size_t)n + 1u);
        check(exact != NULL, "malloc");
        check(render(tools, tlen, query, sys, exact, (size_t)n + 1u, err, sizeof err) == n &&
              memcmp(exact, big, (size_t)n + 1u) == 0, "exact-size output gives the same prompt");
        free(exact);
        char *tight = malloc((size_t)n);
        check(tight != NULL || n == 0, "malloc");
        check(render(tools, tlen, query, sys, tight, (size_t)n, err, sizeof err) ==
              NEEDLE_PROMPT_E_SPACE, "output one byte short gives E_SPACE");
        free(tight);
        char small[17];
        int r = render(tools, tlen, query, sys, small, sizeof small, err, 1);
        check(r == (n < (int)sizeof small ? n : NEEDLE_PROMPT_E_SPACE), "small output");
    } else {
        /* Same error with tiny error buffers (message cut, still terminated). */
        char e1[1], e7[7];
        check(render(tools, tlen, query, sys, big, sizeof big, e1, sizeof e1) == n, "errcap 1");
        check(render(tools, tlen, query, sys, big, sizeof big, e7, sizeof e7) == n, "errcap 7");
        check(strncmp(e7, err, sizeof e7 - 1u) == 0, "err cut is a prefix");
        check(render(tools, tlen, query, sys, big, sizeof big, NULL, 0) == n, "errcap 0");
    }
    free(tools);
    free(query);
    free(sys);
    return 0;
}
