/* needle_session_internal.h -- the readers of a turn's tool set (needle_toolset.h) that the
 * text-level API (needle_session.c) and the service's sessions share.  Internal to the
 * library: not installed.  Each is its public namesake reading the record instead of the
 * tools JSON: the same bytes, results and messages.
 */
#ifndef NEEDLE_SESSION_INTERNAL_H
#define NEEDLE_SESSION_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "needle_retrieval.h"
#include "needle_session.h"
#include "needle_tool_call.h"
#include "needle_toolset.h"

/* needle_retrieve of the record's list (ts filled by needle_toolset_parse into a
 * NEEDLE_TOK_MAX_TEXT + 1 byte buffer, the one needle_retrieve renders into).  When it
 * chooses, the five are written into out[0..cap), or over the record's own list when out is
 * NULL, and ts becomes their record (needle_toolset_choose). */
const char *needle_retrieve_toolset(needle_toolset *ts, const char *query, char *out, size_t cap, size_t *out_len,
                                    needle_retrieval *r, char *err, size_t errcap);

/* needle_tool_prompt of the record's list. */
int needle_tool_prompt_toolset(const needle_toolset *ts, const char *query, const char *system, int plain_markers,
                               char *out, size_t cap, needle_tok_span *plain, size_t *n_plain, char *err,
                               size_t errcap);

/* needle_call_grammar of the record's list. */
int needle_call_grammar_toolset(needle_grammar *g, const needle_toolset *ts, int force_call, char *err,
                                size_t errcap);

#endif /* NEEDLE_SESSION_INTERNAL_H */
