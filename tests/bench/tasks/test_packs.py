"""Task packs (issue 25): task folders found outside the repository run and are reported like the built-in seven.

The end-to-end case is the issue's "done when": a pack in a temporary folder holding a copy of T6 (on generated
ETTh1-shaped data, NOT the real data) under a new id runs through `bench run` and appears in `bench report` with its
pack and hash. Expected hashes are computed here with hashlib from the files, not with the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.checksums import tree_sha256
from bench.tasks import TaskError, all_tasks, get_task, packs

ROOT = Path(__file__).resolve().parents[3]
T6 = ROOT / "tasks" / "t6_time_series_forecasting"


@pytest.fixture(autouse=True)
def _no_campaign_path():
    """A campaign's tasks_path stays in the process that loaded it: not into the next test."""
    packs.clear_search_path()
    yield
    packs.clear_search_path()


def by_hand(folder: Path) -> str:
    """The documented hash, from its definition: sha256 of the sorted '<sha256>  <path>' lines, caches left out."""
    lines = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith(".pyc"):
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(folder).as_posix()
            lines.append((rel, hashlib.sha256(path.read_bytes()).hexdigest()))
    return hashlib.sha256("".join(f"{h}  {rel}\n" for rel, h in sorted(lines)).encode()).hexdigest()


def copy_task(src: Path, dest: Path, new_id: str) -> Path:
    """A copy of a task folder under another id (its task.toml's id line rewritten)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    toml = dest / "task.toml"
    text, n = re.subn(r'(?m)^id = "[^"]*"', f'id = "{new_id}"', toml.read_text())
    assert n == 1
    toml.write_text(text)
    return dest


def test_the_content_hash_follows_the_files_and_ignores_caches(tmp_path):
    folder = copy_task(T6, tmp_path / "x6", "x6")
    first = tree_sha256(folder)
    assert first == by_hand(folder)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "prepare.cpython-312.pyc").write_bytes(b"\x00compiled")
    (folder / "sub").mkdir()
    (folder / "sub" / "stale.pyc").write_bytes(b"\x00")
    assert tree_sha256(folder) == first  # importing the task's code changes nothing
    with open(folder / "train.py", "a") as f:
        f.write("# one more line\n")
    changed = tree_sha256(folder)
    assert changed != first and changed == by_hand(folder)
    (folder / "notes.txt").write_text("a new file counts too\n")
    assert tree_sha256(folder) not in (first, changed)


def test_a_path_pack_is_found_with_its_name_version_and_source(tmp_path, monkeypatch):
    pack = tmp_path / "lab-pack"
    copy_task(T6, pack / "t6_time_series_forecasting", "x6")  # the copy keeps T6's folder name: lookups by id
    (pack / "pack.toml").write_text('name = "lab-tasks"\nversion = "0.3"\n')
    lone = copy_task(T6, tmp_path / "solo", "y6")  # an entry may also be one task folder
    monkeypatch.setenv("BENCH_TASKS_PATH", f"{pack}{os.pathsep}{lone}")
    tasks = {t.id: t for t in all_tasks()}
    assert [t.id for t in all_tasks()][:7] == [f"t{i}" for i in range(1, 8)]  # the built-in seven first
    x6, y6 = tasks["x6"], tasks["y6"]
    assert (x6.source.kind, x6.source.pack, x6.source.version) == ("path", "lab-tasks", "0.3")
    assert x6.source.origin == str(pack.resolve()) and x6.folder == (pack / "t6_time_series_forecasting").resolve()
    assert (y6.source.pack, y6.source.version) == ("solo", "")  # no pack.toml: the folder's name
    assert get_task("x6") == x6 and tasks["t6"].source.builtin
    with pytest.raises(TaskError, match="ambiguous.*give the task's id"):
        get_task("t6_time_series_forecasting")  # two folders of that name now: the id says which
    provenance = packs.provenance(x6)
    assert provenance["sha256"] == by_hand(x6.folder) and provenance["pack"] == "lab-tasks"


def test_an_id_taken_twice_is_one_error_naming_both_sources(tmp_path, monkeypatch, capsys):
    shadow = copy_task(T6, tmp_path / "shadow" / "t6_copy", "t6")  # a pack may not shadow a built-in task
    monkeypatch.setenv("BENCH_TASKS_PATH", str(shadow.parent))
    with pytest.raises(TaskError) as e:
        get_task("t6")
    msg = str(e.value)
    assert "task id 't6' is declared twice" in msg
    assert "built-in at " + str(T6) in msg and str(shadow) in msg and "BENCH_TASKS_PATH" in msg
    from bench.cli import main

    assert main(["tasks"]) == 2  # every command stops with that one line, before printing a half table
    out = capsys.readouterr()
    assert out.out == "" and "task id 't6' is declared twice" in out.err

    a = copy_task(T6, tmp_path / "a" / "x6", "x6")
    b = copy_task(T6, tmp_path / "b" / "forecast", "x6")
    monkeypatch.setenv("BENCH_TASKS_PATH", f"{a.parent}{os.pathsep}{b.parent}")
    with pytest.raises(TaskError, match="task id 'x6' is declared twice") as e:
        all_tasks()
    assert str(a) in str(e.value) and str(b) in str(e.value) and "pack a" in str(e.value) and "pack b" in str(e.value)

    monkeypatch.setenv("BENCH_TASKS_PATH", f"{a.parent}{os.pathsep}{a.parent}")  # the same folder twice: one task
    assert [t.id for t in all_tasks()].count("x6") == 1
    monkeypatch.setenv("BENCH_TASKS_PATH", str(tmp_path / "nowhere"))
    with pytest.raises(TaskError, match="BENCH_TASKS_PATH names .*nowhere, which is not a folder"):
        all_tasks()
    bad = copy_task(T6, tmp_path / "bad" / "X", "X6")
    monkeypatch.setenv("BENCH_TASKS_PATH", str(bad.parent))
    with pytest.raises(TaskError, match="id 'X6' is not a task id"):
        all_tasks()


def _install_pack(site: Path, dist: str, version: str, module: str, entry: str) -> None:
    """A package as pip would leave it: the module's folder and a dist-info with its entry_points.txt."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[bench.tasks]\n{dist} = {entry}\n")
    (site / module).mkdir(parents=True)


def test_installed_packages_with_an_entry_point_are_packs(tmp_path, monkeypatch):
    site = tmp_path / "site"
    # the value names a module: its folder holds the task folders (shipped as package data)
    _install_pack(site, "acme-tasks", "1.2.0", "acme_tasks", "acme_tasks")
    (site / "acme_tasks" / "__init__.py").write_text("")
    copy_task(T6, site / "acme_tasks" / "forecast", "acme6")
    # the value names a function: it returns the folders
    _install_pack(site, "lab-more", "0.1", "lab_more", "lab_more.where:folders")
    (site / "lab_more" / "__init__.py").write_text("")
    elsewhere = copy_task(T6, tmp_path / "data-dir" / "z6", "z6")
    (site / "lab_more" / "where.py").write_text(f"def folders():\n    return [{str(elsewhere)!r}]\n")
    monkeypatch.syspath_prepend(str(site))
    tasks = {t.id: t for t in all_tasks()}
    acme, z6 = tasks["acme6"], tasks["z6"]
    assert (acme.source.kind, acme.source.pack, acme.source.version) == ("entry-point", "acme-tasks", "1.2.0")
    assert acme.folder == (site / "acme_tasks" / "forecast").resolve()
    assert (z6.source.pack, z6.source.version, z6.folder) == ("lab-more", "0.1", elsewhere.resolve())
    assert "acme-tasks==1.2.0" in acme.source.describe()

    (site / "lab_more" / "where.py").write_text("def folders():\n    raise RuntimeError('no data mounted')\n")
    sys.modules.pop("lab_more.where", None)
    with pytest.raises(TaskError, match="task pack lab-more==0.1 .* cannot be loaded .*no data mounted"):
        all_tasks()


def test_a_campaign_tasks_path_reaches_its_job_processes(tmp_path, monkeypatch):
    from bench.campaign import spec
    from bench.errors import InputError

    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "ws"))
    copy_task(T6, tmp_path / "packs" / "x6", "x6")
    name = f"camp-{uuid.uuid4().hex[:8]}"
    body = f'name = "{name}"\ntasks = ["x6", "t6"]\ntasks_path = ["packs"]\n[[agents]]\nname = "baseline"\n'
    (tmp_path / "c").mkdir()
    file = tmp_path / "c" / "camp.toml"
    file.write_text(body.replace('["packs"]', '["../packs"]'))  # relative to the campaign file
    c = spec.load(file)
    assert c.task_ids == ("x6", "t6") and c.tasks()[0].source.pack == "packs"
    # `bench campaign job FILE RUN` is a fresh process that reads the file again: it finds x6 the same way
    code = f"from bench.campaign import spec; c = spec.load({str(file)!r}); print(c.tasks()[0].folder)"
    env = {k: v for k, v in os.environ.items() if k != "BENCH_TASKS_PATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.strip() == str((tmp_path / "packs" / "x6").resolve())

    packs.clear_search_path()
    file.write_text(body.replace('["packs"]', '["nowhere"]'))
    with pytest.raises(InputError, match="tasks_path: .*nowhere, which is not a folder"):
        spec.load(file)
    assert "x6" not in {t.id for t in all_tasks()}  # a refused entry is not searched afterwards


def test_resume_and_record_find_the_recorded_folder_without_the_pack_on_the_path(tmp_path, monkeypatch, capsys):
    x6 = copy_task(T6, tmp_path / "lab" / "x6", "x6")
    monkeypatch.setenv("BENCH_TASKS_PATH", str(x6.parent))
    recorded = packs.provenance(get_task("x6"))
    monkeypatch.delenv("BENCH_TASKS_PATH")  # a later shell, without the pack on its path
    with pytest.raises(TaskError, match="unknown task 'x6'"):
        get_task("x6")
    task = packs.task_for_run("x6", recorded)
    assert task.folder == x6.resolve() and (task.source.pack, task.source.kind) == ("lab", "path")
    assert capsys.readouterr().out == ""
    with open(x6 / "program.md", "a") as f:
        f.write("\nedited after the run started\n")
    packs.task_for_run("x6", recorded)
    assert f"changed since the run started (sha256 {recorded['sha256'][:12]} -> {by_hand(x6)[:12]})" in (
        capsys.readouterr().out
    )
    assert packs.task_for_run("t6", {}).source.builtin  # older files: no task_source, the task of that id


@pytest.mark.slow
def test_a_pack_task_runs_through_bench_run_and_bench_report_names_its_pack_and_hash(
    generated_t6, tmp_path, monkeypatch, capsys
):
    import mlflow

    from bench.cli import main
    from bench.result import RunResult
    from bench.tracking import schema

    pack = tmp_path / "lab-pack"
    x6 = copy_task(generated_t6.folder, pack / "t6_time_series_forecasting", "x6")  # its generated data's sums
    (pack / "pack.toml").write_text('name = "lab-tasks"\nversion = "0.3"\n')
    monkeypatch.setenv("BENCH_TASKS_PATH", str(pack))
    expected = by_hand(x6)

    assert main(["tasks"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["x6"].endswith(f"[pack lab-tasks 0.3 (path {pack.resolve()})]") and rows["t6"].endswith("[built-in]")

    name = f"test-{uuid.uuid4().hex[:8]}"
    argv = ["run", "--agent", "baseline", "--task", "x6", "--budget", "3m", "--grace", "5", "--campaign", name]
    code = main([*argv, "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    exp = mlflow.get_experiment_by_name(name)
    runs = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'")
    assert len(runs) == 1
    parent = runs.iloc[0]
    assert parent[f"tags.{schema.TASK}"] == "x6" and parent[f"tags.{schema.STATUS}"] == "success"
    assert parent[f"tags.{schema.TASK_SOURCE}"] == "path" and parent[f"tags.{schema.TASK_PACK}"] == "lab-tasks"
    assert parent[f"tags.{schema.TASK_PACK_VERSION}"] == "0.3" and parent[f"tags.{schema.TASK_SHA256}"] == expected
    run_dir = Path(parent[f"tags.{schema.WORKSPACE}"])
    result = RunResult.load(run_dir / "result.json")
    assert result.run.task_source["sha256"] == expected and result.run.task_source["folder"] == str(x6.resolve())
    assert json.loads((run_dir / "run.json").read_text())["spec"]["task_source"]["pack"] == "lab-tasks"
    assert (Path(os.environ["BENCH_CACHE_DIR"]) / "prepared" / "packs" / "x6").is_dir()  # not T6's data folder

    report = tmp_path / "report"
    assert main(["report", "--experiment", name, "--out", str(report)]) == 0
    index = (report / "index.md").read_text()
    assert f"X6 is from the task pack lab-tasks 0.3 (task folder sha256 {expected}): 1 run(s)." in index


@pytest.mark.slow
def test_a_campaign_runs_a_pack_task_in_its_job_processes_by_its_tasks_path(generated_t6, tmp_path, monkeypatch):
    """`bench campaign run`: each run is a `bench campaign job` process that finds the task by the file's key alone."""
    from bench.campaign import spec
    from bench.cli import main
    from bench.result import RunResult

    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "workspaces"))
    monkeypatch.delenv("BENCH_TASKS_PATH", raising=False)
    x6 = copy_task(generated_t6.folder, tmp_path / "lab" / "x6_forecast", "x6")
    name = f"camp-{uuid.uuid4().hex[:8]}"
    file = tmp_path / "camp.toml"
    file.write_text(
        f'name = "{name}"\ntasks = ["x6"]\ntasks_path = ["lab"]\nbudget = "20s"\ngrace = 2\n'
        '[[agents]]\nname = "command"\nagent_command = "echo no checkpoint"\n'
    )
    assert main(["campaign", "run", str(file)]) == 0  # final: failed (no checkpoint) is a result
    (key,) = spec.load(file).runs()
    result = RunResult.load(tmp_path / "workspaces" / name / key.run_id)
    assert result.run.task == "x6" and result.status == "failed"
    assert result.run.task_source["pack"] == "lab" and result.run.task_source["kind"] == "path"
    assert result.run.task_source["sha256"] == by_hand(x6)
