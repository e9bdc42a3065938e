#!/usr/bin/env python3
"""make_chat_golden.py — writes tests/tok/chat_golden/*.json: chat conversations with the
prompt text HF transformers renders for them, apply_chat_template(messages, tools=...,
tokenize=False, add_generation_prompt=..., enable_thinking=...), with the Qwen3 tokenizer
in tools/data/qwen3-tokenizer/ (its tokenizer_config.json carries the hybrid-thinking
template). A few cases use the plain ChatML template Kipp falls back to for GGUFs without
a template (HF's canonical ChatML Jinja, passed as chat_template=). Every hybrid case is
rendered again with the Qwen3 2507 templates, tests/tok/templates/qwen3-instruct-2507.jinja
and qwen3-thinking-2507.jinja, and with the Qwen2.5 Instruct template,
tests/tok/templates/qwen2.5-instruct.jinja (the texts those repositories ship; where they
come from: tests/tok/templates/README.md), passed as chat_template=, plus a few cases only
they render.

Each file is one case: {"name", "template": "qwen3-hybrid" | "qwen3-instruct-2507" |
"qwen3-thinking-2507" | "qwen2.5-instruct" | "chatml", "messages",
"tools"?, "add_generation_prompt", "enable_thinking"? (absent: not passed to HF),
"expected"}. The C side (kt_chat_golden in tests/unit/test_chat.c) feeds the file to
kipp_chat_render_json, which ignores the extra keys, and compares byte for byte.

Only inputs HF renders are here; Kipp's stricter validation and its content-null rule are
unit-tested in C. Needs transformers >= 5 (it reads `reasoning` / `thinking` as aliases of
reasoning_content, which one case relies on).

Usage: .venv/bin/python tests/tok/make_chat_golden.py [out_dir]
Deterministic: reruns give the same files (stale *.json in out_dir are removed).
"""
import hashlib
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOK_DIR = ROOT / "tools/data/qwen3-tokenizer"
OUT = ROOT / "tests/tok/chat_golden"
CONFIG_SHA256 = "bf8a8f7ef20e8775e60544c33cfc0449e4f924eccae9ff239498e7f35e90a39d"
TEMPLATE_SHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"
TEMPLATES = ROOT / "tests/tok/templates"
TEMPLATE_FILE_SHA256 = {  # the texts in TEMPLATES, by template name (= file stem)
    "qwen3-instruct-2507": "64f85b198065d0fba2a81f37e10ed68161ce2c19a754c7100e67e0ca2ee9c326",
    "qwen3-thinking-2507": "3802169b2a02b81e6adb7ab4f64f91ff02db753c8c3a64a01c35192d3a61d8d7",
    "qwen2.5-instruct": "cd8e9439f0570856fd70470bf8889ebd8b5d1107207f67a5efb46e342330527f",
}
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")

# ---- building blocks --------------------------------------------------------------------


def sys_(c):
    return {"role": "system", "content": c}


def user(c):
    return {"role": "user", "content": c}


def asst(c, **kw):
    return {"role": "assistant", "content": c, **kw}


def tool(c):
    return {"role": "tool", "content": c}


def call(name, args, wrapped=True):
    fn = {"name": name, "arguments": args}
    return {"type": "function", "function": fn} if wrapped else fn


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": ("Suche im Web — 検索 🔍 «quoted» \"double\" back\\slash\ttab\n"
                        "newline\u0001"),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 512},
                "filters": {
                    "type": "object",
                    "properties": {
                        "lang": {"type": ["string", "null"], "default": None},
                        "since": {"type": "number", "minimum": 0.5, "maximum": 1e21,
                                  "multipleOf": 1e-07},
                        "safe": {"type": "boolean", "default": True},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
                        "weights": {"type": "array", "items": {"type": "number"},
                                    "default": [0.1, 0.2, 0.30000000000000004, -0.0, 100.0,
                                                1e16, 1e-05, 123456.789]},
                    },
                },
                "größe": {"type": "integer", "description": "Größe in Bytes", "default": -42},
            },
            "required": ["query"],
        },
    },
}

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
}

THINK = "<think>\nThe user wants a greeting.\n</think>\n\nHello!"

# ---- the cases --------------------------------------------------------------------------
# (name, messages, tools, add_generation_prompt, enable_thinking or None, template)

Q3, CML = "qwen3-hybrid", "chatml"
CASES = [
    ("user_only", [user("Hi")], None, False, None, Q3),
    ("user_only_gen", [user("Hi")], None, True, None, Q3),
    ("user_only_gen_nothink", [user("Hi")], None, True, False, Q3),
    ("user_only_nothink_nogen", [user("Hi")], None, False, False, Q3),
    ("user_only_gen_think_true", [user("Hi")], None, True, True, Q3),
    ("system_user_gen", [sys_("You are a helpful assistant."), user("Hi")], None, True, None,
     Q3),
    ("system_only", [sys_("Be brief.")], None, False, None, Q3),
    ("system_only_gen", [sys_("Be brief.")], None, True, False, Q3),
    ("multi_turn", [sys_("S"), user("one"), asst("uno"), user("two"), asst("dos"),
                    user("three")], None, True, None, Q3),
    ("multi_turn_no_system", [user("one"), asst("uno"), user("two")], None, True, False, Q3),
    ("history_think_stripped", [user("Hi"), asst(THINK), user("Again?")], None, True, None,
     Q3),
    ("last_assistant_think_in_content", [user("Hi"), asst(THINK)], None, False, None, Q3),
    ("last_assistant_plain", [user("Hi"), asst("Hello!")], None, False, None, Q3),
    ("last_assistant_reasoning_content",
     [user("Hi"), asst("Hello!", reasoning_content="\nGreet them.\n\n")], None, False, None,
     Q3),
    ("history_reasoning_content_dropped",
     [user("Hi"), asst("Hello!", reasoning_content="Greet them."), user("Bye")], None, True,
     None, Q3),
    ("last_assistant_empty_reasoning_content",
     [user("Hi"), asst("<think>kept verbatim</think>Hello!", reasoning_content="")], None,
     False, None, Q3),
    ("reasoning_alias_field",
     [user("Hi"), asst("Hello!", reasoning="Aliased by transformers 5.")], None, False, None,
     Q3),
    ("close_tag_only", [user("Hi"), asst("thinking without an opening tag\n</think>\nAnswer")],
     None, False, None, Q3),
    ("many_think_tags",
     [user("Hi"), asst("<think>a</think>b<think>\n\nc\n\n</think>\n\nd</think>\n\n\ne")],
     None, False, None, Q3),
    ("newline_stripping",
     [user("Hi"), asst("\n\n<think>\n\n  R with spaces  \n\n</think>\n\n\nA\n\n")], None,
     False, None, Q3),
    ("history_newline_stripping",
     [user("Hi"), asst("\n<think>\nR\n</think>\n\n\nA\n\n"), user("next")], None, True, None,
     Q3),
    ("empty_contents", [sys_(""), user(""), asst(""), user("")], None, True, None, Q3),
    ("last_assistant_empty", [user("x"), asst("")], None, False, None, Q3),
    ("think_tags_in_user", [user("<think>not parsed</think> in user text")], None, True, None,
     Q3),
    ("unicode_content",
     [sys_("Réponds en français. 日本語も。"), user("Ünïcödé — emoji 😀👍🏽 👨‍👩‍👧 RTL עברית "
                                            "combining e\u0301 zero-width\u200b sep\u2028end"),
      asst("Bien sûr ! ✅"), user("\u0001\u001f control \t tab \r cr")], None, True, None, Q3),
    ("tools_with_system", [sys_("You are a bot."), user("Weather in Paris?")], [WEATHER], True,
     None, Q3),
    ("tools_no_system", [user("Weather in Paris?")], [WEATHER], True, None, Q3),
    ("tools_nested_unicode", [sys_("Système: ünïcode"), user("Search for Kipp")],
     [SEARCH, WEATHER, CALC], True, False, Q3),
    ("tools_empty_list", [sys_("S"), user("Hi")], [], True, None, Q3),
    ("tools_assistant_first", [asst("I start.")], [CALC], False, None, Q3),
    ("tool_call_dict_args",
     [user("Weather in Paris?"),
      asst("", tool_calls=[call("get_weather", {"city": "Paris", "unit": "celsius"})])],
     [WEATHER], False, None, Q3),
    ("tool_call_string_args",
     [user("Weather in Paris?"),
      asst("", tool_calls=[call("get_weather", '{"city":"Paris" , "unit" : "celsius"}')])],
     [WEATHER], False, None, Q3),
    ("tool_call_string_not_json",
     [user("x"), asst("", tool_calls=[call("calc", "not json {")])], [CALC], False, None, Q3),
    ("tool_call_with_content",
     [user("Weather in Paris and Rome?"),
      asst("Let me check both.",
           tool_calls=[call("get_weather", {"city": "Paris"}),
                       call("get_weather", {"city": "Rome"})])],
     [WEATHER], False, None, Q3),
    ("tool_calls_multiple_no_content",
     [user("Weather in Paris and Rome?"),
      asst("", tool_calls=[call("get_weather", {"city": "Paris"}),
                           call("get_weather", '{"city": "Rome"}'), call("calc", {})])],
     [WEATHER, CALC], True, None, Q3),
    ("tool_call_flat_form",
     [user("x"), asst("ok", tool_calls=[call("calc", {"e": "1+1"}, wrapped=False)])], [CALC],
     False, None, Q3),
    ("tool_call_think_content",
     [user("x"), asst("<think>\nI need calc.\n</think>\n\n",
                      tool_calls=[call("calc", {"e": "2*3"})])], [CALC], False, None, Q3),
    ("tool_calls_empty_list", [user("x"), asst("plain", tool_calls=[])], None, True, None, Q3),
    ("tool_args_scalars",
     [user("x"),
      asst("", tool_calls=[call("calc", {
          "int": 42, "neg": -7, "big": 9007199254740993, "zero": 0, "float": 3.0,
          "pi": 3.141592653589793, "tiny": 5e-324, "huge": 1.7976931348623157e308,
          "exp": 1e16, "almost": 1e15, "small": 0.0001, "smaller": 1e-05, "negzero": -0.0,
          "t": True, "f": False, "none": None, "list": [1, 2.5, "three", [], {}],
          "nested": {"a": {"b": {"c": [None, True]}}},
          "text": "quote \" backslash \\ slash / nl \n tab \t ctl \u0002 del \u007f é 😀",
          "ключ": "значение", "": "empty key"})])],
     [CALC], False, None, Q3),
    ("tool_response_single",
     [user("Weather in Paris?"),
      asst("", tool_calls=[call("get_weather", {"city": "Paris"})]),
      tool('{"temp": 21, "sky": "clear"}')], [WEATHER], True, None, Q3),
    ("tool_responses_consecutive",
     [user("Weather in Paris, Rome, Oslo?"),
      asst("", tool_calls=[call("get_weather", {"city": c}) for c in ("Paris", "Rome", "Oslo")]),
      tool("21C"), tool("25C"), tool("")], [WEATHER], True, None, Q3),
    ("multi_step_tool_loop",
     [sys_("S"), user("Plan a trip."),
      asst("Checking weather.", reasoning_content="Need weather first.",
           tool_calls=[call("get_weather", {"city": "Paris"})]),
      tool("21C"),
      asst("", reasoning_content="Now compute.", tool_calls=[call("calc", {"e": "21*2"})]),
      tool("42")], [WEATHER, CALC], True, None, Q3),
    ("multi_step_tool_loop_finished",
     [user("Plan a trip."),
      asst("<think>\nNeed weather.\n</think>\n\n",
           tool_calls=[call("get_weather", {"city": "Oslo"})]),
      tool("-3C"),
      asst("<think>\nCold.\n</think>\n\nBring a coat.")], [WEATHER], False, None, Q3),
    ("multi_step_then_new_query",
     [user("Plan a trip."),
      asst("", reasoning_content="Need weather.",
           tool_calls=[call("get_weather", {"city": "Oslo"})]),
      tool("-3C"), asst("Bring a coat.", reasoning_content="Cold."), user("Thanks!")],
     [WEATHER], True, False, Q3),
    ("multi_step_no_reasoning_midway",
     [user("q"), asst("step one", tool_calls=[call("calc", {})]), tool("r1"),
      asst("step two", tool_calls=[call("calc", {})]), tool("r2")], [CALC], True, None, Q3),
    ("user_wrapped_tool_response",
     [user("Real question"), asst("", tool_calls=[call("calc", {})]),
      user("<tool_response>\n7\n</tool_response>"), asst("It is 7.", reasoning_content="R")],
     [CALC], False, None, Q3),
    ("user_half_wrapped_is_query",
     [user("Real question"), asst("A1", reasoning_content="R1"),
      user("<tool_response>\n7\n</tool_response> and more"),
      asst("A2", reasoning_content="R2")], None, False, None, Q3),
    ("no_user_at_all", [sys_("S"), asst("a1", reasoning_content="r1"),
                        asst("a2", reasoning_content="r2")], None, False, None, Q3),
    ("tool_first", [tool("orphan result"), user("hm")], None, True, None, Q3),
    ("second_system_midway", [sys_("first"), user("u"), sys_("second"), user("v")], None,
     True, None, Q3),
    ("second_system_with_tools", [user("u"), sys_("late system")], [CALC], True, None, Q3),
    ("nothink_after_tool_loop",
     [user("q"), asst("", tool_calls=[call("calc", {"e": "1"})]), tool("1")], [CALC], True,
     False, Q3),
    ("long_mixed",
     [sys_("You are Kipp."), user("Hello"), asst("<think>\nhi\n</think>\n\nHi there."),
      user("Use a tool"),
      asst("Sure.", tool_calls=[call("search", {"query": "kipp", "filters": {"since": 2.5}})]),
      tool("result A"), tool("result B"),
      asst("Found it.", reasoning_content="Two results."), user("Summarize in French"),
      asst("Résumé : deux résultats.")], [SEARCH], True, None, Q3),
    # only the 2507 and Qwen2.5 templates render these (content null or absent: '' for them,
    # an UndefinedError for the hybrid one); they are added for those templates below
    ("content_null_with_tool_calls",
     [user("Weather in Oslo?"),
      asst(None, tool_calls=[call("get_weather", {"city": "Oslo"})]), tool("-3C")],
     [WEATHER], True, None, "2507"),
    ("content_absent_with_tool_calls_last",
     [user("x"), {"role": "assistant", "tool_calls": [call("calc", {"e": "1"})]}], [CALC],
     False, None, "2507"),
    ("chatml_basic", [sys_("S"), user("Hi"), asst("Hello")], None, True, None, CML),
    ("chatml_nogen_unicode", [user("日本語 😀"), asst("")], None, False, None, CML),
    ("chatml_tool_role_and_reasoning",
     [user("q"), asst("a", reasoning_content="dropped"), tool("t")], None, True, None, CML),
]

I2507, T2507, Q25 = "qwen3-instruct-2507", "qwen3-thinking-2507", "qwen2.5-instruct"

# Qwen2.5 only: its own rules (the system turn with an empty system message and tools, a
# string argument through tojson, "\n" + content only when content is non-empty, tool calls
# under the default system message)
Q25_CASES = [
    ("q25_tools_empty_system", [sys_(""), user("Hi")], [WEATHER], True, None, Q25),
    ("q25_tool_call_string_args_escapes",
     [user("x"), asst("", tool_calls=[call("calc", '{"e": "é 😀 \\" \n \u0001 \u2028"}')])],
     [CALC], False, None, Q25),
    ("q25_tool_call_newline_content",
     [user("x"), asst("\n", tool_calls=[call("calc", {"e": "1"})]), tool("1")], None, True,
     None, Q25),
    ("q25_tool_call_first_no_system",
     [asst("", tool_calls=[call("calc", {}), call("calc", {"e": [1, 2.5]}, wrapped=False)]),
      tool("2")], None, True, False, Q25),
]


def all_cases():
    """The cases above, then every hybrid case (and the "2507" ones) for each 2507 template
    and the Qwen2.5 one, named i2507_* / t2507_* / q25_*, then Q25_CASES; enable_thinking
    stays as the case gives it (those templates ignore it: the goldens show that)."""
    out = [c for c in CASES if c[5] in (Q3, CML)]
    for prefix, kind in (("i2507", I2507), ("t2507", T2507), ("q25", Q25)):
        for name, messages, tools, agp, think, template in CASES:
            if template in (Q3, "2507"):
                out.append((f"{prefix}_{name}", messages, tools, agp, think, kind))
    return out + Q25_CASES


def template_text(kind):
    text = (TEMPLATES / f"{kind}.jinja").read_text(encoding="utf-8")
    if hashlib.sha256(text.encode()).hexdigest() != TEMPLATE_FILE_SHA256[kind]:
        sys.exit(f"{TEMPLATES}/{kind}.jinja is not the recorded file")
    return text


def render(tok, case):
    name, messages, tools, agp, think, template = case
    kw = {"tokenize": False, "add_generation_prompt": agp}
    if tools is not None:
        kw["tools"] = tools
    if think is not None:
        kw["enable_thinking"] = think
    if template == CML:
        kw["chat_template"] = CHATML
    elif template in TEMPLATE_FILE_SHA256:
        kw["chat_template"] = template_text(template)
    return tok.apply_chat_template(messages, **kw)


def main():
    import jinja2
    import transformers
    from transformers import AutoTokenizer

    if int(transformers.__version__.split(".")[0]) < 5:
        sys.exit(f"needs transformers >= 5, found {transformers.__version__}")
    config = (TOK_DIR / "tokenizer_config.json").read_bytes()
    if hashlib.sha256(config).hexdigest() != CONFIG_SHA256:
        sys.exit(f"{TOK_DIR}/tokenizer_config.json is not the recorded file")
    template = json.loads(config)["chat_template"]
    assert hashlib.sha256(template.encode()).hexdigest() == TEMPLATE_SHA256
    warnings.filterwarnings("ignore")
    tok = AutoTokenizer.from_pretrained(str(TOK_DIR))

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    names = set()
    cases = all_cases()
    for i, case in enumerate(cases):
        name, messages, tools, agp, think, template = case
        assert name not in names, name
        names.add(name)
        doc = {"name": name, "template": template, "messages": messages}
        if tools is not None:
            doc["tools"] = tools
        doc["add_generation_prompt"] = agp
        if think is not None:
            doc["enable_thinking"] = think
        doc["expected"] = render(tok, case)
        doc["made_by"] = (f"tests/tok/make_chat_golden.py, transformers "
                          f"{transformers.__version__}, jinja2 {jinja2.__version__}")
        text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
        # the stored input must give the stored output (JSON round trip of the inputs)
        back = json.loads(text)
        again = render(tok, (name, back["messages"], back.get("tools"), agp, think, template))
        assert again == doc["expected"], name
        (out / f"{i:03d}_{name}.json").write_text(text, encoding="utf-8")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
