"""Errors are OpenAI-shaped JSON with the status and type/code/param of docs/server.md:
malformed JSON, wrong field types and ranges (param names the field), the model field,
body size (--max-body 65536 on the main server), invalid UTF-8, unknown paths and wrong
methods. Raw bodies go through curl so that the bytes are exactly what the test wrote."""

from __future__ import annotations

import json
import socket
import time

import openai
import pytest

from conftest import MODEL_NAME, curl

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSGS = [{"role": "user", "content": "hi"}]


def check_error(status, body, want_status, want_type=None, param=None, code=None):
    """body: bytes or parsed dict. Returns the error object."""
    if isinstance(body, (bytes, bytearray)):
        try:
            body = json.loads(body)
        except ValueError:
            pytest.fail(f"status {status}: error body is not JSON: {body[:300]!r}")
    assert status == want_status, f"expected {want_status}, got {status}: {body}"
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), f"not OpenAI-shaped: {body}"
    err = body["error"]
    assert isinstance(err.get("message"), str) and err["message"], err
    assert "type" in err and "param" in err and "code" in err, f"error lacks type/param/code keys: {err}"
    if want_type:
        assert err["type"] == want_type, err
    if param is not None:
        assert err["param"] == param or (param == "messages" and str(err["param"]).startswith("messages")), \
            f"param: expected {param!r}, got {err['param']!r} ({err['message']})"
    if code is not None:
        assert err["code"] == code, err
    return err


def post_raw(server, path, raw: bytes, headers=()):
    r = curl(server.url + path, "POST", raw, headers=headers)
    assert r.rc == 0 or r.status, r
    return r


# ---- malformed bodies ---------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b'{"model": "x", "messages": [',
    b'not json at all',
    b'{"model": "kipp-tiny-tied-bf16", "messages": [{"role": "user", "content": "hi"}],}',
    b'',
    b'[1, 2, 3]',
    b'"just a string"',
    b'{"model": "kipp-tiny-tied-bf16", "messages": [{"role": "user", "content": "hi"}]} trailing',
    b'{"model": "kipp-tiny-tied-bf16", "messages": [{"role": "user", "content": "hi\x01"}]}',
], ids=["truncated", "garbage", "trailing-comma", "empty", "array", "string", "trailing-data", "control-char"])
def test_malformed_json(server, raw):
    r = post_raw(server, CHAT, raw)
    check_error(r.status, r.body, 400, "invalid_request_error")
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers


@pytest.mark.parametrize("path", [CHAT, COMP])
def test_invalid_utf8(server, path):
    field = b'"messages": [{"role": "user", "content": "caf\xc3\x28 \xff\xfe"}]' if path == CHAT \
        else b'"prompt": "caf\xc3\x28 \xff\xfe"'
    raw = b'{"model": "' + MODEL_NAME.encode() + b'", "max_tokens": 2, ' + field + b'}'
    r = post_raw(server, path, raw)
    check_error(r.status, r.body, 400, "invalid_request_error")


def test_overlong_utf8_and_surrogate_bytes(server):
    # overlong encoding of '/', and CESU-8 surrogate bytes: both invalid UTF-8
    for bad in (b"\xc0\xaf", b"\xed\xa0\x80"):
        raw = b'{"model": "' + MODEL_NAME.encode() + b'", "max_tokens": 2, "prompt": "x' + bad + b'"}'
        r = post_raw(server, COMP, raw)
        check_error(r.status, r.body, 400, "invalid_request_error")


# ---- field types and ranges ---------------------------------------------------------------------

CHAT_BAD = [
    ("messages", "hello"),
    ("messages", []),
    ("messages", [{"role": "user"}]),
    ("messages", [{"role": 5, "content": "x"}]),
    ("messages", [{"role": "wizard", "content": "x"}]),
    ("messages", ["not an object"]),
    ("temperature", "hot"),
    ("temperature", -1),
    ("max_tokens", -1),
    ("max_tokens", "ten"),
    ("max_tokens", 1.5),
    ("max_completion_tokens", -3),
    ("top_p", 2),
    ("top_p", -0.1),
    ("top_k", "many"),
    ("min_p", 1.5),
    ("presence_penalty", "x"),
    ("presence_penalty", 3),
    ("frequency_penalty", -2.5),
    ("seed", "abc"),
    ("stop", [str(i) for i in range(17)]),
    ("stop", 5),
    ("stop", [1, 2]),
    ("stream", "yes"),
    ("n", 0),
    ("n", 17),
    ("logprobs", "yes"),
    ("stream_options", "on"),
    ("chat_template_kwargs", "thinking"),
    ("logit_bias", [1, 2]),
    ("logit_bias", {"abc": 5}),
    ("logit_bias", {"-3": 5}),
    ("logit_bias", {"999999999": 5}),
    ("logit_bias", {"5": 101}),
    ("logit_bias", {"5": "up"}),
    ("logit_bias", {str(i): 1 for i in range(1025)}),
    # a 400 naming the field, never a 200 that ignores it
    ("response_format", {"type": "yaml"}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x"}}),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "number",
                                                                                       "minimum": 1}}}),
    ("response_format", "json"),
    ("grammar", 5),
    ("grammar", "root ::= nowhere"),
    ("audio", {"voice": "alloy", "format": "mp3"}),
    ("modalities", ["text", "audio"]),
    ("prediction", {"type": "content", "content": "x"}),
    ("functions", [{"name": "f", "parameters": {}}]),
    ("function_call", "auto"),
    ("web_search_options", {}),
    ("reasoning_effort", "extreme"),  # "none" .. "high" map to thinking (test_openai_shapes)
    ("verbosity", "low"),
    ("service_tier", "flex"),
    ("store", True),
    ("parallel_tool_calls", "yes"),
    ("tool_choice", "required"),
    ("tool_choice", {"type": "function", "function": {"name": "get_weather"}}),
]


@pytest.mark.parametrize("field,value", CHAT_BAD, ids=[f"{f}={json.dumps(v)[:48]}" for f, v in CHAT_BAD])
def test_chat_bad_field(server, field, value):
    body = {"model": MODEL_NAME, "messages": MSGS, "max_tokens": 2, field: value}
    st, _, js = server.post(CHAT, body)
    check_error(st, js, 400, "invalid_request_error", param=field)


def test_chat_top_logprobs_range(server):
    st, _, js = server.post(CHAT, {"model": MODEL_NAME, "messages": MSGS, "max_tokens": 2,
                                   "logprobs": True, "top_logprobs": 21})
    check_error(st, js, 400, "invalid_request_error", param="top_logprobs")
    st, _, js = server.post(CHAT, {"model": MODEL_NAME, "messages": MSGS, "max_tokens": 2,
                                   "logprobs": True, "top_logprobs": -1})
    check_error(st, js, 400, "invalid_request_error", param="top_logprobs")


COMP_BAD = [
    ("prompt", {"a": 1}),
    ("prompt", 42),
    ("prompt", [1, -5, 3]),
    ("prompt", [1, 999999999]),
    ("prompt", [1, "two"]),
    ("prompt", [1.5, 2]),
    ("logprobs", 21),
    ("logprobs", -1),
    ("logprobs", "three"),
    ("max_tokens", -1),
    ("temperature", "hot"),
    ("top_p", 2),
    ("stop", [str(i) for i in range(17)]),
    ("n", 0),
    ("n", 17),
    ("ignore_eos", "sure"),
    ("logit_bias", {"1.5": 2}),
    ("response_format", {"type": "json_schema"}),
    ("grammar", "root ::= [z-a]"),
]


@pytest.mark.parametrize("field,value", COMP_BAD, ids=[f"{f}={json.dumps(v)[:48]}" for f, v in COMP_BAD])
def test_completions_bad_field(server, field, value):
    body = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2, field: value}
    st, _, js = server.post(COMP, body)
    check_error(st, js, 400, "invalid_request_error", param=field)


def test_missing_fields(server):
    st, _, js = server.post(CHAT, {"messages": MSGS})
    check_error(st, js, 400, "invalid_request_error", param="model")
    st, _, js = server.post(COMP, {"prompt": "hi"})
    check_error(st, js, 400, "invalid_request_error", param="model")
    st, _, js = server.post(CHAT, {"model": MODEL_NAME})
    check_error(st, js, 400, "invalid_request_error", param="messages")
    st, _, js = server.post(COMP, {"model": MODEL_NAME})
    check_error(st, js, 400, "invalid_request_error", param="prompt")
    st, _, js = server.post(CHAT, {"model": 7, "messages": MSGS})
    check_error(st, js, 400, "invalid_request_error", param="model")


def test_unknown_model(server, client):
    for path, body in ((CHAT, {"messages": MSGS}), (COMP, {"prompt": "hi"})):
        st, _, js = server.post(path, {"model": "gpt-4o", **body})
        # docs/server.md's 404 row reads type not_found_error; OpenAI itself answers an unknown
        # model with invalid_request_error. Either type, but the code must be model_not_found.
        err = check_error(st, js, 404, code="model_not_found")
        assert err["type"] in ("not_found_error", "invalid_request_error"), err
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=MSGS, max_tokens=2)
    assert e.value.status_code == 404


def test_openai_client_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=MSGS, max_tokens=2, n=17)
    assert e.value.status_code == 400
    assert e.value.body and e.value.body.get("param") == "n"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt="hi", max_tokens=2, top_p=2)


def test_empty_prompt(server):
    """An empty prompt has nothing to condition on; OpenAI-compatible servers reject it
    with 400 (or, for a string, may generate from nothing). Never a 5xx."""
    for prompt in ([], ""):
        st, _, js = server.post(COMP, {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 2})
        assert st in (200, 400), (prompt, st, js)
        if st == 400:
            check_error(st, js, 400, "invalid_request_error")


# ---- body size ------------------------------------------------------------------------------------

def test_body_too_large(server):
    big = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "x" * 70000}]}).encode()
    assert len(big) > 65536
    r = post_raw(server, CHAT, big)
    check_error(r.status, r.body, 413, "invalid_request_error", code="request_too_large")


def test_body_just_under_limit_is_not_413(server):
    pad = " " * (65536 - 200)
    body = ('{"model": "%s", "prompt": "hi", "max_tokens": 1%s}' % (MODEL_NAME, pad)).encode()
    assert len(body) <= 65536
    r = post_raw(server, COMP, body)
    assert r.status == 200, r


def read_head(sock: socket.socket, timeout: float = 10) -> bytes:
    """What the server sends until the end of its response head (or it closes, or timeout)."""
    sock.settimeout(timeout)
    data = b""
    t0 = time.monotonic()
    while b"\r\n\r\n" not in data and time.monotonic() - t0 < timeout:
        try:
            chunk = sock.recv(4096)
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        data += chunk
    return data


def test_declared_oversize_body_is_refused_early(server):
    """Content-Length far above --max-body: 413 without reading (or waiting for) the body."""
    sock = socket.create_connection((server.host, server.port), timeout=10)
    try:
        sock.sendall((f"POST {CHAT} HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: 100000000\r\n\r\n").encode() + b'{"model":')
        data = read_head(sock)
    finally:
        sock.close()
    assert data.startswith(b"HTTP/1.1 413") or data.startswith(b"HTTP/1.0 413"), data[:200]


def test_chunked_oversize_body(server):
    """A chunked request body that grows past --max-body is refused with 413."""
    sock = socket.create_connection((server.host, server.port), timeout=20)
    data = b""
    try:
        sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nContent-Type: application/json\r\n"
                     f"Transfer-Encoding: chunked\r\n\r\n".encode())
        piece = b"x" * 8192
        try:
            for _ in range(12):           # 96 KiB
                sock.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass                           # the server may answer and close early
        data = read_head(sock)
    finally:
        sock.close()
    assert data.startswith(b"HTTP/1.1 413"), data[:200]


# ---- paths and methods ---------------------------------------------------------------------------

@pytest.mark.parametrize("method,path", [("GET", "/v1/nope"), ("POST", "/v1/nope"), ("GET", "/index.htm"),
                                         ("GET", "/v1"), ("GET", "/v1/chat/completions/extra"),
                                         ("GET", "/v2/models")])
def test_unknown_path(server, method, path):
    r = curl(server.url + path, method, b"{}" if method == "POST" else None)
    check_error(r.status, r.body, 404, "not_found_error")


@pytest.mark.parametrize("method,path", [("GET", CHAT), ("GET", COMP), ("PUT", CHAT), ("DELETE", COMP),
                                         ("POST", "/v1/models"), ("POST", "/health"), ("POST", "/metrics")])
def test_wrong_method(server, method, path):
    r = curl(server.url + path, method, b"{}" if method in ("POST", "PUT") else None)
    check_error(r.status, r.body, 405, "invalid_request_error")


def test_query_string_ignored(server):
    assert curl(server.url + "/health?probe=1").status == 200
    r = curl(server.url + "/v1/models?limit=5")
    assert r.status == 200 and r.json()["data"][0]["id"] == MODEL_NAME


def test_health(server):
    r = curl(server.url + "/health")
    assert r.status == 200 and r.json() == {"status": "ok"}
