#!/usr/bin/env python3
"""server_bench.py — kipp-server throughput and latency under concurrent streaming clients;
writes a JSON record (bench/results/server-*.json). Protocol: bench/README.md.

One server (--parallel 16 unless told otherwise) serves every concurrency level in turn
(default 1, 4, 8, 16). At level C, C client threads start together; each sends
--requests-per-client streaming POST /v1/completions requests back to back, every one a
distinct synthetic prompt of --prompt-tokens token ids (the ids of tools/bench.py, shifted
per request so that no two prompts share a first block: the prefix cache never hits),
max_tokens --max-tokens, ignore_eos, temperature 0, stream_options.include_usage.
--prompt-file FILE: the prompt is that text instead, each request's prefixed with its own
"Request N." line (so again no two share a first block) -- real text, for drafters whose
acceptance depends on it (speculative decoding: bench/spec_bench.py --server-clients).

Per request: TTFT (send -> first SSE chunk carrying text), ITL (gaps between consecutive
text chunks; a chunk can hold more than one token when the detokenizer waits for a whole
UTF-8 character, so tokens_per_chunk is recorded), end-to-end latency, usage. Per level:
TTFT/ITL/latency p50/p90/p99, requests/s (requests / wall time of the level), and the
aggregate decode tokens/s over the steady window -- from the moment every client has its
first token until the first client has finished all its requests, i.e. while all C
clients are busy -- measured two ways: client side (text chunks in the window x tokens per
chunk of their request) and server side (kipp_generated_tokens_total scraped every 0.25 s,
first and last scrape inside the window). The headline is the client-side figure.

Target (issue): agg_decode_tps(C=8) / agg_decode_tps(C=1) >= 3.0; the record says whether
it is met (medians over --runs, and C=8's slowest run over C=1's fastest), and every level's
median over C=1's (scaling_over_c1). Not a test: it never fails on the figures. --quick: tiny
counts for a smoke run.

--peer-llama-server PATH: the same protocol against llama.cpp's llama-server (PATH; -t
THREADS, -np PARALLEL, 512 context tokens per slot, --metrics), for issue 31's "8 clients >=
1.3x llama-server": its record carries "peer" (binary, --version, sha256); the ratio is Kipp's
8-client median over the peer's, from the two records of one session.

--backend cuda: the binary defaults to build/kipp-server-cuda and the levels to 1,8,32,64;
--parallel defaults to the largest level (at least 16), so no client of a level waits for a
slot; the record's provenance.hardware.gpu and gpu_state (before, after) say which GPU and in
what state, and warnings name a busy GPU (benchlib.gpu_idle_decision).

  .venv/bin/python -m bench.server_bench --model models/random/qwen3-0.6b-q8_0.gguf \\
      --threads 2 --output bench/results/server-0.6b-q8_0.json
  .venv/bin/python -m bench.server_bench --backend cuda --model M \\
      --output bench/results/cuda-server-throughput-4b-bf16.json
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/server_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import statistics
import sys
import threading
import time

from bench import benchlib
from bench import server_common as sc

TARGET_RATIO = 3.0
# per backend: the server binary and the client counts when not given
DEFAULT_BINARY = {"cuda": "build/kipp-server-cuda"}
DEFAULT_LEVELS = {"cuda": "1,8,32,64"}
BUILD_HINT = {"cuda": "make server-cuda"}


def add_server_args(ap: argparse.ArgumentParser) -> None:
    """Options every server bench shares."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap.add_argument("--model", required=True, help="Qwen3 GGUF file")
    ap.add_argument("--binary", default=None,
                    help="server binary (default build/kipp-server; build/kipp-server-cuda for "
                         "--backend cuda)")
    ap.add_argument("--output", metavar="FILE", help="write the JSON record here (default: stdout)")
    ap.add_argument("--threads", type=benchlib.positive("--threads"), default=usable,
                    help=f"server compute threads (default: usable CPUs, here {usable})")
    ap.add_argument("--backend", default="cpu", help="server backend: cpu (default), cuda, ...")
    ap.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for kipp-server (repeatable), e.g. --server-arg=--batch-tokens=128")
    ap.add_argument("--quick", action="store_true", help="tiny counts: a smoke run, not a figure")
    ap.add_argument("--no-hash", action="store_true",
                    help="do not sha256 the model (trials only; such records are not committed)")
    ap.add_argument("--timeout", type=benchlib.positive("--timeout"), default=600,
                    help="seconds one request may take (default 600)")


def check_paths(ap: argparse.ArgumentParser, args) -> None:
    """Usage errors (exit 2); also fills in --binary's per-backend default."""
    if args.binary is None:
        args.binary = DEFAULT_BINARY.get(args.backend, "build/kipp-server")
    if not os.path.isfile(args.model):
        ap.error(f"--model {args.model}: no such file")
    if not (os.path.isfile(args.binary) and os.access(args.binary, os.X_OK)):
        ap.error(f"--binary {args.binary}: not an executable file (build it: "
                 f"{BUILD_HINT.get(args.backend, 'make server')})")
    if args.output:
        d = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(d):
            ap.error(f"--output {args.output}: directory {d} does not exist")


def split_server_args(extra: list[str]) -> list[str]:
    out = []
    for a in extra:
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            out += [k, v]
        else:
            out.append(a)
    return out


def record_header(args, harness: str) -> dict:
    """Provenance, build, model manifest, load average: the part every server record shares."""
    be = getattr(args, "backend", "cpu")
    rec = {
        "harness": harness,
        "argv": sys.argv[1:],
        "quick": bool(args.quick),
        "provenance": benchlib.provenance(args.binary, backend=be),
        "build": benchlib.build_info(args.binary, backend=be),
        "model": benchlib.model_manifest(args.model, hash_file=not args.no_hash),
        "load_average": {"before": list(os.getloadavg())},
        "warnings": [],
    }
    if be == "cuda":
        # the GPU's rule: one free host core and an otherwise unused GPU (CPU load that the
        # GPU server does not feel is not a warning)
        from tools import bench as kbench
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        idle = benchlib.sample_gpu_idle(usable, allow_busy=True)
        rec["idle_check"] = idle
        rec["gpu_state"] = {"before": benchlib.gpu_state()}
        if idle["busy"]:
            msg = kbench.gpu_busy_text(idle)
            print(f"warning: {msg}", file=sys.stderr)
            rec["warnings"].append(msg)
    elif rec["load_average"]["before"][0] > 0.5:
        msg = f"1-minute load average {rec['load_average']['before'][0]:.2f} > 0.5 at start: the machine is not idle"
        print(f"warning: {msg}", file=sys.stderr)
        rec["warnings"].append(msg)
    if args.quick:
        rec["warnings"].append("--quick: smoke-run counts; not a benchmark figure")
    return rec


def write_record(rec: dict, output: str | None) -> None:
    rec["load_average"]["after"] = list(os.getloadavg())
    if "gpu_state" in rec:
        rec["gpu_state"]["after"] = benchlib.gpu_state()
    text = json.dumps(rec, indent=1, default=float)
    if output:
        benchlib.write_record_file(output, text)
        print(f"wrote {output}", file=sys.stderr)
    else:
        print(text)


def server_args(args, extra: list[str]) -> list[str]:
    """kipp-server's arguments after --model (ServerProcess adds --port 0)."""
    return ["--backend", args.backend, "--threads", str(args.threads), *extra,
            *split_server_args(args.server_arg)]


def start_server(args, extra: list[str], name: str = "kipp-server") -> sc.ServerProcess:
    srv = sc.ServerProcess(args.binary, args.model, server_args(args, extra), name=name)
    srv.start(timeout=600)
    return srv


class LlamaServer(sc.ServerProcess):
    """llama.cpp's llama-server as the peer (--peer-llama-server): the same clients, requests
    and windows as against kipp-server. It is started with -t THREADS -np PARALLEL, a context
    of 512 tokens per slot, --metrics, on a free loopback port; /health answers 503 while it
    loads. Its /metrics counter llamacpp:tokens_predicted_total stands in for
    kipp_generated_tokens_total (the server-side figure); the kipp-only counters read 0."""

    def __init__(self, binary: str, model: str, threads: int, parallel: int):
        super().__init__(binary, model, [], name="llama-server")
        self.threads, self.parallel = threads, parallel

    @property
    def argv(self) -> list[str]:
        return [self.binary, "-m", self.model, "-t", str(self.threads), "-np", str(self.parallel),
                "-c", str(512 * self.parallel), "--metrics", "--host", "127.0.0.1", "--port", str(self.port)]

    def start(self, timeout: float = 600.0) -> "LlamaServer":
        with sc.socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.host, self.port = "127.0.0.1", s.getsockname()[1]
        with open(self.stdout_path, "wb") as fo, open(self.stderr_path, "wb") as fe:
            self.proc = sc.subprocess.Popen(self.argv, stdout=fo, stderr=fe, stdin=sc.subprocess.DEVNULL)
        return self.wait_healthy(time.monotonic() + timeout, timeout, poll_s=0.1)

    def metrics(self, headers: dict | None = None) -> sc.Metrics:
        m = super().metrics(headers)
        gen = m.get("llamacpp:tokens_predicted_total")
        return sc.Metrics({"types": {}, "help": {}, "samples": [("kipp_generated_tokens_total", {}, gen)]})

    def version(self) -> str:
        try:
            r = sc.subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=30)
            return (r.stdout + r.stderr).strip()[-500:]
        except (OSError, sc.subprocess.SubprocessError) as e:
            return f"unknown ({e})"


def parse_levels(text: str) -> list[int]:
    """"1,8,32,64" -> [1, 8, 32, 64]; ValueError unless integers >= 1."""
    levels = [int(x) for x in text.split(",") if x.strip()]
    if not levels or any(x < 1 for x in levels):
        raise ValueError(text)
    return levels


def resolve_levels(args) -> list[int]:
    """--concurrency (default per backend) as a list; --parallel's default: the largest
    level, at least 16, so that a level's clients never wait for a free slot."""
    if args.concurrency is None:
        args.concurrency = DEFAULT_LEVELS.get(args.backend, "1,4,8,16")
    levels = parse_levels(args.concurrency)
    if args.parallel is None:
        args.parallel = max(16, max(levels))
    return levels


# ---- one request --------------------------------------------------------------------------

def stream_request(srv: sc.ServerProcess, body: dict, timeout: float) -> dict:
    t0 = time.perf_counter()
    try:
        r = srv.stream("/v1/completions", body, timeout=timeout)
    except OSError as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "t_send": t0}
    out = {"ok": r.status == 200 and r.done, "status": r.status, "t_send": r.t_send}
    if not out["ok"]:
        out["error"] = f"status {r.status}, done={r.done}: {r.body[:200]!r}"
        return out
    times = [r.t_send + t for t in r.token_times()]
    u = r.usage() or {}
    out.update({
        "token_times": times,
        "ttft_s": times[0] - r.t_send if times else None,
        "itl_s": [b - a for a, b in zip(times, times[1:])],
        "latency_s": r.t_end - r.t_send,
        "t_end": r.t_end,
        "completion_tokens": u.get("completion_tokens"),
        "prompt_tokens": u.get("prompt_tokens"),
        "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
        "finish_reason": r.finish_reason(),
        "n_text_chunks": len(times),
    })
    return out


class MetricsPoller:
    """Scrapes /metrics every interval seconds: [(perf_counter time, generated_tokens_total)]."""

    def __init__(self, srv: sc.ServerProcess, interval: float = 0.25):
        self.srv, self.interval = srv, interval
        self.points: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                m = self.srv.metrics()
                self.points.append((time.perf_counter(), m.get("kipp_generated_tokens_total")))
            except (OSError, sc.ServerError, ValueError):
                pass
            self._stop.wait(self.interval)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.points


# ---- one concurrency level ------------------------------------------------------------------

def make_prompt(args, offset: int):
    """A distinct prompt per offset: synthetic token ids, or --prompt-file's text behind a
    "Request N." line."""
    if args.prompt_text is not None:
        return f"Request {offset}.\n{args.prompt_text}"
    return sc.synthetic_ids(args.prompt_tokens, offset)


def run_level(srv, c: int, args, run_index: int) -> dict:
    barrier = threading.Barrier(c)
    per_client: list[list[dict]] = [[] for _ in range(c)]

    def client(k: int):
        barrier.wait()
        for j in range(args.requests_per_client):
            # a distinct prompt per (run, level, client, request); offsets far apart
            offset = 100_003 * (run_index + 1) + 10_007 * c + 1_009 * k + 37 * j
            body = {"model": srv.model_name, "prompt": make_prompt(args, offset),
                    "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
            per_client[k].append(stream_request(srv, body, args.timeout))

    m0 = srv.metrics()
    poller = MetricsPoller(srv).start()
    t_start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t_stop = time.perf_counter()
    points = poller.stop()
    m1 = srv.metrics()

    reqs = [r for cl in per_client for r in cl]
    ok = [r for r in reqs if r["ok"]]
    errors = [r.get("error") for r in reqs if not r["ok"]]
    res = {"concurrency": c, "requests": len(reqs), "ok": len(ok), "errors": errors[:10],
           "n_errors": len(errors), "wall_s": t_stop - t_start}
    if not ok:
        return res

    # steady window: every client has its first token .. the first client is done
    firsts, lasts = [], []
    for cl in per_client:
        okc = [r for r in cl if r["ok"] and r["token_times"]]
        if not okc:
            continue
        firsts.append(okc[0]["token_times"][0])
        lasts.append(max(r["t_end"] for r in okc))
    w0, w1 = max(firsts), min(lasts)
    window_kind = "all-clients-busy"
    if w1 - w0 <= 0.05 * (t_stop - t_start) or w1 <= w0:
        w0, w1, window_kind = t_start, t_stop, "whole-level (no steady window)"
    tok_in_window = 0.0
    for r in ok:
        if not r["token_times"] or not r["completion_tokens"]:
            continue
        per_chunk = r["completion_tokens"] / len(r["token_times"])
        tok_in_window += per_chunk * sum(1 for t in r["token_times"] if w0 <= t <= w1)
    inside = [(t, v) for t, v in points if w0 <= t <= w1]
    server_tps = None
    if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
        server_tps = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    comp = sum(r["completion_tokens"] or 0 for r in ok)
    chunks = sum(r["n_text_chunks"] for r in ok)
    res.update({
        "window": {"kind": window_kind, "start_s": w0 - t_start, "end_s": w1 - t_start, "length_s": w1 - w0},
        "agg_decode_tps": tok_in_window / (w1 - w0),
        "agg_decode_tps_server": server_tps,
        "completion_tokens_per_s_whole_level": comp / (t_stop - t_start),
        "requests_per_s": len(ok) / (t_stop - t_start),
        "ttft_s": sc.dist([r["ttft_s"] for r in ok if r["ttft_s"] is not None]),
        "itl_s": sc.dist([g for r in ok for g in r["itl_s"]]),
        "latency_s": sc.dist([r["latency_s"] for r in ok]),
        "completion_tokens": comp,
        "tokens_per_chunk": comp / chunks if chunks else None,
        "finish_reasons": sorted({r["finish_reason"] for r in ok}),
        "prompt_tokens": sorted({r["prompt_tokens"] for r in ok}),
        "cached_tokens_total": sum(r["cached_tokens"] or 0 for r in ok),
        "server": {
            "generated_tokens": m1.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total"),
            "engine_steps": m1.get("kipp_engine_steps_total") - m0.get("kipp_engine_steps_total"),
            "prefix_cache_hits": m1.get("kipp_prefix_cache_hits_total") - m0.get("kipp_prefix_cache_hits_total"),
            "rejected_503": m1.get("kipp_requests_rejected_total") - m0.get("kipp_requests_rejected_total"),
            "preempted": (m1.get("kipp_requests_preempted_total") - m0.get("kipp_requests_preempted_total"))
            if m1.has("kipp_requests_preempted_total") else None,
            "rss_bytes": srv.rss_bytes(),
        },
    })
    if m1.has("kipp_spec_drafted_tokens_total"):  # a server with a drafter
        drafted = m1.get("kipp_spec_drafted_tokens_total") - m0.get("kipp_spec_drafted_tokens_total")
        accepted = m1.get("kipp_spec_accepted_tokens_total") - m0.get("kipp_spec_accepted_tokens_total")
        res["server"]["spec"] = {
            "steps": m1.get("kipp_spec_steps_total") - m0.get("kipp_spec_steps_total"),
            "drafted": drafted, "accepted": accepted,
            "acceptance": accepted / drafted if drafted else None,
            "draft_seconds": m1.get("kipp_spec_draft_seconds_total") - m0.get("kipp_spec_draft_seconds_total")}
    if res["server"]["engine_steps"]:
        res["server"]["mean_tokens_per_step"] = res["server"]["generated_tokens"] / res["server"]["engine_steps"]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/server_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--concurrency", default=None,
                    help="comma-separated client counts (default 1,4,8,16; 1,8,32,64 for cuda)")
    ap.add_argument("--requests-per-client", type=benchlib.positive("--requests-per-client"), default=4,
                    help="requests each client sends per level (default 4)")
    ap.add_argument("--prompt-tokens", type=benchlib.positive("--prompt-tokens"), default=128,
                    help="synthetic prompt length (default 128)")
    ap.add_argument("--prompt-file", help="use this text as every prompt (after a per-request line) "
                    "instead of synthetic ids")
    ap.add_argument("--max-tokens", type=benchlib.positive("--max-tokens"), default=64, help="tokens per request (default 64)")
    ap.add_argument("--parallel", type=benchlib.positive("--parallel"), default=None,
                    help="server --parallel (default: the largest level, at least 16)")
    ap.add_argument("--runs", type=benchlib.positive("--runs"), default=1,
                    help="repeat every level this many times, levels interleaved (default 1)")
    ap.add_argument("--warmup", type=benchlib.positive("--warmup", 0), default=2,
                    help="single warm-up requests before measuring (default 2)")
    ap.add_argument("--peer-llama-server", metavar="PATH",
                    help="measure llama.cpp's llama-server binary PATH instead of kipp-server, with "
                         "the same clients, threads and --parallel (-np); the record says so (peer)")
    args = ap.parse_args()
    if args.peer_llama_server and not (os.path.isfile(args.peer_llama_server)
                                       and os.access(args.peer_llama_server, os.X_OK)):
        ap.error(f"--peer-llama-server {args.peer_llama_server}: not an executable file")
    check_paths(ap, args)
    args.prompt_text = None
    if args.prompt_file:
        try:
            with open(args.prompt_file, encoding="utf-8") as f:
                args.prompt_text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            ap.error(f"--prompt-file {args.prompt_file}: {e}")
    if args.quick:
        args.concurrency, args.requests_per_client = "1,8", 2
        args.prompt_tokens, args.max_tokens, args.warmup = min(args.prompt_tokens, 32), min(args.max_tokens, 16), 1
    try:
        levels = resolve_levels(args)
    except ValueError:
        ap.error(f"--concurrency expects comma-separated integers >= 1, got '{args.concurrency}'")

    rec = record_header(args, "bench/server_bench.py")
    if args.peer_llama_server:
        srv = LlamaServer(args.peer_llama_server, args.model, args.threads, args.parallel).start()
        rec["peer"] = {"name": "llama-server", "binary": os.path.abspath(args.peer_llama_server),
                       "version": srv.version(), "binary_sha256": benchlib.sha256_file(args.peer_llama_server)}
    else:
        srv = start_server(args, ["--parallel", str(args.parallel)])
    try:
        srv.served_model()
        rec["server_argv"] = srv.argv
        rec["settings"] = {"concurrency": levels, "requests_per_client": args.requests_per_client,
                           "prompt_tokens": args.prompt_tokens if args.prompt_text is None else None,
                           "prompt_file": args.prompt_file, "max_tokens": args.max_tokens,
                           "parallel": args.parallel, "threads": args.threads, "backend": args.backend,
                           "runs": args.runs, "warmup_requests": args.warmup, "endpoint": "/v1/completions",
                           "stream": True, "temperature": 0, "ignore_eos": True}
        for i in range(args.warmup):
            w = stream_request(srv, {"model": srv.model_name, "prompt": make_prompt(args, 7 * i + 1),
                                     "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                                     "stream": True, "stream_options": {"include_usage": True}}, args.timeout)
            if not w["ok"]:
                raise sc.ServerError(f"warm-up request failed: {w.get('error')}")
        runs: dict[int, list[dict]] = {c: [] for c in levels}
        for run in range(args.runs):
            for c in levels:
                r = run_level(srv, c, args, run)
                runs[c].append(r)
                print(f"run {run + 1}/{args.runs} C={c}: {r.get('agg_decode_tps', 0):.1f} tok/s aggregate, "
                      f"TTFT p50 {1000 * (r.get('ttft_s') or {}).get('p50', 0):.0f} ms, "
                      f"ITL p50 {1000 * (r.get('itl_s') or {}).get('p50', 0) if r.get('itl_s', {}).get('n') else 0:.1f} ms, "
                      f"{r['n_errors']} errors", file=sys.stderr)
        rec["rss_bytes_end"] = srv.rss_bytes()
    finally:
        rc = srv.stop()
        rec["server_exit_code"] = rc
        rec["server_stderr_tail"] = srv.stderr_tail(2000)

    summary = {}
    for c in levels:
        tps = [r["agg_decode_tps"] for r in runs[c] if "agg_decode_tps" in r]
        summary[str(c)] = {
            "agg_decode_tps": benchlib.summary(tps) if tps else None,
            "dispersion": benchlib.dispersion(tps) if tps else None,
            "ttft_p50_s": statistics.median([r["ttft_s"]["p50"] for r in runs[c] if "ttft_s" in r] or [0]),
            "ttft_p99_s": statistics.median([r["ttft_s"]["p99"] for r in runs[c] if "ttft_s" in r] or [0]),
            "itl_p50_s": statistics.median([r["itl_s"].get("p50") or 0 for r in runs[c] if "itl_s" in r] or [0]),
            "itl_p99_s": statistics.median([r["itl_s"].get("p99") or 0 for r in runs[c] if "itl_s" in r] or [0]),
            "requests_per_s": statistics.median([r["requests_per_s"] for r in runs[c] if "requests_per_s" in r] or [0]),
            "errors": sum(r["n_errors"] for r in runs[c]),
        }
    rec["levels"] = {str(c): runs[c] for c in levels}
    rec["summary"] = summary
    if 1 in levels and 8 in levels and summary["1"]["agg_decode_tps"] and summary["8"]["agg_decode_tps"]:
        s1, s8 = summary["1"]["agg_decode_tps"], summary["8"]["agg_decode_tps"]
        ratio = s8["median"] / s1["median"]
        worst = s8["min"] / s1["max"]
        rec["ratio_c8_over_c1"] = {"median": ratio, "c8_worst_over_c1_best": worst, "target": TARGET_RATIO,
                                   "met": ratio >= TARGET_RATIO, "met_by_worst": worst >= TARGET_RATIO}
        print(f"agg decode tok/s C=8 / C=1 = {ratio:.2f} (target {TARGET_RATIO}, "
              f"{'met' if ratio >= TARGET_RATIO else 'NOT met'})", file=sys.stderr)
    if 1 in levels and summary["1"]["agg_decode_tps"]:
        base = summary["1"]["agg_decode_tps"]["median"]
        rec["scaling_over_c1"] = {str(c): summary[str(c)]["agg_decode_tps"]["median"] / base
                                  for c in levels if summary[str(c)]["agg_decode_tps"]}
    disp = [v["dispersion"] for v in summary.values() if v["dispersion"] is not None]
    if args.runs > 1 and disp and max(disp) > benchlib.DISPERSION_LIMIT:
        rec["noisy"] = True
        rec["warnings"].append(f"dispersion {max(disp):.1%} above {benchlib.DISPERSION_LIMIT:.0%}: rerun on a quiet machine")
    write_record(rec, args.output)
    return 0 if all(v["errors"] == 0 for v in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
