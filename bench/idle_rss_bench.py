#!/usr/bin/env python3
"""idle_rss_bench.py — resident memory of idle kipp-server builds side by side: each binary
started with its default settings on one GGUF, VmRSS read after --idle seconds with no
request, then again after one short completion; one JSON record (bench/results/*.json).

Each --server LABEL=PATH is a kipp-server binary (e.g. one built at an older commit in a
`git worktree`); runs are interleaved (A B A B ...), each a fresh process on a free port
(--port 0) stopped with SIGTERM afterwards. VmRSS and VmHWM come from /proc/PID/status. The
record has, per binary, its sha256 and the commit of the checkout it sits in, the start-up
lines it printed, every run and min/median/max, and the ratio of each binary's medians to the
first one's. A memory figure, not a speed: the machine's load matters little, but is recorded.

  .venv/bin/python -m bench.idle_rss_bench --server before=/tmp/wt-old/build/kipp-server \\
      --server after=build/kipp-server --output bench/results/kv-type-server-idle-rss.json
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/idle_rss_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench import benchlib
from bench import server_common as sc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_MODEL = "models/random/qwen3-0.6b-q8_0.gguf"


def server_spec(s: str) -> tuple[str, str]:
    label, sep, path = s.partition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"--server expects LABEL=PATH, got '{s}'")
    return label, path


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/idle_rss_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", type=server_spec, action="append", required=True,
                    metavar="LABEL=PATH", help="a kipp-server binary (repeat; ratios are to the first)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"GGUF (default {DEFAULT_MODEL})")
    ap.add_argument("--runs", metavar="N", type=benchlib.positive("--runs"), default=3,
                    help="runs per binary, interleaved (default 3)")
    ap.add_argument("--idle", metavar="S", type=float, default=5.0,
                    help="seconds idle after /health 200 before reading VmRSS (default 5)")
    ap.add_argument("--max-tokens", metavar="N", type=benchlib.positive("--max-tokens"), default=8,
                    help="max_tokens of the one completion request (default 8)")
    ap.add_argument("--output", metavar="FILE", help="write the JSON record here (default: stdout)")
    ap.add_argument("--no-hash", action="store_true", help="do not sha256 the model (trials)")
    return ap


def proc_status(pid: int) -> dict:
    """VmRSS and VmHWM of pid in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def git_commit(path: str) -> dict:
    """The commit (and dirty state) of the checkout that holds path."""
    d = os.path.dirname(os.path.abspath(path))

    def git(*a):
        r = subprocess.run(["git", "-C", d, *a], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None
    return {"checkout": git("rev-parse", "--show-toplevel"), "commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def one_run(path: str, model: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="kipp-rss-") as logs:
        srv = sc.ServerProcess(os.path.abspath(path), model, log_dir=logs)
        t0 = time.monotonic()
        srv.start(timeout=300)
        try:
            ready_s = time.monotonic() - t0
            time.sleep(args.idle)
            idle = proc_status(srv.pid)
            name = srv.served_model()
            t1 = time.monotonic()
            st, _, body = srv.post_json("/v1/completions", {
                "model": name, "prompt": "The capital of France is", "max_tokens": args.max_tokens,
                "temperature": 0}, timeout=300)
            req_s = time.monotonic() - t1
            if st != 200:
                raise sc.ServerError(f"{path}: the completion answered {st}: {body}")
            time.sleep(2.0)
            after = proc_status(srv.pid)
            startup = [ln for ln in (srv.stdout() + open(srv.stderr_path).read()).splitlines()
                       if ln.strip()][:12]
        finally:
            rc = srv.stop()
    return {"argv": srv.argv, "startup_lines": startup, "ready_s": ready_s,
            "idle_vmrss_bytes": idle["VmRSS"], "idle_vmhwm_bytes": idle["VmHWM"],
            "after_request_vmrss_bytes": after["VmRSS"], "after_request_vmhwm_bytes": after["VmHWM"],
            "request_s": req_s, "completion_tokens": (body.get("usage") or {}).get("completion_tokens"),
            "exit_code": rc}


KEYS = ("idle_vmrss_bytes", "after_request_vmrss_bytes", "idle_vmhwm_bytes", "after_request_vmhwm_bytes")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = build_parser()
    args = ap.parse_args(argv)
    labels = [lb for lb, _ in args.server]
    if len(set(labels)) != len(labels):
        ap.error("--server labels must differ")
    for _, path in args.server:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            ap.error(f"--server {path}: not an executable file")
    if not os.path.isfile(args.model):
        ap.error(f"--model {args.model}: no such file")
    if args.output and not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        ap.error(f"--output {args.output}: directory does not exist")
    load_before = list(os.getloadavg())
    runs = {lb: [] for lb in labels}
    try:
        for i in range(args.runs):
            for lb, path in args.server:
                r = one_run(path, args.model, args)
                runs[lb].append(r)
                print(f"idle_rss_bench: run {i + 1}/{args.runs} {lb}: idle VmRSS "
                      f"{r['idle_vmrss_bytes'] / 2**20:.1f} MiB, after one request "
                      f"{r['after_request_vmrss_bytes'] / 2**20:.1f} MiB", file=sys.stderr, flush=True)
    except (sc.ServerError, OSError) as e:
        print(f"idle_rss_bench: {e}", file=sys.stderr)
        return 1
    servers = {}
    for lb, path in args.server:
        servers[lb] = {"binary": {"path": path, "sha256": benchlib.sha256_file(path)},
                       "source": git_commit(path), "runs": runs[lb],
                       "startup_lines": runs[lb][0]["startup_lines"],
                       "summary": {k: benchlib.summary([r[k] for r in runs[lb]]) for k in KEYS}}
    first = servers[labels[0]]["summary"]
    ratios = {lb: {k: s["summary"][k]["median"] / first[k]["median"] for k in KEYS}
              for lb, s in servers.items() if lb != labels[0]}
    rec = {
        "benchmark": "kipp-server resident memory, idle and after one request",
        "harness": os.path.relpath(os.path.abspath(__file__), ROOT),
        "argv": argv,
        "provenance": benchlib.provenance(),
        "model": benchlib.model_manifest(args.model, hash_file=not args.no_hash),
        "settings": {"server_args": "the binary's defaults (--model only, --port 0)",
                     "idle_s": args.idle, "request": {"endpoint": "/v1/completions",
                                                      "prompt": "The capital of France is",
                                                      "max_tokens": args.max_tokens,
                                                      "temperature": 0},
                     "after_request_wait_s": 2.0, "runs": args.runs,
                     "order": "interleaved " + ", ".join(labels) + ", ... (a fresh process each)"},
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "servers": servers,
        f"ratios_over_{labels[0]}": ratios,
    }
    for lb in labels:
        s = servers[lb]["summary"]
        print(f"idle_rss_bench: {lb}: idle VmRSS median {s['idle_vmrss_bytes']['median'] / 2**20:.1f} MiB, "
              f"after one request {s['after_request_vmrss_bytes']['median'] / 2**20:.1f} MiB",
              file=sys.stderr)
    for lb, r in ratios.items():
        print(f"idle_rss_bench: {lb} / {labels[0]}: idle {r['idle_vmrss_bytes']:.3f}x, after one "
              f"request {r['after_request_vmrss_bytes']:.3f}x", file=sys.stderr)
    text = json.dumps(rec, indent=2) + "\n"
    if args.output:
        benchlib.write_record_file(args.output, text)
        print(f"idle_rss_bench: record written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
