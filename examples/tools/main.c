/* examples/tools -- a firmware's own handlers for the tools it was built with.
 *
 *   scons board=watch-m4 lib=1 tools=examples/tools/tools.json
 *   make -C examples/tools NEEDLE_SDK=$PWD/build/watch-m4/sdk OUT=/tmp/tools-m4
 *
 *   tools [QUERY [MAX_NEW [MIN_CONFIDENCE]]]
 *
 * The SDK's needle_tools.h is generated from examples/tools/tools.json: an enum of the
 * tools, one argument struct per tool with C types, and needle_run(), which answers QUERY
 * with a call list the grammar guarantees and hands each call's typed arguments to the
 * handler below (docs/grammar.md, "Typed bindings").  No JSON is parsed here.
 * Each handler prints one line; then the envelope follows.  A call the engine says not to act
 * on (cut short, bent by the grammar, or below MIN_CONFIDENCE, by default the value
 * recommended for the model: docs/grammar.md §5a) reaches no handler: its reason and the
 * calls are printed for the log, and the exit status is 1.  Static buffers only. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "needle.h"
#include "needle_tools.h"

#if defined(__linux__)
#include <stdio.h>
static void say(const char *s, size_t n) { fwrite(s, 1, n, stdout); }
#else
#include "needle_hal.h"
static void say(const char *s, size_t n) { hal_out(s, n); }
#endif

#define DEFAULT_QUERY   "set a timer for 10 minutes"
#define DEFAULT_MAX_NEW 96u

static void say_str(const char *s) { say(s, strlen(s)); }

static void say_int(int64_t v)
{
    char d[24];
    size_t n = sizeof d;
    uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1u : (uint64_t)v;
    do d[--n] = (char)('0' + u % 10u); while ((u /= 10u) != 0);
    if (v < 0) d[--n] = '-';
    say(d + n, sizeof d - n);
}

/* A number with 6 decimals (the grammar writes at most 6). */
static void say_num(double v)
{
    int64_t micro = (int64_t)(v * 1e6 + (v < 0 ? -0.5 : 0.5));
    if (micro < 0) { say_str("-"); micro = -micro; }
    say_int(micro / 1000000);
    char f[8] = { '.', 0 };
    for (int i = 6; i >= 1; i--) { f[i] = (char)('0' + micro % 10); micro /= 10; }
    f[7] = 0;
    say_str(f);
}

static const char *const ROOMS[] = { "kitchen", "bedroom", "hall" };
static const char *const TAGS[] = { "urgent", "home", "work" };

static void on_set_timer(const needle_set_timer_args *a, void *user)
{
    (void)user;
    say_str("set_timer minutes=");
    say_int(a->minutes);
    if (a->has_label) { say_str(" label="); say_str(a->label); }
    say_str("\n");
}

static void on_lights(const needle_lights_args *a, void *user)
{
    (void)user;
    say_str("lights room=");
    say_str(ROOMS[a->room]);
    say_str(a->on ? " on=true" : " on=false");
    if (a->has_level) { say_str(" level="); say_num(a->level); }
    say_str("\n");
}

static void on_notify(const needle_notify_args *a, void *user)
{
    (void)user;
    say_str("notify text=");
    say_str(a->text);
    if (a->has_tags) {
        say_str(" tags=");
        for (uint16_t i = 0; i < a->tags_count; i++) { if (i) say_str(","); say_str(TAGS[a->tags[i]]); }
    }
    say_str("\n");
}

static const needle_tool_handlers HANDLERS = { on_set_timer, on_lights, on_notify };

static void put(void *user, const char *s, size_t n) { (void)user; say(s, n); }

int main(int argc, char **argv)
{
    static needle_envelope env;
    static uint32_t none[1];
    char err[200];
    const char *query = argc > 1 ? argv[1] : DEFAULT_QUERY;
    uint32_t max_new = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : DEFAULT_MAX_NEW;
#ifdef NEEDLE_ARCHIVE_FILE
    const char *archive = getenv("NEEDLE_ARCHIVE") ? getenv("NEEDLE_ARCHIVE") : "needle.cact";
    if (needle_archive_map(archive)) { say_str("tools: "); say_str(needle_error()); say_str("\n"); return 3; }
#endif
    if (needle_boot()) { say_str("tools: "); say_str(needle_error()); say_str("\n"); return 3; }
    float min_confidence = NEEDLE_MIN_CONFIDENCE;
    uint32_t ppm;
    if (argc > 3 && needle_parse_confidence(argv[3], strlen(argv[3]), &ppm)) {
        say_str("tools: MIN_CONFIDENCE wants a number from 0 to 1 with at most 6 decimals\n");
        return 2;
    }
    if (argc > 3) min_confidence = (float)ppm / 1e6f;
    int made = needle_run(query, max_new, 1, min_confidence, &HANDLERS, NULL, &env, err, sizeof err);
    if (made < 0 && env.error_code) {   /* answered, but not to be acted on: nothing was dispatched */
        say_str("not acted on (error_code ");
        say_int(env.error_code);
        say_str("): ");
        say_str(err);
        say_str("\nfunction_calls: ");
        say(env.calls, env.calls_len);
        say_str("\n");
        return 1;
    }
    if (made < 0) { say_str("tools: "); say_str(err); say_str("\n"); return 2; }
    say_str("calls made: ");
    say_int(made);
    say_str("\nfunction_calls: ");
    say(env.calls, env.calls_len);
    say_str("\n");
    (void)none; (void)put;
    return 0;
}
