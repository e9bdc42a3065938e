"""kipp-server behind a load balancer or router (docs/server.md, "Behind a load balancer"):
the load metrics under Kipp's names and, with --metrics-compat vllm only, under vLLM's;
GET /livez beside /health; --drain-delay (health 503 at once, requests still served, then
the drain); a request cut by --shutdown-timeout ends with an error in every protocol's shape,
never a normal finish; a Host naming the address a connection arrived on is accepted;
--max-connections-per-ip 0 lifts the per-address limit."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import MODEL_NAME, SERVER_BIN, TIMEOUT_SCALE, Srv, start_server
from bench import server_common as sc

KEY = "balancer-test-key-0123456789"


@pytest.fixture(scope="module")
def compat():
    """--metrics-compat vllm (twice: repeatable), no per-address limit, bound to every
    address (as in a pod) with an API key; --allowed-host 0.0.0.0 lets the fixture's own
    client, which connects to and names 0.0.0.0, in."""
    s = start_server("balancer-compat", "--metrics-compat", "vllm", "--metrics-compat", "vllm",
                     "--max-connections-per-ip", "0", "--host", "0.0.0.0", "--allowed-host", "0.0.0.0",
                     "--api-key", KEY, "--parallel", "2", threads="1")
    return Srv(s, api_key=KEY)


def _get(host: str, port: int, path: str, headers: dict | None = None):
    conn = http.client.HTTPConnection(host, port, timeout=10 * TIMEOUT_SCALE)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def stalled_chat(srv: Srv, max_tokens: int = 400) -> socket.socket:
    """A streamed chat whose client reads its first bytes and then stops reading: with 20
    alternatives per token (~2 KB an event) the socket buffers fill within ~100 tokens and
    the window pauses the sequence, which keeps its KV blocks until the socket is closed."""
    body = json.dumps({"model": srv.model, "messages": [{"role": "user", "content": "count on"}],
                       "max_tokens": max_tokens, "stream": True, "logprobs": True, "top_logprobs": 20,
                       "ignore_eos": True}).encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30 * TIMEOUT_SCALE)
    s.connect((srv.host, srv.port))
    auth = f"Authorization: Bearer {srv.api_key}\r\n" if srv.api_key else ""
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {srv.host}:{srv.port}\r\n{auth}"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
    head = s.recv(1024)
    assert head.startswith(b"HTTP/1.1 200"), head
    return s


def poll_metrics(srv: Srv, cond, what: str, timeout: float = 20):
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while True:
        m = srv.metrics()
        if cond(m):
            return m
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not seen within {timeout} s\n{srv.proc.stderr_tail()}")
        time.sleep(0.02)


# ---- metrics ------------------------------------------------------------------------------

def test_kipp_load_metrics_idle(server):
    """Kipp's names, idle: KV use 0 (blocks the prefix cache holds alone count as free),
    cache_config_info naming the pool the start-up line reports; no vLLM names without the
    flag."""
    server.complete(sc.synthetic_ids(100, offset=4242), max_tokens=4)  # 6 blocks for the cache
    m = server.wait_idle()
    assert m.get("kipp_kv_blocks_cached") >= 6, "the prefix cache kept no blocks: nothing checked"
    assert m.types["kipp_kv_cache_usage_ratio"] == "gauge"
    assert m.get("kipp_kv_cache_usage_ratio") == 0, m.get("kipp_kv_blocks_cached")
    assert m.types["kipp_prefix_cache_queries_total"] == "counter"
    assert m.get("kipp_prefix_cache_queries_total") >= m.get("kipp_prefix_cache_hit_tokens_total") > -1
    info = [lb for n, lb, v in m.samples if n == "kipp_cache_config_info" and v == 1]
    assert len(info) == 1, info
    line = re.search(r"KV (\S+), KV pool (\d+) blocks of (\d+) tokens", server.proc.stderr_tail(10 ** 6))
    assert line, "no KV pool in the start-up line"
    assert info[0] == {"block_size": line.group(3), "num_blocks": line.group(2), "cache_type": line.group(1)}
    assert int(info[0]["num_blocks"]) == m.get("kipp_kv_blocks_total")
    assert not any(n.startswith("vllm:") for n in m.names()), sorted(n for n in m.names() if ":" in n)


def test_usage_and_compat_names_with_a_stream_running(compat):
    """With a stream holding KV, the usage fraction is (used - cached-only) / total, > 0, and
    vLLM's names give the same figures with vLLM's labels."""
    compat.wait_idle()
    sock = stalled_chat(compat)
    try:
        m = poll_metrics(compat, lambda m: m.get("kipp_kv_cache_usage_ratio") > 0 and m.get("kipp_paused_sequences") >= 1,
                         "a paused stream holding KV")
        total, used, cached = (m.get(k) for k in ("kipp_kv_blocks_total", "kipp_kv_blocks_used", "kipp_kv_blocks_cached"))
        usage = m.get("kipp_kv_cache_usage_ratio")
        assert 0 < usage <= 1 and usage == pytest.approx((used - cached) / total)
        lb = {"model_name": MODEL_NAME}
        assert m.get("vllm:kv_cache_usage_perc", **lb) == usage
        assert m.get("vllm:gpu_cache_usage_perc", **lb) == usage
        assert m.get("vllm:num_requests_running", **lb) == m.get("kipp_running_sequences") >= 1
        assert m.get("vllm:num_requests_waiting", **lb) == m.get("kipp_queue_depth")
        assert m.get("vllm:prefix_cache_queries_total", **lb) == m.get("kipp_prefix_cache_queries_total") > 0
        assert m.get("vllm:prefix_cache_hits_total", **lb) == m.get("kipp_prefix_cache_hit_tokens_total")
        for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info",
                     "vllm:cache_config_info"):
            assert m.types[name] == "gauge", name
        assert m.types["vllm:prefix_cache_queries_total"] == "counter"
        cfg = [lb for n, lb, v in m.samples if n == "vllm:cache_config_info" and v == 1]
        assert len(cfg) == 1 and cfg[0]["num_gpu_blocks"] == str(int(total)), cfg
        assert cfg[0]["block_size"] == "16" and cfg[0]["enable_prefix_caching"] == "True", cfg
        lora = [(lb, v) for n, lb, v in m.samples if n == "vllm:lora_requests_info"]
        assert len(lora) == 1 and lora[0][0] == {"max_lora": "0", "running_lora_adapters": "",
                                                 "waiting_lora_adapters": ""}, lora
        assert abs(lora[0][1] - time.time()) < 60, lora  # a timestamp: the picker keeps the latest
        st, _, body = compat.request("GET", "/get_load")  # vllm-router's power_of_two polls it
        assert st == 200 and json.loads(body)["load"] >= 1, body
    finally:
        sock.close()
    assert compat.wait_idle().get("vllm:kv_cache_usage_perc", model_name=MODEL_NAME) == 0
    st, _, body = compat.request("GET", "/get_load")
    assert st == 200 and json.loads(body) == {"load": 0}, body


def test_metrics_compat_refuses_other_values():
    r = subprocess.run([SERVER_BIN, "--metrics-compat", "prometheus"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--metrics-compat accepts vllm (got 'prometheus')" in r.stderr, r.stderr


# ---- liveness, Host, per-address limit ----------------------------------------------------

def test_livez(server, compat):
    st, _, body = server.request("GET", "/livez")
    assert st == 200 and json.loads(body) == {"status": "alive"}
    # no API key needed, as for /health (probes carry none)
    st, _, body = _get(compat.host, compat.port, "/livez")
    assert st == 200, body


def _addresses() -> list[str]:
    """Non-loopback IPv4 addresses of this machine."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in out if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", a) and not a.startswith("127.")]


def test_host_naming_the_arrival_address_is_accepted(compat):
    """Bound to every address (a pod's), the server takes a request whose Host is the address
    the connection arrived on, with or without the port, as a balancer or a kubelet probe
    sends it; another address is still refused. 127.0.0.2 (no loopback *name*) arrives on
    lo; a non-loopback address of this machine is tried too when there is one."""
    h = {"Authorization": f"Bearer {KEY}"}
    for addr in ["127.0.0.2", *_addresses()[:1]]:
        for host in (f"{addr}:{compat.port}", addr):
            st, _, body = _get(addr, compat.port, "/v1/models", {**h, "Host": host})
            assert st == 200, (addr, host, body)
        st, _, body = _get(addr, compat.port, "/v1/models", {**h, "Host": f"127.0.0.3:{compat.port}"})
        assert st == 403 and b"host_not_allowed" in body, (addr, body)


def test_no_per_address_limit(compat):
    """--max-connections-per-ip 0: more than the default 64 connections from one address
    are all served (behind a balancer they all come from its address)."""
    conns = []
    try:
        for _ in range(72):
            c = http.client.HTTPConnection(compat.host, compat.port, timeout=10 * TIMEOUT_SCALE)
            c.connect()
            conns.append(c)
        for c in conns:
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            assert r.status == 200
    finally:
        for c in conns:
            c.close()


# ---- drain delay --------------------------------------------------------------------------

def test_drain_delay_health_first_then_drain():
    delay = int(2 * TIMEOUT_SCALE)  # a sanitized server is slower to answer within it
    s = start_server("balancer-delay", "--drain-delay", str(delay), threads="1")
    srv = Srv(s)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    while True:  # /health goes 503 at once
        st, hd, body = srv.request("GET", "/health")
        if st == 503:
            break
        assert time.monotonic() - t0 < 0.5 * TIMEOUT_SCALE, "health still 200 0.5 s after SIGTERM"
        time.sleep(0.01)
    assert json.loads(body) == {"status": "draining"} and hd.get("connection") == "close", (body, hd)
    st, _, body = srv.request("GET", "/livez")  # alive: liveness is not readiness
    assert st == 200, body
    # new connections and requests are still served during the delay
    js = srv.complete("still served", max_tokens=3)
    assert js["choices"][0]["text"] is not None
    assert time.monotonic() - t0 < delay, "the POST was not served within the delay"
    assert f"still serving new requests for {delay} s (--drain-delay" in s.stderr_tail()
    # after the delay, the listener is closed: refused
    deadline = t0 + delay + 8 * TIMEOUT_SCALE
    while True:
        try:
            st, _, _ = srv.request("GET", "/health", timeout=2)
        except OSError:
            break
        assert time.monotonic() < deadline, f"still accepting long after the --drain-delay {delay}"
        time.sleep(0.05)
    assert time.monotonic() - t0 >= delay - 0.1, "refused before the drain delay was over"
    assert s.proc.wait(15 * TIMEOUT_SCALE) == 0


def test_second_signal_ends_the_drain_delay():
    s = start_server("balancer-delay-skip", "--drain-delay", "60", threads="1")
    srv = Srv(s)
    s.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5 * TIMEOUT_SCALE
    while srv.request("GET", "/health")[0] != 503:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(10 * TIMEOUT_SCALE) == 0  # idle: the drain is immediate
    assert time.monotonic() - t0 < 5 * TIMEOUT_SCALE
    assert "second signal: the drain delay ends" in s.stderr_tail()


# ---- a request cut by the shutdown timeout ------------------------------------------------

def _post_raw(srv: Srv, path: str, body: dict, out: dict, key: str):
    """POSTs body and stores (status, raw body) under out[key] when the connection closes."""
    try:
        conn = http.client.HTTPConnection(srv.host, srv.port, timeout=60 * TIMEOUT_SCALE)
        conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        out[key] = (r.status, r.read().decode())
        conn.close()
    except Exception as e:  # noqa: BLE001 - reported by the assertions
        out[key] = e


def test_shutdown_cut_is_an_error_in_every_protocol():
    """--shutdown-timeout 0 cuts at once what runs at SIGTERM: each stream ends with its
    protocol's error (no [DONE], no finish, no stop event), a non-streamed answer is a 503."""
    s = start_server("balancer-cut", "--parallel", "5", "--shutdown-timeout", "0", threads="1")
    srv = Srv(s)
    msgs = [{"role": "user", "content": "go on"}]
    reqs = {
        "chat": ("/v1/chat/completions", {"model": MODEL_NAME, "messages": msgs, "max_tokens": 480,
                                          "stream": True, "ignore_eos": True}),
        "chat_whole": ("/v1/chat/completions", {"model": MODEL_NAME, "messages": msgs, "max_tokens": 480,
                                                "ignore_eos": True}),
        "anthropic": ("/v1/messages", {"model": MODEL_NAME, "messages": msgs, "max_tokens": 480, "stream": True}),
        "responses": ("/v1/responses", {"model": MODEL_NAME, "input": "go on", "max_output_tokens": 480,
                                        "stream": True}),
        "ollama": ("/api/chat", {"model": MODEL_NAME, "messages": msgs, "stream": True,
                                 "options": {"num_predict": 480}}),
    }
    out: dict = {}
    ts = [threading.Thread(target=_post_raw, args=(srv, p, b, out, k), daemon=True) for k, (p, b) in reqs.items()]
    for t in ts:
        t.start()
    poll_metrics(srv, lambda m: m.get("kipp_running_sequences") + m.get("kipp_queue_depth") >= len(reqs),
                 "all five requests in flight")
    s.proc.send_signal(signal.SIGTERM)
    for t in ts:
        t.join(30 * TIMEOUT_SCALE)
    assert s.proc.wait(15 * TIMEOUT_SCALE) == 0
    for k, v in out.items():
        assert isinstance(v, tuple), (k, v)
    st, body = out["chat"]
    data = [ln[6:] for ln in body.splitlines() if ln.startswith("data: ")]
    assert st == 200 and "[DONE]" not in data and '"finish_reason":"length"' not in body, body[-500:]
    err = json.loads(data[-1])["error"]
    assert err["type"] == "server_shutdown" and "shutting down" in err["message"], err
    st, body = out["chat_whole"]
    assert st == 503 and json.loads(body)["error"]["type"] == "server_shutdown", (st, body)
    st, body = out["anthropic"]
    assert st == 200 and "event: message_stop" not in body and "event: message_delta" not in body, body[-500:]
    last = body.strip().split("\n\n")[-1]
    assert last.startswith("event: error\n"), last
    assert json.loads(last.split("data: ", 1)[1])["error"]["type"] == "overloaded_error", last
    st, body = out["responses"]
    assert st == 200 and "response.completed" not in body and "response.incomplete" not in body, body[-500:]
    assert "event: error" in body and '"code":"server_shutdown"' in body and "event: response.failed" in body
    st, body = out["ollama"]
    lines = [json.loads(ln) for ln in body.splitlines() if ln.strip()]
    assert st == 200 and "shutting down" in lines[-1]["error"], lines[-2:]
    assert not any(ln.get("done") for ln in lines), lines[-2:]
    assert "clients get a server_shutdown error" in s.stderr_tail()
