"""workloads.py — the cluster workloads tests/cluster/test_cluster.py checks and
bench/cluster_bench.py records. Each returns plain numbers; neither judges here.

- affinity: T tenants, one multi-turn session each (header X-Session-Id), each with its own
  long system prompt; turn k sends the system prompt, the earlier turns (with the answers)
  and a new question. Turns go round by round (turn 1 of every tenant, then turn 2, ...) on
  a few client threads, each round in a fresh random order, so a replica that sees every
  tenant must hold all their prefixes.
- failover: long streams, one replica SIGKILLed while they run; what its streams saw, how long
  HAProxy took to mark it DOWN, and whether requests sent after that fail.
- rolling restart: steady load while every replica is drained, stopped and restarted.
- scale-out: which replica each session lands on before and after one more joins.
- overload: a burst at replicas with a tiny --queue; the client honours Retry-After.
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import harness as H

WORDS = ("harbour ledger winter copper signal orchard lantern canal meadow falcon granite "
         "velvet quarry saddle beacon thistle cobalt ember willow marble hollow summit ferry "
         "pepper cedar anchor violet tundra basalt comet raven prairie walnut glacier tide "
         "archive courier timber lagoon citadel pilgrim furnace saffron oasis jasper mirror "
         "compass harvest lattice nomad pebble rampart sextant turret wharf zephyr").split()


def tenant_prompts(n: int, words: int, seed: int = 35) -> list[str]:
    """n distinct system prompts of about `words` words each (their own vocabulary order)."""
    out = []
    for t in range(n):
        rng = random.Random(seed * 1000 + t)
        body = " ".join(rng.choice(WORDS) for _ in range(words))
        out.append(f"Tenant {t} instructions: {body}.")
    return out


def question(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(6)) + "?"


def complete(router, body: dict, session: str | None = None, timeout: float = 60.0):
    """(status, headers, parsed JSON or None, error kind or None) for one completion."""
    h = {"X-Session-Id": session} if session else {}
    try:
        st, hd, raw = H.http_request(router.host, router.port, "POST", "/v1/completions",
                                     {"model": H.MODEL_NAME, **body}, h, timeout)
    except (OSError, Exception) as e:  # noqa: BLE001 — a failed request is a result here
        return 0, {}, None, f"transport:{type(e).__name__}"
    try:
        js = json.loads(raw)
    except ValueError:
        js = None
    kind = None if st == 200 else f"http_{st}"
    return st, hd, js, kind


def affinity(router, tenants: list[str], turns: int, clients: int = 3, max_tokens: int = 4,
             seed: int = 7) -> dict:
    """Runs the tenant sessions through router; errors by kind and per-request latency."""
    rng = random.Random(seed)
    history = [p for p in tenants]
    errors: dict = {}
    lat: list[float] = []
    lock = threading.Lock()

    def one(t: int, q: str):
        prompt = history[t] + f"\nUser: {q}\nAssistant:"
        t0 = time.perf_counter()
        st, _, js, kind = complete(router, {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                            "ignore_eos": True}, session=f"tenant-{t}")
        dt = time.perf_counter() - t0
        with lock:
            lat.append(dt)
            if kind:
                errors[kind] = errors.get(kind, 0) + 1
                history[t] = prompt + " (no answer)"
            else:
                history[t] = prompt + js["choices"][0]["text"]

    with ThreadPoolExecutor(clients) as pool:
        for _ in range(turns):
            # each round in a new order: a fixed order would let round robin pin tenant t to
            # replica t mod N whenever N divides the tenant count
            order = list(range(len(tenants)))
            rng.shuffle(order)
            qs = [(t, question(rng)) for t in order]
            list(pool.map(lambda a: one(*a), qs))
    lat.sort()
    return {"requests": len(lat), "errors": errors,
            "latency_s": {"p50": round(lat[len(lat) // 2], 4), "p90": round(lat[int(len(lat) * 0.9)], 4),
                          "max": round(lat[-1], 4)} if lat else None}


def run_policy(fleet: H.Fleet, make_router, tenants, turns, clients=3, max_tokens=4) -> dict:
    """Fresh replicas (empty caches), a router, the affinity workload, the fleet's figures."""
    for rt in list(fleet.routers):
        rt.stop()
        fleet.routers.remove(rt)
    fleet.restart_all()
    router = make_router(fleet)
    t0 = time.monotonic()
    res = affinity(router, tenants, turns, clients, max_tokens)
    res["wall_s"] = round(time.monotonic() - t0, 3)
    res.update(H.cache_figures(fleet.fleet_metrics()))
    router.stop()
    fleet.routers.remove(router)
    return res


# ---- failover -----------------------------------------------------------------------------

def _start_streams(router, streams: int, max_tokens: int):
    results = [H.Stream() for _ in range(streams)]
    body = {"model": H.MODEL_NAME, "prompt": "Failover probe: tell a long story", "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}
    threads = [threading.Thread(target=H.stream_completion, args=(router.host, router.port, body),
                                kwargs={"st": st}, daemon=True) for st in results]
    for th in threads:
        th.start()
    for st in results:
        st.first_event.wait(30)
    return results, threads


def _summary(sts) -> list:
    return [{"outcome": s.outcome, "detail": s.detail, "events": len(s.events)} for s in sts]


def failover(fleet: H.Fleet, hap: H.HAProxy, victim: H.Replica, streams: int = 6, max_tokens: int = 480,
             after: int = 20) -> dict:
    """streams long streams through hap (round robin spreads them); SIGKILL victim once every
    stream has its first event; then `after` new requests once HAProxy marks it DOWN."""
    results, threads = _start_streams(hap, streams, max_tokens)
    held = int(victim.metrics().get("kipp_running_sequences", 0))
    t_kill = time.monotonic()
    victim.kill()
    hap.wait_status(victim.name, "DOWN", 20)
    t_eject = time.monotonic() - t_kill
    for th in threads:
        th.join(60)
    on_victim = [st for st in results if st.served_by == victim.name]
    others = [st for st in results if st.served_by != victim.name]
    after_errors: dict = {}
    for i in range(after):
        st, hd, js, kind = complete(hap, {"prompt": f"after failover {i}", "max_tokens": 4})
        if kind:
            after_errors[kind] = after_errors.get(kind, 0) + 1
    return {"router": hap.name, "streams": streams, "victim": victim.name, "victim_running_at_kill": held,
            "victim_streams": _summary(on_victim), "other_streams": _summary(others),
            "eject_s": round(t_eject, 3), "eject_how": "HAProxy status DOWN (runtime API show stat)",
            "after_requests": after, "after_errors": after_errors}


def failover_router(fleet: H.Fleet, router, victim: H.Replica, streams: int = 6, max_tokens: int = 480,
                    after: int = 20, window_s: float = 8.0) -> dict:
    """The same behind a router that names no server (vllm-router): the victim's streams are
    counted from its running-sequences gauge at the kill; time to eject is the time of the
    last failed probe request (one at a time, for window_s after the kill)."""
    results, threads = _start_streams(router, streams, max_tokens)
    held = int(victim.metrics().get("kipp_running_sequences", 0))
    t_kill = time.monotonic()
    victim.kill()
    last_fail, probe_errors = 0.0, {}
    i = 0
    while time.monotonic() - t_kill < window_s:
        i += 1
        st, hd, js, kind = complete(router, {"prompt": f"probe {i}", "max_tokens": 2}, timeout=10)
        if kind:
            last_fail = time.monotonic() - t_kill
            probe_errors[kind] = probe_errors.get(kind, 0) + 1
    for th in threads:
        th.join(60)
    failed = [st for st in results if st.outcome != "done"]
    after_errors: dict = {}
    for j in range(after):
        st, hd, js, kind = complete(router, {"prompt": f"after failover {j}", "max_tokens": 4})
        if kind:
            after_errors[kind] = after_errors.get(kind, 0) + 1
    return {"router": router.name, "streams": streams, "victim": victim.name, "victim_running_at_kill": held,
            "victim_streams": _summary(failed), "other_streams": _summary([s for s in results if s.outcome == "done"]),
            "eject_s": round(last_fail, 3) if probe_errors else None,
            "eject_how": "time of the last failed probe request after the kill (None: no probe failed: "
                         "the router retried them on a live worker)",
            "probe_requests": i, "probe_errors": probe_errors,
            "after_requests": after, "after_errors": after_errors}


# ---- steady load --------------------------------------------------------------------------

class SteadyLoad:
    """clients threads sending short completions back to back until stop()."""

    def __init__(self, router, clients: int = 2, max_tokens: int = 8):
        self.router, self.max_tokens = router, max_tokens
        self.ok = 0
        self.errors: dict = {}
        self.samples: list = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in range(clients)]

    def start(self) -> "SteadyLoad":
        for th in self._threads:
            th.start()
        return self

    def _run(self, c: int):
        i = 0
        while not self._stop.is_set():
            i += 1
            st, hd, js, kind = complete(self.router, {"prompt": f"steady load {c}-{i}: the weather",
                                                      "max_tokens": self.max_tokens})
            with self._lock:
                if kind:
                    detail = (js or {}).get("error", {}).get("message", "") if isinstance(js, dict) else ""
                    self.errors[kind] = self.errors.get(kind, 0) + 1
                    self.samples.append(f"{kind} {detail}"[:200])
                else:
                    self.ok += 1

    def stop(self) -> dict:
        self._stop.set()
        for th in self._threads:
            th.join(60)
        return {"ok": self.ok, "failed": sum(self.errors.values()), "errors": self.errors,
                "samples": self.samples[:5]}


def rolling_restart(fleet: H.Fleet, hap: H.HAProxy, use_drain_delay: bool, clients: int = 2) -> dict:
    """Every replica in turn: taken out (runtime API `state drain`, or SIGTERM with
    --drain-delay letting /health fail first), restarted, put back; steady load throughout."""
    load = SteadyLoad(hap, clients).start()
    time.sleep(0.3)
    steps = []
    for r in list(fleet.running):
        t0 = time.monotonic()
        if use_drain_delay:
            r.stop()                    # /health 503 at once, requests accepted for the delay
        else:
            hap.runtime(f"set server be/{r.name} state drain")
            deadline = time.monotonic() + 30
            while int(hap.stat()[r.name]["scur"] or 0) > 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            r.stop()
        code = r.proc.returncode
        r.start()
        if not use_drain_delay:
            hap.runtime(f"set server be/{r.name} state ready")
        hap.wait_status(r.name, "UP", 20)
        steps.append({"replica": r.name, "exit": code, "seconds": round(time.monotonic() - t0, 3)})
        time.sleep(0.2)
    res = load.stop()
    res["steps"] = steps
    res["method"] = "--drain-delay + health checks" if use_drain_delay else "runtime API state drain"
    return res


# ---- scale-out ----------------------------------------------------------------------------

def placement(router, sessions: int) -> dict:
    """{session: replica name} from HAProxy's X-Served-By on GET /v1/models."""
    out = {}
    for s in range(sessions):
        st, hd, _ = H.http_request(router.host, router.port, "GET", "/v1/models",
                                   headers={"X-Session-Id": f"session-{s}"})
        out[s] = hd.get("x-served-by") if st == 200 else None
    return out


def scale_out(fleet: H.Fleet, hap: H.HAProxy, sessions: int = 90) -> dict:
    before = placement(hap, sessions)
    new = fleet.add_replica()
    hap.runtime(f"set server be/{new.name} state ready")
    hap.wait_status(new.name, "UP", 20)
    after = placement(hap, sessions)
    moved = [s for s in before if before[s] != after[s]]
    return {"sessions": sessions, "replicas_before": len(fleet.running) - 1, "new": new.name,
            "moved": len(moved), "moved_fraction": round(len(moved) / sessions, 3),
            "moved_to_new": sum(1 for s in moved if after[s] == new.name),
            "unplaced": sum(1 for s in before if before[s] is None or after[s] is None),
            "expected_fraction": round(1 / len(fleet.running), 3)}


# ---- overload -----------------------------------------------------------------------------

def overload(fleet: H.Fleet, router, clients: int = 12, max_tokens: int = 120, max_attempts: int = 6) -> dict:
    """clients at once; each retries a 503 after its Retry-After, up to max_attempts.
    Compares the client's attempts with the requests the replicas answered (no amplification)."""
    before = sum(_completions(m) for m in fleet.fleet_metrics().values())
    log: list = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def one(c):
        barrier.wait()
        attempts = []
        for _ in range(max_attempts):
            t = time.monotonic()
            st, hd, js, kind = complete(router, {"prompt": f"overload {c}", "max_tokens": max_tokens,
                                                 "ignore_eos": True})
            ra = hd.get("retry-after")
            attempts.append({"t": t, "status": st, "retry_after": ra})
            if st != 503:
                break
            time.sleep(float(ra) if ra and ra.replace(".", "", 1).isdigit() else 1.0)
        with lock:
            log.append(attempts)

    ths = [threading.Thread(target=one, args=(c,)) for c in range(clients)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(120)
    served = sum(_completions(m) for m in fleet.fleet_metrics().values()) - before
    flat = [a for att in log for a in att]
    gaps_ok = all(att[i + 1]["t"] - att[i]["t"] >= float(att[i]["retry_after"] or 1) - 0.05
                  for att in log for i in range(len(att) - 1) if att[i]["status"] == 503)
    return {"clients": clients, "attempts": len(flat), "served_by_replicas": int(served),
            "status_503": sum(1 for a in flat if a["status"] == 503),
            "status_503_without_retry_after": sum(1 for a in flat if a["status"] == 503 and not a["retry_after"]),
            "succeeded": sum(1 for att in log if att and att[-1]["status"] == 200),
            "gave_up": sum(1 for att in log if att and att[-1]["status"] != 200),
            "other_status": sorted({a["status"] for a in flat} - {200, 503}),
            "retry_waits_honoured": gaps_ok,
            "max_attempts_one_client": max((len(a) for a in log), default=0)}


def _completions(m: dict) -> float:
    return sum(v for k, v in m.items() if k.startswith("kipp_requests_total{") and 'endpoint="completions"' in k)
