/* The program's entry on every board: the platform (the C runtime, or a bare-metal HAL's
 * hal_main) calls main, which is the CLI.  A firmware built on the engine library brings its
 * own main instead (examples/). */
#include "hal.h"

int main(int argc, char **argv) { return needle_cli(argc, argv); }
