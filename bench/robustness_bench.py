#!/usr/bin/env python3
"""robustness_bench.py — kipp-server against hostile and careless clients; writes the record
bench/results/server-robustness-<model>.json. Protocol: bench/README.md ("Robustness").

Four phases (--phases hostile,rss,slow,drain; each starts its own fresh server, so one
phase cannot spoil another's figures):

hostile  Hand-made HTTP over raw sockets, per class 20-50 seeded, reproducible cases
         (malformed JSON, invalid UTF-8, wrong field types and ranges, oversize body and
         prompt, huge max_tokens, unknown paths and methods, %00 in the path, garbage
         request lines, TLS ClientHello bytes, bad and duplicate Content-Length,
         Transfer-Encoding tricks, odd Content-Type, hostile Host/Origin, half-closed
         clients, clients that leave mid-stream, HEAD, deep JSON nesting, many headers, a
         huge header). Each case's outcome is one of
           clear_4xx    a 4xx whose body is a JSON error with a message (naming the field /
                        problem where the case says which)
           unclear_4xx  a 4xx without such a body (e.g. libmicrohttpd's own HTML 400)
           served       a 2xx with a valid body (JSON, or SSE ending in [DONE])
           other_status anything else answered (5xx, 3xx, a 2xx with a broken body)
           closed       the server closed the connection without any answer
           hang         no complete answer within --deadline seconds
           crash        the server process died
         Each case lists the outcomes acceptable for it ("closed" only for garbage / TLS
         bytes and framing the server cannot answer); the record counts outcomes per class,
         the unacceptable ones with examples, and /health after every class (a dead
         server is restarted so the remaining classes still run). Target: 0 crash, 0 hang.
rss      Idle VmRSS after start (the KV pool is touched at start) and one warm-up request;
         then N (--rss-clients, 32) concurrent requests, each a body of nearly --max-body
         bytes of varied multi-byte prompt text (chat and completions alternately; they
         may be rejected as too long — the point is memory). VmRSS is sampled every 10 ms;
         VmHWM is read before and after. Target: peak <= 1.25 x idle + kv_pool_bytes.
         kv_pool_bytes = kipp_kv_blocks_total (/metrics) x block tokens (server log line,
         16) x 2 (K and V) x n_layer x n_head_kv x head_dim x 4 (f32), the shape from the
         GGUF header.
slow     Baseline: M (--slow-requests) sequential short requests (max_tokens 4), latency
         each. Then K (--slow-clients, 1000) slowloris connections, each sending a request
         header one byte every --slow-interval seconds (--slow-mode headers, the default: the
         request line and real headers at once first, then an endless header; trickle: byte
         by byte from the start), from source addresses 127.0.0.2 …
         127.0.0.254 (so a per-IP limit sees ~K/253 each; --slow-same-ip: all from
         127.0.0.1), while the same M requests run again. Target: p99 with / p99 without
         <= 2.0 and no failed normal request. Records how many slow connections were
         connected, held open, closed by the server or answered, at three checkpoints,
         and the server's fd and thread counts.
drain    N (--drain-streams, 8) long streaming completions; once each has received tokens,
         SIGTERM. Per stream: completed (final chunk with finish_reason, all max_tokens tokens
         by usage — the streams use ignore_eos —, and [DONE]), ended_early (a normal end
         with fewer tokens), error (an error event or status), cut (ended without [DONE]),
         or finished_before_sigterm (then raise --drain-max-tokens). Records
         SIGTERM -> exit time, exit code, and the --shutdown-timeout passed (only when
         `kipp-server --help` lists it). Target: every stream completed within the timeout.

Not a test: it never fails on the figures (exit 0 once the record is written; 2 on a usage
error, 1 when the harness itself fails — then --output is not touched). The record is
written atomically (a temporary file beside it, then os.replace).

  .venv/bin/python bench/robustness_bench.py --output bench/results/server-robustness-tiny-tied-bf16.json
"""

from __future__ import annotations

import argparse
import collections
import errno
import http.client
import json
import os
import random
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import server_common as sc  # noqa: E402
import benchlib  # noqa: E402
from server_bench import record_header, split_server_args  # noqa: E402

PHASES = ("hostile", "rss", "slow", "drain")
OUTCOMES = ("clear_4xx", "unclear_4xx", "served", "other_status", "closed", "hang", "crash")
DEFAULT_MODEL = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"
RSS_FACTOR = 1.25
HALF_CLOSE_AFTER = 1.5   # framing cases: half-close when the server still waits after this
SLOW_P99_RATIO = 2.0
KV_POOL_RE = re.compile(r"KV pool (\d+) blocks of (\d+) tokens")


# ---- raw HTTP over a socket ---------------------------------------------------------------

class Reply:
    def __init__(self):
        self.status: int | None = None
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.body = b""
        self.complete = False      # the whole response (per its framing) arrived
        self.hang = False          # deadline passed without a complete response
        self.raw = b""
        self.error = ""            # connect / socket error text
        self.events = 0            # SSE data events seen (streams)
        self.left_early = False    # we closed after disconnect_after events

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


def _dechunk(data: bytes):
    """(body, complete) of a chunked body; complete False while more is needed."""
    out, pos = [], 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return b"".join(out), False
        try:
            size = int(data[pos:eol].split(b";")[0].strip() or b"x", 16)
        except ValueError:
            return b"".join(out), True   # malformed: take what we have
        if size == 0:
            return b"".join(out), True
        if len(data) < eol + 2 + size + 2:
            out.append(data[eol + 2:eol + 2 + size])
            return b"".join(out), False
        out.append(data[eol + 2:eol + 2 + size])
        pos = eol + 2 + size + 2


def _parse(buf: bytes, r: Reply, head: bool, eof: bool) -> None:
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = buf[:end].decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/\d\.\d (\d{3}) ?(.*)", lines[0])
        if not m:
            return
        # an interim 1xx (100 Continue, which the server may send unasked to probe a
        # half-closed client) precedes the real response: clients must skip it (RFC 9110 15.2)
        if 100 <= int(m.group(1)) < 200 and int(m.group(1)) != 101:
            buf = buf[end + 4:]
            continue
        break
    r.status, r.reason = int(m.group(1)), m.group(2)
    r.headers = [(k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:])]
    rest = buf[end + 4:]
    te = (r.header("transfer-encoding") or "").lower()
    cl = r.header("content-length")
    if head or r.status in (204, 304) or 100 <= r.status < 200:
        r.body, r.complete = b"", True
    elif "chunked" in te:
        r.body, r.complete = _dechunk(rest)
    elif cl is not None and cl.isdigit():
        r.body = rest[:int(cl)]
        r.complete = len(rest) >= int(cl)
    else:
        r.body, r.complete = rest, eof
    r.events = r.body.count(b"data:")


def exchange(host: str, port: int, data: bytes, deadline: float, *, src: str | None = None,
             head: bool = False, shut_wr: bool = False, disconnect_after: int | None = None,
             send_pieces: list | None = None, shut_wr_after: float | None = None) -> Reply:
    """Sends data (or send_pieces: [(bytes, delay_s)]) and reads one response, writing and
    reading at once (a server may answer 413 before the body is sent). shut_wr: half-close
    right after sending; shut_wr_after=S: half-close only if nothing came back S seconds after
    sending (a server waiting for bytes that will never come then sees EOF instead of a slow
    client; a server that answers a complete request is not confused by an early EOF). Stops at the end of
    the response's framing, at EOF, or after disconnect_after SSE events (then resets)."""
    r = Reply()
    t_end = time.monotonic() + deadline
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if src:
            s.bind((src, 0))
        s.settimeout(min(deadline, 5.0))
        s.connect((host, port))
    except OSError as e:
        r.error = f"connect: {e}"
        return r
    s.setblocking(False)
    pieces = list(send_pieces) if send_pieces else [(data, 0.0)]
    out, next_send = b"", time.monotonic()
    buf, eof, writing = b"", False, True
    t_sent = None
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    try:
        while True:
            now = time.monotonic()
            if now >= t_end:
                r.hang = True
                break
            if writing and not out and pieces and now >= next_send:
                chunk, delay = pieces.pop(0)
                out, next_send = chunk, now + delay
            if writing and not out and not pieces:
                writing = False
                t_sent = now
                if shut_wr:
                    half_close(s)
            if (shut_wr_after is not None and not writing and t_sent is not None and not buf
                    and now - t_sent >= shut_wr_after):
                shut_wr_after = None
                half_close(s)
            want = selectors.EVENT_READ | (selectors.EVENT_WRITE if writing and out else 0)
            sel.modify(s, want)
            wait = t_end - now
            if writing and not out and pieces:
                wait = min(wait, max(0.0, next_send - now))
            for _key, ev in sel.select(min(wait, 0.5)):
                if ev & selectors.EVENT_WRITE and out:
                    try:
                        n = s.send(out[:65536])
                        out = out[n:]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        writing, out, pieces = False, b"", []   # peer closed or reset: read on
                if ev & selectors.EVENT_READ:
                    try:
                        d = s.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        d = None
                    except OSError as e:
                        r.error = f"recv: {e}"
                        eof = True
                        d = b""
                    if d == b"":
                        eof = True
                    elif d:
                        buf += d
            _parse(buf, r, head, eof)
            if r.complete or eof:
                break
            if disconnect_after is not None and r.status == 200 and r.events >= disconnect_after:
                r.left_early = True
                break
    finally:
        sel.close()
        if r.left_early or r.hang:
            sc.abort_connection(s)
        else:
            s.close()
    r.raw = buf
    return r


def half_close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def http_bytes(method: str, path: str, body: bytes | None = None, headers: list | None = None,
               *, host: str | None = "127.0.0.1", ctype: str | None = "application/json",
               cl: str | None = "auto", version: str = "HTTP/1.1", close: bool = True) -> bytes:
    h = [f"{method} {path} {version}"]
    if host is not None:
        h.append(f"Host: {host}")
    if body is not None and ctype is not None:
        h.append(f"Content-Type: {ctype}")
    if cl == "auto":
        if body is not None:
            h.append(f"Content-Length: {len(body)}")
    elif cl is not None:
        h.append(f"Content-Length: {cl}")
    if close:
        h.append("Connection: close")
    for k, v in headers or []:
        h.append(f"{k}: {v}")
    return ("\r\n".join(h) + "\r\n\r\n").encode("latin-1") + (body or b"")


# ---- hostile cases ------------------------------------------------------------------------

class Case:
    def __init__(self, desc: str, data: bytes = b"", ok=("clear_4xx",), mention=None, **kw):
        self.desc, self.data, self.ok, self.mention, self.kw = desc, data, set(ok), mention, kw


def _j(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _chat(model, content="Say hi.", **kw) -> dict:
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": content}], **kw}


def _cmpl(model, prompt="Say hi.", **kw) -> dict:
    return {"model": model, "max_tokens": 4, "prompt": prompt, **kw}


def _rand_text(rng: random.Random, n: int) -> str:
    alphabet = ("abcdefghij klmnop qrstuvwxyz ", "ÄÖÜßéèêçñ ", "абвгдежзийклмнопрст ", "日本語の文字列中文字符 ",
                "😀🚀🌍🎉🧪", "αβγδεζηθικλμ ", "0123456789.,;:!? ")
    out, have = [], 0
    while have < n:
        a = rng.choice(alphabet)
        w = "".join(rng.choices(a, k=rng.randint(3, 12)))
        out.append(w)
        have += len(w)
    return "".join(out)[:n]


def hostile_classes(model: str, ctx: int, max_body: int, n_vocab: int, seed: int) -> dict:
    """{class: [Case]} — deterministic for a seed."""
    C: dict[str, list[Case]] = {}

    def rng_for(name):
        return random.Random(seed * 1_000_003 + zlib.crc32(name.encode()))

    def post(path, body: bytes, **kw):
        return http_bytes("POST", path, body, **kw)

    EP = ("/v1/chat/completions", "/v1/completions")

    # malformed JSON
    rng = rng_for("malformed_json")
    good = [_j(_chat(model)), _j(_cmpl(model))]
    cases = []
    fixed = [b"", b"{", b"}", b"null", b"[]", b"123", b'"str"', b"{'model': 'x'}", b"{model: 1}",
             b'{"model": NaN}', b'{"model": Infinity}', b'{"a":1,}', b'{"a":1} trailing',
             b"\xef\xbb\xbf" + good[0], b'{"a": 1 /* c */}', b'{"a":\x001}', b"{{{{", b'{"a":tru}',
             b'{"model":"' + model.encode() + b'","messages":[{"role":"user","content":"x"}],}',
             b'{"a":"\\x41"}', b'{"a":"\\u12"}', b'{"a":01}', b'{"a":-}', b"\n\n\t ", b'{"a" "b"}']
    for i, b in enumerate(fixed):
        cases.append(Case(f"fixed {b[:40]!r}", post(EP[i % 2], b)))
    for i in range(15):
        g = good[i % 2]
        cut = rng.randint(1, len(g) - 1)
        cases.append(Case(f"truncated at {cut}", post(EP[i % 2], g[:cut])))
    for i in range(10):
        g = bytearray(good[i % 2])
        pos = rng.randrange(len(g))
        g[pos] = rng.choice(b"{}[]:,\"\\")
        try:
            json.loads(bytes(g))
            continue    # the flip happened to keep it valid
        except ValueError:
            pass
        cases.append(Case(f"byte {pos} flipped", post(EP[i % 2], bytes(g))))
    C["malformed_json"] = cases

    # invalid UTF-8 outside strings / inside strings
    bad_seqs = [b"\xff", b"\xfe", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf",
                b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xc3", b"\xe6\x97", b"\xf0\x9f\x98"]
    rng = rng_for("invalid_utf8_body")
    cases = []
    for i in range(24):
        seq = rng.choice(bad_seqs)
        g = _j(_chat(model)) if i % 2 == 0 else _j(_cmpl(model))
        pos = rng.choice([0, 1, len(g) - 1, g.find(b":") + 1, g.find(b",") + 1])
        cases.append(Case(f"{seq!r} at byte {pos}", post(EP[i % 2], g[:pos] + seq + g[pos:])))
    C["invalid_utf8_body"] = cases
    rng = rng_for("invalid_utf8_string")
    cases = []
    fields = ["content", "prompt", "model", "role", "stop", "system", "name", "unknown_field"]
    for i in range(30):
        seq = rng.choice(bad_seqs)
        field = fields[i % len(fields)]
        marker = "@@BAD@@"
        if field == "content":
            obj = _chat(model, "hello " + marker + " world")
        elif field == "prompt":
            obj = _cmpl(model, "hello " + marker)
        elif field == "model":
            obj = _chat(model)
            obj["model"] = model + marker
        elif field == "role":
            obj = _chat(model)
            obj["messages"][0]["role"] = "us" + marker + "er"
        elif field == "stop":
            obj = _cmpl(model, stop=["a" + marker])
        elif field == "system":
            obj = _chat(model)
            obj["messages"].insert(0, {"role": "system", "content": marker})
        elif field == "name":
            obj = _chat(model)
            obj["messages"][0]["name"] = marker
        else:
            obj = _chat(model, user=marker)
        path = EP[1] if field in ("prompt", "stop") else EP[0]
        body = _j(obj).replace(marker.encode(), seq)
        cases.append(Case(f"{seq!r} in {field}", post(path, body)))
    for esc in ("\\ud800", "\\udfff", "\\ud83d", "\\ud800\\u0041", "\\u0000", "\\udc00\\ud800"):
        obj = _chat(model, "x@@E@@y")
        body = _j(obj).replace(b"@@E@@", esc.encode())
        # a JSON-escaped lone surrogate is not a character; U+0000 is one (served is fine)
        cases.append(Case(f"escape {esc} in content", post(EP[0], body),
                          ok=("clear_4xx", "served") if esc == "\\u0000" else ("clear_4xx",)))
    C["invalid_utf8_string"] = cases

    # wrong field types and ranges (each names its field)
    rng = rng_for("wrong_types")
    bad_values = {
        "model": [1, None, [], {}, True, ""],
        "messages": ["hi", 1, {}, [], [1], [{"role": "user"}], [{"content": "x"}],
                     [{"role": "alien", "content": "x"}], [{"role": "user", "content": 5}],
                     [{"role": "user", "content": [{"type": "image_url"}]}]],
        "prompt": [1.5, {}, [], [-1], [n_vocab], [n_vocab + 10**6], [[1, 2]], [1.5], True, ["a", 1]],
        "max_tokens": ["10", -1, 0, 1.5, True, [], {}],
        "temperature": ["hot", -1, 3, 1e400, [], True],
        "top_p": [-0.1, 1.5, "x"], "top_k": [-5, 1.5, "x"], "min_p": [-1, 2, "x"],
        "presence_penalty": [-3, 3, "x"], "frequency_penalty": [-3, 3, "x"],
        "seed": ["x", 1.5, []], "n": [2, 0, -1, "1"],
        "stop": [1, [1], ["a", "b", "c", "d", "e"], {}, [""]],
        "stream": ["yes", 1, []], "stream_options": ["x", 1, {"include_usage": "x"}],
        "logprobs": ["x", 21, -1], "top_logprobs": [21, -1, "x"],
    }
    cases = []
    for field, vals in bad_values.items():
        for v in vals:
            chat_only = field in ("messages", "top_logprobs")
            use_chat = chat_only or (field != "prompt" and rng.random() < 0.5)
            obj = _chat(model) if use_chat else _cmpl(model)
            if field == "top_logprobs":
                obj["logprobs"] = True
            if field == "logprobs" and use_chat and v in (21, -1):
                obj["logprobs"] = v
            obj[field] = v
            body = _j(obj)
            if v == 1e400:       # json.dumps writes Infinity (not JSON); send the overflowing literal
                body = body.replace(b"Infinity", b"1e400")
            desc = f"{'chat' if use_chat else 'completions'} {field}={json.dumps(v)[:40]}"
            cases.append(Case(desc, post(EP[0] if use_chat else EP[1], body),
                              mention=[field, field.replace("_", " "), "overflow"] if field != "messages" else
                              ["messages", "message", "role", "content"]))
    C["wrong_types"] = cases

    # oversize body
    rng = rng_for("oversize_body")
    cases = []
    for i in range(20):
        size = max_body + 1 + rng.choice([0, 1, 100, max_body // 2, max_body, 3 * max_body])
        pad = "x" * (size - len(_j(_cmpl(model, ""))))
        body = _j(_cmpl(model, pad))
        mode = i % 4
        if mode == 0:      # honest Content-Length
            data = post(EP[1], body)
        elif mode == 1:    # chunked, no Content-Length
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[k:k + 65536]), body[k:k + 65536])
                              for k in range(0, len(body), 65536)) + b"0\r\n\r\n"
            data = http_bytes("POST", EP[1], None, [("Content-Type", "application/json"),
                                                    ("Transfer-Encoding", "chunked")]) + chunks
        elif mode == 2:    # chat
            body = _j(_chat(model, pad))
            data = post(EP[0], body)
        else:              # Content-Length only, body never sent in full (413 expected from the header)
            data = http_bytes("POST", EP[1], None, [("Content-Type", "application/json"),
                                                    ("Content-Length", str(size))]) + body[:1000]
        cases.append(Case(f"{['content-length', 'chunked', 'chat', 'header-only'][mode]} {size} bytes",
                          data, mention=["body", "large", "limit", "size"],
                          ok=("clear_4xx",), shut_wr_after=(HALF_CLOSE_AFTER if mode == 3 else None)))
    C["oversize_body"] = cases

    # oversize prompt (fits the body limit, too many tokens)
    rng = rng_for("oversize_prompt")
    cases = []
    for i in range(20):
        n_tok = rng.choice([ctx, ctx + 1, 2 * ctx, 10 * ctx, 100 * ctx])
        if i % 3 == 0:
            obj = _cmpl(model, sc.synthetic_ids(min(n_tok, max_body // 8), offset=i, n_vocab=n_vocab))
        else:
            text = _rand_text(rng, min(n_tok * 4, max_body // 4))
            obj = _cmpl(model, text) if i % 3 == 1 else _chat(model, text)
        body = _j(obj)
        if len(body) > max_body:
            continue
        cases.append(Case(f"{'ids' if i % 3 == 0 else 'text'} ~{n_tok} tokens, {len(body)} bytes",
                          post(EP[0] if "messages" in obj else EP[1], body),
                          mention=["token", "long", "context", "prompt"]))
    C["oversize_prompt"] = cases

    # huge max_tokens: clamped to the context (served) or refused by name
    cases = []
    for i, v in enumerate([10**6, 2**31 - 1, 2**31, 2**32, 2**32 + 1, 2**53, 2**63 - 1, 2**63, 2**64,
                           10**30, "1e308", ctx, ctx + 1, 10 * ctx]):
        for field in ("max_tokens", "max_completion_tokens"):
            obj = _chat(model) if (i + len(field)) % 2 else _cmpl(model)
            obj.pop("max_tokens")
            obj[field] = 0
            body = _j(obj).replace(b'"%s": 0' % field.encode(), b'"%s": %s' % (field.encode(), str(v).encode()))
            cases.append(Case(f"{field}={v}", post(EP[0] if "messages" in obj else EP[1], body),
                              ok=("served", "clear_4xx"),
                              mention=[field, "max_tokens", "integer", "number", "big", "overflow"]))
    C["huge_max_tokens"] = cases

    # unknown paths
    rng = rng_for("unknown_paths")
    paths = ["/", "/v1", "/v1/", "/v2/chat/completions", "/v1/chat/completions/", "//v1/models",
             "/V1/MODELS", "/health/", "/../../etc/passwd", "/v1/../health", "/%2e%2e/%2e%2e/etc/passwd",
             "/v1/embeddings", "/v1/engines", "/admin", "/metrics/x", "/health.json", "/v1/models/x",
             "/" + "a" * 2000, "/" + "b/" * 1000, "/%ff%fe", "/%", "/%zz", "*", "http://evil.com/health",
             "/v1/chat%2Fcompletions", "/favicon.ico", "/index.html", "/.env", "/server-status"]
    cases = []
    for p in paths:
        method = "POST" if "chat" in p or "completions" in p else "GET"
        body = _j(_chat(model)) if method == "POST" else None
        ok = ("clear_4xx", "unclear_4xx") if p in ("*", "/%", "/%zz") else ("clear_4xx",)
        if p in ("/v1/../health", "http://evil.com/health", "/v1/chat%2Fcompletions"):
            ok = ("clear_4xx", "served")    # normalised or absolute-form: answering /health is fine
        cases.append(Case(f"{method} {p[:60]}", http_bytes(method, p, body), ok=ok))
    C["unknown_paths"] = cases

    # unknown / wrong methods
    cases = []
    for m in ("PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO", "get", "post", "G" * 300, "PRI", "PROPFIND"):
        for p in ("/health", "/v1/chat/completions"):
            body = _j(_chat(model)) if p.startswith("/v1") else None
            ok = ("clear_4xx", "unclear_4xx") if m in ("G" * 300, "PRI") else ("clear_4xx",)
            if m == "OPTIONS":  # answered 204 with Allow (CORS preflight without an Origin)
                ok = ("clear_4xx", "served")
            cases.append(Case(f"{m[:20]} {p}", http_bytes(m, p, body), ok=ok))
    for p in ("/v1/chat/completions", "/v1/completions"):
        cases.append(Case(f"GET {p}", http_bytes("GET", p)))
    for p in ("/health", "/v1/models", "/metrics"):
        cases.append(Case(f"POST {p}", http_bytes("POST", p, _j(_chat(model)))))
    cases.append(Case("CONNECT evil.com:443", b"CONNECT evil.com:443 HTTP/1.1\r\nHost: evil.com:443\r\n\r\n",
                      ok=("clear_4xx", "unclear_4xx", "closed")))
    C["unknown_methods"] = cases

    # %00 (and raw NUL) in the path
    cases = []
    for p in ("/health%00", "/health%00.json", "/%00", "/v1/models%00", "/metrics%00/x", "/v1/models%00%00",
              "/%00health", "/health?x=%00", "/health%2500"):
        cases.append(Case(f"GET {p}", http_bytes("GET", p),
                          ok=("clear_4xx", "served") if "?" in p or "%25" in p else ("clear_4xx",)))
    for p in ("/v1/chat/completions%00", "/v1/completions%00.php", "/v1/chat/completions%00/../x"):
        body = _j(_chat(model)) if "chat" in p else _j(_cmpl(model))
        cases.append(Case(f"POST {p}", http_bytes("POST", p, body)))
    for p in (b"/health\x00", b"/\x00/health", b"/v1/models\x00x"):
        cases.append(Case(f"raw NUL {p!r}", b"GET " + p + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                          ok=("clear_4xx", "unclear_4xx", "closed")))
    C["nul_in_path"] = cases

    # garbage request lines
    rng = rng_for("garbage_request_line")
    garbage = [b"\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"HELLO\r\n\r\n", b"GET /health\r\n\r\n",
               b"SSH-2.0-OpenSSH_9.6\r\n", b"GET /health HTTP/1.1 extra\r\nHost: x\r\n\r\n",
               b" GET /health HTTP/1.1\r\nHost: x\r\n\r\n", b"GET  /health  HTTP/1.1\r\nHost: x\r\n\r\n",
               b"GET /health HTTP/1.1\nHost: x\n\n", b"GET /health HTTP/1.1\r\nHost x\r\n\r\n",
               b"GET /health HTTP/1.1\r\n: empty\r\nHost: x\r\n\r\n", b"GET /health HTTP/1.1\r\n folded\r\n\r\n",
               b"\x00\x00\x00\x00\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"A" * 70000,
               b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", b"\x16\x03\x01", b"GET /health HTTP/1.1\r\n"]
    # 505 (HTTP Version Not Supported) is a fine answer to HTTP/9.9 and PRI (HTTP/2 preface);
    # bare-LF line ends may be accepted (RFC 9112 2.2), so may lenient header parsing
    lenient = (b"GET /health HTTP/1.1\nHost: x\n\n", b"GET /health HTTP/1.1\r\n: empty\r\nHost: x\r\n\r\n",
               b"GET  /health  HTTP/1.1\r\nHost: x\r\n\r\n")
    cases = [Case(f"{g[:32]!r} ({len(g)} bytes)", g, ok=("clear_4xx", "unclear_4xx", "closed")
                  + (("other_status",) if b"HTTP/9.9" in g or g.startswith(b"PRI") else ())
                  + (("served",) if g in lenient else ()), shut_wr_after=HALF_CLOSE_AFTER)
             for g in garbage]
    for i in range(16):
        n = rng.choice([1, 16, 100, 1000, 10000])
        g = bytes(rng.randrange(256) for _ in range(n)) + (b"\r\n\r\n" if i % 2 else b"")
        cases.append(Case(f"{n} random bytes{' + CRLFCRLF' if i % 2 else ''}", g,
                          ok=("clear_4xx", "unclear_4xx", "closed"), shut_wr_after=HALF_CLOSE_AFTER))
    C["garbage_request_line"] = cases

    # TLS ClientHello
    rng = rng_for("tls_client_hello")
    cases = []
    for i in range(20):
        sni = f"host{rng.randint(0, 999)}.example".encode()
        ext_sni = b"\x00\x00" + (len(sni) + 5).to_bytes(2, "big") + (len(sni) + 3).to_bytes(2, "big") + \
            b"\x00" + len(sni).to_bytes(2, "big") + sni
        ext_ver = b"\x00\x2b\x00\x05\x04\x03\x04\x03\x03"
        exts = ext_sni + ext_ver
        suites = b"\x13\x01\x13\x02\x13\x03\xc0\x2f\xc0\x2b"
        hello = b"\x03\x03" + bytes(rng.randrange(256) for _ in range(32)) + b"\x20" + \
            bytes(rng.randrange(256) for _ in range(32)) + len(suites).to_bytes(2, "big") + suites + \
            b"\x01\x00" + len(exts).to_bytes(2, "big") + exts
        hs = b"\x01" + len(hello).to_bytes(3, "big") + hello
        rec = b"\x16\x03\x01" + len(hs).to_bytes(2, "big") + hs
        if i % 4 == 3:   # truncated: then half-closed (else it is a slow client, phase "slow")
            rec = rec[:rng.randint(1, len(rec) - 1)]
        cases.append(Case(f"ClientHello SNI {sni.decode()}{' truncated' if i % 4 == 3 else ''} ({len(rec)} bytes)",
                          rec, ok=("clear_4xx", "unclear_4xx", "closed"), shut_wr_after=(None if i % 4 == 1 else HALF_CLOSE_AFTER)))
    C["tls_client_hello"] = cases

    # Content-Length: invalid values, duplicates, Transfer-Encoding conflicts
    body = _j(_chat(model))
    framing_ok = ("clear_4xx", "unclear_4xx", "closed")
    cases = []
    for v in ("abc", "-1", "1e3", "18446744073709551616", "99999999999999999999999", " ", "0x10", "+5",
              f" {len(body)}", f"{len(body)} ", f"{len(body)}abc", f"0{len(body)}", ""):
        ok = ("clear_4xx", "unclear_4xx", "closed")
        if v.strip() == str(len(body)) or v == f"0{len(body)}":
            ok = ("clear_4xx", "unclear_4xx", "served")   # whitespace/leading zero: same number
        cases.append(Case(f"Content-Length {v!r}", http_bytes("POST", EP[0], body, cl=v), ok=ok, shut_wr_after=HALF_CLOSE_AFTER))
    cases.append(Case("Content-Length shorter than body", http_bytes("POST", EP[0], body, cl=str(len(body) - 5)),
                      ok=("clear_4xx",), shut_wr_after=HALF_CLOSE_AFTER))
    cases.append(Case("Content-Length longer than body, then half-close",
                      http_bytes("POST", EP[0], body, cl=str(len(body) + 50)), ok=framing_ok, shut_wr_after=HALF_CLOSE_AFTER))
    cases.append(Case("Content-Length 0 on POST", http_bytes("POST", EP[0], body, cl="0"), shut_wr_after=HALF_CLOSE_AFTER))
    C["invalid_content_length"] = cases
    cases = []
    n = len(body)
    for a, b in ((n, n), (n, n + 10), (n + 10, n), (0, n), (n, 0)):
        hdr = http_bytes("POST", EP[0], None, [("Content-Type", "application/json"),
                                               ("Content-Length", str(a)), ("Content-Length", str(b))])
        ok = ("clear_4xx", "unclear_4xx", "served") if a == b else ("clear_4xx", "unclear_4xx", "closed")
        cases.append(Case(f"Content-Length {a} and {b}", hdr + body, ok=ok, shut_wr_after=HALF_CLOSE_AFTER))
    for v in (f"{n}, {n}", f"{n},{n + 10}", f"{n}, 0"):
        hdr = http_bytes("POST", EP[0], None, [("Content-Type", "application/json"), ("Content-Length", v)])
        ok = ("clear_4xx", "unclear_4xx", "closed") + (("served",) if v == f"{n}, {n}" else ())
        cases.append(Case(f"Content-Length {v!r}", hdr + body, ok=ok, shut_wr_after=HALF_CLOSE_AFTER))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    for hs, data, ok in (
            ([("Content-Length", str(n)), ("Transfer-Encoding", "chunked")], chunked, framing_ok + ("served",)),
            ([("Transfer-Encoding", "chunked"), ("Content-Length", "4")], chunked, framing_ok + ("served",)),
            ([("Transfer-Encoding", "chunked")], chunked, ("served",)),
            ([("Transfer-Encoding", "gzip, chunked")], chunked, framing_ok),
            ([("Transfer-Encoding", "identity")], body, framing_ok + ("served",)),
            ([("Transfer-Encoding", " chunked")], chunked, framing_ok + ("served",)),
            ([("Transfer-Encoding", "chunked")], b"zz\r\n" + body + b"\r\n0\r\n\r\n", framing_ok),
            ([("Transfer-Encoding", "chunked")], b"ffffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n", framing_ok),
            ([("Transfer-Encoding", "chunked")], b"-5\r\n" + body + b"\r\n0\r\n\r\n", framing_ok),
            ([("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")], chunked, framing_ok + ("served",))):
        hdr = http_bytes("POST", EP[0], None, [("Content-Type", "application/json"), *hs], cl=None)
        cases.append(Case("; ".join(f"{k}: {v}" for k, v in hs) + ("" if data is chunked or data is body
                                                                    else f" body {data[:12]!r}"),
                          hdr + data, ok=ok, shut_wr_after=HALF_CLOSE_AFTER))
    C["duplicate_content_length"] = cases

    # Content-Type missing or odd: the JSON body is still JSON
    cases = []
    for ct in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz",
               "application/json; charset=latin1", "application/json; charset=utf-16", "application/xml",
               "\x01\x02garbage", "a" * 5000, "application/json, text/plain", "", "*/*", "APPLICATION/JSON"):
        for ep, obj in ((EP[0], _chat(model)), (EP[1], _cmpl(model))):
            data = http_bytes("POST", ep, _j(obj), ctype=None,
                              headers=[] if ct is None else [("Content-Type", ct)])
            cases.append(Case(f"{ep} Content-Type {ct!r:.40}", data, ok=("served", "clear_4xx")))
    C["content_type"] = cases

    # hostile Host / Origin
    cases = []
    for host in ("evil.com", "", "127.0.0.1:1", "a" * 4000, "[::1", "evil.com:80@127.0.0.1", "localhost\x00evil",
                 "127.0.0.1.nip.io"):
        for path, body in (("/v1/models", None), (EP[0], _j(_chat(model)))):
            data = http_bytes("POST" if body else "GET", path, body, host=host)
            cases.append(Case(f"Host {host[:30]!r} {path}", data, ok=("served", "clear_4xx", "unclear_4xx"),
                              origin=None))
    for path, body in (("/v1/models", None), (EP[0], _j(_chat(model)))):
        cases.append(Case(f"no Host (HTTP/1.1) {path}", http_bytes("POST" if body else "GET", path, body, host=None),
                          ok=("clear_4xx", "unclear_4xx", "served")))
        cases.append(Case(f"two Hosts {path}", http_bytes("POST" if body else "GET", path, body,
                                                          headers=[("Host", "evil.com")]),
                          ok=("clear_4xx", "unclear_4xx", "served")))
    for origin in ("http://evil.com", "null", "https://attacker.example", "file://", "http://127.0.0.1.evil.com"):
        for path, body in (("/v1/models", None), (EP[0], _j(_chat(model)))):
            data = http_bytes("POST" if body else "GET", path, body, headers=[("Origin", origin)])
            cases.append(Case(f"Origin {origin!r} {path}", data, ok=("served", "clear_4xx"), origin=origin))
            if body:
                pre = http_bytes("OPTIONS", path, None, headers=[("Origin", origin),
                                                                 ("Access-Control-Request-Method", "POST")])
                cases.append(Case(f"preflight Origin {origin!r}", pre, ok=("served", "clear_4xx"), origin=origin))
    C["hostile_host_origin"] = cases

    # half-closed clients: the request, then shutdown(SHUT_WR); the answer should still come
    cases = []
    for i in range(20):
        kind = i % 5
        if kind == 0:
            data = http_bytes("GET", "/health")
        elif kind == 1:
            data = http_bytes("GET", "/v1/models")
        elif kind == 2:
            data = http_bytes("POST", EP[0], _j(_chat(model, f"half close {i}")))
        elif kind == 3:
            data = http_bytes("POST", EP[1], _j(_cmpl(model, f"half close {i}", max_tokens=16)))
        else:
            data = http_bytes("POST", EP[1], _j(_cmpl(model, f"half close {i}", stream=True, max_tokens=16)))
        cases.append(Case(f"{data.split(b' ')[0].decode()} {data.split(b' ')[1].decode()} then SHUT_WR",
                          data, ok=("served",), shut_wr=True))
    C["half_closed_client"] = cases

    # clients that leave mid-stream
    rng = rng_for("disconnect_mid_stream")
    cases = []
    for i in range(20):
        obj = (_cmpl(model, f"leave {i}") if i % 2 else _chat(model, f"leave {i}"))
        obj.update(stream=True, max_tokens=ctx // 2, ignore_eos=True)
        data = http_bytes("POST", EP[1] if i % 2 else EP[0], _j(obj))
        cases.append(Case(f"leave after {i % 5 + 1} events", data, ok=("served",),
                          disconnect_after=i % 5 + 1))
    C["disconnect_mid_stream"] = cases

    # HEAD
    cases = []
    for p in ("/health", "/v1/models", "/metrics", "/v1/chat/completions", "/v1/completions", "/nope", "/"):
        for ver in ("HTTP/1.1", "HTTP/1.0"):
            cases.append(Case(f"HEAD {p} {ver}", http_bytes("HEAD", p, version=ver), ok=("served", "clear_4xx"),
                              head=True))
    C["head_requests"] = cases

    # deeply nested JSON
    cases = []
    for depth in (10, 100, 1000, 2048, 2049, 5000, 20000, 100000, 400000):
        for where in ("content", "unknown", "top"):
            if where == "content":
                body = _j(_chat(model, "@@N@@"))
                body = body.replace(b'"@@N@@"', b"[" * depth + b"]" * depth)
            elif where == "unknown":
                body = _j(_chat(model, x="@@N@@")).replace(b'"@@N@@"', b'{"a":' * depth + b"1" + b"}" * depth)
            else:
                body = b"[" * depth + b"]" * depth
            if len(body) > max_body:
                continue
            # a deep value in an unknown field may be parsed and ignored (served) or refused
            cases.append(Case(f"depth {depth} in {where}", http_bytes("POST", EP[0], body),
                              ok=("clear_4xx", "served") if where == "unknown" else ("clear_4xx",)))
    C["deep_nesting"] = cases

    # many headers / huge header
    cases = []
    for n in (50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000):
        hs = [(f"X-H{k}", "v" * 8) for k in range(n)]
        for path, body in (("/health", None), (EP[0], _j(_chat(model)))):
            cases.append(Case(f"{n} headers {path}", http_bytes("POST" if body else "GET", path, body, hs),
                              ok=("served", "clear_4xx", "unclear_4xx")))
    C["many_headers"] = cases
    cases = []
    for size in (4096, 8192, 16384, 32768, 65536, 131072, 1 << 20, 4 << 20):
        for name in ("X-Big", "Cookie", "Authorization"):
            path, body = (EP[0], _j(_chat(model))) if name == "Authorization" else ("/health", None)
            val = ("Bearer " if name == "Authorization" else "") + "z" * size
            cases.append(Case(f"{name} of {size} bytes", http_bytes("POST" if body else "GET", path, body,
                                                                    [(name, val)]),
                              ok=("served", "clear_4xx", "unclear_4xx")))
    C["huge_header"] = cases
    return C


def classify(r: Reply, case: Case) -> str:
    if r.hang:
        return "hang"
    if r.status is None:
        return "closed"
    head = case.kw.get("head")
    if 200 <= r.status < 300:
        if head or (r.status == 204 and r.complete):
            return "served"
        ct = (r.header("content-type") or "").lower()
        if r.left_early:
            return "served" if r.events else "other_status"
        if not r.complete:
            return "other_status"
        if "event-stream" in ct:
            return "served" if b"data: [DONE]" in r.body and b'"error"' not in r.body else "other_status"
        if "json" in ct:
            try:
                js = json.loads(r.body)
            except ValueError:
                return "other_status"
            return "other_status" if isinstance(js, dict) and "error" in js else "served"
        return "served" if r.body else "other_status"
    if 400 <= r.status < 500:
        if head:
            return "clear_4xx" if "json" in (r.header("content-type") or "") else "unclear_4xx"
        try:
            js = json.loads(r.body)
            err = js["error"]
            msg = err["message"]
            if not (isinstance(msg, str) and msg.strip()):
                return "unclear_4xx"
        except (ValueError, KeyError, TypeError):
            return "unclear_4xx"
        if case.mention:
            text = " ".join(str(err.get(k) or "") for k in ("message", "param", "code")).lower()
            if not any(m.lower() in text for m in case.mention):
                return "unclear_4xx"
        return "clear_4xx"
    return "other_status"


# ---- server helpers -----------------------------------------------------------------------

def server_help(binary: str) -> str:
    try:
        p = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
        return p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired):
        return ""


def server_limits(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    parts = line.split()
                    out["max_open_files"] = {"soft": parts[3], "hard": parts[4]}
    except OSError:
        pass
    return out


def proc_status(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
                elif k == "Threads":
                    out[k] = int(v)
    except (OSError, ValueError):
        pass
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        out["fds"] = len(fds)
        socks = 0
        for fd in fds:
            try:
                socks += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        out["sockets"] = socks
    except OSError:
        pass
    return out


def arg_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


class Bench:
    def __init__(self, args):
        self.args = args
        self.extra = split_server_args(args.server_arg)
        self.help = server_help(args.binary)
        self.argvs: list[list[str]] = []
        self.servers: list[sc.ServerProcess] = []
        self.logs = tempfile.mkdtemp(prefix="kipp-robust-")
        self.model_name: str | None = None
        self.ctx = 512
        self.n_vocab = 151936
        self.max_body = int(arg_value(self.extra, "--max-body") or 1048576)

    def supports(self, flag: str) -> bool:
        return re.search(r"(^|\s)" + re.escape(flag) + r"\b", self.help) is not None

    def start(self, name: str, more: list[str] = ()) -> sc.ServerProcess:
        argv = ["--backend", self.args.backend, "--threads", str(self.args.threads), *more, *self.extra]
        srv = sc.ServerProcess(self.args.binary, self.args.model, argv, log_dir=self.logs,
                               name=f"{name}-{len(self.argvs)}")
        self.servers.append(srv)
        srv.start(timeout=300)
        self.argvs.append(srv.argv)
        self.model_name = srv.served_model()
        m = KV_POOL_RE.search(open(srv.stderr_path, errors="replace").read())
        srv.kv_log = (int(m.group(1)), int(m.group(2))) if m else None
        ctx_m = re.search(r"context (\d+)", open(srv.stderr_path, errors="replace").read())
        if ctx_m:
            self.ctx = int(ctx_m.group(1))
        return srv

    def health(self, srv) -> int | None:
        try:
            return srv.request("GET", "/health", timeout=10)[0]
        except OSError:
            return None


# ---- phase 1: hostile requests ------------------------------------------------------------

def phase_hostile(b: Bench) -> dict:
    a = b.args
    srv = b.start("hostile")
    classes = hostile_classes(b.model_name, b.ctx, b.max_body, b.n_vocab, a.seed)
    if a.hostile_max_cases:
        classes = {k: v[:a.hostile_max_cases] for k, v in classes.items()}
    res = {"deadline_s": a.deadline, "seed": a.seed, "server_argv": srv.argv, "classes": {}, "restarts": 0}
    totals = collections.Counter()
    n_bad_total = 0
    t0 = time.monotonic()
    for cname, cases in classes.items():
        counts = collections.Counter()
        bad_examples, n_bad, acao = [], 0, 0
        t_class = time.monotonic()
        m0 = srv.metrics() if cname == "disconnect_mid_stream" else None
        for case in cases:
            kw = {k: v for k, v in case.kw.items() if k in ("head", "shut_wr", "disconnect_after", "shut_wr_after")}
            r = exchange(srv.connect_host, srv.port, case.data, a.deadline, **kw)
            out = "crash" if not srv.alive() else classify(r, case)
            counts[out] += 1
            if case.kw.get("origin") and r.header("access-control-allow-origin") in (case.kw["origin"], "*"):
                acao += 1
            if out not in case.ok:
                n_bad += 1
                if len(bad_examples) < a.examples:
                    bad_examples.append({"case": case.desc, "outcome": out, "status": r.status,
                                         "acceptable": sorted(case.ok),
                                         "body": r.body[:200].decode("utf-8", "replace"), "error": r.error})
            if out == "crash":
                res["restarts"] += 1
                res.setdefault("crash_stderr", []).append(srv.stderr_tail(1500))
                srv.stop()
                srv = b.start("hostile")
        c = {"cases": len(cases), "outcomes": {k: counts.get(k, 0) for k in OUTCOMES},
             "unacceptable": n_bad, "examples": bad_examples, "elapsed_s": round(time.monotonic() - t_class, 2)}
        if cname == "hostile_host_origin":
            c["access_control_allow_origin_granted"] = acao
        if m0 is not None:   # did the server drop the abandoned sequences?
            idle, m = None, m0
            for _ in range(100):
                m = srv.metrics()
                idle = m.get("kipp_running_sequences") == 0 and m.get("kipp_queue_depth") == 0
                if idle:
                    break
                time.sleep(0.1)
            c["cancelled_delta"] = m.get("kipp_requests_cancelled_total") - m0.get("kipp_requests_cancelled_total")
            c["idle_after"] = idle
        c["health_after"] = b.health(srv)
        c["alive_after"] = srv.alive()
        if c["health_after"] != 200:
            res.setdefault("unhealthy_after", []).append(cname)
        res["classes"][cname] = c
        totals.update(counts)
        n_bad_total += n_bad
        print(f"  hostile {cname:26s} {len(cases):3d} cases  "
              + " ".join(f"{k}={v}" for k, v in counts.items()) + f"  unacceptable={n_bad}"
              + f"  health={c['health_after']}", file=sys.stderr)
        if not srv.alive():
            res["restarts"] += 1
            srv.stop()
            srv = b.start("hostile")
    res["elapsed_s"] = round(time.monotonic() - t0, 2)
    res["cases"] = sum(len(v) for v in classes.values())
    res["totals"] = {k: totals.get(k, 0) for k in OUTCOMES}
    res["unacceptable_total"] = n_bad_total
    res["server_exit_code"] = srv.stop()
    res["targets"] = {"crash": 0, "hang": 0, "health_after_every_class": 200}
    res["met"] = (totals.get("crash", 0) == 0 and totals.get("hang", 0) == 0
                  and not res.get("unhealthy_after"))
    return res


# ---- phase 2: peak RSS under maximal prompts ------------------------------------------------

def kv_pool_bytes(b: Bench, srv) -> tuple[int | None, str]:
    """Bytes of the paged KV pool: blocks (from /metrics) x tokens per block (log line) x bytes
    per token (GGUF shape, f32 K and V)."""
    try:
        meta = benchlib.read_gguf_header(b.args.model)["metadata"]
        arch = meta.get("general.architecture", "qwen3")
        n_layer = int(meta[f"{arch}.block_count"])
        n_kv = int(meta[f"{arch}.attention.head_count_kv"])
        n_head = int(meta[f"{arch}.attention.head_count"])
        head_dim = int(meta.get(f"{arch}.attention.key_length") or meta[f"{arch}.embedding_length"] // n_head)
        blocks = int(srv.metrics().get("kipp_kv_blocks_total"))
    except (KeyError, ValueError, OSError, sc.ServerError) as e:
        return None, f"not derivable: {type(e).__name__}: {e}"
    bs = srv.kv_log[1] if srv.kv_log else 16
    per_token = 2 * n_layer * n_kv * head_dim * 4
    return blocks * bs * per_token, (
        f"kipp_kv_blocks_total {blocks} (/metrics) x {bs} tokens/block "
        f"({'server log line' if srv.kv_log else 'assumed'}) x {per_token} bytes/token "
        f"(2 x {n_layer} layers x {n_kv} KV heads x {head_dim} head_dim x 4 bytes f32, GGUF header)")


def big_prompt_body(model: str, rng: random.Random, max_body: int, chat: bool) -> bytes:
    """A request body of a little under max_body bytes of varied multi-byte text."""
    target = max_body - 256
    text = _rand_text(rng, target // 2)
    obj = _chat(model, text, max_tokens=1) if chat else _cmpl(model, text, max_tokens=1)
    body = _j(obj)
    while len(body) < target:       # grow to size (characters are 1-4 bytes)
        text += _rand_text(rng, max(16, (target - len(body)) // 3))
        obj["messages" if chat else "prompt"] = ([{"role": "user", "content": text}] if chat else text)
        body = _j(obj)
    while len(body) > target:
        text = text[:-max(1, (len(body) - target) // 4)]
        obj["messages" if chat else "prompt"] = ([{"role": "user", "content": text}] if chat else text)
        body = _j(obj)
    return body


def phase_rss(b: Bench) -> dict:
    a = b.args
    srv = b.start("rss")
    res = {"server_argv": srv.argv, "clients": a.rss_clients, "max_body": b.max_body}
    try:
        st, _, _ = srv.post_json("/v1/completions", _cmpl(b.model_name, "warm up", max_tokens=2), timeout=60)
        res["warmup_status"] = st
        time.sleep(0.5)
        idle = proc_status(srv.pid)
        res["idle_rss_bytes"], res["idle_hwm_bytes"] = idle.get("VmRSS"), idle.get("VmHWM")
        kv, how = kv_pool_bytes(b, srv)
        res["kv_pool_bytes"], res["kv_pool_derivation"] = kv, how
        rng = random.Random(a.seed)
        bodies = [big_prompt_body(b.model_name, rng, b.max_body, chat=(i % 2 == 0)) for i in range(a.rss_clients)]
        res["body_bytes"] = {"min": min(map(len, bodies)), "max": max(map(len, bodies))}
        statuses, errors = collections.Counter(), []
        lock = threading.Lock()
        go = threading.Barrier(a.rss_clients + 1)

        def client(i):
            path = "/v1/chat/completions" if i % 2 == 0 else "/v1/completions"
            go.wait()
            try:
                stt, _, raw = srv.request("POST", path, bodies[i], timeout=a.rss_timeout)
                with lock:
                    statuses[stt] += 1
                    if stt != 200 and len(errors) < 3:
                        errors.append(raw[:200].decode("utf-8", "replace"))
            except OSError as e:
                with lock:
                    statuses[f"error:{type(e).__name__}"] += 1

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.rss_clients)]
        for t in threads:
            t.start()
        sampler = sc.RSSSampler(srv.pid, 0.01).start()
        t0 = time.monotonic()
        go.wait()
        for t in threads:
            t.join()
        res["wall_s"] = round(time.monotonic() - t0, 3)
        time.sleep(0.3)
        samples = sampler.stop()
        after = proc_status(srv.pid)
        res["statuses"] = {str(k): v for k, v in statuses.items()}
        res["error_examples"] = errors
        res["samples"] = len(samples)
        res["peak_sampled_rss_bytes"] = max((v for _, v in samples), default=None)
        res["hwm_after_bytes"] = after.get("VmHWM")
        res["rss_after_bytes"] = after.get("VmRSS")
        # VmHWM catches a peak between two 10 ms samples; it only grows, so it is the peak
        # unless the start itself was higher (then the load added nothing above it)
        peak = max(x for x in (res["peak_sampled_rss_bytes"], res["hwm_after_bytes"]) if x is not None)
        res["peak_rss_bytes"] = peak
        res["alive_after"] = srv.alive()
        res["health_after"] = b.health(srv)
        idle_b = res["idle_rss_bytes"]
        limit = RSS_FACTOR * idle_b + kv if (idle_b and kv is not None) else None
        res["target"] = {"formula": f"peak_rss <= {RSS_FACTOR} x idle_rss + kv_pool_bytes",
                         "limit_bytes": int(limit) if limit else None,
                         "note": "the KV pool is touched at start, so idle_rss already includes it"}
        res["peak_over_idle"] = peak / idle_b if idle_b else None
        res["met"] = bool(limit) and peak <= limit and res["alive_after"]
        res["sample_trace"] = [[round(t, 3), v] for t, v in samples[::max(1, len(samples) // 200)]]
    finally:
        res["server_exit_code"] = srv.stop()
    return res


# ---- phase 3: slow clients ------------------------------------------------------------------

SLOW_HEADER = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"X-Slow: " + b"s" * 4096)


def normal_requests(srv, model: str, m: int, budget_s: float, timeout: float) -> dict:
    lat, errs, ex = [], collections.Counter(), []
    t_stop = time.monotonic() + budget_s
    done = 0
    for i in range(m):
        if time.monotonic() > t_stop:
            break
        body = _j(_chat(model, f"Short question {i}: what is {i} plus {i}?", max_tokens=4, temperature=0))
        t0 = time.perf_counter()
        try:
            st, _, raw = srv.request("POST", "/v1/chat/completions", body, timeout=timeout)
            dt = time.perf_counter() - t0
            if st == 200:
                lat.append(dt)
            else:
                errs[f"status_{st}"] += 1
                if len(ex) < 3:
                    ex.append(raw[:200].decode("utf-8", "replace"))
        except (OSError, http.client.HTTPException) as e:
            errs[type(e).__name__] += 1
            if len(ex) < 3:
                ex.append(f"{type(e).__name__}: {e}")
        done += 1
    return {"attempted": done, "requested": m, "ok": len(lat), "errors": dict(errs), "error_examples": ex,
            "latency_s": sc.dist(lat)}


class SlowClients:
    """K connections that trickle a request header one byte every interval seconds."""

    def __init__(self, host: str, port: int, k: int, interval: float, same_ip: bool,
                 first: int = 1):
        self.host, self.port, self.k, self.interval, self.same_ip = host, port, k, interval, same_ip
        self.first = first  # bytes sent at once on connecting (then one per interval)
        self.socks: list[socket.socket | None] = []
        self.pos: list[int] = []
        self.state: list[str] = []        # open / closed / answered / connect_failed
        self.connect_errors = collections.Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sources = set()

    def open(self):
        for i in range(self.k):
            src = "127.0.0.1" if self.same_ip else f"127.0.0.{2 + i % 253}"
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((src, 0))
                s.settimeout(3)
                s.connect((self.host, self.port))
                s.setblocking(False)
                s.send(SLOW_HEADER[:self.first])
                self.socks.append(s)
                self.pos.append(self.first)
                self.state.append("open")
                self.sources.add(src)
            except OSError as e:
                self.connect_errors[errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__] += 1
                s.close()
                self.socks.append(None)
                self.pos.append(0)
                self.state.append("connect_failed")
        self._thread.start()
        return self

    def _poll_one(self, i):
        s = self.socks[i]
        if s is None or self.state[i] != "open":
            return
        try:
            d = s.recv(4096, socket.MSG_PEEK)
            self.state[i] = "answered" if d else "closed"
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.state[i] = "closed"

    def _run(self):
        while not self._stop.wait(self.interval):
            with self._lock:
                for i, s in enumerate(self.socks):
                    self._poll_one(i)
                    if s is None or self.state[i] != "open":
                        continue
                    try:
                        s.send(SLOW_HEADER[self.pos[i] % len(SLOW_HEADER):][:1])
                        self.pos[i] += 1
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        self.state[i] = "closed"

    def census(self, server_pid: int | None = None, base_sockets: int = 0) -> dict:
        with self._lock:
            for i in range(len(self.socks)):
                self._poll_one(i)
            c = collections.Counter(self.state)
        out = {k: c.get(k, 0) for k in ("open", "closed", "answered", "connect_failed")}
        if server_pid:
            # "open" is the client's view: a connection may sit in the kernel's accept queue,
            # never accepted; the server's own socket fds (less those it had idle) say how
            # many it accepted and holds
            st = proc_status(server_pid)
            out["server_held"] = max(0, st.get("sockets", 0) - base_sockets)
            out["server_threads"] = st.get("Threads")
            out["server_fds"] = st.get("fds")
        return out

    def close(self):
        self._stop.set()
        self._thread.join()
        for s in self.socks:
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass


def phase_slow(b: Bench) -> dict:
    a = b.args
    srv = b.start("slow")
    res = {"server_argv": srv.argv, "slow_clients": a.slow_clients, "interval_s": a.slow_interval,
           "normal_requests": a.slow_requests, "server_limits": server_limits(srv.pid),
           "harness_nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
           "source_addresses": "127.0.0.1" if a.slow_same_ip else "127.0.0.2-127.0.0.254 (bind before connect)",
           "slow_mode": a.slow_mode,
           "server_connection_flags": {f: arg_value(srv.argv, f) for f in
                                       ("--max-connections", "--max-connections-per-ip", "--read-timeout")}}
    slow = None
    try:
        normal_requests(srv, b.model_name, 5, 30, a.deadline)      # warm-up
        res["baseline"] = normal_requests(srv, b.model_name, a.slow_requests, a.slow_budget, a.deadline)
        base_status = proc_status(srv.pid)
        t0 = time.monotonic()
        first = 1 if a.slow_mode == "trickle" else SLOW_HEADER.index(b"X-Slow: ")
        slow = SlowClients(srv.connect_host, srv.port, a.slow_clients, a.slow_interval, a.slow_same_ip,
                           first).open()
        res["open_s"] = round(time.monotonic() - t0, 2)
        res["distinct_source_addresses"] = len(slow.sources)
        res["connect_errors"] = dict(slow.connect_errors)
        time.sleep(min(3.0, a.slow_interval * 1.5))
        peak = {"fds": 0, "Threads": 0}
        st = proc_status(srv.pid)
        for k in peak:
            peak[k] = max(peak[k], st.get(k, 0))
        res["census_after_open"] = slow.census(srv.pid, base_status.get("sockets", 0))
        res["with_slow"] = normal_requests(srv, b.model_name, a.slow_requests, a.slow_budget, a.deadline)
        st = proc_status(srv.pid)
        for k in peak:
            peak[k] = max(peak[k], st.get(k, 0))
        res["census_after_normal"] = slow.census(srv.pid, base_status.get("sockets", 0))
        rest = a.slow_hold - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
        res["census_at_end"] = slow.census(srv.pid, base_status.get("sockets", 0))
        res["held_s"] = round(time.monotonic() - t0, 1)
        res["server_fds_threads"] = {"before": {k: base_status.get(k) for k in ("fds", "sockets", "Threads")},
                                     "peak_seen": peak}
        res["alive_after"] = srv.alive()
    finally:
        if slow:
            slow.close()
        res["health_after_close"] = b.health(srv) if srv.alive() else None
        res["server_exit_code"] = srv.stop()
    p_without = res["baseline"]["latency_s"].get("p99")
    p_with = res["with_slow"]["latency_s"].get("p99")
    # a request not attempted (the --slow-budget ran out on timeouts) counts as failed
    failed = (res["with_slow"]["requested"] - res["with_slow"]["ok"])
    res["normal_not_attempted_with_slow"] = res["with_slow"]["requested"] - res["with_slow"]["attempted"]
    res["p99_without_s"], res["p99_with_s"] = p_without, p_with
    res["p99_ratio"] = p_with / p_without if (p_with and p_without) else None
    res["normal_failed_with_slow"] = failed
    res["target"] = {"p99_ratio_max": SLOW_P99_RATIO, "normal_failed": 0}
    res["met"] = res["p99_ratio"] is not None and res["p99_ratio"] <= SLOW_P99_RATIO and failed == 0
    return res


# ---- phase 4: drain on SIGTERM --------------------------------------------------------------

class Stream:
    def __init__(self, i):
        self.i = i
        self.status = None
        self.tokens = 0
        self.done = False
        self.finish_reason = None
        self.error_event = None
        self.exception = None
        self.t_done = None
        self.usage = None

    def outcome(self, t_sig: float | None, max_tokens: int) -> str:
        if self.done and self.finish_reason and not self.error_event:
            if t_sig is None or self.t_done < t_sig:
                return "finished_before_sigterm"
            # ignore_eos: a normal end is all max_tokens tokens (usage says how many)
            n = (self.usage or {}).get("completion_tokens")
            return "completed" if n is None or n == max_tokens else "ended_early"
        if self.error_event:
            return "error"
        if self.status is not None and self.status != 200:
            return "error"
        return "cut"


def read_stream(srv, body: dict, st: Stream, timeout: float):
    try:
        conn = http.client.HTTPConnection(srv.connect_host, srv.port, timeout=timeout)
        conn.request("POST", "/v1/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json", "Accept": "text/event-stream"})
        r = conn.getresponse()
        st.status = r.status
        if r.status != 200:
            st.error_event = r.read()[:200].decode("utf-8", "replace")
            return
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            p = line[5:].strip()
            if p == b"[DONE]":
                st.done = True
                st.t_done = time.monotonic()
                break
            js = json.loads(p)
            if "error" in js:
                st.error_event = json.dumps(js)[:200]
                continue
            if js.get("usage"):
                st.usage = js["usage"]
            for ch in js.get("choices") or []:
                if ch.get("text"):
                    st.tokens += 1
                if ch.get("finish_reason"):
                    st.finish_reason = ch["finish_reason"]
        conn.close()
    except (OSError, http.client.HTTPException, ValueError) as e:
        st.exception = f"{type(e).__name__}: {e}"


def phase_drain(b: Bench) -> dict:
    a = b.args
    more, supported = [], b.supports("--shutdown-timeout")
    given = arg_value(b.extra, "--shutdown-timeout")
    if supported and given is None:
        more = ["--shutdown-timeout", str(a.shutdown_timeout)]
    srv = b.start("drain", more)
    timeout_used = given or (str(a.shutdown_timeout) if supported else None)
    res = {"server_argv": srv.argv, "streams": a.drain_streams,
           "shutdown_timeout_flag_supported": supported, "shutdown_timeout_s": timeout_used}
    max_tokens = max(8, min(a.drain_max_tokens, b.ctx - 16))
    res["max_tokens"] = max_tokens
    streams = [Stream(i) for i in range(a.drain_streams)]
    threads = []
    for s in streams:
        body = {"model": b.model_name, "prompt": f"Drain test stream {s.i}:", "max_tokens": max_tokens,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}
        t = threading.Thread(target=read_stream, args=(srv, body, s, 120), daemon=True)
        t.start()
        threads.append(t)
    t_wait = time.monotonic() + 60
    while time.monotonic() < t_wait and not all(s.tokens >= a.drain_min_tokens or s.done or s.exception
                                                for s in streams):
        time.sleep(0.005)
    res["tokens_at_sigterm"] = [s.tokens for s in streams]
    t_sig = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    # a new request after SIGTERM: refused (connection error / 503) is the polite answer
    time.sleep(0.05)
    try:
        st_new = srv.request("POST", "/v1/completions",
                             _j(_cmpl(b.model_name, "late", max_tokens=2)), timeout=10)[0]
        res["new_request_after_sigterm"] = st_new
    except (OSError, http.client.HTTPException) as e:
        res["new_request_after_sigterm"] = f"{type(e).__name__}"
    limit = float(timeout_used) + 30 if timeout_used else 60
    killed = False
    try:
        srv.proc.wait(limit)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait()
        killed = True
    t_exit = time.monotonic()
    for t in threads:
        t.join(30)
    res["sigterm_to_exit_s"] = round(t_exit - t_sig, 3)
    res["exit_code"] = srv.proc.returncode
    res["killed_after_s"] = limit if killed else None
    per = []
    for s in streams:
        per.append({"outcome": s.outcome(t_sig, max_tokens), "status": s.status, "text_chunks": s.tokens,
                     "finish_reason": s.finish_reason, "done": s.done,
                     "completion_tokens": (s.usage or {}).get("completion_tokens"),
                     "error": s.error_event or s.exception,
                     "t_done_after_sigterm_s": round(s.t_done - t_sig, 3) if s.t_done else None})
    res["per_stream"] = per
    c = collections.Counter(p["outcome"] for p in per)
    res["outcomes"] = {k: c.get(k, 0) for k in ("completed", "ended_early", "cut", "error",
                                                "finished_before_sigterm")}
    res["server_stderr_tail"] = srv.stderr_tail(800)
    within = timeout_used is None or res["sigterm_to_exit_s"] <= float(timeout_used) + 2
    res["target"] = {"all_completed_normally": True, "exit_within_s": float(timeout_used) + 2 if timeout_used else None,
                     "exit_code": 0}
    res["met"] = (res["outcomes"]["completed"] == len(streams) and within and res["exit_code"] == 0
                  and not killed)
    if c.get("finished_before_sigterm"):
        res["warning"] = "some streams finished before SIGTERM: raise --drain-max-tokens"
    return res


# ---- main -----------------------------------------------------------------------------------

def write_atomic(rec: dict, output: str) -> None:
    d = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(output) + ".", dir=d)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)     # mkstemp makes 0600; a record is an ordinary file
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(rec, indent=1, default=float) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def raise_nofile(want: int) -> dict:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new = soft
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ValueError, OSError):
            new = soft
    return {"before": soft, "after": new, "hard": hard, "wanted": want}


def fmt_mb(x):
    return "n/a" if x is None else f"{x / 1e6:.1f} MB"


def summary(rec: dict) -> str:
    lines = [f"server-robustness {rec['model'].get('name') or rec['model']['path']}  "
             f"commit {rec['git']['commit'][:10]}{' (dirty)' if rec['git']['dirty'] else ''}"]
    ph = rec["phases"]
    if "hostile" in ph:
        h = ph["hostile"]
        lines.append(f"hostile: {h['cases']} cases in {len(h['classes'])} classes; "
                     + ", ".join(f"{k} {v}" for k, v in h["totals"].items() if v)
                     + f"; unacceptable {h['unacceptable_total']}; crash {h['totals']['crash']}, "
                     f"hang {h['totals']['hang']} -> met={h['met']}")
        for cn, c in h["classes"].items():
            if c["unacceptable"]:
                e = c["examples"][0] if c["examples"] else {}
                lines.append(f"    {cn}: {c['unacceptable']}/{c['cases']} unacceptable, e.g. "
                             f"{e.get('case', '')[:50]!r} -> {e.get('outcome')} ({e.get('status')})")
    if "rss" in ph:
        r = ph["rss"]
        lines.append(f"rss: idle {fmt_mb(r.get('idle_rss_bytes'))}, kv pool {fmt_mb(r.get('kv_pool_bytes'))}, "
                     f"peak {fmt_mb(r.get('peak_rss_bytes'))} under {r['clients']} x ~{r['max_body']} B bodies "
                     f"(statuses {r.get('statuses')}); limit {fmt_mb(r['target'].get('limit_bytes'))} -> met={r['met']}")
    if "slow" in ph:
        s = ph["slow"]
        pw, pwo = s.get("p99_with_s"), s.get("p99_without_s")
        def cen(c):
            c = c or {}
            return (f"client-side open {c.get('open')}, server holds {c.get('server_held')}, "
                    f"closed {c.get('closed')}, answered {c.get('answered')}, connect failed {c.get('connect_failed')}")
        lines.append(f"slow: {s['slow_clients']} slowloris connections (after open: {cen(s.get('census_after_open'))}; "
                     f"at end: {cen(s.get('census_at_end'))}); normal p99 "
                     f"{'n/a' if pwo is None else f'{pwo * 1000:.1f} ms'} -> "
                     f"{'n/a' if pw is None else f'{pw * 1000:.1f} ms'} "
                     f"(ratio {s['p99_ratio'] if s['p99_ratio'] is None else round(s['p99_ratio'], 2)}), "
                     f"failed {s['normal_failed_with_slow']}/{s['normal_requests']} -> met={s['met']}")
    if "drain" in ph:
        d = ph["drain"]
        lines.append(f"drain: {d['streams']} streams, SIGTERM -> exit {d['sigterm_to_exit_s']} s, "
                     f"exit code {d['exit_code']}, --shutdown-timeout {d['shutdown_timeout_s']}; "
                     f"{d['outcomes']} -> met={d['met']}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/robustness_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    pos = benchlib.positive
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap.add_argument("--binary", default="build/kipp-server", help="server binary (default build/kipp-server)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"GGUF model (default {DEFAULT_MODEL})")
    ap.add_argument("--output", metavar="FILE", help="write the JSON record here, atomically (default: stdout)")
    ap.add_argument("--phases", default=",".join(PHASES), help="comma list of " + ",".join(PHASES) + " (default all)")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="extra kipp-server argument (repeatable), e.g. --server-arg=--max-connections=2000")
    ap.add_argument("--threads", type=pos("--threads"), default=usable, help=f"server threads (default {usable})")
    ap.add_argument("--backend", default="cpu", help="server backend (default cpu)")
    ap.add_argument("--seed", type=int, default=20261201, help="case generator seed")
    ap.add_argument("--deadline", type=float, default=10.0, help="seconds before a request counts as a hang (10)")
    ap.add_argument("--hostile-max-cases", type=pos("--hostile-max-cases", 0), default=0,
                    help="at most this many cases per class (0 = all; for smoke runs)")
    ap.add_argument("--examples", type=pos("--examples", 0), default=5, help="unacceptable examples kept per class")
    ap.add_argument("--rss-clients", type=pos("--rss-clients"), default=32, help="concurrent maximal prompts (32)")
    ap.add_argument("--rss-timeout", type=float, default=240.0, help="seconds one maximal request may take")
    ap.add_argument("--slow-clients", type=pos("--slow-clients"), default=1000, help="slowloris connections (1000)")
    ap.add_argument("--slow-interval", type=float, default=2.0, help="seconds between a slow client's bytes (2)")
    ap.add_argument("--slow-requests", type=pos("--slow-requests"), default=100,
                    help="normal requests measured without and with the slow clients (100)")
    ap.add_argument("--slow-budget", type=float, default=60.0, help="at most this many seconds per normal run")
    ap.add_argument("--slow-hold", type=float, default=20.0, help="keep the slow clients at least this long (s)")
    ap.add_argument("--slow-same-ip", action="store_true", help="all slow clients from 127.0.0.1")
    ap.add_argument("--slow-mode", choices=("headers", "trickle"), default="headers",
                    help="headers (default): the request line and the real headers at once, then one "
                         "byte of an endless header per interval (only a read deadline stops it); "
                         "trickle: one byte per interval from the first")
    ap.add_argument("--drain-streams", type=pos("--drain-streams"), default=8, help="streams at SIGTERM (8)")
    ap.add_argument("--drain-max-tokens", type=pos("--drain-max-tokens"), default=480,
                    help="max_tokens of each drain stream (capped at context - 16)")
    ap.add_argument("--drain-min-tokens", type=pos("--drain-min-tokens"), default=3,
                    help="text chunks each stream must have before SIGTERM (3)")
    ap.add_argument("--shutdown-timeout", type=pos("--shutdown-timeout"), default=30,
                    help="--shutdown-timeout passed to the server when it supports the flag (30)")
    ap.add_argument("--no-hash", action="store_true", help="skip the model sha256 (trials only)")
    args = ap.parse_args()
    args.quick = False
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not phases or any(p not in PHASES for p in phases):
        ap.error(f"--phases takes a comma list of {','.join(PHASES)}")
    if not os.path.isfile(args.model):
        ap.error(f"--model {args.model}: no such file")
    if not (os.path.isfile(args.binary) and os.access(args.binary, os.X_OK)):
        ap.error(f"--binary {args.binary}: not an executable file (build it: make server)")
    if args.output and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        ap.error(f"--output {args.output}: its directory does not exist")

    nofile = raise_nofile(args.slow_clients + 512 if "slow" in phases else 1024)
    hdr = record_header(args, "bench/robustness_bench.py")
    prov = hdr["provenance"]
    rec = {"bench": "server-robustness",
           "git": {"commit": prov["commit"], "dirty": prov["dirty"]},
           "machine": {"hardware": prov["hardware"], "os": prov["os"], "python": prov["python"],
                       "compiler": prov["compiler"]},
           "server_argv": None, "model": hdr["model"], "harness": hdr["harness"], "argv": hdr["argv"],
           "date_utc": prov["date_utc"], "binary": prov.get("binary"), "build": hdr["build"],
           "load_average": hdr["load_average"], "warnings": hdr["warnings"],
           "harness_nofile_limit": nofile, "phases_run": phases, "phases": {}}
    if nofile["after"] < args.slow_clients + 64 and "slow" in phases:
        rec["warnings"].append(f"open-file limit {nofile['after']} is below --slow-clients + 64")
    b = Bench(args)
    rec["server_flags_supported"] = {f: b.supports(f) for f in (
        "--max-connections", "--max-connections-per-ip", "--read-timeout", "--shutdown-timeout")}
    runners = {"hostile": phase_hostile, "rss": phase_rss, "slow": phase_slow, "drain": phase_drain}
    try:
        for p in phases:
            t0 = time.monotonic()
            print(f"phase {p} ...", file=sys.stderr)
            rec["phases"][p] = runners[p](b)
            rec["phases"][p]["phase_wall_s"] = round(time.monotonic() - t0, 1)
    finally:
        for srv in b.servers:     # a phase that failed half-way leaves no server behind
            srv.kill()
    rec["server_argv"] = b.argvs[0] if b.argvs else None
    rec["server_argvs_by_phase"] = {p: rec["phases"][p].get("server_argv") for p in phases}
    rec["met"] = {p: rec["phases"][p]["met"] for p in phases}
    rec["load_average"]["after"] = list(os.getloadavg())
    text = summary(rec)
    print(text, file=sys.stderr)
    rec["summary"] = text
    if args.output:
        write_atomic(rec, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(json.dumps(rec, indent=1, default=float))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (sc.ServerError, OSError) as e:
        print(f"robustness_bench: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
