"""HTTP/1.1 message framing (RFC 9112) and Expect (RFC 9110 10.1.1), over raw sockets
(docs/server.md, "Errors"): a request whose length a proxy in front and libmicrohttpd could
read differently (Content-Length with Transfer-Encoding, a transfer coding other than a
lone chunked, two Transfer-Encoding or Host lines, whitespace before a header's colon) is
answered once, with a JSON error and Connection: close, and the connection is closed, so a
request pipelined behind it is never served. Legitimate chunked bodies, keep-alive
pipelining and Expect: 100-continue keep working, and 100 Continue is sent only when asked."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile

import pytest

from conftest import MODEL_NAME, TIMEOUT_SCALE, Srv, start_server

COMP = "/v1/completions"
BODY = json.dumps({"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1}).encode()
TRAILER = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: pipelined-second\r\n\r\n"
WAIT = 20 * TIMEOUT_SCALE


def chunked(body: bytes = BODY, ext: bytes = b"", pieces: int = 1) -> bytes:
    step = -(-len(body) // pieces)
    out = b""
    for k in range(0, len(body), step):
        part = body[k:k + step]
        out += b"%x%s\r\n%s\r\n" % (len(part), ext, part)
    return out + b"0\r\n\r\n"


def post(headers: list[bytes], body: bytes, version: bytes = b"1.1") -> bytes:
    return (b"POST " + COMP.encode() + b" HTTP/" + version + b"\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body)


def exchange(s, data: bytes, timeout: float = WAIT) -> tuple[bytes, bool]:
    """Sends data on a fresh connection; (what came back, whether the server closed the
    connection) after reading until it closes or timeout seconds pass without a byte."""
    sock = socket.create_connection((s.host, s.port), timeout=timeout)
    out, closed = b"", False
    try:
        try:
            sock.sendall(data)
        except OSError:
            pass  # answered and closed before all of it was taken: read what came
        while True:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            out += chunk
    finally:
        sock.close()
    return out, closed


def responses(raw: bytes) -> list[tuple[int, dict, bytes]]:
    """The responses in raw, interim 1xx included: (status, headers lower-cased, body)."""
    out = []
    while raw.startswith(b"HTTP/1."):
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw[:300]
        lines = head.decode("latin-1").split("\r\n")
        st = int(lines[0].split()[1])
        hd = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hd[k.strip().lower()] = v.strip()
        n = 0 if st < 200 else int(hd.get("content-length", "0"))
        out.append((st, hd, rest[:n]))
        raw = rest[n:]
    assert not raw, f"bytes after the last response: {raw[:200]!r}"
    return out


# ---- refused: one answer, JSON, Connection: close, closed, the pipelined request unserved ----

REFUSED = [
    ("CL and TE", [b"Content-Length: %d" % len(BODY), b"Transfer-Encoding: chunked"], chunked(), 400,
     "both Transfer-Encoding and Content-Length"),
    ("TE and CL", [b"Transfer-Encoding: chunked", b"Content-Length: 4"], chunked(), 400,
     "both Transfer-Encoding and Content-Length"),
    ("space before the colon of TE", [b"Transfer-Encoding : chunked"], chunked(), 400, "not a token"),
    ("space before the colon of TE, with CL", [b"Transfer-Encoding : chunked", b"Content-Length: %d" % len(BODY)],
     BODY, 400, "not a token"),
    ("space before the colon of CL", [b"Content-Length : %d" % len(BODY)], BODY, 400, "not a token"),
    ("tab before the colon", [b"X-Thing\t: 1", b"Content-Length: %d" % len(BODY)], BODY, 400, "not a token"),
    ("two TE", [b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"], chunked(), 400,
     "more than one Transfer-Encoding"),
    ("two Host", [b"Host: 127.0.0.1", b"Content-Length: %d" % len(BODY)], BODY, 400, "more than one Host"),
    ("TE xchunked", [b"Transfer-Encoding: xchunked"], chunked(), 400, "does not end in chunked"),
    ("TE chunked, gzip", [b"Transfer-Encoding: chunked, gzip"], chunked(), 400, "does not end in chunked"),
    ("TE identity", [b"Transfer-Encoding: identity"], BODY, 400, "does not end in chunked"),
    ("TE gzip, chunked", [b"Transfer-Encoding: gzip, chunked"], chunked(), 501, "not implemented"),
    ("TE chunked, chunked", [b"Transfer-Encoding: chunked, chunked"], chunked(), 400, "more than once"),
    ("TE chunked with a trailing space", [b"Transfer-Encoding: chunked "], chunked(), 400, "exactly 'chunked'"),
    ("Expect other than 100-continue", [b"Expect: the-moon", b"Content-Length: %d" % len(BODY)], BODY, 417,
     "expectation"),
]


@pytest.mark.parametrize("headers,body,want,text", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_then_closed(server, headers, body, want, text):
    raw, closed = exchange(server, post(headers, body) + TRAILER)
    assert closed, f"the connection was kept open: {raw[:400]!r}"
    rs = responses(raw)
    assert len(rs) == 1, f"{len(rs)} responses (the pipelined request was served?): {raw[:600]!r}"
    st, hd, js = rs[0]
    assert st == want, raw[:400]
    assert hd.get("connection", "").lower() == "close", hd
    assert hd.get("content-type", "").startswith("application/json"), hd
    e = json.loads(js)["error"]
    assert text in e["message"] and e["type"] == "invalid_request_error", e
    assert b"pipelined-second" not in raw


def test_transfer_encoding_in_http10_refused(server):
    raw, closed = exchange(server, post([b"Transfer-Encoding: chunked"], chunked(), b"1.0"))
    assert closed
    (st, hd, js), = responses(raw)
    assert st == 400 and "HTTP/1.0" in json.loads(js)["error"]["message"], raw[:400]


def test_error_codes_and_metrics(server):
    """501 and 417 carry a code; every refusal is counted under its status."""
    m0 = server.metrics()
    for headers, body in (([b"Transfer-Encoding: gzip, chunked"], chunked()),
                          ([b"Expect: 200-ok", b"Content-Length: %d" % len(BODY)], BODY),
                          ([b"Content-Length: 5", b"Transfer-Encoding: chunked"], chunked())):
        exchange(server, post(headers, body))
    m1 = server.metrics()
    for st in (400, 417, 501):
        got = (m1.get("kipp_requests_total", endpoint="completions", status=st)
               - m0.get("kipp_requests_total", endpoint="completions", status=st))
        assert got == 1, (st, got)
    raw, _ = exchange(server, post([b"Transfer-Encoding: gzip, chunked"], chunked()))
    assert json.loads(responses(raw)[0][2])["error"]["code"] == "unsupported_transfer_encoding"
    raw, _ = exchange(server, post([b"Expect: 200-ok", b"Content-Length: %d" % len(BODY)], BODY))
    assert json.loads(responses(raw)[0][2])["error"]["code"] == "expectation_failed"


def test_huge_chunk_extension_is_answered_by_libmicrohttpd_and_closed(server):
    """A chunk-size line longer than libmicrohttpd's per-connection buffer (~32 KiB) never
    reaches Kipp: libmicrohttpd 0.9.75 answers it itself, 500 with an HTML body and
    Connection: close (docs/server.md). Pinned: one answer, the connection closed, the
    pipelined request not served, and the server goes on."""
    raw, closed = exchange(server, post([b"Transfer-Encoding: chunked"],
                                        chunked(ext=b";x=" + b"a" * 100_000)) + TRAILER)
    assert closed
    rs = responses(raw)
    assert len(rs) == 1 and rs[0][0] == 500 and rs[0][1].get("connection", "").lower() == "close", raw[:400]
    assert b"pipelined-second" not in raw
    raw, _ = exchange(server, TRAILER.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    assert responses(raw)[0][0] == 200


# ---- still served ------------------------------------------------------------------------------

SERVED = [
    ("chunked", [b"Transfer-Encoding: chunked"], chunked()),
    ("chunked, several chunks and an extension", [b"Transfer-Encoding: chunked"], chunked(ext=b";a=b", pieces=5)),
    ("CHUNKED", [b"Transfer-Encoding: CHUNKED"], chunked()),
    ("TE with leading whitespace", [b"Transfer-Encoding:   chunked"], chunked()),
    ("Content-Length", [b"Content-Length: %d" % len(BODY)], BODY),
]


@pytest.mark.parametrize("headers,body", [c[1:] for c in SERVED], ids=[c[0] for c in SERVED])
def test_served_and_kept_alive(server, headers, body):
    last = TRAILER.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    raw, closed = exchange(server, post(headers, body) + last)
    rs = responses(raw)
    assert [r[0] for r in rs] == [200, 200], raw[:600]
    assert json.loads(rs[0][2])["choices"][0]["finish_reason"], rs[0]
    assert rs[1][1].get("x-request-id") == "pipelined-second" and closed


def test_keep_alive_pipelining_of_valid_requests(server):
    reqs = (post([b"Content-Length: %d" % len(BODY), b"X-Request-Id: p1"], BODY)
            + post([b"Transfer-Encoding: chunked", b"X-Request-Id: p2"], chunked(pieces=3))
            + b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-Id: p3\r\n\r\n"
            + TRAILER.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    raw, closed = exchange(server, reqs)
    rs = responses(raw)
    assert [(r[0], r[1].get("x-request-id")) for r in rs] == [
        (200, "p1"), (200, "p2"), (200, "p3"), (200, "pipelined-second")], raw[:800]
    assert all(r[1].get("connection", "").lower() != "close" for r in rs[:3]) and closed


def test_no_100_continue_unasked(server):
    """A client that neither asks (Expect) nor half-closes gets no interim response."""
    raw, _ = exchange(server, post([b"Content-Length: %d" % len(BODY), b"Connection: close"], BODY))
    assert raw.startswith(b"HTTP/1.1 200 "), raw[:300]
    assert b"100 Continue" not in raw


def test_expect_100_continue_raw(server):
    """The interim 100 comes after the headers, before any of the body is sent."""
    sock = socket.create_connection((server.host, server.port), timeout=WAIT)
    try:
        sock.sendall(post([b"Content-Length: %d" % len(BODY), b"Expect: 100-continue", b"Connection: close"], b""))
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = sock.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
        sock.sendall(BODY)
        rest = got[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    finally:
        sock.close()
    assert responses(rest)[0][0] == 200, rest[:300]


def test_expect_100_continue_refused_early_gets_no_100(server):
    """A body over --max-body: 413 at once, no 100 Continue (the client never sends it)."""
    raw, closed = exchange(server, post([b"Content-Length: 1000000", b"Expect: 100-continue"], b""))
    rs = responses(raw)
    assert [r[0] for r in rs] == [413] and closed, raw[:300]


@pytest.fixture(scope="module")
def big_server() -> Srv:
    return Srv(start_server("framing_big_body", "--max-body", str(4 << 20)))


def test_curl_large_body_expect_100_continue(big_server):
    """curl sends Expect: 100-continue for bodies over 1 MiB (curl 7.88) and waits for the
    100 before sending the body."""
    if shutil.which("curl") is None:
        pytest.skip("curl not installed")
    body = BODY[:-1] + b" " * (1100 * 1024) + b"}"  # JSON padded with whitespace past 1 MiB
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "big.json")
        with open(path, "wb") as f:
            f.write(body)
        p = subprocess.run(["curl", "-sv", "-o", os.path.join(d, "out"), "-w", "%{http_code}",
                            "--max-time", str(int(120 * TIMEOUT_SCALE)),
                            "-H", "Expect: 100-continue",  # what curl sends by itself here
                            "-H", "Content-Type: application/json", "--data-binary", "@" + path,
                            big_server.url + COMP], capture_output=True, timeout=150 * TIMEOUT_SCALE)
        err = p.stderr.decode("utf-8", "replace")
        assert p.stdout.decode().strip() == "200", err[-2000:]
        assert "< HTTP/1.1 100 Continue" in err, err[-2000:]
        with open(os.path.join(d, "out"), "rb") as f:
            assert json.loads(f.read())["choices"][0]["finish_reason"]
