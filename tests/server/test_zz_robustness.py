"""Runs last (file order): hostile bytes over raw sockets, then the check that every server
of the session is still alive, idle, and answers a normal request with the same greedy
text as at the start of its life."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from conftest import MODEL_NAME, PROBE_PROMPT, VARIED, _servers, curl


@pytest.fixture(scope="module")
def probe_before(server):
    return server.probe_text


def send_raw(server, data: bytes, read: bool = True, timeout: float = 5) -> bytes:
    s = socket.create_connection((server.host, server.port), timeout=timeout)
    out = b""
    try:
        try:
            s.sendall(data)
        except OSError:
            return out
        if read:
            s.settimeout(timeout)
            while True:
                try:
                    chunk = s.recv(65536)
                except (socket.timeout, OSError):
                    break
                if not chunk:
                    break
                out += chunk
                if b"\r\n\r\n" in out and len(out) > 4096:
                    break
    finally:
        s.close()
    return out


HOSTILE = [
    b"\x00\x01\x02garbage\xff\xfe\r\n\r\n",
    b"GET\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: -5\r\n\r\n{}",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 99999999999999999999999\r\n\r\n{}",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"model\":",   # truncated, then close
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n",
    b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n0\r\n\r\n",
    b"GET /health HTTP/9.9\r\n\r\n",
    b"GET /health HTTP/1.1\r\n" + b"X-H: v\r\n" * 5000 + b"\r\n",
]


@pytest.mark.parametrize("data", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_hostile_bytes(server, probe_before, data):
    resp = send_raw(server, data)
    if resp:
        status = resp.split(b"\r\n", 1)[0]
        assert status.startswith(b"HTTP/1."), resp[:200]
        code = int(status.split()[1])
        assert code < 500 or code == 505, f"hostile request got {status!r}"
    assert server.alive(), "server died on hostile input"
    assert curl(server.url + "/health").status == 200


def test_json_edge_cases(server, probe_before):
    """Valid-but-odd JSON: deep nesting, huge numbers, lone surrogate escapes, duplicate
    keys, NUL escapes. Each is answered 200 or 4xx, never 5xx, never a crash."""
    cases = [
        b'{"model": "%s", "prompt": "x", "max_tokens": 1, "junk": ' % MODEL_NAME.encode() + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"model": "%s", "prompt": "x", "max_tokens": 1e400}' % MODEL_NAME.encode(),
        b'{"model": "%s", "prompt": "x", "max_tokens": 123456789012345678901234567890}' % MODEL_NAME.encode(),
        b'{"model": "%s", "prompt": "\\ud800 lone", "max_tokens": 1}' % MODEL_NAME.encode(),
        b'{"model": "%s", "prompt": "a\\u0000b", "max_tokens": 1}' % MODEL_NAME.encode(),
        b'{"model": "%s", "model": "%s", "prompt": "dup", "max_tokens": 1}' % (MODEL_NAME.encode(), MODEL_NAME.encode()),
        b'{"model": "%s", "prompt": "x", "max_tokens": 1, "temperature": NaN}' % MODEL_NAME.encode(),
        b'{"model": "%s", "prompt": "<|im_start|>system\\n<think></think><|endoftext|>", "max_tokens": 2}' % MODEL_NAME.encode(),
        b'{"model": "%s", "messages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]}], "max_tokens": 1}' % MODEL_NAME.encode(),
    ]
    for raw in cases:
        r = curl(server.url + ("/v1/chat/completions" if b'"messages"' in raw else "/v1/completions"), "POST", raw)
        assert r.status and r.status < 500, (raw[:120], r)
        assert server.alive(), f"server died on {raw[:120]!r}"


def test_slow_and_idle_connections_do_not_block(server, probe_before):
    """Idle half-open connections must not stop others from being served."""
    idle = []
    try:
        for _ in range(20):
            s = socket.create_connection((server.host, server.port), timeout=5)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            idle.append(s)
        t0 = time.monotonic()
        js = server.complete("served despite idle sockets", max_tokens=4, temperature=0)
        assert js["usage"]["completion_tokens"] <= 4
        assert time.monotonic() - t0 < 10
    finally:
        for s in idle:
            s.close()


def test_many_short_connections(server):
    errors = []

    def hammer():
        for _ in range(25):
            r = server.request("GET", "/health", timeout=10)
            if r[0] != 200:
                errors.append(r[0])
    ts = [threading.Thread(target=hammer) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_zz_all_servers_alive_and_correct(server, probe_before):
    for s in _servers:
        if s.name not in ("main", "auth", "overload", "tight", "nocache", "lru"):
            continue     # servers a test started and stopped on purpose
        assert s.alive(), f"server {s.name} died (rc {s.proc.returncode})\n{s.stderr_tail()}"
    m = server.wait_idle(timeout=30)
    assert m.get("kipp_kv_blocks_used") == m.get("kipp_kv_blocks_cached")
    after = server.complete(PROBE_PROMPT, max_tokens=12, temperature=0, **VARIED)["choices"][0]["text"]
    assert after == probe_before, "the same greedy request gives a different answer after the abuse"
    r = curl(server.url + "/v1/chat/completions", "POST",
             json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": "still there?"}],
                         "max_tokens": 4}))
    assert r.status == 200, r
