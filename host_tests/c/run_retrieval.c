/* run_retrieval.c -- needle_run() on an SDK built with a built-in list of more than five tools
 * and the embedding head (host_tests/test_retrieval.py): prints the calls, the tools retrieval
 * picked and the tokens it embedded.  No handlers: every call counts as unhandled.
 *
 *   run_retrieval QUERY MAX_NEW */
#include <stdio.h>
#include <stdlib.h>

#include "needle.h"
#include "needle_tools.h"

int main(int argc, char **argv)
{
    static needle_envelope env;
    static const needle_tool_handlers none;
    char err[256];
    if (argc != 3) return 2;
    if (needle_boot()) { fprintf(stderr, "%s\n", needle_error()); return 3; }
    int made = needle_run(argv[1], (uint32_t)strtoul(argv[2], NULL, 10), 1, 0.0f, &none, NULL, &env, err, sizeof err);
    if (made < 0) { fprintf(stderr, "%s\n", err); return 2; }
    printf("{\"function_calls\":%.*s,\"retrieved\":[", (int)env.calls_len, env.calls);
    for (uint32_t i = 0; i < env.retrieved_count; i++) printf("%s%u", i ? "," : "", env.retrieved[i]);
    printf("],\"retrieval_tokens\":%u}\n", env.retrieval_tokens);
    return 0;
}
