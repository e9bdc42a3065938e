"""HTTP rules of docs/server.md ("Host, Origin and Content-Type", "Limits and hostile
clients"): the Host header must name this server (loopback, the --host address, or an
--allowed-host), a browser Origin must be same-origin or a --cors-origin (then CORS headers
and an OPTIONS preflight), POST bodies must be Content-Type application/json, HEAD works
on the GET routes, %00 in a path is refused, a duplicate Content-Length gets exactly one
400, and a model whose chat template cannot be rendered fails at start, not at the first
chat request."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import tempfile
import time

import pytest

from conftest import MODEL, MODEL_NAME, SERVER_BIN, Srv, curl, start_server

COMP = "/v1/completions"
BODY = json.dumps({"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1}).encode()


def raw(s, data: bytes, timeout: float = 10) -> bytes:
    """Sends data on a fresh connection and reads until the server closes (or timeout)."""
    sock = socket.create_connection((s.host, s.port), timeout=timeout)
    out = b""
    try:
        sock.sendall(data)
        sock.settimeout(timeout)
        while True:
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, OSError):
                break
            if not chunk:
                break
            out += chunk
    finally:
        sock.close()
    return out


def status_of(resp: bytes) -> int:
    return int(resp.split(b"\r\n", 1)[0].split()[1])


def err_code(resp: bytes):
    return json.loads(resp.split(b"\r\n\r\n", 1)[1])["error"]


# ---- Host ------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.nip.io", "[::2]:80",
                                  "0.0.0.0", "localhost:80:80"])
def test_foreign_host_refused(server, host):
    r = raw(server, f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    assert status_of(r) == 403, r[:300]
    e = err_code(r)
    assert e["code"] == "host_not_allowed" and "Host" in e["message"], e


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:{port}", "localhost", "LOCALHOST:{port}",
                                  "[::1]", "[::1]:{port}"])
def test_loopback_hosts_allowed(server, host):
    h = host.format(port=server.port)
    r = raw(server, f"GET /v1/models HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n".encode())
    assert status_of(r) == 200, r[:300]


def test_foreign_host_refused_on_post_and_health(server):
    r = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: attacker.example\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
    assert status_of(r) == 403
    r = raw(server, b"GET /health HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
    assert status_of(r) == 403


@pytest.fixture(scope="module")
def open_server():
    """--allowed-host api.example --cors-origin http://app.example"""
    return Srv(start_server("http-rules", "--allowed-host", "api.example", "--cors-origin", "http://app.example",
                            threads="1"))


def test_allowed_host_flag(open_server):
    for h in ("api.example", "api.example:443", "API.example"):
        r = raw(open_server, f"GET /v1/models HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n".encode())
        assert status_of(r) == 200, (h, r[:300])
    r = raw(open_server, b"GET /v1/models HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n")
    assert status_of(r) == 403


def test_allowed_host_star():
    s = start_server("http-any-host", "--allowed-host", "*", threads="1")
    try:
        r = raw(Srv(s), b"GET /v1/models HTTP/1.1\r\nHost: anything.example\r\nConnection: close\r\n\r\n")
        assert status_of(r) == 200
    finally:
        s.stop()


# ---- Origin ----------------------------------------------------------------------------------

def test_cross_origin_refused(server):
    r = curl(server.url + COMP, "POST", BODY, headers=["Origin: http://evil.example"])
    assert r.status == 403, r
    assert r.json()["error"]["code"] == "origin_not_allowed" and "Origin" in r.json()["error"]["message"]
    assert "access-control-allow-origin" not in r.headers
    r = curl(server.url + "/v1/models", headers=["Origin: null"])
    assert r.status == 403, r


def test_same_origin_allowed(server):
    for origin in (f"http://127.0.0.1:{server.port}", f"http://localhost:{server.port}"):
        r = curl(server.url + COMP, "POST", BODY, headers=[f"Origin: {origin}"])
        assert r.status == 200, (origin, r)
    r = curl(server.url + "/v1/models", headers=[f"Origin: http://127.0.0.1:{server.port + 1}"])
    assert r.status == 403, "another port is another origin"


def test_cors_origin_flag(open_server):
    s = open_server
    r = curl(s.url + COMP, "POST", BODY, headers=["Origin: http://app.example"])
    assert r.status == 200, r
    assert r.headers.get("access-control-allow-origin") == "http://app.example", r.headers
    r = curl(s.url + COMP, "POST", BODY, headers=["Origin: http://other.example"])
    assert r.status == 403


def test_preflight(open_server):
    s = open_server
    r = curl(s.url + "/v1/chat/completions", "OPTIONS",
             headers=["Origin: http://app.example", "Access-Control-Request-Method: POST",
                      "Access-Control-Request-Headers: authorization, content-type, x-stainless-os"])
    assert r.status == 204, r
    assert r.headers.get("access-control-allow-origin") == "http://app.example"
    assert "POST" in r.headers.get("access-control-allow-methods", "")
    assert "x-stainless-os" in r.headers.get("access-control-allow-headers", "").lower()
    r = curl(s.url + "/v1/chat/completions", "OPTIONS",
             headers=["Origin: http://evil.example", "Access-Control-Request-Method: POST"])
    assert r.status == 403
    assert "access-control-allow-origin" not in r.headers


# ---- Content-Type ----------------------------------------------------------------------------

@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", "application/jsonx"])
def test_post_needs_json_content_type(server, ctype):
    h = f"Content-Type: {ctype}\r\n" if ctype else ""
    r = raw(server, (f"POST {COMP} HTTP/1.1\r\nHost: 127.0.0.1\r\n{h}Connection: close\r\n"
                     f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY)
    assert status_of(r) == 415, r[:300]
    e = err_code(r)
    assert "Content-Type" in e["message"], e


@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8",
                                   "Application/JSON;charset=UTF-8"])
def test_json_content_types_accepted(server, ctype):
    r = raw(server, (f"POST {COMP} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\nConnection: close\r\n"
                     f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY)
    assert status_of(r) == 200, r[:300]


# ---- HEAD, %00 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path,ctype", [("/health", "application/json"), ("/v1/models", "application/json"),
                                        ("/metrics", "text/plain")])
def test_head_like_get(server, path, ctype):
    r = raw(server, f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    assert status_of(r) == 200, r[:300]
    head, _, body = r.partition(b"\r\n\r\n")
    assert body == b"", "HEAD must not carry a body"
    assert ctype.encode() in head.lower(), head


@pytest.mark.parametrize("path", ["/health%00", "/health%00.json", "/v1/models%00", "/metrics%00x",
                                  "/v1/completions%00"])
def test_nul_in_path(server, path):
    method = "POST" if "completions" in path else "GET"
    extra = (f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n" if method == "POST" else "")
    r = raw(server, (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}Connection: close\r\n\r\n").encode()
            + (BODY if method == "POST" else b""))
    assert status_of(r) in (400, 404), r[:300]
    assert err_code(r)["message"]


# ---- Content-Length -------------------------------------------------------------------------

def test_duplicate_content_length_one_clean_400(server):
    """Two Content-Length headers (request smuggling material): one 400, then close."""
    for a, b in ((2, 7), (2, 2)):
        r = raw(server, (f"POST {COMP} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {a}\r\nContent-Length: {b}\r\n\r\n{{}}").encode(), timeout=5)
        assert r.count(b"HTTP/1.") == 1, r[:500]
        assert status_of(r) == 400, r[:300]
        assert "Content-Length" in err_code(r)["message"]


@pytest.mark.parametrize("cl,want", [("abc", 400), ("-1", 400), ("1x", 400), ("99999999999999999999999", 413)])
def test_invalid_content_length(server, cl, want):
    """libmicrohttpd 0.9.75 answers these itself before any handler runs, and its answer
    repeats the status line and headers (a library bug, docs/server.md). What is tested: the
    status, that every head it sends is the same one, that the connection is closed at once,
    and that the server goes on serving."""
    t0 = time.monotonic()
    r = raw(server, (f"POST {COMP} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {cl}\r\n\r\n{{}}").encode(), timeout=5)
    assert time.monotonic() - t0 < 3, "the connection was held"
    lines = [ln for ln in r.split(b"\r\n") if ln.startswith(b"HTTP/1.")]
    assert lines and all(ln == lines[0] for ln in lines), r[:500]
    assert status_of(r) == want, r[:300]
    assert curl(server.url + "/health").status == 200


# ---- the chat template is checked at start --------------------------------------------------------

def test_unsupported_chat_template_fails_at_start():
    data = bytearray(open(MODEL, "rb").read())
    key = b"tokenizer.chat_template"
    i = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    vtype, n = struct.unpack_from("<IQ", data, i)
    assert vtype == 8 and n > 10          # a string
    data[i + 12] = ord("#")                # same length, not the Qwen3 template any more
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "odd-template.gguf")
        with open(path, "wb") as f:
            f.write(data)
        p = subprocess.Popen([SERVER_BIN, "--model", path, "--port", "0", "--threads", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            pytest.fail(f"still running (serving) with an unsupported chat template: {out} {err}")
    assert p.returncode != 0
    assert "kipp-server: ready" not in out, out
    assert "chat template" in err, err
