"""The reader's side of a bundle (bench/bundle/): a stranger's bundle writes only where it is told, never merges into
the reader's own campaign, never makes the reader's next export publish a private folder, and is read within caps.

Each bundle here is built by hand against the published format (tests/bench/test_bundle.py's ``_bundle_folder``),
as an attacker would build one, with its manifest rewritten to agree: the manifest check passes, so what stops the
bundle is the containment rule, not the hash check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bench.bundle import archive as bundle
from bench.cli import main
from bench.tracking import schema, whole_runs
from bench.tracking.writer import MlflowWriter
from tests.bench.bundle_support import _use_store
from tests.bench.test_bundle import _bundle_folder

ROOT = Path(__file__).resolve().parents[2]
CACHE_FOLDERS = ("raw", "prepared", "weights", "clis", "workspaces")


@pytest.fixture
def reader_home(tmp_path, monkeypatch) -> Path:
    """A reader's machine: a cache with each folder the toolkit keeps (a planted file in each), their own store."""
    cache = tmp_path / "cache"
    for name in CACHE_FOLDERS:
        (cache / name).mkdir(parents=True)
        (cache / name / "mine.txt").write_text(f"the reader's own {name}\n")
    monkeypatch.setenv("BENCH_CACHE_DIR", str(cache))
    monkeypatch.delenv("BENCH_WORKSPACES_DIR", raising=False)
    monkeypatch.delenv("BENCH_CLI_DIR", raising=False)
    _use_store(monkeypatch, tmp_path / "store")
    return cache


def _listing(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` with its size (or 'dir'): a listing compared before and after."""
    return {
        p.relative_to(folder).as_posix(): "dir" if p.is_dir() else str(p.stat().st_size)
        for p in sorted(folder.rglob("*"))
    }


def _named(top: Path, campaign: str | None = None, folder: str | None = None, tags: dict | None = None) -> Path:
    """The hand-made bundle with its experiment renamed, its run folder renamed, tags added; manifest rewritten."""
    if campaign is not None:
        (top / "mlflow" / "experiment.json").write_text(json.dumps({"name": campaign, "tags": {}}))
    run_json = top / "mlflow" / "runs" / "a1.json"
    run = json.loads(run_json.read_text())
    if folder is not None:
        (top / "runs" / run["run_folder"]).rename(top / "runs" / folder)
        run["run_folder"] = folder
    run["tags"].update(tags or {})
    run_json.write_text(json.dumps(run))
    bundle.write_manifest(top, campaign="x" if campaign is None else campaign, tasks={}, created="now", version="0")
    assert bundle.check(top) == []  # the manifest agrees: only the containment rule can stop it
    return top


@pytest.mark.parametrize("campaign", ["..", ".", "a/../..", "/tmp/abs-campaign", "", "../cache"])
def test_a_campaign_named_to_leave_its_folder_is_refused_and_the_cache_is_untouched(
    campaign, reader_home, tmp_path, capsys
):
    top = _named(_bundle_folder(tmp_path / "b"), campaign=campaign, folder="prepared")
    before = _listing(reader_home)
    assert main(["import", str(top), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert repr(campaign) in err and "nothing imported" in err, err
    assert _listing(reader_home) == before
    assert whole_runs.campaign_runs(campaign)[1] == [] if campaign else True


@pytest.mark.parametrize("folder", [*CACHE_FOLDERS, "mlruns", "tasks", "mlflow.db", "artifacts"])
def test_run_folders_named_after_the_cache_are_contained_in_the_campaigns_folder(folder, reader_home, tmp_path):
    top = _named(_bundle_folder(tmp_path / "b"), folder=folder)
    before = _listing(reader_home)
    assert main(["import", str(top), "--quiet"]) == 0
    after = _listing(reader_home)
    added = {k for k in after if k not in before}
    assert added and all(k.startswith("workspaces/x") for k in added), added  # only inside the campaign's folder
    assert {k: v for k, v in after.items() if k in before} == before  # nothing of the reader's changed
    assert (reader_home / "workspaces" / "x" / folder / "result.json").is_file()


def test_a_runs_dir_in_the_cache_is_refused(reader_home, tmp_path, capsys):
    top = _bundle_folder(tmp_path / "b")
    before = _listing(reader_home)
    for where in (reader_home, reader_home / "prepared", reader_home / "prepared" / "x"):
        assert main(["import", str(top), "--quiet", "--runs-dir", str(where)]) == 2
        assert "where the toolkit keeps" in capsys.readouterr().err
    assert _listing(reader_home) == before
    store = tmp_path / "store"  # a run folder named like the store's artifacts, with --runs-dir the store's folder
    top = _named(_bundle_folder(tmp_path / "c"), folder="artifacts")
    assert main(["import", str(top), "--quiet", "--runs-dir", str(store)]) == 2
    assert "where the toolkit keeps 'mlflow.db'" in capsys.readouterr().err  # the folder holding the store
    assert not (store / "artifacts" / "result.json").exists()


def test_a_bundle_named_like_the_readers_campaign_is_refused_and_imports_beside_with_as(reader_home, tmp_path, capsys):
    own = MlflowWriter("x")
    own.set_experiment_tag(schema.RUN_NOTE, "the reader's own description")
    mine = own.create_run("my-run", {schema.KIND: schema.KIND_AGENT})
    own.end_run(mine)
    top = _bundle_folder(tmp_path / "b")
    top = _named(top, tags={schema.CAMPAIGN: "x"})
    assert main(["import", str(top), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "already has a campaign 'x'" in err and "my-run" in err and "--as NEW_NAME" in err, err
    exp, runs = whole_runs.campaign_runs("x")
    assert [r.info.run_id for r in runs] == [mine]  # nothing merged
    assert exp.tags[schema.RUN_NOTE] == "the reader's own description"
    assert not (reader_home / "workspaces" / "x" / "r1").exists()

    assert main(["import", str(top), "--quiet", "--as", "theirs"]) == 0
    _, theirs = whole_runs.campaign_runs("theirs")
    assert [r.info.run_name for r in theirs] == ["t6-baseline-r1"]
    assert theirs[0].data.tags[schema.CAMPAIGN] == "theirs"
    assert (reader_home / "workspaces" / "theirs" / "r1" / "result.json").is_file()
    w = MlflowWriter("theirs")  # a report's summary run of the imported campaign: the same bundle still imports
    w.end_run(w.create_run("summary", {schema.KIND: schema.KIND_SUMMARY}))
    assert main(["import", str(top), "--quiet", "--as", "theirs"]) == 0  # twice: nothing added
    assert len(whole_runs.campaign_runs("theirs")[1]) == 2
    exp, runs = whole_runs.campaign_runs("x")
    assert [r.info.run_id for r in runs] == [mine] and exp.tags[schema.RUN_NOTE] == "the reader's own description"


def test_an_imported_tag_never_makes_the_readers_export_pack_a_private_folder(reader_home, tmp_path, capsys):
    """A bundle's agent run without a run folder, its workspace tag naming a private folder of the reader's: the
    import drops the tag; and an export never packs a folder outside the campaign's, whatever a tag says."""
    private = tmp_path / "private-run"
    (private / "evidence").mkdir(parents=True)
    (private / "result.json").write_text("{}")
    (private / "evidence" / "secret.txt").write_text("PRIVATE")
    top = _bundle_folder(tmp_path / "b")
    run_json = top / "mlflow" / "runs" / "a1.json"
    run = json.loads(run_json.read_text())
    run["run_folder"] = None
    run["tags"][schema.WORKSPACE] = str(private)
    run_json.write_text(json.dumps(run))
    bundle.write_manifest(top, campaign="x", tasks={}, created="now", version="0")
    assert main(["import", str(top), "--quiet"]) == 0
    (imported,) = whole_runs.campaign_runs("x")[1]
    assert imported.data.tags.get(schema.WORKSPACE) != str(private)

    # a run whose tag names the private folder anyway (however it got there): the export does not follow it
    w = MlflowWriter("x")
    w.end_run(w.create_run("tagged", {schema.KIND: schema.KIND_AGENT, schema.WORKSPACE: str(private)}))
    archive = tmp_path / "out.tar.gz"
    assert main(["export", "x", str(archive), "--quiet"]) == 0
    assert "tagged" in capsys.readouterr().err  # named as a run whose folder was not found
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        assert not any("private-run" in n or n.endswith("secret.txt") for n in names), names
        assert all(b"PRIVATE" not in tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())


def test_a_run_folder_already_here_is_compared_kept_when_equal_and_refused_when_different(
    reader_home, tmp_path, capsys, monkeypatch
):
    top = _bundle_folder(tmp_path / "b")
    runs = tmp_path / "their-runs"
    assert main(["import", str(top), "--quiet", "--runs-dir", str(runs)]) == 0
    _use_store(monkeypatch, tmp_path / "store2")  # another store, the same folder: equal files are kept
    assert main(["import", str(top), "--runs-dir", str(runs)]) == 0
    assert "1 already there" in capsys.readouterr().out
    (runs / "r1" / "result.json").write_text('{"bogus": true}\n')
    _use_store(monkeypatch, tmp_path / "store3")
    assert main(["import", str(top), "--quiet", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert str(runs / "r1") in err and "result.json differs" in err, err
    assert whole_runs.campaign_runs("x")[1] == []  # nothing imported into the third store
    # verify of the folder with the malformed result.json names it; no traceback
    assert main(["verify", str(runs), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "result.json cannot be read" in out and "has no schema_version" in out, out


def _flood(path: Path, members: int) -> Path:
    """A .tar.gz of ``members`` empty files (headers only), written without tarfile's per-member bookkeeping."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("x-bundle/manifest.json")
        tar.addfile(info)
        for i in range(members):
            tar.addfile(tarfile.TarInfo(f"x-bundle/f/{i}"))
            tar.members.clear()  # the writer need not remember them either
    return path


def _import_measured(archive: Path, tmp_path: Path) -> tuple[int, str, float, float]:
    """``bench import`` in its own process: (exit, stderr, seconds, peak memory in MB of that process)."""
    code = (
        "import resource, sys, time; from bench.cli import main; t=time.monotonic(); "
        f"rc=main(['import', {str(archive)!r}, '--quiet']); "
        "print(time.monotonic()-t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024, file=sys.stderr); "
        "sys.exit(rc)"
    )
    env = {**os.environ, "BENCH_MLRUNS_DIR": str(tmp_path / "flood-store")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    seconds, mb = (float(x) for x in proc.stderr.strip().splitlines()[-1].split())
    return proc.returncode, proc.stderr, seconds, mb


def test_a_flood_of_members_and_a_deep_manifest_are_refused_in_seconds_and_bounded_memory(tmp_path):
    """Refused with exit 2 before anything is written; the memory the bundle costs (the process's peak above the
    same command's on a missing file: the CLI and MLflow imported) under 200 MB. The seconds are printed (tests
    hold no timing: 0.9 s for the flood on the shared 2-core machine)."""
    code, err, _, base_mb = _import_measured(tmp_path / "missing.tar.gz", tmp_path)
    assert code == 2 and "no such file" in err, err
    flood = _flood(tmp_path / "flood.tar.gz", 200_000)
    code, err, seconds, mb = _import_measured(flood, tmp_path)
    assert code == 2 and "more than 50,000 members" in err, err
    print(f"200,000 members: exit 2 in {seconds:.1f} s, peak {mb:.0f} MB ({base_mb:.0f} MB without a bundle)")
    assert mb - base_mb < 200  # the cap holds the headers read to 50,000
    top = tmp_path / "deep" / "x-bundle"
    top.mkdir(parents=True)
    (top / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    deep = tmp_path / "deep.tar.gz"
    with tarfile.open(deep, "w:gz") as tar:
        tar.add(top, arcname="x-bundle")
    code, err, seconds, mb = _import_measured(deep, tmp_path)
    assert code == 2 and "nests 100,000 levels deep" in err, err
    print(f"a manifest nested 100,000 deep: exit 2 in {seconds:.1f} s, peak {mb:.0f} MB")
    assert mb - base_mb < 200


def test_json_depth_is_read_without_parsing():
    assert bundle.depth('{"a": [1, {"b": "[[[[not counted]]]]"}]}') == 3
    assert bundle.depth('"\\"[[["') == 0 and bundle.depth("[]" * 5) == 1 and bundle.depth("[" * 70 + "]" * 70) == 70


def test_a_bundle_of_an_older_toolkits_result_json_is_refused_in_one_line(reader_home, tmp_path, capsys):
    """A bundle whose run folder holds a result.json of schema_version 2 (before 0.1's format reset, its manifest
    agreeing): `bench import` refuses it and `bench verify` names it, each in one line naming the version and what to
    do; no traceback, nothing imported."""
    old = ROOT / "tests" / "bench" / "fixtures" / "results" / "v2_t6_baseline.json"
    top = _bundle_folder(tmp_path / "b")
    shutil.copy(old, top / "runs" / "r1" / "result.json")
    bundle.write_manifest(top, campaign="x", tasks={"t6": "ab"}, created="now", version="0")
    said = "schema_version 2: written by an older toolkit (this one reads 3 only); re-run it with this toolkit"
    assert main(["import", str(top), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert [line for line in err.splitlines() if said in line] == [next(x for x in err.splitlines() if said in x)]
    assert whole_runs.campaign_runs("x")[1] == []  # nothing imported
    assert main(["verify", str(top / "runs"), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "result.json cannot be read" in out and said in out and "Traceback" not in out, out
