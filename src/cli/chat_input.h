/* chat_input.h — what kipp-chat reads: lines from stdin turned into commands and messages
 * by the input rules (a line ending in '\' continues the message; a line that is just """
 * opens and closes a verbatim block; a line starting with one '/' is a command; "//" sends
 * a literal '/'; empty lines between messages are skipped). With line editing (libedit:
 * arrows, Home/End, Ctrl-R, a history file) when the caller asks for it, else getline.
 * Rules and flags: docs/chat.md. Not here: what commands do, tab completion. */
#ifndef KIPP_CLI_CHAT_INPUT_H
#define KIPP_CLI_CHAT_INPUT_H

#include <signal.h>
#include <stddef.h>

typedef struct kipp_chat_input kipp_chat_input;

typedef struct {
    const char *prog;         /* message prefix */
    int edit;                 /* use libedit (the caller checked stdin and stdout are ttys) */
    int prompt;               /* without edit: print the prompts on stderr (stdin is a tty) */
    const char *history_path; /* edit only: the history file, or NULL for none */
    volatile sig_atomic_t *interrupted; /* set by the SIGINT handler: ends a read */
} kipp_chat_input_params;

typedef enum {
    KIPP_CHAT_IN_MESSAGE, /* text is a user message (never empty) */
    KIPP_CHAT_IN_COMMAND, /* text is a command line, starting with '/' */
    KIPP_CHAT_IN_EOF,     /* end of input (Ctrl-D on an empty line) */
    KIPP_CHAT_IN_INTERRUPTED, /* Ctrl-C while reading */
    KIPP_CHAT_IN_ERROR    /* a read error or out of memory; printed already */
} kipp_chat_in_kind;

/* Returns NULL only when out of memory (printed). When line editing cannot start, or the
 * history file cannot be used, it prints a warning and goes on without. */
kipp_chat_input *kipp_chat_input_open(const kipp_chat_input_params *p);
void kipp_chat_input_free(kipp_chat_input *in);

/* Whether the reader edits lines with libedit. */
int kipp_chat_input_editing(const kipp_chat_input *in);

/* Reads the next command or message. *text (NUL-terminated, *len bytes; the caller may
 * change its bytes) stays valid until the next call. Messages are not checked for UTF-8
 * here. */
kipp_chat_in_kind kipp_chat_input_read(kipp_chat_input *in, char **text, size_t *len);

/* The history file location when the user gave none: $XDG_STATE_HOME/kipp/chat_history
 * (XDG_STATE_HOME absolute), else $HOME/.local/state/kipp/chat_history; NULL when neither is
 * set. malloc'd. */
char *kipp_chat_input_default_history(void);

#endif
