/* structured.h — constrained decoding for the server: a matcher for a request's grammar
 * over the model's token trie (built at start-up, shared), and the grammar that forces
 * Qwen3 tool calls (tool_choice "required" or a named function). */
#ifndef KIPP_SERVER_STRUCTURED_H
#define KIPP_SERVER_STRUCTURED_H

#include "engine/grammar.h"
#include "kipp.h"

#include <jansson.h>
#include <stdint.h>

typedef struct oai_structured oai_structured;

/* Builds the model's token trie now (a failure is retried at the first matcher). NULL: out
 * of memory. */
oai_structured *oai_structured_new(const kipp_model *m);
void oai_structured_free(oai_structured *s);             /* NULL is a no-op */
/* Compiles grammar text and makes a matcher that owns the compiled grammar. Thread-safe. */
kipp_status oai_structured_matcher(oai_structured *s, const char *grammar, size_t len,
                                   kipp_matcher **out, char *err, size_t err_len);
/* The same n times (a request's n choices: out[0..n-1], all or none), on a thread of its own
 * at nice +OAI_GRAMMAR_NICE (Linux), named "kipp-grammar", while the caller waits: a
 * grammar's compile (up to its cost bound) is the request's own work and takes the CPU the
 * forward pass and the other requests' threads leave, as a large body's serializing does
 * (http.c). Where that thread cannot start, the caller's thread compiles. */
#define OAI_GRAMMAR_NICE 10
kipp_status oai_structured_matchers(oai_structured *s, const char *grammar, size_t len, uint32_t n,
                                    kipp_matcher **out, char *err, size_t err_len);
/* Grammar text whose sentences are Qwen3 tool calls of the given tools (only: just the
 * function of that name; parallel: one or more calls, else exactly one), each call's
 * arguments an object valid against its function's parameters schema (one without "type"
 * is taken as "type": "object"). malloc'd; NULL with err, and *bad_tool the index of the
 * tool at fault (or -1: none, e.g. out of memory or no tool named only). */
/* OpenAI's rule for function names: 1 to 64 characters of a-z A-Z 0-9 _ - (which also keeps
 * them safe inside grammar literals). */
int oai_tool_name_valid(const char *s);
char *oai_tool_grammar(const json_t *tools, const char *only, int parallel, long *bad_tool,
                       char *err, size_t err_len);

#endif
