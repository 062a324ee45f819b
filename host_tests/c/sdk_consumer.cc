// sdk_consumer.cc -- a C++ program on the library SDK (host_tests/test_library.py): every
// installed header compiles as C++ (-pedantic, each with its extern "C" block), and the C
// library links under C++'s names.  It prints, for the test to compare with the Python twins:
//   the prompt of TOOLS and argv[1] (needle_render_prompt), byte for byte, then a NUL,
//   the shortest call list of TOOLS (needle_grammar_compile, needle_grammar_list_min),
//   the greedy first token after the prompt (needle_boot, needle_tok_encode, needle_prefill).
#include <cstdio>
#include <cstring>

#include "needle.h"
#include "needle_bindings.h"

static const char TOOLS[] =
    "[{\"name\":\"set_timer\",\"description\":\"Start a countdown timer\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"minutes\":{\"type\":\"integer\",\"minimum\":1}},\"required\":[\"minutes\"]}}]";

static char prompt[NEEDLE_TOK_MAX_TEXT + 1];
static uint32_t ids[NEEDLE_MAX_SEQ];
static needle_grammar grammar;

static int fail(const char *what, const char *why)
{
    std::fprintf(stderr, "sdk_consumer: %s: %s\n", what, why);
    return 2;
}

int main(int argc, char **argv)
{
    const char *query = argc > 1 ? argv[1] : "set a timer for ten minutes";
    char err[256];
    int len = needle_render_prompt(TOOLS, sizeof TOOLS - 1, query, nullptr, prompt, sizeof prompt, err, sizeof err);
    if (len < 0) return fail("prompt", err);
    std::fwrite(prompt, 1, static_cast<size_t>(len), stdout);
    std::fputc('\0', stdout);

    if (needle_grammar_compile(&grammar, TOOLS, sizeof TOOLS - 1, 1, err, sizeof err)) return fail("grammar", err);
    std::printf("list_min %u\n", static_cast<unsigned>(needle_grammar_list_min(&grammar)));

    if (needle_boot()) return fail("archive", needle_error());
    ids[0] = NEEDLE_BOS_ID;
    int32_t n = needle_tok_encode(prompt, static_cast<size_t>(len), ids + 1, NEEDLE_MAX_SEQ - 1);
    if (n < 0) return fail("prompt", "does not fit the context");
    const float *logits = needle_prefill(ids, static_cast<uint32_t>(n) + 1u);
    if (!logits) return fail("engine", needle_error());
    uint32_t best = 0;
    for (uint32_t i = 1; i < NEEDLE_OUT_VOCAB; i++)
        if (logits[i] > logits[best]) best = i;
    std::printf("first %u of %u\n", static_cast<unsigned>(best), static_cast<unsigned>(n) + 1u);
    return 0;
}
