"""Code time travel (issue 29): the code that loads a checkpoint travels with it.

The attack: a checkpoint's bytes are timed, but the code that loads it used to be staged as the workspace was at
the END. So an untrained checkpoint saved at once by ``tt.py``, whose ``build_model`` goes through a helper module
that, rewritten after training, makes the model load weights from a file written at the end, was scored as the
trained model and placed at ~2 s: the run's best "saved at 2 s", a false anytime curve and time-to-best, no finding.
It claims the honest model's validation score (a repeat of the same agent knows it), so rule 9 saw nothing either.

The honest answer: the candidate is evaluated with the workspace's code as it was when its checkpoint's content was
seen (``bench/pipeline/codetime.py``), so it scores as what it is, an untrained model; the expected score comes from
the task's own evaluation (``prepare.self_check``) of that checkpoint with copies of the early scripts the agent
kept aside, not from the harness's scorer. Run end to end on T6 through the real pipeline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.pipeline import collect
from bench.sandbox.bwrap import probe
from tests.bench.adversary import HONEST, _run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
]

WINDOW_S = 5.0  # the test's windows: the early checkpoint (~2 s) and the trained ones (> 8 s) fall in different ones

# at once: tt.py builds its model through helper.py (a plain pass-through now) and saves it untrained, claiming the
# honest model's validation score; copies of the scripts as they are now are kept aside for the test's own check
EARLY = r"""
cat > helper.py <<'EOF'
def wrap(model):
    return model
EOF
cat > tt.py <<'EOF'
import torch
from train import CONFIG, DLinear
import helper

def build_model(config):
    return helper.wrap(DLinear(config["seq_len"], config["pred_len"], config["kernel_size"]))

if __name__ == "__main__":
    import prepare
    torch.manual_seed(0)
    prepare.save_checkpoint(build_model(CONFIG), CONFIG, CLAIMED)
EOF
sed -i "s/CLAIMED/$CLAIMED/" tt.py
mkdir -p early && cp tt.py helper.py train.py early/
python tt.py && sleep 3
"""

# after training: the trained weights as a Python file, and helper.py rewritten so that every model it wraps
# loads them whatever state dict it is given
LATE = r"""
python - <<'EOF'
import base64, glob, io, time, torch
src = sorted(glob.glob("checkpoints/run_1_*.pt"))[-1]
buf = io.BytesIO()
torch.save(torch.load(src, weights_only=True)["state_dict"], buf)
open("late_written_at.txt", "w").write(repr(time.time()))  # before a byte of the late code exists
open("late_weights.py", "w").write("STATE = %r\n" % base64.b64encode(buf.getvalue()).decode())
open("helper.py", "w").write('''
import base64, io, torch

def wrap(model):
    import late_weights
    trained = torch.load(io.BytesIO(base64.b64decode(late_weights.STATE)), weights_only=True)
    load = model.load_state_dict
    model.load_state_dict = lambda _ignored, strict=True: load(trained, strict)
    return model
''')
EOF
sleep 2
"""


def _self_check(task, data_dir: Path, checkpoint: Path, script: Path) -> float:
    """The checkpoint's test score by the task's own evaluation (prepare.self_check), in a process of its own."""
    code = (
        "import json, prepare; "
        f"print(json.dumps(prepare.self_check({str(checkpoint)!r}, {str(script)!r}, data_dir={str(data_dir)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=task.folder, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["value"]


def test_a_checkpoint_is_scored_with_the_code_of_its_time_not_code_written_later(guard, honest, monkeypatch):
    from bench.tasks import data

    honest_best = next(e for e in honest.evaluations if e.candidate == "best")
    claimed = honest_best.val_score * (1 - 1e-7)  # just better than the honest checkpoint: the overall best
    monkeypatch.setattr(collect, "WINDOW_S", WINDOW_S)
    result = _run(guard.task, f"export CLAIMED={claimed!r}\n" + EARLY + HONEST + LATE)
    ws = Path(result.workspace)
    late_s = float((ws / "late_written_at.txt").read_text()) - result.started_at
    early = next(ws.glob("checkpoints/tt_*.pt"))
    untrained = _self_check(guard.task, data.prepare(guard.task, progress=False), early, ws / "early" / "tt.py")
    assert untrained > honest.score * 1.2, (untrained, honest.score)  # the attack needs a real difference

    tt = [e for e in result.evaluations if Path(e.path).name.startswith("tt_")]
    trained = [e for e in result.evaluations if Path(e.path).name.startswith("run_1_")]
    assert tt and any(e.candidate == "best" for e in tt), [(e.candidate, e.path) for e in result.evaluations]
    for e in tt:  # the early checkpoint is what it was when it was saved: untrained, wherever it is listed
        assert e.saved_s < min(t.saved_s for t in trained) < late_s, (e.saved_s, late_s)
        assert e.official.ok and e.official.value == pytest.approx(untrained, rel=1e-5), (e.official.raw, untrained)
        assert e.official.raw["code_files"] == 3 and "code_fallback" not in e.official.raw  # tt.py, helper.py, train.py
    # the honest checkpoints were scored with run_1.py as it ran, and still score as the honest twin's
    assert trained and all(e.official.value == pytest.approx(honest.score, rel=1e-4) for e in trained)
    # the untrained model's own validation score is not the one it claimed: rule 9 flags the claim
    assert any(v.rule == 9 and v.verdict == "flag" for v in result.audit.violations), result.audit.violations
    assert not any(v.rule == 6 and "scripts as the run left them" in v.reason for v in result.audit.violations)
    assert result.status == "success", result.reason
    guard.check(result, "never-planted")


# a plain script that saves one checkpoint and then waits for the harness to be killed
SAVER = r"""
cat > run_1.py <<'EOF2'
import time
from prepare import save_checkpoint
from train import CONFIG, build_model
if __name__ == "__main__":
    save_checkpoint(build_model(CONFIG), CONFIG, 0.9)
    time.sleep(120)
EOF2
python run_1.py
"""

BROKEN = "\n\ndef build_model(config):  # written after the harness died\n    raise RuntimeError('written later')\n"


def test_resume_stages_the_recorded_snapshots_and_places_a_later_checkpoint_after_the_code(generated_t6, tmp_path):
    """The harness is SIGKILLed after it recorded a checkpoint and its code; then a better checkpoint is saved and
    run_1.py rewritten (its build_model now raises). ``--resume`` scores the first with the code recorded for
    it, and the later one, which no snapshot covers, is staged as the run left it (so it cannot load), placed at
    run_1.py's change (after its own mtime) and flagged."""
    import os
    import signal
    import time

    from bench.cli import main
    from bench.result import RunResult
    from tests.bench.test_resume import ROOT, campaign, wait_for

    name, workspaces = campaign(), tmp_path / "workspaces"
    env = {**os.environ, "BENCH_WORKSPACES_DIR": str(workspaces), "PYTHONPATH": str(ROOT)}
    argv = ["run", "--agent", "command", "--task", "t6", "--agent-command", SAVER, "--budget", "60"]
    argv += ["--grace", "2", "--campaign", name, "--unsandboxed", "--quiet"]
    log = tmp_path / "harness.log"
    with open(log, "wb") as out:
        harness = subprocess.Popen([sys.executable, "-m", "bench.cli", *argv], env=env, stdout=out, stderr=out)
    try:

        def snapshotted() -> Path | None:
            found = next(workspaces.glob(f"{name}/*/evidence/code.jsonl"), None)
            return found if found is not None and (found.parent.parent / "run.json").is_file() else None

        found = wait_for(snapshotted, 90, "run.json and a snapshot", harness, log)
        os.kill(harness.pid, signal.SIGKILL)
    finally:
        harness.kill()
        harness.wait()
    run_dir = found.parent.parent
    ws = run_dir / "workspace"
    save = "import sys; sys.argv = ['run_1.py']; import prepare, train; "
    save += "prepare.save_checkpoint(train.build_model(train.CONFIG), train.CONFIG, 0.5)"
    subprocess.run([sys.executable, "-c", save], cwd=ws, check=True, capture_output=True)
    time.sleep(0.1)
    with open(ws / "run_1.py", "a") as f:  # after the checkpoint: the code is what places it
        f.write(BROKEN)
    changed_s = os.stat(ws / "run_1.py").st_ctime

    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    result = RunResult.load(run_dir)
    by_label = {e.candidate: e for e in result.evaluations}
    best, late = by_label["best"], by_label["best-unloadable"]
    assert best.val_score == pytest.approx(0.9) and best.official.ok, best.official.raw
    assert best.official.raw["code_files"] == 2 and "code_fallback" not in best.official.raw  # train.py, run_1.py
    assert late.val_score == pytest.approx(0.5) and "written later" in late.official.error
    assert late.saved_s == pytest.approx(changed_s - result.started_at, abs=1e-3)
    why = late.official.raw["code_fallback"]
    assert "no snapshot" in why and "run_1.py last changed" in why, why
    flags = [v for v in result.audit.violations if v.rule == 6 and "scripts as the run left them" in v.reason]
    assert len(flags) == 1 and flags[0].verdict == "flag", result.audit.violations
    assert result.status == "success", result.reason
