"""Kipp's benchmark harnesses and their shared library (benchlib, server_common). Run them as
modules from the repository root, e.g. `.venv/bin/python -m bench.peer_bench ...`
(bench/README.md); they import each other as `bench.NAME` and the tools as `tools.NAME`."""
