"""Fixtures for the server gate (tests/server): kipp-server processes on the tiny checkpoint,
clients (the official openai package, curl, raw http.client/sockets), metric helpers and a
tokenizer for exact token counts. The contract under test is docs/server.md.

Servers (each on --port 0, --backend cpu; killed at the end of the session; their stderr
is appended to the failure message of a test that fails):
  server          the main one: defaults, plus --max-body 65536
  auth_server     --api-key
  overload_server --parallel 1 --queue 1 --kv-tokens 1024
  tight_server    -c 256 --parallel 4 --kv-tokens 272 (the running batch outgrows the pool:
                  preemption and recomputation)
  nocache_server  --no-prefix-cache --model-name renamed-tiny
Environment: BUILD (default build) picks $BUILD/kipp-server; KIPP_SERVER_THREADS (default 2);
KIPP_TEST_TIMEOUT_SCALE (default 1; make test-sanitize and make test-tsan set 6) multiplies the
client-side waits (start-up, a request's timeout, wait_idle) for a sanitized server's speed. It
never changes what a test asserts about the server's own limits or answers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from bench import server_common as sc

ROOT = Path(__file__).resolve().parents[2]

BUILD = os.environ.get("BUILD", "build")
SERVER_BIN = str(ROOT / BUILD / "kipp-server")
MODEL = str(ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf")
MODEL_NAME = "kipp-tiny-tied-bf16"
THREADS = os.environ.get("KIPP_SERVER_THREADS", "2")
TIMEOUT_SCALE = float(os.environ.get("KIPP_TEST_TIMEOUT_SCALE") or 1)
CTX = 512           # the tiny checkpoint's trained context (max_position_embeddings)
API_KEY = "kipp-test-secret-0123456789"
TIGHT_CTX, TIGHT_KV = 256, 272     # the smallest pool the server accepts: ctx + one block
# The random tiny model's greedy text repeats one token forever (and its distributions are so
# peaked that temperature 1 barely varies). A repetition penalty keeps greedy decoding
# deterministic but makes the text varied, so equality checks between runs mean something.
VARIED = {"repetition_penalty": 2.0}

_servers: list[sc.ServerProcess] = []


def _log_dir() -> str:
    d = os.environ.get("KIPP_SERVER_TEST_LOGS") or tempfile.mkdtemp(prefix="kipp-server-tests-")
    os.makedirs(d, exist_ok=True)
    return d


LOG_DIR = _log_dir()


def start_server(name: str, *args: str, threads: str = THREADS, model: str = MODEL) -> sc.ServerProcess:
    if not (os.path.isfile(SERVER_BIN) and os.access(SERVER_BIN, os.X_OK)):
        pytest.fail(f"{SERVER_BIN} is missing (make server)", pytrace=False)
    if not os.path.isfile(model):
        pytest.fail(f"{model} is missing (make tiny-models)", pytrace=False)
    s = sc.ServerProcess(SERVER_BIN, model, ["--backend", "cpu", "--threads", threads, *args],
                         log_dir=LOG_DIR, name=name)
    _servers.append(s)
    s.start(timeout=60 * TIMEOUT_SCALE)
    return s


class Srv:
    """A started server plus the helpers the tests use on it."""

    def __init__(self, proc: sc.ServerProcess, model_name: str = MODEL_NAME, api_key: str | None = None):
        self.proc = proc
        self.model = model_name
        self.api_key = api_key
        self.url = proc.base_url
        self.host = proc.connect_host
        self.port = proc.port

    # --- clients ---
    def client(self, api_key: str | None = None, **kw):
        from openai import OpenAI
        return OpenAI(base_url=self.url + "/v1", api_key=api_key or self.api_key or "unused",
                      max_retries=0, timeout=kw.pop("timeout", 120) * TIMEOUT_SCALE, **kw)

    def auth_headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def request(self, method, path, body=None, headers=None, timeout=120):
        h = self.auth_headers()
        h.update(headers or {})
        return self.proc.request(method, path, body, h, timeout * TIMEOUT_SCALE)

    def post(self, path: str, obj, headers=None, timeout=120):
        """(status, headers, JSON body or None)."""
        h = self.auth_headers()
        h.update(headers or {})
        return self.proc.post_json(path, obj, h, timeout * TIMEOUT_SCALE)

    def chat(self, messages, **fields) -> dict:
        body = {"model": self.model, "messages": messages, **fields}
        st, _, js = self.post("/v1/chat/completions", body)
        assert st == 200, f"chat answered {st}: {js}\n{self.proc.stderr_tail()}"
        return js

    def complete(self, prompt, **fields) -> dict:
        body = {"model": self.model, "prompt": prompt, **fields}
        st, _, js = self.post("/v1/completions", body)
        assert st == 200, f"completions answered {st}: {js}\n{self.proc.stderr_tail()}"
        return js

    def stream(self, path, obj, **kw) -> sc.SSEResult:
        return self.proc.stream(path, obj, headers=self.auth_headers(), **kw)

    def metrics(self) -> sc.Metrics:
        return self.proc.metrics(headers=self.auth_headers())

    def wait_idle(self, timeout: float = 15.0) -> sc.Metrics:
        """Polls /metrics until no sequence runs or waits and no KV block is held by anything
        but the prefix cache. Returns the last Metrics; fails the test on timeout."""
        timeout *= TIMEOUT_SCALE
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            busy = (m.get("kipp_running_sequences"), m.get("kipp_queue_depth"),
                    m.get("kipp_kv_blocks_used") - m.get("kipp_kv_blocks_cached"))
            if busy == (0, 0, 0):
                return m
            if time.monotonic() > deadline:
                pytest.fail(f"server not idle after {timeout} s: running, queued, used-cached = {busy}")
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc.alive()


PROBE_PROMPT = "Robustness probe: the quick brown fox"


@pytest.fixture(scope="session")
def server() -> Srv:
    s = Srv(start_server("main", "--max-body", "65536"))
    # a greedy answer from the fresh server; test_zz_robustness compares it at the end
    s.probe_text = s.complete(PROBE_PROMPT, max_tokens=12, temperature=0, **VARIED)["choices"][0]["text"]
    return s


@pytest.fixture(scope="session")
def auth_server() -> Srv:
    return Srv(start_server("auth", "--api-key", API_KEY, threads="1"), api_key=API_KEY)


@pytest.fixture(scope="session")
def overload_server() -> Srv:
    # --kv-tokens given: the server requires a pool of at least ctx + one block, more than
    # the documented default ctx x parallel for --parallel 1 (test_lifecycle checks that)
    return Srv(start_server("overload", "--parallel", "1", "--queue", "1", "--kv-tokens", "1024",
                            threads="1"))


@pytest.fixture(scope="session")
def tight_server() -> Srv:
    return Srv(start_server("tight", "-c", str(TIGHT_CTX), "--parallel", "4", "--kv-tokens",
                            str(TIGHT_KV), threads="1"))


@pytest.fixture(scope="session")
def nocache_server() -> Srv:
    # same thread count as the main server, so outputs can be compared across the two
    return Srv(start_server("nocache", "--no-prefix-cache", "--model-name", "renamed-tiny"),
               model_name="renamed-tiny")


@pytest.fixture(scope="session")
def client(server):
    return server.client()


# ---- curl --------------------------------------------------------------------------------

class CurlResult:
    def __init__(self, status: int, headers: dict, body: bytes, rc: int, stderr: str):
        self.status, self.headers, self.body, self.rc, self.stderr = status, headers, body, rc, stderr

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<curl {self.status} rc={self.rc} {self.body[:300]!r} {self.stderr[:200]}>"


def curl(url: str, method: str = "GET", body: bytes | str | None = None, headers=(),
         timeout: float = 120, stream: bool = False) -> CurlResult:
    """Runs curl; status from -w, headers from -D (the last response block), body from -o."""
    if shutil.which("curl") is None:
        pytest.skip("curl not installed")
    with tempfile.TemporaryDirectory() as d:
        hfile, bfile = os.path.join(d, "h"), os.path.join(d, "b")
        cmd = ["curl", "-sS", "-X", method, "-D", hfile, "-o", bfile, "-w", "%{http_code}",
               "--max-time", str(timeout), "-H", "Expect:"]
        if stream:
            cmd.append("-N")
        for h in headers:
            cmd += ["-H", h]
        if body is not None:
            if isinstance(body, str):
                body = body.encode()
            cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        cmd.append(url)
        p = subprocess.run(cmd, input=body, capture_output=True, timeout=timeout + 10)
        hdrs: dict = {}
        try:
            with open(hfile, "rb") as f:
                blocks = [b for b in f.read().decode("latin-1").split("\r\n\r\n") if b.strip()]
            for line in (blocks[-1].split("\r\n")[1:] if blocks else []):
                k, _, v = line.partition(":")
                hdrs[k.strip().lower()] = v.strip()
        except OSError:
            pass
        try:
            with open(bfile, "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        out = p.stdout.decode().strip()
        return CurlResult(int(out) if out.isdigit() else 0, hdrs, data, p.returncode,
                          p.stderr.decode("utf-8", "replace"))


def thread_nices(pid: int, name: str | None = None) -> list[int]:
    """The nice value of each of a process's threads (Linux /proc), or only of those whose name
    (comm) is `name`. A thread that ends meanwhile is skipped."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if name is not None:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() != name:
                        continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                out.append(int(f.read().rsplit(")", 1)[1].split()[16]))  # field 19: nice
        except (OSError, ValueError, IndexError):
            pass
    return out


def parse_sse(body: bytes) -> list:
    """The data payloads of an SSE body: parsed JSON chunks, and "[DONE]"."""
    out = []
    for line in body.decode("utf-8").split("\n"):
        line = line.rstrip("\r")
        if line.startswith("data:"):
            p = line[5:].strip()
            out.append(p if p == "[DONE]" else json.loads(p))
    return out


# ---- tokenizer (exact token counts) ---------------------------------------------------------

class Tok:
    """Token ids and chat renderings of the tiny checkpoint. Uses HF transformers when it is
    importable (the reference the spec names), else the kipp CLI (whose chat template is
    gated against HF's by `make test`); tests that need it are skipped when neither is."""

    def __init__(self):
        self.hf = None
        self.cli = None
        try:
            from transformers import AutoTokenizer
            self.hf = AutoTokenizer.from_pretrained(str(ROOT / "models" / "tiny-tied"))
        except Exception:
            self.hf = None
        cli = ROOT / BUILD / "kipp"
        if self.hf is None and os.access(cli, os.X_OK):
            self.cli = str(cli)

    @property
    def available(self) -> bool:
        return self.hf is not None or self.cli is not None

    def encode(self, text: str) -> list[int]:
        if self.hf is not None:
            return list(self.hf.encode(text, add_special_tokens=False))
        out = subprocess.run([self.cli, "-m", MODEL, "--tokenize", "-p", text], capture_output=True,
                             text=True, check=True)
        return [int(x) for x in out.stdout.split()]

    def chat_ids(self, messages, tools=None, enable_thinking: bool = True) -> list[int]:
        if self.hf is not None:
            kw = {"tools": tools} if tools else {}
            ids = self.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                              enable_thinking=enable_thinking, **kw)
            if not isinstance(ids, list):      # BatchEncoding in newer transformers
                ids = ids["input_ids"]
            return list(ids)
        body = {"messages": messages, "chat_template_kwargs": {"enable_thinking": enable_thinking}}
        if tools:
            body["tools"] = tools
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(body, f)
        try:
            out = subprocess.run([self.cli, "-m", MODEL, "--messages", f.name, "--tokenize"],
                                 capture_output=True, text=True, check=True)
        finally:
            os.unlink(f.name)
        return [int(x) for x in out.stdout.split()]


@pytest.fixture(scope="session")
def tok() -> Tok:
    t = Tok()
    if not t.available:
        pytest.skip("no tokenizer: neither transformers nor build/kipp is available")
    return t


# ---- session end and failure reports --------------------------------------------------------

def pytest_sessionfinish(session, exitstatus):
    for s in _servers:
        s.stop(timeout=10)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        used = [v.proc for v in getattr(item, "funcargs", {}).values() if isinstance(v, Srv)]
        for s in used or _servers:
            state = "alive" if s.alive() else f"EXITED rc={s.proc.returncode if s.proc else None}"
            rep.sections.append((f"kipp-server {s.name} ({state})", s.stderr_tail(3000)))
