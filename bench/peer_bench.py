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

Before any run it checks the machine and the peer: with --threads >= 2 it refuses (exit 4) a
machine whose 1-minute load average stays above the idle threshold (unless --allow-busy:
the record is then marked machine_busy); then one short 1-thread llama.cpp run (this file's
worker, its own process) must complete: a peer that dies by a signal (SIGILL in ggml's AMX
path on some VMs) gets no record (exit 1, with the rebuild command). The record's
peer.check holds that run's outcome and tok/s (sanity_1t) and the ISA features ggml was
built with against the CPU's flags. --skip-peer-check: no check run, the record is marked
unchecked.

  .venv/bin/python -m bench.peer_bench --model M --prompt-tokens 512 --decode 64 \\
      --threads 2 --warmup 1 --runs 5 --output bench/results/peer-X.json

--backend cuda (Kipp: build/kipp-cuda-generic; bandwidth: build/kipp-cuda-membw): the peer is
llama.cpp's CUDA build (bench/peer_cuda.sh builds the pinned llama-cpp-python with
GGML_CUDA=on into build/peer-cuda-venv, the default --python then) with every layer on the
GPU (n_gpu_layers = -1). The check run must show that it offloaded: GPU offload supported,
a CUDA section in system_info, "offloaded N/N layers to GPU", and CUDA buffers holding every
weight byte but the token-embedding table (which llama.cpp keeps on the host for its row
lookup); otherwise no record (exit 1). The record's peer.check.offload says what was found.
The idle rule is the GPU's (benchlib.gpu_idle_decision: one free host core, no other
process or utilization on the GPU), for any --threads.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/peer_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

from bench import benchlib
from tools import bench as kbench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the llama.cpp worker (runs in its own process) --------------------------------------

# substrings of llama.cpp log lines the worker keeps (with describe): the flash-attention
# setting and what "auto" resolved to, and the KV cache's size and K/V types
# and, for GPU runs, where the weights went (offload_report reads them)
LOG_NOTES = ("flash_attn", "Flash Attention", "llama_kv_cache: size", "layers to GPU",
             "model buffer size")


def worker_main(spec_json: str) -> int:
    """One llama.cpp run described by spec (JSON): prints one JSON object on stdout."""
    import ctypes

    import numpy as np
    import llama_cpp as L

    spec = json.loads(spec_json)

    def stage(name: str, **extra) -> None:
        """With spec["progress"]: one JSON line per stage reached, flushed at once, so a run
        that dies by a signal still says how far it got (peer_check_outcome reads them)."""
        if spec.get("progress"):
            print(json.dumps({"stage": name, **extra}), flush=True)

    stage("started", system_info=L.llama_print_system_info().decode("utf-8", "replace").strip())
    # llama.cpp's log lines that say what it resolved (flash attention "auto" -> enabled or
    # not, the KV cache's types): kept for the record even when the log is silenced
    notes = []

    def keep(text: bytes) -> None:
        line = text.decode("utf-8", "replace").strip()
        if any(k in line for k in LOG_NOTES) and line not in notes:
            notes.append(line)

    verbose = bool(spec.get("verbose"))

    @L.llama_log_callback
    def _log(level, text, user_data):  # noqa: ARG001
        keep(text)
        if verbose:
            sys.stderr.write(text.decode("utf-8", "replace"))
    L.llama_log_set(_log, ctypes.c_void_p(0))
    worker_main._keep = _log  # keep the callback alive
    L.llama_backend_init()
    stage("backend_ready")
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = int(spec.get("n_gpu_layers", 0))  # -1: every layer (cuda records)
    mp.use_mmap = True
    mp.use_mlock = False
    t0 = time.perf_counter()
    model = L.llama_model_load_from_file(spec["model"].encode(), mp)
    if not model:
        print(json.dumps({"error": f"llama.cpp could not load {spec['model']}"}))
        return 1
    stage("model_loaded")
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
    stage("context_ready")
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
    stage("prefill_done")

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
    stage("decode_done")

    perf = L.llama_perf_context(ctx)
    res = {
        "prefill_tokens": n, "prefill_ms": t_prefill * 1e3, "prefill_tok_s": n / t_prefill,
        "decode_tokens": spec["decode"], "decode_ms": t_decode * 1e3,
        "decode_tok_s": spec["decode"] / t_decode,
        "load_s": t_load, "n_vocab": n_vocab, "n_ctx": L.llama_n_ctx(ctx),
        "ids_sha256": kbench.ids_sha256(ids), "llama_tokenize_equal": tokenize_equal,
        "first_generated_ids": out_ids[:8], "n_gpu_layers": mp.n_gpu_layers,
        "llama_perf": {"t_p_eval_ms": perf.t_p_eval_ms, "n_p_eval": perf.n_p_eval,
                       "t_eval_ms": perf.t_eval_ms, "n_eval": perf.n_eval},
    }
    if mp.n_gpu_layers:
        res["offload"] = {"supports_gpu_offload": bool(L.llama_supports_gpu_offload()),
                          "log_notes": [n for n in notes if "GPU" in n or "buffer size" in n],
                          "model_size_bytes": L.llama_model_size(model)}
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


# ---- the peer check: pure logic (tests/tools/test_peer_check.py) -------------------------
#
# Before any record, peer_bench verifies its llama.cpp build (bench/README.md, "The peer
# check"): the ISA features ggml was built with against this CPU's flags, one short 1-thread
# llama.cpp run in its own process (a build that dies by a signal -- SIGILL in ggml's AMX
# path is a known crash of GGML_NATIVE builds on some VMs -- gets no record), that run's
# tok/s as a 1-thread sanity figure, and for 2+ threads an idle machine.

EXIT_BUSY = 4  # refused: the machine was not idle (exit 1: run failure, 2: usage, 3: noisy)

# the 1-thread check run: at most this many of the prompt's ids and decode steps
CHECK_PROMPT_TOKENS = 32
CHECK_DECODE = 16

# ggml's feature name (llama_print_system_info, CPU section) -> the /proc/cpuinfo flags it
# needs, per architecture. ggml lists only the features it was compiled with (a missing
# name is 0), and AMX_INT8 needs the AMX tile unit too.
GGML_ISA_FLAGS = {
    "x86_64": {
        "SSE3": ("pni",), "SSSE3": ("ssse3",), "AVX": ("avx",), "AVX2": ("avx2",),
        "F16C": ("f16c",), "FMA": ("fma",), "BMI2": ("bmi2",), "AVX_VNNI": ("avx_vnni",),
        "AVX512": ("avx512f",), "AVX512_VBMI": ("avx512vbmi",),
        "AVX512_VNNI": ("avx512_vnni",), "AVX512_BF16": ("avx512_bf16",),
        "AMX_INT8": ("amx_int8", "amx_tile"),
    },
    "aarch64": {
        "NEON": ("asimd",), "ARM_FMA": ("asimd",), "FP16_VA": ("asimdhp",),
        "DOTPROD": ("asimddp",), "MATMUL_INT8": ("i8mm",), "SVE": ("sve",), "SME": ("sme",),
        "SME2": ("sme2",),
    },
}
GGML_ISA_FLAGS["amd64"] = GGML_ISA_FLAGS["x86_64"]
GGML_ISA_FLAGS["arm64"] = GGML_ISA_FLAGS["aarch64"]
# CPU flags the record lists (with those above): AMX-BF16 is not a ggml feature of its own
CPU_FLAGS_RECORDED = ("amx_bf16", "avx512bw", "avx512vl", "avx512_fp16")

# what the worker does after each stage it reports (a crash names the step after the last)
NEXT_STEP = {
    None: "importing llama_cpp",
    "started": "llama_backend_init",
    "backend_ready": "loading the model",
    "model_loaded": "creating the context",
    "context_ready": "the prompt's llama_decode (first matrix products)",
    "prefill_done": "the single-token decode steps",
    "decode_done": "freeing the context and model",
}

# For --threads >= 2 the 1-minute load average must not exceed
#   IDLE_LOAD_BASE + IDLE_LOAD_PER_FREE_CPU * max(usable CPUs - threads, 0):
# a run that takes every CPU tolerates 0.5 of background load (a shell, a monitor; the old
# warning's level), and each CPU it leaves free admits another 0.5 -- other work may use at
# most half of those CPUs, since it still competes for memory bandwidth and shared caches.
# The 1-minute figure lags: after a previous 2-thread benchmark it needs ~85 s to fall from
# 2 to 0.5, hence --idle-wait.
IDLE_LOAD_BASE = 0.5
IDLE_LOAD_PER_FREE_CPU = 0.5
IDLE_POLL_S = 5.0


def parse_system_info(text: str, section: str = "CPU") -> dict:
    """llama_print_system_info()'s "CPU : SSE3 = 1 | AVX = 1 | ... |" -> {"SSE3": True, ...},
    the named backend's features only (other backends' entries, e.g. "CUDA : ARCHS = 890",
    are skipped; a string without section headers counts as CPU). Values that are not
    integers are skipped."""
    feats: dict = {}
    current = section
    for part in text.split("|"):
        head, sep, rest = part.partition(":")
        if sep and "=" not in head:  # "CPU : SSE3 = 1": a section header, then the entry
            current, part = head.strip(), rest
        key, eq, val = part.partition("=")
        key, val = key.strip(), val.strip()
        if not eq or not key or current != section:
            continue
        try:
            feats[key] = int(val) != 0
        except ValueError:
            continue
    return feats


def parse_cpu_flags(cpuinfo: str) -> set:
    """The first processor's ISA flags from /proc/cpuinfo text ("flags" on x86, "Features"
    on arm64)."""
    for line in cpuinfo.splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() in ("flags", "Features"):
            return set(v.split())
    return set()


def compare_isa(ggml: dict, cpu_flags: set, machine: str) -> dict:
    """What ggml was built with against what the CPU has. uses_missing: features ggml
    compiled in that the CPU lacks (its kernels may die with SIGILL); unused: features the
    CPU has that ggml was built without (a slower peer than the machine allows, e.g. a
    build without AVX512 on an AVX512 CPU)."""
    table = GGML_ISA_FLAGS.get(machine, {})
    uses_missing, unused = [], []
    for feat, flags in table.items():
        has = all(f in cpu_flags for f in flags)
        if ggml.get(feat) and not has:
            uses_missing.append(feat)
        elif has and not ggml.get(feat):
            unused.append(feat)
    wanted = {f for flags in table.values() for f in flags} | set(CPU_FLAGS_RECORDED)
    return {
        "machine": machine,
        "ggml_features": ggml,
        "cpu_flags": sorted(f for f in cpu_flags if f in wanted),
        "compared": list(table),
        "ggml_uses_cpu_lacks": uses_missing,
        "cpu_has_ggml_unused": unused,
    }


def rebuild_hint(cpu_flags: set) -> str:
    """The pip command that rebuilds the pinned llama-cpp-python without GGML_NATIVE and
    without AMX, for this CPU's widest vector set (AVX512 VNNI/BF16 only where the CPU has
    them: Skylake-X has neither). With GGML_NATIVE=OFF ggml's AVX/AVX2/FMA/F16C/BMI2 options
    default to ON; the AVX2 line spells them out, the baseline line turns them off."""
    if "avx512f" in cpu_flags:
        parts = ["-DGGML_NATIVE=OFF", "-DGGML_AVX512=ON"]
        parts += ["-DGGML_AVX512_VNNI=ON"] if "avx512_vnni" in cpu_flags else []
        parts += ["-DGGML_AVX512_BF16=ON"] if "avx512_bf16" in cpu_flags else []
    elif "avx2" in cpu_flags:
        parts = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
                 "-DGGML_F16C=ON", "-DGGML_AVX512=OFF"]
    else:
        parts = ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF", "-DGGML_F16C=OFF",
                 "-DGGML_BMI2=OFF", "-DGGML_AVX512=OFF"]
    parts += ["-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF"]
    return (f'CMAKE_ARGS="{" ".join(parts)}" .venv/bin/pip install --force-reinstall '
            f"--no-cache-dir --no-deps -r tools/requirements-bench.txt")


def peer_check_outcome(r: dict, timeout_s: float | None) -> dict:
    """The check run's outcome from benchlib.run_measured's result (rc, stdout, stderr,
    wall_s): whether the worker crashed (died by a signal: rc < 0, or 128 + signal from a
    wrapper shell), timed out (killed at timeout_s), or failed with an error of its own; the
    last stage it reported; the system_info of its first stage; its result on success."""
    import signal as _signal

    rc = r["rc"]
    stages, result = [], None
    for line in r["stdout"].splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "stage" in obj:
            stages.append(obj)
        elif isinstance(obj, dict):
            result = obj
    timed_out = bool(timeout_s) and rc == -9 and r["wall_s"] >= timeout_s
    sig = -rc if rc < 0 else (rc - 128 if 128 < rc < 128 + 65 else None)
    crashed = sig is not None and not timed_out
    try:
        sig_name = _signal.Signals(sig).name if sig else None
    except ValueError:
        sig_name = f"signal {sig}"
    last = stages[-1]["stage"] if stages else None
    error = None
    if timed_out:
        error = f"timed out after {timeout_s} s"
    elif crashed:
        error = f"died by {sig_name} during {NEXT_STEP.get(last, 'an unknown step')}"
    elif rc != 0 or result is None or "error" in result:
        error = (result or {}).get("error") or f"exit {rc} without a result"
    tail = r["stderr"].strip().splitlines()[-20:]
    return {
        "rc": rc, "crashed": crashed, "signal": sig_name if crashed else None,
        "timed_out": timed_out, "stage_reached": last,
        "system_info": next((s["system_info"] for s in stages if "system_info" in s), None),
        "error": error, "stderr_tail": "\n".join(tail)[-2000:],
        "wall_s": r["wall_s"], "result": None if error else result,
    }


def build_check(outcome: dict | None, cpu_flags: set, machine: str,
                system_info: str | None = None) -> dict:
    """peer.check: {checked, ok, crashed, isa, run, sanity_1t}. outcome None: the check run
    was skipped (--skip-peer-check; the ISA part then comes from system_info)."""
    sysinfo = outcome["system_info"] if outcome else system_info
    isa = compare_isa(parse_system_info(sysinfo), cpu_flags, machine) if sysinfo else None
    check = {"checked": outcome is not None, "isa": isa}
    if outcome is None:
        check.update(ok=None, crashed=None, run=None, sanity_1t=None,
                     note="--skip-peer-check: unchecked, a trial record (not committed)")
        return check
    res = outcome["result"]
    check["ok"] = outcome["error"] is None
    check["crashed"] = outcome["crashed"]
    check["run"] = {k: v for k, v in outcome.items() if k not in ("result", "system_info")}
    check["sanity_1t"] = None if res is None else {
        "threads": 1, "prompt_tokens": res["prefill_tokens"], "decode_tokens": res["decode_tokens"],
        "prefill_tok_s": res["prefill_tok_s"], "decode_tok_s": res["decode_tok_s"],
        "wall_s": outcome["wall_s"],
    }
    return check


def check_refusal(check: dict, cpu_flags: set) -> str | None:
    """Why no record may be written after this check (None: it may)."""
    if not check["checked"] or check["ok"]:
        return None
    run = check["run"]
    what = "crashed" if run["crashed"] else "failed"
    msg = f"the llama.cpp check run (1 thread) {what}: {run['error']} (exit {run['rc']}). "
    if run["crashed"]:
        isa = check.get("isa") or {}
        lacks = isa.get("ggml_uses_cpu_lacks")
        msg += ("This llama-cpp-python build does not run on this machine "
                + (f"(ggml uses {', '.join(lacks)}, which this CPU lacks)" if lacks else
                   "(a GGML_NATIVE build's AMX path dies with SIGILL on some VMs)")
                + ". Rebuild it without GGML_NATIVE:\n  " + rebuild_hint(cpu_flags) + "\n")
    msg += "No record is written."
    if run["stderr_tail"]:
        msg += " The worker's stderr ends:\n  " + run["stderr_tail"].replace("\n", "\n  ")
    return msg


# ---- the GPU peer's offload check (cuda records) ------------------------------------------

OFFLOAD_RE = re.compile(r"offloaded (-?\d+)/(\d+) layers to GPU")
BUFFER_RE = re.compile(r"(\S+) model buffer size =\s*([\d.]+) MiB")
GPU_BUFFER_RE = re.compile(r"^CUDA\d+$")  # CUDA_Host is pinned host memory, not the GPU's
# CUDA buffers must hold at least this share of the weight bytes not allowed on the host
OFFLOAD_MIN_SHARE = 0.99


def offload_report(offload: dict | None, system_info: str | None, host_allowed_bytes: int) -> dict:
    """What a GPU run of llama.cpp shows about where its weights went: the worker's offload
    block (supports_gpu_offload, log_notes, model_size_bytes), the CUDA section of
    llama_print_system_info(), and the bytes llama.cpp may keep on the host (the token-embedding
    table: its rows are gathered on the CPU). Pure: the refusal is offload_refusal's."""
    offload = offload or {}
    notes = offload.get("log_notes") or []
    rep = {"supports_gpu_offload": offload.get("supports_gpu_offload"),
           "cuda_system_info": parse_system_info(system_info or "", "CUDA") or None,
           "cuda_in_system_info": "CUDA" in (system_info or ""),
           "layers_offloaded": None, "layers_total": None, "buffers_mib": {},
           "gpu_buffer_bytes": 0, "model_size_bytes": offload.get("model_size_bytes"),
           "host_allowed_bytes": host_allowed_bytes, "log_notes": notes}
    for line in notes:
        m = OFFLOAD_RE.search(line)
        if m:
            rep["layers_offloaded"], rep["layers_total"] = int(m.group(1)), int(m.group(2))
        m = BUFFER_RE.search(line)
        if m:
            rep["buffers_mib"][m.group(1)] = float(m.group(2))
    rep["gpu_buffer_bytes"] = int(sum(mib for name, mib in rep["buffers_mib"].items()
                                      if GPU_BUFFER_RE.match(name)) * 2**20)
    size = rep["model_size_bytes"]
    rep["gpu_share_of_offloadable"] = (rep["gpu_buffer_bytes"] / (size - host_allowed_bytes)
                                       if size and size > host_allowed_bytes else None)
    return rep


def offload_refusal(rep: dict | None) -> str | None:
    """Why a cuda record may not use this peer (None: it may): a peer that did not put every
    layer on the GPU would make Kipp's GPU figures look better than they are."""
    if rep is None:
        return "the llama.cpp check run reported nothing about GPU offload"
    why = []
    if not rep["supports_gpu_offload"]:
        why.append("llama_supports_gpu_offload() is false (a CPU-only build)")
    if not rep["cuda_in_system_info"]:
        why.append("llama_print_system_info() has no CUDA section")
    n, m = rep["layers_offloaded"], rep["layers_total"]
    if n is None:
        why.append("no 'offloaded N/M layers to GPU' line in llama.cpp's log")
    elif not m or (n >= 0 and n < m):  # -1: "all", as asked, when llama.cpp echoes it
        why.append(f"llama.cpp offloaded {n}/{m} layers to GPU")
    share = rep["gpu_share_of_offloadable"]
    if share is None or share < OFFLOAD_MIN_SHARE:
        why.append(f"CUDA buffers hold {rep['gpu_buffer_bytes'] / 2**20:.1f} MiB "
                   f"({'?' if share is None else f'{share:.1%}'} of the weights that belong on "
                   f"the GPU; buffers {rep['buffers_mib']})")
    if not why:
        return None
    return ("the peer did not run on the GPU: " + "; ".join(why) + ". A cuda record needs "
            "llama.cpp's CUDA build with every layer offloaded: build it with bench/peer_cuda.sh "
            "and pass --python build/peer-cuda-venv/bin/python. No record is written.")


def host_allowed_bytes(model_path: str) -> int:
    """The token-embedding table's bytes: llama.cpp keeps the input layer on the host."""
    try:
        h = benchlib.read_gguf_header(model_path)
    except (OSError, ValueError):
        return 0
    return next((t["n_bytes"] for t in h["tensors"] if t["name"] == "token_embd.weight"), 0)


def idle_decision(load_1min: float, threads: int, usable_cpus: int, allow_busy: bool) -> dict:
    """The idle rule: busy when the 1-minute load average exceeds the threshold; refused
    when busy, --threads >= 2 and not --allow-busy (1-thread records are only marked)."""
    threshold = IDLE_LOAD_BASE + IDLE_LOAD_PER_FREE_CPU * max(usable_cpus - threads, 0)
    busy = load_1min > threshold
    return {"load_1min": load_1min, "threshold": threshold, "threads": threads,
            "usable_cpus": usable_cpus, "busy": busy, "allow_busy": allow_busy,
            "refused": busy and threads >= 2 and not allow_busy}


def wait_for_idle(threads: int, usable_cpus: int, allow_busy: bool, wait_s: float,
                  getload=None, sleep=None, clock=None, log=None) -> dict:
    """idle_decision, polled every IDLE_POLL_S for up to wait_s seconds while it would refuse
    (the 1-minute average lags a finished job by a minute or two). Returns the last decision
    with load_1min_first and waited_s. getload/sleep/clock/log: os.getloadavg, time.sleep,
    time.monotonic and nothing, unless given (the tests)."""
    getload = getload or os.getloadavg
    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    log = log or (lambda msg: None)
    t0 = clock()
    first = getload()[0]
    d = idle_decision(first, threads, usable_cpus, allow_busy)
    if d["refused"] and wait_s > 0:
        log(f"1-minute load average {first:.2f} > {d['threshold']:.2f}: waiting up to "
            f"{wait_s:g} s for it to fall (--idle-wait)")
    while d["refused"] and clock() - t0 < wait_s:
        sleep(min(IDLE_POLL_S, max(wait_s - (clock() - t0), 0)))
        d = idle_decision(getload()[0], threads, usable_cpus, allow_busy)
    d["load_1min_first"] = first
    d["waited_s"] = clock() - t0
    return d


def busy_refusal(d: dict) -> str:
    return (f"the machine is not idle: 1-minute load average {d['load_1min']:.2f} (waited "
            f"{d['waited_s']:.0f} s) exceeds {d['threshold']:.2f} = {IDLE_LOAD_BASE} + "
            f"{IDLE_LOAD_PER_FREE_CPU} x {max(d['usable_cpus'] - d['threads'], 0)} CPU(s) the "
            f"{d['threads']}-thread run leaves free; no record is written. Rerun on an idle "
            f"machine, or pass --allow-busy (the record is then marked \"machine_busy\": true; "
            f"see bench/README.md).")


def wait_for_gpu_idle(usable_cpus: int, allow_busy: bool, wait_s: float, sample=None,
                      sleep=None, clock=None, log=None) -> dict:
    """benchlib.sample_gpu_idle, repeated every IDLE_POLL_S for up to wait_s seconds while it
    would refuse (a previous GPU job's processes take a moment to exit). sample: a function
    (usable_cpus, allow_busy) -> decision (the tests); the rest as in wait_for_idle."""
    sample = sample or benchlib.sample_gpu_idle
    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    log = log or (lambda msg: None)
    t0 = clock()
    d = sample(usable_cpus, allow_busy)
    first = d["load_1min"]
    if d["refused"] and wait_s > 0:
        log(f"{kbench.gpu_busy_text(d)}: waiting up to {wait_s:g} s (--idle-wait)")
    while d["refused"] and clock() - t0 < wait_s:
        sleep(min(IDLE_POLL_S, max(wait_s - (clock() - t0), 0)))
        d = sample(usable_cpus, allow_busy)
    d["load_1min_first"] = first
    d["waited_s"] = clock() - t0
    return d


def gpu_busy_refusal(d: dict) -> str:
    return (f"{kbench.gpu_busy_text(d)} (waited {d['waited_s']:.0f} s); no record is written. "
            f"Rerun when the GPU is free, or pass --allow-busy (the record is then marked "
            f"\"machine_busy\": true; see bench/README.md).")


# ---- the harness -----------------------------------------------------------------------

PEER_CUDA_PYTHON = "build/peer-cuda-venv/bin/python"  # bench/peer_cuda.sh


def llama_python(args) -> str:
    """An interpreter that can import llama_cpp: --python, this one, or the project's .venv;
    for --backend cuda --python or bench/peer_cuda.sh's venv (a CPU build must not be the
    GPU peer by accident)."""
    if args.python:
        cands = [args.python]
    elif kbench.backend_of(args) == "cuda":
        cands = [os.path.join(ROOT, PEER_CUDA_PYTHON)]
    else:
        cands = [sys.executable, os.path.join(ROOT, ".venv/bin/python")]
    for py in cands:
        if py and os.access(py, os.X_OK):
            r = subprocess.run([py, "-c", "import llama_cpp"], capture_output=True)
            if r.returncode == 0:
                return py
    how = ("build it with  bench/peer_cuda.sh" if kbench.backend_of(args) == "cuda" else
           "install it with  CMAKE_ARGS=\"-DGGML_NATIVE=ON\" .venv/bin/pip install -r "
           "tools/requirements-bench.txt")
    raise kbench.BenchError(
        "llama_cpp is not importable (tried " + ", ".join(c for c in cands if c) + "): " + how)


class Llama:
    def __init__(self, args, kipp: kbench.Kipp, python: str, env: dict | None = None):
        """env: extra environment variables for the worker (e.g. OMP_WAIT_POLICY)."""
        self.a, self.kipp, self.py = args, kipp, python
        self.env = dict(env or {})

    def spec(self, describe: bool = False, threads: int | None = None, n_ids: int | None = None,
             decode: int | None = None, progress: bool = False) -> dict:
        """The worker's run: by default the benchmark's own (all ids, --threads, --decode);
        n_ids takes the prompt's first ids only (no text then, so no tokenizer comparison)."""
        return {"model": os.path.abspath(self.a.model),
                "ids": self.kipp.ids if n_ids is None else self.kipp.ids[:n_ids],
                "n_ctx": self.kipp.n_ctx, "threads": threads or self.a.threads,
                "decode": decode or self.a.decode,
                "text": self.a.prompt if n_ids is None else None,
                "describe": describe, "progress": progress,
                "n_gpu_layers": gpu_layers(self.a)}

    def run_raw(self, spec: dict) -> dict:
        """One worker process; benchlib.run_measured's result (rc < 0: died by a signal)."""
        return benchlib.run_measured([self.py, "-m", "bench.peer_bench", "--llama-worker",
                                      json.dumps(spec)], timeout=self.a.timeout, cwd=ROOT,
                                     env={**os.environ, **self.env} if self.env else None)

    def run_once(self, describe: bool = False) -> dict:
        r = self.run_raw(self.spec(describe=describe))
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

    def check(self, cpu_flags: set, machine: str) -> dict:
        """The peer check's run: 1 thread, the prompt's first CHECK_PROMPT_TOKENS ids,
        CHECK_DECODE steps (both at most the benchmark's own), stages reported; peer.check."""
        r = self.run_raw(self.spec(threads=1, n_ids=min(len(self.kipp.ids), CHECK_PROMPT_TOKENS),
                                   decode=min(self.a.decode, CHECK_DECODE), progress=True))
        outcome = peer_check_outcome(r, self.a.timeout)
        check = build_check(outcome, cpu_flags, machine)
        if gpu_layers(self.a):
            res = outcome["result"] or {}
            check["offload"] = offload_report(res.get("offload"), outcome["system_info"],
                                              host_allowed_bytes(self.a.model))
        return check


def gpu_layers(args) -> int:
    """llama.cpp's n_gpu_layers: -1 (every layer) for a cuda record, 0 for the CPU's."""
    return -1 if kbench.backend_of(args) == "cuda" else 0


def read_cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return parse_cpu_flags(f.read())
    except OSError:
        return set()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/peer_bench.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    kbench.add_common_args(ap)
    ap.add_argument("--python", metavar="PATH",
                    help="interpreter with llama_cpp for the worker (default: this one or .venv)")
    ap.add_argument("--skip-peer-check", action="store_true",
                    help="skip the 1-thread llama.cpp check run (quick trials; the record is "
                         "marked unchecked and is not committed)")
    ap.add_argument("--allow-busy", action="store_true",
                    help="write a 2+-thread record even when the machine is not idle (marked "
                         "machine_busy)")
    ap.add_argument("--idle-wait", metavar="S", type=benchlib.positive("--idle-wait", 0),
                    default=120, help="seconds to wait for the load average to fall below the "
                                      "idle threshold before refusing (default 120)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--llama-worker"]:
        return worker_main(argv[1])
    ap = build_parser()
    args = ap.parse_args(argv)
    kbench.check_paths(ap, args)  # usage errors first (exit 2), with or without llama_cpp
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cuda = kbench.backend_of(args) == "cuda"
    if cuda:
        idle = wait_for_gpu_idle(usable, args.allow_busy, args.idle_wait,
                                 log=lambda m: print(f"peer_bench: {m}", file=sys.stderr))
        args.gpu_idle = idle  # tools/bench.py's prepare records it, does not sample again
    else:
        idle = wait_for_idle(args.threads, usable, args.allow_busy, args.idle_wait,
                             log=lambda m: print(f"peer_bench: {m}", file=sys.stderr))
    if idle["refused"]:
        print(f"peer_bench: {gpu_busy_refusal(idle) if cuda else busy_refusal(idle)}",
              file=sys.stderr)
        return EXIT_BUSY
    if idle["busy"] and cuda:
        print(f"peer_bench: warning: {kbench.gpu_busy_text(idle)}: the record is marked "
              f"machine_busy", file=sys.stderr)
    elif idle["busy"]:
        print(f"peer_bench: warning: 1-minute load average {idle['load_1min']:.2f} exceeds the "
              f"idle threshold {idle['threshold']:.2f}: the record is marked machine_busy",
              file=sys.stderr)
    try:
        py = llama_python(args)
        kipp, manifest, membw = kbench.prepare(ap, args)
        llama = Llama(args, kipp, py)
        cpu_flags, machine = read_cpu_flags(), platform.machine()
        check = None
        if args.skip_peer_check:
            print("peer_bench: warning: --skip-peer-check: the record is marked unchecked "
                  "(peer.check.checked = false; not committed)", file=sys.stderr)
        else:
            check = llama.check(cpu_flags, machine)
            why = check_refusal(check, cpu_flags)
            if not why and cuda:
                why = offload_refusal(check.get("offload"))
            if why:
                print(f"peer_bench: {why}", file=sys.stderr)
                brief = {**check, "run": {k: v for k, v in check["run"].items() if k != "stderr_tail"}}
                print("peer_bench: peer.check = " + json.dumps(brief), file=sys.stderr)
                return kbench.EXIT_RUN
            s1 = check["sanity_1t"]
            if cuda:
                o = check["offload"]
                print(f"peer_bench: peer check: llama.cpp offloaded {o['layers_offloaded']}/"
                      f"{o['layers_total']} layers, {o['gpu_buffer_bytes'] / 2**20:.0f} MiB in "
                      f"CUDA buffers", file=sys.stderr)
            print(f"peer_bench: peer check: llama.cpp ran ({s1['prompt_tokens']} + "
                  f"{s1['decode_tokens']} tokens, 1 thread): prefill {s1['prefill_tok_s']:.1f}, "
                  f"decode {s1['decode_tok_s']:.2f} tok/s", file=sys.stderr)
        info = llama.run_once(describe=True)  # also the first warm-up of llama.cpp
        if check is None:
            check = build_check(None, cpu_flags, machine, info.get("system_info"))
            if cuda:  # unchecked, but the record still says what the first run showed
                check["offload"] = offload_report(info.get("offload"), info.get("system_info"),
                                                  host_allowed_bytes(args.model))
        isa = check["isa"] or {}
        for key, what in (("ggml_uses_cpu_lacks", "ggml was built with ISA features this CPU "
                                                  "lacks"),
                          ("cpu_has_ggml_unused", "this CPU has ISA features ggml was built "
                                                  "without (a slower peer than the machine allows)")):
            if isa.get(key):
                print(f"peer_bench: warning: {what}: {', '.join(isa[key])} (peer.check.isa)",
                      file=sys.stderr)
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
    rec["idle_check"] = idle
    rec["machine_busy"] = idle["busy"]
    if check["sanity_1t"]:
        # a multi-thread decode at or below the 1-thread figure: a collapsed thread pool
        # (load, oversubscription), not a slow build. The check's context is shorter, so the
        # ratio is approximate.
        check["decode_median_over_sanity_1t"] = (l_sum["decode_tok_s"]["median"]
                                                 / check["sanity_1t"]["decode_tok_s"])
        # (not for GPU runs: the host threads do not compute there)
        if not cuda and args.threads >= 2 and check["decode_median_over_sanity_1t"] < 1.0:
            print(f"peer_bench: warning: llama.cpp's {args.threads}-thread decode median is "
                  f"{check['decode_median_over_sanity_1t']:.2f}x its 1-thread check figure: "
                  f"its thread pool collapsed (load? oversubscription?)", file=sys.stderr)
    rec["peer"] = {
        "name": "llama.cpp (llama-cpp-python, low-level API)"
                + (", CUDA build, every layer on the GPU" if cuda else ""),
        "check": check,
        "llama_cpp_python": info.get("llama_cpp_python"),
        "ggml": info.get("ggml"),
        "system_info": info.get("system_info"),
        "python": py,
        "settings": {"n_ctx": info["n_ctx"], "n_batch": kipp.n_prompt, "n_ubatch": kipp.n_prompt,
                     "n_gpu_layers": info.get("n_gpu_layers", 0),
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
