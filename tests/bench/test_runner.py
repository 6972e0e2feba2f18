"""End to end: `bench run` through workspace, launch, watch, collect, evaluate, audit and record.

The task is the real T6 folder with generated ETTh1-shaped data (see conftest.generated_t6), so
these tests run anywhere; tests/bench/test_runner_mirror.py repeats the baseline on the real file.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import mlflow
import psutil
import pytest

from bench.cli import main
from bench.result import RunResult
from bench.runner import RunSpec, run
from bench.tracking import schema

pytestmark = pytest.mark.slow  # every test is a whole benchmark run (bench.runner.run or bench run): make test-all


def campaign() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def runs_of(name: str, kind: str):
    exp = mlflow.get_experiment_by_name(name)
    return mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = '{kind}'")


def test_bench_run_baseline_t6_end_to_end(generated_t6, capsys):
    name = campaign()
    code = main(
        ["run", "--agent", "baseline", "--task", "t6", "--budget", "3m", "--grace", "5", "--campaign", name, "--quiet"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    agents = runs_of(name, schema.KIND_AGENT)
    assert len(agents) == 1
    parent = agents.iloc[0]
    assert parent[f"tags.{schema.STATUS}"] == "success" and parent["status"] == "FINISHED"
    assert parent[f"tags.{schema.TASK}"] == "t6" and parent[f"tags.{schema.AGENT}"] == "baseline"
    assert 0.0 < parent[f"metrics.{schema.SCORE}"] < 5.0
    assert parent[f"metrics.{schema.SCRIPTS_LAUNCHED}"] == 1
    assert 0 < parent[f"metrics.{schema.BUDGET_UTILISATION}"] < 1
    # paper Eq. 1's term for a lower-is-better task, against Table 2's T6 baseline (DLinear, MSE 0.384)
    score = parent[f"metrics.{schema.SCORE}"]
    assert parent[f"metrics.{schema.TASK_BASELINE}"] == 0.384
    assert parent[f"metrics.{schema.REL_IMPROVEMENT}"] == pytest.approx((0.384 - score) / 0.384)
    # 3 minutes of T6's 40 on this machine's CPU: two deviations from the protocol, each named
    assert parent[f"tags.{schema.PROTOCOL}"] == "nonstandard"
    assert parent[f"tags.{schema.DEVIATIONS}"] == "budget,hardware"
    assert "3 min instead of the task's 40 min" in parent[f"tags.{schema.DEVIATION_NOTES}"]
    assert parent[f"tags.{schema.BUDGET_MINUTES}"] == "3" and parent[f"tags.{schema.TASK_BUDGET_MINUTES}"] == "40"
    assert parent[f"tags.{schema.HARDWARE}"].startswith("cpu (") and parent[f"tags.{schema.DEVICE}"] == "cpu"
    assert parent[f"tags.{schema.ENTRY}"] == "baseline"
    assert mlflow.get_experiment_by_name(name).tags[schema.EXPERIMENT_KIND] == "custom_model_development"

    scripts = runs_of(name, schema.KIND_SCRIPT)
    assert len(scripts) == 1
    child = scripts.iloc[0]
    assert child[f"tags.{schema.PARENT}"] == parent["run_id"] and child["status"] == "FINISHED"
    client = mlflow.tracking.MlflowClient()
    epochs = client.get_metric_history(child["run_id"], "val_mse")
    assert len(epochs) == 5  # one validation per epoch, the baseline's 5 epochs
    assert len(client.list_artifacts(child["run_id"], "checkpoints")) == 5
    assert client.get_run(child["run_id"]).data.params["config.kernel_size"] == "25"

    result_file = Path(parent[f"tags.{schema.WORKSPACE}"]) / "result.json"
    assert json.loads(result_file.read_text())["schema_version"] == 3
    result = RunResult.load(result_file)
    assert result.status == "success" and result.score == pytest.approx(parent[f"metrics.{schema.SCORE}"])
    assert result.evaluations[0].official.raw["split"] == "test"
    ws = Path(result.workspace)
    assert not os.stat(ws / "prepare.py").st_mode & stat.S_IWUSR  # locked copy is read-only
    assert len(result.audit.locked_sha256["prepare.py"]) == 64


DETACHED = r"""
sed 's/"epochs": 5/"epochs": 1/' train.py > run_1.py
cat >> run_1.py <<'EOF'
if __name__ == "__main__":  # after training: a script that will not die politely
    import os, signal, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open("run_1.pid", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(3600)
EOF
nohup setsid python run_1.py > run_1.log 2>&1 &
sleep 3600
"""


def test_budget_ends_detached_scripts_and_keeps_their_checkpoints(generated_t6):
    name = campaign()
    result = run(
        RunSpec(
            task=generated_t6,
            agent="command",
            campaign=name,
            budget_s=30,
            grace_s=3,
            options={"command": DETACHED},
            console=False,
        )
    )
    assert result.timed_out is True
    # run_1.pid holds its pid inside the sandbox's PID namespace, not the host's: find it by its working folder
    ws = str(Path(result.workspace))
    assert not [
        p for p in psutil.process_iter(["cwd", "status"]) if p.info["cwd"] == ws and p.info["status"] != "zombie"
    ]
    assert result.status == "success", result.reason  # the checkpoints it saved before the budget count
    assert result.scripts["statuses"] == {"KILLED": 1}
    child = runs_of(name, schema.KIND_SCRIPT).iloc[0]
    assert child["status"] == "KILLED" and child[f"tags.{schema.SCRIPT}"] == "run_1.py"
    assert child["metrics.val_mse"] > 0  # the metrics it had are kept
    assert result.budget_utilisation == 1.0


def test_crashing_agent_without_checkpoint_is_failed_with_reason(generated_t6):
    result = run(
        RunSpec(
            task=generated_t6,
            agent="command",
            campaign=campaign(),
            budget_s=60,
            grace_s=2,
            options={"command": "echo 'x = 1/0' > run_1.py && python run_1.py"},
            console=False,
        )
    )
    assert result.status == "failed" and "no scoreable checkpoint" in result.reason
    assert result.scripts["statuses"] == {"FAILED": 1}
    assert "ZeroDivisionError" in result.scripts["scripts"][0]["error"]


COMPILED_PREFIX = r"""
cat > run_1.py <<'EOF'
from prepare import save_checkpoint
from train import CONFIG, build_model
if __name__ == "__main__":
    model = build_model(CONFIG)
    class Wrapped(__import__("torch").nn.Module):  # what torch.compile's OptimizedModule does to the keys
        def __init__(self, m):
            super().__init__()
            self._orig_mod = m
    save_checkpoint(Wrapped(model), CONFIG, 0.5)
EOF
python run_1.py
"""


def test_checkpoint_with_compile_prefix_fails_strict_official_evaluation(generated_t6):
    result = run(
        RunSpec(
            task=generated_t6,
            agent="command",
            campaign=campaign(),
            budget_s=60,
            grace_s=2,
            options={"command": COMPILED_PREFIX},
            console=False,
        )
    )
    assert result.checkpoints_found == 1
    assert result.status == "failed"
    assert "official evaluation failed" in result.reason and "_orig_mod" in result.reason


def test_modified_locked_file_disqualifies(generated_t6):
    cmd = "chmod u+w prepare.py && echo '# tweak' >> prepare.py && python train.py"
    result = run(
        RunSpec(
            task=generated_t6,
            agent="command",
            campaign=campaign(),
            budget_s=120,
            grace_s=2,
            options={"command": cmd},
            console=False,
        )
    )
    assert result.status == "disqualified" and "prepare.py was modified" in result.reason
    assert result.violations[0].rule == 1


THREE_SCRIPTS = r"""
cp train.py run_1.py
sed 's/"epochs": 5/"epochs": 2/' train.py > run_2.py
cat > run_3.py <<'EOF'
from train import CONFIG, build_model
if __name__ == "__main__":
    model = build_model(CONFIG)
    print("step 1 | loss 9.0")
    raise RuntimeError("diverged")
EOF
python run_1.py & python run_3.py & wait
python run_2.py
"""


def test_every_script_the_agent_launches_becomes_a_nested_run(generated_t6):
    name = campaign()
    result = run(
        RunSpec(
            task=generated_t6,
            agent="command",
            campaign=name,
            budget_s=240,
            grace_s=2,
            options={"command": THREE_SCRIPTS},
            console=False,
        )
    )
    assert result.status == "success", result.reason
    assert result.scripts["launched"] == 3 == len(result.launches_observed)  # tracer and monitor agree
    parent = runs_of(name, schema.KIND_AGENT).iloc[0]
    assert parent[f"metrics.{schema.SCRIPTS_LAUNCHED}"] == 3 == parent[f"metrics.{schema.LAUNCHES_OBSERVED}"]
    children = runs_of(name, schema.KIND_SCRIPT)
    by = {r[f"tags.{schema.SCRIPT}"]: r for _, r in children.iterrows()}
    assert {s: r["status"] for s, r in by.items()} == {
        "run_1.py": "FINISHED",
        "run_2.py": "FINISHED",
        "run_3.py": "FAILED",
    }
    assert all(r[f"tags.{schema.PARENT}"] == parent["run_id"] for r in by.values())
    client = mlflow.tracking.MlflowClient()
    assert len(client.get_metric_history(by["run_1.py"]["run_id"], "val_mse")) == 5
    assert len(client.get_metric_history(by["run_2.py"]["run_id"], "val_mse")) == 2
    assert len(client.list_artifacts(by["run_2.py"]["run_id"], "checkpoints")) == 2
    assert client.get_run(by["run_2.py"]["run_id"]).data.params["config.epochs"] == "2"
    diff = client.download_artifacts(by["run_2.py"]["run_id"], "source/run_2.py.diff")
    assert '+    "epochs": 2' in Path(diff).read_text()
    assert "RuntimeError: diverged" in by["run_3.py"][f"tags.{schema.REASON}"]


@pytest.mark.fresh_data  # no full ETTh1.csv in the cache: the run must fetch the substitute
def test_run_on_a_partial_substitute_says_so_in_result_and_mlflow(generated_t6):
    """The full file is unavailable, a declared partial copy is used: the run is marked, not hidden."""
    toml = generated_t6.folder / "task.toml"
    text = toml.read_text()
    data = text[text.index("[[data]]") :].split("\n[scoring]")[0]  # the data source's table alone
    substitute = data.replace('file = "ETTh1.csv"', 'file = "ETTh1-part.csv"')
    text = text.replace('mirror = "ETTh1/ETTh1.csv"', 'mirror = "ETTh1/full-copy-absent.csv"')
    toml.write_text(text + "\n" + substitute + 'substitute_for = "ETTh1.csv"\n')
    prepare_py = generated_t6.folder / "prepare.py"  # T6's prepare reads ETTh1.csv: let it read the substitute
    prepare_py.write_text(prepare_py.read_text().replace('RAW_FILE = "ETTh1.csv"', 'RAW_FILE = "ETTh1-part.csv"'))
    from bench.tasks import get_task

    name = campaign()
    result = run(RunSpec(task=get_task("t6"), agent="baseline", campaign=name, budget_s=120, grace_s=5, console=False))
    assert result.status == "success"
    assert result.partial_data is True
    assert result.partial_data_notes == ["built from partial substitutes of ETTh1.csv"]
    parent = runs_of(name, schema.KIND_AGENT).iloc[0]
    assert parent[f"tags.{schema.PARTIAL_DATA}"] == "true"
    assert "ETTh1.csv" in parent[f"tags.{schema.PARTIAL_NOTES}"]
    assert "Partial data" in parent[f"tags.{schema.RUN_NOTE}"]


ONE_EPOCH = 'sed \'s/"epochs": 5/"epochs": 1/\' train.py > run_1.py && python run_1.py'


def test_a_tracking_outage_loses_nothing_and_bench_record_finishes_later(generated_t6, tmp_path, monkeypatch, capsys):
    """The store is down for the whole run: result.json has everything; `bench record` (from another folder,
    as after copying a run directory off a cluster node) puts the agent run and its script run in MLflow."""
    import shutil

    from bench.tracking import store

    name = campaign()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on the discard port
    spec = RunSpec(generated_t6, "command", campaign=name, budget_s=180, grace_s=5, console=False)
    spec.options = {"command": ONE_EPOCH}
    result = run(spec)
    assert result.status == "success", result.reason
    assert result.mlflow_run_id is None and "bench record" in capsys.readouterr().out
    on_disk = RunResult.load(result.run_dir)
    assert on_disk.score == result.score and on_disk.scripts["launched"] == 1

    moved = tmp_path / "copied-run"
    shutil.move(result.run_dir, moved)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    store._client.cache_clear()
    assert main(["record", str(moved)]) == 0
    recorded = RunResult.load(moved)
    assert recorded.mlflow_run_id and recorded.score == result.score
    (agent_run,) = runs_of(name, schema.KIND_AGENT).itertuples()
    assert agent_run.run_id == recorded.mlflow_run_id
    agents = runs_of(name, schema.KIND_AGENT)
    assert agents.iloc[0][f"metrics.{schema.SCORE}"] == pytest.approx(result.score)
    assert agents.iloc[0][f"tags.{schema.STATUS}"] == "success"
    scripts = runs_of(name, schema.KIND_SCRIPT)
    assert list(scripts[f"tags.{schema.SCRIPT}"]) == ["run_1.py"] and scripts.iloc[0]["status"] == "FINISHED"
    assert len(mlflow.tracking.MlflowClient().get_metric_history(scripts.iloc[0]["run_id"], "val_mse")) == 1


def test_a_copied_in_checkpoint_is_rejected_and_touched_files_keep_their_true_window(generated_t6, tmp_path):
    """An agent copies in a checkpoint from an earlier run and sets its own files' times an hour ahead: the
    copy is rejected with the reason, its own checkpoints stay in the 5-minute window in which they appeared.
    Unsandboxed: a sandboxed agent cannot see other runs at all (tests/bench/sandbox); this checks the
    defence behind it."""
    name = campaign()
    honest = run(RunSpec(generated_t6, "command", campaign=name, budget_s=180, grace_s=5, console=False,
                         options={"command": ONE_EPOCH}))  # fmt: skip
    assert honest.status == "success", honest.reason
    earlier = honest.best.path
    cheat = f"cp {earlier} checkpoints/stolen.pt && {ONE_EPOCH} && touch -d '+60 minutes' checkpoints/run_1_*.pt"
    result = run(RunSpec(generated_t6, "command", campaign=name, repeat=2, budget_s=180, grace_s=5, console=False,
                         options={"command": cheat}, sandbox=False))  # fmt: skip
    assert result.status == "success", result.reason
    assert Path(result.best.path).name.startswith("run_1_")
    stolen = [r for r in result.rejected_checkpoints if r["path"].endswith("stolen.pt")]
    assert len(stolen) == 1 and "before the run started (its own time): copied in" in stolen[0]["reason"]
    assert {e.window for e in result.evaluations} == {0} and all(0 < e.saved_s < 180 for e in result.evaluations)


POISON = (  # the cache's path: agents no longer inherit BENCH_CACHE_DIR, but an unsandboxed one can guess it
    "python -c \"import os; p = os.path.join({cache!r}, 'prepared', "
    "'t6_time_series_forecasting', 'test.npy'); b = open(p, 'rb').read(); open(p, 'wb').write(b[:-8] + bytes(8))\""
)


def test_an_agent_that_writes_into_the_prepared_cache_gets_no_score_and_stops_the_next_run(generated_t6):
    """The harness's prepared data are shared by every run: an agent that reaches them (here through the
    cache's known path) is not scored against what it wrote, and the next run refuses to start.
    Unsandboxed: a sandboxed agent does not see the cache at all (tests/bench/sandbox); this checks the
    defence behind it."""
    from bench.paths import cache_dir
    from bench.tasks import data

    name = campaign()
    spec = RunSpec(generated_t6, "command", campaign=name, budget_s=180, grace_s=5, console=False, sandbox=False)
    spec.options = {"command": f"{ONE_EPOCH} && {POISON.format(cache=str(cache_dir()))}"}
    result = run(spec)
    assert result.status == "disqualified" and result.score is None  # rule 8: the scorer's inputs were touched
    (finding,) = [v for v in result.audit.violations if v.rule == 8]
    assert "changed since they were built (1 file(s): test.npy)" in finding.evidence[0]
    assert all(not e.official.ok for e in result.evaluations) and result.result_file.is_file()
    with pytest.raises(data.DataError, match="bench data prepare t6 --force"):
        run(RunSpec(generated_t6, "baseline", campaign=name, repeat=2, budget_s=60, grace_s=5, console=False))
    assert len(runs_of(name, schema.KIND_AGENT)) == 1  # the refused run left nothing half-made in MLflow


OUTSIDE = (
    "python -c \"import glob, torch; p = sorted(glob.glob('checkpoints/run_1_*.pt'))[0]; c = torch.load(p); "
    "c.update(script='../outside.py', val_score=0.0); torch.save(c, 'checkpoints/better.pt')\""
)


def test_a_checkpoint_naming_code_outside_the_workspace_is_not_scored(generated_t6, tmp_path):
    """The agent re-saves one of its checkpoints with a perfect val score, naming a script outside the workspace
    whose build_model the evaluation would import: the file is rejected, the honest checkpoint is scored."""
    (tmp_path / "outside.py").write_text("def build_model(config):\n    raise SystemExit('never imported')\n")
    spec = RunSpec(generated_t6, "command", campaign=campaign(), budget_s=180, grace_s=5, console=False)
    spec.options = {"command": f"{ONE_EPOCH} && {OUTSIDE}"}
    result = run(spec)
    assert result.status == "success", result.reason
    assert Path(result.best.path).name.startswith("run_1_") and result.best.script == "run_1.py"
    (rejected,) = [r for r in result.rejected_checkpoints if r["path"].endswith("better.pt")]
    assert rejected["reason"] == "names the script '../outside.py', not a workspace script that ran"
