#!/usr/bin/env python3
"""stages.py — Kipp's test runner: reads the one list of test stages (tests/stages.txt) and
runs the stages of a tier (check, test, full), several at once where the cores allow,
each with its output kept in its own log. tests/run_tests.sh is its front door.

A stage line is `NAME TIERS CORES TAGS COMMAND...`: TIERS a comma list of check/test/full,
CORES how many cores it keeps busy (0 for a stage that mostly waits, 1, or 2 for "all":
a stage that uses the thread pool), TAGS a comma list (or -), COMMAND the rest of the
line, run by bash from the repository root with BUILD, TIER and the fuzz variables set.
The runner starts stages in list order while their cores fit in the budget (-j, default
the machine's core count; a stage asking for more than the budget runs alone) and lets a
later stage that fits go first. A stage's counts come from the last "N passed" / "N
failed" its output prints, as tests/lib.sh counts them: a non-zero exit with no failure
counted is one failure, a zero exit with nothing counted is one pass.

Standard library only (it runs before and without the project venv). Each stage runs in a
new session with default signal dispositions and /dev/null as stdin, so nothing it does
depends on the terminal, job control or signal dispositions the runner inherited.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ROOT / "tests" / "stages.txt"
TIERS = ("check", "test", "full")
TAIL = 25
DEFAULT_TIMEOUT = 1800  # seconds; a stage may say timeout=N in its tags


def timeout_scale() -> float:
    """KIPP_TEST_TIMEOUT_SCALE (make test-sanitize and test-tsan set 6): stage timeouts are
    multiplied by it like the gates' and clients' own, so a sanitizer build on a busy machine
    is not killed for being slow (a hang still is, later)."""
    try:
        v = float(os.environ.get("KIPP_TEST_TIMEOUT_SCALE", "1"))
    except ValueError:
        return 1.0
    return v if v >= 1.0 else 1.0


@dataclass
class Stage:
    name: str
    tiers: tuple
    cores: int
    tags: tuple
    command: str
    line: int
    timeout: int = DEFAULT_TIMEOUT
    # filled in by the run
    log: Path | None = None
    proc: subprocess.Popen | None = None
    t0: float = 0.0
    seconds: float = 0.0
    rc: int | None = None
    cpu_seconds: float = 0.0
    passed: int = 0
    failed: int = 0
    fh: object = None  # the open log while it runs


class StageError(Exception):
    pass


def parse_stages(path: Path = STAGES) -> list[Stage]:
    """The stage list; a malformed line is an error naming its line number."""
    stages, seen = [], set()
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.split(None, 4)
        if len(parts) < 5:
            raise StageError(f"{path.name}:{n}: need NAME TIERS CORES TAGS COMMAND, got {s!r}")
        name, tiers, cores, tags, command = parts
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
            raise StageError(f"{path.name}:{n}: stage name {name!r}: use a-z, 0-9 and -")
        if name in seen:
            raise StageError(f"{path.name}:{n}: stage {name!r} listed twice")
        seen.add(name)
        tier_set = tuple(tiers.split(","))
        bad = [t for t in tier_set if t not in TIERS]
        if bad:
            raise StageError(f"{path.name}:{n}: unknown tier {bad[0]!r} (tiers: {', '.join(TIERS)})")
        if cores not in ("0", "1", "2"):
            raise StageError(f"{path.name}:{n}: CORES must be 0, 1 or 2, not {cores!r}")
        tag_set = () if tags == "-" else tuple(tags.split(","))
        timeout = DEFAULT_TIMEOUT
        for t in tag_set:
            if t.startswith("timeout="):
                try:
                    timeout = int(t.split("=", 1)[1])
                except ValueError:
                    raise StageError(f"{path.name}:{n}: bad tag {t!r}") from None
        stages.append(Stage(name, tier_set, int(cores), tag_set, command, n, int(timeout * timeout_scale())))
    return stages


def matches(stage: Stage, pattern: str) -> bool:
    """PATTERN is a regular expression searched in the stage's name, or a tag given as
    tag:NAME (or tier:NAME)."""
    if pattern.startswith("tag:"):
        return pattern[4:] in stage.tags
    if pattern.startswith("tier:"):
        return pattern[5:] in stage.tiers
    return re.search(pattern, stage.name) is not None


def select(stages, tier, only, skip):
    chosen = []
    for s in stages:
        named = any(re.fullmatch(p, s.name) for p in only)  # named exactly: any tier
        if tier not in s.tiers and not named:
            continue
        if only and not any(matches(s, p) for p in only):
            continue
        if any(matches(s, p) for p in skip):
            continue
        chosen.append(s)
    return chosen


def count(output: str, rc: int) -> tuple[int, int]:
    """tests/lib.sh's rule: the last 'N passed' and 'N failed' of the output."""
    p = re.findall(r"(\d+) passed", output)
    f = re.findall(r"(\d+) failed", output)
    p = int(p[-1]) if p else 0
    f = int(f[-1]) if f else 0
    if rc != 0 and f == 0:
        f = 1
    if rc == 0 and p == 0 and f == 0:
        p = 1
    return p, f


def cpu_class() -> dict:
    """The machine, named in every record: model name, core count, the ISA levels."""
    model, flags = platform.processor() or "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", "unknown", platform.machine()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    levels = ["scalar"]
    if {"avx2", "fma", "f16c"} <= flags:
        levels.append("avx2")
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        levels.append("avx512")
    if "avx512_vnni" in flags and "avx512f" in flags:
        levels.append("avx512vnni")
    if "avx512_vnni" in flags and "avx512_bf16" in flags and "avx512f" in flags:
        levels.append("avx512bf16")
    if "amx_tile" in flags:
        levels.append("amx")
    return {"cpu_model": model, "cores": os.cpu_count(), "isa_levels": levels,
            "n_isa_levels": len(levels), "machine": platform.machine()}


def rel(p: Path) -> str:
    """p relative to the repository when it is inside it (log paths in messages)."""
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(p)


def _child_setup():
    # default dispositions for the signals a test may send or a shell may have ignored,
    # whatever the runner inherited (a background shell ignores SIGINT and SIGQUIT)
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE,
                signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


class Runner:
    def __init__(self, stages, jobs, env, log_dir: Path, quiet_tail=TAIL):
        self.pending = list(stages)
        self.running: list[Stage] = []
        self.done: list[Stage] = []
        self.jobs = max(1, jobs)
        self.env = env
        self.log_dir = log_dir
        self.tail = quiet_tail
        self.t_start = time.monotonic()

    def busy(self) -> int:
        return sum(min(s.cores, self.jobs) for s in self.running)

    def start(self, s: Stage):
        s.log = self.log_dir / f"{s.name}.log"
        fh = open(s.log, "w", encoding="utf-8", errors="replace")
        print(f"== {s.name}: {s.command}", flush=True)
        s.t0 = time.monotonic()
        s.proc = subprocess.Popen(["bash", "-c", s.command], cwd=ROOT, env=self.env,
                                  stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                  start_new_session=True, preexec_fn=_child_setup)
        s.fh = fh
        self.running.append(s)

    def finish(self, s: Stage, rc: int):
        s.seconds = time.monotonic() - s.t0
        s.fh.close()
        s.rc = rc
        text = s.log.read_text(encoding="utf-8", errors="replace")
        s.passed, s.failed = count(text, rc)
        lines = text.rstrip("\n").split("\n") if text else []
        out = [f"== {s.name} (done)"]
        if rc == -9 and s.seconds >= s.timeout:
            lines.append(f"{s.name}: killed after its {s.timeout} s timeout")
        out += ["   " + ln for ln in lines[-self.tail:]]
        out.append(f"   -> {s.name}: {s.passed} passed, {s.failed} failed ({s.seconds:.0f} s, "
                   f"{s.cpu_seconds:.0f} s CPU)" + (f"  [log: {rel(s.log)}]" if s.failed else ""))
        print("\n".join(out), flush=True)
        self.running.remove(s)
        self.done.append(s)

    def next_fitting(self):
        """The first pending stage whose cores fit beside the running ones (a later one may
        pass a stage that waits for more cores); at most jobs + 1 stages at once, so waiting
        stages (0 cores) overlap work without piling up."""
        if len(self.running) > self.jobs:
            return None
        for s in self.pending:
            if not self.running or self.busy() + min(s.cores, self.jobs) <= self.jobs:
                return s
        return None

    @staticmethod
    def reap(s: Stage, block: bool):
        """The stage's exit code once it has ended (None before), and the CPU seconds it and
        the descendants it waited for used (wait4's rusage)."""
        pid, status, ru = os.wait4(s.proc.pid, 0 if block else os.WNOHANG)
        if pid == 0:
            return None
        rc = os.waitstatus_to_exitcode(status)
        s.proc.returncode = rc
        s.cpu_seconds = ru.ru_utime + ru.ru_stime
        return rc

    @staticmethod
    def kill(s: Stage):
        """SIGKILL to the stage's session: it and whatever it left running."""
        try:
            os.killpg(s.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self):
        for s in self.running:
            self.kill(s)

    def run(self):
        while self.pending or self.running:
            while True:
                s = self.next_fitting()
                if s is None:
                    break
                self.pending.remove(s)
                self.start(s)
            time.sleep(0.05)
            for s in list(self.running):
                rc = self.reap(s, block=False)
                if rc is None and time.monotonic() - s.t0 > s.timeout:
                    self.kill(s)
                    rc = self.reap(s, block=True)
                if rc is not None:
                    self.kill(s)  # what the stage left behind in its session goes with it
                    self.finish(s, rc)
        return time.monotonic() - self.t_start


def write_record(path: Path, tier: str, runner: Runner, wall: float, extra: dict):
    rec = {
        "kind": "test-times",
        "tier": tier,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": cpu_class(),
        "jobs": runner.jobs,
        "wall_seconds": round(wall, 1),
        "stage_seconds_sum": round(sum(s.seconds for s in runner.done), 1),
        "cpu_seconds_sum": round(sum(s.cpu_seconds for s in runner.done), 1),
        "passed": sum(s.passed for s in runner.done),
        "failed": sum(s.failed for s in runner.done),
        "stages": [{"name": s.name, "seconds": round(s.seconds, 1), "cores": s.cores,
                    "cpu_seconds": round(s.cpu_seconds, 1),
                    "start_offset": round(s.t0 - runner.t_start, 1), "passed": s.passed,
                    "failed": s.failed, "rc": s.rc}
                   for s in sorted(runner.done, key=lambda s: s.line)],
    }
    try:
        rec["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                       text=True).stdout.strip()
    except OSError:
        pass
    rec.update(extra)
    # set-up and build (make deps, the parallel build), measured by the Makefile's recipe
    pre = {}
    for key, var in (("setup_seconds", "KIPP_SETUP_SECONDS"), ("build_seconds", "KIPP_BUILD_SECONDS")):
        try:
            pre[key] = float(os.environ[var])
        except (KeyError, ValueError):
            pass
    rec.update(pre)
    rec["total_seconds"] = round(wall + sum(pre.values()), 1)
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, path)


# What a tier writes from a fresh clone (models, build trees, the cpu-ref cache, pytest's
# temporary files; measured on a fresh clone, docs/testing.md), and what is left free.
DISK_NEED_GIB = {"check": 6, "test": 14, "full": 20}


def disk_warning(build: Path, tier: str, after: bool = False) -> None:
    """Warn, naming the numbers, when the disk is too full for the tier: a full disk fails
    stages with errors that do not say so (pytest: "could not create numbered dir")."""
    need = DISK_NEED_GIB.get(tier, 8)
    seen = set()
    for path in (build, Path(os.environ.get("TMPDIR") or "/tmp")):
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        if st.f_fsid in seen:
            continue
        seen.add(st.f_fsid)
        free = st.f_bavail * st.f_frsize / 2**30
        if after and free < 1:
            print(f"run_tests: {path} has {free:.2f} GiB free now: stages may have failed for "
                  f"want of disk space", flush=True)
        elif not after and free < need:
            print(f"run_tests: warning: {path} has {free:.1f} GiB free; tier {tier} writes "
                  f"about {need} GiB from a fresh clone (free some space, or stages will fail "
                  f"with errors that do not say why)", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="tests/run_tests.sh",
        description="Run Kipp's test stages (tests/stages.txt) of one tier; ends with "
                    "'N passed, N failed'. PATTERN: a regular expression searched in stage "
                    "names, or tag:NAME, or tier:NAME.")
    ap.add_argument("--tier", choices=TIERS, default=os.environ.get("TIER") or "test",
                    help="check (edit loop), test (CI, the default) or full")
    ap.add_argument("--list", action="store_true", help="list the selected stages and exit")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="run only matching stages (repeatable); a stage named exactly runs "
                         "whatever its tier")
    ap.add_argument("--skip", action="append", default=[], metavar="PATTERN",
                    help="leave out matching stages (repeatable)")
    ap.add_argument("-j", "--jobs", type=int, default=int(os.environ.get("KIPP_TEST_JOBS") or 0)
                    or os.cpu_count() or 1,
                    help="core budget for concurrent stages (default: the machine's cores; "
                         "1 runs them one at a time)")
    ap.add_argument("--stages", metavar="FILE", default=str(STAGES),
                    help="the stage list (default tests/stages.txt)")
    ap.add_argument("--record", metavar="PATH",
                    help="also write the per-stage times to PATH (bench/results/test-times-*.json)")
    args = ap.parse_args(argv)

    try:
        stages = select(parse_stages(Path(args.stages)), args.tier, args.only, args.skip)
    except (StageError, OSError) as e:
        print(f"run_tests: {e}", file=sys.stderr)
        return 2
    if args.only and not stages:
        print(f"run_tests: no stage matches {' '.join(args.only)} (tests/run_tests.sh --list "
              f"--tier full lists them)", file=sys.stderr)
        return 2
    build = os.environ.get("BUILD") or "build"
    prev = {}
    times = ROOT / build / "test-times.json"
    if times.exists():
        try:
            prev = {s["name"]: s["seconds"] for s in json.loads(times.read_text())["stages"]}
        except (ValueError, KeyError, TypeError):
            prev = {}
    if args.list:
        for s in stages:
            last = f"{prev[s.name]:6.0f} s" if s.name in prev else "       "
            print(f"{s.name:28} {','.join(s.tiers):16} {s.cores}  {last}  {','.join(s.tags) or '-'}")
        return 0

    env = dict(os.environ)
    env.update({"BUILD": build, "TIER": args.tier, "KIPP_BIN": f"{build}/kipp",
                "PYTHONDONTWRITEBYTECODE": "1"})
    env.setdefault("KIPP_FUZZ_VOCAB", "models/tiny-tied/kipp-tiny-tied-bf16.gguf")
    env.setdefault("KIPP_FUZZ_EMBED_MODEL", "models/tiny-embed/kipp-tiny-embed-bf16.gguf")
    # cpu-ref recomputations shared between gates, kept per build (tests/model/gate_common.h)
    env.setdefault("KIPP_REF_CACHE", str(ROOT / build / "ref-cache"))
    log_dir = ROOT / build / "test-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    disk_warning(ROOT / build, args.tier)
    print(f"run_tests: tier {args.tier}, {len(stages)} stages, {args.jobs} cores; logs in "
          f"{rel(log_dir)}/", flush=True)
    runner = Runner(stages, args.jobs, env, log_dir)

    def on_signal(signum, _frame):
        runner.kill_all()
        print(f"\nrun_tests: stopped by signal {signum}", flush=True)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    wall = runner.run()
    passed = sum(s.passed for s in runner.done)
    failed = sum(s.failed for s in runner.done)
    slow = sorted(runner.done, key=lambda s: -s.seconds)
    print(f"\nrun_tests: tier {args.tier}: {wall:.0f} s wall, {sum(s.seconds for s in slow):.0f} s "
          f"of stages; the longest: " + ", ".join(f"{s.name} {s.seconds:.0f} s" for s in slow[:5]))
    bad = [s.name for s in runner.done if s.failed]
    if bad:
        print("run_tests: failed stages: " + ", ".join(bad) + f" (logs in {rel(log_dir)}/)")
        disk_warning(ROOT / build, args.tier, after=True)
    extra = {"selection": {"only": args.only, "skip": args.skip}}
    if not args.only and not args.skip:
        write_record(times, args.tier, runner, wall, extra)
    if args.record:
        write_record(Path(args.record), args.tier, runner, wall, extra)
    print()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
