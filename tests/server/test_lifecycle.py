"""Process behaviour: the startup lines on stdout, --port 0, --model-name, --model-alias and
--served-model-name '*', fatal start-up
errors (unknown backend, missing model), and a clean stop on SIGTERM/SIGINT, idle or with
a stream in flight."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

from conftest import MODEL, MODEL_NAME, SERVER_BIN, Srv, curl, start_server
from bench import server_common as sc


def test_startup_lines(server):
    out = server.proc.stdout()
    m = sc.LISTEN_RE.search(out)
    assert m, out
    assert m.group(1) == "127.0.0.1", "binds loopback by default"
    assert int(m.group(2)) == server.port and server.port > 0
    assert "kipp-server: listening on http://" in out
    assert "kipp-server: ready" in out
    assert out.index("listening on") < out.index("kipp-server: ready")


def test_model_name_flag(nocache_server):
    r = curl(nocache_server.url + "/v1/models")
    assert [d["id"] for d in r.json()["data"]] == ["renamed-tiny"]
    st, _, js = nocache_server.post("/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1})
    assert st == 404 and js["error"]["code"] == "model_not_found"
    js = nocache_server.complete("x", max_tokens=1)
    assert js["model"] == "renamed-tiny"


def test_model_aliases():
    """--model-alias: every alias is served and listed, responses carry the id asked for,
    other ids are still a 404 that says aliases exist; the openai client with a hard-coded
    name works."""
    proc = start_server("aliases", "--model-alias", "gpt-4o-mini", "--model-alias", "qwen3")
    srv = Srv(proc)
    try:
        r = curl(srv.url + "/v1/models")
        assert [d["id"] for d in r.json()["data"]] == [MODEL_NAME, "gpt-4o-mini", "qwen3"]
        for name in (MODEL_NAME, "gpt-4o-mini", "qwen3"):
            st, _, js = srv.post("/v1/completions", {"model": name, "prompt": "x", "max_tokens": 1})
            assert st == 200 and js["model"] == name, (st, js)
        st, _, js = srv.post("/v1/completions", {"model": "gpt-5", "prompt": "x", "max_tokens": 1})
        assert st == 404 and js["error"]["code"] == "model_not_found" and "aliases" in js["error"]["message"]
        c = srv.client()
        out = c.chat.completions.create(model="gpt-4o-mini", max_tokens=2,
                                        messages=[{"role": "user", "content": "hi"}])
        assert out.model == "gpt-4o-mini" and out.choices[0].message is not None
        assert "as '%s' (also 'gpt-4o-mini', 'qwen3')" % MODEL_NAME in proc.stderr_tail()
    finally:
        proc.stop()


def test_served_model_name_any():
    """--served-model-name '*': any id is accepted; /v1/models lists the real name only."""
    proc = start_server("anyname", "--served-model-name", "*")
    srv = Srv(proc)
    try:
        assert [d["id"] for d in curl(srv.url + "/v1/models").json()["data"]] == [MODEL_NAME]
        for name in ("gpt-4o", "anything/at-all", MODEL_NAME):
            st, _, js = srv.post("/v1/chat/completions", {"model": name, "max_tokens": 1,
                                                          "messages": [{"role": "user", "content": "hi"}]})
            assert st == 200 and js["model"] == name, (st, js)
        assert "(also any name)" in proc.stderr_tail()
    finally:
        proc.stop()


def _run_fatal(*args):
    p = subprocess.run([SERVER_BIN, *args], capture_output=True, text=True, timeout=30)
    return p


def test_unknown_backend_is_fatal():
    p = _run_fatal("--model", MODEL, "--port", "0", "--backend", "no-such-backend")
    assert p.returncode != 0
    assert "no-such-backend" in p.stderr, p.stderr


def test_missing_model_is_fatal():
    p = _run_fatal("--model", "/nonexistent/model.gguf", "--port", "0")
    assert p.returncode != 0
    assert "/nonexistent/model.gguf" in p.stderr, p.stderr


def test_missing_model_flag_is_fatal():
    p = _run_fatal("--port", "0")
    assert p.returncode != 0 and p.stderr.strip()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_clean_stop_idle(sig):
    s = start_server(f"stop-idle-{sig.name}", threads="1")
    assert curl(s.base_url + "/health").status == 200
    s.proc.send_signal(sig)
    try:
        rc = s.proc.wait(10)
    except subprocess.TimeoutExpired:
        s.kill()
        pytest.fail(f"{sig.name}: still running after 10 s")
    assert rc == 0, f"{sig.name}: exit code {rc}\n{s.stderr_tail()}"


def test_clean_stop_with_stream_in_flight():
    s = start_server("stop-busy", threads="1")
    srv = Srv(s)
    got = {}

    def reader():
        try:
            got["r"] = srv.stream("/v1/completions", {"model": MODEL_NAME, "prompt": "go", "max_tokens": 480,
                                                      "temperature": 0, "ignore_eos": True, "stream": True},
                                  timeout=30)
        except Exception as e:  # the server may cut the stream when it stops
            got["error"] = e
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while srv.metrics().get("kipp_running_sequences") < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    s.proc.send_signal(signal.SIGTERM)
    try:
        rc = s.proc.wait(15)
    except subprocess.TimeoutExpired:
        s.kill()
        pytest.fail("SIGTERM with a stream in flight: still running after 15 s")
    t.join(30)
    assert rc == 0, f"exit code {rc}\n{s.stderr_tail()}"


def test_parallel_one_starts_with_default_kv_tokens():
    """--parallel 1 alone: --kv-tokens defaults to ctx-size x parallel (docs/server.md), and
    the server must accept its own defaults."""
    s = start_server("parallel-1-default-kv", "--parallel", "1", threads="1")
    try:
        js = Srv(s).complete("hi", max_tokens=2, temperature=0)
        assert js["usage"]["completion_tokens"] <= 2
    finally:
        s.stop()


def test_help_flags_match_docs():
    """Every flag `kipp-server --help` lists has a row in docs/server.md's flag table, and
    every row names a flag the binary knows."""
    import re
    from conftest import ROOT
    help_text = subprocess.run([SERVER_BIN, "--help"], capture_output=True, text=True, check=True).stdout
    help_flags = set(re.findall(r"^\s+(?:-\w+, )?(--[a-z][a-z0-9-]*)", help_text, re.M)) - {"--help", "--version"}
    doc = (ROOT / "docs" / "server.md").read_text()
    table = doc[doc.index("| flag | default | meaning |"):doc.index("\n\n", doc.index("| flag | default | meaning |"))]
    doc_flags = set(re.findall(r"^\| `(?:-\w+, )?(--[a-z][a-z0-9-]*)", table, re.M))
    assert help_flags == doc_flags, (f"only in --help: {sorted(help_flags - doc_flags)}; "
                                     f"only in docs/server.md: {sorted(doc_flags - help_flags)}")


def _log_lines(proc, rid):
    deadline = time.time() + 5
    while time.time() < deadline:  # the line is written when the request completes
        lines = [ln for ln in proc.stderr_tail(200000).splitlines() if rid in ln]
        if lines:
            return lines
        time.sleep(0.05)
    return []


def test_request_log_and_ids(server):
    """X-Request-Id on every response (the client's own echoed, else req-N), and one text
    log line per request with its status, tokens, queue wait and TTFT."""
    st, hd, js = server.post("/v1/completions", {"model": MODEL_NAME, "prompt": "Hello",
                                                 "max_tokens": 3, "temperature": 0, "ignore_eos": True},
                             headers={"X-Request-Id": "trace-abc-123"})
    assert st == 200 and hd.get("x-request-id") == "trace-abc-123"
    lines = _log_lines(server.proc, "trace-abc-123")
    assert len(lines) == 1, lines
    assert "POST /v1/completions 200 " in lines[0] and "completion 3, length" in lines[0], lines[0]
    assert "queue " in lines[0] and "ttft " in lines[0] and "prompt " in lines[0]
    st, hd, _ = server.post("/v1/completions", {"model": "no-such", "prompt": "x"},
                            headers={"X-Request-Id": "bad id with spaces"})
    rid = hd.get("x-request-id")
    assert st == 404 and rid and rid.startswith("req-"), hd
    assert " 404 " in _log_lines(server.proc, rid + " ")[0]
    r = curl(server.url + "/health")
    assert r.headers.get("x-request-id", "").startswith("req-")


def test_request_log_json():
    proc = start_server("logjson", "--log-format", "json")
    srv = Srv(proc)
    try:
        st, hd, _ = srv.post("/v1/chat/completions", {"model": MODEL_NAME, "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "hi"}]},
                             headers={"X-Request-Id": "json-1"})
        assert st == 200
        import json as _json
        rec = _json.loads(_log_lines(proc, '"json-1"')[0])
        assert rec["request_id"] == "json-1" and rec["status"] == 200 and rec["path"] == "/v1/chat/completions"
        assert rec["completion_tokens"] == 2 and rec["prompt_tokens"] > 0 and rec["ttft_ms"] >= 0
        assert rec["queue_ms"] >= 0 and rec["total_ms"] >= rec["ttft_ms"]
    finally:
        proc.stop()
    p = _run_fatal("--model", MODEL, "--port", "0", "--log-format", "yaml")
    assert p.returncode != 0 and "--log-format must be text, json or none" in p.stderr
