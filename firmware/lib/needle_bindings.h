/* needle_bindings.h -- typed arguments from a constrained call list: the descriptor types
 * that gen/needle_tools.c (scons tools=FILE) fills, and the parser over them
 * (needle_bindings.c).  docs/grammar.md, "Typed bindings"; generator/tools/bindings.py
 * plans the descriptors. */
#ifndef NEEDLE_BINDINGS_H
#define NEEDLE_BINDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An argument kept as JSON text (objects, arrays of arrays or objects): inside the call list. */
typedef struct {
    const char *text;
    size_t len;
} needle_json;

enum { NB_INT = 1, NB_NUM, NB_BOOL, NB_ENUM, NB_STR, NB_JSON, NB_NULL };

/* One property of a tool's arguments. */
typedef struct {
    const char *key;          /* as the call writes it, quotes included */
    uint8_t type;             /* NB_* */
    uint16_t items;           /* 0: one value; else a fixed array of this many */
    uint16_t cap;             /* NB_STR: bytes of the buffer, NUL included */
    uint16_t size;            /* bytes of one value */
    uint32_t offset;          /* of the value (or the array) in the arguments struct */
    int32_t has;              /* of `bool has_<name>` (optional properties), or -1 */
    int32_t count;            /* of `uint16_t <name>_count` (arrays), or -1 */
    int32_t cut;              /* of `bool <name>_cut` (strings), or -1 */
    const char *const *alts;  /* NB_ENUM: the values as the call writes them */
    uint16_t n_alts;
} needle_field;

typedef struct {
    const char *name;         /* as the call writes it, quotes included */
    uint32_t size;            /* of the arguments struct */
    const needle_field *fields;
    uint16_t n_fields;
} needle_tool_desc;

#define NEEDLE_BIND_END   (-1)   /* the list is over */
#define NEEDLE_BIND_ERROR (-2)   /* not a call list the grammar writes */

/* The next call of the call list in [*p, end): the index of its tool in tools[], its
 * arguments in *args (zeroed first, then every property present), *p after it.  Returns
 * NEEDLE_BIND_END after the last call, NEEDLE_BIND_ERROR if the text is not canonical
 * call-list JSON (never for what needle_call_turn produced). */
int needle_bind_next(const needle_tool_desc *tools, uint32_t n_tools, const char **p, const char *end, void *args);

#ifdef __cplusplus
}
#endif

#endif /* NEEDLE_BINDINGS_H */
