/* needle_retrieval.h -- tool retrieval with the embedding head (docs/grammar.md, "Retrieval").
 *
 * With more than NEEDLE_RETRIEVE_TOP tools, the official engine renders only the best five
 * for the query: every tool and the query are embedded by the contrastive (Needle 2) or
 * embedding (Needle 3) head, code 1, and scored by the dot product of the two unit vectors.
 * Twin of generator/tools/retrieval.py.
 *
 * [FLAG] renderings (the spec does not say): a tool is embedded as BOS and its minified JSON
 * object, a query as BOS and its text, both encoded with chat markers as plain text.  The
 * five best are rendered in the tool list's order; a tie in score goes to the earlier tool.
 */
#ifndef NEEDLE_RETRIEVAL_H
#define NEEDLE_RETRIEVAL_H

#include <stddef.h>
#include <stdint.h>

#include "needle_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* This engine has the embedding head (scons head_tokens=N on an archive with head code 1). */
#if defined(NEEDLE_HEAD_CONTRASTIVE) || defined(NEEDLE_HEAD_EMBEDDING)
#define NEEDLE_CAN_RETRIEVE 1
#else
#define NEEDLE_CAN_RETRIEVE 0
#endif

#define NEEDLE_RETRIEVE_TOP   5u    /* tools rendered when there are more */
#define NEEDLE_RETRIEVE_TOOLS 32u   /* tools a list may hold (the grammar's NEEDLE_GRAMMAR_MAX_TOOLS) */

typedef struct {
    uint32_t count;                        /* tools in the list */
    uint32_t n_chosen;                     /* 0: the list is short enough, every tool rendered */
    uint32_t chosen[NEEDLE_RETRIEVE_TOP];  /* the tools rendered, ascending indices */
    uint32_t tokens;                       /* tokens run through the engine to embed: the query's,
                                            * and the tools' unless they came from flash */
} needle_retrieval;

/* The tools to render for `query`: with at most NEEDLE_RETRIEVE_TOP tools, the list itself
 * (r->n_chosen = 0); with more, the best NEEDLE_RETRIEVE_TOP as a JSON array written into
 * out[0..cap) (minified, NUL-terminated).  Runs the engine (it is reset before and after).
 * Returns the tools JSON to render and compile (tools_json itself or out) with its length in
 * *out_len, or NULL with a one-line message in err: invalid tools JSON, or a tool or the
 * query longer than head_tokens.  The built-in list (scons tools=FILE head_tokens=N) has its
 * tools' embeddings in flash, computed at build time: only the query is embedded.  An engine
 * without the embedding head (built without
 * head_tokens=N, or an archive without the head) renders every tool: n_chosen stays 0. */
const char *needle_retrieve(const char *tools_json, size_t len, const char *query, char *out, size_t cap,
                            size_t *out_len, needle_retrieval *r, char *err, size_t errcap);

#ifdef __cplusplus
}
#endif

#endif /* NEEDLE_RETRIEVAL_H */
