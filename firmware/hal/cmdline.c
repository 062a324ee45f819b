/* The bare-metal command line (cmdline.h): the word splitter and the demo prompt. */
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

/* Without a command line, the firmware runs its demo prompt. */
static char demo_name[] = "needle", demo_flag[] = "--prompt", demo_max[] = "--max-new", demo_n[] = "24";
static char demo_text[] = "<|im_start|>user\nWhat is the weather in Lagos?<|im_end|>\n<|im_start|>assistant\n";

int cmdline_demo(void)
{
    static char *demo[] = { demo_name, demo_flag, demo_text, demo_max, demo_n, 0 };
    return main(5, demo);
}
