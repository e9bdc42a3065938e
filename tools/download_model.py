#!/usr/bin/env python3
"""Downloads a model from the Hugging Face hub into models/ (standard library only).

tools/download_model.sh is the entry point (it runs this file with python3); see the
--help text below, and docs/tools.md.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/download_model.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import datetime
import hashlib
import http.client
import json
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

PROG = os.environ.get("KIPP_DOWNLOAD_PROG", "download_model.py")
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ENDPOINT = "https://huggingface.co"

# short names kept from the first version; the folder under models/ is the name itself
ALIASES = {
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
    "qwen3-4b-base": "Qwen/Qwen3-4B-Base",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
}
# what tools/convert_to_gguf.py reads from a safetensors repository (plus the licence)
CONVERT_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "model.safetensors.index.json", "LICENSE", "chat_template.jinja",
                 # sentence-transformers (Qwen3-Embedding): the pooling mode
                 "modules.json", "config_sentence_transformers.json", "sentence_bert_config.json")
REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
POOLING_CONFIG = re.compile(r"\d+_[A-Za-z]+/config\.json")  # 1_Pooling/config.json
SPLIT = re.compile(r"(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf", re.IGNORECASE)
NAME_OK = re.compile(r"[A-Za-z0-9._-]+")
REPO_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
CHUNK = 1 << 20

HELP = f"""\
usage: download_model.sh MODEL [--revision REV] [--dir DIR] [--list]

Downloads a model from the Hugging Face hub into models/ and verifies every file.

MODEL is one of:
  ALIAS           {', '.join(ALIASES)}
                  (Qwen/Qwen3-0.6B, ... into models/ALIAS/)
  ORG/REPO        any repository of safetensors weights, e.g. Qwen/Qwen3-4B-Instruct-2507,
                  Qwen/Qwen3-4B-Thinking-2507, Qwen/Qwen3-Embedding-0.6B. Fetches config.json,
                  generation_config.json, the tokenizer files, every *.safetensors with
                  model.safetensors.index.json, LICENSE, chat_template.jinja and the
                  sentence-transformers files (modules.json, 1_Pooling/config.json) when
                  present, into models/<repo name in lower case>/ (models/qwen3-4b-instruct-2507/);
                  convert them with tools/convert_to_gguf.py.
  ORG/REPO:FILE   one GGUF file of a GGUF repository, e.g.
                  Qwen/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q8_0.gguf
  ORG/REPO:QUANT  the GGUF file of that quantization, matched without regard to case
                  against the last '-'/'.'-separated part of each file name:
                  Q8_0, Q4_K_M, q5_k_m, IQ4_XS, BF16, ... An absent or ambiguous quant
                  lists the files the repository has. GGUF files go to
                  models/<repo name in lower case>/FILE (models/qwen3-0.6b-gguf/...).
                  A split GGUF (NAME-00001-of-00003.gguf) is fetched whole, every part;
                  Kipp loads single files, so merge the parts first with llama.cpp's
                  `llama-gguf-split --merge NAME-00001-of-00003.gguf NAME.gguf`.

options:
  --revision REV  branch, tag or commit (default main)
  --dir DIR       download into DIR instead of models/NAME/
  --list          list the repository's GGUF quants (or its files) and exit
  -h, --help      this text

How it works: the file listing comes from HF_ENDPOINT/api/models/ORG/REPO/tree/REV
?recursive=true, following its pages (Link: <...>; rel="next"). Each file is downloaded
from HF_ENDPOINT/ORG/REPO/resolve/REV/FILE into FILE.part, resumed with a byte range where
an earlier transfer stopped (in this run, retried up to KIPP_DOWNLOAD_RETRIES times, or in
the next run), verified (LFS files: size and sha256 against the listing's lfs.oid; other
files: size and git blob sha1) and only then renamed to FILE. A file that fails
verification is deleted and the run stops with an error naming it; rerun to fetch it
again. Files already present and verified are skipped. DIR/manifest.json records the
repository, revision and each file's size and sha256.

Environment:
  HF_ENDPOINT            the hub or a mirror of it (default {DEFAULT_ENDPOINT})
  HF_TOKEN               a token for gated or private repositories, sent as
                         "Authorization: Bearer ..." to HF_ENDPOINT's host only; never printed
  KIPP_MODELS_DIR        where model folders go (default <repo>/models)
  KIPP_DOWNLOAD_RETRIES  retries of an interrupted transfer (default 5)
  KIPP_DOWNLOAD_TIMEOUT  seconds without data before a transfer counts as stalled (default 60)
  https_proxy etc.       honoured

Without network access to the hub: set HF_ENDPOINT=<mirror URL>, or download the files
by hand on another machine from https://huggingface.co/ORG/REPO/tree/main and copy them
into the folder this script would use (it prints both when the hub cannot be reached).
"""


class DownloadError(Exception):
    pass


class Unreachable(DownloadError):
    pass


@dataclass
class RepoFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    git_oid: str | None  # the others: git blob sha1

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def say(msg: str) -> None:
    print(msg, flush=True)


def warn(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


# ---- HTTP -------------------------------------------------------------------

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # redirects are followed by Hub.open, which decides where the token goes


class Hub:
    def __init__(self, endpoint: str, token: str | None, timeout: float):
        self.endpoint = endpoint.rstrip("/")
        self.host = urllib.parse.urlsplit(self.endpoint).netloc
        self.token = token
        self.timeout = timeout
        self.opener = urllib.request.build_opener(_NoRedirect)

    def open(self, url: str, headers: dict | None = None):
        """GET url following up to 10 redirects; returns the response (2xx) or raises
        urllib.error.HTTPError (4xx/5xx) / URLError / OSError."""
        for _ in range(10):
            h = {"User-Agent": "kipp-download_model/2"}
            h.update(headers or {})
            if self.token and urllib.parse.urlsplit(url).netloc == self.host:
                h["Authorization"] = f"Bearer {self.token}"
            try:
                return self.opener.open(urllib.request.Request(url, headers=h), timeout=self.timeout)
            except urllib.error.HTTPError as exc:
                if exc.code in (301, 302, 303, 307, 308) and exc.headers.get("Location"):
                    url = urllib.parse.urljoin(url, exc.headers["Location"])
                    exc.close()
                    continue
                raise
        raise DownloadError(f"too many redirects for {url}")

    def list_tree(self, repo: str, rev: str) -> tuple[list[dict], str]:
        rev_enc = urllib.parse.quote(rev, safe="")
        url = f"{self.endpoint}/api/models/{repo}/tree/{rev_enc}?recursive=true"
        first = url
        entries: list[dict] = []
        seen = set()
        while url:
            if url in seen or len(seen) > 10000:
                raise DownloadError(f"the file listing of {repo} pages in a loop at {url}")
            seen.add(url)
            try:
                with self.open(url) as resp:
                    body = resp.read()
                    links = resp.headers.get_all("Link") or []
            except urllib.error.HTTPError as exc:
                raise DownloadError(listing_error(repo, rev, exc.code, first, bool(self.token))) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                raise Unreachable(f"cannot reach the hub at {self.endpoint} ({reason(exc)}) "
                                  f"while listing {repo}: GET {url}") from None
            try:
                page = json.loads(body)
            except ValueError as exc:
                raise DownloadError(f"unusable file listing from {url}: not JSON ({exc}); "
                                    f"is HF_ENDPOINT={self.endpoint} a hub?") from None
            if not isinstance(page, list):
                raise DownloadError(f"unusable file listing from {url}: not a JSON list")
            entries += page
            url = next_link(links, url)
        return entries, first


def reason(exc: BaseException) -> str:
    r = getattr(exc, "reason", None)
    return str(r if r is not None else exc) or type(exc).__name__


def next_link(headers: list[str], base: str) -> str | None:
    for header in headers:
        for part in header.split(","):
            m = re.fullmatch(r'\s*<([^>]*)>\s*;(.*)', part)
            if m and re.search(r'rel\s*=\s*"?next"?', m.group(2)):
                return urllib.parse.urljoin(base, m.group(1))
    return None


def listing_error(repo: str, rev: str, code: int, url: str, have_token: bool) -> str:
    msg = f"listing {repo} at revision '{rev}' failed: HTTP {code} from {url}"
    if code in (401, 403):
        msg += ("; HF_TOKEN was sent and refused: check that it has access (accept the model's "
                "licence on its page first)" if have_token else
                "; the repository is gated or private: set HF_TOKEN to a token with access")
    elif code == 404:
        msg += "; check the repository id and the revision"
    return msg


# ---- the listing --------------------------------------------------------------

def parse_listing(tree: list) -> dict[str, RepoFile]:
    files = {}
    for e in tree:
        if not isinstance(e, dict) or e.get("type") != "file" or not isinstance(e.get("path"), str):
            continue
        path = e["path"]
        size = e.get("size")
        lfs = e.get("lfs") if isinstance(e.get("lfs"), dict) else None
        sha = None
        if lfs is not None:
            sha = lfs.get("oid")
            size = lfs.get("size", size)
            if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise DownloadError(f"bad lfs.oid for {path} in the listing: {sha!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise DownloadError(f"bad size for {path} in the listing: {size!r}")
        oid = e.get("oid") if sha is None else None
        if not (isinstance(oid, str) and re.fullmatch(r"[0-9a-f]{40}", oid)):
            oid = None
        files[path] = RepoFile(path, size, sha, oid)
    return files


def safe_relpath(path: str) -> None:
    parts = path.split("/")
    if any(p in ("", ".", "..") or not NAME_OK.fullmatch(p) for p in parts):
        raise DownloadError(f"refusing odd file name {path!r} in the listing")


def pick_safetensors(repo: str, files: dict[str, RepoFile]) -> list[RepoFile]:
    picked = [f for p, f in files.items()
              if p in CONVERT_FILES or (("/" not in p) and p.endswith(".safetensors"))
              or POOLING_CONFIG.fullmatch(p)]
    missing = [f for f in REQUIRED_FILES if f not in files]
    if not any(f.path.endswith(".safetensors") for f in picked):
        ggufs = [f for f in files.values() if f.path.lower().endswith(".gguf")]
        if ggufs:
            raise DownloadError(f"{repo} holds GGUF files, not safetensors: name one as "
                                f"{repo}:QUANT or {repo}:FILE\n" + describe_ggufs(ggufs))
        missing.append("*.safetensors")
    if missing:
        raise DownloadError(f"the repository {repo} lacks " + ", ".join(missing))
    for f in picked:
        safe_relpath(f.path)
    return sorted(picked, key=lambda f: f.path)


def quant_of(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    m = SPLIT.fullmatch(name)
    stem = m.group("stem") if m else name[:-len(".gguf")]
    return re.split(r"[-.]", stem)[-1]


def gguf_sets(ggufs: list[RepoFile]) -> dict[str, list[RepoFile]]:
    """Groups GGUF files into downloadable units: a single file, or all parts of a split."""
    sets: dict[str, list[RepoFile]] = {}
    for f in sorted(ggufs, key=lambda f: f.path):
        m = SPLIT.fullmatch(f.name)
        folder = f.path[:-len(f.name)]
        key = folder + (f"{m.group('stem')}-of-{m.group('count')}" if m else f.name)
        sets.setdefault(key, []).append(f)
    return sets


def describe_ggufs(ggufs: list[RepoFile]) -> str:
    lines = ["available GGUF files (quant, file, size):"]
    for files in gguf_sets(ggufs).values():
        size = sum(f.size for f in files)
        extra = f" + {len(files) - 1} more parts" if len(files) > 1 else ""
        lines.append(f"  {quant_of(files[0].path):<10} {files[0].path}{extra} ({mib(size)})")
    return "\n".join(lines)


def complete_split(files: list[RepoFile], listing_note: str) -> list[RepoFile]:
    m = SPLIT.fullmatch(files[0].name)
    if not m:
        return files
    count = int(m.group("count"))
    have = {int(SPLIT.fullmatch(f.name).group("part")) for f in files}
    lacking = sorted(set(range(1, count + 1)) - have)
    if lacking:
        raise DownloadError(f"split GGUF {files[0].path}: parts {lacking} of {count} are not in "
                            f"the listing{listing_note}")
    return files


def pick_gguf(repo: str, want: str, files: dict[str, RepoFile]) -> list[RepoFile]:
    ggufs = [f for f in files.values() if f.path.lower().endswith(".gguf")]
    if not ggufs:
        raise DownloadError(f"{repo} has no GGUF files; for a safetensors repository give "
                            f"just {repo} (and convert with tools/convert_to_gguf.py)")
    sets = gguf_sets(ggufs)
    if want.lower().endswith(".gguf"):
        hits = [k for k, fs in sets.items() if any(want in (f.path, f.name) for f in fs)]
        if not hits:
            raise DownloadError(f"{repo} has no file {want}\n" + describe_ggufs(ggufs))
        if len(hits) > 1:
            raise DownloadError(f"{want} names several files in {repo}; give the full path:\n"
                                + "\n".join(f"  {sets[k][0].path}" for k in hits))
        chosen = sets[hits[0]]
    else:
        if not re.fullmatch(r"[A-Za-z0-9_]+", want):
            raise DownloadError(f"'{want}' is neither a .gguf file name nor a quant name "
                                f"such as Q4_K_M, Q8_0 or IQ4_XS")
        hits = [k for k, fs in sets.items() if quant_of(fs[0].path).lower() == want.lower()]
        if len(hits) > 1:  # a projector (mmproj-F16.gguf) beside the model of the same type
            models = [k for k in hits if "mmproj" not in k.lower()]
            hits = models if len(models) == 1 else hits
        if not hits:
            raise DownloadError(f"{repo} has no GGUF file of quant {want}\n" + describe_ggufs(ggufs))
        if len(hits) > 1:
            raise DownloadError(f"quant {want} is ambiguous in {repo}: name the file as "
                                f"{repo}:FILE\n" + describe_ggufs([f for k in hits for f in sets[k]]))
        chosen = sets[hits[0]]
    for f in chosen:
        safe_relpath(f.path)
    return complete_split(chosen, "")


# ---- one file -----------------------------------------------------------------

def hashes(path: Path) -> tuple[str, str]:
    s256 = hashlib.sha256()
    s1 = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            s256.update(chunk)
            s1.update(chunk)
    return s256.hexdigest(), s1.hexdigest()


def verify(path: Path, f: RepoFile) -> tuple[str | None, str]:
    """(None, sha256) when path is the listed file, else (what is wrong, "")."""
    have = path.stat().st_size
    if have != f.size:
        return f"size is {have} bytes, expected {f.size}", ""
    got256, got1 = hashes(path)
    if f.sha256 and got256 != f.sha256:
        return f"sha256 is {got256}, expected {f.sha256}", ""
    if f.git_oid and got1 != f.git_oid:
        return f"git blob sha1 is {got1}, expected {f.git_oid}", ""
    return None, got256


class Progress:
    """A line redrawn 5 times a second on a terminal; elsewhere (a log) a line every 30 s."""

    def __init__(self, total: int):
        self.total, self.t0 = total, time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last = 0.0 if self.tty else self.t0

    def update(self, have: int, start: int) -> None:
        now = time.monotonic()
        done = have >= self.total
        if now - self.last < (0.2 if self.tty else 30.0) and not (self.tty and done):
            return
        self.last = now
        rate = (have - start) / max(now - self.t0, 1e-6)
        line = f"  {mib(have)} of {mib(self.total)} ({100 * have // max(self.total, 1)} %), {mib(int(rate))}/s"
        sys.stderr.write(("\r" + line + "   " + ("\n" if done else "")) if self.tty else line + "\n")
        sys.stderr.flush()


def fetch(hub: Hub, url: str, part: Path, f: RepoFile, retries: int) -> None:
    """Brings part to f.size bytes from url, resuming from what part holds."""
    attempt = 0
    while True:
        have = part.stat().st_size if part.exists() else 0
        if have > f.size:
            part.unlink()
            have = 0
        if have == f.size:
            part.touch()
            return
        attempt += 1
        if have:
            say(f"  resuming at byte {have}")
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with hub.open(url, headers) as resp:
                mode = "ab"
                if have and resp.status != 206:
                    warn(f"  server does not support resuming; restarting {f.path} from byte 0")
                    have, mode = 0, "wb"
                elif have:
                    m = re.match(r"bytes (\d+)-", resp.headers.get("Content-Range", ""))
                    if not m or int(m.group(1)) != have:
                        warn(f"  server answered another byte range; restarting {f.path} from byte 0")
                        part.unlink()
                        continue
                progress = Progress(f.size)
                start = have
                with open(part, mode) as out:
                    while chunk := resp.read(CHUNK):
                        if have + len(chunk) > f.size:
                            raise DownloadError(f"downloading {f.path}: the server sent more than the "
                                                f"listed {f.size} bytes ({url})")
                        out.write(chunk)
                        have += len(chunk)
                        progress.update(have, start)
            if have == f.size:
                return
            error = f"the transfer ended at byte {have} of {f.size}"
        except urllib.error.HTTPError as exc:
            if exc.code == 416:  # the range is past what the server has: start over
                part.unlink(missing_ok=True)
                error = "HTTP 416"
            elif 400 <= exc.code < 500:
                raise DownloadError(f"downloading {f.path} failed: HTTP {exc.code} from {url}"
                                    + ("; set HF_TOKEN for a gated repository" if exc.code in (401, 403)
                                       and not hub.token else "")) from None
            else:
                error = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, http.client.HTTPException, socket.timeout) as exc:
            error = reason(exc) if not isinstance(exc, http.client.IncompleteRead) else \
                "the connection closed mid-file"
        if attempt > retries:
            raise DownloadError(f"downloading {f.path} from {url} failed after {attempt} attempts "
                                f"(last error: {error}); rerun to resume")
        warn(f"  transfer interrupted ({error}), retrying ({attempt}/{retries})")
        time.sleep(min(attempt, 5))


# ---- the run ------------------------------------------------------------------

def hand_copy_hint(model: str, repo: str, rev: str, spec: str | None, dest: Path) -> str:
    what = (f"the file {spec}" if spec and spec.lower().endswith(".gguf") else
            f"the .gguf file whose name ends in {spec} (every part, for a split file)" if spec else
            "config.json, generation_config.json, tokenizer.json, tokenizer_config.json, every "
            "*.safetensors and model.safetensors.index.json (and modules.json with 1_Pooling/config.json "
            "for an embedding model)")
    return (f"To use a mirror of the hub: HF_ENDPOINT=https://<mirror> {PROG} {model}\n"
            f"To copy the files in by hand: on a machine with access, download {what} from "
            f"{DEFAULT_ENDPOINT}/{repo}/tree/{rev} and copy them into {dest}/")


def parse_model(arg: str) -> tuple[str, str, str | None]:
    """(repo, folder name, GGUF file or quant or None)."""
    if arg in ALIASES:
        return ALIASES[arg], arg, None
    repo, _, spec = arg.partition(":")
    if not REPO_OK.fullmatch(repo) or (":" in arg and not spec):
        if "/" not in arg:
            raise DownloadError(f"unknown model name '{arg}' (short names: {' '.join(ALIASES)}; "
                                f"or give a Hugging Face repository id such as Qwen/Qwen3-4B-Instruct-2507 "
                                f"or Qwen/Qwen3-0.6B-GGUF:Q8_0)")
        raise DownloadError(f"'{arg}' is not a repository id ORG/NAME[:FILE|:QUANT]")
    return repo, repo.split("/")[1].lower(), spec or None


def write_manifest(dest: Path, repo: str, rev: str, endpoint: str, done: dict) -> None:
    path = dest / "manifest.json"
    files = {}
    try:  # GGUF quants of one repository share a folder: keep the others' entries
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("repo") == repo and isinstance(old.get("files"), dict):
            files = {k: v for k, v in old["files"].items() if (dest / k).is_file()}
    except (OSError, ValueError, AttributeError):
        pass
    files.update(done)
    manifest = {"repo": repo, "revision": rev, "endpoint": endpoint, "files": dict(sorted(files.items())),
                "downloaded_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    tmp = path.with_name("manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run(args) -> int:
    repo, folder, spec = parse_model(args.model)
    if not args.revision:
        raise DownloadError("empty --revision")
    retries_s = os.environ.get("KIPP_DOWNLOAD_RETRIES", "5")
    if not retries_s.isdigit():
        raise DownloadError(f"KIPP_DOWNLOAD_RETRIES must be a number, got '{retries_s}'")
    timeout_s = os.environ.get("KIPP_DOWNLOAD_TIMEOUT", "60")
    try:
        timeout = float(timeout_s)
        assert timeout > 0
    except (ValueError, AssertionError):
        raise DownloadError(f"KIPP_DOWNLOAD_TIMEOUT must be a positive number, got '{timeout_s}'") from None
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    if not re.match(r"https?://[^/]", endpoint):
        raise DownloadError(f"HF_ENDPOINT must be an http:// or https:// URL, got '{endpoint}'")
    models = Path(os.environ.get("KIPP_MODELS_DIR") or REPO_ROOT / "models")
    dest = Path(args.dir) if args.dir else models / folder
    hub = Hub(endpoint, os.environ.get("HF_TOKEN") or None, timeout)

    say(f"{PROG}: listing {repo}@{args.revision} from {endpoint}")
    try:
        tree, tree_url = hub.list_tree(repo, args.revision)
    except Unreachable as exc:
        raise DownloadError(f"{exc}\n" + hand_copy_hint(args.model, repo, args.revision, spec, dest)) from None
    listing = parse_listing(tree)
    if args.list:
        ggufs = [f for f in listing.values() if f.path.lower().endswith(".gguf")]
        say(describe_ggufs(ggufs) if ggufs else
            "\n".join(f"  {f.path} ({f.size} bytes)" for f in sorted(listing.values(), key=lambda f: f.path)))
        return 0
    wanted = pick_gguf(repo, spec, listing) if spec else pick_safetensors(repo, listing)

    dest.mkdir(parents=True, exist_ok=True)
    rev_enc = urllib.parse.quote(args.revision, safe="")
    done = {}
    for i, f in enumerate(wanted, 1):
        local = f.name if spec else f.path  # GGUF: flat in dest; safetensors: as in the repo
        final = dest / local
        part = final.with_name(final.name + ".part")
        tag = f"[{i}/{len(wanted)}] {local}"
        if final.is_file():
            bad, sha = verify(final, f)
            if bad is None:
                say(f"{tag}: already complete and verified, skipping")
                done[local] = {"size": f.size, "sha256": sha}
                continue
            say(f"{tag}: existing file is not the expected one ({bad}), downloading again")
            final.unlink()
        final.parent.mkdir(parents=True, exist_ok=True)
        say(f"{tag} ({f.size} bytes)")
        url = f"{endpoint}/{repo}/resolve/{rev_enc}/{urllib.parse.quote(f.path)}"
        fetch(hub, url, part, f, int(retries_s))
        bad, sha = verify(part, f)
        if bad is not None:
            part.unlink()
            raise DownloadError(f"verification failed for {local}: {bad} "
                                f"(deleted the bad file; rerun to download it again)")
        os.replace(part, final)
        done[local] = {"size": f.size, "sha256": sha}
    write_manifest(dest, repo, args.revision, endpoint, done)
    say(f"{PROG}: {repo}@{args.revision} is complete in {dest} ({len(wanted)} files, manifest.json written)")
    if not spec:
        say(f"next: .venv/bin/python -m tools.convert_to_gguf {dest} --outtype bf16")
    elif len(wanted) > 1:
        first = dest / wanted[0].name
        merged = dest / (SPLIT.fullmatch(wanted[0].name).group("stem") + ".gguf")
        say(f"note: a split GGUF ({len(wanted)} parts); Kipp loads one file: merge them with llama.cpp's "
            f"llama-gguf-split --merge {first} {merged}")
    else:
        say(f"next: build/kipp --model {dest / wanted[0].name} --chat --prompt \"Hello\"")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, add_help=False, usage=HELP.splitlines()[0][len("usage: "):])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--revision", default="main")
    ap.add_argument("--dir")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("-h", "--help", action="store_true")
    args = ap.parse_args(argv)
    if args.help:
        sys.stdout.write(HELP)
        return 0
    if not args.model:
        ap.print_usage(sys.stderr)
        warn(f"{PROG}: error: name a MODEL (--help lists the forms)")
        return 2
    try:
        return run(args)
    except DownloadError as exc:
        warn(f"{PROG}: error: {exc}")
        return 1
    except KeyboardInterrupt:
        warn(f"{PROG}: interrupted; rerun to resume (partial files are kept as *.part)")
        return 130
    except OSError as exc:
        warn(f"{PROG}: error: {exc.strerror or exc}: {exc.filename or ''}")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
