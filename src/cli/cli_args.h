/* cli_args.h — what the command-line front ends (kipp, kipp-chat) share: flag-value
 * parsing (bounded integers and numbers, the sampling flags both take) and the stdout
 * check before streaming text. Messages go to stderr,
 * prefixed with the program's name. Not for the library (it never prints). */
#ifndef KIPP_CLI_ARGS_H
#define KIPP_CLI_ARGS_H

#include "kipp.h"

/* 1 and *out set, or 0 with "PROG: FLAG expects ..." printed. */
int kipp_cli_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out);
int kipp_cli_float(const char *prog, const char *flag, const char *s, float lo, float hi,
                   float *out);

/* argv[*i] is looked at: a sampling flag (--temp, --greedy, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, --presence-penalty, --frequency-penalty, -s/--seed)
 * is parsed into sp, *i moving past its value: returns 1, or 2 after printing why its
 * value is missing or bad. Any other flag: 0, nothing consumed. */
int kipp_cli_sampling_flag(const char *prog, int argc, char **argv, int *i,
                           kipp_sampler_params *sp);

/* Before a front end writes text to stdout: 0, with a message, when stdout is closed (the
 * next open() would take fd 1 and receive the text); otherwise SIGPIPE is ignored, so a
 * closed pipe becomes a write error the caller reports (EPIPE), not a silent death. */
int kipp_cli_stdout_ready(const char *prog);

#endif
