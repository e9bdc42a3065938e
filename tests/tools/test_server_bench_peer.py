"""bench/server_bench.py --peer-llama-server: the llama-server side of the server scaling
comparison, against a stand-in binary (a Python HTTP server that takes llama-server's
arguments): its start-up on a free loopback port, /health, /v1/models, and its token counter
read as the server-side figure; and the argument error for a path that is not an executable."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE = r'''#!PYTHON
import http.server, json, sys
a = sys.argv[1:]
assert a[a.index("-t") + 1] == "2" and a[a.index("-np") + 1] == "8" and "--metrics" in a, a
assert a[a.index("-c") + 1] == str(512 * 8), a
port = int(a[a.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": b'{"status":"ok"}',
                "/v1/models": json.dumps({"data": [{"id": a[a.index("-m") + 1]}]}).encode(),
                "/metrics": b"# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 42\n"}.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def test_llama_server_peer_process(tmp_path):
    sys.path.insert(0, str(ROOT))
    from bench import server_bench as sb
    fake = tmp_path / "llama-server"
    fake.write_text(FAKE.replace("PYTHON", sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    srv = sb.LlamaServer(str(fake), "/models/x.gguf", threads=2, parallel=8).start(timeout=30)
    try:
        assert srv.alive() and srv.port > 0
        assert srv.served_model() == "/models/x.gguf"
        m = srv.metrics()
        assert m.get("kipp_generated_tokens_total") == 42      # the peer's counter, renamed
        assert not m.has("kipp_engine_steps_total")             # kipp-only counters read 0
    finally:
        srv.stop()
    assert not srv.alive()


def test_peer_path_must_be_executable(tmp_path):
    p = tmp_path / "not-executable"
    p.write_text("")
    r = subprocess.run([sys.executable, "-m", "bench.server_bench", "--model", "x.gguf",
                        "--peer-llama-server", str(p)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--peer-llama-server" in r.stderr and "not an executable" in r.stderr
