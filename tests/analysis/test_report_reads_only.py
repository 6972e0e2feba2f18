"""Reading does not write: ``bench report`` on an imported campaign, run twice, leaves the reader's store as it was.

The campaign is the bundle tests' small generated one (tests/bench/bundle_support.py), exported once and imported
into a fresh store here, as a reader of someone's published campaign has it. The store is compared before and after
byte for byte (the SQLite file and every file under its artifact folder), and through MLflow's API (every run's
status, tags, params and metrics), so a write that left the bytes alone but not the runs would fail too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from bench.bundle import importer as bundle_import
from bench.tracking import whole_runs
from tests.bench import bundle_support as support
from tests.bench.bundle_support import _use_store

empty, source = support.empty, support.source  # module fixtures: an empty store, the exported campaign


def _files(folder: Path) -> dict[str, str]:
    """Every file under the store's folder (the database and the artifacts) and its SHA-256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".summary.lock"
    }


def _runs(campaign: str) -> list[tuple]:
    _, runs = whole_runs.campaign_runs(campaign)
    return sorted(
        (r.info.run_id, r.info.status, r.info.end_time, dict(r.data.tags), dict(r.data.params), dict(r.data.metrics))
        for r in runs
    )


def test_bench_report_twice_on_an_imported_campaign_changes_nothing_in_the_store(
    source, empty, tmp_path, monkeypatch, capsys
):
    from analysis import report_cli

    store = tmp_path / "theirs"
    _use_store(monkeypatch, store, empty)
    bundle_import.import_bundle(source.archive)
    files, runs = _files(store), _runs(source.campaign)
    assert runs and any(name.startswith("mlflow.db") for name in files)

    for out in ("report-a", "report-b"):  # twice, the second with the paper's rows
        extra = ["--published"] if out == "report-b" else []
        assert report_cli.main(["--experiment", source.campaign, "--out", str(tmp_path / out), *extra]) == 0
        assert (tmp_path / out / "index.md").is_file()  # the report was written, into its own folder
    assert "campaign summary" not in capsys.readouterr().out

    assert _runs(source.campaign) == runs
    assert _files(store) == files
