"""bench/spec_bench.py: argument errors, the greedy gate refusing to write a record when
speculative output differs (a fake kipp that answers differently with a drafter), and a
small real run on kipp-tiny with prompt lookup (make trained-models, make cpu)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = os.path.dirname(os.environ.get("KIPP_BIN", "build/kipp"))  # run_tests.sh sets KIPP_BIN
MODEL = "models/kipp-tiny/kipp-tiny-bf16.gguf"

FAKE_KIPP = """#!/usr/bin/env python3
import json, sys
a = sys.argv[1:]
spec = "-md" in a or "--spec-ngram" in a
json.dump({"decode": {"tokens": 10, "generated": 10, "ms": 100.0},
           "spec": {"steps": 5, "drafted": 8, "accepted": 5, "acceptance": 0.625, "draft_ms": 1.0}},
          open(a[a.index("--stats-json") + 1], "w"))
print("speculative text" if spec else "plain text")
"""


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "bench/spec_bench.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_argument_errors(tmp_path):
    r = run("--model", MODEL, "--draft-model", MODEL, "--spec-ngram", "2")
    assert r.returncode != 0 and "not both" in r.stderr
    r = run("--model", str(tmp_path / "nope.gguf"))
    assert r.returncode != 0 and "no such file" in r.stderr


def test_greedy_gate_refuses_a_differing_run(tmp_path):
    fake = tmp_path / "kipp"
    fake.write_text(FAKE_KIPP)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "rec.json"
    r = run("--model", MODEL, "--spec-ngram", "2", "--binary", str(fake), "--runs", "1",
            "--decode", "8", "--gate", "greedy", "--output", str(out))
    assert r.returncode != 0 and "differs" in r.stderr, r.stderr
    assert not out.exists()


def test_prompt_lookup_record(tmp_path):
    out = tmp_path / "rec.json"
    r = run("--model", MODEL, "--spec-ngram", "3", "--binary", os.path.join(BUILD, "kipp"),
            "--prompt-file", "bench/data/spec-code-edit.txt", "--runs", "1", "--decode", "48",
            "--gate", "greedy", "--output", str(out))
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    k = rec["kipp"]
    assert rec["gate"]["greedy"]["passed"] is True
    assert k["runs"]["spec"][0]["drafted"] > 0
    assert k["tokens_per_step"] >= 1.0 and 0.0 <= k["acceptance"] <= 1.0


def test_server_levels_errors():
    for bad in ("0", "2,x", ","):
        r = run("--model", MODEL, "--spec-ngram", "2", "--server-clients", bad)
        assert r.returncode != 0 and "--server-clients expects" in r.stderr, (bad, r.stderr)


@pytest.mark.full  # make test-full only: the test tier's time budget (docs/testing.md)
def test_server_curve_record(tmp_path):
    """A real two-level server run with prompt lookup on a text prompt: per level both
    arms' throughput, the ratio, and the speculative server's drafts from /metrics."""
    out = tmp_path / "rec.json"
    r = run("--model", MODEL, "--spec-ngram", "3", "--prompt-file", "bench/data/spec-code-edit.txt",
            "--server-clients", "1,2", "--server-max-tokens", "24", "--runs", "1",
            "--output", str(out), timeout=900)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    s = rec["server"]
    assert s["clients"] == [1, 2] and s["prompt"] == "text"
    for c in ("1", "2"):
        lv = s["levels"][c]
        assert lv["ratio_median"] > 0
        ps = lv["runs"]["plain"][0]["spec"]
        assert ps is None or ps["drafted"] == 0  # a server without a drafter drafts nothing
        sp = lv["runs"]["spec"][0]["spec"]
        assert sp["drafted"] > 0 and 0 <= sp["accepted"] <= sp["drafted"]
    assert s["levels"]["2"]["generated_per_engine_step"] > 1.0  # two clients share steps
