/* needle_tool_prompt.c -- render the Needle tool-calling prompt; see needle_tool_prompt.h and docs/prompt.md.
 *
 * The tools JSON is validated and minified in one pass by an iterative parser (explicit
 * stack of NEEDLE_PROMPT_MAX_DEPTH levels; no recursion, no heap).  Output goes straight
 * into the caller's buffer; duplicate keys are found by re-scanning the object's already
 * minified output.  generator/tools/prompt.py mirrors this file rule for rule.
 */
#include "needle_tool_prompt.h"
#include "needle_json_scan.h"
#include "needle_toolset.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ output */

typedef struct {
    char *out;
    size_t room;    /* bytes that may be written (cap - 1 for the NUL) */
    size_t n;       /* bytes of the full prompt so far */
    size_t high;    /* the most it held at once (an extension's bytes are unwritten) */
    int overflow;   /* out[] could not hold everything */
} pr_out;

static void pr_put(pr_out *o, const void *p, size_t n)
{
    if (n == 0u) return;
    if (!o->overflow && n <= o->room - o->n) {
        memcpy(o->out + o->n, p, n);
    } else {
        o->overflow = 1;
    }
    o->n += n;
    if (o->n > o->high) o->high = o->n;
}

static void pr_put_str(pr_out *o, const char *s)
{
    pr_put(o, s, strlen(s));
}

static void pr_put_byte(pr_out *o, uint8_t b)
{
    pr_put(o, &b, 1);
}

/* ------------------------------------------------------------------ errors */

typedef struct {
    char *buf;
    size_t cap;
    size_t n;
} pr_err;

static void pr_err_str(pr_err *e, const char *s)
{
    for (; *s; s++) {
        if (e->cap > 0 && e->n + 1 < e->cap) e->buf[e->n] = *s;
        e->n++;
    }
    if (e->cap > 0) e->buf[e->n + 1 < e->cap ? e->n : e->cap - 1] = '\0';
}

static void pr_err_num(pr_err *e, size_t v)
{
    char tmp[24];
    size_t k = sizeof tmp - 1;
    tmp[k] = '\0';
    do {
        tmp[--k] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v != 0u);
    pr_err_str(e, tmp + k);
}

static void pr_err_hex4(pr_err *e, unsigned v)
{
    static const char hex[] = "0123456789ABCDEF";
    char tmp[5];
    int i;
    for (i = 0; i < 4; i++) tmp[i] = hex[(v >> (12 - 4 * i)) & 0xFu];
    tmp[4] = '\0';
    pr_err_str(e, tmp);
}

/* ------------------------------------------------------------------ UTF-8 */

/* Offset of the first invalid byte of s[0..n), or n if it is all valid UTF-8. */
static size_t pr_utf8_check(const uint8_t *s, size_t n)
{
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        size_t k = needle_utf8_decode(s + i, n - i, &cp);
        if (k == 0) return i;
        i += k;
    }
    return n;
}

/* One character of a string value as json.dumps(ensure_ascii=False) writes it; a lone
 * surrogate (only possible from a \u escape) is written as \udxxx (docs/prompt.md). */
static void pr_put_char(pr_out *o, uint32_t cp)
{
    static const char hex[] = "0123456789abcdef";
    char esc[6];
    switch (cp) {
    case '"': pr_put_str(o, "\\\""); return;
    case '\\': pr_put_str(o, "\\\\"); return;
    case '\n': pr_put_str(o, "\\n"); return;
    case '\r': pr_put_str(o, "\\r"); return;
    case '\t': pr_put_str(o, "\\t"); return;
    case '\b': pr_put_str(o, "\\b"); return;
    case '\f': pr_put_str(o, "\\f"); return;
    default: break;
    }
    if (cp < 0x20u || (cp >= 0xD800u && cp <= 0xDFFFu)) {
        esc[0] = '\\';
        esc[1] = 'u';
        esc[2] = hex[(cp >> 12) & 0xFu];
        esc[3] = hex[(cp >> 8) & 0xFu];
        esc[4] = hex[(cp >> 4) & 0xFu];
        esc[5] = hex[cp & 0xFu];
        pr_put(o, esc, 6);
        return;
    }
    uint8_t b[4];
    pr_put(o, b, needle_utf8_encode(cp, b));
}

/* Python's str.isspace() */
static int pr_is_space(uint32_t cp)
{
    return (cp >= 0x09u && cp <= 0x0Du) || (cp >= 0x1Cu && cp <= 0x20u) || cp == 0x85u
        || cp == 0xA0u || cp == 0x1680u || (cp >= 0x2000u && cp <= 0x200Au) || cp == 0x2028u
        || cp == 0x2029u || cp == 0x202Fu || cp == 0x205Fu || cp == 0x3000u;
}

/* ------------------------------------------------------------------ JSON */

typedef struct {
    const uint8_t *s;
    size_t len;
    size_t pos;
    pr_out *o;
    pr_err *e;
    int32_t *ppm;          /* each tool's "x-needle-min-confidence", parts per million (-1: none) ... */
    size_t ppm_cap;        /* ... for the first ppm_cap tools (ppm may be NULL) */
    needle_toolset *ts;    /* the record the pass fills (NULL: none), */
    size_t base;           /* the list's offset in the output */
} pr_json;

/* Our extension on a tool object (docs/grammar.md §5a), never rendered: keys beginning with
 * EXT_PREFIX; EXT_MIN_CONFIDENCE is the one there is.  Twin of prompt.py's. */
#define EXT_PREFIX "\"x-needle-"
#define EXT_MIN_CONFIDENCE "\"x-needle-min-confidence\""

/* Report "tools JSON: line L, column C: msg" for input byte offset at; returns E_JSON. */
static int pr_fail(pr_json *j, size_t at, const char *msg, const char *detail)
{
    size_t line = 1, col = 1, i;
    for (i = 0; i < at && i < j->len; i++) {
        if (j->s[i] == '\n') {
            line++;
            col = 1;
        } else if ((j->s[i] & 0xC0u) != 0x80u) {
            col++;
        }
    }
    pr_err_str(j->e, "tools JSON: line ");
    pr_err_num(j->e, line);
    pr_err_str(j->e, ", column ");
    pr_err_num(j->e, col);
    pr_err_str(j->e, ": ");
    pr_err_str(j->e, msg);
    if (detail) pr_err_str(j->e, detail);
    return NEEDLE_PROMPT_E_JSON;
}

/* The string starting at the '"' at j->pos; written minified.  Returns 0 or E_JSON. */
static int pr_string(pr_json *j)
{
    size_t open = j->pos;
    j->pos++;
    pr_put_byte(j->o, '"');
    for (;;) {
        uint32_t cp;
        size_t at = j->pos;
        switch (needle_json_char((const char *)j->s, j->len, &j->pos, &cp)) {
        case NEEDLE_JSON_CHAR:
            pr_put_char(j->o, cp);
            continue;
        case NEEDLE_JSON_CLOSE:
            j->pos++;
            pr_put_byte(j->o, '"');
            return 0;
        case NEEDLE_JSON_E_CONTROL: {
            char detail[8];
            pr_err tmp = {detail, sizeof detail, 0};
            pr_err_hex4(&tmp, cp);
            pr_fail(j, at, "unescaped control character U+", detail);
            pr_err_str(j->e, " in string");
            return NEEDLE_PROMPT_E_JSON;
        }
        case NEEDLE_JSON_E_HEX: return pr_fail(j, at, "invalid \\u escape", NULL);
        case NEEDLE_JSON_E_ESCAPE: return pr_fail(j, at, "invalid escape", NULL);
        case NEEDLE_JSON_E_UTF8: return pr_fail(j, at, "invalid UTF-8", NULL);
        default: return pr_fail(j, open, "unterminated string", NULL);
        }
    }
}

/* Index just past the minified string starting at out[i] (a '"'). */
static size_t pr_skip_out_string(const char *o, size_t i)
{
    i++;
    while (o[i] != '"') i += o[i] == '\\' ? 2u : 1u;
    return i + 1u;
}

/* Is the key out[k0..k1) already a key of the object whose '{' is at out[obj]? */
static int pr_key_seen(const char *o, size_t obj, size_t k0, size_t k1)
{
    size_t i = obj + 1u;
    while (i < k0) {
        size_t ks = i;
        int depth = 0;
        i = pr_skip_out_string(o, i);
        if (i - ks == k1 - k0 && memcmp(o + ks, o + k0, k1 - k0) == 0) return 1;
        i++;  /* ':' */
        for (;;) {
            char c = o[i];
            if (c == '"') {
                i = pr_skip_out_string(o, i);
                continue;
            }
            if (depth == 0 && c == ',') break;
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') depth--;
            i++;
        }
        i++;  /* ',' */
    }
    return 0;
}

static int pr_literal(pr_json *j, const char *word)
{
    if (!needle_json_literal((const char *)j->s, j->len, j->pos, word))
        return pr_fail(j, j->pos, "invalid literal", NULL);
    pr_put(j->o, word, strlen(word));
    j->pos += strlen(word);
    return 0;
}

static int pr_number(pr_json *j)
{
    size_t end;
    int integer;
    switch (needle_json_number((const char *)j->s, j->len, j->pos, &end, &integer)) {
    case NEEDLE_JSON_E_NUMBER_END: return pr_fail(j, end, "unexpected end of input", NULL);
    case NEEDLE_JSON_E_NUMBER: return pr_fail(j, end, "invalid number", NULL);
    default: break;
    }
    pr_put(j->o, j->s + j->pos, end - j->pos);
    j->pos = end;
    return 0;
}

enum { PR_VALUE, PR_KEY, PR_FIRST_KEY, PR_AFTER };

static int pr_json_minify(pr_json *j)
{
    uint8_t kind[NEEDLE_PROMPT_MAX_DEPTH];     /* 0 array, 1 object */
    size_t start[NEEDLE_PROMPT_MAX_DEPTH];     /* output offset of the '{' */
    size_t tools = 0;                          /* elements of the top-level array */
    int depth = 0, state = PR_VALUE, rc;
    int ext = 0, ext_seen = 0, drop_comma = 0;  /* an extension's value being read; one in this tool */
    size_t ext_from = 0, ext_value = 0, ext_at = 0;   /* unwrite from; its value's output and input offsets */

    for (;;) {
        j->pos = needle_json_skip_ws((const char *)j->s, j->len, j->pos);
        if (state == PR_AFTER && depth == 0) {
            if (j->pos < j->len) return pr_fail(j, j->pos, "extra data after the JSON value", NULL);
            return 0;
        }
        if (j->pos >= j->len) return pr_fail(j, j->pos, "unexpected end of input", NULL);

        if (state == PR_AFTER) {
            uint8_t c = j->s[j->pos];
            int obj = kind[depth - 1];
            if (ext && depth == 2) {   /* the extension's value is read: unwrite it */
                uint32_t ppm;
                if (!j->o->overflow) {   /* (overflowing: E_SPACE at the end) */
                    if (needle_parse_confidence(j->o->out + ext_value, j->o->n - ext_value, &ppm))
                        return pr_fail(j, ext_at, "\"x-needle-min-confidence\" must be a number from 0 to 1 with "
                                                  "at most 6 decimals (e.g. 0.9)", NULL);
                    if (j->ppm && tools - 1u < j->ppm_cap) j->ppm[tools - 1u] = (int32_t)ppm;
                    j->o->n = ext_from;
                }
                ext = 0;
            }
            if (c == ',') {
                if (drop_comma && depth == 2) drop_comma = 0;
                else pr_put_byte(j->o, ',');
                j->pos++;
                state = obj ? PR_KEY : PR_VALUE;
            } else if (c == (obj ? '}' : ']')) {
                pr_put_byte(j->o, c);
                j->pos++;
                if (depth == 2) drop_comma = 0;
                if (depth == 2 && j->ts && tools - 1u < NEEDLE_TOOLSET_MAX_TOOLS)
                    j->ts->end[tools - 1u] = (uint32_t)(j->o->n - j->base);
                depth--;
            } else {
                return pr_fail(j, j->pos, obj ? "expected ',' or '}'" : "expected ',' or ']'", NULL);
            }
            continue;
        }

        if (state == PR_KEY || state == PR_FIRST_KEY) {
            size_t k0 = j->o->n;
            size_t at = j->pos;
            if (j->s[j->pos] != '"')
                return pr_fail(j, j->pos, state == PR_FIRST_KEY ? "expected a string key or '}'"
                                                                : "expected a string key", NULL);
            rc = pr_string(j);
            if (rc) return rc;
            if (!j->o->overflow && pr_key_seen(j->o->out, start[depth - 1], k0, j->o->n))
                return pr_fail(j, at, "duplicate key in object", NULL);
            if (depth == 2 && !j->o->overflow && j->o->n - k0 >= sizeof EXT_PREFIX - 1u
                && !memcmp(j->o->out + k0, EXT_PREFIX, sizeof EXT_PREFIX - 1u)) {   /* a tool's extension key */
                if (j->o->n - k0 != sizeof EXT_MIN_CONFIDENCE - 1u
                    || memcmp(j->o->out + k0, EXT_MIN_CONFIDENCE, sizeof EXT_MIN_CONFIDENCE - 1u))
                    return pr_fail(j, at, "unknown extension key on a tool (the one there is: "
                                          "\"x-needle-min-confidence\")", NULL);
                if (ext_seen) return pr_fail(j, at, "duplicate key in object", NULL);   /* unwritten: not in out */
                int first = j->o->out[k0 - 1u] != ',';
                drop_comma |= first;   /* the first key: the comma after its value goes */
                ext = ext_seen = 1;
                ext_from = first ? k0 : k0 - 1u;
                ext_value = j->o->n + 1u;
            }
            j->pos = needle_json_skip_ws((const char *)j->s, j->len, j->pos);
            if (j->pos >= j->len) return pr_fail(j, j->pos, "unexpected end of input", NULL);
            if (j->s[j->pos] != ':') return pr_fail(j, j->pos, "expected ':'", NULL);
            pr_put_byte(j->o, ':');
            j->pos++;
            state = PR_VALUE;
            if (ext) { j->pos = needle_json_skip_ws((const char *)j->s, j->len, j->pos); ext_at = j->pos; }
            continue;
        }

        /* PR_VALUE */
        {
            uint8_t c = j->s[j->pos];
            if (c != '{' && c != '[' && c != '"' && c != 't' && c != 'f' && c != 'n' && c != '-'
                && !(c >= '0' && c <= '9'))
                return pr_fail(j, j->pos, "expected a value", NULL);
            if (depth == 0 && c != '[')
                return pr_fail(j, j->pos, "the top-level value must be an array of tool objects", NULL);
            if (depth == 1) {
                tools++;
                ext_seen = 0;
                if (j->ts) {
                    j->ts->count = (uint32_t)tools;
                    if (tools - 1u < NEEDLE_TOOLSET_MAX_TOOLS) j->ts->start[tools - 1u] = (uint32_t)(j->o->n - j->base);
                }
                if (j->ppm && tools - 1u < j->ppm_cap) j->ppm[tools - 1u] = -1;
                if (c != '{') {
                    char num[24];
                    pr_err tmp = {num, sizeof num, 0};
                    pr_err_num(&tmp, tools);
                    pr_fail(j, j->pos, "tool #", num);
                    pr_err_str(j->e, " is not a JSON object");
                    return NEEDLE_PROMPT_E_JSON;
                }
            }
            if (c == '{' || c == '[') {
                if (depth == NEEDLE_PROMPT_MAX_DEPTH)
                    return pr_fail(j, j->pos, "nesting deeper than 64 levels", NULL);
                kind[depth] = c == '{';
                start[depth] = j->o->n;
                depth++;
                pr_put_byte(j->o, c);
                j->pos++;
                j->pos = needle_json_skip_ws((const char *)j->s, j->len, j->pos);
                if (j->pos < j->len && j->s[j->pos] == (c == '{' ? '}' : ']')) {
                    pr_put_byte(j->o, j->s[j->pos]);
                    j->pos++;
                    depth--;
                    if (depth == 1 && j->ts && tools - 1u < NEEDLE_TOOLSET_MAX_TOOLS)   /* a tool {} */
                        j->ts->end[tools - 1u] = (uint32_t)(j->o->n - j->base);
                    state = PR_AFTER;
                } else {
                    state = c == '{' ? PR_FIRST_KEY : PR_VALUE;
                }
                continue;
            }
            if (c == '"') rc = pr_string(j);
            else if (c == 't') rc = pr_literal(j, "true");
            else if (c == 'f') rc = pr_literal(j, "false");
            else if (c == 'n') rc = pr_literal(j, "null");
            else rc = pr_number(j);
            if (rc) return rc;
            state = PR_AFTER;
        }
    }
}

int needle_parse_confidence(const char *text, size_t len, uint32_t *ppm)
{
    size_t i = 0;
    uint32_t whole = 0, frac = 0, digits = 0;
    if (i < len && (text[i] == '0' || text[i] == '1')) whole = (uint32_t)(text[i++] - '0');
    else if (!(i < len && text[i] == '.')) return -1;
    if (i < len) {
        if (text[i++] != '.') return -1;
        for (; i < len && text[i] >= '0' && text[i] <= '9' && digits < 6u; i++, digits++)
            frac = frac * 10u + (uint32_t)(text[i] - '0');
        if (i < len || digits == 0) return -1;
        for (; digits < 6u; digits++) frac *= 10u;
    }
    uint32_t v = whole * 1000000u + frac;
    if (v > 1000000u) return -1;
    *ppm = v;
    return 0;
}

/* ------------------------------------------------------------------ prompt */

int needle_render_prompt(const char *tools_json, size_t len, const char *query,
                         const char *system, char *out, size_t cap, char *err, size_t errcap)
{
    return needle_render_prompt_ex(tools_json, len, query, system, out, cap, err, errcap, NULL);
}

static void pr_untrusted(needle_prompt_untrusted *u, size_t start, size_t end)
{
    if (u == NULL || end == start || u->n >= NEEDLE_PROMPT_MAX_UNTRUSTED) return;
    u->span[u->n].start = start;
    u->span[u->n].len = end - start;
    u->n++;
}

/* str.strip() of s[0..n) (valid UTF-8): leading, then trailing whitespace characters; the
 * text left is s[*from..*to). */
static void pr_strip(const uint8_t *s, size_t n, size_t *from, size_t *to)
{
    size_t i = 0, end = n, k;
    uint32_t cp = 0;
    while (i < n && (k = needle_utf8_decode(s + i, n - i, &cp)) != 0 && pr_is_space(cp)) i += k;
    while (end > i) {
        size_t b = end - 1u;
        while (b > i && (s[b] & 0xC0u) == 0x80u) b--;
        needle_utf8_decode(s + b, end - b, &cp);
        if (!pr_is_space(cp)) break;
        end = b;
    }
    *from = i;
    *to = end;
}

const char *needle_system_facts(const char *system, const char *date, char *out, size_t cap)
{
    static const char fact[] = "date: ";
    if (date == NULL) return system;
    size_t i = 0, end = 0, n = system ? strlen(system) : 0u, d = strlen(date);
    if (system && pr_utf8_check((const uint8_t *)system, n) != n) return system;   /* the renderer says why */
    if (system) pr_strip((const uint8_t *)system, n, &i, &end);
    const char *text = system ? system + i : "";
    const size_t len = end - i;
    if (len >= 5u && !memcmp(text, "date:", 5)) return system;               /* a date fact given: */
    for (size_t k = 0; k + 7u <= len; k++)                                  /* the caller's wins */
        if (!memcmp(text + k, "; date:", 7)) return system;
    const size_t need = sizeof fact - 1u + d + (len ? 2u + len : 0u);
    if (need + 1u > cap) return NULL;
    memcpy(out, fact, sizeof fact - 1u);
    memcpy(out + sizeof fact - 1u, date, d);
    if (len) {
        memcpy(out + sizeof fact - 1u + d, "; ", 2);
        memcpy(out + sizeof fact - 1u + d + 2u, text, len);
    }
    out[need] = 0;
    return out;
}

int needle_render_prompt_ex(const char *tools_json, size_t len, const char *query,
                            const char *system, char *out, size_t cap, char *err,
                            size_t errcap, needle_prompt_untrusted *untrusted)
{
    return needle_render_prompt_thresholds(tools_json, len, query, system, out, cap, err, errcap, untrusted, NULL, 0);
}

static uint32_t passes;    /* pr_json_minify runs (needle_toolset_passes) */

/* The list part of a render at o->n: read from the record `read` when its pass checked all a
 * pass here would (it never overflowed in the list, and neither would this one: the list's
 * most bytes fit after this prefix), else one pass over the JSON, filling `fill` if given. */
static int pr_list(pr_json *j, const needle_toolset *read)
{
    if (read && read->exact && j->o->n <= j->o->room && read->high <= j->o->room - j->o->n) {
        size_t k, seen = read->count < NEEDLE_TOOLSET_MAX_TOOLS ? read->count : NEEDLE_TOOLSET_MAX_TOOLS;
        for (k = 0; j->ppm && k < seen && k < j->ppm_cap; k++) j->ppm[k] = read->ppm[k];
        if (read->list_rc) {
            pr_err_str(j->e, read->err);
            return read->list_rc;
        }
        pr_put(j->o, read->list, read->len);
        return 0;
    }
    passes++;
    j->base = j->o->n;
    return pr_json_minify(j);
}

static int pr_render(const char *tools_json, size_t len, const needle_toolset *read, needle_toolset *fill,
                     const char *query, const char *system, char *out, size_t cap, char *err, size_t errcap,
                     needle_prompt_untrusted *untrusted, int32_t *ppm, size_t ppm_cap)
{
    pr_out o;
    pr_err e;
    pr_json j;
    size_t qlen, bad, at;
    const uint8_t *sys0 = NULL, *sys1 = NULL;
    needle_prompt_untrusted u;
    int rc;

    u.n = 0;
    if (untrusted) untrusted->n = 0;

    e.buf = err;
    e.cap = err ? errcap : 0u;
    e.n = 0;
    if (e.cap > 0) err[0] = '\0';
    o.out = out;
    o.room = (out && cap > 0u) ? cap - 1u : 0u;
    o.n = 0;
    o.high = 0;
    o.overflow = 0;
    if (out && cap > 0u) out[0] = '\0';

    if (query == NULL) {
        pr_err_str(&e, "query is NULL");
        return NEEDLE_PROMPT_E_TEXT;
    }
    qlen = strlen(query);
    bad = pr_utf8_check((const uint8_t *)query, qlen);
    if (bad != qlen) {
        pr_err_str(&e, "query is not valid UTF-8 (byte ");
        pr_err_num(&e, bad);
        pr_err_str(&e, ")");
        return NEEDLE_PROMPT_E_TEXT;
    }
    if (system != NULL) {
        const uint8_t *s = (const uint8_t *)system;
        size_t n = strlen(system), i = 0, end = n;
        bad = pr_utf8_check(s, n);
        if (bad != n) {
            pr_err_str(&e, "system is not valid UTF-8 (byte ");
            pr_err_num(&e, bad);
            pr_err_str(&e, ")");
            return NEEDLE_PROMPT_E_TEXT;
        }
        pr_strip(s, n, &i, &end);
        if (end > i) {
            sys0 = s + i;
            sys1 = s + end;
        }
    }
    if (tools_json == NULL && len > 0u) {
        pr_err_str(&e, "tools JSON is NULL");
        return NEEDLE_PROMPT_E_JSON;
    }

    if (sys0) {
        pr_put_str(&o, "<|im_start|>system\n");
        at = o.n;
        pr_put(&o, sys0, (size_t)(sys1 - sys0));
        pr_untrusted(&u, at, o.n);
        pr_put_str(&o, "<|im_end|>\n");
    }
    pr_put_str(&o, "<|im_start|>user\n<tools>");
    at = o.n;
    j.s = (const uint8_t *)tools_json;
    j.len = len;
    j.pos = 0;
    j.o = &o;
    j.e = &e;
    j.ppm = ppm;
    j.ppm_cap = ppm_cap;
    j.ts = fill;
    rc = pr_list(&j, read);
    if (fill) {    /* what the pass found, for the readers of the record */
        fill->list_rc = rc;
        fill->exact = !o.overflow;
        fill->high = o.high - at;
        fill->list = out + at;
        fill->len = o.n - at;
    }
    if (rc) {
        if (out && cap > 0u) out[0] = '\0';
        return rc;
    }
    pr_untrusted(&u, at, o.n);
    pr_put_str(&o, "</tools>\n");
    at = o.n;
    pr_put(&o, query, qlen);
    pr_untrusted(&u, at, o.n);
    pr_put_str(&o, "<|im_end|>\n<|im_start|>assistant\n");

    if (o.overflow || o.n > (size_t)INT_MAX - 1u) {
        if (out && cap > 0u) out[0] = '\0';
        pr_err_str(&e, "output buffer of ");
        pr_err_num(&e, cap);
        pr_err_str(&e, " bytes is too small: the prompt needs ");
        pr_err_num(&e, o.n + 1u);
        pr_err_str(&e, " (with the NUL)");
        return NEEDLE_PROMPT_E_SPACE;
    }
    out[o.n] = '\0';
    if (untrusted) *untrusted = u;
    return (int)o.n;
}

int needle_render_prompt_thresholds(const char *tools_json, size_t len, const char *query, const char *system,
                                    char *out, size_t cap, char *err, size_t errcap,
                                    needle_prompt_untrusted *untrusted, int32_t *ppm, size_t ppm_cap)
{
    return pr_render(tools_json, len, NULL, NULL, query, system, out, cap, err, errcap, untrusted, ppm, ppm_cap);
}

/* ------------------------------------------------------------------ the tool set */

int needle_toolset_parse(needle_toolset *ts, const char *tools_json, size_t len, char *text, size_t cap)
{
    memset(ts, 0, sizeof *ts);
    ts->json = tools_json;
    ts->json_len = len;
    ts->list_rc = NEEDLE_PROMPT_E_JSON;    /* until the pass says otherwise ("tools JSON is NULL") */
    ts->rc = pr_render(tools_json, len, NULL, ts, "", NULL, text, cap, ts->err, sizeof ts->err, NULL, ts->ppm,
                       NEEDLE_TOOLSET_MAX_TOOLS);
    return ts->rc;
}

int needle_toolset_render(const needle_toolset *ts, const char *tools_json, size_t len, const char *query,
                          const char *system, char *out, size_t cap, char *err, size_t errcap,
                          needle_prompt_untrusted *untrusted, int32_t *ppm, size_t ppm_cap)
{
    return pr_render(tools_json, len, ts, NULL, query, system, out, cap, err, errcap, untrusted, ppm, ppm_cap);
}

void needle_toolset_choose(needle_toolset *ts, const char *list, size_t len, const uint32_t *chosen, uint32_t n)
{
    uint32_t at = 1u;     /* past the '[' */
    for (uint32_t k = 0; k < n; k++) {
        const uint32_t m = ts->end[chosen[k]] - ts->start[chosen[k]];
        ts->start[k] = at;
        ts->end[k] = at + m;
        ts->ppm[k] = ts->ppm[chosen[k]];   /* its own threshold still gates its call */
        at += m + 1u;     /* and the ',' or ']' */
    }
    ts->json = ts->list = list;
    ts->json_len = ts->len = ts->high = len;
    ts->count = n;
    ts->list_rc = 0;
    ts->exact = 1;
}

uint32_t needle_toolset_passes(void)
{
    return passes;
}
