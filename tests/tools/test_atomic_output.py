"""Output files the tools and benches write (tools/atomic_file.py, used by the GGUF writer
behind the converter, quantizer and random-model maker, and by every bench record): a
failed write never truncates or removes what the user named, nor a neighbour file named
like the old fixed temporary (PATH.tmp); a symlink is followed and kept; a device node is
written in place, never replaced."""
from __future__ import annotations

import os
import stat

import pytest

from bench import benchlib
from tools import atomic_file
from tools import kipp_gguf_writer as gw


class Boom(RuntimeError):
    pass


def _gguf_writer() -> gw.GGUFWriter:
    w = gw.GGUFWriter()
    w.add_string("general.architecture", "qwen3")
    w.add_tensor_info("t", [4], gw.GGMLType.F32)
    return w


def test_failed_gguf_write_keeps_target_and_neighbours(tmp_path):
    target = tmp_path / "model.gguf"
    target.write_bytes(b"the user's model")
    neighbour = tmp_path / "model.gguf.tmp"  # the old code wrote here and unlinked it
    neighbour.write_bytes(b"another file of the user's")

    def data(_info):
        raise Boom("disk on fire")

    with pytest.raises(Boom):
        gw.write_atomic(_gguf_writer(), target, data)
    assert target.read_bytes() == b"the user's model"
    assert neighbour.read_bytes() == b"another file of the user's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf", "model.gguf.tmp"]


def test_gguf_write_through_symlink_keeps_link(tmp_path):
    real = tmp_path / "real.gguf"
    real.write_bytes(b"old")
    link = tmp_path / "link.gguf"
    link.symlink_to("real.gguf")
    gw.write_atomic(_gguf_writer(), link, lambda _i: b"\0" * 16)
    assert link.is_symlink()
    assert real.read_bytes()[:4] == b"GGUF"


def test_record_failure_keeps_target(tmp_path, monkeypatch):
    target = tmp_path / "record.json"
    target.write_text("precious\n")
    orig = atomic_file.os.replace

    def broken_replace(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "replace", broken_replace)
    with pytest.raises(OSError):
        benchlib.write_record_file(str(target), '{"x": 1}')
    monkeypatch.setattr(atomic_file.os, "replace", orig)
    assert target.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
    benchlib.write_record_file(str(target), '{"x": 1}')
    assert target.read_text() == '{"x": 1}\n'


def test_mode_kept_and_device_written_in_place(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("x")
    os.chmod(target, 0o640)
    atomic_file.write_text(target, "y")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640 and target.read_text() == "y"
    atomic_file.write_text("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
