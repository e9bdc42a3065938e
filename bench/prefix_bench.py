#!/usr/bin/env python3
"""prefix_bench.py — what automatic prefix caching buys: time to first token of chat
requests that share a long system prompt, kipp-server with its prefix cache (the default)
against one started with --no-prefix-cache; writes a JSON record. Protocol: bench/README.md.

The system prompt is built from varied sentences until the chat template renders it (with a
short question) to about --prefix-tokens tokens; its length is verified through
usage.prompt_tokens. Both servers run side by side (same binary, model, threads); after
one warm-up request each (it fills the cache on the caching server), --requests measured
requests alternate between them, one at a time, each with a distinct short user question
(so only the system prompt can be reused). TTFT is the time from sending the streaming
request to the first SSE chunk that carries text (content or reasoning_content); max_tokens
--max-tokens, temperature 0, ignore_eos. The record holds every TTFT, their summaries, the
cached_tokens each request reported, and the ratio median TTFT without cache / with cache
(target >= 5x), also the caching server's slowest over the other's fastest.
Not a test: it never fails on the figures. --quick: tiny counts for a smoke run.

  .venv/bin/python -m bench.prefix_bench --model models/random/qwen3-0.6b-q8_0.gguf \\
      --threads 2 --output bench/results/server-prefix-0.6b-q8_0.json
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/prefix_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import random
import statistics
import sys

from bench import benchlib
from bench import server_common as sc
from bench.server_bench import add_server_args, check_paths, record_header, start_server, write_record

TARGET_RATIO = 5.0

SUBJECTS = ["The archive", "Our harbour office", "Every courier", "The night clerk", "A visiting auditor",
            "The east wing", "Each ledger", "The weather station", "The ferry timetable", "Your assistant"]
VERBS = ["records", "forwards", "reconciles", "summarizes", "double-checks", "files", "translates",
         "annotates", "stamps", "cross-references"]
OBJECTS = ["cargo manifests from Lisbon", "invoices older than 1987", "tide tables for the northern pier",
           "letters addressed to the harbour master", "passenger lists of the evening ferry",
           "customs declarations for spices", "repair logs of the lighthouse lamp",
           "insurance claims after storms", "requests for dock space", "fishing permits issued in March"]
CLAUSES = ["before noon on weekdays", "unless the seal is broken", "in triplicate", "using the blue ink",
           "with a note for the archivist", "only after the bell rings twice", "and keeps a copy in drawer 7",
           "while the quay is closed", "according to rule 14(b)", "if the sender is known"]


def system_prompt(n_sentences: int, seed: int = 1234) -> str:
    rng = random.Random(seed)
    parts = ["You are the clerk of a busy harbour office. Follow these standing instructions exactly."]
    for i in range(n_sentences):
        parts.append(f"{i + 1}. {rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} "
                     f"{rng.choice(CLAUSES)}; reference code {rng.randint(100, 9999)}-{rng.choice('ABCDEFGHJK')}.")
    return "\n".join(parts)


def question(i: int) -> str:
    return f"Question {i}: which rule covers item #{1000 + 17 * i}, and who signs for it?"


def messages(sys_text: str, i: int) -> list:
    return [{"role": "system", "content": sys_text}, {"role": "user", "content": question(i)}]


def chatml(msgs: list) -> str:
    """The Qwen3 chat rendering of system + user messages with the generation prompt (what
    the server's template gives for them), for the completions endpoint."""
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
    return out + "<|im_start|>assistant\n"


ENDPOINT = {"endpoint": "completions"}


def ttft_request(srv, msgs, max_tokens: int, timeout: float, allow_400: bool = False) -> dict | None:
    body = {"model": srv.model_name, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if ENDPOINT["endpoint"] == "chat":
        body["messages"] = msgs
        r = srv.stream("/v1/chat/completions", body, timeout=timeout)
    else:
        body["prompt"] = chatml(msgs)
        r = srv.stream("/v1/completions", body, timeout=timeout)
    if r.status == 400 and allow_400:
        return None
    if r.status != 200 or not r.done:
        raise sc.ServerError(f"request failed: status {r.status}, done={r.done}: {r.body[:300]!r}")
    times = r.token_times()
    u = r.usage() or {}
    return {"ttft_s": times[0] if times else None, "prompt_tokens": u.get("prompt_tokens"),
            "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
            "completion_tokens": u.get("completion_tokens")}


def calibrate(srv, target: int, timeout: float) -> tuple[str, int]:
    """The longest system prompt (in sentences) whose rendering with a question stays within
    target tokens, found with max_tokens=1 requests on the server without a cache. A prompt
    the server refuses as too long (400) counts as over the target."""
    memo: dict[int, float] = {}

    def n_tokens(k: int) -> float:
        if k not in memo:
            r = ttft_request(srv, messages(system_prompt(k), 0), 1, timeout, allow_400=True)
            memo[k] = r["prompt_tokens"] if r else float("inf")
        return memo[k]
    n0, n8 = n_tokens(0), n_tokens(8)
    if n8 == float("inf"):
        k = 0
    else:
        per = max((n8 - n0) / 8, 1.0)
        k = max(int((target - n0) / per), 0)
    while k > 0 and n_tokens(k) > target:
        k -= 1
    while n_tokens(k + 1) <= target:
        k += 1
    if n_tokens(k) == float("inf"):
        raise sc.ServerError("even the shortest system prompt is refused as too long")
    return system_prompt(k), int(n_tokens(k))


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/prefix_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_args(ap)
    ap.add_argument("--prefix-tokens", type=benchlib.positive("--prefix-tokens"), default=1000,
                    help="rendered prompt length to aim for (default 1000)")
    ap.add_argument("--requests", type=benchlib.positive("--requests"), default=10,
                    help="measured requests per server (default 10)")
    ap.add_argument("--max-tokens", type=benchlib.positive("--max-tokens"), default=4,
                    help="tokens generated per request (default 4; TTFT only needs the first)")
    ap.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                    help="completions (default): the chat rendering sent as a prompt string, so the "
                         "first token always shows as text; chat: /v1/chat/completions, whose "
                         "reasoning split may hold back a random-weight model's text (no TTFT)")
    args = ap.parse_args()
    ENDPOINT["endpoint"] = args.endpoint
    check_paths(ap, args)
    if args.quick:
        args.requests = min(args.requests, 3)
        args.prefix_tokens = min(args.prefix_tokens, 300)

    rec = record_header(args, "bench/prefix_bench.py")
    cache = start_server(args, [], name="with-cache")
    nocache = None
    try:
        nocache = start_server(args, ["--no-prefix-cache"], name="no-cache")
        for s in (cache, nocache):
            s.served_model()
        rec["server_argv"] = {"with_cache": cache.argv, "no_cache": nocache.argv}
        sys_text, n_prompt = calibrate(nocache, args.prefix_tokens, args.timeout)
        print(f"system prompt: {len(sys_text)} chars, {n_prompt} prompt tokens with a question", file=sys.stderr)
        rec["settings"] = {"prefix_tokens_target": args.prefix_tokens, "prompt_tokens_measured": n_prompt,
                           "system_prompt_chars": len(sys_text), "requests": args.requests,
                           "max_tokens": args.max_tokens, "threads": args.threads, "backend": args.backend,
                           "endpoint": "/v1/chat/completions" if args.endpoint == "chat" else
                           "/v1/completions (Qwen3 chat rendering as the prompt)",
                           "stream": True, "temperature": 0}
        warm = {"with_cache": ttft_request(cache, messages(sys_text, 1), args.max_tokens, args.timeout),
                "no_cache": ttft_request(nocache, messages(sys_text, 1), args.max_tokens, args.timeout)}
        rec["warmup"] = warm
        runs = {"with_cache": [], "no_cache": []}
        for i in range(args.requests):
            for name, s in (("with_cache", cache), ("no_cache", nocache)):
                r = ttft_request(s, messages(sys_text, 100 + i), args.max_tokens, args.timeout)
                runs[name].append(r)
            a, b = runs["with_cache"][-1], runs["no_cache"][-1]
            if a["ttft_s"] is None or b["ttft_s"] is None:
                raise sc.ServerError("a response carried no text, so it has no TTFT (try --endpoint completions)")
            print(f"request {i + 1}/{args.requests}: TTFT with cache {1000 * a['ttft_s']:.1f} ms "
                  f"(cached {a['cached_tokens']} of {a['prompt_tokens']}), without {1000 * b['ttft_s']:.1f} ms",
                  file=sys.stderr)
        m = cache.metrics()
        rec["server_metrics_with_cache"] = {
            k: m.get(k) for k in ("kipp_prefix_cache_lookups_total", "kipp_prefix_cache_hits_total",
                                  "kipp_prefix_cache_hit_tokens_total", "kipp_prefix_cache_hit_rate",
                                  "kipp_kv_blocks_cached", "kipp_kv_blocks_total")}
        rec["rss_bytes"] = {"with_cache": cache.rss_bytes(), "no_cache": nocache.rss_bytes()}
    finally:
        rec["server_exit_code"] = {"with_cache": cache.stop()}
        rec["server_stderr_tail"] = {"with_cache": cache.stderr_tail(1500)}
        if nocache is not None:
            rec["server_exit_code"]["no_cache"] = nocache.stop()
            rec["server_stderr_tail"]["no_cache"] = nocache.stderr_tail(1500)

    res = {}
    for name, rs in runs.items():
        t = [r["ttft_s"] for r in rs]
        res[name] = {"ttft_s": t, "summary": benchlib.summary(t), "dispersion": benchlib.dispersion(t),
                     "dist": sc.dist(t), "cached_tokens": [r["cached_tokens"] for r in rs],
                     "prompt_tokens": [r["prompt_tokens"] for r in rs]}
    rec["results"] = res
    med_c, med_n = res["with_cache"]["summary"]["median"], res["no_cache"]["summary"]["median"]
    ratio = med_n / med_c if med_c else None
    worst = res["no_cache"]["summary"]["min"] / res["with_cache"]["summary"]["max"]
    rec["ratio_ttft_nocache_over_cache"] = {"median": ratio, "cache_worst_vs_nocache_best": worst,
                                            "target": TARGET_RATIO, "met": bool(ratio and ratio >= TARGET_RATIO),
                                            "met_by_worst": worst >= TARGET_RATIO}
    rec["cached_tokens_median"] = statistics.median(res["with_cache"]["cached_tokens"])
    rec["cached_fraction_median"] = statistics.median(
        c / p for c, p in zip(res["with_cache"]["cached_tokens"], res["with_cache"]["prompt_tokens"]))
    if any(c for c in res["no_cache"]["cached_tokens"]):
        rec["warnings"].append("the --no-prefix-cache server reported cached tokens")
    print(f"TTFT median: {1000 * med_c:.1f} ms with cache, {1000 * med_n:.1f} ms without: "
          f"{ratio:.1f}x (target {TARGET_RATIO}x, {'met' if ratio >= TARGET_RATIO else 'NOT met'}); "
          f"cached tokens median {rec['cached_tokens_median']}", file=sys.stderr)
    write_record(rec, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
