/* needle_tool_prompt.h -- render the Needle tool-calling prompt (docs/spec/prompt-and-tokenizer.md 4.1).
 *
 * Hand-written, no heap, no stdio: the caller passes the output buffer.  The rules are in
 * docs/prompt.md; generator/tools/prompt.py is the Python twin and gives identical bytes and
 * identical error messages.
 */
#ifndef NEEDLE_TOOL_PROMPT_H
#define NEEDLE_TOOL_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NEEDLE_PROMPT_E_JSON  (-1)  /* tools JSON invalid, or not an array of objects */
#define NEEDLE_PROMPT_E_SPACE (-2)  /* out[] too small (err says how many bytes are needed) */
#define NEEDLE_PROMPT_E_TEXT  (-3)  /* query NULL, or query/system not valid UTF-8 */

#define NEEDLE_PROMPT_MAX_DEPTH 64  /* nesting of arrays and objects in the tools JSON */

/* Render
 *   [<|im_start|>system\n{strip(system)}<|im_end|>\n]   (only if strip(system) is non-empty)
 *   <|im_start|>user\n<tools>{TOOLS_JSON}</tools>\n{query}<|im_end|>\n<|im_start|>assistant\n
 * into out[0..cap) with a terminating NUL, where TOOLS_JSON is tools_json[0..len) checked
 * against RFC 8259 (top level: an array of objects; no duplicate keys in an object) and
 * written compactly as Python's json.dumps(..., separators=(",", ":"), ensure_ascii=False)
 * does, numbers kept exactly as written.  query and system are NUL-terminated UTF-8;
 * system may be NULL.
 *
 * Returns the prompt length (excluding the NUL), or a negative NEEDLE_PROMPT_E_* with a
 * one-line message in err[0..errcap) (cut to fit, always NUL-terminated when errcap > 0);
 * JSON errors read "tools JSON: line L, column C: ..." (column counted in characters). */
int needle_render_prompt(const char *tools_json, size_t len, const char *query,
                         const char *system, char *out, size_t cap, char *err, size_t errcap);

/* Where the caller's text sits in a rendered prompt: the stripped system (if rendered), the
 * TOOLS_JSON and the query (if non-empty), in this order, as byte ranges of out[].  The
 * rest is the template's own text.  Twin of generator/tools/prompt.py
 * render_prompt_segments (its markers=False segments). */
#define NEEDLE_PROMPT_MAX_UNTRUSTED 3
typedef struct {
    struct {
        size_t start;
        size_t len;
    } span[NEEDLE_PROMPT_MAX_UNTRUSTED];
    size_t n;
} needle_prompt_untrusted;

/* needle_render_prompt, and on success the untrusted ranges in *untrusted (which may be
 * NULL; on failure its n is 0).  Used to encode chat markers in the caller's text as plain
 * text (needle_tok_encode_spans; docs/prompt.md, "Chat markers in untrusted text"). */
int needle_render_prompt_ex(const char *tools_json, size_t len, const char *query,
                            const char *system, char *out, size_t cap, char *err,
                            size_t errcap, needle_prompt_untrusted *untrusted);

/* The system text with the system facts' date (docs/prompt.md, "System facts"): date NULL
 * gives system unchanged; a system text (stripped) that already holds a date fact (it starts
 * with "date:" or has "; date:") is kept as it is; otherwise "date: DATE", then "; " and the
 * stripped system text if there is one, into out[0..cap).  Returns the text to pass to
 * needle_render_prompt as its system (system itself, or out), NULL if out is too small.
 * Twin of generator/tools/prompt.py system_facts. */
const char *needle_system_facts(const char *system, const char *date, char *out, size_t cap);

/* A minimum confidence as text (--min-confidence X, a request's "min_confidence", a tool's
 * "x-needle-min-confidence"): a decimal in [0, 1] with at most 6 digits after the point
 * ("0.5", "1", ".25"), into *ppm in parts per million.  0, or -1 (*ppm unchanged) for
 * anything else.  Twin of generator/tools/prompt.py parse_ppm. */
int needle_parse_confidence(const char *text, size_t len, uint32_t *ppm);

/* needle_render_prompt_ex, and each tool's "x-needle-min-confidence" (our extension on a tool
 * object, never rendered; docs/grammar.md §5a) in parts per million into ppm[0..ppm_cap)
 * (-1: the tool has none); the grammar's compiler reads them here. */
int needle_render_prompt_thresholds(const char *tools_json, size_t len, const char *query, const char *system,
                                    char *out, size_t cap, char *err, size_t errcap,
                                    needle_prompt_untrusted *untrusted, int32_t *ppm, size_t ppm_cap);

#ifdef __cplusplus
}
#endif

#endif /* NEEDLE_TOOL_PROMPT_H */
