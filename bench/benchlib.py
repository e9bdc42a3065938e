"""benchlib.py — provenance shared by Kipp's benchmark harnesses: git commit and dirty
state, binary sha256, compiler, hardware, Python package versions, and min/median/max
summaries. Every bench/results/*.json record carries this block. No timing happens here."""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import statistics
import subprocess


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
                              "avx512_vnni", "avx_vnni", "f16c", "sse4_2")
                    info["flags"] = [x for x in v.split() if x in wanted]
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


def provenance(binary: str | None = None) -> dict:
    rec = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _run(["git", "rev-parse", "HEAD"]),
        "dirty": bool(_run(["git", "status", "--porcelain", "--untracked-files=no"])),
        "compiler": _run(["cc", "--version"]).splitlines()[0:1],
        "hardware": cpu_info(),
        "os": platform.platform(),
        "python": platform.python_version(),
    }
    if binary:
        rec["binary"] = {"path": binary, "sha256": sha256_file(binary)}
    return rec


def summary(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "n": len(values)}
