"""tools/bench.py and bench/peer_bench.py: argument errors, the GGUF manifest, the
dispersion gate, and tiny end-to-end runs on the committed-recipe tiny models (built by
`make tiny-models`). The llama.cpp part is skipped only when llama_cpp is not importable.
Uses $KIPP_BIN (default build/kipp), which must have --prompt-tokens/--stats-json."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from bench import benchlib
from tools import bench as kbench

BENCH = "tools.bench"        # run as python -m MODULE from the repository root
PEER = "bench.peer_bench"
KIPP = os.environ.get("KIPP_BIN", "build/kipp")
TIED = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"
UNTIED = "models/tiny-untied/kipp-tiny-untied-bf16.gguf"
Q8 = "models/tiny-tied/kipp-tiny-tied-q8_0.gguf"


def need(path: str) -> None:
    if not (ROOT / path).exists():
        pytest.skip(f"{path} not built (make tiny-models / make cpu)")


def run(module, *args, env_extra=None, timeout=300):
    env = dict(os.environ)
    env["KIPP_BENCH_HASH_CACHE"] = env.get("KIPP_BENCH_HASH_CACHE_TEST", "/dev/null/none")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture()
def hash_cache(tmp_path, monkeypatch):
    path = tmp_path / "hash-cache.json"
    monkeypatch.setenv("KIPP_BENCH_HASH_CACHE_TEST", str(path))
    monkeypatch.setenv("KIPP_BENCH_HASH_CACHE", str(path))
    return path


# ---- argument errors ---------------------------------------------------------------------

@pytest.mark.parametrize("module", [BENCH, PEER])
@pytest.mark.parametrize("args,pattern", [
    ([], "the following arguments are required: --model"),
    (["--model", TIED], "one of the arguments --prompt --prompt-tokens is required"),
    (["--model", TIED, "--prompt", "x", "--prompt-tokens", "4"], "not allowed with argument"),
    (["--model", TIED, "--prompt-tokens", "0"], "--prompt-tokens expects an integer >= 1, got '0'"),
    (["--model", TIED, "--prompt", "x", "--runs", "0"], "--runs expects an integer >= 1"),
    (["--model", TIED, "--prompt", "x", "--decode", "abc"], "--decode expects an integer >= 1, got 'abc'"),
    (["--model", TIED, "--prompt", "x", "--warmup", "-1"], "--warmup expects an integer >= 0"),
    (["--model", TIED, "--prompt", "x", "--threads", "0"], "--threads expects an integer >= 1"),
    (["--model", "models/nope.gguf", "--prompt", "x"], "--model models/nope.gguf: no such file"),
    (["--model", TIED, "--prompt", "x", "--binary", "build/no-such-kipp"],
     "--binary build/no-such-kipp: not an executable file"),
    (["--model", TIED, "--prompt", "x", "--binary", KIPP, "--output", "/no/such/dir/x.json"],
     "--output /no/such/dir/x.json: directory /no/such/dir does not exist"),
    (["--model", TIED, "--prompt", "x", "--kv-type", "q8_0"], "--kv-type: invalid choice: 'q8_0'"),
])
def test_argument_errors(module, args, pattern):
    r = run(module, *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert pattern in r.stderr, r.stderr


def test_prompt_longer_than_context(hash_cache):
    need(TIED)
    need(KIPP)
    r = run(BENCH, "--model", TIED, "--binary", KIPP, "--prompt-tokens", "600", "--decode", "4",
            "--no-membw", "--runs", "1")
    assert r.returncode == 1, r.stderr
    assert "needs a context of 605" in r.stderr and "trained context 512" in r.stderr, r.stderr


def test_backend_error_is_reported(hash_cache):
    need(TIED)
    need(KIPP)
    r = run(BENCH, "--model", TIED, "--binary", KIPP, "--prompt-tokens", "8", "--decode", "2",
            "--no-membw", "--runs", "1", "--warmup", "0", "--backend", "warp")
    assert r.returncode == 1 and "unknown backend 'warp'" in r.stderr, r.stderr


# ---- pieces ------------------------------------------------------------------------------

def test_manifest_tied_untied_and_types(hash_cache):
    for p in (TIED, UNTIED, Q8):
        need(p)
    t = benchlib.model_manifest(str(ROOT / TIED))
    u = benchlib.model_manifest(str(ROOT / UNTIED))
    q = benchlib.model_manifest(str(ROOT / Q8))
    assert t["architecture"] == "qwen3" and t["shape"]["block_count"] == 2
    assert t["tied_embeddings"] and not u["tied_embeddings"]
    assert t["n_vocab"] == 151936 and t["n_params"] == 9847232
    # tied: the embedding table is the output matrix, read once per token
    assert t["weight_bytes_read_per_decoded_token"] == t["weight_bytes"]
    emb = 151936 * 96 * 2  # untied: token_embd (bf16) is only gathered
    assert u["weight_bytes_read_per_decoded_token"] == u["weight_bytes"] - emb
    assert set(t["tensor_types"]) == {"BF16", "F32"} and "Q8_0" in q["tensor_types"]
    assert q["weight_bytes"] < t["weight_bytes"]
    assert t["weight_bytes"] <= t["file_bytes"]
    assert len(t["sha256"]) == 64 and t["sha256"] == benchlib.sha256_file(str(ROOT / TIED))
    cache = json.loads(hash_cache.read_text())
    assert any(v["sha256"] == t["sha256"] for v in cache.values())


def test_gguf_header_rejects_non_gguf():
    with pytest.raises(ValueError, match="bad magic"):
        benchlib.read_gguf_header(str(ROOT / "README.md"))


def test_run_measured_reports_child_peak_rss():
    # A child's ru_maxrss starts at its parent's RSS (exec records the high-water mark of the
    # address space it leaves, which after vfork is the parent's), and pytest's RSS depends on
    # the tests before this one (1 GB after test_random_model). So the harness is a fresh
    # Python here: a 96 MiB child, then `true`, which must report its own small figure.
    code = ("import json, sys; from bench import benchlib; "
            "big = benchlib.run_measured([sys.executable, '-c', "
            "\"b = bytearray(96 << 20); b[::4096] = b'x' * len(b[::4096]); print('ok')\"]); "
            "small = benchlib.run_measured(['true']); "
            "print(json.dumps([big['rc'], big['stdout'], big['peak_rss_bytes'], small['peak_rss_bytes']]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rc, stdout, big, small = json.loads(out.stdout)
    assert rc == 0 and stdout.strip() == "ok"
    assert big >= 96 << 20
    assert small < 64 << 20  # its own, not the earlier child's
    assert benchlib.run_measured(["sleep", "5"], timeout=0.3)["rc"] != 0


def test_synthetic_ids_match_cli():
    need(TIED)
    need(KIPP)
    out = subprocess.run([str(ROOT / KIPP), "-m", TIED, "--prompt-tokens", "40", "--tokenize"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in out] == kbench.synthetic_ids(40, 151936)
    assert len(set(kbench.synthetic_ids(512, 151936))) == 512


def test_dispersion_gate(tmp_path):
    out = tmp_path / "r.json"

    class A:
        output, allow_noisy = str(out), False
    assert benchlib.dispersion([10.0]) == 0.0
    assert benchlib.dispersion([9.0, 10.0, 12.0]) == pytest.approx(0.3)
    assert kbench.finish({}, [0.05, 0.3], A) == kbench.EXIT_NOISY and not out.exists()
    assert kbench.finish({}, [0.05, 0.09], A) == 0 and json.loads(out.read_text())["noisy"] is False
    A.allow_noisy = True
    assert kbench.finish({}, [0.3], A) == 0
    rec = json.loads(out.read_text())
    assert rec["noisy"] is True and rec["allow_noisy"] is True


# ---- end to end --------------------------------------------------------------------------

def test_bench_end_to_end(tmp_path, hash_cache):
    need(UNTIED)
    need(KIPP)
    out = tmp_path / "rec.json"
    r = run(BENCH, "--backend", "cpu", "--model", UNTIED, "--binary", KIPP, "--prompt-tokens", "24",
            "--decode", "6", "--warmup", "1", "--runs", "2", "--threads", "2", "--allow-noisy",
            "--output", out)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    p = rec["provenance"]
    assert len(p["commit"]) == 40 and isinstance(p["dirty"], bool)
    assert p["binary"]["path"] == KIPP and len(p["binary"]["sha256"]) == 64
    assert rec["build"]["cc_version"] and rec["build"]["binary_version"][0].startswith("kipp ")
    assert "avx2" in p["hardware"]["flags"] or p["hardware"]["flags"] is not None
    assert p["hardware"]["logical_cpus"] >= 1 and p["hardware"]["mem_total_kib"] > 0
    assert rec["model"]["sha256"] == benchlib.sha256_file(str(ROOT / UNTIED))
    s = rec["settings"]
    assert s["prompt"] == {"kind": "synthetic", "n": 24} and s["prompt_tokens"] == 24
    assert s["decode_steps"] == 6 and s["threads"] == 2 and s["n_ctx"] == 256
    k = rec["kipp"]
    assert len(k["runs"]) == 2 and len(k["warmup_runs"]) == 1
    for run_ in k["runs"]:
        assert run_["prefill_tokens"] == 24 and run_["decode_tokens"] == 6
        assert run_["prefill_tok_s"] > 0 and run_["decode_tok_s"] > 0 and run_["peak_rss_bytes"] > 0
        assert run_["decode_effective_gbps"] == pytest.approx(
            rec["model"]["weight_bytes_read_per_decoded_token"] * run_["decode_tok_s"] / 1e9)
    for key in ("prefill_tok_s", "decode_tok_s"):
        sm = k["summary"][key]
        assert sm["min"] <= sm["median"] <= sm["max"] and sm["n"] == 2
        assert k["dispersion"][key] == pytest.approx((sm["max"] - sm["min"]) / sm["median"])
    m = k["memory"]
    # the cpu backend's default KV type is f16: half of the f32 1536 bytes per token
    assert m["kv_bytes_per_token"] == 768 and m["kv_pool_bytes"] == 768 * 256
    assert m["model_file_bytes"] == os.path.getsize(ROOT / UNTIED) and m["rss_over_file_plus_kv"] > 0
    assert rec["dispersion_limit"] == 0.10 and isinstance(rec["noisy"], bool)
    assert len(rec["load_average"]["before"]) == 3 and len(rec["load_average"]["after"]) == 3


def test_bench_prompt_text_to_stdout(hash_cache):
    need(TIED)
    need(KIPP)
    r = run(BENCH, "--model", TIED, "--binary", KIPP, "--prompt", "The capital of France is",
            "--decode", "3", "--warmup", "0", "--runs", "1", "--no-membw", "--no-hash")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["settings"]["prompt"]["kind"] == "text" and rec["settings"]["prompt_tokens"] == 5
    assert rec["model"]["sha256"] is None and rec["memory_bandwidth"] is None


@pytest.mark.parametrize("kv_type,used,bytes_per_token", [(None, "f16", 768), ("f32", "f32", 1536),
                                                          ("bf16", "bf16", 768)])
def test_bench_kv_type(kv_type, used, bytes_per_token, hash_cache):
    """--kv-type reaches kipp's command line and the record; without it kipp's cpu default
    (f16) runs and the record says so."""
    need(UNTIED)
    need(KIPP)
    extra = ["--kv-type", kv_type] if kv_type else []
    r = run(BENCH, "--model", UNTIED, "--binary", KIPP, "--prompt-tokens", "8", "--decode", "2",
            "--warmup", "0", "--runs", "1", "--no-membw", "--no-hash", *extra)
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["settings"]["kv_type"] == kv_type and rec["settings"]["kv_type_used"] == used
    cmd = rec["kipp"]["command"]
    if kv_type:
        assert cmd[cmd.index("--kv-type") + 1] == kv_type
    else:
        assert "--kv-type" not in cmd
    assert rec["kipp"]["runs"][0]["kv_type"] == used
    assert rec["kipp"]["memory"]["kv_bytes_per_token"] == bytes_per_token


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama_cpp not installed")
def test_peer_end_to_end(tmp_path, hash_cache):
    need(TIED)
    need(KIPP)
    out = tmp_path / "peer.json"
    r = run(PEER, "--model", TIED, "--binary", KIPP, "--prompt-tokens", "16", "--decode", "4",
            "--warmup", "1", "--runs", "2", "--threads", "2", "--no-membw", "--allow-noisy",
            "--allow-busy", "--idle-wait", "0", "--output", out)  # test machines are not idle
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    peer = rec["peer"]
    assert peer["check"]["checked"] and not peer["check"]["crashed"], peer["check"]
    assert peer["llama_cpp_python"] and peer["system_info"]
    assert peer["ids_sha256"] == rec["settings"]["prompt_ids_sha256"]
    assert peer["settings"]["n_batch"] == 16 and peer["settings"]["n_threads"] == 2
    notes = peer["settings"]["log_notes"]  # what llama.cpp resolved: flash attention, KV types
    assert any("flash_attn" in n for n in notes) and any("K (f16)" in n for n in notes), notes
    assert len(peer["runs"]) == 2 and len(rec["kipp"]["runs"]) == 2
    for run_ in peer["runs"]:
        assert run_["prefill_tokens"] == 16 and run_["decode_tokens"] == 4
        assert run_["peak_rss_bytes"] > 0
    rt = rec["ratios_kipp_over_llama"]
    k, lsum = rec["kipp"]["summary"], peer["summary"]
    assert rt["decode_tok_s_median"] == pytest.approx(k["decode_tok_s"]["median"] / lsum["decode_tok_s"]["median"])
    assert rt["prefill_tok_s_kipp_worst_over_llama_best"] == pytest.approx(
        k["prefill_tok_s"]["min"] / lsum["prefill_tok_s"]["max"])
