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


# Every route besides OpenAI's generation routes (issue 33), with a body that is valid for it:
# the sweep below breaks each top-level field in turn. Paths and the fuzz corpus directories
# whose bodies are replayed too.
ROUTE_BODIES = {
    "/v1/messages": ("anthropic", {"model": MODEL_NAME, "max_tokens": 2,
                                   "messages": [{"role": "user", "content": "hi"}]}),
    "/v1/messages/count_tokens": ("anthropic", {"model": MODEL_NAME,
                                                "messages": [{"role": "user", "content": "hi"}]}),
    "/v1/responses": ("responses", {"model": MODEL_NAME, "input": "hi", "max_output_tokens": 2}),
    "/api/chat": ("ollama", {"model": MODEL_NAME, "stream": False, "options": {"num_predict": 2},
                             "messages": [{"role": "user", "content": "hi"}]}),
    "/api/generate": ("ollama", {"model": MODEL_NAME, "stream": False, "prompt": "hi",
                                 "options": {"num_predict": 2}}),
    "/api/embed": ("ollama", {"model": MODEL_NAME, "input": "hi"}),
    "/api/show": ("ollama", {"model": MODEL_NAME}),
    "/tokenize": ("util", {"content": "hi", "with_pieces": True}),
    "/detokenize": ("util", {"tokens": [1, 2, 3]}),
    "/apply-template": ("util", {"messages": [{"role": "user", "content": "hi"}]}),
    "/v1/rerank": ("rerank", {"model": MODEL_NAME, "query": "q", "documents": ["a", "b"]}),
}
BAD_VALUES = [None, True, -1, 0, 1e300, 2**70, "", "x" * 70000, "\ud800", [], [None, {}],
              {}, {"type": "nonsense"}, [[[[[[]]]]]]]


def _answer_ok(st, raw, what):
    assert st is not None and (st < 500 or st == 501), f"{what}: status {st}: {raw[:300]!r}"
    if st >= 400:  # an error body is JSON in the route's protocol's shape
        json.loads(raw)


def test_new_routes_hostile_bodies(server, probe_before):
    """Each of the other protocols' routes, and the utility routes: every top-level field of a
    valid body replaced by each of BAD_VALUES (and removed), then the fuzz corpus bodies. Every
    answer is 2xx/4xx (501 only for what Kipp does not serve) with a JSON error body, never a
    crash; the server then still answers."""
    from pathlib import Path
    corpus_root = Path(__file__).resolve().parents[1] / "fuzz" / "corpus"
    n = 0
    for path, (corpus, base) in ROUTE_BODIES.items():
        variants = [dict(base)]
        for key in base:
            variants.append({k: v for k, v in base.items() if k != key})
            for bad in BAD_VALUES:
                variants.append({**base, key: bad})
        for body in variants:
            st, _, raw = server.request("POST", path, json.dumps(body).encode(),
                                        {"Content-Type": "application/json"}, timeout=60)
            _answer_ok(st, raw, f"{path} {json.dumps(body)[:200]}")
            n += 1
        assert (corpus_root / corpus).is_dir(), f"no fuzz corpus {corpus} for {path}"
        for f in sorted((corpus_root / corpus).glob("*")):
            st, _, raw = server.request("POST", path, f.read_bytes(), {"Content-Type": "application/json"},
                                        timeout=60)
            _answer_ok(st, raw, f"{path} {f.name}")
            n += 1
        assert server.alive(), f"server died on {path}"
    assert curl(server.url + "/health").status == 200


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
