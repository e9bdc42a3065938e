#!/usr/bin/env python3
"""cluster_bench.py — kipp-server replicas behind real routers (issue 35's Figures): one
fleet of replicas of the tiny checkpoint, each in its own network namespace on a private
bridge (loopback addresses where namespaces are refused), behind HAProxy (Debian) and
vllm-router (PyPI); the harness and workloads are tests/cluster's (harness.py,
workloads.py). Writes bench/results/cluster-<mode>.json. Must run as root for namespaces.

Per policy on the tenant workload (each tenant one multi-turn session with its own long
system prompt; prefixes together exceed one replica's --kv-tokens): fleet prefix-cache hit
rate, prefill tokens computed (prompt tokens less those the prefix cache served, from each
replica's /metrics), balance (max / mean requests per replica), errors by kind, latency
(labelled: the replicas, routers and clients share this machine's cores). Then: time to
eject a SIGKILLed replica and what its streams saw (HAProxy and vllm-router), failed requests
during a rolling restart (target 0), sessions moved when a replica joins (consistent hash),
a burst at replicas with a tiny --queue (503 + Retry-After; attempts the replicas saw per
client attempt). Target (issue 35): cache-aware or kv-aware routing computes <= 0.5x the
prefill tokens of round robin with balance <= 1.5. Not a test: it never fails on the figures.

  sudo .venv/bin/python -m bench.cluster_bench            # writes bench/results/cluster-netns.json
  .venv/bin/python -m bench.cluster_bench --quick --output -
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/cluster_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import sys
import time

from bench import benchlib

sys.path.insert(0, os.path.join(benchlib.ROOT, "tests", "cluster"))
import harness as H  # noqa: E402  (tests/cluster/harness.py)
import workloads as W  # noqa: E402  (tests/cluster/workloads.py)

TARGET_PREFILL_RATIO = 0.5   # issue 35: cache/kv-aware prefill tokens <= 0.5x round robin's
TARGET_BALANCE = 1.5         # ... with max/mean load <= 1.5
LATENCY_LABEL = ("2 shared cores: every replica (1 thread each), the routers and the clients on one "
                 "2-core machine; latency is contention, not a serving figure")


def policies(fleet_has_kv_events: bool) -> dict:
    out = {
        "haproxy-roundrobin": lambda fl: H.HAProxy(fl, "roundrobin"),
        "haproxy-leastconn": lambda fl: H.HAProxy(fl, "leastconn"),
        "haproxy-chash": lambda fl: H.HAProxy(fl, "chash"),
        "haproxy-chash-f300": lambda fl: H.HAProxy(fl, "chash", balance_factor=300),
        "haproxy-chash-unbounded": lambda fl: H.HAProxy(fl, "chash", balance_factor=None),
        "vllm-router-round_robin": lambda fl: H.VllmRouter(fl, "round_robin"),
        "vllm-router-cache_aware": lambda fl: H.VllmRouter(fl, "cache_aware"),
    }
    if fleet_has_kv_events:
        out["vllm-router-kv_aware"] = lambda fl: H.VllmRouter(fl, "kv_aware")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=benchlib.positive("--replicas", 2), default=4)
    ap.add_argument("--tenants", type=benchlib.positive("--tenants"), default=64)
    ap.add_argument("--turns", type=benchlib.positive("--turns"), default=8)
    ap.add_argument("--words", type=benchlib.positive("--words"), default=60,
                    help="words of each tenant's system prompt (60: about 95 tokens)")
    ap.add_argument("--kv-tokens", type=benchlib.positive("--kv-tokens", 528), default=6144,
                    help="each replica's KV pool (its prefix cache lives in it)")
    ap.add_argument("--clients", type=benchlib.positive("--clients"), default=3)
    ap.add_argument("--quick", action="store_true", help="3 replicas, 36 tenants, 6 turns: make test's form")
    ap.add_argument("--build-note", default=None,
                    help="what the kipp-server binary was built from, when not this tree ($BUILD picks it)")
    ap.add_argument("--output", default=None,
                    help="record path (default bench/results/cluster-<mode>.json; '-': stdout)")
    a = ap.parse_args(argv)
    if a.quick:
        a.replicas, a.tenants, a.turns, a.kv_tokens = 3, 36, 6, 3584
    for need in (H.SERVER_BIN, H.MODEL):
        if not os.path.exists(need):
            ap.error(f"{need} is missing (make server tiny-models)")

    feats = H.features()
    prov = benchlib.provenance(H.SERVER_BIN)
    rec = {
        "harness": "bench/cluster_bench.py",
        "argv": sys.argv[1:],
        "quick": a.quick,
        "provenance": prov,
        "cpu_class": benchlib.cpu_class(prov),
        "versions": H.versions(),
        "kipp_server_binary": H.SERVER_BIN,
        "kipp_server_build_note": a.build_note,
        "kipp_server_features": feats,
        "model": os.path.relpath(H.MODEL, benchlib.ROOT),
        "load_average": {"before": list(os.getloadavg())},
        "latency_label": LATENCY_LABEL,
        "targets": {"prefill_ratio_vs_round_robin": TARGET_PREFILL_RATIO, "balance": TARGET_BALANCE},
        "haproxy": {"check": "GET /health every 300 ms, fall 2, rise 1", "retries": "3, retry-on "
                    "conn-failure empty-response, option redispatch", "chash": "balance hdr(X-Session-Id), "
                    "hash-type consistent, hash-balance-factor 150 (chash-f300: 300; chash-unbounded: none)"},
        "vllm_router": {"args": "--health-check-interval-secs 1 --health-failure-threshold 1; defaults otherwise"},
        "workload": {"tenants": a.tenants, "turns": a.turns, "system_prompt_words": a.words,
                     "clients": a.clients, "max_tokens": 4, "endpoint": "/v1/completions",
                     "session_header": "X-Session-Id (one session per tenant)"},
        "notes": [],
    }
    server_args = ["-c", "512", "--kv-tokens", str(a.kv_tokens)]
    t_start = time.monotonic()

    # ---- affinity ----
    with H.Fleet(a.replicas, server_args, kv_events=feats["kv_events"]) as f:
        print(f.describe(), file=sys.stderr)
        rec["topology"] = {
            "mode": f.mode, "netns_refused": f.netns_refusal, "replicas": a.replicas,
            "replica_addresses": [r.url for r in f.replicas],
            "bridge": f"{f.subnet}.1/24" if f.mode == "netns" else None,
            "replica_argv": f.replicas[0].argv()[4 if f.mode == "netns" else 0:],
            "routers": "HAProxy and vllm-router in the root namespace on 127.0.0.1, replicas reached "
                       "over the bridge; health checks on /health",
        }
        why = H.router_tokenize_missing(f.replicas[0])
        if why:
            rec["notes"].append(f"{why}: the cache_aware (and kv_aware) figures below are that fallback, "
                                "not cache-aware routing")
        if not feats["kv_events"]:
            rec["notes"].append("kv_aware not measured: this kipp-server has no --kv-events")
        tenants = W.tenant_prompts(a.tenants, a.words)
        aff = {}
        for name, make in policies(feats["kv_events"]).items():
            print(f"affinity: {name} ...", file=sys.stderr)
            r = W.run_policy(f, make, tenants, a.turns, clients=a.clients)
            aff[name] = r
            print(f"  prefill {r['prefill_tokens']} hit {r['hit_rate']} balance {r['balance']} "
                  f"errors {r['errors']} ({r['wall_s']} s)", file=sys.stderr)
        rr = aff["haproxy-roundrobin"]["prefill_tokens"]
        for name, r in aff.items():
            r["prefill_ratio_vs_round_robin"] = round(r["prefill_tokens"] / rr, 3) if rr else None
            r["latency_label"] = "2 shared cores"
            r["meets_target"] = bool(r["prefill_ratio_vs_round_robin"] is not None
                                     and r["prefill_ratio_vs_round_robin"] <= TARGET_PREFILL_RATIO
                                     and (r["balance"] or 99) <= TARGET_BALANCE)
        rec["affinity"] = aff
        aware = [n for n in aff if "cache_aware" in n or "kv_aware" in n]
        rec["target_met"] = {"cache_or_kv_aware": any(aff[n]["meets_target"] for n in aware),
                             "any_affinity_policy": sorted(n for n in aff if aff[n]["meets_target"])}

    # ---- failover ----
    rec["failover"] = {}
    with H.Fleet(a.replicas, ["-c", "512"]) as f:
        hap = H.HAProxy(f, "roundrobin")
        rec["failover"]["haproxy-roundrobin"] = W.failover(f, hap, f.replicas[0], streams=2 * a.replicas)
    with H.Fleet(a.replicas, ["-c", "512"]) as f:
        rt = H.VllmRouter(f, "round_robin")
        rec["failover"]["vllm-router-round_robin"] = W.failover_router(f, rt, f.replicas[0],
                                                                       streams=2 * a.replicas)
    for k, v in rec["failover"].items():
        print(f"failover {k}: eject {v['eject_s']} s, victim streams "
              f"{[s['outcome'] for s in v['victim_streams']]}, after {v['after_errors']}", file=sys.stderr)

    # ---- rolling restart ----
    rec["rolling_restart"] = {}
    with H.Fleet(a.replicas, ["-c", "512"]) as f:
        hap = H.HAProxy(f, "roundrobin")
        rec["rolling_restart"]["haproxy-runtime-api"] = W.rolling_restart(f, hap, use_drain_delay=False)
    if feats["drain_delay"]:
        with H.Fleet(a.replicas, ["-c", "512", "--drain-delay", "2"]) as f:
            hap = H.HAProxy(f, "roundrobin")
            rec["rolling_restart"]["haproxy-drain-delay"] = W.rolling_restart(f, hap, use_drain_delay=True)
    else:
        rec["notes"].append("rolling restart with --drain-delay not measured: this kipp-server has none")
    for k, v in rec["rolling_restart"].items():
        print(f"rolling restart {k}: {v['ok']} ok, {v['failed']} failed", file=sys.stderr)

    # ---- scale-out ----
    with H.Fleet(a.replicas, ["-c", "512"], spare=1) as f:
        hap = H.HAProxy(f, "chash")
        rec["scale_out"] = {"haproxy-chash": W.scale_out(f, hap, sessions=400)}
    print(f"scale-out: {rec['scale_out']}", file=sys.stderr)

    # ---- overload ----
    rec["overload"] = {}
    ov_args = ["-c", "512", "--parallel", "1", "--queue", "1", "--kv-tokens", "1024"]
    with H.Fleet(a.replicas, ov_args) as f:
        hap = H.HAProxy(f, "roundrobin")
        rec["overload"]["haproxy-roundrobin"] = W.overload(f, hap, clients=4 * a.replicas)
    with H.Fleet(a.replicas, ov_args) as f:
        rt = H.VllmRouter(f, "round_robin")
        rec["overload"]["vllm-router-round_robin"] = W.overload(f, rt, clients=4 * a.replicas)
    with H.Fleet(a.replicas, ov_args) as f:
        rt = H.VllmRouter(f, "round_robin", ["--disable-retries"])
        rec["overload"]["vllm-router-round_robin-disable-retries"] = W.overload(f, rt, clients=4 * a.replicas)
    for k, v in rec["overload"].items():
        print(f"overload {k}: {v}", file=sys.stderr)

    rec["wall_s"] = round(time.monotonic() - t_start, 1)
    rec["load_average"]["after"] = list(os.getloadavg())
    text = json.dumps(rec, indent=1)
    out = a.output or os.path.join(benchlib.ROOT, "bench", "results", f"cluster-{rec['topology']['mode']}.json")
    if out == "-":
        print(text)
    else:
        benchlib.write_record_file(out, text)
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
