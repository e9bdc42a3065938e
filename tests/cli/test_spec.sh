#!/usr/bin/env bash
# test_spec.sh — speculative decoding through the binaries users run: kipp's greedy output
# with each drafter (the target itself, kipp-tiny-draft, an unrelated random model, prompt
# lookup) is byte-identical to its output without speculation, on cpu and cpu-ref; kipp-chat
# likewise over two turns; kipp-server with a draft model answers greedy requests exactly as
# a plain one and reports drafted/accepted tokens on /metrics; bad flags are clear errors.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp
M=models/kipp-tiny/kipp-tiny-bf16.gguf
D=models/kipp-tiny-draft/kipp-tiny-draft-bf16.gguf
R=models/random/qwen3-tiny-bf16.gguf
. tests/cli/expect.sh
for f in "$M" "$D" "$R"; do [ -f "$f" ] || make -s "$f" >/dev/null || bad "make $f"; done
CODE='Repeat this function, renaming total to acc:
def add_all(xs):
    total = 0
    for x in xs:
        total += x
    return total
'
for backend in cpu cpu-ref; do
    n=40; [ $backend = cpu-ref ] && n=16
    # cpu-ref (the slow oracle) on the second prompt in the full tier only (TIER,
    # tests/stages.txt): its scheduler path is gated on tiny-tied by --draft-spec
    second="What does the function json.dumps do?"
    [ $backend = cpu-ref ] && [ "${TIER:-full}" != full ] && second=
    for prompt in "$CODE" ${second:+"$second"}; do
        G=(-m "$M" --backend $backend --greedy -n $n --ignore-eos --no-stats -p "$prompt")
        "$K" "${G[@]}" >"$tmp/plain" 2>"$tmp/err" || { bad "$backend plain run"; cat "$tmp/err"; continue; }
        for spec in "-md $M --draft-fixed --draft-max 4" "-md $D --draft-p-min 0" \
                    "-md $D --draft-fixed --draft-max 3" "-md $R --draft-fixed --draft-max 3" \
                    "-md $D --draft-vocab 4096 --draft-fixed --draft-max 3" \
                    "--spec-ngram 3" "--spec-ngram 1 --draft-max 8 --draft-min 2"; do
            # shellcheck disable=SC2086 # spec: words
            if "$K" "${G[@]}" $spec >"$tmp/spec" 2>"$tmp/err"; then
                cmp -s "$tmp/plain" "$tmp/spec" && ok || { bad "$backend '$spec': output differs"; diff "$tmp/plain" "$tmp/spec" | head -5; }
            else
                bad "$backend '$spec': exit $?"; cat "$tmp/err"
            fi
        done
    done
done
# the stats line and --stats-json report the drafts; the target itself as draft keeps all
"$K" -m "$M" --greedy -n 24 --ignore-eos -p "$CODE" -md "$M" --draft-fixed --draft-max 4 \
    --stats-json "$tmp/s.json" >/dev/null 2>"$tmp/err" && ok || bad "stats run"
grep -q "speculative: .* drafted, .* accepted (100.0 %)" "$tmp/err" && ok || { bad "self-draft acceptance is not 100 %"; cat "$tmp/err"; }
.venv/bin/python -c "import json,sys; s=json.load(open(sys.argv[1]))['spec']; sys.exit(0 if s['drafter']=='model' and s['drafted']>0 and s['accepted']==s['drafted'] else 1)" "$tmp/s.json" \
    && ok || bad "--stats-json spec figures"
# sampling runs (exactness of the distribution: kipp_test --spec-stat)
"$K" -m "$M" -n 24 --temp 0.9 -s 7 -p "$CODE" -md "$D" >/dev/null 2>"$tmp/err" && ok || { bad "sampled run"; cat "$tmp/err"; }
# kipp-chat: two turns, same replies
printf 'What does json.dumps do?\nAnd json.loads?\n' >"$tmp/turns"
$BUILD/kipp-chat -m "$M" --greedy -n 32 --no-stats <"$tmp/turns" >"$tmp/c1" 2>/dev/null || bad "kipp-chat plain"
$BUILD/kipp-chat -m "$M" --greedy -n 32 --no-stats -md "$D" --draft-p-min 0 <"$tmp/turns" >"$tmp/c2" 2>"$tmp/err" || { bad "kipp-chat -md"; cat "$tmp/err"; }
$BUILD/kipp-chat -m "$M" --greedy -n 32 --no-stats --spec-ngram 2 <"$tmp/turns" >"$tmp/c3" 2>/dev/null || bad "kipp-chat --spec-ngram"
cmp -s "$tmp/c1" "$tmp/c2" && ok || bad "kipp-chat with a draft model differs"
cmp -s "$tmp/c1" "$tmp/c3" && ok || bad "kipp-chat with prompt lookup differs"
# kipp-server with a draft model: same greedy answers as a plain server; /metrics counts
serve() { # name, flags...: starts a server on a free port, sets PORT_<name>
    local name=$1; shift
    $BUILD/kipp-server -m "$M" --port 0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.log" &
    echo $! >"$tmp/$name.pid"
    for _ in $(seq 100); do grep -q ready "$tmp/$name.out" 2>/dev/null && break; sleep 0.1; done
    sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/$name.out"
}
P1=$(serve plain); P2=$(serve spec -md "$D" --draft-p-min 0 --draft-max 4)
body='{"model":"kipp-tiny-bf16","prompt":"def add(a, b):","max_tokens":32,"temperature":0,"ignore_eos":true}'
for i in 1 2 3; do
    a=$(curl -s "http://127.0.0.1:$P1/v1/completions" -H 'Content-Type: application/json' -d "$body" | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])")
    b=$(curl -s "http://127.0.0.1:$P2/v1/completions" -H 'Content-Type: application/json' -d "$body" | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "server request $i: speculative answer differs ('$a' vs '$b')"
done
# logit_bias reaches the draft's sampler too: still the plain server's greedy answer
biased='{"model":"kipp-tiny-bf16","prompt":"def add(a, b):","max_tokens":32,"temperature":0,"ignore_eos":true,"logit_bias":{"220":-4,"198":3,"262":2}}'
text() { curl -s "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' -d "$2" | .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])"; }
a=$(text "$P1" "$biased"); b=$(text "$P2" "$biased"); u=$(text "$P1" "$body")
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$u" ] && ok || bad "logit_bias with speculation: '$b' vs plain '$a' (unbiased '$u')"
curl -s "http://127.0.0.1:$P2/metrics" >"$tmp/metrics"
d=$(sed -n 's/^kipp_spec_drafted_tokens_total \(.*\)/\1/p' "$tmp/metrics")
[ -n "$d" ] && [ "${d%%.*}" -gt 0 ] 2>/dev/null && ok || bad "/metrics: kipp_spec_drafted_tokens_total is '$d'"
grep -q "^kipp_spec_acceptance_rate " "$tmp/metrics" && ok || bad "/metrics lacks kipp_spec_acceptance_rate"
c=$(sed -n 's/^kipp_spec_request_acceptance_count \(.*\)/\1/p' "$tmp/metrics")
[ "$c" = 4 ] && ok || bad "/metrics: per-request acceptance histogram counts '$c' requests, want 4"
# usage reports the request's drafts as OpenAI's predicted-output token counts
curl -s "http://127.0.0.1:$P2/v1/completions" -H 'Content-Type: application/json' -d "$body" >"$tmp/u.json"
.venv/bin/python -c "
import json, sys
d = json.load(open(sys.argv[1]))['usage']['completion_tokens_details']
sys.exit(0 if d['accepted_prediction_tokens'] + d['rejected_prediction_tokens'] > 0 else 1)" "$tmp/u.json" \
    && ok || { bad "usage lacks completion_tokens_details with the drafts"; cat "$tmp/u.json"; }
grep -q "speculative decoding: .*kipp-tiny-draft" "$tmp/spec.log" && ok || bad "server start-up line lacks the drafter"
kill "$(cat "$tmp/plain.pid")" "$(cat "$tmp/spec.pid")" 2>/dev/null; wait 2>/dev/null
# bad input
expect_fail "tuning without a drafter" "needs --draft-model FILE or --spec-ngram" "$K" -m "$M" -p x --draft-max 4
expect_fail "two drafters" "give one" "$K" -m "$M" -p x -md "$D" --spec-ngram 2
expect_fail "draft-min above draft-max" "draft-min 5 is above --draft-max 2" "$K" -m "$M" -p x --spec-ngram 2 --draft-max 2 --draft-min 5
expect_fail "draft-max out of range" "draft-max" "$K" -m "$M" -p x --spec-ngram 2 --draft-max 99
expect_fail "missing draft file" "draft-model: .*no-such.gguf" "$K" -m "$M" -p x -md "$tmp/no-such.gguf"
expect_fail "n-gram out of range" "spec-ngram" "$K" -m "$M" -p x --spec-ngram 9
expect_fail "draft-vocab without a draft model" "draft-vocab limits a draft model.s head; it needs --draft-model" "$K" -m "$M" -p x --spec-ngram 2 --draft-vocab 100
expect_fail "draft-vocab above the vocabulary" "vocabulary limit 200000 is above its vocabulary size 151936" "$K" -m "$M" -p x -md "$D" --draft-vocab 200000
expect_fail "draft-vocab zero" "draft-vocab" "$K" -m "$M" -p x -md "$D" --draft-vocab 0
expect_fail "server: two drafters" "give one" $BUILD/kipp-server -m "$M" -md "$D" --spec-ngram 2
expect_fail "chat: tuning without a drafter" "needs --draft-model" $BUILD/kipp-chat -m "$M" --draft-p-min 0.5
# a draft with another tokenizer: one token's bytes changed in a copy of tiny-tied
.venv/bin/python - "$tmp/other-vocab.gguf" <<'PY'
import sys
from gguf import GGUFReader
src = "models/tiny-tied/kipp-tiny-tied-bf16.gguf"
r = GGUFReader(src)
f = r.fields["tokenizer.ggml.tokens"]
part = f.parts[f.data[151660]]
off = part.__array_interface__["data"][0] - r.data.__array_interface__["data"][0]
data = bytearray(open(src, "rb").read())
assert bytes(data[off:off + len(part)]) == bytes(part)
data[off + 3] ^= 0x01  # an added token (no merge uses it), one letter changed
open(sys.argv[1], "wb").write(data)
PY
expect_fail "draft with another vocabulary" "draft model.s token 151660 .* differs from the target's .*same tokenizer" \
    "$K" -m "$M" -p x -md "$tmp/other-vocab.gguf"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
