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


# ---- any repository id, paginated listings ---------------------------------------


def test_paginated_listing(hub, tmp_path):
    hub.page_size = 2
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 0, res.stderr
    assert_complete(hub, tmp_path / NAME)
    pages = hub.requests_for("/api/models/Qwen/Qwen3-0.6B/tree/main")
    assert len(hub.repos[REPO]) >= 11 and len(pages) == (len(hub.repos[REPO]) + 1) // 2
    assert "recursive=true" in pages[0]["query"] and "cursor" not in pages[0]["query"]
    assert all("cursor=" in p["query"] and "recursive=true" in p["query"] for p in pages[1:])


def test_paginated_listing_that_loops_is_an_error(hub, tmp_path, monkeypatch):
    hub.page_size = 2
    # every page links to the second one, for ever
    from fake_hub import _Handler
    real = _Handler._send_tree

    def looping(self, files, parsed):
        real(self, files, parsed._replace(query="recursive=true"))
    monkeypatch.setattr(_Handler, "_send_tree", looping)
    res = download(hub, tmp_path, NAME)
    assert res.returncode == 1 and "pages in a loop" in res.stderr, res.stderr


@pytest.mark.parametrize("repo, folder", [("Qwen/Qwen3-4B-Instruct-2507", "qwen3-4b-instruct-2507"),
                                          ("Qwen/Qwen3-4B-Thinking-2507", "qwen3-4b-thinking-2507")])
def test_any_repo_id(tiny_tied, tmp_path, repo, folder):
    with FakeHub() as h:
        h.add_directory(repo, tiny_tied)
        h.add_file(repo, "README.md", b"# not downloaded\n")
        res = download(h, tmp_path, repo)
        assert res.returncode == 0, res.stderr
        dest = tmp_path / folder
        assert sorted(p.name for p in dest.iterdir()) == sorted(
            [p.name for p in tiny_tied.iterdir() if p.is_file()] + ["manifest.json"])
        assert json.loads((dest / "manifest.json").read_text())["repo"] == repo
        assert f"next: .venv/bin/python -m tools.convert_to_gguf {dest}" in res.stdout


def test_embedding_repo_gets_pooling_config(tiny_embed, tmp_path):
    src = tiny_embed
    repo = "Qwen/Qwen3-Embedding-0.6B"
    with FakeHub() as h:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                h.add_file(repo, p.relative_to(src).as_posix(), p.read_bytes())
        h.add_file(repo, "2_Normalize/.keep", b"")
        res = download(h, tmp_path, repo)
        assert res.returncode == 0, res.stderr
        dest = tmp_path / "qwen3-embedding-0.6b"
        assert (dest / "modules.json").read_bytes() == (src / "modules.json").read_bytes()
        assert (dest / "1_Pooling" / "config.json").read_bytes() == (src / "1_Pooling" / "config.json").read_bytes()
        assert not (dest / "2_Normalize").exists()
        assert "1_Pooling/config.json" in json.loads((dest / "manifest.json").read_text())["files"]


@pytest.mark.parametrize("arg, message", [
    ("Qwen", "unknown model name 'Qwen'"),
    ("Qwen/Qwen3 4B", "is not a repository id"),
    ("Qwen/../x", "is not a repository id"),
    ("Qwen/Qwen3-0.6B:", "is not a repository id"),
    ("Qwen/Qwen3-0.6B-GGUF:Q4 K", "neither a .gguf file name nor a quant name"),
])
def test_bad_model_argument(hub, tmp_path, arg, message):
    if "GGUF" in arg:
        hub.add_file("Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf", b"GGUF" + b"\0" * 100)
    res = download(hub, tmp_path, arg)
    assert res.returncode == 1 and message in res.stderr, res.stderr


def test_help_documents_the_forms():
    res = run_tool("bash", SCRIPT, "--help")
    assert res.returncode == 0
    for needle in ("ORG/REPO:FILE", "ORG/REPO:QUANT", "IQ4_XS", "Qwen/Qwen3-4B-Instruct-2507", "split GGUF",
                   "llama-gguf-split --merge", "rel=\"next\"", "HF_ENDPOINT", "HF_TOKEN", "never printed",
                   "KIPP_DOWNLOAD_RETRIES", ".part", "lfs.oid", "by hand", *ALIASES):
        assert needle in res.stdout, needle


# ---- GGUF repositories -----------------------------------------------------------

GGUF_REPO = "Qwen/Qwen3-0.6B-GGUF"
ALIASES = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b-base", "qwen3-4b", "qwen3-8b"]


def gguf_bytes(tag: str, n: int = 30000) -> bytes:
    return b"GGUF" + hashlib.sha256(tag.encode()).digest() * (n // 32)


@pytest.fixture
def ghub():
    h = FakeHub()
    for quant in ("Q4_K_M", "Q5_K_M", "Q8_0", "IQ4_XS", "BF16"):
        h.add_file(GGUF_REPO, f"Qwen3-0.6B-{quant}.gguf", gguf_bytes(quant))
    h.add_file(GGUF_REPO, "mmproj-BF16.gguf", gguf_bytes("mmproj"))
    h.add_file(GGUF_REPO, "README.md", b"# gguf\n")
    h.add_file(GGUF_REPO, "params", b"{}")
    for i in (1, 2, 3):  # a split file in a folder, as large quants are published
        h.add_file(GGUF_REPO, f"Q2_K/Qwen3-0.6B-Q2_K-{i:05d}-of-00003.gguf", gguf_bytes(f"split{i}", 9000))
    h.add_file(GGUF_REPO, "Qwen3-0.6B-UD-Q3_K_XL.gguf", gguf_bytes("ud"))
    h.add_file(GGUF_REPO, "old/Qwen3-0.6B-Q3_K_XL.gguf", gguf_bytes("old"))
    h.start()
    yield h
    h.stop()


GDEST = "qwen3-0.6b-gguf"


@pytest.mark.parametrize("spec, file", [("Qwen3-0.6B-Q8_0.gguf", "Qwen3-0.6B-Q8_0.gguf"),
                                        ("Q4_K_M", "Qwen3-0.6B-Q4_K_M.gguf"),
                                        ("q5_k_m", "Qwen3-0.6B-Q5_K_M.gguf"),
                                        ("IQ4_XS", "Qwen3-0.6B-IQ4_XS.gguf"),
                                        ("bf16", "Qwen3-0.6B-BF16.gguf")])  # not mmproj-BF16.gguf
def test_gguf_file_or_quant(ghub, tmp_path, spec, file):
    res = download(ghub, tmp_path, f"{GGUF_REPO}:{spec}")
    assert res.returncode == 0, res.stderr
    dest = tmp_path / GDEST
    assert sorted(p.name for p in dest.iterdir()) == sorted([file, "manifest.json"])
    assert (dest / file).read_bytes() == ghub.repos[GGUF_REPO][file].data
    m = json.loads((dest / "manifest.json").read_text())
    assert m["repo"] == GGUF_REPO and list(m["files"]) == [file]
    assert m["files"][file]["sha256"] == sha256(ghub.repos[GGUF_REPO][file].data)
    assert f"next: build/kipp --model {dest / file}" in res.stdout


def test_gguf_quants_share_a_folder_and_manifest(ghub, tmp_path):
    assert download(ghub, tmp_path, f"{GGUF_REPO}:Q8_0").returncode == 0
    assert download(ghub, tmp_path, f"{GGUF_REPO}:Q4_K_M").returncode == 0
    m = json.loads((tmp_path / GDEST / "manifest.json").read_text())
    assert sorted(m["files"]) == ["Qwen3-0.6B-Q4_K_M.gguf", "Qwen3-0.6B-Q8_0.gguf"]


@pytest.mark.parametrize("spec, message", [
    ("Q6_K", "has no GGUF file of quant Q6_K"),
    ("Qwen3-0.6B-Q6_K.gguf", "has no file Qwen3-0.6B-Q6_K.gguf"),
    ("Q3_K_XL", "quant Q3_K_XL is ambiguous"),
])
def test_gguf_absent_or_ambiguous_lists_files(ghub, tmp_path, spec, message):
    res = download(ghub, tmp_path, f"{GGUF_REPO}:{spec}")
    assert res.returncode == 1 and message in res.stderr, res.stderr
    assert "available GGUF files" in res.stderr
    if "ambiguous" in message:
        assert "old/Qwen3-0.6B-Q3_K_XL.gguf" in res.stderr and "Qwen3-0.6B-UD-Q3_K_XL.gguf" in res.stderr
        assert "Q4_K_M" not in res.stderr
    else:
        for quant in ("Q4_K_M", "Q5_K_M", "Q8_0", "IQ4_XS", "Q2_K"):
            assert quant in res.stderr
        assert "Q2_K/Qwen3-0.6B-Q2_K-00001-of-00003.gguf + 2 more parts" in res.stderr
    assert not (tmp_path / GDEST).exists()


def test_gguf_full_path_picks_one_of_two(ghub, tmp_path):
    res = download(ghub, tmp_path, f"{GGUF_REPO}:old/Qwen3-0.6B-Q3_K_XL.gguf")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / GDEST / "Qwen3-0.6B-Q3_K_XL.gguf").read_bytes() == gguf_bytes("old")


@pytest.mark.parametrize("spec", ["Q2_K", "Qwen3-0.6B-Q2_K-00002-of-00003.gguf"])
def test_split_gguf_fetches_every_part(ghub, tmp_path, spec):
    res = download(ghub, tmp_path, f"{GGUF_REPO}:{spec}")
    assert res.returncode == 0, res.stderr
    dest = tmp_path / GDEST
    for i in (1, 2, 3):
        assert (dest / f"Qwen3-0.6B-Q2_K-{i:05d}-of-00003.gguf").read_bytes() == gguf_bytes(f"split{i}", 9000)
    assert "a split GGUF (3 parts); Kipp loads one file" in res.stdout
    assert f"llama-gguf-split --merge {dest}/Qwen3-0.6B-Q2_K-00001-of-00003.gguf {dest}/Qwen3-0.6B-Q2_K.gguf" \
        in res.stdout


def test_split_gguf_with_a_part_missing(ghub, tmp_path):
    del ghub.repos[GGUF_REPO]["Q2_K/Qwen3-0.6B-Q2_K-00002-of-00003.gguf"]
    res = download(ghub, tmp_path, f"{GGUF_REPO}:Q2_K")
    assert res.returncode == 1 and "parts [2] of 3 are not in the listing" in res.stderr, res.stderr


def test_gguf_repo_without_file_lists_quants(ghub, tmp_path):
    res = download(ghub, tmp_path, GGUF_REPO)
    assert res.returncode == 1
    assert f"{GGUF_REPO} holds GGUF files, not safetensors: name one as {GGUF_REPO}:QUANT" in res.stderr
    assert "Qwen3-0.6B-IQ4_XS.gguf" in res.stderr


def test_list(ghub, tmp_path):
    res = download(ghub, tmp_path, GGUF_REPO, "--list")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert any(line.split()[:2] == ["IQ4_XS", "Qwen3-0.6B-IQ4_XS.gguf"] for line in lines), res.stdout
    assert not (tmp_path / GDEST).exists()


def test_gguf_resume_and_verify(ghub, tmp_path):
    f = "Qwen3-0.6B-Q5_K_M.gguf"
    ghub.drop_after[f] = 7777
    ghub.page_size = 3
    res = download(ghub, tmp_path, f"{GGUF_REPO}:Q5_K_M")
    assert res.returncode == 0, res.stderr
    ranges = [e["range"] for e in ghub.content_requests()]
    assert ranges == [None, "bytes=7777-"]
    assert (tmp_path / GDEST / f).read_bytes() == ghub.repos[GGUF_REPO][f].data
    # a corrupt transfer never lands under the final name
    (tmp_path / GDEST / f).unlink()
    ghub.corrupt.add(f)
    res = download(ghub, tmp_path, f"{GGUF_REPO}:Q5_K_M")
    assert res.returncode == 1
    assert f"verification failed for {f}: sha256 is " in res.stderr
    assert not list((tmp_path / GDEST).glob("*.gguf*"))


def test_gguf_dir_option(ghub, tmp_path):
    res = download(ghub, tmp_path, f"{GGUF_REPO}:Q8_0", "--dir", tmp_path / "elsewhere")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "elsewhere" / "Qwen3-0.6B-Q8_0.gguf").is_file()
    assert not (tmp_path / GDEST).exists()


# ---- an unreachable hub ------------------------------------------------------------


def closed_port_url() -> str:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("model, what", [
    (NAME, "config.json, generation_config.json, tokenizer.json, tokenizer_config.json, every *.safetensors"),
    (f"{GGUF_REPO}:Q4_K_M", "the .gguf file whose name ends in Q4_K_M"),
    (f"{GGUF_REPO}:Qwen3-0.6B-Q8_0.gguf", "the file Qwen3-0.6B-Q8_0.gguf"),
])
def test_unreachable_hub_says_what_to_do(tmp_path, model, what):
    url = closed_port_url()
    env = dict(os.environ, HF_ENDPOINT=url, KIPP_MODELS_DIR=str(tmp_path))
    env.pop("HF_TOKEN", None)
    res = run_tool("bash", SCRIPT, model, env=env, timeout=120)
    assert res.returncode == 1
    assert f"cannot reach the hub at {url}" in res.stderr, res.stderr
    assert f"HF_ENDPOINT=https://<mirror> download_model.sh {model}" in res.stderr
    folder = GDEST if ":" in model else NAME
    repo = GGUF_REPO if ":" in model else REPO
    assert f"download {what}" in res.stderr
    assert f"from https://huggingface.co/{repo}/tree/main and copy them into {tmp_path / folder}/" in res.stderr
    assert "Traceback" not in res.stderr


def test_token_goes_to_the_hub_only(ghub, tmp_path):
    """HF_TOKEN is sent to HF_ENDPOINT's host, not to the host a file redirects to."""
    with FakeHub() as cdn:
        f = "Qwen3-0.6B-Q8_0.gguf"
        cdn.add_file(GGUF_REPO, f, ghub.repos[GGUF_REPO][f].data)
        ghub.require_token = "hf_secret"
        # the hub's LFS redirect points at another server (localhost instead of 127.0.0.1)
        port = cdn.url.rsplit(":", 1)[1]
        ghub.cdn_base = f"http://localhost:{port}"
        res = download(ghub, tmp_path, f"{GGUF_REPO}:Q8_0", HF_TOKEN="hf_secret")
        assert res.returncode == 0, res.stderr
        assert "hf_secret" not in res.stdout + res.stderr
        assert [e["authorization"] for e in ghub.log] == ["Bearer hf_secret"] * 2  # listing, resolve
        assert [e["authorization"] for e in cdn.log] == [None]
