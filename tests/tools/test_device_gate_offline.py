"""tools/ops/device_gate.sh's offline path (issue 29): a GPU host that reaches no package
registry and may lack Kipp's Debian libraries runs the gate from a bundle made elsewhere
(tools/ops/prepare_offline.sh), and nothing tries the network.

Each run is inside `unshare -n -m` (no network at all; a private mount namespace) where the
system's copies of jansson, utf8proc, microhttpd, libedit (headers and libraries) and xz are
hidden under bind mounts of /dev/null, so a machine without those packages is what the gate
sees. apt-get, apt, sudo, curl, wget and pip on PATH are stand-ins that record any call and
fail; `make` is a stand-in that fails when asked for the `deps` target (scripts/setup.sh:
apt-get, pip) and whose build and model steps check what the real ones need: the headers and
libraries compile, link and run from the environment the gate exported, and .venv's Python
imports numpy and tqdm. nvidia-smi and nvcc are fakes, as in test_collect_cuda_gates.py; the
steps after the build (the first that needs a GPU) are canned.

The gate runs on a small bundle made here from this machine's own files (no download), so the
test takes seconds; test_real_bundle checks the output of prepare_offline.sh itself when
build/offline/ exists (its libraries with the system's hidden, its wheels resolving for the
bundle's Python with --no-index, its size under the device tool's 64 MiB carry limit).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
OPS = REPO_ROOT / "tools" / "ops"
GATE = OPS / "device_gate.sh"
OFFLINE_DEPS = OPS / "offline_deps.sh"
COLLECT = OPS / "collect_cuda_gates.py"
REAL_BUNDLE = REPO_ROOT / "build" / "offline"
HEADERS = ["jansson.h", "jansson_config.h", "utf8proc.h", "microhttpd.h", "histedit.h"]
LIBS = ["jansson", "utf8proc", "microhttpd", "edit"]
CARRY_LIMIT_MIB = 64

# inside the namespace every pip's index is this loopback server, which records each request:
# a pip that consults an index (no --no-index) is caught, not merely failed
TRIPWIRE = r"""
import fcntl, http.server, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a new network namespace's lo is down
ifr = bytearray(struct.pack("16sH14x", b"lo", 0))
fcntl.ioctl(s, 0x8913, ifr)  # SIOCGIFFLAGS
struct.pack_into("H", ifr, 16, struct.unpack_from("H", ifr, 16)[0] | 1)  # IFF_UP
fcntl.ioctl(s, 0x8914, bytes(ifr))  # SIOCSIFFLAGS
log, portfile = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(log, "a") as f:
            f.write(f"NETWORK: pip asked an index for {self.path}\n")
        self.send_error(404)
    do_HEAD = do_GET
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os; os.rename(portfile + ".tmp", portfile)
srv.serve_forever()
"""


def _unshare_reason() -> str | None:
    if not shutil.which("unshare"):
        return "no unshare(1) (util-linux)"
    p = subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True, text=True)
    if p.returncode != 0:
        return f"unshare -n -m is not permitted here ({p.stderr.strip()}): needs root or user namespaces"
    return None


UNSHARE_REASON = _unshare_reason()
pytestmark = pytest.mark.skipif(UNSHARE_REASON is not None, reason=str(UNSHARE_REASON))


def system_files() -> tuple[list[Path], list[Path]]:
    """The system's headers and library files (symlinks kept) of the four libraries."""
    heads = [Path("/usr/include") / h for h in HEADERS]
    libs = []
    for name in LIBS:
        so = subprocess.run(["cc", f"-print-file-name=lib{name}.so"], capture_output=True,
                            text=True).stdout.strip()
        if not so or not os.path.isabs(so):
            pytest.skip(f"lib{name}.so is not installed here (make deps): no fake bundle to make")
        libs += sorted(Path(so).parent.glob(f"lib{name}.so*"))
    missing = [h for h in heads if not h.exists()]
    if missing:
        pytest.skip(f"headers not installed here (make deps): {missing}")
    return heads, libs


def hidden_paths() -> list[str]:
    """Real files to cover with /dev/null: the headers, the libraries, xz."""
    heads, libs = system_files()
    out = {os.path.realpath(p) for p in heads + libs}
    xz = shutil.which("xz")
    if xz:
        out.add(os.path.realpath(xz))
    return sorted(out)


def write_exe(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def fake_wheel(folder: Path, name: str, version: str) -> None:
    dist = f"{name}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}/__init__.py", f'__version__ = "{version}"\n'
                   + ("def tqdm(*a, **k):\n    return None\n" if name == "tqdm" else ""))
        z.writestr(f"{dist}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: kipp-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")


def pin(name: str) -> str:
    for line in (REPO_ROOT / "tools" / "requirements.txt").read_text().splitlines():
        if line.lower().startswith(name + "=="):
            return line.split("#")[0].strip().split("==")[1]
    raise AssertionError(f"no {name} pin in tools/requirements.txt")


def make_fake_bundle(bundle: Path) -> None:
    """The layout prepare_offline.sh writes, from this machine's files and two stand-in wheels
    (pure Python, for the Python running this test: the real bundle's are for the GPU host's)."""
    heads, libs = system_files()
    inc = bundle / "prefix" / "usr" / "include"
    lib = bundle / "prefix" / "usr" / "lib" / "x86_64-linux-gnu"
    inc.mkdir(parents=True)
    lib.mkdir(parents=True)
    for h in heads:
        shutil.copy2(h, inc / h.name)
    if Path("/usr/include/editline").is_dir():
        shutil.copytree("/usr/include/editline", inc / "editline")
    for f in libs:
        if f.is_symlink():
            (lib / f.name).symlink_to(os.readlink(f))
        else:
            shutil.copy2(f, lib / f.name)
    xz = shutil.which("xz")
    if xz:
        (bundle / "prefix-deps" / "usr" / "bin").mkdir(parents=True)
        shutil.copy2(os.path.realpath(xz), bundle / "prefix-deps" / "usr" / "bin" / "xz")
    (bundle / "wheels").mkdir()
    fake_wheel(bundle / "wheels", "numpy", pin("numpy"))
    fake_wheel(bundle / "wheels", "tqdm", pin("tqdm"))
    unlink_as_prepare_does(bundle)
    (bundle / "MANIFEST.txt").write_text(
        "# fake bundle (tests/tools/test_device_gate_offline.py)\nmade=test\n"
        f"python={sys.version_info.major}.{sys.version_info.minor}\n")


def unlink_as_prepare_does(bundle: Path) -> None:
    """No links in a bundle: LINKS.txt lists them, offline_deps.sh makes them again."""
    links = sorted(p for p in bundle.rglob("*") if p.is_symlink())
    (bundle / "LINKS.txt").write_text(
        "".join(f"{p.relative_to(bundle)} {os.readlink(p)}\n" for p in links))
    for p in links:
        p.unlink()


NET_STANDIN = """#!/bin/sh
echo "NETWORK: $(basename "$0") $*" >>"$KIPP_TEST_NETLOG"
echo "$(basename "$0"): no network on this host (test stand-in)" >&2
exit 1
"""

# the build and model steps check what the real ones need; `deps` is the network
FAKE_MAKE = r"""#!/bin/bash
prev=""; targets=()
for a in "$@"; do
    if [ "$a" = deps ] && [ "$prev" != -o ]; then
        echo "NETWORK: make deps (scripts/setup.sh: apt-get, pip)" >>"$KIPP_TEST_NETLOG"
        echo "make: deps needs the network (test stand-in)" >&2; exit 1
    fi
    case "$a" in -*|*=*) ;; *) [ "$prev" = -o ] || targets+=("$a") ;; esac
    prev=$a
done
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
for a in "${targets[@]}"; do
  case "$a" in
    cuda-generic)
        printf '%s\n' '#include <jansson.h>' '#include <utf8proc.h>' '#include <microhttpd.h>' \
            '#include <histedit.h>' \
            'int main(void) { json_t *j = json_integer(3); return !(json_integer_value(j) == 3 &&' \
            '    utf8proc_version() && MHD_get_version() && history_init()); }' >"$t/b.c"
        cc -o "$t/b" "$t/b.c" -ljansson -lutf8proc -lmicrohttpd -ledit && "$t/b" ||
            { echo "fake build: the libraries do not build, link or run"; exit 2; }
        echo "fake build: libraries OK" ;;
    test-cuda) echo "   -> cuda operators: 4 passed, 0 failed (1 s)"; echo "4 passed, 0 failed" ;;
    random-model)
        .venv/bin/python -c 'import numpy, tqdm; print("fake model: numpy", numpy.__version__)' ||
            { echo "fake model: .venv has no numpy/tqdm"; exit 2; }
        xz --version >/dev/null || { echo "fake model: no xz"; exit 2; } ;;
  esac
done
"""
FAKE_SMI = '#!/bin/sh\necho "NVIDIA H200, 570.124.06, 143771 MiB"\n'
FAKE_NVCC = '#!/bin/sh\necho "Cuda compilation tools, release 12.8, V12.8.93"\n'
FAKE_TEST = '#!/bin/sh\necho "cpu-vs-ref shape gate: $2 worst NMSE 2e-06, tolerance 1e-04"\necho "4 passed, 0 failed"\n'


@pytest.fixture
def host(tmp_path):
    """A repository root (tools/requirements.txt, the fake shape-gate binary) and the
    environment of a GPU host without network."""
    root, fbin = tmp_path / "root", tmp_path / "bin"
    (root / "tools").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "tools" / "requirements.txt", root / "tools" / "requirements.txt")
    write_exe(root / "build" / "kipp_test_cuda", FAKE_TEST)
    write_exe(fbin / "make", FAKE_MAKE)
    write_exe(fbin / "nvidia-smi", FAKE_SMI)
    write_exe(fbin / "nvcc", FAKE_NVCC)
    for n in ("apt-get", "apt", "sudo", "curl", "wget", "pip", "pip3"):
        write_exe(fbin / n, NET_STANDIN)
    netlog = tmp_path / "network.log"
    env = dict(os.environ, PATH=f"{fbin}:{os.environ['PATH']}", KIPP_TEST_NETLOG=str(netlog),
               PYTHON_BOOTSTRAP=sys.executable, KIPP_TEST_TRIPWIRE=str(tmp_path / "tripwire.py"),
               # no machine-wide pip configuration (find-links, indexes); quick to give up
               PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0", PIP_TIMEOUT="2")
    (tmp_path / "tripwire.py").write_text(TRIPWIRE)
    for k in ("KIPP_GATE_OFFLINE", "KIPP_OFFLINE_BUNDLE", "KIPP_GATE_PYTHON", "PEER_DL",
              "C_INCLUDE_PATH", "CPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PIP_NO_INDEX",
              "PIP_FIND_LINKS"):
        env.pop(k, None)
    return root, env, netlog


def isolated(cmd: list[str], cwd: Path, env: dict, timeout: int = 60) -> subprocess.CompletedProcess:
    """cmd with no network (but the pip tripwire on loopback) and the system's Kipp libraries
    and xz hidden."""
    binds = "".join(f"mount --bind /dev/null {shlex.quote(p)} && " for p in hidden_paths())
    port = f"{env['KIPP_TEST_TRIPWIRE']}.port"
    script = (f"{binds}rm -f {port}; {shlex.quote(sys.executable)} \"$KIPP_TEST_TRIPWIRE\" "
              f"\"$KIPP_TEST_NETLOG\" {port} </dev/null >/dev/null 2>&1 & tw=$!; "
              f"for i in $(seq 100); do [ -s {port} ] && break; sleep 0.05; done; "
              f"[ -s {port} ] || {{ echo 'test: the pip tripwire did not start'; exit 99; }}; "
              f"export PIP_INDEX_URL=http://127.0.0.1:$(cat {port})/simple PIP_TRUSTED_HOST=127.0.0.1; "
              f"{shlex.join(cmd)}; rc=$?; kill $tw; exit $rc")
    return subprocess.run(["unshare", "-n", "-m", "bash", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def gate(root: Path, env: dict, *args) -> tuple[int, str, dict]:
    log = root / "gate.log"
    p = isolated(["bash", str(GATE), "--root", str(root), "--log", str(log), "--skip-4b",
                  "--skip-bench", "--jobs", "2", *args], root, env, timeout=120)
    text = log.read_text() if log.exists() else p.stdout + p.stderr
    out = root / "gate.json"
    subprocess.run([sys.executable, str(COLLECT), str(log), "-o", str(out)], capture_output=True,
                   timeout=60)
    doc = json.loads(out.read_text()) if out.exists() else {}
    return p.returncode, text, doc


def step(doc: dict, name: str) -> dict:
    return next(s for s in doc["steps"] if s["name"] == name)


def assert_no_network(netlog: Path, text: str) -> None:
    tried = netlog.read_text() if netlog.exists() else ""
    assert tried == "", f"the offline path tried the network:\n{tried}\n--- log ---\n{text[-4000:]}"


def test_hidden_really_hidden(host):
    # the premise: inside the namespace this machine lacks the libraries and xz
    root, env, _ = host
    p = isolated(["bash", "-c", "printf '#include <jansson.h>\\nint main(void){return !json_integer(1);}' "
                  "| cc -x c - -o /dev/null -ljansson; echo cc=$?; xz --version; echo xz=$?; "
                  "getent hosts deb.debian.org; echo net=$?"], root, env)
    got = dict(line.split("=") for line in p.stdout.splitlines() if line[:3] in ("cc=", "xz=", "net"))
    assert got["cc"] != "0" and got["xz"] != "0" and got["net"] != "0", p.stdout + p.stderr


def test_offline_gate_from_a_bundle(host):
    root, env, netlog = host
    make_fake_bundle(root / "build" / "offline")
    # no --offline: the bundle's presence chooses the offline path
    rc, text, doc = gate(root, env)
    assert_no_network(netlog, text)
    assert rc == 0, text[-4000:]
    assert "### kipp-gate INFO options=" in text and "offline=1" in text
    assert doc["plan"][:3] == ["deps", "build", "test-cuda"]
    assert step(doc, "deps")["status"] == "pass"
    assert "$ make deps" not in text and "offline_deps.sh --bundle build/offline" in text
    assert "C libraries: the bundle's" in text
    assert "xz: the bundle's" in text
    assert "from the bundle's wheels" in text
    # the build, the models and the GPU gate each ran with -o deps and found what they need
    assert "fake build: libraries OK" in text and step(doc, "build")["status"] == "pass"
    assert f"fake model: numpy {pin('numpy')}" in text
    assert text.count("$ make -o deps ") >= 3, text
    assert doc["passed"] and doc["complete"]


def test_offline_without_bundle_names_what_is_missing(host):
    # --offline on a host lacking the libraries and no bundle: the deps step fails and says
    # what is missing, still without touching the network
    root, env, netlog = host
    (root / ".venv").symlink_to(REPO_ROOT / ".venv")  # Python is not what this one checks
    rc, text, doc = gate(root, env, "--offline")
    assert_no_network(netlog, text)
    assert rc == 1
    assert step(doc, "deps")["status"] == "fail"
    assert "MISSING: libjansson/libutf8proc/libmicrohttpd/libedit" in text
    assert "MISSING: xz" in text
    assert "$ make deps" not in text


def test_online_still_runs_make_deps(host):
    root, env, netlog = host
    make_fake_bundle(root / "build" / "offline")
    rc, text, doc = gate(root, env, "--online")
    assert "$ make deps" in text and step(doc, "deps")["status"] == "fail"
    assert "make deps" in netlog.read_text()  # the stand-in saw it: the check can fail


@pytest.mark.skipif(not (REAL_BUNDLE / "MANIFEST.txt").exists(),
                    reason="no build/offline (run tools/ops/prepare_offline.sh to check the real bundle)")
def test_real_bundle(host, tmp_path):
    root, env, netlog = host
    manifest = (REAL_BUNDLE / "MANIFEST.txt").read_text()
    for p in ("libjansson4", "libjansson-dev", "libutf8proc2", "libutf8proc-dev",
              "libmicrohttpd12", "libmicrohttpd-dev", "libedit2", "libedit-dev", "xz-utils"):
        assert f" {p} " in manifest, f"{p} not in the bundle"
    size = int(subprocess.run(["du", "-sm", str(REAL_BUNDLE)], capture_output=True, text=True)
               .stdout.split()[0])
    assert size <= CARRY_LIMIT_MIB, f"build/offline is {size} MiB, over the {CARRY_LIMIT_MIB} MiB carry limit"
    links = (REAL_BUNDLE / "LINKS.txt").read_text()
    assert " libjansson.so.4" in links  # the .so names travel as a list, not as links
    assert not [p for p in REAL_BUNDLE.rglob("*") if p.is_symlink()], "links in the bundle"
    # its libraries and xz, with the system's hidden (Python: this tree's .venv), from a copy
    # (offline_deps.sh makes the links again, in the bundle)
    bundle = tmp_path / "bundle"
    for part in ("prefix", "prefix-deps"):
        shutil.copytree(REAL_BUNDLE / part, bundle / part, symlinks=True)
    for part in ("MANIFEST.txt", "LINKS.txt"):
        shutil.copy2(REAL_BUNDLE / part, bundle / part)
    (root / ".venv").symlink_to(REPO_ROOT / ".venv")
    p = isolated(["bash", str(OFFLINE_DEPS), "--bundle", str(bundle)], root, env)
    assert_no_network(netlog, p.stdout + p.stderr)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "C libraries: the bundle's" in p.stdout and "xz: the bundle's" in p.stdout
    # its wheels resolve, without an index, for the Python it was made for
    pyv = next(line.split("=", 1)[1] for line in manifest.splitlines() if line.startswith("python="))
    abi = "cp" + pyv.replace(".", "")
    plats = [a for m in ("2_17", "2_27", "2_28") for a in ("--platform", f"manylinux_{m}_x86_64")]
    p = isolated([str(REPO_ROOT / ".venv" / "bin" / "python"), "-m", "pip", "install", "-q",
                  "--dry-run", "--target", str(tmp_path / "t"), "--no-index", "--find-links",
                  str(REAL_BUNDLE / "wheels"), "--python-version", pyv, "--only-binary", ":all:",
                  "--implementation", "cp", "--abi", abi, *plats, "--report", "-",
                  f"numpy=={pin('numpy')}", f"tqdm=={pin('tqdm')}"], root, env)
    assert p.returncode == 0, p.stdout + p.stderr
    got = sorted(i["metadata"]["name"] for i in json.loads(p.stdout)["install"])
    assert got == ["numpy", "tqdm"]
    assert list((REAL_BUNDLE / "wheels").glob("pip-*.whl")), "no pip wheel (hosts without ensurepip)"
