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
# The tenant workload (workloads.affinity): each tenant's system prompt ~95 tokens, each turn
# ~22 more, so a session's prompt ends near 95 + 22 x TURNS tokens. A replica's pool holds
# about 1.3x its share of the sessions under consistent hashing (the hash is lumpy: one
# replica gets more than N-th of the tenants) and about a third of all of them: round robin,
# which sends every tenant everywhere, keeps a tenant's prefix only by luck.
TENANTS = 60 if FULL else 36
TURNS = 8 if FULL else 6
WORDS = 60
KV_TOKENS = 4608 if FULL else 3584
AFFINITY_ARGS = ["-c", "512", "--kv-tokens", str(KV_TOKENS)]
# HAProxy's hash-balance-factor for the asserted policy. At 150 (deploy/haproxy's) a replica
# may serve at most ~1.5x the mean of the requests in flight: with about one request in
# flight per replica, a session whose replica serves one already goes elsewhere, and the
# measured affinity falls (bench/results/cluster-*.json has both); 300 bounds load less.
CHASH_FACTOR = 300


_AFFINITY: dict = {}         # test_affinity's figures, judged again by test_affinity_cache_aware


def test_affinity(fleet_factory):
    """Many tenants' multi-turn sessions whose prefixes together exceed one replica's cache:
    bounded-load consistent hashing on the session header computes clearly fewer prefill
    tokens than round robin, with balance kept; least-connections, the bound at 150 and
    vllm-router's cache_aware are measured on the same workload (cache_aware judged below)."""
    f = fleet_factory(N, args=AFFINITY_ARGS)
    tenants = W.tenant_prompts(TENANTS, WORDS)
    policies = {
        "haproxy-roundrobin": lambda fl: H.HAProxy(fl, "roundrobin"),
        "haproxy-leastconn": lambda fl: H.HAProxy(fl, "leastconn"),
        "haproxy-chash": lambda fl: H.HAProxy(fl, "chash"),
        f"haproxy-chash-f{CHASH_FACTOR}": lambda fl: H.HAProxy(fl, "chash", balance_factor=CHASH_FACTOR),
        "vllm-router-cache_aware": lambda fl: H.VllmRouter(fl, "cache_aware"),
    }
    res = {name: W.run_policy(f, make, tenants, TURNS) for name, make in policies.items()}
    _AFFINITY.update(res)
    _AFFINITY["tokenize_missing"] = H.router_tokenize_missing(f.replicas[0])
    for name, r in res.items():
        print(f"{name}: prefill {r['prefill_tokens']} of {r['prompt_tokens']} prompt tokens, "
              f"hit rate {r['hit_rate']}, balance {r['balance']}, errors {r['errors']}")
    for name, r in res.items():
        assert r["errors"] == {}, f"{name}: requests failed: {r['errors']}"
        assert r["requests"] == TENANTS * TURNS
    rr, ch = res["haproxy-roundrobin"], res[f"haproxy-chash-f{CHASH_FACTOR}"]
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
    if _AFFINITY["tokenize_missing"]:
        pytest.skip(_AFFINITY["tokenize_missing"])
    rr, ca = _AFFINITY["haproxy-roundrobin"], _AFFINITY["vllm-router-cache_aware"]
    assert ca["prefill_tokens"] <= 0.6 * rr["prefill_tokens"], (
        f"cache_aware computed {ca['prefill_tokens']} prefill tokens, round robin {rr['prefill_tokens']}")
    # not everything on one replica; looser than the hash's bound: vllm-router's cache_aware
    # scores replicas with no match equal (the first one takes a new prefix) unless their load
    # differs, and at three clients it seldom does (the full tier measured 1.75 on 5 replicas)
    assert ca["balance"] <= 2.0, ca


def test_affinity_kv_aware(fleet_factory):
    """vllm-router's kv_aware policy fed by each replica's KV-event stream."""
    why = H.missing("kv_events")
    if why:
        pytest.skip(why)
    f = fleet_factory(N, args=AFFINITY_ARGS, kv_events=True)
    why = H.router_tokenize_missing(f.replicas[0])
    if why:
        pytest.skip(why)
    tenants = W.tenant_prompts(TENANTS, WORDS)
    rr = W.run_policy(f, lambda fl: H.HAProxy(fl, "roundrobin"), tenants, TURNS)
    kv = W.run_policy(f, lambda fl: H.VllmRouter(fl, "kv_aware"), tenants, TURNS)
    print(f"kv_aware: prefill {kv['prefill_tokens']} (round robin {rr['prefill_tokens']}), "
          f"balance {kv['balance']}")
    assert kv["errors"] == {}
    assert kv["balance"] <= 2.0, kv
    # the events reach the router after it chose (blocks are announced as they fill), so a
    # tenant's next turn may be scored on a stale index: looser than cache_aware's 0.6, far
    # below the ~1.0 of kv_aware with no events (measured)
    assert kv["prefill_tokens"] <= 0.75 * rr["prefill_tokens"], (
        f"kv_aware computed {kv['prefill_tokens']} prefill tokens, round robin {rr['prefill_tokens']}")


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
    f = fleet_factory(N, args=["-c", "512", "--drain-delay", "2"])
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
    # no retry storm: every attempt the replicas saw is one the client made and counted
    # (HAProxy retries only connection failures; `retry-on 503` would double them)
    assert res["served_by_replicas"] == res["attempts"], (
        f"the replicas answered {res['served_by_replicas']} requests for {res['attempts']} client attempts")


def test_livez_over_bridge(fleet_factory):
    """/livez (the engine thread lives) beside /health on every replica, across the bridge."""
    f = fleet_factory(2, args=["-c", "512"])
    st = f.replicas[0].request("GET", "/livez")[0]
    if st == 404:
        pytest.skip("this kipp-server answers 404 to GET /livez")
    for r in f.replicas:
        assert r.request("GET", "/livez")[0] == 200
        assert r.request("GET", "/health")[0] == 200
