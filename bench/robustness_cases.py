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
