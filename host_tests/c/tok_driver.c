/* tok_driver.c -- host test driver of the generated tokenizer and of tool_prompt.c.
 *
 *   tok_driver encode FILE            FILE: one input per line, hex of its UTF-8 bytes.
 *                                     Prints per line the ids (space-separated), or E<code>.
 *   tok_driver decode FILE            FILE: one id list per line (decimal, space-separated).
 *                                     Prints per line the hex of the decoded text; also
 *                                     checks the streaming decoder and every truncation
 *                                     size against it (prints BAD ... on a mismatch).
 *   tok_driver prompt TOOLS QHEX SHEX TOOLS: file with the tool list; QHEX/SHEX: hex of the
 *                                     query and system ("-" for no system).  Prints
 *                                     "OK <hex of prompt>" or "ERR <code> <message>".
 *   tok_driver bench FILE REPS        Encode FILE's bytes REPS times; prints ids and ns/byte.
 *   tok_driver limits                 Error paths of needle_tok_encode and the piece queries;
 *                                     prints OK or BAD <bits>.
 *   tok_driver pieces                 Per piece: type, score bits (hex), surface (hex).
 *
 * Not part of the firmware: uses stdio, time and a large static buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "needle_tokenizer.h"
#include "needle_tool_prompt.h"

#define BUF_BYTES (4u << 20)

static char file_buf[BUF_BYTES];
static char text_buf[BUF_BYTES];
static char out_buf[BUF_BYTES];
static char out2_buf[BUF_BYTES];
static uint32_t id_buf[1u << 20];

static size_t read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    n = fread(buf, 1, cap - 1u, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t unhex(const char *h, size_t n, char *out)
{
    size_t i, k = 0;
    for (i = 0; i + 1u < n; i += 2u) out[k++] = (char)(hexval(h[i]) * 16 + hexval(h[i + 1u]));
    return k;
}

static void print_hex(const char *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) printf("%02x", (unsigned)(unsigned char)p[i]);
}

/* Next line of buf[*pos..n) (without its LF); returns 0 at the end. */
static int next_line(char *buf, size_t n, size_t *pos, char **line, size_t *len)
{
    size_t start = *pos, i = start;
    if (start >= n) return 0;
    while (i < n && buf[i] != '\n') i++;
    *line = buf + start;
    *len = i - start;
    *pos = i < n ? i + 1u : n;
    return 1;
}

static int cmd_encode(const char *path)
{
    size_t n = read_file(path, file_buf, sizeof file_buf), pos = 0, len;
    char *line;
    while (next_line(file_buf, n, &pos, &line, &len)) {
        size_t tl = unhex(line, len, text_buf);
        int32_t r = needle_tok_encode(text_buf, tl, id_buf, sizeof id_buf / sizeof id_buf[0]);
        if (r < 0) {
            printf("E%d\n", (int)r);
            continue;
        }
        {
            int32_t i;
            for (i = 0; i < r; i++) printf(i ? " %u" : "%u", (unsigned)id_buf[i]);
        }
        printf("\n");
    }
    return 0;
}

/* snprintf rule: part holds the first min(n, cap-1) bytes of full, then a NUL, and the
 * byte after that NUL is untouched ('x'). */
static int good_prefix(const char *full, size_t n, const char *part, size_t cap)
{
    size_t m;
    if (cap == 0) return 1;
    m = n < cap - 1u ? n : cap - 1u;
    return memcmp(full, part, m) == 0 && part[m] == '\0' && part[m + 1u] == 'x';
}

static int cmd_decode(const char *path)
{
    size_t n = read_file(path, file_buf, sizeof file_buf), pos = 0, len;
    char *line;
    while (next_line(file_buf, n, &pos, &line, &len)) {
        size_t count = 0, full, sn = 0, i;
        char *p = line, *end = line + len;
        needle_tok_stream st;
        static char piece[NEEDLE_TOK_STREAM_OUT_MAX];
        while (p < end) {
            char *q;
            unsigned long v = strtoul(p, &q, 10);
            if (q == p) break;
            id_buf[count++] = (uint32_t)v;
            p = q;
        }
        full = needle_tok_decode(id_buf, count, out_buf, sizeof out_buf);
        if (full >= sizeof out_buf || out_buf[full] != '\0') {
            printf("BAD length\n");
            continue;
        }
        /* streaming decoder == decode */
        needle_tok_stream_init(&st);
        for (i = 0; i < count; i++) {
            size_t k = needle_tok_stream_push(&st, id_buf[i], piece);
            if (k > NEEDLE_TOK_STREAM_OUT_MAX) {
                printf("BAD stream bound\n");
                break;
            }
            memcpy(out2_buf + sn, piece, k);
            sn += k;
        }
        sn += needle_tok_stream_finish(&st, out2_buf + sn);
        if (sn != full || memcmp(out2_buf, out_buf, full) != 0) {
            printf("BAD stream\n");
            continue;
        }
        /* truncation: same return value, a NUL-terminated prefix of whole characters */
        {
            size_t caps[6], c;
            caps[0] = 0; caps[1] = 1; caps[2] = full / 2u; caps[3] = full; caps[4] = full + 1u;
            caps[5] = full > 2u ? full - 2u : 2u;
            for (c = 0; c < 6u; c++) {
                size_t r;
                memset(out2_buf, 'x', full + 2u);
                r = needle_tok_decode(id_buf, count, caps[c] ? out2_buf : NULL, caps[c]);
                if (r != full || !good_prefix(out_buf, full, out2_buf, caps[c])) {
                    printf("BAD cap %zu\n", caps[c]);
                    break;
                }
            }
            if (c < 6u) continue;
        }
        print_hex(out_buf, full);
        printf("\n");
    }
    return 0;
}

static int cmd_prompt(const char *tools_path, const char *qhex, const char *shex)
{
    static char query[1u << 16], system[1u << 16];
    char err[256];
    size_t tl = read_file(tools_path, file_buf, sizeof file_buf);
    size_t ql = unhex(qhex, strlen(qhex), query);
    int r;
    query[ql] = '\0';
    if (strcmp(shex, "-") != 0) {
        size_t sl = unhex(shex, strlen(shex), system);
        system[sl] = '\0';
    }
    r = needle_render_prompt(file_buf, tl, query, strcmp(shex, "-") ? system : NULL, out_buf,
                             sizeof out_buf, err, sizeof err);
    if (r < 0) {
        printf("ERR %d %s\n", r, err);
        return 0;
    }
    if ((size_t)r != strlen(out_buf)) {
        printf("BAD length\n");
        return 0;
    }
    /* too small a buffer: E_SPACE naming the exact size needed; never writes past cap */
    {
        char small[64];
        int r2;
        size_t cap = (size_t)r < sizeof small ? (size_t)r : sizeof small;
        memset(small, 'x', sizeof small);
        r2 = needle_render_prompt(file_buf, tl, query, strcmp(shex, "-") ? system : NULL,
                                  small, cap, err, sizeof err);
        if (r2 != NEEDLE_PROMPT_E_SPACE || (cap < sizeof small && small[cap] != 'x')) {
            printf("BAD space %d\n", r2);
            return 0;
        }
        r2 = needle_render_prompt(file_buf, tl, query, strcmp(shex, "-") ? system : NULL,
                                  out2_buf, (size_t)r + 1u, err, sizeof err);
        if (r2 != r || memcmp(out2_buf, out_buf, (size_t)r + 1u) != 0) {
            printf("BAD exact fit %d\n", r2);
            return 0;
        }
    }
    printf("OK ");
    print_hex(out_buf, (size_t)r);
    printf("\n");
    return 0;
}

static int cmd_bench(const char *path, long reps)
{
    size_t n = read_file(path, file_buf, sizeof file_buf);
    int32_t r = 0;
    long i;
    clock_t t0 = clock(), t1;
    for (i = 0; i < reps; i++) r = needle_tok_encode(file_buf, n, id_buf, 1u << 20);
    t1 = clock();
    printf("bytes %zu ids %d reps %ld ns_per_encode %.0f ns_per_byte %.1f\n", n, (int)r, reps,
           1e9 * (double)(t1 - t0) / CLOCKS_PER_SEC / (double)reps,
           1e9 * (double)(t1 - t0) / CLOCKS_PER_SEC / (double)reps / (double)n);
    return 0;
}

static int cmd_pieces(void)
{
    uint32_t i;
    for (i = 0; i < needle_tok_n_pieces(); i++) {
        size_t len = 0;
        const uint8_t *p = needle_tok_piece(i, &len);
        float f = needle_tok_piece_score(i);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        printf("%d %08x ", needle_tok_piece_type(i), (unsigned)bits);
        print_hex((const char *)p, len);
        printf("\n");
    }
    return 0;
}

static int cmd_limits(void)
{
    static char big[NEEDLE_TOK_MAX_TEXT + 1u];
    int bad = 0;
    int32_t r;
    memset(big, 'a', sizeof big);
    if (needle_tok_encode(big, sizeof big, id_buf, 1u << 20) != NEEDLE_TOK_E_TOO_LONG) bad |= 1;
    r = needle_tok_encode(big, NEEDLE_TOK_MAX_TEXT, id_buf, 1u << 20);
    if (r <= 0) bad |= 2;
    if (r > 0 && needle_tok_encode(big, NEEDLE_TOK_MAX_TEXT, id_buf, (size_t)r - 1u)
                 != NEEDLE_TOK_E_TOO_LONG) bad |= 4;
    if (r > 0 && needle_tok_encode(big, NEEDLE_TOK_MAX_TEXT, NULL, 0) != NEEDLE_TOK_E_TOO_LONG)
        bad |= 8;
    if (needle_tok_encode("ab\xC0\x80", 4, id_buf, 16) != NEEDLE_TOK_E_UTF8) bad |= 16;
    if (needle_tok_encode("\xED\xA0\x80", 3, id_buf, 16) != NEEDLE_TOK_E_UTF8) bad |= 32;
    if (needle_tok_encode("\xF4\x90\x80\x80", 4, id_buf, 16) != NEEDLE_TOK_E_UTF8) bad |= 64;
    if (needle_tok_encode("x\xE2\x96", 3, id_buf, 16) != NEEDLE_TOK_E_UTF8) bad |= 128;
    if (needle_tok_encode("", 0, id_buf, 16) != 0) bad |= 256;
    if (needle_tok_n_pieces() != NEEDLE_TOK_N_PIECES) bad |= 512;
    {
        size_t len = 0;
        uint32_t i;
        for (i = 0; i < NEEDLE_TOK_N_PIECES; i++) {
            const uint8_t *p = needle_tok_piece(i, &len);
            int t = needle_tok_piece_type(i);
            if (!p || len == 0 || needle_tok_piece_id((const char *)p, len) != (int32_t)i) bad |= 1024;
            if (t < NEEDLE_TOK_NORMAL || t > NEEDLE_TOK_BYTE) bad |= 8192;
            if (needle_tok_piece_score(i) != needle_tok_piece_score(i)) bad |= 8192; /* NaN */
        }
        if (needle_tok_piece(NEEDLE_TOK_N_PIECES, &len) != NULL || len != 0) bad |= 2048;
        if (needle_tok_piece_id("", 0) != -1 || needle_tok_piece_id("\xff\xff", 2) != -1) bad |= 4096;
        if (needle_tok_piece_type(NEEDLE_TOK_N_PIECES) != -1) bad |= 8192;
    }
    if (bad) printf("BAD %d\n", bad);
    else printf("OK\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "encode") == 0) return cmd_encode(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "decode") == 0) return cmd_decode(argv[2]);
    if (argc >= 5 && strcmp(argv[1], "prompt") == 0) return cmd_prompt(argv[2], argv[3], argv[4]);
    if (argc >= 4 && strcmp(argv[1], "bench") == 0) return cmd_bench(argv[2], atol(argv[3]));
    if (argc >= 2 && strcmp(argv[1], "limits") == 0) return cmd_limits();
    if (argc >= 2 && strcmp(argv[1], "pieces") == 0) return cmd_pieces();
    fprintf(stderr, "usage: tok_driver encode|decode FILE | prompt TOOLS QHEX SHEX | bench FILE REPS | limits\n");
    return 2;
}
