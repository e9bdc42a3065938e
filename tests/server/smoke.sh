#!/usr/bin/env bash
# smoke.sh — the check tier's kipp-server smoke test (make check): a server on a free port,
# /health, one greedy chat completion whose JSON must be a well-formed OpenAI reply that
# agrees with the kipp CLI on the same conversation (prompt token count and text), then
# SIGTERM and a clean exit. SMOKE_BACKEND=NAME runs the server on that backend (default cpu;
# the vulkan gates run it on lavapipe) against the CLI's text on cpu. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PY=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
server_smoke() {
    local p=0 f=0 port= code i server_pid T=models/tiny-tied/kipp-tiny-tied-bf16.gguf
    ok() { p=$((p + 1)); echo "ok: $*"; }
    bad() { f=$((f + 1)); echo "FAIL: $*"; }
    command -v curl >/dev/null || { bad "curl is required"; echo "$p passed, $f failed"; return 1; }
    "$BUILD/kipp-server" --model "$T" --port 0 --threads 2 --backend "${SMOKE_BACKEND:-cpu}" \
        >"$tmp/server.out" 2>"$tmp/server.err" &
    server_pid=$!
    # the server dies with this script, whatever happens
    trap 'kill -KILL "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
    for i in $(seq 600); do # up to 60 s for "listening on http://HOST:PORT" on stdout
        port=$(sed -n 's#^kipp-server: listening on http://[^ ]*:\([0-9][0-9]*\)$#\1#p' "$tmp/server.out")
        [ -n "$port" ] && break
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        bad "kipp-server did not start listening"; tail -5 "$tmp/server.err"
        echo "$p passed, $f failed"; return 1
    fi
    local url=http://127.0.0.1:$port
    for i in $(seq 600); do # /health answers 503 while the model loads
        code=$(curl -s -o "$tmp/health.json" -w '%{http_code}' --max-time 10 "$url/health")
        [ "$code" = 200 ] && break
        sleep 0.1
    done
    if [ "$code" = 200 ] && "$PY" -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])) != {"status": "ok"})' \
        "$tmp/health.json"; then ok "/health 200 {\"status\": \"ok\"}"
    else bad "/health answered $code: $(cat "$tmp/health.json")"; fi

    local prompt="Name three rivers." n=8
    code=$(curl -s -o "$tmp/chat.json" -w '%{http_code}' --max-time 120 "$url/v1/chat/completions" \
        -H 'Content-Type: application/json' \
        -d "{\"model\": \"kipp-tiny-tied-bf16\", \"max_tokens\": $n, \"temperature\": 0,
             \"messages\": [{\"role\": \"user\", \"content\": \"$prompt\"}]}")
    "$BUILD/kipp" -m "$T" --chat --prompt "$prompt" --tokenize >"$tmp/ids.txt" 2>"$tmp/cli.err" &&
        "$BUILD/kipp" -m "$T" --chat --prompt "$prompt" -n "$n" --greedy --no-stats -t 2 --backend cpu \
            >"$tmp/cli.txt" 2>>"$tmp/cli.err" || bad "the kipp CLI reference failed: $(tail -3 "$tmp/cli.err")"
    if [ "$code" != 200 ]; then
        bad "chat completion answered $code: $(head -c 500 "$tmp/chat.json")"
    elif "$PY" - "$tmp/chat.json" "$tmp/ids.txt" "$tmp/cli.txt" "$n" <<'PY'; then ok "chat completion JSON"
import json, sys
reply, ids, cli, n = json.load(open(sys.argv[1])), open(sys.argv[2]).read().split(), \
    open(sys.argv[3], encoding="utf-8").read(), int(sys.argv[4])
problems = []
def want(cond, what):
    if not cond:
        problems.append(what)
want(reply.get("object") == "chat.completion", "object is not chat.completion")
want(reply.get("model") == "kipp-tiny-tied-bf16", "model is not kipp-tiny-tied-bf16")
want(isinstance(reply.get("id"), str) and reply["id"], "no id")
ch = reply.get("choices") or [{}]
want(len(ch) == 1 and ch[0].get("index") == 0, "not exactly one choice with index 0")
msg = ch[0].get("message") or {}
want(msg.get("role") == "assistant", "message.role is not assistant")
want(ch[0].get("finish_reason") == "length", f"finish_reason {ch[0].get('finish_reason')!r}, not length")
u = reply.get("usage") or {}
want(u.get("completion_tokens") == n, f"usage.completion_tokens {u.get('completion_tokens')} != max_tokens {n}")
want(u.get("prompt_tokens") == len(ids), f"usage.prompt_tokens {u.get('prompt_tokens')} != {len(ids)} "
     "ids from kipp --chat --tokenize")
want(u.get("total_tokens") == u.get("prompt_tokens", 0) + u.get("completion_tokens", 0), "total_tokens is not the sum")
want(msg.get("content") == cli.rstrip("\n"), f"content {msg.get('content')!r} != kipp --chat --greedy {cli!r}")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
    else bad "chat completion JSON: $(head -c 500 "$tmp/chat.json")"; fi

    kill -TERM "$server_pid"
    local rc=0
    wait "$server_pid" || rc=$?
    trap 'rm -rf "$tmp"' EXIT
    if [ "$rc" = 0 ]; then ok "SIGTERM: exit status 0"
    else bad "SIGTERM: exit status $rc"; tail -5 "$tmp/server.err"; fi
    echo "$p passed, $f failed"
    [ "$f" -eq 0 ]
}
server_smoke
