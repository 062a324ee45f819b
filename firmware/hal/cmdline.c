/* The bare-metal command line (cmdline.h): the word splitter. */
#include <string.h>

#include "cmdline.h"
#include "hal.h"

void hal_exit(int code) __attribute__((noreturn));
_Static_assert(CMDLINE_ARGS_MAX == 32, "the usage error below states this limit");

int cmdline_split(char *s, char **argv, int first)
{
    int argc = first;
    char *out = s;
    while (*s) {
        while (*s == ' ') s++;
        if (!*s) break;
        if (argc == CMDLINE_ARGS_MAX) {
            static const char line[] = "needle: error: the command line has more than 32 words (the program "
                                       "name and 31 arguments): pass fewer\n";
            hal_err(line, sizeof line - 1);
            hal_exit(2);
        }
        argv[argc++] = out;
        int quoted = 0;
        for (; *s && (quoted || *s != ' '); s++) {
            if (*s == '"') { quoted = !quoted; continue; }
            if (quoted && *s == '\\' && (s[1] == '"' || s[1] == '\\')) s++;
            *out++ = *s;
        }
        if (*s) s++;
        *out++ = 0;
    }
    argv[argc] = 0;
    return argc;
}
