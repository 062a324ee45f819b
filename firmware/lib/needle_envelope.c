/* needle_envelope.c -- the envelope of a tool-calling turn as JSON (needle_envelope_write; see
 * needle_tool_call.h and docs/grammar.md).  Twin of generator/tools/decode.py's envelope.
 */
#include <string.h>

#include "needle_model.h"
#include "needle_tokenizer.h"
#include "needle_tool_call.h"
#include "needle_tool_call_internal.h"

/* ---- the envelope as JSON ---------------------------------------------------------- */

static void puts_(const out_t *o, const char *s) { o->put(o->user, s, strlen(s)); }

static void put_u(const out_t *o, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do { tmp[sizeof tmp - 1 - n++] = (char)('0' + v % 10u); v /= 10u; } while (v);
    o->put(o->user, tmp + sizeof tmp - n, n);
}

/* A float in [0, 1] with 9 decimals, exactly rounded (half to even): Python's f"{x:.9f}". */
void needle_put_prob(const out_t *o, float x)
{
    uint32_t bits;
    memcpy(&bits, &x, 4);
    uint32_t e = bits >> 23 & 0xFFu, m = bits & 0x7FFFFFu;
    if (e) m |= 0x800000u; else e = 1;
    int shift = 150 - (int)e;                 /* x = m / 2^shift */
    uint64_t num = (uint64_t)m * 1000000000u, q, r = 0, half;
    if (shift <= 0) q = num << -shift;
    else if (shift >= 64) { q = 0; r = num ? 1 : 0; }
    else { q = num >> shift; r = num & ((1ull << shift) - 1u); }
    if (shift > 0 && shift < 64) {
        half = 1ull << (shift - 1);
        if (r > half || (r == half && (q & 1u))) q++;
    }
    put_u(o, q / 1000000000u);
    char frac[10];
    uint64_t f = q % 1000000000u;
    for (int i = 8; i >= 0; i--) { frac[i] = (char)('0' + f % 10u); f /= 10u; }
    frac[9] = 0;
    puts_(o, ".");
    puts_(o, frac);
}

/* A head's raw output: put_prob's exact 9 decimals with a sign; null beyond +-1e9 (or NaN). */
static void put_signed(const out_t *o, float x)
{
    if (!(x > -1e9f && x < 1e9f)) { puts_(o, "null"); return; }
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if (bits >> 31) puts_(o, "-");
    bits &= 0x7FFFFFFFu;
    memcpy(&x, &bits, 4);
    needle_put_prob(o, x);
}

static void put_rate(const out_t *o, double tokens, double s)
{
    if (s <= 0.0) { puts_(o, "null"); return; }
    uint64_t v = (uint64_t)(tokens / s * 10.0 + 0.5);
    put_u(o, v / 10u);
    char d[3] = { '.', (char)('0' + v % 10u), 0 };
    puts_(o, d);
}

/* text[0..n) escaped for the inside of a JSON string (canonical escapes). */
static void put_json_string(const out_t *o, const char *text, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)text[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) puts_(o, esc);
        else if (c < 0x20u) {
            char u[7] = { '\\', 'u', '0', '0', "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15], 0 };
            puts_(o, u);
        } else o->put(o->user, (const char *)&c, 1);
    }
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* The text of ids[0..n) as a JSON string, decoded piece by piece (no buffer for the whole
 * text); strip: without leading and trailing ASCII whitespace (the reasoning). */
static void put_decoded(const out_t *o, const uint32_t *ids, uint32_t n, int strip)
{
    static needle_tok_stream ts;
    static char chunk[NEEDLE_TOK_STREAM_OUT_MAX];
    char held[64];                 /* whitespace not yet known to be trailing */
    size_t nheld = 0, len;
    int started = 0;
    puts_(o, "\"");
    needle_tok_stream_init(&ts);
    for (uint32_t i = 0; i <= n; i++) {
        len = i < n ? needle_tok_stream_push(&ts, ids[i], chunk) : needle_tok_stream_finish(&ts, chunk);
        for (size_t k = 0; k < len; k++) {
            if (strip && is_ws(chunk[k])) {
                if (!started) continue;
                if (nheld == sizeof held) { put_json_string(o, held, nheld); nheld = 0; }
                held[nheld++] = chunk[k];
                continue;
            }
            started = 1;
            if (nheld) { put_json_string(o, held, nheld); nheld = 0; }
            put_json_string(o, chunk + k, 1);
        }
    }
    puts_(o, "\"");
}

void needle_envelope_write(const needle_envelope *env, const uint32_t *ids,
                           void (*put)(void *user, const char *s, size_t n), void *user)
{
    const out_t o = { put, user };
    const uint32_t n = env->prompt_tokens;
    puts_(&o, env->is_call ? "{\"type\":\"call\"" : "{\"type\":\"respond\"");
    if (!env->error_code) {
        puts_(&o, ",\"success\":true,\"error\":null,\"error_code\":0,\"function_calls\":");
    } else {   /* set by the caller (the service: a call the budget cut short) */
        puts_(&o, ",\"success\":false,\"error\":\"");
        put_json_string(&o, env->error, strlen(env->error));
        puts_(&o, "\",\"error_code\":");
        put_u(&o, env->error_code);
        puts_(&o, ",\"function_calls\":");
    }
    o.put(o.user, env->calls, env->calls_len);
    puts_(&o, ",\"reasoning\":");
    put_decoded(&o, ids + env->reasoning_from, env->reasoning_to - env->reasoning_from, 1);
    puts_(&o, ",\"confidence\":");
    needle_put_prob(&o, env->confidence);
    puts_(&o, env->head_confidence >= 0.0f ? ",\"confidence_source\":\"head+decoding\",\"confidence_head\":"
                                           : ",\"confidence_source\":\"decoding\",\"confidence_head\":null");
    if (env->head_confidence >= 0.0f) needle_put_prob(&o, env->head_confidence);
    puts_(&o, ",\"router\":");
    if (!env->has_router) puts_(&o, "null");
    for (int i = 0; env->has_router && i < 3; i++) {
        puts_(&o, i ? "," : "[");
        put_signed(&o, env->router[i]);
    }
    if (env->has_router) puts_(&o, "]");
    puts_(&o, ",\"overrides\":");
    put_u(&o, env->overrides);
    puts_(&o, ",\"override\":");
    if (!env->overrides) puts_(&o, "null");
    else {
        static const char *const places[] = { "list", "name", "key", "value" };
        const needle_override *v = &env->override;
        size_t len;
        const uint8_t *p = needle_tok_piece(v->wanted, &len);
        uint8_t b[NEEDLE_TOK_MAX_PIECE_BYTES + 1];
        puts_(&o, "{\"token\":");
        put_u(&o, v->token);
        puts_(&o, ",\"offset\":");
        put_u(&o, v->offset);
        puts_(&o, ",\"place\":\"");
        puts_(&o, places[v->place]);
        puts_(&o, v->tool ? "\",\"tool\":\"" : "\",\"tool\":null");
        if (v->tool) { put_json_string(&o, v->tool, v->tool_len); puts_(&o, "\""); }
        puts_(&o, v->arg ? ",\"argument\":\"" : ",\"argument\":null");
        if (v->arg) { put_json_string(&o, v->arg, v->arg_len); puts_(&o, "\""); }
        puts_(&o, ",\"wanted\":\"");
        if (needle_tok_piece_type(v->wanted) == NEEDLE_TOK_NORMAL) put_json_string(&o, (const char *)b, needle_piece_bytes(v->wanted, b));
        else put_json_string(&o, (const char *)p, len);
        puts_(&o, "\",\"allowed\":\"");
        put_json_string(&o, v->allowed, strlen(v->allowed));
        puts_(&o, v->place == NEEDLE_AT_VALUE ? "\",\"schema\":\"" : "\",\"schema\":null}");
        if (v->place == NEEDLE_AT_VALUE) { put_json_string(&o, v->schema, strlen(v->schema)); puts_(&o, "\"}"); }
    }
    puts_(&o, ",\"min_confidence\":");
    {
        char num[24];
        needle_units_text(num, sizeof num, (int64_t)env->min_confidence_ppm, 1000000u);
        puts_(&o, num);
    }
    puts_(&o, ",\"prefill_tps\":");
    put_rate(&o, (double)(n - env->prefix_tokens), env->prefill_s);   /* the tokens fed */
    puts_(&o, ",\"decode_tps\":");
    put_rate(&o, (double)env->generated_tokens, env->decode_s);
    puts_(&o, ",\"peak_ram_mb\":");
    {
        uint64_t bytes = (uint64_t)needle_state_bytes() + env->grammar_ram + sizeof(needle_gstate) * 2u;
        uint64_t milli = (bytes * 1000u + 524288u) / 1048576u;
        put_u(&o, milli / 1000u);
        char d[5] = { '.', (char)('0' + milli / 100u % 10u), (char)('0' + milli / 10u % 10u), (char)('0' + milli % 10u), 0 };
        puts_(&o, d);
    }
    puts_(&o, ",\"text\":");
    put_decoded(&o, ids + n, env->generated_tokens, 0);
    puts_(&o, ",\"prompt_tokens\":");
    put_u(&o, n);
    puts_(&o, ",\"prefix_tokens\":");
    put_u(&o, env->prefix_tokens);
    puts_(&o, ",\"retrieved\":");
    if (!env->retrieved_count) puts_(&o, "null");
    for (uint32_t i = 0; i < env->retrieved_count; i++) {
        puts_(&o, i ? "," : "[");
        put_u(&o, env->retrieved[i]);
    }
    if (env->retrieved_count) puts_(&o, "]");
    puts_(&o, ",\"retrieval_tokens\":");
    if (env->retrieved_count) put_u(&o, env->retrieval_tokens);
    else puts_(&o, "null");
    puts_(&o, ",\"generated_tokens\":");
    put_u(&o, env->generated_tokens);
    puts_(&o, ",\"grammar_checks\":");
    put_u(&o, env->grammar_checks);
    puts_(&o, ",\"grammar_ms\":");
    if (env->decode_s < 0) puts_(&o, "null");
    else put_rate(&o, env->grammar_s * 1000.0, 1.0);
    puts_(&o, ",\"decode_ms\":");
    if (env->decode_s < 0) puts_(&o, "null");
    else put_rate(&o, env->decode_s * 1000.0, 1.0);
    puts_(&o, "}");
}
