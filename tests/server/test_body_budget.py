"""Request bodies held in memory at once are bounded by --max-parsing x --max-body: a
request reserves its whole Content-Length before its first byte is stored, and one that
finds no room waits (its connection is not read) until a body is released, or 503 after
10 s. Here the budget is one body: a second request waits for the first to be sent."""

from __future__ import annotations

import json
import socket
import threading
import time

from conftest import MODEL_NAME, Srv, start_server


def _head(s: Srv, n: int) -> bytes:
    return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {n}\r\n\r\n").encode()


def _status(sock: socket.socket) -> int:
    buf = b""
    while b"\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            return 0
        buf += chunk
    return int(buf.split(b" ")[1])


def test_second_body_waits_for_the_first():
    s = Srv(start_server("body_budget", "--max-parsing", "1", "--max-body", "65536"))
    pad = " " * 40000
    body = json.dumps({"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1, "x": pad}).encode()
    a = socket.create_connection((s.host, s.port), timeout=30)
    a.sendall(_head(s, len(body)) + body[:10])  # holds the whole budget, body incomplete
    time.sleep(0.3)
    result = {}

    def second():
        b = socket.create_connection((s.host, s.port), timeout=30)
        b.sendall(_head(s, len(body)) + body)
        result["t"] = time.monotonic()
        result["status"] = _status(b)
        result["t_done"] = time.monotonic()
        b.close()

    t = threading.Thread(target=second)
    t.start()
    time.sleep(1.0)
    assert "status" not in result, f"the second request was answered ({result}) while the first held the budget"
    a.sendall(body[10:])
    assert _status(a) == 200
    t.join(30)
    assert result.get("status") == 200, result
    a.close()
