/* examples/api -- the engine's text-level C API (docs/api.md): stream a completion, make a
 * tool call, answer it with the calls' results.
 *
 *   scons board=host lib=1 tools=demo/tools.json
 *   cc -std=c11 -O2 -o api examples/api/main.c \
 *      $(PKG_CONFIG_LIBDIR=build/host/sdk/lib/pkgconfig pkg-config --cflags --libs needle)
 *
 *   api generate PROMPT            the greedy continuation of PROMPT, streamed
 *   api call QUERY [RESULTS]       the built-in tools' call for QUERY (its envelope); with
 *                                  RESULTS, the next turn after those results
 *
 * Static buffers only; every failure is one line on stderr and a non-zero exit. */
#include <stdio.h>
#include <string.h>

#include "needle.h"

static int print_piece(void *user, uint32_t id, const char *text, size_t len)
{
    (void)user; (void)id;
    fwrite(text, 1, len, stdout);
    fflush(stdout);                      /* streaming: each piece as soon as it is chosen */
    return 0;
}

static void put(void *user, const char *s, size_t n) { fwrite(s, 1, n, (FILE *)user); }

int main(int argc, char **argv)
{
    char err[256];
    if (argc < 3 || (strcmp(argv[1], "generate") && strcmp(argv[1], "call"))) {
        fprintf(stderr, "usage: api generate PROMPT | api call QUERY [RESULTS]\n");
        return 2;
    }
    if (needle_boot()) { fprintf(stderr, "api: %s\n", needle_error()); return 3; }
    if (!strcmp(argv[1], "generate")) {
        if (needle_generate(argv[2], 64, print_piece, NULL, err, sizeof err) < 0) {
            fprintf(stderr, "api: %s\n", err);
            return 2;
        }
        putchar('\n');
        return 0;
    }
    static needle_envelope env;
    needle_call_options opt = { 0 };     /* the built-in tools, the default budget */
    opt.force_call = 1;                  /* this firmware must act: at least one call */
    opt.max_new = 64;
    opt.min_confidence = NEEDLE_MIN_CONFIDENCE;   /* withhold a call the model is unsure of */
    if (needle_call(argv[2], &opt, &env, err, sizeof err)) { fprintf(stderr, "api: %s\n", err); return 2; }
    needle_call_write(&env, put, stdout);     /* or read env.calls, env.confidence, ... */
    putchar('\n');
    if (env.error_code) return 0;        /* not to be acted on: env.error says why */
    if (argc > 3) {                      /* the caller ran the calls: their results, next turn */
        if (needle_reply(argv[3], &env, err, sizeof err)) { fprintf(stderr, "api: %s\n", err); return 2; }
        needle_call_write(&env, put, stdout);
        putchar('\n');
    }
    needle_reset();
    return 0;
}
