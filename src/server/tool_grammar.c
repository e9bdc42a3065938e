/* tool_grammar.c — the grammar that forces Qwen3 tool calls (tool_choice "required" or a
 * named function): each call exactly as Qwen3's chat template tells the model to write it,
 * its arguments valid against the function's parameters schema (src/engine/json_schema.c).
 * Parsing the calls back out is src/tok/toolcall.c. */
#include "server/structured.h"

#include "core/buf.h"
#include "core/error.h"
#include "engine/json_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends fmt (with up to two %s, NULL read as ""); 0, or -1 out of memory. */
static int add(kipp_buf *b, const char *fmt, const char *x, const char *y) {
    return kipp_buf_printf(b, fmt, x ? x : "", y ? y : "") == KIPP_OK ? 0 : -1;
}

int oai_tool_name_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

char *oai_tool_grammar(const json_t *tools, const char *only, int parallel, long *bad_tool,
                       char *err, size_t err_len) {
    kipp_buf rules = {0}, head = {0}; /* the tools' rules; root and call */
    int n_calls = 0;
    err[0] = 0;
    *bad_tool = -1;
    json_t *any_object = json_pack("{s:s}", "type", "object");
    int bad = !any_object ||
              add(&head, parallel ? "root ::= call (\"\\n\" call)*\ncall ::=" : "root ::= call\ncall ::=",
                  NULL, NULL);
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        if (bad) break;
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || !oai_tool_name_valid(name)) {
            kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                      "tools[%zu].function.name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -", i);
            *bad_tool = (long)i;
            bad = 1;
            break;
        }
        if (only && strcmp(only, name) != 0) continue;
        char rule[32], args[48];
        snprintf(rule, sizeof rule, "tool-%zu", i);
        snprintf(args, sizeof args, "tool-%zu-args", i);
        /* the call exactly as Qwen3's chat template tells the model to write it */
        bad = add(&head, n_calls ? " | %s" : " %s", rule, NULL) ||
              add(&rules, "%s ::= \"<tool_call>\\n{\\\"name\\\": \\\"", rule, NULL) ||
              add(&rules, "%s\\\", \\\"arguments\\\": \" ", name, NULL) ||
              add(&rules, "%s \"}\\n</tool_call>\"\n", args, NULL);
        if (bad) break;
        /* the arguments are always an object: parameters without a "type" are given
         * "type": "object" (one of another type is refused by the request's validation) */
        json_t *params = json_object_get(fn, "parameters");
        json_t *schema = json_is_object(params) ? json_copy(params) : json_incref(any_object);
        if (schema && !json_object_get(schema, "type"))
            json_object_set_new(schema, "type", json_string("object"));
        char e2[400] = "out of memory";
        const int rc = schema ? kipp_json_schema_rules(schema, args, &rules.data, &rules.len,
                                                       &rules.cap, e2, sizeof e2)
                              : -1;
        json_decref(schema);
        if (rc != 0) {
            kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "tools[%zu].function.parameters: %s", i, e2);
            *bad_tool = (long)i;
            bad = 1;
            break;
        }
        n_calls++;
    }
    json_decref(any_object);
    if (!bad && n_calls == 0) {
        if (only) kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                            "tool_choice names the function '%s', which is not among the tools", only);
        else kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "tool_choice \"required\" needs at least one tool");
        bad = 1;
    }
    if (!bad) bad = add(&head, "\n", NULL, NULL) || add(&head, "%s", rules.data, NULL);
    kipp_buf_free(&rules);
    if (bad) {
        kipp_buf_free(&head);
        if (!err[0]) kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory building the tool grammar");
        return NULL;
    }
    return kipp_buf_take(&head, NULL);
}
