"""Fixtures for tests/cluster: fleet_factory makes fleets (tests/cluster/harness.py) that are
torn down after the test, with each replica's log printed when the test failed."""

from __future__ import annotations

import os
import shutil

import pytest

import harness as H


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def fleet_factory(request):
    if not os.access(H.SERVER_BIN, os.X_OK):
        pytest.fail(f"{H.SERVER_BIN} is missing (make server)", pytrace=False)
    if not os.path.isfile(H.MODEL):
        pytest.fail(f"{H.MODEL} is missing (make tiny-models)", pytrace=False)
    if not shutil.which("haproxy"):
        pytest.fail("haproxy is not installed (setup.sh installs it)", pytrace=False)
    made = []

    def make(n, args=(), **kw):
        f = H.Fleet(n, list(args), **kw)
        made.append(f)
        print(f.describe())
        return f
    yield make
    rep = getattr(request.node, "rep_call", None)
    for f in made:
        if rep is not None and rep.failed:
            for r in f.replicas:
                print(r.log_tail())
            for rt in f.routers:
                try:
                    with open(rt.log, "rb") as fh:
                        print(f"--- {rt.name} log ---\n" + fh.read().decode("utf-8", "replace")[-3000:])
                except OSError:
                    pass
        f.close()
