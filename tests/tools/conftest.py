"""Shared fixtures for the Python tooling tests (tests/tools).

Tiny checkpoints are generated once per test session into a temporary
directory (never into models/), so the tests do not depend on local state.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools import make_tiny_checkpoint

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "tools"


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


def run_tool(*args, env=None, check=False, timeout=600, cwd=None) -> subprocess.CompletedProcess:
    """Runs a command (a Python file is run with this interpreter)."""
    cmd = [str(a) for a in args]
    if cmd[0].endswith(".py"):
        cmd = [sys.executable] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=check, timeout=timeout, cwd=cwd)


def run_module(module, *args, **kw) -> subprocess.CompletedProcess:
    """Runs `python -m MODULE ARGS` (e.g. tools.quantize) from the repository root, as the
    Makefile and the docs do."""
    return run_tool(sys.executable, "-m", module, *args, cwd=REPO_ROOT, **kw)
