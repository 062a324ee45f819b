/* needle_bindings.c -- the call list into typed argument structs; see needle_bindings.h.
 * The input is what the call grammar admits (canonical compact JSON), so one pass with no
 * backtracking and no recursion reads it. */
#include "needle_bindings.h"

#include <string.h>

#include "needle_json_scan.h"

typedef struct {
    const char *p, *end;
} cursor;

static int eat(cursor *c, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n)) return 0;
    c->p += n;
    return 1;
}

/* The end of the JSON value at p, or NULL when it runs past end. */
static const char *value_end(const char *p, const char *end)
{
    if (p >= end) return NULL;
    size_t e = needle_json_value_end(p, (size_t)(end - p), 0);
    return e == (size_t)-1 ? NULL : p + e;
}

/* A JSON string into out[0..cap) (NUL-terminated, cut at a character boundary). */
static int read_string(cursor *c, char *out, uint16_t cap, bool *cut)
{
    size_t n = 0, pos = 0, len;
    int full = 0;
    uint32_t cp;
    if (!eat(c, "\"")) return -1;
    len = (size_t)(c->end - c->p);
    while (needle_json_char(c->p, len, &pos, &cp) == NEEDLE_JSON_CHAR) {
        uint8_t ch[4];
        size_t k = needle_utf8_encode(cp, ch);
        if (!full && n + k < cap) { memcpy(out + n, ch, k); n += k; }
        else full = 1;
    }
    c->p += pos;
    if (!eat(c, "\"")) return -1;
    out[n] = 0;
    if (cut) *cut = full;
    return 0;
}

static int read_value(cursor *c, const needle_field *f, char *slot, char *args, uint16_t index)
{
    const char *e = value_end(c->p, c->end);
    if (!e) return -1;
    switch (f->type) {
    case NB_INT: case NB_NUM: {
        int neg = *c->p == '-';
        int64_t m = 0, scale = 1;
        int frac = 0;
        for (const char *q = c->p + neg; q < e; q++) {
            if (*q == '.') { frac = 1; continue; }
            m = m * 10 + (*q - '0');
            if (frac) scale *= 10;
        }
        if (f->type == NB_INT) { int64_t v = neg ? -m : m; memcpy(slot, &v, sizeof v); }
        else { double v = (double)m / (double)scale; if (neg) v = -v; memcpy(slot, &v, sizeof v); }
        break;
    }
    case NB_BOOL: { bool v = *c->p == 't'; memcpy(slot, &v, sizeof v); break; }
    case NB_ENUM: {
        uint16_t i = 0;
        while (i < f->n_alts && !((size_t)(e - c->p) == strlen(f->alts[i]) && !memcmp(c->p, f->alts[i], (size_t)(e - c->p)))) i++;
        if (i == f->n_alts) return -1;
        /* by the value's own size: a C enum is 1 byte on arm-none-eabi (short enums), 4 on Linux */
        if (f->size == 1) { uint8_t v = (uint8_t)i; memcpy(slot, &v, 1); }
        else if (f->size == 2) memcpy(slot, &i, 2);
        else { uint32_t v = i; memcpy(slot, &v, sizeof v); }
        break;
    }
    case NB_STR: {
        bool cut = false;
        if (read_string(c, slot, f->cap, &cut)) return -1;
        if (cut && f->cut >= 0) *(bool *)(void *)(args + f->cut) = true;
        (void)index;
        return 0;
    }
    case NB_JSON: { needle_json v = { c->p, (size_t)(e - c->p) }; memcpy(slot, &v, sizeof v); break; }
    default: break;   /* NB_NULL: nothing kept */
    }
    c->p = e;
    return 0;
}

int needle_bind_next(const needle_tool_desc *tools, uint32_t n_tools, const char **p, const char *end, void *args_)
{
    char *args = args_;
    cursor c = { *p, end };
    if (!eat(&c, "[") && !eat(&c, ",")) {
        if (eat(&c, "]")) { *p = c.p; return NEEDLE_BIND_END; }
        return NEEDLE_BIND_ERROR;
    }
    if (eat(&c, "]")) { *p = c.p; return NEEDLE_BIND_END; }
    if (!eat(&c, "{\"name\":")) return NEEDLE_BIND_ERROR;
    const char *name_end = value_end(c.p, end);
    uint32_t t = 0;
    while (t < n_tools && !(name_end && (size_t)(name_end - c.p) == strlen(tools[t].name) &&
                            !memcmp(c.p, tools[t].name, (size_t)(name_end - c.p)))) t++;
    if (t == n_tools) return NEEDLE_BIND_ERROR;
    c.p = name_end;
    if (!eat(&c, ",\"arguments\":{")) return NEEDLE_BIND_ERROR;
    const needle_tool_desc *d = &tools[t];
    memset(args, 0, d->size);
    while (!eat(&c, "}")) {
        eat(&c, ",");
        const char *key_end = value_end(c.p, end);
        uint16_t k = 0;
        while (k < d->n_fields && !(key_end && (size_t)(key_end - c.p) == strlen(d->fields[k].key) &&
                                    !memcmp(c.p, d->fields[k].key, (size_t)(key_end - c.p)))) k++;
        if (k == d->n_fields) return NEEDLE_BIND_ERROR;
        const needle_field *f = &d->fields[k];
        c.p = key_end;
        if (!eat(&c, ":")) return NEEDLE_BIND_ERROR;
        if (f->has >= 0) *(bool *)(void *)(args + f->has) = true;
        if (f->items && f->type != NB_JSON) {   /* a fixed array: the first f->items values */
            uint16_t n = 0;
            if (!eat(&c, "[")) return NEEDLE_BIND_ERROR;
            while (!eat(&c, "]")) {
                eat(&c, ",");
                if (n < f->items) {
                    if (read_value(&c, f, args + f->offset + (size_t)n * f->size, args, n)) return NEEDLE_BIND_ERROR;
                    n++;
                } else {
                    const char *e = value_end(c.p, end);
                    if (!e) return NEEDLE_BIND_ERROR;
                    c.p = e;
                }
            }
            memcpy(args + f->count, &n, sizeof n);
        } else if (read_value(&c, f, args + f->offset, args, 0)) return NEEDLE_BIND_ERROR;
    }
    if (!eat(&c, "}")) return NEEDLE_BIND_ERROR;
    *p = c.p;
    return (int)t;
}
