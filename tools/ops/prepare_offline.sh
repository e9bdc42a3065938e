#!/usr/bin/env bash
# prepare_offline.sh — run HERE (a Debian machine with network) to make the bundle that lets
# tools/ops/device_gate.sh run on a GPU host that reaches no package registry. It writes one
# folder (default build/offline/, ignored by git) to carry with the tree:
#   prefix/       `dpkg -x` of the Debian packages Kipp links and builds against: libjansson,
#                 libutf8proc, libmicrohttpd, libedit (runtime + -dev: headers, .so links)
#   prefix-deps/  the runtime closure of those (gnutls, nettle, libbsd, libtinfo, ...) and
#                 xz-utils: used on the GPU host only for what its system lacks
#   vulkan/       `dpkg -x` of glslc and libshaderc1 (the vulkan backend's shader compiler),
#                 libvulkan-dev (headers) and libvulkan1 (the loader): used on the GPU host
#                 only when it lacks them (docs/vulkan.md)
#   wheels/       the Python packages the gate's own steps import (numpy, tqdm at the pins of
#                 tools/requirements.txt) for the GPU host's Python (--py-version, default
#                 3.12), and pip itself (a host whose python3 has no ensurepip)
#                 With them (one wheelhouse, PEER_DL for device_gate.sh), what
#                 `bench/peer_cuda.sh --download DIR --trim` fetches: the llama.cpp peer's
#                 trimmed sdist and its wheels, less its numpy (--no-peer leaves them out)
#   MANIFEST.txt  what is in it (packages and versions, Python version, sizes)
#   LINKS.txt     the symbolic links of prefix*/ (the .so names), removed from the folder so
#                 that nothing in it is a link: offline_deps.sh makes them again
# Big models are not carried: the gate makes them there with tools/make_random_model.py.
# tools/ops/offline_deps.sh is the other half (the gate's `deps` step on the GPU host).
#
#   tools/ops/prepare_offline.sh [--out DIR] [--py-version X.Y] [--no-peer]
#   tools/ops/prepare_offline.sh --check [--out DIR]    size and manifest of an existing bundle
# Exit status: 0 made (and under 64 MiB); 1 a download or extraction failed; 2 bad usage;
# 3 made but over 64 MiB (the device tool's carry limit).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT=build/offline
PYV=${KIPP_OFFLINE_PY_VERSION:-3.12}
PEER=1
CHECK=0
LIMIT_MIB=64
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit "${1:-2}"; }
while (($#)); do
    case "$1" in
        --out) OUT=${2:?--out needs a folder}; shift 2 ;;
        --py-version) PYV=${2:?--py-version needs X.Y}; shift 2 ;;
        --no-peer) PEER=0; shift ;;
        --check) CHECK=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "prepare_offline.sh: unknown option '$1'" >&2; usage ;;
    esac
done
case "$PYV" in [0-9].[0-9]|[0-9].[0-9][0-9]) ;; *) echo "prepare_offline.sh: --py-version X.Y" >&2; exit 2 ;; esac

size_mib() { du -sm "$1" | cut -f1; }
report() {
    local mib
    mib=$(size_mib "$OUT")
    echo "prepare_offline.sh: $OUT weighs ${mib} MiB (carry limit ${LIMIT_MIB} MiB):"
    du -sh "$OUT"/* 2>/dev/null | sed 's/^/  /'
    if ((mib > LIMIT_MIB)); then
        echo "prepare_offline.sh: OVER the ${LIMIT_MIB} MiB carry limit (try --no-peer)" >&2
        return 3
    fi
}
if ((CHECK)); then
    [ -f "$OUT/MANIFEST.txt" ] || { echo "prepare_offline.sh: no bundle at $OUT (no MANIFEST.txt)" >&2; exit 1; }
    cat "$OUT/MANIFEST.txt"
    report
    exit $?
fi

# the Debian packages: what Kipp links (Makefile: -ljansson -lutf8proc, -lmicrohttpd for the
# server, -ledit for kipp-chat), their headers, and their runtime closure minus the C library
CORE_PKGS=(libjansson4 libjansson-dev libutf8proc2 libutf8proc-dev libmicrohttpd12
           libmicrohttpd-dev libedit2 libedit-dev)
RUNTIME_ROOTS=(libjansson4 libutf8proc2 libmicrohttpd12 libedit2)
BASE_SKIP=' libc6 libgcc-s1 libstdc++6 gcc-12-base gcc-13-base gcc-14-base debconf dpkg '
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${RUNTIME_ROOTS[@]}" | grep -v '^ ' | grep -v '^<' | sort -u)
# the vulkan backend's build (glslc, the headers) and run (the loader)
VK_PKGS=(glslc libshaderc1 libvulkan-dev libvulkan1)
DEP_PKGS=(xz-utils)
for p in "${closure[@]}"; do
    case " ${CORE_PKGS[*]} $BASE_SKIP " in *" $p "*) continue ;; esac
    DEP_PKGS+=("$p")
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"   # apt-get download fetches as the _apt user where it can
new="$OUT.new"
rm -rf "$new"
mkdir -p "$new/prefix" "$new/prefix-deps" "$new/vulkan" "$new/wheels" "$tmp/debs"
chmod 777 "$tmp/debs"

echo "prepare_offline.sh: apt-get download ${CORE_PKGS[*]} ${DEP_PKGS[*]} ${VK_PKGS[*]}"
(cd "$tmp/debs" && apt-get download -q "${CORE_PKGS[@]}" "${DEP_PKGS[@]}" "${VK_PKGS[@]}") || {
    echo "prepare_offline.sh: apt-get download failed (no network, or apt-get update needed)" >&2
    exit 1; }
{
    echo "# Kipp offline bundle for tools/ops/device_gate.sh (made by tools/ops/prepare_offline.sh)"
    echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ) on=$(. /etc/os-release && echo "$ID-$VERSION_ID") arch=$(dpkg --print-architecture)"
    echo "commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "python=$PYV"
} >"$tmp/MANIFEST.txt"
for p in "${CORE_PKGS[@]}" "${DEP_PKGS[@]}" "${VK_PKGS[@]}"; do
    deb=$(ls "$tmp/debs/${p}_"*.deb)
    dest=prefix-deps
    case " ${CORE_PKGS[*]} " in *" $p "*) dest=prefix ;; esac
    case " ${VK_PKGS[*]} " in *" $p "*) dest=vulkan ;; esac
    dpkg -x "$deb" "$new/$dest"
    echo "deb $dest $(dpkg-deb --showformat='${Package} ${Version}' -W "$deb")" >>"$tmp/MANIFEST.txt"
done
# documentation, man pages, lintian data, static archives: not needed to build or run
rm -rf "$new"/prefix*/usr/share "$new"/vulkan/usr/share
find "$new" -name '*.a' -delete
# no symbolic links in what is carried (a copy tool may drop them): LINKS.txt lists each
# (path, target) and tools/ops/offline_deps.sh makes them again on the GPU host
(cd "$new" && find . -type l -printf '%P %l\n' | sort >LINKS.txt && find . -type l -delete)

# the wheels: the pins of tools/requirements.txt for the packages the gate's steps import
# (make_tiny_checkpoint, convert_to_gguf, quantize, make_random_model: numpy; tqdm for their
# progress bars; tools.bench and bench.server_bench use the standard library only)
pins=()
for name in numpy tqdm; do
    pin=$(grep -iE "^$name==" tools/requirements.txt | sed 's/[[:space:]]*#.*//') ||
        { echo "prepare_offline.sh: no $name pin in tools/requirements.txt" >&2; exit 1; }
    pins+=("$pin")
done
PY=${PYTHON:-python3}
plat=()
for m in 2_17 2_27 2_28; do plat+=(--platform "manylinux_${m}_x86_64"); done
plat+=(--platform manylinux2014_x86_64)
abi="cp${PYV/./}"
echo "prepare_offline.sh: pip download ${pins[*]} pip for CPython $PYV"
"$PY" -m pip download -q --disable-pip-version-check --only-binary :all: --python-version "$PYV" \
    --implementation cp --abi "$abi" "${plat[@]}" -d "$new/wheels" "${pins[@]}" pip || {
    echo "prepare_offline.sh: pip download failed" >&2; exit 1; }
for w in "$new"/wheels/*.whl; do echo "wheel ${w##*/}" >>"$tmp/MANIFEST.txt"; done

if ((PEER)); then
    if [ -x bench/peer_cuda.sh ]; then
        echo "prepare_offline.sh: bench/peer_cuda.sh --download --trim (Python $PYV) into $OUT/wheels"
        PEER_PY_VERSION=$PYV bench/peer_cuda.sh --download "$tmp/peer" --trim >"$tmp/peer.log" 2>&1 || {
            cat "$tmp/peer.log" >&2
            echo "prepare_offline.sh: the peer's download failed (use --no-peer to leave it out)" >&2
            exit 1; }
        # one wheelhouse: the peer takes any numpy, so the pinned one above serves both (16 MB less)
        for f in "$tmp"/peer/*; do
            n=${f##*/}
            case "$n" in numpy-*.whl) ls "$new"/wheels/numpy-*.whl >/dev/null 2>&1 && continue ;; esac
            mv "$f" "$new/wheels/$n"
            echo "peer $n" >>"$tmp/MANIFEST.txt"
        done
    else
        echo "prepare_offline.sh: no bench/peer_cuda.sh: no peer sources"
    fi
fi
echo "size_mib=$(size_mib "$new")" >>"$tmp/MANIFEST.txt"
cp "$tmp/MANIFEST.txt" "$new/MANIFEST.txt"
rm -rf "$OUT"
mv "$new" "$OUT"
cat "$OUT/MANIFEST.txt"
report
