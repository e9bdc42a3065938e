"""harness.py — a fleet of kipp-server replicas behind real routers, for tests/cluster and
bench/cluster_bench.py.

Topology (netns mode, the default where the kernel allows it): a private Linux bridge
<prefix>b with address 10.X.Y.1/24 in the root namespace, and per replica a network
namespace <prefix>n<i> joined to the bridge by a veth pair (<prefix>v<i> outside, eth0
inside, 10.X.Y.(10+i)); each kipp-server binds its namespace's address on port 8000. The
routers (HAProxy from a generated config, vllm-router) run in the root namespace and reach
the replicas over the bridge; nothing else is addressed. Loopback mode (namespaces refused,
or KIPP_CLUSTER_NETNS=0): replica i binds 127.A.B.(10+i) on one free port, no namespaces.

Logs go to a folder under $KIPP_CLUSTER_LOGS (kept), else to a temporary folder removed at
close. Names start with $KIPP_CLUSTER_PREFIX when set (tests/cluster/run_cluster_tests.sh sets it
and deletes whatever is left with that prefix in its EXIT trap), else kc<pid>; each fleet
adds a letter. Processes are started and killed by PID. Everything is torn down in
Fleet.close(), which a finally, atexit and the SIGTERM/SIGINT/SIGHUP handlers all reach.

Optional kipp-server features (--drain-delay, --metrics-compat, --kv-events,
--kv-events-replay, --max-connections-per-ip 0) are used when `kipp-server --help` names
them; features() says which, and tests that need one skip with the reason otherwise.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ (run from tests/cluster or as bench.cluster_bench)
    sys.path.insert(0, str(ROOT))
from bench import server_common as sc  # noqa: E402
BUILD = os.environ.get("BUILD", "build")
SERVER_BIN = str(ROOT / BUILD / "kipp-server")
MODEL = str(ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf")
MODEL_NAME = "kipp-tiny-tied-bf16"
VLLM_ROUTER = str(ROOT / ".venv" / "bin" / "vllm-router")
REPLICA_PORT = 8000
KV_EVENTS_PORT, KV_REPLAY_PORT = 5557, 5558
BLOCK_TOKENS = 16

_live: list["Fleet"] = []
_handlers_installed = False


# ---- what this kipp-server offers ---------------------------------------------------------

_features: dict | None = None


def features() -> dict:
    """{name: bool} for the optional kipp-server features, read from --help once."""
    global _features
    if _features is None:
        try:
            h = subprocess.run([SERVER_BIN, "--help"], capture_output=True, text=True, timeout=20)
            text = h.stdout + h.stderr
        except OSError:
            text = ""
        per_ip = re.search(r"--max-connections-per-ip N(.*?)(?=\n\s{0,8}-)", text, re.S)
        _features = {
            "drain_delay": "--drain-delay" in text,
            "metrics_compat": "--metrics-compat" in text,
            "kv_events": "--kv-events" in text,
            "kv_events_replay": "--kv-events-replay" in text,
            "per_ip_unlimited": bool(per_ip and re.search(r"\b0\s*(=|:|means|for)\s*(no|un)", per_ip.group(1))),
        }
    return _features


def missing(feature: str) -> str | None:
    """None when kipp-server offers the feature, else the reason a test skips."""
    flag = {"drain_delay": "--drain-delay", "metrics_compat": "--metrics-compat",
            "kv_events": "--kv-events", "kv_events_replay": "--kv-events-replay"}.get(feature, feature)
    if features().get(feature):
        return None
    return f"this kipp-server has no {flag} (its --help does not name it)"


def versions() -> dict:
    def first_line(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            return (r.stdout or r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return None
    router = None
    try:
        from importlib import metadata
        router = metadata.version("vllm-router")
    except Exception:  # noqa: BLE001 — any failure: the version is unknown
        pass
    return {"haproxy": first_line(["haproxy", "-v"]), "vllm_router": router,
            "kipp_server": first_line([SERVER_BIN, "--version"])}


def router_tokenize_missing(replica: "Replica") -> str | None:
    """vllm-router 0.1.17's cache_aware and kv_aware policies ask the worker to tokenize each
    request, by vLLM's POST /v1/completions/render ({"token_ids": [...]}) or, refused, POST
    /tokenize {"model", "prompt"} ({"tokens": [...]}); with neither the router logs 'Prefix
    input preparation unavailable' and routes without its prefix tree."""
    body = {"model": MODEL_NAME, "prompt": "probe"}
    if replica.request("POST", "/v1/completions/render", body)[0] == 200:
        return None
    st, _, raw = replica.request("POST", "/tokenize", body)
    if st == 200 and b'"count"' in raw:   # the router reads count
        return None
    return (f"kipp-server answers neither POST /v1/completions/render nor vLLM's /tokenize body "
            f"({{\"prompt\": ...}}: {st}), which vllm-router's cache_aware/kv_aware use to tokenize a "
            "request: they route without a prefix tree")


# ---- network ------------------------------------------------------------------------------

def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def netns_refused() -> str | None:
    """None when this process may create namespaces and bridges, else why not."""
    if os.environ.get("KIPP_CLUSTER_NETNS", "") == "0":
        return "KIPP_CLUSTER_NETNS=0"
    if shutil.which("ip") is None:
        return "no ip(8) command"
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    probe = f"kcp{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"ip netns add refused: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    r = _ip("link", "add", probe, "type", "bridge", check=False)
    if r.returncode != 0:
        return f"ip link add type bridge refused: {r.stderr.strip()}"
    _ip("link", "del", probe, check=False)
    return None


def _free_subnet() -> str:
    """A 10.X.Y.0/24 no route of this machine covers (picked from the pid, then random)."""
    routes = _ip("-4", "route", "show", "table", "all", check=False).stdout
    used = set(re.findall(r"\b10\.(\d+)\.(\d+)\.", routes))
    rng = random.Random(os.getpid())
    for _ in range(500):
        x, y = rng.randrange(200, 250), rng.randrange(1, 255)
        if (str(x), str(y)) not in used:
            return f"10.{x}.{y}"
    raise RuntimeError("no free 10.x.y.0/24 subnet for the cluster bridge")


def free_port(host: str = "127.0.0.1") -> int:
    s = socket.socket()
    try:
        s.bind((host, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _prefix() -> str:
    p = os.environ.get("KIPP_CLUSTER_PREFIX") or f"kc{os.getpid()}"
    if not re.fullmatch(r"[a-z][a-z0-9]{1,9}", p):
        raise ValueError(f"KIPP_CLUSTER_PREFIX must be 2-10 lower-case letters/digits, got '{p}'")
    return p


# ---- processes ----------------------------------------------------------------------------

def _record_pid(proc: subprocess.Popen, what: str) -> None:
    """Appends "PID WHAT" to $KIPP_CLUSTER_PIDFILE (run_cluster_tests.sh's EXIT trap kills
    the PIDs still running WHAT when this process died without its own teardown)."""
    path = os.environ.get("KIPP_CLUSTER_PIDFILE")
    if path:
        with open(path, "a") as f:
            f.write(f"{proc.pid} {what}\n")


def _kill_pid(proc: subprocess.Popen | None, sig=signal.SIGKILL, wait: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


class Replica:
    """One kipp-server, in its namespace (ns) or on a loopback address."""

    def __init__(self, fleet: "Fleet", index: int, host: str, ns: str | None):
        self.fleet, self.index, self.host, self.ns = fleet, index, host, ns
        self.port = fleet.port
        self.name = f"s{index}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.kv_ports = (KV_EVENTS_PORT, KV_REPLAY_PORT) if ns else (free_port(), free_port())

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log(self) -> str:
        return os.path.join(self.fleet.log_dir, f"{self.name}.{self.starts}.log")

    def argv(self) -> list[str]:
        f = features()
        a = [SERVER_BIN, "--model", self.fleet.model, "--backend", "cpu", "--threads", "1",
             "--host", self.host, "--port", str(self.port), "--allowed-host", "*",
             "--max-connections-per-ip", "0" if f["per_ip_unlimited"] else "4096",
             *self.fleet.server_args]
        if f["metrics_compat"]:
            a += ["--metrics-compat", "vllm"]
        if self.fleet.kv_events and f["kv_events"]:
            # kipp-server binds an endpoint with '*' (else it connects); each namespace has its
            # own ports, loopback replicas get free ones
            a += ["--kv-events", f"tcp://*:{self.kv_ports[0]}"]
            if f["kv_events_replay"]:
                a += ["--kv-events-replay", f"tcp://*:{self.kv_ports[1]}"]
        if self.ns:
            a = ["ip", "netns", "exec", self.ns, *a]   # ip execs the server: the PID is kipp-server's
        return a

    @property
    def kv_endpoint(self) -> str:
        """Where a router connects for this replica's KV events."""
        return f"tcp://{self.host}:{self.kv_ports[0]}"

    @property
    def kv_replay_endpoint(self) -> str:
        return f"tcp://{self.host}:{self.kv_ports[1]}"

    def start(self, wait: bool = True, timeout: float = 60.0) -> "Replica":
        self.starts += 1
        with open(self.log, "wb") as lf:
            self.proc = subprocess.Popen(self.argv(), stdout=lf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=ROOT)
        _record_pid(self.proc, "kipp-server")
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.request("GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {self.name}: /health not 200 within {timeout} s\n{self.log_tail()}")
            time.sleep(0.03)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        _kill_pid(self.proc, signal.SIGKILL)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (kipp-server drains), SIGKILL after timeout; the exit status."""
        _kill_pid(self.proc, signal.SIGTERM, timeout)
        return None if self.proc is None else self.proc.returncode

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log, "rb") as f:
                return f"--- {self.name} log ---\n" + f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def request(self, method, path, body=None, headers=None, timeout=30.0):
        return http_request(self.host, self.port, method, path, body, headers, timeout)

    def metrics(self) -> dict:
        st, _, raw = self.request("GET", "/metrics")
        if st != 200:
            raise RuntimeError(f"{self.name} /metrics answered {st}")
        return parse_metrics(raw.decode())


class Fleet:
    """n replicas plus the routers started on them; close() tears everything down."""

    def __init__(self, n: int, server_args: list[str] | tuple = (), model: str = MODEL,
                 kv_events: bool = False, spare: int = 0):
        """spare: namespaces made ready for replicas added later (add_replica)."""
        self.model, self.server_args, self.kv_events = model, list(server_args), kv_events
        self.replicas: list[Replica] = []
        self.routers: list = []
        self.closed = False
        logs = os.environ.get("KIPP_CLUSTER_LOGS")
        self.log_dir = os.path.abspath(tempfile.mkdtemp(prefix="kipp-cluster-", dir=logs))
        self.netns_refusal = netns_refused()
        self.mode = "loopback" if self.netns_refusal else "netns"
        self.tag = _prefix() + "abcdefghijklmnopqrstuvwxyz"[len(_live) % 26]
        self.bridge = None
        self.namespaces: list[str] = []
        _live.append(self)
        _install_handlers()
        try:
            if self.mode == "netns":
                self.subnet = _free_subnet()
                self.port = REPLICA_PORT
                self.bridge = self.tag + "b"
                _ip("link", "add", self.bridge, "type", "bridge")
                _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
                _ip("link", "set", self.bridge, "up")
            else:
                rng = random.Random(os.getpid() * 31 + len(_live))
                self.subnet = f"127.{rng.randrange(100, 250)}.{rng.randrange(1, 250)}"
                self.port = free_port()
            for _ in range(n + spare):
                self._make_slot()
            for r in self.replicas[:n]:
                r.start(wait=False)
            for r in self.replicas[:n]:
                r.wait_ready()
        except BaseException:
            self.close()
            raise

    def describe(self) -> str:
        why = f" ({self.netns_refusal})" if self.netns_refusal else ""
        return (f"cluster mode: {self.mode}{why}; replicas {', '.join(r.url for r in self.running)}; "
                f"logs {self.log_dir}")

    def _make_slot(self) -> Replica:
        i = len(self.replicas)
        host = f"{self.subnet}.{10 + i}"
        ns = None
        if self.mode == "netns":
            ns, veth = f"{self.tag}n{i}", f"{self.tag}v{i}"
            _ip("netns", "add", ns)
            self.namespaces.append(ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{host}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        r = Replica(self, i, host, ns)
        self.replicas.append(r)
        return r

    @property
    def running(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive()]

    def add_replica(self) -> Replica:
        """Starts the next replica (a spare slot, or a new one)."""
        for r in self.replicas:
            if r.proc is None:
                return r.start()
        return self._make_slot().start()

    def restart_all(self) -> None:
        """Fresh processes (empty prefix caches, zeroed counters) on the same addresses."""
        live = self.running
        for r in live:
            r.kill()
        for r in live:
            r.start(wait=False)
        for r in live:
            r.wait_ready()

    def fleet_metrics(self) -> dict:
        return {r.name: r.metrics() for r in self.running}

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for rt in self.routers:
            try:
                rt.stop()
            except Exception:  # noqa: BLE001 — tear down the rest whatever happens
                pass
        for r in self.replicas:
            _kill_pid(r.proc, signal.SIGKILL)
        for ns in self.namespaces:
            _ip("netns", "del", ns, check=False)
        if self.bridge:
            _ip("link", "del", self.bridge, check=False)
        if not os.environ.get("KIPP_CLUSTER_LOGS"):   # a temporary folder: nothing left in /tmp
            shutil.rmtree(self.log_dir, ignore_errors=True)
        if self in _live:
            _live.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def close_all() -> None:
    for f in list(_live):
        f.close()


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(close_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        prev = signal.getsignal(sig)

        def handler(signum, frame, prev=prev):
            close_all()
            if callable(prev):
                prev(signum, frame)
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
        signal.signal(sig, handler)


# ---- routers ------------------------------------------------------------------------------

class HAProxy:
    """HAProxy from a generated config: frontend on 127.0.0.1:port, backend be with one
    server per replica slot (slots not yet started are in maintenance), active checks on
    /health, retries and redispatch on connection failure, a runtime API socket.
    balance: roundrobin, leastconn or chash (bounded-load consistent hash on X-Session-Id)."""

    def __init__(self, fleet: Fleet, balance: str = "roundrobin", check_inter_ms: int = 300,
                 fall: int = 2, rise: int = 1, retry_503: bool = False, balance_factor: int | None = 150):
        """balance_factor: chash's hash-balance-factor (a server takes at most this percent of
        the mean load; None: plain consistent hashing, no bound)."""
        self.fleet, self.balance, self.balance_factor = fleet, balance, balance_factor
        self.port = free_port()
        d = tempfile.mkdtemp(prefix="haproxy-", dir=fleet.log_dir)
        # a unix socket path has at most 107 bytes: the socket lives in a short folder of its own
        self.sock_dir = tempfile.mkdtemp(prefix="kc-hap-")
        self.sock = os.path.join(self.sock_dir, "admin.sock")
        self.cfg = os.path.join(d, "haproxy.cfg")
        self.log = os.path.join(d, "haproxy.log")
        if balance == "chash":
            bal = "    balance hdr(X-Session-Id)\n    hash-type consistent\n"
            if balance_factor is not None:
                bal += f"    hash-balance-factor {balance_factor}\n"
        elif balance in ("roundrobin", "leastconn"):
            bal = f"    balance {balance}\n"
        else:
            raise ValueError(f"HAProxy balance is roundrobin, leastconn or chash, not '{balance}'")
        servers = []
        for r in fleet.replicas:
            state = "" if r.proc is not None else " disabled"
            servers.append(f"    server {r.name} {r.host}:{r.port} check inter {check_inter_ms}ms "
                           f"fall {fall} rise {rise}{state}\n")
        retry_on = "conn-failure empty-response" + (" 503" if retry_503 else "")
        text = (
            "global\n"
            f"    stats socket {self.sock} mode 600 level admin\n"
            "    maxconn 4096\n"
            "defaults\n"
            "    mode http\n"
            "    timeout connect 2s\n"
            "    timeout client 120s\n"
            "    timeout server 120s\n"
            "    timeout http-request 10s\n"
            "    retries 3\n"
            f"    retry-on {retry_on}\n"
            "    option redispatch 1\n"
            "frontend fe\n"
            f"    bind 127.0.0.1:{self.port}\n"
            "    default_backend be\n"
            "backend be\n"
            f"{bal}"
            "    option httpchk GET /health\n"
            "    http-check expect status 200\n"
            "    http-response set-header X-Served-By %s\n"
            + "".join(servers))
        with open(self.cfg, "w") as f:
            f.write(text)
        chk = subprocess.run(["haproxy", "-c", "-f", self.cfg], capture_output=True, text=True)
        if chk.returncode != 0:
            raise RuntimeError(f"haproxy -c rejected {self.cfg}:\n{chk.stdout}{chk.stderr}\n{text}")
        with open(self.log, "wb") as lf:
            self.proc = subprocess.Popen(["haproxy", "-db", "-f", self.cfg], stdout=lf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        _record_pid(self.proc, "haproxy")
        fleet.routers.append(self)
        self.host = "127.0.0.1"
        _wait_port(self.host, self.port, self.proc, self.log)
        self.wait_up([r.name for r in fleet.running])

    @property
    def name(self) -> str:
        if self.balance == "chash" and self.balance_factor != 150:
            return f"haproxy-chash-{'unbounded' if self.balance_factor is None else f'f{self.balance_factor}'}"
        return f"haproxy-{self.balance}"

    def runtime(self, cmd: str) -> str:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        try:
            s.connect(self.sock)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
            return out.decode()
        finally:
            s.close()

    def stat(self) -> dict:
        """{server name: {field: value}} from `show stat` (status, scur, ...)."""
        lines = self.runtime("show stat").splitlines()
        head = lines[0].lstrip("# ").split(",")
        out = {}
        for ln in lines[1:]:
            if not ln.strip():
                continue
            row = dict(zip(head, ln.split(",")))
            if row.get("pxname") == "be" and row.get("svname") not in ("BACKEND", "FRONTEND"):
                out[row["svname"]] = row
        return out

    def status(self, server: str) -> str:
        return self.stat()[server]["status"]

    def wait_status(self, server: str, want: str, timeout: float = 20.0) -> float:
        """Seconds until the server's status starts with want (UP, DOWN, DRAIN, MAINT)."""
        t0 = time.monotonic()
        while True:
            st = self.status(server)
            if st.startswith(want):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"haproxy: {server} is {st}, not {want}, after {timeout} s")
            time.sleep(0.02)

    def wait_up(self, servers: list[str], timeout: float = 20.0) -> None:
        for s in servers:
            self.wait_status(s, "UP", timeout)

    def stop(self) -> None:
        _kill_pid(self.proc, signal.SIGTERM, 5)
        shutil.rmtree(self.sock_dir, ignore_errors=True)


class VllmRouter:
    """vllm-router (PyPI) with one --policy over the running replicas."""

    def __init__(self, fleet: Fleet, policy: str = "cache_aware", extra: list[str] | tuple = ()):
        if not os.access(VLLM_ROUTER, os.X_OK):
            raise RuntimeError(f"{VLLM_ROUTER} is missing (tools/requirements.txt: vllm-router)")
        self.fleet, self.policy = fleet, policy
        self.host, self.port = "127.0.0.1", free_port()
        self.log = os.path.join(fleet.log_dir, f"vllm-router-{policy}-{self.port}.log")
        argv = [VLLM_ROUTER, "--host", self.host, "--port", str(self.port), "--policy", policy,
                "--worker-urls", *[r.url for r in fleet.running],
                "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
                "--health-check-endpoint", "/health", "--log-level", "warning",
                "--prometheus-port", str(free_port()), *extra]
        if policy == "kv_aware":
            argv += ["--kv-event-block-size", str(BLOCK_TOKENS), "--kv-event-model", MODEL_NAME]
            for r in fleet.running:
                argv += ["--kv-event-source", f"{r.url}={r.kv_endpoint}"]
                if features()["kv_events_replay"]:
                    argv += ["--kv-event-replay-source", f"{r.url}={r.kv_replay_endpoint}"]
        self.argv = argv
        with open(self.log, "wb") as lf:
            self.proc = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _record_pid(self.proc, "vllm-router")
        fleet.routers.append(self)
        _wait_port(self.host, self.port, self.proc, self.log, path="/health")

    @property
    def name(self) -> str:
        return f"vllm-router-{self.policy}"

    def stop(self) -> None:
        _kill_pid(self.proc, signal.SIGTERM, 5)


def _wait_port(host, port, proc, log, path: str | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if path is None:
                socket.create_connection((host, port), timeout=1).close()
                return
            if http_request(host, port, "GET", path, timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(log, "rb") as f:
                tail = f.read().decode("utf-8", "replace")[-3000:]
            raise RuntimeError(f"router on {host}:{port} did not come up (exit {proc.poll()}):\n{tail}")
        time.sleep(0.05)


# ---- HTTP and metrics ---------------------------------------------------------------------

def http_request(host, port, method, path, body=None, headers=None, timeout=30.0):
    """(status, {lower-case header: value}, body bytes) on a fresh connection: bench's
    server_common.http_request, with a dict or list body sent as JSON."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    return sc.http_request(host, port, method, path, body=body, headers=headers, timeout=timeout)


class Stream:
    """A streamed completion through a router: outcome is "done" (a finish_reason and
    [DONE]), "error" (an error event, a non-200 status), or "cut" (the connection ended or
    failed before [DONE])."""

    def __init__(self):
        self.status = 0
        self.events: list = []
        self.outcome = ""
        self.detail = ""
        self.first_event = threading.Event()
        self.served_by = None


def stream_completion(host, port, body: dict, headers=None, timeout=60.0, st: Stream | None = None) -> Stream:
    st = st or Stream()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        h.update(headers or {})
        conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}).encode(), headers=h)
        r = conn.getresponse()
        st.status = r.status
        st.served_by = r.getheader("X-Served-By")
        if r.status != 200:
            st.outcome, st.detail = "error", r.read()[:300].decode("utf-8", "replace")
            return st
        while True:
            line = r.readline()
            if not line:
                st.outcome, st.detail = "cut", "connection closed before [DONE]"
                return st
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                fin = any((c.get("choices") or [{}])[0].get("finish_reason") for c in st.events)
                st.outcome = "done" if fin else "cut"
                st.detail = "" if fin else "[DONE] without a finish_reason"
                return st
            ev = json.loads(payload)
            st.events.append(ev)
            st.first_event.set()
            if "error" in ev:
                st.outcome, st.detail = "error", json.dumps(ev["error"])[:300]
                return st
    except (OSError, http.client.HTTPException, ValueError) as e:
        st.outcome, st.detail = "cut", f"{type(e).__name__}: {e}"
        return st
    finally:
        st.first_event.set()
        conn.close()


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')


def parse_metrics(text: str) -> dict:
    """{name: total over all label sets} plus {name{labels}: value} for labelled samples."""
    out: dict = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        m = _SAMPLE.match(ln)
        if not m:
            continue
        v = float(m.group(4))
        out[m.group(1)] = out.get(m.group(1), 0.0) + v
        if m.group(3):
            out[f"{m.group(1)}{{{m.group(3)}}}"] = v
    return out


def cache_figures(per_replica: dict) -> dict:
    """Fleet prefix-cache figures from each replica's /metrics (counters since its start):
    prompt tokens, tokens the prefix cache served, prefill tokens computed (the rest),
    token hit rate, requests per replica and balance (max / mean requests)."""
    prompt = hit = live = 0.0
    reqs = {}
    for name, m in per_replica.items():
        prompt += m.get("kipp_prompt_tokens_total", 0)
        hit += m.get("kipp_prefix_cache_hit_tokens_total", 0)
        live += m.get("kipp_prefix_live_tokens_total", 0)
        reqs[name] = int(sum(v for k, v in m.items()
                             if k.startswith("kipp_requests_total{") and 'endpoint="completions"' in k
                             and 'status="200"' in k))
    mean = sum(reqs.values()) / max(1, len(reqs))
    return {"prompt_tokens": int(prompt), "cached_tokens": int(hit), "prefill_tokens": int(prompt - hit - live),
            "hit_rate": round(hit / prompt, 4) if prompt else 0.0, "requests_per_replica": reqs,
            "balance": round(max(reqs.values()) / mean, 3) if mean else None}
