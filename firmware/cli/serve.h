/* serve.h -- the service mode (`needle --serve`, cli/serve.c, Linux boards only) and the
 * generation core it shares with the command line (cli/main.c, every board).
 *
 * The service answers JSON-line requests on standard input or a Unix socket and keeps a
 * session (the engine's KV cache) between them; docs/serve.md is the protocol.  Both front
 * ends turn a prompt into token ids themselves and hand them to needle_generate(), so a
 * request on a fresh session chooses the same tokens as `needle --prompt` / `--query`.
 */
#ifndef NEEDLE_SERVE_H
#define NEEDLE_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "needle_tokenizer.h"

/* ---- the generation core (cli/main.c) -------------------------------------------------- */

/* Why needle_generate() stopped. */
#define NEEDLE_STOP_EOS     0   /* chose EOS (not passed to the token hook) */
#define NEEDLE_STOP_MARKER  1   /* chose the extra stop id (not passed to the token hook) */
#define NEEDLE_STOP_MAX_NEW 2   /* made max_new tokens */
#define NEEDLE_STOP_CONTEXT 3   /* made as many tokens as the context had room for (< max_new) */

typedef struct {
    void (*prefilled)(void *ctx);           /* the prompt is fed (may be NULL) */
    int (*token)(void *ctx, uint32_t id);   /* a chosen token; non-zero stops and is returned */
    void *ctx;
} needle_gen_hooks;

typedef struct {
    uint32_t generated;   /* tokens passed to the token hook */
    uint32_t last;        /* the token chosen last (the stop token, if any): never fed */
    int stop;             /* NEEDLE_STOP_* (when needle_generate returned 0) */
} needle_gen_result;

/* Feed ids[0..n) (n >= 1) at the engine's next positions, then choose greedily (arg-max, the
 * lowest id on a tie): stop at EOS, at stop_id (if >= 0), after max_new tokens, or when the
 * next token would not fit in the context.  Every chosen token but the stop token goes to
 * hooks->token; all but the last chosen one are fed.  The caller checks that
 * needle_position() + n < NEEDLE_MAX_SEQ (room for one new token).
 * Returns 0, -1 when the engine failed (needle_error()), or the token hook's non-zero value. */
int needle_generate(const uint32_t *ids, uint32_t n, uint32_t max_new, int32_t stop_id,
                    const needle_gen_hooks *hooks, needle_gen_result *res);

/* `--date now` (and a service request's "date": "now"): the local time as the system facts
 * write it, "YYYY-MM-DD Ddd HH:MM", into out (at least 32 bytes).  0, or -1 where the board
 * has no clock (bare metal: pass the date as text). */
int needle_date_now(char *out, size_t cap);

/* The tool-calling prompt of `needle --tools F --query Q` (needle_render_prompt_ex) into
 * out[0..cap); with plain_markers, the byte ranges of the caller's text (system, tools JSON,
 * query) in plain[0..*n_plain) for needle_tok_encode_spans, else *n_plain = 0.  Returns the
 * prompt length, or a negative NEEDLE_PROMPT_E_* with the message in err[0..errcap). */
int needle_tool_prompt(const char *tools_json, size_t tools_len, const char *query,
                       const char *system, int plain_markers, char *out, size_t cap,
                       needle_tok_span *plain, size_t *n_plain, char *err, size_t errcap);

/* ---- the service (cli/serve.c) --------------------------------------------------------- */

/* Longest request line, in bytes (the newline excluded): a tools array as large as a
 * --tools file plus a prompt as long as the tokenizer takes.  Longer lines are discarded up
 * to the next newline and answered with an error. */
#define NEEDLE_SERVE_LINE_MAX (64u * 1024u + NEEDLE_TOK_MAX_TEXT)

/* Serve requests until standard input ends (socket_path NULL; exit status 0), or forever on
 * the Unix socket socket_path, one connection at a time.  tools_json[0..tools_len) is the
 * --tools file (already checked; NULL if none was given), max_new the default of a request's
 * "max_new".  Call after needle_boot().  Returns the exit status after printing one
 * "needle: error: ..." line on failure (1: I/O, e.g. the socket cannot be made). */
int needle_serve(const char *socket_path, const char *tools_json, size_t tools_len,
                 uint32_t max_new);

#endif /* NEEDLE_SERVE_H */
