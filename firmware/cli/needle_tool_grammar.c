/* needle_tool_grammar.c -- tool schemas into grammar tables, and the byte-level matcher over them;
 * see needle_tool_grammar.h and docs/grammar.md.  generator/tools/{schema,regex,grammar}.py are
 * the twins: every rule below has its Python counterpart of the same name.
 */
#include "needle_tool_grammar.h"

#include <string.h>

#include "tool_prompt.h"

#define BIG       999999999999999999LL    /* bounds are clamped to [-BIG, BIG] ... */
#define BIG1      1000000000000000000LL   /* ... after a first clamp to +-(BIG + 1) */
#define SAT       2000000000000000000LL   /* saturation of the exact scaled bounds */
#define NUM_DECIMALS      6
#define INT_DIGITS        18
#define NUM_INT_DIGITS    12
#define MAX_REPEAT        32
#define MAX_CP            0x10FFFFu
#define INF               0x3FFFFFFFu
#define SPAN_KEY          "\"x-needle-span\""   /* our keyword: a string copied from the query */
/* A node's shortest text is saturated here (schema.py MB_CAP): far above the 4096 bytes a call
 * list may hold, and low enough that no product or sum of them overflows 32 bits (minItems
 * 4096 of minItems 4096 of minLength 4096 once wrapped round to a few bytes). */
#define MB_CAP            32768u

static const char CALL_HEAD[] = "{\"name\":";
static const char CALL_MID[] = ",\"arguments\":";
#define CALL_HEAD_LEN (sizeof CALL_HEAD - 1u)
#define CALL_MID_LEN  (sizeof CALL_MID - 1u)

/* The refusal of an unknown keyword lists what is supported where it stood, short enough for
   a 256-byte error line with the tool and property names in front (schema.py says the same). */
static const char SUPPORTED_ANY[] =
    "type, enum, const, annotations (description, title, default, examples, format)";
static const char *const SUPPORTED_FOR[] = {            /* by type, in TYPE_NAMES order */
    "minLength, maxLength, pattern",
    "minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf",
    "minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf",
    "", "",
    "items, minItems, maxItems, uniqueItems",
    "properties, required, additionalProperties false",
};

static const int64_t POW10[19] = {
    1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL, 100000000LL,
    1000000000LL, 10000000000LL, 100000000000LL, 1000000000000LL, 10000000000000LL,
    100000000000000LL, 1000000000000000LL, 10000000000000000LL, 100000000000000000LL,
    1000000000000000000LL };

/* ================================================================ the store */

/* The tables of a grammar compiled at run time: one per library (needle_grammar_compile);
 * a needle_grammar views them.  The built-in tools' tables are generated at build time
 * (needle_tools.c) and never live here. */
typedef struct {
    char text[NEEDLE_GRAMMAR_TEXT_MAX + 16u];   /* the list, NUL, "truefalsenull", NUL */
    size_t text_len;
    needle_gnode node[NEEDLE_GRAMMAR_MAX_NODES];
    needle_gref ref[NEEDLE_GRAMMAR_MAX_REFS];
    uint16_t sub[NEEDLE_GRAMMAR_MAX_REFS];
    needle_gitem item[NEEDLE_GRAMMAR_MAX_ITEMS];
    uint32_t range[NEEDLE_GRAMMAR_MAX_RANGES][2];
    uint32_t rest[NEEDLE_GRAMMAR_MAX_ITEMS + 64u];
    uint32_t n_node, n_ref, n_item, n_range, n_rest;
    int32_t tool_ppm[NEEDLE_GRAMMAR_MAX_TOOLS];   /* each tool's own minimum confidence (-1: none) */
} ng_store;

static ng_store store;

/* ================================================================ errors */

typedef struct {
    char *buf;
    size_t cap, n;
} ng_err;

static void err_str(ng_err *e, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, e->n++)
        if (e->n + 1 < e->cap) e->buf[e->n] = s[i];
    if (e->cap) e->buf[e->n + 1 < e->cap ? e->n : e->cap - 1] = '\0';
}

static void err_s(ng_err *e, const char *s) { err_str(e, s, strlen(s)); }

static void err_u(ng_err *e, uint64_t v)
{
    char d[24];
    size_t n = 0;
    do { d[sizeof d - 1 - n++] = (char)('0' + v % 10u); v /= 10u; } while (v);
    err_str(e, d + sizeof d - n, n);
}

/* ================================================================ integers */

static int64_t fdiv(int64_t a, int64_t b)   /* floor(a / b), b > 0 */
{
    int64_t q = a / b;
    if ((a % b) != 0 && a < 0) q--;
    return q;
}

static int64_t cdiv(int64_t a, int64_t b) { return -fdiv(-a, b); }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

/* An integer c in [c0, c1] with s*c in [lo, hi] and s*c a multiple of m? */
static int lattice_hit(int64_t c0, int64_t c1, int64_t s, int64_t lo, int64_t hi, int64_t m)
{
    int64_t a = max64(c0, cdiv(lo, s)), b = min64(c1, fdiv(hi, s));
    if (a > b) return 0;
    int64_t step = m / gcd64(m, s);
    return cdiv(a, step) * step <= b;
}

/* Fewest bytes that complete a number prefix into a valid value (0: it is one), or -1
 * (grammar.py number_min_extra; docs/grammar.md, "Numbers"). */
static int32_t number_min_extra(const needle_gnode *n, int neg, int64_t P, int ndig, int frac, int sign)
{
    const int is_num = n->kind == NG_NUM, kmax = is_num ? NUM_DECIMALS : 0;
    const int imax = is_num ? NUM_INT_DIGITS : INT_DIGITS;
    int64_t best = INF;
    for (int sg = sign == 2 ? 0 : neg; sg <= (sign == 2 ? 1 : neg); sg++) {
        int64_t lo = sg ? -n->hi : n->lo, hi = sg ? -n->lo : n->hi;
        int base = (sign == 2 && sg == 1) ? 1 : 0;
        if (frac >= 0) {
            for (int k = frac > 1 ? frac : 1; k <= kmax; k++) {
                int e = k - frac;
                if (lattice_hit(P * POW10[e], (P + 1) * POW10[e] - 1, POW10[kmax - k], lo, hi, n->mult)) {
                    if (base + k - frac < best) best = base + k - frac;
                    break;
                }
            }
            continue;
        }
        for (int j = 0; j <= imax - ndig; j++) {
            if (ndig == 0 && j == 0) continue;
            if (ndig >= 1 && P == 0 && j > 0) break;
            for (int k = 0; k <= kmax; k++) {
                int64_t cost = base + j + (k ? k + 1 : 0);
                if (cost >= best) break;
                int64_t p0, p1;
                if (ndig == 0) { p0 = j == 1 ? 0 : POW10[j - 1]; p1 = POW10[j] - 1; }
                else { p0 = P * POW10[j]; p1 = (P + 1) * POW10[j] - 1; }
                if (sg == 1 && !is_num && p0 == 0) {   /* "-0" is not an integer we write */
                    if (p1 == 0) continue;
                    p0 = 1;     /* (counting it let '-' in under minimum 0, then nothing fit) */
                }
                if (lattice_hit(p0 * POW10[k], (p1 + 1) * POW10[k] - 1, POW10[kmax - k], lo, hi, n->mult)) {
                    best = cost;
                    break;
                }
            }
        }
    }
    return best >= INF ? -1 : (int32_t)best;
}

/* ================================================================ pattern sets */

static int item_hits(const needle_grammar *g, const needle_gitem *it, uint32_t lo, uint32_t hi)
{
    const uint32_t (*r)[2] = g->range + it->range0;
    if (!it->negate) {
        for (uint32_t i = 0; i < it->n_range; i++)
            if (r[i][0] <= hi && lo <= r[i][1]) return 1;
        return 0;
    }
    uint32_t c = lo;
    for (uint32_t i = 0; i < it->n_range; i++) {
        if (r[i][1] < c) continue;
        if (r[i][0] > c) return 1;
        c = r[i][1] + 1u;
        if (c > hi) return 0;
    }
    return c <= hi;
}

static uint64_t nfa_closure(const needle_grammar *g, const needle_gnode *n, uint64_t s)
{
    for (uint32_t i = 0; i < n->n_item; i++)
        if ((s >> i & 1u) && g->item[n->item0 + i].kind != NG_P_ONE) s |= 1ull << (i + 1u);
    return s;
}

static uint64_t nfa_step(const needle_grammar *g, const needle_gnode *n, uint64_t s, uint32_t cp)
{
    uint64_t out = 0;
    for (uint32_t i = 0; i < n->n_item; i++) {
        const needle_gitem *it = &g->item[n->item0 + i];
        if ((s >> i & 1u) && item_hits(g, it, cp, cp))
            out |= 1ull << (it->kind == NG_P_STAR ? i : i + 1u);
    }
    return nfa_closure(g, n, out);
}

static int nfa_can_take(const needle_grammar *g, const needle_gnode *n, uint64_t s, uint32_t lo, uint32_t hi)
{
    for (uint32_t i = 0; i < n->n_item; i++)
        if ((s >> i & 1u) && item_hits(g, &g->item[n->item0 + i], lo, hi)) return 1;
    return 0;
}

/* Bytes of the cheapest character of an item as canonical JSON writes it (regex.py COST_TIERS). */
static uint32_t item_min_bytes(const needle_grammar *g, const needle_gitem *it)
{
    static const struct { uint8_t cost, n; uint32_t r[5][2]; } tiers[] = {
        { 1, 3, { {0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F} } },
        { 2, 5, { {0x08, 0x0A}, {0x0C, 0x0D}, {0x22, 0x22}, {0x5C, 0x5C}, {0x80, 0x7FF} } },
        { 3, 2, { {0x800, 0xD7FF}, {0xE000, 0xFFFF} } },
        { 4, 1, { {0x10000, MAX_CP} } },
        { 6, 3, { {0x00, 0x07}, {0x0B, 0x0B}, {0x0E, 0x1F} } },
    };
    for (uint32_t t = 0; t < sizeof tiers / sizeof tiers[0]; t++)
        for (uint32_t i = 0; i < tiers[t].n; i++)
            if (item_hits(g, it, tiers[t].r[i][0], tiers[t].r[i][1])) return tiers[t].cost;
    return 6;
}

/* ================================================================ the minified JSON */

typedef struct {
    ng_store *g;            /* written while compiling */
    needle_grammar v;       /* read through the matcher's helpers: views of *g */
    ng_err e;
    char where[512];
    size_t where_n;
    size_t tool_n;          /* where[0..tool_n): the tool being compiled ("tool \"NAME\""), 0 before */
} ng_comp;

static const char *T(const ng_comp *c) { return c->g->text; }

/* Index just past the value at i. */
static size_t jv_end(const char *t, size_t i)
{
    if (t[i] == '"') {
        for (i++; t[i] != '"'; i += t[i] == '\\' ? 2u : 1u) {}
        return i + 1u;
    }
    if (t[i] == '{' || t[i] == '[') {
        int depth = 0;
        for (;; i++) {
            if (t[i] == '"') { for (i++; t[i] != '"'; i += t[i] == '\\' ? 2u : 1u) {} continue; }
            if (t[i] == '{' || t[i] == '[') depth++;
            else if ((t[i] == '}' || t[i] == ']') && --depth == 0) return i + 1u;
        }
    }
    while (t[i] && strchr("+-0123456789.eEtrufalsn", t[i]) && t[i] != ',' ) i++;
    return i;
}

/* Members of the object at o: *key and *val of member k (0-based); 0 when there is none. */
static int jv_member(const char *t, size_t o, uint32_t k, size_t *key, size_t *val)
{
    size_t i = o + 1u;
    if (t[i] == '}') return 0;
    for (uint32_t m = 0;; m++) {
        size_t v = jv_end(t, i) + 1u;
        if (m == k) { *key = i; *val = v; return 1; }
        i = jv_end(t, v);
        if (t[i] == '}') return 0;
        i++;
    }
}

static int jv_item(const char *t, size_t a, uint32_t k, size_t *val)
{
    size_t i = a + 1u;
    if (t[i] == ']') return 0;
    for (uint32_t m = 0;; m++) {
        if (m == k) { *val = i; return 1; }
        i = jv_end(t, i);
        if (t[i] == ']') return 0;
        i++;
    }
}

static int jv_is(const char *t, size_t i, const char *quoted)
{
    size_t n = strlen(quoted);
    return jv_end(t, i) - i == n && !memcmp(t + i, quoted, n);
}

/* The value of member "name" of the object at o, or (size_t)-1. */
static size_t jv_get(const char *t, size_t o, const char *quoted)
{
    size_t key, val;
    for (uint32_t k = 0; jv_member(t, o, k, &key, &val); k++)
        if (jv_is(t, key, quoted)) return val;
    return (size_t)-1;
}

#define NONE ((size_t)-1)

/* ================================================================ compile */

static int fail(ng_comp *c, const char *msg)
{
    c->e.n = 0;
    err_str(&c->e, c->where, c->where_n);
    err_s(&c->e, ": ");
    err_s(&c->e, msg);
    return -1;
}

static void where_push(ng_comp *c, const char *s, size_t n, size_t *saved)
{
    *saved = c->where_n;
    for (size_t i = 0; i < n && c->where_n + 1 < sizeof c->where; i++) c->where[c->where_n++] = s[i];
}

/* "tool \"NAME\": the grammar needs more than N <what>": a table bound (a board sets them,
 * boards/<name>.toml [grammar]) is too small for the list. */
static void table_full(ng_comp *c, uint32_t bound, const char *what)
{
    c->e.n = 0;
    if (c->tool_n) {
        err_str(&c->e, c->where, c->tool_n);
        err_s(&c->e, ": ");
    }
    err_s(&c->e, "the grammar needs more than ");
    err_u(&c->e, bound);
    err_s(&c->e, what);
}

static int add_node(ng_comp *c, uint8_t kind, uint32_t *idx)
{
    ng_store *g = c->g;
    if (g->n_node >= NEEDLE_GRAMMAR_MAX_NODES) {
        table_full(c, NEEDLE_GRAMMAR_MAX_NODES, " nodes (NEEDLE_GRAMMAR_MAX_NODES): use fewer or simpler tools");
        return -1;
    }
    *idx = g->n_node++;
    memset(&g->node[*idx], 0, sizeof g->node[0]);
    g->node[*idx].kind = kind;
    g->node[*idx].lo = -BIG;
    g->node[*idx].hi = BIG;
    g->node[*idx].mult = 1;
    g->node[*idx].max_len = -1;
    return 0;
}

static int add_ref(ng_comp *c, size_t off, size_t len)
{
    if (c->g->n_ref >= NEEDLE_GRAMMAR_MAX_REFS) {
        table_full(c, NEEDLE_GRAMMAR_MAX_REFS, " literals: names, keys and enum values "
                   "(NEEDLE_GRAMMAR_MAX_REFS): use fewer tools or values");
        return -1;
    }
    c->g->ref[c->g->n_ref].off = (uint32_t)off;
    c->g->ref[c->g->n_ref].len = (uint32_t)len;
    c->g->n_ref++;
    return 0;
}

/* Exact floor/ceil of (decimal text) * 10^scale, saturated; -1 if more than 18 significant digits. */
static int scaled(const char *t, size_t i, size_t end, int scale, int64_t *fl, int64_t *ce, int *integral)
{
    int neg = 0, sig = 0, started = 0, e10 = 0;
    uint64_t D = 0;
    if (t[i] == '-') { neg = 1; i++; }
    for (; i < end && t[i] >= '0' && t[i] <= '9'; i++) {
        if (t[i] != '0') started = 1;
        if (started) { D = D * 10u + (uint64_t)(t[i] - '0'); sig++; }
        if (sig > 18) return -1;
    }
    if (i < end && t[i] == '.') {
        for (i++; i < end && t[i] >= '0' && t[i] <= '9'; i++) {
            if (t[i] != '0') started = 1;
            if (started) { D = D * 10u + (uint64_t)(t[i] - '0'); sig++; }
            if (sig > 18) return -1;
            e10--;
        }
    }
    if (i < end && (t[i] == 'e' || t[i] == 'E')) {
        int eneg = 0, ev = 0;
        i++;
        if (t[i] == '+' || t[i] == '-') { eneg = t[i] == '-'; i++; }
        for (; i < end && t[i] >= '0' && t[i] <= '9'; i++) if (ev < 10000) ev = ev * 10 + (t[i] - '0');
        e10 += eneg ? -ev : ev;
    }
    e10 += scale;
    int64_t q, r = 0;
    if (D == 0) q = 0;
    else if (e10 >= 0) {
        q = e10 > 18 || D > (uint64_t)(SAT / POW10[e10]) ? SAT : (int64_t)D * POW10[e10];
    } else if (-e10 > 18) {
        q = 0; r = 1;
    } else {
        q = (int64_t)(D / (uint64_t)POW10[-e10]);
        r = (int64_t)(D % (uint64_t)POW10[-e10]);
    }
    *integral = r == 0;
    if (neg) { *fl = -(q + (r ? 1 : 0)); *ce = -q; }
    else { *fl = q; *ce = q + (r ? 1 : 0); }
    return 0;
}

static int64_t clampb(int64_t v) { return v > BIG1 ? BIG1 : v < -BIG1 ? -BIG1 : v; }


static const char *const TYPE_NAMES[] = { "\"string\"", "\"integer\"", "\"number\"", "\"boolean\"",
                                          "\"null\"", "\"array\"", "\"object\"" };
enum { TY_NONE = -1, TY_STRING, TY_INTEGER, TY_NUMBER, TY_BOOLEAN, TY_NULL, TY_ARRAY, TY_OBJECT };

static int keyword_allowed(const char *t, size_t key, int ty)
{
    static const char *const common[] = { "\"description\"", "\"title\"", "\"default\"", "\"examples\"",
                                          "\"format\"", "\"$comment\"", "\"type\"", "\"enum\"", "\"const\"",
                                          SPAN_KEY };
    static const char *const by_type[7][5] = {
        { "\"minLength\"", "\"maxLength\"", "\"pattern\"" },
        { "\"minimum\"", "\"maximum\"", "\"exclusiveMinimum\"", "\"exclusiveMaximum\"", "\"multipleOf\"" },
        { "\"minimum\"", "\"maximum\"", "\"exclusiveMinimum\"", "\"exclusiveMaximum\"", "\"multipleOf\"" },
        { 0 }, { 0 },
        { "\"items\"", "\"minItems\"", "\"maxItems\"", "\"uniqueItems\"" },
        { "\"properties\"", "\"required\"", "\"additionalProperties\"" },
    };
    for (uint32_t i = 0; i < sizeof common / sizeof common[0]; i++) if (jv_is(t, key, common[i])) return 1;
    if (ty >= 0)
        for (uint32_t i = 0; i < 5 && by_type[ty][i]; i++) if (jv_is(t, key, by_type[ty][i])) return 1;
    return 0;
}

/* ---- enum and const values as JSON values (schema.py _json_equal, _of_type) */

typedef struct {
    int neg;
    size_t i0, ni, f0, nf;  /* the digits before and after the point */
    size_t lead, n;         /* leading zeros of the digits, significant digits (0: the value is 0) */
    int64_t e;              /* value = (the n significant digits) * 10^e */
} ng_num;

static void num_parse(const char *t, size_t i, ng_num *m)
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

/* Equal as JSON values: numbers by value, everything else by its (canonical) text. */
static int json_equal(const char *t, size_t a, size_t b)
{
    int na = t[a] == '-' || (t[a] >= '0' && t[a] <= '9'), nb = t[b] == '-' || (t[b] >= '0' && t[b] <= '9');
    if (na && nb) {
        ng_num x, y;
        num_parse(t, a, &x);
        num_parse(t, b, &y);
        if (x.n == 0 || y.n == 0) return x.n == y.n;
        if (x.neg != y.neg || x.n != y.n || x.e != y.e) return 0;
        for (size_t k = 0; k < x.n; k++) {
            const ng_num *m = &x;
            char dx = NUM_DIGIT(m, x.lead + k);
            m = &y;
            if (dx != NUM_DIGIT(m, y.lead + k)) return 0;
        }
        return 1;
    }
    size_t la = jv_end(t, a) - a, lb = jv_end(t, b) - b;
    return la == lb && !memcmp(t + a, t + b, la);
}
#undef NUM_DIGIT

/* Is the scalar value at t[v] of type ty (TY_NONE: any; integer: a number of whole value)? */
static int of_type(const char *t, size_t v, int ty)
{
    switch (ty) {
    case TY_NONE: return 1;
    case TY_STRING: return t[v] == '"';
    case TY_BOOLEAN: return t[v] == 't' || t[v] == 'f';
    case TY_NULL: return t[v] == 'n';
    case TY_NUMBER: return t[v] == '-' || (t[v] >= '0' && t[v] <= '9');
    case TY_INTEGER: {
        if (!(t[v] == '-' || (t[v] >= '0' && t[v] <= '9'))) return 0;
        ng_num m;
        num_parse(t, v, &m);
        return m.n == 0 || m.e >= 0;
    }
    default: return 0;
    }
}

/* minLength & co: -1 when absent, -2 after an error. */
static int32_t count_kw(ng_comp *c, size_t s, const char *quoted, const char *name)
{
    const char *t = T(c);
    size_t v = jv_get(t, s, quoted);
    if (v == NONE) return -1;
    size_t e = jv_end(t, v);
    uint32_t x = 0;
    int ok = e > v && e - v <= 4;
    for (size_t i = v; ok && i < e; i++) ok = t[i] >= '0' && t[i] <= '9', x = x * 10u + (uint32_t)(t[i] - '0');
    if (!ok || x > 4096u) {
        fail(c, name);
        err_s(&c->e, " must be an integer 0..4096, not ");
        err_str(&c->e, t + v, e - v);
        return -2;
    }
    return (int32_t)x;
}

static int compile_number(ng_comp *c, size_t s, int ty, needle_gnode *n)
{
    static const char *const keys[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf" };
    const char *t = T(c);
    const int scale = ty == TY_INTEGER ? 0 : NUM_DECIMALS;
    for (int k = 0; k < 5; k++) {
        char quoted[24];
        size_t kl = strlen(keys[k]);
        quoted[0] = '"'; memcpy(quoted + 1, keys[k], kl); quoted[kl + 1] = '"'; quoted[kl + 2] = 0;
        size_t v = jv_get(t, s, quoted);
        if (v == NONE) continue;
        size_t e = jv_end(t, v);
        if (!(t[v] == '-' || (t[v] >= '0' && t[v] <= '9'))) { fail(c, keys[k]); err_s(&c->e, " must be a number"); return -1; }
        int64_t fl, ce;
        int integral;
        if (scaled(t, v, e, scale, &fl, &ce, &integral)) {
            fail(c, keys[k]);
            err_s(&c->e, ": ");
            err_str(&c->e, t + v, e - v);
            err_s(&c->e, " has more than 18 significant digits");
            return -1;
        }
        if (k == 0) n->lo = max64(n->lo, clampb(ce));
        else if (k == 2) n->lo = max64(n->lo, clampb(fl + 1));
        else if (k == 1) n->hi = min64(n->hi, clampb(fl));
        else if (k == 3) n->hi = min64(n->hi, clampb(ce - 1));
        else {
            if (ce <= 0 || !integral || fl > BIG)
                return fail(c, ty == TY_INTEGER ? "multipleOf must be positive and whole"
                                                : "multipleOf must be positive with at most 6 decimals");
            n->mult = fl;
        }
    }
    int32_t mb = number_min_extra(n, 0, 0, 0, -1, 2);
    if (mb < 0) return fail(c, ty == TY_INTEGER ? "no integer satisfies its bounds and multipleOf"
                                                : "no number satisfies its bounds and multipleOf");
    n->min_bytes = (uint32_t)mb;
    return 0;
}

/* ---- the pattern subset (regex.py) */

typedef struct {
    uint32_t cp[512];
    size_t n;
} ng_cps;

static int decode_string(const char *t, size_t i, ng_cps *out)   /* the JSON string at t[i] */
{
    out->n = 0;
    size_t e = jv_end(t, i) - 1u;
    for (i++; i < e;) {
        uint32_t cp;
        uint8_t b = (uint8_t)t[i];
        if (b == '\\') {
            char x = t[i + 1];
            if (x == 'u') {
                cp = 0;
                for (int k = 0; k < 4; k++) {
                    char h = t[i + 2 + k];
                    cp = cp * 16u + (uint32_t)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                i += 6;
                if (cp >= 0xD800u && cp <= 0xDBFFu && t[i] == '\\' && t[i + 1] == 'u') {
                    uint32_t lo = 0;
                    for (int k = 0; k < 4; k++) {
                        char h = t[i + 2 + k];
                        lo = lo * 16u + (uint32_t)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                    }
                    if (lo >= 0xDC00u && lo <= 0xDFFFu) { cp = 0x10000u + ((cp - 0xD800u) << 10) + (lo - 0xDC00u); i += 6; }
                }
            } else {
                cp = x == 'n' ? 10u : x == 't' ? 9u : x == 'r' ? 13u : x == 'b' ? 8u : x == 'f' ? 12u : (uint8_t)x;
                i += 2;
            }
        } else if (b < 0x80u) { cp = b; i++; }
        else {
            int need = b >= 0xF0u ? 3 : b >= 0xE0u ? 2 : 1;
            cp = b & (need == 3 ? 0x07u : need == 2 ? 0x0Fu : 0x1Fu);
            for (int k = 1; k <= need; k++) cp = cp << 6 | ((uint8_t)t[i + k] & 0x3Fu);
            i += (size_t)need + 1u;
        }
        if (out->n >= sizeof out->cp / sizeof out->cp[0]) return -1;
        out->cp[out->n++] = cp;
    }
    return 0;
}

typedef struct {
    ng_comp *c;
    const ng_cps *p;
    const char *text;      /* the pattern as written, for the message */
    size_t text_n;
} ng_pat;

static int pat_fail(ng_pat *p, const char *msg)
{
    ng_comp *c = p->c;
    fail(c, "pattern '");
    err_str(&c->e, p->text, p->text_n);
    err_s(&c->e, "': ");
    err_s(&c->e, msg);
    return -1;
}

typedef struct { uint32_t r[64][2]; uint32_t n; } ng_set;

static int set_add(ng_set *s, uint32_t lo, uint32_t hi)
{
    if (s->n >= 64) return -1;
    s->r[s->n][0] = lo; s->r[s->n][1] = hi; s->n++;
    return 0;
}

static int set_add_class(ng_set *s, char which)
{
    static const uint32_t digit[][2] = { {0x30, 0x39} };
    static const uint32_t word[][2] = { {0x30, 0x39}, {0x41, 0x5A}, {0x5F, 0x5F}, {0x61, 0x7A} };
    static const uint32_t space[][2] = { {0x09, 0x0D}, {0x20, 0x20} };
    const uint32_t (*r)[2] = which == 'd' ? digit : which == 'w' ? word : space;
    uint32_t n = which == 'd' ? 1 : which == 'w' ? 4 : 2;
    for (uint32_t i = 0; i < n; i++) if (set_add(s, r[i][0], r[i][1])) return -1;
    return 0;
}

/* Escape at cps[j] == '\\': a class letter into *s (returns 1), or one code point in *cp (0); -1 after an error. */
static int pat_escape(ng_pat *p, size_t j, size_t end, ng_set *s, uint32_t *cp)
{
    if (j + 1 >= end) return pat_fail(p, "ends with a lone backslash");
    uint32_t x = p->p->cp[j + 1];
    if (x == 'd' || x == 'w' || x == 's') return set_add_class(s, (char)x) ? pat_fail(p, "too many class ranges") : 1;
    if (x == 'n' || x == 't' || x == 'r' || x == 'f' || x == 'v') {
        *cp = x == 'n' ? 10u : x == 't' ? 9u : x == 'r' ? 13u : x == 'f' ? 12u : 11u;
        return 0;
    }
    if (x == 'D' || x == 'W' || x == 'S') {
        char m[80] = "\\X is not supported (write a negated class of ASCII characters)";
        m[1] = (char)x;
        return pat_fail(p, m);
    }
    if ((x >= '0' && x <= '9') || (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z') || x == '_') {
        char m[48] = "the escape \\X is not supported";
        m[12] = (char)x;
        return pat_fail(p, m);
    }
    *cp = x;
    return 0;
}

static void set_normalise(ng_set *s)
{
    for (uint32_t i = 1; i < s->n; i++)        /* insertion sort by (lo, hi) */
        for (uint32_t j = i; j > 0 && (s->r[j - 1][0] > s->r[j][0] ||
                                     (s->r[j - 1][0] == s->r[j][0] && s->r[j - 1][1] > s->r[j][1])); j--) {
            uint32_t a = s->r[j][0], b = s->r[j][1];
            s->r[j][0] = s->r[j - 1][0]; s->r[j][1] = s->r[j - 1][1];
            s->r[j - 1][0] = a; s->r[j - 1][1] = b;
        }
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (n && s->r[i][0] <= s->r[n - 1][1] + 1u) {
            if (s->r[i][1] > s->r[n - 1][1]) s->r[n - 1][1] = s->r[i][1];
        } else {
            s->r[n][0] = s->r[i][0]; s->r[n][1] = s->r[i][1]; n++;
        }
    }
    s->n = n;
}

typedef struct { uint8_t kind, negate; ng_set set; } ng_atom_items;

static int pat_emit(ng_pat *p, needle_gnode *n, uint8_t kind, uint8_t negate, const ng_set *s, uint32_t count)
{
    ng_store *g = p->c->g;
    if (!count) return 0;
    if (g->n_range + s->n > NEEDLE_GRAMMAR_MAX_RANGES)
        return pat_fail(p, "the grammar's pattern tables are full (NEEDLE_GRAMMAR_MAX_RANGES)");
    uint16_t r0 = (uint16_t)g->n_range;
    for (uint32_t i = 0; i < s->n; i++) { g->range[g->n_range][0] = s->r[i][0]; g->range[g->n_range][1] = s->r[i][1]; g->n_range++; }
    for (uint32_t k = 0; k < count; k++) {
        if (n->n_item >= NEEDLE_GRAMMAR_PATTERN_ITEMS + 1u) return 1;   /* too long: reported below */
        if (g->n_item >= NEEDLE_GRAMMAR_MAX_ITEMS)
            return pat_fail(p, "the grammar's pattern tables are full (NEEDLE_GRAMMAR_MAX_ITEMS)");
        needle_gitem *it = &g->item[g->n_item++];
        it->kind = kind; it->negate = negate; it->range0 = r0; it->n_range = (uint16_t)s->n;
        n->n_item++;
    }
    return 0;
}

static int compile_pattern(ng_comp *c, size_t v, needle_gnode *n)
{
    static ng_cps cps;
    ng_store *g = c->g;
    const char *t = T(c);
    ng_pat p = { c, &cps, t + v + 1, jv_end(t, v) - v - 2 };
    if (decode_string(t, v, &cps)) return pat_fail(&p, "longer than 512 characters");
    for (size_t i = 0; i < cps.n; i++)
        if (cps.cp[i] >= 0xD800u && cps.cp[i] <= 0xDFFFu) return pat_fail(&p, "contains a lone surrogate");
    size_t i = 0, end = cps.n;
    int anchored_start = end > 0 && cps.cp[0] == '^';
    if (anchored_start) i = 1;
    int anchored_end = 0;
    if (end > i && cps.cp[end - 1] == '$') {
        size_t back = 0;
        for (size_t k = end - 1; k > i && cps.cp[k - 1] == '\\'; k--) back++;
        if (back % 2 == 0) { anchored_end = 1; end--; }
    }
    n->item0 = (uint16_t)g->n_item;
    n->n_item = 0;
    static ng_set any;      /* empty: in RAM, not 512 bytes of zeros in flash */
    any.n = 0;
    if (!anchored_start && pat_emit(&p, n, NG_P_STAR, 1, &any, 1) < 0) return -1;
    int too_long = 0;
    while (i < end) {
        uint32_t ch = cps.cp[i];
        if (ch == '(' || ch == ')' || ch == '|') return pat_fail(&p, "groups and alternation are not supported");
        if (ch == '^' || ch == '$') return pat_fail(&p, "^ and $ are supported only at the ends");
        if (ch == '*' || ch == '+' || ch == '?') {
            char m[32] = "nothing to repeat before X";
            m[25] = (char)ch;
            return pat_fail(&p, m);
        }
        if (ch == '{') return pat_fail(&p, "a literal { must be escaped (\\{)");
        static ng_set set;
        set.n = 0;
        uint8_t negate = 0;
        if (ch == '.') { negate = 1; set_add(&set, 10, 10); i++; }
        else if (ch == '[') {
            size_t j = i + 1;
            int first = 1;
            if (j < end && cps.cp[j] == '^') { negate = 1; j++; }
            for (;;) {
                if (j >= end) return pat_fail(&p, "unterminated [ class");
                if (cps.cp[j] == ']' && !first) { j++; break; }
                first = 0;
                uint32_t lo;
                if (cps.cp[j] == '\\') {
                    int r = pat_escape(&p, j, end, &set, &lo);
                    if (r < 0) return -1;
                    j += 2;
                    if (r == 1) continue;
                } else lo = cps.cp[j++];
                if (j + 1 < end && cps.cp[j] == '-' && cps.cp[j + 1] != ']') {
                    uint32_t hi;
                    if (cps.cp[j + 1] == '\\') {
                        static ng_set tmp;
                        tmp.n = 0;
                        int r = pat_escape(&p, j + 1, end, &tmp, &hi);
                        if (r < 0) return -1;
                        if (r == 1) return pat_fail(&p, "a class range must end in a single character");
                        j += 3;
                    } else { hi = cps.cp[j + 1]; j += 2; }
                    if (hi < lo) return pat_fail(&p, "a class range is backwards");
                    if (set_add(&set, lo, hi)) return pat_fail(&p, "too many class ranges");
                } else if (set_add(&set, lo, lo)) return pat_fail(&p, "too many class ranges");
            }
            i = j;
            set_normalise(&set);
            if (negate) {
                needle_gitem probe = { 0, 1, 0, (uint16_t)set.n };
                /* a negated class that covers every code point */
                uint32_t cc = 0; int hit = 0;
                for (uint32_t k = 0; k < set.n && !hit; k++) {
                    if (set.r[k][1] < cc) continue;
                    if (set.r[k][0] > cc) hit = 1; else cc = set.r[k][1] + 1u;
                }
                (void)probe;
                if (!hit && cc > MAX_CP) return pat_fail(&p, "a class matches no character");
            }
        } else if (ch == '\\') {
            uint32_t one;
            int r = pat_escape(&p, i, end, &set, &one);
            if (r < 0) return -1;
            if (r == 0) set_add(&set, one, one);
            set_normalise(&set);
            i += 2;
        } else { set_add(&set, ch, ch); i++; }
        /* quantifier */
        int32_t lo_rep = 1, hi_rep = 1;
        if (i < end && (cps.cp[i] == '?' || cps.cp[i] == '*' || cps.cp[i] == '+' || cps.cp[i] == '{')) {
            uint32_t q = cps.cp[i];
            if (q == '?') { lo_rep = 0; hi_rep = 1; i++; }
            else if (q == '*') { lo_rep = 0; hi_rep = -1; i++; }
            else if (q == '+') { lo_rep = 1; hi_rep = -1; i++; }
            else {
                size_t j = i + 1, nd = 0;
                int32_t v1 = 0;
                for (; j < end && cps.cp[j] >= '0' && cps.cp[j] <= '9'; j++, nd++) if (nd < 6) v1 = v1 * 10 + (int32_t)(cps.cp[j] - '0');
                if (!nd) return pat_fail(&p, "a literal { must be escaped (\\{)");
                lo_rep = hi_rep = v1;
                if (j < end && cps.cp[j] == ',') {
                    int32_t v2 = 0; size_t nd2 = 0;
                    for (j++; j < end && cps.cp[j] >= '0' && cps.cp[j] <= '9'; j++, nd2++) if (nd2 < 6) v2 = v2 * 10 + (int32_t)(cps.cp[j] - '0');
                    hi_rep = nd2 ? v2 : -1;
                }
                if (j >= end || cps.cp[j] != '}') return pat_fail(&p, "unterminated {m,n} quantifier");
                i = j + 1;
                if (lo_rep > MAX_REPEAT || hi_rep > MAX_REPEAT) return pat_fail(&p, "repeat counts above 32 are not supported");
                if (hi_rep >= 0 && hi_rep < lo_rep) return pat_fail(&p, "{m,n} with n < m");
            }
            if (i < end && cps.cp[i] == '?') i++;
            if (i < end && (cps.cp[i] == '*' || cps.cp[i] == '+' || cps.cp[i] == '?' || cps.cp[i] == '{'))
                return pat_fail(&p, "a quantifier cannot follow a quantifier");
        }
        int r = pat_emit(&p, n, NG_P_ONE, negate, &set, (uint32_t)lo_rep);
        if (r < 0) return -1;
        if (!r) r = hi_rep < 0 ? pat_emit(&p, n, NG_P_STAR, negate, &set, 1)
                               : pat_emit(&p, n, NG_P_OPT, negate, &set, (uint32_t)(hi_rep - lo_rep));
        if (r < 0) return -1;
        if (r > 0 || n->n_item > NEEDLE_GRAMMAR_PATTERN_ITEMS) { too_long = 1; break; }
    }
    if (!too_long && !anchored_end && pat_emit(&p, n, NG_P_STAR, 1, &any, 1) < 0) return -1;
    if (too_long || n->n_item > NEEDLE_GRAMMAR_PATTERN_ITEMS)
        return pat_fail(&p, "expands to more than 63 items (repeat counts add up)");
    /* bytes of the cheapest completion from each position */
    if (g->n_rest + n->n_item + 1u > sizeof g->rest / sizeof g->rest[0])
        return pat_fail(&p, "the grammar's pattern tables are full (NEEDLE_GRAMMAR_MAX_ITEMS)");
    n->rest0 = (uint16_t)g->n_rest;
    g->n_rest += n->n_item + 1u;
    g->rest[n->rest0 + n->n_item] = 0;
    for (int k = (int)n->n_item - 1; k >= 0; k--) {
        const needle_gitem *it = &g->item[n->item0 + (uint32_t)k];
        g->rest[n->rest0 + (uint32_t)k] = g->rest[n->rest0 + (uint32_t)k + 1u] + (it->kind == NG_P_ONE ? item_min_bytes(&c->v, it) : 0u);
    }
    n->min_bytes = 2u + g->rest[n->rest0];
    return 0;
}

static int compile_string(ng_comp *c, size_t s, needle_gnode *n)
{
    int32_t mn = count_kw(c, s, "\"minLength\"", "minLength");
    if (mn == -2) return -1;
    int32_t mx = count_kw(c, s, "\"maxLength\"", "maxLength");
    if (mx == -2) return -1;
    n->min_len = mn < 0 ? 0 : mn;
    n->max_len = mx;
    if (n->max_len >= 0 && n->max_len < n->min_len) return fail(c, "maxLength is below minLength");
    const char *t = T(c);
    size_t pat = jv_get(t, s, "\"pattern\"");
    if (pat != NONE) {
        if (t[pat] != '"') return fail(c, "pattern must be a string");
        if (n->min_len > 0 || n->max_len >= 0)
            return fail(c, "pattern cannot be combined with minLength/maxLength (write the length into the "
                           "pattern, e.g. ^[a-z]{2,8}$)");
        if (compile_pattern(c, pat, n)) return -1;
        /* a pattern of no items (^$, ^a{0}$) matches only the empty string, not "any string"
         * (n_item 0 means no pattern): say so with maxLength 0 (schema.py does the same) */
        if (n->n_item == 0) n->max_len = 0;
        return 0;
    }
    n->min_bytes = 2u + (uint32_t)n->min_len;
    size_t sp = jv_get(t, s, SPAN_KEY);
    if (sp != NONE && jv_is(t, sp, "true")) {
        if (n->max_len == 0)
            return fail(c, "\"x-needle-span\" needs maxLength of at least 1 (maxLength 0 admits only \"\")");
        n->unique = 1;
    }
    return 0;
}

/* ---- nested schemas: an explicit task stack instead of recursion (the stack check in
 * generator/build/elfcheck.py refuses recursion).  Tasks run in the order schema.py's
 * recursive calls do, so nodes, refs and the first error are the same. */

enum { TASK_SCHEMA, TASK_ARRAY_DONE, TASK_OBJECT_NEXT };

typedef struct {
    uint8_t op;
    int8_t force_ty;
    uint8_t suffix;        /* TASK_SCHEMA: 0 none, 1 ": items", 2 ": property KEY" */
    uint32_t depth;
    uint32_t node;         /* ARRAY_DONE, OBJECT_NEXT: the node */
    uint32_t k;            /* OBJECT_NEXT: the next property */
    size_t s;              /* the schema (TASK_SCHEMA), the properties object (OBJECT_NEXT) */
    size_t key;            /* suffix 2: the key */
    size_t where_n;        /* the location's length before this task's suffix */
    uint16_t *dest;        /* TASK_SCHEMA: where the node index goes */
} ng_task;

#define MAX_TASKS (2u * NEEDLE_GRAMMAR_MAX_DEPTH + 4u)

typedef struct {
    ng_task t[MAX_TASKS];
    uint32_t n;
} ng_tasks;

static ng_task *task_push(ng_tasks *q, uint8_t op)
{
    ng_task *t = &q->t[q->n++];   /* depth <= NEEDLE_GRAMMAR_MAX_DEPTH keeps n < MAX_TASKS */
    memset(t, 0, sizeof *t);
    t->op = op;
    return t;
}

/* An array: its own keywords, then (tasks) its items' schema and array_done. */
static int compile_array(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, uint16_t *dest)
{
    const char *t = T(c);
    ng_store *g = c->g;
    size_t items = jv_get(t, s, "\"items\"");
    if (items == NONE) return fail(c, "an array needs items (one schema)");
    int32_t mn = count_kw(c, s, "\"minItems\"", "minItems");
    if (mn == -2) return -1;
    int32_t mx = count_kw(c, s, "\"maxItems\"", "maxItems");
    if (mx == -2) return -1;
    if (mx >= 0 && mx < (mn < 0 ? 0 : mn)) return fail(c, "maxItems is below minItems");
    int unique = 0;
    size_t u = jv_get(t, s, "\"uniqueItems\"");
    if (u != NONE) {
        if (!jv_is(t, u, "true") && !jv_is(t, u, "false")) return fail(c, "uniqueItems must be true or false");
        unique = t[u] == 't';
    }
    uint32_t idx;
    if (add_node(c, NG_ARR, &idx)) return -1;
    *dest = (uint16_t)idx;
    g->node[idx].min_len = mn < 0 ? 0 : mn;
    g->node[idx].max_len = mx;
    g->node[idx].unique = (uint8_t)unique;
    ng_task *done = task_push(q, TASK_ARRAY_DONE);
    done->node = idx;
    done->where_n = c->where_n;
    ng_task *item = task_push(q, TASK_SCHEMA);
    item->s = items;
    item->depth = depth + 1u;
    item->force_ty = TY_NONE;
    item->suffix = 1;
    item->where_n = c->where_n;
    item->dest = &g->node[idx].child;
    return 0;
}

static uint32_t unique_item(const needle_grammar *g, const needle_gnode *child, uint64_t used, uint32_t j);

static int array_done(ng_comp *c, uint32_t idx)
{
    ng_store *g = c->g;
    needle_gnode *n = &g->node[idx];
    const needle_gnode *ch = &g->node[n->child];
    if (n->unique) {
        if (ch->kind != NG_LIT)
            return fail(c, "uniqueItems is supported for arrays of enum, const or boolean items only");
        if ((uint32_t)n->min_len > ch->n_ref) {
            fail(c, "minItems ");
            err_u(&c->e, (uint64_t)n->min_len);
            err_s(&c->e, " exceeds the ");
            err_u(&c->e, ch->n_ref);
            err_s(&c->e, " distinct values of its items");
            return -1;
        }
    }
    uint64_t mb = 2u + (n->min_len > 1 ? (uint64_t)n->min_len - 1u : 0u);
    if (n->unique) {   /* distinct values: the min_len shortest alternatives */
        for (uint32_t j = 0; j < (uint32_t)n->min_len; j++) mb += unique_item(&c->v, ch, 0, j);
    } else {
        mb += (uint64_t)n->min_len * ch->min_bytes;
    }
    n->min_bytes = mb > MB_CAP ? MB_CAP : (uint32_t)mb;
    return 0;
}

/* An object: its own keywords and keys, then (tasks) each property's schema in turn. */
static int compile_object(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, uint16_t *dest)
{
    const char *t = T(c);
    ng_store *g = c->g;
    size_t props = jv_get(t, s, "\"properties\"");
    size_t extra = jv_get(t, s, "\"additionalProperties\"");
    if (extra != NONE && !jv_is(t, extra, "false"))
        return fail(c, "additionalProperties may only be false (no unknown keys are ever generated)");
    uint32_t idx;
    if (add_node(c, NG_OBJ, &idx)) return -1;
    *dest = (uint16_t)idx;
    uint32_t nprops = 0;
    size_t key, val;
    if (props != NONE) {
        if (t[props] != '{') return fail(c, "properties must be an object");
        while (jv_member(t, props, nprops, &key, &val)) nprops++;
        if (nprops > NEEDLE_GRAMMAR_MAX_PROPS) {
            c->e.n = 0;
            err_str(&c->e, c->where, c->where_n);
            err_s(&c->e, ": ");
            err_u(&c->e, nprops);
            err_s(&c->e, " properties, the grammar takes 32");
            return -1;
        }
        g->node[idx].ref0 = g->node[idx].sub0 = (uint16_t)g->n_ref;
        g->node[idx].n_ref = (uint16_t)nprops;
        for (uint32_t k = 0; k < nprops; k++) {   /* the keys' refs first, the subs beside them */
            jv_member(t, props, k, &key, &val);
            if (add_ref(c, key, jv_end(t, key) - key)) return -1;
        }
    }
    ng_task *next = task_push(q, TASK_OBJECT_NEXT);
    next->node = idx;
    next->k = 0;
    next->s = s;
    next->depth = depth;
    next->where_n = c->where_n;
    return 0;
}

/* The object's next property (a task), or, after the last, its required list. */
static int object_next(ng_comp *c, ng_tasks *q, const ng_task *task)
{
    const char *t = T(c);
    ng_store *g = c->g;
    needle_gnode *n = &g->node[task->node];
    size_t props = jv_get(t, task->s, "\"properties\""), key, val;
    if (task->k < n->n_ref) {
        ng_task *next = task_push(q, TASK_OBJECT_NEXT);
        *next = *task;
        next->k++;
        jv_member(t, props, task->k, &key, &val);
        ng_task *sub = task_push(q, TASK_SCHEMA);
        sub->s = val;
        sub->depth = task->depth + 1u;
        sub->force_ty = TY_NONE;
        sub->suffix = 2;
        sub->key = key;
        sub->where_n = task->where_n;
        sub->dest = &g->sub[n->sub0 + task->k];
        return 0;
    }
    size_t req = jv_get(t, task->s, "\"required\"");
    if (req != NONE) {
        size_t v;
        if (t[req] != '[') return fail(c, "required must be an array of strings");
        for (uint32_t k = 0; jv_item(t, req, k, &v); k++)
            if (t[v] != '"') return fail(c, "required must be an array of strings");
        for (uint32_t k = 0; jv_item(t, req, k, &v); k++) {
            uint32_t m = 0, found = 0;
            for (; m < n->n_ref; m++) {
                const needle_gref *r = &g->ref[n->ref0 + m];
                if (jv_end(t, v) - v == r->len && !memcmp(t + v, t + r->off, r->len)) { found = 1; break; }
            }
            if (!found) {
                fail(c, "required names ");
                err_str(&c->e, t + v, jv_end(t, v) - v);
                err_s(&c->e, ", which is not in properties");
                return -1;
            }
            n->required |= 1u << m;
        }
    }
    uint32_t total = 2, cnt = 0;
    for (uint32_t k = 0; k < n->n_ref; k++)
        if (n->required >> k & 1u) { total += g->ref[n->ref0 + k].len + 1u + g->node[g->sub[n->sub0 + k]].min_bytes; cnt++; }
    total += cnt ? cnt - 1u : 0u;
    n->min_bytes = total > MB_CAP ? MB_CAP : total;
    return 0;
}

static int schema_one(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, int force_ty, uint16_t *dest);

/* Compile the schema at s and everything nested in it; its node index into *dest. */
static int compile_schema(ng_comp *c, size_t s, uint32_t depth, int force_ty, uint16_t *dest)
{
    static ng_tasks q;
    q.n = 0;
    ng_task *first = task_push(&q, TASK_SCHEMA);
    first->s = s;
    first->depth = depth;
    first->force_ty = (int8_t)force_ty;
    first->where_n = c->where_n;
    first->dest = dest;
    while (q.n) {
        ng_task task = q.t[--q.n];
        c->where_n = task.where_n;
        if (task.op == TASK_SCHEMA) {
            size_t ignored;
            if (task.suffix == 1) where_push(c, ": items", 7, &ignored);
            if (task.suffix == 2) {
                where_push(c, ": property ", 11, &ignored);
                where_push(c, T(c) + task.key, jv_end(T(c), task.key) - task.key, &ignored);
            }
            if (schema_one(c, &q, task.s, task.depth, task.force_ty, task.dest)) return -1;
        } else if (task.op == TASK_ARRAY_DONE) {
            if (array_done(c, task.node)) return -1;
        } else if (object_next(c, &q, &task)) return -1;
    }
    return 0;
}

/* The schema at s: a leaf's node into *dest, or an array's or object's node with tasks
 * for what is nested.  force_ty >= 0: read as if its "type" were that (the arguments of a
 * tool whose parameters omit it). */
static int schema_one(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, int force_ty, uint16_t *dest)
{
    ng_store *g = c->g;
    const char *t = T(c);
    if (depth > NEEDLE_GRAMMAR_MAX_DEPTH) return fail(c, "nested deeper than the grammar's 13 levels of arguments");
    if (t[s] != '{') return fail(c, "a schema must be a JSON object");
    size_t typ = jv_get(t, s, "\"type\""), en = jv_get(t, s, "\"enum\""), co = jv_get(t, s, "\"const\"");
    int ty = typ == NONE ? force_ty : TY_NONE;
    if (typ != NONE) {
        for (int k = 0; k < 7; k++) if (jv_is(t, typ, TYPE_NAMES[k])) ty = k;
        if (ty == TY_NONE)
            return fail(c, "type must be one of string, integer, number, boolean, null, array, object "
                           "(type lists are not supported)");
    }
    size_t sp = jv_get(t, s, SPAN_KEY);
    if (sp != NONE) {
        if (!jv_is(t, sp, "true") && !jv_is(t, sp, "false")) return fail(c, "\"x-needle-span\" must be true or false");
        if (jv_is(t, sp, "true")) {
            static const char *const never[3] = { "\"enum\"", "\"const\"", "\"pattern\"" };
            if (ty != TY_STRING)
                return fail(c, "\"x-needle-span\" needs type string (it copies a span of the query into a string)");
            for (int k = 0; k < 3; k++) {
                if (jv_get(t, s, never[k]) == NONE) continue;
                fail(c, "\"x-needle-span\" cannot be combined with ");
                err_s(&c->e, never[k]);
                err_s(&c->e, " (a span is any text of the query): drop one of them");
                return -1;
            }
        }
    }
    size_t key, val;
    for (uint32_t k = 0; jv_member(t, s, k, &key, &val); k++) {
        if (keyword_allowed(t, key, ty)) continue;
        size_t kl = jv_end(t, key) - key;
        fail(c, "unsupported keyword ");
        err_str(&c->e, t + key, kl);
        if (ty != TY_NONE) {
            err_s(&c->e, " for type ");
            err_str(&c->e, TYPE_NAMES[ty] + 1, strlen(TYPE_NAMES[ty]) - 2);
        }
        err_s(&c->e, " (supported: ");
        if (ty == TY_NONE) {
            err_s(&c->e, SUPPORTED_ANY);
            err_s(&c->e, "; per type: docs/grammar.md");
        } else if (SUPPORTED_FOR[ty][0]) {
            err_s(&c->e, SUPPORTED_FOR[ty]);
            err_s(&c->e, "; type, enum, const, annotations");
        } else {
            err_s(&c->e, SUPPORTED_ANY);
        }
        err_s(&c->e, ")");
        return -1;
    }
    if (en != NONE || co != NONE) {
        if (en != NONE && co != NONE) return fail(c, "give enum or const, not both");
        /* the values are the whole set: a keyword that narrows it is refused */
        for (uint32_t k = 0; ty != TY_NONE && jv_member(t, s, k, &key, &val); k++) {
            if (keyword_allowed(t, key, TY_NONE)) continue;
            fail(c, en != NONE ? "enum" : "const");
            err_s(&c->e, " cannot be combined with ");
            err_str(&c->e, t + key, jv_end(t, key) - key);
            err_s(&c->e, " (list only the values it allows)");
            return -1;
        }
        uint32_t idx, nalt = 0, nkept = 0;
        size_t v = 0;
        if (en != NONE) {
            if (t[en] != '[' || t[en + 1] == ']') return fail(c, "enum must be a non-empty array");
            while (jv_item(t, en, nalt, &v)) nalt++;
            if (nalt > NEEDLE_GRAMMAR_MAX_ALTS) {
                c->e.n = 0;
                err_str(&c->e, c->where, c->where_n);
                err_s(&c->e, ": enum has ");
                err_u(&c->e, nalt);
                err_s(&c->e, " values, the grammar takes 64");
                return -1;
            }
            for (uint32_t a = 0; a < nalt; a++)     /* equal as JSON values (1, 1.0, 1e0; 0 and -0) */
                for (uint32_t b = 0; b < a; b++) {
                    size_t va = 0, vb = 0;
                    jv_item(t, en, a, &va);
                    jv_item(t, en, b, &vb);
                    if (!json_equal(t, va, vb)) continue;
                    fail(c, "enum repeats a value (");
                    err_str(&c->e, t + vb, jv_end(t, vb) - vb);
                    err_s(&c->e, " and ");
                    err_str(&c->e, t + va, jv_end(t, va) - va);
                    err_s(&c->e, " are equal JSON values)");
                    return -1;
                }
        } else nalt = 1;
        for (uint32_t a = 0; a < nalt; a++) {
            if (en != NONE) jv_item(t, en, a, &v); else v = co;
            if (t[v] == '{' || t[v] == '[')
                return fail(c, "enum and const values must be strings, numbers, booleans or null");
            if (of_type(t, v, ty)) nkept++;
        }
        if (nkept == 0) {       /* a value must also be of the type (jsonschema checks both) */
            fail(c, en != NONE ? "no enum" : "no const");
            err_s(&c->e, " value is of type ");
            err_str(&c->e, TYPE_NAMES[ty] + 1, strlen(TYPE_NAMES[ty]) - 2);
            return -1;
        }
        if (add_node(c, NG_LIT, &idx)) return -1;
        needle_gnode *n = &g->node[idx];
        n->ref0 = (uint16_t)g->n_ref;
        n->n_ref = (uint16_t)nkept;
        n->min_bytes = INF;
        for (uint32_t a = 0; a < nalt; a++) {
            if (en != NONE) jv_item(t, en, a, &v); else v = co;
            if (!of_type(t, v, ty)) continue;
            size_t l = jv_end(t, v) - v;
            if (add_ref(c, v, l)) return -1;
            if (l < n->min_bytes) n->min_bytes = (uint32_t)l;
        }
        *dest = (uint16_t)idx;
        return 0;
    }
    if (ty == TY_NONE) return fail(c, "a schema needs a type (or enum/const)");
    if (ty == TY_BOOLEAN || ty == TY_NULL) {
        /* the words live in the grammar's text, after the tool list and its NUL (compile) */
        uint32_t idx;
        if (add_node(c, NG_LIT, &idx)) return -1;
        needle_gnode *n = &g->node[idx];
        n->ref0 = (uint16_t)g->n_ref;
        if (ty == TY_BOOLEAN) {
            n->n_ref = 2;
            if (add_ref(c, g->text_len + 1u, 4) || add_ref(c, g->text_len + 5u, 5)) return -1;
            n->min_bytes = 4;
        } else {
            n->n_ref = 1;
            if (add_ref(c, g->text_len + 10u, 4)) return -1;   /* "null" */
            n->min_bytes = 4;
        }
        *dest = (uint16_t)idx;
        return 0;
    }
    if (ty == TY_INTEGER || ty == TY_NUMBER || ty == TY_STRING) {
        uint32_t idx;
        needle_gnode tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.kind = ty == TY_INTEGER ? NG_INT : ty == TY_NUMBER ? NG_NUM : NG_STR;
        tmp.lo = -BIG; tmp.hi = BIG; tmp.mult = 1; tmp.max_len = -1;
        if (ty == TY_STRING ? compile_string(c, s, &tmp) : compile_number(c, s, ty, &tmp)) return -1;
        if (add_node(c, tmp.kind, &idx)) return -1;
        g->node[idx] = tmp;
        *dest = (uint16_t)idx;
        return 0;
    }
    if (ty == TY_ARRAY) return compile_array(c, q, s, depth, dest);
    return compile_object(c, q, s, depth, dest);
}

static int text_too_long(ng_comp *c)
{
    c->e.n = 0;
    err_s(&c->e, "the tool list is longer than the grammar's ");
    err_u(&c->e, NEEDLE_GRAMMAR_TEXT_MAX);
    err_s(&c->e, " bytes once minified (NEEDLE_GRAMMAR_TEXT_MAX)");
    return -1;
}

int needle_grammar_compile(needle_grammar *grammar, const char *tools_json, size_t len, int force_call,
                           char *err, size_t errcap)
{
    static char work[NEEDLE_GRAMMAR_TEXT_MAX + 96u];
    static ng_comp c;      /* static: frames stay small (the watches' stack guard is 1 KiB) */
    size_t v, ignored;
    needle_grammar *out = grammar;
    c.g = &store;
    memset(&store, 0, sizeof store);
    memset(&c.v, 0, sizeof c.v);
    c.v.text = store.text; c.v.node = store.node; c.v.ref = store.ref; c.v.sub = store.sub;
    c.v.item = store.item; c.v.range = (const uint32_t (*)[2])store.range; c.v.rest = store.rest;
    c.v.force_call = force_call;
    c.e.buf = err; c.e.cap = err ? errcap : 0; c.e.n = 0;
    c.where_n = c.tool_n = 0;
    if (c.e.cap) err[0] = 0;
    ng_store *g = &store;

    /* minify with the prompt's rules: render an empty query and keep the tools span */
    needle_prompt_untrusted u;
    int n = needle_render_prompt_thresholds(tools_json, len, "", NULL, work, sizeof work, err, errcap, &u,
                                            g->tool_ppm, NEEDLE_GRAMMAR_MAX_TOOLS);
    if (n == NEEDLE_PROMPT_E_SPACE || (n >= 0 && u.span[0].len > NEEDLE_GRAMMAR_TEXT_MAX)) return text_too_long(&c);
    if (n < 0) return -1;
    memcpy(g->text, work + u.span[0].start, u.span[0].len);
    g->text_len = u.span[0].len;
    /* the words of boolean and null nodes after the list's NUL: true at +1, false +5, null +10 */
    memcpy(g->text + g->text_len + 1u, "truefalsenull", 14);
    const char *t = g->text;

    uint32_t ntools = 0;
    while (jv_item(t, 0, ntools, &v)) ntools++;
    if (ntools == 0 && force_call) { err_s(&c.e, "--force-call needs at least one tool"); return -1; }
    if (ntools > NEEDLE_GRAMMAR_MAX_TOOLS) {
        err_u(&c.e, ntools);
        err_s(&c.e, " tools; the grammar takes 32 (retrieval picks five of more: not built yet)");
        return -1;
    }
    uint32_t calls, call;
    if (add_node(&c, NG_CALLS, &calls) || add_node(&c, NG_CALL, &call)) return -1;
    needle_gnode *cn = &g->node[call];
    g->node[calls].min_len = force_call ? 1 : 0;
    g->node[calls].child = (uint16_t)call;
    cn->ref0 = cn->sub0 = (uint16_t)g->n_ref;
    cn->n_ref = (uint16_t)ntools;
    for (uint32_t i = 0; i < ntools; i++) if (add_ref(&c, 0, 0)) return -1;   /* the names, below */
    for (uint32_t i = 0; i < ntools; i++) {
        jv_item(t, 0, i, &v);
        size_t name = t[v] == '{' ? jv_get(t, v, "\"name\"") : NONE;
        if (name == NONE || t[name] != '"' || t[name + 1] == '"') {
            err_s(&c.e, "tool ");
            err_u(&c.e, i + 1u);
            err_s(&c.e, ": needs a non-empty string \"name\"");
            return -1;
        }
        size_t nl = jv_end(t, name) - name;
        c.where_n = 0;
        where_push(&c, "tool ", 5, &ignored);
        where_push(&c, t + name, nl, &ignored);
        c.tool_n = c.where_n;
        for (uint32_t k = 0; k < i; k++) {
            const needle_gref *r = &g->ref[cn->ref0 + k];
            if (r->len == nl && !memcmp(t + r->off, t + name, nl))
                return fail(&c, "the name is used by an earlier tool (names must be unique)");
        }
        g->ref[cn->ref0 + i].off = (uint32_t)name;
        g->ref[cn->ref0 + i].len = (uint32_t)nl;
        size_t params = jv_get(t, v, "\"parameters\"");
        uint32_t args;
        if (params == NONE) {   /* no parameters: "arguments":{} */
            if (add_node(&c, NG_OBJ, &args)) return -1;
            g->node[args].min_bytes = 2;
        } else {
            size_t ty = t[params] == '{' ? jv_get(t, params, "\"type\"") : NONE;
            if (t[params] != '{' || (ty != NONE && !jv_is(t, ty, "\"object\"")))
                return fail(&c, "parameters must be an object schema with type \"object\"");
            if (compile_schema(&c, params, 3, TY_OBJECT, &g->sub[cn->sub0 + i])) return -1;
            continue;
        }
        g->sub[cn->sub0 + i] = (uint16_t)args;
    }
    uint32_t best = INF;
    for (uint32_t i = 0; i < ntools; i++) {
        uint32_t m = g->ref[cn->ref0 + i].len + g->node[g->sub[cn->sub0 + i]].min_bytes;
        uint32_t shortest = 2u + (uint32_t)(CALL_HEAD_LEN + CALL_MID_LEN + 1u) + m;
        if (shortest > NEEDLE_CALL_MAX_JSON) {   /* a call that can never fit the envelope */
            err_s(&c.e, "tool ");
            err_str(&c.e, t + g->ref[cn->ref0 + i].off, g->ref[cn->ref0 + i].len);
            err_s(&c.e, ": its shortest call takes ");
            if (g->node[g->sub[cn->sub0 + i]].min_bytes >= MB_CAP) err_s(&c.e, "more than 32768");
            else err_u(&c.e, shortest);
            err_s(&c.e, " bytes but a call list holds 4096 (NEEDLE_CALL_MAX_JSON): relax its minLength, "
                        "minItems or required arguments");
            return -1;
        }
        if (m < best) best = m;
    }
    cn->min_bytes = (ntools ? best : 0u) + (uint32_t)(CALL_HEAD_LEN + CALL_MID_LEN + 1u);
    g->node[calls].min_bytes = 2u + (force_call ? cn->min_bytes : 0u);
    c.v.text_len = g->text_len;
    c.v.n_node = g->n_node; c.v.n_ref = g->n_ref; c.v.n_item = g->n_item;
    c.v.n_range = g->n_range; c.v.n_rest = g->n_rest;
    c.v.n_tools = ntools;
    c.v.tool_ppm = g->tool_ppm;
    *out = c.v;
    return 0;
}

uint32_t needle_grammar_list_min(const needle_grammar *g) { return g->node[0].min_bytes; }

static uint8_t span_query[NEEDLE_GRAMMAR_SPAN_MAX];   /* the query span strings copy from */

static int span_start(const uint8_t *q, uint32_t s);
static int span_end(const uint8_t *q, uint32_t len, uint32_t e);

/* 1: g has span strings for this switch and query; 0: none; -1: refused (err). */
static int span_check(const needle_grammar *g, const char *query, size_t len, int span_all, char *err,
                      size_t errcap)
{
    ng_err e = { err, err ? errcap : 0u, 0u };
    if (e.cap) err[0] = 0;
    int any = 0;
    uint32_t need_fail = 0;
    for (uint32_t i = 0; i < g->n_node; i++) {
        const needle_gnode *n = &g->node[i];
        if (n->kind == NG_STR && (n->unique || (span_all && !n->n_item && n->max_len != 0))) any = 1;
    }
    if (!query || !any) return 0;
    if (len > NEEDLE_GRAMMAR_SPAN_MAX) {
        err_s(&e, "the query is ");
        err_u(&e, len);
        err_s(&e, " bytes, more than the ");
        err_u(&e, NEEDLE_GRAMMAR_SPAN_MAX);
        err_s(&e, " span strings copy from (NEEDLE_GRAMMAR_SPAN_MAX): shorten it, or raise grammar.span_bytes "
                  "in the board file");
        return -1;
    }
    /* each minLength needs a span of exactly that many plain ASCII characters between words,
     * the shortest a span string then writes (the tables count one byte a character) */
    const uint8_t *q = (const uint8_t *)query;
    for (uint32_t i = 0; i < g->n_node; i++) {
        const needle_gnode *n = &g->node[i];
        if (n->kind != NG_STR || !(n->unique || (span_all && !n->n_item && n->max_len != 0))) continue;
        uint32_t m = (uint32_t)n->min_len;
        if (m == 0) continue;
        int found = 0;
        for (uint32_t s = 0; !found && s + m <= len; s++) {
            uint32_t j = 0;
            while (j < m && q[s + j] >= 0x20u && q[s + j] < 0x7Fu && q[s + j] != '"' && q[s + j] != '\\') j++;
            found = j == m && span_start(q, s) && span_end(q, (uint32_t)len, s + m);
        }
        if (found) continue;
        if (need_fail == 0 || m < need_fail) need_fail = m;
    }
    if (need_fail) {
        err_s(&e, "the query holds no span of exactly ");
        err_u(&e, need_fail);
        err_s(&e, " plain ASCII characters between words, which a span string's minLength ");
        err_u(&e, need_fail);
        err_s(&e, " needs: lower minLength, or turn the span off");
        return -1;
    }
    return 1;
}

int needle_grammar_check_query(const needle_grammar *g, const char *query, size_t len, int span_all, char *err,
                               size_t errcap)
{
    return span_check(g, query, len, span_all, err, errcap) < 0 ? -1 : 0;
}

int needle_grammar_set_query(needle_grammar *g, const char *query, size_t len, int span_all, char *err,
                             size_t errcap)
{
    int rc = span_check(g, query, len, span_all, err, errcap);
    if (rc < 0) return -1;
    if (rc == 0) { g->query = NULL; g->query_len = 0; g->span_all = 0; return 0; }
    memcpy(span_query, query, len);
    g->query = span_query;
    g->query_len = (uint32_t)len;
    g->span_all = span_all != 0;
    return 0;
}

size_t needle_grammar_ram_bytes(const needle_grammar *g)
{
#if NEEDLE_GRAMMAR_RUNTIME
    return g->text == store.text ? sizeof store : 0u;
#else
    (void)g;
    return 0u;      /* the built-in tables only: the store is not linked */
#endif
}

/* ================================================================ the matcher (grammar.py) */

#define TXT(g, r) ((const uint8_t *)(g)->text + (r).off)

static const needle_gnode *N(const needle_grammar *g, const needle_gframe *f) { return &g->node[f->node]; }

static void frame_init(const needle_grammar *g, needle_gframe *f, uint32_t idx, uint64_t used)
{
    const needle_gnode *n = &g->node[idx];
    memset(f, 0, sizeof *f);
    f->kind = n->kind;
    f->node = (uint16_t)idx;
    f->cur = -1;
    f->frac = -1;
    if (n->kind == NG_LIT) f->mask = (n->n_ref >= 64 ? ~0ull : (1ull << n->n_ref) - 1u) & ~used;
    else if (n->kind == NG_INT || n->kind == NG_NUM) f->neg = 2;
    else if (n->kind == NG_STR && n->n_item) f->set = nfa_closure(g, n, 1u);
}

void needle_grammar_start(const needle_grammar *g, needle_gstate *s)
{
    s->depth = 1;
    frame_init(g, &s->f[0], 0, 0);
}

/* Index of the alternative complete at pos among mask, or -1. */
static int lit_done(const needle_grammar *g, const needle_gnode *n, uint32_t pos, uint64_t mask)
{
    for (uint32_t i = 0; i < n->n_ref; i++)
        if ((mask >> i & 1u) && g->ref[n->ref0 + i].len == pos) return (int)i;
    return -1;
}

static uint64_t lit_step(const needle_grammar *g, const needle_gnode *n, uint32_t pos, uint64_t mask, uint8_t b)
{
    uint64_t out = 0;
    for (uint32_t i = 0; i < n->n_ref; i++) {
        const needle_gref r = g->ref[n->ref0 + i];
        if ((mask >> i & 1u) && r.len > pos && TXT(g, r)[pos] == b) out |= 1ull << i;
    }
    return out;
}

static int frame_complete(const needle_grammar *g, const needle_gframe *f)
{
    switch (f->kind) {
    case NG_CALLS: case NG_ARR: return f->phase == 4;
    case NG_CALL: return f->phase == 5;
    case NG_OBJ: return f->phase == 6;
    case NG_LIT: return lit_done(g, N(g, f), f->pos, f->mask) >= 0;
    case NG_INT: case NG_NUM:
        return f->neg != 2 && f->count >= 1 && f->frac != 0 &&
               number_min_extra(N(g, f), f->neg, f->p, (int)f->count, f->frac, f->neg) == 0;
    default: return f->phase == 2;
    }
}

static void child_done(const needle_grammar *g, needle_gframe *parent, const needle_gframe *child)
{
    if (parent->kind == NG_ARR && N(g, parent)->unique)
        parent->mask |= 1ull << lit_done(g, N(g, child), child->pos, child->mask);
    else if (parent->kind == NG_CALL) {
        parent->phase = 4;
        parent->pos = 0;
    }
}

/* ---- strings */

static int str_can_take(const needle_grammar *g, const needle_gframe *f, uint32_t lo, uint32_t hi)
{
    const needle_gnode *n = N(g, f);
    if (n->max_len >= 0 && f->count >= (uint32_t)n->max_len) return 0;
    return !n->n_item || nfa_can_take(g, n, f->set, lo, hi);
}

static int is_short_ctrl(uint32_t c) { return c == 8 || c == 9 || c == 10 || c == 12 || c == 13; }

static int ctrl_ok(const needle_grammar *g, const needle_gframe *f, uint32_t lo, uint32_t hi)
{
    for (uint32_t c = lo; c <= hi; c++)
        if (!is_short_ctrl(c) && str_can_take(g, f, c, c)) return 1;
    return 0;
}

static int str_char(const needle_grammar *g, needle_gframe *f, uint32_t cp)
{
    const needle_gnode *n = N(g, f);
    if (n->max_len >= 0 && f->count >= (uint32_t)n->max_len) return 0;
    uint64_t set = f->set;
    if (n->n_item) {
        set = nfa_step(g, n, set, cp);
        if (!set) return 0;
    }
    f->phase = 1; f->count++; f->esc = 0; f->need = 0; f->cp = 0; f->lo = 0; f->hi = 0; f->set = set;
    return 1;
}

static int hexval(uint8_t b) { return b >= '0' && b <= '9' ? b - '0' : b >= 'a' && b <= 'f' ? b - 'a' + 10 : -1; }

/* ---- span strings (docs/grammar.md §2a; grammar.py span_rest, _feed_span) */

static int is_span(const needle_grammar *g, const needle_gnode *n)
{
    return g->query && n->kind == NG_STR && (n->unique || (g->span_all && !n->n_item && n->max_len != 0));
}

static uint32_t utf8_len(uint8_t b) { return b < 0x80u ? 1u : b < 0xE0u ? 2u : b < 0xF0u ? 3u : 4u; }

/* A byte of a word: an ASCII letter or digit, or any byte of a non-ASCII character. */
static int is_word(uint8_t b)
{
    return b >= 0x80u || (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z');
}

/* May a span start at q[s] (s < len) / end before q[e] (e > 0): not inside a word. */
static int span_start(const uint8_t *q, uint32_t s) { return s == 0 || !is_word(q[s - 1u]) || !is_word(q[s]); }
static int span_end(const uint8_t *q, uint32_t len, uint32_t e)
{
    return e == len || !is_word(q[e - 1u]) || !is_word(q[e]);
}

/* Fewest bytes that finish span string frame f (phase 1) before its closing quote (0: the quote
 * may come now): the character in progress, then characters copied on from some place of the
 * query that holds the bytes so far and starts a word, up to minLength characters and the end
 * of a word, within maxLength (INF: none). */
static uint32_t span_rest(const needle_grammar *g, const needle_gframe *f)
{
    const needle_gnode *n = N(g, f);
    const uint8_t *q = g->query;
    uint32_t len = g->query_len, s0 = (uint32_t)f->set, k = (uint32_t)(f->set >> 32), pend = f->need;
    uint32_t chars = f->count + (pend ? 1u : 0u), best = INF, need = (uint32_t)n->min_len;
    for (uint32_t s = s0; s + k <= len; s++) {
        if ((k && !span_start(q, s)) || memcmp(q + s, q + s0, k)) continue;
        for (uint32_t j = s + k + pend, c = chars; j <= len;) {
            if (c >= need && (j == s || span_end(q, len, j))) {
                if (j - s - k < best) best = j - s - k;
                break;
            }
            if (j == len || q[j] < 0x20u || q[j] == '"' || q[j] == '\\' || (n->max_len >= 0 && c >= (uint32_t)n->max_len))
                break;
            j += utf8_len(q[j]);
            c++;
        }
    }
    return best;
}

static int feed_str_plain(const needle_grammar *g, needle_gframe *f, uint8_t b);

/* Inside a span string: what the plain string takes, if the query continues the bytes so far
 * with b at the start of a word or inside one, and the string can still be finished at the end
 * of a word from there; the quote where one ends.  No escapes. */
static int feed_span(const needle_grammar *g, needle_gframe *f, uint8_t b)
{
    if (b == '\\') return 0;
    needle_gframe t = *f;
    if (!feed_str_plain(g, &t, b)) return 0;
    if (b == '"') {
        if (span_rest(g, f) != 0) return 0;
        *f = t;
        return 1;
    }
    const uint8_t *q = g->query;
    uint32_t len = g->query_len, s0 = (uint32_t)f->set, k = (uint32_t)(f->set >> 32);
    for (uint32_t s = s0; s + k < len; s++) {
        if (q[s + k] != b || !span_start(q, s) || memcmp(q + s, q + s0, k)) continue;
        t.set = (uint64_t)s | (uint64_t)(k + 1u) << 32;
        if (span_rest(g, &t) == INF) return 0;
        *f = t;
        return 1;
    }
    return 0;
}

static int feed_str(const needle_grammar *g, needle_gframe *f, uint8_t b)
{
    if (f->phase == 1 && is_span(g, N(g, f))) return feed_span(g, f, b);
    return feed_str_plain(g, f, b);
}

static int feed_str_plain(const needle_grammar *g, needle_gframe *f, uint8_t b)
{
    const needle_gnode *n = N(g, f);
    if (f->phase == 0) { if (b != '"') return 0; f->phase = 1; return 1; }
    if (f->phase != 1) return 0;
    if (f->need) {                                   /* UTF-8 continuation */
        if (b < f->lo || b > f->hi) return 0;
        uint32_t cp = f->cp << 6 | (b & 0x3Fu);
        if (f->need == 1) return str_char(g, f, cp);
        uint32_t lo = cp << 6 * (f->need - 1), hi = lo | ((1u << 6 * (f->need - 1)) - 1u);
        if (!str_can_take(g, f, lo, hi)) return 0;
        f->need--; f->cp = cp; f->lo = 0x80; f->hi = 0xBF;
        return 1;
    }
    switch (f->esc) {
    case 1:
        if (b == 'u') { if (!ctrl_ok(g, f, 0, 0x1F)) return 0; f->esc = 2; return 1; }
        {
            uint32_t c = b == '"' ? 0x22u : b == '\\' ? 0x5Cu : b == 'b' ? 8u : b == 'f' ? 12u
                       : b == 'n' ? 10u : b == 'r' ? 13u : b == 't' ? 9u : 0xFFFFFFFFu;
            return c != 0xFFFFFFFFu && str_char(g, f, c);
        }
    case 2: case 3:
        if (b != '0') return 0;
        f->esc++;
        return 1;
    case 4:
        if (b != '0' && b != '1') return 0;
        if (!ctrl_ok(g, f, (uint32_t)(b - '0') << 4, ((uint32_t)(b - '0') << 4) + 15u)) return 0;
        f->esc = 5; f->need = 0; f->cp = (uint32_t)(b - '0') << 4;
        return 1;
    case 5: {
        int h = hexval(b);
        if (h < 0) return 0;
        uint32_t cp = f->cp | (uint32_t)h;
        if (is_short_ctrl(cp)) return 0;             /* canonical JSON writes \b \t \n \f \r */
        return str_char(g, f, cp);
    }
    default: break;
    }
    if (b == '"') {
        if (f->count < (uint32_t)n->min_len || (n->n_item && !(f->set >> n->n_item & 1u))) return 0;
        f->phase = 2;
        return 1;
    }
    if (b == '\\') {
        int ok = str_can_take(g, f, 0x22, 0x22) || str_can_take(g, f, 0x5C, 0x5C);
        for (uint32_t c = 8; !ok && c <= 13; c++) ok = is_short_ctrl(c) && str_can_take(g, f, c, c);
        if (!ok) ok = ctrl_ok(g, f, 0, 0x1F);
        if (!ok) return 0;
        f->esc = 1;
        return 1;
    }
    if (b < 0x20u) return 0;
    if (b < 0x80u) return str_char(g, f, b);
    uint8_t need, lo = 0x80, hi = 0xBF;
    uint32_t cp;
    if (b >= 0xC2u && b <= 0xDFu) { need = 1; cp = b & 0x1Fu; }
    else if (b >= 0xE0u && b <= 0xEFu) { need = 2; cp = b & 0x0Fu; if (b == 0xE0u) lo = 0xA0; if (b == 0xEDu) hi = 0x9F; }
    else if (b >= 0xF0u && b <= 0xF4u) { need = 3; cp = b & 0x07u; if (b == 0xF0u) lo = 0x90; if (b == 0xF4u) hi = 0x8F; }
    else return 0;
    uint32_t c_lo = cp << 6 * need, c_hi = c_lo | ((1u << 6 * need) - 1u);
    if (need == 1 && c_lo < 0x80u) c_lo = 0x80u;
    if (need == 2) { if (c_lo < 0x800u) c_lo = 0x800u; if (b == 0xEDu) c_hi = 0xD7FFu; }
    if (need == 3) { if (c_lo < 0x10000u) c_lo = 0x10000u; if (c_hi > MAX_CP) c_hi = MAX_CP; }
    if (!str_can_take(g, f, c_lo, c_hi)) return 0;
    f->need = need; f->cp = cp; f->lo = lo; f->hi = hi;
    return 1;
}

/* ---- numbers */

static int feed_num(const needle_grammar *g, needle_gframe *f, uint8_t b)
{
    const needle_gnode *n = N(g, f);
    const int is_num = n->kind == NG_NUM;
    needle_gframe nf = *f;
    if (b == '-') {
        if (f->neg != 2) return 0;
        nf.neg = 1;
    } else if (b >= '0' && b <= '9') {
        int d = b - '0';
        if (nf.neg == 2) nf.neg = 0;
        if (f->frac >= 0) {
            if (f->frac >= NUM_DECIMALS) return 0;
            nf.p = f->p * 10 + d;
            nf.frac++;
        } else {
            if (f->count >= 1 && f->p == 0) return 0;
            if (f->count >= (uint32_t)(is_num ? NUM_INT_DIGITS : INT_DIGITS)) return 0;
            nf.p = f->p * 10 + d;
            nf.count++;
        }
    } else if (b == '.' && is_num && f->frac < 0 && f->count >= 1 && f->neg != 2) {
        nf.frac = 0;
    } else return 0;
    if (number_min_extra(n, nf.neg, nf.p, (int)nf.count, nf.frac, nf.neg) < 0) return 0;
    *f = nf;
    return 1;
}

/* ---- one byte into the top frame (grammar.py _feed_top): 1 taken, 0 refused, 2 an array
 * item opened on top for b (the caller feeds it b) */

static int feed_top(const needle_grammar *g, needle_gstate *s, uint8_t b)
{
    needle_gframe *f = &s->f[s->depth - 1];
    const needle_gnode *n = N(g, f);
    switch (f->kind) {
    case NG_STR: return feed_str(g, f, b);
    case NG_INT: case NG_NUM: return feed_num(g, f, b);
    case NG_LIT: {
        uint64_t m = lit_step(g, n, f->pos, f->mask, b);
        if (!m) return 0;
        f->pos++; f->mask = m;
        return 1;
    }
    case NG_CALLS: case NG_ARR: {
        const needle_gnode *child = &g->node[n->child];
        if (f->phase == 0) { if (b != '[') return 0; f->phase = 1; return 1; }
        if ((f->phase == 1 || f->phase == 2) && b == ']' && f->count >= (uint32_t)n->min_len) { f->phase = 4; return 1; }
        if (f->phase == 2 && b == ',') {
            if (n->max_len >= 0 && f->count >= (uint32_t)n->max_len) return 0;
            if (n->unique && (uint32_t)__builtin_popcountll(f->mask) >= child->n_ref) return 0;
            f->phase = 3;
            return 1;
        }
        if (f->phase == 1 || f->phase == 3) {
            if (f->phase == 1 && n->max_len == 0) return 0;
            if (s->depth >= NEEDLE_GRAMMAR_MAX_DEPTH) return 0;
            f->phase = 2; f->count++;
            frame_init(g, &s->f[s->depth], n->child, n->unique ? f->mask : 0);
            s->depth++;
            return 2;   /* the caller feeds b to the new item (needle_grammar_feed) */
        }
        return 0;
    }
    case NG_CALL:
        if (f->phase == 0) {
            if ((uint8_t)CALL_HEAD[f->pos] != b) return 0;
            if (f->pos + 1u == CALL_HEAD_LEN) {
                f->phase = 1; f->pos = 0;
                f->mask = n->n_ref >= 64 ? ~0ull : (1ull << n->n_ref) - 1u;
            } else f->pos++;
            return 1;
        }
        if (f->phase == 1) {
            uint64_t m = lit_step(g, n, f->pos, f->mask, b);
            if (!m) return 0;
            int done = lit_done(g, n, f->pos + 1u, m);
            if (done >= 0) { f->phase = 2; f->pos = 0; f->cur = (int16_t)done; f->mask = 0; }
            else { f->pos++; f->mask = m; }
            return 1;
        }
        if (f->phase == 2) {
            if ((uint8_t)CALL_MID[f->pos] != b) return 0;
            if (f->pos + 1u < CALL_MID_LEN) { f->pos++; return 1; }
            f->phase = 3; f->pos = 0;
            frame_init(g, &s->f[s->depth], g->sub[n->sub0 + (uint32_t)f->cur], 0);
            s->depth++;
            return 1;
        }
        if (f->phase == 4 && b == '}') { f->phase = 5; return 1; }
        return 0;
    default: {                                        /* NG_OBJ */
        const uint32_t k = n->n_ref;
        const uint64_t all = k >= 64 ? ~0ull : (1ull << k) - 1u;
        if (f->phase == 0) { if (b != '{') return 0; f->phase = 1; return 1; }
        if ((f->phase == 1 || f->phase == 4) && b == '}') {
            if ((uint64_t)n->required & ~f->mask) return 0;
            f->phase = 6;
            return 1;
        }
        if (f->phase == 4 && b == ',') { if (!(all & ~f->mask)) return 0; f->phase = 5; return 1; }
        if ((f->phase == 1 || f->phase == 5) && b == '"') {
            uint64_t cand = all & ~f->mask;
            if (!cand) return 0;
            f->phase = 2; f->cur = -1; f->pos = 1; f->set = cand;
            return 1;
        }
        if (f->phase == 2) {
            uint64_t out = lit_step(g, n, f->pos, f->set, b);
            if (!out) return 0;
            int done = lit_done(g, n, f->pos + 1u, out);
            if (done >= 0) { f->phase = 3; f->mask |= 1ull << done; f->cur = (int16_t)done; f->pos = 0; f->set = 0; }
            else { f->pos++; f->set = out; }
            return 1;
        }
        if (f->phase == 3 && b == ':') {
            if (s->depth >= NEEDLE_GRAMMAR_MAX_DEPTH) return 0;
            f->phase = 4;
            frame_init(g, &s->f[s->depth], g->sub[n->sub0 + (uint32_t)f->cur], 0);
            s->depth++;
            return 1;
        }
        return 0;
    }
    }
}

int needle_grammar_feed(const needle_grammar *g, needle_gstate *s, uint8_t b)
{
    for (;;) {
        needle_gframe parent = s->f[s->depth - 1];
        int rc = feed_top(g, s, b);
        if (rc == 2) {                                /* an item opened: b is its first byte */
            if (feed_top(g, s, b) == 1) return 0;     /* (a first byte never opens a value) */
            s->depth--;
            s->f[s->depth - 1] = parent;
            return -1;
        }
        if (rc) return 0;
        if (s->depth == 1 || !frame_complete(g, &s->f[s->depth - 1])) return -1;
        s->depth--;
        child_done(g, &s->f[s->depth - 1], &s->f[s->depth]);
    }
}

int needle_grammar_done(const needle_gstate *s) { return s->depth == 1 && s->f[0].phase == 4; }

int needle_grammar_where(const needle_gstate *s, int32_t *tool, int32_t *prop)
{
    *tool = -1;
    *prop = -1;
    if (s->depth < 2) return NEEDLE_AT_LIST;
    const needle_gframe *call = &s->f[1];
    if (call->phase < 2) return NEEDLE_AT_NAME;
    *tool = call->cur;
    if (call->phase == 2) return NEEDLE_AT_NAME;
    if (call->phase != 3) return NEEDLE_AT_LIST;
    if (s->depth == 3) return NEEDLE_AT_KEY;
    *prop = s->f[2].cur;
    return NEEDLE_AT_VALUE;
}

/* ---- shortest completion (grammar.py min_bytes) */

/* The k-th group of code points the character in progress of a string frame can still
 * become, and the bytes left to finish it (grammar.py _pending_chars): 1 and *cost, *lo, *hi;
 * 2: the group is empty (skip it); 0: no more.  After a backslash the short escapes cost one
 * more byte and the \u00XX controls five, so the shortest completion looks at the characters
 * the pattern can take.  (One group at a time: no table on the matcher's stack.) */
static int pending_char(const needle_gframe *f, uint32_t k, uint32_t *cost, uint32_t *lo, uint32_t *hi)
{
    static const uint32_t long_ctrl[3][2] = { {0x00, 0x07}, {0x0B, 0x0B}, {0x0E, 0x1F} };
    static const uint8_t short_esc[7] = { 0x08, 0x09, 0x0A, 0x0C, 0x0D, 0x22, 0x5C };
    if (f->need) {          /* a UTF-8 character: the code points its next byte's range leaves */
        if (k) return 0;
        const uint32_t s = 6u * (f->need - 1u);
        *cost = f->need;
        *lo = ((f->cp << 6) | (f->lo & 0x3Fu)) << s;
        *hi = (((f->cp << 6) | (f->hi & 0x3Fu)) << s) | ((1u << s) - 1u);
        return 1;
    }
    if (f->esc == 1) {
        if (k < 7) { *cost = 1; *lo = *hi = short_esc[k]; return 1; }
        k -= 7;
    }
    if (k >= 3) return 0;
    *lo = long_ctrl[k][0];
    *hi = long_ctrl[k][1];
    *cost = f->esc == 1 ? 5u : f->esc == 5 ? 1u : 6u - f->esc;
    if (f->esc == 5) {      /* \u00 and the high hex digit (in cp) */
        if (*lo > f->cp + 15u || f->cp > *hi) return 2;
        if (*lo < f->cp) *lo = f->cp;
        if (*hi > f->cp + 15u) *hi = f->cp + 15u;
    }
    return 1;
}

static uint32_t str_rest(const needle_grammar *g, const needle_gframe *f)
{
    const needle_gnode *n = N(g, f);
    if (f->phase == 0) return n->min_bytes;
    if (f->phase == 2) return 0;
    if (is_span(g, n)) {
        uint32_t r = span_rest(g, f);
        return r == INF ? INF : r + 1u;
    }
    static const uint8_t esc_pending[6] = { 0, 1, 4, 3, 2, 1 };
    uint32_t pending = f->need ? f->need : esc_pending[f->esc];
    if (n->n_item) {
        uint32_t chars = INF;
        const uint32_t *rest = g->rest + n->rest0;
        if (pending) {      /* the character in progress: exact over the characters it can still become */
            uint32_t cost, lo, hi;
            int more;
            for (uint32_t k = 0; (more = pending_char(f, k, &cost, &lo, &hi)) != 0; k++) {
                if (more == 2) continue;
                for (uint32_t i = 0; i < n->n_item; i++)
                    if ((f->set >> i & 1u) && item_hits(g, &g->item[n->item0 + i], lo, hi)) {
                        uint32_t r = cost + (g->item[n->item0 + i].kind == NG_P_STAR ? rest[i] : rest[i + 1u]);
                        if (r < chars) chars = r;
                    }
            }
            return (chars == INF ? pending : chars) + 1u;
        } else {
            for (uint32_t i = 0; i <= n->n_item; i++)
                if ((f->set >> i & 1u) && rest[i] < chars) chars = rest[i];
        }
        return pending + (chars == INF ? 0u : chars) + 1u;
    }
    uint32_t nch = f->count + (pending ? 1u : 0u);
    return pending + ((uint32_t)n->min_len > nch ? (uint32_t)n->min_len - nch : 0u) + 1u;
}

static uint32_t obj_tail(const needle_grammar *g, const needle_gnode *n, uint64_t seen)
{
    uint32_t total = 1;
    for (uint32_t i = 0; i < n->n_ref; i++)
        if ((n->required >> i & 1u) && !(seen >> i & 1u))
            total += 1u + g->ref[n->ref0 + i].len + 1u + g->node[g->sub[n->sub0 + i]].min_bytes;
    return total;
}

/* Bytes of the i-th cheapest value still open to an item of a unique array (by length). */
static uint32_t unique_item(const needle_grammar *g, const needle_gnode *child, uint64_t used, uint32_t j)
{
    uint32_t lens[NEEDLE_GRAMMAR_MAX_ALTS], m = 0;
    for (uint32_t i = 0; i < child->n_ref; i++)
        if (!(used >> i & 1u)) {
            uint32_t l = g->ref[child->ref0 + i].len, k = m++;
            for (; k > 0 && lens[k - 1] > l; k--) lens[k] = lens[k - 1];
            lens[k] = l;
        }
    return m == 0 ? 0u : j < m ? lens[j] : lens[m - 1];
}

static uint32_t frame_rest(const needle_grammar *g, const needle_gframe *f)
{
    const needle_gnode *n = N(g, f);
    switch (f->kind) {
    case NG_LIT: {
        uint32_t best = INF;
        for (uint32_t i = 0; i < n->n_ref; i++)
            if ((f->mask >> i & 1u) && g->ref[n->ref0 + i].len - f->pos < best) best = g->ref[n->ref0 + i].len - f->pos;
        return best;
    }
    case NG_INT: case NG_NUM:
        return (uint32_t)number_min_extra(n, f->neg, f->p, (int)f->count, f->frac, f->neg);
    case NG_STR: return str_rest(g, f);
    case NG_CALLS: case NG_ARR: {
        if (f->phase == 0) return n->min_bytes;
        if (f->phase == 4) return 0;
        const needle_gnode *child = &g->node[n->child];
        uint32_t need, total = 0;
#define ITEM(j) (n->unique ? unique_item(g, child, f->mask, (j)) : child->min_bytes)
        if (f->phase == 1) {
            need = (uint32_t)n->min_len;
            for (uint32_t j = 0; j < need; j++) total += ITEM(j);
            return 1u + total + (need ? need - 1u : 0u);
        }
        if (f->phase == 3) {
            need = (uint32_t)n->min_len > f->count + 1u ? (uint32_t)n->min_len - f->count : 1u;
            for (uint32_t j = 0; j < need; j++) total += ITEM(j);
            return total + (need - 1u) + 1u;
        }
        need = (uint32_t)n->min_len > f->count ? (uint32_t)n->min_len - f->count : 0u;
        for (uint32_t j = 0; j < need; j++) total += 1u + ITEM(j);
#undef ITEM
        return 1u + total;
    }
    case NG_CALL:
        if (f->phase == 0) return n->min_bytes - f->pos;
        if (f->phase == 1) {
            uint32_t best = INF;
            for (uint32_t i = 0; i < n->n_ref; i++)
                if (f->mask >> i & 1u) {
                    uint32_t r = g->ref[n->ref0 + i].len - f->pos + (uint32_t)CALL_MID_LEN + g->node[g->sub[n->sub0 + i]].min_bytes;
                    if (r < best) best = r;
                }
            return best + 1u;
        }
        if (f->phase == 2) return (uint32_t)CALL_MID_LEN - f->pos + g->node[g->sub[n->sub0 + (uint32_t)f->cur]].min_bytes + 1u;
        return f->phase == 3 || f->phase == 4 ? 1u : 0u;
    default:                                          /* NG_OBJ */
        if (f->phase == 0) return n->min_bytes;
        if (f->phase == 6) return 0;
        if (f->phase == 1) return obj_tail(g, n, f->mask) - (n->required ? 1u : 0u);
        if (f->phase == 2) {
            uint32_t best = INF;
            for (uint32_t i = 0; i < n->n_ref; i++)
                if (f->set >> i & 1u) {
                    uint32_t r = g->ref[n->ref0 + i].len - f->pos + 1u + g->node[g->sub[n->sub0 + i]].min_bytes
                               + obj_tail(g, n, f->mask | 1ull << i);
                    if (r < best) best = r;
                }
            return best;
        }
        if (f->phase == 3) return 1u + g->node[g->sub[n->sub0 + (uint32_t)f->cur]].min_bytes + obj_tail(g, n, f->mask);
        if (f->phase == 4) return obj_tail(g, n, f->mask);
        if ((uint64_t)n->required & ~f->mask) return obj_tail(g, n, f->mask) - 1u;
        {
            uint32_t best = INF;
            for (uint32_t i = 0; i < n->n_ref; i++)
                if (!(f->mask >> i & 1u)) {
                    uint32_t r = g->ref[n->ref0 + i].len + 1u + g->node[g->sub[n->sub0 + i]].min_bytes;
                    if (r < best) best = r;
                }
            return best + 1u;
        }
    }
}

uint32_t needle_grammar_min_bytes(const needle_grammar *g, const needle_gstate *s)
{
    uint32_t total = 0;
    for (uint32_t i = 0; i < s->depth; i++) {
        const needle_gframe *f = &s->f[i];
        if (f->kind == NG_ARR && g->node[f->node].unique && i + 1u < s->depth) {
            /* the open item (the top frame, a LIT) is counted with its array: the items
             * still needed must differ from the value it becomes, so take the best one */
            const needle_gframe *c = &s->f[i + 1u];
            const needle_gnode *cn = &g->node[c->node];
            uint32_t best = INF;
            for (uint32_t j = 0; j < cn->n_ref; j++)
                if (c->mask >> j & 1u) {
                    needle_gframe a = *f;
                    a.mask |= 1ull << j;
                    uint32_t r = g->ref[cn->ref0 + j].len - c->pos + frame_rest(g, &a);
                    if (r < best) best = r;
                }
            return total + best;
        }
        total += frame_rest(g, f);
    }
    return total;
}
