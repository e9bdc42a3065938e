/* chat_file.c — see chat_file.h. The checks are strict on purpose: a field kipp-chat would
 * not use (a tool call, a name, content parts) is an error naming it rather than something
 * silently dropped from the conversation the model then sees. */
#include "cli/chat_file.h"

#include "core/buf.h"
#include "core/error.h"
#include "core/outfile.h"
#include "tok/unicode.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE_BYTES ((size_t)256 << 20)

kipp_status kipp_chat_save(const json_t *msgs, const char *path, char *err, size_t err_len) {
    json_t *doc = json_pack("{s:O}", "messages", (json_t *)msgs);
    char *text = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
    json_decref(doc);
    if (!text) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "%s: out of memory", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL becomes the file's final newline */
    kipp_status st = kipp_outfile_write(path, text, n + 1, err, err_len);
    free(text);
    return st;
}

/* A string field of message i: NULL when absent; *bad set when present but not a string. */
static const json_t *str_field(const json_t *msg, const char *key, size_t i, int *bad,
                               char *err, size_t err_len) {
    const json_t *v = json_object_get(msg, key);
    if (v && !json_is_string(v)) {
        kipp_errf(err, err_len, KIPP_ERR_FORMAT, "messages[%zu].%s must be a string", i, key);
        *bad = 1;
    }
    return v;
}

/* Checks one message (index i) and appends its copy to out. prev is the role of the
 * message before it ("" for the first). */
static kipp_status check_message(const json_t *msg, size_t i, const char *prev, json_t *out,
                                 char *err, size_t err_len) {
    if (!json_is_object(msg))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "messages[%zu] must be an object", i);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)msg, key, val) {
        if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "reasoning_content"))
            return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                             "messages[%zu] has the field '%s'; kipp-chat keeps only role, "
                             "content and reasoning_content", i, key);
    }
    int bad = 0;
    const json_t *role = str_field(msg, "role", i, &bad, err, err_len);
    if (bad) return KIPP_ERR_FORMAT;
    if (!role) return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "messages[%zu] has no role", i);
    const char *r = json_string_value(role);
    const json_t *content = json_object_get(msg, "content");
    if (!content)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "messages[%zu] has no content", i);
    if (!json_is_string(content))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "messages[%zu].content must be a string (content parts and null are "
                         "not supported)", i);
    const json_t *reasoning = str_field(msg, "reasoning_content", i, &bad, err, err_len);
    if (bad) return KIPP_ERR_FORMAT;
    if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "messages[%zu] has the unknown role '%s' (system, user or assistant)",
                         i, r);
    if (!strcmp(r, "system") && i != 0)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "messages[%zu] is a system message; only messages[0] may be one", i);
    if (reasoning && strcmp(r, "assistant"))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "messages[%zu] is a %s message with reasoning_content (only assistant "
                         "messages have it)", i, r);
    /* after the optional system message: user, assistant, user, ... */
    const char *want = !strcmp(prev, "user") ? "assistant" : "user";
    if (strcmp(r, "system") && strcmp(r, want))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "messages[%zu] is a%s %s message where a%s %s message must come "
                         "(user and assistant alternate, starting with user)", i,
                         r[0] == 'a' ? "n" : "", r, want[0] == 'a' ? "n" : "", want);
    json_t *copy = json_pack("{s:s, s:O}", "role", r, "content", (json_t *)content);
    if (copy && reasoning && json_object_set(copy, "reasoning_content", (json_t *)reasoning)) {
        json_decref(copy);
        copy = NULL;
    }
    if (!copy || json_array_append_new(out, copy))
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory");
    return KIPP_OK;
}

kipp_status kipp_chat_parse(const char *bytes, size_t n, json_t **out, char *err,
                            size_t err_len) {
    *out = NULL;
    size_t ok = kipp_tok_utf8_valid_prefix((const uint8_t *)bytes, n);
    if (ok != n)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                         (unsigned char)bytes[ok], ok);
    json_error_t je;
    json_t *doc = json_loadb(bytes, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!doc)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "not valid JSON: %s (line %d, column %d)",
                         je.text, je.line, je.column);
    const json_t *msgs = doc;
    kipp_status st = KIPP_OK;
    if (json_is_object(doc)) {
        msgs = json_object_get(doc, "messages");
        if (!msgs) {
            st = kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                           "the JSON object has no \"messages\" array");
            goto done;
        }
    }
    if (!json_is_array(msgs)) {
        st = kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                       "want {\"messages\": [...]} or an array of messages, got %s",
                       msgs == doc ? "neither an object nor an array" : "a non-array \"messages\"");
        goto done;
    }
    json_t *res = json_array();
    if (!res) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory");
        goto done;
    }
    const char *prev = "";
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        if ((st = check_message(m, i, prev, res, err, err_len)) != KIPP_OK) break;
        prev = json_string_value(json_object_get(m, "role"));
    }
    if (st == KIPP_OK) *out = res;
    else json_decref(res);
done:
    json_decref(doc);
    return st;
}

kipp_status kipp_chat_load(const char *path, json_t **out, char *err, size_t err_len) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return kipp_errf(err, err_len, KIPP_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    kipp_status st = KIPP_OK;
    for (;;) {
        if (n == cap) {
            /* ncap is 65536 * 2^k, which kipp_grow (doubling from 16) reaches exactly */
            const size_t ncap = cap ? cap * 2 : 65536;
            if (ncap > MAX_FILE_BYTES + 1 ||
                kipp_grow((void **)&buf, &cap, ncap, 1) != KIPP_OK) {
                st = ncap > MAX_FILE_BYTES + 1
                         ? kipp_errf(err, err_len, KIPP_ERR_FORMAT, "%s: larger than %zu MiB",
                                     path, MAX_FILE_BYTES >> 20)
                         : kipp_errf(err, err_len, KIPP_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f))
                st = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (st == KIPP_OK && n > MAX_FILE_BYTES)
        st = kipp_errf(err, err_len, KIPP_ERR_FORMAT, "%s: larger than %zu MiB", path,
                       MAX_FILE_BYTES >> 20);
    if (st == KIPP_OK) {
        char why[KIPP_ERR_LEN];
        st = kipp_chat_parse(buf ? buf : "", n, out, why, sizeof why);
        if (st != KIPP_OK) kipp_errf(err, err_len, st, "%s: %s", path, why);
    }
    free(buf);
    return st;
}
