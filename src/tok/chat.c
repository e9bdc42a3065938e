/* chat.c — Qwen chat rendering: template recognition, input validation, and dedicated
 * renderers that reproduce HF transformers' apply_chat_template(tokenize=False) output for
 * the Qwen3 and Qwen2.5 templates byte for byte (checked by tests/tok/chat_golden/).
 *
 * Why a dedicated renderer and not a Jinja-subset interpreter: Kipp serves one model
 * family, whose GGUFs carry one known template. A C Jinja subset big enough for it (slices,
 * namespaces, loop.*, string methods, filters, tojson) would be a large parser of untrusted
 * text whose results on any other template would be plausible-looking but unverified. So
 * the template text in the GGUF (tokenizer.chat_template) only selects a renderer: it must
 * equal the known Qwen3 template below (ignoring one trailing newline, which Jinja drops),
 * otherwise the model is refused with KIPP_ERR_UNSUPPORTED naming the template's first
 * line, length and FNV-1a hash. Never silent garbage. A GGUF without the key gets plain
 * ChatML (what llama.cpp falls back to), which supports no tools. Adding a template means
 * adding its text and a renderer, and goldens made with HF.
 *
 * Known texts: the hybrid template of the April 2025 models, the Qwen3-2507 Instruct and
 * Thinking templates, and the Qwen2.5 Instruct template (tests/tok/templates/, where they come
 * from in its README).
 * Not supported (refused, never guessed): other revisions of these texts (the Qwen2.5 base
 * and Coder models' texts among them), other families, multimodal content arrays,
 * continue_final_message, documents.
 *
 * Where Kipp deliberately differs from HF on input HF cannot render sensibly:
 * - an assistant message with tool_calls may have content null or absent; it renders as
 *   content "" (HF drops None keys and the hybrid template then fails with
 *   UndefinedError; the 2507 templates render it as "" too, and their goldens check that);
 * - unknown or missing roles, a missing/non-string content elsewhere, a non-string tool
 *   call name, a missing `arguments`, and non-object tools are KIPP_ERR_INVALID_ARG (HF
 *   silently skips unknown roles, prints "" for undefined fields, str() for other types);
 * - reasoning is read as HF 5.x does: the first non-null of reasoning_content, thinking,
 *   reasoning (its alias step), and it must be a string (also for Qwen2.5, whose template
 *   ignores it).
 * Text is handled as bytes: the template's string operations only look for ASCII ('\n',
 * '<think>', '</think>', '<tool_response>'), which never occur inside a UTF-8 sequence. */
#include "tok/chat.h"

#include "core/error.h"
#include "tok/pyjson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- known templates ---------------------------------------------------------------------- */

/* tools/data/qwen3-tokenizer/tokenizer_config.json "chat_template" (sha256 87a2728c...b5, the
 * template of Qwen3-0.6B..32B as released): every line below is one line of the Jinja. */
static const char qwen3_hybrid_template[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set content = message.content %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in message.content %}\n"
    "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
    "                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}";

/* The template of Qwen/Qwen3-*-Instruct-2507 (tests/tok/templates/qwen3-instruct-2507.jinja,
 * sha256 64f85b19...c326; provenance in tests/tok/templates/README.md): no thinking at all. */
static const char qwen3_instruct_2507_template[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n"
    "    {%- else %}\n"
    "        {%- set content = '' %}\n"
    "    {%- endif %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}";

/* The template of Qwen/Qwen3-*-Thinking-2507 (tests/tok/templates/qwen3-thinking-2507.jinja,
 * sha256 3802169b...d8d7): the hybrid template as Qwen revised it (non-string content read as
 * "", reasoning_content used only when a string) with a generation prompt that opens <think>
 * and no enable_thinking. */
static const char qwen3_thinking_2507_template[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n"
    "    {%- else %}\n"
    "        {%- set content = '' %}\n"
    "    {%- endif %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is string %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in content %}\n"
    "                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n<think>\\n' }}\n"
    "{%- endif %}";

/* The template of Qwen/Qwen2.5-{0.5B..72B}-Instruct (tests/tok/templates/qwen2.5-instruct.jinja,
 * sha256 cd8e9439...527f with the one trailing newline the Hub text has, fnv1a64 of that
 * c2b27ee60f1b8775; provenance in tests/tok/templates/README.md): a default system message,
 * no reasoning at all, tool-call arguments always through tojson. */
static const char qwen25_instruct_template[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}";

const char *kipp_chat_template_name(kipp_chat_template_kind kind) {
    switch (kind) {
    case KIPP_CHAT_TEMPLATE_QWEN3: return "qwen3-hybrid";
    case KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507: return "qwen3-instruct-2507";
    case KIPP_CHAT_TEMPLATE_QWEN3_THINKING_2507: return "qwen3-thinking-2507";
    case KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT: return "qwen2.5-instruct";
    case KIPP_CHAT_TEMPLATE_CHATML: return "chatml";
    case KIPP_CHAT_TEMPLATE_NONE: break;
    }
    return "none";
}

/* The Jinja texts Kipp implements, each with its renderer's kind. */
static const struct {
    kipp_chat_template_kind kind;
    const char *text;
    size_t len;
} known[] = {
    {KIPP_CHAT_TEMPLATE_QWEN3, qwen3_hybrid_template, sizeof qwen3_hybrid_template - 1},
    {KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507, qwen3_instruct_2507_template,
     sizeof qwen3_instruct_2507_template - 1},
    {KIPP_CHAT_TEMPLATE_QWEN3_THINKING_2507, qwen3_thinking_2507_template,
     sizeof qwen3_thinking_2507_template - 1},
    {KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT, qwen25_instruct_template,
     sizeof qwen25_instruct_template - 1},
};
#define N_KNOWN (sizeof known / sizeof known[0])

const char *kipp_chat_template_source(kipp_chat_template_kind kind, size_t *len) {
    for (size_t i = 0; i < N_KNOWN; i++)
        if (known[i].kind == kind) {
            if (len) *len = known[i].len;
            return known[i].text;
        }
    if (len) *len = 0;
    return NULL;
}

kipp_chat_thinking kipp_chat_template_thinking(kipp_chat_template_kind kind, int enable_thinking) {
    switch (kind) {
    case KIPP_CHAT_TEMPLATE_QWEN3: return enable_thinking ? KIPP_CHAT_THINK_BY_TAG : KIPP_CHAT_THINK_OFF;
    case KIPP_CHAT_TEMPLATE_QWEN3_THINKING_2507: return KIPP_CHAT_THINK_IN_PROMPT;
    case KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT: return KIPP_CHAT_THINK_NEVER;
    case KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507:
    case KIPP_CHAT_TEMPLATE_CHATML:
    case KIPP_CHAT_TEMPLATE_NONE: break;
    }
    return KIPP_CHAT_THINK_OFF;
}

static uint64_t fnv1a64(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

kipp_status kipp_chat_template_check_text(const char *text, size_t len,
                                          kipp_chat_template_kind *out, char *err,
                                          size_t err_len) {
    *out = KIPP_CHAT_TEMPLATE_NONE;
    if (!text) {
        *out = KIPP_CHAT_TEMPLATE_CHATML;
        return KIPP_OK;
    }
    size_t n = len;
    if (n && text[n - 1] == '\n') n--; /* Jinja drops one trailing newline of a template */
    for (size_t i = 0; i < N_KNOWN; i++)
        if (n == known[i].len && memcmp(text, known[i].text, n) == 0) {
            *out = known[i].kind;
            return KIPP_OK;
        }
    char line[81]; /* the first non-empty line, printable ASCII only, at most 80 bytes */
    size_t i = 0, k = 0;
    while (i < len && (text[i] == '\n' || text[i] == '\r')) i++;
    for (; i < len && text[i] != '\n' && k < sizeof line - 1; i++)
        line[k++] = (text[i] >= 0x20 && text[i] < 0x7f) ? text[i] : '?';
    line[k] = '\0';
    return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                     "unsupported chat template (%zu bytes, fnv1a64 %016llx, first line "
                     "\"%s\"): Kipp renders the Qwen3 hybrid-thinking template, the Qwen3 "
                     "Instruct-2507 and Thinking-2507 ones and the Qwen2.5 Instruct one",
                     len, (unsigned long long)fnv1a64(text, len), line);
}

kipp_status kipp_chat_template_check(const kipp_gguf *g, kipp_chat_template_kind *out,
                                     char *err, size_t err_len) {
    static const char key[] = "tokenizer.chat_template";
    *out = KIPP_CHAT_TEMPLATE_NONE;
    if (kipp_gguf_find_key(g, key) < 0) /* no template: ChatML */
        return kipp_chat_template_check_text(NULL, 0, out, err, err_len);
    kipp_gguf_str s;
    kipp_status st = kipp_gguf_get_str(g, key, &s, err, err_len);
    if (st) return st;
    if (s.len > SIZE_MAX) return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "%s is too long", key);
    return kipp_chat_template_check_text(s.ptr, (size_t)s.len, out, err, err_len);
}

/* ---- validated input ---------------------------------------------------------------------- */

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL } role_t;
static const char *const role_names[] = {"system", "user", "assistant", "tool"};

typedef struct {
    const char *p; /* borrowed from the json_t; may contain NUL bytes */
    size_t n;
} span;

typedef struct {
    role_t role;
    span content;
    int has_reasoning; /* reasoning given explicitly (may be "") */
    span reasoning;
    const json_t *tool_calls; /* non-empty array or NULL */
} msg_t;

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static span str_span(const json_t *v) {
    span s = {json_string_value(v), json_string_length(v)};
    return s;
}

/* HF drops keys whose value is None before rendering: treat null as absent. */
static const json_t *get(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

/* The function object of a tool call, as the template picks it: `tool_call.function` if
 * that is truthy, else the tool call itself (the flat {name, arguments} form). */
static const json_t *call_function(const json_t *tc) {
    const json_t *fn = get(tc, "function");
    return fn ? fn : tc;
}

static kipp_status check_tool_calls(const json_t *calls, size_t i, char *err, size_t err_len) {
    for (size_t j = 0; j < json_array_size(calls); j++) {
        const json_t *tc = json_array_get(calls, j);
        if (!json_is_object(tc))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "messages[%zu].tool_calls[%zu]: expected an object, got %s", i, j,
                             type_name(tc));
        const json_t *fn = get(tc, "function");
        if (fn && (!json_is_object(fn) || json_object_size(fn) == 0))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "messages[%zu].tool_calls[%zu].function: expected a non-empty "
                             "object, got %s", i, j, type_name(fn));
        const char *where = fn ? ".function" : "";
        const json_t *name = json_object_get(call_function(tc), "name");
        if (!json_is_string(name))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "messages[%zu].tool_calls[%zu]%s.name: expected a string, got %s",
                             i, j, where, name ? type_name(name) : "nothing");
        if (!json_object_get(call_function(tc), "arguments"))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "messages[%zu].tool_calls[%zu]%s.arguments is missing", i, j,
                             where);
    }
    return KIPP_OK;
}

static kipp_status check_message(const json_t *m, size_t i, msg_t *out, char *err,
                                 size_t err_len) {
    memset(out, 0, sizeof *out);
    if (!json_is_object(m))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "messages[%zu]: expected an object, got %s", i, type_name(m));
    const json_t *role = get(m, "role");
    if (!role)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "messages[%zu].role is missing",
                         i);
    if (!json_is_string(role))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "messages[%zu].role: expected a string, got %s", i, type_name(role));
    int r = -1;
    for (int k = 0; k < 4; k++)
        if (strcmp(json_string_value(role), role_names[k]) == 0) r = k;
    if (r < 0)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "messages[%zu].role: unknown role \"%.40s\" (expected system, user, "
                         "assistant or tool)", i, json_string_value(role));
    out->role = (role_t)r;

    if (out->role == ROLE_ASSISTANT) {
        const json_t *calls = get(m, "tool_calls");
        if (calls && !json_is_array(calls))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "messages[%zu].tool_calls: expected an array, got %s", i,
                             type_name(calls));
        if (calls && json_array_size(calls) > 0) {
            kipp_status st = check_tool_calls(calls, i, err, err_len);
            if (st) return st;
            out->tool_calls = calls;
        }
        static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
        for (int k = 0; k < 3 && !out->has_reasoning; k++) {
            const json_t *rv = get(m, reasoning_keys[k]);
            if (!rv) continue;
            if (!json_is_string(rv))
                return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                                 "messages[%zu].%s: expected a string, got %s", i,
                                 reasoning_keys[k], type_name(rv));
            out->has_reasoning = 1;
            out->reasoning = str_span(rv);
        }
    }

    const json_t *content = get(m, "content");
    if (!content) {
        if (out->tool_calls) { /* OpenAI sends content: null beside tool calls */
            out->content.p = "";
            return KIPP_OK;
        }
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "messages[%zu].content is missing (only an assistant message with "
                         "tool_calls may omit it)", i);
    }
    if (!json_is_string(content))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "messages[%zu].content: expected a string, got %s", i,
                         type_name(content));
    out->content = str_span(content);
    return KIPP_OK;
}

static kipp_status check_input(const json_t *messages, const json_t *tools, msg_t **out,
                               char *err, size_t err_len) {
    *out = NULL;
    if (!json_is_array(messages))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "messages: expected an array, got %s",
                         messages ? type_name(messages) : "nothing");
    size_t n = json_array_size(messages);
    if (n == 0)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "messages: the array is empty");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "tools: expected an array, got %s", type_name(tools));
        for (size_t j = 0; j < json_array_size(tools); j++)
            if (!json_is_object(json_array_get(tools, j)))
                return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                                 "tools[%zu]: expected an object, got %s", j,
                                 type_name(json_array_get(tools, j)));
    }
    msg_t *msgs = calloc(n, sizeof *msgs);
    if (!msgs) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory (%zu messages)", n);
    for (size_t i = 0; i < n; i++) {
        kipp_status st = check_message(json_array_get(messages, i), i, &msgs[i], err, err_len);
        if (st) {
            free(msgs);
            return st;
        }
    }
    *out = msgs;
    return KIPP_OK;
}

/* ---- Python str methods on byte spans ------------------------------------------------------ */

static span lstrip_nl(span s) { /* s.lstrip('\n') */
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}
static span rstrip_nl(span s) { /* s.rstrip('\n') */
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}
static span strip_nl(span s) { return rstrip_nl(lstrip_nl(s)); }

/* Offset of the first (last = 0) or last (last = 1) occurrence of needle, or -1. */
static long find(span s, const char *needle, int last) {
    size_t k = strlen(needle);
    if (k > s.n) return -1;
    long hit = -1;
    for (size_t i = 0; i + k <= s.n; i++)
        if (memcmp(s.p + i, needle, k) == 0) {
            hit = (long)i;
            if (!last) break;
        }
    return hit;
}
static int starts_with(span s, const char *x) {
    size_t k = strlen(x);
    return s.n >= k && memcmp(s.p, x, k) == 0;
}
static int ends_with(span s, const char *x) {
    size_t k = strlen(x);
    return s.n >= k && memcmp(s.p + s.n - k, x, k) == 0;
}

/* Text from the request (message content, reasoning, tool-call names and arguments, tool
 * schemas) is marked: the caller may tokenize it with special tokens as plain text. */
typedef struct {
    kipp_buf text; /* the rendering */
    int track;     /* record marks: the caller asked for the spans */
    size_t (*marks)[2], n_marks, cap_marks; /* [n_marks] byte ranges [at, end) of text */
} rendering;

/* Records [from, text.len) as marked (nothing when !track or it is empty), joined to the
 * previous range when adjacent; a failure to grow is the text's failure (sticky oom). */
static void mark(rendering *b, size_t from) {
    if (!b->track || b->text.oom || from >= b->text.len) return;
    if (b->n_marks && b->marks[b->n_marks - 1][1] == from) {
        b->marks[b->n_marks - 1][1] = b->text.len;
        return;
    }
    if (kipp_grow((void **)&b->marks, &b->cap_marks, b->n_marks + 1, sizeof *b->marks)) {
        b->text.oom = 1;
        return;
    }
    b->marks[b->n_marks][0] = from;
    b->marks[b->n_marks][1] = b->text.len;
    b->n_marks++;
}

static void put(rendering *b, span s) {
    size_t at = b->text.len;
    kipp_buf_put(&b->text, s.p, s.n);
    mark(b, at);
}

static kipp_status put_json(const json_t *v, rendering *b, char *err, size_t err_len) {
    size_t at = b->text.len;
    kipp_status st = kipp_pyjson_dump(v, &b->text, err, err_len);
    mark(b, at);
    return st;
}

/* ---- markup the Qwen templates share ------------------------------------------------------ */

/* The tools block of the system turn, from "# Tools" to the turn's end: every Qwen3 and
 * Qwen2.5 template writes these bytes (Qwen2.5 with the "\n\n" before "# Tools" in its own
 * string). */
static kipp_status put_tools(rendering *b, const json_t *tools, char *err, size_t err_len) {
    kipp_buf_puts(&b->text, "# Tools\n\nYou may call one or more functions to assist with the "
                      "user query.\n\nYou are provided with function signatures within "
                      "<tools></tools> XML tags:\n<tools>");
    for (size_t j = 0; j < json_array_size(tools); j++) {
        kipp_buf_puts(&b->text, "\n");
        kipp_status st = put_json(json_array_get(tools, j), b, err, err_len);
        if (st) return st;
    }
    kipp_buf_puts(&b->text, "\n</tools>\n\nFor each function call, return a json object with "
                      "function name and arguments within <tool_call></tool_call> XML "
                      "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                      "<args-json-object>}\n</tool_call><|im_end|>\n");
    return KIPP_OK;
}

/* "<|im_start|>ROLE\nCONTENT<|im_end|>\n": a user turn, or a system message after the first. */
static void put_turn(rendering *b, const msg_t *msg) {
    kipp_buf_puts(&b->text, "<|im_start|>");
    kipp_buf_puts(&b->text, role_names[msg->role]);
    kipp_buf_puts(&b->text, "\n");
    put(b, msg->content);
    kipp_buf_puts(&b->text, "<|im_end|>\n");
}

/* Tool result m[i]: consecutive tool results share one user turn. */
static void put_tool_response(rendering *b, const msg_t *m, size_t n, size_t i) {
    if (i == 0 || m[i - 1].role != ROLE_TOOL) kipp_buf_puts(&b->text, "<|im_start|>user");
    kipp_buf_puts(&b->text, "\n<tool_response>\n");
    put(b, m[i].content);
    kipp_buf_puts(&b->text, "\n</tool_response>");
    if (i == n - 1 || m[i + 1].role != ROLE_TOOL) kipp_buf_puts(&b->text, "<|im_end|>\n");
}

/* One tool call: "<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>". ARGS is a
 * string argument pasted as it is (Qwen3: a JSON text already) when paste_string, else the
 * value through tojson (Qwen2.5 does so for strings too: they become JSON strings). */
static kipp_status put_tool_call(rendering *b, const json_t *call, int paste_string, char *err,
                                 size_t err_len) {
    const json_t *fn = call_function(call);
    const json_t *args = json_object_get(fn, "arguments");
    kipp_buf_puts(&b->text, "<tool_call>\n{\"name\": \"");
    put(b, str_span(json_object_get(fn, "name")));
    kipp_buf_puts(&b->text, "\", \"arguments\": ");
    if (paste_string && json_is_string(args)) {
        put(b, str_span(args));
    } else {
        kipp_status st = put_json(args, b, err, err_len);
        if (st) return st;
    }
    kipp_buf_puts(&b->text, "}\n</tool_call>");
    return KIPP_OK;
}

/* ---- the Qwen3 templates ------------------------------------------------------------------- */
/* One renderer for the three: they share the tools block, the user/system/tool turns and the
 * tool-call markup. Instruct-2507 writes an assistant turn's content as it is (no reasoning,
 * no <think> parsing) and ends the prompt with a bare assistant header; the hybrid and
 * Thinking-2507 templates treat reasoning alike and differ only in the generation prompt. */

static kipp_status render_qwen3(rendering *b, kipp_chat_template_kind kind, const msg_t *m,
                                size_t n, const json_t *tools, int add_generation_prompt,
                                int enable_thinking, char *err, size_t err_len) {
    if (tools && json_array_size(tools) > 0) {
        kipp_buf_puts(&b->text, "<|im_start|>system\n");
        if (m[0].role == ROLE_SYSTEM) {
            put(b, m[0].content);
            kipp_buf_puts(&b->text, "\n\n");
        }
        kipp_status st = put_tools(b, tools, err, err_len);
        if (st) return st;
    } else if (m[0].role == ROLE_SYSTEM) {
        kipp_buf_puts(&b->text, "<|im_start|>system\n");
        put(b, m[0].content);
        kipp_buf_puts(&b->text, "<|im_end|>\n");
    }

    /* The last "real" user query: later assistant turns (a tool-call loop in progress) keep
     * their reasoning. A user turn that only wraps a tool response does not count. */
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;) {
        if (m[k].role == ROLE_USER && !(starts_with(m[k].content, "<tool_response>") &&
                                         ends_with(m[k].content, "</tool_response>"))) {
            last_query = k;
            break;
        }
    }

    for (size_t i = 0; i < n; i++) {
        const msg_t *msg = &m[i];
        if (msg->role == ROLE_USER || (msg->role == ROLE_SYSTEM && i > 0)) {
            put_turn(b, msg);
        } else if (msg->role == ROLE_ASSISTANT) {
            span content = msg->content, reasoning = {"", 0};
            if (kind == KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507) {
                /* no reasoning: the content as it is, <think> tags and all */
            } else if (msg->has_reasoning) {
                reasoning = msg->reasoning;
            } else if (find(content, "</think>", 0) >= 0) {
                /* content.split('</think>')[-1].lstrip('\n') */
                span after = content;
                long e = find(content, "</think>", 1);
                after.p += e + 8, after.n -= (size_t)e + 8;
                /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
                span before = {content.p, (size_t)find(content, "</think>", 0)};
                before = rstrip_nl(before);
                long s = find(before, "<think>", 1);
                if (s >= 0) before.p += s + 7, before.n -= (size_t)s + 7;
                reasoning = lstrip_nl(before);
                content = lstrip_nl(after);
            }
            kipp_buf_puts(&b->text, "<|im_start|>assistant\n");
            if (kind != KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507 && i > last_query &&
                (i == n - 1 || reasoning.n)) {
                kipp_buf_puts(&b->text, "<think>\n");
                put(b, strip_nl(reasoning));
                kipp_buf_puts(&b->text, "\n</think>\n\n");
                put(b, lstrip_nl(content));
            } else {
                put(b, content);
            }
            /* each call on its own line; the first right after the header when no content */
            for (size_t j = 0; msg->tool_calls && j < json_array_size(msg->tool_calls); j++) {
                if (j > 0 || content.n) kipp_buf_puts(&b->text, "\n");
                kipp_status st =
                    put_tool_call(b, json_array_get(msg->tool_calls, j), 1, err, err_len);
                if (st) return st;
            }
            kipp_buf_puts(&b->text, "<|im_end|>\n");
        } else if (msg->role == ROLE_TOOL) {
            put_tool_response(b, m, n, i);
        }
        /* a leading system message was written above */
    }
    if (add_generation_prompt) {
        kipp_buf_puts(&b->text, "<|im_start|>assistant\n");
        /* the 2507 templates have no enable_thinking: Instruct never thinks, Thinking always */
        if (kind == KIPP_CHAT_TEMPLATE_QWEN3_THINKING_2507) kipp_buf_puts(&b->text, "<think>\n");
        else if (kind == KIPP_CHAT_TEMPLATE_QWEN3 && !enable_thinking)
            kipp_buf_puts(&b->text, "<think>\n\n</think>\n\n");
    }
    return KIPP_OK;
}

/* ---- the Qwen2.5 Instruct template --------------------------------------------------------- */
/* What differs from Qwen3: a system turn always comes first (the default message when the
 * first message is not a system one); no reasoning anywhere (reasoning fields are ignored,
 * <think> in content is text, enable_thinking does nothing); an assistant turn with tool calls
 * is "<|im_start|>assistant", then "\n" + content only when content is non-empty, then
 * "\n<tool_call>..." per call, whose arguments always go through tojson. */

static const char qwen25_default_system[] =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

static kipp_status render_qwen25(rendering *b, const msg_t *m, size_t n, const json_t *tools,
                                 int add_generation_prompt, char *err, size_t err_len) {
    kipp_buf_puts(&b->text, "<|im_start|>system\n");
    if (m[0].role == ROLE_SYSTEM) put(b, m[0].content);
    else kipp_buf_puts(&b->text, qwen25_default_system);
    if (tools && json_array_size(tools) > 0) {
        kipp_buf_puts(&b->text, "\n\n");
        kipp_status st = put_tools(b, tools, err, err_len);
        if (st) return st;
    } else {
        kipp_buf_puts(&b->text, "<|im_end|>\n");
    }

    for (size_t i = 0; i < n; i++) {
        const msg_t *msg = &m[i];
        if (msg->role == ROLE_USER || (msg->role == ROLE_SYSTEM && i > 0) ||
            (msg->role == ROLE_ASSISTANT && !msg->tool_calls)) {
            put_turn(b, msg);
        } else if (msg->role == ROLE_ASSISTANT) {
            kipp_buf_puts(&b->text, "<|im_start|>assistant");
            if (msg->content.n) {
                kipp_buf_puts(&b->text, "\n");
                put(b, msg->content);
            }
            for (size_t j = 0; j < json_array_size(msg->tool_calls); j++) {
                kipp_buf_puts(&b->text, "\n");
                kipp_status st =
                    put_tool_call(b, json_array_get(msg->tool_calls, j), 0, err, err_len);
                if (st) return st;
            }
            kipp_buf_puts(&b->text, "<|im_end|>\n");
        } else if (msg->role == ROLE_TOOL) {
            put_tool_response(b, m, n, i);
        }
        /* a leading system message was written above */
    }
    if (add_generation_prompt) kipp_buf_puts(&b->text, "<|im_start|>assistant\n");
    return KIPP_OK;
}

/* ---- plain ChatML --------------------------------------------------------------------------- */

static kipp_status render_chatml(rendering *b, const msg_t *m, size_t n, const json_t *tools,
                                 int add_generation_prompt, char *err, size_t err_len) {
    if (tools && json_array_size(tools) > 0)
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "tools: the model has no chat template (plain ChatML), which cannot "
                         "describe tools");
    for (size_t i = 0; i < n; i++) {
        if (m[i].tool_calls)
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "messages[%zu].tool_calls: the model has no chat template (plain "
                             "ChatML), which cannot express tool calls", i);
        put_turn(b, &m[i]); /* reasoning is not part of ChatML: dropped */
    }
    if (add_generation_prompt) kipp_buf_puts(&b->text, "<|im_start|>assistant\n");
    return KIPP_OK;
}

/* ---- entry points --------------------------------------------------------------------------- */

static kipp_status render(kipp_chat_template_kind kind, const json_t *messages,
                          const json_t *tools, int add_generation_prompt, int enable_thinking,
                          char **out, size_t *out_len, size_t **spans, size_t *n_spans,
                          char *err, size_t err_len);

kipp_status kipp_chat_render(kipp_chat_template_kind kind, const json_t *messages,
                             const json_t *tools, int add_generation_prompt,
                             int enable_thinking, char **out, size_t *out_len, char *err,
                             size_t err_len) {
    return render(kind, messages, tools, add_generation_prompt, enable_thinking, out, out_len,
                  NULL, NULL, err, err_len);
}

static kipp_status render(kipp_chat_template_kind kind, const json_t *messages,
                          const json_t *tools, int add_generation_prompt, int enable_thinking,
                          char **out, size_t *out_len, size_t **spans, size_t *n_spans,
                          char *err, size_t err_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (spans) *spans = NULL, *n_spans = 0;
    if (kind != KIPP_CHAT_TEMPLATE_CHATML && !kipp_chat_template_source(kind, NULL))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "no chat template selected (%d)",
                         (int)kind);
    msg_t *m;
    kipp_status st = check_input(messages, tools, &m, err, err_len);
    if (st) return st;
    if (tools && json_is_null(tools)) tools = NULL;
    size_t n = json_array_size(messages);
    rendering b = {0};
    b.track = spans != NULL;
    if (kind == KIPP_CHAT_TEMPLATE_CHATML)
        st = render_chatml(&b, m, n, tools, add_generation_prompt, err, err_len);
    else if (kind == KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT)
        st = render_qwen25(&b, m, n, tools, add_generation_prompt, err, err_len);
    else
        st = render_qwen3(&b, kind, m, n, tools, add_generation_prompt, enable_thinking, err,
                          err_len);
    free(m);
    if (st) {
        kipp_buf_free(&b.text);
        free(b.marks);
        return st;
    }
    size_t *marks = (size_t *)b.marks, n_marks = b.n_marks;
    *out = kipp_buf_take(&b.text, out_len);
    if (!*out) {
        free(marks);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory rendering the chat");
    }
    if (spans) *spans = marks, *n_spans = n_marks;
    else free(marks);
    return KIPP_OK;
}

static kipp_status get_bool(const json_t *obj, const char *where, const char *key, int *val,
                            char *err, size_t err_len) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return KIPP_OK;
    if (!json_is_boolean(v))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "%s%s: expected a boolean, got %s",
                         where, key, type_name(v));
    *val = json_is_true(v);
    return KIPP_OK;
}

kipp_status kipp_chat_render_json(kipp_chat_template_kind kind, const char *request,
                                  size_t request_len, char **out, size_t *out_len, char *err,
                                  size_t err_len) {
    return kipp_chat_render_json_spans(kind, request, request_len, out, out_len, NULL, NULL,
                                       err, err_len);
}

kipp_status kipp_chat_render_json_spans(kipp_chat_template_kind kind, const char *request,
                                        size_t request_len, char **out, size_t *out_len,
                                        size_t **spans, size_t *n_spans, char *err,
                                        size_t err_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    json_error_t jerr;
    json_t *req = json_loadb(request, request_len, JSON_ALLOW_NUL, &jerr);
    if (!req)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "request: invalid JSON at line %d column %d: %s", jerr.line,
                         jerr.column, jerr.text);
    kipp_status st = KIPP_OK;
    int agp = 1, think = 1;
    const json_t *kw = NULL;
    if (!json_is_object(req)) {
        st = kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "request: expected an object, got %s",
                       type_name(req));
        goto done;
    }
    kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw)) {
        st = kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                       "chat_template_kwargs: expected an object, got %s", type_name(kw));
        goto done;
    }
    if ((st = get_bool(req, "", "add_generation_prompt", &agp, err, err_len)) ||
        (st = get_bool(req, "", "enable_thinking", &think, err, err_len)) ||
        (json_is_object(kw) &&
         (st = get_bool(kw, "chat_template_kwargs.", "enable_thinking", &think, err, err_len))))
        goto done;
    st = render(kind, json_object_get(req, "messages"), json_object_get(req, "tools"), agp,
                think, out, out_len, spans, n_spans, err, err_len);
done:
    json_decref(req);
    return st;
}
