/* The bare-metal command line: one line of text split into words, shared by the semihosting
 * HAL (the host's -append line) and the UART HAL (a line received on the console). */
#ifndef NEEDLE_CMDLINE_H
#define NEEDLE_CMDLINE_H

#define CMDLINE_ARGS_MAX 32     /* words, the program name included */

/* Split `s` in place like a shell would for plain words and "double quotes" (backslash
 * escapes \" and \\ inside quotes) into argv[first...], after the `first` words the caller
 * put there already (e.g. a program name); argv has room for CMDLINE_ARGS_MAX + 1 entries
 * and ends with NULL.  Returns argc.  More than CMDLINE_ARGS_MAX words is a one-line usage
 * error with exit status 2, never a cut line. */
int cmdline_split(char *s, char **argv, int first);

#endif
