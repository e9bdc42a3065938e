/* cli_args.c — see cli_args.h. */
#include "cli/cli_args.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

int kipp_cli_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects an integer in [%ld, %ld], got '%s'\n", prog, flag, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int kipp_cli_float(const char *prog, const char *flag, const char *s, float lo, float hi,
                   float *out) {
    char *end;
    errno = 0;
    /* parsed as a double and then narrowed: strtof reports ERANGE for a float subnormal
     * such as 1e-38, which is a valid (tiny) value; a double that underflows is ~0 */
    double d = strtod(s, &end);
    if (errno == ERANGE && fabs(d) < 1.0) errno = 0;
    float v = (float)d;
    if (errno || end == s || *end != '\0' || !isfinite(d) || d < lo || d > hi || !isfinite(v)) {
        fprintf(stderr, "%s: %s expects a number in [%g, %g], got '%s'\n", prog, flag, (double)lo,
                (double)hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int kipp_cli_sampling_flag(const char *prog, int argc, char **argv, int *i,
                           kipp_sampler_params *sp) {
    const char *a = argv[*i];
#define IS(s) (strcmp(a, s) == 0)
    if (IS("--greedy")) {
        sp->temperature = 0.0f;
        return 1;
    }
    if (!(IS("--temp") || IS("--top-k") || IS("--top-p") || IS("--min-p") ||
          IS("--repeat-penalty") || IS("--repeat-last-n") || IS("--presence-penalty") ||
          IS("--frequency-penalty") || IS("-s") || IS("--seed")))
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, a);
        return 2;
    }
    const char *v = argv[++*i];
    long l;
    int ok;
    if (IS("--temp")) ok = kipp_cli_float(prog, a, v, 0.0f, 100.0f, &sp->temperature);
    else if (IS("--top-k")) {
        if ((ok = kipp_cli_long(prog, a, v, 0, 1 << 24, &l))) sp->top_k = (int32_t)l;
    } else if (IS("--top-p")) ok = kipp_cli_float(prog, a, v, 1e-6f, 1.0f, &sp->top_p);
    else if (IS("--min-p")) ok = kipp_cli_float(prog, a, v, 0.0f, 1.0f, &sp->min_p);
    else if (IS("--repeat-penalty"))
        ok = kipp_cli_float(prog, a, v, 1e-3f, 100.0f, &sp->repetition_penalty);
    else if (IS("--repeat-last-n")) {
        if ((ok = kipp_cli_long(prog, a, v, -1, 1 << 24, &l))) sp->penalty_last_n = (int32_t)l;
    } else if (IS("--presence-penalty"))
        ok = kipp_cli_float(prog, a, v, -2.0f, 2.0f, &sp->presence_penalty);
    else if (IS("--frequency-penalty"))
        ok = kipp_cli_float(prog, a, v, -2.0f, 2.0f, &sp->frequency_penalty);
    else { /* -s / --seed */
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        ok = !(errno || end == v || *end || v[0] == '-');
        if (ok) sp->seed = s;
        else fprintf(stderr, "%s: --seed expects a non-negative integer, got '%s'\n", prog, v);
    }
#undef IS
    return ok ? 1 : 2;
}

int kipp_cli_stdout_ready(const char *prog) {
    if (fcntl(STDOUT_FILENO, F_GETFD) < 0) {
        fprintf(stderr, "%s: stdout is closed: there is nowhere to write the output\n", prog);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    return 1;
}
