/* examples/hello -- a program of your own on the needle engine library.
 *
 *   hello [QUERY [MAX_NEW]]
 *
 * Renders the tool-calling prompt for QUERY and the two tools below, feeds it to the engine
 * and prints the greedy continuation: its token ids on one line ("ids: 17,5,..."), then its
 * text.  It uses only the SDK that `scons board=X lib=1` writes (build/X/sdk): needle.h and
 * libneedle.a (engine, tokenizer, prompt renderer; the archive is linked in, or mapped from
 * a file on boards with placement "file").  Static buffers only, like the engine.
 *
 * On Linux it writes to standard output; on a bare-metal board it links the board's
 * reference support (libneedle_board.a), which starts the core, calls this main with the
 * debugger's or the UART's command line, and whose console is needle_hal.h's hal_out. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "needle.h"

#if defined(__linux__)
#include <stdio.h>
static void say(const char *s, size_t n) { fwrite(s, 1, n, stdout); }
#else
#include "needle_hal.h"
static void say(const char *s, size_t n) { hal_out(s, n); }
#endif

/* The tools this firmware offers the model (OpenAI-style function schemas, one JSON array). */
static const char TOOLS[] = "[{\"name\":\"set_timer\",\"description\":\"Start a countdown timer\",\"parameters\":{\"type\":\"object\",\"properties\":{\"minutes\":{\"type\":\"integer\",\"description\":\"Length of the timer in minutes\"}},\"required\":[\"minutes\"]}},{\"name\":\"get_weather\",\"description\":\"Current weather for a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}]";

#define DEFAULT_QUERY   "set a timer for 10 minutes"
#define DEFAULT_MAX_NEW 16u

static char prompt[NEEDLE_TOK_MAX_TEXT + 1];
static uint32_t ids[NEEDLE_MAX_SEQ];
static char text[NEEDLE_TOK_STREAM_OUT_MAX];

static void say_str(const char *s) { say(s, strlen(s)); }

static void say_uint(uint32_t v)
{
    char digits[11];
    size_t n = sizeof digits;
    do digits[--n] = (char)('0' + v % 10u); while ((v /= 10u) != 0);
    say(digits + n, sizeof digits - n);
}

static int fail(const char *what, const char *why)
{
#if defined(__linux__)
    fprintf(stderr, "hello: %s: %s\n", what, why);
#else
    say_str("hello: "); say_str(what); say_str(": "); say_str(why); say_str("\n");
#endif
    return 2;
}

/* The most likely next token (the first one on ties, like the needle CLI). */
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
    uint32_t max_new = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : DEFAULT_MAX_NEW;

#ifdef NEEDLE_ARCHIVE_FILE   /* placement "file": the archive is a file next to the program */
    const char *archive = getenv("NEEDLE_ARCHIVE") ? getenv("NEEDLE_ARCHIVE") : "needle.cact";
    if (needle_archive_map(archive)) return fail(archive, needle_error());
#endif
    if (needle_boot()) return fail("archive", needle_error());

    /* 1. the prompt: chat template, tools block and query (docs/prompt.md) */
    char err[160];
    int len = needle_render_prompt(TOOLS, sizeof TOOLS - 1, query, NULL, prompt, sizeof prompt, err, sizeof err);
    if (len < 0) return fail("prompt", err);

    /* 2. its tokens, after BOS */
    ids[0] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode(prompt, (size_t)len, ids + 1, NEEDLE_MAX_SEQ - 2);
    if (n < 0) return fail("prompt", "does not fit the context");
    uint32_t fed = (uint32_t)n + 1;
    if (max_new > NEEDLE_MAX_SEQ - fed) max_new = NEEDLE_MAX_SEQ - fed;

    /* 3. prefill, then greedy decoding until EOS or max_new tokens */
    const float *logits = needle_prefill(ids, fed);   /* the whole prompt, NEEDLE_PREFILL_CHUNK tokens per pass */
    if (!logits) return fail("engine", needle_error());
    uint32_t made = 0;
    say_str("ids: ");
    for (; made < max_new; made++) {
        uint32_t next = argmax(logits);
        if (next == NEEDLE_EOS_ID) break;
        if (made) say_str(",");
        say_uint(next);
        ids[fed + made] = next;
        if (made + 1 < max_new && !(logits = needle_step(next))) return fail("engine", needle_error());
    }
    say_str("\n");

    /* 4. the text of the generated tokens */
    needle_tok_stream stream;
    needle_tok_stream_init(&stream);
    say_str("text: ");
    for (uint32_t i = 0; i < made; i++) say(text, needle_tok_stream_push(&stream, ids[fed + i], text));
    say(text, needle_tok_stream_finish(&stream, text));
    say_str("\n");
    return 0;
}
