#!/usr/bin/env python3
"""Perplexity and quantization quality: Kipp beside llama.cpp on the same GGUF and the same text.

What it does, for a bf16 base GGUF and a held-out text:
  1. quantizes the base with Kipp's tools/quantize.py and with llama.cpp's llama-quantize
     (llama_model_quantize through the pinned llama-cpp-python) to each --types entry;
  2. Kipp (build/kipp-perplexity): perplexity of the base, and of every quantized file
     perplexity plus KL-divergence(base || file) and top-1 agreement, chunked like
     llama-perplexity (chunks of --ctx tokens, the second half of each scored);
  3. llama.cpp (llama-cpp-python, logits_all): the same figures over the same token ids
     (Kipp's tokenization, checked against llama.cpp's own), chunk by chunk, the
     log-softmaxes compared in numpy (what `llama-perplexity --kl-divergence` reports);
  4. the targets: Kipp's base perplexity equals llama.cpp's within 0.1 %; Kipp's quantized
     files have a mean KL-divergence no worse than llama-quantize's of the same type (within
     5 %), judged by both engines.
The record carries the provenance of every bench record (commit, binary, hardware, model
manifests with sha256) plus the text's sha256 and the peer's versions.

Usage:
    python3 bench/ppl_bench.py --output bench/results/ppl-4b.json     # qwen3-4b-base, if present
    python3 bench/ppl_bench.py --model models/kipp-tiny/kipp-tiny-bf16.gguf \\
        --output bench/results/ppl-kipp-tiny.json [--text FILE] [--ctx 512] [--types ...]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/ppl_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np  # noqa: E402

from bench import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_4B = os.path.join(ROOT, "models", "qwen3-4b-base", "kipp-qwen3-4b-base-bf16.gguf")
DEFAULT_TEXT = os.path.join(ROOT, "bench", "data", "kipp-tiny-heldout.txt")
TYPES = ("q8_0", "q6_k", "q4_k_m", "q4_0")
# every file type both quantizers make; the names are llama-quantize's (lower case)
LLAMA_FTYPE = {t: "LLAMA_FTYPE_MOSTLY_" + t.upper()
               for t in ("q8_0", "q6_k", "q4_k_m", "q4_0", "q5_k_m", "q5_k_s", "q3_k_m", "q3_k_s",
                         "q2_k", "q5_0", "q5_1", "q4_1", "iq4_nl", "iq4_xs")}
PPL_TOLERANCE = 0.001  # bf16: |Kipp / llama.cpp - 1|
KLD_TOLERANCE = 1.05   # Kipp-quantized KLD / llama-quantized KLD


class BenchError(Exception):
    pass


def log(msg: str) -> None:
    print(f"ppl_bench: {msg}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=DEFAULT_4B,
                    help="the bf16 base GGUF (default: qwen3-4b-base when downloaded and converted)")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="UTF-8 text (default: kipp-tiny's held-out text)")
    ap.add_argument("--ctx", type=benchlib.positive("--ctx", 16), default=512)
    ap.add_argument("--chunks", type=benchlib.positive("--chunks"), help="at most N chunks")
    ap.add_argument("--types", default=",".join(TYPES), help="comma-separated quantized types")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=benchlib.positive("--threads"), default=2)
    ap.add_argument("--quantizer", choices=("py", "c"), default="py",
                    help="Kipp's quantizer: py = tools/quantize.py (the reference), c = build/kipp-quantize")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "kipp-perplexity"))
    ap.add_argument("--kipp", default=os.path.join(ROOT, "build", "kipp"), help="kipp (tokenizes the text)")
    ap.add_argument("--work-dir", help="where the quantized files go (default: beside the model)")
    ap.add_argument("--no-peer", action="store_true", help="Kipp only (no llama.cpp figures, no targets)")
    ap.add_argument("--output", help="write the JSON record here (default: stdout)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="per command, seconds")
    return ap


def run(cmd: list[str], timeout: float) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if r.returncode != 0:
        raise BenchError(f"{' '.join(cmd[:3])} ... failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}")
    return r.stdout


# ---- quantized files -------------------------------------------------------------------

def kipp_quantize(base: str, out: str, typ: str, args) -> None:
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(base):
        return
    log(f"Kipp quantize ({args.quantizer}) -> {out}")
    if args.quantizer == "c":
        run([os.path.join(ROOT, "build", "kipp-quantize"), "-t", str(args.threads), base, out, typ],
            args.timeout)
    else:
        run([sys.executable, "-m", "tools.quantize", base, out, "--type", typ, "--threads",
             str(args.threads), "--no-progress"], args.timeout)


def llama_quantize(base: str, out: str, typ: str, args) -> None:
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(base):
        return
    import ctypes
    import llama_cpp as L
    log(f"llama-quantize -> {out}")
    p = L.llama_model_quantize_default_params()
    p.ftype = getattr(L, LLAMA_FTYPE[typ])
    p.nthread = args.threads
    tmp = out + ".part"
    rc = L.llama_model_quantize(base.encode(), tmp.encode(), ctypes.byref(p))
    if rc != 0:
        raise BenchError(f"llama_model_quantize({typ}) failed with {rc}")
    os.replace(tmp, out)


def tensor_types(path: str) -> dict:
    """tensor type -> count (what each quantizer chose), from the header's tensor infos
    (gguf-py's GGUFReader would also parse the whole vocabulary: ~9 s a file on Qwen3's)."""
    out: dict = {}
    for t in benchlib.read_gguf_header(path)["tensors"]:
        out[t["type_name"]] = out.get(t["type_name"], 0) + 1
    return dict(sorted(out.items()))


# ---- Kipp ------------------------------------------------------------------------------

def kipp_ppl(path: str, args, base: str | None = None) -> dict:
    cmd = [args.binary, "--model", path, "--file", args.text, "--ctx", str(args.ctx),
           "--backend", args.backend, "--threads", str(args.threads), "--json", "--quiet"]
    if args.chunks:
        cmd += ["--chunks", str(args.chunks)]
    if base:
        cmd += ["--kl-base", base]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-1000:]}
    res = json.loads(r.stdout)
    res["wall_s"] = round(time.time() - t0, 2)
    return res


def kipp_tokens(args) -> list[int]:
    with open(args.text, "rb") as f:
        r = subprocess.run([args.kipp, "--model", args.model, "--tokenize"], stdin=f,
                           capture_output=True, timeout=args.timeout, cwd=ROOT)
    if r.returncode != 0:
        raise BenchError(f"kipp --tokenize failed: {r.stderr.decode(errors='replace')[-1000:]}")
    return [int(x) for x in r.stdout.split()]


# ---- llama.cpp -------------------------------------------------------------------------

def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))


class LlamaRunner:
    def __init__(self, path: str, args):
        from llama_cpp import Llama
        self.llm = Llama(model_path=path, n_ctx=args.ctx, n_batch=args.ctx, n_ubatch=args.ctx,
                         logits_all=True, n_threads=args.threads, n_threads_batch=args.threads,
                         verbose=False)

    def logprobs(self, toks: list[int], first: int) -> np.ndarray:
        """log-softmax rows of positions first .. len-2 (each predicts the next token)."""
        self.llm.reset()
        self.llm.eval(toks)
        return _log_softmax(np.array(self.llm.scores[first:len(toks) - 1], dtype=np.float32))

    def close(self):
        self.llm.close()


def llama_eval(path: str, ids: list[int], n_chunks: int, args, base: LlamaRunner | None) -> dict:
    ctx, first = args.ctx, args.ctx // 2
    t0 = time.time()
    r = LlamaRunner(path, args)
    nll, klds, same = [], [], 0
    nll_base = []
    try:
        for ch in range(n_chunks):
            toks = ids[ch * ctx:(ch + 1) * ctx]
            lq = r.logprobs(toks, first)
            tgt = np.array(toks[first + 1:], dtype=np.int64)
            rows = np.arange(len(tgt))
            nll.append(-lq[rows, tgt])
            if base is not None:
                lp = base.logprobs(toks, first)
                nll_base.append(-lp[rows, tgt])
                klds.append(np.maximum((np.exp(lp) * (lp - lq)).sum(axis=1), 0.0))
                same += int((lp.argmax(axis=1) == lq.argmax(axis=1)).sum())
    finally:
        r.close()
    nll = np.concatenate(nll)
    n = len(nll)
    se = nll.std(ddof=1) / np.sqrt(n)
    res = {"ppl": float(np.exp(nll.mean())), "ppl_stderr": float(np.exp(nll.mean()) * se),
           "scored_tokens": n, "wall_s": round(time.time() - t0, 2)}
    if base is not None:
        k = np.concatenate(klds)
        res.update({"ppl_base": float(np.exp(np.concatenate(nll_base).mean())),
                    "kld_mean": float(k.mean()), "kld_stderr": float(k.std(ddof=1) / np.sqrt(n)),
                    "kld_median": float(np.median(k)), "kld_p99": float(np.quantile(k, 0.99)),
                    "kld_max": float(k.max()), "same_top1": same / n})
        res["ppl_ratio"] = res["ppl"] / res["ppl_base"]
    return res


def llama_info() -> dict:
    import llama_cpp as L
    from bench.peer_bench import ggml_build_info
    return {"llama_cpp_python": L.__version__, **ggml_build_info(L),
            "system_info": L.llama_print_system_info().decode(errors="replace").strip()}


# ---- the run ---------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    types = [t for t in args.types.split(",") if t]
    bad = [t for t in types if t not in LLAMA_FTYPE]
    if bad:
        ap.error(f"--types: unknown {', '.join(bad)} (choose from {', '.join(TYPES)})")
    for p, what in ((args.model, "--model"), (args.text, "--text"), (args.binary, "--binary"),
                    (args.kipp, "--kipp")):
        if not os.path.exists(p):
            hint = (" (download and convert qwen3-4b-base first, or name a bf16 GGUF with --model)"
                    if p == DEFAULT_4B else " (run `make cpu`)" if what in ("--binary", "--kipp") else "")
            ap.error(f"{what} {p} does not exist{hint}")
    work = args.work_dir or os.path.dirname(os.path.abspath(args.model))
    os.makedirs(work, exist_ok=True)
    stem = os.path.basename(args.model).removesuffix(".gguf").removesuffix("-bf16")

    files = {}
    for t in types:
        files[t] = os.path.join(work, f"{stem}-{t}.gguf" if args.quantizer == "py"
                                else f"{stem}-kipp-quantize-{t}.gguf")
        kipp_quantize(args.model, files[t], t, args)
        if not args.no_peer:
            files["llama-" + t] = os.path.join(work, f"{stem}-llama-quantize-{t}.gguf")
            llama_quantize(args.model, files["llama-" + t], t, args)

    ids = kipp_tokens(args)
    n_chunks = len(ids) // args.ctx
    if args.chunks:
        n_chunks = min(n_chunks, args.chunks)
    if n_chunks == 0:
        raise BenchError(f"{args.text}: {len(ids)} tokens, fewer than one chunk of {args.ctx}")

    rec = {"bench": "ppl", **benchlib.provenance(args.binary),
           "argv": sys.argv[1:] if argv is None else argv,
           "method": "chunks of ctx tokens from position 0, the second half scored (llama-perplexity); "
                     "KLD = mean over scored positions of KL(base || file) over the full vocabulary",
           "text": {"path": os.path.relpath(args.text, ROOT), "sha256": benchlib.sha256_file(args.text),
                    "bytes": os.path.getsize(args.text), "tokens": len(ids)},
           "ctx": args.ctx, "chunks": n_chunks, "backend": args.backend, "threads": args.threads,
           "quantizer": "tools/quantize.py" if args.quantizer == "py" else "build/kipp-quantize",
           "base": benchlib.model_manifest(args.model),
           "files": {k: {"path": os.path.relpath(v, ROOT), "sha256": benchlib.sha256_file(v),
                         "bytes": os.path.getsize(v), "tensor_types": tensor_types(v)}
                     for k, v in files.items()}}

    log(f"Kipp: {n_chunks} chunks of {args.ctx} on {args.backend}")
    kipp = {"bf16": kipp_ppl(args.model, args)}
    for k, v in files.items():
        kipp[k] = kipp_ppl(v, args, base=args.model)
        log(f"  Kipp {k}: {kipp[k].get('ppl', kipp[k].get('error'))}")
    rec["kipp"] = kipp

    if not args.no_peer:
        import llama_cpp as L
        llama_ids = L.Llama(model_path=args.model, vocab_only=True, verbose=False).tokenize(
            open(args.text, "rb").read(), add_bos=False, special=False)
        rec["peer"] = {"name": "llama.cpp", **llama_info(),
                       "tokenization": {"same_as_kipp": llama_ids == ids, "llama_tokens": len(llama_ids),
                                        "note": "both engines are fed Kipp's token ids"}}
        log("llama.cpp: base")
        peer = {"bf16": llama_eval(args.model, ids, n_chunks, args, None)}
        base = LlamaRunner(args.model, args)
        try:
            for k, v in files.items():
                peer[k] = llama_eval(v, ids, n_chunks, args, base)
                log(f"  llama.cpp {k}: ppl {peer[k]['ppl']:.4f} KLD {peer[k]['kld_mean']:.5f}")
        finally:
            base.close()
        rec["peer"]["results"] = peer
        rec["targets"] = targets(kipp, peer, types)

    text = json.dumps(rec, indent=2) + "\n"
    if args.output:
        benchlib.write_record_file(args.output, text)
        log(f"record written to {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def targets(kipp: dict, peer: dict, types: list[str]) -> dict:
    out = {}
    kb, lb = kipp["bf16"].get("ppl"), peer["bf16"]["ppl"]
    if kb:
        r = kb / lb
        out["bf16_ppl"] = {"kipp": kb, "llama_cpp": lb, "ratio": r,
                           "met": abs(r - 1) <= PPL_TOLERANCE, "target": f"within {PPL_TOLERANCE:.1%}"}
    for t in types:
        e = {"target": f"Kipp-quantized KLD <= {KLD_TOLERANCE} x llama-quantize's"}
        # judged by llama.cpp (it runs both files) and, where it loads the peer's file, by Kipp
        for eng, res in (("llama_cpp", peer), ("kipp", kipp)):
            a, b = res.get(t, {}), res.get("llama-" + t, {})
            if "kld_mean" in a and "kld_mean" in b and b["kld_mean"] > 0:
                e[eng] = {"kipp_quantize_kld": a["kld_mean"], "llama_quantize_kld": b["kld_mean"],
                          "ratio": a["kld_mean"] / b["kld_mean"],
                          "met": a["kld_mean"] <= KLD_TOLERANCE * b["kld_mean"]}
            else:
                e[eng] = {"error": a.get("error") or b.get("error") or "not measured"}
        out[t] = e
    return out


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"ppl_bench: error: {e}", file=sys.stderr)
        sys.exit(1)
