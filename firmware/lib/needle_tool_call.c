/* needle_tool_call.c -- one constrained tool-calling turn and the judge of its envelope (the
 * envelope as JSON: needle_envelope.c); see needle_tool_call.h and docs/grammar.md.  Twin of
 * generator/tools/decode.py. */
#if defined(__linux__)
#define _POSIX_C_SOURCE 199309L   /* clock_gettime */
#endif
#include "needle_tool_call.h"

#include <string.h>

#include "needle_model.h"
#include "needle_tokenizer.h"
#include "needle_tool_call_internal.h"
#include "needle_session_internal.h"
#ifdef NEEDLE_TOOLS_BUILTIN
#include "needle_tools.h"     /* scons tools=FILE: the built-in list and its tables in flash */
#endif

#if defined(__linux__)
#include <time.h>
static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#else
static double seconds(void) { return -1.0; }   /* no clock on bare metal: timings are null */
#endif

enum { PH_FREE, PH_CALL, PH_CLOSE, PH_END, PH_DONE };

typedef struct {
    const needle_grammar *g;
    needle_gstate st, next;
    int phase;
    uint32_t budget;        /* tokens that may still be chosen, the <|im_end|> included */
    uint32_t list_min;      /* bytes of the shortest call list */
    uint32_t json, next_len;  /* call-list bytes written so far; bytes of the piece tried */
    uint32_t n;             /* candidate ids: min(NEEDLE_OUT_VOCAB, pieces) */
    int32_t call_open, call_close, im_start, im_end;
    uint64_t checks;
    int over_budget;        /* allowed() refused the last id for the budget alone */
    int cut;                /* a better-ranked id than one chosen was refused for the budget alone */
    uint32_t wanted;        /* the model's own first choice at the last step (choose()) */
    uint32_t called;        /* mask of the tools the call list names */
} call_decoder;

static int32_t marker(const char *s) { return needle_tok_piece_id(s, strlen(s)); }

/* The bytes a piece writes into a call (needle_tool_call_internal.h). */
size_t needle_piece_bytes(uint32_t id, uint8_t *out)
{
    size_t len, n = 0;
    int type = needle_tok_piece_type(id);
    const uint8_t *p = needle_tok_piece(id, &len);
    if (type == NEEDLE_TOK_BYTE) {   /* "<0xHH>" */
        unsigned v = 0;
        for (size_t i = 3; i < 5; i++) v = v * 16u + (unsigned)(p[i] <= '9' ? p[i] - '0' : (p[i] | 0x20) - 'a' + 10);
        out[0] = (uint8_t)v;
        return 1;
    }
    if (type != NEEDLE_TOK_NORMAL) return 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == 0xE2 && i + 2 < len && p[i + 1] == 0x96 && p[i + 2] == 0x81) { out[n++] = ' '; i += 2; }
        else out[n++] = p[i];
    }
    return n;
}

/* Feed a piece's bytes (their count into *len): 0, or -1 when the grammar refuses them (or
 * the piece writes none). */
static int feed_piece(const needle_grammar *g, needle_gstate *s, uint32_t id, uint32_t *len)
{
    uint8_t b[NEEDLE_TOK_MAX_PIECE_BYTES + 1];
    size_t n = needle_piece_bytes(id, b);
    *len = (uint32_t)n;
    if (n == 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (needle_grammar_feed(g, s, b[i])) return -1;
    return 0;
}

/* Is id allowed now?  In the call phase the state after it is left in d->next.  An id that
 * only the budget refuses sets d->over_budget (the budget cut the answer short, choose()). */
static int allowed(call_decoder *d, uint32_t id)
{
    const uint32_t R = d->budget;
    d->over_budget = 0;
    switch (d->phase) {
    case PH_FREE:
        if ((int32_t)id == d->call_open) return (d->over_budget = R - 1u < d->list_min + 2u) == 0;
        if (d->g->force_call) return 0;
        if ((int32_t)id == d->im_start || (int32_t)id == d->im_end || (int32_t)id == d->call_close) return 0;
        {
            int t = needle_tok_piece_type(id);
            if (t == NEEDLE_TOK_UNKNOWN || t == NEEDLE_TOK_CONTROL) return 0;
        }
        return (d->over_budget = R - 1u < 1u + d->list_min + 2u) == 0;
    case PH_CALL:
        if ((int32_t)id == d->call_close) {
            if (!needle_grammar_done(&d->st)) return 0;
            return (d->over_budget = R - 1u < 1u) == 0;
        }
        d->checks++;
        d->next.depth = d->st.depth;
        memcpy(d->next.f, d->st.f, d->st.depth * sizeof d->st.f[0]);
        if (feed_piece(d->g, &d->next, id, &d->next_len)) return 0;
        {
            uint32_t rest = needle_grammar_min_bytes(d->g, &d->next);
            if (d->json + d->next_len + rest > NEEDLE_CALL_MAX_JSON) return 0;
            return (d->over_budget = rest + 2u > R - 1u) == 0;
        }
    case PH_CLOSE: return (int32_t)id == d->call_close;
    default: return (int32_t)id == d->im_end;
    }
}

/* Candidates are tried in the order (logit descending, id ascending) and only until one is
 * allowed.  Each pass over the logits collects the next BATCH of them in that order (a
 * small sorted array), so k rejections cost about k / BATCH passes, not k. */
#define BATCH 128u

static int before(const float *lg, uint32_t a, uint32_t b)   /* a comes before b */
{
    return lg[a] > lg[b] || (lg[a] == lg[b] && a < b);
}

/* The allowed id with the largest logit (the lowest id on a tie). */
static int choose(call_decoder *d, const float *lg, uint32_t *out)
{
    static uint32_t batch[BATCH];   /* static: small frames (the watches' stack guard is 1 KiB) */
    uint32_t n, last = 0;
    int have_last = 0;
    for (;;) {
        n = 0;
        for (uint32_t i = 0; i < d->n; i++) {
            if (have_last && !before(lg, last, i)) continue;       /* already tried */
            if (n == BATCH && !before(lg, i, batch[n - 1])) continue;
            uint32_t k = n < BATCH ? n++ : n - 1;                 /* insert i in order */
            for (; k > 0 && before(lg, i, batch[k - 1]); k--) batch[k] = batch[k - 1];
            batch[k] = i;
        }
        if (n == 0) return -1;
        if (!have_last) d->wanted = batch[0];   /* the arg-max over the vocabulary */
        for (uint32_t k = 0; k < n; k++) {
            if (allowed(d, batch[k])) { *out = batch[k]; return 0; }
            d->cut |= d->over_budget;
        }
        last = batch[n - 1];
        have_last = 1;
    }
}

/* ---- overrides: where the grammar bent the model (docs/grammar.md, "Acting on a call") ------ */

/* A bounded text: bytes past cap - 1 are dropped, and a character the cut would split is
 * dropped whole (so the text stays UTF-8); the Python twin cuts the same way. */
typedef struct {
    char *buf;
    size_t cap, len;
    int cut;               /* bytes were dropped */
    uint8_t first_dropped;
} text_buf;

static void tb_put(text_buf *t, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (t->len + 1u < t->cap) t->buf[t->len++] = s[i];
        else if (!t->cut) { t->cut = 1; t->first_dropped = (uint8_t)s[i]; }
    }
}

static void tb_str(text_buf *t, const char *s) { tb_put(t, s, strlen(s)); }

static void tb_u64(text_buf *t, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do { tmp[sizeof tmp - 1 - n++] = (char)('0' + v % 10u); v /= 10u; } while (v);
    tb_put(t, tmp + sizeof tmp - n, n);
}

static void tb_end(text_buf *t)
{
    if (t->cut && (t->first_dropped & 0xC0u) == 0x80u) {   /* the cut splits a character: drop it */
        while (t->len && ((uint8_t)t->buf[t->len - 1u] & 0xC0u) == 0x80u) t->len--;
        if (t->len) t->len--;
    }
    t->buf[t->len] = 0;
}

/* A bound in units of 1/scale as decimal text, trailing zeros dropped ("0.5", "-3", "30"). */
static void tb_units(text_buf *t, int64_t v, uint64_t scale)
{
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0) tb_str(t, "-");
    tb_u64(t, u / scale);
    uint64_t frac = u % scale;
    if (scale == 1u || !frac) return;
    char d[7];
    int n = 6;
    for (int i = 5; i >= 0; i--) { d[i] = (char)('0' + frac % 10u); frac /= 10u; }
    while (n > 0 && d[n - 1] == '0') n--;
    tb_str(t, ".");
    tb_put(t, d, (size_t)n);
}

void needle_units_text(char *out, size_t cap, int64_t v, uint64_t scale)
{
    text_buf t = { out, cap, 0, 0, 0 };
    tb_units(&t, v, scale);
    tb_end(&t);
}

#define BOUND 999999999999999999LL   /* needle_tool_grammar.c BIG: a missing bound */

/* What a value's schema allows, in words (generator/tools/grammar.py describe()). */
static void describe(const needle_grammar *g, const needle_gnode *n, char *out)
{
    text_buf t = { out, NEEDLE_OVERRIDE_TEXT, 0, 0, 0 };
    if (n->kind == NG_INT || n->kind == NG_NUM) {
        const uint64_t scale = n->kind == NG_INT ? 1u : 1000000u;
        const int lo = n->lo > -BOUND, hi = n->hi < BOUND;
        tb_str(&t, n->kind == NG_INT ? "an integer" : "a number");
        if (lo) tb_str(&t, hi ? " from " : " of at least ");
        else if (hi) tb_str(&t, " of at most ");
        if (lo) tb_units(&t, n->lo, scale);
        if (lo && hi) tb_str(&t, " to ");
        if (hi) tb_units(&t, n->hi, scale);
        if (n->mult != 1) { tb_str(&t, ", a multiple of "); tb_units(&t, n->mult, scale); }
    } else if (n->kind == NG_LIT) {
        static char all[NEEDLE_OVERRIDE_TEXT + 64];
        text_buf a = { all, sizeof all, 0, 0, 0 };
        tb_str(&a, "one of ");
        for (uint32_t i = 0; i < n->n_ref; i++) {
            if (i) tb_str(&a, ", ");
            tb_put(&a, g->text + g->ref[n->ref0 + i].off, g->ref[n->ref0 + i].len);
        }
        size_t len = a.len + (a.cut ? 1u : 0u), cut = 93;   /* longer than 96 bytes: cut to 93 and "..." */
        if (len <= 96u) tb_put(&t, all, a.len);
        else {
            while (cut && ((uint8_t)all[cut] & 0xC0u) == 0x80u) cut--;
            tb_put(&t, all, cut);
            tb_str(&t, "...");
        }
    } else if (n->kind == NG_STR) {
        tb_str(&t, "a string");
        if (n->max_len >= 0) {
            tb_str(&t, " of "); tb_u64(&t, (uint64_t)n->min_len); tb_str(&t, " to ");
            tb_u64(&t, (uint64_t)n->max_len); tb_str(&t, " characters");
        } else if (n->min_len > 0) {
            tb_str(&t, " of at least "); tb_u64(&t, (uint64_t)n->min_len); tb_str(&t, " characters");
        }
        if (n->n_item) tb_str(&t, " matching its pattern");
        if (g->query && (n->unique || (g->span_all && !n->n_item && n->max_len != 0)))
            tb_str(&t, " copied from the query");
    } else {
        tb_str(&t, n->kind == NG_ARR ? "an array" : "an object");
    }
    tb_end(&t);
}

/* A byte as an override reports it: printable ASCII as itself, else <0xHH>. */
static void tb_byte(text_buf *t, unsigned b)
{
    if (b >= 0x21u && b <= 0x7Eu) { char c = (char)b; tb_put(t, &c, 1); return; }
    char h[7] = { '<', '0', 'x', "0123456789ABCDEF"[b >> 4], "0123456789ABCDEF"[b & 15u], '>', 0 };
    tb_str(t, h);
}

/* The bytes the grammar takes in state *st, as runs ("1-3", "a-z0-9"); longer than 120
 * bytes: cut to 117 and "..." (generator/tools/grammar.py allowed_text()). */
static needle_gstate scratch;   /* a state to try bytes on (static: the watches' stack guard is 1 KiB) */

static void allowed_text(const needle_grammar *g, const needle_gstate *st, char *out)
{
    needle_gstate *t = &scratch;
    uint32_t ok[8] = { 0 };   /* a bit per byte the grammar takes */
    for (unsigned b = 0; b < 256u; b++) {
        t->depth = st->depth;
        memcpy(t->f, st->f, st->depth * sizeof st->f[0]);
        if (needle_grammar_feed(g, t, (uint8_t)b) == 0) ok[b >> 5] |= 1u << (b & 31u);
    }
#define OK(b) (ok[(b) >> 5] >> ((b) & 31u) & 1u)
    text_buf a = { out, 121u, 0, 0, 0 };   /* 120 characters kept (ASCII only): more are cut below */
    for (unsigned b = 0; b < 256u;) {
        if (!OK(b)) { b++; continue; }
        unsigned e = b;
        while (e + 1u < 256u && OK(e + 1u)) e++;
        tb_byte(&a, b);
        if (e - b >= 2u) { tb_str(&a, "-"); tb_byte(&a, e); }
        else for (unsigned c = b + 1u; c <= e; c++) tb_byte(&a, c);
        b = e + 1u;
    }
#undef OK
    if (a.cut) { a.len = 117u; a.cut = 0; a.cap = NEEDLE_OVERRIDE_TEXT; tb_str(&a, "..."); }
    tb_end(&a);
}

/* The grammar refused the model's first choice `want` at the state before the chosen token:
 * an override unless its first byte is one the grammar takes here (a longer token that runs
 * past the value, `Lagos"}`, is not one; the budget's refusals are the cut's). */
static void note_override(const call_decoder *d, uint32_t want, uint32_t made, needle_envelope *env)
{
    uint8_t b[NEEDLE_TOK_MAX_PIECE_BYTES + 1];
    if (needle_piece_bytes(want, b)) {
        scratch.depth = d->st.depth;
        memcpy(scratch.f, d->st.f, d->st.depth * sizeof d->st.f[0]);
        if (needle_grammar_feed(d->g, &scratch, b[0]) == 0) return;
    }
    if (env->overrides++) return;
    const needle_grammar *g = d->g;
    needle_override *o = &env->override;
    int32_t tool, prop;
    o->token = made;
    o->offset = d->json;
    o->wanted = want;
    o->place = needle_grammar_where(&d->st, &tool, &prop);
    if (tool >= 0) {
        const needle_gref *r = &g->ref[g->node[d->st.f[1].node].ref0 + (uint32_t)tool];
        o->tool = g->text + r->off + 1u;
        o->tool_len = r->len - 2u;
    }
    if (prop >= 0) {
        const needle_gref *r = &g->ref[g->node[d->st.f[2].node].ref0 + (uint32_t)prop];
        o->arg = g->text + r->off + 1u;
        o->arg_len = r->len - 2u;
    }
    allowed_text(g, &d->st, o->allowed);
    if (o->place == NEEDLE_AT_VALUE) describe(g, &g->node[d->st.f[d->st.depth - 1u].node], o->schema);
}

static void push(call_decoder *d, uint32_t id)
{
    d->budget--;
    if (d->phase == PH_FREE) {
        if ((int32_t)id == d->call_open) d->phase = PH_CALL;
    } else if (d->phase == PH_CALL) {
        if ((int32_t)id == d->call_close) d->phase = PH_END;
        else {
            d->st = d->next;   /* allowed() left both for id */
            d->json += d->next_len;
            if (d->st.depth > 1 && d->st.f[1].phase >= 2) d->called |= 1u << d->st.f[1].cur;   /* a tool named */
        }
    } else if (d->phase == PH_END) {
        d->phase = PH_DONE;
    }
}

static int fail(char *err, size_t cap, const char *a, uint32_t x, const char *b, uint32_t y, const char *c)
{
    char num[2][12];
    uint32_t v[2] = { x, y };
    for (int k = 0; k < 2; k++) {
        size_t n = 0;
        char tmp[12];
        do { tmp[n++] = (char)('0' + v[k] % 10u); v[k] /= 10u; } while (v[k]);
        for (size_t i = 0; i < n; i++) num[k][i] = tmp[n - 1 - i];
        num[k][n] = 0;
    }
    const char *parts[5] = { a, b ? num[0] : "", b ? b : "", c ? num[1] : "", c ? c : "" };
    size_t at = 0;
    for (int k = 0; k < 5; k++)
        for (const char *s = parts[k]; *s; s++, at++) if (at + 1 < cap) err[at] = *s;
    if (cap) err[at < cap ? at : cap - 1] = 0;
    return -1;
}

/* A message without numbers. */
#define FAIL(err, cap, msg) fail(err, cap, msg, 0, NULL, 0, NULL)

#ifdef NEEDLE_PREFIX_SNAPSHOT
/* The prefix snapshot scons tools=FILE links in (gen/needle_prefix.S, docs/snapshot.md). */
extern const uint8_t needle_prefix[], needle_prefix_end[];
#endif

int32_t needle_prefix_restore(const uint32_t *ids, uint32_t n)
{
#ifdef NEEDLE_PREFIX_SNAPSHOT
    if (needle_position() == 0)
        return needle_snapshot_load(needle_prefix, (size_t)(needle_prefix_end - needle_prefix), ids, n);
#endif
    (void)ids;
    (void)n;
    return 0;
}

/* needle_call_grammar of tools_json[0..len), reading its record ts when there is one. */
static int call_grammar(needle_grammar *g, const needle_toolset *ts, const char *tools_json, size_t len,
                        int force_call, char *err, size_t errcap)
{
#ifdef NEEDLE_TOOLS_BUILTIN
    const needle_grammar *builtin = needle_tools_grammar(force_call);
    if (builtin && len == NEEDLE_TOOLS_JSON_BYTES && !memcmp(tools_json, needle_tools_json, len)) {
        *g = *builtin;
        return 0;
    }
#endif
#if NEEDLE_GRAMMAR_RUNTIME
    return needle_grammar_compile_toolset(g, ts, tools_json, len, force_call, err, errcap);
#else
    (void)g; (void)ts; (void)tools_json; (void)len; (void)force_call;
    if (errcap) {
        static const char msg[] = "this firmware calls only its built-in tools (its board file sets [grammar] "
                                  "runtime = false)";
        size_t n = sizeof msg - 1u < errcap - 1u ? sizeof msg - 1u : errcap - 1u;
        memcpy(err, msg, n);
        err[n] = 0;
    }
    return -1;
#endif
}

int needle_call_grammar(needle_grammar *g, const char *tools_json, size_t len, int force_call, char *err,
                        size_t errcap)
{
    return call_grammar(g, NULL, tools_json, len, force_call, err, errcap);
}

int needle_call_grammar_toolset(needle_grammar *g, const needle_toolset *ts, int force_call, char *err,
                                size_t errcap)
{
    return call_grammar(g, ts, ts->json, ts->json_len, force_call, err, errcap);
}

int needle_call_turn(const needle_grammar *g, uint32_t *ids, uint32_t n, uint32_t max_new,
                     int (*on_token)(void *user, uint32_t id), void *user,
                     needle_envelope *env, char *err, size_t errcap)
{
    static call_decoder d;
    memset(env, 0, sizeof *env);
    memset(&d, 0, sizeof d);
    d.g = g;
    env->grammar_ram = needle_grammar_ram_bytes(g);
    d.call_open = marker("<tool_call>");
    d.call_close = marker("</tool_call>");
    d.im_start = marker("<|im_start|>");
    d.im_end = marker("<|im_end|>");
    if (d.call_open < 0 || d.call_close < 0 || d.im_end < 0)
        return FAIL(err, errcap, "the tokenizer has no <tool_call>, </tool_call> or <|im_end|> marker");
    d.n = NEEDLE_OUT_VOCAB < NEEDLE_TOK_N_PIECES ? NEEDLE_OUT_VOCAB : NEEDLE_TOK_N_PIECES;
    d.list_min = needle_grammar_list_min(g);
    if (n == 0 || needle_position() + n >= NEEDLE_MAX_SEQ)
        return fail(err, errcap, "the prompt takes ", n, " tokens: it must be shorter than max_seq_len ", NEEDLE_MAX_SEQ, "");
    uint32_t room = NEEDLE_MAX_SEQ - needle_position() - n;
    d.budget = max_new < room ? max_new : room;
    if (d.list_min > NEEDLE_CALL_MAX_JSON)
        return fail(err, errcap, "the shortest call takes ", d.list_min, " bytes but an envelope holds ",
                    NEEDLE_CALL_MAX_JSON, " (relax the tools' minLength or minItems)");
    uint32_t need = 1u + d.list_min + 2u;
    if (d.budget < need)
        return fail(err, errcap, "a call needs at least ", need, " tokens but only ", d.budget,
                    " are left (raise --max-new or shorten the prompt)");
    needle_grammar_start(g, &d.st);

    double t0 = seconds();
    int32_t cached = needle_prefix_restore(ids, n);
    if (cached < 0) return FAIL(err, errcap, needle_error());
    const float *lg = NULL;
    if ((uint32_t)cached < n && !(lg = needle_prefill(ids + cached, n - (uint32_t)cached)))
        return FAIL(err, errcap, needle_error());
    double t1 = seconds();
    uint32_t made = 0, from = 0, to = 0;
    int have_conf = 0, think_open = marker("<think>"), think_close = marker("</think>");
    for (;;) {
        uint32_t id;
        int in_call = d.phase == PH_CALL;
        double c0 = seconds();
        int none = choose(&d, lg, &id);
        if (c0 >= 0) env->grammar_s += seconds() - c0;
        if (none)
            return FAIL(err, errcap, "the grammar allows no token (a bug: please report the tool list)");
        if (in_call && id != d.wanted) note_override(&d, d.wanted, made, env);
        if (in_call) {
            float p = needle_token_prob(lg, id);
            if (!have_conf || p < env->confidence) env->confidence = p;
            have_conf = 1;
            if ((int32_t)id != d.call_close) {   /* the call list as written */
                uint8_t b[NEEDLE_TOK_MAX_PIECE_BYTES + 1];
                size_t k = needle_piece_bytes(id, b);
                for (size_t i = 0; i < k; i++) env->calls[env->calls_len++] = (char)b[i];   /* fits: allowed() */
            }
        }
        if (d.phase == PH_FREE) {
            if ((int32_t)id == think_open && !from) from = made + 1u;
            else if ((int32_t)id == think_close && from && !to) to = made;
        }
        push(&d, id);
        ids[n + made++] = id;
        if (on_token && on_token(user, id)) return -1;
        if (d.phase == PH_DONE) break;
        if (!(lg = needle_step(id))) return FAIL(err, errcap, needle_error());
    }
    /* the calibrated head over the prompt and the call (everything fed since reset), where
     * this engine keeps the cells of every one of those tokens (docs/grammar.md §5) */
    env->head_confidence = needle_confidence_head();
    if (env->head_confidence >= 0.0f && env->head_confidence < env->confidence) env->confidence = env->head_confidence;
#ifdef NEEDLE_HEAD_ROUTER
    if (needle_position() <= NEEDLE_HEAD_TOKENS) {   /* the router head, raw, under the same condition */
        uint32_t len;
        const float *r = needle_head(NEEDLE_HEAD_ROUTER, &len);
        if (r && len == 3u) { memcpy(env->router, r, sizeof env->router); env->has_router = 1; }
    }
#endif
    double t2 = seconds();
    env->calls[env->calls_len] = 0;
    env->is_call = env->calls_len > 2;
    env->prompt_tokens = n;
    env->prefix_tokens = (uint32_t)cached;
    env->generated_tokens = made;
    if (from && !to) {   /* a think block left open: up to <tool_call> */
        for (uint32_t i = from; i < made; i++) if ((int32_t)ids[n + i] == d.call_open) { to = i; break; }
    }
    env->reasoning_from = from ? n + from : 0;
    env->reasoning_to = from ? n + to : 0;
    env->prefill_s = t0 < 0 ? -1.0 : t1 - t0;
    env->decode_s = t0 < 0 ? -1.0 : t2 - t1;
    env->grammar_checks = d.checks;
    env->cut = !d.cut ? NEEDLE_CUT_NONE : room <= max_new ? NEEDLE_CUT_CONTEXT : NEEDLE_CUT_MAX_NEW;
    env->max_new = max_new;
    env->room = room;
    env->tools_called = d.called;
    env->tool_ppm = g->tool_ppm;
    return 0;
}

/* ---- the judge: may the device act on the call? ------------------------------------------- */

static void tb_sink(void *user, const char *s, size_t n) { tb_put(user, s, n); }


int needle_parse_overrides(const char *text, size_t len, int *mode)
{
    if (len == 6 && !memcmp(text, "refuse", 6)) { *mode = NEEDLE_OVERRIDES_REFUSE; return 0; }
    if (len == 8 && !memcmp(text, "complete", 8)) { *mode = NEEDLE_OVERRIDES_COMPLETE; return 0; }
    return -1;
}

void needle_envelope_judge(needle_envelope *env, uint32_t min_confidence_ppm, int overrides)
{
    text_buf t = { env->why, sizeof env->why, 0, 0, 0 };
    const out_t o = { tb_sink, &t };
    const needle_override *v = &env->override;
    {   /* the largest over the tools called of each one's own minimum, else the caller's */
        uint32_t most = 0;
        int any = 0;
        for (uint32_t t = 0; t < 32u; t++) {
            if (!(env->tools_called >> t & 1u)) continue;
            uint32_t own = env->tool_ppm && env->tool_ppm[t] >= 0 ? (uint32_t)env->tool_ppm[t] : min_confidence_ppm;
            if (!any || own > most) most = own;
            any = 1;
        }
        if (any) min_confidence_ppm = most;
    }
    env->min_confidence_ppm = min_confidence_ppm;
    env->error_code = 0;
    env->error = NULL;
    if (env->cut == NEEDLE_CUT_MAX_NEW) {
        env->error_code = NEEDLE_E_CUT_MAX_NEW;
        tb_str(&t, "the token budget (max_new ");
        tb_u64(&t, env->max_new);
        tb_str(&t, ") ran out in the middle of the call, which was cut short: raise max_new");
    } else if (env->cut == NEEDLE_CUT_CONTEXT) {
        env->error_code = NEEDLE_E_CUT_CONTEXT;
        tb_str(&t, "the context ran out in the middle of the call (");
        tb_u64(&t, env->room);
        tb_str(&t, " tokens were free for the answer), which was cut short: shorten the prompt or start a new session");
    } else if (env->is_call && overrides == NEEDLE_OVERRIDES_REFUSE && env->overrides && v->place != NEEDLE_AT_LIST) {
        env->error_code = NEEDLE_E_OVERRIDE;
        size_t len;
        const uint8_t *p = needle_tok_piece(v->wanted, &len);
        tb_str(&t, "the grammar overrode the model's \"");
        if (needle_tok_piece_type(v->wanted) == NEEDLE_TOK_NORMAL) {
            uint8_t b[NEEDLE_TOK_MAX_PIECE_BYTES + 1];
            tb_put(&t, (const char *)b, needle_piece_bytes(v->wanted, b));
        } else tb_put(&t, (const char *)p, len);
        if (v->place == NEEDLE_AT_VALUE) {
            tb_str(&t, "\" in \"");
            tb_put(&t, v->arg, v->arg_len);
            tb_str(&t, "\" of ");
            tb_put(&t, v->tool, v->tool_len);
            tb_str(&t, " (the schema allows ");
            tb_str(&t, v->schema);
            tb_str(&t, "): the call was refused; ");
        } else if (v->place == NEEDLE_AT_KEY) {
            tb_str(&t, "\" in the arguments of ");
            tb_put(&t, v->tool, v->tool_len);
            tb_str(&t, " (no such argument, or one is missing): the call was refused; ");
        } else {
            tb_str(&t, "\" in the tool name (the request needs a tool the list does not have): the call was refused; "
                       "add the tool, or answer the user without a call");
        }
        if (v->place != NEEDLE_AT_NAME)
            tb_str(&t, "ask again within the tools' schema, or use overrides complete to take the grammar's value");
    } else if (env->is_call && (double)env->confidence * 1e6 < (double)min_confidence_ppm) {
        env->error_code = NEEDLE_E_LOW_CONFIDENCE;
        tb_str(&t, "the call's confidence ");
        needle_put_prob(&o, env->confidence);
        tb_str(&t, " is below the minimum ");
        tb_units(&t, (int64_t)min_confidence_ppm, 1000000u);
        tb_str(&t, ": the call was withheld; confirm it with the user, or lower the minimum confidence");
    }
    tb_end(&t);
    if (env->error_code) env->error = env->why;
}

/* ---- the next turn: the caller's results ---------------------------------------------- */

#define REPLY_HEAD "<|im_end|>\n<|im_start|>user\n<tool_result>"
#define REPLY_TAIL "</tool_result><|im_end|>\n<|im_start|>assistant\n"

int32_t needle_call_reply_ids(const char *results, uint32_t *ids, uint32_t cap, char *err, size_t errcap)
{
    static char text[NEEDLE_TOK_MAX_TEXT + 1];
    const size_t head = sizeof REPLY_HEAD - 1u, tail = sizeof REPLY_TAIL - 1u, n = strlen(results);
    if (n > NEEDLE_TOK_MAX_TEXT - head - tail)
        return fail(err, errcap, "the results are too long: at most ", (uint32_t)(NEEDLE_TOK_MAX_TEXT - head - tail),
                    " bytes", 0, NULL);
    memcpy(text, REPLY_HEAD, head);
    memcpy(text + head, results, n);
    memcpy(text + head + n, REPLY_TAIL, tail);
    const needle_tok_span plain = { head, n };     /* the caller's text: markers off */
    int32_t k = needle_tok_encode_spans(text, head + n + tail, ids, cap, &plain, 1);
    if (k == NEEDLE_TOK_E_UTF8) return FAIL(err, errcap, "the results are not valid UTF-8");
    if (k < 0) return FAIL(err, errcap, "the results do not fit the context (max_seq_len)");
    /* the dummy-prefix piece of a separate encoding: not there when the conversation is
     * encoded at once (docs/grammar.md, "Multi-turn") */
    int32_t space = needle_tok_piece_id("\xe2\x96\x81", 3);
    if (NEEDLE_TOK_ADD_DUMMY_PREFIX && k > 0 && space >= 0 && ids[0] == (uint32_t)space) {
        memmove(ids, ids + 1, (size_t)(k - 1) * sizeof ids[0]);
        k--;
    }
    return k;
}
