"""bench/grammar_bench.py and build/kipp-grammarbench: argument errors, a refusal when a
document of the corpus would be masked (a corpus entry whose "accept" document the schema
does not allow), and a small real run on the tiny checkpoint (Qwen3's real vocabulary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = os.path.dirname(os.environ.get("KIPP_BIN", "build/kipp"))  # run_tests.sh sets KIPP_BIN
MODEL = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"
GB = os.path.join(BUILD, "kipp-grammarbench")


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "bench/grammar_bench.py", "--binary", os.path.join(BUILD, "kipp"),
                           "--grammarbench", GB, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_argument_errors(tmp_path):
    r = run("--model", str(tmp_path / "missing.gguf"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = run("--model", MODEL, "--runs", "0")
    assert r.returncode == 2 and "--runs" in r.stderr
    r = run("--model", MODEL, "--corpus", str(tmp_path / "nope"))
    assert r.returncode == 2 and "--corpus" in r.stderr


def test_masked_document_is_refused(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps(
        {"name": "bad", "schema": {"type": "integer"}, "accept": ["\"text\""], "reject": []}))
    r = subprocess.run([os.path.join(ROOT, GB), MODEL, str(tmp_path)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "is masked" in r.stderr


def test_small_run_writes_a_record(tmp_path):
    out = tmp_path / "rec.json"
    r = run("--model", MODEL, "--runs", "1", "--decode", "4", "--no-hash", "--output", str(out))
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    m = rec["mask"]
    assert m["schemas"] >= 25 and m["documents"] > m["schemas"] and m["invalid"] == 0
    assert m["masks"] > m["documents"] and m["vocab"] == 151936
    assert 0 < m["mask_ms"]["p50"] <= m["mask_ms"]["p99"] <= m["mask_ms"]["max"]
    assert rec["decode_step_ms"] > 0 and rec["ratio"]["mean"] > 0
    assert rec["target"]["mean_ratio_at_most"] == 0.10
