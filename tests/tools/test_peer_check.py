"""bench/peer_bench.py's peer check: llama_print_system_info() parsing, ggml's ISA features
against /proc/cpuinfo flags, the check run's outcome (crash by signal, timeout, error,
success) and the refusal it leads to, the idle rule for 2+ threads; then the whole harness
refusing a crashing peer (a stand-in interpreter that dies by SIGILL) and a busy machine,
and one real check against the installed llama-cpp-python on the tiny model (skipped when
llama_cpp is not importable). Uses $KIPP_BIN (default build/kipp)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import peer_bench as pb

ROOT = Path(__file__).resolve().parents[2]
KIPP = os.environ.get("KIPP_BIN", "build/kipp")
TIED = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"

# an AVX2 machine's build (this project's 2-core VM, GGML_NATIVE)
SYSINFO_AVX2 = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | "
                "BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
# a GGML_NATIVE build on a Sapphire Rapids host: AVX512 and AMX compiled in
SYSINFO_AMX = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | "
               "BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | "
               "AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
X86_BASE = "fpu vme sse sse2 pni ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2"
CPUINFO_AVX2 = f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {X86_BASE}\n"
# AVX512 with VNNI/BF16 but no AMX (e.g. a VM that hides AMX, or Zen 4)
CPUINFO_AVX512 = (f"processor\t: 0\nflags\t\t: {X86_BASE} avx512f avx512bw avx512vl avx512vbmi "
                  "avx512_vnni avx512_bf16\n\nprocessor\t: 1\nflags\t\t: sse\n")
CPUINFO_AMX = (f"flags\t\t: {X86_BASE} avx512f avx512bw avx512vl avx512vbmi avx512_vnni "
               "avx512_bf16 amx_bf16 amx_tile amx_int8\n")


# ---- system_info and CPU flags -------------------------------------------------------------

def test_parse_system_info():
    f = pb.parse_system_info(SYSINFO_AMX)
    assert f["AVX512"] is True and f["AMX_INT8"] is True and f["OPENMP"] is True
    assert list(f)[:3] == ["SSE3", "SSSE3", "AVX"] and len(f) == 15
    f = pb.parse_system_info("CPU : AVX2 = 1 | AVX512 = 0 | SVE_CNT = 32 | X = y |")
    assert f == {"AVX2": True, "AVX512": False, "SVE_CNT": True}
    # other backends' sections are not CPU features; no header counts as CPU
    f = pb.parse_system_info("CUDA : ARCHS = 890 | USE_GRAPHS = 1 | CPU : SSE3 = 1 | AVX2 = 1 |")
    assert f == {"SSE3": True, "AVX2": True}
    assert pb.parse_system_info("AVX = 1 | AVX2 = 0 |") == {"AVX": True, "AVX2": False}
    # a ':' inside a value is not a section header
    assert pb.parse_system_info("CPU : AVX2 = 1 | B = x:y | AVX = 1 |") == {"AVX2": True, "AVX": True}
    assert pb.parse_system_info("") == {}


def test_parse_cpu_flags():
    flags = pb.parse_cpu_flags(CPUINFO_AVX512)
    assert {"avx2", "avx512f", "avx512_vnni", "pni"} <= flags and "amx_tile" not in flags
    assert "sse" in flags and len(flags) == len(X86_BASE.split()) + 6  # the first processor's
    arm = "processor\t: 0\nFeatures\t: fp asimd asimdhp asimddp i8mm sve\n"
    assert pb.parse_cpu_flags(arm) == {"fp", "asimd", "asimdhp", "asimddp", "i8mm", "sve"}
    assert pb.parse_cpu_flags("model name : x\n") == set()


def test_isa_amx_build_on_cpu_without_amx():
    isa = pb.compare_isa(pb.parse_system_info(SYSINFO_AMX),
                         pb.parse_cpu_flags(CPUINFO_AVX512), "x86_64")
    assert isa["ggml_uses_cpu_lacks"] == ["AMX_INT8"]
    assert isa["cpu_has_ggml_unused"] == []
    assert "amx_tile" not in isa["cpu_flags"] and "avx512_bf16" in isa["cpu_flags"]
    assert "fpu" not in isa["cpu_flags"]  # only ISA flags the comparison knows
    assert isa["ggml_features"]["AMX_INT8"] is True


def test_isa_amx_needs_the_tile_unit():
    flags = pb.parse_cpu_flags(CPUINFO_AMX) - {"amx_tile"}
    isa = pb.compare_isa(pb.parse_system_info(SYSINFO_AMX), flags, "x86_64")
    assert isa["ggml_uses_cpu_lacks"] == ["AMX_INT8"]
    isa = pb.compare_isa(pb.parse_system_info(SYSINFO_AMX), pb.parse_cpu_flags(CPUINFO_AMX), "x86_64")
    assert isa["ggml_uses_cpu_lacks"] == [] and isa["cpu_has_ggml_unused"] == []
    assert {"amx_tile", "amx_int8", "amx_bf16"} <= set(isa["cpu_flags"])


def test_isa_avx2_build_on_avx512_cpu_is_unused_not_missing():
    isa = pb.compare_isa(pb.parse_system_info(SYSINFO_AVX2),
                         pb.parse_cpu_flags(CPUINFO_AVX512), "x86_64")
    assert isa["ggml_uses_cpu_lacks"] == []
    assert isa["cpu_has_ggml_unused"] == ["AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"]


def test_isa_matching_build():
    isa = pb.compare_isa(pb.parse_system_info(SYSINFO_AVX2), pb.parse_cpu_flags(CPUINFO_AVX2), "x86_64")
    assert isa["ggml_uses_cpu_lacks"] == [] and isa["cpu_has_ggml_unused"] == []
    arm = pb.compare_isa(pb.parse_system_info("CPU : NEON = 1 | ARM_FMA = 1 | DOTPROD = 1 |"),
                         {"asimd", "asimddp", "i8mm"}, "aarch64")
    assert arm["ggml_uses_cpu_lacks"] == [] and arm["cpu_has_ggml_unused"] == ["MATMUL_INT8"]


# ---- the check run's outcome ---------------------------------------------------------------

def stages(*names, sysinfo=SYSINFO_AMX):
    lines = [json.dumps({"stage": "started", "system_info": sysinfo})]
    lines += [json.dumps({"stage": n}) for n in names]
    return "\n".join(lines) + "\n"


RESULT = {"prefill_tokens": 32, "prefill_tok_s": 812.5, "decode_tokens": 16, "decode_tok_s": 41.25}
SIGILL_RUN = {"rc": -4, "stdout": stages("backend_ready", "model_loaded", "context_ready"),
              "stderr": "llama_context: n_ctx = 256\nggml_amx_init: AMX enabled\n", "wall_s": 1.5}


def test_outcome_crash_by_sigill():
    o = pb.peer_check_outcome(SIGILL_RUN, 3600)
    assert o["crashed"] is True and o["signal"] == "SIGILL" and o["timed_out"] is False
    assert o["stage_reached"] == "context_ready" and o["result"] is None
    assert "SIGILL" in o["error"] and "the prompt's llama_decode" in o["error"]
    assert o["system_info"] == SYSINFO_AMX
    assert o["stderr_tail"].endswith("ggml_amx_init: AMX enabled")


def test_outcome_crash_through_a_shell_and_before_any_stage():
    o = pb.peer_check_outcome({"rc": 132, "stdout": "", "stderr": "Illegal instruction\n",
                               "wall_s": 0.2}, 3600)
    assert o["crashed"] and o["signal"] == "SIGILL" and o["stage_reached"] is None
    assert "importing llama_cpp" in o["error"] and o["system_info"] is None


def test_outcome_timeout_is_not_a_crash_but_an_oom_kill_is():
    o = pb.peer_check_outcome({"rc": -9, "stdout": stages("backend_ready"), "stderr": "",
                               "wall_s": 60.01}, 60)
    assert o["timed_out"] and not o["crashed"] and o["error"] == "timed out after 60 s"
    o = pb.peer_check_outcome({"rc": -9, "stdout": stages("backend_ready"), "stderr": "",
                               "wall_s": 3.0}, 60)
    assert o["crashed"] and o["signal"] == "SIGKILL" and not o["timed_out"]


def test_outcome_worker_error_and_success():
    err = stages("backend_ready") + json.dumps({"error": "llama.cpp could not load m.gguf"}) + "\n"
    o = pb.peer_check_outcome({"rc": 1, "stdout": err, "stderr": "", "wall_s": 0.5}, 60)
    assert not o["crashed"] and o["error"] == "llama.cpp could not load m.gguf"
    o = pb.peer_check_outcome({"rc": 1, "stdout": "", "stderr": "Traceback", "wall_s": 0.5}, 60)
    assert not o["crashed"] and o["error"] == "exit 1 without a result"
    ok = stages("backend_ready", "model_loaded", "context_ready", "prefill_done",
                "decode_done") + json.dumps(RESULT) + "\n"
    o = pb.peer_check_outcome({"rc": 0, "stdout": ok, "stderr": "", "wall_s": 0.9}, 60)
    assert o["error"] is None and not o["crashed"] and o["result"] == RESULT
    assert o["stage_reached"] == "decode_done"


# ---- peer.check and the refusal ------------------------------------------------------------

def test_crash_check_refuses_with_the_rebuild_command():
    flags = pb.parse_cpu_flags(CPUINFO_AVX512)
    check = pb.build_check(pb.peer_check_outcome(SIGILL_RUN, 3600), flags, "x86_64")
    assert check["checked"] and check["ok"] is False and check["crashed"] is True
    assert check["run"]["signal"] == "SIGILL" and check["run"]["rc"] == -4
    assert check["sanity_1t"] is None
    assert check["isa"]["ggml_uses_cpu_lacks"] == ["AMX_INT8"]
    msg = pb.check_refusal(check, flags)
    assert "crashed" in msg and "SIGILL" in msg and "No record is written" in msg
    assert "ggml uses AMX_INT8, which this CPU lacks" in msg
    assert ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON '
            '-DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"') in msg
    assert msg.rstrip().endswith("ggml_amx_init: AMX enabled")
    # the AMX crash on a CPU that has AMX (a VM that does not grant the tile state)
    amx = pb.parse_cpu_flags(CPUINFO_AMX)
    msg = pb.check_refusal(pb.build_check(pb.peer_check_outcome(SIGILL_RUN, 3600), amx, "x86_64"), amx)
    assert "AMX path dies with SIGILL on some VMs" in msg


def test_rebuild_hint_for_other_cpus():
    hint = pb.rebuild_hint(pb.parse_cpu_flags(CPUINFO_AVX2))
    assert "-DGGML_NATIVE=OFF" in hint and "-DGGML_AVX2=ON" in hint
    assert "-DGGML_AVX512=ON" not in hint and "-DGGML_AMX_INT8=OFF" in hint
    assert "tools/requirements-bench.txt" in hint
    # AVX512F without VNNI and BF16 (Skylake-X): asking for them would build a SIGILL
    hint = pb.rebuild_hint({"avx2", "avx512f", "avx512bw"})
    assert "-DGGML_AVX512=ON" in hint and "VNNI" not in hint and "BF16" not in hint
    hint = pb.rebuild_hint({"sse4_2", "avx"})
    assert "-DGGML_AVX2=OFF" in hint and "-DGGML_FMA=OFF" in hint


def test_failed_but_not_crashed_check_refuses_without_the_rebuild():
    o = pb.peer_check_outcome({"rc": 1, "stdout": json.dumps({"error": "no model"}), "stderr": "",
                               "wall_s": 0.5}, 60)
    msg = pb.check_refusal(pb.build_check(o, set(), "x86_64"), set())
    assert "failed: no model" in msg and "CMAKE_ARGS" not in msg


def test_passing_check_records_the_sanity_figure():
    ok = stages("decode_done", sysinfo=SYSINFO_AVX2) + json.dumps(RESULT) + "\n"
    flags = pb.parse_cpu_flags(CPUINFO_AVX2)
    check = pb.build_check(pb.peer_check_outcome({"rc": 0, "stdout": ok, "stderr": "",
                                                  "wall_s": 0.9}, 60), flags, "x86_64")
    assert check["checked"] and check["ok"] and check["crashed"] is False
    assert check["sanity_1t"] == {"threads": 1, "prompt_tokens": 32, "decode_tokens": 16,
                                  "prefill_tok_s": 812.5, "decode_tok_s": 41.25, "wall_s": 0.9}
    assert "result" not in check["run"] and check["run"]["error"] is None
    assert pb.check_refusal(check, flags) is None


def test_skipped_check_is_marked_unchecked():
    check = pb.build_check(None, pb.parse_cpu_flags(CPUINFO_AVX512), "x86_64", SYSINFO_AVX2)
    assert check["checked"] is False and check["ok"] is None and check["sanity_1t"] is None
    assert check["isa"]["cpu_has_ggml_unused"][0] == "AVX512"  # still compared
    assert "not committed" in check["note"]
    assert pb.check_refusal(check, set()) is None


# ---- the idle rule ---------------------------------------------------------------------------

def test_idle_decision():
    d = pb.idle_decision(0.59, threads=2, usable_cpus=2, allow_busy=False)
    assert d["threshold"] == 0.5 and d["busy"] and d["refused"]
    d = pb.idle_decision(0.59, threads=2, usable_cpus=2, allow_busy=True)
    assert d["busy"] and not d["refused"]
    assert not pb.idle_decision(0.45, 2, 2, False)["busy"]
    # 1 thread: only marked, never refused; one free CPU admits 0.5 more
    d = pb.idle_decision(1.2, threads=1, usable_cpus=2, allow_busy=False)
    assert d["threshold"] == 1.0 and d["busy"] and not d["refused"]
    d = pb.idle_decision(4.5, threads=8, usable_cpus=16, allow_busy=False)
    assert d["threshold"] == 4.5 and not d["busy"]
    assert pb.idle_decision(4.51, 8, 16, False)["refused"]
    assert pb.idle_decision(0.6, threads=4, usable_cpus=2, allow_busy=False)["threshold"] == 0.5


class FakeClock:
    def __init__(self, loads):
        self.t, self.loads, self.sleeps = 0.0, list(loads), []

    def getload(self):
        return (self.loads.pop(0) if len(self.loads) > 1 else self.loads[0], 0.0, 0.0)

    def sleep(self, s):
        self.sleeps.append(s)
        self.t += s


def test_wait_for_idle_until_the_load_falls():
    c = FakeClock([1.9, 1.2, 0.8, 0.45, 9.0])
    logs = []
    d = pb.wait_for_idle(2, 2, False, 120, getload=c.getload, sleep=c.sleep,
                         clock=lambda: c.t, log=logs.append)
    assert not d["refused"] and d["load_1min"] == 0.45 and d["load_1min_first"] == 1.9
    assert c.sleeps == [pb.IDLE_POLL_S] * 3 and d["waited_s"] == 3 * pb.IDLE_POLL_S
    assert len(logs) == 1 and "1.90 > 0.50" in logs[0]


def test_wait_for_idle_gives_up_and_does_not_wait_when_not_needed():
    c = FakeClock([2.0])
    d = pb.wait_for_idle(2, 2, False, 12, getload=c.getload, sleep=c.sleep, clock=lambda: c.t)
    assert d["refused"] and d["waited_s"] == 12 and c.sleeps == [5.0, 5.0, 2.0]
    msg = pb.busy_refusal(d)
    assert "load average 2.00" in msg and "exceeds 0.50" in msg and "--allow-busy" in msg
    for args in ((2, 2, True, 120), (1, 2, False, 120), (2, 2, False, 0)):
        c = FakeClock([2.0])
        pb.wait_for_idle(*args, getload=c.getload, sleep=c.sleep, clock=lambda: c.t)
        assert c.sleeps == [], args


# ---- the harness ----------------------------------------------------------------------------

def test_busy_machine_refuses_a_two_thread_record(tmp_path, monkeypatch, capsys):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    out = tmp_path / "peer.json"
    monkeypatch.setattr(os, "getloadavg", lambda: (1.75, 1.0, 1.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    rc = pb.main(["--model", str(model), "--binary", sys.executable, "--prompt-tokens", "4",
                  "--threads", "2", "--idle-wait", "0", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == pb.EXIT_BUSY == 4 and not out.exists()
    assert "1-minute load average 1.75" in err and "exceeds 0.50" in err


def need(path: str) -> None:
    if not (ROOT / path).exists():
        pytest.skip(f"{path} not built (make tiny-models / make cpu)")


def run_peer(*args, timeout=300):
    env = dict(os.environ, KIPP_BENCH_HASH_CACHE="/dev/null/none")
    return subprocess.run([sys.executable, "-m", "bench.peer_bench", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


FAKE_PEER = """#!/bin/sh
# stands in for the worker's interpreter: "import llama_cpp" works; the worker reports its
# first stages, then dies by SIGILL as a GGML_NATIVE build's AMX path does on some VMs
[ "$1" = "-c" ] && exit 0
echo '{"stage": "started", "system_info": "CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 |"}'
echo '{"stage": "backend_ready"}'
echo '{"stage": "model_loaded"}'
echo '{"stage": "context_ready"}'
echo 'ggml_amx_init: AMX enabled' >&2
kill -ILL $$
"""


def test_crashing_peer_gets_no_record(tmp_path):
    need(TIED)
    need(KIPP)
    fake = tmp_path / "python"
    fake.write_text(FAKE_PEER)
    fake.chmod(0o755)
    out = tmp_path / "peer.json"
    r = run_peer("--model", TIED, "--binary", KIPP, "--python", fake, "--prompt-tokens", "8",
                 "--decode", "2", "--warmup", "0", "--runs", "1", "--threads", "1",
                 "--no-membw", "--no-hash", "--output", out)
    assert r.returncode == 1, r.stderr
    assert not out.exists()
    assert "check run (1 thread) crashed: died by SIGILL during the prompt's llama_decode" in r.stderr
    assert "-DGGML_NATIVE=OFF" in r.stderr and "No record is written" in r.stderr
    assert "ggml_amx_init: AMX enabled" in r.stderr
    check = json.loads(r.stderr.split("peer_bench: peer.check = ", 1)[1].splitlines()[0])
    assert check["crashed"] is True and check["run"]["signal"] == "SIGILL"
    assert check["isa"]["ggml_features"]["AMX_INT8"] is True
    assert "kipp run" not in r.stderr  # refused before any measured run


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama_cpp not installed")
@pytest.mark.parametrize("skip", [False, True])
def test_real_peer_check_in_the_record(tmp_path, skip):
    need(TIED)
    need(KIPP)
    out = tmp_path / "peer.json"
    r = run_peer("--model", TIED, "--binary", KIPP, "--prompt-tokens", "24", "--decode", "20",
                 "--warmup", "0", "--runs", "1", "--threads", "1", "--no-membw", "--no-hash",
                 "--allow-noisy", "--output", out, *(["--skip-peer-check"] if skip else []))
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    check = rec["peer"]["check"]
    assert rec["machine_busy"] == rec["idle_check"]["busy"] and rec["idle_check"]["threads"] == 1
    isa = check["isa"]
    assert isa["ggml_features"] == pb.parse_system_info(rec["peer"]["system_info"])
    with open("/proc/cpuinfo") as f:
        assert set(isa["cpu_flags"]) <= pb.parse_cpu_flags(f.read())
    if skip:
        assert check["checked"] is False and check["sanity_1t"] is None
        return
    assert check["checked"] and check["ok"] and check["crashed"] is False
    assert check["run"]["rc"] == 0 and check["run"]["stage_reached"] == "decode_done"
    s1 = check["sanity_1t"]
    assert s1["threads"] == 1 and s1["prompt_tokens"] == 24 and s1["decode_tokens"] == 16
    assert s1["prefill_tok_s"] > 0 and s1["decode_tok_s"] > 0
    assert check["decode_median_over_sanity_1t"] == pytest.approx(
        rec["peer"]["summary"]["decode_tok_s"]["median"] / s1["decode_tok_s"])
