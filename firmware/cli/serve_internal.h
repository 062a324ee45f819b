/* serve_internal.h -- what the three files of `needle --serve` share (Linux boards only;
 * docs/serve.md is the protocol):
 *
 *   serve_transport.c   lines in, answers out: the buffered reader and writer, a connection's
 *                       loop, the Unix socket, needle_serve()
 *   serve_requests.c    a request line as JSON (RFC 8259, no recursion) into a request
 *   serve_sessions.c    the engine's session: what each request does, its answer, the
 *                       archive file watched
 *
 * No heap: every buffer is static.
 */
#ifndef NEEDLE_SERVE_INTERNAL_H
#define NEEDLE_SERVE_INTERNAL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "needle_tool_prompt.h"
#include "serve.h"

#define LINE_MAX_BYTES NEEDLE_SERVE_LINE_MAX
#define ID_MAX         128u    /* bytes of an "id" value as written in the request */
#define JSON_DEPTH     NEEDLE_PROMPT_MAX_DEPTH

extern char request_line[LINE_MAX_BYTES + 2];   /* the request being answered (a CR may follow the limit) */

/* ---- the transport (serve_transport.c) */

double now_ms(void);
/* s[0..n) as the inside of a JSON string (RFC 8259): quote and backslash escaped, control
 * characters as \u00XX, valid UTF-8 as it is, any invalid byte as \ufffd (the replacement
 * character); the pieces go to put(user, ...). */
void json_escape(const char *s, size_t n, void (*put)(void *, const char *, size_t), void *user);
/* A bounded text buffer for json_escape (cut when full, always NUL-terminated). */
typedef struct { char *p; size_t n, cap; } textbuf;
void t_put(void *user, const char *s, size_t n);

typedef struct {
    int fd;
    size_t n;        /* bytes in wbuf */
    int failed;      /* a write failed (errno in err): the peer is gone, or took nothing in time */
    int err;
    int timeout_ms;  /* > 0: a flush that the peer does not take within it fails (ETIMEDOUT) */
} writer;

/* The descriptor answers go to, and whether a line of it is half written: for the SIGBUS
 * handler, which answers on its own (on_sigbus). */
extern volatile sig_atomic_t answer_fd, answer_mid_line;

void w_flush(writer *w);
void w_put(writer *w, const char *s, size_t n);
void w_str(writer *w, const char *s);
void w_fmt(writer *w, const char *fmt, ...);
void w_json_string(writer *w, const char *s, size_t n);   /* s[0..n) as a JSON string (json_escape) */
void w_num(writer *w, const char *key, double v);          /* ,"key":%.3f (0 when not measured) */

/* ---- requests (serve_requests.c) */

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

/* One request object on request_line[0..len) (j: over it).  Syntax errors end the parse
 * (j->err, at j->p); every other problem goes to r->problem. */
void parse_request(json *j, request *r);
/* A line refused before it is parsed (invalid UTF-8 from byte `valid` on, or the first part
 * of an over-long line): parsed up to there, for its id. */
void parse_prefix(request *r, size_t valid);
size_t utf8_valid(size_t len);   /* where valid UTF-8 ends in request_line[0..len) */

/* ---- the session (serve_sessions.c) */

/* What needle_serve() was started with (serve.h), made ready before the first request. */
void serve_start(const char *archive_path, const char *tools_json, size_t tools_len, uint32_t max_new,
                 uint32_t min_confidence, int overrides);
void serve_session_start(void);              /* a fresh session: a new connection */
void serve_handle(writer *w, size_t len);    /* answer request_line[0..len) */
void answer_error(writer *w, const request *r, const char *fmt, ...);
/* Why the archive file changed, once a request found it did (the service ends); else NULL. */
const char *serve_archive_gone(void);

#endif /* NEEDLE_SERVE_INTERNAL_H */
