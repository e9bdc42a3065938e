#!/usr/bin/env bash
# cache-aware.sh [WORKER_URL...]: vllm-router (PyPI) in front of kipp-server replicas with
# its cache_aware policy: the router keeps a radix tree of the prompt text it has sent to
# each replica and sends a request to the replica with the longest match, unless the load
# is unbalanced (then to the least loaded one). It needs /health, the OpenAI routes and
# /tokenize: the router has each prompt tokenized by a replica and reads the answer's
# "count" (without it the router keeps no tree and routes as round robin would: measured in
# bench/results/cluster-netns.json). Default workers: three replicas on 127.0.0.1:8081-8083, each started
# as (docs/deploy.md):
#   kipp-server -m MODEL.gguf --port 8081 --max-connections-per-ip 0 --drain-delay 10
# Environment: VLLM_ROUTER (the binary, default vllm-router), ROUTER_HOST (127.0.0.1),
# ROUTER_PORT (30000). Extra vllm-router flags after `--`.
# Checked by tests/deploy/test_deploy.py: every flag against `vllm-router --help`.
set -euo pipefail

workers=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do workers+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#workers[@]} -gt 0 ] || workers=(http://127.0.0.1:8081 http://127.0.0.1:8082 http://127.0.0.1:8083)

# --cache-threshold 0.3: a match below 30 % of the prompt counts as none (then the
#   replica with the smallest tree is chosen).
# --balance-abs-threshold 8, --balance-rel-threshold 1.5: Kipp decodes --parallel (8)
#   sequences at once, so 8 more requests in flight on one replica than on another, and
#   1.5 x as many, is an imbalance worth a cache miss (the router's default, 64, suits
#   GPU servers with hundreds of slots).
# --health-check-interval-secs 2 with --health-failure-threshold 2: a draining replica
#   (/health 503 after SIGTERM) leaves the rotation within about 6 s (two checks two
#   seconds apart, each given 2 s), so kipp-server's --drain-delay is 10 s behind it.
# --retry-max-retries 2: two tries at most (the router's default is 5); fewer retries
#   bound the extra load the router adds when replicas answer 503 (overload). The trade:
#   with retries on, vllm-router 0.1.17 retried a dead replica's requests elsewhere (none
#   of 996 failed) but passed overload 503s on without their Retry-After; with
#   --disable-retries (append it after `--`) the 503 and its Retry-After reach the client
#   as they do through HAProxy, and a dead replica's requests fail until it is ejected.
exec "${VLLM_ROUTER:-vllm-router}" \
  --host "${ROUTER_HOST:-127.0.0.1}" --port "${ROUTER_PORT:-30000}" \
  --worker-urls "${workers[@]}" \
  --policy cache_aware \
  --cache-threshold 0.3 \
  --balance-abs-threshold 8 --balance-rel-threshold 1.5 \
  --health-check-endpoint /health \
  --health-check-interval-secs 2 --health-check-timeout-secs 2 \
  --health-failure-threshold 2 --health-success-threshold 2 \
  --worker-startup-timeout-secs 300 --worker-startup-check-interval 2 \
  --retry-max-retries 2 \
  --request-timeout-secs 1800 \
  "$@"
