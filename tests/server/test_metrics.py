"""GET /metrics: valid Prometheus text format (strict parser in bench/server_common.py),
every metric docs/server.md lists with its type, well-formed histograms, and counters
that move with the traffic."""

from __future__ import annotations

import math

from conftest import MODEL_NAME, curl
from bench import server_common as sc

# docs/server.md, "Metrics": family -> type
SPEC = {
    "kipp_requests_total": "counter",
    "kipp_requests_cancelled_total": "counter",
    "kipp_requests_rejected_total": "counter",
    "kipp_prompt_tokens_total": "counter",
    "kipp_generated_tokens_total": "counter",
    "kipp_prefix_cache_lookups_total": "counter",
    "kipp_prefix_cache_hits_total": "counter",
    "kipp_prefix_cache_hit_tokens_total": "counter",
    "kipp_prefix_cache_hit_rate": "gauge",
    "kipp_time_to_first_token_seconds": "histogram",
    "kipp_inter_token_latency_seconds": "histogram",
    "kipp_request_duration_seconds": "histogram",
    "kipp_queue_depth": "gauge",
    "kipp_running_sequences": "gauge",
    "kipp_kv_blocks_total": "gauge",
    "kipp_kv_blocks_used": "gauge",
    "kipp_kv_blocks_cached": "gauge",
    "kipp_engine_steps_total": "counter",
}


def scrape(server):
    r = curl(server.url + "/metrics")
    assert r.status == 200, r
    ctype = r.headers.get("content-type", "")
    assert ctype.startswith("text/plain"), ctype
    text = r.body.decode("utf-8")
    assert text.endswith("\n"), "exposition must end with a newline"
    return text, sc.parse_prometheus(text)


def test_metrics_format_and_families(server):
    server.chat([{"role": "user", "content": "warm the histograms"}], max_tokens=4, temperature=0)
    text, p = scrape(server)
    names = {n for n, _, _ in p["samples"]}
    for fam, typ in SPEC.items():
        assert p["types"].get(fam) == typ, f"{fam}: TYPE {p['types'].get(fam)!r}, spec says {typ}"
        assert fam in p["help"], f"{fam}: no HELP line"
        if typ == "histogram":
            for suf in ("_bucket", "_sum", "_count"):
                assert fam + suf in names, f"{fam}{suf} missing"
        else:
            assert fam in names, f"{fam}: no sample"
    # every sample belongs to a declared family; counters are non-negative and finite
    for n, labels, v in p["samples"]:
        fam = sc.family_of(n, p["types"])
        assert fam in p["types"], f"sample {n} has no TYPE"
        if p["types"][fam] == "counter":
            assert v >= 0 and math.isfinite(v), (n, labels, v)
    # requests_total carries endpoint and status labels
    rt = [lb for n, lb, _ in p["samples"] if n == "kipp_requests_total"]
    assert rt and all("endpoint" in lb and "status" in lb for lb in rt), rt


def test_histograms_well_formed(server):
    _, p = scrape(server)
    for fam, typ in SPEC.items():
        if typ != "histogram":
            continue
        series: dict = {}
        for n, lb, v in p["samples"]:
            if n == fam + "_bucket":
                key = tuple(sorted((k, x) for k, x in lb.items() if k != "le"))
                assert "le" in lb, (n, lb)
                series.setdefault(key, {"buckets": []})["buckets"].append((float(lb["le"].replace("+Inf", "inf")), v))
            elif n in (fam + "_sum", fam + "_count"):
                key = tuple(sorted(lb.items()))
                series.setdefault(key, {"buckets": []})[n[len(fam) + 1:]] = v
        assert series, f"{fam}: no series"
        for key, s in series.items():
            b = s["buckets"]
            les = [le for le, _ in b]
            assert les == sorted(les), f"{fam}{key}: buckets not in increasing le order"
            assert les[-1] == math.inf, f"{fam}{key}: no le=\"+Inf\" bucket"
            counts = [c for _, c in b]
            assert counts == sorted(counts), f"{fam}{key}: bucket counts not monotone: {counts}"
            assert "count" in s and "sum" in s, f"{fam}{key}: _sum/_count missing"
            assert counts[-1] == s["count"], f"{fam}{key}: +Inf bucket {counts[-1]} != _count {s['count']}"
            assert s["sum"] >= 0


def test_counters_follow_traffic(server):
    m0 = server.wait_idle()
    js = server.complete(sc.synthetic_ids(21, offset=5555), max_tokens=7, temperature=0, ignore_eos=True)
    st, _, _ = server.post("/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": -1})
    assert st == 400
    m1 = server.wait_idle()
    assert m1.get("kipp_prompt_tokens_total") - m0.get("kipp_prompt_tokens_total") >= 21
    assert m1.get("kipp_generated_tokens_total") - m0.get("kipp_generated_tokens_total") == \
        js["usage"]["completion_tokens"] == 7
    assert m1.get("kipp_requests_total", status="200") > m0.get("kipp_requests_total", status="200")
    assert m1.get("kipp_requests_total", status="400") > m0.get("kipp_requests_total", status="400")
    assert m1.get("kipp_engine_steps_total") > m0.get("kipp_engine_steps_total")
    assert m1.get("kipp_time_to_first_token_seconds_count") > m0.get("kipp_time_to_first_token_seconds_count")
    assert m1.get("kipp_request_duration_seconds_count") > m0.get("kipp_request_duration_seconds_count")
    assert m1.get("kipp_inter_token_latency_seconds_count") > m0.get("kipp_inter_token_latency_seconds_count")
    assert m1.get("kipp_prefix_cache_lookups_total") > m0.get("kipp_prefix_cache_lookups_total")
    assert m1.get("kipp_kv_blocks_total") > 0
    assert m1.get("kipp_running_sequences") == 0 and m1.get("kipp_queue_depth") == 0


def test_requests_total_by_endpoint(server):
    m0 = server.metrics()
    server.chat([{"role": "user", "content": "count me"}], max_tokens=1)
    server.complete("count me", max_tokens=1)
    m1 = server.metrics()

    def by_ep(m, word):
        return sum(v for n, lb, v in m.samples
                   if n == "kipp_requests_total" and word in lb.get("endpoint", "") and lb.get("status") == "200")
    assert by_ep(m1, "chat") == by_ep(m0, "chat") + 1
    assert by_ep(m1, "completions") >= by_ep(m0, "completions") + 2   # chat/completions matches too
