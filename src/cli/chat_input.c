/* chat_input.c — see chat_input.h. Line editing is libedit's native API (histedit.h), with
 * two things done by hand: our own character reader (EL_GETCFN), so that Ctrl-C ends a
 * read at once (libedit's own retries a read that a signal interrupted, and its signal
 * handling re-sends the signal to the whole process group); and a history file rewritten
 * atomically after every line, merged with what is on disk so parallel sessions add to it
 * rather than overwrite each other. */
#define _XOPEN_SOURCE 700 /* nl_langinfo */
#include "cli/chat_input.h"

#include "core/buf.h"
#include "core/outfile.h"
#include "kipp.h"

#include <errno.h>
#include <fcntl.h>
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wchar.h>

#define HISTORY_SIZE 1000 /* entries kept in memory and in the file */
#define HISTORY_COOKIE "_HiStOrY_V2_" /* the first line of libedit's history files */

struct kipp_chat_input {
    kipp_chat_input_params p;
    EditLine *el;          /* NULL without line editing */
    History *hist;         /* this session's history (the file's, then what was typed) */
    char *hist_path;       /* the file written after each line; NULL: none (or given up) */
    int continuing;        /* the next prompt is the continuation prompt */
    char *line;            /* [line_cap] the current physical line */
    size_t line_len, line_cap;
    char *msg;             /* [msg_cap] the message or command being assembled */
    size_t msg_len, msg_cap;
};

typedef enum { PHYS_LINE, PHYS_EOF, PHYS_INTERRUPTED, PHYS_ERROR } phys_result;

static volatile sig_atomic_t g_winch; /* the terminal was resized */

static void on_sigwinch(int sig) {
    (void)sig;
    g_winch = 1;
}


static int msg_append(kipp_chat_input *in, const char *s, size_t n) {
    if (n >= SIZE_MAX - in->msg_len ||
        kipp_grow((void **)&in->msg, &in->msg_cap, in->msg_len + n + 1, 1) != KIPP_OK)
        return 0;
    memcpy(in->msg + in->msg_len, s, n);
    in->msg_len += n;
    in->msg[in->msg_len] = '\0';
    return 1;
}

/* ---- the history file ------------------------------------------------------------------ */

static void warn_history(const kipp_chat_input *in, const char *path, const char *why) {
    fprintf(stderr, "%s: warning: history file %s: %s; history is not saved\n", in->p.prog,
            path, why);
}

/* mkdir -p of the directory part of path (mode 0700: the history holds conversations). */
static int make_parent_dirs(const char *path, char *why, size_t why_len) {
    char *d = strdup(path);
    if (!d) return snprintf(why, why_len, "out of memory"), 0;
    char *slash = strrchr(d, '/');
    int ok = 1;
    if (slash && slash != d) {
        *slash = '\0';
        for (char *p = d + 1;; p++) {
            if (*p != '/' && *p != '\0') continue;
            char c = *p;
            *p = '\0';
            struct stat st;
            if (mkdir(d, 0700) != 0 && errno != EEXIST) {
                snprintf(why, why_len, "cannot create the directory %s: %s", d, strerror(errno));
                ok = 0;
            } else if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
                snprintf(why, why_len, "%s is not a directory", d);
                ok = 0;
            }
            *p = c;
            if (!ok || c == '\0') break;
        }
    }
    free(d);
    return ok;
}

/* Loads path into the session's history and keeps it as the file to write, or warns why
 * not. A file that is not libedit's history format is never written over. */
static void history_open(kipp_chat_input *in, const char *path) {
    char why[KIPP_ERR_LEN];
    if (!make_parent_dirs(path, why, sizeof why)) return warn_history(in, path, why);
    FILE *f = fopen(path, "r");
    if (f) {
        char first[64] = "";
        int empty = !fgets(first, sizeof first, f);
        fclose(f);
        if (!empty && strncmp(first, HISTORY_COOKIE, strlen(HISTORY_COOKIE)) != 0)
            return warn_history(in, path, "not a history file written by kipp-chat (libedit); "
                                          "it is left as it is");
        HistEvent ev;
        if (!empty) history(in->hist, &ev, H_LOAD, path);
    } else if (errno != ENOENT) {
        snprintf(why, sizeof why, "cannot read it: %s", strerror(errno));
        return warn_history(in, path, why);
    } else { /* create it now, private, so a failure shows at start-up */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0) {
            snprintf(why, sizeof why, "cannot create it: %s", strerror(errno));
            return warn_history(in, path, why);
        }
        close(fd);
    }
    if (access(path, W_OK) != 0) {
        snprintf(why, sizeof why, "cannot write it: %s", strerror(errno));
        return warn_history(in, path, why);
    }
    if (kipp_outfile_check(path, why, sizeof why) != KIPP_OK) return warn_history(in, path, why);
    in->hist_path = strdup(path);
}

/* The whole of f, from its start, into a malloc'd buffer. */
static char *read_back(FILE *f, size_t *n) {
    long size;
    char *buf;
    if (fflush(f) != 0 || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || !(buf = malloc((size_t)size + 1)))
        return NULL;
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        return NULL;
    }
    *n = (size_t)size;
    return buf;
}

/* Adds a typed line to the history and to the file: the file as it is now (another
 * session may have added to it) plus this line, rewritten with kipp_outfile_write (a
 * temporary file renamed over it). libedit saves only to a FILE with a real descriptor
 * (it fchmods it), so the bytes go through tmpfile() first. */
static void history_add(kipp_chat_input *in, const char *line) {
    HistEvent ev;
    history(in->hist, &ev, H_ENTER, line);
    if (!in->hist_path) return;
    History *h = history_init();
    FILE *tf = h ? tmpfile() : NULL;
    char *buf = NULL, why[KIPP_ERR_LEN];
    size_t n = 0;
    kipp_status st = KIPP_ERR_IO;
    snprintf(why, sizeof why, "cannot make a temporary file: %s", strerror(errno));
    if (tf) {
        history(h, &ev, H_SETSIZE, HISTORY_SIZE);
        history(h, &ev, H_SETUNIQUE, 1);
        history(h, &ev, H_LOAD, in->hist_path); /* a file deleted meanwhile is started anew */
        history(h, &ev, H_ENTER, line);
        if (history(h, &ev, H_SAVE_FP, tf) < 0 || !(buf = read_back(tf, &n)))
            snprintf(why, sizeof why, "cannot save the history: %s", strerror(errno));
        else
            st = kipp_outfile_write(in->hist_path, buf, n, why, sizeof why);
        fclose(tf);
    }
    if (st != KIPP_OK) {
        fprintf(stderr, "%s: warning: cannot write the history file: %s; history is no longer "
                        "saved\n", in->p.prog, why);
        free(in->hist_path);
        in->hist_path = NULL;
    }
    free(buf);
    if (h) history_end(h);
}

char *kipp_chat_input_default_history(void) {
    const char *base = getenv("XDG_STATE_HOME"), *tail = "/kipp/chat_history";
    if (!base || base[0] != '/') { /* the XDG spec ignores a relative value */
        base = getenv("HOME");
        tail = "/.local/state/kipp/chat_history";
        if (!base || !*base) return NULL;
    }
    size_t n = strlen(base) + strlen(tail) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s", base, tail);
    return p;
}

/* ---- libedit --------------------------------------------------------------------------- */

static char *edit_prompt(EditLine *el) {
    static char first[] = "> ", more[] = "... ";
    kipp_chat_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    return in && in->continuing ? more : first;
}

/* libedit's character reader, minus its retry on EINTR: Ctrl-C (the SIGINT handler set
 * *interrupted) ends the read with an error, which makes el_gets return. Bytes are decoded
 * in the locale, which edit_open made UTF-8; an invalid byte is dropped. */
static int edit_getc(EditLine *el, wchar_t *wc) {
    kipp_chat_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    mbstate_t mbs;
    memset(&mbs, 0, sizeof mbs);
    for (;;) {
        if (g_winch) {
            g_winch = 0;
            el_resize(el);
        }
        char b;
        ssize_t k = read(STDIN_FILENO, &b, 1);
        if (k < 0) {
            if (errno == EINTR && !*in->p.interrupted) continue;
            return -1;
        }
        if (k == 0) return 0;
        size_t r = mbrtowc(wc, &b, 1, &mbs);
        if (r == (size_t)-2) continue;
        if (r == (size_t)-1) {
            memset(&mbs, 0, sizeof mbs);
            continue;
        }
        return 1;
    }
}

/* A UTF-8 LC_CTYPE, which libedit needs to edit and display anything beyond ASCII: the
 * user's, else C.UTF-8. Only LC_CTYPE is touched (numbers keep printing with a '.'). */
static int utf8_locale(void) {
    const char *cs;
    if (setlocale(LC_CTYPE, "") && (cs = nl_langinfo(CODESET)) && !strcmp(cs, "UTF-8"))
        return 1;
    return setlocale(LC_CTYPE, "C.UTF-8") && (cs = nl_langinfo(CODESET)) && !strcmp(cs, "UTF-8");
}

static void edit_open(kipp_chat_input *in) {
    if (!utf8_locale()) {
        setlocale(LC_CTYPE, "C");
        fprintf(stderr, "%s: warning: no UTF-8 locale (try LANG=C.UTF-8); line editing is "
                        "off\n", in->p.prog);
        return;
    }
    HistEvent ev;
    in->hist = history_init();
    in->el = in->hist ? el_init(in->p.prog, stdin, stdout, stderr) : NULL;
    if (!in->el) {
        fprintf(stderr, "%s: warning: libedit could not start; line editing is off\n",
                in->p.prog);
        if (in->hist) history_end(in->hist);
        in->hist = NULL;
        return;
    }
    history(in->hist, &ev, H_SETSIZE, HISTORY_SIZE);
    history(in->hist, &ev, H_SETUNIQUE, 1);
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_PROMPT, edit_prompt);
    el_set(in->el, EL_HIST, history, in->hist);
    el_set(in->el, EL_GETCFN, edit_getc);
    /* Ctrl-R searches back through the history (libedit's emacs default, said here since
     * the tests rely on it); Home/End/Delete and Ctrl-arrows as the usual terminals send
     * them (libedit binds the arrows and \e[H/\e[F itself) */
    el_set(in->el, EL_BIND, "^R", "em-inc-search-prev", NULL);
    el_set(in->el, EL_BIND, "\033[1~", "ed-move-to-beg", NULL);
    el_set(in->el, EL_BIND, "\033[7~", "ed-move-to-beg", NULL);
    el_set(in->el, EL_BIND, "\033[4~", "ed-move-to-end", NULL);
    el_set(in->el, EL_BIND, "\033[8~", "ed-move-to-end", NULL);
    el_set(in->el, EL_BIND, "\033[3~", "ed-delete-next-char", NULL);
    el_set(in->el, EL_BIND, "\033[1;5D", "ed-prev-word", NULL);
    el_set(in->el, EL_BIND, "\033[1;5C", "em-next-word", NULL);
    el_source(in->el, NULL); /* ~/.editrc (or $EDITRC) may change any of it */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigwinch;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a resize must not interrupt the reply's writes */
    sigaction(SIGWINCH, &sa, NULL);
    if (in->p.history_path) history_open(in, in->p.history_path);
}

/* ---- reading ------------------------------------------------------------------------------ */

static phys_result read_physical(kipp_chat_input *in) {
    const char *got = NULL;
    size_t n = 0;
    if (in->el) {
        int count = 0;
        got = el_gets(in->el, &count);
        if (*in->p.interrupted) return PHYS_INTERRUPTED;
        if (!got || count <= 0) {
            if (count < 0) {
                fprintf(stderr, "%s: reading the terminal: %s\n", in->p.prog, strerror(errno));
                return PHYS_ERROR;
            }
            return PHYS_EOF;
        }
        n = (size_t)count;
        if (kipp_grow((void **)&in->line, &in->line_cap, n + 1, 1) != KIPP_OK) goto oom;
        memcpy(in->line, got, n);
    } else {
        if (in->p.prompt) {
            fputs(in->continuing ? "... " : "> ", stderr);
            fflush(stderr);
        }
        errno = 0;
        ssize_t k = getline(&in->line, &in->line_cap, stdin);
        if (k < 0) {
            if (*in->p.interrupted || errno == EINTR) return PHYS_INTERRUPTED;
            if (ferror(stdin)) {
                fprintf(stderr, "%s: reading stdin: %s\n", in->p.prog, strerror(errno));
                return PHYS_ERROR;
            }
            return PHYS_EOF;
        }
        n = (size_t)k;
    }
    if (n && in->line[n - 1] == '\n') n--;
    if (n && in->line[n - 1] == '\r') n--;
    in->line[n] = '\0';
    in->line_len = n;
    if (in->el && n) history_add(in, in->line);
    return PHYS_LINE;
oom:
    fprintf(stderr, "%s: out of memory reading a line\n", in->p.prog);
    return PHYS_ERROR;
}

/* A line that is just """ (blanks around it allowed). */
static int is_fence(const char *s) {
    s += strspn(s, " \t");
    if (strncmp(s, "\"\"\"", 3)) return 0;
    s += 3;
    return s[strspn(s, " \t")] == '\0';
}

static kipp_chat_in_kind phys_kind(phys_result r) {
    return r == PHYS_EOF ? KIPP_CHAT_IN_EOF
         : r == PHYS_INTERRUPTED ? KIPP_CHAT_IN_INTERRUPTED : KIPP_CHAT_IN_ERROR;
}

kipp_chat_in_kind kipp_chat_input_read(kipp_chat_input *in, char **text, size_t *len) {
    phys_result r;
    kipp_chat_in_kind kind = KIPP_CHAT_IN_MESSAGE;
again:
    in->msg_len = 0;
    in->continuing = 0;
    do { /* empty lines between messages are skipped */
        if ((r = read_physical(in)) != PHYS_LINE) return phys_kind(r);
    } while (in->line_len == 0);
    if (is_fence(in->line)) { /* a verbatim block up to the next """ line */
        in->continuing = 1;
        for (int first = 1;; first = 0) {
            if ((r = read_physical(in)) == PHYS_EOF) {
                fprintf(stderr, "%s: warning: the input ended inside a \"\"\" block; sending "
                                "what it holds\n", in->p.prog);
                break;
            }
            if (r != PHYS_LINE) return phys_kind(r);
            if (is_fence(in->line)) break;
            if ((!first && !msg_append(in, "\n", 1)) ||
                !msg_append(in, in->line, in->line_len))
                goto oom;
        }
        if (in->msg_len == 0) {
            if (r == PHYS_EOF) return KIPP_CHAT_IN_EOF;
            goto again; /* an empty block sends nothing */
        }
    } else if (in->line[0] == '/' && in->line[1] != '/') {
        kind = KIPP_CHAT_IN_COMMAND;
        if (!msg_append(in, in->line, in->line_len)) goto oom;
    } else {
        size_t skip = in->line[0] == '/'; /* "//x" sends "/x" */
        if (!msg_append(in, in->line + skip, in->line_len - skip)) goto oom;
        while (in->msg_len && in->msg[in->msg_len - 1] == '\\') {
            in->msg[--in->msg_len] = '\0';
            in->continuing = 1;
            if ((r = read_physical(in)) == PHYS_EOF) break;
            if (r != PHYS_LINE) return phys_kind(r);
            if (!msg_append(in, "\n", 1) || !msg_append(in, in->line, in->line_len)) goto oom;
        }
        if (in->msg_len == 0) {
            if (r == PHYS_EOF) return KIPP_CHAT_IN_EOF;
            goto again;
        }
    }
    in->continuing = 0;
    *text = in->msg;
    *len = in->msg_len;
    return kind;
oom:
    fprintf(stderr, "%s: out of memory reading a message\n", in->p.prog);
    return KIPP_CHAT_IN_ERROR;
}

/* ---- set-up ------------------------------------------------------------------------------- */

kipp_chat_input *kipp_chat_input_open(const kipp_chat_input_params *p) {
    kipp_chat_input *in = calloc(1, sizeof *in);
    if (!in) {
        fprintf(stderr, "%s: out of memory\n", p->prog);
        return NULL;
    }
    in->p = *p;
    if (p->edit) edit_open(in);
    return in;
}

int kipp_chat_input_editing(const kipp_chat_input *in) { return in->el != NULL; }

void kipp_chat_input_free(kipp_chat_input *in) {
    if (!in) return;
    if (in->el) el_end(in->el);
    if (in->hist) history_end(in->hist);
    free(in->hist_path);
    free(in->line);
    free(in->msg);
    free(in);
}
