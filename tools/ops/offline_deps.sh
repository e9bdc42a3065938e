#!/usr/bin/env bash
# offline_deps.sh — device_gate.sh's `deps` step on a host that reaches no package registry
# (--offline, or a bundle at build/offline/): instead of `make deps` (apt-get, pip) it makes
# what the gate needs from the bundle tools/ops/prepare_offline.sh made elsewhere, and never
# touches the network (no apt-get; pip only with --no-index). Run from the repository root:
#   tools/ops/offline_deps.sh [--bundle DIR] [--use DIR] [--env FILE]
#   --bundle DIR  the bundle (default build/offline)
#   --use DIR     where the links it chooses go (default build/offline-use)
#   --env FILE    the environment for the gate's later steps, as `export` lines (default
#                 build/device/offline-env.sh); device_gate.sh sources it
# 1. C libraries (jansson, utf8proc, microhttpd, libedit): a probe program includes their
#    headers, links -ljansson -lutf8proc -lmicrohttpd -ledit and runs. When the system passes
#    it nothing is changed; otherwise the bundle's prefix/ is used for all four (headers via
#    C_INCLUDE_PATH, link and run time via LIBRARY_PATH and LD_LIBRARY_PATH, which gcc, clang,
#    nvcc's host compiler, ld and sub-makes all honour: no Makefile variable is overridden),
#    plus each library of prefix-deps/ whose soname the system's ld.so cache lacks; then the
#    probe must pass.
# 2. xz (the shipped weights are .xz): the bundle's when the system has none.
# 3. Vulkan (optional): glslc, the Vulkan headers and the loader for the vulkan backend: the
#    system's, else the bundle's vulkan/ (PATH, C_INCLUDE_PATH, LD_LIBRARY_PATH); without
#    them the build leaves the backend out, which is not a failure here.
# 4. Python: .venv/bin/python must import numpy and tqdm; else .venv is made (python3 -m venv;
#    without ensurepip, --without-pip and the bundle's pip wheel) and the pins of
#    tools/requirements.txt installed from the bundle's wheels with --no-index.
# Exit status: 0 ready; 1 something is missing (each thing named, with what would fix it).
set -u

BUNDLE=build/offline
USE=build/offline-use
ENVF=build/device/offline-env.sh
while (($#)); do
    case "$1" in
        --bundle) BUNDLE=${2:?}; shift 2 ;;
        --use) USE=${2:?}; shift 2 ;;
        --env) ENVF=${2:?}; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "offline_deps.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
say() { echo "offline_deps.sh: $*"; }
MISSING=()
mkdir -p "$(dirname "$ENVF")" "$USE" || exit 1
: >"$ENVF" || exit 1
[ -f "$BUNDLE/MANIFEST.txt" ] && say "bundle $BUNDLE: $(grep -m1 '^made=' "$BUNDLE/MANIFEST.txt")" ||
    say "no bundle at $BUNDLE (tools/ops/prepare_offline.sh makes one): the system must have it all"
# the links of the bundle (LINKS.txt: "path target", made by prepare_offline.sh, which
# leaves no link in what is carried), and the execute bit of its programs
if [ -f "$BUNDLE/LINKS.txt" ]; then
    while read -r path target; do
        [ -n "$path" ] && [ ! -e "$BUNDLE/$path" ] && ln -sfn "$target" "$BUNDLE/$path"
    done <"$BUNDLE/LINKS.txt"
fi
[ -d "$BUNDLE/prefix-deps/usr/bin" ] && chmod -f +x "$BUNDLE"/prefix-deps/usr/bin/* 2>/dev/null
# the network is never needed: make any pip in this process tree refuse indexes
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
echo "export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1" >>"$ENVF"

# ---- 1. C libraries --------------------------------------------------------------------
CC=${CC:-cc}
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
cat >"$probe_dir/probe.c" <<'EOF'
#include <jansson.h>
#include <utf8proc.h>
#include <microhttpd.h>
#include <histedit.h>
#include <stdio.h>
int main(void) {
    json_t *j = json_integer(7);
    int ok = json_integer_value(j) == 7 && utf8proc_version() != NULL &&
             MHD_get_version() != NULL && history_init() != NULL;
    json_decref(j);
    printf("probe: jansson %s, utf8proc %s, microhttpd %s, libedit: %s\n", JANSSON_VERSION,
           utf8proc_version(), MHD_get_version(), ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
EOF
probe() {
    "$CC" -o "$probe_dir/probe" "$probe_dir/probe.c" -ljansson -lutf8proc -lmicrohttpd -ledit \
        >"$probe_dir/out" 2>&1 && "$probe_dir/probe" >>"$probe_dir/out" 2>&1
}
# the multiarch library folders of a dpkg -x tree
libdirs() { local d; for d in "$1"/usr/lib/*-linux-gnu "$1"/lib/*-linux-gnu "$1"/usr/lib "$1"/lib; do
    [ -d "$d" ] && echo "$d"; done; }
if ! command -v "$CC" >/dev/null 2>&1; then
    MISSING+=("a C compiler ($CC)")
elif probe; then
    say "C libraries: the system's ($(tail -n1 "$probe_dir/out"))"
else
    say "C libraries: the system lacks some: $(grep -m1 -iE 'error|fatal|cannot' "$probe_dir/out")"
    if [ -d "$BUNDLE/prefix/usr/include" ]; then
        rm -rf "${USE:?}/lib" && mkdir -p "$USE/lib"
        for d in $(libdirs "$BUNDLE/prefix"); do
            for f in "$d"/lib*.so*; do [ -e "$f" ] && ln -sf "$(cd "$(dirname "$f")" && pwd)/${f##*/}" "$USE/lib/"; done
        done
        have=$(ldconfig -p 2>/dev/null | awk '{print $1}')
        added=()
        for d in $(libdirs "$BUNDLE/prefix-deps"); do
            for f in "$d"/lib*.so.*; do
                [ -e "$f" ] || continue
                n=${f##*/}
                # sonames only (libfoo.so.N), and only those the system cannot load
                [[ "$n" =~ ^lib.*\.so\.[0-9]+$ ]] || continue
                grep -qxF "$n" <<<"$have" && continue
                ln -sf "$(cd "$d" && pwd)/$n" "$USE/lib/$n"
                added+=("$n")
            done
        done
        inc="$(cd "$BUNDLE/prefix/usr/include" && pwd)"
        lib="$(cd "$USE/lib" && pwd)"
        export C_INCLUDE_PATH="$inc${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
        export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
        export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        if probe; then
            say "C libraries: the bundle's ($(tail -n1 "$probe_dir/out"))"
            say "  from prefix-deps, missing here: ${added[*]:-none}"
            {
                echo "export C_INCLUDE_PATH='$C_INCLUDE_PATH'"
                echo "export LIBRARY_PATH='$LIBRARY_PATH'"
                echo "export LD_LIBRARY_PATH='$LD_LIBRARY_PATH'"
            } >>"$ENVF"
        else
            cat "$probe_dir/out"
            MISSING+=("the C libraries, even with the bundle's (see the probe's output above)")
        fi
    else
        cat "$probe_dir/out"
        MISSING+=("libjansson/libutf8proc/libmicrohttpd/libedit with headers (no bundle: run tools/ops/prepare_offline.sh where there is network and carry build/offline)")
    fi
fi

# ---- 2. xz -----------------------------------------------------------------------------
if xz --version >/dev/null 2>&1; then
    say "xz: the system's"
elif [ -x "$BUNDLE/prefix-deps/usr/bin/xz" ]; then
    mkdir -p "$USE/bin"
    ln -sf "$(cd "$BUNDLE/prefix-deps/usr/bin" && pwd)/xz" "$USE/bin/xz"
    usebin="$(cd "$USE/bin" && pwd)"
    export PATH="$usebin:$PATH"
    if xz --version >/dev/null 2>&1; then
        say "xz: the bundle's"
        echo "export PATH='$PATH'" >>"$ENVF"
    else
        MISSING+=("xz (the bundle's does not run here)")
    fi
else
    MISSING+=("xz (xz-utils; no bundle)")
fi

# ---- 3. Vulkan (optional: the vulkan backend) ----------------------------------------
# glslc and the headers to build it, the loader to run it: the system's, else the bundle's
# vulkan/ folder; without either the build leaves the backend out and says so (not a failure
# here: device_gate.sh plans the vulkan steps only where the driver has a Vulkan manifest)
vk_probe() {
    command -v glslc >/dev/null 2>&1 &&
        printf '#include <vulkan/vulkan.h>\nint main(void) { return 0; }\n' |
            "$CC" -x c - -o "$probe_dir/vk" >/dev/null 2>&1
}
vk_loader() { ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 ' ||
    { [ -n "${LD_LIBRARY_PATH:-}" ] && ls ${LD_LIBRARY_PATH//:/ } 2>/dev/null | grep -q '^libvulkan\.so\.1$'; }; }
if vk_probe && vk_loader; then
    say "vulkan: the system's glslc, headers and loader"
elif [ -d "$BUNDLE/vulkan/usr" ]; then
    mkdir -p "$USE/bin" "$USE/vklib"
    [ -f "$BUNDLE/vulkan/usr/bin/glslc" ] && chmod -f +x "$BUNDLE/vulkan/usr/bin/glslc" &&
        ln -sf "$(cd "$BUNDLE/vulkan/usr/bin" && pwd)/glslc" "$USE/bin/glslc"
    for d in $(libdirs "$BUNDLE/vulkan"); do
        for f in "$d"/lib*.so*; do [ -e "$f" ] && ln -sf "$(cd "$d" && pwd)/${f##*/}" "$USE/vklib/"; done
    done
    export PATH="$(cd "$USE/bin" && pwd):$PATH"
    export C_INCLUDE_PATH="$(cd "$BUNDLE/vulkan/usr/include" && pwd)${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
    export LD_LIBRARY_PATH="$(cd "$USE/vklib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    {
        echo "export PATH='$PATH'"
        echo "export C_INCLUDE_PATH='$C_INCLUDE_PATH'"
        echo "export LD_LIBRARY_PATH='$LD_LIBRARY_PATH'"
    } >>"$ENVF"
    if vk_probe; then say "vulkan: the bundle's glslc and headers (and its loader where the system has none)"
    else say "vulkan: not even with the bundle's glslc and headers: the build leaves the backend out"; fi
else
    say "vulkan: no glslc or Vulkan headers here and no bundle: the build leaves the backend out"
fi

# ---- 4. Python -------------------------------------------------------------------------
PY=.venv/bin/python
MODS="import numpy, tqdm"
pins=()
for name in numpy tqdm; do
    pin=$(grep -iE "^$name==" tools/requirements.txt 2>/dev/null | sed 's/[[:space:]]*#.*//')
    pins+=("${pin:-$name}")
done
WHEELS="$BUNDLE/wheels"
if "$PY" -c "$MODS" >/dev/null 2>&1; then
    say "python: $PY has numpy and tqdm ($("$PY" -c 'import numpy; print("numpy", numpy.__version__)'))"
else
    BOOT=${PYTHON_BOOTSTRAP:-python3}
    if ! "$PY" -c 'import sys' >/dev/null 2>&1; then
        # absent, or a copy from another machine whose interpreter is not here
        rm -rf .venv
        say "python: making .venv with $BOOT ($("$BOOT" -V 2>&1))"
        "$BOOT" -m venv .venv >/dev/null 2>&1 || {
            rm -rf .venv
            say "python: $BOOT -m venv failed (no ensurepip?): --without-pip and the bundle's pip"
            "$BOOT" -m venv --without-pip .venv || MISSING+=("a Python venv ($BOOT -m venv failed)")
        }
    fi
    if "$PY" -c 'import sys' >/dev/null 2>&1; then
        if "$PY" -m pip --version >/dev/null 2>&1; then
            PIP=("$PY" -m pip)
        else
            pipwhl=$(ls "$WHEELS"/pip-*.whl 2>/dev/null | head -n1)
            PIP=("$PY" "$pipwhl/pip")
            [ -n "$pipwhl" ] || PIP=(false)
        fi
        if [ -d "$WHEELS" ] && "${PIP[@]}" install -q --no-index --find-links "$WHEELS" "${pins[@]}"; then
            :
        else
            want=$(grep -m1 '^python=' "$BUNDLE/MANIFEST.txt" 2>/dev/null | cut -d= -f2)
            say "python: installing ${pins[*]} from $WHEELS failed (bundle for Python ${want:-?}, this is $("$PY" -V 2>&1))"
        fi
        if "$PY" -c "$MODS" >/dev/null 2>&1; then
            say "python: $PY has numpy and tqdm (from the bundle's wheels)"
        else
            MISSING+=("numpy and tqdm for $PY (make the bundle for this Python: prepare_offline.sh --py-version X.Y)")
        fi
    fi
fi

if ((${#MISSING[@]})); then
    for m in "${MISSING[@]}"; do echo "offline_deps.sh: MISSING: $m" >&2; done
    exit 1
fi
say "ready (environment for the later steps: $ENVF)"
exit 0
