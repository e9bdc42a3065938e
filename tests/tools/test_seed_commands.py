"""test_seed_commands.py — the seed guide's commands, run as written (issue 29, deliverable 7).

The guide Kipp was specified from lives in ../shared/seed/ (outside the repository); its
copy, tests/tools/data/seed-guide.txt (a provenance line, then the file byte for byte), is
what this test reads, and it checks that the copy still equals ../shared/seed/ where that
folder exists. Every command line of the guide is extracted (make targets, build/kipp_test
lines, the KIPP_FAULT lines, the python3 lines with their continuations) together with the
scripts and targets its prose names, and each one must be covered by exactly one entry of
PLAN below: a new or changed command in the guide fails test_every_seed_command_is_planned
until it is.

How each kind runs, from the repository root:
- make targets that build (cpu, server, the cuda binaries): `make -n` succeeds and `make -q`
  finds them up to date (make test built them first); the full tier runs `make TARGET`.
- metal targets (make metal, server-metal, test-metal, build/kipp_test_metal): refused by
  name with the reason (src/backend/metal/backend.mk), never make's "No rule to make target".
- targets that cannot run inside this test (make test itself, test-sanitize, vectors, the
  integration stages make test runs anyway, test-cuda without a GPU): listed with the reason,
  and `make -n TARGET` must succeed.
- the test binaries, as written, in bash, with the guide's M/V (qwen3-4b-base, a download of
  several gigabytes that this machine cannot make) replaced by the shipped tiny-tied
  checkpoint and its vectors (TINY_M, TINY_V).
- the fault commands: `make build/kipp_test_fault` (when build/fault is current; see
  test_fault_build), then each KIPP_FAULT line, whose outcome must be the one the fault
  table of docs/kv-cache.md gives for that gate on kipp_test's default backend (cpu-ref):
  KIPP_FAULT=1 (read-block) is missed by --fault-reference (passes, exit 0) and caught by
  --paged-cpu (exit non-zero). The full tier runs modes 2-4 as well.
- python3 commands: `--help` with the seed's python3 (the file form) and with the venv's
  python (file and -m forms); a missing package gives a message naming the venv, never a
  traceback; then a short real run on kipp-tiny with its output in a temporary folder
  (never bench/results/).
Slow cases carry the `full` marker (pytest.ini): the CI tier deselects them.
A stale build (make -q says the cpu binaries or build/fault need remaking) skips the cases
that would otherwise rebuild inside the test, saying so; KIPP_SEED_STRICT=1 makes that a
failure (for a run right after `make test-build`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COPY = ROOT / "tests" / "tools" / "data" / "seed-guide.txt"
SHARED_SEED = ROOT.parent / "shared" / "seed"
VENV_PY = ROOT / ".venv" / "bin" / "python"

# the guide's checkpoint and the shipped stand-ins
SEED_M = "models/qwen3-4b-base/kipp-qwen3-4b-base-bf16.gguf"
SEED_V = "tests/test-vectors/qwen3-4b-base"
TINY_M = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"
TINY_V = "tests/test-vectors/tiny-tied"
BENCH_M = "models/kipp-tiny/kipp-tiny-bf16.gguf"  # the benches' model (<gguf>, the 4B path)
KIPP_TEST_DEFAULT_BACKEND = "cpu-ref"  # docs/kv-cache.md: the gates' default --backend


# ---- the guide ------------------------------------------------------------------------------

def seed_text() -> str:
    first, rest = COPY.read_text(encoding="utf-8").split("\n", 1)
    assert first.startswith("# provenance:"), f"{COPY}: first line must be the provenance line"
    return rest


def provenance_name() -> str:
    first = COPY.read_text(encoding="utf-8").split("\n", 1)[0]
    m = re.search(r"\.\./shared/seed/(\S+\.txt)", first)
    assert m, f"{COPY}: the provenance line names no ../shared/seed/*.txt file"
    return m.group(1)


COMMAND_START = re.compile(r"^(make |build/|KIPP_FAULT=|python3 |[A-Z]\w*=\S)")


def seed_commands(text: str) -> list[str]:
    """Every command line of the guide, continuation lines joined, trailing comments dropped."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        while s.endswith("\\") and i + 1 < len(lines):
            i += 1
            s = s[:-1].rstrip() + " " + lines[i].strip()
        i += 1
        if COMMAND_START.match(s):
            out.append(re.sub(r"\s+#.*$", "", s).strip())
    return out


def seed_prose(text: str) -> str:
    """The lines that are not commands (nor a command's continuation lines)."""
    out, cont = [], False
    for line in text.split("\n"):
        s = line.strip()
        if not cont and not COMMAND_START.match(s):
            out.append(line)
        cont = s.endswith("\\") and (cont or bool(COMMAND_START.match(s)))
    return "\n".join(out)


def make_targets(cmds: list[str], prose: str) -> list[str]:
    """Targets of the make lines, then those the prose names ("the convenience targets A and
    B", "the vectors target")."""
    out = []
    for c in cmds:
        if c.startswith("make "):
            out += [w for w in c.split()[1:] if not w.startswith("-") and "=" not in w]
    for m in re.finditer(r"\btargets\s+([\w-]+)\s+and\s+([\w-]+)", prose):
        out += [m.group(1), m.group(2)]
    out += re.findall(r"\bthe\s+([\w-]+)\s+target\b", prose)
    return list(dict.fromkeys(out))


def prose_scripts(prose: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"(?<![\w/])((?:\.\./)?(?:tools|bench)/[\w/.-]*\w)", prose)))


TEXT = seed_text()
CMDS = seed_commands(TEXT)
PROSE = seed_prose(TEXT)
TARGETS = make_targets(CMDS, PROSE)
SCRIPTS = prose_scripts(PROSE)

# ---- the plan: every command and named target/script, and how it runs here -------------------

BUILD_TARGETS = {  # built by make test's prerequisites before the tooling stage
    "cpu": "make test builds it first",
    "server": "make test builds it first",
    "cuda-generic": "make test builds it (BACKEND_TEST_TARGETS) unless KIPP_NO_CUDA=1",
    "server-cuda": "make test builds it (BACKEND_TEST_TARGETS) unless KIPP_NO_CUDA=1",
    "cuda-spark": "make test builds it (BACKEND_TEST_TARGETS) unless KIPP_NO_CUDA=1",
}
CUDA_TARGETS = {"cuda-generic", "server-cuda", "cuda-spark"}
METAL_TARGETS = ["metal", "server-metal", "test-metal", "build/kipp_test_metal"]
LISTED_TARGETS = {  # cannot run inside this test: the reason; `make -n` must still succeed
    "test": "it is what runs this test (the tooling stage of make test)",
    "test-sanitize": "rebuilds the tree with ASan + UBSan and runs the whole suite: its own tier",
    "docs-check": "make test runs it (the 'docs drift' stage: scripts/docs.sh check)",
    "test-cpu-model": "the CPU model gates for CHECKPOINT, default qwen3-4b-base (not downloadable "
                      "here); make test runs them on every tiny checkpoint (tests/model/run_cpu_model.sh)",
    "vectors": "downloads, converts and regenerates the multi-gigabyte golden vectors (the guide "
               "itself says to avoid it)",
    "test-server": "make test runs it (the 'server over HTTP' stage)",
    "test-chat": "make test runs it (the 'chat CLI' stage)",
    "test-draft-spec": "make test runs it (the 'speculative decoding' stage)",
    "test-cuda": "needs an NVIDIA GPU (tests/cuda/run_cuda_gates.sh); the full tier runs it where "
                 "nvidia-smi lists one",
}
FAULT_BUILD = "build/kipp_test_fault"

KIPP_TEST_LINES = {  # build/kipp_test FLAG "$M" "$V"
    f'build/kipp_test {flag} "$M" "$V"' for flag in
    ("--model", "--phase2-model", "--multilogit", "--paged-cpu", "--pooled-cpu")}
METAL_TEST_LINES = {"build/kipp_test_metal --metal-operators"} | {
    f'build/kipp_test_metal {flag} "$M" "$V"' for flag in
    ("--phase3-metal", "--multilogit-metal", "--paged-metal", "--pooled-metal", "--longctx-metal")}
FAULT_LINES = {'KIPP_FAULT=1 build/kipp_test_fault --fault-reference "$M" "$V"',
               'KIPP_FAULT=1 build/kipp_test_fault --paged-cpu "$M" "$V"'}
ASSIGNMENTS = {f"M={SEED_M}", f"V={SEED_V}"}

# python3 commands: the script, then (seed's args -> args of the short real run here)
PY_SCRIPTS = {
    "tools/bench.py": "python3 tools/bench.py --backend metal --model " + SEED_M +
                      ' --prompt "The capital of France is" --decode 64 --warmup 1 --runs 5'
                      " --output bench/results/4b-bf16-decode.json",
    "bench/spec_bench.py": "python3 bench/spec_bench.py --model <gguf> --decode 256 --runs 3 --gate both",
    "bench/server_bench.py": "python3 bench/server_bench.py --model <gguf>",
    "bench/prefix_bench.py": "python3 bench/prefix_bench.py --model <gguf>",
    "bench/load_bench.py": "python3 bench/load_bench.py --model <gguf>",
    "bench/ppl_bench.py": "python3 bench/ppl_bench.py --output bench/results/ppl-4b.json",
}
# scripts and files the prose names
PROSE_PLAN = {
    "tools/download_model.sh": "--help (downloading needs the network)",
    "tools/convert_to_gguf.py": "--help with python3 and the venv, then a real conversion of tiny-tied",
    "tools/ops/verda_cuda_gate.sh": "refuses without --i-accept-the-cost (renting a GPU is never done here)",
    "tools/ops/collect_cuda_gates.py": "parses a committed device-gate log",
    "../bench/README.md": "the protocol the guide points to: bench/README.md",
    "bench/results": "where the committed records are (this test writes none there)",
}


def planned(cmd: str) -> bool:
    if cmd in ASSIGNMENTS or cmd in KIPP_TEST_LINES or cmd in METAL_TEST_LINES or cmd in FAULT_LINES:
        return True
    if cmd.startswith("make "):
        known = set(BUILD_TARGETS) | set(METAL_TARGETS) | set(LISTED_TARGETS) | {FAULT_BUILD}
        return all(t in known for t in cmd.split()[1:])
    return cmd in PY_SCRIPTS.values()


# ---- helpers ----------------------------------------------------------------------------------

def run(cmd, *, env=None, timeout=120, shell=False):
    e = dict(os.environ)
    e.pop("MAKEFLAGS", None)  # a make above this test must not pass -j/-n down
    e.pop("MFLAGS", None)
    # the guide's commands as written use the default build folder: make test-sanitize's
    # BUILD=build/san would move make's targets (build/san/kipp_test_metal) away from them
    e.pop("BUILD", None)
    if env:
        e.update(env)
    return subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout,
                          shell=shell, executable="/bin/bash" if shell else None, stdin=subprocess.DEVNULL)


def bash_with_mv(line: str, m: str = TINY_M, v: str = TINY_V, timeout=300):
    """The guide's line as written, in bash, after the guide's M= and V= lines (substituted)."""
    return run(f"M={m}\nV={v}\n{line}", shell=True, timeout=timeout)


def need(path: str, how: str) -> None:
    if not (ROOT / path).exists():
        pytest.skip(f"{path} is not here ({how}); the guide's command needs it")


def out_of(r) -> str:
    return (r.stdout or "") + (r.stderr or "")


def system_python3() -> str | None:
    """The seed's python3: the first one on PATH that is not this venv's."""
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = Path(d) / "python3"
        if p.is_file() and os.access(p, os.X_OK) and Path(d).resolve() != (ROOT / ".venv" / "bin").resolve():
            return str(p)
    return None


def interpreters() -> list[str]:
    out = [str(VENV_PY) if VENV_PY.exists() else sys.executable]
    sp = system_python3()
    if sp:
        out.append(sp)
    return out


def module_of(script: str) -> str:
    return script[:-3].replace("/", ".")


def summary_ok(r) -> bool:
    return re.search(r"^\d+ passed, 0 failed$", r.stdout, re.M) is not None


def has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and run([smi, "-L"], timeout=30).returncode == 0


# ---- the guide itself ---------------------------------------------------------------------------

def test_copy_matches_shared_seed():
    if not SHARED_SEED.is_dir():
        pytest.skip("../shared/seed is not beside this checkout: the committed copy is the guide")
    name = provenance_name()
    src = SHARED_SEED / name
    assert src.is_file(), f"{src} (named by {COPY}'s provenance line) is missing"
    body = COPY.read_bytes().split(b"\n", 1)[1]
    assert body == src.read_bytes(), f"{COPY} differs from {src}: copy it again (keep the provenance line)"
    others = sorted(p.name for p in SHARED_SEED.glob("*.txt") if p.name != name)
    assert not others, f"new seed files {others} in {SHARED_SEED}: copy them and cover their commands here"


def test_every_seed_command_is_planned():
    assert len(CMDS) >= 30, f"only {len(CMDS)} commands found in the guide: the parser is broken"
    unplanned = [c for c in CMDS if not planned(c)]
    assert not unplanned, f"commands of the guide this test does not run: {unplanned}"
    known = set(BUILD_TARGETS) | set(METAL_TARGETS) | set(LISTED_TARGETS) | {FAULT_BUILD}
    assert set(TARGETS) <= known, f"make targets of the guide not covered: {set(TARGETS) - known}"
    # every planned thing is still in the guide (a stale plan is a wrong plan)
    for group in (KIPP_TEST_LINES, METAL_TEST_LINES, FAULT_LINES, ASSIGNMENTS, set(PY_SCRIPTS.values())):
        missing = sorted(group - set(CMDS))
        assert not missing, f"planned but not in the guide: {missing}"
    stale_targets = (set(BUILD_TARGETS) | set(LISTED_TARGETS) | {"metal", "server-metal", "test-metal"}) - set(TARGETS)
    assert not stale_targets, f"planned targets the guide no longer names: {stale_targets}"
    assert set(SCRIPTS) - set(PY_SCRIPTS) == set(PROSE_PLAN), \
        f"scripts the prose names: {SCRIPTS}; planned: {sorted(PROSE_PLAN)}"


# ---- make targets -------------------------------------------------------------------------------

@pytest.mark.parametrize("target", sorted(set(BUILD_TARGETS) | set(LISTED_TARGETS) | {FAULT_BUILD}))
def test_make_target_exists(target):
    r = run(["make", "-n", target], timeout=120)
    assert r.returncode == 0, f"make -n {target}: {out_of(r)[-2000:]}"
    assert "No rule to make target" not in out_of(r)


def cuda_skipped() -> str | None:
    if os.environ.get("KIPP_NO_CUDA") == "1":
        return "KIPP_NO_CUDA=1: make test skips the cuda build on purpose"
    if not Path(os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")).exists() and not shutil.which("nvcc"):
        return "no nvcc here: make test reports the missing toolkit itself"
    return None


@pytest.mark.parametrize("target", sorted(BUILD_TARGETS))
def test_build_target_up_to_date(target):
    """`make TARGET` as written would be a no-op: make test's prerequisites built it."""
    if target in CUDA_TARGETS and cuda_skipped():
        pytest.skip(cuda_skipped())
    r = run(["make", "-q", target], timeout=120)
    if r.returncode == 1 and os.environ.get("KIPP_SEED_STRICT") != "1":
        pytest.skip(f"make -q {target}: not up to date (sources newer than build/); "
                    f"test_build_target_runs (full tier) builds it. {BUILD_TARGETS[target]}")
    assert r.returncode == 0, f"make -q {target} -> {r.returncode}: {out_of(r)[-1500:]}"


@pytest.mark.full
@pytest.mark.parametrize("target", sorted(BUILD_TARGETS))
def test_build_target_runs(target):
    if target in CUDA_TARGETS and cuda_skipped():
        pytest.skip(cuda_skipped())
    r = run(["nice", "-n", "5", "make", "-s", target], timeout=1800)
    assert r.returncode == 0, f"make {target}: {out_of(r)[-3000:]}"


@pytest.mark.parametrize("target", METAL_TARGETS)
def test_metal_target_refuses_by_name(target):
    r = run(["make", target], timeout=60)
    err = out_of(r)
    assert r.returncode != 0, f"make {target} succeeded, but no metal backend is written: {err}"
    assert "No rule to make target" not in err, err
    assert f"make {target}: cannot build" in err, err
    assert "not written yet" in err, err
    if platform.system() != "Darwin":
        assert "macOS" in err and "Apple" in err, err
    if target.startswith("build/"):
        assert not (ROOT / target).exists(), f"{target} exists, but no metal backend is written"


@pytest.mark.parametrize("line", sorted(METAL_TEST_LINES))
def test_metal_test_binary_lines(line):
    """The guide's build/kipp_test_metal lines: the binary cannot exist; building it refuses (above)."""
    binary = line.split()[0]
    assert binary == "build/kipp_test_metal"
    assert not (ROOT / binary).exists()
    r = run(["make", "-n", binary], timeout=60)
    assert "No rule to make target" not in out_of(r)


@pytest.mark.full
def test_make_test_cuda_on_a_gpu():
    if not has_gpu():
        pytest.skip("no NVIDIA GPU here (nvidia-smi -L): " + LISTED_TARGETS["test-cuda"])
    r = run(["nice", "-n", "5", "make", "cuda-generic", "test-cuda"], timeout=3600)
    assert r.returncode == 0, out_of(r)[-3000:]


# ---- model-backed gates: build/kipp_test with M/V -> tiny-tied ----------------------------------

# The CI tier runs the first (2 s); the other four (about 25 s together) run in the full tier:
# make test's "model gates tiny-tied" stage runs the same flags on the same files per backend,
# cpu-ref (these lines' default) included (tests/model/run_cpu_model.sh).
CI_KIPP_TEST_LINE = 'build/kipp_test --model "$M" "$V"'


@pytest.mark.parametrize("line", [pytest.param(c, marks=() if c == CI_KIPP_TEST_LINE else pytest.mark.full)
                                  for c in sorted(KIPP_TEST_LINES)])
def test_kipp_test_line(line):
    need("build/kipp_test", "make cpu")
    need(TINY_M, "make tiny-models")
    r = bash_with_mv(line)
    assert r.returncode == 0 and summary_ok(r), f"{line} (M={TINY_M}, V={TINY_V}): {out_of(r)[-2000:]}"


# ---- the mutation gate ----------------------------------------------------------------------------

def fault_table() -> dict[tuple[int, str], str]:
    """docs/kv-cache.md's expected outcome: (mode, 'GATE BACKEND') -> caught|missed."""
    lines = (ROOT / "docs" / "kv-cache.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, s in enumerate(lines) if s.startswith("| KIPP_FAULT | fault |"))
    cols = [c.strip() for c in lines[start].strip("|").split("|")]
    table = {}
    for s in lines[start + 2:]:
        if not s.startswith("|"):
            break
        cells = [c.strip() for c in s.strip("|").split("|")]
        for col, val in zip(cols[2:], cells[2:]):
            table[(int(cells[0]), col)] = val
    return table


def fault_build_current() -> bool:
    r = run(["make", "-q", "BUILD=build/fault", "EXTRA_CFLAGS=-DKIPP_FAULT_INJECT", "build/fault/kipp_test"],
            timeout=120)
    return r.returncode == 0 and (ROOT / FAULT_BUILD).exists()


_FAULT_READY: list = []  # once per session: None (ready) or the reason it is not


def fault_binary_ready() -> None:
    """make build/kipp_test_fault as written (once), when that is cheap: build/fault is current."""
    if not _FAULT_READY:
        if not fault_build_current():
            _FAULT_READY.append("build/fault is absent or stale: the KV fault matrix stage builds it "
                                "(two builds of build/fault at once would race); test_fault_build "
                                "(full tier) builds it here")
        else:
            r = run(["make", FAULT_BUILD], timeout=300)
            assert r.returncode == 0, f"make {FAULT_BUILD}: {out_of(r)[-2000:]}"
            _FAULT_READY.append(None)
    if _FAULT_READY[0] is not None:
        if os.environ.get("KIPP_SEED_STRICT") == "1":
            pytest.fail(_FAULT_READY[0] + " (KIPP_SEED_STRICT=1)")
        pytest.skip(_FAULT_READY[0])


@pytest.mark.full
def test_fault_build():
    r = run(["nice", "-n", "5", "make", FAULT_BUILD], timeout=1800)
    assert r.returncode == 0, f"make {FAULT_BUILD}: {out_of(r)[-3000:]}"
    assert (ROOT / FAULT_BUILD).exists()
    _FAULT_READY[:] = [None]


def fault_case(line: str, mode: int):
    need(TINY_M, "make tiny-models")
    fault_binary_ready()
    gate = line.split()[2]
    line = line.replace("KIPP_FAULT=1 ", f"KIPP_FAULT={mode} ", 1)
    r = bash_with_mv(line)
    want = fault_table()[(mode, f"{gate} {KIPP_TEST_DEFAULT_BACKEND}")]
    got = "caught" if r.returncode != 0 else "missed"
    assert got == want, (f"{line} (M={TINY_M}): {got} (exit {r.returncode}); docs/kv-cache.md expects "
                         f"{want}: {out_of(r)[-1500:]}")
    if got == "caught":
        assert re.search(r"^\d+ passed, [1-9]\d* failed$", r.stdout, re.M), out_of(r)[-1500:]


@pytest.mark.parametrize("line", sorted(FAULT_LINES))
def test_fault_line_as_written(line):
    fault_case(line, 1)


# --paged-cpu's no-fault run (10 s) in the full tier; the fault matrix stage checks both baselines
@pytest.mark.parametrize("line", [pytest.param(c, marks=pytest.mark.full if "--paged-cpu" in c else ())
                                  for c in sorted(FAULT_LINES)])
def test_fault_line_without_fault_passes(line):
    need(TINY_M, "make tiny-models")
    fault_binary_ready()
    r = bash_with_mv(line.replace("KIPP_FAULT=1 ", "", 1))
    assert r.returncode == 0 and summary_ok(r), out_of(r)[-1500:]


@pytest.mark.full
@pytest.mark.parametrize("mode", [2, 3, 4])
@pytest.mark.parametrize("line", sorted(FAULT_LINES))
def test_fault_line_other_modes(line, mode):
    """The guide: "Values 1-4 select read-block, read-slot, rollover, and K/V-swap faults"."""
    fault_case(line, mode)


# ---- python3 commands: --help, a missing package, a short real run -----------------------------------

HELP_SCRIPTS = sorted(set(PY_SCRIPTS) | {"tools/convert_to_gguf.py", "tools/ops/collect_cuda_gates.py"})


def assert_ran_or_named_the_venv(r, what: str) -> None:
    err = out_of(r)
    assert "Traceback" not in err, f"{what}: a traceback instead of a message:\n{err[-2500:]}"
    if r.returncode != 0:
        assert ".venv/bin/python" in err or "make deps" in err, f"{what}: exit {r.returncode}:\n{err[-2000:]}"


@pytest.mark.parametrize("script", HELP_SCRIPTS)
def test_help_with_the_seeds_python3(script):
    """`python3 SCRIPT --help`: runs, or (a package this python3 lacks) names the venv."""
    py = system_python3()
    if py is None:
        pytest.skip("no python3 on PATH besides the venv's")
    r = run([py, script, "--help"], timeout=60)
    assert_ran_or_named_the_venv(r, f"{py} {script} --help")
    if r.returncode == 0:
        assert "usage:" in r.stdout


@pytest.mark.parametrize("form", ["file", "module"])
@pytest.mark.parametrize("script", HELP_SCRIPTS)
def test_help_with_the_venv(script, form):
    py = str(VENV_PY) if VENV_PY.exists() else sys.executable
    args = [py, script] if form == "file" else [py, "-m", module_of(script)]
    r = run(args + ["--help"], timeout=60)
    assert r.returncode == 0 and "usage:" in r.stdout, f"{args} --help: {out_of(r)[-2500:]}"


@pytest.fixture(scope="module")
def no_numpy(tmp_path_factory) -> Path:
    """A PYTHONPATH folder whose numpy is missing, whatever the interpreter has."""
    d = tmp_path_factory.mktemp("no_numpy")
    (d / "numpy").mkdir()
    (d / "numpy" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'numpy\'", name="numpy")\n')
    return d


@pytest.mark.parametrize("form", ["file", "module"])
@pytest.mark.parametrize("script", ["tools/convert_to_gguf.py", "bench/ppl_bench.py", "tools/quantize.py"])
def test_missing_package_names_the_venv(script, form, no_numpy):
    for py in interpreters():
        args = [py, script] if form == "file" else [py, "-m", module_of(script)]
        r = run(args + ["--help"], env={"PYTHONPATH": str(no_numpy)}, timeout=60)
        err = r.stderr
        assert r.returncode == 1, f"{args}: exit {r.returncode}: {out_of(r)[-1500:]}"
        assert "Traceback" not in err, err
        assert f"{script}: needs the Python package 'numpy'" in err, err
        assert "make deps" in err, err
        if Path(py).resolve() != VENV_PY.resolve():
            assert ".venv/bin/python" in err, err


def test_script_folder_does_not_shadow_packages():
    """tools/bench.py run as a file must not be imported as the `bench` package (the circular
    import the seed's `python3 tools/bench.py` once died of)."""
    for py in interpreters():
        r = run([py, "tools/bench.py", "--help"], timeout=60)
        assert r.returncode == 0, f"{py} tools/bench.py --help: {out_of(r)[-2500:]}"
        assert "circular import" not in out_of(r)


@pytest.fixture
def tmp_out(tmp_path) -> Path:
    return tmp_path


def seed_python3(script: str) -> str:
    return system_python3() or (str(VENV_PY) if VENV_PY.exists() else sys.executable)


def test_bench_as_written_with_metal_is_refused_clearly(tmp_out):
    """The guide's tools/bench.py command asks for --backend metal: here that is kipp's
    'not in this binary' error with the way to get it, not a traceback."""
    need("build/kipp", "make cpu")
    need(BENCH_M, "make tiny-models")
    out = tmp_out / "4b-bf16-decode.json"
    args = shlex_split(PY_SCRIPTS["tools/bench.py"])
    args = [seed_python3("tools/bench.py")] + [
        {SEED_M: BENCH_M, "bench/results/4b-bf16-decode.json": str(out)}.get(a, a) for a in args[1:]]
    args[args.index("--decode") + 1] = "4"
    args[args.index("--runs") + 1] = "1"
    r = run(args, timeout=120)
    err = out_of(r)
    assert r.returncode != 0, err
    assert "Traceback" not in err, err
    assert "metal" in err and "make metal" in err, err
    assert not out.exists()


def shlex_split(s: str) -> list[str]:
    import shlex
    return shlex.split(s)


def test_bench_short_cpu_run(tmp_out):
    need("build/kipp", "make cpu")
    need(BENCH_M, "make tiny-models")
    out = tmp_out / "tiny-decode.json"
    r = run([seed_python3("tools/bench.py"), "tools/bench.py", "--backend", "cpu", "--model", BENCH_M,
             "--prompt", "The capital of France is", "--decode", "4", "--warmup", "1", "--runs", "1",
             "--output", str(out)], timeout=180)
    assert r.returncode == 0, out_of(r)[-2500:]
    rec = json.loads(out.read_text())
    assert rec["settings"]["decode_steps"] == 4 and rec["settings"]["runs"] == 1, rec["settings"]
    assert rec["settings"]["backend"] == "cpu" and "provenance" in rec, sorted(rec)


def test_bench_cuda_form(tmp_out):
    """"CUDA uses the same subprocess harness with --backend cuda --binary build/kipp-cuda-generic":
    on a GPU host it runs; elsewhere the cuda backend's own fatal error, not a traceback."""
    need("build/kipp-cuda-generic", "make cuda-generic")
    need(BENCH_M, "make tiny-models")
    out = tmp_out / "cuda.json"
    r = run([seed_python3("tools/bench.py"), "tools/bench.py", "--backend", "cuda", "--binary",
             "build/kipp-cuda-generic", "--model", BENCH_M, "--prompt", "The capital of France is",
             "--decode", "4", "--warmup", "1", "--runs", "1", "--output", str(out)], timeout=300)
    err = out_of(r)
    assert "Traceback" not in err, err
    if has_gpu():
        assert r.returncode == 0, err[-2500:]
    else:
        assert r.returncode != 0 and not out.exists(), err[-2500:]


@pytest.mark.parametrize("gate", ["greedy", pytest.param("both", marks=pytest.mark.full)])
def test_spec_bench_short_run(tmp_out, gate):
    """The guide's --gate both adds kipp_test --spec-stat's chi-square (about 15 s): full tier."""
    need("build/kipp", "make cpu")
    need("build/kipp_test", "make cpu")
    need(BENCH_M, "make tiny-models")
    out = tmp_out / "spec.json"
    r = run([seed_python3("bench/spec_bench.py"), "bench/spec_bench.py", "--model", BENCH_M,
             "--decode", "8", "--runs", "1", "--gate", gate, "--output", str(out)], timeout=300)
    assert r.returncode == 0, out_of(r)[-2500:]
    assert json.loads(out.read_text())


# load_bench's --quick is a 10-second load by design: full tier
@pytest.mark.parametrize("script", ["bench/server_bench.py", "bench/prefix_bench.py",
                                    pytest.param("bench/load_bench.py", marks=pytest.mark.full)])
def test_server_bench_short_run(script, tmp_out):
    need("build/kipp-server", "make server")
    need(BENCH_M, "make tiny-models")
    out = tmp_out / "server.json"
    r = run([seed_python3(script), script, "--model", BENCH_M, "--quick", "--no-hash", "--output", str(out)],
            timeout=300)
    assert r.returncode == 0, out_of(r)[-2500:]
    assert json.loads(out.read_text())


def test_ppl_bench_as_written(tmp_out):
    """As written (the 4B default model, absent here) it stops with a message naming it."""
    if (ROOT / "models/qwen3-4b-base").exists():
        pytest.skip("qwen3-4b-base is here: the as-written run is a real multi-minute benchmark")
    for py in interpreters():
        out = tmp_out / "ppl-4b.json"
        r = run([py, "bench/ppl_bench.py", "--output", str(out)], timeout=120)
        err = out_of(r)
        assert r.returncode != 0 and not out.exists() and "Traceback" not in err, err[-2500:]
        # the venv (numpy present) names the missing model; a python3 without numpy names the venv
        assert ("qwen3-4b-base" in err and "does not exist" in err) or ".venv/bin/python" in err, err[-2500:]


@pytest.mark.full
def test_ppl_bench_short_run(tmp_out):
    """A short Kipp-only run on kipp-tiny with the venv (ppl_bench needs numpy): ~40 s."""
    py = str(VENV_PY) if VENV_PY.exists() else sys.executable
    need("build/kipp-perplexity", "make cpu")
    need(BENCH_M, "make tiny-models")
    out = tmp_out / "ppl-tiny.json"
    r = run([py, "bench/ppl_bench.py", "--model", BENCH_M, "--no-peer", "--types", "q8_0", "--ctx", "64",
             "--chunks", "2", "--work-dir", str(tmp_out), "--output", str(out)], timeout=300)
    assert r.returncode == 0, out_of(r)[-2500:]
    assert json.loads(out.read_text())


# ---- scripts the prose names ----------------------------------------------------------------------

def test_download_model_help():
    r = run(["tools/download_model.sh", "--help"], timeout=60)
    assert r.returncode == 0 and "usage" in out_of(r).lower(), out_of(r)[-2000:]


def test_convert_to_gguf_as_a_file(tmp_out):
    """`python tools/convert_to_gguf.py` (the guide's "converted by tools/convert_to_gguf.py")
    converts, and writes what the module form wrote into models/."""
    need("models/tiny-tied/config.json", "make tiny-models")
    py = str(VENV_PY) if VENV_PY.exists() else sys.executable
    out = tmp_out / "tiny-tied-bf16.gguf"
    r = run([py, "tools/convert_to_gguf.py", "models/tiny-tied", "--outtype", "bf16", "--outfile", str(out),
             "--no-progress"], timeout=300)
    assert r.returncode == 0, out_of(r)[-2500:]
    shipped = ROOT / TINY_M
    if shipped.exists():
        assert out.read_bytes() == shipped.read_bytes(), f"{out} differs from {shipped}"


def test_verda_gate_refuses_without_acknowledgement():
    env = {k: "" for k in os.environ if k.startswith("VERDA_")}
    r = run(["env"] + [f"-u{k}" for k in env] + ["tools/ops/verda_cuda_gate.sh"], timeout=60)
    assert r.returncode == 2, out_of(r)[-2000:]
    assert "--i-accept-the-cost" in out_of(r)


def test_collect_cuda_gates_parses_a_log(tmp_out):
    out = tmp_out / "gate.json"
    r = run([seed_python3("tools/ops/collect_cuda_gates.py"), "tools/ops/collect_cuda_gates.py",
             "tests/tools/data/cuda_gates/pass.log", "-o", str(out)], timeout=60)
    assert r.returncode == 0, out_of(r)[-2000:]
    assert json.loads(out.read_text())


def test_bench_results_folder():
    assert (ROOT / "bench" / "results").is_dir()
    assert list((ROOT / "bench" / "results").glob("*.json")), "bench/results/ holds no JSON record"


def test_bench_readme_protocol():
    """"Follow the sustained GPU steady-state protocol in ../bench/README.md": the guide's path is
    relative to the guide's folder; in the repository it is bench/README.md, section GPU records."""
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^### GPU records.*?(?=^### |\Z)", text, re.M | re.S)
    assert m, "bench/README.md has no GPU records section (the guide's GPU protocol)"
    assert "warm-up" in m.group(0) and "sustained" in m.group(0), m.group(0)[:500]
