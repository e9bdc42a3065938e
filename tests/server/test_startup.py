"""What a server runs on (docs/server.md, "Flags"): the start-up line on stderr names the
backend (cpu unless --backend names another; cpu-ref by name), the ISA level, threads, the
KV type and the pool in blocks, tokens and bytes, and the load time; --kv-type (and
llama.cpp's --cache-type-k/-v, which may differ), --isa (default: $KIPP_CPU_ISA) and
--kv-memory reach the scheduler; bad values are fatal with a message naming the flag.

The tiny checkpoint's K + V is 1024 bytes per token in f32 and 512 in f16 or bf16 (2 layers
x 2 KV heads x 32 x 2), so the pool sizes below are exact."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import conftest
from conftest import MODEL, MODEL_NAME, SERVER_BIN, Srv
from bench import server_common as sc

LINE_RE = re.compile(
    r"^kipp-server: model (?P<model>\S+) as '(?P<name>[^']+)', context (?P<ctx>\d+), (?P<par>\d+) parallel; "
    r"backend (?P<backend>[a-z0-9-]+), ISA (?P<isa>[a-z0-9]+), (?P<threads>\d+) threads?, "
    r"KV (?P<kv>(?:f32|f16|bf16|q8_0|q4_0)(?:/(?:f32|f16|bf16|q8_0|q4_0))?), KV pool (?P<blocks>\d+) blocks of (?P<bs>\d+) tokens "
    r"\((?P<tokens>\d+) tokens, (?P<bytes>\d+) bytes = [0-9.]+ MiB, (?P<bpt>\d+) bytes/token\)"
    r"(?:, weights repacked [0-9.]+ MiB)?; "  # (BF16 on AMX tiles, Q8_0 panels, ...)
    r"loaded in [0-9.]+ ms$", re.M)
LEVELS = ("scalar", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx", "neon")


def startup_line(proc: sc.ServerProcess) -> dict:
    with open(proc.stderr_path, errors="replace") as f:
        err = f.read()
    m = LINE_RE.search(err)
    assert m, f"no start-up line on stderr:\n{err}"
    d = m.groupdict()
    return {k: (int(v) if v.isdigit() else v) for k, v in d.items()}


def start(name: str, *args: str, env: dict | None = None) -> Srv:
    """A server with exactly these flags (no --backend unless given), stopped at the end."""
    full_env = None if env is None else {**os.environ, **env}
    p = sc.ServerProcess(SERVER_BIN, MODEL, list(args), log_dir=conftest.LOG_DIR, name=name, env=full_env)
    conftest._servers.append(p)
    p.start(timeout=60)
    return Srv(p)


def stop(s: Srv) -> None:
    assert s.proc.stop(timeout=15) == 0, s.proc.stderr_tail()


def fatal(*args: str, env: dict | None = None, model: bool = True) -> subprocess.CompletedProcess:
    argv = [SERVER_BIN, *(["--model", MODEL] if model else []), "--port", "0", *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                       env=None if env is None else {**os.environ, **env})
    assert 0 < p.returncode < 128, (p.returncode, p.stderr)
    return p


def test_main_server_startup_line(server):
    """The shared server (--backend cpu --threads 2, defaults otherwise): ctx 512 x 8 parallel."""
    d = startup_line(server.proc)
    assert (d["name"], d["ctx"], d["par"]) == (MODEL_NAME, 512, 8), d
    assert (d["backend"], d["threads"], d["kv"]) == ("cpu", int(conftest.THREADS), "f16"), d
    assert d["isa"] in LEVELS, d
    assert d["bs"] == 16 and d["blocks"] * 16 == d["tokens"] == 512 * 8, d
    assert d["bpt"] == 512 and d["bytes"] == d["tokens"] * 512, d
    assert server.metrics().get("kipp_kv_blocks_total") == d["blocks"]


def test_default_backend_is_cpu():
    s = start("default-backend", "--threads", "1", "-c", "64", "--parallel", "2")
    d = startup_line(s.proc)
    # the pool: ctx x parallel = 128 tokens, f16 (cpu's default KV type)
    assert (d["backend"], d["threads"], d["kv"]) == ("cpu", 1, "f16"), d
    assert (d["blocks"], d["tokens"], d["bytes"], d["bpt"]) == (8, 128, 65536, 512), d
    assert s.complete("Hello", max_tokens=2, temperature=0)["usage"]["completion_tokens"] >= 1
    stop(s)


def test_cpu_ref_by_name():
    s = start("cpu-ref", "--backend", "cpu-ref", "-c", "64", "--parallel", "2")
    d = startup_line(s.proc)
    assert (d["backend"], d["isa"], d["threads"], d["kv"]) == ("cpu-ref", "scalar", 1, "f32"), d
    assert (d["blocks"], d["tokens"], d["bytes"], d["bpt"]) == (8, 128, 131072, 1024), d
    assert s.complete("Hello", max_tokens=2, temperature=0)["usage"]["completion_tokens"] >= 1
    stop(s)


@pytest.mark.parametrize("size", ["1M", "1MiB", "1024K", "1048576"])
def test_kv_memory_caps_the_pool(size):
    """512 x 8 = 4096 tokens asked for; 1 MiB of f16 K/V holds 2048."""
    s = start(f"kv-memory-{size}", "--threads", "1", "--kv-memory", size)
    d = startup_line(s.proc)
    assert (d["kv"], d["tokens"], d["blocks"], d["bytes"]) == ("f16", 2048, 128, 1 << 20), d
    assert s.metrics().get("kipp_kv_blocks_total") == 128
    stop(s)


def test_kv_memory_does_not_grow_the_pool():
    """A cap above ctx x parallel leaves the pool at ctx x parallel."""
    s = start("kv-memory-big", "--threads", "1", "-c", "64", "--parallel", "2", "--kv-memory", "1G")
    d = startup_line(s.proc)
    assert (d["tokens"], d["bytes"]) == (128, 65536), d
    stop(s)


def test_kv_type_and_memory_together():
    """96 KiB holds 192 bf16 tokens or 96 f32 tokens (both at least one context of 64 plus a
    block): the KV type reaches the scheduler's sizing."""
    s = start("kv-bf16", "--threads", "1", "-c", "64", "--parallel", "8", "--kv-type", "bf16",
              "--kv-memory", "96K")
    d = startup_line(s.proc)
    assert (d["kv"], d["tokens"], d["blocks"], d["bytes"], d["bpt"]) == ("bf16", 192, 12, 98304, 512), d
    stop(s)
    s = start("kv-f32", "--threads", "1", "-c", "64", "--parallel", "8", "--kv-type", "f32",
              "--kv-memory", "96K")
    d = startup_line(s.proc)
    assert (d["kv"], d["tokens"], d["blocks"], d["bytes"], d["bpt"]) == ("f32", 96, 6, 98304, 1024), d
    stop(s)


def test_quantized_kv_types_and_memory():
    """q8_0 K is 2 layers x 2 blocks x 34 = 136 bytes per token, q4_0 V 72: 96 KiB hold 361
    q8_0 tokens (352 in whole blocks) or 472 q8_0/q4_0 tokens (464): the pool is sized in the
    quantized bytes per token, the start-up line names both types."""
    s = start("kv-q8", "--threads", "1", "-c", "64", "--parallel", "8", "--kv-type", "q8_0",
              "--kv-memory", "96K")
    d = startup_line(s.proc)
    assert (d["kv"], d["tokens"], d["blocks"], d["bytes"], d["bpt"]) == ("q8_0", 352, 22, 95744, 272), d
    stop(s)
    s = start("kv-q8-q4", "--threads", "1", "-c", "64", "--parallel", "8", "--cache-type-k", "q8_0",
              "--cache-type-v", "q4_0", "--kv-memory", "96K")
    d = startup_line(s.proc)
    assert (d["kv"], d["tokens"], d["blocks"], d["bytes"], d["bpt"]) == ("q8_0/q4_0", 464, 29, 96512, 208), d
    stop(s)


def test_cache_type_k_v_equal():
    s = start("cache-type", "--threads", "1", "-c", "64", "--parallel", "2", "--cache-type-k", "f32",
              "--cache-type-v", "f32")
    d = startup_line(s.proc)
    assert (d["kv"], d["bytes"]) == ("f32", 131072), d
    stop(s)


def test_isa_flag_and_env():
    s = start("isa-env", "--threads", "1", "-c", "64", "--parallel", "2", env={"KIPP_CPU_ISA": "scalar"})
    assert startup_line(s.proc)["isa"] == "scalar"
    stop(s)
    s = start("isa-flag", "--threads", "1", "-c", "64", "--parallel", "2", "--isa", "scalar",
              env={"KIPP_CPU_ISA": "avx9"})
    assert startup_line(s.proc)["isa"] == "scalar"
    stop(s)


@pytest.mark.parametrize("value,message", [
    ("12X", "--kv-memory expects a size in bytes: a whole number with an optional suffix K, M, G, KiB, MiB or GiB"),
    ("1.5G", "--kv-memory expects a size in bytes"),
    ("-1", "--kv-memory expects a size in bytes"),
    ("512MB", "--kv-memory expects a size in bytes"),
    ("", "--kv-memory expects a size in bytes"),
    ("0", "--kv-memory 0 is too small"),
    ("0K", "--kv-memory 0K is too small"),
    ("99999999999999999999", "--kv-memory 99999999999999999999 is too large"),
    ("99999999999G", "--kv-memory 99999999999G is too large"),
])
def test_kv_memory_bad_values(value, message):
    p = fatal("--kv-memory", value)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_kv_memory_errors():
    p = fatal("--kv-memory")
    assert p.returncode == 2 and "--kv-memory needs a value" in p.stderr, p.stderr
    p = fatal("--kv-memory", "1M", "--kv-tokens", "1024")
    assert p.returncode == 2 and "give --kv-tokens" in p.stderr and "not both" in p.stderr, p.stderr
    # too small for one context (64 tokens + a block of f32 K/V = 81920 bytes): fatal at start
    p = fatal("-c", "64", "--kv-type", "f32", "--kv-memory", "64K")
    assert p.returncode == 1 and "65536 bytes" in p.stderr and "f32" in p.stderr, p.stderr


@pytest.mark.parametrize("args,message", [
    (["--kv-type", "q5_0"], "--kv-type: unknown KV type 'q5_0' (choose f32, f16, bf16, q8_0, q4_0"),
    (["--kv-type"], "--kv-type needs a value"),
    (["--cache-type-k", "f16"], "--cache-type-k f16 is given without --cache-type-v"),
    (["--cache-type-v", "q4_0", "--cache-type-k", "q5_1"], "--cache-type-k: unknown KV type 'q5_1'"),
    (["--kv-type", "bf16", "--cache-type-k", "f16", "--cache-type-v", "f16"],
     "--kv-type bf16 and --cache-type-k f16 / --cache-type-v f16 disagree"),
    (["--isa", ""], "--isa expects a name"),
    (["--fair-share", "lots"], "--fair-share also takes 'off'"),
    (["--fair-share", "-1"], "--fair-share expects a number in [0, 100], got '-1'"),
    (["--fair-share"], "--fair-share needs a value"),
    (["--prefill-step-ms", "0"], "--prefill-step-ms expects a number in [1, 3.6e+06], got '0'"),
    (["--prefill-step-ms", "soon"], "--prefill-step-ms also takes 'off'"),
    (["--prefill-busy-ms", "0"], "--prefill-busy-ms expects a number in [1, 3.6e+06], got '0'"),
    (["--prefill-busy-ms", "later"], "--prefill-busy-ms also takes 'off'"),
])
def test_runtime_flag_usage_errors(args, message):
    p = fatal(*args)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_start_failures_are_fatal():
    p = fatal("--isa", "avx9")
    assert p.returncode == 1 and "unknown ISA level 'avx9'" in p.stderr, p.stderr
    p = fatal(env={"KIPP_CPU_ISA": "avx9"})
    assert p.returncode == 1 and "the ISA level 'avx9' comes from the environment variable KIPP_CPU_ISA" \
        in p.stderr, p.stderr
    p = fatal("--backend", "cuda")
    assert p.returncode == 1 and "backend 'cuda' is not available" in p.stderr, p.stderr


def test_help_names_the_flags():
    out = subprocess.run([SERVER_BIN, "--help"], capture_output=True, text=True, timeout=30).stdout
    for flag in ("backend: cpu (default)", "--isa LEVEL", "KIPP_CPU_ISA", "--kv-type T", "--cache-type-k",
                 "--kv-memory BYTES"):
        assert flag in out, flag


def test_kv_memory_is_a_ceiling_in_whole_blocks():
    """100 KiB of f16 K/V (512 bytes/token) is 200 tokens: the pool keeps whole blocks within
    the limit, 12 blocks = 192 tokens = 98304 bytes, never 13 (106496 bytes, over it)."""
    s = start("kv-memory-ceiling", "--threads", "1", "-c", "64", "--parallel", "4", "--kv-memory", "100K")
    d = startup_line(s.proc)
    assert d["bytes"] <= 100 * 1024 and (d["blocks"], d["tokens"], d["bytes"]) == (12, 192, 98304), d
    stop(s)


def test_step_trace(tmp_path):
    """KIPP_STEP_TRACE=FILE: a line per engine step in the order docs/server.md gives; the
    prompt-token column adds up to the prompt and the decoding column to the tokens after
    the first; with KIPP_STEP_TRACE_ROWS=1 a line per running sequence follows each step's,
    its tokens in the step adding up the same but for the step that finished it (the lines
    list the sequences running after the step); an unwritable path is named on stderr and the
    server runs without a trace."""
    path = tmp_path / "steps.txt"
    s = start("step-trace", "--threads", "1", "-c", "128", "--parallel", "2", "--no-prefix-cache",
              env={"KIPP_STEP_TRACE": str(path), "KIPP_STEP_TRACE_ROWS": "1"})
    js = s.complete("one two three four five six", max_tokens=5, temperature=0, ignore_eos=True)
    stop(s)
    lines = path.read_text().splitlines()
    rows = [line.split() for line in lines if not line.startswith(" ")]
    # KIPP_STEP_TRACE_ROWS=1: after each step's line one per running sequence, then the queue's depth
    seqs = []
    for line in lines:
        if not line.startswith(" "):
            seqs.append([])
        elif line.startswith("  R "):
            seqs[-1].append(line.split())
        else:
            assert line.startswith("  Q "), line
    assert [len(q) for q in seqs] == [int(r[7]) for r in rows], lines[:12]
    # the sequences still running after each step: the last step's, which finished the request, is not listed
    assert sum(int(q[0][4][2:]) for q in seqs if q) == js["usage"]["prompt_tokens"] + js["usage"]["completion_tokens"] - 2
    assert not seqs[-1] and all(seqs[:-1]), lines[-6:]
    assert all(q[0][2] == "g0.0" for q in seqs if q), lines[:12]
    assert rows and all(len(r) == 15 for r in rows), rows[:3]
    assert all(float(x) >= 0 for r in rows for x in r[10:]), rows        # step model a, b, c; 1-, 2-row steps
    assert float(rows[-1][13]) > 0, rows    # the one-row step measured by the last step (decode only)
    assert all(float(r[2]) > 0 for r in rows if int(r[4]) > 0), rows       # forward seconds
    assert sum(int(r[6]) for r in rows) == js["usage"]["prompt_tokens"], rows
    assert sum(int(r[5]) for r in rows) == js["usage"]["completion_tokens"] - 1, rows
    s = start("step-trace-bad", "--threads", "1", "-c", "128", "--parallel", "2",
              env={"KIPP_STEP_TRACE": str(tmp_path / "no" / "such" / "dir" / "steps.txt")})
    s.complete("hello", max_tokens=2)
    stop(s)
    with open(s.proc.stderr_path, errors="replace") as f:
        assert "KIPP_STEP_TRACE: cannot write" in f.read()
