"""A bare ``bench report``: the latest campaign alone, named in one line, never every campaign of the store mixed in
one leaderboard; its default folder is one git ignores in the clone, and ``--out`` puts it where the user says.

Two small generated campaigns (the second started later), so "latest" is known by construction; the reader is
narrowed to them, as the session's store holds other tests' campaigns."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import uuid
from pathlib import Path

import pytest

from analysis import report_cli

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def _synthetic():
    spec = importlib.util.spec_from_file_location("analysis_synthetic_default", HERE / "synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_bare_report_reports_the_latest_campaign_and_says_so(tmp_path, monkeypatch, capsys):
    from analysis import report, summary
    from bench.tracking import reader

    older, newer = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("older-study", "newer-pilot"))
    synthetic = _synthetic()
    synthetic.generate(older, agents=2, tasks=1, repeats=1, scripts=0, evals=0, start=1_780_000_000.0)
    synthetic.generate(newer, agents=1, tasks=1, repeats=1, scripts=0, evals=0, start=1_780_500_000.0)
    # the session's store (a new one costs ~15 s of schema) may hold other tests' campaigns: the reader sees these two
    real = reader.open_reader

    class TheseTwo:
        def __init__(self, *args, **kwargs):
            self.source = real(*args, **kwargs)

        def experiments(self, names=None):
            return {i: n for i, n in self.source.experiments(names).items() if n in (older, newer)}

        def runs(self, *args, **kwargs):
            return self.source.runs(*args, **kwargs)

    monkeypatch.setattr(reader, "open_reader", TheseTwo)
    # the report's own content is tested in test_report.py (~40 s here with its figures and the summary runs): here,
    # which campaigns it is asked for and where it writes
    asked = []
    monkeypatch.setattr(report, "write_report", lambda out, experiments, **kw: asked.append((out, experiments)) or {})
    monkeypatch.setattr(summary, "after_report", lambda names, render: asked.append(("summary", names)))
    out = tmp_path / "my-report"

    assert report_cli.main(["--out", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        f"bench report: the latest campaign, {newer} (2 campaigns in the store); --experiment NAME reports "
        "another (repeat it for several)"
    )
    assert asked == [(out, [newer])]  # reading does not write: no summary unless --record

    asked.clear()  # named campaigns: no line, exactly those; --record writes their summaries
    assert report_cli.main(["--experiment", older, "--experiment", newer, "--record"]) == 0
    assert "latest campaign" not in capsys.readouterr().out
    assert asked == [(Path("report"), [older, newer]), ("summary", [older, newer])]


def test_the_default_report_folder_is_ignored_by_git():
    parser = argparse.ArgumentParser()
    report_cli.add_cli(parser.add_subparsers())
    default = parser.parse_args(["report"]).out
    if not (ROOT / ".git").exists():
        pytest.skip("not a git clone")
    answer = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", f"{default}/index.md"], cwd=ROOT, capture_output=True
    )
    assert answer.returncode == 0, f"git does not ignore bench report's default folder {default}/"
