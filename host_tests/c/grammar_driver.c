/* grammar_driver: the C call grammar (firmware/lib/needle_tool_grammar.c) on byte strings,
 * for host_tests/test_tool_call.py, which runs the Python twin on the same input.
 *
 *   grammar_driver TOOLS.json FORCE [QUERY.txt SPAN_ALL] < cases
 *
 * Prints "ERR <message>" if the tool list does not compile, else "OK <list min bytes>" and,
 * for each input line (hex bytes), one output line: for every byte fed, "min_bytes" of the
 * state after it, or "X" where the grammar refuses it (the rest of the line is not fed),
 * then "D" if the list is complete.  With QUERY.txt, the query span strings copy from
 * (needle_grammar_set_query; "QERR <message>" if it is refused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "needle_tool_grammar.h"

static needle_grammar g;
static char tools[1 << 20];
static char line[1 << 16];
static char query[1 << 16];

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    size_t len = fread(tools, 1, sizeof tools, f);
    fclose(f);
    char err[512];
    if (needle_grammar_compile(&g, tools, len, atoi(argv[2]), err, sizeof err)) {
        printf("ERR %s\n", err);
        return 0;
    }
    if (argc == 5) {
        FILE *qf = fopen(argv[3], "rb");
        if (!qf) return 2;
        size_t qn = fread(query, 1, sizeof query, qf);
        fclose(qf);
        if (needle_grammar_set_query(&g, query, qn, atoi(argv[4]), err, sizeof err)) {
            printf("QERR %s\n", err);
            return 0;
        }
    }
    printf("OK %u\n", needle_grammar_list_min(&g));
    while (fgets(line, sizeof line, stdin)) {
        needle_gstate s;
        needle_grammar_start(&g, &s);
        size_t n = strcspn(line, "\r\n");
        for (size_t i = 0; i + 1 < n; i += 2) {
            unsigned b;
            sscanf(line + i, "%2x", &b);
            if (needle_grammar_feed(&g, &s, (unsigned char)b)) { printf(" X"); break; }
            printf(" %u", needle_grammar_min_bytes(&g, &s));
        }
        printf(needle_grammar_done(&s) ? " D\n" : "\n");
    }
    return 0;
}
