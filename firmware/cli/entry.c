/* The program's entry on every board: the platform (the C runtime, or a bare-metal HAL's
 * hal_main) calls main, which is the CLI.  A firmware built on the engine library brings its
 * own main instead (examples/).
 *
 * Bare metal, main gets argc 1 when nobody gave a command line (no -append under a
 * debugger, nothing typed on the UART within a second): the CLI then runs its demo prompt,
 * so a watch that boots alone still shows the pipeline working. */
#include "hal.h"

#if defined(__linux__)
int main(int argc, char **argv) { return needle_cli(argc, argv); }
#else
static char demo_name[] = "needle", demo_flag[] = "--prompt", demo_max[] = "--max-new", demo_n[] = "24";
static char demo_text[] = "<|im_start|>user\nWhat is the weather in Lagos?<|im_end|>\n<|im_start|>assistant\n";

int main(int argc, char **argv)
{
    static char *demo[] = { demo_name, demo_flag, demo_text, demo_max, demo_n, 0 };
    return argc > 1 ? needle_cli(argc, argv) : needle_cli(5, demo);
}
#endif
