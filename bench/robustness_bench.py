#!/usr/bin/env python3
"""robustness_bench.py — kipp-server against hostile and careless clients; writes the record
bench/results/server-robustness-<model>.json. Protocol: bench/README.md ("Robustness").
The hostile cases, the raw HTTP client and the reply classification live in
bench/robustness_cases.py.

Five phases (--phases hostile,rss,slow,drain,attack; each starts its own fresh server, so
one phase cannot spoil another's figures):

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
           rejected_501 a 501 Not Implemented (an unknown transfer coding)
           kept_open    an error answer to a framing case after which RFC 9112 requires the
                        connection closed (Content-Length with Transfer-Encoding, an unknown
                        coding, a broken chunk size), but the server kept it open
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
         16) x bytes per token (the start-up line, in the pool's KV type; servers without it:
         2 (K and V) x n_layer x n_head_kv x head_dim x 4 (f32) from the GGUF header).
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

attack   Issue 30's ten hostile classes (bench/robustness_attack.py; cases and acceptable
         outcomes: robustness_cases.py ATTACK_EXPECT), each on a fresh server: the
         unloaded latency of a plain 4-token chat (--attack-unloaded samples, the worst
         is the reference), idle VmRSS and the KV pool; then the class runs while the same
         plain chat is timed in a loop (worst latency, target <= 2 x unloaded) and VmRSS is
         sampled every 10 ms (VmHWM reset at the start; target <= 1.25 x idle + KV pool).
         Classes: hostile_grammar (repetition bombs, a bomb regex, a client that leaves
         mid-request), thinking_constraints (json_schema / tool_choice required with
         thinking on, on models that do not open with <think>, with and without an EOS
         logit bias; the reply is constrained_valid, cut_length, failed_visibly or
         unconstrained_as_constrained — target 0 — and cut_length_unconstrained is told
         apart), n_parallel, nonreading_stream (bytes buffered: see bench/README.md),
         nonstream_big, http_framing, passthrough_rules, tool_definitions, cut_tool_calls,
         n_accounting; and idle_control, first: the probe alone for --attack-control-s on a
         fresh server, the ratio the measurement reads with no load (the floor under every
         class's; no target). A hostile request not answered within --attack-deadline is a hang
         (the server is then replaced); nonstream_big's reply takes minutes on a small
         machine, so it hangs when no token is generated for --attack-big-stall seconds
         (or no reply comes within --attack-big-cap). Target: 0 crash, 0 hang, 0 unconstrained returned
         as constrained, the latency and memory targets in every class.

Not a test: it never fails on the figures (exit 0 once the record is written; 2 on a usage
error, 1 when the harness itself fails — then --output is not touched). The record is
written atomically (a temporary file beside it, then os.replace).

  .venv/bin/python -m bench.robustness_bench --output bench/results/server-robustness-tiny-tied-bf16.json
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/robustness_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import collections
import errno
import http.client
import json
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from bench import benchlib
from bench import server_common as sc
from bench.robustness_cases import (exchange, _j, _chat, _cmpl, _rand_text, hostile_classes, classify)
from bench import robustness_attack
from bench.server_bench import record_header, split_server_args

PHASES = ("hostile", "rss", "slow", "drain", "attack")
OUTCOMES = ("clear_4xx", "unclear_4xx", "served", "other_status", "closed", "hang", "crash",
            "rejected_501", "kept_open")
DEFAULT_MODEL = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"
RSS_FACTOR = 1.25
SLOW_P99_RATIO = 2.0
KV_POOL_RE = re.compile(r"KV pool (\d+) blocks of (\d+) tokens")


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

    def start(self, name: str, more: list[str] = (), model: str | None = None) -> sc.ServerProcess:
        argv = ["--backend", self.args.backend, "--threads", str(self.args.threads), *more, *self.extra]
        srv = sc.ServerProcess(self.args.binary, model or self.args.model, argv, log_dir=self.logs,
                               name=f"{name}-{len(self.argvs)}")
        self.servers.append(srv)
        srv.start(timeout=300)
        self.argvs.append(srv.argv)
        self.model_name = srv.served_model()
        log = open(srv.stderr_path, errors="replace").read()
        m = KV_POOL_RE.search(log)
        srv.kv_log = (int(m.group(1)), int(m.group(2))) if m else None
        bpt = re.search(r"(\d+) bytes/token", log)  # the start-up line, in the pool's KV type
        srv.kv_bytes_per_token = int(bpt.group(1)) if bpt else None
        ctx_m = re.search(r"context (\d+)", open(srv.stderr_path, errors="replace").read())
        srv.ctx = int(ctx_m.group(1)) if ctx_m else None
        if ctx_m and model is None:
            self.ctx = int(ctx_m.group(1))
        return srv

    def ctx_of(self, srv) -> int:
        return getattr(srv, "ctx", None) or self.ctx

    def kv_pool(self, srv, model: str | None = None):
        return kv_pool_bytes(self, srv, model)

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
            kw = {k: v for k, v in case.kw.items() if k in ("head", "shut_wr", "disconnect_after", "shut_wr_after",
                                                        "expect_close")}
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

def kv_pool_bytes(b: Bench, srv, model: str | None = None) -> tuple[int | None, str]:
    """Bytes of the paged KV pool: blocks (from /metrics) x tokens per block (log line) x bytes
    per token (the start-up line, which knows the KV type; else the GGUF shape in f32)."""
    try:
        meta = benchlib.read_gguf_header(model or b.args.model)["metadata"]
        arch = meta.get("general.architecture", "qwen3")
        n_layer = int(meta[f"{arch}.block_count"])
        n_kv = int(meta[f"{arch}.attention.head_count_kv"])
        n_head = int(meta[f"{arch}.attention.head_count"])
        head_dim = int(meta.get(f"{arch}.attention.key_length") or meta[f"{arch}.embedding_length"] // n_head)
        blocks = int(srv.metrics().get("kipp_kv_blocks_total"))
    except (KeyError, ValueError, OSError, sc.ServerError) as e:
        return None, f"not derivable: {type(e).__name__}: {e}"
    bs = srv.kv_log[1] if srv.kv_log else 16
    logged = getattr(srv, "kv_bytes_per_token", None)
    per_token = logged or 2 * n_layer * n_kv * head_dim * 4
    how = ("server start-up line" if logged else
           f"2 x {n_layer} layers x {n_kv} KV heads x {head_dim} head_dim x 4 bytes f32, GGUF header")
    return blocks * bs * per_token, (
        f"kipp_kv_blocks_total {blocks} (/metrics) x {bs} tokens/block "
        f"({'server log line' if srv.kv_log else 'assumed'}) x {per_token} bytes/token ({how})")


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
    if "attack" in ph:
        lines.extend(robustness_attack.summary_lines(ph["attack"]))
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
    ap.add_argument("--attack-classes", default="", metavar="LIST",
                    help="attack phase: comma list of classes (default all: "
                         + ",".join(robustness_attack.CLASSES) + ")")
    ap.add_argument("--attack-deadline", type=float, default=10.0,
                    help="attack: seconds before a hostile request counts as a hang / stall (10)")
    ap.add_argument("--attack-big-stall", type=float, default=60.0,
                    help="nonstream_big: seconds without a generated token (less the probes') while its reply is unread "
                         "that make a hang (60)")
    ap.add_argument("--attack-big-cap", type=float, default=3600.0,
                    help="nonstream_big: seconds its reply may take in all (3600)")
    ap.add_argument("--attack-class-budget", type=float, default=75.0,
                    help="attack: a class starts no case after this many seconds (75)")
    ap.add_argument("--attack-unloaded", type=pos("--attack-unloaded"), default=12,
                    help="attack: plain requests timed alone before each class (12)")
    ap.add_argument("--attack-probe-timeout", type=float, default=60.0,
                    help="attack: timeout of one plain probe request (60)")
    ap.add_argument("--attack-seeds", type=pos("--attack-seeds"), default=1,
                    help="attack thinking_constraints: sampling seeds per model, kind and bias (1)")
    ap.add_argument("--attack-random-seeds", default="1,2", metavar="LIST",
                    help="attack thinking_constraints: seeds of the random 2-layer Qwen3 models made with "
                         "tools/make_random_model.py into a temporary directory (1,2; empty: none)")
    ap.add_argument("--attack-tool-seeds", type=pos("--attack-tool-seeds"), default=12,
                    help="attack cut_tool_calls: seeds (12)")
    ap.add_argument("--attack-control-s", type=float, default=20.0,
                    help="attack idle_control: seconds the plain probe runs alone on a fresh server (20)")
    ap.add_argument("--attack-nonreading-window", type=float, default=15.0,
                    help="attack nonreading_stream: seconds the client does not read (15)")
    ap.add_argument("--no-hash", action="store_true", help="skip the model sha256 (trials only)")
    args = ap.parse_args()
    args.quick = False
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    try:
        args.attack_random_seeds = [int(x) for x in args.attack_random_seeds.split(",") if x.strip()]
    except ValueError:
        ap.error("--attack-random-seeds takes a comma list of integers")
    bad = [c for c in args.attack_classes.split(",") if c.strip() and c.strip() not in robustness_attack.CLASSES]
    if bad:
        ap.error(f"--attack-classes: unknown {','.join(bad)} (known: {','.join(robustness_attack.CLASSES)})")
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
    runners = {"hostile": phase_hostile, "rss": phase_rss, "slow": phase_slow, "drain": phase_drain,
               "attack": robustness_attack.phase_attack}
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
        benchlib.write_record_file(args.output, json.dumps(rec, indent=1, default=float))
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(json.dumps(rec, indent=1, default=float))
    return 0


if __name__ == "__main__":
    # SIGTERM unwinds as an exit, so the finally blocks stop every server and probe this run
    # started (left to the default action, a killed harness left its server running)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main())
    except (sc.ServerError, OSError) as e:
        print(f"robustness_bench: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
