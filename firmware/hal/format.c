/* A small, bounded printf subset for targets without stdio (and with it, for one code path). */
#include <stdint.h>
#include <string.h>

#include "hal.h"

static size_t put(char *buf, size_t cap, size_t at, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, at++)
        if (at + 1 < cap) buf[at] = s[i];
    return at;
}

static size_t put_unsigned(char *buf, size_t cap, size_t at, unsigned long long v, unsigned base)
{
    char tmp[24];
    size_t n = 0;
    do { tmp[n++] = "0123456789abcdef"[v % base]; v /= base; } while (v);
    while (n) at = put(buf, cap, at, &tmp[--n], 1);
    return at;
}

size_t hal_vformat(char *buf, size_t cap, const char *fmt, va_list ap)
{
    size_t at = 0;
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') { at = put(buf, cap, at, p, 1); continue; }
        p++;
        size_t prec = (size_t)-1;
        if (*p == '.') {               /* %.Ns: at most N bytes of the string */
            prec = 0;
            for (p++; *p >= '0' && *p <= '9'; p++) prec = prec * 10 + (size_t)(*p - '0');
        }
        int size_t_arg = 0;
        if (*p == 'z') { size_t_arg = 1; p++; }
        switch (*p) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            size_t n = strlen(s);
            at = put(buf, cap, at, s, n < prec ? n : prec);
            break;
        }
        case 'u':
            at = put_unsigned(buf, cap, at, size_t_arg ? va_arg(ap, size_t) : va_arg(ap, unsigned), 10);
            break;
        case 'x':
            at = put_unsigned(buf, cap, at, va_arg(ap, unsigned), 16);
            break;
        case 'd': {
            int v = va_arg(ap, int);
            if (v < 0) at = put(buf, cap, at, "-", 1);
            at = put_unsigned(buf, cap, at, v < 0 ? 0ull - (unsigned long long)(long long)v : (unsigned long long)v, 10);
            break;
        }
        case '%':
            at = put(buf, cap, at, "%", 1);
            break;
        default:                       /* unknown conversion: print it as is */
            at = put(buf, cap, at, p - 1, 2);
            break;
        }
        if (!*p) break;
    }
    if (cap) buf[at < cap ? at : cap - 1] = 0;
    return at < cap ? at : cap - 1;
}

void hal_printf(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    size_t n = hal_vformat(line, sizeof line, fmt, ap);
    va_end(ap);
    hal_out(line, n);
}

void hal_errf(const char *fmt, ...)
{
    char line[128];
    va_list ap;
    va_start(ap, fmt);
    size_t n = hal_vformat(line, sizeof line, fmt, ap);
    va_end(ap);
    hal_err(line, n);
}

int hal_fail(int code, const char *fmt, ...)
{
    char line[512];
    static const char prefix[] = "needle: error: ";
    memcpy(line, prefix, sizeof prefix - 1);
    va_list ap;
    va_start(ap, fmt);
    size_t n = sizeof prefix - 1 + hal_vformat(line + sizeof prefix - 1, sizeof line - sizeof prefix, fmt, ap);
    va_end(ap);
    line[n++] = '\n';
    hal_err(line, n);
    return code;
}
