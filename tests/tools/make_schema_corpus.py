#!/usr/bin/env python3
"""make_schema_corpus.py — writes tests/unit/data/schema_corpus/*.json, the JSON Schema ->
grammar corpus that tests/unit/test_json_schema.c replays through the grammar matcher.

Each case is a schema with documents that must be accepted and documents that must be
rejected. Every document is checked here with the `jsonschema` package (Draft 2020-12, with
format checking) so the corpus itself cannot be wrong: an "accept" document must be valid
against the schema, a "reject" document must be invalid (or not JSON at all). Accepted
documents are written as the compact text Kipp's grammar generates:
json.dumps(doc, ensure_ascii=False, separators=(",", ":")); "accept_texts" and
"reject_texts" are exact texts (whitespace, escapes, malformed JSON).

The grammar accepts a subset of the valid documents (declared properties only, in schema
order; bounded whitespace and digits), so a valid document in another property order is
neither accepted nor rejected here: see docs/structured-output.md.

Usage: .venv/bin/python tests/tools/make_schema_corpus.py [--check]
  --check: fail (exit 1) when the committed files differ from what this script writes.
"""
import datetime
import json
import re
import sys
from pathlib import Path

import jsonschema

OUT = Path(__file__).resolve().parents[2] / "tests" / "unit" / "data" / "schema_corpus"

# jsonschema checks "time" and "date-time" only when rfc3339-validator is installed; these
# independent checks (RFC 3339 full-time / date-time, through the datetime module) stand in.
_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")


def _is_time(s):
    if not isinstance(s, str):
        return True
    m = _TIME.match(s)
    if not m:
        return False
    h, mi, sec = int(m[1]), int(m[2]), int(m[3])
    off = m[5]
    if off != "Z" and (int(off[1:3]) > 23 or int(off[4:6]) > 59):
        return False
    return h < 24 and mi < 60 and sec < 60


def _is_date_time(s):
    if not isinstance(s, str) or len(s) < 11 or s[10] != "T":
        return False if isinstance(s, str) else True
    try:
        datetime.date.fromisoformat(s[:10])
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d\d-\d\d", s[:10]) is not None and _is_time(s[11:])


FORMATS = jsonschema.FormatChecker()
FORMATS.checks("time")(_is_time)
FORMATS.checks("date-time")(_is_date_time)


def case(name, schema, valid=(), invalid=(), accept_texts=(), reject_texts=()):
    return dict(name=name, schema=schema, valid=list(valid), invalid=list(invalid),
                accept_texts=list(accept_texts), reject_texts=list(reject_texts))


S = {"type": "string"}
I = {"type": "integer"}

CASES = [
    case("simple_object",
         {"type": "object", "properties": {"name": S, "age": I}, "required": ["name", "age"],
          "additionalProperties": False},
         valid=[{"name": "Ada", "age": 36}, {"name": "", "age": -1}, {"name": "é\"\\\n", "age": 0}],
         invalid=[{"name": "Ada"}, {"age": 3}, {"name": 1, "age": 3}, {"name": "a", "age": 1.5},
                  {"name": "a", "age": 3, "x": 1}, [], "x", None],
         accept_texts=['{ "name" : "Ada" ,\n\t"age" : 36 }', '{"name":"\\u00e9\\ud83d\\ude00","age":7}'],
         reject_texts=['{"name":"a","age":3,}', '{"name":"a" "age":3}', '{"name":"a","age":03}',
                       '{"name":"a","age":3']),
    case("optional_properties",
         {"type": "object",
          "properties": {"a": I, "b": S, "c": {"type": "boolean"}, "d": {"type": "null"}, "e": I},
          "required": ["b", "d"], "additionalProperties": False},
         valid=[{"b": "x", "d": None}, {"a": 1, "b": "x", "d": None}, {"b": "", "c": True, "d": None},
                {"b": "", "d": None, "e": 5}, {"a": 1, "b": "x", "c": False, "d": None, "e": 2},
                {"a": 0, "b": "y", "d": None, "e": 0}],
         invalid=[{"b": "x"}, {"d": None}, {}, {"a": 1, "d": None}, {"b": "x", "d": 0},
                  {"b": "x", "d": None, "f": 1}],
         reject_texts=['{"b":"x",,"d":null}', '{,"b":"x","d":null}', '{"b":"x","d":null,}']),
    case("all_optional",
         {"type": "object", "properties": {"x": I, "y": I, "z": S}, "additionalProperties": False},
         valid=[{}, {"x": 1}, {"y": 2}, {"z": "s"}, {"x": 1, "z": "s"}, {"x": 1, "y": 2, "z": "s"}],
         invalid=[{"x": "1"}, {"w": 1}, []],
         accept_texts=['{ }', '{\n}'],
         reject_texts=['{,}', '{"x":1,}', '{"y":2,"x":1,"x":1']),
    case("nested_object",
         {"type": "object",
          "properties": {"user": {"type": "object",
                                  "properties": {"id": I, "address": {
                                      "type": "object",
                                      "properties": {"city": S, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                      "required": ["city"], "additionalProperties": False}},
                                  "required": ["id", "address"], "additionalProperties": False}},
          "required": ["user"], "additionalProperties": False},
         valid=[{"user": {"id": 1, "address": {"city": "Oslo"}}},
                {"user": {"id": 2, "address": {"city": "Bern", "zip": "30110"}}}],
         invalid=[{"user": {"id": 1}}, {"user": {"id": 1, "address": {}}},
                  {"user": {"id": 1, "address": {"city": "Bern", "zip": "3011"}}},
                  {"user": {"id": "1", "address": {"city": "x"}}}]),
    case("array_of_objects",
         {"type": "array", "minItems": 1, "maxItems": 3,
          "items": {"type": "object", "properties": {"sku": S, "qty": {"type": "integer", "minimum": 1}},
                    "required": ["sku", "qty"], "additionalProperties": False}},
         valid=[[{"sku": "a", "qty": 1}], [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 20}] * 1,
                [{"sku": "a", "qty": 1}] * 3],
         invalid=[[], [{"sku": "a", "qty": 0}], [{"sku": "a"}], [{"sku": "a", "qty": 1}] * 4, {"sku": "a"}],
         accept_texts=['[ {"sku":"a","qty":1} , {"sku":"b","qty":2} ]'],
         reject_texts=['[{"sku":"a","qty":1},]', '[,{"sku":"a","qty":1}]']),
    case("array_bounds",
         {"type": "array", "items": I, "minItems": 2, "maxItems": 4},
         valid=[[1, 2], [1, 2, 3], [0, -1, 2, 3]],
         invalid=[[], [1], [1, 2, 3, 4, 5], [1, "2"], [1, 2.5]],
         accept_texts=['[1,2]', '[ 1 , 2 , 3 ]']),
    case("array_any_items",
         {"type": "array"},
         valid=[[], [1, "a", None, True, {"k": [1.5, {}]}, []]],
         invalid=[{}, "[]", 1]),
    case("prefix_items",
         {"type": "array", "prefixItems": [S, I, {"type": "boolean"}], "items": False, "minItems": 1},
         valid=[["a"], ["a", 1], ["a", 1, True]],
         invalid=[[], [1], ["a", "b"], ["a", 1, True, 2], ["a", 1, "x"]]),
    case("prefix_items_then_items",
         {"type": "array", "prefixItems": [{"const": "head"}], "items": I, "maxItems": 3},
         valid=[[], ["head"], ["head", 1], ["head", 1, 2]],
         invalid=[["tail"], ["head", "x"], ["head", 1, 2, 3], [1]]),
    case("string_length",
         {"type": "string", "minLength": 2, "maxLength": 4},
         valid=["ab", "abcd", "日本", "😀😀", "a\n", "é\"\\"],
         invalid=["a", "abcde", "", "😀", 12],
         accept_texts=['"\\u00e9\\u00e9"', '"\\ud83d\\ude00\\n"', '"a\\/"'],
         reject_texts=['"a\\x"']),
    case("string_exact_length",
         {"type": "string", "minLength": 3, "maxLength": 3},
         valid=["abc", "a b", "αβγ"],
         invalid=["ab", "abcd"]),
    case("enum_unicode",
         {"enum": ["café", "日本語", "😀", "a\"b", "line\nbreak", "tab\tend", "back\\slash", "\u0001"]},
         valid=["café", "日本語", "😀", "a\"b", "line\nbreak", "tab\tend", "back\\slash", "\u0001"],
         invalid=["cafe", "日本", "", "a\"", 1, None]),
    case("enum_mixed",
         {"enum": [1, 2.5, "x", None, True, {"a": [1, 2]}, [1, "b"], 1e-07, 1e16, -0.5]},
         valid=[1, 2.5, "x", None, True, {"a": [1, 2]}, [1, "b"], 1e-07, 1e16, -0.5],
         invalid=[2, "y", False, {"a": [1]}, [1], 0.5],
         reject_texts=['{"a":[1,2],"b":1}', '3']),
    case("enum_typed",
         {"type": "string", "enum": ["red", "green", 3]},
         valid=["red", "green"],
         invalid=[3, "blue"]),
    case("const_object",
         {"const": {"kind": "fixed", "n": [1, None]}},
         valid=[{"kind": "fixed", "n": [1, None]}],
         invalid=[{"kind": "fixed"}, {"kind": "fixed", "n": [1]}, "fixed"]),
    case("any_of",
         {"anyOf": [S, {"type": "integer", "minimum": 10}, {"type": "null"},
                    {"type": "object", "properties": {"k": S}, "required": ["k"], "additionalProperties": False}]},
         valid=["s", 10, 11, None, {"k": "v"}],
         invalid=[9, True, {"j": "v"}, [], 1.5]),
    case("one_of_tagged",
         {"oneOf": [
             {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
              "required": ["kind", "r"], "additionalProperties": False},
             {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"}, "h": {"type": "number"}},
              "required": ["kind", "w", "h"], "additionalProperties": False}]},
         valid=[{"kind": "circle", "r": 1.5}, {"kind": "rect", "w": 2, "h": 3e2}],
         invalid=[{"kind": "circle"}, {"kind": "square", "r": 1}, {"kind": "rect", "w": 2}, {}]),
    case("one_of_types",
         {"oneOf": [S, I, {"type": "array", "items": S}]},
         valid=["a", 1, ["a"], []],
         invalid=[1.5, None, [1], {}]),
    case("all_of_single",
         {"description": "wrapper", "title": "T", "allOf": [
             {"type": "object", "properties": {"v": {"type": "integer", "maximum": 0}}, "required": ["v"],
              "additionalProperties": False}]},
         valid=[{"v": 0}, {"v": -12}],
         invalid=[{"v": 1}, {}]),
    case("ref_linked_list",
         {"$ref": "#/$defs/node",
          "$defs": {"node": {"type": "object",
                             "properties": {"value": I, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                             "required": ["value", "next"], "additionalProperties": False}}},
         valid=[{"value": 1, "next": None}, {"value": 1, "next": {"value": 2, "next": {"value": 3, "next": None}}}],
         invalid=[{"value": 1}, {"value": 1, "next": {"value": 2}}, {"value": 1, "next": {"value": "2", "next": None}}]),
    case("ref_tree_root",
         {"type": "object",
          "properties": {"name": S, "children": {"type": "array", "items": {"$ref": "#"}}},
          "required": ["name"], "additionalProperties": False},
         valid=[{"name": "r"}, {"name": "r", "children": []},
                {"name": "r", "children": [{"name": "a", "children": [{"name": "b"}]}, {"name": "c"}]}],
         invalid=[{"name": "r", "children": [{}]}, {"name": "r", "children": [{"name": 1}]}, {"children": []}]),
    case("ref_definitions",
         {"type": "object", "properties": {"color": {"$ref": "#/definitions/color"},
                                           "pos": {"$ref": "#/definitions/point"}},
          "required": ["color", "pos"], "additionalProperties": False,
          "definitions": {"color": {"enum": ["red", "blue"]},
                          "point": {"type": "array", "prefixItems": [I, I], "items": False, "minItems": 2}}},
         valid=[{"color": "red", "pos": [1, 2]}, {"color": "blue", "pos": [-1, 0]}],
         invalid=[{"color": "green", "pos": [1, 2]}, {"color": "red", "pos": [1]}, {"color": "red", "pos": [1, 2, 3]}]),
    case("pattern_anchored",
         {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"},
         valid=["ABC-12", "XYZ-1234"],
         invalid=["abc-12", "ABC-1", "ABC-12345", "AB-12", "xABC-12", "ABC-12x", 1]),
    case("pattern_unanchored",
         {"type": "string", "pattern": "a+b"},
         valid=["ab", "xxaab", "ab yy", "zzzabzzz"],
         invalid=["", "a", "ba", "b", "xyz"]),
    case("pattern_alternation",
         {"type": "string", "pattern": "^(?:foo|bar)+(-\\w+)?$|^x.y$"},
         valid=["foo", "barfoo", "foo-bar_1", "x.y", "xzy", "x\"y"],
         invalid=["", "fo", "foo-", "foo bar", "xy", "x\ny", "baz"]),
    case("pattern_escapes",
         {"type": "string", "pattern": "^a\"b\\\\c[^\"\\\\]{0,3}\\.\\s?$"},
         valid=["a\"b\\c.", "a\"b\\cxyz. ", "a\"b\\c\n\t."],
         invalid=["a\"b\\c\"..", "ab\\c.", "a\"b\\cxyzw."]),
    case("pattern_negated_classes",
         {"type": "string", "pattern": "^\\S+ \\D\\W[^\\s@]\\s$"},
         valid=["ab x-y ", "a! :.x\t", "x@ y z\n"],
         invalid=["ab 1-y ", "ab xa-y ", "ab x-@ ", "a b", "ab x-y"]),
    case("pattern_unicode",
         {"type": "string", "pattern": "^[α-ω]+ [\\u4e00-\\u9fff]{1,2}!?$"},
         valid=["αβγ 日本", "ω 語!"],
         invalid=["abc 日本", "αβ ", "α 日本語"]),
    case("formats",
         {"type": "object",
          "properties": {f: {"type": "string", "format": f}
                         for f in ["date", "time", "date-time", "uuid", "ipv4", "email"]},
          "additionalProperties": False},
         valid=[{"date": "2024-02-29", "time": "23:59:59Z", "date-time": "1999-12-31T00:00:00.123+05:30",
                 "uuid": "123e4567-e89b-12d3-a456-426614174000", "ipv4": "192.168.0.255",
                 "email": "a.b+c@example.co.uk"},
                {"date": "0001-01-01"}, {"time": "00:00:00-23:59"}, {"ipv4": "0.0.0.0"},
                {"uuid": "ABCDEF01-2345-6789-ABCD-EF0123456789"}, {"email": "x@y.io"}],
         invalid=[{"date": "2023-02-29"}, {"date": "2024-13-01"}, {"date": "2024-04-31"}, {"date": "24-01-01"},
                  {"time": "24:00:00Z"}, {"time": "12:00:00"}, {"date-time": "2024-01-01 12:00:00Z"},
                  {"uuid": "123e4567e89b12d3a456426614174000"}, {"ipv4": "256.1.1.1"}, {"ipv4": "01.1.1.1"},
                  {"email": "nobody"}]),
    case("date_leap_years",
         {"type": "string", "format": "date"},
         valid=["2000-02-29", "2024-02-29", "1600-02-29", "0004-02-29", "2023-02-28", "2023-12-31", "2023-11-30"],
         invalid=["1900-02-29", "2023-02-29", "2100-02-29", "0000-01-01", "2023-11-31", "2023-00-10", "2023-01-00"]),
    case("integer_ranges",
         {"type": "object",
          "properties": {"neg": {"type": "integer", "minimum": -50, "maximum": -3},
                         "one": {"type": "integer", "minimum": 7, "maximum": 7},
                         "excl": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
                         "nonneg": {"type": "integer", "minimum": 0},
                         "upper": {"type": "integer", "maximum": -100},
                         "wide": {"type": "integer", "minimum": -1000000, "maximum": 123456789},
                         "real_bounds": {"type": "integer", "minimum": 1.5, "maximum": 3.5}},
          "additionalProperties": False},
         valid=[{"neg": -50}, {"neg": -3}, {"neg": -17}, {"one": 7}, {"excl": 1}, {"excl": 9}, {"nonneg": 0},
                {"nonneg": 9999999999999999}, {"upper": -100}, {"upper": -9999999999999999}, {"wide": -1000000},
                {"wide": 123456789}, {"wide": 0}, {"real_bounds": 2}, {"real_bounds": 3},
                {"neg": -4, "one": 7, "excl": 5, "nonneg": 12, "upper": -101, "wide": 99, "real_bounds": 2}],
         invalid=[{"neg": -51}, {"neg": -2}, {"neg": 3}, {"one": 6}, {"one": 8}, {"excl": 0}, {"excl": 10},
                  {"nonneg": -1}, {"upper": -99}, {"upper": 100}, {"wide": -1000001}, {"wide": 123456790},
                  {"real_bounds": 1}, {"real_bounds": 4}],
         reject_texts=['{"one":07}', '{"neg":--5}']),
    case("number_and_integer",
         {"type": "object", "properties": {"n": {"type": "number"}, "i": I}, "additionalProperties": False},
         valid=[{"n": 1.5, "i": 3}, {"n": -0.25}, {"n": 1e10}, {"n": 3}, {"n": 1.5e-300}, {"i": -12}],
         invalid=[{"n": "1"}, {"i": 1.5}, {"n": None}, {"i": "3"}],
         accept_texts=['{"n":-0}', '{"n":0.5E+10}', '{"n":12.000}'],
         reject_texts=['{"n":.5}', '{"n":1.}', '{"n":01}', '{"n":+1}', '{"n":1e}', '{"i":1.}']),
    case("nullable_types",
         {"type": "object",
          "properties": {"s": {"type": ["string", "null"], "maxLength": 2},
                         "i": {"type": ["integer", "null"], "minimum": 0, "maximum": 9},
                         "b": {"type": ["boolean", "null"]}},
          "required": ["s", "i", "b"], "additionalProperties": False},
         valid=[{"s": None, "i": None, "b": None}, {"s": "ab", "i": 9, "b": False}],
         invalid=[{"s": "abc", "i": None, "b": None}, {"s": None, "i": 10, "b": None},
                  {"s": None, "i": None, "b": 0}, {"s": None, "i": None}]),
    case("any_value",
         {},
         valid=[None, True, 0, -1.5, "s", [], {}, {"a": [1, {"b": None}]}],
         accept_texts=['[ 1 , { "a" : [ ] } ]'],
         reject_texts=['', '[1,]', '{"a"}', 'nul', 'True', "'x'"]),
    case("json_object_mode",
         {"type": "object"},
         valid=[{}, {"a": 1, "b": [True, None], "c": {"d": "e"}}],
         invalid=[[], "x", 1, None]),
    case("map_of_integers",
         {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
         valid=[{}, {"a": 1}, {"a": 1, "b": 0, "long key é": 99}],
         invalid=[{"a": -1}, {"a": "1"}, {"a": 1, "b": 1.5}]),
    case("empty_object_only",
         {"type": "object", "additionalProperties": False},
         valid=[{}],
         invalid=[{"a": 1}, []]),
    case("awkward_names",
         {"type": "object",
          "properties": {"ws": {"type": "object", "properties": {"char": I}, "required": ["char"]},
                         "obj-r1": {"type": "array", "items": {"type": "object", "properties": {"f0": S}}},
                         "": {"type": "boolean"}, "a~b/c": {"type": "null"}, "quote\"d\\": I, "日本 😀": S,
                         "string": {"type": "object", "additionalProperties": False}},
          "required": ["ws"], "additionalProperties": False},
         valid=[{"ws": {"char": 1}}, {"ws": {"char": 1}, "obj-r1": [{"f0": "x"}, {}], "": True, "a~b/c": None,
                                     "quote\"d\\": 2, "日本 😀": "é", "string": {}}],
         invalid=[{"ws": {}}, {"ws": {"char": 1}, "": 1}, {"ws": {"char": 1}, "string": {"x": 1}},
                  {"ws": {"char": 1}, "quote\"d": 2}]),
    case("pydantic_style",
         {"$defs": {"Pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                            "discriminator": {"propertyName": "kind",
                                              "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}},
                    "Cat": {"title": "Cat", "type": "object",
                            "properties": {"kind": {"const": "cat", "title": "Kind", "type": "string"},
                                           "lives": {"title": "Lives", "type": "integer", "minimum": 0, "maximum": 9}},
                            "required": ["kind", "lives"]},
                    "Dog": {"title": "Dog", "type": "object",
                            "properties": {"kind": {"const": "dog", "title": "Kind", "type": "string"},
                                           "name": {"anyOf": [S, {"type": "null"}], "default": None}},
                            "required": ["kind"]}},
          "title": "Owner", "type": "object",
          "properties": {"pets": {"title": "Pets", "type": "array", "items": {"$ref": "#/$defs/Pet"}},
                         "born": {"title": "Born", "type": "string", "format": "date"}},
          "required": ["pets"]},
         valid=[{"pets": []}, {"pets": [{"kind": "cat", "lives": 9}, {"kind": "dog"}, {"kind": "dog", "name": None}],
                               "born": "1990-01-31"}],
         invalid=[{"pets": [{"kind": "cat", "lives": 10}]}, {"pets": [{"kind": "cow"}]}, {"pets": [{"kind": "cat"}]},
                  {"born": "1990-01-31"}]),
    case("openai_strict_style",
         {"type": "object", "strict": True, "$schema": "https://json-schema.org/draft/2020-12/schema",
          "properties": {
              "location": {"type": "string", "description": "City and country"},
              "unit": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]},
              "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
              "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}, "maxItems": 24}},
          "required": ["location", "unit", "days", "hours"], "additionalProperties": False},
         valid=[{"location": "Paris, France", "unit": "celsius", "days": 1, "hours": []},
                {"location": "東京", "unit": None, "days": 14, "hours": [0, 23, 12]}],
         invalid=[{"location": "x", "unit": "kelvin", "days": 1, "hours": []},
                  {"location": "x", "unit": None, "days": 0, "hours": []},
                  {"location": "x", "unit": None, "days": 1, "hours": [24]},
                  {"location": "x", "unit": None, "days": 1}]),
]


def compact(doc):
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def build(c):
    jsonschema.Draft202012Validator.check_schema(c["schema"])
    v = jsonschema.Draft202012Validator(c["schema"], format_checker=FORMATS)
    accept, reject = [], []
    for doc in c["valid"]:
        errs = list(v.iter_errors(doc))
        assert not errs, f"{c['name']}: valid doc {doc!r} fails: {errs[0].message}"
        accept.append(compact(doc))
    for text in c["accept_texts"]:
        doc = json.loads(text)
        assert v.is_valid(doc), f"{c['name']}: accept text {text!r} is invalid"
        accept.append(text)
    for doc in c["invalid"]:
        assert not v.is_valid(doc), f"{c['name']}: invalid doc {doc!r} is valid"
        reject.append(compact(doc))
    for text in c["reject_texts"]:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None
        else:
            assert not v.is_valid(doc), f"{c['name']}: reject text {text!r} is valid JSON and valid"
        reject.append(text)
    assert accept, f"{c['name']}: no document to accept"
    return {"name": c["name"], "schema": c["schema"], "accept": accept, "reject": reject}


def main():
    check = "--check" in sys.argv[1:]
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    files = {f"{c['name']}.json": json.dumps(build(c), ensure_ascii=False, indent=1) + "\n" for c in CASES}
    if check:
        stale = [n for n, t in files.items() if not (OUT / n).exists() or (OUT / n).read_text("utf-8") != t]
        extra = [p.name for p in OUT.glob("*.json") if p.name not in files]
        if stale or extra:
            print(f"schema corpus is stale: {stale + extra}; run {Path(__file__).name}", file=sys.stderr)
            return 1
        print(f"schema corpus: {len(files)} cases up to date")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for p in OUT.glob("*.json"):
        if p.name not in files:
            p.unlink()
    for n, t in files.items():
        (OUT / n).write_text(t, "utf-8")
    n_acc = sum(len(json.loads(t)["accept"]) for t in files.values())
    n_rej = sum(len(json.loads(t)["reject"]) for t in files.values())
    print(f"schema corpus: {len(files)} cases, {n_acc} accept, {n_rej} reject -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
