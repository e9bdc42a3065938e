#!/usr/bin/env python3
"""load_bench.py — kipp-server under sustained mixed load for --duration seconds: errors by
kind, latency percentiles, and the server's memory over time (RSS growth target <= 1 %);
writes a JSON record. Protocol: bench/README.md.

The server runs with a small --parallel and --queue, and more client threads than
parallel + queue, so the 503 + Retry-After path is hit all along. Each client loops until
the deadline, drawing (seeded) a request kind:
  - short chat (a one-line question), streaming or not;
  - long completions (a synthetic token-id prompt of --long-tokens ids, varied offsets),
    streaming or not;
  - shared-prefix chat (a fixed long system prompt + a distinct question: prefix-cache hits);
  - an abandoned stream: reads a few chunks, then drops the connection (cancellation).
max_tokens is drawn from --max-tokens-range. A 503 is the intended overload answer: counted
apart, and the client waits out Retry-After (--honor-retry-after, default on) before going
on. Everything else that is not a complete, consistent answer counts as an error, by kind:
other statuses, connection errors, timeouts, streams without [DONE], missing finish_reason,
usage that does not add up (total != prompt + completion, completion > max_tokens).

The server's VmRSS (/proc/PID/status) is sampled every second. RSS after warm-up is the
median of the samples in [20 %, 25 %] of the duration, RSS at the end the median of the
last 5 %; growth = end / warm-up - 1 (target <= 1 %). After the deadline the harness waits
for the server to be idle and records its state (running sequences, queue, KV blocks used
besides the prefix cache: all should be 0) and whether it still answers /health.
Not a test: it never fails on the figures. --quick: a 10-second smoke run.

  .venv/bin/python -m bench.load_bench --model models/random/qwen3-0.6b-q8_0.gguf \\
      --threads 2 --duration 120 --output bench/results/server-load-0.6b-q8_0.json
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/load_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import collections
import http.client
import json
import random
import socket
import sys
import threading
import time

from bench import benchlib
from bench import server_common as sc
from bench.server_bench import add_server_args, check_paths, record_header, start_server, write_record

TARGET_RSS_GROWTH = 0.01
KINDS = ("short_chat", "short_chat_stream", "long_completion", "long_completion_stream",
         "shared_prefix_chat_stream", "abandoned_stream")


def system_prompt(n_rules: int) -> str:
    return ("You are the night clerk of the harbour office. " +
            " ".join(f"Rule {i}: log every crate from pier {i % 9} before {6 + i % 5} pm and tag it {chr(65 + i % 26)}."
                     for i in range(n_rules)))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()     # kind -> requests finished
        self.errors = collections.Counter()     # error kind -> count
        self.error_examples: dict[str, str] = {}
        self.rejected_503 = 0
        self.latency_s: list[float] = []
        self.ttft_s: list[float] = []
        self.completion_tokens = 0
        self.cached_tokens = 0
        self.abandoned = 0

    def error(self, kind: str, detail: str):
        with self.lock:
            self.errors[kind] += 1
            self.error_examples.setdefault(kind, detail[:300])


def check_usage(u: dict | None, max_tokens: int) -> str | None:
    if not u:
        return "usage missing"
    if u.get("total_tokens") != u.get("prompt_tokens", 0) + u.get("completion_tokens", 0):
        return f"usage does not add up: {u}"
    if u.get("completion_tokens", 0) > max_tokens:
        return f"completion_tokens {u.get('completion_tokens')} > max_tokens {max_tokens}"
    return None


def one_request(srv, rng: random.Random, args, stats: Stats, deadline: float, model: str) -> float:
    """Sends one request of a random kind; returns seconds to wait before the next one."""
    kind = rng.choices(KINDS, weights=args.weights)[0]
    max_tokens = rng.randint(*args.max_tokens_range)
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": rng.choice([0, 0.8]),
                  "seed": rng.randint(0, 1 << 30)}
    if kind.startswith("short_chat"):
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": f"Question {rng.randint(0, 10**6)}: how do tides work?"}]
    elif kind.startswith("long_completion") or kind == "abandoned_stream":
        path = "/v1/completions"
        body["prompt"] = sc.synthetic_ids(args.long_tokens, offset=rng.randint(0, 10**6))
        body["ignore_eos"] = True
    else:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "system", "content": args.system_prompt},
                            {"role": "user", "content": f"Which rule covers crate {rng.randint(0, 10**6)}?"}]
    stream = kind.endswith("stream")
    t0 = time.perf_counter()
    timeout = max(5.0, min(args.timeout, deadline - time.monotonic() + args.timeout))
    try:
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            stop_after = rng.randint(1, 4) if kind == "abandoned_stream" else None
            r = srv.stream(path, body, timeout=timeout, stop_after_events=stop_after)
            status = r.status
            if status == 200:
                if kind == "abandoned_stream":
                    with stats.lock:
                        stats.abandoned += 1 if r.closed_early else 0
                        stats.counts[kind] += 1
                    if not r.closed_early and not r.done:
                        stats.error("stream_incomplete", f"{kind}: ended without [DONE]")
                    return 0.0
                if not r.done:
                    stats.error("stream_incomplete", f"{kind}: ended without [DONE] after {len(r.events)} events")
                    return 0.0
                if r.finish_reason() not in ("stop", "length"):
                    stats.error("finish_reason", f"{kind}: finish_reason {r.finish_reason()!r}")
                    return 0.0
                u = r.usage()
                bad = check_usage(u, max_tokens)
                if bad:
                    stats.error("usage", f"{kind}: {bad}")
                    return 0.0
                tt = r.token_times()
                with stats.lock:
                    stats.counts[kind] += 1
                    stats.latency_s.append(r.t_end - r.t_send)
                    if tt:
                        stats.ttft_s.append(tt[0])
                    stats.completion_tokens += u["completion_tokens"]
                    stats.cached_tokens += (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                return 0.0
            hd, raw = r.headers, r.body
        else:
            status, hd, raw = srv.request("POST", path, json.dumps(body).encode(), timeout=timeout)
            if status == 200:
                js = json.loads(raw)
                fin = js["choices"][0].get("finish_reason")
                if fin not in ("stop", "length"):
                    stats.error("finish_reason", f"{kind}: finish_reason {fin!r}")
                    return 0.0
                bad = check_usage(js.get("usage"), max_tokens)
                if bad:
                    stats.error("usage", f"{kind}: {bad}")
                    return 0.0
                with stats.lock:
                    stats.counts[kind] += 1
                    stats.latency_s.append(time.perf_counter() - t0)
                    stats.completion_tokens += js["usage"]["completion_tokens"]
                    stats.cached_tokens += (js["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                return 0.0
        if status == 503:
            with stats.lock:
                stats.rejected_503 += 1
            ra = hd.get("retry-after")
            if ra is None:
                stats.error("503_without_retry_after", f"{kind}: {raw[:200]!r}")
            try:
                return float(ra) if (ra is not None and args.honor_retry_after) else 0.05
            except ValueError:
                stats.error("503_bad_retry_after", f"Retry-After {ra!r}")
                return 0.05
        stats.error(f"status_{status}", f"{kind}: {raw[:300]!r}")
        return 0.1
    except (socket.timeout, TimeoutError) as e:
        stats.error("timeout", f"{kind}: {e}")
    except (OSError, http.client.HTTPException) as e:
        stats.error("connection", f"{kind}: {type(e).__name__}: {e}")
    except (ValueError, KeyError, IndexError) as e:
        stats.error("malformed_response", f"{kind}: {type(e).__name__}: {e}")
    return 0.1


def median_in(samples, lo: float, hi: float) -> int | None:
    v = sorted(b for t, b in samples if lo <= t <= hi)
    return v[len(v) // 2] if v else None


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/load_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--duration", type=benchlib.positive("--duration"), default=120, help="seconds of load (default 120)")
    ap.add_argument("--clients", type=benchlib.positive("--clients"), default=16, help="client threads (default 16)")
    ap.add_argument("--parallel", type=benchlib.positive("--parallel"), default=4, help="server --parallel (default 4)")
    ap.add_argument("--queue", type=benchlib.positive("--queue", 0), default=4, help="server --queue (default 4)")
    ap.add_argument("--long-tokens", type=benchlib.positive("--long-tokens"), default=384,
                    help="prompt length of the long requests (default 384)")
    ap.add_argument("--max-tokens-range", default="8,64", help="max_tokens drawn from A,B (default 8,64)")
    ap.add_argument("--mix", default="2,2,1,2,2,1",
                    help="weights of " + ", ".join(KINDS) + " (default 2,2,1,2,2,1)")
    ap.add_argument("--system-rules", type=benchlib.positive("--system-rules"), default=30,
                    help="length of the shared system prompt, in rules of ~20 tokens (default 30)")
    ap.add_argument("--seed", type=int, default=20240601, help="workload seed (default 20240601)")
    ap.add_argument("--no-honor-retry-after", dest="honor_retry_after", action="store_false",
                    help="retry after 50 ms instead of Retry-After seconds")
    args = ap.parse_args()
    check_paths(ap, args)
    try:
        a, b = (int(x) for x in args.max_tokens_range.split(","))
        assert 1 <= a <= b
        args.max_tokens_range = (a, b)
        args.weights = [float(x) for x in args.mix.split(",")]
        assert len(args.weights) == len(KINDS) and sum(args.weights) > 0
    except (ValueError, AssertionError):
        ap.error("--max-tokens-range expects A,B with 1 <= A <= B; --mix expects 6 non-negative weights")
    if args.quick:
        args.duration, args.clients, args.parallel, args.queue = 10, 8, 2, 1
        args.long_tokens = min(args.long_tokens, 200)
        args.max_tokens_range = (4, 24)
        args.system_rules = min(args.system_rules, 10)
    if args.clients <= args.parallel + args.queue:
        print(f"warning: {args.clients} clients <= parallel {args.parallel} + queue {args.queue}: "
              f"the 503 path may not be reached", file=sys.stderr)

    args.system_prompt = system_prompt(args.system_rules)
    rec = record_header(args, "bench/load_bench.py")
    srv = start_server(args, ["--parallel", str(args.parallel), "--queue", str(args.queue)])
    stats = Stats()
    try:
        model = srv.served_model()
        rec["server_argv"] = srv.argv
        rec["settings"] = {"duration_s": args.duration, "clients": args.clients, "parallel": args.parallel,
                           "queue": args.queue, "long_tokens": args.long_tokens, "system_rules": args.system_rules,
                           "max_tokens_range": list(args.max_tokens_range),
                           "mix": dict(zip(KINDS, args.weights)), "seed": args.seed,
                           "honor_retry_after": args.honor_retry_after, "threads": args.threads,
                           "backend": args.backend}
        m0 = srv.metrics()
        rss0 = srv.rss_bytes()
        sampler = sc.RSSSampler(srv.pid, 1.0).start()
        deadline = time.monotonic() + args.duration

        def client(k: int):
            rng = random.Random(args.seed * 1000 + k)
            while time.monotonic() < deadline:
                wait = one_request(srv, rng, args, stats, deadline, model)
                if wait:
                    time.sleep(min(wait, max(0.0, deadline - time.monotonic())))

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        # idle state after the load
        idle = None
        t_idle = time.monotonic() + 60
        while time.monotonic() < t_idle:
            m = srv.metrics()
            idle = {"running_sequences": m.get("kipp_running_sequences"), "queue_depth": m.get("kipp_queue_depth"),
                    "kv_blocks_used_besides_cache": m.get("kipp_kv_blocks_used") - m.get("kipp_kv_blocks_cached")}
            if not any(idle.values()):
                break
            time.sleep(0.2)
        samples = sampler.stop()
        m1 = srv.metrics()
        health = srv.request("GET", "/health", timeout=10)[0]
        rec["after_load"] = {"idle_state": idle, "idle": not any((idle or {"x": 1}).values()),
                             "health_status": health, "alive": srv.alive()}
        rec["server_metrics_delta"] = {
            k: m1.get(k) - m0.get(k) for k in (
                "kipp_generated_tokens_total", "kipp_prompt_tokens_total", "kipp_requests_cancelled_total",
                "kipp_requests_rejected_total", "kipp_prefix_cache_hits_total", "kipp_prefix_cache_hit_tokens_total",
                "kipp_engine_steps_total", "kipp_requests_preempted_total")}
        rec["server_requests_by_status"] = {
            f"{lb.get('endpoint')}:{lb.get('status')}": v for n, lb, v in m1.samples if n == "kipp_requests_total"}
    finally:
        rec["server_exit_code"] = srv.stop()
        rec["server_stderr_tail"] = srv.stderr_tail(2000)

    d = args.duration
    warm = median_in(samples, 0.20 * d, 0.25 * d)
    end = median_in(samples, 0.95 * d, d + 5)
    growth = (end / warm - 1) if warm and end else None
    n_ok = sum(stats.counts.values())
    n_err = sum(stats.errors.values())
    rec["results"] = {
        "wall_s": wall,
        "requests_ok": n_ok, "requests_by_kind": dict(stats.counts), "abandoned_streams": stats.abandoned,
        "rejected_503": stats.rejected_503,
        "errors": n_err, "errors_by_kind": dict(stats.errors), "error_examples": stats.error_examples,
        "requests_per_s": n_ok / wall, "completion_tokens": stats.completion_tokens,
        "completion_tokens_per_s": stats.completion_tokens / wall, "cached_tokens": stats.cached_tokens,
        "latency_s": sc.dist(stats.latency_s), "ttft_s": sc.dist(stats.ttft_s),
    }
    rec["rss"] = {"start_bytes": rss0, "after_warmup_bytes": warm, "end_bytes": end,
                  "max_bytes": max((b for _, b in samples), default=None), "growth": growth,
                  "target_growth": TARGET_RSS_GROWTH,
                  "met": growth is not None and growth <= TARGET_RSS_GROWTH,
                  "samples": [[round(t, 2), b] for t, b in samples]}
    if not samples or growth is None:
        rec["warnings"].append("too few RSS samples for the growth figure")
    if stats.rejected_503 == 0:
        rec["warnings"].append("no 503 was seen: the overload path was not exercised")
    print(f"{n_ok} requests ok ({n_ok / wall:.1f}/s), {stats.rejected_503} x 503, {n_err} errors "
          f"{dict(stats.errors) or ''}; latency p99 {rec['results']['latency_s'].get('p99', 0):.2f} s; "
          f"RSS {warm} -> {end} bytes ({'' if growth is None else f'{100 * growth:+.2f} %'}, target <= 1 %); "
          f"idle after: {rec['after_load']['idle']}", file=sys.stderr)
    write_record(rec, args.output)
    return 0 if n_err == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
