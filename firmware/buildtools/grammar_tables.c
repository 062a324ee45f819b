/* grammar_tables.c -- a build-time host program: compiles a tool list into the call grammar's
 * tables with the firmware's own compiler (needle_tool_grammar.c, built with the board's
 * NEEDLE_GRAMMAR_* bounds) and prints them as JSON, for gen/needle_tools.c to hold them in
 * flash (scons tools=FILE; docs/grammar.md, "Built-in tools").
 *
 *   grammar-tables TOOLS.json      one JSON object on stdout: {"free": T, "force": T}, where T
 *                                  has the counts and every table of the grammar compiled
 *                                  without and with force_call (null for an empty list)
 *
 * The board's compiler is not run here, but its code is: the tables are the ones the device
 * would compile at boot, so the matcher reads the same values from flash.  A list the
 * board's bounds cannot hold exits 1 with the compiler's one-line message on stderr.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "needle_tool_grammar.h"

static char text[NEEDLE_GRAMMAR_TEXT_MAX * 4u + 4096u];   /* unminified lists are longer */

static void print_tables(const needle_grammar *g)
{
    printf("{\"text_len\":%zu,\"n_tools\":%" PRIu32 ",\"force_call\":%d,\"nodes\":[", g->text_len, g->n_tools,
           g->force_call);
    for (uint32_t i = 0; i < g->n_node; i++) {
        const needle_gnode *n = &g->node[i];
        printf("%s{\"kind\":%u,\"unique\":%u,\"n_ref\":%u,\"ref0\":%u,\"child\":%u,\"sub0\":%u,\"item0\":%u,"
               "\"n_item\":%u,\"rest0\":%u,\"required\":%" PRIu32 ",\"min_len\":%" PRId32 ",\"max_len\":%" PRId32
               ",\"lo\":%" PRId64 ",\"hi\":%" PRId64 ",\"mult\":%" PRId64 ",\"min_bytes\":%" PRIu32 "}",
               i ? "," : "", n->kind, n->unique, n->n_ref, n->ref0, n->child, n->sub0, n->item0, n->n_item,
               n->rest0, n->required, n->min_len, n->max_len, n->lo, n->hi, n->mult, n->min_bytes);
    }
    printf("],\"refs\":[");
    for (uint32_t i = 0; i < g->n_ref; i++)
        printf("%s[%" PRIu32 ",%" PRIu32 "]", i ? "," : "", g->ref[i].off, g->ref[i].len);
    printf("],\"sub\":[");
    for (uint32_t i = 0; i < g->n_ref; i++) printf("%s%u", i ? "," : "", g->sub[i]);
    printf("],\"items\":[");
    for (uint32_t i = 0; i < g->n_item; i++)
        printf("%s[%u,%u,%u,%u]", i ? "," : "", g->item[i].kind, g->item[i].negate, g->item[i].range0,
               g->item[i].n_range);
    printf("],\"ranges\":[");
    for (uint32_t i = 0; i < g->n_range; i++)
        printf("%s[%" PRIu32 ",%" PRIu32 "]", i ? "," : "", g->range[i][0], g->range[i][1]);
    printf("],\"rest\":[");
    for (uint32_t i = 0; i < g->n_rest; i++) printf("%s%" PRIu32, i ? "," : "", g->rest[i]);
    printf("],\"tool_ppm\":[");
    for (uint32_t i = 0; i < g->n_tools; i++) printf("%s%" PRId32, i ? "," : "", g->tool_ppm[i]);
    printf("],\"text\":\"");
    for (size_t i = 0; i < g->text_len + 15u; i++) printf("%02x", (unsigned char)g->text[i]);
    printf("\"}");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: grammar-tables TOOLS.json\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    size_t len = fread(text, 1, sizeof text, f);
    int too_long = len == sizeof text;
    fclose(f);
    if (too_long) {
        fprintf(stderr, "the tool list is longer than %zu bytes\n", sizeof text - 1u);
        return 1;
    }
    char err[512];
    printf("{");
    uint32_t n_tools = 0;
    for (int force = 0; force < 2; force++) {
        needle_grammar g;
        if (force && n_tools == 0) {          /* an empty list: no call can be forced */
            printf(",\"force\":null");
            break;
        }
        if (needle_grammar_compile(&g, text, len, force, err, sizeof err)) {
            fflush(stdout);
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        printf("%s\"%s\":", force ? "," : "", force ? "force" : "free");
        print_tables(&g);
        n_tools = g.n_tools;
    }
    printf("}\n");
    return ferror(stdout) ? 1 : 0;
}
