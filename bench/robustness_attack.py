"""robustness_attack.py — the "attack" phase of bench/robustness_bench.py: ten hostile
classes (issue 30), each on a fresh server, while a plain 4-token chat is timed in a loop (in a
process of its own, so the harness's GIL never counts as server latency) and
the server's VmRSS is sampled every 10 ms. The cases, their acceptable outcomes and the pure
classification live in bench/robustness_cases.py (ATTACK_EXPECT, constraint_outcome, ...).

Per class the record has: cases, outcome counts, unacceptable ones with examples, the plain
request's unloaded latency (the worst of --attack-unloaded samples, p50 too) and its worst
latency while the class ran (a probe still in flight at the end counts with its age), the
ratio and whether it is <= 2; the idle VmRSS (after one warm-up request), the KV pool, the
peak VmRSS (10 ms samples and VmHWM, reset through /proc/PID/clear_refs at the class start)
against 1.25 x idle + KV pool; class extras (bytes buffered for the non-reading client, the
body size of the big non-streamed reply, the accounting figures). A hostile request that is
not answered within --attack-deadline counts as a hang (a stall); then the server is killed
and a fresh one serves the rest of the class (a new segment: its own baseline). A class stops
starting cases after --attack-class-budget seconds (the rest are counted as not_run).
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from bench import server_common as sc
from bench import robustness_cases as rc
from bench.robustness_cases import ATTACK_EXPECT, ATTACK_OUTCOMES, Case, _chat, _j, exchange, http_bytes

LATENCY_RATIO = 2.0
RSS_FACTOR = 1.25
HOSTILE_NICE = 10   # the harness's own thread while a class runs (see _Nice)
PROBE_GAP_S = 0.02  # between plain requests, the probe's and the unloaded samples' alike: an
# idle server answers a request sent after a 20 ms pause about 2x slower than one sent back
# to back on these VMs (tiny model: 6.4 vs 2.7 ms, the forward steps themselves slower), so
# a baseline taken back to back made the rhythm look like load


class _Nice:
    """The harness's main thread (and the threads it starts) at nice HOSTILE_NICE while a class
    runs, back to its own nice after: on a 2-core machine the hostile client's Python (reading
    16 streams, parsing a 28 MB reply, polling /proc) takes a core from the server's forward
    pass, whose 2 threads then wait on each other, and the probe counted that as server
    latency. On a real deployment that client is another machine. Only when the nice can be
    restored (root, or RLIMIT_NICE allows it); otherwise nothing changes and the record says
    `hostile_client_nice: null`. Linux keeps the nice per thread: the server, the probe (own
    processes) and threads started before stay as they are."""

    def __init__(self):
        self.tid = threading.get_native_id()
        self.orig = os.getpriority(os.PRIO_PROCESS, self.tid)
        self.on = None

    @staticmethod
    def _can_restore(orig: int) -> bool:
        if os.geteuid() == 0:
            return True
        try:
            import resource
            soft = resource.getrlimit(resource.RLIMIT_NICE)[0]
        except (ImportError, AttributeError, OSError, ValueError):
            return False
        return soft == resource.RLIM_INFINITY or 20 - orig <= soft

    def lower(self) -> int | None:
        if threading.get_native_id() != self.tid or not self._can_restore(self.orig):
            return None
        try:
            os.setpriority(os.PRIO_PROCESS, self.tid, max(self.orig, HOSTILE_NICE))
        except OSError:
            return None
        self.on = max(self.orig, HOSTILE_NICE)
        return self.on

    def restore(self):
        if self.on is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, self.tid, self.orig)
            except OSError:
                pass
            self.on = None
KIPP_TINY = "models/kipp-tiny/kipp-tiny-bf16.gguf"
RANDOM_QWEN3 = "models/random/qwen3-tiny-bf16.gguf"
NONREADING_READ_S = 5.0   # after the non-reading window: read this long, then reset
TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
              "0B": "CLOSING"}


# ---- plain-request probe and memory ------------------------------------------------------

def plain_request(srv, model: str, i: int, timeout: float) -> tuple[bool, float, int]:
    """(ok, seconds, completion tokens) of one plain chat, max_tokens 4, greedy."""
    body = _j(_chat(model, f"Plain question {i % 50}: what is {i % 7} plus {i % 5}?", max_tokens=4, temperature=0))
    t0 = time.perf_counter()
    try:
        st, _, raw = srv.request("POST", "/v1/chat/completions", body, timeout=timeout)
        dt = time.perf_counter() - t0
        toks = (json.loads(raw).get("usage") or {}).get("completion_tokens", 0) if st == 200 else 0
        return st == 200, dt, toks
    except (OSError, http.client.HTTPException, ValueError):
        return False, time.perf_counter() - t0, 0


def unloaded_samples(srv, model: str, n: int, timeout: float) -> list[float]:
    """Seconds of n plain requests on the idle server, in the probe's rhythm (PROBE_GAP_S
    before each, as the probe pauses between its requests)."""
    out = []
    for i in range(n):
        time.sleep(PROBE_GAP_S)
        out.append(plain_request(srv, model, i, timeout)[1])
    return out


def _probe_main(srv, model: str, timeout: float, stop, inflight, q, ready) -> None:
    """The probe process: one untimed request, then ready is set and plain requests follow
    one after another (a 20 ms gap) until stop is set; each one's (ok, seconds, tokens) goes
    to q as it ends, its start time sits in inflight while it runs (0 between requests).
    The untimed one is the process's own warm-up: a child forked from the harness pays for
    its first request's copy-on-write page faults and first socket (on the tiny models
    8-30 ms against a 5 ms request: every class's first probe was its slowest), which the
    unloaded samples, taken in the warm parent, do not."""
    plain_request(srv, model, 998, timeout)
    ready.set()
    i = 0
    while not stop.is_set():
        t = inflight.value = time.perf_counter()
        ok, dt, toks = plain_request(srv, model, i, timeout)
        inflight.value = 0.0
        q.put((ok, dt, toks, t))
        i += 1
        stop.wait(PROBE_GAP_S)


class Probe:
    """Plain requests one after another (a 20 ms gap) while a class runs, timed in a process
    of their own: the harness's own work (parsing a 14 MB reply or SSE streams in Python
    threads) holds this process's GIL for up to half a second, which a probe thread here
    would have counted as server latency."""

    def __init__(self, srv, model: str, timeout: float):
        import multiprocessing as mp
        ctx = mp.get_context("fork")
        self.srv, self.model, self.timeout = srv, model, timeout
        self._stop, self._inflight, self._q = ctx.Event(), ctx.Value("d", 0.0), ctx.SimpleQueue()
        self._ready = ctx.Event()
        self._p = ctx.Process(target=_probe_main, daemon=True,
                              args=(srv, model, timeout, self._stop, self._inflight, self._q, self._ready))
        self.lat: list[float] = []
        self.starts: list[float] = []   # perf_counter at each probe's start (the same clock across fork)
        self.t0 = time.perf_counter()
        self.failed = 0
        self._tokens = 0

    @property
    def tokens(self) -> int:
        """Completion tokens of the probes finished so far (the classes subtract them from the
        server's token counter while they run)."""
        self._drain()
        return self._tokens

    def start(self):
        self._p.start()
        self._ready.wait(self.timeout)   # its warm-up request done: the class may begin
        self.t0 = time.perf_counter()
        return self

    def _drain(self):
        while not self._q.empty():
            ok, dt, toks, t = self._q.get()
            self.lat.append(dt)
            self.starts.append(t)
            self.failed += not ok
            self._tokens += toks

    def stop(self) -> dict:
        self._stop.set()
        self._p.join(2.0)
        pending = None
        if self._p.is_alive():
            t = self._inflight.value
            if t:
                pending = time.perf_counter() - t   # a stalled probe: its age so far
            self._p.kill()
            self._p.join(2.0)
        self._drain()
        lat = list(self.lat)
        worst = max(lat + ([pending] if pending else []), default=None)
        # when the slowest probes ran (seconds from the probe's start): at the class's start,
        # throughout, or at its end tells admission, steady sharing and the reply's own work apart
        slow = sorted(zip(lat, self.starts), reverse=True)[:10]
        return {"probes": len(lat), "failed": self.failed, "unfinished_probe_age_s": pending,
                "worst_s": worst, "latency_s": sc.dist(lat), "ran_s": round(time.perf_counter() - self.t0, 2),
                "slowest": [{"start_s": round(t - self.t0, 2), "latency_s": round(d, 4)} for d, t in slow]}


def proc_kb(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def reset_hwm(pid: int) -> bool:
    """Resets VmHWM to the current RSS (Linux: "5" into clear_refs)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Segment:
    """One server's share of a class: its baseline (unloaded latency, idle RSS, KV pool), then
    the probe and the RSS sampler while the class runs on it."""

    def __init__(self, run, srv, model_path: str):
        self.run, self.srv, self.model_path = run, srv, model_path
        self.model = srv.model_name
        a = run.args
        plain_request(srv, self.model, 999, a.attack_deadline)       # warm-up
        self.unloaded = unloaded_samples(srv, self.model, a.attack_unloaded, a.attack_deadline)
        time.sleep(0.2)
        self.idle = proc_kb(srv.pid, "VmRSS")
        self.kv, self.kv_how = run.kv_pool(srv, model_path)
        self.hwm_reset = reset_hwm(srv.pid)
        self.sampler = sc.RSSSampler(srv.pid, 0.01).start()
        self.probe = Probe(srv, self.model, a.attack_probe_timeout).start() if run.probe else None
        self.nice = _Nice()
        self.hostile_nice = self.nice.lower() if self.probe else None
        self.t0 = time.monotonic()
        self.rec: dict | None = None

    def close(self, why: str | None = None) -> dict:
        if self.rec is not None:
            return self.rec
        self.nice.restore()
        p = self.probe.stop() if self.probe else None
        samples = self.sampler.stop()
        hwm = proc_kb(self.srv.pid, "VmHWM") if self.hwm_reset and self.srv.alive() else None
        peak = max([v for _, v in samples] + ([hwm] if hwm else []), default=None)
        ref = max(self.unloaded) if self.unloaded else None
        limit = RSS_FACTOR * self.idle + self.kv if (self.idle and self.kv is not None) else None
        worst = p["worst_s"] if p else None
        ratio = worst / ref if (worst is not None and ref) else None
        self.rec = {
            "model": self.model_path, "server_argv": self.srv.argv, "wall_s": round(time.monotonic() - self.t0, 2),
            "ended_by": why, "hostile_client_nice": self.hostile_nice,
            "plain": {"unloaded_samples_s": [round(x, 4) for x in self.unloaded], "gap_s": PROBE_GAP_S,
                      "unloaded_ref_s": ref, "unloaded_p50_s": sc.percentile(self.unloaded, 50),
                      "worst_s": worst, "ratio": ratio,
                      # not the target: the typical probe against the typical unloaded one, which
                      # tells a stall (both ratios high) from scheduling jitter (only the worst)
                      "p50_ratio": ((p["latency_s"].get("p50") or 0) / sc.percentile(self.unloaded, 50)
                                    if (p and p["latency_s"].get("p50") and self.unloaded) else None),
                      "met": (ratio is not None and ratio <= LATENCY_RATIO and p["failed"] == 0) if p else None,
                      **({k: p[k] for k in ("probes", "failed", "unfinished_probe_age_s", "latency_s", "ran_s", "slowest")}
                         if p else {})},
            "rss": {"idle_bytes": self.idle, "kv_pool_bytes": self.kv, "kv_pool_derivation": self.kv_how,
                    "limit_bytes": int(limit) if limit else None, "peak_sampled_bytes": max((v for _, v in samples), default=None),
                    "hwm_bytes": hwm, "hwm_reset": self.hwm_reset, "peak_bytes": peak,
                    "peak_over_idle_bytes": (peak - self.idle) if (peak and self.idle) else None,
                    "met": bool(limit) and peak is not None and peak <= limit}}
        return self.rec


_OPEN_RUNS: list = []   # ClassRuns of the class running now (closed after it, also on a harness error)


class ClassRun:
    """One attack class: servers (segments), case outcomes, the class record."""

    def __init__(self, b, name: str, model: str | None = None, more: list[str] | tuple = (), probe: bool = True):
        self.b, self.args, self.name = b, b.args, name
        self.model_path = model or b.args.model
        self.more = list(more)
        self.probe = probe
        self.kv_pool = lambda srv, m: b.kv_pool(srv, m)
        self.segments: list[Segment] = []
        self.counts = collections.Counter()
        self.unacceptable = 0
        self.examples: list[dict] = []
        self.cases = 0
        self.not_run = 0
        self.extra: dict = {}
        self.t0 = time.monotonic()
        self.srv = None
        self.seg: Segment | None = None
        _OPEN_RUNS.append(self)

    def open(self, model: str | None = None, more: list[str] | tuple | None = None):
        if model:
            self.model_path = model
        if more is not None:
            self.more = list(more)
        self.srv = self.b.start(f"attack-{self.name}", self.more, model=self.model_path)
        self.seg = Segment(self, self.srv, self.model_path)
        self.segments.append(self.seg)
        return self.srv

    @property
    def model(self) -> str:
        return self.srv.model_name

    def close_server(self, why: str | None = None, kill: bool = False):
        if self.seg:
            self.seg.close(why)
        if self.srv:
            (self.srv.kill() if kill or not self.srv.alive() else self.srv.stop(timeout=10))
        self.srv = self.seg = None

    def restart(self, why: str):
        self.close_server(why, kill=True)
        self.open()

    def over_budget(self) -> bool:
        return time.monotonic() - self.t0 > self.args.attack_class_budget

    def note(self, desc: str, outcome: str, ok, detail: dict | None = None):
        if self.srv is not None and not self.srv.alive():
            outcome = "crash"
        self.cases += 1
        self.counts[outcome] += 1
        if outcome not in ok:
            self.unacceptable += 1
            if len(self.examples) < self.args.examples:
                self.examples.append({"case": desc, "outcome": outcome, "acceptable": sorted(ok), **(detail or {})})
        if outcome == "crash":
            self.extra.setdefault("crash_stderr", []).append(self.srv.stderr_tail(1200))
            self.restart("crash")
        elif outcome == "hang":
            self.restart("hang")

    def record(self) -> dict:
        if self.srv:
            self.close_server("end")
        segs = [s.rec for s in self.segments if s.rec]
        ratios = [s["plain"]["ratio"] for s in segs if s["plain"].get("ratio") is not None]
        worst = [s["plain"]["worst_s"] for s in segs if s["plain"].get("worst_s") is not None]
        peaks = [s["rss"]["peak_bytes"] for s in segs if s["rss"].get("peak_bytes")]
        lat_met = [s["plain"]["met"] for s in segs if s["plain"].get("met") is not None]
        r = {"what": ATTACK_EXPECT[self.name]["what"], "cases": self.cases, "not_run": self.not_run,
             "outcomes": {k: v for k, v in self.counts.items()}, "unacceptable": self.unacceptable,
             "examples": self.examples, "elapsed_s": round(time.monotonic() - self.t0, 2),
             "worst_plain_latency_s": max(worst) if worst else None,
             "worst_plain_ratio": max(ratios) if ratios else None,
             "plain_p50_ratio": max((s["plain"]["p50_ratio"] for s in segs if s["plain"].get("p50_ratio")),
                                    default=None),
             "latency_target": f"worst plain latency <= {LATENCY_RATIO} x unloaded (worst of the unloaded samples), no probe failed",
             "latency_met": (all(lat_met) if lat_met else None),
             "peak_rss_bytes": max(peaks) if peaks else None,
             "rss_target": f"peak VmRSS <= {RSS_FACTOR} x idle VmRSS + KV pool bytes, per server",
             "rss_met": all(s["rss"]["met"] for s in segs) if segs else None,
             "segments": segs, **self.extra}
        return r


# ---- raw exchanges --------------------------------------------------------------------------

def post_case(run: ClassRun, case: Case) -> rc.Reply:
    path = case.kw.get("path", "/v1/completions")
    data = http_bytes("POST", path, case.data)
    return exchange(run.srv.connect_host, run.srv.port, data, run.args.attack_deadline)


def read_all(host: str, port: int, data: bytes, deadline: float, idle: float = 2.0,
             shut_wr: bool = False) -> tuple[bytes, bool, bool]:
    """Sends data, then reads until EOF, the deadline, or `idle` seconds without a byte once a
    final answer is complete. (raw, eof, hang: the deadline passed before any final answer)."""
    t_end = time.monotonic() + deadline
    s = socket.create_connection((host, port), timeout=5)
    raw, eof = b"", False
    try:
        s.setblocking(False)
        out = data
        while out and time.monotonic() < t_end:
            try:
                n = s.send(out[:65536])
                out = out[n:]
            except BlockingIOError:
                select.select([s], [s], [], 0.1)
                try:
                    raw += s.recv(65536)
                except (BlockingIOError, OSError):
                    pass
            except OSError:
                break
        if shut_wr:
            rc.half_close(s)
        last = time.monotonic()
        while time.monotonic() < t_end:
            r, _, _ = select.select([s], [], [], 0.1)
            if r:
                try:
                    d = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    d = b""
                if not d:
                    eof = True
                    break
                raw += d
                last = time.monotonic()
            finals = [x for x in rc.parse_responses(raw, False) if x["status"] >= 200 and x["complete"]]
            if finals and time.monotonic() - last > idle:
                break
    finally:
        s.close()
    finals = [x for x in rc.parse_responses(raw, eof) if x["status"] >= 200 and x["complete"]]
    return raw, eof, (not finals and not eof)


def wait_recovered(run: ClassRun, timeout: float) -> float | None:
    """Seconds until a plain request succeeds (None: not within timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        ok, _, _ = plain_request(run.srv, run.model, 0, max(1.0, timeout - (time.monotonic() - t0)))
        if ok:
            return round(time.monotonic() - t0, 3)
    return None


# ---- the classes -----------------------------------------------------------------------------

def cls_hostile_grammar(b) -> dict:
    run = ClassRun(b, "hostile_grammar")
    run.open()
    for case in rc.attack_grammar_cases(run.model):
        if run.over_budget():
            run.not_run += 1
            continue
        leave = case.kw.get("leave_after")
        t0 = time.monotonic()
        if leave:
            data = http_bytes("POST", case.kw["path"], case.data)
            r = exchange(run.srv.connect_host, run.srv.port, data, leave)
            out = "closed" if r.hang else rc.classify(r, case)
            rec_s = wait_recovered(run, b.args.attack_deadline)
            detail = {"recovered_after_leaving_s": rec_s}
            if rec_s is None:
                out = "hang"
        else:
            r = post_case(run, case)
            out = rc.classify(r, case)
            detail = {"status": r.status, "body": r.body[:200].decode("utf-8", "replace")}
        detail["wall_s"] = round(time.monotonic() - t0, 2)
        run.note(case.desc, out, case.ok, detail)
    return run.record()


def _chat_json(srv, body: dict, timeout: float, before_parse=None):
    """(status or None on timeout/close, parsed JSON or None, raw size, seconds). before_parse
    runs once the body is read, before it is parsed (the seconds stop there)."""
    t0 = time.perf_counter()
    try:
        st, _, raw = srv.request("POST", "/v1/chat/completions", _j(body), timeout=timeout)
    except (socket.timeout, TimeoutError):
        return "hang", None, 0, time.perf_counter() - t0
    except (OSError, http.client.HTTPException):
        return None, None, 0, time.perf_counter() - t0
    dt = time.perf_counter() - t0
    if before_parse:
        before_parse()
    try:
        js = json.loads(raw)
    except ValueError:
        js = None
    return st, js, len(raw), dt


def make_random_models(b, tmp: str, failed: list | None = None) -> list[str]:
    """Random tiny Qwen3s, one per --attack-random-seeds seed, made with the project's venv
    (the generator needs numpy) where there is one; each failure is printed and, with
    failed given, noted there."""
    out = []
    venv_py = os.path.join(sc.ROOT, ".venv", "bin", "python")
    py = venv_py if os.access(venv_py, os.X_OK) else sys.executable
    for seed in b.args.attack_random_seeds:
        path = os.path.join(tmp, f"qwen3-tiny-l2-seed{seed}.gguf")
        p = subprocess.run([py, "-m", "tools.make_random_model", "--shape", "tiny", "--layers", "2",
                            "--seed", str(seed), "--type", "bf16", "--output", path, "--no-progress"],
                           cwd=sc.ROOT, capture_output=True, text=True, timeout=300)
        if p.returncode == 0:
            out.append(path)
        else:
            print(f"  attack: make_random_model seed {seed} failed: {p.stderr[-300:]}", file=sys.stderr)
            if failed is not None:
                failed.append({"seed": seed, "stderr": p.stderr[-300:]})
    return out


def cls_thinking_constraints(b) -> dict:
    a = b.args
    run = ClassRun(b, "thinking_constraints")
    tmp = tempfile.mkdtemp(prefix="kipp-attack-models-")
    models = [a.model] + ([RANDOM_QWEN3] if os.path.isfile(os.path.join(sc.ROOT, RANDOM_QWEN3)) else [])
    failed: list = []
    models += make_random_models(b, tmp, failed)
    run.extra["models"] = models
    if failed:
        run.extra["random_models_not_made"] = failed
    per_model = {}
    try:
        for mp in models:
            if run.over_budget():
                run.not_run += 2 * 2 * a.attack_seeds
                continue
            if run.srv:
                run.close_server("next model")
            run.open(model=mp)
            c = collections.Counter()
            for kind in ("schema", "tool"):
                for seed in range(a.attack_seeds):
                    for bias in (None, 100):
                        body = _chat(run.model, "Give me a person as JSON." if kind == "schema" else "Weather in Paris?",
                                     max_tokens=32, seed=seed, temperature=1.0)
                        if kind == "schema":
                            body["response_format"] = {"type": "json_schema", "json_schema": {
                                "name": "person", "schema": rc.PERSON_SCHEMA, "strict": True}}
                        else:
                            body.update(tools=rc.WEATHER_TOOLS, tool_choice="required")
                        if bias:
                            body["logit_bias"] = {str(rc.EOS_QWEN3): bias}
                        st, js, _, dt = _chat_json(run.srv, body, a.attack_deadline)
                        out = "hang" if st == "hang" else rc.constraint_outcome(
                            st, js, kind, rc.PERSON_SCHEMA, rc.WEATHER_TOOLS)
                        c[out] += 1
                        msg = ((js or {}).get("choices") or [{}])[0].get("message") if isinstance(js, dict) else None
                        run.note(f"{os.path.basename(mp)} {kind} seed {seed}{' eos bias +%d' % bias if bias else ''}", out,
                                 ATTACK_EXPECT["thinking_constraints"]["ok"],
                                 {"status": st if st != "hang" else None, "seconds": round(dt, 2),
                                  "content": str((msg or {}).get("content"))[:120],
                                  "tool_calls": str((msg or {}).get("tool_calls"))[:160],
                                  "finish_reason": (((js or {}).get("choices") or [{}])[0].get("finish_reason")
                                                    if isinstance(js, dict) else None)})
            per_model[mp] = dict(c)
    finally:
        run.extra["outcomes_per_model"] = per_model
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    return run.record()


def _gen_thread(fn, *args):
    box = {}

    def go():
        try:
            box["r"] = fn(*args)
        except Exception as e:   # noqa: BLE001 (recorded as the request's failure)
            box["e"] = f"{type(e).__name__}: {e}"
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, box


def cls_n_parallel(b) -> dict:
    a = b.args
    more = [] if "--parallel" in " ".join(b.extra) else ["--parallel", "8"]
    run = ClassRun(b, "n_parallel", more=more)
    run.open()
    mt = max(16, min(120, b.ctx_of(run.srv) - 64))
    srv, m, cap = run.srv, run.model, a.attack_deadline * 4
    body16 = {"model": m, "prompt": "Count with me:", "max_tokens": mt, "n": 16, "ignore_eos": True, "seed": 1}
    th = [_gen_thread(srv.request, "POST", "/v1/completions", _j(body16), None, cap)]
    for i in range(2):
        body8 = {"model": m, "prompt": f"Stream {i}:", "max_tokens": mt, "n": 8, "ignore_eos": True, "stream": True,
                 "seed": 2 + i}
        th.append(_gen_thread(sc.sse_request, srv.connect_host, srv.port, "/v1/completions", body8, None, cap))
    t_end = time.monotonic() + cap
    for i, (t, box) in enumerate(th):
        t.join(max(0.1, t_end - time.monotonic()))
        desc = "n 16 non-streamed" if i == 0 else f"n 8 stream {i}"
        if t.is_alive():
            run.note(desc, "hang", ("served",), {"max_tokens": mt})
            run.not_run += len(th) - i - 1     # their server was replaced
            break
        r = box.get("r")
        if i == 0:
            ok = r is not None and r[0] == 200 and len((json.loads(r[2]).get("choices") or [])) == 16
        else:
            ok = r is not None and r.status == 200 and r.done
        run.note(desc, "served" if ok else ("other_status" if r is not None else "closed"), ("served",),
                 {"error": box.get("e"), "status": (r[0] if i == 0 else r.status) if r is not None else None})
    run.extra["max_tokens"] = mt
    return run.record()


def tcp_sockets() -> dict:
    """{(local port, remote port): (state, tx_queue, rx_queue)} of loopback IPv4 TCP sockets."""
    out = {}
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                p = line.split()
                lp, rp = int(p[1].split(":")[1], 16), int(p[2].split(":")[1], 16)
                tx, rx = (int(x, 16) for x in p[4].split(":"))
                out[(lp, rp)] = (TCP_STATES.get(p[3], p[3]), tx, rx)
    except (OSError, ValueError, IndexError):
        pass
    return out


def cls_nonreading_stream(b) -> dict:
    a = b.args
    run = ClassRun(b, "nonreading_stream")
    srv = run.open()
    m = run.model
    mt = max(16, min(300, b.ctx_of(srv) - 64))
    n = 16
    body = {"model": m, "messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": mt, "n": n,
            "logprobs": True, "top_logprobs": 20, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": True, "seed": 3}
    data = http_bytes("POST", "/v1/chat/completions", _j(body))
    m0 = srv.metrics()
    probe_tok0 = run.seg.probe.tokens
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((srv.connect_host, srv.port))
    cport = s.getsockname()[1]
    s.sendall(data)
    t0 = time.monotonic()
    trace, closed_at, total = [], None, n * mt
    done_gen_at = None
    while time.monotonic() - t0 < a.attack_nonreading_window:
        time.sleep(0.25)
        socks = tcp_sockets()
        srv_side = socks.get((srv.port, cport))
        cli_side = socks.get((cport, srv.port))
        try:
            gen = _generated_less_probes(run, srv.metrics(), m0, probe_tok0)
        except (OSError, sc.ServerError, http.client.HTTPException, TypeError):
            gen = None
        trace.append({"t_s": round(time.monotonic() - t0, 2), "server_state": srv_side[0] if srv_side else None,
                      "server_send_q": srv_side[1] if srv_side else None,
                      "client_recv_q": cli_side[2] if cli_side else None, "generated": gen,
                      "rss": proc_kb(srv.pid, "VmRSS")})
        if closed_at is None and (srv_side is None or srv_side[0] != "ESTABLISHED"):
            closed_at = trace[-1]["t_s"]
        if gen is not None and gen >= total and done_gen_at is None:
            done_gen_at = trace[-1]["t_s"]
        if closed_at is not None or (done_gen_at is not None and trace[-1]["t_s"] - done_gen_at > 2):
            break
    window_s = round(time.monotonic() - t0, 2)
    last = trace[-1] if trace else {}
    # now read for a while: the bytes per token of what comes says what the unread part was worth
    got, eof, t_read = b"", False, time.monotonic()
    s.settimeout(0.5)
    while time.monotonic() - t_read < NONREADING_READ_S:
        try:
            d = s.recv(1 << 20)
        except socket.timeout:
            continue
        except OSError:
            d = b""
        if not d:
            eof = True
            break
        got += d
        if b"data: [DONE]" in got[-64:]:
            break
    sc.abort_connection(s)
    # every generated token has one logprobs entry with its own "top_logprobs" list (a chunk
    # may carry several tokens when the server coalesces what piled up)
    chunks = sum(1 for line in got.split(b"\n") if line.startswith(b"data: {") and b'"delta"' in line)
    tokens_read = got.count(b'"top_logprobs"')
    done = b"data: [DONE]" in got
    bpt = len(got) / tokens_read if tokens_read else None
    kernel_q = (last.get("server_send_q") or 0) + (last.get("client_recv_q") or 0)
    produced = last.get("generated") * bpt if (bpt and last.get("generated") is not None) else None
    user_buf = max(0.0, produced - kernel_q) if produced is not None else None
    idle = run.seg.idle
    rss_peak = max((x["rss"] or 0) for x in trace) if trace else None
    # served: the stream still flows once read; closed: the server ended it; hang: neither
    out = "served" if got else ("closed" if (eof or closed_at is not None) else "hang")
    run.extra["nonreading"] = {
        "so_rcvbuf": 4096, "n": n, "max_tokens": mt, "top_logprobs": 20, "window_s": window_s,
        "server_closed": closed_at is not None, "server_closed_after_s": closed_at,
        "generated_tokens_unread": last.get("generated"), "tokens_requested": total,
        "generated_all_while_unread": (last.get("generated") or 0) >= total,
        "bytes_read_after_window": len(got), "read_after_window_s": NONREADING_READ_S, "chunks_read": chunks,
        "tokens_read": tokens_read,
        "stream_done_while_read": done, "bytes_per_token": bpt,
        "kernel_queued_bytes": kernel_q, "bytes_read_beyond_kernel_queues": len(got) - kernel_q,
        "stream_resumed_when_read": len(got) > kernel_q, "server_send_q_bytes": last.get("server_send_q"),
        "client_recv_q_bytes": last.get("client_recv_q"),
        "bytes_buffered_estimate": int(produced) if produced is not None else None,
        "bytes_buffered_in_server_estimate": int(user_buf) if user_buf is not None else None,
        "rss_growth_bytes": (rss_peak - idle) if (rss_peak and idle) else None,
        "method": ("bytes the server had produced for the unread stream = (rise of kipp_generated_tokens_total "
                   "less the plain probes' completion tokens) x bytes per token of the stream (bytes read in the "
                   "seconds after the window / the tokens in them, one top_logprobs list each); of them in "
                   "kernel buffers: the server socket's send queue + the client socket's receive queue (/proc/net/tcp tx_queue/rx_queue); the rest "
                   "is held by the server process. Server close: its socket leaves ESTABLISHED (/proc/net/tcp)."),
        "trace": trace[::max(1, len(trace) // 40)]}
    run.note("stream n 16, never read", out, ATTACK_EXPECT["nonreading_stream"]["ok"],
             {"bytes_read_after_window": len(got), "done": done})
    return run.record()


def _generated_less_probes(run, mm, m0, probe_tok0) -> float:
    """Tokens the server generated between the /metrics scrapes m0 and mm, less those of the
    plain probes finished since probe_tok0 (a probe in flight counts until it finishes: at
    most its 4 tokens). TypeError when a scrape lacks the counter."""
    probes = run.seg.probe.tokens - probe_tok0 if run.seg.probe else 0
    return mm.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total") - probes


def _big_progress(run, m0, probe_tok0) -> dict:
    """The server's state for a long request: tokens generated since m0 less the plain probes'
    (_generated_less_probes), running and queued sequences, KV blocks in use, fair
    preemptions."""
    mm = run.srv.metrics()
    g = lambda k: mm.get(k) or 0  # noqa: E731
    return {"generated": int(_generated_less_probes(run, mm, m0, probe_tok0)),
            "running": int(g("kipp_running_sequences")), "queued": int(g("kipp_queue_depth")),
            "kv_blocks_used": int(g("kipp_kv_blocks_used")),
            "preempted": int(g("kipp_requests_preempted_total") - (m0.get("kipp_requests_preempted_total") or 0)),
            "parked": int(g("kipp_requests_parked_total") - (m0.get("kipp_requests_parked_total") or 0))}


def watch_progress(th, progress, stall_s: float, total: int, poll_s: float = 1.0, keep_s: float = 10.0):
    """Waits for thread th while progress() (a dict with "generated") rises: (why it stalled or
    None once th ended, the progress every keep_s seconds, the last count). A stall is no rise
    for stall_s seconds; a progress() that fails counts as no rise."""
    t0 = time.monotonic()
    timeline, last, moved, next_keep = [], -1, t0, 0.0
    while th.is_alive():
        th.join(poll_s)
        if not th.is_alive():
            break
        now = time.monotonic()
        try:
            pr = progress()
        except (OSError, sc.ServerError, http.client.HTTPException, TypeError, ValueError):
            pr = None
        if pr is not None and pr["generated"] > last:
            last, moved = pr["generated"], now
        if pr is not None and now - t0 >= next_keep:
            timeline.append({"t_s": round(now - t0, 1), **pr})
            next_keep += keep_s
        if now - moved > stall_s:
            return (f"no token generated for {now - moved:.1f} s with {max(last, 0)} of {total} drawn",
                    timeline, last)
    return None, timeline, last


def cls_nonstream_big(b) -> dict:
    """One non-streamed n 16 x 1,000 x top_logprobs 20 request. Its reply comes only when all
    16,000 tokens are drawn, which takes minutes on a small machine, so a hang is judged by
    progress, not by a reply deadline: the request hangs when the server's generated-token count
    (less the probes') has not risen for --attack-big-stall seconds while the reply is unread, or
    when no reply began within --attack-big-cap. The progress is sampled every second; the
    record keeps it every 10 s beside the probes' slowest start times."""
    a = b.args
    run = ClassRun(b, "nonstream_big")
    run.open()
    ctx = b.ctx_of(run.srv)
    sizes = [1000] + ([ctx - 64] if ctx - 64 < 1000 else [])
    bodies = []
    for mt in sizes:
        body = {"model": run.model, "messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": mt,
                "n": 16, "logprobs": True, "top_logprobs": 20, "ignore_eos": True, "seed": 4}
        m0 = run.srv.metrics()
        probe_tok0 = run.seg.probe.tokens if run.seg.probe else 0
        box: dict = {}
        # the probe stops once the body is in, before the harness parses it: parsing ~28 MB
        # of JSON takes a core of this machine for about a second, which the probe would
        # count as server latency (the server's own sending is measured, as the client reads)
        th = threading.Thread(target=lambda: box.update(r=_chat_json(
            run.srv, body, a.attack_big_cap, before_parse=lambda: run.seg.close("body read"))), daemon=True)
        t0 = time.monotonic()
        th.start()
        stalled, timeline, last_gen = watch_progress(th, lambda: _big_progress(run, m0, probe_tok0),
                                                     a.attack_big_stall, 16 * mt)
        if stalled:
            st, js, size, dt = "hang", None, 0, time.monotonic() - t0
        else:
            st, js, size, dt = box.get("r", (None, None, 0, time.monotonic() - t0))
        if st == "hang":
            out = "hang"
        elif st is None:
            out = "closed"
        elif st == 200 and isinstance(js, dict) and len(js.get("choices") or []) == 16:
            out = "served"
        elif 400 <= st < 500 and isinstance(js, dict) and "error" in js:
            out = "clear_4xx"
        else:
            out = "other_status"
        bodies.append({"max_tokens": mt, "status": st if st != "hang" else None, "body_bytes": size,
                       "seconds": round(dt, 2), "hang_why": stalled or ("no reply within --attack-big-cap"
                                                                         if st == "hang" else None),
                       "generated_per_s": round(last_gen / dt, 1) if last_gen > 0 and dt > 0 else None,
                       "progress": timeline,
                       "error": ((js or {}).get("error") or {}).get("message") if isinstance(js, dict) else None})
        run.note(f"n 16 x max_tokens {mt} x top_logprobs 20", out, ATTACK_EXPECT["nonstream_big"]["ok"],
                 {k: v for k, v in bodies[-1].items() if k != "progress"})
        if out == "served":
            break
    run.extra["requests"] = bodies
    run.extra["hang_rule"] = {"stall_s": a.attack_big_stall, "cap_s": a.attack_big_cap,
                              "what": "no generated-token progress (less the probes') for stall_s while "
                                      "the reply was unread, or no reply within cap_s"}
    return run.record()


def cls_http_framing(b) -> dict:
    a = b.args
    run = ClassRun(b, "http_framing")
    run.open()
    for case in rc.framing_cases(run.model):
        if run.over_budget():
            run.not_run += 1
            continue
        raw, eof, hang = read_all(run.srv.connect_host, run.srv.port, case.data, a.attack_deadline,
                                  shut_wr=bool(case.kw.get("shut_wr")))
        out = rc.framing_outcome(raw, eof, hang, case.kw["expect"])
        rs = rc.parse_responses(raw, eof)
        run.note(case.desc, out, case.ok, {"statuses": [x["status"] for x in rs], "closed_by_server": eof,
                                           "first_bytes": raw[:120].decode("latin-1")})
    return run.record()


def _cases_via_exchange(b, name: str, cases_fn) -> dict:
    run = ClassRun(b, name)
    run.open()
    for case in cases_fn(run.model):
        if run.over_budget():
            run.not_run += 1
            continue
        t0 = time.monotonic()
        r = post_case(run, case)
        out = rc.classify(r, case)
        run.note(case.desc, out, case.ok, {"status": r.status, "seconds": round(time.monotonic() - t0, 2),
                                           "body": r.body[:200].decode("utf-8", "replace")})
    return run.record()


def cls_passthrough_rules(b) -> dict:
    return _cases_via_exchange(b, "passthrough_rules", lambda m: rc.passthrough_cases(m, b.max_body))


def cls_tool_definitions(b) -> dict:
    return _cases_via_exchange(b, "tool_definitions", rc.tool_definition_cases)


def _sse_to_reply(raw: bytes):
    """A streamed chat reply reassembled as the non-streamed JSON would be (content, tool
    calls by index with their argument pieces joined, finish_reason); None when the stream did
    not end with [DONE]."""
    content, calls, finish, done = "", {}, None, False
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        try:
            ev = json.loads(data)
        except ValueError:
            return None
        for ch in ev.get("choices") or []:
            d = ch.get("delta") or {}
            content += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                c = calls.setdefault(tc.get("index", 0), {"function": {"name": "", "arguments": ""}})
                f = tc.get("function") or {}
                c["function"]["name"] += f.get("name") or ""
                c["function"]["arguments"] += f.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    if not done:
        return None
    return {"choices": [{"finish_reason": finish, "message": {
        "content": content or None, "tool_calls": [calls[k] for k in sorted(calls)] or None}}]}


def cls_tool_outputs(b) -> dict:
    """The model made (by the grammar extension, tool_choice auto) to write a call to an
    undeclared function and a call with </tool_call> inside a string argument: the first must
    not come back as a call, the second must come back whole with valid JSON arguments."""
    a = b.args
    run = ClassRun(b, "tool_outputs")
    run.open()
    for desc, text, expect in rc.TOOL_OUTPUT_CASES:
        for stream in (False, True):
            if run.over_budget():
                run.not_run += 1
                continue
            body = _chat(run.model, "Call a tool.", max_tokens=96, tools=rc.WEATHER_TOOLS,
                         tool_choice="auto", grammar=rc._forced_text_grammar(text),
                         chat_template_kwargs={"enable_thinking": False}, stream=stream)
            if stream:
                try:
                    st, _, raw = run.srv.request("POST", "/v1/chat/completions", _j(body),
                                                 timeout=a.attack_deadline)
                    js = _sse_to_reply(raw) if st == 200 else None
                except (socket.timeout, TimeoutError):
                    st, js = "hang", None
                except (OSError, http.client.HTTPException):
                    st, js = None, None
            else:
                st, js, _, _ = _chat_json(run.srv, body, a.attack_deadline)
            out = "hang" if st == "hang" else rc.tool_output_outcome(st, js, expect)
            ch = ((js or {}).get("choices") or [{}])[0] if isinstance(js, dict) else {}
            run.note(f"{desc}{', streamed' if stream else ''}", out, ATTACK_EXPECT["tool_outputs"]["ok"],
                     {"status": st, "finish_reason": ch.get("finish_reason"),
                      "message": str(ch.get("message"))[:240]})
    return run.record()


def cls_cut_tool_calls(b) -> dict:
    a = b.args
    model = KIPP_TINY if os.path.isfile(os.path.join(sc.ROOT, KIPP_TINY)) else a.model
    run = ClassRun(b, "cut_tool_calls", model=model)
    run.open()
    run.extra["model"] = model
    cons = collections.Counter()
    for seed in range(a.attack_tool_seeds):
        if run.over_budget():
            run.not_run += 1
            continue
        body = _chat(run.model, "What is the weather in Paris and in Rome?", max_tokens=60, seed=seed,
                     temperature=1.0, tools=rc.WEATHER_TOOLS, tool_choice="required")
        st, js, _, dt = _chat_json(run.srv, body, a.attack_deadline)
        out = "hang" if st == "hang" else rc.tool_args_outcome(st, js)
        if st != "hang":
            cons[rc.constraint_outcome(st, js, "tool", None, rc.WEATHER_TOOLS)] += 1
        ch = ((js or {}).get("choices") or [{}])[0] if isinstance(js, dict) else {}
        run.note(f"seed {seed}", out, ATTACK_EXPECT["cut_tool_calls"]["ok"],
                 {"finish_reason": ch.get("finish_reason"),
                  "tool_calls": str((ch.get("message") or {}).get("tool_calls"))[:200]})
    run.extra["constraint_outcomes"] = dict(cons)
    return run.record()


def cls_n_accounting(b) -> dict:
    a = b.args
    run = ClassRun(b, "n_accounting", probe=False)
    run.open()
    rows = []
    for n in (1, 16):
        body = _chat(run.model, "Count the prompt tokens of this request, please.", max_tokens=4, n=n, seed=5)
        m0 = run.srv.metrics()
        st, js, _, _ = _chat_json(run.srv, body, a.attack_deadline)
        m1 = run.srv.metrics()
        usage = (js or {}).get("usage") or {} if isinstance(js, dict) else {}
        rise = m1.get("kipp_prompt_tokens_total") - m0.get("kipp_prompt_tokens_total")
        gen_rise = m1.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total")
        row = {"n": n, "status": st, "usage_prompt_tokens": usage.get("prompt_tokens"),
               "usage_completion_tokens": usage.get("completion_tokens"),
               "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
               "kipp_prompt_tokens_total_rise": rise, "kipp_generated_tokens_total_rise": gen_rise}
        rows.append(row)
        out = ("hang" if st == "hang" else "failed_visibly" if st != 200 else
               "consistent" if (usage.get("prompt_tokens") == rise and usage.get("completion_tokens") == gen_rise)
               else "inconsistent")
        run.note(f"n {n}: usage vs metrics", out, ATTACK_EXPECT["n_accounting"]["ok"], row)
    run.extra["accounting"] = rows
    # then the same n 16 request again with the plain probe running (latency and memory)
    run.close_server("accounting measured")
    run.probe = True
    run.open()
    _chat_json(run.srv, _chat(run.model, "Count the prompt tokens of this request, please.", max_tokens=64, n=16,
                              seed=6, ignore_eos=True), a.attack_deadline * 2)
    return run.record()


def cls_idle_control(b) -> dict:
    """No hostile client: a fresh server, its baseline, then only the plain probe for
    --attack-control-s seconds. Its worst / unloaded ratio is what the measurement reads with
    no load at all (the machine's and the harness's jitter over a class-long window against
    the worst of --attack-unloaded samples): the floor under every class's ratio. It is
    reported beside the classes and counts towards no target."""
    run = ClassRun(b, "idle_control")
    run.open()
    time.sleep(b.args.attack_control_s)
    rec = run.record()
    rec["control"] = True
    return rec


CLASSES = {"idle_control": cls_idle_control, "hostile_grammar": cls_hostile_grammar, "thinking_constraints": cls_thinking_constraints,
           "n_parallel": cls_n_parallel, "nonreading_stream": cls_nonreading_stream,
           "nonstream_big": cls_nonstream_big, "http_framing": cls_http_framing,
           "passthrough_rules": cls_passthrough_rules, "tool_definitions": cls_tool_definitions,
           "tool_outputs": cls_tool_outputs,
           "cut_tool_calls": cls_cut_tool_calls, "n_accounting": cls_n_accounting}


def phase_attack(b) -> dict:
    a = b.args
    names = list(CLASSES) if not a.attack_classes else [c.strip() for c in a.attack_classes.split(",") if c.strip()]
    res = {"classes": {}, "deadline_s": a.attack_deadline, "class_budget_s": a.attack_class_budget,
           "unloaded_samples": a.attack_unloaded, "outcome_names": list(ATTACK_OUTCOMES)}
    t0 = time.monotonic()
    totals = collections.Counter()
    for name in names:
        t = time.monotonic()
        try:
            c = CLASSES[name](b)
        except Exception as e:   # noqa: BLE001 — one class failing must not lose the others' figures
            c = {"what": ATTACK_EXPECT[name]["what"],
                 "harness_error": (f"{type(e).__name__}: {e}\n" + traceback.format_exc())[-3000:],
                 "outcomes": {}, "unacceptable": None, "latency_met": None, "rss_met": None}
        finally:
            for r in _OPEN_RUNS:     # no probe, sampler or server outlives its class
                if r.srv is not None:
                    try:
                        r.close_server("harness error", kill=True)
                    except Exception:   # noqa: BLE001
                        r.srv.kill()
            _OPEN_RUNS.clear()
        c["elapsed_s"] = round(time.monotonic() - t, 2)
        res["classes"][name] = c
        totals.update(c.get("outcomes") or {})
        print(f"  attack {name:22s} {c.get('cases', 0):3d} cases  "
              + " ".join(f"{k}={v}" for k, v in (c.get("outcomes") or {}).items())
              + f"  unacceptable={c.get('unacceptable')}  plain worst {fmt_s(c.get('worst_plain_latency_s'))}"
              f" (x{fmt_r(c.get('worst_plain_ratio'))})  peak rss {fmt_mb(c.get('peak_rss_bytes'))}"
              f" met lat={c.get('latency_met')} rss={c.get('rss_met')}  {c['elapsed_s']} s"
              + (f"  HARNESS ERROR {c['harness_error'][:200]}" if c.get("harness_error") else ""), file=sys.stderr)
    res["elapsed_s"] = round(time.monotonic() - t0, 2)
    return aggregate(res, totals)


def hostile_classes(classes: dict) -> list[dict]:
    """The class records that count towards the targets: all but a control."""
    return [c for c in classes.values() if not c.get("control")]


def aggregate(res: dict, totals: collections.Counter) -> dict:
    """The phase's totals and targets over res["classes"]; a control class (no hostile client)
    is reported as the floor and counts towards no target."""
    res["totals"] = dict(totals)
    res["crash"], res["hang"] = totals.get("crash", 0), totals.get("hang", 0)
    res["unconstrained_as_constrained"] = totals.get("unconstrained_as_constrained", 0)
    hostile = hostile_classes(res["classes"])
    res["latency_met_all"] = all(c.get("latency_met") is not False for c in hostile)
    res["rss_met_all"] = all(c.get("rss_met") is not False for c in hostile)
    ctl = res["classes"].get("idle_control")
    # the floor: the same worst / unloaded ratio with nothing hostile running
    res["control_worst_plain_ratio"] = ctl.get("worst_plain_ratio") if ctl else None
    res["unacceptable_total"] = sum(c.get("unacceptable") or 0 for c in res["classes"].values())
    res["harness_errors"] = [n for n, c in res["classes"].items() if c.get("harness_error")]
    res["targets"] = {"crash": 0, "hang": 0, "unconstrained_as_constrained": 0,
                      "plain_latency": f"worst <= {LATENCY_RATIO} x unloaded, per class",
                      "peak_rss": f"<= {RSS_FACTOR} x idle + KV pool, per class"}
    res["met"] = (res["crash"] == 0 and res["hang"] == 0 and res["unconstrained_as_constrained"] == 0
                  and res["latency_met_all"] and res["rss_met_all"] and not res["harness_errors"])
    return res


def fmt_s(x):
    return "n/a" if x is None else f"{x * 1000:.0f} ms"


def fmt_r(x):
    return "n/a" if x is None else f"{x:.1f}"


def fmt_mb(x):
    return "n/a" if x is None else f"{x / 1e6:.1f} MB"


def summary_lines(att: dict) -> list[str]:
    lines = [f"attack: {len(hostile_classes(att['classes']))} classes; crash {att['crash']}, hang {att['hang']}, "
             f"unconstrained returned as constrained {att['unconstrained_as_constrained']}, "
             f"unacceptable {att['unacceptable_total']}; latency met {att['latency_met_all']}, "
             f"rss met {att['rss_met_all']} -> met={att['met']}"]
    for n, c in att["classes"].items():
        extra = ""
        nr = c.get("nonreading")
        if nr:
            extra = (f"; unread stream: ~{fmt_mb(nr.get('bytes_buffered_estimate'))} produced, "
                     f"{fmt_mb(nr.get('bytes_buffered_in_server_estimate'))} held by the server, "
                     f"closed={nr.get('server_closed')}")
        if c.get("control"):
            lines.append(f"    {n} (control, no hostile client, counts towards no target): plain worst "
                         f"{fmt_s(c.get('worst_plain_latency_s'))} (x{fmt_r(c.get('worst_plain_ratio'))})")
            continue
        lines.append(f"    {n}: " + (", ".join(f"{k} {v}" for k, v in (c.get("outcomes") or {}).items()) or "-")
                     + f"; plain worst {fmt_s(c.get('worst_plain_latency_s'))} (x{fmt_r(c.get('worst_plain_ratio'))}, "
                     f"met {c.get('latency_met')}); peak rss {fmt_mb(c.get('peak_rss_bytes'))} (met {c.get('rss_met')})"
                     + extra + (f"; HARNESS ERROR {c['harness_error'][:120]}" if c.get("harness_error") else ""))
    return lines
