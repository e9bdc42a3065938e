"""Cluster tests (issue 35): kipp-server replicas, each in its own network namespace on a
private bridge (tests/cluster/harness.py; loopback addresses where namespaces are refused),
behind a real HAProxy and a real vllm-router.

Quick form (make test, stage `cluster`): 3 replicas of the tiny checkpoint on one thread
each, short sessions. TIER=full: 5 replicas, more tenants and turns, vllm-router failover.
What the numbers are on a bigger run: bench/cluster_bench.py, bench/results/cluster-*.json.
"""

from __future__ import annotations

import os

import pytest

import harness as H
import workloads as W

FULL = os.environ.get("TIER") == "full"
N = 5 if FULL else 3
TENANTS = 40 if FULL else 14
TURNS = 10 if FULL else 6
WORDS = 110                 # ~160 tokens of system prompt per tenant
# one replica's pool holds about 1.5x its share of the sessions (consistent hashing is lumpy),
# far from all of them: round robin's replicas each see every tenant
KV_TOKENS = 4096 if FULL else 2048
AFFINITY_ARGS = ["-c", "512", "--kv-tokens", str(KV_TOKENS)]


def _render_missing(replica: H.Replica) -> str | None:
    """vllm-router 0.1.17's cache_aware and kv_aware ask each worker to tokenize the request
    (POST /v1/completions/render -> {"token_ids": [...]}); without it the router logs
    'Prefix input preparation unavailable' and builds no prefix tree."""
    st, _, _ = replica.request("POST", "/v1/completions/render", {"model": H.MODEL_NAME, "prompt": "probe"})
    if st == 200:
        return None
    return (f"kipp-server answers {st} to POST /v1/completions/render, which vllm-router's "
            "cache_aware/kv_aware policies use to tokenize a request: they route without a prefix tree")


_AFFINITY: dict = {}         # test_affinity's figures, judged again by test_affinity_cache_aware


def test_affinity(fleet_factory):
    """Many tenants' multi-turn sessions whose prefixes together exceed one replica's cache:
    bounded-load consistent hashing on the session header computes clearly fewer prefill
    tokens than round robin, with balance kept; least-connections and vllm-router's
    cache_aware are measured on the same workload (cache_aware judged below)."""
    f = fleet_factory(N, args=AFFINITY_ARGS)
    tenants = W.tenant_prompts(TENANTS, WORDS)
    policies = {
        "haproxy-roundrobin": lambda fl: H.HAProxy(fl, "roundrobin"),
        "haproxy-leastconn": lambda fl: H.HAProxy(fl, "leastconn"),
        "haproxy-chash": lambda fl: H.HAProxy(fl, "chash"),
        "vllm-router-cache_aware": lambda fl: H.VllmRouter(fl, "cache_aware"),
    }
    res = {name: W.run_policy(f, make, tenants, TURNS) for name, make in policies.items()}
    _AFFINITY.update(res)
    _AFFINITY["render_missing"] = _render_missing(f.replicas[0])
    for name, r in res.items():
        print(f"{name}: prefill {r['prefill_tokens']} of {r['prompt_tokens']} prompt tokens, "
              f"hit rate {r['hit_rate']}, balance {r['balance']}, errors {r['errors']}")
    for name, r in res.items():
        assert r["errors"] == {}, f"{name}: requests failed: {r['errors']}"
        assert r["requests"] == TENANTS * TURNS
    rr, ch = res["haproxy-roundrobin"], res["haproxy-chash"]
    # the workload is what the test says: all sessions' prompts exceed one replica's pool
    mean_prompt = max(r["prompt_tokens"] for r in res.values()) / TENANTS / TURNS
    assert TENANTS * mean_prompt > KV_TOKENS, "the tenants' prompts fit in one replica's cache"
    assert ch["prefill_tokens"] <= 0.6 * rr["prefill_tokens"], (
        f"consistent hash computed {ch['prefill_tokens']} prefill tokens, round robin {rr['prefill_tokens']}")
    assert ch["balance"] <= 1.6, f"consistent hash balance {ch['balance']} ({ch['requests_per_replica']})"


def test_affinity_cache_aware():
    """vllm-router's cache_aware on test_affinity's workload: clearly fewer prefill tokens
    than round robin."""
    if "haproxy-roundrobin" not in _AFFINITY:
        pytest.skip("test_affinity did not run")
    if _AFFINITY["render_missing"]:
        pytest.skip(_AFFINITY["render_missing"])
    rr, ca = _AFFINITY["haproxy-roundrobin"], _AFFINITY["vllm-router-cache_aware"]
    assert ca["prefill_tokens"] <= 0.6 * rr["prefill_tokens"], (
        f"cache_aware computed {ca['prefill_tokens']} prefill tokens, round robin {rr['prefill_tokens']}")
    assert ca["balance"] <= 1.6, ca


def test_affinity_kv_aware(fleet_factory):
    """vllm-router's kv_aware policy fed by each replica's KV-event stream."""
    why = H.missing("kv_events")
    if why:
        pytest.skip(why)
    f = fleet_factory(N, args=AFFINITY_ARGS, kv_events=True)
    why = _render_missing(f.replicas[0])
    if why:
        pytest.skip(why)
    tenants = W.tenant_prompts(TENANTS, WORDS)
    rr = W.run_policy(f, lambda fl: H.HAProxy(fl, "roundrobin"), tenants, TURNS)
    kv = W.run_policy(f, lambda fl: H.VllmRouter(fl, "kv_aware"), tenants, TURNS)
    print(f"kv_aware: prefill {kv['prefill_tokens']} (round robin {rr['prefill_tokens']}), "
          f"balance {kv['balance']}")
    assert kv["errors"] == {}
    assert kv["prefill_tokens"] <= 0.6 * rr["prefill_tokens"]


def test_failover_sigkill(fleet_factory):
    """A replica SIGKILLed mid-stream: its streams end visibly failed (cut or an error event,
    never [DONE] with a finish_reason), the others finish, HAProxy ejects it within a few
    health checks, and no request sent after that fails."""
    f = fleet_factory(N, args=["-c", "512"])
    hap = H.HAProxy(f, "roundrobin")
    res = W.failover(f, hap, f.replicas[0], streams=2 * N)
    print(res)
    assert res["victim_running_at_kill"] >= 1, f"no stream was held by the killed replica: {res}"
    assert len(res["victim_streams"]) == res["victim_running_at_kill"], res
    for s in res["victim_streams"]:
        assert s["outcome"] in ("cut", "error"), f"a stream of the killed replica ended normally: {s}"
    for s in res["other_streams"]:
        assert s["outcome"] == "done", f"a stream of a live replica failed: {s}"
    assert res["eject_s"] < 5, f"HAProxy took {res['eject_s']} s to mark the dead replica DOWN"
    assert res["after_errors"] == {}, f"requests failed after the ejection: {res['after_errors']}"


@pytest.mark.skipif(not FULL, reason="TIER=full")
def test_failover_sigkill_vllm_router(fleet_factory):
    """The same kill behind vllm-router (round_robin): the victim's streams fail visibly; once
    its health checker has removed the worker, no request fails."""
    f = fleet_factory(N, args=["-c", "512"])
    rt = H.VllmRouter(f, "round_robin")
    res = W.failover_router(f, rt, f.replicas[0], streams=2 * N)
    print(res)
    assert res["victim_running_at_kill"] >= 1, res
    assert len(res["victim_streams"]) == res["victim_running_at_kill"], res
    for s in res["victim_streams"]:
        assert s["outcome"] in ("cut", "error"), s
    assert res["after_errors"] == {}, res


def test_rolling_restart_runtime_api(fleet_factory):
    """Every replica drained through HAProxy's runtime API, SIGTERMed, restarted and put back
    while two clients send requests back to back: not one request fails."""
    f = fleet_factory(N, args=["-c", "512"])
    hap = H.HAProxy(f, "roundrobin")
    res = W.rolling_restart(f, hap, use_drain_delay=False)
    print(res)
    assert res["ok"] > 0
    assert res["failed"] == 0, f"{res['failed']} requests failed during the rolling restart: {res}"
    assert all(s["exit"] == 0 for s in res["steps"]), res["steps"]


def test_rolling_restart_drain_delay(fleet_factory):
    """The same with no runtime API: SIGTERM alone, --drain-delay keeps the replica serving
    while HAProxy's health checks see /health fail and take it out."""
    why = H.missing("drain_delay")
    if why:
        pytest.skip(why)
    f = fleet_factory(N, args=["-c", "512", "--drain-delay", "1.5"])
    hap = H.HAProxy(f, "roundrobin")
    res = W.rolling_restart(f, hap, use_drain_delay=True)
    print(res)
    assert res["failed"] == 0, res
    assert all(s["exit"] == 0 for s in res["steps"]), res["steps"]


def test_scale_out(fleet_factory):
    """A replica added under bounded-load consistent hashing: about 1/(N+1) of the sessions
    move, and (but for the odd one bounded load diverts) every one goes to the new replica."""
    f = fleet_factory(N, args=["-c", "512"], spare=1)
    hap = H.HAProxy(f, "chash")
    res = W.scale_out(f, hap, sessions=300 if FULL else 120)
    print(res)
    assert res["unplaced"] == 0
    # bounded load may send a session elsewhere when its replica holds more than 1.5x the mean
    # of the open connections (a previous request's not yet closed): a few, not a reshuffle
    assert res["moved"] - res["moved_to_new"] <= max(2, res["sessions"] // 50), (
        f"sessions moved between old replicas: {res}")
    exp = res["expected_fraction"]
    assert 0.4 * exp <= res["moved_fraction"] <= 1.8 * exp, res


def test_overload_retry_after(fleet_factory):
    """Replicas with --parallel 1 --queue 1 under a burst: 503 with Retry-After; a client that
    waits Retry-After before its next attempt gets through; the router adds no attempts of
    its own (the replicas answered exactly the client's attempts: no retry storm)."""
    f = fleet_factory(N, args=["-c", "512", "--parallel", "1", "--queue", "1", "--kv-tokens", "1024"])
    hap = H.HAProxy(f, "roundrobin")
    res = W.overload(f, hap, clients=4 * N)
    print(res)
    assert res["status_503"] >= 1, f"the burst never overloaded the replicas: {res}"
    assert res["status_503_without_retry_after"] == 0, res
    assert res["other_status"] == [], res
    assert res["retry_waits_honoured"], res
    assert res["gave_up"] == 0, res
    assert res["served_by_replicas"] == res["attempts"], (
        f"the replicas answered {res['served_by_replicas']} requests for {res['attempts']} client attempts")
    assert res["attempts"] <= 3 * res["clients"], res


def test_livez_over_bridge(fleet_factory):
    """/livez (the engine thread lives) beside /health on every replica, across the bridge."""
    why = H.missing("livez")
    if why:
        pytest.skip(why)
    f = fleet_factory(2, args=["-c", "512"])
    for r in f.replicas:
        assert r.request("GET", "/livez")[0] == 200
        assert r.request("GET", "/health")[0] == 200
