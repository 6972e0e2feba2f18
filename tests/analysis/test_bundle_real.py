"""A campaign of real ``bench run``s (the real store: baseline x1 and command x3 on T6, tests/analysis/conftest.py)
exported as a bundle and imported into a fresh SQLite store: the same report tables, the run folders where the
import put them, each with its result.json, evidence and the scored candidates as staged; a second import adds
nothing. Here because the real store is this folder's session fixture (its xdist group builds it once).
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from bench.bundle import archive as bundle
from bench.bundle import export as bundle_export
from bench.cli import main
from bench.tracking import schema, whole_runs
from tests.bench.bundle_support import _use_store, assert_same, report_frames

pytestmark = pytest.mark.slow  # the real store is made by four whole benchmark runs


def test_a_real_campaign_exported_and_imported_gives_the_same_report_and_its_run_folders(
    real_store, tmp_path, monkeypatch
):
    _, runs = whole_runs.campaign_runs(real_store)
    agents = [r for r in runs if r.data.tags.get(schema.KIND) == schema.KIND_AGENT]
    assert {r.data.tags[schema.AGENT] for r in agents} == {"baseline", "command"} and len(agents) == 4
    frames = report_frames(real_store)
    archive = tmp_path / "real.tar.gz"
    # the runs were made under another cache (the fixture's): an export packs only folders under the campaign's
    # folder or --runs-dir, so the author names where they are, as after any move
    where = Path(agents[0].data.tags[schema.WORKSPACE]).parent
    out = bundle_export.export(real_store, archive, runs_dir=where)
    assert (out.runs, out.run_folders, out.missing_folders) == (len(runs), 4, [])
    assert bundle.check(archive) == []
    manifest = bundle.manifest(archive)
    assert manifest["tasks"] == {"t6": agents[0].data.tags[schema.TASK_SHA256]}
    with tarfile.open(archive) as tar:  # no data copy, no spool: the bundle stays small
        names = tar.getnames()
    assert not [n for n in names if "/workspace/data/" in n or "/.bench/" in n]
    assert out.bytes < 10_000_000, out.bytes

    _use_store(monkeypatch, tmp_path / "fresh")
    runs_dir = tmp_path / "imported-runs"
    assert main(["import", str(archive), "--quiet", "--runs-dir", str(runs_dir)]) == 0
    assert_same(report_frames(real_store), frames)
    _, imported = whole_runs.campaign_runs(real_store)
    assert len(imported) == len(runs)
    for r in imported:
        if r.data.tags.get(schema.KIND) == schema.KIND_AGENT:
            folder = runs_dir / r.data.tags[schema.WORKSPACE].rsplit("/", 1)[-1]
            assert r.data.tags[schema.WORKSPACE] == str(folder)
            result = json.loads((folder / "result.json").read_text())
            assert result["mlflow_run_id"] == r.data.tags[schema.SOURCE_RUN]
            assert (folder / "evidence").is_dir()
            scored = [e for e in result["evaluations"] if (e["official"].get("staged"))]
            for e in scored:  # each scored candidate as staged for the scorer: its checkpoint travels
                assert (folder / "eval" / e["official"]["staged"].rsplit("/", 1)[-1] / "checkpoint.pt").is_file()
    assert main(["import", str(archive), "--quiet", "--runs-dir", str(runs_dir)]) == 0
    _, again = whole_runs.campaign_runs(real_store)
    assert sorted(r.info.run_id for r in again) == sorted(r.info.run_id for r in imported)
