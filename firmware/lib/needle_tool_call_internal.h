/* needle_tool_call_internal.h -- what the constrained turn (needle_tool_call.c) and its
 * envelope's writer (needle_envelope.c) share.  Internal to the library: not installed.
 */
#ifndef NEEDLE_TOOL_CALL_INTERNAL_H
#define NEEDLE_TOOL_CALL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Where text goes: put(user, s, n). */
typedef struct {
    void (*put)(void *user, const char *s, size_t n);
    void *user;
} out_t;

/* A float in [0, 1] with 9 decimals, exactly rounded (half to even): Python's f"{x:.9f}". */
void needle_put_prob(const out_t *o, float x);

/* The bytes a piece writes into a call, into out[0..NEEDLE_TOK_MAX_PIECE_BYTES]: a NORMAL
 * piece's text with U+2581 as a space, a BYTE piece's byte; 0 for the others (markers,
 * control pieces), which never go into a call. */
size_t needle_piece_bytes(uint32_t id, uint8_t *out);

/* v in units of 1/scale as decimal text into out[0..cap), NUL-terminated, trailing zeros
 * dropped ("0.5", "-3", "30"). */
void needle_units_text(char *out, size_t cap, int64_t v, uint64_t scale);

#endif /* NEEDLE_TOOL_CALL_INTERNAL_H */
