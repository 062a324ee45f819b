/* serve_sessions.c -- `needle --serve`: the engine as a long-running service (Linux boards only).
 *
 *   needle --serve [--socket PATH] [--tools FILE.json] [--max-new N] [--idle-timeout S]
 *
 * Requests are JSON lines: one JSON object per line, one answer object per line.  Without
 * --socket they come on standard input and the answers go to standard output (a pipe,
 * socat or an rpcd plugin drives it) until standard input ends; with --socket the service
 * listens on a Unix stream socket and serves one connection at a time, forever (procd or
 * systemd restarts it if it dies).  Each connection (standard input: the whole run) has one
 * session: the engine's KV cache holds everything fed so far.  A "query" starts a fresh
 * session (protocol version 2) unless it says "continue": true; a "prompt", a "results" turn
 * and a continued query are appended after what is there, until {"reset": true}.  A request
 * that does not fit is refused before anything runs; a call the budget cut short is
 * ok:false.  docs/serve.md is the protocol.
 *
 * Generation is needle_generate_ids() (needle_session.c), the CLI's own, so a request on a
 * fresh session chooses the tokens `needle --prompt` / `--tools --query` chooses; the service also stops at
 * <|im_end|> when the archive's tokenizer has that marker (the end of an assistant turn).
 *
 * No heap: every buffer is static.  A malformed request (invalid JSON or UTF-8, an unknown
 * key, a wrong type, a line over NEEDLE_SERVE_LINE_MAX bytes) is answered with an error
 * object and the service goes on.  A socket client that sends no whole request, or takes no
 * answer, for --idle-timeout seconds is disconnected, so one client cannot hold the service.
 *
 * An archive read from a file (placement `file`) is watched: before each request and before
 * each answer needle_archive_changed() asks whether the file was truncated, rewritten in place
 * or replaced since start; if so, and if a truncation makes the engine read past the file's
 * end (SIGBUS), the request gets an error answer and the service exits with status 3, so that
 * procd or systemd restarts it on the file now there (docs/serve.md, "The archive file").
 */
#define _POSIX_C_SOURCE 200809L   /* sigaction under -std=c11 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "needle_model.h"
#include "needle_retrieval.h"
#include "needle_session_internal.h"
#include "needle_tokenizer.h"
#include "needle_tool_call.h"
#include "serve_internal.h"

#define IM_END         "<|im_end|>"

static char prompt[NEEDLE_TOK_MAX_TEXT + 1];   /* a rendered tool-calling prompt */
static uint32_t ids[NEEDLE_MAX_SEQ];
static char text[NEEDLE_MAX_SEQ * NEEDLE_TOK_STREAM_OUT_MAX + 4];   /* the generated text */

/* What needle_serve() was started with. */
static const char *start_tools;
static size_t start_tools_len;
static uint32_t start_max_new;
static uint32_t start_min_confidence;          /* --min-confidence, parts per million */
static int start_overrides;                    /* --overrides */
static int32_t im_end_id = -1;                 /* <|im_end|>, or -1 when the tokenizer has none */

/* The session: the engine's state plus the token chosen last and not yet fed. */
static int32_t pending = -1;

/* ==================================================================================
 * Answers
 * ================================================================================== */
static void answer_start(writer *w, const request *r, int ok)
{
    w_put(w, "{", 1);
    if (r && r->id) {
        w_str(w, "\"id\":");
        w_put(w, r->id, r->id_len);
        w_put(w, ",", 1);
    }
    w_str(w, ok ? "\"ok\":true" : "\"ok\":false");
}

void answer_error(writer *w, const request *r, const char *fmt, ...)
{
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    answer_start(w, r, 0);
    w_str(w, ",\"error\":");
    w_json_string(w, m, strlen(m));
    w_str(w, "}\n");
}

/* A message of the library (the grammar, the constrained turn, the prompt renderer), written
 * for the CLI, with the CLI's flags named as the request keys that set the same thing. */
static const char *as_request_keys(const char *err)
{
    static const char *const flags[][2] = {
        { "--force-call", "\"force_call\"" }, { "--max-new", "\"max_new\"" }, { "--system", "\"system\"" },
        { "--plain-markers", "\"plain_markers\"" }, { "--date", "\"date\"" }, { "--raw", "\"raw\"" },
        { "--reply", "\"results\"" },
    };
    static char out[1024];
    size_t n = 0;
    while (*err && n + 1 < sizeof out) {
        size_t k = 0;
        while (k < sizeof flags / sizeof flags[0] && strncmp(err, flags[k][0], strlen(flags[k][0]))) k++;
        const char *from = k < sizeof flags / sizeof flags[0] ? flags[k][1] : err;
        size_t len = k < sizeof flags / sizeof flags[0] ? strlen(from) : 1;
        if (n + len + 1 > sizeof out) break;
        memcpy(out + n, from, len);
        n += len;
        err += k < sizeof flags / sizeof flags[0] ? strlen(flags[k][0]) : 1;
    }
    out[n] = 0;
    return out;
}

/* ---- the archive file, watched (placement `file`; docs/serve.md, "The archive file") ---- */
static int archive_gone;                       /* it changed: the service ends after this answer */
static char archive_why[1024];                 /* why, for the log line */
#ifdef NEEDLE_ARCHIVE_FILE
static const char *bus_id;                     /* the id of the request being answered, as written */
static size_t bus_id_len;
static char bus_answer[1200], bus_log[1200];   /* what the SIGBUS handler writes */
static size_t bus_answer_len, bus_log_len;

#define ARCHIVE_RESTART "the service stops (exit 3) so that procd or systemd restarts it"
#define ARCHIVE_UPDATE  "update archives by renaming a new file into place, never by copying over the old one"

/* A truncated archive file: the engine read past its new end.  The request gets its error
 * answer, the log its request_line, and the process exits 3 (async-signal-safe: write and _exit). */
static void on_sigbus(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    const uint8_t *at = info ? (const uint8_t *)info->si_addr : NULL;
    if (!at || at < needle_cact || at >= needle_cact + NEEDLE_ARCHIVE_BYTES) {
        signal(sig, SIG_DFL);   /* not the archive: the fault it is (returning re-raises it) */
        return;
    }
    const int fd = answer_fd;
    ssize_t ignored = 0;
    if (answer_mid_line) ignored += write(fd, "\n", 1);
    ignored += write(fd, "{", 1);
    if (bus_id) {
        ignored += write(fd, "\"id\":", 5);
        ignored += write(fd, bus_id, bus_id_len);
        ignored += write(fd, ",", 1);
    }
    ignored += write(fd, bus_answer, bus_answer_len);
    ignored += write(2, bus_log, bus_log_len);
    (void)ignored;
    _exit(3);
}

/* The SIGBUS handler and its lines, made before any request. */
static void archive_watch(const char *path)
{
    char m[1024];
    snprintf(m, sizeof m, "archive %s was truncated on disk while this request was answered: " ARCHIVE_RESTART
             "; " ARCHIVE_UPDATE " (docs/serve.md)", path ? path : "(the --archive file)");
    textbuf b = { bus_answer, 0, sizeof bus_answer };
    t_put(&b, "\"ok\":false,\"error\":\"", 20);
    json_escape(m, strlen(m), t_put, &b);
    t_put(&b, "\"}\n", 3);
    bus_answer_len = b.n;
    bus_log_len = (size_t)snprintf(bus_log, sizeof bus_log, "needle: error: %s\n", m);
    if (bus_log_len >= sizeof bus_log) bus_log_len = sizeof bus_log - 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}
#endif

/* Is the archive file as it was at start?  If not, the request gets an error answer naming
 * the change and the fix, and the service ends after it: 1. */
static int archive_changed(writer *w, const request *r)
{
#ifdef NEEDLE_ARCHIVE_FILE
    const char *why = needle_archive_changed();
    if (!why) return 0;
    if (strstr(why, "was replaced"))   /* the way to update: the mapping is intact, the new file waits */
        snprintf(archive_why, sizeof archive_why, "%s: " ARCHIVE_RESTART " on the new file", why);
    else
        snprintf(archive_why, sizeof archive_why, "%s: " ARCHIVE_RESTART "; " ARCHIVE_UPDATE " (docs/serve.md)", why);
    answer_error(w, r, "%s", archive_why);
    archive_gone = 1;
    return 1;
#else
    (void)w; (void)r;
    return 0;
#endif
}

/* The token hook: decode into text[]. */
typedef struct {
    needle_tok_stream stream;
    size_t len;
    double prefilled_ms;
} collect;

static void on_prefilled(void *ctx) { ((collect *)ctx)->prefilled_ms = now_ms(); }

static int on_token(void *ctx, uint32_t id)
{
    collect *c = ctx;
    c->len += needle_tok_stream_push(&c->stream, id, text + c->len);
    return 0;
}

static const char *const STOP[] = { "eos", "im_end", "max_new", "context" };

/* ---- constrained turns: "query" (unless "raw") and "results" (docs/serve.md) ------------- */
static needle_grammar grammar;      /* of the session's last constrained query */
static needle_retrieval retrieval;  /* its tools, where retrieval picked five (needle_retrieval.h) */
static needle_toolset toolset;      /* a query's tools, parsed once: what retrieval, the prompt and */
static char tools_text[NEEDLE_TOK_MAX_TEXT + 1];   /* the grammar read; its minified list */
static int call_open;               /* the session's last answer was a call turn: "results" may follow */
static needle_envelope envelope;
static char results_text[NEEDLE_TOK_MAX_TEXT + 1];

static void put_envelope(void *user, const char *s, size_t n) { w_put(user, s, n); }

/* The tokens a call needs at the least: <tool_call>, the shortest call list, </tool_call>,
 * <|im_end|> (needle_call_turn's own check). */
static uint32_t call_min(void) { return 1u + needle_grammar_list_min(&grammar) + 2u; }

/* The tool list of the call "results" would answer, and of the query being checked: a query
 * refused after its grammar replaced the session's (the run-time grammar has one store) must
 * leave that call answerable, so its list is compiled again (restore_call). */
static char tools_a[NEEDLE_SERVE_LINE_MAX], tools_b[NEEDLE_SERVE_LINE_MAX];
static char *call_tools = tools_a, *next_tools = tools_b;
static size_t call_tools_len, next_tools_len;
static int call_force, next_force;
/* and its tools' own thresholds: retrieval's five are a minified list without them */
static int32_t ppm_a[NEEDLE_GRAMMAR_MAX_TOOLS], ppm_b[NEEDLE_GRAMMAR_MAX_TOOLS];
static int32_t *call_ppm = ppm_a, *next_ppm = ppm_b;

static const uint8_t *call_query;     /* the span strings' query of that call (needle_grammar_set_query) */
static uint32_t call_query_len;
static int call_span_all;

/* A constrained query refused before anything ran: the session as it was, its last call
 * answerable again when it was (reopen). */
static void restore_call(int reopen)
{
    char err[256];
    if (reopen && !needle_call_grammar(&grammar, call_tools, call_tools_len, call_force, err, sizeof err)) {
        grammar.tool_ppm = call_ppm;
        grammar.query = call_query;      /* the buffer still holds it: only an accepted query replaces it */
        grammar.query_len = call_query_len;
        grammar.span_all = call_span_all;
        call_open = 1;
    }
}

/* The query is accepted: its list is the one "results" will answer. */
static void accept_call_tools(void)
{
    char *t = call_tools;
    call_tools = next_tools;
    next_tools = t;
    int32_t *p = call_ppm;
    call_ppm = next_ppm;
    next_ppm = p;
    call_tools_len = next_tools_len;
    call_force = next_force;
}

/* A request that does not fit what is free of the context, refused before anything is fed
 * (docs/serve.md, "Sessions"): `feed` tokens to feed, at least `answer` to generate, `avail`
 * of NEEDLE_MAX_SEQ free; at_start: the session would be fresh, so only a shorter request helps. */
static void answer_no_room(writer *w, const request *r, const char *what, uint32_t feed, uint32_t answer,
                           uint32_t avail, int at_start)
{
    if (at_start)
        answer_error(w, r, "%s needs %u tokens (%u to feed, at least %u to answer) and a fresh session has %u: "
                           "send a shorter %s", what, feed + answer, feed, answer, NEEDLE_MAX_SEQ,
                     r->query ? "query, system text or tool list" : "prompt");
    else
        answer_error(w, r, "%s needs %u tokens (%u to feed, at least %u to answer) and the session has %u of %u "
                           "free: %s", what, feed + answer, feed, answer, avail, NEEDLE_MAX_SEQ,
                     r->query ? "send the query without \"continue\" (a fresh session), or {\"reset\": true} first"
                              : "send {\"reset\": true} to start a fresh session, then the request again");
}

/* A call whose max_new cannot hold its shortest answer, refused before anything is fed: 1. */
static int short_max_new(writer *w, const request *r, uint32_t least)
{
    const uint32_t max_new = r->has_max_new ? r->max_new : start_max_new;
    if (max_new >= least) return 0;
    answer_error(w, r, "a call needs at least %u tokens but \"max_new\" is %u: raise \"max_new\"", least, max_new);
    return 1;
}


/* Decode one constrained turn after turn_ids[0..n) and answer its envelope (the CLI's request_line,
 * needle_call_turn).  A turn refused before anything is fed (the budget) leaves the session
 * as it was; an engine error resets it. */
static void answer_turn(writer *w, const request *r, uint32_t *turn_ids, uint32_t n)
{
    char err[256];
    const uint32_t before = needle_position();
    if (needle_call_turn(&grammar, turn_ids, n, r->has_max_new ? r->max_new : start_max_new, NULL, NULL,
                         &envelope, err, sizeof err)) {
        if (needle_position() != before) {
            needle_reset();
            pending = -1;
            call_open = 0;
            answer_error(w, r, "engine error: %s (the session was reset)", as_request_keys(err));
        } else {
            answer_error(w, r, "%s", as_request_keys(err));
        }
        return;
    }
    if (archive_changed(w, r)) return;   /* the answer would be the changed file's */
    needle_envelope_judge(&envelope, r->has_judge & 1 ? r->min_confidence : start_min_confidence,
                          r->has_judge & 2 ? r->overrides : start_overrides);
    static char cut[400];
    if (envelope.cut == NEEDLE_CUT_MAX_NEW) {
        snprintf(cut, sizeof cut, "\"max_new\" (%u) ran out in the middle of the call, which was cut short: raise "
                 "\"max_new\" and send the request again", r->has_max_new ? r->max_new : start_max_new);
    } else if (envelope.cut == NEEDLE_CUT_CONTEXT) {
        snprintf(cut, sizeof cut, "the context ran out in the middle of the call (%u tokens were free for the "
                 "answer), which was cut short: %s", NEEDLE_MAX_SEQ - before - n, before == 0
                 ? "send a shorter query, system text or tool list"
                 : "send {\"reset\": true} (or the query without \"continue\"), then the request again");
    }
    envelope.retrieved_count = retrieval.n_chosen;      /* a results turn keeps its query's tools */
    envelope.retrieval_tokens = retrieval.tokens;
    memcpy(envelope.retrieved, retrieval.chosen, sizeof envelope.retrieved);
    retrieval.tokens = 0;                               /* embedded for the query's turn only */
    pending = (int32_t)turn_ids[n + envelope.generated_tokens - 1u];   /* <|im_end|>: chosen, fed next */
    call_open = 1;   /* also a call cut short: its (complete) call list may be answered */
    answer_start(w, r, !envelope.error_code);   /* not to be acted on: never "ok": true */
    if (envelope.error_code) {   /* a cut in the service's words (request keys); the envelope is the CLI's */
        const char *why = envelope.cut ? cut : envelope.error;
        w_str(w, ",\"error\":");
        w_json_string(w, why, strlen(why));
    }
    if (envelope.cut) w_fmt(w, ",\"stop\":\"%s\"", envelope.cut == NEEDLE_CUT_MAX_NEW ? "max_new" : "context");
    w_fmt(w, ",\"position\":%u,\"envelope\":", needle_position() + 1u);
    needle_envelope_write(&envelope, turn_ids, put_envelope, w);
    w_str(w, "}\n");
}

/* {"results": ...}: the calls' results as the next turn of the session (needle_call_reply_ids),
 * then a constrained turn with the last query's tools. */
static void answer_results(writer *w, const request *r)
{
    char err[256];
    if (!call_open || pending < 0) {
        answer_error(w, r, "\"results\" answer a call: send a \"query\" first (its answer must be the "
                           "session's last)");
        return;
    }
    if (r->results_len > NEEDLE_TOK_MAX_TEXT) {
        answer_error(w, r, "\"results\" is longer than %u bytes: send less", NEEDLE_TOK_MAX_TEXT);
        return;
    }
    memcpy(results_text, r->results, r->results_len);
    results_text[r->results_len] = 0;
    int32_t k = needle_call_reply_ids(results_text, ids, NEEDLE_MAX_SEQ, err, sizeof err);   /* ids[0]: the pending <|im_end|> */
    if (k < 0) { answer_error(w, r, "\"results\": %s", as_request_keys(err)); return; }
    const uint32_t avail = NEEDLE_MAX_SEQ - needle_position() - 1u, feed = (uint32_t)k - 1u;   /* the <|im_end|> counted */
    if (feed + call_min() > avail) { answer_no_room(w, r, "the results turn", feed, call_min(), avail, 0); return; }
    if (short_max_new(w, r, call_min())) return;
    answer_turn(w, r, ids, (uint32_t)k);
}

/* Answer one request line (request_line[0..len)). */
void serve_handle(writer *w, size_t len)
{
    json j = { request_line, request_line + len, request_line, NULL };
    request r;
#ifdef NEEDLE_ARCHIVE_FILE
    bus_id = NULL;
#endif
    size_t valid = utf8_valid(len);
    if (valid < len) {
        parse_prefix(&r, valid);
        answer_error(w, r.id ? &r : NULL, "request is not valid UTF-8 (byte %zu): send UTF-8 text", valid + 1);
        return;
    }
    parse_request(&j, &r);
#ifdef NEEDLE_ARCHIVE_FILE
    bus_id = r.id;
    bus_id_len = r.id_len;
#endif
    if (j.err) {
        answer_error(w, r.id ? &r : NULL, "request is not valid JSON: %s at byte %zu (send one JSON object per line)",
                     j.err, (size_t)(j.p - j.begin) + 1);
        return;
    }
    if (archive_changed(w, &r)) return;
    if (r.problem) { answer_error(w, &r, "%s", r.problem); return; }
    int kinds = (r.prompt != NULL) + (r.query != NULL) + (r.results != NULL) + r.reset;
    if (kinds != 1) {
        answer_error(w, &r, kinds ? "give one of \"prompt\", \"query\", \"results\" or \"reset\" per request"
                                  : "a request needs \"prompt\", \"query\", \"results\" or \"reset\": true");
        return;
    }
    if (!r.query && r.has_cont) {
        answer_error(w, &r, "\"continue\" goes with \"query\" only (a \"prompt\" or \"results\" always continues "
                            "the session): leave it out");
        return;
    }
    if (!r.query && (r.tools || r.system || r.date || r.has_plain_markers || r.has_raw || r.has_force_call)) {
        answer_error(w, &r, "\"tools\", \"system\", \"date\", \"plain_markers\", \"raw\" and \"force_call\" go "
                            "with \"query\" (\"results\" keeps the query's)");
        return;
    }
    if (r.raw && r.force_call) {
        answer_error(w, &r, "\"force_call\" constrains the call and \"raw\" turns the grammar off: choose one");
        return;
    }
    if (r.has_span && !(r.query && !r.raw)) {
        answer_error(w, &r, "\"span_strings\" goes with a constrained \"query\" (\"results\" keeps the query's)");
        return;
    }
    if (r.has_judge && !((r.query && !r.raw) || r.results)) {
        answer_error(w, &r, "\"min_confidence\" and \"overrides\" go with a constrained \"query\" or with \"results\"");
        return;
    }
    if (r.reset) {
        if (r.has_max_new || r.has_judge) { answer_error(w, &r, "\"reset\" goes alone (with an optional \"id\")"); return; }
        needle_reset();
        pending = -1;
        call_open = 0;
        answer_start(w, &r, 1);
        w_str(w, ",\"reset\":true}\n");
        return;
    }
    if (r.results) { answer_results(w, &r); return; }

    /* the prompt text, and the ranges of it whose chat markers are plain text */
    const int fresh = r.query && !r.cont;   /* a query starts a fresh session unless it continues */
    int reopen = 0;                         /* a refused constrained query: the last call answerable again */
    const char *prompt_text = r.prompt;
    size_t prompt_len = r.prompt_len;
    needle_tok_span plain[NEEDLE_PROMPT_MAX_UNTRUSTED];
    size_t n_plain = 0;
    if (r.query) {
        const char *tools = r.tools ? r.tools : start_tools;
        size_t tools_len = r.tools ? r.tools_len : start_tools_len;
        if (!tools) {
            answer_error(w, &r, "\"query\" needs tools: add \"tools\": [...] to the request, or start the "
                                "service with --tools FILE.json");
            return;
        }
        char err[256];
        static char today[32], facts[NEEDLE_TOK_MAX_TEXT + 1];
        const char *date = r.date, *system = r.system;
        if (date && !strcmp(date, "now")) {
            if (needle_date_now(today, sizeof today)) { answer_error(w, &r, "\"date\": \"now\": no clock"); return; }
            date = today;
        }
        if (date && !(system = needle_system_facts(system, date, facts, sizeof facts))) {
            answer_error(w, &r, "\"date\" and \"system\" are too long together: at most %u bytes", NEEDLE_TOK_MAX_TEXT);
            return;
        }
        needle_toolset_parse(&toolset, tools, tools_len, tools_text, sizeof tools_text);   /* its one pass */
        /* more than five tools, an engine with the embedding head, a fresh session (embedding
         * runs the engine from position 0): render the five the head picks (docs/serve.md) */
        if (!r.raw) {
            memset(&retrieval, 0, sizeof retrieval);
            size_t chosen_len;
            const uint32_t was = needle_position();
            const char *list = fresh || (was == 0 && pending < 0)
                ? needle_retrieve_toolset(&toolset, r.query, NULL, 0, &chosen_len, &retrieval, err, sizeof err)
                : tools;
            if (needle_position() != was) { pending = -1; call_open = 0; }   /* retrieval ran the engine */
            if (!list) {
                answer_error(w, &r, "%s%s", r.tools ? "\"tools\": " : "the --tools file: ", as_request_keys(err));
                return;
            }
            if (list != tools) { tools = list; tools_len = chosen_len; }
        }
        int n = needle_tool_prompt_toolset(&toolset, r.query, system, r.plain_markers, prompt, sizeof prompt, plain,
                                           &n_plain, err, sizeof err);
        if (n < 0) {     /* E_TEXT: the query or system text, named in err, not the tool list */
            answer_error(w, &r, "%s%s", n == NEEDLE_PROMPT_E_TEXT ? "" : r.tools ? "\"tools\": " : "the --tools file: ",
                         as_request_keys(err));
            return;
        }
        if (!r.raw) {   /* the grammar is replaced: the last call is answerable again only if this is refused */
            reopen = call_open;
            call_open = 0;
            memcpy(next_tools, tools, tools_len);
            next_tools_len = tools_len;
            next_force = r.force_call;
        }
        if (!r.raw && needle_call_grammar_toolset(&grammar, &toolset, r.force_call, err, sizeof err)) {
            answer_error(w, &r, "%s%s", r.tools ? "\"tools\": " : "the --tools file: ", as_request_keys(err));
            restore_call(reopen);
            return;
        }
        if (!r.raw)
            for (uint32_t i = 0; i < grammar.n_tools && i < NEEDLE_GRAMMAR_MAX_TOOLS; i++)
                next_ppm[i] = grammar.tool_ppm ? grammar.tool_ppm[i] : -1;
        if (!r.raw && needle_grammar_check_query(&grammar, r.query, strlen(r.query), r.span_strings, err, sizeof err)) {
            answer_error(w, &r, "\"query\": %s", as_request_keys(err));
            restore_call(reopen);
            return;
        }
        prompt_text = prompt;
        prompt_len = (size_t)n;
    } else if (prompt_len == 0) {
        answer_error(w, &r, "empty prompt: send some text");
        return;
    }

    /* token ids: the token chosen last (fed only now), BOS on a fresh session, the prompt */
    uint32_t pos = fresh ? 0u : needle_position(), carried = !fresh && pending >= 0, base = 0;
    if (carried) ids[base++] = (uint32_t)pending;
    else if (pos == 0) ids[base++] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode_spans(prompt_text, prompt_len, ids + base, NEEDLE_MAX_SEQ - 2, plain, n_plain);
    if (n == NEEDLE_TOK_E_UTF8) { answer_error(w, &r, "prompt is not valid UTF-8"); restore_call(reopen); return; }
    if (n < 0) {
        answer_error(w, &r, "prompt too long: it must encode to at most %u tokens (max_seq_len %u minus BOS and "
                            "one new token) and %u bytes: shorten it", NEEDLE_MAX_SEQ - 2, NEEDLE_MAX_SEQ,
                     NEEDLE_TOK_MAX_TEXT);
        restore_call(reopen);
        return;
    }
    /* Checked before anything is fed (or a fresh query resets the session), so a refused
     * request leaves the session as it was. */
    const uint32_t fed = base + (uint32_t)n, feed = fed - carried, avail = NEEDLE_MAX_SEQ - pos - carried;
    const int call = r.query && !r.raw;
    const uint32_t least = call ? call_min() : 1u, max_new = r.has_max_new ? r.max_new : start_max_new;
    if (feed + least > avail) {   /* no room for the prompt and the shortest answer */
        answer_no_room(w, &r, "the prompt", feed, least, avail, pos == 0 && !carried);
        restore_call(reopen);
        return;
    }
    if (short_max_new(w, &r, least)) { restore_call(reopen); return; }
    if (fresh) {
        needle_reset();
        pending = -1;
    }
    if (call) {
        char err[256];     /* checked above: it cannot fail now */
        needle_grammar_set_query(&grammar, r.query, strlen(r.query), r.span_strings, err, sizeof err);
        call_query = grammar.query;
        call_query_len = grammar.query_len;
        call_span_all = grammar.span_all;
        accept_call_tools();
        answer_turn(w, &r, ids, fed);
        return;
    }

    static collect c;
    needle_tok_stream_init(&c.stream);
    c.len = 0;
    needle_gen_hooks hooks = { on_prefilled, on_token, &c };
    needle_gen_result res;
    double t0 = now_ms();
    c.prefilled_ms = t0;
    int rc = needle_generate_ids(ids, fed, max_new, im_end_id, &hooks, &res);
    double t1 = now_ms();
    if (rc) {
        needle_reset();
        pending = -1;
        answer_error(w, &r, "engine error: %s (the session was reset)", needle_error());
        return;
    }
    c.len += needle_tok_stream_finish(&c.stream, text + c.len);
    if (archive_changed(w, &r)) return;   /* the text would be the changed file's */
    call_open = 0;
    pending = res.stop == NEEDLE_STOP_EOS ? -1 : (int32_t)res.last;
    uint32_t position = needle_position() + (pending >= 0);
    double prefill = c.prefilled_ms - t0, dec = t1 - c.prefilled_ms;

    answer_start(w, &r, 1);
    w_str(w, ",\"text\":");
    w_json_string(w, text, c.len);
    w_fmt(w, ",\"prompt_tokens\":%u,\"generated_tokens\":%u,\"position\":%u,\"stop\":\"%s\"",
          fed - carried, res.generated, position, STOP[res.stop]);
    w_num(w, "prefill_ms", prefill);
    w_num(w, "decode_ms", dec);
    w_num(w, "prefill_tps", prefill > 0 ? fed * 1e3 / prefill : 0.0);
    w_num(w, "decode_tps", dec > 0 ? res.generated * 1e3 / dec : 0.0);
    w_str(w, "}\n");
}

void serve_start(const char *archive_path, const char *tools_json, size_t tools_len, uint32_t max_new,
                 uint32_t min_confidence, int overrides)
{
    start_tools = tools_json;
    start_tools_len = tools_len;
    start_max_new = max_new;
    start_min_confidence = min_confidence;
    start_overrides = overrides;
#ifdef NEEDLE_ARCHIVE_FILE
    archive_watch(archive_path);
#else
    (void)archive_path;
#endif
    int32_t id = needle_tok_piece_id(IM_END, sizeof IM_END - 1);
    im_end_id = id >= 0 && (uint32_t)id < NEEDLE_OUT_VOCAB && needle_tok_piece_type((uint32_t)id) == NEEDLE_TOK_USER_DEFINED
              ? id : -1;
}

void serve_session_start(void)
{
    needle_reset();
    pending = -1;
    call_open = 0;
}

const char *serve_archive_gone(void) { return archive_gone ? archive_why : NULL; }
