/* utf8.h — the one UTF-8 helper streaming output needs: how much of a byte buffer can be
 * emitted without splitting a multi-byte character. Validation proper lives in the
 * tokenizer. */
#ifndef KIPP_TOK_UTF8_H
#define KIPP_TOK_UTF8_H

#include <stddef.h>

/* Length of the longest prefix of buf[0..n) that does not end inside a UTF-8 sequence
 * that could still be completed by more bytes. Invalid bytes count as complete (they are
 * emitted as they are rather than held forever). */
size_t kipp_utf8_complete_prefix(const char *buf, size_t n);

#endif
