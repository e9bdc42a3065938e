"""bench/ppl_bench.py: the target verdicts, argument errors, and a Kipp-only end-to-end run
on kipp-tiny (make trained-models, make cpu). The llama.cpp half needs llama-cpp-python
(tools/requirements-bench.txt), which CI does not build; the committed record is its test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import ppl_bench as pb

ROOT = Path(__file__).resolve().parents[2]
BUILD = os.path.dirname(os.environ.get("KIPP_BIN", "build/kipp"))  # run_tests.sh sets KIPP_BIN
MODEL = "models/kipp-tiny/kipp-tiny-bf16.gguf"


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "bench/ppl_bench.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_targets_met_and_missed():
    kipp = {"bf16": {"ppl": 10.0}, "q8_0": {"kld_mean": 0.010}, "llama-q8_0": {"kld_mean": 0.0099},
            "q4_0": {"kld_mean": 0.2}, "llama-q4_0": {"error": "cannot load"}}
    peer = {"bf16": {"ppl": 10.005}, "q8_0": {"kld_mean": 0.0104}, "llama-q8_0": {"kld_mean": 0.010},
            "q4_0": {"kld_mean": 0.30}, "llama-q4_0": {"kld_mean": 0.25}}
    t = pb.targets(kipp, peer, ["q8_0", "q4_0"])
    assert t["bf16_ppl"]["met"] is True and abs(t["bf16_ppl"]["ratio"] - 10.0 / 10.005) < 1e-12
    assert t["q8_0"]["kipp"]["met"] is True          # 0.010 <= 1.05 * 0.0099
    assert t["q8_0"]["llama_cpp"]["met"] is True     # 0.0104 <= 1.05 * 0.010
    assert t["q4_0"]["llama_cpp"]["met"] is False    # 0.30 > 1.05 * 0.25
    assert abs(t["q4_0"]["llama_cpp"]["ratio"] - 1.2) < 1e-12
    assert t["q4_0"]["kipp"] == {"error": "cannot load"}
    peer["bf16"]["ppl"] = 10.02  # 0.2 % apart
    assert pb.targets(kipp, peer, [])["bf16_ppl"]["met"] is False


def test_argument_errors(tmp_path):
    r = run("--model", MODEL, "--types", "q8_0,q3_k")
    assert r.returncode == 2 and "unknown q3_k" in r.stderr
    r = run("--model", str(tmp_path / "none.gguf"))
    assert r.returncode == 2 and "none.gguf does not exist" in r.stderr
    r = run("--model", MODEL, "--ctx", "4")
    assert r.returncode == 2 and "--ctx" in r.stderr
    if not (ROOT / pb.DEFAULT_4B).exists():
        r = run()
        assert r.returncode == 2 and "qwen3-4b-base" in r.stderr


@pytest.mark.full  # make test-full only: the test tier's time budget (docs/testing.md)
def test_kipp_only_record(tmp_path):
    for p in (MODEL, f"{BUILD}/kipp-perplexity", f"{BUILD}/kipp"):
        if not (ROOT / p).exists():
            pytest.fail(f"{p} is missing: make cpu trained-models")
    out = tmp_path / "ppl.json"
    r = run("--model", MODEL, "--ctx", "128", "--chunks", "2", "--types", "q8_0,q4_0", "--no-peer",
            "--binary", f"{BUILD}/kipp-perplexity", "--kipp", f"{BUILD}/kipp",
            "--work-dir", str(tmp_path), "--output", str(out))
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    k = rec["kipp"]
    assert k["bf16"]["scored_tokens"] == 2 * 63 and 1.5 < k["bf16"]["ppl"] < 100
    assert 0 < k["q8_0"]["kld_mean"] < k["q4_0"]["kld_mean"]
    assert k["q8_0"]["ppl_base"] == pytest.approx(k["bf16"]["ppl"], rel=1e-9)
    assert rec["files"]["q4_0"]["tensor_types"].get("Q4_0", 0) > 0
    assert rec["text"]["tokens"] > 256 and len(rec["text"]["sha256"]) == 64
    assert "targets" not in rec and "peer" not in rec
    assert rec["commit"] and rec["binary"]["sha256"]
