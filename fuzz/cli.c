/* fuzz/cli.c -- libFuzzer harness of the CLI argument parser (needle_cli in firmware/cli/main.c).
 *
 * main.c is linked unchanged; this file is its HAL (hal.h): console output is discarded,
 * hal_read_file serves demo/tools.json-like JSON for paths starting with "t" (and fails for
 * any other path), hal_create gives a sink for paths starting with "o".  needle_bench is a
 * stub (the benchmark is timing code, not a parser).
 *
 * The input is split at NUL bytes into argv[1..] (at most MAX_ARGS), each an exact-size heap
 * string.  To keep an iteration fast, "--max-new 2" is appended after them unless the
 * input already has a --max-new (a repeated flag is refused) or its last argument is an
 * option still waiting for its value, so most valid commands generate at most 2 tokens
 * instead of the default 96 (--tokens still runs up to NEEDLE_MAX_SEQ positions).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hal.h"

#define MAX_ARGS 12

static const char reason_nofile[] = "no such file (fuzz HAL)";
static const char *reason = "";
static int sink;

static const char tools_file[] =
    "[{\"name\":\"get_weather\",\"description\":\"Get the current weather for a city.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
    "\"required\":[\"city\"]}},{\"name\":\"set_timer\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"minutes\":{\"type\":\"integer\",\"minimum\":1}}}}]";

void hal_out(const char *s, size_t n) { (void)s; (void)n; }
void hal_err(const char *s, size_t n) { (void)s; (void)n; }
void hal_flush(void) {}
int hal_out_status(void) { return 0; }          /* discarded output never fails */
int hal_remove(const char *path) { (void)path; return 0; }   /* sinks leave no file */
const char *hal_reason(void) { return reason; }

int hal_read_file(const char *path, char *buf, size_t cap, size_t *len)
{
    if (path[0] != 't') {
        reason = reason_nofile;
        return -1;
    }
    size_t n = sizeof tools_file - 1u;
    if (n > cap) n = cap;
    memcpy(buf, tools_file, n);
    buf[n] = '\0';
    *len = n;
    return 0;
}

void *hal_create(const char *path)
{
    if (path[0] != 'o') {
        reason = reason_nofile;
        return NULL;
    }
    return &sink;
}

int hal_write(void *file, const void *data, size_t n)
{
    (void)data;
    (void)n;
    return file == &sink ? 0 : -1;
}

int hal_close(void *file) { return file == &sink ? 0 : -1; }

int needle_bench(uint32_t tokens)
{
    (void)tokens;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[MAX_ARGS + 4];
    int argc = 0;
    argv[argc++] = strdup("needle");
    size_t start = 0;
    while (start <= size && argc <= MAX_ARGS) {
        const uint8_t *z = memchr(data + start, 0, size - start);
        size_t end = z ? (size_t)(z - data) : size;
        char *a = malloc(end - start + 1u);
        if (!a) abort();
        memcpy(a, data + start, end - start);
        a[end - start] = '\0';
        argv[argc++] = a;
        if (!z) break;
        start = end + 1u;
    }
    static const char *const takes_value[] = {"--prompt", "--tools", "--query", "--system",
                                              "--tokens", "--logits", "--heads", "--max-new",
                                              "--bench"};
    int waiting = 0, has_max_new = 0;
    for (size_t k = 0; k < sizeof takes_value / sizeof takes_value[0]; k++)
        waiting |= !strcmp(argv[argc - 1], takes_value[k]);
    for (int i = 1; i < argc; i++)
        has_max_new |= !strcmp(argv[i], "--max-new");
    if (!waiting && !has_max_new) {
        argv[argc++] = strdup("--max-new");
        argv[argc++] = strdup("2");
    }
    argv[argc] = NULL;
    (void)needle_cli(argc, argv);
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
