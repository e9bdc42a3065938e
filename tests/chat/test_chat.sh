#!/usr/bin/env bash
# test_chat.sh — `make test-chat`: build/kipp-chat end to end over piped stdin on the tiny
# untied checkpoint (random weights, so the replies are gibberish but deterministic and
# depend on the whole prompt). The reference for every reply is build/kipp run on the same
# conversation from scratch (--chat / --messages, no KV reuse), so the multi-turn KV prefix
# reuse must be exact. Also: commands, thinking on/off, context overflow, the start-up line
# (default backend cpu, cpu-ref by name, --kv-type, --isa), bad flags and input, EOF and
# Ctrl-C; the multi-line rules, /save and /load; line editing and the history file through
# a pseudo-terminal (test_chat_tty.py). Ends with "N passed, N failed"; exits non-zero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
C=$BUILD/kipp-chat
K=$BUILD/kipp
M=models/tiny-untied/kipp-tiny-untied-bf16.gguf
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

ok()  { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

[ -f "$M" ] || make -s "$M" >/dev/null
[ -x "$C" ] || { echo "FAIL: $C is not built (make chat)"; echo "0 passed, 1 failed"; exit 1; }
if [ ! -x "$K" ]; then # the reference CLI; the sanitizer tree needs SAN=1
    san=; case "$BUILD" in *san*) san=SAN=1 ;; esac
    make -s BUILD="$BUILD" $san "$K" >/dev/null
fi

# Every reply of both programs: greedy unless a test says otherwise, 2 threads, cpu backend.
COMMON=(-t 2 --backend cpu -n 24 --greedy)

# chat NAME INPUT_FILE ARGS... -> $tmp/NAME.out, .err, .rc (never aborts the script)
chat() {
    local name=$1 input=$2 rc=0; shift 2
    "$C" -m "$M" "${COMMON[@]}" "$@" <"$input" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
    echo "$rc" >"$tmp/$name.rc"
    if [ "$rc" -ge 128 ]; then bad "$name: killed by a signal (exit $rc)"; cat "$tmp/$name.err"; fi
}
# ref NAME ARGS... : build/kipp from scratch -> $tmp/NAME.out (reply + "\n")
ref() {
    local name=$1; shift
    "$K" -m "$M" "${COMMON[@]}" --no-stats "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
        { bad "reference $name failed"; cat "$tmp/$name.err"; }
}
# lines FILE LINE... : writes one input line per argument
lines() { local f=$1; shift; printf '%s\n' "$@" >"$f"; }
# req OUT [--no-think] u TEXT a REPLYFILE u TEXT ... : an OpenAI request body for kipp
# --messages. An assistant turn is a kipp output file: its final "\n" is dropped and the
# text split at <think>...</think> as docs/chat.md says (reasoning.h's rules, re-done here).
req() {
    local out=$1; shift
    "$PY" - "$@" >"$out" <<'PY'
import json, sys
args, think, msgs = sys.argv[1:], True, []
if args and args[0] == "--no-think":
    think, args = False, args[1:]
for kind, val in zip(args[0::2], args[1::2]):
    if kind == "u":
        msgs.append({"role": "user", "content": val})
        continue
    text = open(val, "rb").read().decode("utf-8")
    assert text.endswith("\n"), val
    text = text[:-1]
    s, reasoning, content = text.lstrip("\n"), "", None
    if s.startswith("<think>"):
        s = s[len("<think>"):]
        i = s.find("</think>")
        reasoning, content = (s, "") if i < 0 else (s[:i], s[i + len("</think>"):])
    else:
        content = s
    msgs.append({"role": "assistant", "content": content.strip("\n"),
                 "reasoning_content": reasoning.strip("\n")})
print(json.dumps({"messages": msgs, "chat_template_kwargs": {"enable_thinking": think}}))
PY
}
# same NAME FILE_A FILE_B : byte-identical files
same() {
    if cmp -s "$2" "$3"; then ok; else
        bad "$1: $2 and $3 differ"; echo "  < $(head -c 300 "$2" | od -c | head -5)"
        echo "  > $(head -c 300 "$3" | od -c | head -5)"
    fi
}
# rc_is NAME WANT
rc_is() { local got; got=$(cat "$tmp/$1.rc"); [ "$got" = "$2" ] && ok || bad "$1: exit $got, want $2"; }
# err_has NAME PATTERN
err_has() { grep -qE -- "$2" "$tmp/$1.err" && ok || { bad "$1: stderr lacks /$2/:"; cat "$tmp/$1.err"; }; }
# reused NAME TURN -> the "reused N" count the stats line of that turn printed
reused() { sed -nE "s/^kipp-chat: turn $2: prompt [0-9]+ tokens \(reused ([0-9]+),.*/\1/p" "$tmp/$1.err"; }

# check_reuse NAME: from the session's --print-tokens and stats lines, each turn must reuse
# exactly the longest common prefix of what the KV cache held (last turn's prompt ids and
# the sampled ids it decoded) and the new prompt's ids, leaving at least one to decode.
check_reuse() {
    "$PY" - "$tmp/$1.err" <<'PY' && ok || bad "$1: KV reuse is not the longest common prefix"
import re, sys
turns, kv, cur = [], [], None
for line in open(sys.argv[1], "rb").read().decode().splitlines():
    if m := re.match(r"kipp-chat: turn \d+ prompt ids:(.*)", line):
        cur = {"P": [int(x) for x in m[1].split()], "G": []}
        turns.append(cur)
    elif m := re.match(r"kipp-chat: turn \d+ sampled ids:(.*)", line):
        cur["G"] = [int(x) for x in m[1].split()]
    elif m := re.match(r"kipp-chat: turn \d+: prompt (\d+) tokens \(reused (\d+),.* context (\d+) of", line):
        cur["n"], cur["reused"], cur["ctx"] = map(int, m.groups())
    elif line == "kipp-chat: conversation reset":
        turns.append("reset")
assert len(turns) >= 2, turns
for t in turns:
    if t == "reset":
        kv = []
        continue
    P, G = t["P"], t["G"]
    want = 0
    while want < len(kv) and want + 1 < len(P) and kv[want] == P[want]:
        want += 1
    assert t["n"] == len(P) and t["reused"] == want, (t["reused"], want, kv, P)
    n_dec = t["ctx"] - len(P)
    assert n_dec in (len(G) - 1, len(G)), (n_dec, len(G))
    kv = P + G[:n_dec]
print("reuse:", [t["reused"] for t in turns if t != "reset"])
PY
}

U1="Hello there"; U2="What is 2+2?"; U3="Tell me a story about a fox."

# --- two turns: two replies, each the reply build/kipp gives for the whole conversation ---
lines "$tmp/in2" "$U1" "$U2"
chat two "$tmp/in2" --print-tokens
rc_is two 0
[ "$(grep -c '' "$tmp/two.out")" -ge 2 ] && ok || bad "two turns: fewer than two lines on stdout"
ref r1 --chat -p "$U1"
req "$tmp/two.json" u "$U1" a "$tmp/r1.out" u "$U2"
ref r2 --messages "$tmp/two.json"
check_reuse two
p2=$("$K" -m "$M" --messages "$tmp/two.json" --tokenize)
grep -qx "kipp-chat: turn 2 prompt ids: $p2" "$tmp/two.err" && ok || bad "turn 2 prompt ids differ from kipp --messages --tokenize"
cat "$tmp/r1.out" "$tmp/r2.out" >"$tmp/two.want"
same "2-turn session vs kipp from scratch (KV prefix reuse exact)" "$tmp/two.out" "$tmp/two.want"
# turn 2 reuses at least turn 1's whole prompt: the rendering of turn 2 starts with it
n1=$("$K" -m "$M" --chat -p "$U1" --tokenize | wc -w)
r=$(reused two 2)
[ -n "$r" ] && [ "$r" -ge "$n1" ] && ok || bad "turn 2 reused '${r}' tokens, want >= $n1 (turn 1's prompt)"
[ "$(reused two 1)" = 0 ] && ok || bad "turn 1 reused '$(reused two 1)' tokens, want 0"
grep -qE "turn 2: .* tok/s" "$tmp/two.err" && ok || bad "no per-turn speed line on stderr"
! grep -q "kipp-chat" "$tmp/two.out" && ok || bad "banner or stats leaked to stdout"

# --- --hide-reasoning prints each reply's content (reasoning split off, '\n' stripped) ---
chat hide "$tmp/in2" --hide-reasoning
req "$tmp/two_done.json" u "$U1" a "$tmp/r1.out" u "$U2" a "$tmp/r2.out"
"$PY" -c 'import json, sys
for m in json.load(open(sys.argv[1]))["messages"][1::2]: sys.stdout.write(m["content"] + "\n")' \
    "$tmp/two_done.json" >"$tmp/hide.want"
same "--hide-reasoning prints the content" "$tmp/hide.out" "$tmp/hide.want"

# --- greedy is deterministic across runs ---
chat two_again "$tmp/in2"
same "greedy determinism" "$tmp/two.out" "$tmp/two_again.out"

# --- three turns with thinking off: the prefix shrinks (the template drops the earlier
#     turns' empty think block), the replies must still be exact ---
lines "$tmp/in3" "$U1" "$U2" "$U3"
chat three "$tmp/in3" --no-think --print-tokens
check_reuse three
ref n1 --chat --no-think -p "$U1"
req "$tmp/n2.json" --no-think u "$U1" a "$tmp/n1.out" u "$U2"
ref n2 --messages "$tmp/n2.json"
req "$tmp/n3.json" --no-think u "$U1" a "$tmp/n1.out" u "$U2" a "$tmp/n2.out" u "$U3"
ref n3 --messages "$tmp/n3.json"
cat "$tmp/n1.out" "$tmp/n2.out" "$tmp/n3.out" >"$tmp/three.want"
same "3-turn --no-think session vs kipp from scratch" "$tmp/three.out" "$tmp/three.want"
r=$(reused three 3)
[ -n "$r" ] && [ "$r" -gt 0 ] && ok || bad "turn 3 reused '${r}' tokens, want > 0"

# --- sampling: the seed is --seed + turn index; penalties see the whole prompt ---
SAMP=(--temp 0.9 --top-k 50 --repeat-penalty 1.3)
chat samp "$tmp/in2" "${SAMP[@]}" --seed 5
chat samp_again "$tmp/in2" "${SAMP[@]}" --seed 5
same "sampling determinism (same seed)" "$tmp/samp.out" "$tmp/samp_again.out"
ref s1 --chat -p "$U1" "${SAMP[@]}" --seed 5
req "$tmp/s2.json" u "$U1" a "$tmp/s1.out" u "$U2"
ref s2 --messages "$tmp/s2.json" "${SAMP[@]}" --seed 6
cat "$tmp/s1.out" "$tmp/s2.out" >"$tmp/samp.want"
same "sampled 2-turn session vs kipp (seed+turn)" "$tmp/samp.out" "$tmp/samp.want"

# --- /reset: the next reply is a fresh session's first reply ---
lines "$tmp/in_reset" "$U1" "/reset" "$U2"
chat reset "$tmp/in_reset" --print-tokens
check_reuse reset
ref fresh2 --chat -p "$U2"
cat "$tmp/r1.out" "$tmp/fresh2.out" >"$tmp/reset.want"
same "/reset" "$tmp/reset.out" "$tmp/reset.want"
[ "$(reused reset 1 | tail -n 1)" = 0 ] && ok || bad "after /reset the turn reused tokens"
err_has reset "conversation reset"
lines "$tmp/in_sreset" "$U1" "/reset" "$U2"
chat sreset "$tmp/in_sreset" --system "You are Kipp."
ref sfresh1 --system "You are Kipp." -p "$U1"
ref sfresh2 --system "You are Kipp." -p "$U2"
cat "$tmp/sfresh1.out" "$tmp/sfresh2.out" >"$tmp/sreset.want"
same "/reset keeps --system" "$tmp/sreset.out" "$tmp/sreset.want"

# --- /think off and --no-think: the rendered prompt gets the empty think block ---
lines "$tmp/in_think" "$U1" "/think off" "$U1"
chat think "$tmp/in_think" --print-prompt
[ "$(grep -c '<think>' "$tmp/think.err")" = 1 ] && ok || bad "/think off: want one <think> in the prompts"
"$PY" - "$tmp/think.err" <<'PY' && ok || bad "/think off: turn 2 prompt does not end with the empty think block"
import sys
err = open(sys.argv[1], "rb").read().decode()
prompts = [p.split("\n--- end of prompt ---")[0] for p in err.split("--- prompt ---\n")[1:]]
assert len(prompts) == 2, prompts
assert prompts[0].endswith("<|im_start|>assistant\n"), prompts[0]
assert prompts[1].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), prompts[1]
PY
lines "$tmp/in_t1" "/think off" "$U1"
chat think1 "$tmp/in_t1"
ref nothink --chat --no-think -p "$U1"
same "/think off vs kipp --chat --no-think" "$tmp/think1.out" "$tmp/nothink.out"
! cmp -s "$tmp/think1.out" "$tmp/r1.out" && ok || bad "/think off reply equals the thinking reply"
lines "$tmp/in_t2" "$U1"
chat think2 "$tmp/in_t2" --no-think
same "--no-think vs /think off" "$tmp/think2.out" "$tmp/nothink.out"
lines "$tmp/in_t3" "/think off" "/think on" "$U1"
chat think3 "$tmp/in_t3"
same "/think on restores thinking" "$tmp/think3.out" "$tmp/r1.out"
lines "$tmp/in_t4" "/think maybe" "$U1"
chat think4 "$tmp/in_t4"
err_has think4 "/think expects 'on' or 'off'"

# --- -n limits the tokens of each reply ---
chat nlim "$tmp/in_t2" -n 3
ref nlim_ref --chat -p "$U1" -n 3
same "-n 3 vs kipp -n 3" "$tmp/nlim.out" "$tmp/nlim_ref.out"
err_has nlim "generated 3 tokens.*stop n_predict"
[ "$(wc -c <"$tmp/nlim.out")" -lt "$(wc -c <"$tmp/r1.out")" ] && ok || bad "-n 3 reply is not shorter"

# --- commands: /history, /help, unknown, /quit, //literal ---
lines "$tmp/in_cmd" "/help" "/bogus" "$U1" "/history" "/quit" "$U2"
chat cmd "$tmp/in_cmd"
rc_is cmd 0
err_has cmd "unknown command '/bogus'"
err_has cmd "commands: /reset"
grep -qx "\[user\] $U1" "$tmp/cmd.out" && ok || bad "/history lacks the user turn"
grep -q "^\[assistant\] " "$tmp/cmd.out" && ok || bad "/history lacks the assistant turn"
[ "$(grep -c 'turn [0-9]*:' "$tmp/cmd.err")" = 1 ] && ok || bad "/quit did not end the session"
head -n "$(grep -c '' "$tmp/r1.out")" "$tmp/cmd.out" | cmp -s - "$tmp/r1.out" && ok ||
    bad "commands changed the reply"
lines "$tmp/in_slash" "//etc is a folder"
chat slash "$tmp/in_slash"
ref slash_ref --chat -p "/etc is a folder"
same "// sends a literal /" "$tmp/slash.out" "$tmp/slash_ref.out"

# --- invalid UTF-8: the line is rejected, the session goes on ---
{ printf '%s\n' "$U1"; printf 'caf\xc3 \xff\xfe\n'; printf '%s\n' "$U2"; } >"$tmp/in_utf8"
chat utf8 "$tmp/in_utf8"
rc_is utf8 0
err_has utf8 "not valid UTF-8"
same "invalid UTF-8 line skipped" "$tmp/utf8.out" "$tmp/two.want"

# --- context full: the oldest exchange is dropped; a turn too big alone is refused ---
# -c 100 -n 24 keeps 24 tokens for the reply: turn 3's prompt no longer fits with turn 1.
chat ctx "$tmp/in3" --no-think -c 100 --print-tokens
check_reuse ctx
rc_is ctx 0
err_has ctx "context full: dropped the oldest 1 exchange \(2 messages\)"
req "$tmp/c3.json" --no-think u "$U2" a "$tmp/n2.out" u "$U3"
"$K" -m "$M" "${COMMON[@]}" --no-stats -c 100 --messages "$tmp/c3.json" >"$tmp/c3.out" 2>/dev/null
head -n 2 "$tmp/three.want" >"$tmp/ctx.want"; cat "$tmp/c3.out" >>"$tmp/ctx.want"
same "reply after dropping an exchange vs kipp on the kept turns" "$tmp/ctx.out" "$tmp/ctx.want"
# a reply that fills the context stops there; the next turn drops that exchange
chat full "$tmp/in2" -c 40 -n 1000
rc_is full 0
err_has full "reply stopped: the context \(40 tokens\) is full"
err_has full "context full: dropped the oldest 1 exchange"
"$K" -m "$M" "${COMMON[@]}" --no-stats -c 40 -n 1000 --chat -p "$U1" >"$tmp/full1.out" 2>/dev/null
"$K" -m "$M" "${COMMON[@]}" --no-stats -c 40 -n 1000 --chat -p "$U2" >"$tmp/full2.out" 2>/dev/null
cat "$tmp/full1.out" "$tmp/full2.out" >"$tmp/full.want"
same "replies cut by a full context" "$tmp/full.out" "$tmp/full.want"
long=$(printf 'word %.0s' $(seq 1 200))
lines "$tmp/in_long" "$U1" "$long" "$U2"
chat long "$tmp/in_long" -c 100
rc_is long 0
err_has long "this message does not fit: .* the context holds 100"
same "session goes on after a too-long message" "$tmp/long.out" "$tmp/two.want"

# --- EOF, empty input, Ctrl-C ---
: >"$tmp/in_empty"
chat empty "$tmp/in_empty"
rc_is empty 0
[ ! -s "$tmp/empty.out" ] && ok || bad "empty input printed something"
printf '%s' "$U1" >"$tmp/in_nonl" # last line without a newline is still a turn
chat nonl "$tmp/in_nonl"
same "last line without newline" "$tmp/nonl.out" "$tmp/r1.out"

mkfifo "$tmp/fifo"
# SIGINT at the prompt ends the session with 130
"$C" -m "$M" "${COMMON[@]}" <"$tmp/fifo" >"$tmp/int.out" 2>"$tmp/int.err" & pid=$!
exec 3>"$tmp/fifo"
printf '%s\n' "$U1" >&3
for _ in $(seq 1 500); do grep -q "turn 1:" "$tmp/int.err" && break; sleep 0.02; done
kill -INT "$pid"; rc=0; wait "$pid" || rc=$?; exec 3>&-
[ "$rc" = 130 ] && ok || bad "SIGINT at the prompt: exit $rc, want 130"
same "reply before SIGINT" "$tmp/int.out" "$tmp/r1.out"
# SIGINT during a long reply stops it; the partial reply stays in the history
"$C" -m "$M" -t 2 --backend cpu-ref -n 100000 <"$tmp/fifo" >"$tmp/int2.out" 2>"$tmp/int2.err" & pid=$!
exec 3>"$tmp/fifo"
printf '%s\n' "$U3" >&3
for _ in $(seq 1 500); do [ -s "$tmp/int2.out" ] && break; sleep 0.01; done
kill -INT "$pid"
printf '/history\n' >&3; exec 3>&-
rc=0; wait "$pid" || rc=$?
if grep -q "reply interrupted" "$tmp/int2.err"; then
    [ "$rc" = 0 ] && ok || bad "SIGINT during a reply: exit $rc, want 0 (EOF after)"
    grep -q "^\[assistant\] ." "$tmp/int2.out" && ok || bad "partial reply not in /history"
    grep -q "stop interrupted" "$tmp/int2.err" && ok || bad "no 'stop interrupted' in the stats"
else
    echo "note: the reply finished before SIGINT arrived (rc $rc); interrupt path not exercised"
fi

# --- backend, ISA level and KV type: the start-up line says what runs; replies match kipp's
#     with the same flags ---
lines "$tmp/in_u1" "$U1"
rc=0; "$C" -m "$M" -t 2 -n 4 --greedy <"$tmp/in_u1" >/dev/null 2>"$tmp/default.err" || rc=$?
[ "$rc" = 0 ] && grep -qE "^kipp-chat: $M, context 512 tokens, thinking on; backend cpu, ISA [a-z0-9]+, 2 threads, KV f16, KV pool 32 blocks of 16 tokens \(512 tokens, 393216 bytes = 0.38 MiB, 768 bytes/token\)(, weights repacked [0-9.]+ MiB)?; loaded in [0-9.]+ ms$" "$tmp/default.err" &&
    ok || { bad "start-up line of the default backend (exit $rc)"; cat "$tmp/default.err"; }
chat cref "$tmp/in_u1" --backend cpu-ref -c 128
rc_is cref 0
err_has cref "^kipp-chat: .*, context 128 tokens, thinking on; backend cpu-ref, ISA scalar, 1 thread, KV f32, KV pool 8 blocks of 16 tokens \(128 tokens, 196608 bytes"
ref cref_ref --chat -p "$U1" --backend cpu-ref -c 128
same "--backend cpu-ref reply vs kipp --backend cpu-ref" "$tmp/cref.out" "$tmp/cref_ref.out"
for t in f32 bf16; do
    chat kv_$t "$tmp/in_u1" --kv-type $t --isa scalar
    rc_is kv_$t 0
    err_has kv_$t "; backend cpu, ISA scalar, 2 threads, KV $t, KV pool"
    ref kv_${t}_ref --chat -p "$U1" --kv-type $t --isa scalar
    same "--kv-type $t reply vs kipp --kv-type $t" "$tmp/kv_$t.out" "$tmp/kv_${t}_ref.out"
done
chat cachetype "$tmp/in_u1" --cache-type-k bf16 --cache-type-v bf16
err_has cachetype "; backend cpu, .* KV bf16, KV pool"
chat badkv "$tmp/in_empty" --kv-type q5_0
rc_is badkv 2; err_has badkv "--kv-type: unknown KV type 'q5_0' \(choose f32, f16, bf16"
chat kvdiff "$tmp/in_u1" --cache-type-k q8_0 --cache-type-v q4_0
rc_is kvdiff 0; err_has kvdiff "; backend cpu, .* KV q8_0/q4_0, KV pool"
chat kvhalf "$tmp/in_empty" --cache-type-v bf16
rc_is kvhalf 2; err_has kvhalf "--cache-type-v bf16 is given without --cache-type-k"
rc=0; KIPP_CPU_ISA=avx9 "$C" -m "$M" </dev/null >/dev/null 2>"$tmp/envisa.err" || rc=$?
[ "$rc" = 1 ] && grep -q "the ISA level 'avx9' comes from the environment variable KIPP_CPU_ISA" "$tmp/envisa.err" && ok ||
    { bad "KIPP_CPU_ISA=avx9: exit $rc"; cat "$tmp/envisa.err"; }
rc=0; KIPP_CPU_ISA=avx9 "$C" -m "$M" "${COMMON[@]}" --isa scalar <"$tmp/in_u1" >/dev/null 2>"$tmp/envisa2.err" || rc=$?
[ "$rc" = 0 ] && grep -q "ISA scalar" "$tmp/envisa2.err" && ok || { bad "--isa scalar over KIPP_CPU_ISA=avx9: exit $rc"; cat "$tmp/envisa2.err"; }
chat badisa "$tmp/in_empty" --isa avx9
rc_is badisa 1; err_has badisa "unknown ISA level 'avx9'"

# --- flags and bad input ---
chat help "$tmp/in_empty" --help
grep -q -- "--hide-reasoning" "$tmp/help.out" && ok || bad "--help lacks --hide-reasoning"
for f in /reset /think /history /quit --print-prompt --no-stats --system --greedy --kv-type --isa \
    --cache-type-k "backend: cpu (default)"; do
    grep -q -- "$f" "$tmp/help.out" || bad "--help lacks $f"
done
"$C" --version | grep -q "^kipp-chat " && ok || bad "--version"
chat uflag "$tmp/in_empty" --bogus
rc_is uflag 2; err_has uflag "unknown option '--bogus'"
chat noval "$tmp/in_empty" --temp
rc_is noval 2; err_has noval "--temp needs a value"
chat badn "$tmp/in_empty" -n abc
rc_is badn 2; err_has badn "-n expects an integer"
chat badp "$tmp/in_empty" --top-p 2
rc_is badp 2; err_has badp "--top-p expects a number"
rc=0; "$C" </dev/null >/dev/null 2>"$tmp/nomodel.err" || rc=$?
[ "$rc" = 2 ] && grep -q -- "--model FILE is required" "$tmp/nomodel.err" && ok || bad "no --model: exit $rc"
rc=0; "$C" -m "$tmp/nope.gguf" </dev/null >/dev/null 2>"$tmp/missing.err" || rc=$?
[ "$rc" = 1 ] && grep -q "nope.gguf" "$tmp/missing.err" && ok || { bad "missing model: exit $rc"; cat "$tmp/missing.err"; }
rc=0; "$C" -m README.md </dev/null >/dev/null 2>"$tmp/notgguf.err" || rc=$?
[ "$rc" = 1 ] && grep -q "gguf" "$tmp/notgguf.err" && ok || bad "not a gguf: exit $rc"
chat badbackend "$tmp/in_empty" --backend warp
rc_is badbackend 1; err_has badbackend "unknown backend 'warp'"

# --- multi-line input (issue 17): a trailing '\' continues, a """ line opens/closes a block ---
printf '%s\n' 'Hello\' 'there' >"$tmp/in_ml"
chat ml "$tmp/in_ml" --print-prompt
ref ml_ref --chat -p "$(printf 'Hello\nthere')"
same "a line ending in \\ continues the message" "$tmp/ml.out" "$tmp/ml_ref.out"
[ "$(grep -c 'turn [0-9]*:' "$tmp/ml.err")" = 1 ] && ok || bad "continued lines made more than one turn"
printf '%s\n' '"""' '/etc' '' 'x\' '"""' >"$tmp/in_block"
chat block "$tmp/in_block"
ref block_ref --chat -p "$(printf '/etc\n\nx\\')"
same '""" block sent verbatim' "$tmp/block.out" "$tmp/block_ref.out"
printf '%s\n' '"""' 'open' >"$tmp/in_open"
chat open "$tmp/in_open"
rc_is open 0; err_has open 'input ended inside a """ block'
ref open_ref --chat -p open
same 'unclosed """ block is sent' "$tmp/open.out" "$tmp/open_ref.out"
"$C" --help >"$tmp/help17.out"
for f in "--history FILE" "--no-history" "/save FILE" "/load FILE" "ending in '\\'" '"""' \
    "kipp/chat_history" "Ctrl-R"; do
    grep -qF -- "$f" "$tmp/help17.out" && ok || bad "--help lacks $f"
done

# --- /save and /load (issue 17): a saved session continued after /load gives the reply an
#     uninterrupted session gives, and saving it again gives the same file ---
lines "$tmp/in_sv1" "$U1" "/save $tmp/sv1.json"
chat sv1 "$tmp/in_sv1"
err_has sv1 "saved 2 messages to $tmp/sv1.json"
lines "$tmp/in_sv2" "/load $tmp/sv1.json" "$U2" "/save $tmp/sv2.json"
chat sv2 "$tmp/in_sv2"
err_has sv2 "loaded 2 messages from"
same "reply after /load vs kipp on the whole conversation" "$tmp/sv2.out" "$tmp/r2.out"
lines "$tmp/in_sv3" "$U1" "$U2" "/save $tmp/sv3.json"
chat sv3 "$tmp/in_sv3"
same "/load + turn + /save vs one session's /save" "$tmp/sv2.json" "$tmp/sv3.json"
"$PY" - "$tmp/sv3.json" "$tmp/two_done.json" <<'PY' && ok || bad "/save's JSON is not the conversation"
import json, sys
got, want = (json.load(open(p))["messages"] for p in sys.argv[1:])
assert [(m["role"], m["content"], m.get("reasoning_content", "")) for m in got] == \
       [(m["role"], m["content"], m.get("reasoning_content", "")) for m in want], got
PY
lines "$tmp/in_svs" "$U1" "/save $tmp/svs.json" "/load $tmp/svs.json" "/save $tmp/svs2.json"
chat svs "$tmp/in_svs" --system "You are Kipp."
same "/save, /load, /save round-trips (system message included)" "$tmp/svs.json" "$tmp/svs2.json"
grep -q '"role": "system"' "$tmp/svs.json" && ok || bad "/save lacks the system message"
# bad files: each error names the problem; the conversation is unchanged (saved again)
printf '{"messages": [' >"$tmp/b_json.json"
printf '42' >"$tmp/b_shape.json"
printf '{"messages": [{"role": "tool", "content": "x"}]}' >"$tmp/b_role.json"
printf '[{"role": "user", "content": "caf\xc3"}]' >"$tmp/b_utf8.json"
printf '[{"role": "assistant", "content": "x"}]' >"$tmp/b_order.json"
printf '[{"role": "user", "content": null}]' >"$tmp/b_content.json"
printf '[{"role": "user", "content": "x", "tool_calls": []}]' >"$tmp/b_field.json"
printf '{"msgs": []}' >"$tmp/b_key.json"
printf '[{"role": "user", "content": "ok"}]' >"$tmp/arr.json"
lines "$tmp/in_bad" "$U1" "/load $tmp/b_json.json" "/load $tmp/b_shape.json" "/load $tmp/b_role.json" \
    "/load $tmp/b_utf8.json" "/load $tmp/b_order.json" "/load $tmp/b_content.json" \
    "/load $tmp/b_field.json" "/load $tmp/b_key.json" "/load $tmp/nope.json" "/load" \
    "/save $tmp" "/save $tmp/no/dir/x.json" "/save" "/save $tmp/bad.json" "/load $tmp/arr.json" \
    "/save $tmp/arr2.json"
chat badload "$tmp/in_bad"
rc_is badload 0
err_has badload "/load: $tmp/b_json.json: not valid JSON: .*; the conversation is unchanged"
err_has badload "b_shape.json: want \{\"messages\": \[...\]\} or an array of messages"
err_has badload "b_role.json: messages\[0\] has the unknown role 'tool'"
err_has badload "b_utf8.json: not valid UTF-8 \(bad byte 0xc3 at offset 33\)"
err_has badload "b_order.json: messages\[0\] is an assistant message where a user message must come"
err_has badload "b_content.json: messages\[0\].content must be a string"
err_has badload "b_field.json: messages\[0\] has the field 'tool_calls'"
err_has badload "b_key.json: the JSON object has no \"messages\" array"
err_has badload "/load: $tmp/nope.json: No such file or directory"
err_has badload "/load needs a file name"
err_has badload "/save: $tmp: is a directory; nothing was written"
err_has badload "/save: $tmp/no/dir/x.json: cannot write in directory"
err_has badload "/save needs a file name"
same "bad /load and /save keep the conversation" "$tmp/bad.json" "$tmp/sv1.json"
[ ! -e "$tmp/no" ] && ok || bad "a failed /save created something"
"$PY" -c 'import json, sys; assert json.load(open(sys.argv[1]))["messages"] == [{"role": "user", "content": "ok"}]' \
    "$tmp/arr2.json" && ok || bad "/load of a bare array"

# --- line editing through a pseudo-terminal (issue 17): tests/chat/test_chat_tty.py ---
if BUILD="$BUILD" timeout 300 "$PY" tests/chat/test_chat_tty.py >"$tmp/tty.log" 2>&1; then ok; else
    bad "line editing through a pty:"; cat "$tmp/tty.log"
fi
tail -n 1 "$tmp/tty.log"

# --- issue 11 regressions ---
# a 22,000-byte token in the reply is shown whole (was: "out of memory streaming the reply")
.venv/bin/python tests/cli/make_bad_models.py "$M" "$tmp" >/dev/null 2>&1 || bad "make_bad_models.py"
printf 'The capital of France is\n' >"$tmp/in_long"
rc=0; "$C" -m "$tmp/long-token.gguf" "${COMMON[@]}" -n 2 --no-think <"$tmp/in_long" >"$tmp/long.out" 2>"$tmp/long.err" || rc=$?
[ "$rc" = 0 ] && [ "$(wc -c <"$tmp/long.out")" -ge 22016 ] && grep -q '<|fim_middle|>xxxx' "$tmp/long.out" && ok ||
    { bad "22,000-byte token: exit $rc, $(wc -c <"$tmp/long.out") bytes"; head -c 300 "$tmp/long.err"; }
# a line that grows under NFC (40 x U+FB2C -> 200 tokens from 120 bytes; was: "do not fit the buffer")
for i in $(seq 40); do printf '\ufb2c'; done >"$tmp/in_nfc"; echo >>"$tmp/in_nfc"
chat nfc "$tmp/in_nfc"
rc_is nfc 0
grep -q "do not fit" "$tmp/nfc.err" && bad "NFC-growing line: $(cat "$tmp/nfc.err")" || ok
# a full disk on stdout: non-zero with a message (was: exit 0, text lost)
rc=0; "$C" -m "$M" "${COMMON[@]}" <"$tmp/in_long" >/dev/full 2>"$tmp/full.err" || rc=$?
[ "$rc" = 1 ] && grep -q "cannot write to stdout" "$tmp/full.err" && ok || { bad "kipp-chat >/dev/full: exit $rc"; cat "$tmp/full.err"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
