#!/usr/bin/env bash
# test_draft_spec.sh — make test-draft-spec: speculative decoding's gates. The rejection
# rule's statistics (kipp_test --spec-stat); greedy identity with every drafter in the
# scheduler, alone and in a batch of 8, no leaked blocks, rollback vs recomputation
# (--draft-spec) on kipp-tiny with kipp-tiny-draft and an unrelated random model (cpu), and
# on tiny-tied drafting for itself (cpu-ref; the full tier); and the binaries (tests/cli/test_spec.sh).
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp_test
M=models/kipp-tiny/kipp-tiny-bf16.gguf
D=models/kipp-tiny-draft/kipp-tiny-draft-bf16.gguf
R=models/random/qwen3-tiny-bf16.gguf
T=models/tiny-tied/kipp-tiny-tied-bf16.gguf
. tests/lib.sh
for f in "$M" "$D" "$R" "$T"; do [ -f "$f" ] || make -s "$f" >/dev/null; done
run_counted "rejection rule statistics" "$K" --spec-stat
# the unrelated random drafter R in the scheduler gate in the full tier (TIER, tests/stages.txt);
# the test tier still runs it through kipp below (tests/cli/test_spec.sh)
drafts="$D,$R"; [ "${TIER:-full}" = full ] || drafts=$D
run_counted "scheduler, kipp-tiny, cpu" "$K" --draft-spec "$M" "$drafts" --backend cpu
# cpu-ref (a second backend under the same scheduler code) in the full tier: make test's budget
if [ "${TIER:-full}" = full ]; then
    run_counted "scheduler, tiny-tied, cpu-ref" "$K" --draft-spec "$T" "$T" --backend cpu-ref
fi
run_counted "kipp, kipp-chat, kipp-server" tests/cli/test_spec.sh
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
