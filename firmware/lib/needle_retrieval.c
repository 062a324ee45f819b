/* needle_retrieval.c -- the best five tools for a query; see needle_retrieval.h and
 * docs/grammar.md, "Retrieval".  Twin of generator/tools/retrieval.py. */
#include "needle_retrieval.h"

#include <string.h>

#include "needle_model.h"
#include "needle_tokenizer.h"
#include "needle_session_internal.h"
#include "needle_tool_prompt.h"
#ifdef NEEDLE_TOOLS_BUILTIN
#include "needle_tools.h"     /* scons tools=FILE: the built-in list (and its embeddings) */
#endif

#if NEEDLE_CAN_RETRIEVE
#ifdef NEEDLE_HEAD_CONTRASTIVE
#define EMBED_DIM NEEDLE_HEAD_CONTRASTIVE_OUTPUTS   /* the head's output: a unit vector */
#else
#define EMBED_DIM NEEDLE_HEAD_EMBEDDING_OUTPUTS
#endif
#ifdef NEEDLE_TOOLS_EMBEDDED
_Static_assert(NEEDLE_TOOLS_EMBED_DIM == EMBED_DIM, "the built-in embeddings are this head's");
#endif
static float tool_vec[NEEDLE_RETRIEVE_TOOLS][EMBED_DIM], query_vec[EMBED_DIM];
static uint32_t embed_ids[NEEDLE_HEAD_TOKENS + 1u];

static int fail(char *err, size_t cap, const char *a, uint32_t x, const char *b, uint32_t y, const char *c)
{
    size_t at = 0;
    const char *parts[5] = { a, NULL, b, NULL, c };
    uint32_t nums[2] = { x, y };
    for (int k = 0; k < 5; k++) {
        char num[12];
        const char *s = parts[k];
        if (k == 1 || k == 3) {
            if (!parts[k + 1]) continue;
            uint32_t v = nums[k / 2];
            size_t n = 0;
            char tmp[12];
            do { tmp[n++] = (char)('0' + v % 10u); v /= 10u; } while (v);
            for (size_t i = 0; i < n; i++) num[i] = tmp[n - 1 - i];
            num[n] = 0;
            s = num;
        }
        for (; s && *s; s++, at++) if (at + 1 < cap) err[at] = *s;
    }
    if (cap) err[at < cap ? at : cap - 1] = 0;
    return -1;
}

/* BOS and text[0..n), markers plain, through the engine from position 0; the head's unit
 * vector into v.  0, or -1 with the message in err. */
static int embed(const char *text, size_t n, float *v, const char *what, uint32_t which, uint32_t *tokens,
                 char *err, size_t errcap)
{
    const needle_tok_span plain = { 0, n };
    embed_ids[0] = NEEDLE_BOS_ID;
    int32_t k = needle_tok_encode_spans(text, n, embed_ids + 1, NEEDLE_HEAD_TOKENS - 1u, &plain, 1);
    if (k < 0)
        return fail(err, errcap, what, which, " is longer than the embedding head's ", NEEDLE_HEAD_TOKENS,
                    " tokens (rebuild with a larger head_tokens=N)");
    needle_reset();
    *tokens += (uint32_t)k + 1u;
    if (!needle_prefill(embed_ids, (uint32_t)k + 1u)) return fail(err, errcap, needle_error(), 0, NULL, 0, NULL);
    uint32_t len;
    const float *e = needle_head(1u, &len);
    if (!e) return fail(err, errcap, needle_error(), 0, NULL, 0, NULL);
    memcpy(v, e, sizeof(float) * EMBED_DIM);
    return 0;
}

static float dot(const float *a, const float *b)   /* ascending order, as the reference sums */
{
    float s = 0.0f;
    for (uint32_t i = 0; i < EMBED_DIM; i++) s = s + a[i] * b[i];
    return s;
}
#endif

const char *needle_retrieve(const char *tools_json, size_t len, const char *query, char *out, size_t cap,
                            size_t *out_len, needle_retrieval *r, char *err, size_t errcap)
{
#if NEEDLE_CAN_RETRIEVE
    static char minified[NEEDLE_TOK_MAX_TEXT + 1];   /* the prompt with the whole list, minified */
    static needle_toolset ts;
    needle_toolset_parse(&ts, tools_json, len, minified, sizeof minified);
    return needle_retrieve_toolset(&ts, query, out, cap, out_len, r, err, errcap);
#else
    memset(r, 0, sizeof *r);
    *out_len = len;
    (void)query; (void)out; (void)cap; (void)err; (void)errcap;
    return tools_json;     /* no embedding head in this engine: every tool is rendered (n_chosen 0) */
#endif
}

const char *needle_retrieve_toolset(needle_toolset *ts, const char *query, char *out, size_t cap, size_t *out_len,
                                    needle_retrieval *r, char *err, size_t errcap)
{
    const char *tools_json = ts->json;
    memset(r, 0, sizeof *r);
    *out_len = ts->json_len;
#if NEEDLE_CAN_RETRIEVE
    /* the record is the render of an empty query into a NEEDLE_TOK_MAX_TEXT buffer: its outcome */
    if (ts->rc < 0) {
        fail(err, errcap, ts->err, 0, NULL, 0, NULL);
        return NULL;
    }
    const char *list = ts->list;                           /* "[...]", minified */
    if (ts->count > NEEDLE_RETRIEVE_TOOLS) {     /* never a pick from the first 32 only */
        fail(err, errcap, "", ts->count, " tools; a tool list holds at most ", NEEDLE_RETRIEVE_TOOLS,
             " (NEEDLE_RETRIEVE_TOOLS): split it");
        return NULL;
    }
    r->count = ts->count;
    if (r->count <= NEEDLE_RETRIEVE_TOP) return tools_json;
    /* the built-in list's tools were embedded at build time (needle_tools.c); any other list's now */
    const float (*vec)[EMBED_DIM] = (const float (*)[EMBED_DIM])tool_vec;
#ifdef NEEDLE_TOOLS_EMBEDDED
    if (ts->len == NEEDLE_TOOLS_JSON_BYTES && !memcmp(list, needle_tools_json, NEEDLE_TOOLS_JSON_BYTES))
        vec = needle_tools_embedding;
    else
#endif
    for (uint32_t i = 0; i < r->count; i++)
        if (embed(list + ts->start[i], ts->end[i] - ts->start[i], tool_vec[i], "tool ", i, &r->tokens, err, errcap))
            return NULL;
    if (embed(query, strlen(query), query_vec, "the query", 0, &r->tokens, err, errcap)) return NULL;
    needle_reset();
    /* the best NEEDLE_RETRIEVE_TOP: repeatedly the highest score not yet taken, the earlier tool on a tie */
    uint32_t taken = 0;
    float score[NEEDLE_RETRIEVE_TOOLS];
    for (uint32_t i = 0; i < r->count; i++) score[i] = dot(vec[i], query_vec);
    for (uint32_t k = 0; k < NEEDLE_RETRIEVE_TOP; k++) {
        uint32_t best = r->count;
        for (uint32_t i = 0; i < r->count; i++)
            if (!(taken >> i & 1u) && (best == r->count || score[i] > score[best])) best = i;
        taken |= 1u << best;
    }
    size_t at = 0;
    if (!out) {     /* in place: each object moves left, past what is written (a ',' parts the list's) */
        out = (char *)ts->list;
        cap = ts->len + 1u;
    }
    out[at++] = '[';
    for (uint32_t i = 0; i < r->count; i++) {
        if (!(taken >> i & 1u)) continue;
        const size_t m = ts->end[i] - ts->start[i];
        if (at + m + 2u > cap) {
            fail(err, errcap, "the five tools chosen do not fit the prompt", 0, NULL, 0, NULL);
            return NULL;
        }
        if (r->n_chosen) out[at++] = ',';
        memmove(out + at, list + ts->start[i], m);
        at += m;
        r->chosen[r->n_chosen++] = i;
    }
    out[at++] = ']';
    out[at] = 0;
    *out_len = at;
    needle_toolset_choose(ts, out, at, r->chosen, r->n_chosen);   /* the prompt and grammar read these five */
    return out;
#else
    (void)query; (void)out; (void)cap; (void)err; (void)errcap;
    return tools_json;     /* no embedding head in this engine: every tool is rendered (n_chosen 0) */
#endif
}
