"""Tests for tools/download_model.sh against the loopback fake hub (tests/tools/fake_hub.py)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import TOOLS, run_tool
from fake_hub import FakeHub

SCRIPT = TOOLS / "download_model.sh"
REPO = "Qwen/Qwen3-0.6B"
NAME = "qwen3-0.6b"
WANTED = ["LICENSE", "config.json", "generation_config.json", "model-00001-of-00003.safetensors",
          "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors", "model.safetensors.index.json",
          "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture
def hub(tiny_tied_sharded):
    h = FakeHub()
    h.add_directory(REPO, tiny_tied_sharded)
    h.add_file(REPO, "LICENSE", b"Apache License 2.0 (test copy)\n")
    h.add_file(REPO, "README.md", b"# not downloaded\n")
    h.add_file(REPO, ".gitattributes", b"*.safetensors filter=lfs\n")
    h.add_file(REPO, "merges.txt", b"not needed\n")
    h.start()
    yield h
    h.stop()


def download(hub: FakeHub, models: Path, *args, **env_extra):
    env = dict(os.environ, HF_ENDPOINT=hub.url, KIPP_MODELS_DIR=str(models))
    env.pop("HF_TOKEN", None)
    env.update({k: str(v) for k, v in env_extra.items()})
    return run_tool("bash", SCRIPT, *args, env=env, timeout=300)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def assert_complete(hub: FakeHub, dest: Path):
    for name in WANTED:
        assert (dest / name).read_bytes() == hub.repos[REPO][name].data, name
    assert not list(dest.glob("*.part"))
    for skipped in ("README.md", ".gitattributes", "merges.txt"):
        assert not (dest / skipped).exists()


def test_full_download_and_manifest(hub, tmp_path):
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 0, res.stderr
    dest = tmp_path / NAME
    assert_complete(hub, dest)
    m = json.loads((dest / "manifest.json").read_text())
    assert m["repo"] == REPO and m["revision"] == "main"
    assert sorted(m["files"]) == WANTED
    for name, entry in m["files"].items():
        data = hub.repos[REPO][name].data
        assert entry == {"size": len(data), "sha256": sha256(data)}, name
    assert m["downloaded_at"].endswith("Z")
    # LFS files went through the CDN redirect; the listing was asked for the right revision
    assert hub.requests_for("/api/models/Qwen/Qwen3-0.6B/tree/main")
    assert len([e for e in hub.content_requests() if e["path"].startswith("/cdn/")]) == 3
    assert "#" in res.stderr  # curl's progress bar


def test_resume_after_dropped_connection(hub, tmp_path):
    big = "model-00001-of-00003.safetensors"
    size = len(hub.repos[REPO][big].data)
    hub.drop_after[big] = size // 3
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 0, res.stderr
    assert_complete(hub, tmp_path / NAME)
    served = [e for e in hub.content_requests() if e["path"].startswith("/cdn/")
              and e["path"].endswith(hub.repos[REPO][big].sha256)]
    assert served[0]["dropped_after"] == size // 3
    # the retry asked only for the rest of the file
    assert served[1]["range"] == f"bytes={size // 3}-"
    assert "resuming at byte" in res.stdout


def test_resume_after_interrupted_run(hub, tmp_path):
    """A run that gives up leaves a .part file; the next run continues from it."""
    big = "model-00001-of-00003.safetensors"
    size = len(hub.repos[REPO][big].data)
    hub.drop_after[big] = 12345
    res = download(hub, tmp_path, NAME, KIPP_DOWNLOAD_RETRIES=0)
    assert res.returncode == 1
    assert f"downloading {big}" in res.stderr and "rerun to resume" in res.stderr
    part = tmp_path / NAME / (big + ".part")
    assert part.stat().st_size == 12345
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 0, res.stderr
    assert_complete(hub, tmp_path / NAME)
    ranges = [e["range"] for e in hub.content_requests() if e["path"].endswith(hub.repos[REPO][big].sha256)]
    assert ranges == [None, "bytes=12345-"]
    assert size > 12345


@pytest.mark.parametrize("victim", ["model-00002-of-00003.safetensors", "config.json"])
def test_corrupt_file_detected(hub, tmp_path, victim):
    hub.corrupt.add(victim)
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 1
    err = res.stderr.strip().splitlines()[-1]
    assert err.startswith(f"download_model.sh: error: verification failed for {victim}: ")
    assert ("sha256" if victim.endswith(".safetensors") else "git blob sha1") in err
    assert "deleted the bad file" in err
    dest = tmp_path / NAME
    assert not (dest / victim).exists() and not (dest / (victim + ".part")).exists()
    assert not (dest / "manifest.json").exists()
    # the next (clean) run repairs it
    hub.corrupt.clear()
    assert download(hub, tmp_path, NAME).returncode == 0
    assert_complete(hub, dest)


def test_already_complete_files_are_skipped(hub, tmp_path):
    assert download(hub, tmp_path, NAME).returncode == 0
    n_before = len(hub.content_requests())
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 0, res.stderr
    assert len(hub.content_requests()) == n_before  # nothing transferred
    assert res.stdout.count("already complete and verified, skipping") == len(WANTED)


def test_damaged_existing_file_is_downloaded_again(hub, tmp_path):
    assert download(hub, tmp_path, NAME).returncode == 0
    victim = tmp_path / NAME / "tokenizer.json"
    victim.write_bytes(b"x" * victim.stat().st_size)  # right size, wrong content
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 0, res.stderr
    assert "tokenizer.json: existing file is not the expected one" in res.stdout
    assert_complete(hub, tmp_path / NAME)


def test_unknown_model_name(hub, tmp_path):
    res = download(hub, tmp_path, "qwen3-70b")
    assert res.returncode == 1
    assert "unknown model name 'qwen3-70b'" in res.stderr
    for valid in ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b-base", "qwen3-4b", "qwen3-8b"):
        assert valid in res.stderr
    assert not hub.log  # never contacted the hub


def test_missing_name_prints_usage(tmp_path):
    res = run_tool("bash", SCRIPT, env=dict(os.environ, KIPP_MODELS_DIR=str(tmp_path)))
    assert res.returncode == 2 and "usage:" in res.stderr


def test_revision_and_token(hub, tmp_path):
    hub.revisions = ("main", "refs/pr/1")
    hub.require_token = "hf_secret"
    res = download(hub, tmp_path, NAME, "--revision", "refs/pr/1")
    assert res.returncode == 1 and "HTTP 401" in res.stderr  # no token
    res = download(hub, tmp_path, NAME, "--revision", "refs/pr/1", HF_TOKEN="hf_secret")
    assert res.returncode == 0, res.stderr
    assert "hf_secret" not in res.stdout + res.stderr
    authed = [e for e in hub.log if e["authorization"] == "Bearer hf_secret" and not e["path"].startswith("/cdn/")]
    assert len(authed) == 1 + len(WANTED)  # the listing and every resolve request
    assert hub.requests_for("/resolve/refs/pr/1/config.json")
    m = json.loads((tmp_path / NAME / "manifest.json").read_text())
    assert m["revision"] == "refs/pr/1"


def test_unknown_revision(hub, tmp_path):
    res = download(hub, tmp_path, NAME, "--revision", "nope")
    assert res.returncode == 1
    assert "listing Qwen/Qwen3-0.6B at revision 'nope' failed: HTTP 404" in res.stderr


def test_server_without_range_support_restarts(hub, tmp_path):
    big = "model-00001-of-00003.safetensors"
    hub.drop_after[big] = 5000
    hub.no_ranges = True
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 0, res.stderr
    assert "does not support resuming" in res.stderr
    assert_complete(hub, tmp_path / NAME)


def test_http_error_fails_without_retrying(hub, tmp_path):
    hub.missing.add("tokenizer.json")
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith(
        "download_model.sh: error: downloading tokenizer.json failed: HTTP 404 from ")
    assert len(hub.requests_for("/resolve/main/tokenizer.json")) == 1
