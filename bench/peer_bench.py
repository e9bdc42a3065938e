#!/usr/bin/env python3
"""peer_bench.py — Kipp against llama.cpp on the same GGUF, threads, prompt and decode
length, in one invocation: warm-up, then runs interleaved Kipp, llama.cpp, Kipp, ...; writes
one JSON record with both sides and the ratios (Kipp / llama.cpp, prefill and decode tok/s,
median and worst case = Kipp's slowest run over llama.cpp's fastest). Protocol:
bench/README.md.

Kipp runs exactly as in tools/bench.py (imported: one `kipp` process per run). llama.cpp is
llama-cpp-python (pinned in tools/requirements-bench.txt, built from source with
GGML_NATIVE), run in its own worker process per run (this file with --llama-worker) so its
peak RSS is its own and nothing is shared with the harness. The worker uses the low-level
API: the model is mmapped (as Kipp does), n_threads = n_threads_batch = --threads,
n_batch = n_ubatch = the prompt length, the same n_ctx as Kipp; the whole prompt is one
llama_decode call (timed), then --decode single-token llama_decode calls with greedy argmax
(timed together). The prompt ids are Kipp's own (`kipp --tokenize`, with --prompt-tokens the
synthetic ids), handed to the worker, so both sides see identical ids; the record has their
sha256 from both sides.

  .venv/bin/python -m bench.peer_bench --model M --prompt-tokens 512 --decode 64 \\
      --threads 2 --warmup 1 --runs 5 --output bench/results/peer-X.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench import benchlib
from tools import bench as kbench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the llama.cpp worker (runs in its own process) --------------------------------------

# substrings of llama.cpp log lines the worker keeps (with describe): the flash-attention
# setting and what "auto" resolved to, and the KV cache's size and K/V types
LOG_NOTES = ("flash_attn", "Flash Attention", "llama_kv_cache: size")


def worker_main(spec_json: str) -> int:
    """One llama.cpp run described by spec (JSON): prints one JSON object on stdout."""
    import ctypes

    import numpy as np
    import llama_cpp as L

    spec = json.loads(spec_json)
    # llama.cpp's log lines that say what it resolved (flash attention "auto" -> enabled or
    # not, the KV cache's types): kept for the record even when the log is silenced
    notes = []

    def keep(text: bytes) -> None:
        line = text.decode("utf-8", "replace").strip()
        if any(k in line for k in LOG_NOTES) and line not in notes:
            notes.append(line)

    if not spec.get("verbose"):
        @L.llama_log_callback
        def _quiet(level, text, user_data):  # noqa: ARG001
            keep(text)
        L.llama_log_set(_quiet, ctypes.c_void_p(0))
        worker_main._keep = _quiet  # keep the callback alive
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_mmap = True
    mp.use_mlock = False
    t0 = time.perf_counter()
    model = L.llama_model_load_from_file(spec["model"].encode(), mp)
    if not model:
        print(json.dumps({"error": f"llama.cpp could not load {spec['model']}"}))
        return 1
    ids = spec["ids"]
    n = len(ids)
    cp = L.llama_context_default_params()
    cp.n_ctx = spec["n_ctx"]
    cp.n_batch = n
    cp.n_ubatch = n
    cp.n_seq_max = 1
    cp.n_threads = spec["threads"]
    cp.n_threads_batch = spec["threads"]
    cp.no_perf = False
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        print(json.dumps({"error": "llama.cpp could not create a context"}))
        return 1
    t_load = time.perf_counter() - t0
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    if max(ids) >= n_vocab:
        print(json.dumps({"error": f"prompt id {max(ids)} >= llama.cpp's n_vocab {n_vocab}"}))
        return 1

    tokenize_equal = None
    if spec.get("text") is not None:  # informational: llama.cpp's own tokenization
        raw = spec["text"].encode()
        buf = (L.llama_token * (len(raw) + 16))()
        k = L.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, True)
        tokenize_equal = k >= 0 and list(buf[:k]) == ids

    arr = (L.llama_token * n)(*ids)
    t0 = time.perf_counter()
    rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, n))
    t_prefill = time.perf_counter() - t0
    if rc != 0:
        print(json.dumps({"error": f"llama_decode(prompt) returned {rc}"}))
        return 1

    def argmax() -> int:
        p = L.llama_get_logits_ith(ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(p, shape=(n_vocab,))))

    out_ids = []
    one = (L.llama_token * 1)()
    t0 = time.perf_counter()
    for _ in range(spec["decode"]):
        one[0] = argmax()
        out_ids.append(one[0])
        rc = L.llama_decode(ctx, L.llama_batch_get_one(one, 1))
        if rc != 0:
            print(json.dumps({"error": f"llama_decode(token) returned {rc}"}))
            return 1
    t_decode = time.perf_counter() - t0

    perf = L.llama_perf_context(ctx)
    res = {
        "prefill_tokens": n, "prefill_ms": t_prefill * 1e3, "prefill_tok_s": n / t_prefill,
        "decode_tokens": spec["decode"], "decode_ms": t_decode * 1e3,
        "decode_tok_s": spec["decode"] / t_decode,
        "load_s": t_load, "n_vocab": n_vocab, "n_ctx": L.llama_n_ctx(ctx),
        "ids_sha256": kbench.ids_sha256(ids), "llama_tokenize_equal": tokenize_equal,
        "first_generated_ids": out_ids[:8],
        "llama_perf": {"t_p_eval_ms": perf.t_p_eval_ms, "n_p_eval": perf.n_p_eval,
                       "t_eval_ms": perf.t_eval_ms, "n_eval": perf.n_eval},
    }
    if spec.get("describe"):
        res["llama_cpp_python"] = L.__version__
        res["system_info"] = L.llama_print_system_info().decode("utf-8", "replace").strip()
        res["flash_attn_type"] = cp.flash_attn_type
        res["type_k"], res["type_v"] = cp.type_k, cp.type_v
        res["log_notes"] = notes
        res["model_n_params"] = L.llama_model_n_params(model)
        res["model_size_bytes"] = L.llama_model_size(model)
        desc = ctypes.create_string_buffer(256)
        L.llama_model_desc(model, desc, 256)
        res["model_desc"] = desc.value.decode("utf-8", "replace")
        res["ggml"] = ggml_build_info(L)
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(json.dumps(res))
    return 0


def ggml_build_info(L) -> dict:
    """ggml's version and commit as compiled into the package's libggml (when exported)."""
    import ctypes
    import glob
    info = {}
    paths = []
    try:  # the libraries this process actually loaded
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "libggml" in ln and ln.rstrip().endswith(tuple("0123456789o"))})
    except OSError:
        pass
    libdir = os.path.join(os.path.dirname(L.__file__), "lib")
    paths += sorted(glob.glob(os.path.join(libdir, "libggml-base.*")))
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym in ("ggml_version", "ggml_commit"):
            fn = getattr(lib, sym, None)
            if fn is not None and sym not in info:
                fn.restype = ctypes.c_char_p
                info[sym] = fn().decode()
    return info


# ---- the harness -----------------------------------------------------------------------

def llama_python(args) -> str:
    """An interpreter that can import llama_cpp: --python, this one, or the project's .venv."""
    cands = [args.python] if args.python else [sys.executable, os.path.join(ROOT, ".venv/bin/python")]
    for py in cands:
        if py and os.access(py, os.X_OK):
            r = subprocess.run([py, "-c", "import llama_cpp"], capture_output=True)
            if r.returncode == 0:
                return py
    raise kbench.BenchError(
        "llama_cpp is not importable (tried " + ", ".join(c for c in cands if c) + "): install "
        "it with  CMAKE_ARGS=\"-DGGML_NATIVE=ON\" .venv/bin/pip install -r tools/requirements-bench.txt")


class Llama:
    def __init__(self, args, kipp: kbench.Kipp, python: str, env: dict | None = None):
        """env: extra environment variables for the worker (e.g. OMP_WAIT_POLICY)."""
        self.a, self.kipp, self.py = args, kipp, python
        self.env = dict(env or {})

    def run_once(self, describe: bool = False) -> dict:
        spec = {"model": os.path.abspath(self.a.model), "ids": self.kipp.ids,
                "n_ctx": self.kipp.n_ctx, "threads": self.a.threads, "decode": self.a.decode,
                "text": self.a.prompt, "describe": describe}
        r = benchlib.run_measured([self.py, "-m", "bench.peer_bench", "--llama-worker",
                                   json.dumps(spec)], timeout=self.a.timeout, cwd=ROOT,
                                  env={**os.environ, **self.env} if self.env else None)
        try:
            res = json.loads(r["stdout"].strip().splitlines()[-1])
        except (ValueError, IndexError):
            res = {"error": f"no result (exit {r['rc']}): {r['stderr'].strip()[-2000:]}"}
        if r["rc"] != 0 or "error" in res:
            raise kbench.BenchError(f"llama.cpp worker failed: {res.get('error')}")
        res["peak_rss_bytes"] = r["peak_rss_bytes"]
        res["wall_s"] = r["wall_s"]
        res["decode_effective_gbps"] = (self.kipp.manifest["weight_bytes_read_per_decoded_token"]
                                        * res["decode_tok_s"] / 1e9)
        return res


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/peer_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    kbench.add_common_args(ap)
    ap.add_argument("--python", metavar="PATH",
                    help="interpreter with llama_cpp for the worker (default: this one or .venv)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--llama-worker"]:
        return worker_main(argv[1])
    ap = build_parser()
    args = ap.parse_args(argv)
    kbench.check_paths(ap, args)  # usage errors first (exit 2), with or without llama_cpp
    try:
        py = llama_python(args)
        kipp, manifest, membw = kbench.prepare(ap, args)
        llama = Llama(args, kipp, py)
        info = llama.run_once(describe=True)  # also the first warm-up of llama.cpp
        if info["ids_sha256"] != kbench.ids_sha256(kipp.ids):
            raise kbench.BenchError("llama.cpp saw other prompt ids than Kipp")
        k_warm, l_warm = [], [info]
        for i in range(args.warmup):
            k_warm.append(kipp.run_once())
            if i:
                l_warm.append(llama.run_once())
        k_runs, l_runs = [], []
        for i in range(args.runs):
            k_runs.append(kipp.run_once())
            l_runs.append(llama.run_once())
            print(f"peer_bench: run {i + 1}/{args.runs}: kipp prefill {k_runs[-1]['prefill_tok_s']:.1f} "
                  f"decode {k_runs[-1]['decode_tok_s']:.2f} | llama.cpp prefill "
                  f"{l_runs[-1]['prefill_tok_s']:.1f} decode {l_runs[-1]['decode_tok_s']:.2f} tok/s",
                  file=sys.stderr)
    except kbench.BenchError as e:
        print(f"peer_bench: {e}", file=sys.stderr)
        return kbench.EXIT_RUN

    rec = kbench.base_record(args, argv, kipp, manifest, membw)
    rec["benchmark"] = "prefill and decode speed, Kipp vs llama.cpp"
    rec["settings"]["order"] = "warm-up, then kipp, llama.cpp, kipp, llama.cpp, ... (one process per run)"
    rec["kipp"] = kbench.kipp_section(kipp, k_warm, k_runs, manifest, membw)
    l_sum = kbench.summarize(l_runs)
    rec["peer"] = {
        "name": "llama.cpp (llama-cpp-python, low-level API)",
        "llama_cpp_python": info.get("llama_cpp_python"),
        "ggml": info.get("ggml"),
        "system_info": info.get("system_info"),
        "python": py,
        "settings": {"n_ctx": info["n_ctx"], "n_batch": kipp.n_prompt, "n_ubatch": kipp.n_prompt,
                     "n_threads": args.threads, "n_threads_batch": args.threads, "mmap": True,
                     "flash_attn_type": info.get("flash_attn_type"),
                     "type_k": info.get("type_k"), "type_v": info.get("type_v"),
                     "log_notes": info.get("log_notes"),
                     "sampling": "greedy argmax (numpy) between single-token llama_decode calls"},
        "model": {"n_params": info.get("model_n_params"), "size_bytes": info.get("model_size_bytes"),
                  "desc": info.get("model_desc")},
        "ids_sha256": info["ids_sha256"],
        "llama_tokenize_equal": info.get("llama_tokenize_equal"),
        "warmup_runs": l_warm,
        "runs": l_runs,
        "summary": l_sum,
        "dispersion": {k: benchlib.dispersion([r[k] for r in l_runs])
                       for k in ("prefill_tok_s", "decode_tok_s")},
    }
    k_sum = rec["kipp"]["summary"]
    rec["ratios_kipp_over_llama"] = {
        f"{k}_{kind}": val
        for k in ("prefill_tok_s", "decode_tok_s")
        for kind, val in (("median", k_sum[k]["median"] / l_sum[k]["median"]),
                          ("kipp_worst_over_llama_best", k_sum[k]["min"] / l_sum[k]["max"]))
    }
    rec["ratios_kipp_over_llama"]["peak_rss_median"] = (k_sum["peak_rss_bytes"]["median"]
                                                       / l_sum["peak_rss_bytes"]["median"])
    print("peer_bench: " + kbench.describe("kipp", k_sum), file=sys.stderr)
    print("peer_bench: " + kbench.describe("llama.cpp", l_sum), file=sys.stderr)
    r = rec["ratios_kipp_over_llama"]
    print(f"peer_bench: kipp/llama.cpp prefill {r['prefill_tok_s_median']:.3f}x "
          f"(worst {r['prefill_tok_s_kipp_worst_over_llama_best']:.3f}x), decode "
          f"{r['decode_tok_s_median']:.3f}x (worst {r['decode_tok_s_kipp_worst_over_llama_best']:.3f}x)",
          file=sys.stderr)
    return kbench.finish(rec, list(rec["kipp"]["dispersion"].values()), args)


if __name__ == "__main__":
    sys.exit(main())
