"""The auto kernel table (src/backend/cpu/choice.c) against the kernel benchmark's records.

Every committed bench/results/kernels-*.json was written by `kipp-kernbench --json` on one
CPU class: each ISA level's kernels timed per weight type and token count. For each record,
the table is composed again for that record's CPU features (`kipp-kernbench --choices`, so
the check follows the code, not the record's own copy of the choices) and, for every type and
token count, the kernel auto runs must be no more than MARGIN slower than the fastest kernel
any level ran in the same run: no auto-chosen kernel slower than a lower level's. Weights
repacked at load run one kernel for every count, so that comparison is made within each
regime (repacked, mmapped) and the regime not taken may not win at every count. Records
marked machine_busy (made beside other work, to show the noise) justify nothing and are only
checked for form. Also the
benchmark's own arguments, and a short real run of it with --check-auto and --json."""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = os.path.dirname(os.environ.get("KIPP_BIN", "build/kipp"))  # run_tests.sh sets KIPP_BIN
KB = str(ROOT / BUILD / "kipp-kernbench")
ALL_RECORDS = sorted(glob.glob(str(ROOT / "bench/results/kernels-*.json")))
# a record made on a busy machine (machine_busy) documents the noise, it justifies no choice
RECORDS = [p for p in ALL_RECORDS if not json.loads(Path(p).read_text()).get("machine_busy")]
MARGIN = 0.10  # the same run's timing spread on a quiet machine stays inside it


def kb(*args, timeout=300):
    return subprocess.run([KB, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def auto_kernel(c: dict, tok: int) -> tuple[str, str]:
    """(level, variant) the auto table runs for tok tokens, as forward.c picks it: the last
    range starting at or below tok."""
    start = max(int(m) for m in c["from"] if int(m) <= tok)
    level, variant = c["from"][str(start)].split(":")
    return level, variant


def slower_choices(record: dict, choices: dict, margin: float) -> list[str]:
    """Per type two regimes: weights repacked at load (one "packed" kernel for every token
    count) or left mmapped (a kernel per count); packing is all or nothing. At every count the
    kernel auto runs must be within margin of its own regime's fastest, and the other regime
    may not beat it by more than margin at every count (slower at some count, e.g. decode,
    is a trade the table may make: its row says why)."""
    res = record["results"]
    by = {(r["isa"], r["type"], r["variant"], r["tok"]): r["gflops"] for r in res}
    bad = []
    for typ, c in choices.items():
        level1, variant1 = auto_kernel(c, 1)
        # a packed type names the level whose packer runs it (a packing-only entry once
        # reported "dequantize" and escaped this check)
        assert not (c["packed"] and level1 == "dequantize"), (typ, c)
        if level1 == "dequantize":
            continue
        toks = sorted({r["tok"] for r in res if r["type"] == typ})
        if variant1 == "packed" and not any(r["type"] == typ and r["variant"] == "packed" for r in res):
            continue  # the record predates this type's packer (Q5_K on the Xeon's): nothing to compare
        other_wins = []
        for tok in toks:
            level, variant = auto_kernel(c, tok)
            got = by.get((level, typ, variant, tok))
            assert got is not None, f"{typ} tok {tok}: auto runs {level} {variant}, which the record lacks"
            packed = variant == "packed"
            mine = [r for r in res if r["type"] == typ and r["tok"] == tok and (r["variant"] == "packed") == packed]
            other = [r for r in res if r["type"] == typ and r["tok"] == tok and (r["variant"] == "packed") != packed]
            best = max(mine, key=lambda r: r["gflops"])
            if got < (1 - margin) * best["gflops"]:
                bad.append(f"{typ} tok={tok}: auto {level} {variant} {got:.1f} GFLOP/s < "
                           f"{best['isa']} {best['variant']} {best['gflops']:.1f}")
            if other:
                o = max(other, key=lambda r: r["gflops"])
                if (1 - margin) * o["gflops"] > got:
                    other_wins.append(f"tok={tok}: {o['isa']} {o['variant']} {o['gflops']:.1f} > {got:.1f}")
        if toks and len(other_wins) == len(toks):
            bad.append(f"{typ}: the other regime (packed or not) is faster at every token count: "
                       + "; ".join(other_wins))
    return bad


def record_features(record: dict) -> str:
    """The record's CPU features; "zen4" (a feature since the Xeon record) added to a record
    made before it on an AMD EPYC with AVX-512, which is Zen 4 (family 19h)."""
    f = record["features"]
    if "AMD EPYC" in record["cpu"] and "avx512f" in f.split() and "zen4" not in f.split():
        f += " zen4"
    return f


def test_feature_limited_preferences():
    """choice.c's "LEVEL@FEATURE" preferences: on a Zen 4 (512-bit instructions as two 256-bit
    halves) one-token F16/BF16/F32 run avx2's kernel, which streams faster there; on the same
    features without it (an Intel Xeon) avx512's, which streams faster there. A Zen 4 with
    AVX512-BF16 packs BF16 for vdpbf16ps (avx512bf16@zen4: measured there only)."""
    base = "avx2 fma f16c avx512f avx512bw avx512vl avx512vnni"
    zen, xeon, zen_bf16, xeon_bf16 = (json.loads(kb("--choices", f).stdout)
                                      for f in (base + " zen4", base, base + " avx512bf16 zen4", base + " avx512bf16"))
    for typ in ("F32", "F16", "BF16"):
        assert zen[typ]["from"]["1"] == "avx2:gemm", (typ, zen[typ])
        assert xeon[typ]["from"]["1"] == xeon_bf16[typ]["from"]["1"] == "avx512:gemm", (typ, xeon[typ])
        want = "avx512bf16:packed" if typ == "BF16" else "avx2:gemm"
        assert zen_bf16[typ]["from"] == {"1": want} if typ == "BF16" else zen_bf16[typ]["from"]["1"] == want, \
            (typ, zen_bf16[typ])
    assert zen_bf16["BF16"]["packed"] and not xeon_bf16["BF16"]["packed"]
    # an AVX2 desktop runs avx2 either way
    avx2 = json.loads(kb("--choices", "avx2 fma f16c").stdout)
    assert avx2["F16"]["from"]["1"] == "avx2:gemm"


def test_records_exist():
    assert RECORDS, "no quiet bench/results/kernels-*.json: choice.c's table cites none"
    for p in ALL_RECORDS:
        rec = json.loads(Path(p).read_text())
        assert rec["kind"] == "kernel-bench" and rec["results"] and rec["cpu"] and rec["features"], p


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: Path(p).stem)
def test_auto_never_slower_than_a_level(path):
    record = json.loads(Path(path).read_text())
    assert record["kind"] == "kernel-bench" and record["threads"] == 1
    r = kb("--choices", record_features(record))
    assert r.returncode == 0, r.stderr
    choices = json.loads(r.stdout)
    # every level a choice names for a type the record measured ran in the record
    levels = set(record["levels"].split(","))
    for typ, c in choices.items():
        named = {v.split(":")[0] for v in c["from"].values()} - {"dequantize"}
        if any(x["type"] == typ for x in record["results"]):
            assert named <= levels, (typ, c, levels)
    assert slower_choices(record, choices, MARGIN) == []


def test_check_can_fail():
    """The comparison itself: a table that runs a slower level is caught."""
    record = {"results": [
        {"isa": "avx512", "type": "Q4_K", "variant": "gemm", "tok": 1, "gflops": 30.0},
        {"isa": "avx2", "type": "Q4_K", "variant": "gemm", "tok": 1, "gflops": 20.0},
        {"isa": "avx2", "type": "Q4_K", "variant": "many", "tok": 64, "gflops": 100.0},
        {"isa": "avx512", "type": "Q4_K", "variant": "gemm", "tok": 64, "gflops": 50.0}]}
    good = {"Q4_K": {"packed": False, "from": {"1": "avx512:gemm", "8": "avx2:many"}}}
    assert slower_choices(record, good, MARGIN) == []
    bad = {"Q4_K": {"packed": False, "from": {"1": "avx2:gemm", "8": "avx512:gemm"}}}
    assert len(slower_choices(record, bad, MARGIN)) == 2
    # packing is all or nothing: a packed kernel slower at 1 token may be turned down...
    record["results"] += [{"isa": "avx2", "type": "Q4_K", "variant": "packed", "tok": 1, "gflops": 20.0},
                          {"isa": "avx2", "type": "Q4_K", "variant": "packed", "tok": 64, "gflops": 150.0}]
    assert slower_choices(record, good, MARGIN) == []
    # ...but not when it is faster at every count
    record["results"][-2]["gflops"] = 40.0
    assert len(slower_choices(record, good, MARGIN)) == 1
    # and a packed choice is held to the packed kernels' regime the same way
    packed = {"Q4_K": {"packed": True, "from": {"1": "avx2:packed"}}}
    assert slower_choices(record, packed, MARGIN) == []
    record["results"][-2]["gflops"] = 20.0
    record["results"][-1]["gflops"] = 80.0
    assert len(slower_choices(record, packed, MARGIN)) == 1


def test_arguments():
    r = kb("--help")
    assert r.returncode == 0 and "--check-auto" in r.stdout and "--choices" in r.stdout
    for args, msg in [(["--k", "100"], "--k"), (["--tok", "0"], "--tok"), (["--tok", "1,x"], "--tok"),
                      (["--seconds", "abc"], "not a number"), (["--bogus", "1"], "unknown option"),
                      (["--isa", "avx9"], "avx9"), (["--choices", "avx2 warp9"], "warp9"), (["--json"], "needs a value")]:
        r = kb(*args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)


def test_short_run_writes_record(tmp_path):
    out = tmp_path / "k.json"
    r = kb("--type", "Q8_0,Q4_K", "--tok", "1,8", "--seconds", "0.01", "--pool-mib", "8", "--rows", "256",
           "--k", "512", "--check-auto", "1.0", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads(out.read_text())
    assert rec["kind"] == "kernel-bench" and rec["features"] and rec["cpu"]
    got = {(x["isa"], x["type"], x["variant"]) for x in rec["results"]}
    for level in rec["levels"].split(","):
        assert (level, "Q4_K", "gemm") in got, (level, got)
    assert all(x["gflops"] > 0 for x in rec["results"])
    assert set(rec["auto"]) >= {"Q8_0", "Q4_K"}
