"""The CUDA bench plumbing without a GPU: what tools/bench.py, bench/peer_bench.py,
bench/server_bench.py and bench/spec_bench.py build for --backend cuda (command lines, record
fields), the bandwidth probe's output against its parser, the GPU idle rule, and the refusal of
a cuda record whose llama.cpp peer did not offload. End-to-end runs use fakes: a kipp that
insists on --backend cuda, a kipp-cuda-membw that refuses --threads, an nvidia-smi that answers
queries field by field, and a llama.cpp worker interpreter; the model is a one-tensor GGUF
written here."""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench import benchlib, peer_bench as pb, server_bench as sb, spec_bench  # noqa: E402
from tools import bench as kbench  # noqa: E402

# ---- fakes ---------------------------------------------------------------------------------

FAKE_KIPP = r'''#!/usr/bin/env python3
import json, sys
a = sys.argv[1:]
if a[:1] == ["--version"]:
    print("kipp fake"); sys.exit(0)
n = int(a[a.index("--prompt-tokens") + 1])
if "--tokenize" in a:   # tools/bench.py synthetic_ids for a 2000-token vocabulary
    print(" ".join(str((i * 7919) % 2000) for i in range(n))); sys.exit(0)
if a[a.index("--backend") + 1] != "cuda":
    sys.exit("fake kipp: not asked for the cuda backend")
d = int(a[a.index("-n") + 1]) - 1
json.dump({"prefill": {"tokens": n, "ms": 10.0, "tok_s": n / 0.01},
           "decode": {"tokens": d, "ms": 100.0, "tok_s": d / 0.1}, "stop": "length",
           "kv": {"bytes_total": 1 << 20, "bytes_per_token": 4096}, "kv_type": "f16",
           "isa": None, "threads": 1, "n_ctx": int(a[a.index("-c") + 1])},
          open(a[a.index("--stats-json") + 1], "w"))
'''

# kipp-cuda-membw's output line, keys as bench/cuda_membw.cu prints them
CUDA_MEMBW_OUT = {
    "tool": "kipp-cuda-membw", "device": "NVIDIA H200", "device_index": 0,
    "compute_capability": "9.0", "sms": 132, "global_mem_bytes": 150754820096,
    "memory_clock_khz": 2619000, "bus_width_bits": 6144, "theoretical_gbps": 4022.784,
    "bytes": 1073741824, "threads": 270336, "grid": 1056, "block": 256, "runs": 5,
    "best_gbps": 4000.0, "gbps": [3990.1, 4000.0, 3995.5, 3998.2, 3999.0],
    "copy_d2d_best_gbps": 3500.0, "copy_d2d_gbps": [3500.0] * 5,
    "copy_d2d_counts": "2 x bytes per copy (read + written)", "checksum": 1,
}

FAKE_MEMBW = f'''#!/usr/bin/env python3
import sys
if "--threads" in sys.argv:
    sys.exit("kipp-cuda-membw: unknown option '--threads'")
print({json.dumps(json.dumps(CUDA_MEMBW_OUT))})
'''

NVSMI_VALUES = {"index": "0", "name": "NVIDIA H200", "driver_version": "570.86.15",
                "memory.total": "143771", "pci.bus_id": "00000000:19:00.0", "compute_cap": "9.0",
                "clocks.max.sm": "1980", "clocks.max.mem": "3201", "power.limit": "700.00",
                "temperature.gpu": "35", "clocks.sm": "1980", "clocks.mem": "3201",
                "power.draw": "[N/A]", "pstate": "P0", "memory.used": "1"}

FAKE_NVSMI = f'''#!/usr/bin/env python3
import os, sys
vals = {NVSMI_VALUES!r}
vals["utilization.gpu"] = os.environ.get("FAKE_GPU_UTIL", "0")
for a in sys.argv[1:]:
    if a.startswith("--query-gpu="):
        print(", ".join(vals[f] for f in a.split("=", 1)[1].split(",")))
    elif a.startswith("--query-compute-apps="):
        if os.environ.get("FAKE_GPU_APP"):
            print("4242, other-job, 1000")
    elif a == "-L":
        print("GPU 0: NVIDIA H200 (UUID: GPU-0)")
'''

# the llama.cpp worker's interpreter: a CPU-only llama-cpp-python (no offload, no CUDA)
FAKE_CPU_PEER = r'''#!/bin/sh
[ "$1" = "-c" ] && exit 0
echo '{"stage": "started", "system_info": "CPU : AVX2 = 1 |"}'
echo '{"stage": "decode_done"}'
echo '{"prefill_tokens": 8, "prefill_tok_s": 100.0, "decode_tokens": 2, "decode_tok_s": 10.0, "n_gpu_layers": -1, "offload": {"supports_gpu_offload": false, "log_notes": ["load_tensors:   CPU_Mapped model buffer size =     0.06 MiB"], "model_size_bytes": 64000}}'
'''


def write_exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def tiny_gguf(path: Path) -> Path:
    """A GGUF v3 with general.architecture qwen3, qwen3.context_length 256 and one F32
    token_embd.weight of 8 x 2000 (n_vocab 2000): enough for benchlib's manifest."""
    def s(x: str) -> bytes:
        return struct.pack("<Q", len(x)) + x.encode()
    meta = (s("general.architecture") + struct.pack("<I", 8) + s("qwen3")
            + s("qwen3.context_length") + struct.pack("<II", 4, 256))
    tensor = s("token_embd.weight") + struct.pack("<IQQIQ", 2, 8, 2000, 0, 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 2) + meta + tensor
    head += b"\0" * (-len(head) % 32)
    path.write_bytes(head + b"\0" * (8 * 2000 * 4))
    return path


@pytest.fixture()
def fakes(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    write_exe(bindir / "nvidia-smi", FAKE_NVSMI)
    build = tmp_path / "build"
    build.mkdir()
    return {"kipp": write_exe(build / "kipp-cuda-generic", FAKE_KIPP),
            "membw": write_exe(build / "kipp-cuda-membw", FAKE_MEMBW),
            "model": tiny_gguf(tmp_path / "tiny.gguf"),
            "env": dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}",
                        KIPP_BENCH_HASH_CACHE=str(tmp_path / "hash.json"))}


def run_module(module: str, *args, env=None):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


# ---- the bandwidth probe -------------------------------------------------------------------

def test_membw_command_per_backend():
    ns = argparse.Namespace(backend="cuda", binary="build/kipp-cuda-generic", membw=None,
                            threads=8)
    assert kbench.membw_command(ns) == ["build/kipp-cuda-membw", "--runs", "5"]
    ns.backend, ns.binary = "cpu", "build/kipp"
    assert kbench.membw_command(ns) == ["build/kipp-membw", "--threads", "8", "--runs", "5"]
    ns.backend, ns.membw = "cuda", "/x/probe"
    assert kbench.membw_command(ns)[0] == "/x/probe"


def test_cuda_probe_prints_what_the_parser_reads():
    """The keys bench/cuda_membw.cu's printf writes: kipp-membw's (which tools/bench.py reads)
    and the canned output above; a probe without best_gbps is no bandwidth."""
    src = (ROOT / "bench/cuda_membw.cu").read_text()
    printed = set(re.findall(r'\\"([a-z_0-9]+)\\": ', src))
    cpu = set(re.findall(r'\\"([a-z_0-9]+)\\": ', (ROOT / "bench/membw.c").read_text()))
    assert cpu <= printed, cpu - printed
    assert printed == set(CUDA_MEMBW_OUT), printed ^ set(CUDA_MEMBW_OUT)
    out = kbench.parse_membw("warming up\n" + json.dumps(CUDA_MEMBW_OUT) + "\n", "cuda")
    assert out["kind"] == "device" and out["best_gbps"] == 4000.0
    assert kbench.parse_membw(json.dumps({"best_gbps": 20.5}), "cpu")["kind"] == "host"
    with pytest.raises(ValueError):
        kbench.parse_membw(json.dumps({"tool": "kipp-cuda-membw"}), "cuda")


# ---- nvidia-smi and the GPU idle rule ------------------------------------------------------

def test_parse_nvidia_smi_and_gpu_info():
    fields = ("index", "name", "memory.total", "power.draw", "compute_cap")
    rows = benchlib.parse_nvidia_smi_csv("0, NVIDIA H200, 143771, [N/A], 9.0\n"
                                         "1, NVIDIA A100-SXM4-80GB, 81920, 61.5, 8.0\n", fields)
    assert rows[0] == {"index": 0, "name": "NVIDIA H200", "memory.total": 143771,
                       "power.draw": None, "compute_cap": 9.0}
    assert rows[1]["power.draw"] == 61.5 and len(rows) == 2

    def smi(args):  # an old nvidia-smi: refuses compute_cap and the other newer fields
        q = args[0].split("=", 1)[1].split(",")
        if "compute_cap" in q:
            return 2, 'Field "compute_cap" is not a valid field to query.'
        return 0, ", ".join(NVSMI_VALUES[f] for f in q) + "\n"
    info = benchlib.gpu_info(run=smi)
    assert info["available"] and info["gpus"][0]["name"] == "NVIDIA H200"
    assert info["gpus"][0]["driver_version"] == "570.86.15"
    assert benchlib.gpu_info(run=lambda a: (127, "not found"))["available"] is False


@pytest.mark.parametrize("load,usable,utils,apps,busy,why", [
    (1.2, 2, [0, 0, 0], [], False, None),     # a CPU job on one of 2 cores: one is free
    (7.0, 16, [0, 1, 0], [], False, None),    # a loaded 16-core host: the GPU run needs 1
    (2.0, 2, [0, 0, 0], [], True, "host"),    # no host core left for the launching thread
    (0.1, 2, [0, 0, 0], [{"pid": 7}], True, "gpu"),    # another process on the GPU
    (0.1, 2, [95, 97, 0], [], True, "gpu"),   # the GPU is computing for someone else
    (0.1, 2, [None, None], None, False, None),   # nvidia-smi gave nothing: not busy by it
])
def test_gpu_idle_rule(load, usable, utils, apps, busy, why):
    d = benchlib.gpu_idle_decision(load, usable, utils, apps, allow_busy=False)
    assert d["busy"] is busy and d["refused"] is busy
    assert d["host_busy"] is (why == "host") and d["gpu_busy"] is (why == "gpu")
    assert benchlib.gpu_idle_decision(load, usable, utils, apps, allow_busy=True)["refused"] is False


def test_gpu_idle_rule_ignores_own_process():
    d = benchlib.gpu_idle_decision(0.1, 4, [0], [{"pid": 11}], False, own_pids=(11,))
    assert d["busy"] is False


def test_cpu_rule_would_refuse_what_the_gpu_rule_admits():
    """The reason for a rule of its own: 1.2 on 2 cores refuses a 2-thread CPU record."""
    assert pb.idle_decision(1.2, 2, 2, False)["refused"] is True
    assert benchlib.gpu_idle_decision(1.2, 2, [0], [], False)["refused"] is False


def test_wait_for_gpu_idle_polls_until_free():
    seq = iter([True, True, False])
    clock = iter(range(100))

    def sample(usable, allow):
        return benchlib.gpu_idle_decision(0.1, usable, [90 if next(seq) else 0], [], allow)
    d = pb.wait_for_gpu_idle(4, False, 60, sample=sample, sleep=lambda s: None,
                             clock=lambda: next(clock))
    assert d["refused"] is False and d["waited_s"] > 0


# ---- the peer's offload check --------------------------------------------------------------

GOOD_NOTES = ["load_tensors: offloading 36 repeating layers to GPU",
              "load_tensors: offloaded 37/37 layers to GPU",
              "load_tensors:        CUDA0 model buffer size =  7672.00 MiB",
              "load_tensors:   CPU_Mapped model buffer size =   593.50 MiB"]
SYSINFO_CUDA = "CUDA : ARCHS = 900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : AVX2 = 1 |"
MIB = 2**20


def report(notes=GOOD_NOTES, supports=True, sysinfo=SYSINFO_CUDA, size=7672 * MIB + 593 * MIB,
           host=593 * MIB):
    return pb.offload_report({"supports_gpu_offload": supports, "log_notes": notes,
                              "model_size_bytes": size}, sysinfo, host)


def test_offload_report_of_a_full_offload():
    r = report()
    assert r["layers_offloaded"] == 37 and r["layers_total"] == 37
    assert r["buffers_mib"] == {"CUDA0": 7672.0, "CPU_Mapped": 593.5}
    assert r["gpu_buffer_bytes"] == 7672 * MIB and r["cuda_system_info"]["ARCHS"] is True
    assert pb.offload_refusal(r) is None
    # llama.cpp echoing n_gpu_layers = -1 as asked ("all") with every byte on the GPU: fine
    assert pb.offload_refusal(report(notes=[GOOD_NOTES[0], "offloaded -1/37 layers to GPU",
                                            *GOOD_NOTES[2:]])) is None


@pytest.mark.parametrize("kw,words", [
    ({"supports": False, "sysinfo": "CPU : AVX2 = 1 |",
      "notes": ["load_tensors:   CPU_Mapped model buffer size =  8265.00 MiB"]},
     ["llama_supports_gpu_offload() is false", "no CUDA section", "no 'offloaded"]),
    ({"notes": ["load_tensors: offloaded 20/37 layers to GPU",
                "load_tensors:        CUDA0 model buffer size =  4000.00 MiB",
                "load_tensors:   CPU_Mapped model buffer size =  4265.00 MiB"]},
     ["offloaded 20/37 layers", "CUDA buffers hold 4000.0 MiB"]),
    # pinned host memory is not the GPU's
    ({"notes": [GOOD_NOTES[1], "load_tensors:    CUDA_Host model buffer size =  7672.00 MiB"]},
     ["CUDA buffers hold 0.0 MiB"]),
])
def test_offload_refusal(kw, words):
    why = pb.offload_refusal(report(**kw))
    assert why and why.startswith("the peer did not run on the GPU") and "peer_cuda.sh" in why
    for w in words:
        assert w in why, (w, why)
    assert pb.offload_refusal(None)


def test_peer_spec_asks_for_every_layer_on_the_gpu():
    assert pb.gpu_layers(argparse.Namespace(backend="cuda")) == -1
    assert pb.gpu_layers(argparse.Namespace(backend="cpu")) == 0


def test_host_allowed_bytes_is_the_embedding_table(tmp_path):
    assert pb.host_allowed_bytes(str(tiny_gguf(tmp_path / "m.gguf"))) == 8 * 2000 * 4
    assert pb.host_allowed_bytes(str(tmp_path / "none.gguf")) == 0


# ---- end to end on fakes -------------------------------------------------------------------

def test_bench_cuda_record(tmp_path, fakes):
    out = tmp_path / "rec.json"
    r = run_module("tools.bench", "--backend", "cuda", "--binary", fakes["kipp"],
                   "--model", fakes["model"], "--prompt-tokens", "16", "--decode", "4",
                   "--warmup", "0", "--runs", "2", "--threads", "1", "--output", out,
                   env=fakes["env"])
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    k = rec["kipp"]
    assert k["command"][k["command"].index("--backend") + 1] == "cuda"
    assert rec["settings"]["backend"] == "cuda"
    mb = rec["memory_bandwidth"]
    assert mb["kind"] == "device" and mb["best_gbps"] == 4000.0, mb
    assert mb["binary"]["path"].endswith("kipp-cuda-membw")
    assert k["membw_kind"] == "device"
    assert k["decode_effective_gbps_over_membw"] == pytest.approx(
        k["summary"]["decode_effective_gbps"]["median"] / 4000.0)
    gpu = rec["provenance"]["hardware"]["gpu"]
    assert gpu["available"] and gpu["gpus"][0]["name"] == "NVIDIA H200"
    assert gpu["gpus"][0]["memory.total"] == 143771 and gpu["gpus"][0]["compute_cap"] == 9.0
    assert rec["gpu_state"]["before"]["temperature.gpu"] == 35
    assert rec["gpu_state"]["after"]["pstate"] == "P0"
    # the host's load is whatever this shared machine has; the fake GPU is idle
    assert rec["idle_check"]["rule"] == "gpu" and rec["idle_check"]["gpu_busy"] is False
    assert rec["machine_busy"] is rec["idle_check"]["host_busy"]
    assert "of the GPU's measured read bandwidth (4000.0 GB/s)" in r.stderr


def test_bench_cuda_warns_on_a_busy_gpu(tmp_path, fakes):
    r = run_module("tools.bench", "--backend", "cuda", "--binary", fakes["kipp"],
                   "--model", fakes["model"], "--prompt-tokens", "8", "--decode", "2",
                   "--warmup", "0", "--runs", "1", "--no-membw",
                   env=dict(fakes["env"], FAKE_GPU_APP="1"))
    assert r.returncode == 0, r.stderr
    assert "other processes on the GPU: 4242 other-job" in r.stderr
    assert json.loads(r.stdout)["machine_busy"] is True


def test_peer_bench_refuses_a_peer_that_did_not_offload(tmp_path, fakes):
    py = write_exe(tmp_path / "python", FAKE_CPU_PEER)
    out = tmp_path / "peer.json"
    r = run_module("bench.peer_bench", "--backend", "cuda", "--binary", fakes["kipp"],
                   "--model", fakes["model"], "--python", py, "--prompt-tokens", "8",
                   "--decode", "2", "--warmup", "0", "--runs", "1", "--threads", "2",
                   "--idle-wait", "0", "--allow-busy", "--output", out, env=fakes["env"])
    assert r.returncode == 1, r.stderr
    assert not out.exists()
    assert "the peer did not run on the GPU: llama_supports_gpu_offload() is false" in r.stderr
    check = json.loads(r.stderr.split("peer_bench: peer.check = ", 1)[1].splitlines()[0])
    assert check["offload"]["supports_gpu_offload"] is False
    assert check["offload"]["buffers_mib"] == {"CPU_Mapped": 0.06}


def test_peer_bench_cuda_refuses_a_busy_gpu(tmp_path, fakes):
    py = write_exe(tmp_path / "python", FAKE_CPU_PEER)
    r = run_module("bench.peer_bench", "--backend", "cuda", "--binary", fakes["kipp"],
                   "--model", fakes["model"], "--python", py, "--prompt-tokens", "8",
                   "--threads", "2", "--idle-wait", "0", env=dict(fakes["env"], FAKE_GPU_UTIL="97"))
    assert r.returncode == pb.EXIT_BUSY, r.stderr
    assert "GPU utilization 97 % > 10 %" in r.stderr and "--allow-busy" in r.stderr


# ---- server_bench and spec_bench -----------------------------------------------------------

def test_server_bench_cuda_defaults():
    ns = argparse.Namespace(backend="cuda", concurrency=None, parallel=None, threads=4,
                            server_arg=["--kv-type=f16"])
    assert sb.resolve_levels(ns) == [1, 8, 32, 64] and ns.parallel == 64
    assert sb.server_args(ns, ["--parallel", str(ns.parallel)]) == [
        "--backend", "cuda", "--threads", "4", "--parallel", "64", "--kv-type", "f16"]
    ns = argparse.Namespace(backend="cpu", concurrency=None, parallel=None)
    assert sb.resolve_levels(ns) == [1, 4, 8, 16] and ns.parallel == 16
    ns = argparse.Namespace(backend="cpu", concurrency="1,8,32,64", parallel=None)
    assert sb.resolve_levels(ns) == [1, 8, 32, 64] and ns.parallel == 64
    for bad in ("0", "1,x", ","):
        with pytest.raises(ValueError):
            sb.parse_levels(bad)


def test_server_bench_cuda_binary_default(tmp_path, fakes):
    class Ap:
        def error(self, msg):
            raise SystemExit(msg)
    ns = argparse.Namespace(backend="cuda", binary=None, model=str(fakes["model"]), output=None)
    with pytest.raises(SystemExit) as e:
        sb.check_paths(Ap(), argparse.Namespace(**{**vars(ns), "binary": str(tmp_path / "no")}))
    assert "make server-cuda" in str(e.value)
    try:
        sb.check_paths(Ap(), ns)
    except SystemExit:
        pass
    assert ns.binary == "build/kipp-server-cuda"


def test_spec_bench_server_command_for_cuda():
    a = argparse.Namespace(backend="cuda", binary=None, server_binary=None, model="m.gguf",
                           threads=4, server_levels=[1, 8, 32, 64], server_max_tokens=64,
                           draft_model=None, spec_ngram=3, draft_max=16, draft_fixed=False)
    spec_bench.resolve_binaries(a)
    assert a.binary.endswith("build/kipp-cuda-generic")
    assert a.server_binary.endswith("build/kipp-server-cuda")
    cmd = spec_bench.server_bench_command(a, "spec", "/tmp/o.json", None)
    val = {k: cmd[cmd.index(k) + 1] for k in ("--binary", "--backend", "--concurrency",
                                              "--parallel")}
    assert val == {"--binary": a.server_binary, "--backend": "cuda",
                   "--concurrency": "1,8,32,64", "--parallel": "64"}
    assert "--server-arg=--spec-ngram" in cmd
    assert "--server-arg=--spec-ngram" not in spec_bench.server_bench_command(a, "plain", "o", None)


def test_peer_cuda_sh_refuses_without_a_gpu(tmp_path):
    """bench/peer_cuda.sh builds only on the GPU host; a bad option is a usage error."""
    r = subprocess.run(["bench/peer_cuda.sh", "--bogus"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "unknown option '--bogus'" in r.stderr
    nvcc = write_exe(tmp_path / "nvcc", "#!/bin/sh\necho 'Cuda compilation tools, release 13.0'\n")
    # an nvidia-smi that finds no GPU, first on PATH (also on a GPU host: nothing is built)
    write_exe(tmp_path / "nvidia-smi", "#!/bin/sh\necho 'No devices were found' >&2; exit 6\n")
    env = dict(os.environ, NVCC=str(nvcc), PATH=f"{tmp_path}:/usr/bin:/bin")
    r = subprocess.run(["bench/peer_cuda.sh", "--no-tools"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 1 and "no GPU (nvidia-smi -L failed)" in r.stderr, r.stderr
