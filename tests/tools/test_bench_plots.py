"""bench/plots.py's drift check: on a copy of the committed records, summary and figures it
passes; after one record changes (a decode ratio, as a re-run would) it fails naming the
summary block of BENCHMARKS.md and the figure drawn from that record; after `build` on the
copy it passes again (a fresh render gives the same bytes: the SVGs are deterministic).
Also: the summary's "met" follows the target, a record of a type without a target is shown
without a verdict, and a missing block is inserted, not lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import plots

REPO_ROOT = Path(__file__).resolve().parents[2]


def copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "bench").mkdir(parents=True)
    shutil.copytree(REPO_ROOT / "bench" / "results", root / "bench" / "results")
    shutil.copytree(REPO_ROOT / "bench" / "plots", root / "bench" / "plots")
    shutil.copy(REPO_ROOT / "BENCHMARKS.md", root / "BENCHMARKS.md")
    return root


def test_drift_check_fails_when_a_record_changes(tmp_path):
    root = copy_tree(tmp_path)
    assert plots.stale(str(root)) == []
    rec_path = root / "bench" / "results" / "cpu-0.6b-q8_0.json"
    rec = json.loads(rec_path.read_text())
    rec["ratios_kipp_over_llama"]["decode_tok_s_median"] = 1.01
    rec_path.write_text(json.dumps(rec))
    # a record of a weight type no issue has a target for yet: shown, judged against nothing
    (root / "bench" / "results" / "cpu-1.7b-q5_k_m.json").write_text(json.dumps(rec))
    diff = plots.stale(str(root))
    assert "BENCHMARKS.md (the summary block)" in diff
    assert "bench/plots/cpu-ratios.svg" in diff
    # the new figure says what the record says: 1.01x against the 1.3x target
    block = plots.summary_block(str(root))
    row = [line for line in block.splitlines() if "cpu-0.6b-q8_0.json" in line][0]
    assert "1.01× (worst 1.44×); ≥ 1.3×: **not met**" in row
    row = [line for line in block.splitlines() if "cpu-1.7b-q5_k_m.json" in line][0]
    assert "1.01× (worst 1.44×); no target" in row and "1.62×" in row

    assert plots.main(["build", "--root", str(root)]) == 0
    first = {p.name: p.read_bytes() for p in (root / "bench" / "plots").iterdir()}
    md = (root / "BENCHMARKS.md").read_text()
    assert md.count(plots.SUMMARY_BEGIN) == 1 and "1.01×" in md
    # check re-renders every figure: equal bytes, so the SVGs are deterministic
    assert plots.main(["check", "--root", str(root)]) == 0
    assert {p.name: p.read_bytes() for p in (root / "bench" / "plots").iterdir()} == first


def test_splice_inserts_then_replaces():
    text = "# Title\n\nIntro.\n\n## First section\n\nBody.\n"
    block = plots.SUMMARY_BEGIN + "\nTABLE\n" + plots.SUMMARY_END + "\n"
    once = plots.splice(text, block)
    assert once.index("Intro.") < once.index("TABLE") < once.index("## First section")
    assert plots.splice(once, block) == once
    twice = plots.splice(once, block.replace("TABLE", "NEW"))
    assert "NEW" in twice and "TABLE" not in twice and twice.count("## First section") == 1
