/* needle_session.h -- the engine's text-level C API: stream a completion, make a tool call,
 * answer it with the calls' results (docs/api.md).  Part of the library (scons lib=1, needle.h);
 * the command line (main.c) and the service (cli/serve_*.c) are built on it.
 *
 * One session per engine, in static memory: needle_call() starts a conversation (the engine
 * is reset), needle_reply() continues it with the KV cache kept, needle_reset() (needle_model.h)
 * ends it.  Every function returns a negative value with a one-line message in err[0..errcap)
 * on failure; nothing here allocates.
 */
#ifndef NEEDLE_SESSION_H
#define NEEDLE_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "needle_tokenizer.h"
#include "needle_tool_call.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- streaming text --------------------------------------------------------------------- */

/* A chosen token: its id and the text it completes (whole UTF-8 characters; may be empty while
 * a character is split across tokens).  Non-zero stops the generation (it is returned). */
typedef int (*needle_on_token)(void *user, uint32_t id, const char *text, size_t len);

/* Reset the engine, feed BOS and prompt (chat markers in it are markers), then stream the
 * greedy continuation to on_token (may be NULL) until EOS, <|im_end|> (not streamed), max_new
 * tokens or the end of the context (max_new 0: the prompt is fed and nothing is streamed).
 * Returns the tokens streamed, on_token's non-zero value, or -1 with the message in err
 * (prompt not UTF-8 or too long, engine error). */
int32_t needle_generate(const char *prompt, uint32_t max_new, needle_on_token on_token, void *user,
                        char *err, size_t errcap);

/* ---- tool calls ------------------------------------------------------------------------- */

#define NEEDLE_CALL_MAX_NEW 96u       /* the answer's token budget when max_new is 0 */
#define NEEDLE_CALL_E_ENGINE (-1)     /* the prompt, the budget or the engine: err says which */
#define NEEDLE_CALL_E_TOOLS  (-2)     /* the tool list: invalid JSON or schema, or retrieval failed */

typedef struct {
    const char *tools_json;   /* the tool list (JSON text); NULL: the built-in list (scons tools=FILE) */
    size_t tools_len;
    const char *system;       /* a system turn; NULL: none */
    const char *date;         /* the system facts' date (docs/prompt.md); NULL: none */
    uint32_t max_new;         /* 0: NEEDLE_CALL_MAX_NEW */
    int force_call;           /* at least one call (no []) */
    int plain_markers;        /* chat markers in the query, system and tools are plain text */
    /* Added in protocol 3 (docs/grammar.md, "Acting on a call"); zero keeps 0.x behaviour but
     * for the overrides, which refuse by default: */
    float min_confidence;     /* withhold a call below this confidence, in [0, 1] (0: none;
                               * NEEDLE_MIN_CONFIDENCE: the value recommended for this model) */
    int overrides;            /* NEEDLE_OVERRIDES_REFUSE (0) or NEEDLE_OVERRIDES_COMPLETE */
    /* Added with span strings (docs/grammar.md §2a); zero keeps the earlier behaviour: */
    int span_strings;         /* every free string argument is a span of the query (strings marked
                               * "x-needle-span" are spans either way) */
} needle_call_options;

/* The minimum confidence recommended for this engine's model generation (docs/calibration.md),
 * the default of the CLI's and the service's --min-confidence. */
#define NEEDLE_MIN_CONFIDENCE ((float)NEEDLE_MIN_CONFIDENCE_PPM / 1e6f)

/* One tool-calling turn on a new conversation: reset, with more than five tools and the
 * embedding head the five best rendered (needle_retrieval.h), the prompt rendered and
 * encoded, the call decoded under the tools' grammar into *env (docs/grammar.md), then
 * judged (needle_envelope_judge: env->error_code non-zero means do not act on the calls).
 * opt may be NULL (the built-in list, defaults).  Returns 0, or NEEDLE_CALL_E_* (a
 * min_confidence outside [0, 1] or an unknown overrides mode: NEEDLE_CALL_E_ENGINE,
 * nothing run; a query span strings cannot copy from, too long for NEEDLE_GRAMMAR_SPAN_MAX:
 * NEEDLE_CALL_E_ENGINE with the message, nothing decoded). */
int needle_call(const char *query, const needle_call_options *opt, needle_envelope *env, char *err,
                size_t errcap);

/* The next turn of the conversation needle_call() started: the calls' results (JSON text) as
 * a user turn (docs/grammar.md, "Multi-turn"), then another constrained turn with the same
 * tools and judge settings, nothing fed twice.  Returns 0, or NEEDLE_CALL_E_ENGINE. */
int needle_reply(const char *results, needle_envelope *env, char *err, size_t errcap);

/* The envelope of the session's last turn as one JSON line, no newline (needle_envelope_write
 * with the turn's ids). */
void needle_call_write(const needle_envelope *env, void (*put)(void *user, const char *s, size_t n), void *user);

/* ---- the pieces the front ends share ------------------------------------------------------ */

/* Why needle_generate_ids() stopped. */
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
    int stop;             /* NEEDLE_STOP_* (when needle_generate_ids returned 0) */
} needle_gen_result;

/* Feed ids[0..n) (n >= 1) at the engine's next positions, then choose greedily (arg-max, the
 * lowest id on a tie): stop at EOS, at stop_id (if >= 0), after max_new tokens (0: none is
 * chosen, stop NEEDLE_STOP_MAX_NEW), or when the next token would not fit in the context.  Every chosen token but the stop token goes to
 * hooks->token; all but the last chosen one are fed.  The caller checks that
 * needle_position() + n < NEEDLE_MAX_SEQ (room for one new token).  At position 0 a firmware
 * with a prefix snapshot restores its tokens from flash (docs/snapshot.md).
 * Returns 0, -1 when the engine failed (needle_error()), or the token hook's non-zero value. */
int needle_generate_ids(const uint32_t *ids, uint32_t n, uint32_t max_new, int32_t stop_id,
                        const needle_gen_hooks *hooks, needle_gen_result *res);

/* The index of the largest of v[0..n), the lowest on a tie (greedy decoding). */
uint32_t needle_argmax(const float *v, uint32_t n);

/* `--date now` (and a service request's "date": "now"): the local time as the system facts
 * write it, "YYYY-MM-DD Ddd HH:MM", into out (at least 32 bytes).  0, or -1 where the board
 * has no clock (bare metal: pass the date as text). */
int needle_date_now(char *out, size_t cap);

/* The tool-calling prompt of `needle --tools F --query Q` (needle_render_prompt_ex) into
 * out[0..cap); with plain_markers, the byte ranges of the caller's text (system, tools JSON,
 * query) in plain[0..*n_plain) for needle_tok_encode_spans, else *n_plain = 0.  Returns the
 * prompt length, or a negative NEEDLE_PROMPT_E_* with the message in err[0..errcap):
 * NEEDLE_PROMPT_E_TEXT for the query or system text (NULL, not UTF-8, or too long for what
 * the tool list leaves of cap: err names them and that limit), E_JSON and E_SPACE for the
 * tool list (invalid, or too long alone). */
int needle_tool_prompt(const char *tools_json, size_t tools_len, const char *query,
                       const char *system, int plain_markers, char *out, size_t cap,
                       needle_tok_span *plain, size_t *n_plain, char *err, size_t errcap);

#ifdef __cplusplus
}
#endif

#endif /* NEEDLE_SESSION_H */
