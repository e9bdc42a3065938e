"""Flow control (docs/server.md, "Fairness and back-pressure"): admission interleaves API
requests, not the siblings of one n > 1 request; a request's sequences run at most a window
of tokens ahead of what its connection has taken (a client that stops reading pauses its
generation, and after --write-timeout without a byte taken is closed and cancelled); a large
non-streamed body is sent piece by piece, never whole in memory; kipp_prompt_tokens_total
counts a request's prompt once, as usage.prompt_tokens does."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import pytest

from conftest import TIMEOUT_SCALE, Srv, start_server

PROMPT = "Tell me a long story about a robot who learns to paint, with many details."
WINDOW = 64  # KIPP_SERVER_TOKEN_WINDOW
# under ASan/TSan the RSS is shadow memory and quarantined frees: memory bounds are only
# asserted on a plain build (the rest of each test runs everywhere)
SANITIZED = bool(os.environ.get("KIPP_SANITIZE"))


def vm_hwm(pid: int) -> int:
    """The process's peak RSS so far (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def vm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def wait_for(pred, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(step)


def raw_post(srv: Srv, path: str, obj, rcvbuf: int | None = None) -> socket.socket:
    """Sends a POST on a raw socket (optionally with a tiny receive buffer) and returns the
    socket without reading anything."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect((srv.host, srv.port))
    body = json.dumps(obj).encode()
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: {srv.host}:{srv.port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
    return s


@pytest.fixture(scope="module")
def flow_server() -> Srv:
    # 4 slots: an n = 8 request fills them and queues 4 more siblings
    return Srv(start_server("flow", "--parallel", "4", "--write-timeout", "120"))


@pytest.fixture(scope="module")
def stall_server() -> Srv:
    return Srv(start_server("flow-stall", "--write-timeout", "2"))


def test_plain_request_is_not_queued_behind_siblings(flow_server):
    """An n = 8 request with long completions holds all 4 slots and queues 4 siblings; a
    4-token request sent meanwhile takes the next slot (a sibling is preempted for its fair
    share) instead of waiting behind all 8 siblings (which it used to: their whole time)."""
    srv = flow_server
    t0 = time.monotonic()
    srv.complete("Hello there", max_tokens=4, temperature=0, ignore_eos=True)
    unloaded = time.monotonic() - t0
    srv.wait_idle()
    big: dict = {}

    def hostile():
        t = time.monotonic()
        big["js"] = srv.complete(PROMPT, n=8, max_tokens=200, temperature=1.0, seed=3, ignore_eos=True)
        big["s"] = time.monotonic() - t

    th = threading.Thread(target=hostile)
    th.start()
    try:
        wait_for(lambda: srv.metrics().get("kipp_running_sequences") == 4
                 and srv.metrics().get("kipp_queue_depth") >= 3, 60, "the n = 8 request to fill the slots")
        pre = srv.metrics()
        t1 = time.monotonic()
        js = srv.complete("Hello there", max_tokens=4, temperature=0, ignore_eos=True)
        plain = time.monotonic() - t1
        hostile_running = th.is_alive()
    finally:
        th.join()
    post = srv.wait_idle()
    assert js["usage"]["completion_tokens"] == 4
    assert len(big["js"]["choices"]) == 8
    assert all(c["finish_reason"] == "length" for c in big["js"]["choices"])
    print(f"plain unloaded {unloaded:.2f} s, under n=8 {plain:.2f} s; n=8 request {big['s']:.2f} s")
    assert hostile_running, f"the plain request ({plain:.2f} s) only finished after the n = 8 one"
    assert plain < 0.25 * big["s"], (plain, big["s"])
    assert post.get("kipp_requests_preempted_fair_total") > pre.get("kipp_requests_preempted_fair_total")
    # the sibling preempted for it kept its KV (parked) and resumed with nothing recomputed
    assert post.get("kipp_requests_parked_total") > pre.get("kipp_requests_parked_total")


@pytest.mark.parametrize("share", ["0", "off"])
def test_fair_steps_hold_siblings_back(share):
    """Fair steps (docs/server.md): with --fair-share 0, while an n = 8 request decodes beside a
    plain request its sequences wait (a row every 9 steps), so sequences are held out
    (kipp_fair_deferred_total rises) and the plain request's tokens cost about a 1-row step;
    with --fair-share off nothing is held out. Outputs are checked for shape only here (the
    scheduler gate checks them token for token)."""
    srv = Srv(start_server(f"flow-fair-{share}", "--parallel", "8", "--fair-share", share))
    try:
        for i in range(3):  # the step-time line: one-row steps...
            srv.complete(f"Hello {i}", max_tokens=8, temperature=0, ignore_eos=True)
        big: dict = {}

        def heavy():
            big["js"] = srv.complete(PROMPT, n=8, max_tokens=120, temperature=1.0, seed=5, ignore_eos=True)

        th = threading.Thread(target=heavy)
        th.start()
        try:  # ...and eight-row steps, then a plain request beside them
            wait_for(lambda: srv.metrics().get("kipp_running_sequences") == 8
                     and srv.metrics().get("kipp_generated_tokens_total") > 8 * 3 + 8 * 10, 60,
                     "the n = 8 request to decode")
            js = srv.complete("Hello there", max_tokens=16, temperature=0, ignore_eos=True)
        finally:
            th.join()
        post = srv.wait_idle()
        assert js["usage"]["completion_tokens"] == 16
        assert [c["finish_reason"] for c in big["js"]["choices"]] == ["length"] * 8
        deferred = post.get("kipp_fair_deferred_total")
        if share == "off":
            assert deferred == 0, deferred
        else:
            assert deferred >= 16, f"{deferred} sequences held out while a plain request ran 16 tokens beside n = 8"
    finally:
        srv.proc.stop()


def stream_body(srv: Srv, n: int) -> dict:
    return {"model": srv.model, "messages": [{"role": "user", "content": PROMPT}], "stream": True,
            "n": n, "max_tokens": 300, "logprobs": True, "top_logprobs": 20, "temperature": 1.0,
            "ignore_eos": True}


def test_non_reading_stream_pauses(flow_server):
    """A client with a 4 KiB receive buffer that never reads an n = 8 stream with
    top_logprobs 20: generation stops after about a window per choice (the rest is not
    generated: it used to run to 8 x 300 tokens, all of it queued for the socket), and the
    server's memory stays flat."""
    srv = flow_server
    # the same request once, read: the server's one-time allocations (logits rows, sampler
    # scratch, thread arenas) are made before the baseline, whatever test ran before
    warm = dict(stream_body(srv, 8), max_tokens=WINDOW + 16)
    assert srv.stream("/v1/chat/completions", warm).done
    srv.wait_idle()
    m0 = srv.metrics()
    rss0 = vm_rss(srv.proc.pid)
    sock = raw_post(srv, "/v1/chat/completions", stream_body(srv, 8), rcvbuf=4096)
    try:
        def plateau():
            a = srv.metrics().get("kipp_generated_tokens_total")
            time.sleep(1.0)
            m = srv.metrics()
            return m if m.get("kipp_generated_tokens_total") == a and m.get("kipp_paused_sequences") == 8 else None
        m1 = wait_for(plateau, 90, "the non-reading stream's 8 choices to pause", step=0)
        gen = m1.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total")
        rss1 = vm_rss(srv.proc.pid)
        print(f"generated {gen} of {8 * 300} tokens for the non-reader; RSS +{(rss1 - rss0) / 1e6:.1f} MB")
        # a window per choice, plus what the socket's buffers took before they filled
        assert gen <= 8 * (WINDOW + 40), gen
        assert m1.get("kipp_running_sequences") == 4  # paused: they keep their slots (nobody waits)
        assert SANITIZED or rss1 - rss0 < 16e6, (rss0, rss1)
        # a paused request does not hold up others: a plain request takes a paused slot
        js = srv.complete("Hello there", max_tokens=4, temperature=0, ignore_eos=True)
        assert js["usage"]["completion_tokens"] == 4
        assert srv.metrics().get("kipp_requests_preempted_paused_total") > m0.get("kipp_requests_preempted_paused_total")
    finally:
        sock.close()  # gone: its choices are cancelled
    m2 = srv.wait_idle()
    assert m2.get("kipp_requests_cancelled_total") - m0.get("kipp_requests_cancelled_total") == 8


def test_stalled_stream_is_closed_and_cancelled(stall_server):
    """The same client on a server with --write-timeout 2: no byte taken for 2 s while the
    server has bytes for it, so the connection is closed and its 16 choices cancelled
    (it used to wait for libmicrohttpd's 300 s inactivity timeout, generating all along)."""
    srv = stall_server
    srv.wait_idle()
    m0 = srv.metrics()
    sock = raw_post(srv, "/v1/chat/completions", stream_body(srv, 16), rcvbuf=4096)
    t0 = time.monotonic()
    try:
        wait_for(lambda: srv.metrics().get("kipp_running_sequences") > 0, 30, "the stream to start")
        m2 = wait_for(lambda: (lambda m: m if m.get("kipp_running_sequences") == 0
                               and m.get("kipp_queue_depth") == 0 else None)(srv.metrics()),
                      60, "the stalled stream to be closed")
        took = time.monotonic() - t0
        assert m2.get("kipp_requests_cancelled_total") - m0.get("kipp_requests_cancelled_total") == 16
        assert m2.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total") < 16 * 300 // 2
        sock.settimeout(10 * TIMEOUT_SCALE)
        got = 0
        try:
            while True:  # shut down: what was sent, then EOF (or a reset)
                b = sock.recv(65536)
                if not b:
                    break
                got += len(b)
        except ConnectionResetError:
            pass
        print(f"closed after {took:.1f} s; the client could still read {got} bytes")
        assert got < 1 << 20, got  # bounded: the socket's buffers, not the whole stream
    finally:
        sock.close()
    srv.wait_idle()


def test_slow_reader_gets_the_whole_stream(flow_server):
    """Back-pressure is not loss: a client that reads slowly still gets every token of
    every choice, in order, and [DONE]."""
    srv = flow_server
    body = {"model": srv.model, "prompt": PROMPT, "stream": True, "n": 6, "max_tokens": 150,
            "logprobs": 5, "temperature": 1.0, "seed": 5, "ignore_eos": True}
    sock = raw_post(srv, "/v1/completions", body, rcvbuf=4096)
    sock.settimeout(60 * TIMEOUT_SCALE)
    data = b""
    try:
        time.sleep(1.0)  # let the window fill and pause
        while not data.endswith(b"0\r\n\r\n"):
            b = sock.recv(2048)
            if not b:
                break
            data += b
            time.sleep(0.002)
    finally:
        sock.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    # undo chunked encoding
    out, i = b"", 0
    while True:
        j = rest.index(b"\r\n", i)
        n = int(rest[i:j], 16)
        if n == 0:
            break
        out += rest[j + 2:j + 2 + n]
        i = j + 2 + n + 2
    events = [e[len(b"data: "):] for e in out.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    toks = [0] * 6
    for e in events[:-1]:
        js = json.loads(e)
        for c in js["choices"]:
            if c.get("logprobs"):
                toks[c["index"]] += len(c["logprobs"]["tokens"])
    assert toks == [150] * 6, toks


@pytest.fixture(scope="module")
def rss_server() -> Srv:
    return Srv(start_server("flow-rss", "--parallel", "8"))


def test_large_non_streamed_body_is_not_built_whole(rss_server):
    """n = 16 x 200 tokens with top_logprobs 20: a ~6 MB body. The server's peak RSS rises
    by a fraction of it (the body is made piece by piece as the client reads; it used to be
    built whole, as a JSON tree many times its size: +183 MB for a 14.5 MB body), and the
    body is complete and correct."""
    srv = rss_server
    # the same shape, small: the batch of 8, the logits rows and the KV blocks are touched
    srv.chat([{"role": "user", "content": "Hi"}], n=16, max_tokens=24, logprobs=True, top_logprobs=20,
             temperature=1.0, ignore_eos=True)
    srv.wait_idle()
    hwm0 = vm_hwm(srv.proc.pid)
    body = {"model": srv.model, "messages": [{"role": "user", "content": "Hi"}], "n": 16,
            "max_tokens": 200, "logprobs": True, "top_logprobs": 20, "temperature": 1.0,
            "ignore_eos": True}
    st, hdrs, raw = srv.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                                {"Content-Type": "application/json"}, timeout=600)
    hwm1 = vm_hwm(srv.proc.pid)
    assert st == 200, raw[:300]
    js = json.loads(raw)
    cl = {k.lower(): v for k, v in dict(hdrs).items()}.get("content-length")
    assert cl is not None and int(cl) == len(raw)
    assert len(js["choices"]) == 16
    total = 0
    for i, c in enumerate(js["choices"]):
        assert c["index"] == i
        lp = c["logprobs"]["content"]
        assert all(len(e["top_logprobs"]) == 20 for e in lp)
        total += len(lp)
    assert total == js["usage"]["completion_tokens"]
    print(f"body {len(raw) / 1e6:.1f} MB; peak RSS +{(hwm1 - hwm0) / 1e6:.1f} MB")
    assert len(raw) > 4e6  # the test means something: the body is far above the inline bound
    # the KV blocks of 16 x 200 tokens (1.6 MB) and the token records are touched here too
    assert SANITIZED or hwm1 - hwm0 < 8e6 + 0.25 * len(raw), (hwm0, hwm1, len(raw))


def thread_nices(pid: int) -> dict[int, int]:
    """Each thread's nice value (field 19 of /proc/PID/task/TID/stat)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                txt = f.read()
        except OSError:
            continue
        out[int(tid)] = int(txt.rsplit(")", 1)[1].split()[16])
    return out


def test_large_body_is_sent_at_bulk_priority(rss_server):
    """A body past the inline bound is serialized on its connection's thread at nice 10 (so
    the forward pass's threads keep their CPU), and that connection closes after it (the
    thread cannot raise its priority again). A small answer on another connection stays at
    the normal priority, kept alive."""
    import http.client
    srv = rss_server
    srv.wait_idle()
    pid = srv.proc.pid
    assert 10 not in thread_nices(pid).values()  # (the grammar mask thread runs at 19)
    body = {"model": srv.model, "messages": [{"role": "user", "content": "Hi"}], "n": 16,
            "max_tokens": 120, "logprobs": True, "top_logprobs": 20, "temperature": 1.0,
            "ignore_eos": True}
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=600 * TIMEOUT_SCALE)
    h = {"Content-Type": "application/json", **srv.auth_headers()}
    c.request("POST", "/v1/chat/completions", json.dumps(body), h)
    r = c.getresponse()  # the headers: the count pass is done, the pieces follow as read
    head = r.read(1024)
    during = thread_nices(pid)
    rest = r.read()
    assert r.status == 200 and len(head) + len(rest) > 1 << 20
    assert sorted(during.values()).count(10) == 1, during
    assert (r.getheader("Connection") or "").lower() == "close", r.getheaders()
    assert len(json.loads(head + rest)["choices"]) == 16
    c.close()
    # a small answer: normal priority, the connection kept
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=120 * TIMEOUT_SCALE)
    c.request("POST", "/v1/chat/completions", json.dumps({"model": srv.model, "max_tokens": 2,
              "messages": [{"role": "user", "content": "Hi"}]}), h)
    r = c.getresponse()
    r.read()
    assert r.status == 200 and (r.getheader("Connection") or "").lower() != "close"
    c.close()
    deadline = time.monotonic() + 10 * TIMEOUT_SCALE  # the big reply's thread ends with its connection
    while 10 in thread_nices(pid).values() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 10 not in thread_nices(pid).values(), thread_nices(pid)


def test_large_request_body_is_read_at_bulk_priority(rss_server):
    """A request body of 256 KiB or more is bulk work: its connection's thread drops to nice 10
    once that much of it is in (receiving, parsing and tokenizing it then take the CPU the
    forward pass leaves), and the connection closes after its answer. 200 KB of a body in
    keeps the normal priority."""
    srv = rss_server
    srv.wait_idle()
    pid = srv.proc.pid
    deadline = time.monotonic() + 10 * TIMEOUT_SCALE  # a +10 thread of a test before ends
    while 10 in thread_nices(pid).values() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 10 not in thread_nices(pid).values(), thread_nices(pid)
    head = json.dumps({"model": srv.model, "max_tokens": 1, "prompt": ""})[:-2]
    body = (head + '"' + "ab " * 200_000 + '"}').encode()
    assert len(body) > 600_000
    auth = "".join(f"{k}: {v}\r\n" for k, v in srv.auth_headers().items())
    sock = socket.create_connection((srv.host, srv.port), timeout=60 * TIMEOUT_SCALE)
    try:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {srv.host}\r\nContent-Type: application/json\r\n"
                     f"{auth}Content-Length: {len(body)}\r\n\r\n".encode() + body[:200_000])
        time.sleep(0.5 * TIMEOUT_SCALE)  # read by the server
        assert 10 not in thread_nices(pid).values(), thread_nices(pid)
        sock.sendall(body[200_000:400_000])  # past 256 KiB
        deadline = time.monotonic() + 10 * TIMEOUT_SCALE
        while 10 not in thread_nices(pid).values() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(thread_nices(pid).values()).count(10) == 1, thread_nices(pid)
        sock.sendall(body[400_000:])
        reply = b""
        while chunk := sock.recv(65536):  # the server closes after its answer
            reply += chunk
    finally:
        sock.close()
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split()[1] in (b"200", b"400"), reply[:300]
    assert b"connection: close" in rest.split(b"\r\n\r\n")[0].lower(), reply[:300]
    deadline = time.monotonic() + 10 * TIMEOUT_SCALE  # the thread ends with its connection
    while 10 in thread_nices(pid).values() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 10 not in thread_nices(pid).values(), thread_nices(pid)


def test_prompt_tokens_metric_matches_usage_for_n(rss_server):
    """usage.prompt_tokens counts the prompt once for n = 16 (as OpenAI does), and so does
    kipp_prompt_tokens_total; kipp_sequence_prompt_tokens_total counts it per sequence."""
    srv = rss_server
    srv.wait_idle()
    m0 = srv.metrics()
    js = srv.complete(PROMPT, n=16, max_tokens=4, temperature=1.0)
    m1 = srv.wait_idle()
    p = js["usage"]["prompt_tokens"]
    assert m1.get("kipp_prompt_tokens_total") - m0.get("kipp_prompt_tokens_total") == p
    assert m1.get("kipp_sequence_prompt_tokens_total") - m0.get("kipp_sequence_prompt_tokens_total") == 16 * p
    gen = m1.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total")
    assert gen >= js["usage"]["completion_tokens"]
