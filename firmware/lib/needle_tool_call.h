/* needle_tool_call.h -- one tool-calling turn with constrained decoding, and its envelope
 * (docs/grammar.md).  generator/tools/decode.py is the Python twin: the same archive,
 * tool list, prompt and budget give the same tokens, the same call and the same
 * confidence.
 *
 * The answer runs through four phases: free (the think block: any token but those that
 * would end or break the turn), call (after <tool_call>: only tokens whose bytes keep the
 * output a prefix of a valid call list, needle_grammar_feed), close (</tool_call>) and end
 * (<|im_end|>, chosen but never fed).  A token is allowed only if the shortest completion
 * after it, one token per byte, fits what is left of the budget, so the call is always
 * complete.  Greedy: the allowed token with the largest logit, the lowest id on a tie.
 */
#ifndef NEEDLE_TOOL_CALL_H
#define NEEDLE_TOOL_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "needle_tool_grammar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NEEDLE_CALL_MAX_JSON, the bytes of the call list an envelope keeps: needle_tool_grammar.h
 * (the compiler refuses a tool whose shortest call cannot fit it) */

/* The first override of a turn: a step where the grammar refused the model's own first choice
 * (the arg-max over the vocabulary) and its first byte too (docs/grammar.md, "Acting on a
 * call").  Rendered when it happens, so the envelope needs no grammar to write it. */
#define NEEDLE_OVERRIDE_TEXT 128u
typedef struct {
    uint32_t token;              /* the generated token's index */
    uint32_t offset;             /* bytes of the call list before it */
    int place;                   /* NEEDLE_AT_*: list, name, key or value */
    const char *tool, *arg;      /* in the grammar's text, quotes excluded (NULL: none) */
    uint32_t tool_len, arg_len;
    uint32_t wanted;             /* the model's token */
    char allowed[NEEDLE_OVERRIDE_TEXT];   /* the bytes the grammar took there, as runs: "1-3" */
    char schema[NEEDLE_OVERRIDE_TEXT];    /* NEEDLE_AT_VALUE: what the value's schema allows */
} needle_override;

typedef struct {
    int is_call;                 /* "type": 1 "call", 0 "respond" (the empty list) */
    char calls[NEEDLE_CALL_MAX_JSON + 1];   /* the call list as generated: canonical JSON */
    size_t calls_len;
    uint32_t reasoning_from, reasoning_to;  /* the think block's ids: ids[from..to) */
    float confidence;            /* min(decoding: the smallest probability of a call token (and
                                  * </tool_call>), head_confidence where it is >= 0) */
    float head_confidence;       /* the confidence head over the conversation, in [0, 1]; -1 where
                                  * the engine cannot compute it (needle_confidence_head) */
    int has_router;              /* Needle 3's router head (code 3) was computed: */
    float router[3];             /* its three raw outputs over the conversation (docs/grammar.md §5) */
    uint32_t prompt_tokens, generated_tokens;
    uint32_t prefix_tokens;      /* of the prompt: restored from the prefix snapshot, not fed */
    uint32_t retrieved_count;    /* set by the caller (needle_retrieve): the tools rendered, as */
    uint32_t retrieved[5];       /* indices into the full list; 0: every tool was rendered */
    uint32_t retrieval_tokens;   /* set by the caller: the tokens embedding took (needle_retrieval.tokens) */
    double prefill_s, decode_s;  /* < 0 where the board has no clock */
    double grammar_s;            /* of decode_s: choosing tokens (grammar checks, arg-max passes) */
    uint64_t grammar_checks;     /* tokens tried against the grammar */
    size_t grammar_ram;          /* RAM of the grammar's tables (0: built-in, in flash) */
    int cut;                     /* NEEDLE_CUT_*: whether the budget changed the answer (a token
                                  * ranked above one chosen was refused only because the rest of
                                  * the call would not fit), and which limit set the budget */
    uint32_t overrides;          /* steps where the grammar refused the model's first byte */
    needle_override override;    /* the first of them (overrides > 0) */
    uint32_t max_new, room;      /* the turn's budget as asked, and the tokens the context had free */
    uint32_t tools_called;       /* mask of the tools the call list names (indices in the grammar) */
    const int32_t *tool_ppm;     /* the grammar's per-tool minimum confidences (may be NULL) */
    uint32_t min_confidence_ppm; /* the threshold needle_envelope_judge applied: the largest over the
                                  * tools called of each one's own, else the caller's */
    uint32_t error_code;         /* 0 writes "success":true; else "success":false with this */
    const char *error;           /* error_code and this message (needle_envelope_judge) */
    char why[256];               /* needle_envelope_judge's message */
} needle_envelope;

enum { NEEDLE_CUT_NONE, NEEDLE_CUT_MAX_NEW, NEEDLE_CUT_CONTEXT };

/* The envelope's error codes (docs/grammar.md, "Acting on a call"): what a device must not
 * act on.  The calls stay in the envelope for logging. */
#define NEEDLE_E_CUT_MAX_NEW    1u   /* max_new ran out in the middle of the call */
#define NEEDLE_E_CUT_CONTEXT    2u   /* the context ran out in the middle of the call */
#define NEEDLE_E_LOW_CONFIDENCE 3u   /* the confidence is below the minimum: withheld */
#define NEEDLE_E_OVERRIDE       4u   /* the grammar overrode the model in a call: refused */

/* What an override does to the call (--overrides MODE): refuse it (the default) where it is
 * in a tool name, an argument key or an argument value, or complete it as the grammar wrote it. */
enum { NEEDLE_OVERRIDES_REFUSE = 0, NEEDLE_OVERRIDES_COMPLETE = 1 };

/* Decide whether a device may act on the turn: set error_code, error and success (in that
 * order: a cut call, an override with NEEDLE_OVERRIDES_REFUSE, a confidence below the
 * minimum: min_confidence_ppm, in parts per million (0 withholds nothing), or for a tool with
 * its own "x-needle-min-confidence" that one; the largest over the tools called).  An empty call list
 * (respond) is only judged for the cut.  Twin of generator/tools/decode.py judge(). */
void needle_envelope_judge(needle_envelope *env, uint32_t min_confidence_ppm, int overrides);

/* (needle_parse_confidence, the text of a minimum confidence: needle_tool_prompt.h) */
/* "--overrides NAME": "refuse" or "complete" into *mode; 0, or -1 for another name. */
int needle_parse_overrides(const char *text, size_t len, int *mode);

/* The grammar of a tool list: the built-in list (scons tools=FILE, minified as
 * needle_tools_json) takes its tables from flash, compiled at build time; any other list is
 * compiled into the library's store (needle_grammar_compile, which this returns). */
int needle_call_grammar(needle_grammar *g, const char *tools_json, size_t len, int force_call, char *err,
                        size_t errcap);

/* Feed prompt ids[0..n) at the engine's next positions and decode one constrained turn of
 * at most max_new tokens (fewer if the context is shorter) into ids[n..]; ids has room for
 * NEEDLE_MAX_SEQ entries.  on_token (may be NULL) sees each chosen id as it is chosen.
 * A turn at position 0 in a firmware built with a prefix snapshot (scons tools=FILE,
 * docs/snapshot.md) restores the prompt's first tokens from flash when they are the
 * snapshot's, and feeds only the rest (env->prefix_tokens says how many).
 * Returns 0 with *env filled, or -1 with a one-line message in err (the budget too small
 * for a call, or the engine failed). */
int needle_call_turn(const needle_grammar *g, uint32_t *ids, uint32_t n, uint32_t max_new,
                     int (*on_token)(void *user, uint32_t id), void *user,
                     needle_envelope *env, char *err, size_t errcap);

/* At position 0, in a firmware built with a prefix snapshot (scons tools=FILE,
 * docs/snapshot.md): if ids[0..n) begins with the snapshot's tokens and goes on after them,
 * restore the state after them from flash.  Returns how many tokens were restored (feed
 * ids from there; 0: none, feed them all), or -1 with needle_error() set if the snapshot
 * is not this engine's.  needle_call_turn does this itself. */
int32_t needle_prefix_restore(const uint32_t *ids, uint32_t n);

/* The ids that continue the session after a turn with the caller's results (the JSON text
 * of what the calls returned): <|im_end|> (chosen at the end of the turn, never fed), then
 * "\n<|im_start|>user\n<tool_result>RESULTS</tool_result><|im_end|>\n<|im_start|>assistant\n",
 * the results encoded with chat markers off.  Pass them to needle_call_turn on the same
 * engine (the KV cache holds the conversation; nothing is fed twice).  Returns the number
 * of ids (at most cap), or -1 with the message in err (docs/grammar.md, "Multi-turn"). */
int32_t needle_call_reply_ids(const char *results, uint32_t *ids, uint32_t cap, char *err, size_t errcap);

/* Write the envelope as one JSON line (no newline) through put(user, bytes, n): the
 * official fields, then ours (docs/grammar.md, "Envelope").  ids: the prompt and the
 * answer, as needle_call_turn left them. */
void needle_envelope_write(const needle_envelope *env, const uint32_t *ids,
                           void (*put)(void *user, const char *s, size_t n), void *user);

#ifdef __cplusplus
}
#endif

#endif /* NEEDLE_TOOL_CALL_H */
