#!/usr/bin/env bash
# kv-aware.sh [WORKER_URL,EVENTS,REPLAY ...]: vllm-router (PyPI) in front of kipp-server
# replicas with its kv_aware policy: each replica publishes its KV-cache events (block
# stored, block removed, all cleared) on a ZMQ socket in vLLM's wire format, the router
# subscribes to every replica and indexes which replica holds which prompt blocks, and a
# request goes to the replica that already holds most of its prefix, the cost weighed
# against the load. Unlike cache_aware (cache-aware.sh), it follows what each replica's
# cache really holds: evictions and restarts included.
#
# Each worker is URL,EVENTS,REPLAY: its HTTP address, its event socket and its replay
# socket (the router asks the replay socket for events it missed, by sequence number).
# Default: three replicas on 127.0.0.1:8081-8083 with events on 5557/5567/5577 and replay
# on 5558/5568/5578, each started as (docs/deploy.md):
#   kipp-server -m MODEL.gguf --model-name NAME --port 8081 --max-connections-per-ip 0 \
#     --drain-delay 10 --kv-events tcp://127.0.0.1:5557 --kv-events-replay tcp://127.0.0.1:5558
# Environment: MODEL_NAME (required: the --model-name the replicas serve, given to the
# router as --kv-event-model, the one model all static event sources hold), VLLM_ROUTER
# (the binary, default vllm-router), ROUTER_HOST (127.0.0.1), ROUTER_PORT (30000).
# Extra vllm-router flags after `--`.
# Checked by tests/deploy/test_deploy.py: every flag against `vllm-router --help`.
set -euo pipefail

: "${MODEL_NAME:?set MODEL_NAME to the --model-name the kipp-server replicas serve}"
specs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do specs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#specs[@]} -gt 0 ] || specs=(
  http://127.0.0.1:8081,tcp://127.0.0.1:5557,tcp://127.0.0.1:5558
  http://127.0.0.1:8082,tcp://127.0.0.1:5567,tcp://127.0.0.1:5568
  http://127.0.0.1:8083,tcp://127.0.0.1:5577,tcp://127.0.0.1:5578
)

workers=() events=()
for spec in "${specs[@]}"; do
  IFS=, read -r url ev replay <<<"$spec"
  if [ -z "$url" ] || [ -z "$ev" ] || [ -z "$replay" ]; then
    echo "kv-aware.sh: '$spec' is not URL,EVENTS,REPLAY" >&2
    exit 2
  fi
  workers+=("$url")
  events+=(--kv-event-source "$url=$ev" --kv-event-replay-source "$url=$replay")
done

# --kv-event-block-size 16: Kipp's KV block is 16 tokens (the start-up line's "KV pool N
#   blocks of 16 tokens"); the router hashes prompts in blocks of this size, so it must
#   equal the block size of the events.
# Health and retries as in cache-aware.sh (why: there).
exec "${VLLM_ROUTER:-vllm-router}" \
  --host "${ROUTER_HOST:-127.0.0.1}" --port "${ROUTER_PORT:-30000}" \
  --worker-urls "${workers[@]}" \
  --policy kv_aware \
  "${events[@]}" \
  --kv-event-block-size 16 \
  --kv-event-model "$MODEL_NAME" \
  --health-check-endpoint /health \
  --health-check-interval-secs 2 --health-check-timeout-secs 2 \
  --health-failure-threshold 2 --health-success-threshold 2 \
  --worker-startup-timeout-secs 300 --worker-startup-check-interval 2 \
  --retry-max-retries 2 \
  --request-timeout-secs 1800 \
  "$@"
