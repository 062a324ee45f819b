/* serve.c -- `needle --serve`: the engine as a long-running service (Linux boards only).
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
#define _POSIX_C_SOURCE 200809L   /* sigaction, lstat, clock_gettime, poll under -std=c11 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hal.h"
#include "needle_model.h"
#include "needle_tokenizer.h"
#include "needle_retrieval.h"
#include "needle_tool_call.h"
#include "serve.h"
#include "tool_prompt.h"

#define LINE_MAX_BYTES NEEDLE_SERVE_LINE_MAX
#define ID_MAX         128u    /* bytes of an "id" value as written in the request */
#define JSON_DEPTH     NEEDLE_PROMPT_MAX_DEPTH
#define IM_END         "<|im_end|>"

static char line[LINE_MAX_BYTES + 2];          /* the request being answered (a CR may follow the limit) */
static char rbuf[4096];                        /* bytes read ahead of it */
static char wbuf[4096];                        /* the answer being written */
static char prompt[NEEDLE_TOK_MAX_TEXT + 1];   /* a rendered tool-calling prompt */
static uint32_t ids[NEEDLE_MAX_SEQ];
static char text[NEEDLE_MAX_SEQ * NEEDLE_TOK_STREAM_OUT_MAX + 4];   /* the generated text */
static char msg[512];                          /* an error answer's message */

/* What needle_serve() was started with. */
static const char *start_tools;
static size_t start_tools_len;
static uint32_t start_max_new;
static uint32_t start_min_confidence;          /* --min-confidence, parts per million */
static int start_overrides;                    /* --overrides */
static int32_t im_end_id = -1;                 /* <|im_end|>, or -1 when the tokenizer has none */

/* The session: the engine's state plus the token chosen last and not yet fed. */
static int32_t pending = -1;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* Length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* s[0..n) as the inside of a JSON string (RFC 8259): quote and backslash escaped, control
 * characters as \u00XX, valid UTF-8 as it is, any invalid byte as \ufffd (the replacement
 * character); the pieces go to put(user, ...). */
static void json_escape(const char *s, size_t n, void (*put)(void *, const char *, size_t), void *user)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t run = i;   /* bytes that need no escaping go out in one piece */
        for (;;) {
            if (run >= n || u[run] < 0x20 || u[run] == '"' || u[run] == '\\') break;
            size_t k = u[run] < 0x80 ? 1 : utf8_seq(u + run, n - run);
            if (!k) break;
            run += k;
        }
        put(user, s + i, run - i);
        i = run;
        if (i >= n) break;
        if (u[i] == '"' || u[i] == '\\') {
            char esc[2] = { '\\', (char)u[i] };
            put(user, esc, 2);
        } else if (u[i] < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)u[i]);
            put(user, esc, 6);
        } else {
            put(user, "\\ufffd", 6);
        }
        i++;
    }
}

/* A bounded text buffer for json_escape (cut when full, always NUL-terminated). */
typedef struct { char *p; size_t n, cap; } textbuf;

static void t_put(void *user, const char *s, size_t n)
{
    textbuf *b = user;
    size_t k = b->cap - 1 - b->n < n ? b->cap - 1 - b->n : n;
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = 0;
}

/* ==================================================================================
 * Output: one buffered writer per connection
 * ================================================================================== */
typedef struct {
    int fd;
    size_t n;        /* bytes in wbuf */
    int failed;      /* a write failed (errno in err): the peer is gone, or took nothing in time */
    int err;
    int timeout_ms;  /* > 0: a flush that the peer does not take within it fails (ETIMEDOUT) */
} writer;

/* The descriptor answers go to, and whether a line of it is half written: for the SIGBUS
 * handler, which answers on its own (on_sigbus). */
static volatile sig_atomic_t answer_fd = 1, answer_mid_line;

static void w_flush(writer *w)
{
    const double deadline = now_ms() + w->timeout_ms;
    for (size_t off = 0; off < w->n && !w->failed;) {
        ssize_t k = write(w->fd, wbuf + off, w->n - off);
        if (k >= 0) {
            off += (size_t)k;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {   /* a non-blocking peer that is full */
            struct pollfd p = { w->fd, POLLOUT, 0 };
            double left = deadline - now_ms();
            int ready = poll(&p, 1, w->timeout_ms <= 0 ? -1 : left > 0 ? (int)left + 1 : 0);
            if (ready > 0 || (ready < 0 && errno == EINTR)) continue;
            w->failed = 1;
            w->err = ready == 0 ? ETIMEDOUT : errno;
            break;
        }
        w->failed = 1;
        w->err = errno;
    }
    if (w->n && !w->failed) answer_mid_line = wbuf[w->n - 1] != '\n';
    w->n = 0;
}

static void w_put(writer *w, const char *s, size_t n)
{
    while (n && !w->failed) {
        if (w->n == sizeof wbuf) w_flush(w);
        size_t k = sizeof wbuf - w->n < n ? sizeof wbuf - w->n : n;
        memcpy(wbuf + w->n, s, k);
        w->n += k;
        s += k;
        n -= k;
    }
}

static void w_str(writer *w, const char *s) { w_put(w, s, strlen(s)); }

static void w_sink(void *user, const char *s, size_t n) { w_put(user, s, n); }

static void w_fmt(writer *w, const char *fmt, ...)
{
    char b[96];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n > 0) w_put(w, b, (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* s[0..n) as a JSON string (json_escape). */
static void w_json_string(writer *w, const char *s, size_t n)
{
    w_put(w, "\"", 1);
    json_escape(s, n, w_sink, w);
    w_put(w, "\"", 1);
}

/* %.3f, or 0 for a quantity that was not measured */
static void w_num(writer *w, const char *key, double v)
{
    w_fmt(w, ",\"%s\":%.3f", key, v == v && v >= 0 && v < 1e15 ? v : 0.0);
}

/* ==================================================================================
 * Input: lines of at most LINE_MAX_BYTES bytes
 * ================================================================================== */
typedef struct {
    int fd;
    size_t start, end;   /* unread bytes rbuf[start..end) */
    int eof;
    int timeout_ms;      /* > 0: a whole line must arrive within it (LINE_IDLE) */
} reader;

enum { LINE_OK, LINE_LONG, LINE_EOF, LINE_ERROR, LINE_IDLE };

/* The next line into line[0..*len) (NUL-terminated, newline dropped; the last line may lack
 * its newline).  A line over LINE_MAX_BYTES (a CR before its newline not counted: CRLF line
 * ends) is read to its end and dropped: LINE_LONG, with its first LINE_MAX_BYTES bytes in
 * line[0..*len), whose id is echoed when it can be.  With a timeout, a line that does not
 * arrive whole within it is LINE_IDLE. */
static int read_line(reader *r, size_t *len)
{
    const double deadline = now_ms() + r->timeout_ms;
    size_t n = 0;
    int over = 0, any = 0;
    for (;;) {
        if (r->start == r->end) {
            if (r->eof) {
                if (!any) return LINE_EOF;
                break;
            }
            if (r->timeout_ms > 0) {
                struct pollfd p = { r->fd, POLLIN, 0 };
                double left = deadline - now_ms();   /* for the whole line: a trickle does not reset it */
                int ready = left > 0 ? poll(&p, 1, (int)left + 1) : 0;
                if (ready < 0 && errno != EINTR) return LINE_ERROR;
                if (ready == 0) return LINE_IDLE;
                if (ready < 0) continue;
            }
            ssize_t k = read(r->fd, rbuf, sizeof rbuf);
            if (k < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) {   /* a non-blocking descriptor */
                    struct pollfd p = { r->fd, POLLIN, 0 };
                    if (r->timeout_ms <= 0) poll(&p, 1, -1);
                    continue;
                }
                if (errno == EINTR) continue;
                return LINE_ERROR;
            }
            r->start = 0;
            r->end = (size_t)k;
            if (k == 0) r->eof = 1;
            continue;
        }
        any = 1;
        char *from = rbuf + r->start, *nl = memchr(from, '\n', r->end - r->start);
        size_t take = nl ? (size_t)(nl - from) : r->end - r->start;
        if (!over) {   /* room for the limit and a CR */
            size_t room = LINE_MAX_BYTES + 1 - n, k = take < room ? take : room;
            memcpy(line + n, from, k);
            n += k;
            over = take > k;
        }
        r->start += take + (nl != NULL);
        if (nl) break;
    }
    if (n > LINE_MAX_BYTES && line[n - 1] != '\r') over = 1;
    if (over && n > LINE_MAX_BYTES) n = LINE_MAX_BYTES;
    line[n] = 0;
    *len = n;
    return over ? LINE_LONG : LINE_OK;
}

/* ==================================================================================
 * Requests: a strict JSON reader over line[] (RFC 8259), no recursion
 * ================================================================================== */
typedef struct {
    char *p, *end, *begin;
    const char *err;      /* the first syntax error */
} json;

typedef struct {
    const char *id;               /* the "id" value as written (a string or an integer), or NULL */
    size_t id_len;
    char *prompt, *query, *system, *date;   /* decoded, NUL-terminated */
    size_t prompt_len;
    const char *tools;            /* the "tools" array as written */
    size_t tools_len;
    const char *results;          /* the "results" value as written */
    size_t results_len;
    uint32_t max_new;
    int has_max_new, plain_markers, has_plain_markers, reset, raw, has_raw, force_call, has_force_call;
    int cont, has_cont;           /* "continue": a query appended to the session (default: a fresh one) */
    uint32_t min_confidence;      /* "min_confidence" in parts per million (has_judge & 1) */
    int overrides, has_judge;     /* "overrides" (has_judge & 2) */
    int span_strings, has_span;   /* "span_strings" (docs/grammar.md §2a) */
    const char *problem;          /* the first error that is not a syntax error */
} request;

static int jfail(json *j, const char *what)
{
    if (!j->err) j->err = what;
    return -1;
}

static void ws(json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d == 16) return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

/* A string at j->p: its content (escapes not decoded) in [*s, *e).  The line is valid
 * UTF-8 already; here the escapes, surrogate pairs and control characters are checked. */
static int jstring(json *j, char **s, char **e)
{
    if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string");
    *s = ++j->p;
    for (;;) {
        if (j->p >= j->end) return jfail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') break;
        if (c < 0x20) return jfail(j, "control character in a string (escape it, e.g. \\n)");
        if (c != '\\') { j->p++; continue; }
        if (j->end - j->p < 2) return jfail(j, "unterminated string");
        char k = j->p[1];
        if (k != 'u') {
            if (!strchr("\"\\/bfnrt", k) || !k) return jfail(j, "invalid escape in a string");
            j->p += 2;
            continue;
        }
        unsigned v, lo;
        if (j->end - j->p < 6 || hex4(j->p + 2, &v)) return jfail(j, "\\u needs four hex digits");
        j->p += 6;
        if (v >= 0xDC00 && v <= 0xDFFF) return jfail(j, "lone low surrogate escape in a string");
        if (v >= 0xD800 && v <= 0xDBFF) {
            if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo)
                || lo < 0xDC00 || lo > 0xDFFF)
                return jfail(j, "high surrogate escape not followed by a low one");
            j->p += 6;
        }
    }
    *e = j->p++;
    return 0;
}

/* Decode the checked string content [s, e) in place (escapes only shrink); NUL-terminate.
 * *nul: the text holds U+0000. */
static size_t decode(char *s, char *e, int *nul)
{
    char *o = s;
    *nul = 0;
    for (const char *p = s; p < e;) {
        if (*p != '\\') { *o++ = *p++; continue; }
        char k = p[1];
        p += 2;
        if (k != 'u') {
            *o++ = k == 'b' ? '\b' : k == 'f' ? '\f' : k == 'n' ? '\n' : k == 'r' ? '\r' : k == 't' ? '\t' : k;
            continue;
        }
        unsigned v, lo;
        hex4(p, &v);
        p += 4;
        if (v >= 0xD800 && v <= 0xDBFF) {
            hex4(p + 2, &lo);
            p += 6;
            v = 0x10000u + ((v - 0xD800u) << 10) + (lo - 0xDC00u);
        }
        if (v == 0) *nul = 1;
        if (v < 0x80) {
            *o++ = (char)v;
        } else if (v < 0x800) {
            *o++ = (char)(0xC0 | v >> 6);
            *o++ = (char)(0x80 | (v & 0x3F));
        } else if (v < 0x10000) {
            *o++ = (char)(0xE0 | v >> 12);
            *o++ = (char)(0x80 | (v >> 6 & 0x3F));
            *o++ = (char)(0x80 | (v & 0x3F));
        } else {
            *o++ = (char)(0xF0 | v >> 18);
            *o++ = (char)(0x80 | (v >> 12 & 0x3F));
            *o++ = (char)(0x80 | (v >> 6 & 0x3F));
            *o++ = (char)(0x80 | (v & 0x3F));
        }
    }
    *o = 0;
    return (size_t)(o - s);
}

/* A number at j->p; *integer: it has neither fraction nor exponent. */
static int jnumber(json *j, int *integer)
{
    char *p = j->p;
    *integer = 1;
    if (p < j->end && *p == '-') p++;
    if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "invalid number");
    if (*p == '0') p++;
    else while (p < j->end && *p >= '0' && *p <= '9') p++;
    if (p < j->end && *p == '.') {
        *integer = 0;
        if (++p >= j->end || *p < '0' || *p > '9') return jfail(j, "invalid number");
        while (p < j->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        *integer = 0;
        if (++p < j->end && (*p == '+' || *p == '-')) p++;
        if (p >= j->end || *p < '0' || *p > '9') return jfail(j, "invalid number");
        while (p < j->end && *p >= '0' && *p <= '9') p++;
    }
    j->p = p;
    return 0;
}

static int jliteral(json *j, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n)) return jfail(j, "expected a value");
    j->p += n;
    return 0;
}

/* Any value at j->p, checked and skipped; nesting up to JSON_DEPTH, with a stack of its own. */
static int jvalue(json *j)
{
    char stack[JSON_DEPTH];
    int depth = 0, integer;
    char *s, *e;
    for (;;) {
        /* a value */
        ws(j);
        if (j->p >= j->end) return jfail(j, "unexpected end of the line");
        char c = *j->p;
        if (c == '{' || c == '[') {
            if (depth == JSON_DEPTH) return jfail(j, "nested deeper than 64 arrays and objects");
            stack[depth++] = c;
            j->p++;
            ws(j);
            if (j->p < j->end && *j->p == (c == '{' ? '}' : ']')) {
                j->p++;
                depth--;
            } else if (c == '{') {
                if (jstring(j, &s, &e)) return -1;
                ws(j);
                if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':' after a key");
                j->p++;
                continue;
            } else {
                continue;
            }
        } else if (c == '"') {
            if (jstring(j, &s, &e)) return -1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            if (jnumber(j, &integer)) return -1;
        } else if (jliteral(j, c == 't' ? "true" : c == 'f' ? "false" : "null")) {
            return -1;
        }
        /* after a value: the next member, or the end of enclosing containers */
        for (;;) {
            if (depth == 0) return 0;
            ws(j);
            char top = stack[depth - 1];
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                if (top == '{') {
                    ws(j);
                    if (jstring(j, &s, &e)) return -1;
                    ws(j);
                    if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':' after a key");
                    j->p++;
                }
                break;
            }
            if (j->p < j->end && *j->p == (top == '{' ? '}' : ']')) {
                j->p++;
                depth--;
                continue;
            }
            return jfail(j, top == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
}

static void problem(request *r, const char *fmt, ...)
{
    if (r->problem) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->problem = msg;
}

/* A key for a message, as JSON writes it (a key "\u0000" shows as that, not as ""): at most
 * 40 bytes of it, cut at a character boundary, escaped. */
static const char *key_shown(const char *key, size_t len)
{
    static char shown[40 * 6 + 1];
    textbuf b = { shown, 0, sizeof shown };
    size_t n = 0;
    while (n < len && n < 40) {
        size_t k = utf8_seq((const unsigned char *)key + n, len - n);
        if (!k || n + k > 40) break;
        n += k;
    }
    shown[0] = 0;
    json_escape(key, n, t_put, &b);
    return shown;
}

static const char KEYS[] = "prompt, query, results, tools, system, date, max_new, plain_markers, raw, force_call, "
                           "continue, min_confidence, overrides, span_strings, reset, id";

/* A text value: a string without U+0000, decoded in place. */
static char *text_value(json *j, request *r, const char *key, size_t *len)
{
    char *s, *e;
    int nul;
    if (j->p >= j->end || *j->p != '"') {
        if (!jvalue(j)) problem(r, "\"%s\" must be a string", key);
        return NULL;
    }
    if (jstring(j, &s, &e)) return NULL;
    size_t n = decode(s, e, &nul);
    if (nul) { problem(r, "\"%s\" holds U+0000: remove it", key); return NULL; }
    if (len) *len = n;
    return s;
}

/* One request object on line[0..len).  Syntax errors end the parse (j->err); every other
 * problem is noted (r->problem) and the parse goes on, so the id is echoed where it can be. */
static void parse_request(json *j, request *r)
{
    static const char *const names[] = { "prompt", "query", "tools", "system", "max_new", "plain_markers",
                                         "reset", "id", "raw", "force_call", "results", "date", "continue",
                                         "min_confidence", "overrides", "span_strings" };
    unsigned seen = 0;
    memset(r, 0, sizeof *r);
    ws(j);
    if (j->p >= j->end || *j->p != '{') { jfail(j, "expected '{' (a request is one JSON object)"); return; }
    j->p++;
    ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
    } else {
        for (;;) {
            char *ks, *ke;
            int nul;
            ws(j);
            if (jstring(j, &ks, &ke)) return;
            size_t klen = decode(ks, ke, &nul);
            ws(j);
            if (j->p >= j->end || *j->p != ':') { jfail(j, "expected ':' after a key"); return; }
            j->p++;
            ws(j);
            unsigned k = 0;
            while (k < sizeof names / sizeof names[0] && (strlen(names[k]) != klen || memcmp(names[k], ks, klen))) k++;
            char *start = j->p;
            int integer = 0;
            if (k == sizeof names / sizeof names[0]) {
                problem(r, "unknown key \"%s\" (the keys are %s)", key_shown(ks, klen), KEYS);
                if (jvalue(j)) return;
            } else if (seen & 1u << k) {
                problem(r, "\"%s\" given twice: give it once", names[k]);
                if (jvalue(j)) return;
            } else {
                seen |= 1u << k;
                const char *name = names[k];
                if (!strcmp(name, "prompt")) {
                    r->prompt = text_value(j, r, name, &r->prompt_len);
                } else if (!strcmp(name, "query")) {
                    r->query = text_value(j, r, name, NULL);
                } else if (!strcmp(name, "system")) {
                    r->system = text_value(j, r, name, NULL);
                } else if (!strcmp(name, "date")) {
                    r->date = text_value(j, r, name, NULL);
                } else if (!strcmp(name, "tools")) {
                    if (jvalue(j)) return;
                    if (*start != '[') problem(r, "\"tools\" must be an array of tool objects");
                    r->tools = start;
                    r->tools_len = (size_t)(j->p - start);
                } else if (!strcmp(name, "results")) {   /* any JSON value, passed on as written */
                    if (jvalue(j)) return;
                    r->results = start;
                    r->results_len = (size_t)(j->p - start);
                } else if (!strcmp(name, "max_new")) {
                    if (jvalue(j)) return;
                    uint64_t v = 0;
                    for (const char *p = start; p < j->p && v <= NEEDLE_MAX_SEQ; p++)
                        v = *p >= '0' && *p <= '9' ? v * 10u + (uint64_t)(*p - '0') : NEEDLE_MAX_SEQ + 1u;
                    if (v < 1 || v > NEEDLE_MAX_SEQ)
                        problem(r, "\"max_new\" must be an integer between 1 and %u", NEEDLE_MAX_SEQ);
                    r->max_new = (uint32_t)v;
                    r->has_max_new = 1;
                } else if (!strcmp(name, "min_confidence")) {
                    if (jvalue(j)) return;
                    if (needle_parse_confidence(start, (size_t)(j->p - start), &r->min_confidence))
                        problem(r, "\"min_confidence\" must be a number from 0 to 1 with at most 6 decimals (e.g. "
                                   "0.5; 0 withholds nothing)");
                    r->has_judge |= 1;
                } else if (!strcmp(name, "overrides")) {
                    char *v = text_value(j, r, name, NULL);
                    if (j->err) return;
                    if (v && needle_parse_overrides(v, strlen(v), &r->overrides))
                        problem(r, "\"overrides\" must be \"refuse\" or \"complete\" (docs/grammar.md, \"Acting "
                                   "on a call\")");
                    r->has_judge |= 2;
                } else if (!strcmp(name, "reset")) {
                    if (jvalue(j)) return;
                    if ((size_t)(j->p - start) != 4 || memcmp(start, "true", 4))
                        problem(r, "\"reset\" takes true (or leave it out)");
                    r->reset = 1;
                } else if (!strcmp(name, "plain_markers") || !strcmp(name, "raw") || !strcmp(name, "force_call")
                           || !strcmp(name, "continue") || !strcmp(name, "span_strings")) {
                    if (jvalue(j)) return;
                    size_t n = (size_t)(j->p - start);
                    int yes = n == 4 && !memcmp(start, "true", 4), no = n == 5 && !memcmp(start, "false", 5);
                    if (!yes && !no) problem(r, "\"%s\" must be true or false", name);
                    if (!strcmp(name, "raw")) { r->raw = yes; r->has_raw = 1; }
                    else if (!strcmp(name, "force_call")) { r->force_call = yes; r->has_force_call = 1; }
                    else if (!strcmp(name, "continue")) { r->cont = yes; r->has_cont = 1; }
                    else if (!strcmp(name, "span_strings")) { r->span_strings = yes; r->has_span = 1; }
                    else { r->plain_markers = yes; r->has_plain_markers = 1; }
                } else {   /* id: a string or an integer, echoed as written */
                    if (*start == '"') {
                        char *s, *e;
                        if (jstring(j, &s, &e)) return;
                    } else if (*start == '-' || (*start >= '0' && *start <= '9')) {
                        if (jnumber(j, &integer)) return;
                    } else if (jvalue(j)) {
                        return;
                    }
                    size_t n = (size_t)(j->p - start);
                    if (*start != '"' && !integer) problem(r, "\"id\" must be a string or an integer");
                    else if (n > ID_MAX) problem(r, "\"id\" is longer than %u bytes: use a shorter one", ID_MAX);
                    else { r->id = start; r->id_len = n; }
                }
                if (j->err) return;
            }
            ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == '}') { j->p++; break; }
            jfail(j, "expected ',' or '}'");
            return;
        }
    }
    ws(j);
    if (j->p < j->end) jfail(j, "text after the request object (one object per line)");
}

/* A line refused before it is parsed (invalid UTF-8 from byte `valid` on, or the first part of
 * an over-long line): parsed up to there, for its id when the id came first.  An integer id
 * that reaches the cut may be cut itself: not echoed. */
static void parse_prefix(request *r, size_t valid)
{
    json j = { line, line + valid, line, NULL };
    parse_request(&j, r);
    if (r->id && *r->id != '"' && r->id + r->id_len == line + valid) r->id = NULL;
}

/* Where valid UTF-8 ends in line[0..len). */
static size_t utf8_valid(size_t len)
{
    size_t i = 0;
    for (size_t k; i < len && (k = utf8_seq((const unsigned char *)line + i, len - i)); i += k) {}
    return i;
}

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

static void answer_error(writer *w, const request *r, const char *fmt, ...)
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
 * answer, the log its line, and the process exits 3 (async-signal-safe: write and _exit). */
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
static char chosen_tools[NEEDLE_TOK_MAX_TEXT + 1];
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

static const uint8_t *call_query;     /* the span strings' query of that call (needle_grammar_set_query) */
static uint32_t call_query_len;
static int call_span_all;

/* A constrained query refused before anything ran: the session as it was, its last call
 * answerable again when it was (reopen). */
static void restore_call(int reopen)
{
    char err[256];
    if (reopen && !needle_call_grammar(&grammar, call_tools, call_tools_len, call_force, err, sizeof err)) {
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


/* Decode one constrained turn after turn_ids[0..n) and answer its envelope (the CLI's line,
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

/* Answer one request line (line[0..len)). */
static void handle(writer *w, size_t len)
{
    json j = { line, line + len, line, NULL };
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
        /* more than five tools, an engine with the embedding head, a fresh session (embedding
         * runs the engine from position 0): render the five the head picks (docs/serve.md) */
        if (!r.raw) {
            memset(&retrieval, 0, sizeof retrieval);
            size_t chosen_len;
            const uint32_t was = needle_position();
            const char *list = fresh || (was == 0 && pending < 0)
                ? needle_retrieve(tools, tools_len, r.query, chosen_tools, sizeof chosen_tools, &chosen_len,
                                  &retrieval, err, sizeof err)
                : tools;
            if (needle_position() != was) { pending = -1; call_open = 0; }   /* retrieval ran the engine */
            if (!list) {
                answer_error(w, &r, "%s%s", r.tools ? "\"tools\": " : "the --tools file: ", as_request_keys(err));
                return;
            }
            if (list != tools) { tools = list; tools_len = chosen_len; }
        }
        int n = needle_tool_prompt(tools, tools_len, r.query, system, r.plain_markers, prompt, sizeof prompt,
                                   plain, &n_plain, err, sizeof err);
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
        if (!r.raw && needle_call_grammar(&grammar, tools, tools_len, r.force_call, err, sizeof err)) {
            answer_error(w, &r, "%s%s", r.tools ? "\"tools\": " : "the --tools file: ", as_request_keys(err));
            restore_call(reopen);
            return;
        }
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

/* ==================================================================================
 * Sessions and the socket
 * ================================================================================== */
enum { SESSION_EOF, SESSION_WRITE, SESSION_READ, SESSION_IDLE, SESSION_ARCHIVE };

static uint32_t idle_timeout_s;   /* --idle-timeout: of a socket connection; 0: none */

/* Answer every line of `in` on `out` until `in` ends (or `out` fails, or the archive file
 * changed: SESSION_ARCHIVE).  A fresh session.  timeout_s > 0 (a socket connection): a
 * request line must arrive whole, and an answer be taken, within it, or the connection
 * ends (SESSION_IDLE after a last answer saying so, SESSION_WRITE). */
static int session(int in, int out, uint32_t timeout_s, int *err)
{
    const int timeout_ms = timeout_s > 0 ? (int)(timeout_s * 1000u) : 0;
    reader r = { in, 0, 0, 0, timeout_ms };
    writer w = { out, 0, 0, 0, timeout_ms };
    answer_fd = out;
    answer_mid_line = 0;
    needle_reset();
    pending = -1;
    call_open = 0;
    for (;;) {
        size_t len = 0;
        int k = read_line(&r, &len);
        if (k == LINE_EOF) return SESSION_EOF;
        if (k == LINE_ERROR) { *err = errno; return SESSION_READ; }
        if (k == LINE_IDLE) {
            answer_error(&w, NULL, "no whole request line in %u s: the connection is closed (the service serves "
                                   "one connection at a time; send each request within --idle-timeout seconds of "
                                   "connecting or of the last answer, or connect again)", timeout_s);
            w_flush(&w);
            return SESSION_IDLE;
        }
        if (k == LINE_LONG) {
            request q;
            parse_prefix(&q, utf8_valid(len));
            answer_error(&w, q.id ? &q : NULL, "request line longer than %u bytes: send a shorter prompt or tools "
                                               "array (the line was skipped)", LINE_MAX_BYTES);
        } else {
            if (len && line[len - 1] == '\r') line[--len] = 0;   /* CRLF line ends */
            size_t i = 0;
            while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) i++;
            if (i == len) continue;   /* blank lines are not requests */
            handle(&w, len);
        }
        w_flush(&w);
        if (archive_gone) return SESSION_ARCHIVE;
        if (w.failed) { *err = w.err; return SESSION_WRITE; }
    }
}

static int serve_socket(const char *path)
{
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr.sun_path)
        return hal_fail(2, "--socket %s: the path is longer than %zu bytes (choose a shorter one, e.g. "
                       "/var/run/needle.sock)", path, sizeof addr.sun_path - 1);
    memcpy(addr.sun_path, path, strlen(path) + 1);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return hal_fail(1, "%s exists and is not a socket: remove it or pass another --socket PATH", path);
        /* a running service accepts the connection; a stale socket file refuses it */
        int probe = socket(AF_UNIX, SOCK_STREAM, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0;
        if (probe >= 0) close(probe);
        if (live) return hal_fail(1, "another service is listening on %s: stop it or pass another --socket PATH", path);
        if (unlink(path) && errno != ENOENT)
            return hal_fail(1, "cannot remove the stale socket %s: %s", path, strerror(errno));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return hal_fail(1, "cannot create a socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 8)) {
        int e = errno;
        close(fd);
        return hal_fail(1, "cannot listen on %s: %s", path, strerror(e));
    }
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
            int e = errno;
            close(fd);
            return hal_fail(1, "cannot accept a connection on %s: %s", path, strerror(e));
        }
        if (idle_timeout_s > 0) fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);   /* writes with a deadline */
        int err = 0;
        int end = session(c, c, idle_timeout_s, &err);   /* a client that went away only ends its own session */
        close(c);
        if (end == SESSION_ARCHIVE) {
            close(fd);
            return hal_fail(3, "%s", archive_why);
        }
    }
}

int needle_serve(const char *socket_path, const char *archive_path, const char *tools_json, size_t tools_len,
                 uint32_t max_new, uint32_t idle_timeout, uint32_t min_confidence, int overrides)
{
    start_min_confidence = min_confidence;
    start_overrides = overrides;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);   /* a reader that went away is a write error, not a signal */
    start_tools = tools_json;
    start_tools_len = tools_len;
    start_max_new = max_new;
    idle_timeout_s = idle_timeout;
#ifdef NEEDLE_ARCHIVE_FILE
    archive_watch(archive_path);
#else
    (void)archive_path;
#endif
    int32_t id = needle_tok_piece_id(IM_END, sizeof IM_END - 1);
    im_end_id = id >= 0 && (uint32_t)id < NEEDLE_OUT_VOCAB && needle_tok_piece_type((uint32_t)id) == NEEDLE_TOK_USER_DEFINED
              ? id : -1;
    hal_flush();
    if (socket_path) return serve_socket(socket_path);
    int err = 0;
    switch (session(0, 1, 0, &err)) {
    case SESSION_ARCHIVE:
        return hal_fail(3, "%s", archive_why);
    case SESSION_WRITE:
        return hal_fail(1, "cannot write standard output: %s (check where it is redirected)", strerror(err));
    case SESSION_READ:
        return hal_fail(1, "cannot read standard input: %s", strerror(err));
    default:
        return 0;
    }
}
