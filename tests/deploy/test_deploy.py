"""Offline checks of the deployment files in deploy/ (stage `deploy`, docs/deploy.md).

Nothing here starts a server, a balancer or a cluster: the files are checked as data.
- yamllint (deploy/.yamllint) over deploy/ and over the endpoint picker's configuration
  embedded in a ConfigMap;
- Kubernetes manifests: the core kinds against kubernetes-validate's bundled schemas (strict:
  an unknown field is an error; no network), the InferencePool against
  tests/deploy/inferencepool-v1.schema.json (written from the CRD), the HTTPRoute by its
  fields; the cross-references between them (labels, ports, names, the pool's picker);
- the grace-period arithmetic: terminationGracePeriodSeconds > preStop + --drain-delay +
  --shutdown-timeout, and each balancer's time to notice a draining replica below its
  --drain-delay;
- `haproxy -c` on each deploy/haproxy/*.cfg, and the settings the guide relies on;
- the vllm-router launch scripts run against a stand-in binary that records its arguments:
  every flag in `vllm-router --help`, the whole command line accepted by vllm-router's own
  parser, the KV block size equal to Kipp's;
- every kipp-server flag used in deploy/ and docs/deploy.md against `kipp-server --help`.
Environment: BUILD (default build) picks $BUILD/kipp-server.
"""

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BUILD = os.environ.get("BUILD") or "build"
KIPP_SERVER = ROOT / BUILD / "kipp-server"
VENV_BIN = Path(sys.executable).parent
DEPLOY_DOC = ROOT / "docs" / "deploy.md"

# kipp-server flags that deploy/ uses before the change adding them is merged (issue 35:
# the drain delay, vLLM-named metrics, KV events). The lead empties this list on merging;
# from then on every flag must be in `kipp-server --help`.
PENDING_KIPP_FLAGS: set[str] = set()

# Kinds with no schema in kubernetes-validate (CRDs), checked here by other means.
CRD_KINDS = {("inference.networking.k8s.io/v1", "InferencePool"),
             ("gateway.networking.k8s.io/v1", "HTTPRoute")}
CORE_KINDS = {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "ServiceAccount",
              "Role", "RoleBinding"}
# The Kubernetes versions the manifests must be valid in: the oldest with every feature
# they use (gRPC probes: 1.27; policy/v1: 1.21), and the newest the package knows.
K8S_VERSIONS = ("1.30.0", "latest")

# The vLLM metric names llm-d's endpoint picker reads by default (llm-d/llm-d-router,
# core-metrics-extractor's vllm engine), which kipp-server --metrics-compat vllm exports.
EPP_VLLM_METRICS = ("vllm:num_requests_waiting", "vllm:num_requests_running",
                    "vllm:kv_cache_usage_perc", "vllm:cache_config_info")

FLAG_RE = re.compile(r"^--?[a-z][a-z0-9-]*$")


# ---- helpers ---------------------------------------------------------------------------

def k8s_docs():
    """Every YAML document of deploy/k8s/*.yaml as (file name, document)."""
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((path.name, doc))
    assert out, f"no manifests in {K8S}"
    return out


def find(kind, name=None):
    hits = [d for _, d in k8s_docs()
            if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''} in deploy/k8s, found {len(hits)}"
    return hits[0]


def kipp_container():
    """The kipp-server container of the Deployment and its args as a {flag: value} dict."""
    dep = find("Deployment", "kipp-server")
    spec = dep["spec"]["template"]["spec"]
    (c,) = [c for c in spec["containers"] if c.get("command", [""])[0].endswith("kipp-server")]
    args = c["args"]
    opts = {}
    for i, a in enumerate(args):
        if a.startswith("--"):
            flag, eq, val = a.partition("=")
            if eq:
                opts[flag] = val
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                opts[flag] = args[i + 1]
            else:
                opts[flag] = None
    return spec, c, opts


def logical_lines(text):
    """Lines with leading comment markers removed and backslash continuations joined,
    as (line number of the first, text)."""
    out, cur, start = [], "", None
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"^\s*#+\s?", "", raw).rstrip()
        if start is None:
            start = n
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append((start, cur + line))
        cur, start = "", None
    if cur:
        out.append((start, cur))
    return out


def command_flags(text, prog):
    """The flags given to `prog` in command lines written in text: (line, flag) pairs.
    A command is `prog` (or a path ending in it) followed by a space; its words end at a
    shell operator, a comment or the end of inline code."""
    found = []
    for n, line in logical_lines(text):
        for m in re.finditer(r"(?<![\w.-])" + re.escape(prog) + r"(?=\s)", line):
            for tok in line[m.end():].split():
                if tok.startswith("#") or tok in ("|", "||", "&", "&&", ";", ")"):
                    break
                word = tok.strip("`'\"").split("=", 1)[0].rstrip(",.;:)")
                if FLAG_RE.match(word):
                    found.append((n, word))
                if tok.endswith("`"):
                    break
    return found


def help_flags(text):
    return set(re.findall(r"(?<![\w-])(--?[a-z][a-z0-9-]*)", text))


def deploy_text_files():
    files = [p for p in sorted(DEPLOY.rglob("*")) if p.is_file()]
    if DEPLOY_DOC.exists():
        files.append(DEPLOY_DOC)
    return files


def kipp_block_size():
    """Kipp's KV block size in tokens, from the start-up line quoted in docs/server.md."""
    m = re.search(r"KV pool \d+ blocks of (\d+) tokens", (ROOT / "docs/server.md").read_text())
    assert m, "docs/server.md no longer quotes a start-up line with 'KV pool N blocks of M tokens'"
    return int(m.group(1))


def seconds(v):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", str(v))
    assert m, f"not a duration: {v!r}"
    x = float(m.group(1))
    return x / 1000 if m.group(2) == "ms" else x * 60 if m.group(2) == "m" else x


def drain_delay_in(text, where):
    """The --drain-delay of the kipp-server command line quoted in a file's comments."""
    for n, line in logical_lines(text):
        m = re.search(r"\bkipp-server\s.*--drain-delay[ =](\d+(?:\.\d+)?)", line)
        if m:
            return float(m.group(1))
    raise AssertionError(f"{where}: no kipp-server command line with --drain-delay")


# ---- yamllint ----------------------------------------------------------------------------

def test_yamllint():
    r = subprocess.run([sys.executable, "-m", "yamllint", "-f", "parsable", "-c",
                        str(DEPLOY / ".yamllint"), str(DEPLOY)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, "yamllint:\n" + r.stdout + r.stderr


def test_yamllint_embedded_configs():
    """The endpoint picker's configurations inside the ConfigMap, linted as files."""
    from yamllint import linter
    from yamllint.config import YamlLintConfig
    conf = YamlLintConfig(file=str(DEPLOY / ".yamllint"))
    cm = find("ConfigMap", "kipp-epp-config")
    assert cm["data"], "kipp-epp-config has no data"
    for key, text in cm["data"].items():
        problems = [f"{key}:{p.line}: {p.desc} ({p.rule})" for p in linter.run(text, conf)
                    if p.level == "error"]
        assert not problems, "\n".join(problems)


# ---- Kubernetes ----------------------------------------------------------------------------

def test_core_kinds_validate_offline():
    import kubernetes_validate
    from kubernetes_validate.utils import latest_version
    seen = set()
    errors = []
    for fname, doc in k8s_docs():
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key in CRD_KINDS:
            continue
        for v in K8S_VERSIONS:
            version = latest_version() if v == "latest" else v
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{fname}: {doc['kind']}/{doc['metadata'].get('name')} "
                              f"(Kubernetes {version}): {'.'.join(map(str, e.path))}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError:
                errors.append(f"{fname}: no schema for {key[1]} {key[0]} in Kubernetes {version} "
                              "(a typo, or a CRD this test does not know)")
        seen.add(doc["kind"])
    assert not errors, "\n".join(errors)
    assert CORE_KINDS <= seen, f"kinds missing from deploy/k8s: {sorted(CORE_KINDS - seen)}"


def test_inferencepool_schema():
    schema = json.loads((ROOT / "tests/deploy/inferencepool-v1.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    pool = find("InferencePool")
    errs = [f"{'.'.join(map(str, e.path))}: {e.message}"
            for e in jsonschema.Draft202012Validator(schema).iter_errors(pool)]
    assert not errs, "InferencePool:\n" + "\n".join(errs)
    # llm-d needs the picker (the CRD alone lets it be absent).
    assert "endpointPickerRef" in pool["spec"], "InferencePool has no endpointPickerRef"


def test_inferencepool_wiring():
    pool = find("InferencePool")
    spec, c, opts = kipp_container()
    labels = find("Deployment", "kipp-server")["spec"]["template"]["metadata"]["labels"]
    sel = pool["spec"]["selector"]["matchLabels"]
    assert sel.items() <= labels.items(), f"pool selector {sel} does not select the pods {labels}"
    ports = [p["number"] for p in pool["spec"]["targetPorts"]]
    assert ports == [int(opts["--port"])], f"pool targetPorts {ports} != kipp-server --port"
    ref = pool["spec"]["endpointPickerRef"]
    svc = find("Service", ref["name"])
    assert ref["port"]["number"] in [p["port"] for p in svc["spec"]["ports"]], \
        f"endpointPickerRef port {ref['port']['number']} is not a port of Service {ref['name']}"
    epp = find("Deployment", svc["spec"]["selector"]["app.kubernetes.io/name"])
    ec = epp["spec"]["template"]["spec"]["containers"][0]
    args = ec["args"]
    assert args[args.index("--pool-name") + 1] == pool["metadata"]["name"], "EPP --pool-name"
    cfg_path = args[args.index("--config-file") + 1]
    mount = [m for m in ec["volumeMounts"] if cfg_path.startswith(m["mountPath"] + "/")]
    assert mount, f"EPP --config-file {cfg_path} is on no mounted volume"
    vol = [v for v in epp["spec"]["template"]["spec"]["volumes"] if v["name"] == mount[0]["name"]]
    cm = find("ConfigMap", vol[0]["configMap"]["name"])
    assert Path(cfg_path).name in cm["data"], f"{cfg_path} is not a key of the ConfigMap"
    route = find("HTTPRoute")
    backends = [b for r in route["spec"]["rules"] for b in r["backendRefs"]]
    assert any(b.get("kind") == "InferencePool" and b.get("group") == "inference.networking.k8s.io"
               and b["name"] == pool["metadata"]["name"] for b in backends), \
        "HTTPRoute does not send to the InferencePool"
    assert all(p.get("kind", "Gateway") == "Gateway" for p in route["spec"]["parentRefs"])


def test_endpoint_picker_configs():
    """Each EndpointPickerConfig parses, every pluginRef names a declared plugin, the metrics
    extractor reads vLLM's names, and the precise variant matches Kipp's blocks and event port."""
    cm = find("ConfigMap", "kipp-epp-config")
    spec, c, opts = kipp_container()
    labels = find("Deployment", "kipp-server")["spec"]["template"]["metadata"]["labels"]
    for key, text in cm["data"].items():
        cfg = yaml.safe_load(text)
        assert cfg["kind"] == "EndpointPickerConfig", key
        declared = {p.get("name", p["type"]) for p in cfg["plugins"]}
        refs = [r["pluginRef"] for prof in cfg["schedulingProfiles"] for r in prof["plugins"]]
        refs += [s["pluginRef"] for s in cfg.get("dataLayer", {}).get("sources", [])]
        refs += [e["pluginRef"] for s in cfg.get("dataLayer", {}).get("sources", [])
                 for e in s.get("extractors", [])]
        assert set(refs) <= declared, f"{key}: undeclared plugins {sorted(set(refs) - declared)}"
        ext = [p for p in cfg["plugins"] if p["type"] == "core-metrics-extractor"]
        assert ext, f"{key}: no core-metrics-extractor (the scorers would have no metrics)"
        engine = (ext[0].get("parameters") or {}).get("defaultEngine", "vllm")
        assert engine == "vllm", f"{key}: metrics extractor engine {engine}, not vllm"
        for p in cfg["plugins"]:
            if p["type"] != "precise-prefix-cache-producer":
                continue
            par = p["parameters"]
            assert par["tokenProcessorConfig"]["blockSize"] == kipp_block_size(), \
                f"{key}: blockSize != Kipp's KV block size"
            disc = par["kvEventsConfig"]["podDiscoveryConfig"]
            ev_port = int(opts["--kv-events"].rsplit(":", 1)[1])
            assert disc["socketPort"] == ev_port, f"{key}: socketPort != kipp-server --kv-events port"
            k, v = disc["podLabelSelector"].split("=")
            assert labels.get(k) == v, f"{key}: podLabelSelector {k}={v} matches no pod label"
    assert opts.get("--metrics-compat") == "vllm", "kipp-server runs without --metrics-compat vllm"
    doc = (ROOT / "docs/server.md").read_text()
    if "--metrics-compat" in doc:  # once the metrics change is merged
        missing = [m for m in EPP_VLLM_METRICS if m not in doc]
        assert not missing, f"docs/server.md's --metrics-compat vllm lacks {missing}"


def test_grace_period_covers_drain():
    spec, c, opts = kipp_container()
    drain = float(opts.get("--drain-delay") or 0)
    shutdown = float(opts.get("--shutdown-timeout") or 30)  # kipp-server's default
    pre = 0.0
    hook = c.get("lifecycle", {}).get("preStop", {})
    if "sleep" in hook:
        pre = float(hook["sleep"]["seconds"])
    elif "exec" in hook:
        m = re.search(r"sleep\s+(\d+(?:\.\d+)?)", " ".join(hook["exec"]["command"]))
        pre = float(m.group(1)) if m else 0.0
    grace = spec.get("terminationGracePeriodSeconds", 30)
    assert grace > pre + drain + shutdown, (
        f"terminationGracePeriodSeconds {grace} <= preStop {pre:g} + --drain-delay {drain:g} "
        f"+ --shutdown-timeout {shutdown:g}: the kubelet would SIGKILL a draining replica")
    assert drain > 0, "no --drain-delay: requests routed during endpoint removal are refused"


def test_probes():
    spec, c, opts = kipp_container()
    port_names = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert port_names["http"] == int(opts["--port"]), "container port http != --port"
    want = {"startupProbe": "/health", "readinessProbe": "/health", "livenessProbe": "/livez"}
    for probe, path in want.items():
        assert probe in c, f"kipp-server container has no {probe}"
        get = c[probe]["httpGet"]
        assert get["path"] == path, f"{probe} asks {get['path']}, not {path}"
        assert get["port"] in port_names or get["port"] == int(opts["--port"]), \
            f"{probe} port {get['port']} is not the container's"
    # /health is 503 while loading: the startup probe must wait for the load.
    st = c["startupProbe"]
    assert st["periodSeconds"] * st["failureThreshold"] >= 120, "startup probe gives < 2 minutes"
    ev = opts["--kv-events"].rsplit(":", 1)[1]
    assert port_names["kv-events"] == int(ev), "container port kv-events != --kv-events port"
    assert c["image"] == "kipp-server:latest", "the image docs/deploy.md names"
    pdb = find("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= \
        find("Deployment", "kipp-server")["spec"]["template"]["metadata"]["labels"].items()


# ---- HAProxy -----------------------------------------------------------------------------

HAPROXY_CFGS = sorted((DEPLOY / "haproxy").glob("*.cfg"))


@pytest.mark.parametrize("cfg", HAPROXY_CFGS, ids=lambda p: p.name)
def test_haproxy_check(cfg):
    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    assert Path(exe).exists(), "haproxy is not installed (setup.sh installs Debian's haproxy)"
    r = subprocess.run([exe, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"haproxy -c -f {cfg.name}:\n{r.stdout}{r.stderr}"
    text = cfg.read_text()
    lines = [re.sub(r"#.*", "", ln).strip() for ln in text.splitlines()]
    for need in ("balance hdr(X-Session-Id)", "hash-type consistent", "option httpchk GET /health",
                 "http-check expect status 200", "option redispatch 1"):
        assert need in lines, f"{cfg.name}: no '{need}'"
    assert any(re.fullmatch(r"hash-balance-factor \d+", ln) for ln in lines), \
        f"{cfg.name}: no bounded load (hash-balance-factor)"
    assert any(re.fullmatch(r"retries [1-9]", ln) for ln in lines), f"{cfg.name}: no retries"
    assert any(ln.startswith("retry-on ") and "conn-failure" in ln for ln in lines), \
        f"{cfg.name}: no retry-on conn-failure"
    assert not any(re.search(r"\bretry-on\b.*\b(503|all-retryable-errors)\b", ln) for ln in lines), \
        f"{cfg.name}: retrying a 503 multiplies an overload"
    assert any(re.match(r"stats socket \S+ .*level admin", ln) for ln in lines), \
        f"{cfg.name}: no runtime API socket at level admin (the drain procedure needs it)"
    assert not any("shutdown-sessions" in ln for ln in lines), \
        f"{cfg.name}: on-marked-down shutdown-sessions would cut a draining replica's streams"


def test_haproxy_notices_drain_in_time():
    """A draining replica's 503s mark it DOWN (inter x fall) before its listener closes."""
    text = (DEPLOY / "haproxy/haproxy.cfg").read_text()
    m = re.search(r"^\s*default-server\s.*\binter (\S+).*\bfall (\d+)", text, re.M)
    assert m, "haproxy.cfg: default-server without inter and fall"
    notice = seconds(m.group(1)) * int(m.group(2))
    drain = drain_delay_in(text, "haproxy.cfg")
    assert drain > notice, f"--drain-delay {drain:g} s <= HAProxy's {notice:g} s to notice"


# ---- vllm-router ---------------------------------------------------------------------------

ROUTER_SCRIPTS = sorted((DEPLOY / "vllm-router").glob("*.sh"))


@functools.lru_cache(maxsize=None)
def vllm_router_help():
    r = subprocess.run([str(vllm_router_exe()), "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"vllm-router --help: {r.stderr}"
    return r.stdout


def vllm_router_exe():
    exe = VENV_BIN / "vllm-router"
    if not exe.exists():
        exe = Path(shutil.which("vllm-router") or "vllm-router")
    assert exe.exists(), "vllm-router is not installed (tools/requirements.txt)"
    return exe


def router_argv(script, tmp_path):
    """The arguments `script` gives vllm-router, recorded by a stand-in binary."""
    out = tmp_path / f"{script.stem}.json"
    stub = tmp_path / "vllm-router-stub"
    stub.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"json.dump(sys.argv[1:], open({str(out)!r}, 'w'))\n")
    stub.chmod(0o755)
    env = dict(os.environ, VLLM_ROUTER=str(stub), MODEL_NAME="qwen3-4b")
    r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"{script.name}: {r.stderr}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("script", ROUTER_SCRIPTS, ids=lambda p: p.name)
def test_vllm_router_flags(script, tmp_path):
    known = help_flags(vllm_router_help())
    argv = router_argv(script, tmp_path)
    unknown = [a for a in argv if a.startswith("--") and a.split("=")[0] not in known]
    assert not unknown, f"{script.name}: not in `vllm-router --help`: {unknown}"
    from vllm_router.launch_router import parse_router_args
    try:
        args = parse_router_args(argv)
    except SystemExit:
        pytest.fail(f"{script.name}: vllm-router's parser refuses {shlex.join(argv)}")
    assert args.worker_urls, f"{script.name}: no workers"
    assert args.health_check_endpoint == "/health"
    # The router notices a draining replica before the replica's listener closes.
    notice = args.health_check_interval_secs * args.health_failure_threshold \
        + args.health_check_timeout_secs
    drain = drain_delay_in(script.read_text(), script.name)
    assert drain > notice, f"{script.name}: --drain-delay {drain:g} s <= {notice:g} s to notice"
    if args.policy == "kv_aware":
        assert args.kv_event_block_size == kipp_block_size(), \
            f"{script.name}: --kv-event-block-size != Kipp's KV block size"
        for flag in ("kv_event_source", "kv_event_replay_source"):
            urls = [s.split("=", 1)[0] for s in getattr(args, flag)]
            assert sorted(urls) == sorted(args.worker_urls), \
                f"{script.name}: --{flag.replace('_', '-')} does not cover every worker"
        assert args.kv_event_model, f"{script.name}: no --kv-event-model"
    else:
        assert args.policy == "cache_aware", f"{script.name}: policy {args.policy}"


def test_vllm_router_flags_in_docs():
    known = help_flags(vllm_router_help())
    bad = [f"{p.relative_to(ROOT)}:{n}: {flag}" for p in deploy_text_files()
           for n, flag in command_flags(p.read_text(), "vllm-router") if flag not in known]
    assert not bad, "vllm-router flags not in its --help:\n" + "\n".join(bad)


# ---- kipp-server flags -----------------------------------------------------------------------

def test_kipp_server_flags():
    assert KIPP_SERVER.exists(), f"{KIPP_SERVER} is not built (make)"
    r = subprocess.run([str(KIPP_SERVER), "--help"], capture_output=True, text=True, timeout=30)
    known = help_flags(r.stdout + r.stderr)
    assert "--shutdown-timeout" in known, "kipp-server --help did not list its flags"
    used = []
    spec, c, opts = kipp_container()
    used += [("deploy/k8s/kipp-server.yaml", 0, f) for f in opts]
    for p in deploy_text_files():
        used += [(str(p.relative_to(ROOT)), n, f) for n, f in command_flags(p.read_text(),
                                                                           "kipp-server")]
    assert len(used) > 20, "found almost no kipp-server command lines in deploy/"
    bad = [f"{where}:{n}: {flag}" for where, n, flag in used
           if flag not in known and flag not in PENDING_KIPP_FLAGS]
    assert not bad, "kipp-server flags not in its --help:\n" + "\n".join(bad)
