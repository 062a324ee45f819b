/* needle_json_scan.c -- the one JSON and UTF-8 scanner of the library; see needle_json_scan.h. */
#include "needle_json_scan.h"

#include <string.h>

size_t needle_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0], lo = 0x80u, hi = 0xBFu;
    size_t need, k;
    uint32_t v;
    if (c < 0x80u) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2u && c <= 0xDFu) {
        need = 1; v = c & 0x1Fu;
    } else if (c >= 0xE0u && c <= 0xEFu) {
        need = 2; v = c & 0x0Fu;
        if (c == 0xE0u) lo = 0xA0u;
        if (c == 0xEDu) hi = 0x9Fu;
    } else if (c >= 0xF0u && c <= 0xF4u) {
        need = 3; v = c & 0x07u;
        if (c == 0xF0u) lo = 0x90u;
        if (c == 0xF4u) hi = 0x8Fu;
    } else {
        return 0;
    }
    if (n - 1u < need) return 0;
    for (k = 1; k <= need; k++) {
        if (s[k] < lo || s[k] > hi) return 0;
        v = (v << 6) | (s[k] & 0x3Fu);
        lo = 0x80u;
        hi = 0xBFu;
    }
    *cp = v;
    return need + 1u;
}

size_t needle_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80u) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800u) {
        out[0] = (uint8_t)(0xC0u | (cp >> 6));
        out[1] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 2;
    }
    if (cp < 0x10000u) {
        out[0] = (uint8_t)(0xE0u | (cp >> 12));
        out[1] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
        out[2] = (uint8_t)(0x80u | (cp & 0x3Fu));
        return 3;
    }
    out[0] = (uint8_t)(0xF0u | (cp >> 18));
    out[1] = (uint8_t)(0x80u | ((cp >> 12) & 0x3Fu));
    out[2] = (uint8_t)(0x80u | ((cp >> 6) & 0x3Fu));
    out[3] = (uint8_t)(0x80u | (cp & 0x3Fu));
    return 4;
}

int needle_json_hex4(const char *s, size_t n, uint32_t *v)
{
    uint32_t r = 0;
    if (n < 4u) return -1;
    for (size_t i = 0; i < 4u; i++) {
        char c = s[i];
        r <<= 4;
        if (c >= '0' && c <= '9') r |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') r |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') r |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *v = r;
    return 0;
}

size_t needle_json_skip_ws(const char *s, size_t n, size_t pos)
{
    while (pos < n && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r')) pos++;
    return pos;
}

int needle_json_char(const char *s, size_t n, size_t *pos, uint32_t *cp)
{
    size_t p = *pos;
    if (p >= n) return NEEDLE_JSON_E_END;
    uint8_t c = (uint8_t)s[p];
    if (c == '"') return NEEDLE_JSON_CLOSE;
    if (c < 0x20u) {
        *cp = c;
        return NEEDLE_JSON_E_CONTROL;
    }
    if (c != '\\') {
        size_t k = needle_utf8_decode((const uint8_t *)s + p, n - p, cp);
        if (k == 0) return NEEDLE_JSON_E_UTF8;
        *pos = p + k;
        return NEEDLE_JSON_CHAR;
    }
    if (p + 1u >= n) return NEEDLE_JSON_E_END;
    switch (s[p + 1u]) {
    case '"': *cp = '"'; break;
    case '\\': *cp = '\\'; break;
    case '/': *cp = '/'; break;
    case 'b': *cp = '\b'; break;
    case 'f': *cp = '\f'; break;
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case 'u': {
        uint32_t v, lo;
        if (needle_json_hex4(s + p + 2u, n - p - 2u, &v)) return NEEDLE_JSON_E_HEX;
        p += 6u;
        if (v >= 0xD800u && v <= 0xDBFFu && n - p >= 6u && s[p] == '\\' && s[p + 1u] == 'u'
            && !needle_json_hex4(s + p + 2u, 4u, &lo) && lo >= 0xDC00u && lo <= 0xDFFFu) {
            v = 0x10000u + ((v - 0xD800u) << 10) + (lo - 0xDC00u);
            p += 6u;
        }
        *cp = v;
        *pos = p;
        return NEEDLE_JSON_CHAR;
    }
    default: return NEEDLE_JSON_E_ESCAPE;
    }
    *pos = p + 2u;
    return NEEDLE_JSON_CHAR;
}

static int is_digit(const char *s, size_t n, size_t at) { return at < n && s[at] >= '0' && s[at] <= '9'; }

/* The digits that must come at *p (at least one): 0, or the error. */
static int digits(const char *s, size_t n, size_t *p)
{
    if (*p >= n) return NEEDLE_JSON_E_NUMBER_END;
    if (!is_digit(s, n, *p)) return NEEDLE_JSON_E_NUMBER;
    while (is_digit(s, n, *p)) (*p)++;
    return 0;
}

int needle_json_number(const char *s, size_t n, size_t pos, size_t *end, int *integer)
{
    size_t p = pos;
    int rc;
    *integer = 1;
    if (p < n && s[p] == '-') p++;
    if (p < n && s[p] == '0') p++;
    else if ((rc = digits(s, n, &p)) != 0) { *end = p; return rc; }
    if (p < n && s[p] == '.') {
        *integer = 0;
        p++;
        if ((rc = digits(s, n, &p)) != 0) { *end = p; return rc; }
    }
    if (p < n && (s[p] == 'e' || s[p] == 'E')) {
        *integer = 0;
        p++;
        if (p < n && (s[p] == '+' || s[p] == '-')) p++;
        if ((rc = digits(s, n, &p)) != 0) { *end = p; return rc; }
    }
    *end = p;
    return NEEDLE_JSON_NUMBER;
}

int needle_json_literal(const char *s, size_t n, size_t pos, const char *word)
{
    size_t k = strlen(word);
    return n - pos >= k && !memcmp(s + pos, word, k);
}

/* A byte of a number or of true, false, null. */
static int scalar_byte(char c)
{
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E' || c == 't'
        || c == 'r' || c == 'u' || c == 'f' || c == 'a' || c == 'l' || c == 's' || c == 'n';
}

/* Just past the string whose quote is at s[pos], or (size_t)-1. */
static size_t string_end(const char *s, size_t n, size_t pos)
{
    for (pos++; pos < n && s[pos] != '"'; pos += s[pos] == '\\' ? 2u : 1u) {}
    return pos < n ? pos + 1u : (size_t)-1;
}

size_t needle_json_value_end(const char *s, size_t n, size_t pos)
{
    if (s[pos] == '"') return string_end(s, n, pos);
    if (s[pos] == '{' || s[pos] == '[') {
        int depth = 0;
        while (pos < n) {
            char c = s[pos];
            if (c == '"') {
                pos = string_end(s, n, pos);
                if (pos == (size_t)-1) return pos;
                continue;
            }
            pos++;
            if (c == '{' || c == '[') depth++;
            else if ((c == '}' || c == ']') && --depth == 0) return pos;
        }
        return (size_t)-1;
    }
    while (pos < n && scalar_byte(s[pos])) pos++;
    return pos;
}

/* ---- minified JSON (the call grammar's copy of a tool list) */

int needle_json_member(const char *t, size_t o, uint32_t k, size_t *key, size_t *val)
{
    size_t i = o + 1u;
    if (t[i] == '}') return 0;
    for (uint32_t m = 0;; m++) {
        size_t v = needle_json_end(t, i) + 1u;
        if (m == k) { *key = i; *val = v; return 1; }
        i = needle_json_end(t, v);
        if (t[i] == '}') return 0;
        i++;
    }
}

int needle_json_item(const char *t, size_t a, uint32_t k, size_t *val)
{
    size_t i = a + 1u;
    if (t[i] == ']') return 0;
    for (uint32_t m = 0;; m++) {
        if (m == k) { *val = i; return 1; }
        i = needle_json_end(t, i);
        if (t[i] == ']') return 0;
        i++;
    }
}

int needle_json_is(const char *t, size_t i, const char *quoted)
{
    size_t n = strlen(quoted);
    return needle_json_end(t, i) - i == n && !memcmp(t + i, quoted, n);
}

size_t needle_json_get(const char *t, size_t o, const char *quoted)
{
    size_t key, val;
    for (uint32_t k = 0; needle_json_member(t, o, k, &key, &val); k++)
        if (needle_json_is(t, key, quoted)) return val;
    return (size_t)-1;
}

typedef struct {
    int neg;
    size_t i0, ni, f0, nf;  /* the digits before and after the point */
    size_t lead, n;         /* leading zeros of the digits, significant digits (0: the value is 0) */
    int64_t e;              /* value = (the n significant digits) * 10^e */
} json_num;

static void num_parse(const char *t, size_t i, json_num *m)
{
    int64_t ev = 0;
    int eneg = 0;
    m->neg = t[i] == '-';
    if (m->neg) i++;
    m->i0 = i;
    while (t[i] >= '0' && t[i] <= '9') i++;
    m->ni = i - m->i0;
    m->f0 = i; m->nf = 0;
    if (t[i] == '.') {
        m->f0 = ++i;
        while (t[i] >= '0' && t[i] <= '9') i++;
        m->nf = i - m->f0;
    }
    if (t[i] == 'e' || t[i] == 'E') {
        i++;
        if (t[i] == '+' || t[i] == '-') { eneg = t[i] == '-'; i++; }
        for (; t[i] >= '0' && t[i] <= '9'; i++) if (ev < 1000000000000LL) ev = ev * 10 + (t[i] - '0');
    }
    const size_t len = m->ni + m->nf;
#define NUM_DIGIT(m, p) ((p) < (m)->ni ? t[(m)->i0 + (p)] : t[(m)->f0 + (p) - (m)->ni])
    size_t lead = 0, trail = 0;
    while (lead < len && NUM_DIGIT(m, lead) == '0') lead++;
    while (trail < len - lead && NUM_DIGIT(m, len - 1u - trail) == '0') trail++;
    m->lead = lead;
    m->n = len - lead - trail;
    m->e = (eneg ? -ev : ev) - (int64_t)m->nf + (int64_t)trail;
}

int needle_json_equal(const char *t, size_t a, size_t b)
{
    int na = t[a] == '-' || (t[a] >= '0' && t[a] <= '9'), nb = t[b] == '-' || (t[b] >= '0' && t[b] <= '9');
    if (na && nb) {
        json_num x, y;
        num_parse(t, a, &x);
        num_parse(t, b, &y);
        if (x.n == 0 || y.n == 0) return x.n == y.n;
        if (x.neg != y.neg || x.n != y.n || x.e != y.e) return 0;
        for (size_t k = 0; k < x.n; k++) {
            const json_num *m = &x;
            char dx = NUM_DIGIT(m, x.lead + k);
            m = &y;
            if (dx != NUM_DIGIT(m, y.lead + k)) return 0;
        }
        return 1;
    }
    size_t la = needle_json_end(t, a) - a, lb = needle_json_end(t, b) - b;
    return la == lb && !memcmp(t + a, t + b, la);
}
#undef NUM_DIGIT


int needle_json_is_integer(const char *t, size_t i)
{
    json_num m;
    num_parse(t, i, &m);
    return m.n == 0 || m.e >= 0;
}
