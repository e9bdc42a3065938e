/* json_schema.h — JSON Schema to grammar text (grammar.h's dialect) for structured output:
 * the OpenAI `response_format` json_schema / json_object modes and tool-call arguments.
 * docs/structured-output.md lists what is supported, what is refused and why.
 *
 * The grammar matches a subset of the documents valid against the schema (declared
 * properties only, in schema order; between tokens one space, or one newline and up to 20
 * spaces or tabs;
 * bounded number digits), never a document the schema rejects: a keyword that cannot be
 * honoured exactly is an error naming it, never silently dropped. */
#ifndef KIPP_ENGINE_JSON_SCHEMA_H
#define KIPP_ENGINE_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

/* Appends rules to *buf (malloc'd/realloc'd text, *len bytes used of *cap; grown as needed,
 * always NUL-terminated) whose rule `name` matches JSON texts valid against schema. Every
 * other rule it creates is named `name` + "-" + something, and never reuses a rule name
 * already defined in *buf, so several schemas can share one grammar (the tool-call grammar
 * puts every tool's parameters there under different names). `name` must match
 * [A-Za-z0-9_-]+ and not be defined in *buf yet. Returns 0, or -1 with err naming the
 * keyword and its JSON pointer (e.g. "/properties/age/multipleOf is not supported"); on
 * error *len is back to what it was (the buffer may have moved: *buf and *cap are updated). */
int kipp_json_schema_rules(const json_t *schema, const char *name, char **buf, size_t *len,
                           size_t *cap, char *err, size_t err_len);

/* A whole grammar (start rule "root") for schema, or for any JSON object when schema is NULL
 * (response_format json_object). *out is malloc'd (free() it), *out_len its length. */
int kipp_json_schema_grammar(const json_t *schema, char **out, size_t *out_len, char *err,
                             size_t err_len);

#endif
