#!/usr/bin/env python3
"""kv_type_bench.py — decode speed of Kipp's cpu backend by KV-cache element type (f32, f16,
bf16) at several contexts, beside llama.cpp on the same GGUF, threads and prompt ids, in one
invocation; writes one JSON record (bench/results/kv-type-*.json). Protocol: bench/README.md.

For each context N (a synthetic prompt of N token ids, `kipp --prompt-tokens N`), every
configuration — `kipp --kv-type T` for each type, then llama.cpp — runs once per round, one
fresh process per run, rounds repeated (A B C D A B C D ...), so load drift hits all alike.
Decode tok/s is measured over the --decode single-token steps after the prefill, which run at
context N .. N + decode. Kipp runs through tools/bench.py's runner, llama.cpp through
bench/peer_bench.py's worker (its defaults: f16 KV, flash attention auto; the record keeps
what llama.cpp logged it resolved them to). One warm-up round (every configuration) before
the first context's measured rounds.

Per context the record has every run, min/median/max and dispersion for each configuration,
and ratios (median over median, and the worst case: the numerator's slowest run over the
denominator's fastest): each type over f32 and over llama.cpp, bf16 over f16. The target of
issue 12 (at --target-context: f16 >= 1.3x f32 and >= 1.3x llama.cpp) is stated with both.

  .venv/bin/python -m bench.kv_type_bench --threads 2 --output bench/results/kv-type-0.6b-q8_0.json
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/kv_type_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import os
import sys
import time

from bench import benchlib, peer_bench
from tools import bench as kbench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_MODEL = "models/random/qwen3-0.6b-q8_0.gguf"
# llama.cpp's worker environments tried by --peer-wait auto: its OpenMP build spins between
# graph computations by default, which is fastest on an idle machine and collapses when the
# cores are shared (several times slower than passive on the 2-core machine under load)
PEER_WAIT = {"default": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}}
TARGET_RATIO = 1.3  # issue 12: f16 KV decode over f32 KV and over llama.cpp, at 4096


def int_list(name: str):
    """argparse type: comma-separated integers >= 1, ascending, no repeats."""
    one = benchlib.positive(name)

    def conv(s: str) -> list[int]:
        vals = [one(x.strip()) for x in s.split(",")]
        if vals != sorted(set(vals)):
            raise argparse.ArgumentTypeError(f"{name} expects ascending distinct values, got '{s}'")
        return vals
    return conv


def kv_type_list(s: str) -> list[str]:
    vals = [x.strip() for x in s.split(",")]
    bad = [v for v in vals if v not in kbench.KV_TYPES]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"--kv-types expects a comma-separated subset of "
                                         f"{','.join(kbench.KV_TYPES)}, got '{s}'")
    if len(set(vals)) != len(vals):
        raise argparse.ArgumentTypeError(f"--kv-types lists a type twice: '{s}'")
    return vals


def runs_spec(s: str) -> dict | int:
    """--runs: N (every context) or CTX:N,CTX:N,... (each context listed)."""
    one = benchlib.positive("--runs")
    if ":" not in s:
        return one(s)
    out = {}
    for part in s.split(","):
        ctx, sep, n = part.partition(":")
        if not sep:
            raise argparse.ArgumentTypeError(f"--runs expects N or CTX:N,..., got '{s}'")
        out[benchlib.positive("--runs context")(ctx.strip())] = one(n.strip())
    return out


def build_parser() -> argparse.ArgumentParser:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap = argparse.ArgumentParser(prog="bench/kv_type_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"Qwen3 GGUF (default {DEFAULT_MODEL})")
    ap.add_argument("--contexts", type=int_list("--contexts"), default=[512, 2048, 4096],
                    metavar="N,N,...", help="prompt lengths in tokens (default 512,2048,4096)")
    ap.add_argument("--kv-types", type=kv_type_list, default=list(kbench.KV_TYPES),
                    metavar="T,T,...", help="kipp --kv-type values (default f32,f16,bf16)")
    ap.add_argument("--decode", metavar="N", type=benchlib.positive("--decode"), default=48,
                    help="decode steps after each prefill (default 48)")
    ap.add_argument("--runs", type=runs_spec, default={512: 5, 2048: 3, 4096: 3},
                    metavar="N|CTX:N,...",
                    help="measured rounds per context (default 512:5,2048:3,4096:3; a context "
                         "not listed gets 3)")
    ap.add_argument("--warmup", metavar="N", type=benchlib.positive("--warmup", 0), default=1,
                    help="warm-up rounds at the first context, not counted (default 1)")
    ap.add_argument("--threads", metavar="N", type=benchlib.positive("--threads"), default=usable,
                    help=f"threads, both engines (default: usable CPUs, here {usable})")
    ap.add_argument("--backend", default="cpu", help="kipp backend (default cpu)")
    ap.add_argument("--binary", default="build/kipp", help="kipp CLI (default build/kipp)")
    ap.add_argument("--no-peer", action="store_true", help="Kipp only (trials; no ratios to llama.cpp)")
    ap.add_argument("--peer-wait", choices=("auto", *PEER_WAIT), default="auto",
                    help="llama.cpp's OpenMP wait policy: its default (spinning), passive "
                         "(OMP_WAIT_POLICY=PASSIVE), or auto (default): the warm-up tries both "
                         "--peer-check-runs times, alternating, and the faster best decode wins")
    ap.add_argument("--peer-check-runs", metavar="N", type=benchlib.positive("--peer-check-runs"),
                    default=2, help="runs of each policy in the --peer-wait auto check (default 2)")
    ap.add_argument("--python", metavar="PATH",
                    help="interpreter with llama_cpp for the worker (default: this one or .venv)")
    ap.add_argument("--target-context", metavar="N", type=benchlib.positive("--target-context"),
                    default=4096, help="context the issue's target is stated at (default 4096)")
    kbench.add_record_args(ap)
    return ap


def check_args(ap: argparse.ArgumentParser, args) -> None:
    """Usage errors (exit 2) before anything runs."""
    if isinstance(args.runs, dict):
        extra = sorted(set(args.runs) - set(args.contexts))
        if extra:
            ap.error(f"--runs names context(s) {','.join(map(str, extra))} not in --contexts")
    if "f32" not in args.kv_types:
        ap.error("--kv-types must include f32 (the ratios are stated against it)")
    if args.peer_wait == "auto" and not args.no_peer and args.warmup < 1:
        ap.error("--peer-wait auto checks the policies in the warm-up: it needs --warmup >= 1")
    if args.target_context not in args.contexts:
        ap.error(f"--target-context {args.target_context} is not one of --contexts")
    kbench.check_paths(ap, argparse.Namespace(model=args.model, binary=args.binary, membw=None,
                                              output=args.output))


def runs_for(args, n: int) -> int:
    return args.runs if isinstance(args.runs, int) else args.runs.get(n, 3)


def ratio(num: dict, den: dict) -> dict:
    """num / den of decode tok/s summaries: median over median, and worst case (num's
    slowest run over den's fastest)."""
    return {"median": num["median"] / den["median"], "worst": num["min"] / den["max"]}


def context_ratios(kipp: dict, llama: dict | None) -> dict:
    dec = {t: sec["summary"]["decode_tok_s"] for t, sec in kipp.items()}
    out = {f"{t}_over_f32": ratio(dec[t], dec["f32"]) for t in dec if t != "f32"}
    if "bf16" in dec and "f16" in dec:
        out["bf16_over_f16"] = ratio(dec["bf16"], dec["f16"])
    if llama:
        for t in dec:
            out[f"kipp_{t}_over_llama"] = ratio(dec[t], llama["summary"]["decode_tok_s"])
    return out


def target_verdict(ratios: dict, n: int) -> dict:
    """Issue 12's target at context n: f16 >= 1.3x f32 and >= 1.3x llama.cpp."""
    out = {"context": n, "ratio": TARGET_RATIO,
           "statement": f"at context {n}, Kipp f16-KV decode >= {TARGET_RATIO}x Kipp f32-KV "
                        f"decode and >= {TARGET_RATIO}x llama.cpp (f16 KV)"}
    for name, key in (("f16_over_f32", "f16_over_f32"), ("f16_over_llama", "kipp_f16_over_llama")):
        r = ratios.get(key)
        out[name] = None if r is None else {**r, "met_median": r["median"] >= TARGET_RATIO,
                                            "met_worst": r["worst"] >= TARGET_RATIO}
    parts = [out["f16_over_f32"], out["f16_over_llama"]]
    out["met_median"] = all(p and p["met_median"] for p in parts)
    out["met_worst"] = all(p and p["met_worst"] for p in parts)
    return out


class Progress:
    def __init__(self):
        self.t0 = time.monotonic()

    def __call__(self, msg: str) -> None:
        el = time.monotonic() - self.t0
        print(f"kv_type_bench [{el // 60:.0f}:{el % 60:04.1f}, load {os.getloadavg()[0]:.2f}]: {msg}",
              file=sys.stderr, flush=True)


def check_peer_wait(args, kipp: kbench.Kipp, py: str, say) -> dict:
    """--peer-wait auto: llama.cpp under each OpenMP wait policy, alternating; the policy with
    the higher median decode tok/s is used for every llama.cpp run after it."""
    runs = {name: [] for name in PEER_WAIT}
    for i in range(args.peer_check_runs):
        for name, env in PEER_WAIT.items():
            r = peer_bench.Llama(kipp.a, kipp, py, env=env).run_once()
            runs[name].append(r)
            say(f"peer check {i + 1}/{args.peer_check_runs} at context {kipp.n_prompt}: llama.cpp "
                f"wait policy {name}: decode {r['decode_tok_s']:.2f} tok/s "
                f"(prefill {r['prefill_tok_s']:.1f} tok/s)")
    med = {name: benchlib.summary([r["decode_tok_s"] for r in rs])["median"]
           for name, rs in runs.items()}
    chosen = max(med, key=med.get)
    say(f"peer check: llama.cpp runs with wait policy {chosen} "
        + ", ".join(f"{k} {v:.2f}" for k, v in med.items()) + " decode tok/s median)")
    return {"context": kipp.n_prompt, "runs": runs, "decode_tok_s_median": med, "chosen": chosen,
            "rule": "the policy with the higher median decode tok/s"}


def run_context(args, n: int, manifest: dict, py: str | None, warmup: int, say,
                peer: dict) -> dict:
    """Every configuration at prompt length n: warm-up rounds, then measured rounds. peer:
    {"wait": policy or "auto", "check": None}; "auto" is resolved here (and peer updated)."""
    kipps = {}
    for t in args.kv_types:
        ns = argparse.Namespace(model=args.model, prompt=None, prompt_tokens=n, decode=args.decode,
                                timeout=args.timeout, threads=args.threads, backend=args.backend,
                                binary=args.binary, ctx_size=None, kv_type=t)
        kipps[t] = kbench.Kipp(ns, manifest)
    first = kipps[args.kv_types[0]]
    llama = None
    if py:
        if peer["wait"] == "auto":
            peer["check"] = check_peer_wait(args, first, py, say)
            peer["wait"] = peer["check"]["chosen"]
        llama = peer_bench.Llama(first.a, first, py, env=PEER_WAIT[peer["wait"]])
    configs = [(f"kipp {t}", k.run_once) for t, k in kipps.items()]
    info = None
    if llama:
        def run_llama():
            nonlocal info
            r = llama.run_once(describe=info is None)
            if info is None:
                info = r
                if r["ids_sha256"] != kbench.ids_sha256(first.ids):
                    raise kbench.BenchError("llama.cpp saw other prompt ids than Kipp")
            return r
        configs.append(("llama.cpp", run_llama))
    n_rounds = runs_for(args, n)
    warm = {name: [] for name, _ in configs}
    runs = {name: [] for name, _ in configs}
    loads = []
    for i in range(warmup + n_rounds):
        tag = f"warm-up {i + 1}/{warmup}" if i < warmup else f"round {i - warmup + 1}/{n_rounds}"
        loads.append({"round": tag, "load_average": list(os.getloadavg())})
        for name, fn in configs:
            r = fn()
            (warm if i < warmup else runs)[name].append(r)
            say(f"context {n} {tag}: {name} decode {r['decode_tok_s']:.2f} tok/s "
                f"(prefill {r['prefill_tok_s']:.1f} tok/s, {r['wall_s']:.0f} s)")
    kipp_secs = {t: kbench.kipp_section(k, warm[f"kipp {t}"], runs[f"kipp {t}"], manifest, None)
                 for t, k in kipps.items()}
    for t, sec in kipp_secs.items():
        sec["kv_type_used"] = kipps[t].kv_type_used
    out = {"prompt_tokens": n, "n_ctx": first.n_ctx,
           "prompt_ids_sha256": kbench.ids_sha256(first.ids),
           "decode_context": [n, n + args.decode], "rounds": n_rounds, "warmup_rounds": warmup,
           "load_average_per_round": loads, "kipp": kipp_secs, "llama": None}
    if llama:
        l_runs = runs["llama.cpp"]
        out["llama"] = {
            "ids_sha256": info["ids_sha256"], "n_ctx": info["n_ctx"],
            "flash_attn_type": info.get("flash_attn_type"),
            "type_k": info.get("type_k"), "type_v": info.get("type_v"),
            "log_notes": info.get("log_notes"),
            "warmup_runs": warm["llama.cpp"], "runs": l_runs,
            "summary": kbench.summarize(l_runs),
            "dispersion": {k: benchlib.dispersion([r[k] for r in l_runs])
                           for k in ("prefill_tok_s", "decode_tok_s")},
        }
        out["llama_describe"] = {k: info.get(k) for k in ("llama_cpp_python", "ggml", "system_info",
                                                          "model_n_params", "model_size_bytes",
                                                          "model_desc")}
    out["ratios_decode"] = context_ratios(kipp_secs, out["llama"])
    return out


def table(contexts: list[dict], types: list[str]) -> list[str]:
    """The printed summary: decode tok/s medians (min-max) and the ratios."""
    lines = []
    for c in contexts:
        cells = []
        for t in types:
            d = c["kipp"][t]["summary"]["decode_tok_s"]
            cells.append(f"{t} {d['median']:.2f} ({d['min']:.2f}-{d['max']:.2f})")
        if c["llama"]:
            d = c["llama"]["summary"]["decode_tok_s"]
            cells.append(f"llama.cpp {d['median']:.2f} ({d['min']:.2f}-{d['max']:.2f})")
        lines.append(f"context {c['prompt_tokens']}: decode tok/s " + ", ".join(cells))
        rs = ", ".join(f"{k} {v['median']:.3f}x (worst {v['worst']:.3f}x)"
                       for k, v in c["ratios_decode"].items())
        lines.append(f"context {c['prompt_tokens']}: {rs}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = build_parser()
    args = ap.parse_args(argv)
    check_args(ap, args)
    say = Progress()
    load_before = list(os.getloadavg())
    if load_before[0] > 0.5:
        say(f"warning: 1-minute load average {load_before[0]:.2f} before the runs: the machine "
            f"is not idle (recorded in load_average)")
    try:
        py = None if args.no_peer else peer_bench.llama_python(args)
        manifest = benchlib.model_manifest(args.model, hash_file=not args.no_hash)
        peer = {"wait": args.peer_wait, "check": None}
        contexts = []
        for i, n in enumerate(args.contexts):
            contexts.append(run_context(args, n, manifest, py, args.warmup if i == 0 else 0, say,
                                        peer))
    except kbench.BenchError as e:
        print(f"kv_type_bench: {e}", file=sys.stderr)
        return kbench.EXIT_RUN

    target_ctx = next(c for c in contexts if c["prompt_tokens"] == args.target_context)
    desc = next((c.get("llama_describe") for c in contexts if c.get("llama_describe")), None) or {}
    for c in contexts:
        c.pop("llama_describe", None)
    rec = {
        "benchmark": "decode speed by KV cache type, Kipp cpu vs llama.cpp",
        "harness": os.path.relpath(os.path.abspath(__file__), ROOT),
        "argv": argv,
        "provenance": benchlib.provenance(args.binary),
        "build": benchlib.build_info(args.binary),
        "model": manifest,
        "settings": {
            "backend": args.backend, "threads": args.threads, "kv_types": args.kv_types,
            "contexts": args.contexts, "decode_steps": args.decode,
            "runs": {str(n): runs_for(args, n) for n in args.contexts},
            "warmup_rounds": args.warmup, "warmup_at": args.contexts[0],
            "prompt": "synthetic (kipp --prompt-tokens N), the same ids for both engines",
            "sampling": "greedy, --ignore-eos", "process_per_run": True,
            "order": "per context: warm-up (first context only), then rounds of "
                     + ", ".join([f"kipp --kv-type {t}" for t in args.kv_types]
                                 + ([] if args.no_peer else ["llama.cpp"])),
        },
        "peer": None if args.no_peer else {
            "name": "llama.cpp (llama-cpp-python, low-level API; bench/peer_bench.py's worker)",
            "python": py, **desc,
            "wait_policy": peer["wait"], "wait_policy_env": PEER_WAIT[peer["wait"]],
            "wait_policy_asked": args.peer_wait, "wait_policy_check": peer["check"],
            "settings": "llama.cpp's defaults for the KV cache (type_k = type_v = 1, GGML F16) "
                        "and flash attention (-1, auto; log_notes per context say what it "
                        "resolved to); n_batch = n_ubatch = prompt length, n_ctx = Kipp's, "
                        "mmap, n_threads = n_threads_batch = --threads",
        },
        # 1/5/15-minute load averages before the first run, before each round (per context)
        # and after the last: this 2-core machine is shared, see BENCHMARKS.md
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "dispersion_limit": benchlib.DISPERSION_LIMIT,
        "dispersion_gate": "Kipp's decode tok/s runs, every type and context",
        "contexts": contexts,
        "target": target_verdict(target_ctx["ratios_decode"], args.target_context),
    }
    summary = table(contexts, args.kv_types)
    t = rec["target"]
    summary.append(f"target ({t['statement']}): median {'met' if t['met_median'] else 'NOT met'}, "
                   f"worst case {'met' if t['met_worst'] else 'NOT met'}")
    rec["summary"] = summary
    for line in summary:
        print("kv_type_bench: " + line, file=sys.stderr)
    disp = [c["kipp"][k]["dispersion"]["decode_tok_s"] for c in contexts for k in args.kv_types]
    return kbench.finish(rec, disp, args)


if __name__ == "__main__":
    sys.exit(main())
