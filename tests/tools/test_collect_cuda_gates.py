"""Tests for tools/ops/collect_cuda_gates.py (device-gate log -> JSON result) and for the
agreement between its parser and the markers tools/ops/device_gate.sh writes.

The collector is run on hand-written fixture logs (tests/tools/data/cuda_gates): a passing run,
a failing gate, a log cut mid-step, a build failure, a host without nvidia-smi, and a file that
is not a gate log. device_gate.sh itself is run with a PATH of fake make / nvidia-smi / nvcc and
a fake Python, so its real marker lines go through the real parser. No GPU is needed.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
COLLECT = REPO_ROOT / "tools" / "ops" / "collect_cuda_gates.py"
GATE = REPO_ROOT / "tools" / "ops" / "device_gate.sh"
DATA = Path(__file__).resolve().parent / "data" / "cuda_gates"


def collect(log: Path, tmp_path: Path) -> tuple[int, dict | None, str]:
    out = tmp_path / (log.name + ".json")
    p = subprocess.run([sys.executable, str(COLLECT), str(log), "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    doc = json.loads(out.read_text()) if out.exists() else None
    return p.returncode, doc, p.stderr


def step(doc: dict, name: str) -> dict:
    return next(s for s in doc["steps"] if s["name"] == name)


# ---- fixtures ----------------------------------------------------------------------------

def test_passing_run(tmp_path):
    rc, doc, _ = collect(DATA / "pass.log", tmp_path)
    assert rc == 0
    assert doc["passed"] is True and doc["complete"] is True and doc["missing"] == []
    assert doc["commit"].startswith("655398c") and doc["dirty"] is False
    assert doc["gpu"] == "NVIDIA H200" and doc["driver"] == "570.124.06"
    assert doc["gpus"][0]["memory"] == "143771 MiB"
    assert doc["cuda"] == "12.8" and doc["cores"] == 16 and "8480+" in doc["cpu"]
    tc = step(doc, "test-cuda")
    assert tc["status"] == "pass" and tc["seconds"] == 95 and tc["kind"] == "gate"
    f = tc["figures"]
    # the driver's total, not the sum of every count line (each sub-gate's shows twice)
    assert (f["passed"], f["failed"]) == (1183, 0)
    assert [(g["name"], g["passed"], g["seconds"]) for g in f["subgates"]] == [
        ("cuda operators", 1180, 21), ("golden cuda kipp-tiny bf16", 1, 4),
        ("phase-2 cuda kipp-tiny bf16", 1, 3)]
    assert f["subgates"][0]["worst_nmse"] == 2.4e-07 and f["subgates_failed"] == []
    # measured NMSEs only: the "(bound: NMSE 1e-5)" of the phase-2 line is a limit
    assert sorted(n["value"] for n in f["nmse"]) == sorted([2.4e-07, 1.1e-12, 3.2e-07, 4.5e-13])
    assert f["worst_nmse"] == 3.2e-07
    assert step(doc, "shape-0.6b-q4_k_m")["figures"]["worst_nmse"] == 1.9e-06
    assert step(doc, "membw")["figures"]["best_gbps"] == 4123.5
    peer = step(doc, "peer-cuda")
    assert peer["status"] == "skipped" and "not present" in peer["reason"]
    benches = {b["step"]: b["figures"] for b in doc["benches"]}
    b = benches["bench-0.6b-q4_k_m"]
    assert b["decode_tok_s_median"] == 410.2 and b["prefill_tok_s_median"] == 21000.4
    assert b["backend"] == "cuda" and b["noisy"] is False
    s = benches["server-bench-0.6b-q4_k_m"]
    assert s["levels"]["64"]["agg_decode_tps_median"] == 9850.0
    assert s["levels"]["1"]["errors"] == 0


def test_failing_gate(tmp_path):
    rc, doc, err = collect(DATA / "gate_fail.log", tmp_path)
    assert rc == 1 and doc["passed"] is False and doc["complete"] is True
    tc = step(doc, "test-cuda")
    assert tc["status"] == "fail" and tc["rc"] == 2 and tc["figures"]["failed"] == 1
    assert tc["figures"]["subgates_failed"] == ["cuda vs cpu-ref kipp-tiny q4_0"]
    assert tc["figures"]["subgates"][-1]["worst_nmse"] == pytest.approx(3.1e-3)
    assert tc["figures"]["worst_nmse"] == pytest.approx(3.1e-3)
    assert doc["gates_failed"] == ["test-cuda"]
    assert "NOT PASSED" in err


def test_failed_count_with_rc_zero_is_a_failure(tmp_path):
    # a gate runner that printed a failure but exited 0 must not pass
    text = (DATA / "pass.log").read_text().replace("1183 passed, 0 failed", "1182 passed, 1 failed")
    log = tmp_path / "lying.log"
    log.write_text(text)
    rc, doc, _ = collect(log, tmp_path)
    assert rc == 1 and step(doc, "test-cuda")["status"] == "fail"


def test_truncated_log(tmp_path):
    rc, doc, _ = collect(DATA / "truncated.log", tmp_path)
    assert rc == 1 and doc["complete"] is False and doc["passed"] is False
    assert step(doc, "shape-0.6b-q4_k_m")["status"] == "incomplete"
    missing = "\n".join(doc["missing"])
    assert "shape-0.6b-q4_k_m has no END" in missing
    assert "bench-0.6b-q4_k_m never started" in missing and "no DONE marker" in missing
    assert step(doc, "test-cuda")["status"] == "pass"  # what did finish is still reported


def test_truncated_inside_a_record(tmp_path):
    text = (DATA / "pass.log").read_text()
    cut = text.index('"decode_tok_s"')
    log = tmp_path / "cut-json.log"
    log.write_text(text[:cut])
    rc, doc, _ = collect(log, tmp_path)
    assert rc == 1 and not doc["complete"]
    assert any("record of bench-0.6b-q4_k_m is cut" in m for m in doc["missing"])


def test_build_failure(tmp_path):
    rc, doc, _ = collect(DATA / "build_fail.log", tmp_path)
    assert rc == 1 and doc["complete"] is True and doc["passed"] is False
    assert step(doc, "build")["status"] == "fail" and step(doc, "build")["rc"] == 2
    assert doc["gates_failed"] == ["build"]
    assert set(doc["gates_skipped"]) == {"test-cuda", "model-0.6b-q4_k_m", "shape-0.6b-q4_k_m"}
    assert step(doc, "test-cuda")["reason"] == "build failed"
    assert doc["dirty"] is True and doc["exit_status"] == 1


def test_no_gpu(tmp_path):
    rc, doc, err = collect(DATA / "no_gpu.log", tmp_path)
    assert rc == 1
    assert doc["gpu"] is None and doc["gpus"] == [] and doc["driver"] is None
    assert doc["gpu_error"] == "nvidia-smi not found"
    assert doc["cuda"] == "13.0"
    assert "no GPU (nvidia-smi not found)" in err


def test_refuses_other_files(tmp_path):
    rc, doc, err = collect(DATA / "not_a_gate_log.txt", tmp_path)
    assert rc == 2 and doc is None
    assert "not a device-gate log" in err
    rc, doc, err = collect(tmp_path / "absent.log", tmp_path)
    assert rc == 2 and "cannot read" in err


# ---- device_gate.sh's own markers through the parser --------------------------------------

FAKE_MAKE = r"""#!/bin/sh
for a in "$@"; do
  case "$a" in
    cuda-generic) echo "nvcc -o build/kipp-cuda-generic"
                  [ "${FAKE_FAIL:-}" = build ] && { echo "error: boom"; exit 2; } ;;
    test-cuda) echo "== cuda operators: build/kipp_test_cuda --cuda-operators"
               echo "   op matvec Q8_0: NMSE 5e-08"; echo "   40 passed, 0 failed"
               echo "   -> cuda operators: 40 passed, 0 failed (1 s)"
               echo "== golden cuda m bf16: build/kipp_test_cuda --model m.gguf v --backend cuda"
               echo "   golden gate (m): 24 positions, worst NMSE vs cpu-ref = 7e-07, tolerance 1e-4"
               if [ "${FAKE_FAIL:-}" = test-cuda ]; then
                   echo "   -> golden cuda m bf16: 0 passed, 1 failed (1 s)"; echo "40 passed, 1 failed"
                   exit 2
               fi
               echo "   -> golden cuda m bf16: 1 passed, 0 failed (1 s)"; echo "41 passed, 0 failed" ;;
    random-model) [ -n "${FAKE_SLEEP:-}" ] && sleep "$FAKE_SLEEP"; echo "made $*" ;;
  esac
done
"""
FAKE_SMI = '#!/bin/sh\necho "NVIDIA H200, 570.124.06, 143771 MiB"\n'
FAKE_NVCC = '#!/bin/sh\necho "Cuda compilation tools, release 12.8, V12.8.93"\n'
FAKE_PY = r"""#!/bin/sh
out=""; mod="$2"; while [ $# -gt 0 ]; do [ "$1" = --output ] && out="$2"; shift; done
case "$mod" in
  tools.bench) echo '{"harness": "tools/bench.py", "settings": {"backend": "cuda"},
  "kipp": {"summary": {"decode_tok_s": {"median": 150.5}}}, "noisy": false}' >"$out" ;;
  bench.server_bench) echo '{"harness": "bench/server_bench.py",
  "summary": {"8": {"agg_decode_tps": {"median": 900.0}, "errors": 0}}}' >"$out" ;;
esac
"""
FAKE_TEST = '#!/bin/sh\necho "cpu-vs-ref shape gate: $2 worst NMSE 2e-06, tolerance 1e-04"\necho "4 passed, 0 failed"\n'


def write_exe(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_host(tmp_path):
    """A repository root and a PATH whose make / nvidia-smi / nvcc print canned output."""
    root, fbin = tmp_path / "root", tmp_path / "bin"
    write_exe(fbin / "make", FAKE_MAKE)
    write_exe(fbin / "nvidia-smi", FAKE_SMI)
    write_exe(fbin / "nvcc", FAKE_NVCC)
    write_exe(fbin / "python", FAKE_PY)
    write_exe(root / "build" / "kipp_test_cuda", FAKE_TEST)
    env = dict(os.environ, PATH=f"{fbin}:{os.environ['PATH']}", KIPP_GATE_PYTHON=str(fbin / "python"))
    env.pop("FAKE_FAIL", None)
    return root, env


def run_gate(root: Path, env: dict, *args) -> tuple[int, Path]:
    log = root / "gate.log"
    p = subprocess.run(["bash", str(GATE), "--root", str(root), "--log", str(log), *args],
                       capture_output=True, text=True, env=env, timeout=60)
    assert log.read_text() in p.stdout  # the log is also echoed to stdout
    return p.returncode, log


def test_gate_script_and_parser_agree(fake_host, tmp_path):
    root, env = fake_host
    rc, log = run_gate(root, env, "--skip-4b", "--jobs", "3")
    assert rc == 0
    crc, doc, _ = collect(log, tmp_path)
    assert crc == 0 and doc["passed"] and doc["complete"]
    assert doc["gpu"] == "NVIDIA H200" and doc["cuda"] == "12.8"
    assert doc["plan"] == [s["name"] for s in doc["steps"]]
    assert doc["plan"][:3] == ["deps", "build", "test-cuda"] and "shape-4b-q4_k_m" not in doc["plan"]
    assert step(doc, "test-cuda")["figures"]["passed"] == 41
    assert step(doc, "test-cuda")["figures"]["worst_nmse"] == 7e-07
    assert step(doc, "shape-0.6b-bf16")["figures"]["worst_nmse"] == 2e-06
    benches = {b["step"]: b["figures"] for b in doc["benches"]}
    assert benches["bench-0.6b-q4_k_m"]["decode_tok_s_median"] == 150.5
    assert benches["server-bench-0.6b-q4_k_m"]["levels"]["8"]["agg_decode_tps_median"] == 900.0
    assert step(doc, "membw")["status"] == "skipped"
    assert "make -j3 CUDA_GENCODE=-arch=native cuda-generic server-cuda test-cuda-build" in log.read_text()


def test_gate_script_failing_gate(fake_host, tmp_path):
    root, env = fake_host
    rc, log = run_gate(root, dict(env, FAKE_FAIL="test-cuda"), "--skip-4b", "--skip-bench")
    assert rc == 1
    crc, doc, _ = collect(log, tmp_path)
    assert crc == 1 and doc["complete"] and doc["gates_failed"] == ["test-cuda"]
    assert step(doc, "shape-0.6b-q4_k_m")["status"] == "pass"  # a failure does not stop the run
    assert doc["benches"] == [] and not any(s["kind"] == "bench" for s in doc["steps"])


def test_gate_script_build_failure(fake_host, tmp_path):
    root, env = fake_host
    rc, log = run_gate(root, dict(env, FAKE_FAIL="build"), "--skip-4b")
    assert rc == 1
    _, doc, _ = collect(log, tmp_path)
    assert doc["complete"] and doc["gates_failed"] == ["build"]
    assert step(doc, "bench-0.6b-bf16")["reason"] == "build failed"


def test_gate_script_budget(fake_host, tmp_path):
    # the first model takes 3 s of a 2 s budget: it is stopped (rc 124), the rest is skipped
    root, env = fake_host
    rc, log = run_gate(root, dict(env, FAKE_SLEEP="3"), "--skip-4b", "--skip-bench", "--budget", "2")
    assert rc == 1
    _, doc, _ = collect(log, tmp_path)
    assert doc["complete"]
    m = step(doc, "model-0.6b-q4_k_m")
    assert m["rc"] == 124 and m["reason"] == "stopped at the time budget"
    assert step(doc, "shape-0.6b-q4_k_m")["status"] == "skipped"
    assert "budget" in step(doc, "model-0.6b-bf16")["reason"]


def test_gate_script_no_gpu(fake_host, tmp_path):
    root, env = fake_host
    (Path(env["PATH"].split(":")[0]) / "nvidia-smi").unlink()
    env = dict(env, PATH=env["PATH"].split(":")[0] + ":/usr/bin:/bin")
    rc, log = run_gate(root, env, "--skip-4b", "--skip-bench")
    _, doc, _ = collect(log, tmp_path)
    assert doc["gpu"] is None and doc["gpu_error"] == "nvidia-smi not found"


def test_gate_script_usage(tmp_path):
    p = subprocess.run(["bash", str(GATE), "--bogus"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "unknown argument" in p.stderr
    p = subprocess.run(["bash", str(GATE), "--budget", "soon"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "whole seconds" in p.stderr
