"""Campaign bundles (bench/bundle.py, bundle_export.py, bundle_import.py): the manifest names every edit; a campaign
exported and imported into a fresh store reads the same; a second import adds nothing; bad input exits 2.

Fast tier: the campaign is generated through the harness's writer (tests/analysis/synthetic.py, plus a trace and an
artifact), the run folder is a result.json of the fixtures. The whole-run version (real T6 runs, run folders) is
tests/analysis/test_bundle_real.py; PostgreSQL: tests/bench/tracking/test_bundle_postgres.py.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from bench.bundle import archive as bundle
from bench.bundle import importer as bundle_import
from bench.cli import main
from bench.tracking import schema, whole_runs
from tests.bench import bundle_support as support
from tests.bench.bundle_support import _tree, _use_store, assert_same, report_frames

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "tests" / "bench" / "fixtures" / "results" / "v3_t6_baseline.json"
empty, source = support.empty, support.source  # module fixtures: an empty store, the exported campaign


def test_a_campaign_exported_and_imported_into_a_fresh_store_reads_the_same(source, empty, tmp_path, monkeypatch):
    assert len(source.tree) == sum(source.counts.values()) and bundle.check(source.archive) == []
    _use_store(monkeypatch, tmp_path / "fresh", empty)
    assert main(["import", str(source.archive), "--quiet"]) == 0
    after = _tree(source.campaign)
    assert after == source.tree  # names, nesting, times, params, tags, every metric value, the trace's spans, artifacts
    assert any(t[8] for t in after) and any(t[9] for t in after)  # the trace and the artifact were compared
    assert_same(report_frames(source.campaign), source.frames)

    _, runs = whole_runs.campaign_runs(source.campaign)
    assert main(["import", str(source.archive), "--quiet"]) == 0  # twice: nothing added
    _, again = whole_runs.campaign_runs(source.campaign)
    assert sorted(r.info.run_id for r in again) == sorted(r.info.run_id for r in runs)


def test_an_import_interrupted_after_a_run_was_created_writes_that_run_again(source, empty, tmp_path, monkeypatch):
    """A run left RUNNING by an import that died is deleted and written again; the finished ones are kept."""
    _use_store(monkeypatch, tmp_path / "fresh", empty)
    real = bundle_import._import_run
    calls = []

    def dies_on_the_third(writer, top, data, parent, folder, out):
        calls.append(data["run_id"])
        if len(calls) == 3:
            writer.create_run(data["run_name"], {schema.SOURCE_RUN: data["run_id"]})  # created, never finished
            raise KeyboardInterrupt
        return real(writer, top, data, parent, folder, out)

    monkeypatch.setattr(bundle_import, "_import_run", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        bundle_import.import_bundle(source.archive)
    monkeypatch.setattr(bundle_import, "_import_run", real)
    out = bundle_import.import_bundle(source.archive)
    assert (out.skipped, out.created) == (2, len(source.tree) - 2)  # the third was created again
    assert _tree(source.campaign) == source.tree


def _bundle_folder(tmp_path: Path) -> Path:
    """A bundle folder by hand: a run folder with the fixture's result.json, its agent run's JSON with the metrics
    result.json implies (read from the file here, not from bench.bundle), an artifact; then the manifest."""
    top = tmp_path / "x-bundle"
    (top / "runs" / "r1").mkdir(parents=True)
    shutil.copy(RESULT, top / "runs" / "r1" / "result.json")
    (top / "runs" / "r1" / "evidence").mkdir()
    (top / "runs" / "r1" / "evidence" / "audit.json").write_text("{}\n")
    raw = json.loads(RESULT.read_text())
    score, outcome = raw["outcome"]["score"], raw["outcome"]
    metrics = {
        "score": score,
        f"official_{raw['metric']}": score,
        "best_val_score": outcome["best_val_score"],
        "success": 1.0 if outcome["status"] == "success" else 0.0,
        "wall_time_s": raw["wall_time_s"],
        "budget_utilisation": raw["budget_utilisation"],
        "checkpoints": raw["checkpoints_found"],
        "task_baseline": raw["baseline_score"],
    }
    run = {
        "run_id": "a1",
        "run_name": "t6-baseline-r1",
        "status": "FINISHED",
        "tags": {schema.KIND: schema.KIND_AGENT},
        "metrics": {k: [{"value": v, "step": 0, "timestamp": 1}] for k, v in metrics.items()},
        "artifacts": ["audit.json"],
        "run_folder": "r1",
    }
    (top / "mlflow" / "runs").mkdir(parents=True)
    (top / "mlflow" / "runs" / "a1.json").write_text(json.dumps(run))
    (top / "mlflow" / "experiment.json").write_text(json.dumps({"name": "x", "tags": {}}))
    (top / "mlflow" / "artifacts" / "a1").mkdir(parents=True)
    (top / "mlflow" / "artifacts" / "a1" / "audit.json").write_text("{}\n")
    bundle.write_manifest(top, campaign="x", tasks={"t6": "ab"}, created="now", version="0")
    return top


def test_the_manifest_names_every_changed_missing_or_added_file_and_every_metric_that_left_result_json(tmp_path):
    top = _bundle_folder(tmp_path)
    assert bundle.check(top) == []
    ckpt = top / "runs" / "r1" / "evidence" / "audit.json"
    ckpt.write_text("{} \n")  # one byte more
    (top / "mlflow" / "artifacts" / "a1" / "audit.json").unlink()
    (top / "runs" / "r1" / "extra.txt").write_text("x")
    run_json = top / "mlflow" / "runs" / "a1.json"
    run = json.loads(run_json.read_text())
    run["metrics"]["score"][0]["value"] = 0.1  # the leaderboard's number, edited
    run_json.write_text(json.dumps(run))
    found = {(p.kind, p.path) for p in bundle.check(top)}
    assert found == {
        ("hash", "runs/r1/evidence/audit.json"),
        ("missing", "mlflow/artifacts/a1/audit.json"),
        ("artifact", "mlflow/artifacts/a1/audit.json"),
        ("extra", "runs/r1/extra.txt"),
        ("hash", "mlflow/runs/a1.json"),
        ("metric", "mlflow/runs/a1.json"),
    }
    metric = next(p for p in bundle.check(top) if p.kind == "metric")
    assert "score = 0.1 in MLflow" in metric.detail and str(json.loads(RESULT.read_text())["outcome"]["score"]) in (
        metric.detail
    )


def test_an_archive_whose_files_differ_from_its_manifest_is_refused_by_import_unless_forced(
    empty, tmp_path, monkeypatch, capsys
):
    top = _bundle_folder(tmp_path)
    (top / "runs" / "r1" / "evidence" / "audit.json").write_text("edited\n")
    archive = tmp_path / "x.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    assert bundle.extract(archive, tmp_path / "out") == tmp_path / "out" / "x-bundle" / "runs"
    _use_store(monkeypatch, tmp_path / "store", empty)
    assert main(["import", str(archive), "--quiet", "--runs-dir", str(tmp_path / "runs")]) == 1
    assert "hash: runs/r1/evidence/audit.json" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # nothing imported
    assert main(["import", str(archive), "--quiet", "--force", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert (tmp_path / "runs" / "r1" / "evidence" / "audit.json").read_text() == "edited\n"
    _, runs = whole_runs.campaign_runs("x")
    assert [r.data.tags[schema.WORKSPACE] for r in runs] == [str(tmp_path / "runs" / "r1")]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["import", "{tmp}/none.tar.gz"], "no such file"),
        (["import", "{tmp}/text.tar.gz"], "not a readable .tar.gz"),
        (["import", "{tmp}/empty.tar.gz"], "not a bundle"),
        (["export", "no-such-campaign", "{tmp}/o.tar.gz"], "no campaign 'no-such-campaign'"),
        (["export", "x", "{tmp}/no/o.tar.gz"], "no such folder"),
    ],
)
def test_bad_input_exits_2_and_says_what(argv, says, tmp_path, monkeypatch, capsys):
    _use_store(monkeypatch, tmp_path / "store")
    (tmp_path / "text.tar.gz").write_text("hello")
    with tarfile.open(tmp_path / "empty.tar.gz", "w:gz"):
        pass
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert says in capsys.readouterr().err


def test_a_bundle_whose_runs_name_paths_out_of_it_is_named_and_never_imported(empty, tmp_path, monkeypatch, capsys):
    top = _bundle_folder(tmp_path)
    run_json = top / "mlflow" / "runs" / "a1.json"
    run = json.loads(run_json.read_text())
    run["run_folder"] = "../../escaped"
    run_json.write_text(json.dumps(run))
    bundle.write_manifest(top, campaign="x", tasks={}, created="now", version="0")  # the manifest agrees with it
    assert [(p.kind, p.path) for p in bundle.check(top)] == [("unsafe", "mlflow/runs/a1.json")]
    _use_store(monkeypatch, tmp_path / "store", empty)
    assert main(["import", str(top), "--quiet", "--force", "--runs-dir", str(tmp_path / "a" / "b")]) == 2
    assert "not a plain file name" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "a").exists()


def test_an_agents_links_fifos_and_bloated_scripts_never_reach_a_bundle(tmp_path):
    """The workspace's scripts are the agent's files: a *.py link to a host secret, a FIFO (which would block a plain
    copy), a sparse 'script' of 1 GiB and a hard-linked one are left out of the exported run folder; the honest
    script is copied whole."""
    import os

    from bench.bundle.export import copy_run_folder

    secret = tmp_path / "host" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("HOST-SECRET")
    run = tmp_path / "run"
    ws = run / "workspace"
    ws.mkdir(parents=True)
    (run / "result.json").write_text("{}")
    (ws / "run_1.py").write_text("print('honest')\n")
    (ws / "leak.py").symlink_to(secret)
    os.mkfifo(ws / "pipe.py")
    with open(ws / "huge.py", "wb") as f:
        f.truncate(1 << 30)
    os.link(ws / "run_1.py", ws / "twin.py")
    out = tmp_path / "out"
    copy_run_folder(run, out)  # returns at once: the FIFO is never opened for reading
    copied = sorted(p.name for p in (out / "workspace").iterdir())
    assert "leak.py" not in copied and "pipe.py" not in copied and "huge.py" not in copied
    assert (out / "workspace" / "run_1.py").read_text() == "print('honest')\n"
    assert len([n for n in copied if n in ("run_1.py", "twin.py")]) == 1  # one inode, copied once
    assert not any("HOST-SECRET" in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())


def test_an_archive_that_unpacks_past_the_free_disk_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """A stranger's bundle is read member headers first: one that would unpack to more than the disk has free (a
    gzip bomb) is refused, naming both sizes, and nothing is extracted."""
    import collections

    src = tmp_path / "b" / "x-bundle"
    src.mkdir(parents=True)
    (src / "big.bin").write_bytes(b"\0" * 1_000_000)  # compresses to ~1 KB
    archive = tmp_path / "x.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="x-bundle")
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(bundle.shutil, "disk_usage", lambda _: usage(10**6, 10**6 - 4096, 4096))
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(bundle.BundleError, match=r"unpacks to 1,000,000 bytes .* has 4,096 free"):
        bundle.unpack(archive, dest)
    assert list(dest.iterdir()) == []
