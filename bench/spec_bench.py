#!/usr/bin/env python3
"""spec_bench.py — speculative decoding's speed: Kipp with and without speculation on the same
model, prompt, threads and decode length, runs interleaved (plain, speculative, plain, ...),
one `kipp` process per run (--stats-json). Before timing, --gate checks exactness and
refuses to write a record if it fails: greedy = every speculative run's output is
byte-identical to the plain run's; sampling = `kipp_test --spec-stat` (the rejection rule's
chi-square gate) passes. The record (bench/results/spec-*.json) has tokens/s with and without
speculation, the speed-up, acceptance, mean tokens per target step, the draft's share of the
time and, with --llama-dir, llama.cpp's speculative example on the same pair of files.

  .venv/bin/python -m bench.spec_bench --model M --draft-model D --decode 256 --runs 3 \\
      --gate both --output bench/results/spec-kipp-tiny.json
  .venv/bin/python -m bench.spec_bench --model M --spec-ngram 3 --prompt-file P ...
  .venv/bin/python -m bench.spec_bench --model M --draft-model D --server-clients 8 --runs 3 ...

With --model alone (the seed's `python3 bench/spec_bench.py --model <gguf> --decode 256
--runs 3 --gate both`) the drafter is prompt lookup, --spec-ngram 3, on the built-in
code-editing prompt.

--server-clients N[,N...]: kipp-server (beside --binary) with and without the drafter (bench/server_bench.py:
every level in one server, N streaming clients, 4 requests of --server-max-tokens (64) each;
the prompt is --prompt/--prompt-file's text behind a per-request line, or 128 synthetic
token ids when neither is given), alternating; per level the ratio of aggregate throughputs,
so a list of levels shows where speculation stops paying as the batch grows.

--backend cuda: --binary defaults to build/kipp-cuda-generic and the server (--server-binary)
to build/kipp-server-cuda beside it; the record's provenance has the GPU (nvidia-smi) and
nvcc; with --llama-dir (llama.cpp's CUDA build, bench/peer_cuda.sh) llama.cpp runs every
layer of both models on the GPU (-ngl/-ngld 999). Client counts are any list, e.g.
--server-clients 1,8,32,64.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/spec_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import re
import statistics
import sys
import tempfile

from bench import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CODE_EDIT = """Repeat the function below exactly, but rename the variable total to acc.

def add_all(xs):
    total = 0
    for x in xs:
        if x is None:
            continue
        total += x
    return total
"""


def drafter_flags(a) -> list:
    """The drafter's flags, the same for kipp and kipp-server."""
    if a.draft_model:
        flags = ["-md", a.draft_model, "--draft-p-min", str(a.draft_p_min)]
        if a.draft_vocab:
            flags += ["--draft-vocab", str(a.draft_vocab)]
    else:
        flags = ["--spec-ngram", str(a.spec_ngram)]
    flags += ["--draft-max", str(a.draft_max)]
    if a.draft_fixed:
        flags.append("--draft-fixed")
    return flags


DEFAULT_BINARY = {"cuda": "build/kipp-cuda-generic"}
SERVER_BINARY = {"cuda": "kipp-server-cuda"}  # beside --binary; kipp-server otherwise


def resolve_binaries(a) -> None:
    """--binary and --server-binary defaults for --backend."""
    if a.binary is None:
        a.binary = os.path.join(ROOT, DEFAULT_BINARY.get(a.backend, "build/kipp"))
    if a.server_binary is None:
        a.server_binary = os.path.join(os.path.dirname(a.binary),
                                       SERVER_BINARY.get(a.backend, "kipp-server"))


def server_bench_command(a, kind: str, out: str, prompt_file: str | None) -> list:
    """One bench/server_bench.py run of server_ab: every level in one server of
    --server-binary, --parallel the largest level; kind "spec" adds the drafter's flags."""
    levels = a.server_levels
    cmd = [sys.executable, "-m", "bench.server_bench", "--model", a.model,
           "--binary", a.server_binary, "--threads", str(a.threads), "--backend", a.backend,
           "--concurrency", ",".join(map(str, levels)), "--parallel", str(max(levels)),
           "--requests-per-client", "4", "--max-tokens", str(a.server_max_tokens),
           "--runs", "1", "--output", out]
    if prompt_file:
        cmd += ["--prompt-file", prompt_file]
    if kind == "spec":
        cmd += [f"--server-arg={x}" for x in drafter_flags(a)]
    return cmd


def kipp_run(a, spec: bool, tmp: str) -> dict:
    stats = os.path.join(tmp, "stats.json")
    cmd = [a.binary, "-m", a.model, "--backend", a.backend, "-t", str(a.threads),
           "--greedy", "-n", str(a.decode), "--stats-json", stats, "-p", a.prompt_text]
    if a.ignore_eos:
        cmd.append("--ignore-eos")
    if spec:
        cmd += drafter_flags(a)
    r = benchlib.run_measured(cmd, timeout=1800)
    if r["rc"] != 0:
        sys.exit(f"spec_bench: {' '.join(cmd)} failed ({r['rc']}): {r['stderr'][-500:]}")
    with open(stats) as f:
        s = json.load(f)
    d = s["decode"]
    out = {"tok_s": d["tokens"] / (d["ms"] / 1e3) if d["ms"] > 0 else 0.0,
           "generated": d["generated"], "decode_ms": d["ms"], "text": r["stdout"]}
    if spec:
        sp = s["spec"]
        out.update({"steps": sp["steps"], "drafted": sp["drafted"], "accepted": sp["accepted"],
                    "acceptance": sp["acceptance"], "draft_ms": sp["draft_ms"],
                    "tokens_per_step": d["tokens"] / sp["steps"] if sp["steps"] else 0.0,
                    "draft_share": sp["draft_ms"] / d["ms"] if d["ms"] > 0 else 0.0})
    return out


LLAMA_SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) (?:seconds|s), speed:\s+([\d.]+) t/s")
LLAMA_EVAL = re.compile(r"(?<!prompt )\beval time =\s*([\d.]+) ms /\s*(\d+) runs")
LLAMA_COUNT = re.compile(r"\bn_(drafted|accept)\s+=\s*(\d+)\s*$", re.M)


def llama_run(a, spec: bool) -> dict:
    """llama.cpp built from the pinned llama-cpp-python sources (llama.cpp 0c1e57098):
    llama-speculative-simple (--spec-type draft-simple; at this commit the draft flags are
    --spec-draft-n-max/-n-min/-p-min) with speculation, llama-completion without (the
    speculative example has no plain mode). Greedy (--temp 0 --top-k 1), same prompt,
    tokens, threads and context as Kipp. Decode tokens/s: the example's "decoded N tokens
    in S seconds" (everything after the prompt); llama-completion's eval-time line."""
    t = str(a.llama_threads or a.threads)
    common = ["-m", a.model, "-p", a.prompt_text, "-n", str(a.decode), "-t", t, "-tb", t,
              "-c", "1024", "--temp", "0", "--top-k", "1", "--seed", "42"]
    if a.ignore_eos:
        common.append("--ignore-eos")
    if a.backend == "cuda":
        common += ["-ngl", "999"]  # every layer on the GPU (llama.cpp's CUDA build)
    if spec:
        cmd = [os.path.join(a.llama_dir, "llama-speculative-simple")] + common + [
            "-md", a.draft_model, "--spec-type", "draft-simple", "-td", t, "-tbd", t,
            "--spec-draft-n-max", str(a.llama_draft_max or a.draft_max), "--spec-draft-n-min", "0",
            "--spec-draft-p-min", str(a.draft_p_min)]
        if a.backend == "cuda":
            cmd += ["-ngld", "999"]
    else:
        cmd = [os.path.join(a.llama_dir, "llama-completion")] + common + ["-no-cnv"]
    r = benchlib.run_measured(cmd, timeout=3600)
    text = r["stdout"] + r["stderr"]
    out: dict = {"command": cmd[1:], "rc": r["rc"]}
    if spec:
        m = LLAMA_SPEED.findall(text)
        if r["rc"] != 0 or not m:
            return {**out, "error": text[-800:]}
        n, secs, speed = m[-1]
        out.update({"tok_s": float(speed), "tokens": int(n), "seconds": float(secs)})
        for k, v in LLAMA_COUNT.findall(text):
            out[k] = int(v)
        if out.get("drafted"):
            out["acceptance"] = out.get("accept", 0) / out["drafted"]
    else:
        m = LLAMA_EVAL.findall(text)
        if r["rc"] != 0 or not m:
            return {**out, "error": text[-800:]}
        ms, runs = m[-1]
        out.update({"tok_s": int(runs) / (float(ms) / 1e3), "tokens": int(runs) + 1,
                    "eval_ms": float(ms)})
    return out


def server_ab(a) -> dict:
    """kipp-server with and without the drafter (bench/server_bench.py: every level of
    --server-clients in one server, --runs rounds alternating plain, speculative, plain, ...);
    per level the aggregate decode tokens/s of each (the window where every client is busy),
    the ratio of the medians, and the speculative server's acceptance, drafted tokens and
    drafting time from /metrics. With --prompt-file/--prompt the clients send that text (one
    "Request N." line ahead of it each); otherwise server_bench's synthetic 128-token ids."""
    import subprocess
    levels = a.server_levels
    runs = {str(c): {"plain": [], "spec": []} for c in levels}
    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = None
        if a.prompt_text_given:
            prompt_file = os.path.join(tmp, "prompt.txt")
            with open(prompt_file, "w", encoding="utf-8") as f:
                f.write(a.prompt_text)
        for i in range(a.runs):
            for kind in ("plain", "spec"):
                out = os.path.join(tmp, f"{kind}{i}.json")
                cmd = server_bench_command(a, kind, out, prompt_file)
                p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
                if p.returncode != 0:
                    sys.exit(f"spec_bench: server_bench failed: {p.stderr[-800:]}")
                with open(out) as f:
                    rec = json.load(f)
                for c in levels:
                    lvl = rec["levels"][str(c)][0]
                    if not lvl.get("agg_decode_tps"):
                        sys.exit(f"spec_bench: server_bench level {c} has no throughput: {lvl.get('errors')}")
                    runs[str(c)][kind].append({
                        "agg_decode_tps": lvl["agg_decode_tps"], "itl_p50_s": lvl["itl_s"]["p50"],
                        "ttft_p50_s": lvl["ttft_s"]["p50"], "engine_steps": lvl["server"]["engine_steps"],
                        "generated_tokens": lvl["server"]["generated_tokens"],
                        "spec": lvl["server"].get("spec"), "load_average": rec.get("load_average")})
    out = {"clients": levels, "requests_per_client": 4, "max_tokens": a.server_max_tokens,
           "prompt": "text" if a.prompt_text_given else "synthetic 128 token ids", "levels": {}}
    for c in levels:
        r = runs[str(c)]
        med = {k: statistics.median(x["agg_decode_tps"] for x in v) for k, v in r.items()}
        sp = [x["spec"] for x in r["spec"] if x["spec"]]
        drafted = sum(x["drafted"] for x in sp)
        out["levels"][str(c)] = {
            "runs": r,
            "plain_agg_tok_s": benchlib.summary([x["agg_decode_tps"] for x in r["plain"]]),
            "spec_agg_tok_s": benchlib.summary([x["agg_decode_tps"] for x in r["spec"]]),
            "ratio_median": med["spec"] / med["plain"],
            "acceptance": sum(x["accepted"] for x in sp) / drafted if drafted else None,
            "drafted_per_generated": drafted / sum(x["generated_tokens"] for x in r["spec"]),
            "generated_per_engine_step": statistics.median(x["generated_tokens"] / x["engine_steps"]
                                                        for x in r["spec"] if x["engine_steps"])}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft-model")
    ap.add_argument("--spec-ngram", type=benchlib.positive("--spec-ngram"))
    ap.add_argument("--draft-max", type=benchlib.positive("--draft-max"), default=16)
    ap.add_argument("--draft-p-min", type=float, default=0.75)
    ap.add_argument("--draft-vocab", type=benchlib.positive("--draft-vocab"),
                    help="Kipp's draft head over token ids below N (llama.cpp has no such option)")
    ap.add_argument("--draft-fixed", action="store_true")
    ap.add_argument("--backend", default="cpu", help="kipp backend: cpu (default), cuda, ...")
    ap.add_argument("--binary", default=None,
                    help="kipp CLI (default build/kipp; build/kipp-cuda-generic for cuda)")
    ap.add_argument("--server-binary", default=None,
                    help="kipp-server for --server-clients (default: kipp-server beside "
                         "--binary; kipp-server-cuda for cuda)")
    ap.add_argument("--kipp-test", default=os.path.join(ROOT, "build/kipp_test"))
    ap.add_argument("--threads", type=benchlib.positive("--threads"), default=2)
    ap.add_argument("--decode", type=benchlib.positive("--decode"), default=256)
    ap.add_argument("--runs", type=benchlib.positive("--runs"), default=3)
    ap.add_argument("--prompt", default=None)
    ap.add_argument("--prompt-file")
    ap.add_argument("--ignore-eos", action="store_true", default=True)
    ap.add_argument("--gate", choices=["greedy", "sampling", "both", "none"], default="both")
    ap.add_argument("--llama-dir", help="llama.cpp binaries (llama-speculative-simple, llama-completion)")
    ap.add_argument("--llama-threads", type=int, help="llama.cpp's threads (default --threads)")
    ap.add_argument("--llama-draft-max", type=int, help="llama.cpp's --spec-draft-n-max (default --draft-max)")
    ap.add_argument("--server-clients", default=None,
                    help="instead: kipp-server with and without the drafter under N clients "
                         "(comma-separated levels: 1,2,4,8)")
    ap.add_argument("--server-max-tokens", type=benchlib.positive("--server-max-tokens"), default=64,
                    help="tokens per server request (default 64)")
    ap.add_argument("--output")
    a = ap.parse_args()
    if a.draft_model and a.spec_ngram:
        ap.error("give --draft-model FILE or --spec-ngram N, not both")
    if not a.draft_model and not a.spec_ngram:
        a.spec_ngram = 3  # the seed's form (--model only): prompt lookup, no second model
    a.prompt_text_given = bool(a.prompt_file) or a.prompt is not None
    if a.server_clients is not None:
        try:
            a.server_levels = [int(x) for x in a.server_clients.split(",") if x.strip()]
            assert a.server_levels and all(x >= 1 for x in a.server_levels)
        except (ValueError, AssertionError):
            ap.error(f"--server-clients expects comma-separated integers >= 1, got '{a.server_clients}'")
    resolve_binaries(a)
    need = [a.model] + ([a.draft_model] if a.draft_model else [])
    need.append(a.server_binary if a.server_clients is not None else a.binary)
    for p in need:
        if not os.path.exists(p):
            ap.error(f"{p}: no such file")
    if a.prompt_file:
        with open(a.prompt_file, encoding="utf-8") as f:
            a.prompt_text = f.read()
    else:
        a.prompt_text = a.prompt if a.prompt is not None else CODE_EDIT

    if a.server_clients:
        rec = {"bench": "spec_bench --server-clients",
               "provenance": benchlib.provenance(a.server_binary, backend=a.backend),
               "model": benchlib.model_manifest(a.model),
               "draft": benchlib.model_manifest(a.draft_model) if a.draft_model else {"ngram": a.spec_ngram},
               "config": {"backend": a.backend, "threads": a.threads, "draft_max": a.draft_max,
                          "draft_p_min": a.draft_p_min, "draft_fixed": a.draft_fixed,
                          "draft_vocab": a.draft_vocab, "runs": a.runs},
               "server": server_ab(a)}
        if a.output:
            benchlib.write_record_file(a.output, json.dumps(rec, indent=2))
        print(json.dumps({c: {k: v[k] for k in ("ratio_median", "acceptance", "generated_per_engine_step")}
                          for c, v in rec["server"]["levels"].items()}, indent=1))
        return 0
    gate = {}
    if a.gate in ("sampling", "both"):
        r = benchlib.run_measured([a.kipp_test, "--spec-stat"], timeout=600)
        gate["sampling"] = {"passed": r["rc"] == 0, "summary": r["stdout"].strip().splitlines()[-1:]}
        if r["rc"] != 0:
            sys.exit("spec_bench: the sampling exactness gate failed; no record written\n" + r["stdout"][-2000:])
    plain, spec = [], []
    with tempfile.TemporaryDirectory() as tmp:
        kipp_run(a, False, tmp)  # warm-up (page cache, CPU frequency)
        for _ in range(a.runs):
            plain.append(kipp_run(a, False, tmp))
            spec.append(kipp_run(a, True, tmp))
    if a.gate in ("greedy", "both"):
        same = all(s["text"] == plain[0]["text"] for s in spec + plain)
        gate["greedy"] = {"passed": same, "runs_compared": len(spec) + len(plain)}
        if not same:
            sys.exit("spec_bench: speculative greedy output differs from plain output; no record written")
    p_med = statistics.median(x["tok_s"] for x in plain)
    s_med = statistics.median(x["tok_s"] for x in spec)
    rec = {
        "bench": "spec_bench",
        "provenance": benchlib.provenance(a.binary, backend=a.backend),
        "build": benchlib.build_info(a.binary, backend=a.backend),
        "model": benchlib.model_manifest(a.model),
        "draft": benchlib.model_manifest(a.draft_model) if a.draft_model else {"ngram": a.spec_ngram},
        "config": {"backend": a.backend, "threads": a.threads, "decode": a.decode, "runs": a.runs,
                   "draft_max": a.draft_max, "draft_p_min": a.draft_p_min if a.draft_model else None,
                   "draft_fixed": a.draft_fixed, "draft_vocab": a.draft_vocab, "prompt": a.prompt_text,
                   "sampling": "greedy"},
        "gate": gate,
        "kipp": {
            "plain_tok_s": benchlib.summary([x["tok_s"] for x in plain]),
            "spec_tok_s": benchlib.summary([x["tok_s"] for x in spec]),
            "speedup_median": s_med / p_med if p_med else None,
            "acceptance": statistics.median(x["acceptance"] for x in spec),
            "tokens_per_step": statistics.median(x["tokens_per_step"] for x in spec),
            "draft_share": statistics.median(x["draft_share"] for x in spec),
            "runs": {"plain": [{k: v for k, v in x.items() if k != "text"} for x in plain],
                     "spec": [{k: v for k, v in x.items() if k != "text"} for x in spec]},
            "dispersion": {"plain": benchlib.dispersion([x["tok_s"] for x in plain]),
                           "spec": benchlib.dispersion([x["tok_s"] for x in spec])},
        },
    }
    if a.llama_dir and a.draft_model:
        lp = [llama_run(a, False) for _ in range(a.runs)]
        ls = [llama_run(a, True) for _ in range(a.runs)]
        ok_p = [x["tok_s"] for x in lp if "tok_s" in x]
        ok_s = [x["tok_s"] for x in ls if "tok_s" in x]
        rec["llama_cpp"] = {"plain": lp, "spec": ls, "commit": "0c1e57098 (llama-cpp-python 0.3.36)",
                            "threads": a.llama_threads or a.threads,
                            "speedup_median": (statistics.median(ok_s) / statistics.median(ok_p))
                            if ok_p and ok_s else None}
        if ok_s and ok_p:
            rec["ratios"] = {"kipp_spec_over_llama_spec": s_med / statistics.median(ok_s),
                             "kipp_plain_over_llama_plain": p_med / statistics.median(ok_p),
                             "kipp_speedup_over_llama_speedup":
                                 rec["kipp"]["speedup_median"] / rec["llama_cpp"]["speedup_median"]}
    text = json.dumps(rec, indent=2)
    if a.output:
        benchlib.write_record_file(a.output, text)
    print(json.dumps({"plain_tok_s": p_med, "spec_tok_s": s_med, "speedup": rec["kipp"]["speedup_median"],
                      "acceptance": rec["kipp"]["acceptance"],
                      "llama_speedup": rec.get("llama_cpp", {}).get("speedup_median")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
