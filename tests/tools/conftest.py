"""Shared fixtures for the Python tooling tests (tests/tools).

Tiny checkpoints are generated once per test session into a temporary
directory (never into models/), so the tests do not depend on local state.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "tools"
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_tiny_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def tiny_tied(ckpt_root) -> Path:
    return make_tiny_checkpoint.write_checkpoint("tiny-tied", ckpt_root / "single" / "tiny-tied")


@pytest.fixture(scope="session")
def tiny_untied(ckpt_root) -> Path:
    return make_tiny_checkpoint.write_checkpoint("tiny-untied", ckpt_root / "single" / "tiny-untied")


@pytest.fixture(scope="session")
def tiny_tied_sharded(ckpt_root) -> Path:
    # same directory name as the unsharded one, so general.name (the directory name) matches
    return make_tiny_checkpoint.write_checkpoint("tiny-tied", ckpt_root / "sharded" / "tiny-tied", n_shards=3)


def run_tool(*args, env=None, check=False, timeout=600) -> subprocess.CompletedProcess:
    """Runs a command (Python tools are run with this interpreter)."""
    cmd = [str(a) for a in args]
    if cmd[0].endswith(".py"):
        cmd = [sys.executable] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=check, timeout=timeout)
