/* needle_json_scan.h -- the one JSON and UTF-8 scanner of the library (no heap, no stdio).
 *
 * Every reader of JSON in firmware/ goes through these pieces: the service's requests
 * (cli/serve_requests.c), the prompt renderer (needle_tool_prompt.c), the call grammar's
 * schema compiler (needle_grammar_schema.c, needle_grammar_regex.c) and the bindings
 * (needle_bindings.c).  Each keeps its own structure and messages; what a string, a number,
 * an escape and a UTF-8 sequence are is written here once (RFC 8259, RFC 3629).
 * Internal to the library: not installed with the SDK.
 */
#ifndef NEEDLE_JSON_SCAN_H
#define NEEDLE_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- UTF-8 */

/* Length of the valid UTF-8 sequence at s[0..n) (strict: no overlong forms, no surrogates,
 * nothing above U+10FFFF) with its code point in *cp, or 0 when it is not one (n > 0). */
size_t needle_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* The bytes of code point cp (up to U+10FFFF; a surrogate is encoded as it is) into out[0..4);
 * returns their number. */
size_t needle_utf8_encode(uint32_t cp, uint8_t out[4]);
/* The length a sequence whose first byte is b claims (1 to 4): for text known to be valid. */
static inline size_t needle_utf8_lead_len(uint8_t b) { return b < 0x80u ? 1u : b < 0xE0u ? 2u : b < 0xF0u ? 3u : 4u; }

/* ---- JSON pieces (s[0..n); positions are offsets into s) */

/* Four hex digits (either case) at s[0..n) into *v: 0, or -1 when there are fewer than four
 * or one is not a hex digit. */
int needle_json_hex4(const char *s, size_t n, uint32_t *v);

/* Position of the first byte at or after pos that is not JSON white space. */
size_t needle_json_skip_ws(const char *s, size_t n, size_t pos);

/* What needle_json_char found at *pos inside a string (after its opening quote). */
enum {
    NEEDLE_JSON_CHAR = 0,      /* one character: *cp, *pos moved past it */
    NEEDLE_JSON_CLOSE,         /* the closing quote (*pos not moved) */
    NEEDLE_JSON_E_END,         /* the input ends inside the string (or right after a backslash) */
    NEEDLE_JSON_E_CONTROL,     /* an unescaped control character (*cp: it) */
    NEEDLE_JSON_E_ESCAPE,      /* a backslash followed by no escape letter */
    NEEDLE_JSON_E_HEX,         /* \u without four hex digits */
    NEEDLE_JSON_E_UTF8         /* a byte that starts no valid UTF-8 sequence */
};
/* One character of a string at s[*pos]: a raw (UTF-8) character or an escape, \uD8xx\uDCxx
 * pairs joined into one code point; a lone surrogate escape is returned as it is (the caller
 * decides).  On an error *pos is where it is. */
int needle_json_char(const char *s, size_t n, size_t *pos, uint32_t *cp);

/* What needle_json_number found. */
enum { NEEDLE_JSON_NUMBER = 0, NEEDLE_JSON_E_NUMBER_END, NEEDLE_JSON_E_NUMBER };
/* The number at s[pos] (RFC 8259 grammar): on success *end is just past it and *integer says
 * it has neither fraction nor exponent; on an error *end is the offending position
 * (NEEDLE_JSON_E_NUMBER_END: the input ends where a digit must come). */
int needle_json_number(const char *s, size_t n, size_t pos, size_t *end, int *integer);

/* Whether s[pos..n) starts with the literal word (true, false, null). */
int needle_json_literal(const char *s, size_t n, size_t pos, const char *word);

/* Just past the value at s[pos] in JSON known to be valid (minified, or as the call grammar
 * writes it): strings, numbers, literals and nested brackets; n may be SIZE_MAX for
 * NUL-terminated text.  (size_t)-1 when a string or bracket runs past n. */
size_t needle_json_value_end(const char *s, size_t n, size_t pos);

/* ---- minified JSON, NUL-terminated and known to be valid (the call grammar's copy of a
 * tool list); positions index t */

/* Just past the value at t[i]. */
static inline size_t needle_json_end(const char *t, size_t i) { return needle_json_value_end(t, SIZE_MAX, i); }
/* Member k (0-based) of the object at t[o]: its key's and value's positions; 0 when there is none. */
int needle_json_member(const char *t, size_t o, uint32_t k, size_t *key, size_t *val);
/* Item k (0-based) of the array at t[a]: its position; 0 when there is none. */
int needle_json_item(const char *t, size_t a, uint32_t k, size_t *val);
/* Whether the value at t[i] is the text `quoted` (a key or a string with its quotes, a literal). */
int needle_json_is(const char *t, size_t i, const char *quoted);
/* The value of the member whose key is `quoted` of the object at t[o], or (size_t)-1. */
size_t needle_json_get(const char *t, size_t o, const char *quoted);
/* Equal as JSON values: numbers by value (1.0 == 1 == 10e-1), anything else by its text. */
int needle_json_equal(const char *t, size_t a, size_t b);
/* Whether the number at t[i] has a whole value (3, 3.0, 30e-1). */
int needle_json_is_integer(const char *t, size_t i);

#ifdef __cplusplus
}
#endif

#endif /* NEEDLE_JSON_SCAN_H */
