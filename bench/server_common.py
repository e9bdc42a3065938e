"""server_common.py — what the kipp-server benchmarks (bench/server_bench.py,
prefix_bench.py, load_bench.py) and the server gate (tests/server) share: starting a
build/kipp-server process and waiting until it serves, a small HTTP client with an SSE
reader that timestamps every event (http.client, one connection per request), a strict
Prometheus text-format parser, and RSS sampling of the server pid from /proc.
It does not judge the server: the tests and the benches decide what the numbers mean.
Standard library only. Spec of the server: docs/server.md.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTEN_RE = re.compile(r"listening on http://(\[[^\]]+\]|[^\s:/]+):(\d+)")


class ServerError(Exception):
    """The server did not start or stopped; the message carries its stderr tail."""


# ---- the server process -------------------------------------------------------------------

class ServerProcess:
    """One build/kipp-server child. stdout/stderr go to files in log_dir (kept for failure
    messages); start() waits for the "listening on" line and then for /health == 200."""

    def __init__(self, binary: str, model: str, args: list[str] | tuple = (),
                 log_dir: str | None = None, name: str = "kipp-server", env: dict | None = None):
        self.binary, self.model, self.args, self.name = binary, model, list(args), name
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="kipp-server-")
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.host = self.port = None
        self.stdout_path = os.path.join(self.log_dir, f"{name}.stdout")
        self.stderr_path = os.path.join(self.log_dir, f"{name}.stderr")
        self.returncode: int | None = None
        self.model_name: str | None = None   # the served id, once served_model() asked

    def served_model(self) -> str:
        """The id /v1/models lists (what requests must send as model)."""
        st, _, raw = self.request("GET", "/v1/models", timeout=30)
        if st != 200:
            raise ServerError(f"/v1/models answered {st}: {raw[:300]!r}")
        self.model_name = json.loads(raw)["data"][0]["id"]
        return self.model_name

    @property
    def argv(self) -> list[str]:
        return [self.binary, "--model", self.model, *self.args]

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base_url(self) -> str:
        h = self.host if ":" not in self.host or self.host.startswith("[") else f"[{self.host}]"
        return f"http://{h}:{self.port}"

    @property
    def connect_host(self) -> str:
        return self.host.strip("[]")

    def start(self, timeout: float = 120.0) -> "ServerProcess":
        args = self.args
        if "--port" not in args:
            args = [*args, "--port", "0"]
        self.args = args
        with open(self.stdout_path, "wb") as fo, open(self.stderr_path, "wb") as fe:
            self.proc = subprocess.Popen(self.argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                         env=self.env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while self.port is None:
            m = LISTEN_RE.search(self.stdout())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.proc.returncode} before listening: "
                                  f"{self.argv}\n{self.stderr_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(f"{self.name}: no 'listening on http://HOST:PORT' line on stdout "
                                  f"within {timeout:.0f} s\nstdout: {self.stdout()[-2000:]}\n"
                                  f"{self.stderr_tail()}")
            time.sleep(0.02)
        return self.wait_healthy(deadline, timeout)

    def wait_healthy(self, deadline: float, timeout: float, poll_s: float = 0.05) -> "ServerProcess":
        """Until /health answers 200 (self), the process exits or the monotonic deadline passes
        (ServerError; the process is killed at the deadline)."""
        while True:
            try:
                st, _, _ = http_request(self.connect_host, self.port, "GET", "/health", timeout=5)
                if st == 200:
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise ServerError(f"{self.name} exited with {self.proc.returncode} while loading\n"
                                  f"{self.stderr_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise ServerError(f"{self.name}: /health not 200 within {timeout:.0f} s\n{self.stderr_tail()}")
            time.sleep(poll_s)

    def stdout(self) -> str:
        try:
            with open(self.stdout_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stderr_tail(self, n_chars: int = 4000) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                data = f.read().decode("utf-8", "replace")
        except OSError:
            data = ""
        return f"--- {self.name} stderr (last {n_chars} chars) ---\n{data[-n_chars:]}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after timeout. Returns the exit code (negative: signal)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # conveniences
    def request(self, method: str, path: str, body=None, headers: dict | None = None,
                timeout: float = 120.0):
        return http_request(self.connect_host, self.port, method, path, body, headers, timeout)

    def post_json(self, path: str, obj, headers: dict | None = None, timeout: float = 120.0):
        """(status, headers, parsed JSON or None)."""
        st, hd, raw = self.request("POST", path, json.dumps(obj).encode(), headers, timeout)
        try:
            return st, hd, json.loads(raw)
        except ValueError:
            return st, hd, None

    def stream(self, path: str, obj, headers: dict | None = None, timeout: float = 120.0, **kw):
        return sse_request(self.connect_host, self.port, path, obj, headers, timeout, **kw)

    def metrics(self, headers: dict | None = None) -> "Metrics":
        st, _, raw = self.request("GET", "/metrics", headers=headers, timeout=30)
        if st != 200:
            raise ServerError(f"/metrics answered {st}: {raw[:500]!r}")
        return Metrics(parse_prometheus(raw.decode("utf-8")))

    def rss_bytes(self) -> int | None:
        return rss_bytes(self.pid)


# ---- HTTP ---------------------------------------------------------------------------------

def http_request(host: str, port: int, method: str, path: str, body: bytes | None = None,
                 headers: dict | None = None, timeout: float = 120.0):
    """One request on a fresh connection: (status, {lower-case header: value}, body bytes)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


class SSEResult:
    """A streamed response: status, headers, events [(t_seconds_since_send, payload)], where a
    payload is a parsed JSON chunk or the string "[DONE]"; `body` holds a non-200 answer."""

    def __init__(self):
        self.status = 0
        self.headers: dict = {}
        self.events: list = []
        self.body = b""
        self.t_send = 0.0
        self.t_end = 0.0
        self.closed_early = False

    @property
    def chunks(self) -> list[dict]:
        return [e for _, e in self.events if isinstance(e, dict)]

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1][1] == "[DONE]"

    def text(self, field: str = "content") -> str:
        """Concatenated choices[0].delta.FIELD (chat) or choices[0].text (completions)."""
        out = []
        for c in self.chunks:
            for ch in c.get("choices") or []:
                if "delta" in ch:
                    v = (ch.get("delta") or {}).get(field)
                else:
                    v = ch.get("text") if field == "content" else None
                if v:
                    out.append(v)
        return "".join(out)

    def usage(self) -> dict | None:
        for c in reversed(self.chunks):
            if c.get("usage"):
                return c["usage"]
        return None

    def finish_reason(self) -> str | None:
        for c in reversed(self.chunks):
            for ch in c.get("choices") or []:
                if ch.get("finish_reason"):
                    return ch["finish_reason"]
        return None

    def token_times(self) -> list[float]:
        """Arrival times of chunks that carry text (content, reasoning_content or text)."""
        out = []
        for t, c in self.events:
            if not isinstance(c, dict):
                continue
            for ch in c.get("choices") or []:
                d = ch.get("delta") or {}
                if d.get("content") or d.get("reasoning_content") or ch.get("text"):
                    out.append(t)
                    break
        return out


def sse_request(host: str, port: int, path: str, obj, headers: dict | None = None,
                timeout: float = 120.0, stop_after_events: int | None = None) -> SSEResult:
    """POSTs obj (which should ask for stream=true) and reads the SSE answer line by line.
    stop_after_events=N closes the connection after N data events (a client that leaves)."""
    res = SSEResult()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        h.update(headers or {})
        body = json.dumps(obj).encode()
        res.t_send = time.perf_counter()
        conn.request("POST", path, body=body, headers=h)
        r = conn.getresponse()
        res.status = r.status
        res.headers = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            res.body = r.read()
            res.t_end = time.perf_counter()
            return res
        while True:
            line = r.readline()
            if not line:
                break
            t = time.perf_counter() - res.t_send
            line = line.rstrip(b"\r\n")
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                res.events.append((t, "[DONE]"))
                break
            res.events.append((t, json.loads(payload)))
            if stop_after_events is not None and len(res.events) >= stop_after_events:
                res.closed_early = True
                break
        res.t_end = time.perf_counter()
        return res
    finally:
        if res.closed_early:
            abort_connection(conn.sock)
        conn.close()


def abort_connection(sock: socket.socket | None) -> None:
    """Closes with SO_LINGER 0 (the peer sees a reset at once, as when a client dies)."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


# ---- Prometheus text format -----------------------------------------------------------------

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE_RE = re.compile(r"^(" + _NAME + r")(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$")
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


def _parse_labels(s: str, line: str) -> dict:
    labels, pos = {}, 0
    s = s.strip()
    while pos < len(s):
        m = _LABEL_RE.match(s, pos)
        if not m:
            raise ValueError(f"bad label set in metrics line: {line!r}")
        labels[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        pos = m.end()
        if m.group(3) == "":
            break
    if pos < len(s):
        raise ValueError(f"bad label set in metrics line: {line!r}")
    return labels


def _parse_value(v: str, line: str) -> float:
    if v in ("+Inf", "Inf"):
        return math.inf
    if v == "-Inf":
        return -math.inf
    if v == "NaN":
        return math.nan
    try:
        return float(v)
    except ValueError:
        raise ValueError(f"bad sample value {v!r} in metrics line: {line!r}")


def parse_prometheus(text: str) -> dict:
    """Strict parse of the Prometheus text exposition format (version 0.0.4):
    {"types": {family: type}, "help": {family: text}, "samples": [(name, labels, value)]}.
    Raises ValueError on any malformed line, a TYPE given twice, or a TYPE after samples."""
    types, helps, samples = {}, {}, []
    seen_sample_family = set()
    for line in text.split("\n"):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                if len(parts) != 4 or parts[3].strip() not in ("counter", "gauge", "histogram",
                                                               "summary", "untyped"):
                    raise ValueError(f"bad TYPE line: {line!r}")
                if not re.fullmatch(_NAME, parts[2]):
                    raise ValueError(f"bad metric name in TYPE line: {line!r}")
                if parts[2] in types:
                    raise ValueError(f"TYPE given twice for {parts[2]}")
                if parts[2] in seen_sample_family:
                    raise ValueError(f"TYPE for {parts[2]} after its samples")
                types[parts[2]] = parts[3].strip()
            elif len(parts) >= 3 and parts[1] == "HELP":
                if not re.fullmatch(_NAME, parts[2]):
                    raise ValueError(f"bad metric name in HELP line: {line!r}")
                helps[parts[2]] = parts[3] if len(parts) > 3 else ""
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            raise ValueError(f"malformed metrics line: {line!r}")
        name = m.group(1)
        labels = _parse_labels(m.group(3), line) if m.group(2) else {}
        samples.append((name, labels, _parse_value(m.group(4), line)))
        seen_sample_family.add(family_of(name, types))
    return {"types": types, "help": helps, "samples": samples}


def family_of(sample_name: str, types: dict) -> str:
    for suf in ("_bucket", "_sum", "_count"):
        if sample_name.endswith(suf) and types.get(sample_name[:-len(suf)]) in ("histogram", "summary"):
            return sample_name[:-len(suf)]
    return sample_name


class Metrics:
    """A parsed /metrics answer with lookups."""

    def __init__(self, parsed: dict):
        self.types = parsed["types"]
        self.help = parsed["help"]
        self.samples = parsed["samples"]

    def get(self, name: str, **labels) -> float:
        """Sum of the samples called name whose labels include the given ones (0 if none)."""
        return sum(v for n, lb, v in self.samples
                   if n == name and all(lb.get(k) == str(x) for k, x in labels.items()))

    def has(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.samples)

    def names(self) -> set[str]:
        return {n for n, _, _ in self.samples}


# ---- /proc --------------------------------------------------------------------------------

def rss_bytes(pid: int) -> int | None:
    """VmRSS of pid from /proc/PID/status, in bytes (None when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class RSSSampler:
    """Samples rss_bytes(pid) every interval seconds on a thread: samples [(t, bytes)]."""

    def __init__(self, pid: int, interval: float = 1.0):
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "RSSSampler":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            v = rss_bytes(self.pid)
            if v is not None:
                self.samples.append((time.monotonic() - self._t0, v))
            self._stop.wait(self.interval)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join()
        return self.samples


# ---- shared bench helpers -----------------------------------------------------------------

def synthetic_ids(n: int, offset: int = 0, n_vocab: int = 151936) -> list[int]:
    """n ordinary Qwen3 token ids, as tools/bench.py synthetic_ids (kipp --prompt-tokens),
    shifted by offset so that distinct offsets give distinct prompts."""
    base, top = 1000, min(n_vocab, 151643)
    span = top - base
    return [base + ((i + offset) * 7919) % span for i in range(n)]


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100]; None for no values."""
    if not values:
        return None
    v = sorted(values)
    if len(v) == 1:
        return v[0]
    k = (len(v) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def dist(values: list[float]) -> dict:
    """p50/p90/p99/mean/min/max/n of values (seconds or whatever unit they are in)."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99), "mean": sum(values) / len(values),
            "min": min(values), "max": max(values)}
