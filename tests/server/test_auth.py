"""--api-key / --api-key-file: /v1/* and /metrics need `Authorization: Bearer KEY` or
Anthropic's `x-api-key: KEY` (401 authentication_error / invalid_api_key otherwise); /health
never does."""

from __future__ import annotations

import json
import os

import openai
import pytest

from conftest import API_KEY, LOG_DIR, MODEL_NAME, Srv, curl, start_server

MSGS = [{"role": "user", "content": "hi"}]
BODY = json.dumps({"model": MODEL_NAME, "messages": MSGS, "max_tokens": 2})


def check_401(r):
    assert r.status == 401, r
    err = r.json()["error"]
    assert err["type"] == "authentication_error", err
    assert err["code"] == "invalid_api_key", err
    assert err["message"]


@pytest.mark.parametrize("headers", [
    [],
    ["Authorization: Bearer wrong"],
    [f"Authorization: Bearer {API_KEY}x"],
    [f"Authorization: Bearer {API_KEY[:-1]}"],
    [f"Authorization: {API_KEY}"],
    ["Authorization: Bearer "],
    [f"Authorization: Basic {API_KEY}"],
    [f"X-Api-Key: {API_KEY}x"],
    ["X-Api-Key: "],
    [f"Api-Key: {API_KEY}"],
], ids=["none", "wrong", "longer", "shorter", "no-bearer", "empty", "basic", "x-api-key-wrong",
        "x-api-key-empty", "other-header"])
def test_bad_key_401(auth_server, headers):
    for method, path, body in (("POST", "/v1/chat/completions", BODY), ("POST", "/v1/completions",
                               json.dumps({"model": MODEL_NAME, "prompt": "x", "max_tokens": 1})),
                               ("GET", "/v1/models", None), ("GET", "/metrics", None)):
        check_401(curl(auth_server.url + path, method, body, headers=headers))


def test_right_key(auth_server):
    h = [f"Authorization: Bearer {API_KEY}"]
    r = curl(auth_server.url + "/v1/chat/completions", "POST", BODY, headers=h)
    assert r.status == 200, r
    assert curl(auth_server.url + "/v1/models", headers=h).status == 200
    r = curl(auth_server.url + "/metrics", headers=h)
    assert r.status == 200 and b"kipp_requests_total" in r.body


def test_x_api_key(auth_server):
    """Anthropic's header is checked like a bearer key, on every route."""
    h = [f"x-api-key: {API_KEY}"]
    assert curl(auth_server.url + "/v1/chat/completions", "POST", BODY, headers=h).status == 200
    assert curl(auth_server.url + "/v1/models", headers=h).status == 200
    # a wrong bearer key is not rescued by a right x-api-key: the Authorization header decides
    r = curl(auth_server.url + "/v1/models", headers=h + ["Authorization: Bearer wrong"])
    check_401(r)


def test_health_needs_no_key(auth_server):
    r = curl(auth_server.url + "/health")
    assert r.status == 200 and r.json()["status"] == "ok"


def test_openai_client_auth(auth_server):
    bad = auth_server.client(api_key="not-the-key")
    with pytest.raises(openai.AuthenticationError) as e:
        bad.chat.completions.create(model=MODEL_NAME, messages=MSGS, max_tokens=2)
    assert e.value.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = auth_server.client(api_key=API_KEY)
    r = good.chat.completions.create(model=MODEL_NAME, messages=MSGS, max_tokens=2)
    assert r.choices[0].message.role == "assistant"
    assert [m.id for m in good.models.list().data] == [MODEL_NAME]


def test_auth_checked_before_body(auth_server):
    """Without the key, a malformed body still gets 401 (authentication comes first)."""
    check_401(curl(auth_server.url + "/v1/chat/completions", "POST", b"{not json"))


def test_api_key_file():
    path = os.path.join(LOG_DIR, "api-key.txt")
    with open(path, "w") as f:
        f.write("file-key-4242\nsecond line is ignored\n")
    s = Srv(start_server("keyfile", "--api-key-file", path, threads="1"), api_key="file-key-4242")
    try:
        check_401(curl(s.url + "/v1/models", headers=["Authorization: Bearer second line is ignored"]))
        check_401(curl(s.url + "/v1/models"))
        assert curl(s.url + "/v1/models", headers=["Authorization: Bearer file-key-4242"]).status == 200
        assert curl(s.url + "/health").status == 200
    finally:
        s.proc.stop()


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
def test_bearer_scheme_is_case_insensitive(auth_server, scheme):
    """docs/server.md: the scheme name is case-insensitive (RFC 9110), the key is not."""
    r = curl(auth_server.url + "/v1/models", headers=[f"Authorization: {scheme} {API_KEY}"])
    assert r.status == 200, r
    check_401(curl(auth_server.url + "/v1/models", headers=[f"Authorization: {scheme} {API_KEY.upper()}"]))
