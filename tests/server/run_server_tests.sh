#!/usr/bin/env bash
# run_server_tests.sh — what `make test-server` runs: the kipp-server gate (tests/server,
# pytest) over real HTTP with curl and the official openai package, against the tiny
# checkpoint. Needs $BUILD/kipp-server (make server) and models/tiny-tied (make tiny-models).
# Server logs go to $KIPP_SERVER_TEST_LOGS (default: a fresh temporary directory).
# --part core|protocols: the OpenAI server's own tests, or the other protocols' and the
# helper routes' (PROTOCOL_TESTS below), so that make test runs the two halves side by side
# as two stages; no --part: all of them. Other arguments go to pytest.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
export BUILD
if [ ! -x "$BUILD/kipp-server" ]; then
    echo "run_server_tests.sh: $BUILD/kipp-server is missing (make server)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
if [ ! -f models/tiny-tied/kipp-tiny-tied-bf16.gguf ]; then
    echo "run_server_tests.sh: models/tiny-tied/kipp-tiny-tied-bf16.gguf is missing (make tiny-models)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
if ! command -v curl >/dev/null; then
    echo "run_server_tests.sh: curl is required" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
PY=${PYTHON:-.venv/bin/python}
PROTOCOL_TESTS="test_anthropic.py test_responses.py test_ollama.py test_openai_shapes.py test_util.py
                test_scoring.py test_rerank.py"
targets=(tests/server)
if [ "${1:-}" = --part ]; then
    part=${2:?--part needs core or protocols}
    shift 2
    targets=()
    for t in $PROTOCOL_TESTS; do
        if [ "$part" = core ]; then targets+=("--ignore=tests/server/$t")
        elif [ "$part" = protocols ]; then targets+=("tests/server/$t")
        else echo "run_server_tests.sh: --part is core or protocols, not '$part'" >&2; exit 2; fi
    done
    [ "$part" = core ] && targets+=(tests/server)
fi
# Logs and pytest's temporary files (a 280 MB model among them) live in the build tree, one
# folder per part, emptied at the start of each run: nothing accumulates in /tmp.
where=${BUILD:-build}/test-tmp/server-${part:-all}
rm -rf "$where"
export KIPP_SERVER_TEST_LOGS=${KIPP_SERVER_TEST_LOGS:-$where/logs}
mkdir -p "$where" "$KIPP_SERVER_TEST_LOGS"
echo "server logs: $KIPP_SERVER_TEST_LOGS"
# the tests marked full (pytest.ini) run in the full tier only, as in the tooling stage
marks=(); [ "${TIER:-full}" = full ] || marks=(-m "not full")
exec "$PY" -m pytest -q -p no:cacheprovider --durations=12 --basetemp="$where/pytest" "${marks[@]}" "${targets[@]}" "$@"
