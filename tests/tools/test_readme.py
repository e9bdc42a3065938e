"""The README's commands are tests: every fenced sh/bash/console/python block in README.md runs
here, as written, or carries a marker that says why not.

How: a scratch copy of the repository (tmp/readme-farm: every top-level entry a symlink to
the checkout, `build` a symlink to $BUILD, `models/` a real folder whose entries link to the
checkout's models except the folders the README writes into) is the working directory;
each block runs there in `bash -eo pipefail` (python blocks in .venv/bin/python), in
README order, with stdin empty, HOME in the copy and outputs the README sends to /tmp/
redirected into the copy. `make` itself runs in the checkout (a `make` on PATH that adds
-C CHECKOUT BUILD=$BUILD): make test has built $BUILD and models/ by the time this runs, so
the README's make commands only check that everything is up to date and run the demo.

Markers (an HTML comment on the line before the opening fence):
  <!-- readme: network -->        run against a loopback fake of the Hugging Face hub
                                   (tests/tools/fake_hub.py, HF_ENDPOINT) that serves the
                                   tiny-tied checkpoint as every repository the block names
  <!-- readme: background -->     start the block, wait for the server it starts to answer
                                   /health, leave it running for the blocks below
  <!-- readme: skip: REASON -->   not run, for the stated reason
Every fence needs an info string (sh, bash, console, python, text, json, ...): an unlabeled
fence fails, so commands cannot slip in untested. A few lines of a block are not run
(NOT_RUN_LINES, with reasons), and SUBSTITUTIONS shrink benchmark sizes to tiny ones; each
entry must still match the README, so neither table can rot.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from fake_hub import FakeHub

README = REPO_ROOT / "README.md"
RUN_LANGS = {"sh", "bash", "shell", "console", "python"}
BLOCK_TIMEOUT = 300  # seconds; generous for a loaded 2-core machine

# lines of a run block that are not run, and why (each must occur in the README)
NOT_RUN_LINES = {
    "make test": "the full gate is the suite that runs this test",
    "make check": "a subset of make test, which is running",
}
# (old, new): benchmark sizes shrunk to tiny ones; the port of the server examples
SUBSTITUTIONS = [
    ("--shape 0.6b", "--shape tiny"),
    ("--warmup 1 --runs 5", "--warmup 0 --runs 1"),
    ("--decode 64", "--decode 4"),
    ("--ctx 256 --kl-base", "--ctx 256 --chunks 1 --kl-base"),  # 1 of 98 chunks
    ("/tmp/", "out/"),
    ("MODEL.gguf", "models/kipp-tiny/kipp-tiny-bf16.gguf"),
]
# files the README's examples take as the reader's own
FIXTURES = {
    "person.json": json.dumps({"type": "object", "properties": {"name": {"type": "string"},
                                                                "age": {"type": "integer"}},
                               "required": ["name", "age"], "additionalProperties": False}),
    "yes-no.gbnf": 'root ::= " yes" | " no"\n',
}
# (text in the block, regex its output must match): checks beyond the exit status
EXPECT = [
    ("make demo", r"\S"),
    ("/v1/chat/completions", r'"choices"'),
    ("kipp_prefix_cache", r"kipp_prefix_cache"),
    ("client.chat.completions.create", r"\S"),
]
# the fake hub: every repository the README downloads from, served from the tiny models
HUB_SAFETENSORS = ["Qwen/Qwen3-0.6B"]
HUB_GGUF = {"Qwen/Qwen3-0.6B-GGUF": ("Qwen3-0.6B-Q8_0.gguf", "models/tiny-tied/kipp-tiny-tied-q8_0.gguf")}
TINY_CHECKPOINT = "models/tiny-tied"


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: str | None  # "network", "background", "skip: ..."

    @property
    def id(self) -> str:
        return f"L{self.line}-{self.lang or 'unlabeled'}"


def parse(text: str) -> list[Block]:
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([^\s`]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3).lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        marker = None
        if prev >= 0:
            mm = re.fullmatch(r"\s*<!--\s*readme:\s*(.*?)\s*-->\s*", lines[prev])
            marker = mm.group(1) if mm else None
        blocks.append(Block(start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", marker))
        i = j + 1
    return blocks


BLOCKS = parse(README.read_text(encoding="utf-8"))


def commands(block: Block) -> str:
    """The text to run: console blocks keep their `$ ` lines; NOT_RUN_LINES become no-ops."""
    text = block.text
    if block.lang == "console":
        text = "".join(line[2:] + "\n" for line in text.splitlines() if line.startswith("$ "))
    out = []
    for line in text.splitlines():
        bare = line.split("#", 1)[0].strip()
        out.append(f": not run: {bare}" if bare in NOT_RUN_LINES else line)
    text = "\n".join(out) + "\n"
    for old, new in SUBSTITUTIONS:
        text = text.replace(old, new)
    return text


# ---- the structure of the README: cheap, always run ---------------------------------------


def test_every_fence_is_labeled_and_every_marker_known():
    bad = []
    for b in BLOCKS:
        if not b.lang:
            bad.append(f"README.md:{b.line}: a fence without an info string: label it sh (run by "
                       f"tests/tools/test_readme.py) or text (not a command)")
        if b.marker is not None and not (b.marker in ("network", "background") or
                                          re.fullmatch(r"skip:\s*\S.*", b.marker)):
            bad.append(f"README.md:{b.line}: unknown marker <!-- readme: {b.marker} --> (network, "
                       f"background or skip: REASON)")
        if b.marker is not None and b.lang not in RUN_LANGS:
            bad.append(f"README.md:{b.line}: a readme marker on a {b.lang or 'unlabeled'} block, "
                       f"which is never run")
    assert not bad, "\n".join(bad)


def test_tables_match_the_readme():
    text = "\n".join(b.text for b in BLOCKS if b.lang in RUN_LANGS)
    for old, _ in SUBSTITUTIONS:
        assert old in text, f"SUBSTITUTIONS entry {old!r} no longer occurs in README.md's commands"
    for line in NOT_RUN_LINES:
        assert re.search(rf"^{re.escape(line)}\b", text, re.M), f"NOT_RUN_LINES {line!r} is not in README.md"
    for needle, _ in EXPECT:
        assert needle in text, f"EXPECT entry {needle!r} no longer occurs in README.md's commands"
    assert any(b.marker == "network" for b in BLOCKS)
    assert any(b.lang in RUN_LANGS and b.marker is None for b in BLOCKS)


def test_parser_sees_markers():
    blocks = parse("text\n<!-- readme: skip: slow -->\n\n```sh\nmake x\n```\n```\nplain\n```\n"
                   "```console\n$ echo hi\nhi\n```\n")
    assert [(b.line, b.lang, b.marker) for b in blocks] == [(4, "sh", "skip: slow"), (7, "", None),
                                                             (10, "console", None)]
    assert commands(blocks[2]) == "echo hi\n"
    assert commands(Block(1, "sh", "make test   # all\nmake demo\n", None)).startswith(": not run: make test\n")


# ---- running the blocks -----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Farm:
    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.hub: FakeHub | None = None
        self.background: list[subprocess.Popen] = []
        build = Path(os.environ.get("BUILD") or "build")
        build = build if build.is_absolute() else REPO_ROOT / build
        writes = {"random"} | {r.split("/")[1].lower() for r in HUB_SAFETENSORS + list(HUB_GGUF)}
        for entry in REPO_ROOT.iterdir():
            if entry.name not in ("build", "models", ".git"):
                (root / entry.name).symlink_to(entry)
        (root / "build").symlink_to(build)
        (root / "models").mkdir()
        for entry in (REPO_ROOT / "models").iterdir() if (REPO_ROOT / "models").is_dir() else []:
            if entry.name not in writes:
                (root / "models" / entry.name).symlink_to(entry)
        for d in ("out", "home"):
            (root / d).mkdir()
        for name, text in FIXTURES.items():
            (root / name).write_text(text, encoding="utf-8")
        # `make` runs in the checkout with its $BUILD: the objects' dependency files name
        # $BUILD's paths, so a make in the copy with another BUILD would miss header changes
        (root / "bin").mkdir()
        real_make = shutil.which("make") or "/usr/bin/make"
        (root / "bin" / "make").write_text(f'#!/bin/sh\nexec {shlex.quote(real_make)} -C {shlex.quote(str(REPO_ROOT))} '
                                           f'BUILD={shlex.quote(os.environ.get("BUILD") or "build")} "$@"\n')
        (root / "bin" / "make").chmod(0o755)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("BUILD", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "HF_TOKEN", "HF_ENDPOINT")
                    and not k.startswith("KIPP_")}
        self.env.update(HOME=str(root / "home"), KIPP_MODELS_DIR=str(root / "models"),
                        PATH=f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
        if os.environ.get("KIPP_CPU_ISA"):
            self.env["KIPP_CPU_ISA"] = os.environ["KIPP_CPU_ISA"]

    def start_hub(self) -> str:
        if self.hub is None:
            self.hub = FakeHub()
            ckpt = REPO_ROOT / TINY_CHECKPOINT
            for repo in HUB_SAFETENSORS:
                for p in sorted(ckpt.iterdir()):
                    if p.is_file() and not p.name.endswith(".gguf"):
                        self.hub.add_file(repo, p.name, p.read_bytes())
            for repo, (name, src) in HUB_GGUF.items():
                self.hub.add_file(repo, name, (REPO_ROOT / src).read_bytes())
            self.hub.start()
        return self.hub.url

    def prepare(self, block: Block) -> tuple[list[str], dict]:
        text = commands(block).replace("127.0.0.1:8080", f"127.0.0.1:{self.port}") \
                              .replace("--port 8080", f"--port {self.port}")
        env = dict(self.env)
        if block.marker == "network":
            env["HF_ENDPOINT"] = self.start_hub()
        if block.lang == "python":
            return [str(REPO_ROOT / ".venv/bin/python"), "-c", text], env
        return ["bash", "-eo", "pipefail", "-c", text], env

    def close(self) -> None:
        for p in self.background:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        if self.hub is not None:
            self.hub.stop()


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    if os.environ.get("KIPP_SANITIZE"):
        pytest.skip("README commands run in make test, not again under the sanitizers")
    f = Farm(tmp_path_factory.mktemp("readme-farm"))
    yield f
    f.close()


def wait_health(port: int, proc: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the background block exited with status {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    pytest.fail(f"the server never answered /health on port {port}:\n{log.read_text()[-3000:]}")


def _default_signals() -> None:
    """In a background block's child: SIGTERM (the clean-up's signal) and the others at their
    defaults and none blocked, whatever this test inherited."""
    for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in RUN_LANGS], ids=lambda b: b.id)
def test_readme_block(farm, block):
    if block.marker and block.marker.startswith("skip:"):
        pytest.skip(f"README.md:{block.line}: {block.marker}")
    argv, env = farm.prepare(block)
    where = f"README.md:{block.line} ({block.lang} block)"
    if block.marker == "background":
        log = farm.root / "out" / f"background-{block.line}.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(argv, cwd=farm.root, env=env, stdin=subprocess.DEVNULL, stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_default_signals)
        farm.background.append(proc)
        wait_health(farm.port, proc, log)
        return
    try:
        res = subprocess.run(argv, cwd=farm.root, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where} ran past {BLOCK_TIMEOUT} s:\n{block.text}")
    output = res.stdout + res.stderr
    assert res.returncode == 0, (f"{where} failed with status {res.returncode}:\n{block.text}\n"
                                 f"--- output (last 3000 characters) ---\n{output[-3000:]}")
    for needle, pattern in EXPECT:
        if needle in block.text:
            assert re.search(pattern, res.stdout), f"{where}: output lacks /{pattern}/:\n{output[-3000:]}"


def test_farm_left_the_checkout_alone(farm):
    """The blocks wrote into the scratch copy, not into the checkout's models/."""
    for name in {r.split("/")[1].lower() for r in HUB_SAFETENSORS + list(HUB_GGUF)}:
        if (farm.root / "models" / name).exists():
            assert not (farm.root / "models" / name).is_symlink()
