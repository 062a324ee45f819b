/* needle_tool_grammar.h -- the call grammar: tool schemas compiled into tables, and a byte-level
 * pushdown matcher over them (docs/grammar.md).
 *
 * Hand-written, no heap, no stdio, no libm.  generator/tools/schema.py and grammar.py are
 * the Python twins: the same tool list gives the same tables, the same one-line errors and
 * the same matcher states, byte for byte.
 *
 * The grammar admits exactly the canonical compact JSON (json.dumps with separators ","
 * and ":", ensure_ascii False) of a call list [{"name":N,"arguments":{...}},...] whose
 * arguments follow their tool's schema.  Every state the matcher reaches can still be
 * completed, and needle_grammar_min_bytes() gives the length of its shortest completion.
 */
#ifndef NEEDLE_TOOL_GRAMMAR_H
#define NEEDLE_TOOL_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Table bounds (the RAM of a compiled grammar; docs/grammar.md lists the cost). A board
 * may override them with -D (boards/<name>.toml, [grammar]). */
#ifndef NEEDLE_GRAMMAR_TEXT_MAX
#define NEEDLE_GRAMMAR_TEXT_MAX   (16u * 1024u)  /* bytes of the minified tool list */
#endif
#ifndef NEEDLE_GRAMMAR_MAX_NODES
#define NEEDLE_GRAMMAR_MAX_NODES  256u           /* schemas (one node each) */
#endif
#ifndef NEEDLE_GRAMMAR_MAX_REFS
#define NEEDLE_GRAMMAR_MAX_REFS   1024u          /* literals: names, keys, enum values */
#endif
#ifndef NEEDLE_GRAMMAR_MAX_ITEMS
#define NEEDLE_GRAMMAR_MAX_ITEMS  512u           /* pattern items, all patterns together */
#endif
#ifndef NEEDLE_GRAMMAR_MAX_RANGES
#define NEEDLE_GRAMMAR_MAX_RANGES 1024u          /* character ranges of the pattern items */
#endif
#ifndef NEEDLE_GRAMMAR_SPAN_MAX
#define NEEDLE_GRAMMAR_SPAN_MAX   1024u          /* bytes of the query span strings copy from */
#endif
/* 0 (board file [grammar] runtime = false): the firmware takes only its built-in list, whose
 * tables are in flash; nothing calls needle_grammar_compile, so the linker drops it and its
 * store (bare metal: --gc-sections). */
#ifndef NEEDLE_GRAMMAR_RUNTIME
#define NEEDLE_GRAMMAR_RUNTIME 1
#endif
#define NEEDLE_GRAMMAR_MAX_TOOLS    32u   /* tools in one list (a candidate mask) */
#define NEEDLE_GRAMMAR_MAX_PROPS    32u   /* properties of one object (seen/required masks) */
#define NEEDLE_GRAMMAR_MAX_ALTS     64u   /* values of one enum (a candidate mask) */
#define NEEDLE_GRAMMAR_PATTERN_ITEMS 63u  /* items of one pattern (a 64-bit position set) */
#define NEEDLE_GRAMMAR_MAX_DEPTH    16u   /* open JSON values: list, call, arguments, ... */
#define NEEDLE_CALL_MAX_JSON 4096u   /* bytes of the call list an envelope keeps (needle_tool_call.h) */

/* Node kinds (generator/tools/schema.py: LIT ... CALL). */
enum { NG_LIT = 1, NG_INT, NG_NUM, NG_STR, NG_ARR, NG_OBJ, NG_CALLS, NG_CALL };

typedef struct {
    uint32_t off;           /* in needle_grammar.text */
    uint32_t len;
} needle_gref;

typedef struct {
    uint8_t kind;
    uint8_t unique;         /* ARR: uniqueItems; STR: "x-needle-span" (a span of the query) */
    uint16_t n_ref;         /* LIT: values; CALL: tool names; OBJ: keys */
    uint16_t ref0;          /* first of them in refs[] */
    uint16_t child;         /* ARR, CALLS: the item node */
    uint16_t sub0;          /* OBJ: node of each key; CALL: arguments node of each tool (subs[]) */
    uint16_t item0, n_item; /* STR: pattern items in items[] (n_item 0: no pattern) */
    uint16_t rest0;         /* STR: rest[] bytes from each pattern position (n_item + 1) */
    uint32_t required;      /* OBJ: mask over keys */
    int32_t min_len;        /* STR: characters; ARR, CALLS: items */
    int32_t max_len;        /* -1: none */
    int64_t lo, hi, mult;   /* INT, NUM: inclusive bounds and multipleOf in units (NUM: 1e-6) */
    uint32_t min_bytes;     /* shortest valid text */
} needle_gnode;

typedef struct {
    uint8_t kind;           /* NG_P_ONE, NG_P_OPT, NG_P_STAR */
    uint8_t negate;
    uint16_t range0, n_range;
} needle_gitem;

enum { NG_P_ONE = 0, NG_P_OPT, NG_P_STAR };

/* A compiled grammar: read-only views of its tables, in flash (the built-in tools' tables,
 * generated at build time: needle_tools.h) or in the store of needle_grammar_compile().
 * Its size does not depend on the table bounds. */
typedef struct {
    const char *text;       /* the minified list, NUL, "truefalsenull", NUL */
    size_t text_len;        /* of the list */
    const needle_gnode *node;
    const needle_gref *ref;
    const uint16_t *sub;
    const needle_gitem *item;
    const uint32_t (*range)[2];
    const uint32_t *rest;
    uint32_t n_node, n_ref, n_item, n_range, n_rest;
    uint32_t n_tools;
    int force_call;
    const int32_t *tool_ppm;   /* each tool's "x-needle-min-confidence" in parts per million, -1: none
                                * (docs/grammar.md §5a) */
    /* the turn's query, the source of span strings (docs/grammar.md §2a): set by
     * needle_grammar_set_query (NULL: none; a compile or a flash view starts without) */
    const uint8_t *query;
    uint32_t query_len;
    int span_all;              /* every free string is a span (the span_strings switch) */
} needle_grammar;

/* One open JSON value (the fields of generator/tools/grammar.py's frame tuples). */
typedef struct {
    uint8_t kind, phase;
    uint8_t neg;            /* INT/NUM: 0, 1, or 2 before the first byte */
    uint8_t esc, need, lo, hi;  /* STR: escape state, UTF-8 character in progress */
    uint16_t node;
    int16_t cur;            /* OBJ: property being written; CALL: the tool */
    int16_t frac;           /* NUM: digits after the point, -1 before it */
    uint16_t pos;           /* LIT, CALL: bytes matched; OBJ: bytes of the key */
    uint32_t count;         /* ARR/CALLS: items; STR: characters; INT/NUM: digits before the point */
    uint32_t cp;
    uint64_t mask;          /* LIT, CALL: candidates; ARR: enum values used; OBJ: keys seen */
    uint64_t set;           /* STR: pattern positions, or for a span string s0 | k << 32 (the k bytes
                             * so far are query[s0..s0+k), s0 the smallest); OBJ: key candidates */
    int64_t p;              /* INT/NUM: the digits as an integer */
} needle_gframe;

typedef struct {
    uint32_t depth;
    needle_gframe f[NEEDLE_GRAMMAR_MAX_DEPTH];
} needle_gstate;

/* Compile a tool list (JSON text, validated and minified here with the prompt's rules,
 * needle_tool_prompt.h) into *g.  force_call: the list must hold at least one call.  Returns 0, or
 * -1 with a one-line message in err[0..errcap) naming the tool, the property and the
 * keyword (*g unchanged).  The tables go into the library's one static store (bounded by
 * NEEDLE_GRAMMAR_*, about 56 KiB at the defaults): compiling again replaces them, so
 * one run-time grammar is live at a time.  Built-in tools need no compile (their tables
 * are in flash, needle_tools_grammar()). */
int needle_grammar_compile(needle_grammar *g, const char *tools_json, size_t len, int force_call,
                           char *err, size_t errcap);

/* RAM its tables take: the store's size for a grammar compiled at run time, 0 for tables
 * in flash. */
size_t needle_grammar_ram_bytes(const needle_grammar *g);

/* Make query[0..len) the source of g's span strings for the turns that follow (docs/grammar.md
 * §2a): the strings marked "x-needle-span", and with span_all every string without a pattern
 * that admits text.  The bytes are copied into the library's one static buffer
 * (NEEDLE_GRAMMAR_SPAN_MAX bytes), so a results turn keeps its call's query.  NULL, or a list
 * without span strings: none (g->query NULL).  Returns 0, or -1 with one line in err (g
 * unchanged): a query longer than NEEDLE_GRAMMAR_SPAN_MAX, or without minLength plain ASCII
 * characters in a row for a span string that needs them. */
int needle_grammar_set_query(needle_grammar *g, const char *query, size_t len, int span_all, char *err,
                             size_t errcap);
/* The checks of needle_grammar_set_query alone: 0, or -1 with its message (nothing changed). */
int needle_grammar_check_query(const needle_grammar *g, const char *query, size_t len, int span_all, char *err,
                               size_t errcap);

void needle_grammar_start(const needle_grammar *g, needle_gstate *s);
/* Feed one byte: 0 and *s updated, or -1 (and *s unchanged in meaning: do not use it). */
int needle_grammar_feed(const needle_grammar *g, needle_gstate *s, uint8_t b);
/* The call list is complete (its closing ']' fed). */
int needle_grammar_done(const needle_gstate *s);
/* Length of the shortest completion of *s, in bytes. */
uint32_t needle_grammar_min_bytes(const needle_grammar *g, const needle_gstate *s);

/* Where the next byte goes (generator/tools/grammar.py where()): the call list's own
 * structure, a call's tool name (up to "arguments":), an arguments object outside its values
 * (keys, commas, braces) or an argument's value (its last byte and what nests in it
 * included).  *tool: the call's tool (-1 before its name is complete); *prop: the argument
 * (NEEDLE_AT_VALUE), else -1. */
enum { NEEDLE_AT_LIST, NEEDLE_AT_NAME, NEEDLE_AT_KEY, NEEDLE_AT_VALUE };
int needle_grammar_where(const needle_gstate *s, int32_t *tool, int32_t *prop);

/* Bytes of a shortest call list (the empty one, or with force_call the shortest call). */
uint32_t needle_grammar_list_min(const needle_grammar *g);

#ifdef __cplusplus
}
#endif

#endif /* NEEDLE_TOOL_GRAMMAR_H */
