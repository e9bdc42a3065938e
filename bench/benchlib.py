"""benchlib.py — provenance shared by Kipp's benchmark harnesses: git commit and dirty
state, binary sha256, compiler and build flags, hardware, model manifests (GGUF header:
tensor type mix, parameter count, shape; sha256 cached under build/), child-process peak
RSS, and min/median/max/dispersion summaries. Every bench/results/*.json record carries
this block. Standard library only (tools/bench.py runs under any python3). No timing of
the engine happens here."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import statistics
import struct
import subprocess
import time

from tools import atomic_file  # standard library only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (max - min) / median of Kipp's runs above this: the machine was too noisy (bench/README.md)
DISPERSION_LIMIT = 0.10


def positive(name: str, lo: int = 1):
    """argparse type: an integer >= lo, the error naming the flag."""
    def conv(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} expects an integer >= {lo}, got '{s}'")
        if v < lo:
            raise argparse.ArgumentTypeError(f"{name} expects an integer >= {lo}, got '{s}'")
        return v
    return conv


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cpu_info() -> dict:
    info = {"model": "", "flags": [], "logical_cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k == "model name" and not info["model"]:
                    info["model"] = v.strip()
                elif k == "flags" and not info["flags"]:
                    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                              "avx512_vnni", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16",
                              "amx_int8", "f16c", "sse4_2", "asimd", "asimddp", "fphp")
                    info["flags"] = [x for x in v.split() if x in wanted]
                elif k in ("Features",) and not info["flags"]:  # arm64
                    info["flags"] = [x for x in v.split() if x in ("asimd", "asimddp", "fphp", "sve")]
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_total_kib"] = int(line.split()[1])
    except OSError:
        pass
    return info


def cpu_topology() -> dict:
    """Sockets, physical cores and hardware threads (from /proc/cpuinfo; a VM's view)."""
    cores, sockets, logical = set(), set(), 0
    phys = core = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k == "processor":
                    logical += 1
                elif k == "physical id":
                    phys = v.strip()
                    sockets.add(phys)
                elif k == "core id":
                    core = v.strip()
                    cores.add((phys, core))
    except OSError:
        pass
    return {"sockets": len(sockets) or None, "physical_cores": len(cores) or None,
            "logical_cpus": logical or os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}


def hardware() -> dict:
    h = cpu_info()
    h.update(cpu_topology())
    return h


def cpu_class(prov: dict) -> str:
    """The CPU class a record is named by (epyc-avx512bf16, xeon-amx, ...), from provenance()."""
    flags = set(prov["hardware"].get("flags") or [])
    model = (prov["hardware"].get("model") or "").lower()
    vendor = "epyc" if "epyc" in model or "amd" in model else "xeon" if "xeon" in model else "cpu"
    level = ("amx" if "amx_tile" in flags else "avx512bf16" if "avx512_bf16" in flags
             else "avx512" if "avx512f" in flags else "avx2")
    return f"{vendor}-{level}"


def provenance(binary: str | None = None, backend: str | None = None) -> dict:
    """Commit, dirty state, compiler, hardware; for backend "cuda" also the GPU
    (hardware.gpu, gpu_info) and nvcc's version."""
    rec = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _run(["git", "rev-parse", "HEAD"]),
        "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"])),
        "compiler": _run(["cc", "--version"]).splitlines()[0:1],
        "hardware": hardware(),
        "os": platform.platform(),
        "python": platform.python_version(),
    }
    if backend == "cuda":
        rec["hardware"]["gpu"] = gpu_info()
        rec["nvcc"] = nvcc_version()
    if binary:
        rec["binary"] = {"path": binary, "sha256": sha256_file(binary)}
    return rec


def summary(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}


def dispersion(values: list[float]) -> float:
    """(max - min) / median; 0 for a single run."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


# ---- GPU (records of --backend cuda) ------------------------------------------------------
#
# A cuda record says which GPU it ran on (nvidia-smi: name, driver, memory, compute
# capability) and the GPU's state before and after the runs (temperature, clocks, power,
# utilization), since a GPU's sustained clocks depend on its temperature and power limit.

NVSMI_INFO_FIELDS = ("index", "name", "driver_version", "memory.total", "pci.bus_id",
                     "compute_cap", "clocks.max.sm", "clocks.max.mem", "power.limit")
# the fields every nvidia-smi since the 2010s knows: the fallback when a newer one is refused
NVSMI_INFO_FALLBACK = ("index", "name", "driver_version", "memory.total", "pci.bus_id")
NVSMI_STATE_FIELDS = ("index", "temperature.gpu", "clocks.sm", "clocks.mem", "power.draw",
                      "pstate", "utilization.gpu", "memory.used")
# median utilization.gpu (percent) above this: something else runs on the GPU
GPU_IDLE_UTIL = 10.0


def parse_nvidia_smi_csv(text: str, fields: tuple) -> list[dict]:
    """`nvidia-smi --query-gpu=F1,F2 --format=csv,noheader,nounits` -> one dict per GPU;
    "[N/A]"/"[Not Supported]" -> None, integers and decimals -> numbers, the rest strings."""
    gpus = []
    for line in text.strip().splitlines():
        vals = [v.strip() for v in line.split(",")]
        if len(vals) != len(fields):
            continue
        g = {}
        for k, v in zip(fields, vals):
            if v.startswith("[") or v in ("", "N/A"):
                g[k] = None
                continue
            try:
                g[k] = int(v)
            except ValueError:
                try:
                    g[k] = float(v)
                except ValueError:
                    g[k] = v
        gpus.append(g)
    return gpus


def _nvidia_smi(args: list[str]) -> tuple[int, str]:
    try:
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return r.returncode, r.stdout if r.returncode == 0 else (r.stderr or r.stdout)


def query_gpus(fields: tuple, run=None) -> list[dict] | None:
    """nvidia-smi's answer for fields, one dict per GPU; None when nvidia-smi fails."""
    run = run or _nvidia_smi
    rc, out = run([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    return parse_nvidia_smi_csv(out, fields) if rc == 0 else None


def gpu_info(run=None) -> dict:
    """The hardware section's "gpu": every GPU nvidia-smi lists, CUDA_VISIBLE_DEVICES, and
    which of them the run uses (the first visible one: Kipp's cuda backend uses device 0)."""
    gpus = query_gpus(NVSMI_INFO_FIELDS, run)
    if gpus is None:
        gpus = query_gpus(NVSMI_INFO_FALLBACK, run)
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    info = {"available": bool(gpus), "gpus": gpus or [], "cuda_visible_devices": vis,
            "device_index": gpu_index()}
    if not gpus:
        info["error"] = "nvidia-smi failed or lists no GPU"
    return info


def gpu_index() -> int:
    """nvidia-smi's index of the GPU CUDA calls device 0 (CUDA_VISIBLE_DEVICES' first entry
    when numeric; by default both orders agree on a one-GPU machine)."""
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def gpu_state(run=None) -> dict | None:
    """The run's GPU's temperature, clocks, power, utilization and memory now."""
    gpus = query_gpus(NVSMI_STATE_FIELDS, run)
    if not gpus:
        return None
    idx = gpu_index()
    return next((g for g in gpus if g.get("index") == idx), gpus[0])


def gpu_compute_apps(run=None) -> list[dict] | None:
    """Processes holding a CUDA context on any GPU (pid, name, MiB); None when unknown.
    Inside a container nvidia-smi may not see other containers' processes, hence the
    utilization samples as well."""
    run = run or _nvidia_smi
    fields = ("pid", "process_name", "used_memory")
    rc, out = run([f"--query-compute-apps={','.join(fields)}", "--format=csv,noheader,nounits"])
    return parse_nvidia_smi_csv(out, fields) if rc == 0 else None


def gpu_idle_decision(load_1min: float, usable_cpus: int, util_samples: list, apps: list | None,
                      allow_busy: bool, own_pids: tuple = ()) -> dict:
    """The idle rule of a GPU run. Kipp's cuda backend and llama.cpp with every layer on the
    GPU keep weights and KV in device memory, so host memory bandwidth and the host's other
    cores do not enter their figures; what they need from the host is one core for the thread
    that launches kernels and samples. So the host counts as busy only when the 1-minute load
    leaves no core free (load > usable CPUs - 1 + 0.5): the CPU runs' rule (peer_bench's
    idle_decision), which charges every thread and half of each free core, would refuse GPU
    runs for load they never see. The GPU counts as busy when another process holds a context
    on it or its median utilization over the samples exceeds GPU_IDLE_UTIL percent. Either
    busy: refused, unless allow_busy (then marked). util_samples: numbers or None."""
    threshold = max(usable_cpus - 1, 0) + 0.5
    host_busy = load_1min > threshold
    utils = sorted(u for u in util_samples if u is not None)
    util_med = utils[len(utils) // 2] if utils else None
    others = [a for a in (apps or []) if a.get("pid") not in own_pids]
    gpu_busy = bool(others) or (util_med is not None and util_med > GPU_IDLE_UTIL)
    busy = host_busy or gpu_busy
    return {"rule": "gpu", "load_1min": load_1min, "threshold": threshold,
            "usable_cpus": usable_cpus, "host_busy": host_busy,
            "gpu_utilization_samples": list(util_samples), "gpu_utilization_median": util_med,
            "gpu_util_limit": GPU_IDLE_UTIL, "gpu_other_processes": others,
            "gpu_processes_known": apps is not None, "gpu_busy": gpu_busy, "busy": busy,
            "allow_busy": allow_busy, "refused": busy and not allow_busy}


def sample_gpu_idle(usable_cpus: int, allow_busy: bool, n: int = 5, interval: float = 0.2,
                    run=None, getload=None, sleep=None) -> dict:
    """gpu_idle_decision on n utilization samples taken interval seconds apart, now."""
    getload = getload or os.getloadavg
    sleep = sleep or time.sleep
    samples = []
    for i in range(n):
        st = gpu_state(run)
        samples.append(st.get("utilization.gpu") if st else None)
        if i + 1 < n:
            sleep(interval)
    return gpu_idle_decision(getload()[0], usable_cpus, samples, gpu_compute_apps(run),
                             allow_busy, own_pids=(os.getpid(),))


def nvcc_version() -> list[str]:
    """`nvcc --version`'s release line ($NVCC, PATH, or /usr/local/cuda/bin/nvcc)."""
    for nvcc in (os.environ.get("NVCC"), "nvcc", "/usr/local/cuda/bin/nvcc"):
        if nvcc:
            out = _run([nvcc, "--version"])
            if out:
                return [ln for ln in out.splitlines() if "release" in ln][:1] or out.splitlines()[-1:]
    return []


# ---- build provenance ------------------------------------------------------------------

def build_info(binary: str, backend: str | None = None) -> dict:
    """Compiler, the compile command make uses for the CLI object (hence CFLAGS), whether the
    binary is current with respect to the sources (make -q), and `binary --version`; for
    backend "cuda" also nvcc's version and the nvcc commands make runs for the binary."""
    info: dict = {"cc_version": _run(["cc", "--version"]).splitlines()[0:1]}
    info["binary_version"] = _run([binary, "--version"]).splitlines()
    bdir = os.path.relpath(os.path.dirname(os.path.abspath(binary)), ROOT)
    if not bdir.startswith(".."):
        obj = f"{bdir}/obj/src/cli/kipp.o"
        dry = _run_in(["make", "-n", "-B", f"BUILD={bdir}", obj], ROOT)
        info["cli_compile_command"] = next(
            (ln.strip() for ln in dry.splitlines() if " -c src/cli/kipp.c" in ln), None)
        kernels = {}
        arm = platform.machine() in ("aarch64", "arm64")
        for src in sorted(os.listdir(os.path.join(ROOT, "src/backend/cpu"))):
            if not (src.startswith("kernels") and src.endswith(".c")) or ("neon" in src) != arm:
                continue
            dry = _run_in(["make", "-n", "-B", f"BUILD={bdir}",
                           f"{bdir}/obj/src/backend/cpu/{src[:-2]}.o"], ROOT)
            kernels[src] = next((ln.strip() for ln in dry.splitlines()
                                 if f" -c src/backend/cpu/{src}" in ln), None)
        info["cpu_kernel_compile_commands"] = kernels
        if backend == "cuda":
            dry = _run_in(["make", "-n", "-B", f"BUILD={bdir}",
                           os.path.join(bdir, os.path.basename(binary))], ROOT)
            info["nvcc_version"] = nvcc_version()
            info["nvcc_compile_commands"] = sorted({ln.strip() for ln in dry.splitlines()
                                                    if "nvcc" in ln and " -c " in ln})
        try:
            q = subprocess.run(["make", "-q", f"BUILD={bdir}", os.path.join(bdir, os.path.basename(binary))],
                               cwd=ROOT, capture_output=True, timeout=60)
            info["binary_up_to_date"] = q.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            info["binary_up_to_date"] = None
    return info


def _run_in(cmd: list[str], cwd: str) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


# ---- model manifest ----------------------------------------------------------------------

def sha256_cached(path: str, cache_file: str | None = None) -> str:
    """sha256 of a (large) file, cached by real path + size + mtime in
    build/bench-sha256-cache.json (or $KIPP_BENCH_HASH_CACHE)."""
    cache_file = (cache_file or os.environ.get("KIPP_BENCH_HASH_CACHE")
                  or os.path.join(ROOT, "build", "bench-sha256-cache.json"))
    st = os.stat(path)
    key = os.path.realpath(path)
    try:
        with open(cache_file) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}
    hit = cache.get(key)
    if hit and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
        return hit["sha256"]
    digest = sha256_file(path)
    cache[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    try:
        os.makedirs(os.path.dirname(cache_file), exist_ok=True)
        tmp = cache_file + f".tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(cache, f, indent=1)
        os.replace(tmp, cache_file)
    except OSError:
        pass
    return digest


# ggml type id -> (name, elements per block, bytes per block)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
}
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf_header(path: str) -> dict:
    """Metadata (arrays summarized by type and length) and tensor infos of a GGUF v2/v3 file,
    read from its header only (no weights are touched)."""
    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize(fmt)
            b = f.read(n)
            if len(b) != n:
                raise ValueError(f"{path}: truncated GGUF header")
            return struct.unpack(fmt, b)[0]

        def rstr():
            n = rd("<Q")
            if n > 1 << 24:
                raise ValueError(f"{path}: implausible GGUF string length {n}")
            return f.read(n).decode("utf-8", "replace")

        def rval(t):
            if t in _GGUF_SCALARS:
                return rd(_GGUF_SCALARS[t])
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("<I"), rd("<Q")
                if et in _GGUF_SCALARS:
                    size = struct.calcsize(_GGUF_SCALARS[et])
                    f.seek(size * n, 1)
                else:
                    for _ in range(n):
                        rval(et)
                return {"array_of": et, "len": n}
            raise ValueError(f"{path}: unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file (bad magic)")
        version = rd("<I")
        n_tensors, n_kv = rd("<Q"), rd("<Q")
        meta = {}
        for _ in range(n_kv):
            k = rstr()
            meta[k] = rval(rd("<I"))
        tensors = []
        for _ in range(n_tensors):
            name = rstr()
            nd = rd("<I")
            dims = [rd("<Q") for _ in range(nd)]
            tensors.append({"name": name, "dims": dims, "type": rd("<I"), "offset": rd("<Q")})
        align = int(meta.get("general.alignment", 32))
        data_start = (f.tell() + align - 1) // align * align
    file_size = os.path.getsize(path)
    by_off = sorted(tensors, key=lambda t: t["offset"])
    for i, t in enumerate(by_off):
        n_el = 1
        for d in t["dims"]:
            n_el *= d
        t["n_elements"] = n_el
        tt = GGML_TYPES.get(t["type"])
        if tt:
            t["type_name"], bs, ts = tt
            t["n_bytes"] = n_el // bs * ts
        else:  # unknown type: the distance to the next tensor (includes alignment padding)
            t["type_name"] = f"type{t['type']}"
            end = by_off[i + 1]["offset"] if i + 1 < len(by_off) else file_size - data_start
            t["n_bytes"] = end - t["offset"]
    return {"version": version, "metadata": meta, "tensors": tensors, "data_start": data_start,
            "file_size": file_size}


def model_manifest(path: str, hash_file: bool = True) -> dict:
    """What a benchmark record says about its model: file, size, sha256, architecture and
    shape, parameter count, tensor type mix, and the weight bytes one decoded token reads."""
    h = read_gguf_header(path)
    meta = h["metadata"]
    arch = meta.get("general.architecture", "")
    shape = {k[len(arch) + 1:]: v for k, v in meta.items()
             if arch and k.startswith(arch + ".") and not isinstance(v, dict)}
    mix: dict = {}
    for t in h["tensors"]:
        m = mix.setdefault(t["type_name"], {"tensors": 0, "bytes": 0, "elements": 0})
        m["tensors"] += 1
        m["bytes"] += t["n_bytes"]
        m["elements"] += t["n_elements"]
    names = {t["name"]: t for t in h["tensors"]}
    total = sum(t["n_bytes"] for t in h["tensors"])
    tied = "output.weight" not in names
    emb = names.get("token_embd.weight")
    # decode reads every weight once per token, except the token-embedding table (one row is
    # gathered) -- unless it is tied, when it is also the output matrix and is read once -- and
    # a mixture-of-experts layer's stacked experts (ffn_*_exps: expert_count along the last
    # dimension), of which a token reads its expert_used_count (the bytes it really touches)
    per_token = total - (emb["n_bytes"] if emb and not tied else 0)
    n_exp, n_used = shape.get("expert_count"), shape.get("expert_used_count")
    exps_bytes = sum(t["n_bytes"] for t in h["tensors"] if "_exps." in t["name"])
    if n_exp and n_used and exps_bytes:
        per_token -= exps_bytes - exps_bytes * n_used // n_exp
    n_vocab = None
    if emb and len(emb["dims"]) == 2:
        n_vocab = emb["dims"][1]
    return {
        "path": path,
        "file_bytes": h["file_size"],
        "sha256": sha256_cached(path) if hash_file else None,
        "gguf_version": h["version"],
        "name": meta.get("general.name"),
        "architecture": arch,
        "shape": shape,
        "n_vocab": n_vocab,
        "tied_embeddings": tied,
        "n_tensors": len(h["tensors"]),
        "n_params": sum(t["n_elements"] for t in h["tensors"]),
        "weight_bytes": total,
        "weight_bytes_read_per_decoded_token": per_token,
        "experts": ({"expert_count": n_exp, "expert_used_count": n_used, "expert_bytes": exps_bytes,
                     "expert_bytes_read_per_decoded_token": exps_bytes * n_used // n_exp}
                    if n_exp and n_used and exps_bytes else None),
        "tensor_types": dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"])),
        "file_type": meta.get("general.file_type"),
    }


# ---- child processes -------------------------------------------------------------------

def run_measured(cmd: list[str], timeout: float | None = None, env: dict | None = None,
                 cwd: str | None = None) -> dict:
    """Runs cmd to completion; returns rc, stdout, stderr, wall seconds and the child's own
    peak RSS in bytes (reaped with os.wait4, so no other child mixes in; Linux reports
    ru_maxrss in KiB). The figure has a floor: Linux starts a child's ru_maxrss at the RSS of
    the address space exec leaves, which after vfork is this harness's, so a child smaller
    than the harness reports the harness's RSS (tens of MiB; Kipp's runs are far larger).
    A run past timeout seconds is killed (rc -9)."""
    import tempfile
    import threading

    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        timer = threading.Timer(timeout, p.kill) if timeout else None
        if timer:
            timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            if timer:
                timer.cancel()
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from reaping again
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode("utf-8", "replace")
        err = fe.read().decode("utf-8", "replace")
    return {"rc": p.returncode, "stdout": out, "stderr": err, "wall_s": wall,
            "peak_rss_bytes": ru.ru_maxrss * 1024}


def write_record_file(path: str, text: str) -> None:
    """A record (or any output the user named) written beside path and renamed over it
    only when complete: a failed or interrupted run never truncates or removes path."""
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    atomic_file.write_text(path, text if text.endswith("\n") else text + "\n")
