/* needle_grammar_regex.c -- the pattern subset of string schemas into the grammar's
 * character-set items (generator/tools/regex.py is the twin); see docs/grammar.md.
 */
#include "needle_grammar_internal.h"

/* ================================================================ pattern sets */

int needle_ng_item_hits(const needle_grammar *g, const needle_gitem *it, uint32_t lo, uint32_t hi)
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

uint64_t needle_ng_nfa_closure(const needle_grammar *g, const needle_gnode *n, uint64_t s)
{
    for (uint32_t i = 0; i < n->n_item; i++)
        if ((s >> i & 1u) && g->item[n->item0 + i].kind != NG_P_ONE) s |= 1ull << (i + 1u);
    return s;
}

uint64_t needle_ng_nfa_step(const needle_grammar *g, const needle_gnode *n, uint64_t s, uint32_t cp)
{
    uint64_t out = 0;
    for (uint32_t i = 0; i < n->n_item; i++) {
        const needle_gitem *it = &g->item[n->item0 + i];
        if ((s >> i & 1u) && needle_ng_item_hits(g, it, cp, cp))
            out |= 1ull << (it->kind == NG_P_STAR ? i : i + 1u);
    }
    return needle_ng_nfa_closure(g, n, out);
}

int needle_ng_nfa_can_take(const needle_grammar *g, const needle_gnode *n, uint64_t s, uint32_t lo, uint32_t hi)
{
    for (uint32_t i = 0; i < n->n_item; i++)
        if ((s >> i & 1u) && needle_ng_item_hits(g, &g->item[n->item0 + i], lo, hi)) return 1;
    return 0;
}

/* Bytes of the cheapest character of an item as canonical JSON writes it (regex.py COST_TIERS). */
uint32_t needle_ng_item_min_bytes(const needle_grammar *g, const needle_gitem *it)
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
            if (needle_ng_item_hits(g, it, tiers[t].r[i][0], tiers[t].r[i][1])) return tiers[t].cost;
    return 6;
}
/* ---- the pattern subset (regex.py) */

typedef struct {
    uint32_t cp[512];
    size_t n;
} ng_cps;

static int decode_string(const char *t, size_t i, ng_cps *out)   /* the JSON string at t[i] */
{
    size_t pos = i + 1u, e = needle_json_end(t, i) - 1u;
    uint32_t cp;
    out->n = 0;
    while (needle_json_char(t, e, &pos, &cp) == NEEDLE_JSON_CHAR) {
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

int needle_ng_compile_pattern(ng_comp *c, size_t v, needle_gnode *n)
{
    static ng_cps cps;
    ng_store *g = c->g;
    const char *t = T(c);
    ng_pat p = { c, &cps, t + v + 1, needle_json_end(t, v) - v - 2 };
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
        g->rest[n->rest0 + (uint32_t)k] = g->rest[n->rest0 + (uint32_t)k + 1u] + (it->kind == NG_P_ONE ? needle_ng_item_min_bytes(&c->v, it) : 0u);
    }
    n->min_bytes = 2u + g->rest[n->rest0];
    return 0;
}
