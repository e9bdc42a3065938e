"""tests/stages.py, the stage runner behind tests/run_tests.sh: the stage list's format and
its errors, tier and pattern selection, the counting rule, concurrency within the core
budget, timeouts, default signal dispositions in every stage whatever the runner
inherited, the per-stage record, and that the real tests/stages.txt parses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import stages  # noqa: E402


def write(tmp_path, text):
    p = tmp_path / "stages.txt"
    p.write_text(text)
    return p


def run(tmp_path, text, *args, env=None, preexec=None):
    p = write(tmp_path, text)
    # the runner exports TIER (and KIPP_TEST_JOBS may be set) to its stages, and stages.py
    # defaults to them: this file runs inside the full tier's tooling stage too, where an
    # inherited TIER=full picked other stages than these tests mean
    e = {k: v for k, v in os.environ.items() if k not in ("TIER", "KIPP_TEST_JOBS", "KIPP_TEST_TIMEOUT_SCALE")}
    e["BUILD"] = str(tmp_path / "build")
    e.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "tests" / "stages.py"), "--stages", str(p), *args],
                          capture_output=True, text=True, env=e, cwd=ROOT, timeout=120,
                          preexec_fn=preexec)


def test_real_stage_list_parses_and_every_tier_has_stages():
    all_stages = stages.parse_stages()
    for tier in stages.TIERS:
        assert stages.select(all_stages, tier, [], []), tier
    names = {s.name for s in all_stages}
    assert {"unit", "tooling", "server", "model-kipp-tiny", "fault-matrix", "mutation"} <= names
    # the check tier is a real subset for the edit loop: no mutation, no timed fuzzing
    check = {s.name for s in stages.select(all_stages, "check", [], [])}
    assert "mutation" not in check and not any(n.startswith("fuzz-") and n != "fuzz-replay" for n in check)


@pytest.mark.parametrize("line,msg", [
    ("a test 1 -", "need NAME TIERS CORES TAGS COMMAND"),
    ("Bad test 1 - true", "use a-z"),
    ("a nightly 1 - true", "unknown tier 'nightly'"),
    ("a test 3 - true", "CORES must be 0, 1 or 2"),
    ("a test 1 timeout=x true", "bad tag"),
    ("a test 1 - true\na test 1 - true", "listed twice"),
])
def test_malformed_lines_are_errors_naming_the_line(tmp_path, line, msg):
    r = run(tmp_path, line + "\n", "--list")
    assert r.returncode == 2 and msg in r.stderr and "stages.txt:" in r.stderr, r.stderr


LIST = """# comment
one   check,test,full 1 fast   echo "3 passed, 0 failed"
two   test,full       1 slow   echo two
three full            0 -      echo "2 passed, 1 failed"; exit 1
"""


def test_tiers_and_patterns_select(tmp_path):
    def names(*args):
        r = run(tmp_path, LIST, "--list", *args)
        assert r.returncode == 0, r.stderr
        return [ln.split()[0] for ln in r.stdout.splitlines()]
    assert names("--tier", "check") == ["one"]
    assert names() == ["one", "two"]  # the test tier is the default
    assert names("--tier", "full") == ["one", "two", "three"]
    assert names("--tier", "full", "--skip", "t") == ["one"]
    assert names("--tier", "full", "--only", "tag:slow") == ["two"]
    assert names("--tier", "check", "--only", "three") == ["three"]  # named exactly: any tier
    r = run(tmp_path, LIST, "--only", "nosuch")
    assert r.returncode == 2 and "no stage matches nosuch" in r.stderr


def test_counts_follow_the_lib_sh_rule(tmp_path):
    r = run(tmp_path, LIST, "--tier", "full", "-j", "1")
    # one: 3 passed; two: exit 0 and nothing counted is 1 pass; three: 2 passed, 1 failed
    assert r.returncode == 1
    assert r.stdout.rstrip().splitlines()[-1] == "6 passed, 1 failed", r.stdout
    assert "failed stages: three" in r.stdout
    assert stages.count("no counts here", 3) == (0, 1)
    assert stages.count("5 passed\n7 passed, 0 failed", 0) == (7, 0)
    assert stages.count("", 0) == (1, 0)
    log = tmp_path / "build" / "test-logs" / "one.log"
    assert log.read_text().strip() == "3 passed, 0 failed"
    rec = json.loads((tmp_path / "build" / "test-times.json").read_text())
    assert rec["tier"] == "full" and [s["name"] for s in rec["stages"]] == ["one", "two", "three"]
    assert rec["machine"]["cores"] == os.cpu_count() and rec["machine"]["isa_levels"][0] == "scalar"
    assert rec["passed"] == 6 and rec["failed"] == 1 and "total_seconds" in rec


def test_stages_run_concurrently_within_the_core_budget(tmp_path):
    text = "".join(f"s{i} test 1 - sleep 1.5\n" for i in range(4))
    t0 = time.monotonic()
    r = run(tmp_path, text, "-j", "2")
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    assert 2.9 < wall < 5.5, wall  # two at a time: 2 x 1.5 s, not 4 x 1.5 s
    rec = json.loads((tmp_path / "build" / "test-times.json").read_text())
    starts = sorted(s["start_offset"] for s in rec["stages"])
    assert starts[1] < 0.5 and starts[2] > 1.2, starts
    # a stage asking for every core runs alone
    t0 = time.monotonic()
    r = run(tmp_path, "a test 2 - sleep 1\nb test 2 - sleep 1\n", "-j", "2")
    assert r.returncode == 0 and time.monotonic() - t0 > 1.9


def test_timeout_kills_the_stage_and_what_it_started(tmp_path):
    r = run(tmp_path, "hang test 1 timeout=1 sleep 30 & sleep 30\nafter test 1 - echo fine\n", "-j", "1")
    assert r.returncode == 1
    assert "hang: killed after its 1 s timeout" in r.stdout
    assert r.stdout.rstrip().splitlines()[-1] == "1 passed, 1 failed"


def test_timeout_scales_with_the_sanitizer_factor(tmp_path):
    """make test-sanitize / test-tsan set KIPP_TEST_TIMEOUT_SCALE: stage timeouts grow with it
    (a sanitizer build on a busy machine is slow, not hung); below 1 or garbage counts as 1."""
    text = "hang test 1 timeout=1 sleep 30\n"
    r = run(tmp_path, text, "-j", "1", env={"KIPP_TEST_TIMEOUT_SCALE": "2"})
    assert r.returncode == 1 and "hang: killed after its 2 s timeout" in r.stdout, r.stdout
    for bad in ("0.5", "x"):
        r = run(tmp_path, text, "-j", "1", env={"KIPP_TEST_TIMEOUT_SCALE": bad})
        assert "hang: killed after its 1 s timeout" in r.stdout, (bad, r.stdout)


def _ignore_int_quit():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def test_stages_get_default_signal_dispositions_and_no_stdin(tmp_path):
    # started the way a background shell starts a job: SIGINT and SIGQUIT ignored
    check = ("sig test 1 - grep -E '^Sig(Ign|Blk)' /proc/self/status; "
             "python3 -c 'import os,sys; sys.exit(0 if os.read(0, 1) == b\"\" else 1)'")
    r = run(tmp_path, check + "\n", preexec=_ignore_int_quit)
    assert r.returncode == 0, r.stdout
    log = (tmp_path / "build" / "test-logs" / "sig.log").read_text()
    ign = int(log.split("SigIgn:")[1].split()[0], 16)
    assert ign & (1 << (signal.SIGINT - 1)) == 0 and ign & (1 << (signal.SIGQUIT - 1)) == 0, log
    assert int(log.split("SigBlk:")[1].split()[0], 16) == 0, log


def test_record_option_writes_the_named_file(tmp_path):
    out = tmp_path / "rec" / "test-times-x.json"
    r = run(tmp_path, "one test 1 - true\n", "--record", str(out),
            env={"KIPP_SETUP_SECONDS": "5", "KIPP_BUILD_SECONDS": "7"})
    assert r.returncode == 0
    rec = json.loads(out.read_text())
    assert rec["setup_seconds"] == 5 and rec["build_seconds"] == 7
    assert rec["total_seconds"] >= 12 and rec["stages"][0]["name"] == "one"
