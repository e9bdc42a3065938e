"""Cancellation: a streaming client that disconnects mid-stream, and a non-streaming client
that disconnects while waiting, get their sequence dropped (kipp_requests_cancelled_total),
its KV blocks returned (kv_blocks_used - kv_blocks_cached back to 0) and no more tokens
generated for it; the server keeps serving. "Disconnects" is what clients really do when
they go away: close() the socket (a FIN; the server's next write is answered with a
reset), the openai package closing an abandoned stream, or a reset (SO_LINGER 0, a killed
process). A client that only half-closes (shutdown(SHUT_WR)) is not gone: test_halfclose.py."""

from __future__ import annotations

import json
import socket
import time

import pytest

from conftest import CTX, MODEL_NAME
from bench import server_common as sc

LONG = CTX - 40     # tokens to ask for: near the whole context


def raw_post(s, path: str, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection((s.host, s.port), timeout=30)
    head = (f"POST {path} HTTP/1.1\r\nHost: {s.host}:{s.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    sock.sendall(head + data)
    return sock


def read_events(sock: socket.socket, n_events: int, timeout: float = 30) -> bytes:
    """Reads until n_events 'data:' lines arrived."""
    buf = b""
    deadline = time.monotonic() + timeout
    while buf.count(b"data:") < n_events:
        if time.monotonic() > deadline:
            pytest.fail(f"only {buf.count(b'data:')} events after {timeout} s: {buf[:500]!r}")
        chunk = sock.recv(65536)
        if not chunk:
            pytest.fail(f"server closed the stream early: {buf[:500]!r}")
        buf += chunk
    return buf


def wait_cancelled(s, before: float, timeout: float = 15) -> sc.Metrics:
    deadline = time.monotonic() + timeout
    while True:
        m = s.metrics()
        if m.get("kipp_requests_cancelled_total") > before:
            return m
        if time.monotonic() > deadline:
            pytest.fail(f"kipp_requests_cancelled_total did not increase within {timeout} s "
                        f"(still {m.get('kipp_requests_cancelled_total')}); running="
                        f"{m.get('kipp_running_sequences')}")
        time.sleep(0.02)


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_stream_disconnect_cancels(server, endpoint):
    m0 = server.wait_idle()
    body = {"model": MODEL_NAME, "max_tokens": LONG, "temperature": 0, "ignore_eos": True, "stream": True}
    if endpoint == "/v1/completions":
        body["prompt"] = sc.synthetic_ids(12, offset=123)
    else:
        body["messages"] = [{"role": "user", "content": "Talk forever about rivers."}]
    sock = raw_post(server, endpoint, body)
    head = read_events(sock, 2)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    sc.abort_connection(sock)
    m1 = wait_cancelled(server, m0.get("kipp_requests_cancelled_total"))
    m2 = server.wait_idle()
    generated = m2.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total")
    assert generated < LONG, f"the cancelled sequence ran to the end ({generated} tokens generated)"
    assert m2.get("kipp_kv_blocks_used") == m2.get("kipp_kv_blocks_cached")
    assert m1.get("kipp_requests_cancelled_total") == m0.get("kipp_requests_cancelled_total") + 1
    # still serving
    js = server.complete("after the disconnect", max_tokens=4, temperature=0)
    assert js["usage"]["completion_tokens"] <= 4


def test_stream_disconnect_via_http_client(server):
    """The same with a client library that reads a few chunks and closes (SSE reader)."""
    m0 = server.wait_idle()
    r = server.stream("/v1/completions", {"model": MODEL_NAME, "prompt": "rivers", "max_tokens": LONG,
                                          "temperature": 0, "ignore_eos": True, "stream": True},
                      stop_after_events=3)
    assert r.status == 200 and r.closed_early
    wait_cancelled(server, m0.get("kipp_requests_cancelled_total"))
    server.wait_idle()


def test_non_stream_disconnect_cancels(server):
    m0 = server.wait_idle()
    sock = raw_post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": sc.synthetic_ids(10, offset=9),
                                                "max_tokens": LONG, "temperature": 0, "ignore_eos": True})
    # wait until the sequence is running, then leave
    deadline = time.monotonic() + 10
    while server.metrics().get("kipp_running_sequences") < 1:
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    sc.abort_connection(sock)
    wait_cancelled(server, m0.get("kipp_requests_cancelled_total"))
    m2 = server.wait_idle()
    generated = m2.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total")
    assert generated < LONG, f"the cancelled sequence ran to the end ({generated} tokens generated)"
    assert m2.get("kipp_kv_blocks_used") == m2.get("kipp_kv_blocks_cached")


def test_many_disconnects_leave_no_leak(server):
    m0 = server.wait_idle()
    socks = []
    for i in range(6):
        socks.append(raw_post(server, "/v1/completions",
                              {"model": MODEL_NAME, "prompt": sc.synthetic_ids(30, offset=300 + i),
                               "max_tokens": LONG, "temperature": 0, "ignore_eos": True, "stream": True}))
    for s in socks:
        read_events(s, 1)
    for s in socks:
        sc.abort_connection(s)
    m = server.wait_idle(timeout=30)
    assert m.get("kipp_requests_cancelled_total") == m0.get("kipp_requests_cancelled_total") + 6
    assert m.get("kipp_kv_blocks_used") == m.get("kipp_kv_blocks_cached")
    js = server.complete(sc.synthetic_ids(30, offset=300), max_tokens=8, temperature=0, ignore_eos=True)
    assert js["usage"]["completion_tokens"] == 8


@pytest.mark.parametrize("stream", [False, True])
def test_graceful_close_cancels(server, stream):
    """A client that closes its socket politely (close(): FIN, not RST) is noticed too: the
    server sees the FIN, writes a probe (an SSE comment, or an interim 100 Continue), and the
    closed socket answers it with a reset."""
    m0 = server.wait_idle()
    sock = raw_post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": sc.synthetic_ids(10, offset=19),
                                                "max_tokens": LONG, "temperature": 0, "ignore_eos": True,
                                                "stream": stream})
    deadline = time.monotonic() + 10
    while server.metrics().get("kipp_running_sequences") < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    sock.close()
    wait_cancelled(server, m0.get("kipp_requests_cancelled_total"))
    m2 = server.wait_idle()
    generated = m2.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total")
    assert generated < LONG, f"the cancelled sequence ran to the end ({generated} tokens generated)"
    assert m2.get("kipp_kv_blocks_used") == m2.get("kipp_kv_blocks_cached")


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_openai_client_abandoned_stream_cancels(server, endpoint):
    """The openai package: iterate a stream for a few chunks, then close() it (what `with`
    blocks and garbage collection do): the connection is closed and the sequence dropped."""
    m0 = server.wait_idle()
    c = server.client()
    if endpoint == "completions":
        stream = c.completions.create(model=MODEL_NAME, prompt="rivers", max_tokens=LONG, temperature=0,
                                      stream=True, extra_body={"ignore_eos": True})
    else:
        stream = c.chat.completions.create(model=MODEL_NAME, max_tokens=LONG, temperature=0, stream=True,
                                           messages=[{"role": "user", "content": "Talk about rivers."}],
                                           extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    wait_cancelled(server, m0.get("kipp_requests_cancelled_total"))
    m2 = server.wait_idle()
    generated = m2.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total")
    assert generated < LONG, f"the abandoned stream ran to the end ({generated} tokens generated)"
