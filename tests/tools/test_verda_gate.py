"""Tests for tools/ops/verda_cuda_gate.sh against a loopback fake of the Verda API and fake
ssh/scp (tests/tools/fake_verda.py): nothing is rented, nothing leaves the machine.

What must hold: without --i-accept-the-cost it refuses before any API call; bad credentials stop
it before anything is created; and once an instance was ordered, it and its volumes are deleted
on every way out: success, a failing remote gate, a failed or stuck provisioning, SIGINT/SIGTERM
in the middle of the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fake_verda  # noqa: E402

REPO_ROOT = HERE.parents[1]
SCRIPT = REPO_ROOT / "tools" / "ops" / "verda_cuda_gate.sh"
COLLECT = REPO_ROOT / "tools" / "ops" / "collect_cuda_gates.py"
LOGS = HERE / "data" / "cuda_gates"


@pytest.fixture
def api():
    fv = fake_verda.FakeVerda().start()
    yield fv
    fv.stop()


@pytest.fixture
def repo(tmp_path):
    """A small git repository holding the two scripts, so the bundle the script makes is tiny."""
    r = tmp_path / "repo"
    (r / "tools" / "ops").mkdir(parents=True)
    for f in (SCRIPT, COLLECT):
        shutil.copy2(f, r / "tools" / "ops" / f.name)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-q", "-m", "x"]):
        subprocess.run(cmd, cwd=r, check=True, env=env, capture_output=True)
    return r


def env_for(api, tmp_path, **extra) -> dict:
    fake = f"{sys.executable} {HERE / 'fake_verda.py'}"
    env = dict(os.environ, VERDA_API=api.url, VERDA_CLIENT_ID=fake_verda.CLIENT_ID,
               VERDA_CLIENT_SECRET=fake_verda.CLIENT_SECRET, VERDA_SSH=f"{fake} ssh",
               VERDA_SCP=f"{fake} scp", VERDA_POLL_S="0.05", VERDA_SSH_KEY_ID="key-1",
               FAKE_VERDA_DIR=str(tmp_path), FAKE_GATE_LOG=str(LOGS / "pass.log"),
               # the script's python3 is this interpreter (a pyenv shim costs 0.1 s a call)
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _default_signals() -> None:
    """In the child, before exec: SIGINT/SIGQUIT/SIGTERM/SIGHUP at their defaults and none
    blocked. A shell started from a background or nohup'd shell inherits SIGINT and SIGQUIT
    ignored, and bash can never trap a signal ignored at entry: without this the script under
    test would not see the test's Ctrl-C (issue 29)."""
    for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def start(repo, env, *args, out=None):
    cmd = ["bash", str(repo / "tools" / "ops" / "verda_cuda_gate.sh")]
    if out:
        cmd += ["--out", str(out)]
    cmd += args
    return subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_default_signals)


def run(repo, env, *args, out=None, timeout=60):
    p = start(repo, env, *args, out=out)
    so, se = p.communicate(timeout=timeout)
    return p.returncode, se


def assert_torn_down(api):
    """The instance that was ordered is deleted, with its volumes, by the delete action."""
    assert api.instances, "no instance was ever ordered"
    assert api.live_instances() == [] and api.live_volumes() == []
    deletes = [c for c in api.calls_to("PUT", "/v1/instances") if c["body"]["action"] == "delete"]
    assert deletes, "no delete action"
    (iid,) = api.instances
    assert deletes[0]["body"]["id"] == [iid]
    assert deletes[0]["body"]["volume_ids"] == [api.instances[iid]["os_volume_id"]]
    assert deletes[0]["body"]["delete_permanently"] is True


def ssh_log(tmp_path) -> list[list[str]]:
    p = tmp_path / "ssh.log"
    return [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []


def test_refuses_without_acknowledgement(api, repo, tmp_path):
    rc, err = run(repo, env_for(api, tmp_path))
    assert rc == 2
    assert "--i-accept-the-cost" in err and "1H200.141S.44V" in err
    assert api.calls == [] and ssh_log(tmp_path) == []


def test_bad_credentials(api, repo, tmp_path):
    rc, err = run(repo, env_for(api, tmp_path, VERDA_CLIENT_SECRET="wrong"), "--i-accept-the-cost")
    assert rc == 2
    assert "authentication" in err and "Invalid client credentials" in err and "nothing was rented" in err
    assert api.instances == {} and api.calls_to("POST", "/v1/instances") == []


def test_missing_credentials_and_key(api, repo, tmp_path):
    env = env_for(api, tmp_path)
    del env["VERDA_CLIENT_ID"]
    rc, err = run(repo, env, "--i-accept-the-cost")
    assert rc == 2 and "VERDA_CLIENT_ID" in err
    rc, err = run(repo, env_for(api, tmp_path, VERDA_SSH_KEY_ID=""), "--i-accept-the-cost")
    assert rc == 2 and "--ssh-key-id" in err
    assert api.calls == []


def test_quote_rents_nothing(api, repo, tmp_path):
    rc, err = run(repo, env_for(api, tmp_path), "--quote", "--max-minutes", "30")
    assert rc == 0 and "3.29 USD/hour" in err and "1.65 USD for 30 minutes" in err
    assert api.instances == {}


def test_success(api, repo, tmp_path):
    out = tmp_path / "out"
    rc, err = run(repo, env_for(api, tmp_path), "--i-accept-the-cost", "--", "--skip-4b", out=out)
    assert rc == 0, err
    assert "3.29 USD/hour" in err
    create = api.calls_to("POST", "/v1/instances")[0]["body"]
    assert create["instance_type"] == "1H200.141S.44V" and create["ssh_key_ids"] == ["key-1"]
    assert create["location_code"] and create["image"]
    assert all(c["authed"] for c in api.calls if "oauth2" not in c["path"])
    assert_torn_down(api)
    log = ssh_log(tmp_path)
    gate = [a for a in log if a[0] == "ssh" and "device_gate.sh" in a[-1]]
    assert len(gate) == 1 and "--skip-4b" in gate[0][-1] and gate[0][-2] == "root@203.0.113.7"
    assert [a for a in log if a[0] == "scp" and a[-1] == "root@203.0.113.7:kipp.bundle"]
    # the log came back and was collected
    assert (out / "device_gate.log").read_text() == (LOGS / "pass.log").read_text()
    doc = json.loads((out / "device_gate.json").read_text())
    assert doc["passed"] is True and doc["gpu"] == "NVIDIA H200"
    # teardown came after the gate ran
    assert api.calls[-1]["t"] >= os.path.getmtime(tmp_path / "gate.started")


def test_remote_gate_fails(api, repo, tmp_path):
    out = tmp_path / "out"
    rc, err = run(repo, env_for(api, tmp_path, FAKE_GATE_RC=1, FAKE_GATE_LOG=LOGS / "gate_fail.log"),
                  "--i-accept-the-cost", out=out)
    assert rc == 1
    assert_torn_down(api)
    assert json.loads((out / "device_gate.json").read_text())["gates_failed"] == ["test-cuda"]


def test_volumes_left_by_the_delete_are_deleted(api, repo, tmp_path):
    api.keep_volumes = True  # the instance delete only detaches: the script deletes the volume
    rc, err = run(repo, env_for(api, tmp_path), "--i-accept-the-cost", out=tmp_path / "out")
    assert rc == 0, err
    assert api.live_volumes() == [] and api.calls_to("DELETE", "/v1/volumes/")


def test_create_fails(api, repo, tmp_path):
    api.create_status = 503
    rc, err = run(repo, env_for(api, tmp_path), "--i-accept-the-cost")
    assert rc == 3 and "no capacity" in err
    assert api.instances == {}
    # it still looked for an instance of its name (a create whose answer was lost)
    assert api.calls_to("GET", "/v1/instances")


def test_provisioning_error(api, repo, tmp_path):
    api.final_status = "error"
    rc, err = run(repo, env_for(api, tmp_path), "--i-accept-the-cost")
    assert rc == 3 and "status 'error'" in err
    assert_torn_down(api)
    assert ssh_log(tmp_path) == []


def test_provisioning_timeout(api, repo, tmp_path):
    api.never_runs = True
    rc, err = run(repo, env_for(api, tmp_path), "--i-accept-the-cost", "--provision-timeout", "1")
    assert rc == 3 and "did not come up" in err
    assert_torn_down(api)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_mid_run(api, repo, tmp_path, sig, code):
    p = start(repo, env_for(api, tmp_path, FAKE_GATE_SLEEP=60), "--i-accept-the-cost",
              out=tmp_path / "out")
    started = tmp_path / "gate.started"
    deadline = time.time() + 30
    while not started.exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert started.exists(), p.communicate()[1]
    assert api.live_instances()  # the instance is up while the gate runs
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)  # as Ctrl-C does: the whole foreground group
    else:
        p.send_signal(sig)  # as a scheduler does: the script alone
    _, err = p.communicate(timeout=30)
    assert p.returncode == code, err
    assert "interrupted" in err
    assert_torn_down(api)
