#!/usr/bin/env bash
# setup.sh — installs what Kipp's build, tests and tools need, and nothing when it is all
# there already: Debian packages (as root, via apt-get) and the project-local Python
# virtualenv .venv with tools/requirements.txt. Called by `make deps` (and so by
# `make demo` / `make test`); safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(libjansson-dev libutf8proc-dev libmicrohttpd-dev cmark-gfm clang libclang-rt-14-dev curl python3-venv
      gcc-aarch64-linux-gnu xz-utils libedit-dev chromium chromium-driver qemu-user
      libjansson-dev:arm64 libutf8proc-dev:arm64
      libvulkan-dev glslc mesa-vulkan-drivers vulkan-tools
      libzmq3-dev libmsgpack-dev libcbor-dev libssl-dev haproxy)
# kipp-server's KV-cache events (--kv-events): ZeroMQ, msgpack, CBOR and OpenSSL's sha256
# (vLLM's wire format and block hashes); HAProxy for the cluster tests (tests/cluster)
# the vulkan backend: its headers and glslc (the shaders' compiler) to build, Mesa's lavapipe
# (software Vulkan on the CPU) to run its gates in make test, vulkaninfo for docs/vulkan.md
# the arm64 build's libraries (the arm64 stage: tests/arm64/run_arm64.sh) come from Debian's
# arm64 archive: dpkg must know the architecture before apt-get can fetch them
add_arch=0
dpkg --print-foreign-architectures | grep -qx arm64 || add_arch=1
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
        echo "setup: need root to install: ${missing[*]} (run: apt-get install ${missing[*]})" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ "$add_arch" = 1 ]; then
        $SUDO dpkg --add-architecture arm64
        $SUDO apt-get update -q >/dev/null
    fi
    $SUDO apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
        { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q "${missing[@]}" >/dev/null; }
fi

PY=${PYTHON_BOOTSTRAP:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$PY" -m venv .venv
fi
stamp=.venv/.kipp-requirements
if [ ! -f "$stamp" ] || ! cmp -s tools/requirements.txt "$stamp"; then
    echo "setup: installing tools/requirements.txt into .venv"
    .venv/bin/pip install -q --disable-pip-version-check -r tools/requirements.txt
    cp tools/requirements.txt "$stamp"
fi
