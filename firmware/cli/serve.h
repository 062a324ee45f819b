/* serve.h -- the service mode (`needle --serve`, cli/serve_*.c, Linux boards only) and the
 * generation core it shares with the command line (cli/main.c, every board).
 *
 * The service answers JSON-line requests on standard input or a Unix socket and keeps a
 * session (the engine's KV cache) between them; docs/serve.md is the protocol.  Both front
 * ends turn a prompt into token ids themselves and hand them to needle_generate_ids(), so a
 * request on a fresh session chooses the same tokens as `needle --prompt` / `--query`.
 */
#ifndef NEEDLE_SERVE_H
#define NEEDLE_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "needle_session.h"   /* the generation core both front ends share */
#include "needle_tokenizer.h"

/* ---- the service (cli/serve_transport.c, serve_requests.c, serve_sessions.c) -------------- */

/* Longest request line, in bytes (the newline excluded): a tools array as large as a
 * --tools file plus a prompt as long as the tokenizer takes.  Longer lines are discarded up
 * to the next newline and answered with an error. */
#define NEEDLE_SERVE_LINE_MAX (64u * 1024u + NEEDLE_TOK_MAX_TEXT)

/* The default of --idle-timeout: seconds a socket client may take to send a whole request
 * line (from connecting or from its last answer) or to take an answer. */
#define NEEDLE_SERVE_IDLE_TIMEOUT 30u

/* Serve requests until standard input ends (socket_path NULL; exit status 0), or forever on
 * the Unix socket socket_path, one connection at a time, dropping a connection that sends no
 * whole request or takes no answer for idle_timeout seconds (0: never).  tools_json[0..tools_len)
 * is the --tools file (already checked; NULL if none was given), max_new the default of a
 * request's "max_new", archive_path the --archive file (placement `file`: watched, the
 * service ends with status 3 when it changes on disk; NULL for a linked archive).  Call after
 * needle_boot().  Returns the exit status after printing one "needle: error: ..." line on
 * failure (1: I/O, e.g. the socket cannot be made; 3: the archive file changed).
 * min_confidence (parts per million) and overrides: the defaults of a request's
 * "min_confidence" and "overrides" (needle_envelope_judge). */
int needle_serve(const char *socket_path, const char *archive_path, const char *tools_json, size_t tools_len,
                 uint32_t max_new, uint32_t idle_timeout, uint32_t min_confidence, int overrides);

#endif /* NEEDLE_SERVE_H */
