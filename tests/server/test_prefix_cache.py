"""Automatic prefix caching: a repeated or shared prompt prefix is served from cached KV
blocks (usage.prompt_tokens_details.cached_tokens, kipp_prefix_cache_* metrics) and gives
the same output as a full prefill (compared with a --no-prefix-cache server); LRU
eviction by --prefix-cache-entries."""

from __future__ import annotations

import pytest

from conftest import MODEL_NAME, VARIED, start_server, Srv
from bench import server_common as sc

SHARED = sc.synthetic_ids(320, offset=7000)          # 20 blocks of 16 (or 10 of 32, 5 of 64)
SYSTEM = ("You are the ship's librarian aboard the Nautilus. " +
          " ".join(f"Rule {i}: catalogue volume {i * 7} under shelf {chr(65 + i % 26)} and log it." for i in range(24)))


def cached(js) -> int:
    return js["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_repeated_prompt_hits_cache(server):
    prompt = SHARED + sc.synthetic_ids(8, offset=1)
    m0 = server.metrics()
    a = server.complete(prompt, max_tokens=16, temperature=0, ignore_eos=True, **VARIED)
    b = server.complete(prompt, max_tokens=16, temperature=0, ignore_eos=True, **VARIED)
    P = b["usage"]["prompt_tokens"]
    assert P == 328
    assert cached(b) > 0, "second identical request: no cached tokens"
    assert 256 <= cached(b) <= P, cached(b)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    m1 = server.metrics()
    assert m1.get("kipp_prefix_cache_hits_total") > m0.get("kipp_prefix_cache_hits_total")
    assert m1.get("kipp_prefix_cache_lookups_total") >= m0.get("kipp_prefix_cache_lookups_total") + 2
    assert m1.get("kipp_prefix_cache_hit_tokens_total") >= m0.get("kipp_prefix_cache_hit_tokens_total") + cached(b)
    assert 0 < m1.get("kipp_prefix_cache_hit_rate") <= 1
    assert m1.get("kipp_kv_blocks_cached") > 0


def test_shared_prefix_distinct_suffixes(server, nocache_server):
    server.complete(SHARED + sc.synthetic_ids(5, offset=900), max_tokens=4, temperature=0)   # warm
    for k in range(3):
        prompt = SHARED + sc.synthetic_ids(6 + k, offset=3000 + 50 * k)
        js = server.complete(prompt, max_tokens=16, temperature=0, ignore_eos=True, **VARIED)
        assert cached(js) >= 256, f"suffix {k}: cached_tokens {cached(js)}"
        assert cached(js) <= len(SHARED), "cached more than the shared part"
        ref = nocache_server.complete(prompt, max_tokens=16, temperature=0, ignore_eos=True, **VARIED)
        assert cached(ref) == 0
        assert js["choices"][0]["text"] == ref["choices"][0]["text"], "cache hit changed the output"


def test_chat_shared_system_prompt(server, nocache_server):
    qs = ["Where is volume 42?", "Which shelf holds volume 7?", "Is volume 161 logged?"]
    first = server.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
                        max_tokens=2, temperature=0)
    assert first["usage"]["prompt_tokens"] > 300
    for q in qs:
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
        js = server.chat(msgs, max_tokens=12, temperature=0, **VARIED)
        assert cached(js) > 0, f"{q}: shared system prompt not reused"
        assert cached(js) >= first["usage"]["prompt_tokens"] - 64
        ref = nocache_server.chat(msgs, max_tokens=12, temperature=0, **VARIED)
        assert js["choices"][0]["message"] == ref["choices"][0]["message"]


def test_streaming_reports_cached_tokens(server):
    prompt = SHARED + sc.synthetic_ids(3, offset=4242)
    server.complete(prompt, max_tokens=2, temperature=0)
    r = server.stream("/v1/completions", {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 4,
                                          "temperature": 0, "stream": True,
                                          "stream_options": {"include_usage": True}})
    assert r.done
    u = r.usage()
    assert u is not None and u["prompt_tokens_details"]["cached_tokens"] >= 256


def test_no_prefix_cache_flag(nocache_server):
    prompt = SHARED + sc.synthetic_ids(4, offset=31)
    for _ in range(2):
        js = nocache_server.complete(prompt, max_tokens=2, temperature=0)
        assert cached(js) == 0
    m = nocache_server.metrics()
    assert m.get("kipp_prefix_cache_hits_total") == 0
    assert m.get("kipp_kv_blocks_cached") == 0
    nocache_server.wait_idle()


def test_cache_blocks_released_when_idle(server):
    m = server.wait_idle()
    assert m.get("kipp_kv_blocks_used") == m.get("kipp_kv_blocks_cached")
    assert m.get("kipp_kv_blocks_used") <= m.get("kipp_kv_blocks_total")


@pytest.fixture(scope="module")
def lru_server():
    return Srv(start_server("lru", "--prefix-cache-entries", "1", threads="1"))


def test_lru_entries(lru_server):
    """--prefix-cache-entries 1: A, then B (disjoint) evicts A; A again misses, then hits."""
    A = sc.synthetic_ids(96, offset=10)
    B = sc.synthetic_ids(96, offset=20000)
    assert A[0] != B[0]
    s = lru_server
    s.complete(A, max_tokens=2, temperature=0)
    assert cached(s.complete(A, max_tokens=2, temperature=0)) > 0
    s.complete(B, max_tokens=2, temperature=0)
    assert cached(s.complete(A, max_tokens=2, temperature=0)) == 0, "A should have been evicted by B"
    assert cached(s.complete(A, max_tokens=2, temperature=0)) > 0
