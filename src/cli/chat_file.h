/* chat_file.h — kipp-chat's /save and /load: a conversation as an OpenAI-style JSON file,
 * {"messages": [{"role": "system"|"user"|"assistant", "content": "...",
 * "reasoning_content": "..."}, ...]} (a bare array of messages is read too). Format and
 * rules: docs/chat.md. Not here: tool calls, content parts, any other role. */
#ifndef KIPP_CLI_CHAT_FILE_H
#define KIPP_CLI_CHAT_FILE_H

#include "kipp.h"

#include <jansson.h>
#include <stddef.h>

/* Writes msgs (an array of message objects) to path as {"messages": msgs}, pretty-printed,
 * through kipp_outfile_write: a temporary file renamed over the target, so a failure never
 * leaves path half-written or removed. */
kipp_status kipp_chat_save(const json_t *msgs, const char *path, char *err, size_t err_len);

/* Parses and checks a conversation from bytes[0..n): valid UTF-8 JSON, an object with a
 * "messages" array (other top-level keys are ignored) or a bare array; every message an
 * object with a known role and string content; at most one system message, first; then
 * user and assistant alternating, starting with user. On success *out is a new array of
 * new message objects (role, content, and reasoning_content when the file has it). On
 * failure *out is NULL and err says what is wrong and where (messages[i].field). */
kipp_status kipp_chat_parse(const char *bytes, size_t n, json_t **out, char *err,
                            size_t err_len);

/* Reads path (at most 256 MiB) and parses it as kipp_chat_parse does; err starts with the
 * file name. */
kipp_status kipp_chat_load(const char *path, json_t **out, char *err, size_t err_len);

#endif
