/* needle_session.c -- the engine's text-level C API; see needle_session.h and docs/api.md. */
#include "needle_session.h"

#include <string.h>
#if defined(__linux__)
#include <time.h>
#endif

#include "needle_model.h"
#include "needle_retrieval.h"
#include "needle_session_internal.h"
#include "needle_tool_prompt.h"
#ifdef NEEDLE_TOOLS_BUILTIN
#include "needle_tools.h"     /* scons tools=FILE: the built-in list */
#endif

/* ---- the shared pieces -------------------------------------------------------------------- */

uint32_t needle_argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

int needle_generate_ids(const uint32_t *prompt_ids, uint32_t n, uint32_t max_new, int32_t stop_id,
                        const needle_gen_hooks *hooks, needle_gen_result *res)
{
    const float *lg = NULL;
    res->generated = 0;
    res->last = 0;
    res->stop = NEEDLE_STOP_MAX_NEW;
    int32_t cached = needle_prefix_restore(prompt_ids, n);   /* the built-in tools' prefix, from flash */
    if (cached < 0) return -1;
    if ((uint32_t)cached < n && !(lg = needle_prefill(prompt_ids + cached, n - (uint32_t)cached))) return -1;
    if (hooks->prefilled) hooks->prefilled(hooks->ctx);
    /* The last chosen token is never fed, so the positions run up to NEEDLE_MAX_SEQ - 1 and
     * the context has room for NEEDLE_MAX_SEQ - position tokens. */
    uint32_t room = NEEDLE_MAX_SEQ - needle_position(), limit = max_new < room ? max_new : room;
    if (limit == 0) return 0;       /* max_new 0: the prompt is fed, no token chosen or streamed */
    for (;;) {
        uint32_t next = needle_argmax(lg, NEEDLE_OUT_VOCAB);
        res->last = next;
        if (next == NEEDLE_EOS_ID) { res->stop = NEEDLE_STOP_EOS; return 0; }
        if (stop_id >= 0 && next == (uint32_t)stop_id) { res->stop = NEEDLE_STOP_MARKER; return 0; }
        res->generated++;
        int rc = hooks->token(hooks->ctx, next);
        if (rc) return rc;
        if (res->generated >= limit) {
            res->stop = limit < max_new ? NEEDLE_STOP_CONTEXT : NEEDLE_STOP_MAX_NEW;
            return 0;
        }
        if (!(lg = needle_step(next))) return -1;
    }
}

int needle_date_now(char *out, size_t cap)
{
#if defined(__linux__)
    time_t now = time(NULL);
    const struct tm *t = now == (time_t)-1 ? NULL : localtime(&now);
    if (t && strftime(out, cap, "%Y-%m-%d %a %H:%M", t)) return 0;
#else
    (void)out; (void)cap;
#endif
    return -1;
}

static char *u32_text(char *at, uint32_t v);

/* The prompt did not fit out[0..cap): when the tool list alone fits, the query and the system
 * text are what is too long, and err names them and the bytes the list leaves them
 * (NEEDLE_PROMPT_E_TEXT); otherwise the list itself is (NEEDLE_PROMPT_E_SPACE, err as is). */
static int text_too_long(const needle_toolset *ts, const char *tools_json, size_t tools_len, const char *query,
                         const char *system, char *out, size_t cap, char *err, size_t errcap)
{
    needle_prompt_untrusted u;
    int base = needle_toolset_render(ts, tools_json, tools_len, "", NULL, out, cap, NULL, 0, &u, NULL, 0);
    if (base < 0) return NEEDLE_PROMPT_E_SPACE;
    if (cap) out[0] = 0;
    /* a system turn adds its markers, "<|im_start|>system\n" and "<|im_end|>\n" */
    static const char sys_turn[] = "<|im_start|>system\n<|im_end|>\n";
    size_t q = strlen(query), sl = system ? strlen(system) : 0u;
    size_t room = cap - 1u - (size_t)base, extra = sl ? sizeof sys_turn - 1u : 0u;
    room = room > extra ? room - extra : 0u;
    char qn[12], sn[12], rn[12], cn[12];
    *u32_text(qn, (uint32_t)q) = 0;
    *u32_text(sn, (uint32_t)sl) = 0;
    *u32_text(rn, (uint32_t)room) = 0;
    *u32_text(cn, (uint32_t)(cap - 1u)) = 0;
    const char *parts[] = { "the query (", qn, " bytes) ",
                            sl ? "and the system text (" : "", sl ? sn : "", sl ? " bytes) are" : "is",
                            " too long: with this tool list the prompt holds ", rn, " bytes of ",
                            sl ? "them" : "it", " (NEEDLE_TOK_MAX_TEXT ", cn, " bytes in all)" };
    size_t at = 0;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
        for (const char *c = parts[k]; *c; c++, at++) if (at + 1 < errcap) err[at] = *c;
    if (errcap) err[at < errcap ? at : errcap - 1] = 0;
    return NEEDLE_PROMPT_E_TEXT;
}

/* needle_tool_prompt of tools_json[0..tools_len), reading its record ts when there is one. */
static int tool_prompt(const needle_toolset *ts, const char *tools_json, size_t tools_len, const char *query,
                       const char *system, int plain_markers, char *out, size_t cap, needle_tok_span *plain,
                       size_t *n_plain, char *err, size_t errcap)
{
    needle_prompt_untrusted untrusted;
    int n = needle_toolset_render(ts, tools_json, tools_len, query, system, out, cap, err, errcap, &untrusted, NULL,
                                  0);
    if (n == NEEDLE_PROMPT_E_SPACE && cap > 0u)
        n = text_too_long(ts, tools_json, tools_len, query, system, out, cap, err, errcap);
    /* plain markers: the caller's parts (system, tools JSON, query) have markers off */
    *n_plain = 0;
    for (; n >= 0 && plain_markers && *n_plain < untrusted.n; ++*n_plain) {
        plain[*n_plain].start = untrusted.span[*n_plain].start;
        plain[*n_plain].len = untrusted.span[*n_plain].len;
    }
    return n;
}

int needle_tool_prompt(const char *tools_json, size_t tools_len, const char *query, const char *system,
                       int plain_markers, char *out, size_t cap, needle_tok_span *plain, size_t *n_plain,
                       char *err, size_t errcap)
{
    return tool_prompt(NULL, tools_json, tools_len, query, system, plain_markers, out, cap, plain, n_plain, err,
                       errcap);
}

int needle_tool_prompt_toolset(const needle_toolset *ts, const char *query, const char *system, int plain_markers,
                               char *out, size_t cap, needle_tok_span *plain, size_t *n_plain, char *err,
                               size_t errcap)
{
    return tool_prompt(ts, ts->json, ts->json_len, query, system, plain_markers, out, cap, plain, n_plain, err,
                       errcap);
}

/* ---- errors ------------------------------------------------------------------------------- */

static int say(char *err, size_t cap, const char *a, const char *b, int rc)   /* err = a + b */
{
    size_t at = 0;
    for (const char *s = a; s && *s; s++, at++) if (at + 1 < cap) err[at] = *s;
    for (const char *s = b; s && *s; s++, at++) if (at + 1 < cap) err[at] = *s;
    if (cap) err[at < cap ? at : cap - 1] = 0;
    return rc;
}

static char *u32_text(char *at, uint32_t v)   /* decimal digits at `at`; returns their end */
{
    char d[10];
    int n = 0;
    do { d[n++] = (char)('0' + v % 10u); v /= 10u; } while (v);
    while (n) *at++ = d[--n];
    return at;
}

static int too_long(char *err, size_t errcap)
{
    char a[16], b[16];
    *u32_text(a, NEEDLE_MAX_SEQ - 2u) = 0;
    *u32_text(b, NEEDLE_MAX_SEQ) = 0;
    static char msg[128];
    char *at = msg;
    const char *parts[5] = { "prompt too long: it must encode to at most ", a, " tokens (max_seq_len ", b,
                             " minus BOS and one new token)" };
    for (int i = 0; i < 5; i++) for (const char *c = parts[i]; *c; c++) *at++ = *c;
    *at = 0;
    return say(err, errcap, msg, NULL, -1);
}

/* BOS and the encoding of text[0..len) (plain: ranges whose markers are text) into ids. */
static int32_t encode(const char *text, size_t len, const needle_tok_span *plain, size_t n_plain, uint32_t *ids,
                      char *err, size_t errcap)
{
    ids[0] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode_spans(text, len, ids + 1, NEEDLE_MAX_SEQ - 2, plain, n_plain);
    if (n == NEEDLE_TOK_E_UTF8) return say(err, errcap, "prompt is not valid UTF-8", NULL, -1);
    if (n < 0) return too_long(err, errcap);
    return n + 1;
}

/* ---- streaming text ------------------------------------------------------------------------ */

static uint32_t ids[NEEDLE_MAX_SEQ];      /* the session's conversation, as fed and chosen */
static char text[NEEDLE_TOK_MAX_TEXT + 1];

typedef struct {
    needle_tok_stream stream;
    char out[NEEDLE_TOK_STREAM_OUT_MAX];
    needle_on_token cb;
    void *user;
} text_stream;

static int stream_token(void *ctx, uint32_t id)
{
    text_stream *s = ctx;
    size_t n = needle_tok_stream_push(&s->stream, id, s->out);
    return s->cb ? s->cb(s->user, id, s->out, n) : 0;
}

int32_t needle_generate(const char *prompt, uint32_t max_new, needle_on_token on_token, void *user,
                        char *err, size_t errcap)
{
    int32_t n = encode(prompt, strlen(prompt), NULL, 0, ids, err, errcap);
    if (n < 0) return -1;
    static text_stream s;
    needle_tok_stream_init(&s.stream);
    s.cb = on_token;
    s.user = user;
    needle_gen_hooks hooks = { NULL, stream_token, &s };
    needle_gen_result res;
    needle_reset();
    int rc = needle_generate_ids(ids, (uint32_t)n, max_new, needle_tok_piece_id("<|im_end|>", 10), &hooks, &res);
    if (rc < 0) return say(err, errcap, needle_error(), NULL, -1);
    if (rc) return rc;
    size_t tail = needle_tok_stream_finish(&s.stream, s.out);    /* bytes held back at the end */
    if (tail && on_token) {
        rc = on_token(user, res.last, s.out, tail);
        if (rc) return rc;
    }
    return (int32_t)res.generated;
}

/* ---- tool calls ---------------------------------------------------------------------------- */

static needle_grammar grammar;           /* the conversation's tools */
static needle_retrieval retrieval;       /* the five it rendered, where retrieval picked them */
static needle_toolset toolset;           /* the turn's tools, parsed once: what retrieval, the prompt */
static char tools_text[NEEDLE_TOK_MAX_TEXT + 1];   /* and the grammar read; its minified list */
static char facts[NEEDLE_TOK_MAX_TEXT + 1];
static uint32_t turn_at, turn_len;       /* the last turn's ids: ids[turn_at .. turn_at + turn_len) */
static uint32_t turn_max_new;            /* the conversation's budget per turn */
static uint32_t judge_ppm;               /* the conversation's minimum confidence (ppm) */
static int judge_overrides;              /* and overrides mode */
static int call_open;                    /* needle_call succeeded: needle_reply may follow */

static void keep_retrieval(needle_envelope *env, uint32_t tokens)
{
    env->retrieved_count = retrieval.n_chosen;
    env->retrieval_tokens = tokens;
    memcpy(env->retrieved, retrieval.chosen, sizeof env->retrieved);
}

int needle_call(const char *query, const needle_call_options *opt, needle_envelope *env, char *err,
                size_t errcap)
{
    static const needle_call_options defaults;
    if (!opt) opt = &defaults;
    call_open = 0;
    if (!query) return say(err, errcap, "query is NULL", NULL, NEEDLE_CALL_E_ENGINE);
    if (!(opt->min_confidence >= 0.0f && opt->min_confidence <= 1.0f))   /* NaN too */
        return say(err, errcap, "min_confidence must be a number from 0 to 1 (0 withholds nothing)", NULL,
                   NEEDLE_CALL_E_ENGINE);
    if (opt->overrides != NEEDLE_OVERRIDES_REFUSE && opt->overrides != NEEDLE_OVERRIDES_COMPLETE)
        return say(err, errcap, "overrides must be NEEDLE_OVERRIDES_REFUSE or NEEDLE_OVERRIDES_COMPLETE", NULL,
                   NEEDLE_CALL_E_ENGINE);
    judge_ppm = (uint32_t)((double)opt->min_confidence * 1e6 + 0.5);
    judge_overrides = opt->overrides;
    const char *tools = opt->tools_json, *system = opt->system;
    size_t tools_len = opt->tools_len;
    call_open = 0;
    memset(&retrieval, 0, sizeof retrieval);
    if (!tools) {
#ifdef NEEDLE_TOOLS_BUILTIN
        tools = needle_tools_json;
        tools_len = NEEDLE_TOOLS_JSON_BYTES;
#else
        return say(err, errcap, "no tools: pass a tool list (this firmware has none built in: scons tools=FILE)",
                   NULL, NEEDLE_CALL_E_TOOLS);
#endif
    }
    if (opt->date && !(system = needle_system_facts(system, opt->date, facts, sizeof facts)))
        return say(err, errcap, "the date and the system text are too long together", NULL, NEEDLE_CALL_E_ENGINE);
    needle_reset();
    needle_toolset_parse(&toolset, tools, tools_len, tools_text, sizeof tools_text);   /* its one pass */
    /* more than five tools and the embedding head: the five best for the query, over the list */
    size_t chosen_len;
    if (!needle_retrieve_toolset(&toolset, query, NULL, 0, &chosen_len, &retrieval, err, errcap))
        return NEEDLE_CALL_E_TOOLS;
    needle_tok_span plain[NEEDLE_PROMPT_MAX_UNTRUSTED];
    size_t n_plain;
    int n = needle_tool_prompt_toolset(&toolset, query, system, opt->plain_markers, text, sizeof text, plain,
                                       &n_plain, err, errcap);
    if (n == NEEDLE_PROMPT_E_TEXT) return NEEDLE_CALL_E_ENGINE;   /* the query or system text, not the list */
    if (n < 0) return NEEDLE_CALL_E_TOOLS;
    if (needle_call_grammar_toolset(&grammar, &toolset, opt->force_call, err, errcap)) return NEEDLE_CALL_E_TOOLS;
    if (needle_grammar_set_query(&grammar, query, strlen(query), opt->span_strings, err, errcap))
        return NEEDLE_CALL_E_ENGINE;     /* the query, not the list: nothing decoded */
    int32_t k = encode(text, (size_t)n, plain, n_plain, ids, err, errcap);
    if (k < 0) return NEEDLE_CALL_E_ENGINE;
    turn_at = 0;
    turn_max_new = opt->max_new ? opt->max_new : NEEDLE_CALL_MAX_NEW;
    if (needle_call_turn(&grammar, ids, (uint32_t)k, turn_max_new, NULL, NULL, env, err, errcap))
        return NEEDLE_CALL_E_ENGINE;
    needle_envelope_judge(env, judge_ppm, judge_overrides);
    keep_retrieval(env, retrieval.tokens);
    turn_len = env->prompt_tokens + env->generated_tokens;
    call_open = 1;
    return 0;
}

int needle_reply(const char *results, needle_envelope *env, char *err, size_t errcap)
{
    if (!call_open) return say(err, errcap, "no call to answer: needle_call() first", NULL, NEEDLE_CALL_E_ENGINE);
    /* the next turn's ids overwrite the <|im_end|> the last turn chose (the continuation feeds it first) */
    uint32_t at = turn_at + turn_len - 1u;
    int32_t k = needle_call_reply_ids(results, ids + at, NEEDLE_MAX_SEQ - at, err, errcap);
    if (k < 0) return NEEDLE_CALL_E_ENGINE;
    call_open = 0;
    if (needle_call_turn(&grammar, ids + at, (uint32_t)k, turn_max_new, NULL, NULL, env, err, errcap))
        return NEEDLE_CALL_E_ENGINE;
    needle_envelope_judge(env, judge_ppm, judge_overrides);
    turn_at = at;
    turn_len = env->prompt_tokens + env->generated_tokens;
    keep_retrieval(env, 0);        /* the conversation keeps its five; nothing embedded */
    call_open = 1;
    return 0;
}

void needle_call_write(const needle_envelope *env, void (*put)(void *user, const char *s, size_t n), void *user)
{
    needle_envelope_write(env, ids + turn_at, put, user);
}
