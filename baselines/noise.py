"""``bench baselines noise``: a task's noise floor, the spread of its unchanged baseline over seeds, measured once
and kept in ``baselines/results/noise/<task>.json`` for the reports (:mod:`analysis.noise`).

Two ways to measure it:

- **on the task's data, through the harness** (the default): ``--seeds`` repeats of the ``baseline`` agent in one
  campaign (``bench run --agent baseline --repeats N``: each repeat draws and records its seed), or the seeded
  baseline runs of a campaign already made (``--from-campaign``); the floor is then the runs' official scores;
- **on the task's small generated data** (``--small``): the baseline ``train.py`` with the folder's ``TINY`` config
  (``smalldata.py``, what ``bench tasks check`` trains) on the CPU, once per seed, each checkpoint scored by
  ``prepare.py --eval``. It measures how much the code's own randomness moves a few steps of training on made-up
  data, not the task's noise: the file says ``"data": "small"`` and the report marks it so, until a GPU measures the
  task on its data.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import protocol
from bench.errors import BenchError
from bench.runspec import draw_seed

RESULTS_DIR = Path(__file__).resolve().parent / "results" / "noise"


class SeedRunError(BenchError, RuntimeError):
    """A seed's baseline on the small data that did not train or was not scored; the message holds its output."""


def summarise(task_id: str, scores: dict[int, float], *, data: str, hardware: str, source: str) -> dict:
    """The file's content: the seeds and their scores, the spread of the scores and of Eq. 1's terms."""
    from bench.tasks import get_task

    task = get_task(task_id)
    values = list(scores.values())
    terms = [task.direction.relative(s, task.baseline_score) for s in values]
    return {
        "task": task.id,
        "metric": task.metric,
        "baseline_score": task.baseline_score,
        "seeds": list(scores),
        "scores": values,
        "mean_score": statistics.mean(values),
        "std_score": statistics.stdev(values) if len(values) > 1 else None,
        "mean_rel": statistics.mean(terms),
        "std_rel": statistics.stdev(terms) if len(terms) > 1 else None,
        "data": data,
        "hardware": hardware,
        "source": source,
        "date": time.strftime("%Y-%m-%d"),
    }


def from_campaign(campaign: str, task_id: str) -> dict[int, float]:
    """The seeded, successful ``baseline`` runs of ``task_id`` in a campaign (their ``result.json`` files, which the
    store was written from): seed -> official score, one per seed."""
    from bench.pipeline.workspace import campaign_dir
    from bench.result import RunResult

    scores: dict[int, float] = {}
    for path in sorted(campaign_dir(campaign).glob("*/result.json")):
        r = RunResult.load(path)
        if r.run.agent == "baseline" and r.run.task == task_id and r.status == "success" and r.run.seed is not None:
            scores.setdefault(r.run.seed, float(r.score))
    return scores


def run_campaign(task_id: str, seeds: int, campaign: str, budget_s: float | None, console: bool) -> list:
    """``seeds`` repeats of the baseline agent on the task, after the campaign's last one (each draws its seed)."""
    from bench import rundir
    from bench.pipeline.workspace import campaign_dir
    from bench.runner import RunSpec, run
    from bench.tasks import get_task

    task = get_task(task_id)
    first = rundir.next_repeat(campaign_dir(campaign), task.id, "baseline")
    specs = [
        RunSpec(task=task, agent="baseline", campaign=campaign, repeat=r, budget_s=budget_s, console=console)
        for r in range(first, first + seeds)
    ]
    return [run(spec) for spec in specs]


def small(task_id: str, seeds: int, say=print) -> dict[int, float]:
    """The baseline with TINY on the folder's small generated data, once per drawn seed: seed -> --eval's score."""
    from bench.conformance.check import DRIVER, _eval, _prepare
    from bench.conformance.promises import one_json_line
    from bench.pipeline import workspace
    from bench.tasks import get_task, smalldata

    task = get_task(task_id)
    folder = task.folder
    tiny = smalldata.load(folder)
    scores: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix=f"noise-{task.id}-") as tmp:
        work = Path(tmp)
        data = _prepare(folder, work, tiny)
        for k in range(1, seeds + 1):
            seed = draw_seed()
            ws = workspace.create(task, data, campaign="noise", agent="baseline", repeat=k, root=work / "runs").path
            if tiny.setup is not None:
                tiny.setup(ws)
            child = {**os.environ, "CUDA_VISIBLE_DEVICES": "", protocol.SEED_VAR: str(seed)}
            child.pop("PYTHONPATH", None)
            code = f"OUT = {str(work / f'given-{k}.json')!r}\n" + DRIVER
            proc = subprocess.run(
                [sys.executable, "-c", code], cwd=ws, env=child, input=json.dumps(tiny.tiny), text=True,
                capture_output=True, timeout=1800,
            )  # fmt: skip
            ckpts = sorted((ws / "checkpoints").glob("*.pt"), key=lambda p: (p.stat().st_mtime_ns, p.name))
            if proc.returncode != 0 or not ckpts:
                raise SeedRunError(f"{task.id} seed {seed}: train.py exited {proc.returncode}: {proc.stdout[-400:]}")
            done, _ = _eval(ws, ckpts[-1], data)
            line, _ = one_json_line(done.stdout)
            if not line or not isinstance(line.get("value"), float):
                raise SeedRunError(f"{task.id} seed {seed}: prepare.py --eval gave no score: {done.stdout[-400:]}")
            scores[seed] = line["value"]
            say(f"[noise] {task.id} seed {seed}: {task.metric} {line['value']:.6g}")
    return scores


def write(result: dict, out: Path | None = None) -> Path:
    path = Path(out) if out else RESULTS_DIR / f"{result['task']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
