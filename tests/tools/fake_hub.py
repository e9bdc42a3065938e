"""A loopback stand-in for the Hugging Face hub, for testing tools/download_model.sh.

What it serves (on 127.0.0.1, a free port, ThreadingHTTPServer):
  GET /api/models/ORG/NAME/tree/REV   JSON list like the hub's tree API: type,
                                      oid (git blob sha1), size, path, and for
                                      LFS files lfs.{oid (sha256), size, pointerSize}
  GET /ORG/NAME/resolve/REV/FILE      the file; LFS files answer 302 -> /cdn/SHA256
                                      as the hub redirects to its CDN
  GET /cdn/SHA256                     LFS content
Byte ranges ("Range: bytes=A-" / "bytes=A-B") give 206 + Content-Range, or 416
past the end. Every request is logged (method, path, Range, Authorization).

Fault injection: `drop_after[path] = n` sends the full headers, then only n
body bytes, then closes the connection (once per entry); `corrupt.add(path)`
serves the file with one byte flipped (same size); `missing.add(path)` lists
the file but answers 404 for its content; `require_token = "x"`
answers 401 unless "Authorization: Bearer x" is sent; `no_ranges = True`
ignores Range headers (answers 200 with the whole file).

Tree listings: `?recursive=true` lists every file (and the folders), without it only the
top level; `page_size = n` pages them n entries at a time with a `cursor` query parameter
and a `Link: <URL>; rel="next"` header, as the hub does (its pages hold 1000 entries).

What it does not do: HEAD requests, the hub's other APIs, TLS.
Run standalone: python tests/tools/fake_hub.py CHECKPOINT_DIR --repo Qwen/Qwen3-0.6B
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class RepoFile:
    path: str
    data: bytes
    lfs: bool

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def tree_entry(self) -> dict:
        if not self.lfs:
            return {"type": "file", "oid": git_blob_sha1(self.data), "size": len(self.data), "path": self.path}
        pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
                   f"size {len(self.data)}\n").encode()
        return {"type": "file", "oid": git_blob_sha1(pointer), "size": len(self.data), "path": self.path,
                "lfs": {"oid": self.sha256, "size": len(self.data), "pointerSize": len(pointer)}}


@dataclass
class FakeHub:
    repos: dict[str, dict[str, RepoFile]] = field(default_factory=dict)  # repo -> path -> file
    revisions: tuple[str, ...] = ("main",)
    drop_after: dict[str, int] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    require_token: str | None = None
    no_ranges: bool = False
    missing: set[str] = field(default_factory=set)
    page_size: int | None = None
    cdn_base: str | None = None  # LFS redirects go to this server's /cdn/ (default: this one)
    log: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- repository content ---------------------------------------------

    def add_file(self, repo: str, path: str, data: bytes, lfs: bool | None = None) -> None:
        if lfs is None:
            lfs = path.endswith(LFS_SUFFIXES)
        self.repos.setdefault(repo, {})[path] = RepoFile(path, data, lfs)

    def add_directory(self, repo: str, directory: Path) -> None:
        for p in sorted(Path(directory).iterdir()):
            if p.is_file():
                self.add_file(repo, p.name, p.read_bytes())

    def requests_for(self, path_suffix: str) -> list[dict]:
        with self._lock:
            return [e for e in self.log if e["path"].endswith(path_suffix)]

    def content_requests(self) -> list[dict]:
        """Requests that transferred file content (resolve without redirect, or cdn)."""
        with self._lock:
            return [e for e in self.log if e.get("served")]

    # ---- server ---------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeHub is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            pass
        Handler.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep test output quiet
        pass

    # ---- helpers ----------------------------------------------------------

    def _send_json(self, code: int, obj) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _find(self, repo: str, rev: str, path: str | None = None):
        hub = self.hub
        if repo not in hub.repos:
            self._send_json(404, {"error": "Repository not found"})
            return None
        if rev not in hub.revisions:
            self._send_json(404, {"error": f"Invalid rev id: {rev}"})
            return None
        if path is None:
            return hub.repos[repo]
        f = hub.repos[repo].get(path)
        if f is None or path in hub.missing:
            f = None
            self._send_json(404, {"error": "Entry not found"})
        return f

    def _serve_content(self, f: RepoFile, entry: dict) -> None:
        hub = self.hub
        data = f.data
        if f.path in hub.corrupt and data:
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
        total = len(data)
        start, end = 0, total - 1
        rng = self.headers.get("Range")
        partial = False
        if rng and not hub.no_ranges:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if not m:
                self._send_json(400, {"error": f"bad Range {rng!r}"})
                return
            start = int(m.group(1))
            if m.group(2):
                end = min(int(m.group(2)), total - 1)
            if start >= total or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{total}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            partial = True
        body = data[start:end + 1]
        with hub._lock:
            drop = hub.drop_after.pop(f.path, None)
            entry["served"] = True
            entry["start"] = start
        self.send_response(206 if partial else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.end_headers()
        if drop is not None and drop < len(body):
            self.wfile.write(body[:drop])
            self.wfile.flush()
            entry["dropped_after"] = drop
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.close_connection = True
            return
        self.wfile.write(body)

    def _send_tree(self, files: dict[str, RepoFile], parsed) -> None:
        q = urllib.parse.parse_qs(parsed.query)
        recursive = q.get("recursive", ["false"])[0] == "true"
        dirs = {p.rsplit("/", 1)[0] for p in files if "/" in p}
        dirs |= {d.rsplit("/", i)[0] for d in list(dirs) for i in range(1, d.count("/") + 1)}
        entries = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in dirs]
        entries += [f.tree_entry() for f in files.values()]
        if not recursive:
            entries = [e for e in entries if "/" not in e["path"]]
        entries.sort(key=lambda e: e["path"])
        start = int(q.get("cursor", ["0"])[0])
        size = self.hub.page_size or len(entries) or 1
        body = json.dumps(entries[start:start + size]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if start + size < len(entries):
            nxt = urllib.parse.urlencode({**{k: v[0] for k, v in q.items()}, "cursor": start + size})
            self.send_header("Link", f'<{self.hub.url}{parsed.path}?{nxt}>; rel="next"')
        self.end_headers()
        self.wfile.write(body)

    # ---- routes -------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        hub = self.hub
        parsed = urllib.parse.urlsplit(self.path)
        raw_path = parsed.path  # still percent-encoded: a revision may contain "%2F"
        path = urllib.parse.unquote(raw_path)
        entry = {"method": "GET", "path": path, "query": parsed.query, "range": self.headers.get("Range"),
                 "authorization": self.headers.get("Authorization")}
        with hub._lock:
            hub.log.append(entry)
        if hub.require_token is not None and not path.startswith("/cdn/") and \
                self.headers.get("Authorization") != f"Bearer {hub.require_token}":
            self._send_json(401, {"error": "Invalid credentials"})
            return

        # tree API; the revision may be percent-encoded (refs%2Fpr%2F1)
        unq = urllib.parse.unquote
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/(.+)", raw_path)
        if m:
            files = self._find(unq(m.group(1)), unq(m.group(2)))
            if files is not None:
                self._send_tree(files, parsed)
            return
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", raw_path)
        if m:
            f = self._find(unq(m.group(1)), unq(m.group(2)), unq(m.group(3)))
            if f is None:
                return
            if f.lfs:
                self.send_response(302)
                self.send_header("Location", f"{hub.cdn_base or ''}/cdn/{f.sha256}?repo={urllib.parse.quote(unq(m.group(1)))}"
                                             f"&path={urllib.parse.quote(f.path)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._serve_content(f, entry)
            return
        m = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
        if m:
            q = urllib.parse.parse_qs(parsed.query)
            f = hub.repos.get(q.get("repo", [""])[0], {}).get(q.get("path", [""])[0])
            if f is None or f.sha256 != m.group(1):
                self._send_json(404, {"error": "no such object"})
                return
            self._serve_content(f, entry)
            return
        self._send_json(404, {"error": "not found"})


def main() -> int:
    import argparse
    import time
    ap = argparse.ArgumentParser(description="Serve a checkpoint directory as a fake hub repository.")
    ap.add_argument("directory", type=Path)
    ap.add_argument("--repo", default="Qwen/Qwen3-0.6B")
    args = ap.parse_args()
    hub = FakeHub()
    hub.add_directory(args.repo, args.directory)
    hub.start()
    print(f"serving {args.directory} as {args.repo} at {hub.url}  (HF_ENDPOINT={hub.url})", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        hub.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
