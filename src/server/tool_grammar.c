/* tool_grammar.c — the grammar that forces Qwen3 tool calls (tool_choice "required" or a
 * named function): each call exactly as Qwen3's chat template tells the model to write it,
 * its arguments valid against the function's parameters schema (src/engine/json_schema.c).
 * Parsing the calls back out is src/tok/toolcall.c. */
#include "server/structured.h"

#include "core/error.h"
#include "engine/json_schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends fmt (with up to two %s) to a growing text. */
static int add(char **buf, size_t *len, size_t *cap, const char *fmt, const char *a, const char *b) {
    int n = snprintf(NULL, 0, fmt, a ? a : "", b ? b : "");
    if (n < 0) return -1;
    if (*len + (size_t)n + 1 > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (c < *len + (size_t)n + 1) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return -1;
        *buf = p;
        *cap = c;
    }
    snprintf(*buf + *len, (size_t)n + 1, fmt, a ? a : "", b ? b : "");
    *len += (size_t)n;
    return 0;
}

/* OpenAI's rule for function names, which also keeps them safe inside grammar literals. */
static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

char *oai_tool_grammar(const json_t *tools, const char *only, int parallel, char *err,
                       size_t err_len) {
    char *rules = NULL, *head = NULL; /* the tools' rules; root and call */
    size_t len = 0, cap = 0, hlen = 0, hcap = 0;
    int n_calls = 0;
    err[0] = 0;
    json_t *any_object = json_pack("{s:s}", "type", "object");
    int bad = !any_object ||
              add(&head, &hlen, &hcap, parallel ? "root ::= call (\"\\n\" call)*\ncall ::=" : "root ::= call\ncall ::=",
                  NULL, NULL);
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        if (bad) break;
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name || !valid_name(name)) {
            kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                      "tools[%zu].function.name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -", i);
            bad = 1;
            break;
        }
        if (only && strcmp(only, name) != 0) continue;
        char rule[32], args[48];
        snprintf(rule, sizeof rule, "tool-%zu", i);
        snprintf(args, sizeof args, "tool-%zu-args", i);
        /* the call exactly as Qwen3's chat template tells the model to write it */
        bad = add(&head, &hlen, &hcap, n_calls ? " | %s" : " %s", rule, NULL) ||
              add(&rules, &len, &cap, "%s ::= \"<tool_call>\\n{\\\"name\\\": \\\"", rule, NULL) ||
              add(&rules, &len, &cap, "%s\\\", \\\"arguments\\\": \" ", name, NULL) ||
              add(&rules, &len, &cap, "%s \"}\\n</tool_call>\"\n", args, NULL);
        if (bad) break;
        json_t *params = json_object_get(fn, "parameters");
        char e2[400];
        if (kipp_json_schema_rules(params && json_is_object(params) ? params : any_object, args,
                                   &rules, &len, &cap, e2, sizeof e2) != 0) {
            kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "tools[%zu].function.parameters: %s", i, e2);
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
    if (!bad) bad = add(&head, &hlen, &hcap, "\n", NULL, NULL) || add(&head, &hlen, &hcap, "%s", rules, NULL);
    free(rules);
    if (bad) {
        free(head);
        if (!err[0]) kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory building the tool grammar");
        return NULL;
    }
    return head;
}
