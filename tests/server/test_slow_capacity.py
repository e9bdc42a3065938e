"""Slow clients that send a complete request line and then trickle headers (the slowloris
that a request-line deadline does not stop) are held until --read-timeout; there must be
room for hundreds of them beside normal clients. With the old default of 256 connections,
300 such clients left normal requests waiting in the listen backlog until they timed out."""

from __future__ import annotations

import socket
import time

from conftest import MODEL_NAME, Srv, start_server


def test_300_slow_header_clients_do_not_starve_normal_ones():
    s = Srv(start_server("slow_capacity"))
    slow = []
    try:
        for i in range(300):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.bind((f"127.0.0.{10 + i % 10}", 0))  # 30 per address: under the per-IP limit
            c.connect((s.host, s.port))
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: s")
            slow.append(c)
        time.sleep(0.5)
        for c in slow[:50]:  # still trickling
            c.sendall(b"s")
        for _ in range(3):
            t0 = time.monotonic()
            st, _, js = s.post("/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2},
                               timeout=10)
            assert st == 200, js
            assert time.monotonic() - t0 < 5, "a normal request waited behind slow clients"
    finally:
        for c in slow:
            c.close()
