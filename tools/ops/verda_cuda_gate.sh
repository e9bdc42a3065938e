#!/usr/bin/env bash
# verda_cuda_gate.sh — rents one disposable Verda (formerly DataCrunch) GPU instance through the
# public REST API, copies this repository's HEAD to it (git bundle), runs
# tools/ops/device_gate.sh there, copies the log back and collects it into JSON, and deletes the
# instance AND its volumes on every way out (success, failure, timeout, SIGINT/SIGTERM/SIGHUP:
# the EXIT trap). It never runs without --i-accept-the-cost. It does not manage SSH keys: the
# public key must already be registered with Verda (its id in --ssh-key-id / VERDA_SSH_KEY_ID).
#
# API (https://api.verda.com/v1, as the official SDK verda-cloud/sdk-python uses it):
#   POST /oauth2/token {grant_type: client_credentials, client_id, client_secret} -> access_token
#   GET  /instance-types?currency=usd        price_per_hour of each instance_type
#   POST /instances {instance_type, image, hostname, ssh_key_ids, location_code, os_volume, ...}
#                                             -> the new instance's id (plain text)
#   GET  /instances/ID                        status (ordered, provisioning, running, error...),
#                                             ip, os_volume_id;  GET /instances lists them
#   PUT  /instances {id: [ID], action: delete, volume_ids: [...], delete_permanently: true}
#   GET  /volumes, GET /volumes/ID, DELETE /volumes/ID {is_permanent: true}
# Exit status: 0 the remote gate passed; 1 it failed (or its log could not be fetched);
# 2 refused (no cost acknowledgement, bad usage or credentials, nothing rented);
# 3 provisioning failed or timed out; 4 teardown could not be confirmed (see the message:
# something may still be billed); 130/143 interrupted (after teardown).
set -u

usage() {
    cat <<'EOF'
usage: tools/ops/verda_cuda_gate.sh --i-accept-the-cost [options] [-- device_gate.sh options]
  --i-accept-the-cost      required: this rents a GPU instance billed by the hour
  --quote                  authenticate, print the plan and the listed hourly price, rent nothing
  --instance-type T        default 1H200.141S.44V (one H200)
  --image I                default ubuntu-24.04-cuda-12.8-open-docker
  --location L             default FIN-02
  --ssh-key-id ID          a key registered with Verda (default $VERDA_SSH_KEY_ID)
  --os-volume-gb N         OS volume size (default 200: the 4B models take ~12 GB)
  --max-minutes N          hard limit for the whole run, teardown included (default 45)
  --provision-timeout S    seconds to wait for the instance to run and answer ssh (default 900)
  --out DIR                where the log and its JSON land (default build/verda)
Environment: VERDA_CLIENT_ID, VERDA_CLIENT_SECRET (required), VERDA_API (default
https://api.verda.com/v1), VERDA_SSH / VERDA_SCP (ssh and scp commands, options included),
VERDA_SSH_USER (default root), VERDA_POLL_S (seconds between status polls, default 10).
After --, arguments go to device_gate.sh (default: none, its 480 s budget).
EOF
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ACK=0
QUOTE=0
ITYPE=1H200.141S.44V
IMAGE=ubuntu-24.04-cuda-12.8-open-docker
LOCATION=FIN-02
SSH_KEY_ID="${VERDA_SSH_KEY_ID:-}"
OS_GB=200
MAX_MIN=45
PROV_TIMEOUT=900
OUT=build/verda
GATE_ARGS=()
while (($#)); do
    case "$1" in
        --i-accept-the-cost) ACK=1; shift ;;
        --quote) QUOTE=1; shift ;;
        --instance-type) ITYPE="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --image) IMAGE="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --location) LOCATION="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --ssh-key-id) SSH_KEY_ID="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --os-volume-gb) OS_GB="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --max-minutes) MAX_MIN="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --provision-timeout) PROV_TIMEOUT="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --out) OUT="${2:-}"; shift 2 || { usage >&2; exit 2; } ;;
        --) shift; GATE_ARGS=("$@"); break ;;
        -h|--help) usage; exit 0 ;;
        *) echo "verda_cuda_gate: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

say() { printf 'verda_cuda_gate: %s\n' "$*" >&2; }
die() { say "$1"; exit "${2:-2}"; }

# values that go into JSON bodies and URLs unquoted: keep them to a safe alphabet
for v in "$ITYPE" "$IMAGE" "$LOCATION" "$SSH_KEY_ID"; do
    case "$v" in *[!A-Za-z0-9._:-]*) die "refusing a value with unexpected characters: '$v'" ;; esac
done
for v in "$OS_GB" "$MAX_MIN" "$PROV_TIMEOUT"; do
    case "$v" in
        ''|*[!0-9]*) die "--os-volume-gb, --max-minutes, --provision-timeout take whole numbers" ;;
    esac
done

API="${VERDA_API:-https://api.verda.com/v1}"
API="${API%/}"
POLL_S="${VERDA_POLL_S:-10}"
SSH_USER="${VERDA_SSH_USER:-root}"
# a fresh instance has a fresh host key: accepted, and not written to ~/.ssh/known_hosts
SSH_OPTS="-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/dev/null -o BatchMode=yes"
SSH_OPTS+=" -o ConnectTimeout=10 -o ServerAliveInterval=30"
read -r -a SSH <<<"${VERDA_SSH:-ssh $SSH_OPTS}"
read -r -a SCP <<<"${VERDA_SCP:-scp -q $SSH_OPTS}"

plan() {
    say "plan: one $ITYPE instance ($IMAGE, $LOCATION, ${OS_GB} GB OS volume) for at most" \
        "$MAX_MIN minutes, deleted with its volumes at the end"
}

if ((!ACK && !QUOTE)); then
    plan
    say "refusing to rent anything without --i-accept-the-cost (an H200 is billed by the hour;" \
        "--quote prints the listed price without renting)"
    exit 2
fi
[ -n "${VERDA_CLIENT_ID:-}" ] && [ -n "${VERDA_CLIENT_SECRET:-}" ] ||
    die "VERDA_CLIENT_ID and VERDA_CLIENT_SECRET must be set (Verda console: Keys, Cloud API)"
if ((!QUOTE)); then
    [ -n "$SSH_KEY_ID" ] ||
        die "--ssh-key-id (or VERDA_SSH_KEY_ID) is needed: the id of a key registered with Verda"
    command -v git >/dev/null || die "git is needed to bundle the repository"
fi
command -v curl >/dev/null || die "curl is needed"
command -v python3 >/dev/null || die "python3 is needed (JSON)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/verda-gate.XXXXXX")" || die "cannot create a work directory"
T0=$SECONDS
DEADLINE=$((T0 + MAX_MIN * 60))
# teardown needs time of its own: the run stops this long before --max-minutes
TEARDOWN_RESERVE=120
TOKEN=""
INSTANCE_ID=""
CREATE_ATTEMPTED=0
HOSTNAME_TAG="kipp-gate-$(date -u +%Y%m%d%H%M%S)-$$"
CHILD=""
CLEANED=0

# ---- HTTP and JSON ----------------------------------------------------------------------
# api METHOD PATH [BODY]: the response body in $WORK/resp, its status in HTTP; 0 on 2xx
HTTP=000
api() {
    local method="$1" path="$2" body="${3:-}" args
    args=(-sS -X "$method" --max-time 60 -o "$WORK/resp" -w '%{http_code}'
          -H 'Content-Type: application/json' -H 'Accept: application/json')
    [ -n "$TOKEN" ] && args+=(-H "Authorization: Bearer $TOKEN")
    [ -n "$body" ] && args+=(--data "$body")
    HTTP="$(curl "${args[@]}" "$API$path" 2>"$WORK/curl.err")" || HTTP=000
    case "$HTTP" in 2??) return 0 ;; esac
    return 1
}
# jget EXPR: evaluates a Python expression over the last response, bound to j; prints '' on error
jget() {
    python3 - "$WORK/resp" "$1" <<'PY' 2>/dev/null
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    v = eval(sys.argv[2], {"j": j})
except Exception:
    v = None
print("" if v is None else (json.dumps(v) if isinstance(v, (list, dict)) else v))
PY
}
api_error() {  # a sentence about the last failed call
    local msg
    msg="$(jget 'j.get("message") or j.get("error_description") or j.get("code")')"
    [ -n "$msg" ] || msg="$(head -c 200 "$WORK/resp" 2>/dev/null)"
    [ "$HTTP" = 000 ] && msg="no answer from $API: $(head -c 200 "$WORK/curl.err")"
    echo "HTTP $HTTP: $msg"
}

authenticate() {
    local saved="$TOKEN"
    TOKEN=""
    local body
    # built by Python from the environment: the secret never appears on a command line
    body="$(python3 -c 'import json, os; e = os.environ; print(json.dumps({
        "grant_type": "client_credentials", "client_id": e["VERDA_CLIENT_ID"],
        "client_secret": e["VERDA_CLIENT_SECRET"]}))')"
    if ! api POST /oauth2/token "$body"; then
        TOKEN="$saved"
        return 1
    fi
    TOKEN="$(jget 'j["access_token"]')"
    [ -n "$TOKEN" ]
}

# ---- teardown: runs on every exit once an instance may exist ----------------------------
instance_volumes() {  # the ids of the volumes attached to $INSTANCE_ID, one per line
    if api GET "/instances/$INSTANCE_ID"; then jget 'j.get("os_volume_id")'; fi
    if api GET /volumes; then
        jget "'\\n'.join(v['id'] for v in j if v.get('instance_id') == '$INSTANCE_ID')"
    fi
}

instance_gone() {
    api GET "/instances/$INSTANCE_ID" && [ "$(jget 'j.get("status")')" != deleted ] && return 1
    # 404 (or a 'deleted' status) is gone; any other failure is not knowing
    [ "$HTTP" = 404 ] || [ "$(jget 'j.get("status")')" = deleted ]
}

teardown() {
    local vols vol_json i ok=0 leftover=""
    authenticate || say "teardown: re-authentication failed ($(api_error)); trying the old token"
    if [ -z "$INSTANCE_ID" ]; then
        # the create call may have succeeded without our hearing the answer: find it by name
        if api GET /instances; then
            INSTANCE_ID="$(jget "next((i['id'] for i in j
                                      if i.get('hostname') == '$HOSTNAME_TAG'), None)")"
        fi
        if [ -z "$INSTANCE_ID" ]; then
            say "teardown: no instance named $HOSTNAME_TAG exists"
            return 0
        fi
    fi
    vols="$(instance_volumes | grep -v '^$' | sort -u)"
    vol_json="$(printf '%s\n' $vols | python3 -c 'import json, sys
print(json.dumps([l.strip() for l in sys.stdin if l.strip()]))')"
    say "teardown: deleting instance $INSTANCE_ID and volumes $vol_json"
    for i in 1 2 3 4 5; do
        if api PUT /instances "{\"id\": [\"$INSTANCE_ID\"], \"action\": \"delete\",
                \"volume_ids\": $vol_json, \"delete_permanently\": true}"; then
            ok=1
            break
        fi
        instance_gone && { ok=1; break; }
        say "teardown: delete failed ($(api_error)); retry $i of 5"
        sleep "$POLL_S"
    done
    # wait for the instance to go, then make sure of each volume (one the instance delete
    # moved to the trash, or left detached, is deleted on its own)
    for i in $(seq 1 30); do instance_gone && break; sleep "$POLL_S"; done
    instance_gone || { ok=0; leftover="instance $INSTANCE_ID"; }
    for v in $vols; do
        if api GET "/volumes/$v" && [ "$(jget 'j.get("status")')" != deleted ]; then
            api DELETE "/volumes/$v" '{"is_permanent": true}' ||
                { say "teardown: volume $v: $(api_error)"; leftover="$leftover volume $v"; }
        elif [ "$HTTP" != 404 ] && [ "$HTTP" != 200 ]; then
            leftover="$leftover volume $v (status unknown: $(api_error))"
        fi
    done
    if ((ok)) && [ -z "$leftover" ]; then
        say "teardown: instance $INSTANCE_ID and its volumes are deleted"
        return 0
    fi
    say "TEARDOWN NOT CONFIRMED: $leftover may still exist and be billed. Delete it in the" \
        "Verda console (https://console.verda.com) or with: curl -X PUT $API/instances ..."
    return 1
}

on_exit() {
    local rc=$?
    ((CLEANED)) && return
    CLEANED=1
    trap '' INT TERM HUP  # a second Ctrl-C must not cut the teardown short
    if [ -n "$CHILD" ]; then kill "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; fi
    if ((CREATE_ATTEMPTED)); then
        teardown || rc=4
    fi
    rm -rf "$WORK"
    say "done in $((SECONDS - T0)) s, exit $rc"
    exit "$rc"
}
on_signal() {
    say "interrupted by SIG$1: tearing down"
    [ "$1" = INT ] && exit 130
    [ "$1" = HUP ] && exit 129
    exit 143
}
trap on_exit EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP

# run_bg CMD...: runs a command in the background and waits, so a signal is handled at once (bash
# defers traps until a foreground child ends) and the trap can stop it
run_bg() {
    "$@" &
    CHILD=$!
    wait "$CHILD"
    local rc=$?
    CHILD=""
    return "$rc"
}
left() { echo $((DEADLINE - TEARDOWN_RESERVE - SECONDS)); }

# ---- authenticate and price -------------------------------------------------------------
if ! authenticate; then
    say "authentication with $API failed ($(api_error))"
    die "check VERDA_CLIENT_ID and VERDA_CLIENT_SECRET; nothing was rented" 2
fi
PRICE=""
if api GET "/instance-types?currency=usd"; then
    PRICE="$(jget "next((t.get('price_per_hour') for t in j
                         if t.get('instance_type') == '$ITYPE'), None)")"
    listed="$(jget "any(t.get('instance_type') == '$ITYPE' for t in j)")"
    [ "$listed" = True ] ||
        die "instance type $ITYPE is not listed by $API/instance-types; nothing was rented" 2
fi
plan
case "$PRICE" in *[!0-9.]*|.*) PRICE="" ;; esac
if [ -n "$PRICE" ]; then
    most="$(python3 -c "print(f'{$PRICE * $MAX_MIN / 60:.2f}')")"
    say "listed price: $PRICE USD/hour (at most $most USD for $MAX_MIN minutes)"
else
    say "listed price: not available ($(api_error))"
fi
((QUOTE)) && exit 0

# ---- rent -------------------------------------------------------------------------------
mkdir -p "$OUT" || die "cannot create $OUT"
say "creating $HOSTNAME_TAG"
CREATE_ATTEMPTED=1
body="{\"instance_type\": \"$ITYPE\", \"image\": \"$IMAGE\", \"hostname\": \"$HOSTNAME_TAG\",
 \"description\": \"Kipp CUDA device gate (disposable)\", \"ssh_key_ids\": [\"$SSH_KEY_ID\"],
 \"location_code\": \"$LOCATION\",
 \"os_volume\": {\"name\": \"$HOSTNAME_TAG-os\", \"size\": $OS_GB},
 \"volumes\": [], \"existing_volumes\": [], \"is_spot\": false}"
if ! api POST /instances "$body"; then
    say "create failed ($(api_error))"
    exit 3
fi
INSTANCE_ID="$(tr -d '"[:space:]' <"$WORK/resp")"
case "$INSTANCE_ID" in
    ''|*[!A-Za-z0-9-]*)
        say "create answered an unexpected id '$INSTANCE_ID'"
        INSTANCE_ID=""  # the teardown looks the instance up by its hostname
        exit 3 ;;
esac
say "instance $INSTANCE_ID ordered"

prov_deadline=$((SECONDS + PROV_TIMEOUT))
IP=""
while :; do
    if ((SECONDS >= prov_deadline || $(left) <= 0)); then
        say "instance $INSTANCE_ID did not come up within ${PROV_TIMEOUT}s"
        exit 3
    fi
    if api GET "/instances/$INSTANCE_ID"; then
        status="$(jget 'j.get("status")')"
        case "$status" in
            running) IP="$(jget 'j.get("ip")')"; [ -n "$IP" ] && break ;;
            error|discontinued|deleted|offline|notfound)
                say "instance $INSTANCE_ID went to status '$status'"
                exit 3 ;;
        esac
    else
        say "status poll: $(api_error)"
    fi
    run_bg sleep "$POLL_S"
done
say "instance $INSTANCE_ID running at $IP; waiting for ssh"
until run_bg timeout 30 "${SSH[@]}" "$SSH_USER@$IP" true </dev/null; do
    if ((SECONDS >= prov_deadline || $(left) <= 0)); then
        say "ssh to $IP did not answer within ${PROV_TIMEOUT}s"
        exit 3
    fi
    run_bg sleep "$POLL_S"
done

# ---- copy, run, copy back ---------------------------------------------------------------
git -C "$ROOT" diff --quiet HEAD -- 2>/dev/null ||
    say "note: uncommitted changes are not copied: the instance runs HEAD" \
        "($(git -C "$ROOT" rev-parse --short HEAD))"
git -C "$ROOT" bundle create "$WORK/kipp.bundle" HEAD >/dev/null 2>&1 ||
    { say "git bundle failed"; exit 1; }
run_bg timeout 600 "${SCP[@]}" "$WORK/kipp.bundle" "$SSH_USER@$IP:kipp.bundle" </dev/null ||
    { say "copying the bundle to $IP failed"; exit 1; }
remote_args=""
for a in "${GATE_ARGS[@]+"${GATE_ARGS[@]}"}"; do remote_args+=" $(printf '%q' "$a")"; done
(($(left) > 0)) || { say "no time left to run the gate (--max-minutes $MAX_MIN)"; exit 1; }
say "running tools/ops/device_gate.sh$remote_args on $IP ($(left) s left)"
run_bg timeout --kill-after=10 "$(left)" "${SSH[@]}" "$SSH_USER@$IP" \
    "rm -rf kipp && git clone -q kipp.bundle kipp && cd kipp &&
     tools/ops/device_gate.sh --log build/device_gate.log$remote_args" </dev/null
GATE_RC=$?
say "device_gate.sh finished with exit $GATE_RC"
if run_bg timeout 300 "${SCP[@]}" "$SSH_USER@$IP:kipp/build/device_gate.log" \
        "$OUT/device_gate.log" </dev/null; then
    python3 "$ROOT/tools/ops/collect_cuda_gates.py" "$OUT/device_gate.log" \
        -o "$OUT/device_gate.json"
    say "log: $OUT/device_gate.log, result: $OUT/device_gate.json"
else
    say "could not copy the log back from $IP"
    GATE_RC=1
fi
((GATE_RC == 0)) || exit 1
exit 0
