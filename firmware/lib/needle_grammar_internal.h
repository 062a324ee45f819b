/* needle_grammar_internal.h -- what the three files of the call grammar share: the schema
 * compiler (needle_grammar_schema.c, twin of generator/tools/schema.py), the pattern subset
 * (needle_grammar_regex.c, regex.py) and the matcher (needle_tool_grammar.c, grammar.py).
 * Internal to the library: not installed with the SDK; its functions are needle_ng_*.
 */
#ifndef NEEDLE_GRAMMAR_INTERNAL_H
#define NEEDLE_GRAMMAR_INTERNAL_H

#include <string.h>

#include "needle_json_scan.h"
#include "needle_tool_grammar.h"

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

#define CALL_HEAD "{\"name\":"          /* a call as the grammar writes it */
#define CALL_MID  ",\"arguments\":"
#define CALL_HEAD_LEN (sizeof CALL_HEAD - 1u)
#define CALL_MID_LEN  (sizeof CALL_MID - 1u)

/* ================================================================ integers */

static inline int64_t fdiv(int64_t a, int64_t b)   /* floor(a / b), b > 0 */
{
    int64_t q = a / b;
    if ((a % b) != 0 && a < 0) q--;
    return q;
}

static inline int64_t cdiv(int64_t a, int64_t b) { return -fdiv(-a, b); }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

extern const int64_t needle_ng_pow10[19];     /* 10^0 .. 10^18 */
#define POW10 needle_ng_pow10

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

/* ================================================================ errors */

typedef struct {
    char *buf;
    size_t cap, n;
} ng_err;

static inline void err_str(ng_err *e, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, e->n++)
        if (e->n + 1 < e->cap) e->buf[e->n] = s[i];
    if (e->cap) e->buf[e->n + 1 < e->cap ? e->n : e->cap - 1] = '\0';
}

static inline void err_s(ng_err *e, const char *s) { err_str(e, s, strlen(s)); }

static inline void err_u(ng_err *e, uint64_t v)
{
    char d[24];
    size_t n = 0;
    do { d[sizeof d - 1 - n++] = (char)('0' + v % 10u); v /= 10u; } while (v);
    err_str(e, d + sizeof d - n, n);
}

/* ================================================================ compiling (schema and regex) */

typedef struct {
    ng_store *g;            /* written while compiling */
    needle_grammar v;       /* read through the matcher's helpers: views of *g */
    ng_err e;
    char where[512];
    size_t where_n;
    size_t tool_n;          /* where[0..tool_n): the tool being compiled ("tool \"NAME\""), 0 before */
} ng_comp;

static inline const char *T(const ng_comp *c) { return c->g->text; }

#define NONE ((size_t)-1)

static inline int fail(ng_comp *c, const char *msg)
{
    c->e.n = 0;
    err_str(&c->e, c->where, c->where_n);
    err_s(&c->e, ": ");
    err_s(&c->e, msg);
    return -1;
}


int needle_ng_add_node(ng_comp *c, uint8_t kind, uint32_t *idx);
/* the pattern of string node n, the JSON string at v (needle_grammar_regex.c) */
int needle_ng_compile_pattern(ng_comp *c, size_t v, needle_gnode *n);

/* ================================================================ the matcher's rules the compiler reads (needle_tool_grammar.c) */

int32_t needle_ng_number_min_extra(const needle_gnode *n, int neg, int64_t P, int ndig, int frac, int sign);
uint32_t needle_ng_unique_item(const needle_grammar *g, const needle_gnode *child, uint64_t used, uint32_t j);

/* ================================================================ pattern items (needle_grammar_regex.c) */

int needle_ng_item_hits(const needle_grammar *g, const needle_gitem *it, uint32_t lo, uint32_t hi);
uint64_t needle_ng_nfa_closure(const needle_grammar *g, const needle_gnode *n, uint64_t s);
uint64_t needle_ng_nfa_step(const needle_grammar *g, const needle_gnode *n, uint64_t s, uint32_t cp);
int needle_ng_nfa_can_take(const needle_grammar *g, const needle_gnode *n, uint64_t s, uint32_t lo, uint32_t hi);
uint32_t needle_ng_item_min_bytes(const needle_grammar *g, const needle_gitem *it);

#endif /* NEEDLE_GRAMMAR_INTERNAL_H */
