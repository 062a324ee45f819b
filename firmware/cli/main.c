/* needle: the command-line front end of a generated engine (Linux boards and the host).
 *
 *   needle --prompt TEXT [--max-new N] [--ids]  greedy continuation, streamed (--ids: as token ids)
 *   needle --tools FILE.json --query TEXT       one tool-calling turn (docs/spec/prompt-and-tokenizer.md §4):
 *          [--system TEXT] [--max-new N]        decoding constrained by the tools' grammar, and
 *          [--date TEXT|now]                    (the system facts' date: docs/prompt.md)
 *          [--force-call]                       the envelope as one JSON line (docs/grammar.md);
 *                                               --force-call: the answer is a call, at least one
 *          [--min-confidence X]                 withhold a call below confidence X (default: the
 *                                               generation's NEEDLE_MIN_CONFIDENCE_PPM)
 *          [--overrides refuse|complete]        refuse a call the grammar bent (the default), or
 *                                               complete it (docs/grammar.md, "Acting on a call")
 *          [--span-strings]                     every free string argument is a span of the query
 *                                               (docs/grammar.md §2a)
 *          [--reply RESULTS]                    then a second turn on the same session, after the
 *                                               calls' results (JSON text): two envelopes
 *          [--raw]                              plain greedy text as the model writes it (--ids: ids)
 *          [--plain-markers]                    chat markers in the query, system and tools
 *                                               JSON encoded as plain text (docs/prompt.md)
 *   needle --tokens 2,17,5 [--logits FILE]      teacher-forced; logits as raw LE float32 [T][vocab]
 *          [--prefill K]                        ... the first K ids fed as one prompt (needle_prefill):
 *                                               rows from position K-1 on, [T-K+1][vocab]
 *          [--heads FILE]                       ... and every probe head's output (LE float32,
 *                                               manifest order; engines built with head_tokens=N)
 *   needle --serve [--socket PATH]              service: JSON-line requests on standard input (or
 *          [--tools FILE.json] [--max-new N]    the Unix socket PATH), one session each, the KV
 *          [--idle-timeout S]                   cache kept between requests (cli/serve_*.c,
 *                                               docs/serve.md; Linux boards only); a socket
 *                                               client idle for S seconds is dropped
 *   needle --info                               geometry, memory and provenance
 *   needle --snapshot-save FILE                 the state after the built-in tools' constant
 *                                               prompt prefix, for the firmware's prefix
 *                                               snapshot (scons tools=FILE; docs/snapshot.md)
 *   --threads N (once, any mode): threads a step uses, 1 .. NEEDLE_THREADS (scons threads=N;
 *   default all of them); the output does not depend on it
 *   needle --bench N                            prefill/decode speed (docs/benchmarks.md)
 *
 *   --archive PATH (once, any mode): the archive file, for engines generated for a board whose
 *   archive placement is `file` (NEEDLE_ARCHIVE_FILE in needle_model.h), where it is required;
 *   refused by engines that link their archive in.
 *
 * --prompt, --raw and --serve share one generation core (needle_generate_ids,
 * needle_session.h): prefill, then greedy choice until EOS, the token limit or a full
 * context; a constrained --query is the library's needle_call/needle_reply (docs/api.md).
 *
 * Every failure prints one line on stderr and exits non-zero: 2 for a usage or input error,
 * 3 when the archive (linked in, or the --archive file) is not the one the engine was
 * generated for, 1 for I/O errors (including a standard output that does not take the text,
 * e.g. a full disk).  Each option may be given once; usage errors are found before anything
 * runs or any file is created, and an output file whose writing fails part way is removed.
 * The service answers its requests' errors on its own output and goes on (docs/serve.md).
 * Console and files go through hal.h, so this is the same program on Linux and bare metal.
 */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <time.h>
#endif

#include "hal.h"
#include "needle_model.h"
#include "needle_tokenizer.h"
#include "needle_tool_prompt.h"
#include "needle_session.h"
#include "needle_tool_call.h"
#ifdef NEEDLE_TOOLS_BUILTIN
#include "needle_tools.h"     /* scons tools=FILE: the built-in tool list */
#endif
#include "bench.h"
#include "serve.h"

#if defined(__linux__)
#define TOOLS_FILE_MAX (64u * 1024u)
#else   /* bare metal: RAM is short; a list the grammar takes minified fits as the file */
#define TOOLS_FILE_MAX NEEDLE_GRAMMAR_TEXT_MAX
#endif
#define PROMPT_MAX     NEEDLE_TOK_MAX_TEXT

static uint32_t ids[NEEDLE_MAX_SEQ];
static int print_ids;   /* --ids: print generated token ids instead of text */
#if NEEDLE_GRAMMAR_RUNTIME
static char tools_file[TOOLS_FILE_MAX + 1];   /* --tools FILE */
#endif
static char prompt[PROMPT_MAX + 1];

static int fail_stdout(void)
{
    return hal_fail(1, "cannot write standard output: %s (free space or fix where it is redirected)", hal_reason());
}

/* Close and drop a partial output file after a failure; returns code for chaining. */
static int discard(void *file, const char *path, int code)
{
    if (file) hal_close(file);
    if (path) hal_remove(path);
    return code;
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    uint64_t v = 0;
    if (!*s) return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        v = v * 10u + (uint64_t)(*s - '0');
        if (v > max) return -1;
    }
    *out = (uint32_t)v;
    return 0;
}


static void print_info(void)
{
    hal_printf("needle-fw engine %s, Needle %d, board %s\n", NEEDLE_GENERATOR_VERSION, NEEDLE_GENERATION, NEEDLE_BOARD);
    hal_printf("archive   sha256 %s, %u bytes\n", NEEDLE_ARCHIVE_SHA256, NEEDLE_ARCHIVE_BYTES);
    hal_printf("geometry  vocab %u (out %u), d %u, layers %u, heads %u/%u x %u/%u, hada_n %u, lanes %u, ",
               NEEDLE_VOCAB, NEEDLE_OUT_VOCAB, NEEDLE_D_MODEL, NEEDLE_LAYERS, NEEDLE_HEADS,
               NEEDLE_KV_HEADS, NEEDLE_QK_HEAD_DIM, NEEDLE_V_HEAD_DIM, NEEDLE_HADA_N, NEEDLE_LANES);
    hal_printf("engram sites %u, max_seq %u\n", NEEDLE_ENGRAM_SITES, NEEDLE_MAX_SEQ);
    hal_printf("kv cache  window %u (local layers %u), %u bits, %u bytes\n", NEEDLE_KV_WINDOW,
               NEEDLE_LOCAL_WINDOW, NEEDLE_KV_BITS, NEEDLE_KV_BYTES);
    hal_printf("memory    engine state %zu bytes (static), archive %u bytes (read in place)\n",
               needle_state_bytes(), NEEDLE_ARCHIVE_BYTES);
}

static int write_le_floats(void *out, const float *v, uint32_t n)
{
    uint8_t le[256];
    for (uint32_t i = 0; i < n;) {
        uint32_t m = 0;
        for (; i < n && m + 4 <= sizeof le; i++, m += 4) {
            uint32_t b;
            memcpy(&b, &v[i], 4);
            le[m] = (uint8_t)b; le[m + 1] = (uint8_t)(b >> 8); le[m + 2] = (uint8_t)(b >> 16); le[m + 3] = (uint8_t)(b >> 24);
        }
        if (hal_write(out, le, m)) return -1;
    }
    return 0;
}

/* Every probe head's output over the tokens fed so far, in manifest order. */
static int write_heads(const char *path)
{
    const uint32_t count = NEEDLE_HEAD_COUNT;
    if (count == 0) return hal_fail(2, "this engine has no probe heads (build with head_tokens=N)");
    void *out = hal_create(path);
    if (!out) return hal_fail(1, "cannot write %s: %s", path, hal_reason());
    for (uint32_t i = 0; i < count; i++) {
        uint32_t len = 0;
        const float *v = needle_head(needle_head_code(i), &len);
        if (!v) { hal_fail(2, "%s", needle_error()); return discard(out, path, 2); }
        if (write_le_floats(out, v, len)) {
            hal_fail(1, "cannot write %s: %s", path, hal_reason());
            return discard(out, path, 1);
        }
    }
    if (hal_close(out)) { hal_fail(1, "cannot write %s: %s", path, hal_reason()); return discard(NULL, path, 1); }
    return 0;
}

/* Teacher-forced run of a comma-separated id list; optionally dump every position's logits. */
static int run_tokens(const char *list, const char *logits_path, const char *heads_path, uint32_t prefill)
{
    uint32_t n = 0;
    const char *p = list;
    char item[16];
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item) return hal_fail(2, "--tokens: malformed list near \"%.20s\"", p);
        memcpy(item, p, len);
        item[len] = 0;
        if (n >= NEEDLE_MAX_SEQ) return hal_fail(2, "--tokens: more than max_seq_len (%u) ids", NEEDLE_MAX_SEQ);
        if (parse_u32(item, NEEDLE_VOCAB - 1, &ids[n]))
            return hal_fail(2, "--tokens: \"%s\" is not a token id in 0..%u", item, NEEDLE_VOCAB - 1);
        n++;
        p += len;
        if (*p == ',' && !*++p) return hal_fail(2, "--tokens: list ends with a comma");
    }
    if (n == 0) return hal_fail(2, "--tokens: empty list");
    if (prefill > n) return hal_fail(2, "--prefill %u: the --tokens list has only %u ids", prefill, n);
    if (heads_path) {   /* refuse before running anything or creating a file */
        if (NEEDLE_HEAD_COUNT == 0)
            return hal_fail(2, "--heads: this engine has no probe heads (rebuild with head_tokens=N, or drop --heads)");
        if (n > NEEDLE_HEAD_TOKENS)
            return hal_fail(2, "--heads: %u tokens but this engine keeps head cells for at most %u (pass fewer "
                           "tokens or rebuild with head_tokens=%u)", n, NEEDLE_HEAD_TOKENS, n);
    }
    void *out = NULL;
    if (logits_path && !(out = hal_create(logits_path)))
        return hal_fail(1, "cannot write %s: %s", logits_path, hal_reason());
    for (uint32_t t = prefill ? prefill - 1u : 0u; t < n; t++) {
        const float *lg = prefill && t == prefill - 1u ? needle_prefill(ids, prefill) : needle_step(ids[t]);
        if (!lg) { hal_fail(2, "%s", needle_error()); return discard(out, logits_path, 2); }
        if (out) {
            if (write_le_floats(out, lg, NEEDLE_OUT_VOCAB)) {   /* little-endian on every host */
                hal_fail(1, "cannot write %s: %s", logits_path, hal_reason());
                return discard(out, logits_path, 1);
            }
        } else {
            hal_printf("%s%u", t > (prefill ? prefill - 1u : 0u) ? "," : "", (unsigned)needle_argmax(lg, NEEDLE_OUT_VOCAB));
            if (hal_out_status()) return fail_stdout();
        }
    }
    if (out && hal_close(out)) {
        hal_fail(1, "cannot write %s: %s", logits_path, hal_reason());
        return discard(NULL, logits_path, 1);
    }
    if (!out) hal_out("\n", 1);
    if (hal_out_status()) return fail_stdout();   /* before the heads file is created */
    return heads_path ? write_heads(heads_path) : 0;
}

/* The CLI's token hook: stream each chosen token as text (or as its id with --ids). */
typedef struct {
    needle_tok_stream stream;
    char out[NEEDLE_TOK_STREAM_OUT_MAX];
    uint32_t made;
} cli_stream;

static int cli_token(void *ctx, uint32_t id)
{
    cli_stream *s = ctx;
    if (print_ids) hal_printf("%s%u", s->made ? "," : "", (unsigned)id);
    else hal_out(s->out, needle_tok_stream_push(&s->stream, id, s->out));
    s->made++;
    return hal_out_status() ? fail_stdout() : 0;   /* flushes; stop at once if nobody reads */
}

/* Encode a prompt, prefill it, and stream the greedy continuation (docs/spec/needle2-model.md §8).
 * plain[0..n_plain): byte ranges whose chat markers are encoded as plain text. */
static int generate(const char *text, size_t len, const needle_tok_span *plain, size_t n_plain,
                    uint32_t max_new, int max_new_given)
{
    if (len == 0) return hal_fail(2, "empty prompt");
    ids[0] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode_spans(text, len, ids + 1, NEEDLE_MAX_SEQ - 2, plain, n_plain);
    if (n == NEEDLE_TOK_E_UTF8) return hal_fail(2, "prompt is not valid UTF-8");
    if (n < 0) return hal_fail(2, "prompt too long: it must encode to at most %u tokens (max_seq_len %u "
                              "minus BOS and one new token)", NEEDLE_MAX_SEQ - 2, NEEDLE_MAX_SEQ);
    uint32_t total = (uint32_t)n + 1, room = NEEDLE_MAX_SEQ - total;
    /* An explicit --max-new the context cannot hold is refused up front; the default (96) is
     * a ceiling and shrinks to what fits (needle_generate_ids). */
    if (max_new > room && max_new_given)
        return hal_fail(2, "--max-new %u does not fit: the prompt takes %u of max_seq_len %u tokens "
                       "(BOS included), so use --max-new %u or less, or a shorter prompt",
                    max_new, total, NEEDLE_MAX_SEQ, room);
    static cli_stream s;
    needle_tok_stream_init(&s.stream);
    s.made = 0;
    needle_gen_hooks hooks = { NULL, cli_token, &s };
    needle_gen_result res;
    int rc = needle_generate_ids(ids, total, max_new, -1, &hooks, &res);
    if (rc < 0) return hal_fail(2, "%s", needle_error());
    if (rc) return rc;
    if (!print_ids) hal_out(s.out, needle_tok_stream_finish(&s.stream, s.out));
    hal_out("\n", 1);
    return hal_out_status() ? fail_stdout() : 0;
}

static void out_put(void *user, const char *s, size_t n) { (void)user; hal_out(s, n); }

/* One constrained turn (needle_call, needle_session.h) and its envelope; with --reply, the
 * next turn of the same conversation (needle_reply). */
static int call_turn(const char *tools_name, const needle_call_options *opt, const char *query, const char *reply)
{
    char err[256];
    static needle_envelope env;
    int rc = needle_call(query, opt, &env, err, sizeof err);
    if (rc == NEEDLE_CALL_E_TOOLS) return hal_fail(2, "%s: %s", tools_name, err);
    if (rc) return hal_fail(2, "%s", err);
    needle_call_write(&env, out_put, NULL);
    hal_out("\n", 1);
    if (hal_out_status()) return fail_stdout();
    if (!reply) return 0;   /* the envelope's "success" says whether to act on its calls */
    if (needle_reply(reply, &env, err, sizeof err)) return hal_fail(2, "--reply: %s", err);
    needle_call_write(&env, out_put, NULL);
    hal_out("\n", 1);
    return hal_out_status() ? fail_stdout() : 0;
}

#ifdef NEEDLE_TOOLS_BUILTIN
typedef struct { void *file; int failed; } snapshot_sink;

static void snapshot_put(void *user, const void *bytes, size_t n)
{
    snapshot_sink *s = user;
    if (!s->failed && hal_write(s->file, bytes, n)) s->failed = 1;
}

/* --snapshot-save FILE: feed the built-in tools' prompt up to and including </tools> (BOS,
 * the chat header, the tools block: the same for every query without --system) and write
 * the engine state after it (docs/snapshot.md).  The build does this on the host engine
 * and links FILE into the board's firmware. */
static int snapshot_save(const char *path)
{
    char err[256];
    needle_tok_span plain[NEEDLE_PROMPT_MAX_UNTRUSTED];
    size_t n_plain = 0;
    int len = needle_tool_prompt(needle_tools_json, NEEDLE_TOOLS_JSON_BYTES, "", NULL, 0, prompt, sizeof prompt,
                                 plain, &n_plain, err, sizeof err);
    if (len < 0) return hal_fail(2, "built-in tools: %s", err);
    ids[0] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode_spans(prompt, (size_t)len, ids + 1, NEEDLE_MAX_SEQ - 2, plain, n_plain);
    if (n < 0) return hal_fail(2, "the built-in tools' prompt does not fit max_seq_len %u tokens", NEEDLE_MAX_SEQ);
    const int32_t close = needle_tok_piece_id("</tools>", 8);
    uint32_t end = 0;
    for (uint32_t i = 1; i <= (uint32_t)n && !end; i++) if (close >= 0 && ids[i] == (uint32_t)close) end = i + 1u;
    if (!end) return hal_fail(2, "the tokenizer has no </tools> marker, so no prefix is constant: build with snapshot=0");
    if (!needle_prefill(ids, end)) return hal_fail(2, "%s", needle_error());
    snapshot_sink sink = { hal_create(path), 0 };
    if (!sink.file) return hal_fail(1, "cannot create %s: %s", path, hal_reason());
    size_t bytes = needle_snapshot_save(ids, snapshot_put, &sink);
    if (sink.failed) return discard(sink.file, path, hal_fail(1, "cannot write %s: %s", path, hal_reason()));
    if (hal_close(sink.file)) return discard(NULL, path, hal_fail(1, "cannot write %s: %s", path, hal_reason()));
    hal_printf("prefix snapshot: %u tokens, %zu bytes -> %s\n", (unsigned)end, bytes, path);
    return hal_out_status() ? fail_stdout() : 0;
}
#endif

static void usage(void)
{
    static const char text[] = "usage: needle --prompt TEXT [--max-new N] [--ids]\n"
          "       needle --tools FILE.json --query TEXT [--system TEXT] [--max-new N]\n"
          "              [--date TEXT|now] [--force-call] [--reply RESULTS] | [--raw | --ids] [--plain-markers]\n"
          "              [--min-confidence X] [--overrides refuse|complete] [--span-strings]\n"
          "       needle --tokens ID,ID,... [--logits FILE] [--heads FILE] [--prefill K]\n"
          "       needle --serve [--socket PATH] [--tools FILE.json] [--max-new N] [--idle-timeout S]\n"
          "              [--min-confidence X] [--overrides refuse|complete]\n"
          "              (docs/serve.md)\n"
          "       needle --info | --bench N | --help\n"
#ifdef NEEDLE_TOOLS_BUILTIN
          "       needle --snapshot-save FILE   (the built-in tools' prefix state; docs/snapshot.md)\n"
#endif
          "every mode takes --threads N: threads of a step, 1 to NEEDLE_THREADS (default: all)\n"
#ifdef NEEDLE_ARCHIVE_FILE
          "every mode but --help needs --archive PATH: this engine reads its archive from that file\n";
#else
          "(--archive PATH is for engines that read their archive from a file; this one links it in)\n";
#endif
    hal_out(text, sizeof text - 1);
}

/* --serve on a board without the service (bare metal, or a harness built with NEEDLE_NO_SERVE). */
static int serve(const char *socket_path, const char *archive, const char *tools_json, size_t tools_len,
                 uint32_t max_new, uint32_t idle_timeout, uint32_t min_confidence, int overrides)
{
#if defined(__linux__) && !defined(NEEDLE_NO_SERVE)
    return needle_serve(socket_path, archive, tools_json, tools_len, max_new, idle_timeout, min_confidence, overrides);
#else
    (void)socket_path; (void)archive; (void)tools_json; (void)tools_len; (void)max_new; (void)idle_timeout;
    (void)min_confidence; (void)overrides;
#ifdef __linux__
    return hal_fail(2, "--serve is not built into this program (NEEDLE_NO_SERVE)");
#else
    return hal_fail(2, "--serve needs a Linux board");
#endif
#endif
}

static int cli(int argc, char **argv)
{
    const char *text = NULL, *tools = NULL, *query = NULL, *system = NULL, *tokens = NULL, *logits = NULL;
    const char *heads = NULL, *archive = NULL, *socket_path = NULL, *reply = NULL, *snapshot = NULL, *date = NULL;
    uint32_t max_new = 96, bench = 0, threads = 0, prefill = 0, idle_timeout = NEEDLE_SERVE_IDLE_TIMEOUT;
    uint32_t min_confidence = NEEDLE_MIN_CONFIDENCE_PPM;    /* parts per million */
    int overrides = NEEDLE_OVERRIDES_REFUSE, judge_given = 0, span_strings = 0;
    int info = 0, max_new_given = 0, plain_markers = 0, serving = 0, raw = 0, force_call = 0, idle_given = 0;
    static const char *const once[] = { "--prompt", "--tools", "--query", "--system", "--tokens", "--logits",
                                        "--heads", "--max-new", "--bench", "--info", "--ids",
                                        "--plain-markers", "--archive", "--serve", "--socket", "--threads",
                                        "--raw", "--force-call", "--reply", "--snapshot-save", "--date", "--prefill",
                                        "--idle-timeout", "--min-confidence", "--overrides", "--span-strings" };
    uint32_t seen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        for (uint32_t k = 0; k < sizeof once / sizeof once[0]; k++) {
            if (strcmp(a, once[k])) continue;
            if (seen & (1u << k)) return hal_fail(2, "%s given more than once: pass it once (see --help)", a);
            seen |= 1u << k;
        }
        const char **slot = !strcmp(a, "--prompt") ? &text : !strcmp(a, "--tools") ? &tools
                          : !strcmp(a, "--query") ? &query : !strcmp(a, "--system") ? &system
                          : !strcmp(a, "--tokens") ? &tokens : !strcmp(a, "--logits") ? &logits
                          : !strcmp(a, "--heads") ? &heads : !strcmp(a, "--archive") ? &archive
                          : !strcmp(a, "--socket") ? &socket_path : !strcmp(a, "--reply") ? &reply
                          : !strcmp(a, "--snapshot-save") ? &snapshot : !strcmp(a, "--date") ? &date : NULL;
        if (slot || !strcmp(a, "--max-new") || !strcmp(a, "--bench") || !strcmp(a, "--threads") || !strcmp(a, "--prefill")
            || !strcmp(a, "--idle-timeout") || !strcmp(a, "--min-confidence") || !strcmp(a, "--overrides")) {
            if (i + 1 >= argc) return hal_fail(2, "%s needs a value (see --help)", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--max-new")) max_new_given = 1;
            if (slot) *slot = v;
            else if (!strcmp(a, "--prefill")) {
                if (parse_u32(v, NEEDLE_MAX_SEQ, &prefill) || prefill == 0)
                    return hal_fail(2, "--prefill wants an integer between 1 and %u, not \"%s\"", NEEDLE_MAX_SEQ, v);
            }
            else if (!strcmp(a, "--min-confidence")) {
                judge_given = 1;
                if (needle_parse_confidence(v, strlen(v), &min_confidence))
                    return hal_fail(2, "--min-confidence wants a number from 0 to 1 with at most 6 decimals (e.g. "
                                   "0.5; 0 withholds nothing), not \"%s\"", v);
            }
            else if (!strcmp(a, "--overrides")) {
                judge_given = 1;
                if (needle_parse_overrides(v, strlen(v), &overrides))
                    return hal_fail(2, "--overrides wants refuse or complete (docs/grammar.md, \"Acting on a call\"), "
                                   "not \"%s\"", v);
            }
            else if (!strcmp(a, "--idle-timeout")) {
                idle_given = 1;
                if (parse_u32(v, 86400u, &idle_timeout))
                    return hal_fail(2, "--idle-timeout wants whole seconds from 0 (never) to 86400, not \"%s\"", v);
            }
            else if (!strcmp(a, "--threads")) {
                if (parse_u32(v, NEEDLE_THREADS, &threads) || threads == 0)
                    return hal_fail(2, "--threads wants an integer between 1 and %u (this engine's NEEDLE_THREADS; "
                                   "rebuild with scons threads=N for more), not \"%s\"", NEEDLE_THREADS, v);
            }
            else if (!strcmp(a, "--max-new") ? parse_u32(v, NEEDLE_MAX_SEQ, &max_new) || max_new == 0
                                            : parse_u32(v, NEEDLE_MAX_SEQ, &bench) || bench == 0)
                return hal_fail(2, "%s wants an integer between 1 and %u, not \"%s\"", a, NEEDLE_MAX_SEQ, v);
        } else if (!strcmp(a, "--info")) {
            info = 1;
        } else if (!strcmp(a, "--ids")) {
            print_ids = 1;
        } else if (!strcmp(a, "--plain-markers")) {
            plain_markers = 1;
        } else if (!strcmp(a, "--raw")) {
            raw = 1;
        } else if (!strcmp(a, "--force-call")) {
            force_call = 1;
        } else if (!strcmp(a, "--span-strings")) {
            span_strings = 1;
        } else if (!strcmp(a, "--serve")) {
            serving = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return hal_out_status() ? fail_stdout() : 0;
        } else {
            return hal_fail(2, "unknown option \"%s\" (see --help)", a);
        }
    }
    if (socket_path && !serving) return hal_fail(2, "--socket goes with --serve");
    if (idle_given && !socket_path)
        return hal_fail(2, "--idle-timeout goes with --serve --socket (standard input has one client)");
    if (socket_path && !*socket_path)   /* Linux would bind an abstract socket no path reaches */
        return hal_fail(2, "--socket \"\": the path is empty: pass the socket file's path, e.g. /var/run/needle.sock");
    /* --serve takes the tools file alone: the query comes with each request */
    int modes = (text != NULL) + (query != NULL || (tools != NULL && !serving)) + (tokens != NULL) + info
              + (bench != 0) + serving + (snapshot != NULL);
    if (modes != 1)
        return hal_fail(2, "choose exactly one of --prompt, --tools/--query, --tokens, --info, --bench, --serve, "
                       "--snapshot-save (see --help)");
#ifndef NEEDLE_TOOLS_BUILTIN
    if (snapshot) return hal_fail(2, "--snapshot-save needs built-in tools (scons tools=FILE)");
#endif
    if (serving && (system || plain_markers || print_ids || logits || heads))
        return hal_fail(2, "--serve takes only --socket, --tools, --max-new, --idle-timeout, --min-confidence, --overrides and "
                       "--archive: system, plain_markers "
                       "and the rest come with each request (docs/serve.md)");
    if ((logits || heads || prefill) && !tokens) return hal_fail(2, "--logits, --heads and --prefill go with --tokens");
    if (system && (!query || serving)) return hal_fail(2, "--system goes with --query");
    if (date && (!query || serving)) return hal_fail(2, "--date goes with --query (a service request takes \"date\")");
    static char today[32], facts[PROMPT_MAX + 1];
    if (date && !strcmp(date, "now")) {
        if (needle_date_now(today, sizeof today))
            return hal_fail(2, "--date now needs a clock, and this board has none: pass the date as text "
                           "(e.g. --date \"2026-07-21 Tue 14:30\")");
        date = today;
    }
    if (date && !(system = needle_system_facts(system, date, facts, sizeof facts)))
        return hal_fail(2, "--date and --system are too long together: at most %u bytes", PROMPT_MAX);
    if (plain_markers && !(tools || query)) return hal_fail(2, "--plain-markers goes with --tools and --query");
    if (print_ids && (tokens || info || bench)) return hal_fail(2, "--ids goes with --prompt or --tools");
#ifdef NEEDLE_TOOLS_BUILTIN
    if (tools && !query && !serving) return hal_fail(2, "--tools goes with --query");
#else
    if ((tools || query) && !serving && (!tools || !query))
        return hal_fail(2, "--tools and --query go together (this firmware has no built-in tools: scons "
                       "tools=FILE builds them in)");
#endif
    if (reply && (!query || raw || print_ids)) return hal_fail(2, "--reply goes with a constrained --query (not --raw or --ids)");
    if (judge_given && !((query && !raw && !print_ids) || serving))
        return hal_fail(2, "--min-confidence and --overrides go with a constrained --query or --serve");
    if (span_strings && !(query && !raw && !print_ids))
        return hal_fail(2, "--span-strings goes with a constrained --query (the service takes \"span_strings\" "
                       "per request)");
    if ((raw || force_call) && !query)
        return hal_fail(2, "--raw and --force-call go with --tools and --query");
    if (raw && force_call) return hal_fail(2, "--force-call constrains the call and --raw turns the grammar off: choose one");
    if (print_ids && force_call) return hal_fail(2, "--ids prints the plain greedy ids (like --raw): drop --force-call");
#ifdef NEEDLE_ARCHIVE_FILE
    if (!archive) return hal_fail(2, "this engine reads its archive from a file: pass --archive PATH");
    /* The archive stays mapped while the engine runs: opening it for writing would truncate
     * it (the only copy, on a router) and kill the engine with SIGBUS.  Compared by device
     * and inode, so a link or another spelling of the path is caught too. */
    static const char *const out_flags[] = { "--logits", "--heads", "--snapshot-save" };
    const char *const out_paths[] = { logits, heads, snapshot };
    for (unsigned k = 0; k < sizeof out_flags / sizeof out_flags[0]; k++)
        if (out_paths[k] && hal_same_file(out_paths[k], archive))
            return hal_fail(2, "%s %s is the archive file (--archive %s): writing it would destroy the "
                           "archive; write to another file", out_flags[k], out_paths[k], archive);
#else
    if (archive) return hal_fail(2, "this engine carries its archive linked in: drop --archive");
#endif
#if !defined(__linux__) || defined(NEEDLE_NO_SERVE)
    if (serving) return serve(socket_path, NULL, NULL, 0, max_new, 0, 0, 0);   /* refused before anything runs */
#endif

    const char *tools_json = NULL;
    size_t tools_len = 0;
#if NEEDLE_GRAMMAR_RUNTIME
    if (tools && hal_read_file(tools, tools_file, TOOLS_FILE_MAX, &tools_len))
        return hal_fail(2, "cannot read %s: %s", tools, hal_reason());
    if (tools) tools_json = tools_file;
#else
    if (tools) return hal_fail(2, "--tools: this firmware calls only its built-in tools (its board file sets "
                               "[grammar] runtime = false): drop --tools");
#endif
#ifdef NEEDLE_TOOLS_BUILTIN
    if ((query || serving) && !tools) {    /* the built-in list (validated when the firmware was built) */
        tools = "built-in tools";
        tools_json = needle_tools_json;
        tools_len = NEEDLE_TOOLS_JSON_BYTES;
    }
#endif
#ifdef NEEDLE_ARCHIVE_FILE
    if (needle_archive_map(archive)) return hal_fail(3, "%s", needle_error());
#endif
    if (needle_boot()) return hal_fail(3, "%s", needle_error());
    if (threads && needle_set_threads(threads)) return hal_fail(2, "%s", needle_error());
    if (info) { print_info(); return hal_out_status() ? fail_stdout() : 0; }
    if (bench) {
        int rc = needle_bench(bench);
        return rc == 0 && hal_out_status() ? fail_stdout() : rc;
    }
    if (tokens) return run_tokens(tokens, logits, heads, prefill);
#ifdef NEEDLE_TOOLS_BUILTIN
    if (snapshot) return snapshot_save(snapshot);
#endif
    if (query && !raw && !print_ids) {   /* a constrained call (retrieval, grammar, envelope) */
        const needle_call_options opt = { tools_json, tools_len, system, NULL, max_new, force_call, plain_markers,
                                          (float)min_confidence / 1e6f, overrides, span_strings };
        return call_turn(tools, &opt, query, reply);
    }
    if (tools || query) {
        char err[256];
        needle_tok_span plain[NEEDLE_PROMPT_MAX_UNTRUSTED];
        size_t n_plain = 0;
        /* The service checks its tools file once, with an empty query, before it starts. */
        int n = needle_tool_prompt(tools_json, tools_len, serving ? "" : query, serving ? NULL : system,
                                   plain_markers, prompt, sizeof prompt, plain, &n_plain, err, sizeof err);
        if (n == NEEDLE_PROMPT_E_TEXT) return hal_fail(2, "%s", err);     /* the query or system text */
        if (n < 0) return hal_fail(2, "%s: %s", tools, err);
        static needle_grammar checked;
        if (serving && needle_call_grammar(&checked, tools_json, tools_len, 0, err, sizeof err))
            return hal_fail(2, "%s: %s", tools, err);    /* the service's calls are constrained by it */
        if (!serving) return generate(prompt, (size_t)n, plain, n_plain, max_new, max_new_given);   /* --raw, --ids */
    }
    if (serving)
        return serve(socket_path, archive, tools ? tools_json : NULL, tools_len, max_new, idle_timeout, min_confidence,
                     overrides);
    return generate(text, strlen(text), NULL, 0, max_new, max_new_given);
}

int needle_cli(int argc, char **argv)
{
    print_ids = 0;   /* a fresh run each call (the fuzz harness calls this in a loop) */
    return cli(argc, argv);
}
