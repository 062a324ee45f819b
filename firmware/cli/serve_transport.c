/* serve_transport.c -- the transport of `needle --serve` (serve_internal.h): request lines
 * in and answers out, buffered, with deadlines on a socket connection; one connection at a
 * time on a Unix socket, or standard input and output; needle_serve().
 */
#define _POSIX_C_SOURCE 200809L   /* sigaction, lstat, clock_gettime, poll under -std=c11 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hal.h"
#include "needle_json_scan.h"
#include "serve_internal.h"

char request_line[LINE_MAX_BYTES + 2];
static char rbuf[4096];                        /* bytes read ahead of it */
static char wbuf[4096];                        /* the answer being written */

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* s[0..n) as the inside of a JSON string (RFC 8259): quote and backslash escaped, control
 * characters as \u00XX, valid UTF-8 as it is, any invalid byte as \ufffd (the replacement
 * character); the pieces go to put(user, ...). */
void json_escape(const char *s, size_t n, void (*put)(void *, const char *, size_t), void *user)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t run = i;   /* bytes that need no escaping go out in one piece */
        for (;;) {
            if (run >= n || u[run] < 0x20 || u[run] == '"' || u[run] == '\\') break;
            uint32_t cp;
            size_t k = needle_utf8_decode(u + run, n - run, &cp);
            if (!k) break;
            run += k;
        }
        put(user, s + i, run - i);
        i = run;
        if (i >= n) break;
        if (u[i] == '"' || u[i] == '\\') {
            char esc[2] = { '\\', (char)u[i] };
            put(user, esc, 2);
        } else if (u[i] < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", (unsigned)u[i]);
            put(user, esc, 6);
        } else {
            put(user, "\\ufffd", 6);
        }
        i++;
    }
}


void t_put(void *user, const char *s, size_t n)
{
    textbuf *b = user;
    size_t k = b->cap - 1 - b->n < n ? b->cap - 1 - b->n : n;
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = 0;
}

/* ==================================================================================
 * Output: one buffered writer per connection
 * ================================================================================== */
volatile sig_atomic_t answer_fd = 1, answer_mid_line;


void w_flush(writer *w)
{
    const double deadline = now_ms() + w->timeout_ms;
    for (size_t off = 0; off < w->n && !w->failed;) {
        ssize_t k = write(w->fd, wbuf + off, w->n - off);
        if (k >= 0) {
            off += (size_t)k;
            continue;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {   /* a non-blocking peer that is full */
            struct pollfd p = { w->fd, POLLOUT, 0 };
            double left = deadline - now_ms();
            int ready = poll(&p, 1, w->timeout_ms <= 0 ? -1 : left > 0 ? (int)left + 1 : 0);
            if (ready > 0 || (ready < 0 && errno == EINTR)) continue;
            w->failed = 1;
            w->err = ready == 0 ? ETIMEDOUT : errno;
            break;
        }
        w->failed = 1;
        w->err = errno;
    }
    if (w->n && !w->failed) answer_mid_line = wbuf[w->n - 1] != '\n';
    w->n = 0;
}

void w_put(writer *w, const char *s, size_t n)
{
    while (n && !w->failed) {
        if (w->n == sizeof wbuf) w_flush(w);
        size_t k = sizeof wbuf - w->n < n ? sizeof wbuf - w->n : n;
        memcpy(wbuf + w->n, s, k);
        w->n += k;
        s += k;
        n -= k;
    }
}

void w_str(writer *w, const char *s) { w_put(w, s, strlen(s)); }

static void w_sink(void *user, const char *s, size_t n) { w_put(user, s, n); }

void w_fmt(writer *w, const char *fmt, ...)
{
    char b[96];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n > 0) w_put(w, b, (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* s[0..n) as a JSON string (json_escape). */
void w_json_string(writer *w, const char *s, size_t n)
{
    w_put(w, "\"", 1);
    json_escape(s, n, w_sink, w);
    w_put(w, "\"", 1);
}

/* %.3f, or 0 for a quantity that was not measured */
void w_num(writer *w, const char *key, double v)
{
    w_fmt(w, ",\"%s\":%.3f", key, v == v && v >= 0 && v < 1e15 ? v : 0.0);
}

/* ==================================================================================
 * Input: lines of at most LINE_MAX_BYTES bytes
 * ================================================================================== */
typedef struct {
    int fd;
    size_t start, end;   /* unread bytes rbuf[start..end) */
    int eof;
    int timeout_ms;      /* > 0: a whole line must arrive within it (LINE_IDLE) */
} reader;

enum { LINE_OK, LINE_LONG, LINE_EOF, LINE_ERROR, LINE_IDLE };

/* The next line into request_line[0..*len) (NUL-terminated, newline dropped; the last line may lack
 * its newline).  A line over LINE_MAX_BYTES (a CR before its newline not counted: CRLF line
 * ends) is read to its end and dropped: LINE_LONG, with its first LINE_MAX_BYTES bytes in
 * request_line[0..*len), whose id is echoed when it can be.  With a timeout, a line that does not
 * arrive whole within it is LINE_IDLE. */
static int read_line(reader *r, size_t *len)
{
    const double deadline = now_ms() + r->timeout_ms;
    size_t n = 0;
    int over = 0, any = 0;
    for (;;) {
        if (r->start == r->end) {
            if (r->eof) {
                if (!any) return LINE_EOF;
                break;
            }
            if (r->timeout_ms > 0) {
                struct pollfd p = { r->fd, POLLIN, 0 };
                double left = deadline - now_ms();   /* for the whole line: a trickle does not reset it */
                int ready = left > 0 ? poll(&p, 1, (int)left + 1) : 0;
                if (ready < 0 && errno != EINTR) return LINE_ERROR;
                if (ready == 0) return LINE_IDLE;
                if (ready < 0) continue;
            }
            ssize_t k = read(r->fd, rbuf, sizeof rbuf);
            if (k < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) {   /* a non-blocking descriptor */
                    struct pollfd p = { r->fd, POLLIN, 0 };
                    if (r->timeout_ms <= 0) poll(&p, 1, -1);
                    continue;
                }
                if (errno == EINTR) continue;
                return LINE_ERROR;
            }
            r->start = 0;
            r->end = (size_t)k;
            if (k == 0) r->eof = 1;
            continue;
        }
        any = 1;
        char *from = rbuf + r->start, *nl = memchr(from, '\n', r->end - r->start);
        size_t take = nl ? (size_t)(nl - from) : r->end - r->start;
        if (!over) {   /* room for the limit and a CR */
            size_t room = LINE_MAX_BYTES + 1 - n, k = take < room ? take : room;
            memcpy(request_line + n, from, k);
            n += k;
            over = take > k;
        }
        r->start += take + (nl != NULL);
        if (nl) break;
    }
    if (n > LINE_MAX_BYTES && request_line[n - 1] != '\r') over = 1;
    if (over && n > LINE_MAX_BYTES) n = LINE_MAX_BYTES;
    request_line[n] = 0;
    *len = n;
    return over ? LINE_LONG : LINE_OK;
}

/* ==================================================================================
 * Sessions and the socket
 * ================================================================================== */
enum { SESSION_EOF, SESSION_WRITE, SESSION_READ, SESSION_IDLE, SESSION_ARCHIVE };

static uint32_t idle_timeout_s;   /* --idle-timeout: of a socket connection; 0: none */

/* Answer every line of `in` on `out` until `in` ends (or `out` fails, or the archive file
 * changed: SESSION_ARCHIVE).  A fresh session.  timeout_s > 0 (a socket connection): a
 * request line must arrive whole, and an answer be taken, within it, or the connection
 * ends (SESSION_IDLE after a last answer saying so, SESSION_WRITE). */
static int session(int in, int out, uint32_t timeout_s, int *err)
{
    const int timeout_ms = timeout_s > 0 ? (int)(timeout_s * 1000u) : 0;
    reader r = { in, 0, 0, 0, timeout_ms };
    writer w = { out, 0, 0, 0, timeout_ms };
    answer_fd = out;
    answer_mid_line = 0;
    serve_session_start();
    for (;;) {
        size_t len = 0;
        int k = read_line(&r, &len);
        if (k == LINE_EOF) return SESSION_EOF;
        if (k == LINE_ERROR) { *err = errno; return SESSION_READ; }
        if (k == LINE_IDLE) {
            answer_error(&w, NULL, "no whole request line in %u s: the connection is closed (the service serves "
                                   "one connection at a time; send each request within --idle-timeout seconds of "
                                   "connecting or of the last answer, or connect again)", timeout_s);
            w_flush(&w);
            return SESSION_IDLE;
        }
        if (k == LINE_LONG) {
            request q;
            parse_prefix(&q, utf8_valid(len));
            answer_error(&w, q.id ? &q : NULL, "request line longer than %u bytes: send a shorter prompt or tools "
                                               "array (the line was skipped)", LINE_MAX_BYTES);
        } else {
            if (len && request_line[len - 1] == '\r') request_line[--len] = 0;   /* CRLF line ends */
            size_t i = 0;
            while (i < len && (request_line[i] == ' ' || request_line[i] == '\t' || request_line[i] == '\r')) i++;
            if (i == len) continue;   /* blank lines are not requests */
            serve_handle(&w, len);
        }
        w_flush(&w);
        if (serve_archive_gone()) return SESSION_ARCHIVE;
        if (w.failed) { *err = w.err; return SESSION_WRITE; }
    }
}

static int serve_socket(const char *path)
{
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr.sun_path)
        return hal_fail(2, "--socket %s: the path is longer than %zu bytes (choose a shorter one, e.g. "
                       "/var/run/needle.sock)", path, sizeof addr.sun_path - 1);
    memcpy(addr.sun_path, path, strlen(path) + 1);
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return hal_fail(1, "%s exists and is not a socket: remove it or pass another --socket PATH", path);
        /* a running service accepts the connection; a stale socket file refuses it */
        int probe = socket(AF_UNIX, SOCK_STREAM, 0);
        int live = probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof addr) == 0;
        if (probe >= 0) close(probe);
        if (live) return hal_fail(1, "another service is listening on %s: stop it or pass another --socket PATH", path);
        if (unlink(path) && errno != ENOENT)
            return hal_fail(1, "cannot remove the stale socket %s: %s", path, strerror(errno));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return hal_fail(1, "cannot create a socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 8)) {
        int e = errno;
        close(fd);
        return hal_fail(1, "cannot listen on %s: %s", path, strerror(e));
    }
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
            int e = errno;
            close(fd);
            return hal_fail(1, "cannot accept a connection on %s: %s", path, strerror(e));
        }
        if (idle_timeout_s > 0) fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);   /* writes with a deadline */
        int err = 0;
        int end = session(c, c, idle_timeout_s, &err);   /* a client that went away only ends its own session */
        close(c);
        if (end == SESSION_ARCHIVE) {
            close(fd);
            return hal_fail(3, "%s", serve_archive_gone());
        }
    }
}

int needle_serve(const char *socket_path, const char *archive_path, const char *tools_json, size_t tools_len,
                 uint32_t max_new, uint32_t idle_timeout, uint32_t min_confidence, int overrides)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);   /* a reader that went away is a write error, not a signal */
    idle_timeout_s = idle_timeout;
    serve_start(archive_path, tools_json, tools_len, max_new, min_confidence, overrides);
    hal_flush();
    if (socket_path) return serve_socket(socket_path);
    int err = 0;
    switch (session(0, 1, 0, &err)) {
    case SESSION_ARCHIVE:
        return hal_fail(3, "%s", serve_archive_gone());
    case SESSION_WRITE:
        return hal_fail(1, "cannot write standard output: %s (check where it is redirected)", strerror(err));
    case SESSION_READ:
        return hal_fail(1, "cannot read standard input: %s", strerror(err));
    default:
        return 0;
    }
}
