/* needle_toolset.h -- the tools of a turn, parsed once (internal: not installed in the SDK).
 *
 * A constrained turn reads its tool list four times: retrieval (its tools' objects), the
 * prompt (the minified list), the grammar's compiler (the list and each tool's
 * "x-needle-min-confidence") and, when the prompt is too long, the message that says so.
 * needle_toolset_parse validates and minifies the caller's tools JSON once, with the
 * prompt's rules (needle_tool_prompt.c), into a record the four read; no heap: the minified
 * text lives in a buffer the caller owns.
 *
 * Every reader gets exactly what its own pass over the JSON gave: the record keeps the pass's
 * outcome (the list, or its error message) and the most output bytes it held at once, and a
 * reader whose buffer holds that many after its own prefix reads the record; one whose buffer
 * does not (its render overflows inside the list, where the renderer stops checking
 * duplicate keys and extensions, so its message depends on where) minifies the JSON again.
 * That happens only when the turn fails with a list too long for the buffer.
 */
#ifndef NEEDLE_TOOLSET_H
#define NEEDLE_TOOLSET_H

#include <stddef.h>
#include <stdint.h>

#include "needle_tool_grammar.h"
#include "needle_tool_prompt.h"

#define NEEDLE_TOOLSET_MAX_TOOLS 32u   /* tools whose span and threshold are kept (retrieval's and
                                        * the grammar's bound) */
#define NEEDLE_TOOLSET_ERR_MAX   256u  /* the pass's message (the longest is under 200 bytes) */

typedef struct {
    const char *json;      /* the tools JSON the pass read (the built-in list is recognised by it) */
    size_t json_len;
    int rc;                /* the pass's render of an empty query: its length or NEEDLE_PROMPT_E_*, */
    char err[NEEDLE_TOOLSET_ERR_MAX];   /* and its message */
    int list_rc;           /* the list alone: 0, or NEEDLE_PROMPT_E_JSON with err */
    int exact;             /* the pass never overflowed inside the list: it checked everything */
    size_t high;           /* the most list bytes the pass held at once (extensions are unwritten) */
    const char *list;      /* the minified list "[...]" (list_rc 0), list[0..len) */
    size_t len;
    uint32_t count;        /* tools in the list (those the pass reached, on an error) */
    uint32_t start[NEEDLE_TOOLSET_MAX_TOOLS], end[NEEDLE_TOOLSET_MAX_TOOLS];   /* each tool's object in list[] */
    int32_t ppm[NEEDLE_TOOLSET_MAX_TOOLS];   /* its "x-needle-min-confidence" in ppm, -1: none */
} needle_toolset;

/* One pass over tools_json[0..len) into ts: the render of an empty query into text[0..cap),
 * as needle_render_prompt_ex(tools_json, len, "", NULL, text, cap, ...) writes it; returns
 * what that returns (ts->rc), with its message in ts->err. */
int needle_toolset_parse(needle_toolset *ts, const char *tools_json, size_t len, char *text, size_t cap);

/* needle_render_prompt_thresholds(tools_json, len, ...): the same bytes, result and message,
 * reading the record ts (NULL: none) of that JSON instead of the JSON wherever that gives the
 * same (above). */
int needle_toolset_render(const needle_toolset *ts, const char *tools_json, size_t len, const char *query,
                          const char *system, char *out, size_t cap, char *err, size_t errcap,
                          needle_prompt_untrusted *untrusted, int32_t *ppm, size_t ppm_cap);

/* ts becomes the record of list[0..len), the tools retrieval chose (ascending indices
 * chosen[0..n) of ts's list, their objects joined): what a pass over that minified list
 * records, without making it, and each chosen tool keeps the "x-needle-min-confidence" of
 * the caller's list (the minified objects no longer hold it: extensions are unwritten). */
void needle_toolset_choose(needle_toolset *ts, const char *list, size_t len, const uint32_t *chosen, uint32_t n);

/* needle_grammar_compile(g, tools_json, len, ...) reading the record ts (NULL: none). */
int needle_grammar_compile_toolset(needle_grammar *g, const needle_toolset *ts, const char *tools_json, size_t len,
                                   int force_call, char *err, size_t errcap);

/* Passes over a tools JSON the renderer has made since start-up (the test of "parsed once"). */
uint32_t needle_toolset_passes(void);

#endif /* NEEDLE_TOOLSET_H */
