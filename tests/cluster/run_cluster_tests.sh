#!/usr/bin/env bash
# run_cluster_tests.sh — the cluster stage (tests/stages.txt: cluster): kipp-server replicas
# in network namespaces on a private bridge behind HAProxy and vllm-router
# (tests/cluster/test_cluster.py). Prints which network mode runs (netns, or loopback where
# namespaces are refused; KIPP_CLUSTER_NETNS=0 forces loopback). Everything the harness
# creates is named kc<this shell's pid>...; the EXIT trap deletes whatever is left of it
# (the processes it started, by the PIDs it recorded; namespaces; the bridge) even when pytest
# was killed. TIER=full: the larger form.
# Arguments go to pytest.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
export BUILD
PY=${PYTHON:-.venv/bin/python}
for need in "$BUILD/kipp-server" models/tiny-tied/kipp-tiny-tied-bf16.gguf; do
    if [ ! -e "$need" ]; then
        echo "run_cluster_tests.sh: $need is missing (make server tiny-models)" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
done
export KIPP_CLUSTER_PREFIX="kc$$"
cleanup() {
    local ns link pid what
    # the processes the harness started (it writes "PID NAME" lines), if it could not stop them
    if [ -f "$KIPP_CLUSTER_PIDFILE" ]; then
        while read -r pid what; do
            if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$what"; then
                kill -9 "$pid" 2>/dev/null
            fi
        done < "$KIPP_CLUSTER_PIDFILE"
    fi
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${KIPP_CLUSTER_PREFIX}"); do
        ip netns del "$ns" 2>/dev/null
    done
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 \
                  | grep "^${KIPP_CLUSTER_PREFIX}"); do
        ip link del "$link" 2>/dev/null
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
where=$BUILD/test-tmp/cluster
rm -rf "$where"
mkdir -p "$where/logs"
export KIPP_CLUSTER_LOGS=$where/logs
export KIPP_CLUSTER_PIDFILE=$where/pids
"$PY" -c 'import sys; sys.path.insert(0, "tests/cluster"); import harness as H
why = H.netns_refused()
print("cluster mode:", "loopback (" + why + ")" if why else "netns (a bridge and a namespace per replica)")
print("kipp-server features:", ", ".join(k for k, v in H.features().items() if v) or "none of the optional ones")'
"$PY" -m pytest -q -p no:cacheprovider -rs --durations=8 --basetemp="$where/pytest" tests/cluster "$@"
