#!/usr/bin/env bash
# run_tests.sh — what `make test` runs (and `make test-sanitize` with BUILD=build/san):
# native unit suites, the GGUF fuzz corpus plus a short fuzz run, the Python tooling tests,
# docs drift, CLI bad-input tests, kipp-perplexity and the shipped weights' unpacking, the
# model gates on kipp-tiny and the tiny checkpoints (scheduler included), the chat CLI and
# HTTP server gates, the mutation
# cases and the KV fault-injection matrix.
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export KIPP_BIN=$BUILD/kipp
. tests/lib.sh

run_counted "unit suites" "$BUILD/kipp_test" --unit
# each fuzzer: replay its committed corpus, then a short run from it (FUZZ_SECONDS each)
export KIPP_FUZZ_VOCAB=models/tiny-tied/kipp-tiny-tied-bf16.gguf
export KIPP_FUZZ_EMBED_MODEL=models/tiny-embed/kipp-tiny-embed-bf16.gguf
for f in gguf chat tok oai grammar embed; do
    run_counted "$f corpus replay" "$BUILD/fuzz_$f" -runs=0 "tests/fuzz/corpus/$f"
    fuzz_dir=$(mktemp -d)
    run_counted "$f fuzz (${FUZZ_SECONDS:-15}s)" "$BUILD/fuzz_$f" -max_total_time="${FUZZ_SECONDS:-15}" \
        "$fuzz_dir" "tests/fuzz/corpus/$f"
    rm -rf "$fuzz_dir"
done
run_counted "tooling tests" .venv/bin/python -m pytest -q -p no:cacheprovider tests/tools
run_counted "docs drift" scripts/docs.sh check
run_counted "bench plots drift" .venv/bin/python bench/plots.py check
run_counted "chat template vs HF" "$BUILD/kipp_test" --chat-golden models/tiny-tied/kipp-tiny-tied-bf16.gguf tests/tok/chat_golden
run_counted "streamed text == whole decode (CLI and server paths)" "$BUILD/kipp_test" --detok-paths \
    models/tiny-tied/kipp-tiny-tied-bf16.gguf tests/tok/multibyte_corpus.txt
run_counted "special-token text in chat content as text" "$BUILD/kipp_test" --content-special \
    models/tiny-tied/kipp-tiny-tied-bf16.gguf
run_counted "grammar masks over the Qwen3 vocabulary" "$BUILD/kipp_test" --grammar-vocab \
    models/tiny-tied/kipp-tiny-tied-bf16.gguf
run_counted "cli bad input" tests/cli/test_cli.sh
run_counted "kipp-perplexity on kipp-tiny" tests/cli/test_perplexity.sh
run_counted "kipp-quantize == tools/quantize.py, bad input" tests/cli/test_quantize.sh
run_counted "shipped weights unpack (sha256, failures)" tests/cli/test_weights.sh
run_counted "neon kernels compile for arm64" tests/neon_check.sh
# the cuda binaries were built by make test's prerequisites (-Werror); here their no-GPU path
if [ "${KIPP_NO_CUDA:-}" = 1 ]; then echo "== cuda: skipped (KIPP_NO_CUDA=1)"
else
    run_counted "cuda binaries without a GPU: fatal, never a fallback" tests/cuda/test_cuda_fatal.sh
    run_counted "cuda host side over a host-memory CUDA stand-in" tests/cuda/test_cuda_shim.sh
fi
for t in kipp-tiny tiny-tied tiny-untied random-tiny; do
    run_counted "model gates $t" tests/model/run_cpu_model.sh "$t"
done
for b in cpu-ref cpu; do
    run_counted "embedding gate $b (tiny-embed vs HF goldens)" "$BUILD/kipp_test" --embed-golden \
        models/tiny-embed/kipp-tiny-embed-bf16.gguf tests/test-vectors/tiny-embed --backend "$b"
done
run_counted "speculative decoding (make test-draft-spec)" tests/model/test_draft_spec.sh
run_counted "chat CLI (make test-chat)" tests/chat/test_chat.sh
run_counted "server over HTTP (make test-server)" tests/server/run_server_tests.sh
# the mutation stage rebuilds copies of the tree with default flags; once is enough
[ -n "${KIPP_SANITIZE:-}" ] || run_counted "mutation (gates catch planted bugs)" tests/model/mutation.sh
# the KV fault matrix builds its own -DKIPP_FAULT_INJECT binary with default flags
[ -n "${KIPP_SANITIZE:-}" ] || run_counted "KV fault matrix" tests/model/fault_matrix.sh

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
