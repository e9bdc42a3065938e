#!/usr/bin/env python3
"""bench.py — prefill and decode speed of the kipp CLI on one GGUF, with provenance; writes a
JSON record (bench/results/*.json). Protocol: bench/README.md.

Each run is a fresh `kipp` process (greedy, --ignore-eos, --stats-json), so every run pays
the same cold costs and its own peak RSS is measured (os.wait4). The prompt is either TEXT
(--prompt) or a synthetic one of exactly N ordinary token ids (--prompt-tokens, the same ids
for every model with the Qwen3 vocabulary). --decode N means N single-token forward passes
after the prefill (kipp -n N+1: the first token is sampled from the prefill's logits).

The record holds: commit and dirty state, binary path and sha256, compiler and the compile
commands make uses, `kipp --version`, hardware (CPU model, ISA flags, cores, memory), the
model manifest (path, size, sha256, architecture and shape, parameter count, tensor type
mix), the settings, every run's prefill and decode figures, min/median/max, dispersion
((max - min) / median), effective decode GB/s (weight bytes read per decoded token x tok/s;
the token-embedding table counts only when tied, as the output matrix), the machine's read
bandwidth (build/kipp-membw, when built), and peak RSS against model file + KV pool bytes.

It refuses to write --output when Kipp's dispersion exceeds the protocol's limit (10 %),
unless --allow-noisy (the record is then marked "noisy": true). Standard library only.

--backend cuda (default binary build/kipp-cuda-generic): the bandwidth probe is the GPU's,
build/kipp-cuda-membw beside the binary (its read kernel's best GB/s is what decode's
effective GB/s is set against); the record's provenance.hardware.gpu has nvidia-smi's name,
driver, memory and compute capability, gpu_state its temperature, clocks, power and
utilization before and after the runs, and idle_check the GPU idle rule's outcome
(benchlib.gpu_idle_decision: one free host core and an otherwise unused GPU; CPU load the GPU
run does not depend on is not held against it). Here it only warns; bench/peer_bench.py
refuses.

  python3 -m tools.bench --backend cpu --model M --prompt "The capital of France is" \\
      --decode 64 --warmup 1 --runs 5 --output bench/results/X.json
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import hashlib
import json
import os
import sys
import tempfile

from bench import benchlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXIT_USAGE, EXIT_RUN, EXIT_NOISY = 2, 1, 3
KV_TYPES = ("f32", "f16", "bf16")  # kipp --kv-type
# --binary and bandwidth probe per backend when not given, and the make target that builds each
DEFAULT_BINARY = {"cuda": "build/kipp-cuda-generic"}
MEMBW_PROBE = {"cuda": ("kipp-cuda-membw", "make build/kipp-cuda-membw")}
BUILD_HINT = {"cuda": "make cuda-generic"}


class BenchError(Exception):
    """A failure with a message for the user (exit 1)."""


def synthetic_ids(n: int, n_vocab: int) -> list[int]:
    """The ids of `kipp --prompt-tokens N` (src/cli/kipp.c synthetic_prompt), for a vocabulary
    whose end-of-generation tokens lie at or above 151643 (Qwen3)."""
    base, top = 1000, min(n_vocab, 151643)
    if top <= 2 * base:
        base = 0
    span = top - base
    return [base + (i * 7919) % span for i in range(n)]


def ids_sha256(ids: list[int]) -> str:
    return hashlib.sha256(" ".join(map(str, ids)).encode()).hexdigest()


def add_record_args(ap: argparse.ArgumentParser) -> None:
    """The run and record options every benchmark writing a record takes."""
    ap.add_argument("--timeout", metavar="S", type=benchlib.positive("--timeout"), default=3600,
                    help="seconds one run may take (default 3600)")
    ap.add_argument("--output", metavar="FILE", help="write the JSON record here (default: stdout)")
    ap.add_argument("--allow-noisy", action="store_true",
                    help="write the record even above the dispersion limit (marked noisy)")
    ap.add_argument("--no-hash", action="store_true",
                    help="do not sha256 the model (quick trials; such records are not committed)")


def add_common_args(ap: argparse.ArgumentParser) -> None:
    """The options tools/bench.py and bench/peer_bench.py share."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap.add_argument("--model", required=True, help="Qwen3 GGUF file")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--prompt", metavar="TEXT", help="prompt text (tokenized by kipp)")
    g.add_argument("--prompt-tokens", metavar="N", type=benchlib.positive("--prompt-tokens"),
                   help="synthetic prompt of exactly N token ids (kipp --prompt-tokens)")
    ap.add_argument("--decode", metavar="N", type=benchlib.positive("--decode"), default=64,
                    help="single-token decode steps after the prefill (default 64)")
    ap.add_argument("--warmup", metavar="N", type=benchlib.positive("--warmup", 0), default=1,
                    help="warm-up runs, not counted (default 1)")
    ap.add_argument("--runs", metavar="N", type=benchlib.positive("--runs"), default=5,
                    help="measured runs (default 5)")
    ap.add_argument("--threads", metavar="N", type=benchlib.positive("--threads"), default=usable,
                    help=f"threads (default: usable CPUs, here {usable})")
    ap.add_argument("--backend", default="cpu", help="kipp backend: cpu (default), cuda, ...")
    ap.add_argument("--binary", default=None,
                    help="kipp CLI (default build/kipp; build/kipp-cuda-generic for cuda)")
    ap.add_argument("--kv-type", choices=KV_TYPES,
                    help="KV cache element type, passed to kipp as --kv-type (default: not "
                         "passed, the backend's own; the record has the type each run used)")
    ap.add_argument("--ctx-size", metavar="N", type=benchlib.positive("--ctx-size"),
                    help="context size for every run (default: prompt + decode + 1, rounded "
                         "up to a multiple of 256, at most the model's trained context)")
    ap.add_argument("--membw", metavar="PATH",
                    help="read-bandwidth probe (default: kipp-membw next to --binary, if built; "
                         "kipp-cuda-membw for --backend cuda)")
    ap.add_argument("--no-membw", action="store_true", help="skip the bandwidth probe")
    add_record_args(ap)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/bench.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    return ap


def backend_of(args) -> str:
    return getattr(args, "backend", None) or "cpu"


def check_paths(ap: argparse.ArgumentParser, args) -> None:
    """Usage errors (exit 2); also fills in --binary's per-backend default."""
    be = backend_of(args)
    if getattr(args, "binary", None) is None:
        args.binary = DEFAULT_BINARY.get(be, "build/kipp")
    if not os.path.isfile(args.model):
        ap.error(f"--model {args.model}: no such file")
    if not (os.path.isfile(args.binary) and os.access(args.binary, os.X_OK)):
        ap.error(f"--binary {args.binary}: not an executable file (build it: "
                 f"{BUILD_HINT.get(be, 'make cpu')})")
    if args.membw and not os.access(args.membw, os.X_OK):
        ap.error(f"--membw {args.membw}: not an executable file "
                 f"({MEMBW_PROBE.get(be, ('', 'make build/kipp-membw'))[1]})")
    if args.output:
        d = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(d):
            ap.error(f"--output {args.output}: directory {d} does not exist")


class Kipp:
    """Runs the kipp CLI for one benchmark configuration."""

    def __init__(self, args, manifest: dict):
        self.a = args
        self.manifest = manifest
        self.prompt_args = (["--prompt", args.prompt] if args.prompt is not None
                            else ["--prompt-tokens", str(args.prompt_tokens)])
        self.ids = self._tokenize()
        self.kv_type_used = None  # the KV type kipp reported (--stats-json kv_type)
        self.n_prompt = len(self.ids)
        n_train = int(manifest["shape"].get("context_length") or 0)
        need = self.n_prompt + args.decode + 1
        if args.ctx_size:
            self.n_ctx = args.ctx_size
        else:
            self.n_ctx = (need + 255) // 256 * 256
            if n_train:
                self.n_ctx = min(self.n_ctx, n_train)
        if self.n_ctx < need:
            raise BenchError(f"prompt ({self.n_prompt} tokens) + decode ({args.decode}) + 1 needs "
                             f"a context of {need}; the context is {self.n_ctx} (model's trained "
                             f"context {n_train}): shorten the prompt or the decode")

    def _tokenize(self) -> list[int]:
        r = benchlib.run_measured([self.a.binary, "-m", self.a.model, "--tokenize", *self.prompt_args],
                                  timeout=self.a.timeout)
        if r["rc"] != 0:
            raise BenchError(f"{self.a.binary} --tokenize failed (exit {r['rc']}): {r['stderr'].strip()}")
        try:
            ids = [int(x) for x in r["stdout"].split()]
        except ValueError:
            raise BenchError(f"{self.a.binary} --tokenize printed something else than ids")
        if not ids:
            raise BenchError("the prompt encodes to zero tokens")
        if self.a.prompt_tokens is not None:
            want = synthetic_ids(self.a.prompt_tokens, self.manifest["n_vocab"] or 151936)
            if ids != want:
                raise BenchError("kipp --prompt-tokens ids differ from tools/bench.py synthetic_ids(); "
                                 "update one to match the other")
        return ids

    def command(self, stats_path: str) -> list[str]:
        a = self.a
        kv = ["--kv-type", a.kv_type] if getattr(a, "kv_type", None) else []
        return [a.binary, "-m", a.model, "--backend", a.backend, "-t", str(a.threads),
                "-c", str(self.n_ctx), *kv, *self.prompt_args, "-n", str(a.decode + 1),
                "--temp", "0", "--ignore-eos", "--stats-json", stats_path]

    def run_once(self) -> dict:
        fd, stats_path = tempfile.mkstemp(prefix="kipp-stats-", suffix=".json")
        os.close(fd)
        try:
            r = benchlib.run_measured(self.command(stats_path), timeout=self.a.timeout)
            if r["rc"] != 0:
                raise BenchError(f"kipp run failed (exit {r['rc']}): {r['stderr'].strip()[-2000:]}")
            with open(stats_path) as f:
                s = json.load(f)
        finally:
            if os.path.exists(stats_path):
                os.unlink(stats_path)
        if s["prefill"]["tokens"] != self.n_prompt or s["decode"]["tokens"] != self.a.decode:
            raise BenchError(f"kipp ran {s['prefill']['tokens']} prefill / {s['decode']['tokens']} "
                             f"decode tokens, expected {self.n_prompt} / {self.a.decode} (stop: {s['stop']})")
        want_kv = getattr(self.a, "kv_type", None)
        if want_kv and s.get("kv_type") != want_kv:
            raise BenchError(f"kipp ran with KV type {s.get('kv_type')}, asked for {want_kv}")
        if self.kv_type_used not in (None, s.get("kv_type")):
            raise BenchError(f"kipp's KV type changed between runs: {self.kv_type_used}, {s.get('kv_type')}")
        self.kv_type_used = s.get("kv_type")
        wbytes = self.manifest["weight_bytes_read_per_decoded_token"]
        return {
            "prefill_tokens": s["prefill"]["tokens"], "prefill_ms": s["prefill"]["ms"],
            "prefill_tok_s": s["prefill"]["tok_s"],
            "decode_tokens": s["decode"]["tokens"], "decode_ms": s["decode"]["ms"],
            "decode_tok_s": s["decode"]["tok_s"],
            "decode_effective_gbps": wbytes * s["decode"]["tok_s"] / 1e9,
            "peak_rss_bytes": r["peak_rss_bytes"], "wall_s": r["wall_s"],
            "kv": s["kv"], "kv_type": s.get("kv_type"), "isa": s.get("isa"),
            "threads": s["threads"], "n_ctx": s["n_ctx"],
        }


def membw_command(args) -> list[str]:
    """The bandwidth probe's command line: the host's kipp-membw with --threads for CPU
    backends; the GPU's kipp-cuda-membw (device 0, >= 1 GiB by default) for cuda."""
    be = backend_of(args)
    name = MEMBW_PROBE.get(be, ("kipp-membw",))[0]
    path = args.membw or os.path.join(os.path.dirname(args.binary), name)
    if be == "cuda":
        return [path, "--runs", "5"]
    return [path, "--threads", str(args.threads), "--runs", "5"]


def parse_membw(stdout: str, backend: str) -> dict:
    """The probe's JSON line; kind says whose memory it measured (host or device)."""
    out = json.loads(stdout.strip().splitlines()[-1])
    if not isinstance(out, dict) or not isinstance(out.get("best_gbps"), (int, float)):
        raise ValueError("no best_gbps in the probe's output")
    out["kind"] = "device" if backend == "cuda" else "host"
    return out


def measure_membw(args) -> dict | None:
    if args.no_membw:
        return None
    cmd = membw_command(args)
    path, be = cmd[0], backend_of(args)
    if not os.access(path, os.X_OK):
        return {"skipped": f"{path} not built ({MEMBW_PROBE.get(be, ('', 'make build/kipp-membw'))[1]})"}
    r = benchlib.run_measured(cmd, timeout=600)
    if r["rc"] != 0:
        return {"skipped": f"{path} failed: {r['stderr'].strip()}"}
    try:
        out = parse_membw(r["stdout"], be)
    except (ValueError, IndexError) as e:
        return {"skipped": f"{path} printed no bandwidth record: {e}"}
    out["binary"] = {"path": path, "sha256": benchlib.sha256_file(path)}
    return out


def summarize(runs: list[dict], keys=("prefill_tok_s", "decode_tok_s", "prefill_ms", "decode_ms",
                                      "decode_effective_gbps", "peak_rss_bytes")) -> dict:
    out = {}
    for k in keys:
        vals = [r[k] for r in runs if r.get(k) is not None]
        if vals:
            out[k] = {"runs": vals, **benchlib.summary(vals)}
    return out


def kipp_section(kipp: Kipp, warm: list[dict], runs: list[dict], manifest: dict,
                 membw: dict | None) -> dict:
    summ = summarize(runs)
    disp = {k: benchlib.dispersion([r[k] for r in runs]) for k in ("prefill_tok_s", "decode_tok_s")}
    kv_total = runs[0]["kv"]["bytes_total"]
    rss_med = summ["peak_rss_bytes"]["median"]
    sec = {
        "command": kipp.command("STATS.json"),
        "warmup_runs": warm,
        "runs": runs,
        "summary": summ,
        "dispersion": disp,
        "memory": {
            "peak_rss_bytes_median": rss_med,
            "peak_rss_bytes_max": summ["peak_rss_bytes"]["max"],
            "model_file_bytes": manifest["file_bytes"],
            "kv_pool_bytes": kv_total,
            "kv_bytes_per_token": runs[0]["kv"]["bytes_per_token"],
            "rss_over_file_plus_kv": rss_med / (manifest["file_bytes"] + kv_total),
        },
    }
    if membw and membw.get("best_gbps"):
        # the host's read bandwidth for CPU backends, the GPU's (kipp-cuda-membw) for cuda
        sec["decode_effective_gbps_over_membw"] = (summ["decode_effective_gbps"]["median"]
                                                   / membw["best_gbps"])
        sec["membw_kind"] = membw.get("kind", "host")
    return sec


def base_record(args, argv: list[str], kipp: Kipp, manifest: dict, membw) -> dict:
    be = backend_of(args)
    prov = benchlib.provenance(args.binary, backend=be)
    rec = {
        "benchmark": "prefill and decode speed",
        "harness": os.path.relpath(os.path.abspath(sys.argv[0]), ROOT),
        "argv": argv,
        "provenance": prov,
        "build": benchlib.build_info(args.binary, backend=be),
        "model": manifest,
        "settings": {
            "backend": args.backend, "threads": args.threads, "n_ctx": kipp.n_ctx,
            # --kv-type as asked (null: not passed, the backend's default) and as run
            "kv_type": getattr(args, "kv_type", None), "kv_type_used": kipp.kv_type_used,
            "prompt": ({"kind": "text", "text": args.prompt} if args.prompt is not None
                       else {"kind": "synthetic", "n": args.prompt_tokens}),
            "prompt_tokens": kipp.n_prompt, "prompt_ids_sha256": ids_sha256(kipp.ids),
            "decode_steps": args.decode, "warmup": args.warmup, "runs": args.runs,
            "sampling": "greedy, --ignore-eos", "process_per_run": True,
        },
        "memory_bandwidth": membw,
        # 1/5/15-minute load averages before the first run and after the last: an idle
        # machine is part of the protocol, and busy-waiting thread pools suffer most from load
        "load_average": {"before": getattr(args, "load_before", None),
                         "after": list(os.getloadavg())},
        "dispersion_limit": benchlib.DISPERSION_LIMIT,
    }
    if be == "cuda":
        rec["gpu_state"] = {"before": getattr(args, "gpu_before", None),
                            "after": benchlib.gpu_state()}
        if getattr(args, "gpu_idle", None) is not None:
            rec["idle_check"] = args.gpu_idle
            rec["machine_busy"] = args.gpu_idle["busy"]
    return rec


def finish(rec: dict, dispersions: list[float], args) -> int:
    """Marks the record noisy or not; writes it unless it is noisy and not allowed."""
    worst = max(dispersions)
    rec["noisy"] = worst > benchlib.DISPERSION_LIMIT
    rec["allow_noisy"] = bool(args.allow_noisy)
    text = json.dumps(rec, indent=2) + "\n"
    if not args.output:
        sys.stdout.write(text)
        return 0
    if rec["noisy"] and not args.allow_noisy:
        print(f"bench: dispersion {worst:.1%} exceeds the protocol's limit of "
              f"{benchlib.DISPERSION_LIMIT:.0%}: the machine was too noisy; {args.output} NOT "
              f"written. Rerun on an idle machine, or pass --allow-noisy (the record is then "
              f"marked noisy; see bench/README.md).", file=sys.stderr)
        return EXIT_NOISY
    benchlib.write_record_file(args.output, text)
    print(f"bench: record written to {args.output}", file=sys.stderr)
    return 0


def describe(name: str, summ: dict) -> str:
    p, d = summ["prefill_tok_s"], summ["decode_tok_s"]
    s = (f"{name}: prefill {p['median']:.1f} tok/s ({p['min']:.1f}-{p['max']:.1f}), "
         f"decode {d['median']:.2f} tok/s ({d['min']:.2f}-{d['max']:.2f})")
    if "decode_effective_gbps" in summ:
        s += f", {summ['decode_effective_gbps']['median']:.2f} GB/s effective"
    if "peak_rss_bytes" in summ:
        s += f", peak RSS {summ['peak_rss_bytes']['median'] / 2**20:.0f} MiB"
    return s


def describe_membw(sec: dict, membw: dict | None) -> str | None:
    """Decode's effective GB/s against the probe's, e.g. for the GPU: "... of the device's"."""
    if not membw or "decode_effective_gbps_over_membw" not in sec:
        return None
    whose = "the GPU's" if membw.get("kind") == "device" else "the host's"
    return (f"decode reads weights at {sec['decode_effective_gbps_over_membw']:.1%} of "
            f"{whose} measured read bandwidth ({membw['best_gbps']:.1f} GB/s)")


def gpu_preflight(args, who: str = "bench") -> None:
    """For --backend cuda: the GPU's state before the runs (args.gpu_before) and the GPU
    idle rule's outcome (args.gpu_idle); warns when nvidia-smi sees no GPU or a busy one."""
    args.gpu_before = benchlib.gpu_state()
    if args.gpu_before is None:
        print(f"{who}: warning: nvidia-smi reports no GPU (the record's gpu fields stay empty)",
              file=sys.stderr)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    args.gpu_idle = benchlib.sample_gpu_idle(usable, getattr(args, "allow_busy", False))
    if args.gpu_idle["busy"]:
        print(f"{who}: warning: " + gpu_busy_text(args.gpu_idle), file=sys.stderr)


def gpu_busy_text(d: dict) -> str:
    parts = []
    if d["host_busy"]:
        parts.append(f"1-minute load average {d['load_1min']:.2f} > {d['threshold']:.2f} "
                     f"(no host core left for the launching thread)")
    if d["gpu_other_processes"]:
        parts.append("other processes on the GPU: " + ", ".join(
            f"{a.get('pid')} {a.get('process_name')}" for a in d["gpu_other_processes"]))
    if d["gpu_utilization_median"] is not None and d["gpu_utilization_median"] > d["gpu_util_limit"]:
        parts.append(f"GPU utilization {d['gpu_utilization_median']:g} % > "
                     f"{d['gpu_util_limit']:g} % before the runs")
    return "the GPU run's machine is not idle: " + "; ".join(parts)


def prepare(ap, args) -> tuple[Kipp, dict, dict | None]:
    check_paths(ap, args)
    args.load_before = list(os.getloadavg())
    if backend_of(args) == "cuda":
        if getattr(args, "gpu_idle", None) is None:  # peer_bench decided before (refusing)
            gpu_preflight(args)
        else:
            args.gpu_before = benchlib.gpu_state()
    elif args.load_before[0] > 0.5:
        print(f"bench: warning: 1-minute load average {args.load_before[0]:.2f} before the runs: "
              f"the machine is not idle (recorded in load_average)", file=sys.stderr)
    manifest = benchlib.model_manifest(args.model, hash_file=not args.no_hash)
    kipp = Kipp(args, manifest)
    membw = measure_membw(args)
    return kipp, manifest, membw


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        kipp, manifest, membw = prepare(ap, args)
        warm = [kipp.run_once() for _ in range(args.warmup)]
        runs = []
        for i in range(args.runs):
            runs.append(kipp.run_once())
            print(f"bench: run {i + 1}/{args.runs}: prefill {runs[-1]['prefill_tok_s']:.1f} tok/s, "
                  f"decode {runs[-1]['decode_tok_s']:.2f} tok/s", file=sys.stderr)
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return EXIT_RUN
    rec = base_record(args, argv, kipp, manifest, membw)
    rec["kipp"] = kipp_section(kipp, warm, runs, manifest, membw)
    print("bench: " + describe("kipp", rec["kipp"]["summary"]), file=sys.stderr)
    bw = describe_membw(rec["kipp"], membw)
    if bw:
        print("bench: " + bw, file=sys.stderr)
    return finish(rec, list(rec["kipp"]["dispersion"].values()), args)


if __name__ == "__main__":
    sys.exit(main())
