"""bench/kv_type_bench.py: argument errors, the ratios and the target verdict, and tiny
end-to-end runs on the tiny checkpoints (Kipp only, and with llama.cpp when llama_cpp is
importable). Uses $KIPP_BIN (default build/kipp)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import kv_type_bench as kvb

ROOT = Path(__file__).resolve().parents[2]
MODULE = "bench.kv_type_bench"  # run as python -m MODULE from the repository root
KIPP = os.environ.get("KIPP_BIN", "build/kipp")
TIED = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"


def need(path: str) -> None:
    if not (ROOT / path).exists():
        pytest.skip(f"{path} not built (make tiny-models / make cpu)")


def run(*args, timeout=300):
    env = dict(os.environ, KIPP_BENCH_HASH_CACHE="/dev/null/none")
    return subprocess.run([sys.executable, "-m", MODULE, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("args,pattern", [
    (["--contexts", "512,0"], "--contexts expects an integer >= 1, got '0'"),
    (["--contexts", "2048,512"], "--contexts expects ascending distinct values, got '2048,512'"),
    (["--contexts", "512,512"], "--contexts expects ascending distinct values"),
    (["--kv-types", "f16,q8_0"], "--kv-types expects a comma-separated subset of f32,f16,bf16"),
    (["--kv-types", "f32,f32"], "--kv-types lists a type twice"),
    (["--kv-types", "f16,bf16"], "--kv-types must include f32"),
    (["--runs", "0"], "--runs expects an integer >= 1, got '0'"),
    (["--runs", "512:3,2048"], "--runs expects N or CTX:N,..., got '512:3,2048'"),
    (["--runs", "512:3,1024:2"], "--runs names context(s) 1024 not in --contexts"),
    (["--target-context", "1024"], "--target-context 1024 is not one of --contexts"),
    (["--warmup", "0"], "--peer-wait auto checks the policies in the warm-up: it needs --warmup >= 1"),
    (["--peer-wait", "spin"], "--peer-wait: invalid choice: 'spin'"),
    (["--model", "models/nope.gguf"], "--model models/nope.gguf: no such file"),
    # an existing model (the default 0.6B file is not in a fresh clone), so the binary is checked
    (["--model", "models/tiny-tied/kipp-tiny-tied-bf16.gguf", "--binary", "build/no-such-kipp"],
     "--binary build/no-such-kipp: not an executable file"),
])
def test_argument_errors(args, pattern):
    r = run(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert pattern in r.stderr, r.stderr


def test_runs_spec_and_defaults():
    a = kvb.build_parser().parse_args(["--runs", "512:5,4096:2"])
    assert kvb.runs_for(a, 512) == 5 and kvb.runs_for(a, 4096) == 2 and kvb.runs_for(a, 2048) == 3
    a = kvb.build_parser().parse_args(["--runs", "4"])
    assert kvb.runs_for(a, 512) == 4
    a = kvb.build_parser().parse_args([])
    assert a.contexts == [512, 2048, 4096] and a.kv_types == ["f32", "f16", "bf16"]
    assert [kvb.runs_for(a, n) for n in a.contexts] == [5, 3, 3] and a.target_context == 4096


def summ(lo, med, hi):
    return {"min": lo, "median": med, "max": hi}


def test_ratios_and_target():
    kipp = {t: {"summary": {"decode_tok_s": s}} for t, s in (
        ("f32", summ(9, 10, 11)), ("f16", summ(14, 15, 16)), ("bf16", summ(11, 12, 13)))}
    llama = {"summary": {"decode_tok_s": summ(10, 11, 12)}}
    r = kvb.context_ratios(kipp, llama)
    assert r["f16_over_f32"] == pytest.approx({"median": 1.5, "worst": 14 / 11})
    assert r["bf16_over_f16"] == pytest.approx({"median": 0.8, "worst": 11 / 16})
    assert r["kipp_f16_over_llama"] == pytest.approx({"median": 15 / 11, "worst": 14 / 12})
    assert set(r) == {"f16_over_f32", "bf16_over_f32", "bf16_over_f16", "kipp_f32_over_llama",
                      "kipp_f16_over_llama", "kipp_bf16_over_llama"}
    t = kvb.target_verdict(r, 4096)
    assert t["f16_over_f32"]["met_median"] and not t["f16_over_f32"]["met_worst"]  # 1.27 < 1.3
    assert t["f16_over_llama"]["met_median"] and not t["f16_over_llama"]["met_worst"]
    assert t["met_median"] and not t["met_worst"]
    # no peer: no ratio to llama.cpp, and the target (which needs one) is not met
    r = kvb.context_ratios(kipp, None)
    assert not any("llama" in k for k in r)
    t = kvb.target_verdict(r, 4096)
    assert t["f16_over_llama"] is None and not t["met_median"] and not t["met_worst"]


def check_record(rec: dict, peer: bool) -> None:
    assert rec["settings"]["contexts"] == [8, 24] and rec["settings"]["kv_types"] == ["f32", "f16", "bf16"]
    assert len(rec["provenance"]["commit"]) == 40 and rec["model"]["sha256"] is None
    assert len(rec["load_average"]["before"]) == 3
    for c, rounds in zip(rec["contexts"], (2, 1)):
        assert c["rounds"] == rounds and len(c["load_average_per_round"]) == rounds + c["warmup_rounds"]
        for t, bytes_per_token in (("f32", 1024), ("f16", 512), ("bf16", 512)):  # tiny-tied
            k = c["kipp"][t]
            assert k["kv_type_used"] == t and k["memory"]["kv_bytes_per_token"] == bytes_per_token
            assert k["command"][k["command"].index("--kv-type") + 1] == t
            assert len(k["runs"]) == rounds and all(r["decode_tokens"] == 3 for r in k["runs"])
            assert all(r["prefill_tokens"] == c["prompt_tokens"] for r in k["runs"])
        assert (c["llama"] is not None) == peer
        if peer:
            assert c["llama"]["ids_sha256"] == c["prompt_ids_sha256"] and len(c["llama"]["runs"]) == rounds
            assert any("flash_attn" in n for n in c["llama"]["log_notes"])
    assert rec["contexts"][0]["warmup_rounds"] == 1 and rec["contexts"][1]["warmup_rounds"] == 0
    t = rec["target"]
    assert t["context"] == 24 and isinstance(t["met_median"], bool) and rec["summary"]


def test_end_to_end_kipp_only(tmp_path):
    need(TIED)
    need(KIPP)
    out = tmp_path / "kv.json"
    r = run("--model", TIED, "--binary", KIPP, "--contexts", "8,24", "--runs", "8:2,24:1",
            "--decode", "3", "--target-context", "24", "--threads", "2", "--no-peer", "--no-hash",
            "--allow-noisy", "--output", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    check_record(rec, peer=False)
    assert rec["peer"] is None


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama_cpp not installed")
@pytest.mark.full  # make test-full only: the test tier's time budget (docs/testing.md)
def test_end_to_end_with_llama(tmp_path):
    need(TIED)
    need(KIPP)
    out = tmp_path / "kv.json"
    r = run("--model", TIED, "--binary", KIPP, "--contexts", "8,24", "--runs", "8:2,24:1",
            "--decode", "3", "--target-context", "24", "--threads", "2", "--no-hash",
            "--peer-check-runs", "1", "--allow-noisy", "--output", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    check_record(rec, peer=True)
    p = rec["peer"]
    chk = p["wait_policy_check"]
    assert set(chk["runs"]) == {"default", "passive"} and p["wait_policy"] == chk["chosen"]
    assert chk["decode_tok_s_median"][chk["chosen"]] == max(chk["decode_tok_s_median"].values())
    assert p["llama_cpp_python"] and p["system_info"]


# ---- bench/idle_rss_bench.py (the server's idle RSS before/after, same record family) ----

RSS = "bench.idle_rss_bench"
SERVER = os.environ.get("KIPP_SERVER_BIN", "build/kipp-server")


def run_rss(*args, timeout=300):
    env = dict(os.environ, KIPP_BENCH_HASH_CACHE="/dev/null/none")
    return subprocess.run([sys.executable, "-m", RSS, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("args,pattern", [
    ([], "the following arguments are required: --server"),
    (["--server", "build/kipp-server"], "--server expects LABEL=PATH, got 'build/kipp-server'"),
    (["--server", "a=build/no-such-server"], "--server build/no-such-server: not an executable file"),
    (["--server", f"a={SERVER}", "--server", f"a={SERVER}"], "--server labels must differ"),
    (["--server", f"a={SERVER}", "--model", "models/nope.gguf"], "--model models/nope.gguf: no such file"),
])
def test_rss_argument_errors(args, pattern):
    if "no-such" not in " ".join(args) and args:
        need(SERVER)
    r = run_rss(*args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert pattern in r.stderr, r.stderr


def test_rss_end_to_end(tmp_path):
    need(TIED)
    need(SERVER)
    out = tmp_path / "rss.json"
    r = run_rss("--server", f"one={SERVER}", "--server", f"two={SERVER}", "--model", TIED,
                "--runs", "1", "--idle", "0.2", "--max-tokens", "2", "--no-hash", "--output", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    for lb in ("one", "two"):
        s = rec["servers"][lb]
        assert s["binary"]["path"] == SERVER and len(s["binary"]["sha256"]) == 64
        assert len(s["source"]["commit"]) == 40 and any("listening on" in ln for ln in s["startup_lines"])
        (run_,) = s["runs"]
        assert 0 < run_["idle_vmrss_bytes"] <= run_["idle_vmhwm_bytes"]
        assert run_["completion_tokens"] == 2 and run_["exit_code"] == 0
    ratios = rec["ratios_over_one"]["two"]
    assert ratios["idle_vmrss_bytes"] == pytest.approx(
        rec["servers"]["two"]["summary"]["idle_vmrss_bytes"]["median"]
        / rec["servers"]["one"]["summary"]["idle_vmrss_bytes"]["median"])
