/* serve_requests.c -- the requests of `needle --serve` (serve_internal.h, docs/serve.md):
 * one JSON object per line, read strictly (RFC 8259) over request_line[] with the library's
 * scanner (needle_json_scan.h) and an explicit stack, into a request.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "needle_json_scan.h"
#include "needle_model.h"
#include "serve_internal.h"

static char msg[512];                          /* a request's problem, as its answer says it */

/* ==================================================================================
 * Requests: a strict JSON reader over request_line[] (RFC 8259), no recursion
 * ================================================================================== */
static int jfail(json *j, const char *what)
{
    if (!j->err) j->err = what;
    return -1;
}

static void ws(json *j)
{
    j->p += needle_json_skip_ws(j->p, (size_t)(j->end - j->p), 0);
}

/* A string at j->p: its content (escapes not decoded) in [*s, *e).  The line is valid
 * UTF-8 already; here the escapes, surrogate pairs and control characters are checked. */
static int jstring(json *j, char **s, char **e)
{
    if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string");
    *s = ++j->p;
    size_t n = (size_t)(j->end - *s), pos = 0;
    for (;;) {
        uint32_t cp;
        int got = needle_json_char(*s, n, &pos, &cp);
        j->p = *s + pos;
        switch (got) {
        case NEEDLE_JSON_CHAR:
            if (cp >= 0xDC00 && cp <= 0xDFFF) return jfail(j, "lone low surrogate escape in a string");
            if (cp >= 0xD800 && cp <= 0xDBFF) return jfail(j, "high surrogate escape not followed by a low one");
            continue;
        case NEEDLE_JSON_CLOSE:
            *e = j->p++;
            return 0;
        case NEEDLE_JSON_E_CONTROL: return jfail(j, "control character in a string (escape it, e.g. \\n)");
        case NEEDLE_JSON_E_ESCAPE: return jfail(j, "invalid escape in a string");
        case NEEDLE_JSON_E_HEX: return jfail(j, "\\u needs four hex digits");
        case NEEDLE_JSON_E_UTF8: return jfail(j, "invalid UTF-8 in a string");
        default: return jfail(j, "unterminated string");
        }
    }
}

/* Decode the checked string content [s, e) in place (escapes only shrink); NUL-terminate.
 * *nul: the text holds U+0000. */
static size_t decode(char *s, char *e, int *nul)
{
    char *o = s;
    size_t pos = 0;
    uint32_t cp;
    *nul = 0;
    while (needle_json_char(s, (size_t)(e - s), &pos, &cp) == NEEDLE_JSON_CHAR) {
        uint8_t b[4];
        size_t k = needle_utf8_encode(cp, b);
        if (cp == 0) *nul = 1;
        memcpy(o, b, k);
        o += k;
    }
    *o = 0;
    return (size_t)(o - s);
}

/* A number at j->p; *integer: it has neither fraction nor exponent. */
static int jnumber(json *j, int *integer)
{
    size_t end;
    if (needle_json_number(j->p, (size_t)(j->end - j->p), 0, &end, integer) != NEEDLE_JSON_NUMBER)
        return jfail(j, "invalid number");
    j->p += end;
    return 0;
}

static int jliteral(json *j, const char *word)
{
    if (!needle_json_literal(j->p, (size_t)(j->end - j->p), 0, word)) return jfail(j, "expected a value");
    j->p += strlen(word);
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
        uint32_t cp;
        size_t k = needle_utf8_decode((const uint8_t *)key + n, len - n, &cp);
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

/* One request object on request_line[0..len).  Syntax errors end the parse (j->err); every other
 * problem is noted (r->problem) and the parse goes on, so the id is echoed where it can be. */
void parse_request(json *j, request *r)
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
void parse_prefix(request *r, size_t valid)
{
    json j = { request_line, request_line + valid, request_line, NULL };
    parse_request(&j, r);
    if (r->id && *r->id != '"' && r->id + r->id_len == request_line + valid) r->id = NULL;
}

/* Where valid UTF-8 ends in request_line[0..len). */
size_t utf8_valid(size_t len)
{
    size_t i = 0;
    uint32_t cp;
    for (size_t k; i < len && (k = needle_utf8_decode((const uint8_t *)request_line + i, len - i, &cp)); i += k) {}
    return i;
}
