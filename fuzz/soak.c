/* fuzz/soak.c -- soak driver of the CLI (issue 14 §4): needle_cli of firmware/cli/main.c
 * (linked unchanged) called in a loop over a fixed list of varied requests, under
 * AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer.
 *
 *   soak [N]            N iterations (default 10000), cycling through the request list; every
 *                       iteration's exit code, standard output, standard error and output file
 *                       must equal the first run of the same request in this process
 *   soak N --records    ... and then print the first-run record of every request
 *   soak --once K       run request K once and print its record (a fresh process per request)
 *   soak --list         print the requests (one line each: flags, then the hex of every argv)
 *
 * This file is the HAL (hal.h) of the linked main.c: standard output and standard error are
 * captured into per-request heap buffers; hal_read_file reads real files (as hal/linux does,
 * with strerror reasons), so `--tools demo/tools.json` must run from the repository root;
 * hal_create gives an in-memory sink for any path except one under /nonexistent/, which fails
 * with strerror(ENOENT) just as the Linux HAL would.  A request flagged "full" sees a standard
 * output that refuses every byte (like a redirection to /dev/full: ENOSPC, sticky).  The
 * placeholder path "@SINK" in a request is where a real-process comparison puts a temporary
 * file (the in-process sink takes any name).
 *
 * A record is:
 *     request K
 *     rc N
 *     stdout HEX
 *     stderr HEX
 *     file  LEN FNV1A64HEX      (the bytes written to the created file; "file none" if none)
 * The summary line of a soak run is
 *     soak: iterations N, requests R, mismatches M, leak checks C (leaking L), S s, maxrss A -> B KiB
 * and the exit status is 0 only when M and L are 0 (sanitizer reports abort on their own).
 *
 * needle_bench is a stub (timing output is not deterministic); only a refused --bench is sent.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "hal.h"
#include "linux/stdio_file.h"

#if defined(__has_include)
#if __has_include(<sanitizer/lsan_interface.h>)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#endif
#endif

const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=1"; }
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "print_stacktrace=1:halt_on_error=1"; }

/* ------------------------------------------------------------------------------------------
 * The requests
 * ------------------------------------------------------------------------------------------ */

#define MAX_ARGV 16
#define FULL 1u   /* standard output refuses every byte (ENOSPC) */

struct request {
    unsigned flags;
    const char *argv[MAX_ARGV];   /* without argv[0]; NULL-terminated */
};

static char long_prompt[2048];     /* "word " * 400: encodes to more than max_seq_len tokens */
static char many_ids[257 * 4 + 1]; /* 257 ids: one more than max_seq_len */
static char forty_ids[40 * 5 + 1]; /* a 40-position teacher-forced run */

static const struct request requests[] = {
    /* valid: generation, kept short */
    {0, {"--prompt", "Hello world, how are you", "--max-new", "4"}},
    {0, {"--prompt", "The quick brown fox", "--max-new", "1"}},
    {0, {"--max-new", "3", "--prompt", "\xc3\x9c" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 text \xe2\x9c\x93 and emoji \xf0\x9f\x99\x82"}},
    {0, {"--prompt", "Hello world", "--ids", "--max-new", "4"}},
    {0, {"--tools", "demo/tools.json", "--query", "What's the weather in Paris?", "--max-new", "4"}},
    {0, {"--tools", "demo/tools.json", "--query", "Set a timer for 5 minutes", "--system",
         "You are terse.", "--max-new", "3", "--ids"}},
    {0, {"--tokens", "1,2,3,4,5", "--logits", "@SINK"}},
    {0, {"--tokens", "17,5,900,2"}},
    {0, {"--tokens", forty_ids}},
    {0, {"--info"}},
    {0, {"--help"}},
    /* invalid: each must fail the same way every time */
    {0, {"--prompt", "", "--max-new", "4"}},
    {0, {"--prompt", "abc", "--max-new", "0"}},
    {0, {"--prompt", "abc", "--max-new", "255"}},
    {0, {"--prompt", long_prompt, "--max-new", "2"}},
    {0, {"--prompt", "\xff\xfe not UTF-8", "--max-new", "2"}},
    {0, {"--tokens", "1,,2"}},
    {0, {"--tokens", "1,5000"}},
    {0, {"--tokens", many_ids}},
    {0, {"--tokens", "1,2", "--logits", "/nonexistent/dir/logits.f32"}},
    {0, {"--tokens", "1,2", "--heads", "@SINK"}},
    {0, {"--tools", "demo/no-such-tools.json", "--query", "x", "--max-new", "2"}},
    {0, {"--tools", "demo/tools.json", "--query"}},
    {0, {"--ids", "--tokens", "1,2"}},
    {0, {"--info", "--prompt", "x"}},
    {0, {"--prompt", "a", "--prompt", "b"}},
    {0, {"--bench", "0"}},
    {0, {"--frobnicate"}},
    /* valid commands whose standard output is full */
    {FULL, {"--prompt", "Hello world", "--max-new", "4"}},
    {FULL, {"--info"}},
};
#define NREQ (sizeof requests / sizeof requests[0])

static void init_requests(void)
{
    size_t at = 0;
    for (int i = 0; i < 400; i++) at += (size_t)snprintf(long_prompt + at, sizeof long_prompt - at, "word ");
    at = 0;
    for (int i = 0; i < 257; i++) at += (size_t)snprintf(many_ids + at, sizeof many_ids - at, "%s%d", i ? "," : "", (i * 7) % 10);
    at = 0;
    for (int i = 0; i < 40; i++) at += (size_t)snprintf(forty_ids + at, sizeof forty_ids - at, "%s%d", i ? "," : "", (i * 37 + 11) % 1024);
}

/* ------------------------------------------------------------------------------------------
 * The capturing HAL
 * ------------------------------------------------------------------------------------------ */

struct buf {
    char *p;
    size_t n, cap;
};

static void buf_add(struct buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { fputs("soak: out of memory\n", stderr); abort(); }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void buf_free(struct buf *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

static struct buf cap_out, cap_err;
static const char *reason = "";
static int out_full, out_failed;   /* this request's stdout refuses bytes / has refused some */

/* The one file a request may create: only its length and hash are kept. */
static struct sink {
    int open, created, removed;
    uint64_t len, hash;
} sink;

void hal_out(const char *s, size_t n)
{
    if (!n) return;
    if (out_full) out_failed = 1;
    else buf_add(&cap_out, s, n);
}

void hal_err(const char *s, size_t n) { buf_add(&cap_err, s, n); }
void hal_flush(void) {}

int hal_out_status(void)
{
    if (!out_failed) return 0;
    reason = strerror(ENOSPC);
    return -1;
}

const char *hal_reason(void) { return reason; }

int hal_read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    return stdio_read_file(path, buf, cap, len, &reason);
}

void *hal_create(const char *path)
{
    if (!strncmp(path, "/nonexistent/", 13)) { reason = strerror(ENOENT); return NULL; }
    if (sink.open) { reason = "soak HAL: a second file open at once"; return NULL; }
    sink.open = sink.created = 1;
    sink.removed = 0;
    sink.len = 0;
    sink.hash = 0xcbf29ce484222325ull;
    return &sink;
}

int hal_write(void *file, const void *data, size_t n)
{
    if (file != &sink || !sink.open) { reason = "soak HAL: write to a file that is not open"; return -1; }
    const uint8_t *d = data;
    for (size_t i = 0; i < n; i++) sink.hash = (sink.hash ^ d[i]) * 0x100000001b3ull;
    sink.len += n;
    return 0;
}

int hal_close(void *file)
{
    if (file != &sink || !sink.open) { reason = "soak HAL: close of a file that is not open"; return -1; }
    sink.open = 0;
    return 0;
}

int hal_remove(const char *path)
{
    (void)path;
    sink.removed = 1;
    return 0;
}

int needle_bench(uint32_t tokens)
{
    (void)tokens;
    hal_printf("bench stub\n");
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * One request, its record, and the loop
 * ------------------------------------------------------------------------------------------ */

struct record {
    int rc;
    struct buf out, err;
    int file;            /* a file was created, closed and kept */
    uint64_t file_len, file_hash;
};

static void record_free(struct record *r) { buf_free(&r->out); buf_free(&r->err); }

/* Run request k through needle_cli with fresh heap copies of its arguments. */
static void run_request(size_t k, struct record *r)
{
    const struct request *q = &requests[k];
    char *argv[MAX_ARGV + 2];
    int argc = 0;
    argv[argc++] = strdup("needle");
    for (int i = 0; q->argv[i]; i++) argv[argc++] = strdup(q->argv[i]);   /* exact-size strings */
    argv[argc] = NULL;
    for (int i = 0; i < argc; i++) if (!argv[i]) abort();

    memset(&cap_out, 0, sizeof cap_out);
    memset(&cap_err, 0, sizeof cap_err);
    memset(&sink, 0, sizeof sink);
    reason = "";
    out_full = (q->flags & FULL) != 0;
    out_failed = 0;

    r->rc = needle_cli(argc, argv);

    for (int i = 0; i < argc; i++) free(argv[i]);
    if (sink.open) {   /* main.c must close what it creates */
        static const char msg[] = "soak: needle_cli returned with its output file still open\n";
        buf_add(&cap_err, msg, sizeof msg - 1);
        sink.open = 0;
    }
    r->out = cap_out;
    r->err = cap_err;
    r->file = sink.created && !sink.removed;
    r->file_len = r->file ? sink.len : 0;
    r->file_hash = r->file ? sink.hash : 0;
}

static int same_buf(const struct buf *a, const struct buf *b)
{
    return a->n == b->n && (a->n == 0 || !memcmp(a->p, b->p, a->n));
}

/* NULL if equal, else the first field that differs. */
static const char *differs(const struct record *a, const struct record *b)
{
    if (a->rc != b->rc) return "exit code";
    if (!same_buf(&a->out, &b->out)) return "stdout";
    if (!same_buf(&a->err, &b->err)) return "stderr";
    if (a->file != b->file || a->file_len != b->file_len || a->file_hash != b->file_hash) return "file";
    return NULL;
}

static void print_hex(const char *tag, const struct buf *b)
{
    printf("%s ", tag);
    for (size_t i = 0; i < b->n; i++) printf("%02x", (unsigned char)b->p[i]);
    printf("\n");
}

static void print_record(size_t k, const struct record *r)
{
    printf("request %zu\nrc %d\n", k, r->rc);
    print_hex("stdout", &r->out);
    print_hex("stderr", &r->err);
    if (r->file) printf("file %llu %016llx\n", (unsigned long long)r->file_len, (unsigned long long)r->file_hash);
    else printf("file none\n");
}

static void print_text(const char *tag, const struct buf *b)
{
    fprintf(stderr, "  %s (%zu bytes): %.*s\n", tag, b->n, (int)(b->n > 300 ? 300 : b->n), b->n ? b->p : "");
}

static long maxrss_kib(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) ? -1 : u.ru_maxrss;
}

static int usage(void)
{
    fprintf(stderr, "usage: soak [N] [--records] | soak --once K | soak --list\n");
    return 2;
}

int main(int argc, char **argv)
{
    init_requests();
    long iterations = 10000;
    int records = 0;
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (size_t k = 0; k < NREQ; k++) {
            printf("%s", requests[k].flags & FULL ? "full" : "-");
            for (int i = 0; requests[k].argv[i]; i++) {
                printf(" ");
                for (const char *s = requests[k].argv[i]; *s; s++) printf("%02x", (unsigned char)*s);
                if (!*requests[k].argv[i]) printf("-");   /* an empty argument */
            }
            printf("\n");
        }
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--once")) {
        char *end;
        long k = strtol(argv[2], &end, 10);
        if (*end || k < 0 || (size_t)k >= NREQ) return usage();
        struct record r;
        run_request((size_t)k, &r);
        print_record((size_t)k, &r);
        record_free(&r);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        char *end;
        if (!strcmp(argv[i], "--records")) records = 1;
        else if ((iterations = strtol(argv[i], &end, 10)) < 1 || *end) return usage();
    }

    static struct record first[NREQ];
    static int have[NREQ];
    long mismatches = 0, leak_checks = 0, leaking = 0;
    long rss0 = maxrss_kib(), rss_first_pass = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long it = 0; it < iterations; it++) {
        size_t k = (size_t)it % NREQ;
        struct record r;
        run_request(k, &r);
        if (!have[k]) {
            first[k] = r;
            have[k] = 1;
        } else {
            const char *what = differs(&first[k], &r);
            if (what && ++mismatches <= 10) {
                fprintf(stderr, "soak: iteration %ld, request %zu: %s differs from its first run\n", it, k, what);
                fprintf(stderr, "  first: rc %d, file %d %llu; now: rc %d, file %d %llu\n", first[k].rc, first[k].file,
                        (unsigned long long)first[k].file_len, r.rc, r.file, (unsigned long long)r.file_len);
                print_text("first stdout", &first[k].out);
                print_text("now   stdout", &r.out);
                print_text("first stderr", &first[k].err);
                print_text("now   stderr", &r.err);
            }
            record_free(&r);
        }
        if ((size_t)it + 1 == NREQ) rss_first_pass = maxrss_kib();
#ifdef HAVE_LSAN
        if ((it + 1) % 1000 == 0 || it + 1 == iterations) {
            leak_checks++;
            leaking += __lsan_do_recoverable_leak_check() != 0;
        }
#endif
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (!rss_first_pass) rss_first_pass = rss0;
    printf("soak: iterations %ld, requests %zu, mismatches %ld, leak checks %ld (leaking %ld), %.1f s, "
           "maxrss %ld -> %ld KiB\n", iterations, NREQ, mismatches, leak_checks, leaking, secs,
           rss_first_pass, maxrss_kib());
    if (records)
        for (size_t k = 0; k < NREQ; k++)
            if (have[k]) print_record(k, &first[k]);
    for (size_t k = 0; k < NREQ; k++)
        if (have[k]) record_free(&first[k]);
    fflush(stdout);
    return mismatches || leaking ? 1 : 0;
}
