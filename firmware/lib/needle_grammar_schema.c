/* needle_grammar_schema.c -- tool schemas into grammar tables (generator/tools/schema.py is
 * the twin: every rule below has its Python counterpart of the same name); the pattern subset
 * is needle_grammar_regex.c, the matcher over the tables needle_tool_grammar.c.  See
 * needle_tool_grammar.h and docs/grammar.md.
 */
#include "needle_grammar_internal.h"

#include "needle_tool_prompt.h"
#include "needle_toolset.h"

/* The refusal of an unknown keyword lists what is supported where it stood, short enough for
   a 256-byte error line with the tool and property names in front (schema.py says the same). */
static const char SUPPORTED_ANY[] =
    "type, enum, const, annotations (description, title, default, examples, format)";
static const char *const SUPPORTED_FOR[] = {            /* by type, in TYPE_NAMES order */
    "minLength, maxLength, pattern",
    "minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf",
    "minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf",
    "", "",
    "items, minItems, maxItems, uniqueItems",
    "properties, required, additionalProperties false",
};

/* The tables of a grammar compiled at run time (ng_store): one per library. */
static ng_store store;

/* "WHERE: <before>N<after>" (fail with a count in the message); returns -1. */
static int fail_count(ng_comp *c, const char *before, uint32_t n, const char *after)
{
    c->e.n = 0;
    err_str(&c->e, c->where, c->where_n);
    err_s(&c->e, ": ");
    err_s(&c->e, before);
    err_u(&c->e, n);
    err_s(&c->e, after);
    return -1;
}

#define NONE ((size_t)-1)

/* ================================================================ compile */

static void where_push(ng_comp *c, const char *s, size_t n, size_t *saved)
{
    *saved = c->where_n;
    for (size_t i = 0; i < n && c->where_n + 1 < sizeof c->where; i++) c->where[c->where_n++] = s[i];
}

/* "tool \"NAME\": the grammar needs more than N <what>": a table bound (a board sets them,
 * boards/<name>.toml [grammar]) is too small for the list. */
static void table_full(ng_comp *c, uint32_t bound, const char *what)
{
    c->e.n = 0;
    if (c->tool_n) {
        err_str(&c->e, c->where, c->tool_n);
        err_s(&c->e, ": ");
    }
    err_s(&c->e, "the grammar needs more than ");
    err_u(&c->e, bound);
    err_s(&c->e, what);
}

static int add_node(ng_comp *c, uint8_t kind, uint32_t *idx)
{
    ng_store *g = c->g;
    if (g->n_node >= NEEDLE_GRAMMAR_MAX_NODES) {
        table_full(c, NEEDLE_GRAMMAR_MAX_NODES, " nodes (NEEDLE_GRAMMAR_MAX_NODES): use fewer or simpler tools");
        return -1;
    }
    *idx = g->n_node++;
    memset(&g->node[*idx], 0, sizeof g->node[0]);
    g->node[*idx].kind = kind;
    g->node[*idx].lo = -BIG;
    g->node[*idx].hi = BIG;
    g->node[*idx].mult = 1;
    g->node[*idx].max_len = -1;
    return 0;
}

static int add_ref(ng_comp *c, size_t off, size_t len)
{
    if (c->g->n_ref >= NEEDLE_GRAMMAR_MAX_REFS) {
        table_full(c, NEEDLE_GRAMMAR_MAX_REFS, " literals: names, keys and enum values "
                   "(NEEDLE_GRAMMAR_MAX_REFS): use fewer tools or values");
        return -1;
    }
    c->g->ref[c->g->n_ref].off = (uint32_t)off;
    c->g->ref[c->g->n_ref].len = (uint32_t)len;
    c->g->n_ref++;
    return 0;
}

/* Exact floor/ceil of (decimal text) * 10^scale, saturated; -1 if more than 18 significant digits. */
static int scaled(const char *t, size_t i, size_t end, int scale, int64_t *fl, int64_t *ce, int *integral)
{
    int neg = 0, sig = 0, started = 0, e10 = 0;
    uint64_t D = 0;
    if (t[i] == '-') { neg = 1; i++; }
    for (; i < end && t[i] >= '0' && t[i] <= '9'; i++) {
        if (t[i] != '0') started = 1;
        if (started) { D = D * 10u + (uint64_t)(t[i] - '0'); sig++; }
        if (sig > 18) return -1;
    }
    if (i < end && t[i] == '.') {
        for (i++; i < end && t[i] >= '0' && t[i] <= '9'; i++) {
            if (t[i] != '0') started = 1;
            if (started) { D = D * 10u + (uint64_t)(t[i] - '0'); sig++; }
            if (sig > 18) return -1;
            e10--;
        }
    }
    if (i < end && (t[i] == 'e' || t[i] == 'E')) {
        int eneg = 0, ev = 0;
        i++;
        if (t[i] == '+' || t[i] == '-') { eneg = t[i] == '-'; i++; }
        for (; i < end && t[i] >= '0' && t[i] <= '9'; i++) if (ev < 10000) ev = ev * 10 + (t[i] - '0');
        e10 += eneg ? -ev : ev;
    }
    e10 += scale;
    int64_t q, r = 0;
    if (D == 0) q = 0;
    else if (e10 >= 0) {
        q = e10 > 18 || D > (uint64_t)(SAT / POW10[e10]) ? SAT : (int64_t)D * POW10[e10];
    } else if (-e10 > 18) {
        q = 0; r = 1;
    } else {
        q = (int64_t)(D / (uint64_t)POW10[-e10]);
        r = (int64_t)(D % (uint64_t)POW10[-e10]);
    }
    *integral = r == 0;
    if (neg) { *fl = -(q + (r ? 1 : 0)); *ce = -q; }
    else { *fl = q; *ce = q + (r ? 1 : 0); }
    return 0;
}

static int64_t clampb(int64_t v) { return v > BIG1 ? BIG1 : v < -BIG1 ? -BIG1 : v; }


static const char *const TYPE_NAMES[] = { "\"string\"", "\"integer\"", "\"number\"", "\"boolean\"",
                                          "\"null\"", "\"array\"", "\"object\"" };
enum { TY_NONE = -1, TY_STRING, TY_INTEGER, TY_NUMBER, TY_BOOLEAN, TY_NULL, TY_ARRAY, TY_OBJECT };

static int keyword_allowed(const char *t, size_t key, int ty)
{
    static const char *const common[] = { "\"description\"", "\"title\"", "\"default\"", "\"examples\"",
                                          "\"format\"", "\"$comment\"", "\"type\"", "\"enum\"", "\"const\"",
                                          SPAN_KEY };
    static const char *const by_type[7][5] = {
        { "\"minLength\"", "\"maxLength\"", "\"pattern\"" },
        { "\"minimum\"", "\"maximum\"", "\"exclusiveMinimum\"", "\"exclusiveMaximum\"", "\"multipleOf\"" },
        { "\"minimum\"", "\"maximum\"", "\"exclusiveMinimum\"", "\"exclusiveMaximum\"", "\"multipleOf\"" },
        { 0 }, { 0 },
        { "\"items\"", "\"minItems\"", "\"maxItems\"", "\"uniqueItems\"" },
        { "\"properties\"", "\"required\"", "\"additionalProperties\"" },
    };
    for (uint32_t i = 0; i < sizeof common / sizeof common[0]; i++) if (needle_json_is(t, key, common[i])) return 1;
    if (ty >= 0)
        for (uint32_t i = 0; i < 5 && by_type[ty][i]; i++) if (needle_json_is(t, key, by_type[ty][i])) return 1;
    return 0;
}

/* ---- enum and const values as JSON values (schema.py _json_equal, _of_type) */

/* Is the scalar value at t[v] of type ty (TY_NONE: any; integer: a number of whole value)? */
static int of_type(const char *t, size_t v, int ty)
{
    switch (ty) {
    case TY_NONE: return 1;
    case TY_STRING: return t[v] == '"';
    case TY_BOOLEAN: return t[v] == 't' || t[v] == 'f';
    case TY_NULL: return t[v] == 'n';
    case TY_NUMBER: return t[v] == '-' || (t[v] >= '0' && t[v] <= '9');
    case TY_INTEGER: return (t[v] == '-' || (t[v] >= '0' && t[v] <= '9')) && needle_json_is_integer(t, v);
    default: return 0;
    }
}

/* minLength & co: -1 when absent, -2 after an error. */
static int32_t count_kw(ng_comp *c, size_t s, const char *quoted, const char *name)
{
    const char *t = T(c);
    size_t v = needle_json_get(t, s, quoted);
    if (v == NONE) return -1;
    size_t e = needle_json_end(t, v);
    uint32_t x = 0;
    int ok = e > v && e - v <= 4;
    for (size_t i = v; ok && i < e; i++) ok = t[i] >= '0' && t[i] <= '9', x = x * 10u + (uint32_t)(t[i] - '0');
    if (!ok || x > 4096u) {
        fail(c, name);
        err_s(&c->e, " must be an integer 0..4096, not ");
        err_str(&c->e, t + v, e - v);
        return -2;
    }
    return (int32_t)x;
}

static int compile_number(ng_comp *c, size_t s, int ty, needle_gnode *n)
{
    static const char *const keys[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf" };
    const char *t = T(c);
    const int scale = ty == TY_INTEGER ? 0 : NUM_DECIMALS;
    for (int k = 0; k < 5; k++) {
        char quoted[24];
        size_t kl = strlen(keys[k]);
        quoted[0] = '"'; memcpy(quoted + 1, keys[k], kl); quoted[kl + 1] = '"'; quoted[kl + 2] = 0;
        size_t v = needle_json_get(t, s, quoted);
        if (v == NONE) continue;
        size_t e = needle_json_end(t, v);
        if (!(t[v] == '-' || (t[v] >= '0' && t[v] <= '9'))) { fail(c, keys[k]); err_s(&c->e, " must be a number"); return -1; }
        int64_t fl, ce;
        int integral;
        if (scaled(t, v, e, scale, &fl, &ce, &integral)) {
            fail(c, keys[k]);
            err_s(&c->e, ": ");
            err_str(&c->e, t + v, e - v);
            err_s(&c->e, " has more than 18 significant digits");
            return -1;
        }
        if (k == 0) n->lo = max64(n->lo, clampb(ce));
        else if (k == 2) n->lo = max64(n->lo, clampb(fl + 1));
        else if (k == 1) n->hi = min64(n->hi, clampb(fl));
        else if (k == 3) n->hi = min64(n->hi, clampb(ce - 1));
        else {
            if (ce <= 0 || !integral || fl > BIG)
                return fail(c, ty == TY_INTEGER ? "multipleOf must be positive and whole"
                                                : "multipleOf must be positive with at most 6 decimals");
            n->mult = fl;
        }
    }
    int32_t mb = needle_ng_number_min_extra(n, 0, 0, 0, -1, 2);
    if (mb < 0) return fail(c, ty == TY_INTEGER ? "no integer satisfies its bounds and multipleOf"
                                                : "no number satisfies its bounds and multipleOf");
    n->min_bytes = (uint32_t)mb;
    return 0;
}
static int compile_string(ng_comp *c, size_t s, needle_gnode *n)
{
    int32_t mn = count_kw(c, s, "\"minLength\"", "minLength");
    if (mn == -2) return -1;
    int32_t mx = count_kw(c, s, "\"maxLength\"", "maxLength");
    if (mx == -2) return -1;
    n->min_len = mn < 0 ? 0 : mn;
    n->max_len = mx;
    if (n->max_len >= 0 && n->max_len < n->min_len) return fail(c, "maxLength is below minLength");
    const char *t = T(c);
    size_t pat = needle_json_get(t, s, "\"pattern\"");
    if (pat != NONE) {
        if (t[pat] != '"') return fail(c, "pattern must be a string");
        if (n->min_len > 0 || n->max_len >= 0)
            return fail(c, "pattern cannot be combined with minLength/maxLength (write the length into the "
                           "pattern, e.g. ^[a-z]{2,8}$)");
        if (needle_ng_compile_pattern(c, pat, n)) return -1;
        /* a pattern of no items (^$, ^a{0}$) matches only the empty string, not "any string"
         * (n_item 0 means no pattern): say so with maxLength 0 (schema.py does the same) */
        if (n->n_item == 0) n->max_len = 0;
        return 0;
    }
    n->min_bytes = 2u + (uint32_t)n->min_len;
    size_t sp = needle_json_get(t, s, SPAN_KEY);
    if (sp != NONE && needle_json_is(t, sp, "true")) {
        if (n->max_len == 0)
            return fail(c, "\"x-needle-span\" needs maxLength of at least 1 (maxLength 0 admits only \"\")");
        n->unique = 1;
    }
    return 0;
}

/* ---- nested schemas: an explicit task stack instead of recursion (the stack check in
 * generator/build/elfcheck.py refuses recursion).  Tasks run in the order schema.py's
 * recursive calls do, so nodes, refs and the first error are the same. */

enum { TASK_SCHEMA, TASK_ARRAY_DONE, TASK_OBJECT_NEXT };

typedef struct {
    uint8_t op;
    int8_t force_ty;
    uint8_t suffix;        /* TASK_SCHEMA: 0 none, 1 ": items", 2 ": property KEY" */
    uint32_t depth;
    uint32_t node;         /* ARRAY_DONE, OBJECT_NEXT: the node */
    uint32_t k;            /* OBJECT_NEXT: the next property */
    size_t s;              /* the schema (TASK_SCHEMA), the properties object (OBJECT_NEXT) */
    size_t key;            /* suffix 2: the key */
    size_t where_n;        /* the location's length before this task's suffix */
    uint16_t *dest;        /* TASK_SCHEMA: where the node index goes */
} ng_task;

#define MAX_TASKS (2u * NEEDLE_GRAMMAR_MAX_DEPTH + 4u)

typedef struct {
    ng_task t[MAX_TASKS];
    uint32_t n;
} ng_tasks;

static ng_task *task_push(ng_tasks *q, uint8_t op)
{
    ng_task *t = &q->t[q->n++];   /* depth <= NEEDLE_GRAMMAR_MAX_DEPTH keeps n < MAX_TASKS */
    memset(t, 0, sizeof *t);
    t->op = op;
    return t;
}

/* An array: its own keywords, then (tasks) its items' schema and array_done. */
static int compile_array(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, uint16_t *dest)
{
    const char *t = T(c);
    ng_store *g = c->g;
    size_t items = needle_json_get(t, s, "\"items\"");
    if (items == NONE) return fail(c, "an array needs items (one schema)");
    int32_t mn = count_kw(c, s, "\"minItems\"", "minItems");
    if (mn == -2) return -1;
    int32_t mx = count_kw(c, s, "\"maxItems\"", "maxItems");
    if (mx == -2) return -1;
    if (mx >= 0 && mx < (mn < 0 ? 0 : mn)) return fail(c, "maxItems is below minItems");
    int unique = 0;
    size_t u = needle_json_get(t, s, "\"uniqueItems\"");
    if (u != NONE) {
        if (!needle_json_is(t, u, "true") && !needle_json_is(t, u, "false")) return fail(c, "uniqueItems must be true or false");
        unique = t[u] == 't';
    }
    uint32_t idx;
    if (add_node(c, NG_ARR, &idx)) return -1;
    *dest = (uint16_t)idx;
    g->node[idx].min_len = mn < 0 ? 0 : mn;
    g->node[idx].max_len = mx;
    g->node[idx].unique = (uint8_t)unique;
    ng_task *done = task_push(q, TASK_ARRAY_DONE);
    done->node = idx;
    done->where_n = c->where_n;
    ng_task *item = task_push(q, TASK_SCHEMA);
    item->s = items;
    item->depth = depth + 1u;
    item->force_ty = TY_NONE;
    item->suffix = 1;
    item->where_n = c->where_n;
    item->dest = &g->node[idx].child;
    return 0;
}


static int array_done(ng_comp *c, uint32_t idx)
{
    ng_store *g = c->g;
    needle_gnode *n = &g->node[idx];
    const needle_gnode *ch = &g->node[n->child];
    if (n->unique) {
        if (ch->kind != NG_LIT)
            return fail(c, "uniqueItems is supported for arrays of enum, const or boolean items only");
        if ((uint32_t)n->min_len > ch->n_ref) {
            fail(c, "minItems ");
            err_u(&c->e, (uint64_t)n->min_len);
            err_s(&c->e, " exceeds the ");
            err_u(&c->e, ch->n_ref);
            err_s(&c->e, " distinct values of its items");
            return -1;
        }
    }
    uint64_t mb = 2u + (n->min_len > 1 ? (uint64_t)n->min_len - 1u : 0u);
    if (n->unique) {   /* distinct values: the min_len shortest alternatives */
        for (uint32_t j = 0; j < (uint32_t)n->min_len; j++) mb += needle_ng_unique_item(&c->v, ch, 0, j);
    } else {
        mb += (uint64_t)n->min_len * ch->min_bytes;
    }
    n->min_bytes = mb > MB_CAP ? MB_CAP : (uint32_t)mb;
    return 0;
}

/* An object: its own keywords and keys, then (tasks) each property's schema in turn. */
static int compile_object(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, uint16_t *dest)
{
    const char *t = T(c);
    ng_store *g = c->g;
    size_t props = needle_json_get(t, s, "\"properties\"");
    size_t extra = needle_json_get(t, s, "\"additionalProperties\"");
    if (extra != NONE && !needle_json_is(t, extra, "false"))
        return fail(c, "additionalProperties may only be false (no unknown keys are ever generated)");
    uint32_t idx;
    if (add_node(c, NG_OBJ, &idx)) return -1;
    *dest = (uint16_t)idx;
    uint32_t nprops = 0;
    size_t key, val;
    if (props != NONE) {
        if (t[props] != '{') return fail(c, "properties must be an object");
        while (needle_json_member(t, props, nprops, &key, &val)) nprops++;
        if (nprops > NEEDLE_GRAMMAR_MAX_PROPS) {
            return fail_count(c, "", nprops, " properties, the grammar takes 32");
        }
        g->node[idx].ref0 = g->node[idx].sub0 = (uint16_t)g->n_ref;
        g->node[idx].n_ref = (uint16_t)nprops;
        for (uint32_t k = 0; k < nprops; k++) {   /* the keys' refs first, the subs beside them */
            needle_json_member(t, props, k, &key, &val);
            if (add_ref(c, key, needle_json_end(t, key) - key)) return -1;
        }
    }
    ng_task *next = task_push(q, TASK_OBJECT_NEXT);
    next->node = idx;
    next->k = 0;
    next->s = s;
    next->depth = depth;
    next->where_n = c->where_n;
    return 0;
}

/* The object's next property (a task), or, after the last, its required list. */
static int object_next(ng_comp *c, ng_tasks *q, const ng_task *task)
{
    const char *t = T(c);
    ng_store *g = c->g;
    needle_gnode *n = &g->node[task->node];
    size_t props = needle_json_get(t, task->s, "\"properties\""), key, val;
    if (task->k < n->n_ref) {
        ng_task *next = task_push(q, TASK_OBJECT_NEXT);
        *next = *task;
        next->k++;
        needle_json_member(t, props, task->k, &key, &val);
        ng_task *sub = task_push(q, TASK_SCHEMA);
        sub->s = val;
        sub->depth = task->depth + 1u;
        sub->force_ty = TY_NONE;
        sub->suffix = 2;
        sub->key = key;
        sub->where_n = task->where_n;
        sub->dest = &g->sub[n->sub0 + task->k];
        return 0;
    }
    size_t req = needle_json_get(t, task->s, "\"required\"");
    if (req != NONE) {
        size_t v;
        if (t[req] != '[') return fail(c, "required must be an array of strings");
        for (uint32_t k = 0; needle_json_item(t, req, k, &v); k++)
            if (t[v] != '"') return fail(c, "required must be an array of strings");
        for (uint32_t k = 0; needle_json_item(t, req, k, &v); k++) {
            uint32_t m = 0, found = 0;
            for (; m < n->n_ref; m++) {
                const needle_gref *r = &g->ref[n->ref0 + m];
                if (needle_json_end(t, v) - v == r->len && !memcmp(t + v, t + r->off, r->len)) { found = 1; break; }
            }
            if (!found) {
                fail(c, "required names ");
                err_str(&c->e, t + v, needle_json_end(t, v) - v);
                err_s(&c->e, ", which is not in properties");
                return -1;
            }
            n->required |= 1u << m;
        }
    }
    uint32_t total = 2, cnt = 0;
    for (uint32_t k = 0; k < n->n_ref; k++)
        if (n->required >> k & 1u) { total += g->ref[n->ref0 + k].len + 1u + g->node[g->sub[n->sub0 + k]].min_bytes; cnt++; }
    total += cnt ? cnt - 1u : 0u;
    n->min_bytes = total > MB_CAP ? MB_CAP : total;
    return 0;
}

static int schema_one(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, int force_ty, uint16_t *dest);

/* Compile the schema at s and everything nested in it; its node index into *dest. */
static int compile_schema(ng_comp *c, size_t s, uint32_t depth, int force_ty, uint16_t *dest)
{
    static ng_tasks q;
    q.n = 0;
    ng_task *first = task_push(&q, TASK_SCHEMA);
    first->s = s;
    first->depth = depth;
    first->force_ty = (int8_t)force_ty;
    first->where_n = c->where_n;
    first->dest = dest;
    while (q.n) {
        ng_task task = q.t[--q.n];
        c->where_n = task.where_n;
        if (task.op == TASK_SCHEMA) {
            size_t ignored;
            if (task.suffix == 1) where_push(c, ": items", 7, &ignored);
            if (task.suffix == 2) {
                where_push(c, ": property ", 11, &ignored);
                where_push(c, T(c) + task.key, needle_json_end(T(c), task.key) - task.key, &ignored);
            }
            if (schema_one(c, &q, task.s, task.depth, task.force_ty, task.dest)) return -1;
        } else if (task.op == TASK_ARRAY_DONE) {
            if (array_done(c, task.node)) return -1;
        } else if (object_next(c, &q, &task)) return -1;
    }
    return 0;
}

/* The schema at s: a leaf's node into *dest, or an array's or object's node with tasks
 * for what is nested.  force_ty >= 0: read as if its "type" were that (the arguments of a
 * tool whose parameters omit it). */
static int schema_one(ng_comp *c, ng_tasks *q, size_t s, uint32_t depth, int force_ty, uint16_t *dest)
{
    ng_store *g = c->g;
    const char *t = T(c);
    if (depth > NEEDLE_GRAMMAR_MAX_DEPTH) return fail(c, "nested deeper than the grammar's 13 levels of arguments");
    if (t[s] != '{') return fail(c, "a schema must be a JSON object");
    size_t typ = needle_json_get(t, s, "\"type\""), en = needle_json_get(t, s, "\"enum\""), co = needle_json_get(t, s, "\"const\"");
    int ty = typ == NONE ? force_ty : TY_NONE;
    if (typ != NONE) {
        for (int k = 0; k < 7; k++) if (needle_json_is(t, typ, TYPE_NAMES[k])) ty = k;
        if (ty == TY_NONE)
            return fail(c, "type must be one of string, integer, number, boolean, null, array, object "
                           "(type lists are not supported)");
    }
    size_t sp = needle_json_get(t, s, SPAN_KEY);
    if (sp != NONE) {
        if (!needle_json_is(t, sp, "true") && !needle_json_is(t, sp, "false")) return fail(c, "\"x-needle-span\" must be true or false");
        if (needle_json_is(t, sp, "true")) {
            static const char *const never[3] = { "\"enum\"", "\"const\"", "\"pattern\"" };
            if (ty != TY_STRING)
                return fail(c, "\"x-needle-span\" needs type string (it copies a span of the query into a string)");
            for (int k = 0; k < 3; k++) {
                if (needle_json_get(t, s, never[k]) == NONE) continue;
                fail(c, "\"x-needle-span\" cannot be combined with ");
                err_s(&c->e, never[k]);
                err_s(&c->e, " (a span is any text of the query): drop one of them");
                return -1;
            }
        }
    }
    size_t key, val;
    for (uint32_t k = 0; needle_json_member(t, s, k, &key, &val); k++) {
        if (keyword_allowed(t, key, ty)) continue;
        size_t kl = needle_json_end(t, key) - key;
        fail(c, "unsupported keyword ");
        err_str(&c->e, t + key, kl);
        if (ty != TY_NONE) {
            err_s(&c->e, " for type ");
            err_str(&c->e, TYPE_NAMES[ty] + 1, strlen(TYPE_NAMES[ty]) - 2);
        }
        err_s(&c->e, " (supported: ");
        if (ty == TY_NONE) {
            err_s(&c->e, SUPPORTED_ANY);
            err_s(&c->e, "; per type: docs/grammar.md");
        } else if (SUPPORTED_FOR[ty][0]) {
            err_s(&c->e, SUPPORTED_FOR[ty]);
            err_s(&c->e, "; type, enum, const, annotations");
        } else {
            err_s(&c->e, SUPPORTED_ANY);
        }
        err_s(&c->e, ")");
        return -1;
    }
    if (en != NONE || co != NONE) {
        if (en != NONE && co != NONE) return fail(c, "give enum or const, not both");
        /* the values are the whole set: a keyword that narrows it is refused */
        for (uint32_t k = 0; ty != TY_NONE && needle_json_member(t, s, k, &key, &val); k++) {
            if (keyword_allowed(t, key, TY_NONE)) continue;
            fail(c, en != NONE ? "enum" : "const");
            err_s(&c->e, " cannot be combined with ");
            err_str(&c->e, t + key, needle_json_end(t, key) - key);
            err_s(&c->e, " (list only the values it allows)");
            return -1;
        }
        uint32_t idx, nalt = 0, nkept = 0;
        size_t v = 0;
        if (en != NONE) {
            if (t[en] != '[' || t[en + 1] == ']') return fail(c, "enum must be a non-empty array");
            while (needle_json_item(t, en, nalt, &v)) nalt++;
            if (nalt > NEEDLE_GRAMMAR_MAX_ALTS) {
                return fail_count(c, "enum has ", nalt, " values, the grammar takes 64");
            }
            for (uint32_t a = 0; a < nalt; a++)     /* equal as JSON values (1, 1.0, 1e0; 0 and -0) */
                for (uint32_t b = 0; b < a; b++) {
                    size_t va = 0, vb = 0;
                    needle_json_item(t, en, a, &va);
                    needle_json_item(t, en, b, &vb);
                    if (!needle_json_equal(t, va, vb)) continue;
                    fail(c, "enum repeats a value (");
                    err_str(&c->e, t + vb, needle_json_end(t, vb) - vb);
                    err_s(&c->e, " and ");
                    err_str(&c->e, t + va, needle_json_end(t, va) - va);
                    err_s(&c->e, " are equal JSON values)");
                    return -1;
                }
        } else nalt = 1;
        for (uint32_t a = 0; a < nalt; a++) {
            if (en != NONE) needle_json_item(t, en, a, &v); else v = co;
            if (t[v] == '{' || t[v] == '[')
                return fail(c, "enum and const values must be strings, numbers, booleans or null");
            if (of_type(t, v, ty)) nkept++;
        }
        if (nkept == 0) {       /* a value must also be of the type (jsonschema checks both) */
            fail(c, en != NONE ? "no enum" : "no const");
            err_s(&c->e, " value is of type ");
            err_str(&c->e, TYPE_NAMES[ty] + 1, strlen(TYPE_NAMES[ty]) - 2);
            return -1;
        }
        if (add_node(c, NG_LIT, &idx)) return -1;
        needle_gnode *n = &g->node[idx];
        n->ref0 = (uint16_t)g->n_ref;
        n->n_ref = (uint16_t)nkept;
        n->min_bytes = INF;
        for (uint32_t a = 0; a < nalt; a++) {
            if (en != NONE) needle_json_item(t, en, a, &v); else v = co;
            if (!of_type(t, v, ty)) continue;
            size_t l = needle_json_end(t, v) - v;
            if (add_ref(c, v, l)) return -1;
            if (l < n->min_bytes) n->min_bytes = (uint32_t)l;
        }
        *dest = (uint16_t)idx;
        return 0;
    }
    if (ty == TY_NONE) return fail(c, "a schema needs a type (or enum/const)");
    if (ty == TY_BOOLEAN || ty == TY_NULL) {
        /* the words live in the grammar's text, after the tool list and its NUL (compile) */
        uint32_t idx;
        if (add_node(c, NG_LIT, &idx)) return -1;
        needle_gnode *n = &g->node[idx];
        n->ref0 = (uint16_t)g->n_ref;
        if (ty == TY_BOOLEAN) {
            n->n_ref = 2;
            if (add_ref(c, g->text_len + 1u, 4) || add_ref(c, g->text_len + 5u, 5)) return -1;
            n->min_bytes = 4;
        } else {
            n->n_ref = 1;
            if (add_ref(c, g->text_len + 10u, 4)) return -1;   /* "null" */
            n->min_bytes = 4;
        }
        *dest = (uint16_t)idx;
        return 0;
    }
    if (ty == TY_INTEGER || ty == TY_NUMBER || ty == TY_STRING) {
        uint32_t idx;
        needle_gnode tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.kind = ty == TY_INTEGER ? NG_INT : ty == TY_NUMBER ? NG_NUM : NG_STR;
        tmp.lo = -BIG; tmp.hi = BIG; tmp.mult = 1; tmp.max_len = -1;
        if (ty == TY_STRING ? compile_string(c, s, &tmp) : compile_number(c, s, ty, &tmp)) return -1;
        if (add_node(c, tmp.kind, &idx)) return -1;
        g->node[idx] = tmp;
        *dest = (uint16_t)idx;
        return 0;
    }
    if (ty == TY_ARRAY) return compile_array(c, q, s, depth, dest);
    return compile_object(c, q, s, depth, dest);
}

static int text_too_long(ng_comp *c)
{
    c->e.n = 0;
    err_s(&c->e, "the tool list is longer than the grammar's ");
    err_u(&c->e, NEEDLE_GRAMMAR_TEXT_MAX);
    err_s(&c->e, " bytes once minified (NEEDLE_GRAMMAR_TEXT_MAX)");
    return -1;
}

_Static_assert(NEEDLE_GRAMMAR_MAX_TOOLS <= NEEDLE_TOOLSET_MAX_TOOLS, "a record keeps every tool's threshold");

int needle_grammar_compile(needle_grammar *grammar, const char *tools_json, size_t len, int force_call,
                           char *err, size_t errcap)
{
    return needle_grammar_compile_toolset(grammar, NULL, tools_json, len, force_call, err, errcap);
}

int needle_grammar_compile_toolset(needle_grammar *grammar, const needle_toolset *ts, const char *tools_json,
                                   size_t len, int force_call, char *err, size_t errcap)
{
    static char work[NEEDLE_GRAMMAR_TEXT_MAX + 96u];
    static ng_comp c;      /* static: frames stay small (the watches' stack guard is 1 KiB) */
    size_t v, ignored;
    needle_grammar *out = grammar;
    c.g = &store;
    memset(&store, 0, sizeof store);
    memset(&c.v, 0, sizeof c.v);
    c.v.text = store.text; c.v.node = store.node; c.v.ref = store.ref; c.v.sub = store.sub;
    c.v.item = store.item; c.v.range = (const uint32_t (*)[2])store.range; c.v.rest = store.rest;
    c.v.force_call = force_call;
    c.e.buf = err; c.e.cap = err ? errcap : 0; c.e.n = 0;
    c.where_n = c.tool_n = 0;
    if (c.e.cap) err[0] = 0;
    ng_store *g = &store;

    /* minify with the prompt's rules: render an empty query and keep the tools span (the
     * turn's record of the list, when there is one, has it minified already) */
    needle_prompt_untrusted u;
    int n = needle_toolset_render(ts, tools_json, len, "", NULL, work, sizeof work, err, errcap, &u, g->tool_ppm,
                                  NEEDLE_GRAMMAR_MAX_TOOLS);
    if (n == NEEDLE_PROMPT_E_SPACE || (n >= 0 && u.span[0].len > NEEDLE_GRAMMAR_TEXT_MAX)) return text_too_long(&c);
    if (n < 0) return -1;
    memcpy(g->text, work + u.span[0].start, u.span[0].len);
    g->text_len = u.span[0].len;
    /* the words of boolean and null nodes after the list's NUL: true at +1, false +5, null +10 */
    memcpy(g->text + g->text_len + 1u, "truefalsenull", 14);
    const char *t = g->text;

    uint32_t ntools = 0;
    while (needle_json_item(t, 0, ntools, &v)) ntools++;
    if (ntools == 0 && force_call) { err_s(&c.e, "--force-call needs at least one tool"); return -1; }
    if (ntools > NEEDLE_GRAMMAR_MAX_TOOLS) {
        err_u(&c.e, ntools);
        err_s(&c.e, " tools; a tool list holds at most 32 (NEEDLE_GRAMMAR_MAX_TOOLS): split it");
        return -1;
    }
    uint32_t calls, call;
    if (add_node(&c, NG_CALLS, &calls) || add_node(&c, NG_CALL, &call)) return -1;
    needle_gnode *cn = &g->node[call];
    g->node[calls].min_len = force_call ? 1 : 0;
    g->node[calls].child = (uint16_t)call;
    cn->ref0 = cn->sub0 = (uint16_t)g->n_ref;
    cn->n_ref = (uint16_t)ntools;
    for (uint32_t i = 0; i < ntools; i++) if (add_ref(&c, 0, 0)) return -1;   /* the names, below */
    for (uint32_t i = 0; i < ntools; i++) {
        needle_json_item(t, 0, i, &v);
        size_t name = t[v] == '{' ? needle_json_get(t, v, "\"name\"") : NONE;
        if (name == NONE || t[name] != '"' || t[name + 1] == '"') {
            err_s(&c.e, "tool ");
            err_u(&c.e, i + 1u);
            err_s(&c.e, ": needs a non-empty string \"name\"");
            return -1;
        }
        size_t nl = needle_json_end(t, name) - name;
        c.where_n = 0;
        where_push(&c, "tool ", 5, &ignored);
        where_push(&c, t + name, nl, &ignored);
        c.tool_n = c.where_n;
        for (uint32_t k = 0; k < i; k++) {
            const needle_gref *r = &g->ref[cn->ref0 + k];
            if (r->len == nl && !memcmp(t + r->off, t + name, nl))
                return fail(&c, "the name is used by an earlier tool (names must be unique)");
        }
        g->ref[cn->ref0 + i].off = (uint32_t)name;
        g->ref[cn->ref0 + i].len = (uint32_t)nl;
        size_t params = needle_json_get(t, v, "\"parameters\"");
        uint32_t args;
        if (params == NONE) {   /* no parameters: "arguments":{} */
            if (add_node(&c, NG_OBJ, &args)) return -1;
            g->node[args].min_bytes = 2;
        } else {
            size_t ty = t[params] == '{' ? needle_json_get(t, params, "\"type\"") : NONE;
            if (t[params] != '{' || (ty != NONE && !needle_json_is(t, ty, "\"object\"")))
                return fail(&c, "parameters must be an object schema with type \"object\"");
            if (compile_schema(&c, params, 3, TY_OBJECT, &g->sub[cn->sub0 + i])) return -1;
            continue;
        }
        g->sub[cn->sub0 + i] = (uint16_t)args;
    }
    uint32_t best = INF;
    for (uint32_t i = 0; i < ntools; i++) {
        uint32_t m = g->ref[cn->ref0 + i].len + g->node[g->sub[cn->sub0 + i]].min_bytes;
        uint32_t shortest = 2u + (uint32_t)(CALL_HEAD_LEN + CALL_MID_LEN + 1u) + m;
        if (shortest > NEEDLE_CALL_MAX_JSON) {   /* a call that can never fit the envelope */
            err_s(&c.e, "tool ");
            err_str(&c.e, t + g->ref[cn->ref0 + i].off, g->ref[cn->ref0 + i].len);
            err_s(&c.e, ": its shortest call takes ");
            if (g->node[g->sub[cn->sub0 + i]].min_bytes >= MB_CAP) err_s(&c.e, "more than 32768");
            else err_u(&c.e, shortest);
            err_s(&c.e, " bytes but a call list holds 4096 (NEEDLE_CALL_MAX_JSON): relax its minLength, "
                        "minItems or required arguments");
            return -1;
        }
        if (m < best) best = m;
    }
    cn->min_bytes = (ntools ? best : 0u) + (uint32_t)(CALL_HEAD_LEN + CALL_MID_LEN + 1u);
    g->node[calls].min_bytes = 2u + (force_call ? cn->min_bytes : 0u);
    c.v.text_len = g->text_len;
    c.v.n_node = g->n_node; c.v.n_ref = g->n_ref; c.v.n_item = g->n_item;
    c.v.n_range = g->n_range; c.v.n_rest = g->n_rest;
    c.v.n_tools = ntools;
    c.v.tool_ppm = g->tool_ppm;
    *out = c.v;
    return 0;
}
size_t needle_grammar_ram_bytes(const needle_grammar *g)
{
#if NEEDLE_GRAMMAR_RUNTIME
    return g->text == store.text ? sizeof store : 0u;
#else
    (void)g;
    return 0u;      /* the built-in tables only: the store is not linked */
#endif
}
