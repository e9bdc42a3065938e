#!/usr/bin/env python3
"""collect_cuda_gates.py — turns a log written by tools/ops/device_gate.sh into a
self-describing JSON result: the machine (commit, GPU, driver, CUDA, CPU), every step with its
status, seconds and figures (the gates' "N passed, N failed" counts and NMSE lines, the benches'
headline numbers from their embedded records), and whether the log is complete.

  python3 tools/ops/collect_cuda_gates.py build/device_gate.log -o build/device_gate.json

It reads only the markers device_gate.sh writes (its header documents the format) and the lines
the gates print; it judges nothing the log does not say (a bench is never "too slow" here).
Exit status: 0 the run passed and the log is complete, 1 a gate failed or the log is incomplete,
2 the file is not a device-gate log (or cannot be read). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

MARK = "### kipp-gate "
# device_gate.sh's first marker; anything before it (an ssh banner) is tolerated, up to a point
FIRST_MARKER_WITHIN = 50
GATE_KINDS = ("build", "prep", "gate")

RE_COUNTS = re.compile(r"\b(\d+) passed, (\d+) failed\b")
# tests/lib.sh's run_counted, which `make test-cuda` (tests/cuda/run_cuda_gates.sh) uses:
#   == LABEL: COMMAND...            a sub-gate starts
#      <the tail of its output, indented, its own "N passed, N failed" included>
#      -> LABEL: P passed, F failed (S s)
#   N passed, N failed              the driver's total, last and unindented
RE_SUB_BEGIN = re.compile(r"^== (.*?)(?: \(pending: not counted\))?: ")
RE_SUB_END = re.compile(r"^\s*-> (.*): (\d+) passed, (\d+) failed(?: \((\d+) s\))?")
RE_TOTAL = re.compile(r"^(\d+) passed, (\d+) failed\s*$")
NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
# "worst NMSE vs cpu-ref = 3.2e-07", "NMSE 1.2e-07", "worst NMSE 2.1e-06, tolerance 1e-04"
RE_NMSE = re.compile(r"NMSE(?: vs [\w.-]+)?\s*[=:]?\s*" + NUM)
RE_GBPS = re.compile(NUM + r"\s*GB/s")


class NotAGateLog(Exception):
    pass


def parse_kv(text: str) -> dict:
    """'rc=0 seconds=12' -> {'rc': '0', 'seconds': '12'}; a value runs to the next ' key='."""
    out = {}
    for m in re.finditer(r"(\w+)=(.*?)(?=\s+\w+=|$)", text):
        out[m.group(1)] = m.group(2)
    return out


def to_int(s):
    try:
        return int(s)
    except (TypeError, ValueError):
        return None


def gpu_fields(line: str) -> dict:
    # nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    parts = [p.strip() for p in line.split(",")]
    g = {"name": parts[0] if parts else line}
    if len(parts) >= 2:
        g["driver"] = parts[1]
    if len(parts) >= 3:
        g["memory"] = parts[2]
    return g


def cuda_version(nvcc_line: str):
    m = re.search(r"release ([\d.]+)", nvcc_line or "")
    return m.group(1) if m else None


def step_figures(lines: list[str]) -> dict:
    """The figures a step's output carries: its pass/fail counts (the driver's total, and each
    sub-gate run_counted reported), NMSE values (the worst per sub-gate), GB/s values."""
    counts, subgates, nmse, gbps = [], [], [], []
    total = None
    cur = None  # the sub-gate whose output this is
    for line in lines:
        m = RE_SUB_BEGIN.match(line)
        if m:
            cur = {"name": m.group(1), "passed": None, "failed": None, "seconds": None,
                   "worst_nmse": None}
            subgates.append(cur)
        m = RE_SUB_END.match(line)
        if m:
            if cur is None or cur["name"] != m.group(1):
                cur = {"name": m.group(1), "seconds": None, "worst_nmse": None}
                subgates.append(cur)
            cur["passed"], cur["failed"] = int(m.group(2)), int(m.group(3))
            cur["seconds"] = int(m.group(4)) if m.group(4) else None
            cur = None
            continue
        m = RE_TOTAL.match(line)
        if m:
            total = (int(m.group(1)), int(m.group(2)))
        m = RE_COUNTS.search(line)
        if m:
            counts.append((int(m.group(1)), int(m.group(2))))
        for m in RE_NMSE.finditer(line):
            # "(bound: NMSE 1e-5)", "tolerance NMSE 1e-4": a limit, not a measurement
            if re.search(r"(bound|tolerance|limit)\W*$", line[:m.start()]):
                continue
            v = float(m.group(1))
            nmse.append({"value": v, "line": line.strip(), "gate": cur["name"] if cur else None})
            if cur is not None and (cur["worst_nmse"] is None or v > cur["worst_nmse"]):
                cur["worst_nmse"] = v
        for m in RE_GBPS.finditer(line):
            gbps.append({"value": float(m.group(1)), "line": line.strip()})
    fig = {}
    done = [g for g in subgates if g.get("passed") is not None]
    if total is None and done:
        total = (sum(g["passed"] for g in done), sum(g["failed"] for g in done))
    if total is None and counts:  # one binary's own report(s), no driver around them
        total = (sum(c[0] for c in counts), sum(c[1] for c in counts))
    if total is not None:
        fig["passed"], fig["failed"] = total
    if subgates:
        fig["subgates"] = subgates
        fig["subgates_failed"] = [g["name"] for g in subgates if g.get("failed")]
    if nmse:
        fig["nmse"] = nmse
        fig["worst_nmse"] = max(n["value"] for n in nmse)
    if gbps:
        fig["gbps"] = gbps
        fig["best_gbps"] = max(g["value"] for g in gbps)
    return fig


def median(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d.get("median") if isinstance(d, dict) else d


def bench_figures(rec: dict) -> dict:
    """Headline numbers of a tools/bench.py or bench/server_bench.py record."""
    harness = rec.get("harness", "")
    fig = {"harness": harness}
    if "kipp" in rec:  # tools/bench.py
        s = rec["kipp"].get("summary", {})
        for key in ("prefill_tok_s", "decode_tok_s", "decode_effective_gbps", "peak_rss_bytes"):
            v = median(s, key)
            if v is not None:
                fig[key + "_median"] = v
        fig["noisy"] = rec.get("noisy")
    elif isinstance(rec.get("summary"), dict):  # server_bench.py: one entry per client count
        levels = {}
        for c, lv in rec["summary"].items():
            if not isinstance(lv, dict):
                continue
            levels[c] = {k: v for k, v in (
                ("agg_decode_tps_median", median(lv, "agg_decode_tps")),
                ("ttft_p50_s", lv.get("ttft_p50_s")), ("ttft_p99_s", lv.get("ttft_p99_s")),
                ("itl_p50_s", lv.get("itl_p50_s")), ("itl_p99_s", lv.get("itl_p99_s")),
                ("errors", lv.get("errors"))) if v is not None}
        fig["levels"] = levels
        fig["noisy"] = rec.get("noisy")
    else:
        fig.update({k: v for k, v in rec.items() if isinstance(v, (int, float, str, bool))})
    model = rec.get("model")
    if isinstance(model, dict):
        fig["model"] = model.get("path")
    settings = rec.get("settings")
    if isinstance(settings, dict) and "backend" in settings:
        fig["backend"] = settings["backend"]
    return fig


def collect(text: str, source: str = "") -> dict:
    lines = text.splitlines()
    first = next((i for i, l in enumerate(lines[:FIRST_MARKER_WITHIN]) if l.startswith(MARK)), None)
    if first is None or not lines[first].startswith(MARK + "LOG v1"):
        raise NotAGateLog(f"{source or 'input'}: not a device-gate log (no '{MARK}LOG v1' "
                          f"marker in its first {FIRST_MARKER_WITHIN} lines; "
                          f"tools/ops/device_gate.sh writes one)")
    res = {
        "format": "kipp-cuda-device-gate", "format_version": 1, "log": source,
        "started": None, "host": None, "commit": None, "dirty": None, "date": None,
        "gpu": None, "gpus": [], "gpu_error": None, "driver": None, "cuda": None,
        "nvcc": None, "cpu": None, "cores": None, "options": None, "budget_seconds": None,
        "complete": False, "missing": [], "passed": False, "exit_status": None,
        "seconds": None, "plan": [], "steps": [], "benches": [],
    }
    head = parse_kv(lines[first][len(MARK + "LOG v1"):].strip())
    res["started"], res["host"] = head.get("started"), head.get("host")
    steps: dict[str, dict] = {}
    order: list[str] = []
    open_step = None  # name of the step whose END has not come
    body: list[str] = []
    json_step, json_lines, json_file = None, [], None
    done = None

    def new_step(name, kind):
        st = {"name": name, "kind": kind, "status": None, "rc": None, "seconds": None,
              "reason": None, "figures": {}}
        steps[name] = st
        order.append(name)
        return st

    for line in lines[first + 1:]:
        if json_step is not None:
            if line.startswith(MARK + "JSON END"):
                bench = {"step": json_step, "file": json_file}
                try:
                    bench["figures"] = bench_figures(json.loads("\n".join(json_lines)))
                except (ValueError, AttributeError) as e:
                    bench["error"] = f"record is not valid JSON: {e}"
                res["benches"].append(bench)
                json_step = None
            else:
                json_lines.append(line)
            continue
        if not line.startswith(MARK):
            if open_step is not None:
                body.append(line)
            continue
        rest = line[len(MARK):]
        word, _, tail = rest.partition(" ")
        if word == "PLAN":
            res["plan"] = tail.split()
        elif word == "INFO":
            key, _, val = tail.partition("=")
            if key == "gpu":
                res["gpus"].append(gpu_fields(val))
            elif key in ("commit", "date", "nvcc", "cpu", "options", "gpu_error"):
                res[key] = val
            elif key == "dirty":
                res["dirty"] = {"true": True, "false": False}.get(val)
            elif key in ("cores", "budget_seconds"):
                res[key] = to_int(val)
        elif word == "BEGIN":
            name, _, kv = tail.partition(" ")
            if open_step is not None:  # a BEGIN before the last END: that step never ended
                steps[open_step]["status"] = "incomplete"
                steps[open_step]["figures"] = step_figures(body)
            st = new_step(name, parse_kv(kv).get("kind"))
            st["status"] = "running"
            open_step, body = name, []
        elif word == "END":
            name, _, kv = tail.partition(" ")
            kv = parse_kv(kv)
            st = steps.get(name) or new_step(name, None)
            st["rc"], st["seconds"] = to_int(kv.get("rc")), to_int(kv.get("seconds"))
            st["figures"] = step_figures(body if open_step == name else [])
            failed_counts = st["figures"].get("failed", 0)
            st["status"] = "pass" if st["rc"] == 0 and not failed_counts else "fail"
            if st["rc"] == 124:
                st["reason"] = "stopped at the time budget"
            open_step, body = None, []
        elif word == "SKIP":
            name, _, kv = tail.partition(" ")
            kv = parse_kv(kv)
            st = new_step(name, kv.get("kind"))
            st["status"], st["reason"] = "skipped", kv.get("reason")
        elif word == "JSON" and tail.startswith("BEGIN "):
            name, _, kv = tail[len("BEGIN "):].partition(" ")
            json_step, json_lines, json_file = name, [], parse_kv(kv).get("file")
        elif word == "DONE":
            done = parse_kv(tail)

    if res["gpus"]:
        res["gpu"] = res["gpus"][0]["name"]
        res["driver"] = res["gpus"][0].get("driver")
    res["cuda"] = cuda_version(res["nvcc"])
    if json_step is not None:
        res["missing"].append(f"the record of {json_step} is cut (no JSON END)")
    if open_step is not None:
        steps[open_step]["status"] = "incomplete"
        steps[open_step]["figures"] = step_figures(body)
        res["missing"].append(f"step {open_step} has no END marker: the log was cut mid-step")
    for name in res["plan"]:
        if name not in steps:
            res["missing"].append(f"planned step {name} never started")
    if done is None:
        res["missing"].append("no DONE marker: device_gate.sh did not finish")
    else:
        res["exit_status"] = to_int(done.get("rc"))
        res["seconds"] = to_int(done.get("seconds"))
    res["complete"] = not res["missing"]
    res["steps"] = [steps[n] for n in order]
    gates = [s for s in res["steps"] if s["kind"] in GATE_KINDS]
    res["gates_failed"] = [s["name"] for s in gates if s["status"] in ("fail", "incomplete")]
    res["gates_skipped"] = [s["name"] for s in gates if s["status"] == "skipped"]
    res["benches_failed"] = [s["name"] for s in res["steps"]
                             if s["kind"] == "bench" and s["status"] == "fail"]
    res["passed"] = bool(res["complete"] and gates and not res["gates_failed"]
                         and not res["gates_skipped"] and res["exit_status"] == 0)
    return res


def summary(res: dict) -> str:
    out = [f"commit {res['commit']} on {res['gpu'] or 'no GPU (' + str(res['gpu_error']) + ')'}"
           f", driver {res['driver']}, CUDA {res['cuda']}"]
    for s in res["steps"]:
        f = s["figures"]
        extra = ""
        if "passed" in f:
            extra += f" {f['passed']} passed, {f['failed']} failed"
        if "worst_nmse" in f:
            extra += f", worst NMSE {f['worst_nmse']:.3g}"
        if s["reason"]:
            extra += f" ({s['reason']})"
        secs = f" {s['seconds']}s" if s["seconds"] is not None else ""
        out.append(f"  {s['status']:<10} {s['name']:<28}{secs}{extra}")
    for m in res["missing"]:
        out.append(f"  missing: {m}")
    out.append("PASSED" if res["passed"] else "NOT PASSED")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tools/ops/collect_cuda_gates.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="a log written by tools/ops/device_gate.sh")
    ap.add_argument("-o", "--output", help="write the JSON result here (default: stdout)")
    args = ap.parse_args(argv)
    try:
        with open(args.log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        res = collect(text, args.log)
    except OSError as e:
        print(f"collect_cuda_gates: cannot read {args.log}: {e.strerror}", file=sys.stderr)
        return 2
    except NotAGateLog as e:
        print(f"collect_cuda_gates: {e}", file=sys.stderr)
        return 2
    doc = json.dumps(res, indent=2) + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(doc)
        print(summary(res), file=sys.stderr)
    else:
        sys.stdout.write(doc)
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
