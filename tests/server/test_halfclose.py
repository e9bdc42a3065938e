"""Half-close is not a disconnect: a client that sends its whole request and then
shutdown(SHUT_WR) (netcat -N, some proxies and scripts) still reads, and must get its full
response, streaming or not, HTTP/1.1 or 1.0 (docs/server.md, "Cancellation"). Closing the
socket, in contrast, cancels (test_disconnect.py)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from conftest import MODEL_NAME, parse_sse

N = 64


def half_closed_request(s, body: dict, version: str = "1.1", timeout: float = 60) -> bytes:
    data = json.dumps(body).encode()
    sock = socket.create_connection((s.host, s.port), timeout=timeout)
    try:
        sock.sendall((f"POST /v1/completions HTTP/{version}\r\nHost: {s.host}:{s.port}\r\n"
                      f"Content-Type: application/json\r\nConnection: close\r\n"
                      f"Content-Length: {len(data)}\r\n\r\n").encode() + data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
        return out
    finally:
        sock.close()


def final_response(raw: bytes) -> tuple[int, bytes, bytes]:
    """Skips interim 1xx responses; (status, head, body) of the final one."""
    while raw.startswith(b"HTTP/1.1 1"):
        raw = raw.split(b"\r\n\r\n", 1)[1]
    assert raw.startswith(b"HTTP/1."), raw[:200]
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


def dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return out


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_half_close_non_stream_gets_full_response(server, version):
    m0 = server.metrics()
    raw = half_closed_request(server, {"model": MODEL_NAME, "prompt": "half-closed", "max_tokens": N,
                                       "temperature": 0, "ignore_eos": True}, version)
    st, head, body = final_response(raw)
    assert st == 200, raw[:300]
    js = json.loads(body)
    assert js["usage"]["completion_tokens"] == N and js["choices"][0]["finish_reason"] == "length"
    assert server.metrics().get("kipp_requests_cancelled_total") == m0.get("kipp_requests_cancelled_total")


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_half_close_stream_gets_full_stream(server, version):
    m0 = server.metrics()
    raw = half_closed_request(server, {"model": MODEL_NAME, "prompt": "half-closed", "max_tokens": N,
                                       "temperature": 0, "ignore_eos": True, "stream": True,
                                       "stream_options": {"include_usage": True}}, version)
    st, head, body = final_response(raw)
    assert st == 200, raw[:300]
    if b"chunked" in head.lower():
        body = dechunk(body)
    events = parse_sse(body)
    assert events and events[-1] == "[DONE]", body[-300:]
    usage = [e for e in events if isinstance(e, dict) and e.get("usage")]
    assert usage and usage[-1]["usage"]["completion_tokens"] == N
    assert server.metrics().get("kipp_requests_cancelled_total") == m0.get("kipp_requests_cancelled_total")
