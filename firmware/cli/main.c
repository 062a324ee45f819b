/* needle: the command-line front end of a generated engine (Linux boards and the host).
 *
 *   needle --prompt TEXT [--max-new N] [--ids]  greedy continuation, streamed (--ids: as token ids)
 *   needle --tools FILE.json --query TEXT       tool-calling prompt (prompt-and-tokenizer.md §4)
 *          [--system TEXT] [--max-new N]
 *   needle --tokens 2,17,5 [--logits FILE]      teacher-forced; logits as raw LE float32 [T][vocab]
 *   needle --info                               geometry, memory and provenance
 *   needle --bench N                            prefill/decode speed (see README, Benchmarks)
 *
 * Every failure prints one line on stderr and exits non-zero: 2 for a usage or input error,
 * 3 when the linked archive is not the one the engine was generated for, 1 for I/O errors.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "needle_model.h"
#include "needle_tokenizer.h"
#include "tool_prompt.h"
#include "bench.h"

#define TOOLS_FILE_MAX (64u * 1024u)
#define PROMPT_MAX     NEEDLE_TOK_MAX_TEXT

static uint32_t ids[NEEDLE_MAX_SEQ];
static int print_ids;   /* --ids: print generated token ids instead of text */
static char tools_json[TOOLS_FILE_MAX + 1];
static char prompt[PROMPT_MAX + 1];

static int fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("needle: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+') return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > max) return -1;
    *out = (uint32_t)v;
    return 0;
}

static uint32_t argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++) if (v[i] > v[best]) best = i;
    return best;
}

static void print_info(void)
{
    printf("needle-fw engine %s, Needle %d, board %s\n", NEEDLE_GENERATOR_VERSION, NEEDLE_GENERATION, NEEDLE_BOARD);
    printf("archive   sha256 %s, %u bytes\n", NEEDLE_ARCHIVE_SHA256, NEEDLE_ARCHIVE_BYTES);
    printf("geometry  vocab %u, d %u, layers %u, heads %u/%u x %u, hada_n %u, lanes %u, "
           "engram sites %u, max_seq %u\n", NEEDLE_VOCAB, NEEDLE_D_MODEL, NEEDLE_LAYERS, NEEDLE_HEADS,
           NEEDLE_KV_HEADS, NEEDLE_HEAD_DIM, NEEDLE_HADA_N, NEEDLE_LANES, NEEDLE_ENGRAM_SITES, NEEDLE_MAX_SEQ);
    printf("kv cache  window %u, %u bits, %u bytes\n", NEEDLE_KV_WINDOW, NEEDLE_KV_BITS, NEEDLE_KV_BYTES);
    printf("memory    engine state %zu bytes (static), archive %u bytes (linked, read in place)\n",
           needle_state_bytes(), NEEDLE_ARCHIVE_BYTES);
}

/* Teacher-forced run of a comma-separated id list; optionally dump every position's logits. */
static int run_tokens(const char *list, const char *logits_path)
{
    uint32_t n = 0;
    const char *p = list;
    char item[16];
    while (*p) {
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item) return fail(2, "--tokens: malformed list near \"%.20s\"", p);
        memcpy(item, p, len);
        item[len] = 0;
        if (n >= NEEDLE_MAX_SEQ) return fail(2, "--tokens: more than max_seq_len (%u) ids", NEEDLE_MAX_SEQ);
        if (parse_u32(item, NEEDLE_VOCAB - 1, &ids[n]))
            return fail(2, "--tokens: \"%s\" is not a token id in 0..%u", item, NEEDLE_VOCAB - 1);
        n++;
        p += len;
        if (*p == ',' && !*++p) return fail(2, "--tokens: list ends with a comma");
    }
    if (n == 0) return fail(2, "--tokens: empty list");
    FILE *out = NULL;
    if (logits_path && !(out = fopen(logits_path, "wb")))
        return fail(1, "cannot write %s: %s", logits_path, strerror(errno));
    for (uint32_t t = 0; t < n; t++) {
        const float *lg = needle_step(ids[t]);
        if (!lg) { if (out) fclose(out); return fail(2, "%s", needle_error()); }
        if (out) {
            static uint8_t le[NEEDLE_VOCAB * 4];   /* little-endian on every host */
            for (uint32_t v = 0; v < NEEDLE_VOCAB; v++) {
                uint32_t b;
                memcpy(&b, &lg[v], 4);
                le[4 * v] = (uint8_t)b; le[4 * v + 1] = (uint8_t)(b >> 8);
                le[4 * v + 2] = (uint8_t)(b >> 16); le[4 * v + 3] = (uint8_t)(b >> 24);
            }
            if (fwrite(le, 1, sizeof le, out) != sizeof le) {
                fclose(out);
                return fail(1, "cannot write %s: %s", logits_path, strerror(errno));
            }
        } else {
            printf("%s%" PRIu32, t ? "," : "", argmax(lg, NEEDLE_VOCAB));
        }
    }
    if (out && fclose(out)) return fail(1, "cannot write %s: %s", logits_path, strerror(errno));
    if (!out) printf("\n");
    return 0;
}

/* Encode a prompt, prefill it, and stream the greedy continuation (needle2-model.md §8). */
static int generate(const char *text, size_t len, uint32_t max_new)
{
    if (len == 0) return fail(2, "empty prompt");
    ids[0] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode(text, len, ids + 1, NEEDLE_MAX_SEQ - 2);
    if (n == NEEDLE_TOK_E_UTF8) return fail(2, "prompt is not valid UTF-8");
    if (n < 0) return fail(2, "prompt too long: it must encode to at most %u tokens (max_seq_len %u "
                              "minus BOS and one new token)", NEEDLE_MAX_SEQ - 2, NEEDLE_MAX_SEQ);
    uint32_t total = (uint32_t)n + 1, max_len = total + max_new;
    if (max_len > NEEDLE_MAX_SEQ) max_len = NEEDLE_MAX_SEQ;
    const float *lg = NULL;
    for (uint32_t t = 0; t < total; t++)
        if (!(lg = needle_step(ids[t]))) return fail(2, "%s", needle_error());
    needle_tok_stream stream;
    needle_tok_stream_init(&stream);
    static char out[NEEDLE_TOK_STREAM_OUT_MAX];
    for (uint32_t made = 0; made < max_new; made++) {
        uint32_t next = argmax(lg, NEEDLE_VOCAB);
        if (next == NEEDLE_EOS_ID) break;
        if (print_ids) printf("%s%" PRIu32, made ? "," : "", next);
        else fwrite(out, 1, needle_tok_stream_push(&stream, next, out), stdout);
        fflush(stdout);
        if (total + made + 1 >= max_len) break;
        if (!(lg = needle_step(next))) return fail(2, "%s", needle_error());
    }
    if (!print_ids) fwrite(out, 1, needle_tok_stream_finish(&stream, out), stdout);
    printf("\n");
    return 0;
}

static int read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return fail(2, "cannot read %s: %s", path, strerror(errno));
    *len = fread(buf, 1, cap + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) return fail(2, "cannot read %s", path);
    if (*len > cap) return fail(2, "%s is larger than %zu bytes", path, cap);
    buf[*len] = 0;
    return 0;
}

static void usage(void)
{
    fputs("usage: needle --prompt TEXT [--max-new N] [--ids]\n"
          "       needle --tools FILE.json --query TEXT [--system TEXT] [--max-new N] [--ids]\n"
          "       needle --tokens ID,ID,... [--logits FILE]\n"
          "       needle --info | --bench N | --help\n", stdout);
}

int main(int argc, char **argv)
{
    const char *text = NULL, *tools = NULL, *query = NULL, *system = NULL, *tokens = NULL, *logits = NULL;
    uint32_t max_new = 96, bench = 0;
    int info = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--prompt") ? &text : !strcmp(a, "--tools") ? &tools
                          : !strcmp(a, "--query") ? &query : !strcmp(a, "--system") ? &system
                          : !strcmp(a, "--tokens") ? &tokens : !strcmp(a, "--logits") ? &logits : NULL;
        if (slot || !strcmp(a, "--max-new") || !strcmp(a, "--bench")) {
            if (i + 1 >= argc) return fail(2, "%s needs a value (see --help)", a);
            const char *v = argv[++i];
            if (slot) *slot = v;
            else if (!strcmp(a, "--max-new") ? parse_u32(v, NEEDLE_MAX_SEQ, &max_new) || max_new == 0
                                            : parse_u32(v, NEEDLE_MAX_SEQ, &bench) || bench == 0)
                return fail(2, "%s wants an integer between 1 and %u, not \"%s\"", a, NEEDLE_MAX_SEQ, v);
        } else if (!strcmp(a, "--info")) {
            info = 1;
        } else if (!strcmp(a, "--ids")) {
            print_ids = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else {
            return fail(2, "unknown option \"%s\" (see --help)", a);
        }
    }
    int modes = (text != NULL) + (tools != NULL || query != NULL) + (tokens != NULL) + info + (bench != 0);
    if (modes != 1)
        return fail(2, "choose exactly one of --prompt, --tools/--query, --tokens, --info, --bench (see --help)");
    if (logits && !tokens) return fail(2, "--logits goes with --tokens");
    if (system && !tools) return fail(2, "--system goes with --tools and --query");
    if (print_ids && (tokens || info || bench)) return fail(2, "--ids goes with --prompt or --tools");

    if (needle_boot()) return fail(3, "%s", needle_error());
    if (info) { print_info(); return 0; }
    if (bench) return needle_bench(bench);
    if (tokens) return run_tokens(tokens, logits);
    if (tools || query) {
        if (!tools || !query) return fail(2, "--tools and --query go together");
        size_t len = 0;
        int rc = read_file(tools, tools_json, TOOLS_FILE_MAX, &len);
        if (rc) return rc;
        char err[256];
        int n = needle_render_prompt(tools_json, len, query, system, prompt, sizeof prompt, err, sizeof err);
        if (n < 0) return fail(2, "%s: %s", tools, err);
        return generate(prompt, (size_t)n, max_new);
    }
    return generate(text, strlen(text), max_new);
}
