"""KV-cache events (--kv-events): vLLM's wire format as a router written for vLLM reads it, checked
with a pyzmq SUB socket and the msgpack package (not Kipp's encoder) and a hash written here from
vLLM's published scheme (sha256 over canonical CBOR, cbor2 + hashlib): the start-up
AllBlocksCleared, a prompt's whole blocks stored while its request still streams (tokens, parent
links, hashes), a text prompt's blocks equal to /tokenize's ids, a running request's blocks
serving another prompt (live prefix sharing) and announced once, consecutive sequence numbers,
removals when the prefix cache evicts, replay of a missed range over the ROUTER socket, the
32-byte hash form with another seed, docs/server.md's hash recipe, and a clear error for a bad
endpoint. Spec: docs/server.md ("KV-cache events")."""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import MODEL, SERVER_BIN, TIMEOUT_SCALE, Srv, start_server

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")
cbor2 = pytest.importorskip("cbor2")

BS = 16          # the KV pool's block size (kipp-server's default): tokens per event block
TOPIC = b"kipp-kv"
U64 = (1 << 64) - 1


# ---- vLLM's block hash, written from its published scheme -----------------------------------

def none_hash(seed: str) -> bytes:
    """vLLM's init_none_hash with PYTHONHASHSEED=seed: sha256_cbor(seed)."""
    return hashlib.sha256(cbor2.dumps(seed, canonical=True)).digest()


def chain(tokens: list[int], seed: str = "0") -> list[bytes]:
    """hash_block_tokens over the whole blocks: sha256_cbor((parent, tuple(block), None))."""
    parent, out = none_hash(seed), []
    for b in range(len(tokens) // BS):
        parent = hashlib.sha256(cbor2.dumps((parent, tuple(tokens[b * BS:(b + 1) * BS]), None),
                                            canonical=True)).digest()
        out.append(parent)
    return out


def as_int(h: bytes) -> int:
    """vLLM's ExternalBlockHash with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (its default)."""
    return int.from_bytes(h, "big") & U64


# ---- a subscriber -----------------------------------------------------------------------------

class Subscriber:
    """A SUB socket drained by a thread into (arrival time, seq, raw payload, decoded batch)."""

    def __init__(self, endpoint: str, topic: bytes):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, topic)
        self.sock.connect(endpoint)
        self.topic = topic
        self.got: list[tuple[float, int, bytes, list]] = []
        self.bad: list = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            if not self.sock.poll(50):
                continue
            frames = self.sock.recv_multipart()
            t = time.monotonic()
            if len(frames) != 3 or frames[0] != self.topic or len(frames[1]) != 8:
                self.bad.append(frames)
                continue
            batch = msgpack.unpackb(frames[2], raw=False)
            with self.lock:
                self.got.append((t, int.from_bytes(frames[1], "big"), frames[2], batch))

    def batches(self):
        with self.lock:
            return list(self.got)

    def events(self):
        """(arrival, seq, event) of every event so far, in order."""
        return [(t, seq, ev) for t, seq, _, b in self.batches() for ev in b[1]]

    def wait_for(self, pred, timeout: float = 10.0):
        deadline = time.monotonic() + timeout * TIMEOUT_SCALE
        while time.monotonic() < deadline:
            for item in self.events():
                if pred(item[2]):
                    return item
            time.sleep(0.01)
        pytest.fail(f"no such event within {timeout} s; got {self.events()!r:.2000}")

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close(linger=0)
        self.ctx.term()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def kv():
    d = tempfile.mkdtemp(prefix="kipp-kv-events-")
    ev = f"ipc://{d}/events"
    replay = f"tcp://127.0.0.1:{free_port()}"
    # one prefix-cache entry: the second request's entry evicts the first's blocks
    srv = Srv(start_server("kv-events", "--kv-events", ev, "--kv-events-replay", replay,
                           "--kv-events-topic", TOPIC.decode(), "--prefix-cache-entries", "1",
                           threads="1"))
    sub = Subscriber(ev, TOPIC)
    time.sleep(0.3 * TIMEOUT_SCALE)  # the SUB socket joins (ZeroMQ drops what comes before)
    yield srv, sub, replay
    sub.close()
    srv.proc.stop()
    shutil.rmtree(d, ignore_errors=True)


PROMPT_A = [(7 * i + 300) % 900 + 10 for i in range(3 * BS + 5)]  # 3 whole blocks and a tail
PROMPT_B = [(11 * i + 50) % 900 + 10 for i in range(2 * BS + 3)]


def stored(ev) -> bool:
    return isinstance(ev, dict) and ev.get("type") == "BlockStored"


def some_batches(srv, sub, n: int):
    """At least n batches so far (a test run alone makes its own)."""
    if len(sub.batches()) < n:
        srv.complete(PROMPT_A, max_tokens=60, ignore_eos=True)
        srv.wait_idle()
        time.sleep(0.1)
    assert len(sub.batches()) >= n, sub.batches()


def test_blocks_stored_while_the_request_streams(kv):
    srv, sub, _ = kv
    want = [as_int(h) for h in chain(PROMPT_A)]
    out = {}

    def stream():
        out["res"] = srv.stream("/v1/completions", {"model": srv.model, "prompt": PROMPT_A,
                                                    "max_tokens": 150, "ignore_eos": True,
                                                    "stream": True})
        out["t_done"] = time.monotonic()

    th = threading.Thread(target=stream)
    th.start()
    t_ev, seq, ev = sub.wait_for(lambda e: stored(e) and e["block_hashes"][:1] == want[:1])
    th.join(timeout=60 * TIMEOUT_SCALE)
    res = out["res"]
    assert res.status == 200 and res.done, res.body
    # announced when the prompt's blocks filled (its prefill step), not when the request ended
    assert t_ev < out["t_done"], (t_ev, out["t_done"])
    # the whole blocks of the prompt in one event: hashes, tokens, no parent, vLLM's fields
    assert ev["block_hashes"] == want, (ev, want)
    assert ev["token_ids"] == PROMPT_A[:3 * BS]
    assert ev["parent_block_hash"] is None
    assert ev["block_size"] == BS
    assert ev["medium"] == "GPU" and ev["lora_id"] is None and ev["lora_name"] is None
    assert ev["group_idx"] == 0 and ev["kv_cache_spec_kind"] == "full_attention"
    # the batch: [ts, events, data_parallel_rank]; the first batch starts with the clear
    batches = sub.batches()
    first = batches[0][3]
    assert batches[0][1] == 0, [b[1] for b in batches]
    assert first[1][0] == {"type": "AllBlocksCleared"}, first
    assert first[2] == 0 and abs(first[0] - time.time()) < 120, first
    assert not sub.bad, sub.bad


def test_parents_chain_and_blocks_are_announced_once(kv):
    srv, sub, _ = kv
    # the same prompt again: its blocks are held already (the prefix cache): nothing new
    # for them; decode blocks extend the chain from a stored parent
    srv.complete(PROMPT_A, max_tokens=40, ignore_eos=True)
    srv.wait_idle()
    time.sleep(0.1)
    seen: set[int] = set()
    live: set[int] = set()
    for _, _, ev in sub.events():
        if ev["type"] == "AllBlocksCleared":
            live.clear()
        elif ev["type"] == "BlockStored":
            assert ev["parent_block_hash"] is None or ev["parent_block_hash"] in live, ev
            assert len(ev["token_ids"]) == len(ev["block_hashes"]) * BS, ev
            for h in ev["block_hashes"]:
                assert h not in live, f"block {h} announced twice while held"
                live.add(h)
                seen.add(h)
        elif ev["type"] == "BlockRemoved":
            for h in ev["block_hashes"]:
                assert h in live, f"block {h} removed but not held"
                live.discard(h)
    assert set(as_int(h) for h in chain(PROMPT_A)) <= seen


def test_text_prompt_blocks_are_its_tokens(kv):
    """A text prompt: the stored blocks hold what /tokenize gives for it, hashed from those ids."""
    srv, sub, _ = kv
    text = "Routers follow the replicas' caches block by block; " * 4
    st, _, js = srv.post("/tokenize", {"content": text})
    assert st == 200, js
    ids = js["tokens"]
    assert len(ids) >= 2 * BS, len(ids)
    srv.complete(text, max_tokens=1)
    want = [as_int(h) for h in chain(ids)]
    if len(ids) % BS == 0:
        want = want[:-1]  # the prompt's last token is computed with the first generated one
    e = sub.wait_for(lambda ev: stored(ev) and ev["block_hashes"][:1] == want[:1])[2]
    assert e["block_hashes"] == want[:len(e["block_hashes"])] and len(e["block_hashes"]) >= len(want) - 1, (e, want)
    assert e["token_ids"] == ids[:len(e["block_hashes"]) * BS]


def test_a_running_sequence_serves_a_prefix_and_its_blocks_are_announced_once(kv):
    """A prompt that starts like one still being generated forks that sequence's blocks (live
    prefix sharing: the cache need not wait for the request to end), and the shared blocks are
    not announced again."""
    srv, sub, _ = kv
    c = [(13 * i + 77) % 900 + 10 for i in range(3 * BS + 5)]
    d = c[:3 * BS] + [(c[3 * BS] + 1) % 900 + 10, 11, 12]
    want = [as_int(h) for h in chain(c)]
    before = srv.metrics().get("kipp_prefix_live_tokens_total")
    out = {}

    def stream():
        out["res"] = srv.stream("/v1/completions", {"model": srv.model, "prompt": c, "max_tokens": 300,
                                                    "ignore_eos": True, "stream": True})

    th = threading.Thread(target=stream)
    th.start()
    sub.wait_for(lambda e: stored(e) and e["block_hashes"][:1] == want[:1])
    js = srv.complete(d, max_tokens=1)
    running = th.is_alive()
    th.join(timeout=60 * TIMEOUT_SCALE)
    assert out["res"].status == 200 and out["res"].done
    assert running, "the first request ended before the second was admitted"
    assert js["usage"]["prompt_tokens_details"]["cached_tokens"] == 3 * BS, js["usage"]
    assert srv.wait_idle().get("kipp_prefix_live_tokens_total") - before == 3 * BS
    announced = [h for _, _, e in sub.events() if stored(e) for h in e["block_hashes"] if h in want]
    assert sorted(announced) == sorted(want), announced  # each of c's blocks once


def test_sequence_numbers_are_consecutive(kv):
    srv, sub, _ = kv
    some_batches(srv, sub, 3)
    seqs = [b[1] for b in sub.batches()]
    assert seqs and seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


def test_eviction_removes_blocks(kv):
    srv, sub, _ = kv
    a = [as_int(h) for h in chain(PROMPT_A)]
    srv.complete(PROMPT_A, max_tokens=2)  # the cache's one entry: PROMPT_A's blocks
    srv.complete(PROMPT_B, max_tokens=2)  # its entry evicts PROMPT_A's (one entry at most)
    b = [as_int(h) for h in chain(PROMPT_B)]
    sub.wait_for(lambda e: stored(e) and e["block_hashes"][:2] == b)
    removed: set[int] = set()
    deadline = time.monotonic() + 10 * TIMEOUT_SCALE
    while not set(a) <= removed and time.monotonic() < deadline:
        removed = {h for _, _, e in sub.events() if e["type"] == "BlockRemoved" for h in e["block_hashes"]}
        time.sleep(0.02)
    assert set(a) <= removed, (a, removed)
    ev = next(e for _, _, e in sub.events() if e["type"] == "BlockRemoved")
    assert ev["medium"] == "GPU" and ev["group_idx"] == 0


def test_replay_of_a_missed_range(kv):
    srv, sub, replay = kv
    some_batches(srv, sub, 3)
    got = sub.batches()
    start = got[1][1]  # as if batches from the second on were missed
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)  # a REQ socket's frames: an empty delimiter, then the request
    dealer.connect(replay)
    try:
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        replayed = []
        while True:
            assert dealer.poll(int(5000 * TIMEOUT_SCALE)), f"replay stalled after {len(replayed)}"
            empty, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if seq == (-1).to_bytes(8, "big", signed=True):
                assert payload == b""  # vLLM's end marker
                break
            replayed.append((int.from_bytes(seq, "big"), payload))
        # a malformed request (four frames) is ignored, as vLLM does; the socket still serves
        dealer.send_multipart([b"", b"x", b"y"])
        dealer.send_multipart([b"", (10 ** 9).to_bytes(8, "big")])
        assert dealer.poll(int(5000 * TIMEOUT_SCALE))
        assert dealer.recv_multipart()[1] == (-1).to_bytes(8, "big", signed=True)
    finally:
        dealer.close(linger=0)
        ctx.term()
    live = [(s, p) for _, s, p, _ in sub.batches() if s >= start]
    assert replayed[:len(live)] == live, ([s for s, _ in replayed], [s for s, _ in live])


def test_bytes_hashes_and_seed():
    d = tempfile.mkdtemp(prefix="kipp-kv-events-")
    ev = f"ipc://{d}/events"
    srv = Srv(start_server("kv-events-bytes", "--kv-events", ev, "--kv-events-hash", "bytes",
                           "--kv-events-hash-seed", "1234", threads="1"))
    sub = Subscriber(ev, b"")  # the default topic is empty, as vLLM's
    try:
        time.sleep(0.3 * TIMEOUT_SCALE)
        srv.complete(PROMPT_B, max_tokens=1)
        e = sub.wait_for(stored)[2]
        assert e["block_hashes"] == chain(PROMPT_B, seed="1234"), e
        assert not sub.bad, sub.bad
    finally:
        sub.close()
        srv.proc.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_docs_recipe_gives_the_published_hashes(kv):
    """docs/server.md's Python recipe for the hashes, run as written, prints what was published."""
    import contextlib
    import io
    import re
    from conftest import ROOT
    doc = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = doc[doc.index("## KV-cache events"):]
    section = section[:section.index("\n## ", 10)]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"tokens": PROMPT_A})
    printed = [int(x) for x in out.getvalue().split()]
    srv, sub, _ = kv
    some_batches(srv, sub, 1)
    published = {h for _, _, e in sub.events() if stored(e) for h in e["block_hashes"]}
    assert printed == [as_int(h) for h in chain(PROMPT_A)] and set(printed) <= published, printed


@pytest.mark.parametrize("args, needle", [
    (["--kv-events", "tcp://*:notaport"], "tcp://*:notaport"),
    (["--kv-events", "nosuchproto://x"], "nosuchproto://x"),
    (["--kv-events-topic", "t"], "need --kv-events"),
])
def test_bad_endpoint_is_a_clear_startup_error(args, needle):
    p = subprocess.run([SERVER_BIN, "--model", MODEL, "--backend", "cpu", "--port", "0", *args],
                       capture_output=True, text=True, timeout=60 * TIMEOUT_SCALE)
    assert p.returncode != 0
    assert needle in p.stderr and "ready" not in p.stdout, p.stderr
