"""robustness_cases.py — the hostile-request half of bench/robustness_bench.py: raw HTTP
over a socket (requests sent byte for byte, replies parsed by hand, interim 1xx skipped,
half-close and hang detection), the seeded hostile cases in 22 classes, and the
classification of each reply (clear_4xx, unclear_4xx, served, other_status, closed, hang).
The phases, the server process and the record stay in robustness_bench.py."""

from __future__ import annotations

import json
import random
import re
import selectors
import socket
import time
import zlib

from bench import server_common as sc

HALF_CLOSE_AFTER = 1.5   # framing cases: half-close when the server still waits after this
CLOSE_WAIT = 2.0         # framing cases that require a close after the answer: wait this long for it


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
        self.closed_after = None   # expect_close: the server closed after its answer (None: not asked)

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
             send_pieces: list | None = None, shut_wr_after: float | None = None,
             expect_close: float | None = None) -> Reply:
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
    t_close = None
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    try:
        while True:
            now = time.monotonic()
            if now >= t_end:
                if t_close is not None and r.complete:
                    r.closed_after = False    # complete answer, no close within expect_close
                    break
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
            if eof:
                r.closed_after = r.complete
                break
            if r.complete:
                # expect_close: the answer is complete; the server must now close (EOF within
                # expect_close seconds), and send nothing more
                if expect_close is None:
                    break
                if t_close is None:
                    t_close = now + expect_close
                if now >= t_close:
                    r.closed_after = False
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
        "seed": ["x", 1.5, []], "n": [17, 0, -1, "1"],     # 1..16 are served (docs/server.md)
        "stop": [1, [1], ["s"] * 17, {}, [""]],            # up to 16 strings are served
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
        if p in ("/", "/index.html"):
            ok = ("served",)                # the web chat page (docs/server.md, "Web chat page")
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
    # RFC 9112: Content-Length with Transfer-Encoding may be smuggling: refused (400) and the
    # connection closed after the answer (6.1: "the server MUST close the connection"); a
    # transfer coding the server does not know (gzip, identity — gone since RFC 9112 —,
    # chunked twice) is a 501 or 400, then close (the body's end is unknowable); a broken chunk
    # size is a 400 or a close. These cases send no "Connection: close", so a connection the
    # server keeps open after such an answer is visible ("kept_open").
    strict = ("clear_4xx", "unclear_4xx")
    coding = strict + ("rejected_501",)
    for hs, data, ok, close in (
            ([("Content-Length", str(n)), ("Transfer-Encoding", "chunked")], chunked, strict, True),
            ([("Transfer-Encoding", "chunked"), ("Content-Length", "4")], chunked, strict, True),
            ([("Transfer-Encoding", "chunked")], chunked, ("served",), False),
            ([("Transfer-Encoding", "gzip, chunked")], chunked, coding, True),
            ([("Transfer-Encoding", "identity")], body, coding, True),
            ([("Transfer-Encoding", " chunked")], chunked, framing_ok + ("served",), False),
            ([("Transfer-Encoding", "chunked")], b"zz\r\n" + body + b"\r\n0\r\n\r\n", framing_ok, True),
            ([("Transfer-Encoding", "chunked")], b"ffffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n", framing_ok, True),
            ([("Transfer-Encoding", "chunked")], b"-5\r\n" + body + b"\r\n0\r\n\r\n", framing_ok, True),
            ([("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")], chunked, coding, True)):
        hdr = http_bytes("POST", EP[0], None, [("Content-Type", "application/json"), *hs], cl=None,
                         close=not close)
        cases.append(Case("; ".join(f"{k}: {v}" for k, v in hs) + ("" if data is chunked or data is body
                                                                    else f" body {data[:12]!r}"),
                          hdr + data, ok=ok, shut_wr_after=HALF_CLOSE_AFTER,
                          **({"expect_close": CLOSE_WAIT} if close else {})))
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
    out = _classify(r, case)
    # a case that requires the connection closed after an error answer (RFC 9112 framing)
    if (case.kw.get("expect_close") and out in ("clear_4xx", "unclear_4xx", "rejected_501")
            and r.closed_after is False):
        return "kept_open"
    return out


def _classify(r: Reply, case: Case) -> str:
    if r.hang:
        return "hang"
    if r.status is None:
        return "closed"
    if r.status == 501:
        return "rejected_501"   # Not Implemented: a transfer coding the server does not know
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


# ---- the attack phase (bench/robustness_attack.py): cases, expectations, classification ----
#
# Outcomes of one attack case, beyond the hostile phase's (clear_4xx, unclear_4xx, served,
# other_status, closed, hang, crash):
#   constrained_valid             finish stop/tool_calls and the reply satisfies the constraint
#   cut_length                    finish_reason length, the text so far a plausible prefix of a
#                                 constrained reply
#   cut_length_unconstrained      finish_reason length, and the text so far could not start any
#                                 constrained reply (the constraint was not applied; reported,
#                                 not one of the brief's four, because a length cut hides it)
#   failed_visibly                an error status or an error event
#   unconstrained_as_constrained  finish stop/tool_calls and the reply violates the constraint
#   args_valid / args_invalid     (tool calls cut by max_tokens) every returned call's
#                                 arguments json.loads / some do not
#   rejected_closed               (framing) an error answer, then the server closed the
#                                 connection; nothing pipelined after it was served
#   rejected_open                 (framing) an error answer, but the connection stayed open
#   served_trailing               (framing) the request pipelined after a bad one was answered
#   sent_100 / no_100             (interim responses) an unsolicited HTTP/1.1 100 came or not
#   consistent / inconsistent     (accounting) usage.prompt_tokens equals the metric's rise
#   call_ok / call_wrong          (tool outputs) a declared call came back with its arguments
#                                 as valid JSON and no tag text in content; an undeclared one
#                                 did not come back as a call
ATTACK_OUTCOMES = ("clear_4xx", "unclear_4xx", "served", "other_status", "closed", "hang", "crash",
                   "constrained_valid", "cut_length", "cut_length_unconstrained", "failed_visibly",
                   "unconstrained_as_constrained", "args_valid", "args_invalid", "rejected_closed",
                   "rejected_open", "served_trailing", "sent_100", "no_100", "consistent", "inconsistent", "call_ok", "call_wrong")

# per class: what it does and the outcomes acceptable for its cases (a case may narrow them)
ATTACK_EXPECT = {
    "hostile_grammar": {"what": "repetition-bomb grammars and a bomb regex pattern (max_tokens 10), "
                                "one abandoned by its client mid-request",
                        "ok": ("clear_4xx", "served")},
    "thinking_constraints": {"what": "json_schema response_format and tool_choice required with "
                                     "thinking on, on models that do not open with <think>",
                             "ok": ("constrained_valid", "cut_length", "failed_visibly")},
    "n_parallel": {"what": "n 16 and two n 8 streams on --parallel 8", "ok": ("served",)},
    "nonreading_stream": {"what": "a streaming n 16 x max_tokens 300 x top_logprobs 20 client with "
                                  "SO_RCVBUF 4096 that never reads", "ok": ("served", "closed")},
    "nonstream_big": {"what": "non-streamed n 16 x max_tokens 1000 x top_logprobs 20",
                      "ok": ("served", "clear_4xx")},
    "http_framing": {"what": "Content-Length + chunked with a pipelined request, malformed and "
                             "unknown Transfer-Encoding, two Host headers, a 100 KB chunk "
                             "extension, unsolicited 100 Continue",
                     "ok": ("rejected_closed",)},
    "passthrough_rules": {"what": "grammars of chains of more than 4096 pass-through rules",
                          "ok": ("clear_4xx",)},
    "tool_definitions": {"what": "bad tool definitions and a tool_choice naming an undeclared "
                                 "function", "ok": ("clear_4xx",)},
    "tool_outputs": {"what": "the model made to call an undeclared function, and to write "
                             "</tool_call> inside a string argument (streamed and not)",
                     "ok": ("call_ok",)},
    "cut_tool_calls": {"what": "tool_choice required cut by max_tokens 60 (kipp-tiny, 12 seeds)",
                       "ok": ("args_valid",)},
    "n_accounting": {"what": "n 16: usage.prompt_tokens against the rise of kipp_prompt_tokens_total",
                     "ok": ("consistent",)},
    "idle_control": {"what": "control: no hostile client, the plain probe alone for --attack-control-s "
                             "(the measurement's floor; no target)", "ok": ("served",)},
}

EOS_QWEN3 = 151645        # <|im_end|>: a logit bias towards it makes an unconstrained reply stop
PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                 "required": ["name", "age"], "additionalProperties": False}
WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def schema_valid(v, s) -> bool:
    """v against the JSON Schema subset the attack cases use (type, enum, const, properties,
    required, additionalProperties, items, min/maxItems, min/maxLength, pattern, minimum,
    maximum). A keyword outside the subset is not checked."""
    if s is True or s == {}:
        return True
    if s is False:
        return False
    t = s.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        def is_t(name):
            if name == "integer":
                return isinstance(v, int) and not isinstance(v, bool)
            if name == "number":
                return isinstance(v, (int, float)) and not isinstance(v, bool)
            py = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}.get(name)
            return py is None or type(v) is py
        if not any(is_t(x) for x in types):
            return False
    if "enum" in s and v not in s["enum"]:
        return False
    if "const" in s and v != s["const"]:
        return False
    if isinstance(v, dict):
        props = s.get("properties") or {}
        if any(k not in v for k in s.get("required") or []):
            return False
        for k, x in v.items():
            if k in props:
                if not schema_valid(x, props[k]):
                    return False
            elif s.get("additionalProperties") is False:
                return False
            elif isinstance(s.get("additionalProperties"), dict) and not schema_valid(x, s["additionalProperties"]):
                return False
    if isinstance(v, list):
        if "items" in s and not all(schema_valid(x, s["items"]) for x in v):
            return False
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", len(v)):
            return False
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", len(v)):
            return False
        if "pattern" in s and re.search(s["pattern"], v) is None:
            return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if ("minimum" in s and v < s["minimum"]) or ("maximum" in s and v > s["maximum"]):
            return False
    return True


def _tool_call_valid(call, tools) -> bool:
    try:
        fn = call["function"]
        name = fn["name"]
        args = fn["arguments"]
        decl = {t["function"]["name"]: t["function"] for t in tools}
        if name not in decl:
            return False
        val = json.loads(args) if isinstance(args, str) else args
    except (KeyError, TypeError, ValueError):
        return False
    return isinstance(val, dict) and schema_valid(val, decl[name].get("parameters") or {"type": "object"})


def constraint_outcome(status: int | None, js, kind: str, schema=None, tools=None) -> str:
    """One constrained chat reply (non-streamed JSON js, status its HTTP status): kind "schema"
    (response_format json_schema: the content must be JSON valid against schema) or "tool"
    (tool_choice required: one or more tool_calls, each declared, arguments valid)."""
    if status is None:
        return "closed"
    if status != 200 or not isinstance(js, dict) or "error" in js:
        return "failed_visibly"
    try:
        ch = js["choices"][0]
        msg = ch.get("message") or {}
        finish = ch.get("finish_reason")
    except (KeyError, IndexError, TypeError):
        return "failed_visibly"
    content = msg.get("content")
    calls = msg.get("tool_calls") or []
    if kind == "schema":
        try:
            ok = schema_valid(json.loads(content), schema)
        except (TypeError, ValueError):
            ok = False
        prefix_ok = isinstance(content, str) and (content.strip() == "" or content.lstrip()[:1] in "{[\"-0123456789tfn")
        if schema and schema.get("type") == "object" and isinstance(content, str) and content.strip():
            prefix_ok = content.lstrip().startswith("{")
    else:
        ok = bool(calls) and all(_tool_call_valid(c, tools or []) for c in calls) and not (content or "").strip()
        text = (content or "").strip()
        prefix_ok = text == "" or text.startswith("<tool_call>")
    if finish == "length":
        return "cut_length" if (ok or prefix_ok) else "cut_length_unconstrained"
    if finish in ("stop", "tool_calls"):
        return "constrained_valid" if ok else "unconstrained_as_constrained"
    return "failed_visibly"


def tool_args_outcome(status: int | None, js) -> str:
    """Tool calls cut by max_tokens: every returned call's arguments must json.loads."""
    if status is None:
        return "closed"
    if status != 200 or not isinstance(js, dict) or "error" in js:
        return "failed_visibly"
    try:
        calls = js["choices"][0]["message"].get("tool_calls") or []
    except (KeyError, IndexError, TypeError, AttributeError):
        return "failed_visibly"
    for c in calls:
        try:
            a = c["function"]["arguments"]
            json.loads(a) if isinstance(a, str) else None
        except (KeyError, TypeError, ValueError):
            return "args_invalid"
    return "args_valid"


def _dechunk_end(data: bytes):
    """(body, end offset after the last chunk and trailers) of a chunked body, or (body, None)."""
    out, pos = [], 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            return b"".join(out), None
        try:
            size = int(data[pos:eol].split(b";")[0].strip() or b"x", 16)
        except ValueError:
            return b"".join(out), None
        if size == 0:
            end = data.find(b"\r\n\r\n", eol)   # (empty) trailer section
            return b"".join(out), (None if end < 0 else end + 4)
        if len(data) < eol + 2 + size + 2:
            return b"".join(out), None
        out.append(data[eol + 2:eol + 2 + size])
        pos = eol + 2 + size + 2


def parse_responses(raw: bytes, eof: bool = True) -> list[dict]:
    """Every response in raw (pipelined ones too), interim 1xx included, in order: each
    {"status", "headers" [(k, v)], "body", "complete"}. Stops at the first incomplete one."""
    out, pos = [], 0
    while pos < len(raw):
        end = raw.find(b"\r\n\r\n", pos)
        if end < 0:
            break
        lines = raw[pos:end].decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/\d\.\d (\d{3})", lines[0])
        if not m:
            break
        st = int(m.group(1))
        hs = [(k.strip().lower(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:])]
        h = dict(hs)
        rest = raw[end + 4:]
        if 100 <= st < 200 or st in (204, 304):
            out.append({"status": st, "headers": hs, "body": b"", "complete": True})
            pos = end + 4
            continue
        if "chunked" in h.get("transfer-encoding", "").lower():
            body, e = _dechunk_end(rest)
            out.append({"status": st, "headers": hs, "body": body, "complete": e is not None})
            if e is None:
                break
            pos = end + 4 + e
        elif h.get("content-length", "").isdigit():
            n = int(h["content-length"])
            out.append({"status": st, "headers": hs, "body": rest[:n], "complete": len(rest) >= n})
            pos = end + 4 + n
        else:
            out.append({"status": st, "headers": hs, "body": rest, "complete": eof})
            break
    return out


def framing_outcome(raw: bytes, eof: bool, hang: bool, expect: str) -> str:
    """One framing case (raw: all bytes the server sent, eof: it closed the connection, hang:
    nothing final came before the deadline). expect "reject": the first request is bad (its
    answer must be an error, then close; a pipelined request after it must not be served);
    "serve": a good request (and a good pipelined one): every final answer 2xx; "no_100": only
    whether an interim 100 came (sent_100 / no_100)."""
    rs = parse_responses(raw, eof)
    interim = [r for r in rs if 100 <= r["status"] < 200]
    final = [r for r in rs if r["status"] >= 200]
    if expect == "no_100":
        if hang and not final:
            return "hang"
        return "sent_100" if interim else "no_100"
    if not final:
        return "hang" if hang else "closed"
    if expect == "serve":
        return "served" if all(200 <= r["status"] < 300 for r in final) else "other_status"
    first = final[0]["status"]
    if 200 <= first < 300:
        return "served"
    if len(final) > 1:
        return "served_trailing"
    return "rejected_closed" if eof else "rejected_open"


def passthrough_chain(n: int) -> str:
    """A grammar of n rules, each only naming the next: root ::= r1, r1 ::= r2, ... "x"."""
    lines = ["root ::= r1"] + [f"r{i} ::= r{i + 1}" for i in range(1, n - 1)] + [f"r{n - 1} ::= \"x\""]
    return "\n".join(lines) + "\n"


def attack_grammar_cases(model: str) -> list[Case]:
    """Class hostile_grammar (completions, so thinking cannot hide the grammar)."""
    bomb2 = 'root ::= (("x"{0,1000}){0,1000})'
    bomb3 = 'root ::= ((("x"{0,1000}){0,1000}){0,1000})'
    pat = {"type": "string", "pattern": "^((x{0,1000000}){0,1000000})$"}
    cs = [Case("grammar ((\"x\"{0,1000}){0,1000}), max_tokens 10",
               _j(_cmpl(model, "x", max_tokens=10, grammar=bomb2)), ok=("clear_4xx", "served")),
          Case("grammar nested three deep, max_tokens 10",
               _j(_cmpl(model, "x", max_tokens=10, grammar=bomb3)), ok=("clear_4xx", "served")),
          Case("json_schema pattern ^((x{0,1000000}){0,1000000})$, max_tokens 10",
               _j(_cmpl(model, "x", max_tokens=10, response_format={
                   "type": "json_schema", "json_schema": {"name": "bomb", "schema": pat}})),
               ok=("clear_4xx", "served")),
          Case("grammar ((\"x\"{0,1000}){0,1000}), chat, thinking off",
               _j(_chat(model, "x", max_tokens=10, grammar=bomb2,
                        chat_template_kwargs={"enable_thinking": False})), ok=("clear_4xx", "served"),
               path="/v1/chat/completions"),
          Case("grammar ((\"x\"{0,1000}){0,1000}), client leaves after 1 s",
               _j(_cmpl(model, "x", max_tokens=10, grammar=bomb2)), ok=("closed", "clear_4xx", "served"),
               leave_after=1.0),
          Case("grammar of 5000 pass-through rules", _j(_cmpl(model, "x", max_tokens=10, grammar=passthrough_chain(5000))),
               ok=("clear_4xx",), mention=["4096", "limit", "rules", "too many", "deep"])]
    for c in cs:
        c.kw.setdefault("path", "/v1/completions")
    return cs


def passthrough_cases(model: str, max_body: int) -> list[Case]:
    cs = []
    # a chain of n rules needs n - 1 expansions below root: 4097 rules are exactly at the
    # 4,096 limit (served correctly, or refused: never the old 500); longer ones are over it
    for n in (4097, 5000, 10000, 20000, 40000):
        body = _j(_cmpl(model, "x", max_tokens=4, grammar=passthrough_chain(n)))
        if len(body) <= max_body:
            cs.append(Case(f"chain of {n} pass-through rules ({len(body)} bytes)", body,
                           ok=("clear_4xx", "served") if n == 4097 else ("clear_4xx",),
                           mention=["4096", "limit", "rules", "too many", "deep"], path="/v1/completions"))
    cs.append(Case("chain of 4000 pass-through rules (under the limit)",
                   _j(_cmpl(model, "x", max_tokens=4, grammar=passthrough_chain(4000))),
                   ok=("clear_4xx", "served"), path="/v1/completions"))
    return cs


def _forced_text_grammar(text: str) -> str:
    """A grammar whose only sentence is text (a GBNF literal)."""
    return "root ::= " + json.dumps(text)


# what the model is made to write (the grammar extension under tool_choice auto), and what a
# client must get back: (description, text, the call expected or None for no call)
TOOL_OUTPUT_CASES = [
    ("a call to an undeclared function (rm_rf)",
     '<tool_call>\n{"name": "rm_rf", "arguments": {"path": "/"}}\n</tool_call>', None),
    ("</tool_call> inside a JSON string argument",
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "x</tool_call>y"}}\n</tool_call>',
     ("get_weather", {"city": "x</tool_call>y"})),
]


def tool_output_outcome(status, js, expect) -> str:
    """A reply to a TOOL_OUTPUT_CASES request: "call_ok" when the declared call came back with
    exactly its arguments (valid JSON) and no tag text in content, or when an undeclared call
    did not come back as a call (finish_reason not tool_calls); "call_wrong" otherwise."""
    if status != 200 or not isinstance(js, dict):
        return "other_status"
    ch = (js.get("choices") or [{}])[0]
    msg = ch.get("message") or {}
    calls = msg.get("tool_calls") or []
    if expect is None:
        return "call_ok" if not calls and ch.get("finish_reason") != "tool_calls" else "call_wrong"
    name, args = expect
    if len(calls) != 1 or (calls[0].get("function") or {}).get("name") != name:
        return "call_wrong"
    try:
        got = json.loads(calls[0]["function"]["arguments"])
    except (ValueError, TypeError, KeyError):
        return "call_wrong"
    content = msg.get("content") or ""
    return "call_ok" if got == args and "tool_call" not in content else "call_wrong"


def tool_definition_cases(model: str) -> list[Case]:
    def chat(tools, **kw):
        return _j(_chat(model, "Weather in Paris?", tools=tools, **kw))
    fn = WEATHER_TOOLS[0]["function"]
    mention = ["tool", "function", "parameters", "name"]
    cs = [Case("tool_choice names an undeclared function",
               chat(WEATHER_TOOLS, tool_choice={"type": "function", "function": {"name": "launch_rocket"}}),
               mention=mention)]
    bad = {"parameters false": [{"type": "function", "function": {**fn, "parameters": False}}],
           "parameters {\"type\":\"string\"}": [{"type": "function", "function": {**fn, "parameters": {"type": "string"}}}],
           "duplicate names": [WEATHER_TOOLS[0], WEATHER_TOOLS[0]],
           "type code_interpreter": [{"type": "code_interpreter"}],
           "type function without function": [{"type": "function"}]}
    for desc, tools in bad.items():
        for choice in ("auto", "required"):
            cs.append(Case(f"tools: {desc}, tool_choice {choice}", chat(tools, tool_choice=choice), mention=mention))
    for c in cs:
        c.kw["path"] = "/v1/chat/completions"
    return cs


def framing_cases(model: str) -> list[Case]:
    """Raw bytes; kw expect: reject / serve / no_100 (framing_outcome), shut_wr."""
    body = _j(_chat(model))
    n = len(body)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (n, body)
    trailing = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    ct = ("Content-Type", "application/json")

    def req(hs, data, version="HTTP/1.1"):
        h = [f"POST /v1/chat/completions {version}", "Host: 127.0.0.1"] + [f"{k}: {v}" for k, v in hs]
        return ("\r\n".join(h) + "\r\n\r\n").encode("latin-1") + data

    def raw_hdr(lines, data):
        return ("\r\n".join(["POST /v1/chat/completions HTTP/1.1", *lines]) + "\r\n\r\n").encode("latin-1") + data
    rej = ("rejected_closed",)
    cs = [Case("control: chunked, then a pipelined GET /health", req([ct, ("Transfer-Encoding", "chunked")], chunked) + trailing,
               ok=("served",), expect="serve"),
          Case("Content-Length + Transfer-Encoding: chunked, then a pipelined GET /health",
               req([ct, ("Content-Length", str(n)), ("Transfer-Encoding", "chunked")], chunked) + trailing,
               ok=rej, expect="reject"),
          Case("Transfer-Encoding: chunked + Content-Length: 4 (smuggling order), pipelined GET",
               req([ct, ("Transfer-Encoding", "chunked"), ("Content-Length", "4")], chunked) + trailing,
               ok=rej, expect="reject"),
          Case("'Transfer-Encoding : chunked' (space before the colon)",
               raw_hdr(["Host: 127.0.0.1", "Content-Type: application/json", "Transfer-Encoding : chunked"], chunked) + trailing,
               ok=rej, expect="reject"),
          Case("two Transfer-Encoding: chunked headers",
               req([ct, ("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")], chunked) + trailing,
               ok=rej, expect="reject"),
          Case("two Host headers", req([ct, ("Host", "127.0.0.1"), ("Content-Length", str(n))], body) + trailing,
               ok=rej, expect="reject"),
          Case("~100 KB chunk extension",
               req([ct, ("Transfer-Encoding", "chunked")],
                   b"%x;ext=%s\r\n%s\r\n0\r\n\r\n" % (n, b"e" * 100000, body)) + trailing,
               ok=rej, expect="reject"),  # libmicrohttpd's own 500, then close (docs/server.md)
          Case("Transfer-Encoding: xchunked", req([ct, ("Transfer-Encoding", "xchunked")], chunked) + trailing,
               ok=rej, expect="reject"),
          Case("Transfer-Encoding: gzip, chunked", req([ct, ("Transfer-Encoding", "gzip, chunked")], chunked) + trailing,
               ok=rej, expect="reject")]
    long_body = _j(_chat(model, "Tell me a long story.", max_tokens=96, ignore_eos=True))
    for ver in ("HTTP/1.1", "HTTP/1.0"):
        for shut in (False, True):
            cs.append(Case(f"POST without Expect, {ver}{', then half-close' if shut else ''}: unsolicited 100?",
                           req([ct, ("Content-Length", str(len(long_body))), ("Connection", "close")], long_body, ver),
                           # an HTTP/1.1 client that half-closes is probed with a 100 (Kipp's
                           # disconnect probe, docs/server.md "Expect"); nobody else gets one
                           ok=("no_100", "sent_100") if shut and ver == "HTTP/1.1" else ("no_100",),
                           expect="no_100", shut_wr=shut))
    return cs
