/* fuzz/tokenizer.c -- libFuzzer harness of the generated tokenizer (needle_tokenizer.c).
 *
 * Built against the tokenizer generated for host_tests/golden/tiny/archive.cact and linked
 * with its needle_archive.S (the tables are read in place from the linked archive); see
 * fuzz/README.md.  Per input:
 *   1. needle_tok_encode of the bytes (any bytes: invalid UTF-8 and over-long texts included),
 *      with a roomy ids[] and with a small cap derived from the input;
 *   2. needle_tok_decode of the ids it produced, checked against the streaming decoder and
 *      against every truncation size (the snprintf rule of needle_tokenizer.h);
 *   3. the same decode checks on the input read as an array of little-endian uint32 ids
 *      (out-of-range ids included);
 *   4. the piece queries on the input as a surface and on a few ids from it.
 * A broken documented invariant calls abort(), so libFuzzer reports it like a crash.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "needle_tokenizer.h"

#define MAX_IDS (NEEDLE_TOK_MAX_TEXT + 64u)
#define OUT_MAX (4u * (NEEDLE_TOK_MAX_PIECE_BYTES + 3u) * 4096u)

static uint32_t ids[MAX_IDS];
static uint32_t ids2[MAX_IDS];

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "tokenizer invariant broken: %s\n", what);
        abort();
    }
}

/* Decode ids[0..n) in full, truncated, and streamed; all must agree. */
static void check_decode(const uint32_t *v, size_t n)
{
    size_t full = needle_tok_decode(v, n, NULL, 0);
    char *out = malloc(full + 1u);
    check(out != NULL, "malloc");
    check(needle_tok_decode(v, n, out, full + 1u) == full, "decode length stable");
    check(out[full] == '\0', "decode NUL-terminates");

    /* Truncated decodes: heap buffers of exactly cap bytes so ASan sees any overrun. */
    size_t caps[6] = {1u, 2u, 3u, full / 2u + 1u, full, full + 2u};
    for (size_t k = 0; k < 6; k++) {
        size_t cap = caps[k];
        if (cap == 0) continue;  /* full == 0: cap 0 is covered by the length query above */
        char *part = malloc(cap);
        check(part != NULL, "malloc");
        check(needle_tok_decode(v, n, part, cap) == full, "truncated decode returns full length");
        size_t m = full < cap - 1u ? full : cap - 1u;
        check(memcmp(part, out, m) == 0 && part[m] == '\0', "truncated decode is a prefix");
        free(part);
    }

    /* Streaming decoder gives exactly the same bytes. */
    needle_tok_stream st;
    char chunk[NEEDLE_TOK_STREAM_OUT_MAX + 3u];
    size_t pos = 0;
    needle_tok_stream_init(&st);
    for (size_t i = 0; i < n; i++) {
        size_t w = needle_tok_stream_push(&st, v[i], chunk);
        check(w <= NEEDLE_TOK_STREAM_OUT_MAX, "stream push within OUT_MAX");
        check(pos + w <= full && memcmp(out + pos, chunk, w) == 0, "stream push matches decode");
        pos += w;
    }
    size_t w = needle_tok_stream_finish(&st, chunk);
    check(w <= 3u, "stream finish within 3 bytes");
    check(pos + w == full && memcmp(out + pos, chunk, w) == 0, "stream finish matches decode");
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Exact-size heap copy: the encoder must not read text[len]. */
    char *text = malloc(size ? size : 1u);
    if (!text) return 0;
    memcpy(text, data, size);

    int32_t r = needle_tok_encode(text, size, ids, MAX_IDS);
    check(r >= 0 || r == NEEDLE_TOK_E_TOO_LONG || r == NEEDLE_TOK_E_UTF8, "encode result code");
    if (size > NEEDLE_TOK_MAX_TEXT) check(r == NEEDLE_TOK_E_TOO_LONG, "over-long text rejected");
    if (r >= 0) {
        check((uint32_t)r <= MAX_IDS, "id count within cap");
        for (int32_t i = 0; i < r; i++) check(ids[i] < NEEDLE_TOK_N_PIECES, "id in range");
        check_decode(ids, (size_t)r);

        /* Same text, a cap too small by one (and a cap of 0): TOO_LONG, nothing beyond cap. */
        if (r > 0) {
            size_t cap = (size_t)(r - 1);
            uint32_t *small = malloc((cap ? cap : 1u) * sizeof *small);
            check(small != NULL, "malloc");
            check(needle_tok_encode(text, size, small, cap) == NEEDLE_TOK_E_TOO_LONG,
                  "cap too small gives TOO_LONG");
            free(small);
            /* Re-encoding is deterministic (static buffers reset between calls). */
            check(needle_tok_encode(text, size, ids2, MAX_IDS) == r &&
                  memcmp(ids, ids2, (size_t)r * sizeof ids[0]) == 0, "encode deterministic");
        }
    }

    /* The input as raw ids (little-endian uint32). */
    size_t n = size / 4u;
    if (n > MAX_IDS) n = MAX_IDS;
    for (size_t i = 0; i < n; i++)
        ids2[i] = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
                  (uint32_t)data[4 * i + 2] << 16 | (uint32_t)data[4 * i + 3] << 24;
    /* Half of the time fold them into the vocabulary so the decoder sees real pieces. */
    if (size && (data[0] & 1u))
        for (size_t i = 0; i < n; i++) ids2[i] %= NEEDLE_TOK_N_PIECES + 2u;
    check_decode(ids2, n);

    /* Piece queries. */
    int32_t id = needle_tok_piece_id(text, size);
    check(id >= -1 && id < (int32_t)NEEDLE_TOK_N_PIECES, "piece_id in range");
    if (id >= 0) {
        size_t len = 0;
        const uint8_t *p = needle_tok_piece((uint32_t)id, &len);
        check(p != NULL && len == size && memcmp(p, data, size) == 0, "piece_id round-trips");
    }
    for (size_t i = 0; i < n && i < 8u; i++) {
        size_t len = 1;
        const uint8_t *p = needle_tok_piece(ids2[i], &len);
        int t = needle_tok_piece_type(ids2[i]);
        (void)needle_tok_piece_score(ids2[i]);
        if (ids2[i] >= NEEDLE_TOK_N_PIECES) check(p == NULL && len == 0 && t == -1, "out-of-range id");
        else check(p != NULL && t >= NEEDLE_TOK_NORMAL && t <= NEEDLE_TOK_BYTE, "piece in range");
    }
    check(needle_tok_n_pieces() == NEEDLE_TOK_N_PIECES, "n_pieces");
    free(text);
    return 0;
}
