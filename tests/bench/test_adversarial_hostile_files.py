"""The agent as an adversary against the harness's reads of what it made (issue 29, the hostile-input boundary).

The harness runs with the host user's rights and uploads the agent's top-level scripts and adapter artifacts at
record time. An agent that makes those "files" links to ``/proc/self/environ`` (the harness's environment, here
an unredacted database URL in a real one), to the data cache's raw CSV (every test label) or to a host file standing for
``/etc/shadow``; a FIFO named like a script; a 1 GiB sparse script; many hard links of one file; or a flood of
files in ``checkpoints/`` must get none of those bytes into the MLflow store or ``result.json``, must not block or
balloon the harness, and its run must still end with ``result.json`` written, no MLflow run left RUNNING, and what
was refused counted and named (``result.json`` ``hostile_inputs``, the audit).

No training happens in these runs (no checkpoint: the run fails "no checkpoint"), so they take seconds; what they
test is the record step and the audit, which run the same for every outcome.
"""

from __future__ import annotations

import json
import resource
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from bench.paths import mlruns_dir
from bench.pipeline.record import load_run, record
from bench.result import RunResult
from bench.sandbox.bwrap import probe
from bench.tasks import data
from bench.tracking import store
from bench.tracking.writer import MlflowWriter
from tests.bench.adversary import _run

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}")

MIB = 1024 * 1024


def _store_bytes() -> bytes:
    """Every byte of the session's tracking store (SQLite database and artifacts)."""
    return b"".join(p.read_bytes() for p in mlruns_dir().rglob("*") if p.is_file() and not p.is_symlink())


def _store_size() -> int:
    return sum(p.stat().st_size for p in mlruns_dir().rglob("*") if p.is_file() and not p.is_symlink())


def _no_run_left_running(result: RunResult) -> None:
    c = store.client()
    runs = c.search_runs([store.experiment_id(result.run.campaign)])
    assert runs, "the run was not recorded"
    assert all(r.info.status != "RUNNING" for r in runs), [(r.info.run_name, r.info.status) for r in runs]


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


@pytest.mark.slow  # a whole benchmark run of a hostile agent
def test_links_fifos_sparse_files_and_hard_links_reach_neither_the_store_nor_result_json(generated_t6, tmp_path):
    task = generated_t6
    data.prepare(task, progress=False)
    # what /proc/self/environ shows the harness (this process): its environment as it was started (a setenv later
    # is not in it), NUL-separated; two entries with their NUL are bytes no other file of the store holds
    entries = [e for e in Path("/proc/self/environ").read_bytes().split(b"\0") if len(e) > 8]
    environ = b"\0".join(entries[:2]) + b"\0"
    shadow_mark = f"SHADOW-{uuid.uuid4().hex}"
    shadow = tmp_path / "host-etc" / "shadow"
    shadow.parent.mkdir()
    shadow.write_text(f"root:$6${shadow_mark}:19000:0:99999:7:::\n")
    raw = data.raw_dir(task) / "ETTh1.csv"
    raw_line = raw.read_text().splitlines()[7].encode()  # a row of the raw data, test labels' file
    assert raw_line and raw_line not in _store_bytes()
    artifacts = ".bench/artifacts"
    command = "\n".join(
        [
            "ln -s /proc/self/environ env_leak.py",
            f"ln -s {shlex.quote(str(raw))} raw_leak.py",
            f"ln -s {shlex.quote(str(shadow))} shadow_leak.py",
            "mkfifo fifo.py",  # an unguarded record step waits in open() for a writer that never comes
            "python -c \"open('huge.py','wb').truncate(1 << 30)\"",  # 1 GiB apparent, no disk
            "printf 'print(1)\\n' > honest_note.py",
            f"mkdir -p {artifacts}/sub",
            f"ln -s {shlex.quote(str(shadow))} {artifacts}/shadow.txt",
            f"ln -s {shlex.quote(str(raw))} {artifacts}/sub/raw.csv",
            f"python -c \"open('{artifacts}/sparse.bin','wb').truncate(1 << 30)\"",
            f"head -c 1048576 /dev/urandom > {artifacts}/w.bin",
            f"for i in $(seq 1 40); do ln {artifacts}/w.bin {artifacts}/h$i.bin; done",  # 40 MiB by appearance
        ]
    )
    before_rss, before_store = _peak_rss_mib(), _store_size()
    result = _run(task, command, budget_s=30)
    grown_rss, grown_store = _peak_rss_mib() - before_rss, _store_size() - before_store

    assert Path(result.result_file).is_file()
    _no_run_left_running(result)
    everything = _store_bytes() + Path(result.result_file).read_bytes()
    assert environ not in everything, "the harness's environment reached the store"
    assert shadow_mark.encode() not in everything, "the host file reached the store"
    assert raw_line not in everything, "the raw data (test labels) reached the store"
    # the honest script and one copy of the hard-linked file are uploaded; the sparse GiB and the 40 copies are not
    assert grown_store < 8 * MIB, f"the store grew by {grown_store / MIB:.1f} MiB"
    assert grown_rss < 600, f"the harness's peak RSS rose by {grown_rss:.0f} MiB"
    print(f"store grew {grown_store / MIB:.2f} MiB; harness peak RSS rose {grown_rss:.0f} MiB")

    hostile = json.loads(Path(result.result_file).read_text())["hostile_inputs"]
    counts = hostile["counts"]
    assert counts.get("link", 0) >= 5  # three scripts, two artifacts
    assert counts.get("not-regular", 0) >= 1  # the FIFO
    assert counts.get("sparse", 0) >= 2  # the script and the artifact
    assert counts.get("duplicate", 0) == 40  # the hard links, once each refused
    reasons = [v.reason for v in result.audit.violations]
    assert any("links outside the workspace" in r for r in reasons), reasons  # rule 5, disqualify
    assert any("refuses to read" in r and "special file" in r and "sparse" in r for r in reasons), reasons
    assert result.status == "disqualified"

    # `bench record RUN_DIR` on the same run (what it does: load, record, write) stages through the boundary again
    again, ws = load_run(Path(result.run_dir))
    again.mlflow_run_id = record(MlflowWriter(again.run.campaign), again, ws)
    again.write(ws.result_file)
    assert again.hostile_inputs["counts"] == counts
    everything = _store_bytes() + Path(result.result_file).read_bytes()
    assert environ not in everything and shadow_mark.encode() not in everything and raw_line not in everything
    _no_run_left_running(result)


@pytest.mark.slow  # a whole benchmark run of a hostile agent
def test_an_inode_flood_in_checkpoints_keeps_the_harness_and_result_json_small(generated_t6):
    task = generated_t6
    data.prepare(task, progress=False)
    n = 30_000  # the case is 150,000; 30,000 keeps this test to seconds and shows the same bound
    command = (
        'mkdir -p checkpoints/flood && python -c "'
        f"[open('checkpoints/flood/c%06d.pt' % i, 'wb').write(b'x') for i in range({n})]\""
    )
    before_rss = _peak_rss_mib()
    result = _run(task, command, budget_s=40)
    grown_rss = _peak_rss_mib() - before_rss

    assert Path(result.result_file).is_file()
    _no_run_left_running(result)
    size = Path(result.result_file).stat().st_size
    assert size < 2 * MIB, f"result.json is {size / MIB:.1f} MiB"
    # measured: 508 MiB on the 2-core machine (collect and arrivals list and load every file: not this boundary's)
    assert grown_rss < 800, f"the harness's peak RSS rose by {grown_rss:.0f} MiB"
    print(f"result.json {size / 1024:.0f} KiB; harness peak RSS rose {grown_rss:.0f} MiB")


@pytest.mark.slow  # a whole benchmark run of a hostile agent
def test_folders_nested_past_pythons_recursion_limit_end_in_a_recorded_run_with_a_flag(generated_t6):
    """os.walk and Path.rglob recurse: a workspace folder nested 1,100 deep raised RecursionError in the harness's
    manifest of the workspace, after the agent had ended (no result.json). The boundary's walk does not recurse."""
    task = generated_t6
    data.prepare(task, progress=False)
    command = "mkdir deep && cd deep && for i in $(seq 1100); do mkdir d && cd d; done && echo x > leaf.txt"
    result = _run(task, command, budget_s=30)
    try:
        assert Path(result.result_file).is_file()
        _no_run_left_running(result)
        # the agent made none (on a loaded machine its 1,100 mkdirs may outlast the budget: timeout)
        assert result.status in ("failed", "timeout") and "no scoreable checkpoint" in result.reason
        flags = [v for v in result.audit.violations if "nested too deep" in v.reason]
        assert flags and flags[0].verdict == "flag" and flags[0].rule == 5
        manifest = json.loads((Path(result.run_dir) / "evidence" / "manifest-end.json").read_text())
        assert manifest["..."]["truncated"] is True
    finally:  # pytest's own clean-up of old tmp folders (shutil.rmtree) recurses and would fail on this tree
        subprocess.run(["rm", "-rf", str(Path(result.workspace) / "deep")], check=True)
