/* needle_tool_grammar.c -- the byte-level matcher over grammar tables and its shortest
 * completions (generator/tools/grammar.py is the twin: every rule below has its Python
 * counterpart of the same name).  Schemas become tables in needle_grammar_schema.c and
 * needle_grammar_regex.c; see needle_tool_grammar.h and docs/grammar.md.
 */
#include "needle_grammar_internal.h"

const int64_t needle_ng_pow10[19] = {
    1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL, 100000000LL,
    1000000000LL, 10000000000LL, 100000000000LL, 1000000000000LL, 10000000000000LL,
    100000000000000LL, 1000000000000000LL, 10000000000000000LL, 100000000000000000LL,
    1000000000000000000LL };

/* ================================================================ integers */

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
 * (grammar.py needle_ng_number_min_extra; docs/grammar.md, "Numbers"). */
int32_t needle_ng_number_min_extra(const needle_gnode *n, int neg, int64_t P, int ndig, int frac, int sign)
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
    else if (n->kind == NG_STR && n->n_item) f->set = needle_ng_nfa_closure(g, n, 1u);
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
               needle_ng_number_min_extra(N(g, f), f->neg, f->p, (int)f->count, f->frac, f->neg) == 0;
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
    return !n->n_item || needle_ng_nfa_can_take(g, n, f->set, lo, hi);
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
        set = needle_ng_nfa_step(g, n, set, cp);
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
            j += (uint32_t)needle_utf8_lead_len(q[j]);
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
    if (needle_ng_number_min_extra(n, nf.neg, nf.p, (int)nf.count, nf.frac, nf.neg) < 0) return 0;
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
                    if ((f->set >> i & 1u) && needle_ng_item_hits(g, &g->item[n->item0 + i], lo, hi)) {
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
uint32_t needle_ng_unique_item(const needle_grammar *g, const needle_gnode *child, uint64_t used, uint32_t j)
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
        return (uint32_t)needle_ng_number_min_extra(n, f->neg, f->p, (int)f->count, f->frac, f->neg);
    case NG_STR: return str_rest(g, f);
    case NG_CALLS: case NG_ARR: {
        if (f->phase == 0) return n->min_bytes;
        if (f->phase == 4) return 0;
        const needle_gnode *child = &g->node[n->child];
        uint32_t need, total = 0;
#define ITEM(j) (n->unique ? needle_ng_unique_item(g, child, f->mask, (j)) : child->min_bytes)
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
