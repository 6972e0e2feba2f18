"""The ``optuna`` agent: a time-budgeted Optuna search over the task's baseline knobs, run as an agent.

The harness starts this module in the agent's workspace (``python -m baselines.agent --task t6``) exactly as
it starts an LLM agent's CLI: same workspace, watchdog, tracer, collection, evaluation and audit. It reads
its time from ``BENCH_BUDGET_S`` and ``BENCH_STARTED_AT`` and, for each trial:

1. asks the study (TPE, fixed seed) for a configuration from the task's search space (``baselines.spaces``),
   with the epochs cut to what the time left can hold (seconds per unit of work measured on earlier trials);
2. writes ``run_<k>.py`` = the workspace's ``train.py`` with only its ``CONFIG`` values changed
   (``baselines.rewrite``) and launches ``python run_<k>.py`` (the tracer makes it a child MLflow run);
3. reads the validation scores the script prints (``step N | val_mse X | epoch E``), reports them to the
   pruner on a common grid of epochs, and ends the script when the pruner says so (or when the budget
   runs out); the trial's value is the best validation score it reported;
4. marks a pruned (or cut) script's run with the reason, through the trace of that script.

It stops launching when the time left cannot hold a trial plus a margin: the 0.75 quantile of the completed
trials' durations or, if shorter, a trial of the space's minimum epochs at the median epoch time measured
(the next trial's epochs are fitted to the time left); the first trial always starts. The harness then evaluates the
best checkpoint by validation score, like any agent's. The study's summary (best params, importances,
optimisation history, trials) goes to ``.bench/artifacts/``, which the harness logs on the agent run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from baselines.rewrite import module_constants, read_config, rewrite_config
from baselines.spaces import Space, epochs_that_fit, get_space

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding baselines/ (kept off the trials' path)
LINE = re.compile(r"^step (\d+) \| (.+)$")
TERM_WAIT_S = 5.0


# ---------------------------------------------------------------------------------------------
# Reading a script's output and reporting to the pruner
# ---------------------------------------------------------------------------------------------


def parse_metrics(line: str) -> dict[str, float] | None:
    """``step 64 | val_mse 0.7058 | epoch 1.0000`` -> {"step": 64, "val_mse": 0.7058, "epoch": 1.0}; else None."""
    m = LINE.match(line.strip())
    if not m:
        return None
    out: dict[str, float] = {"step": float(m.group(1))}
    for part in m.group(2).split(" | "):
        key, _, value = part.strip().rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            continue
    return out


def val_key(metric: str) -> str:
    """The key of the validation score in a script's log lines (T6: mse -> val_mse; T1: val_bpb)."""
    return metric if metric.startswith("val_") else f"val_{metric}"


class GridReporter:
    """Validation reports -> ``trial.report(best_so_far, step)`` on a common grid of ``grid`` steps per epoch.

    Trials with different batch sizes validate at different points; Optuna's median pruner compares trials
    at equal steps. Each grid point gets the best score known when training had got that far: points passed
    between two validations carry the earlier best, the point of a validation gets the new best.
    """

    def __init__(self, trial, grid: int, minimize: bool):
        self.trial, self.grid, self.minimize = trial, max(1, int(grid)), minimize
        self.last = -1  # last grid step reported
        self.best: float | None = None

    def better(self, a: float, b: float | None) -> bool:
        return b is None or (a < b if self.minimize else a > b)

    def add(self, progress_epochs: float, value: float) -> bool:
        """Record a validation at ``progress_epochs``; True if a new grid step was reported (ask the pruner)."""
        if not math.isfinite(value):
            return False
        k = int(math.floor(progress_epochs * self.grid + 1e-6))
        previous = self.best
        if self.better(value, self.best):
            self.best = value
        if k <= self.last:
            return False
        if previous is not None:
            for g in range(self.last + 1, k):
                self.trial.report(previous, g)
        self.trial.report(self.best, k)
        self.last = k
        return True


# ---------------------------------------------------------------------------------------------
# Time: how long a trial takes, and when to stop launching
# ---------------------------------------------------------------------------------------------


@dataclass
class TrialRecord:
    """What happened to one trial (also the rows of trials.csv)."""

    number: int
    script: str
    state: str = "RUNNING"  # COMPLETE | PRUNED | CUT | FAIL
    value: float | None = None
    epochs: int | None = None
    epochs_suggested: int | None = None
    predicted_s: float | None = None
    duration_s: float | None = None
    startup_s: float | None = None
    seconds_per_unit: float | None = None  # measured rate: training seconds per unit of Space.epoch_cost
    seconds_per_epoch: float | None = None  # measured: training (and validation) seconds per epoch
    progress_epochs: float = 0.0
    reports: int = 0
    exit_code: int | None = None
    reason: str = ""
    params: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank, so the max for q=1 and for few values)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


class TimeKeeper:
    """The budget as the agent sees it: a deadline, a reserve for the summary, and trial durations measured so far."""

    def __init__(self, deadline: float, reserve_s: float, *, quantile_q: float = 0.75, safety: float = 1.15):
        self.deadline, self.reserve_s, self.q, self.safety = deadline, reserve_s, quantile_q, safety
        self.records: list[TrialRecord] = []

    def left(self, now: float | None = None) -> float:
        """Seconds left for trials (the reserve for the final summary already taken off)."""
        return self.deadline - self.reserve_s - (time.time() if now is None else now)

    def expected_trial_s(self) -> float | None:
        """A high quantile of the durations of completed trials (None before any completed)."""
        done = [r.duration_s for r in self.records if r.state == "COMPLETE" and r.duration_s]
        if not done:  # only pruned / failed so far: their durations are all there is
            done = [r.duration_s for r in self.records if r.duration_s]
        return quantile(done, self.q) if done else None

    def margin_s(self, expected: float) -> float:
        return max(3.0, 0.1 * expected)

    def shortest_trial_s(self, min_epochs: int) -> float | None:
        """A trial of ``min_epochs`` at the median epoch time measured so far (epochs are fitted to the time left)."""
        per_epoch = [r.seconds_per_epoch for r in self.records if r.seconds_per_epoch]
        startup = self.startup_s()
        if not per_epoch or startup is None:
            return None
        return startup + min_epochs * quantile(per_epoch, 0.5) * self.safety

    def can_launch(self, now: float | None = None, min_epochs: int | None = None) -> tuple[bool, str]:
        """The stop rule: launch while the time left holds a trial plus a margin (always the first).

        A trial is the q75 of the completed trials' durations or, when ``min_epochs`` is given and shorter,
        a trial of ``min_epochs`` at the median epoch time (the next trial's epochs are fitted to the time left).
        """
        left = self.left(now)
        if left <= 0:
            return False, f"no time left ({left:.0f} s after the summary reserve)"
        expected = self.expected_trial_s()
        if expected is None:
            return True, "first trial"
        what = f"q{self.q:.2f} of {len(self.records)} trials"
        shortest = self.shortest_trial_s(min_epochs) if min_epochs else None
        if shortest is not None and shortest < expected:
            expected, what = shortest, f"{min_epochs} epoch(s) at the median epoch time"
        need = expected + self.margin_s(expected)
        if left < need:
            return False, f"{left:.0f} s left < {need:.0f} s for a trial ({what} + margin)"
        return True, f"{left:.0f} s left >= {need:.0f} s"

    def startup_s(self) -> float | None:
        values = [r.startup_s for r in self.records if r.startup_s is not None]
        return max(values) if values else None

    def rate(self) -> float | None:
        """Seconds per unit of epoch cost: a high quantile of the rates measured on trials (conservative)."""
        values = [r.seconds_per_unit for r in self.records if r.seconds_per_unit]
        return quantile(values, 0.8) if values else None

    def predict_s(self, epochs: int, epoch_cost: float) -> float | None:
        rate, startup = self.rate(), self.startup_s()
        if rate is None or startup is None:
            return None
        return startup + epochs * epoch_cost * rate * self.safety

    def fit_epochs(self, epochs: int, epoch_cost: float, now: float | None = None) -> int:
        """``epochs`` cut to what the time left can hold (unchanged before any measurement)."""
        rate, startup = self.rate(), self.startup_s()
        if rate is None or startup is None:
            return epochs
        room = self.left(now) - startup - self.margin_s(startup)
        return min(epochs, epochs_that_fit(room, epoch_cost * rate * self.safety))


# ---------------------------------------------------------------------------------------------
# Running one trial
# ---------------------------------------------------------------------------------------------


class Workspace:
    """The agent's view of its workspace: train.py, prepare.py's constants, data/meta.json, the spool."""

    def __init__(self, path: Path):
        self.path = path.resolve()
        self.train_source = (self.path / "train.py").read_text(encoding="utf-8")
        self.prepare_constants = module_constants((self.path / "prepare.py").read_text(encoding="utf-8"))
        self.base_config = read_config(self.train_source, self.prepare_constants)
        meta = self.path / "data" / "meta.json"
        try:
            self.meta = json.loads(meta.read_text()) if meta.is_file() else {}
        except (OSError, ValueError):
            self.meta = {}
        self.bench = self.path / ".bench"
        self.artifacts = self.bench / "artifacts"
        self.spool = Path(os.environ.get("BENCH_SPOOL_DIR", self.bench / "spool"))

    @property
    def metric(self) -> str:
        return str(self.prepare_constants.get("METRIC", "score"))

    @property
    def minimize(self) -> bool:
        return str(self.prepare_constants.get("DIRECTION", "min")) == "min"

    def next_script(self) -> Path:
        k = 1
        while (self.path / f"run_{k}.py").exists():
            k += 1
        return self.path / f"run_{k}.py"

    def mark(self, pid: int, started: float, events: list[dict]) -> None:
        """Append events to the trace of the script with ``pid`` (its MLflow run shows them); best effort."""
        for f in sorted(self.spool.glob(f"*-{pid}.jsonl")):
            try:
                if int(f.name.split("-", 1)[0]) / 1e9 < started - 1:
                    continue  # an older process with the same pid
                with open(f, "a", encoding="utf-8") as out:
                    # a leading newline ends a line the killed script may have left half-written
                    out.write("\n" + "".join(json.dumps(e) + "\n" for e in events))
            except (OSError, ValueError):
                pass


def default_threads() -> int:
    """Half the cores this process may use (at least one): the trials run one at a time, and on a CPU a
    second intra-op thread fighting the harness, the evaluation or a neighbour for a core costs far more
    than it brings (DLinear on a busy 2-core machine: 16 s with one thread, 59 s with two)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // 2)


def trial_env(threads: int | None = None) -> dict[str, str]:
    """The harness's environment for the scripts, without the path entry that made this package importable.

    ``threads``: the intra-op threads of torch/OpenMP/MKL in the scripts (None or 0: as the environment says).
    """
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != PACKAGE_ROOT]
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        env.pop("PYTHONPATH", None)
    return env


def _reader(stream, lines: queue.Queue, log_path: Path) -> None:
    with open(log_path, "ab") as log:
        for raw in iter(stream.readline, b""):
            log.write(raw)
            log.flush()
            lines.put((time.time(), raw.decode("utf-8", errors="replace").rstrip("\r\n")))
    lines.put((time.time(), None))


def _terminate(proc: subprocess.Popen) -> None:
    """SIGTERM the script's process group, then SIGKILL what is left after a few seconds."""
    for sig, wait in ((signal.SIGTERM, TERM_WAIT_S), (signal.SIGKILL, TERM_WAIT_S)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


class Driver:
    def __init__(
        self,
        ws: Workspace,
        space: Space,
        study,
        clock: TimeKeeper,
        *,
        storage_url: str = "",
        journal_path: Path | None = None,
        seed: int = 0,
        budget_s: float = 0.0,
        max_epochs: int | None = None,
        threads: int | None = None,
        echo: bool = True,
    ):
        self.ws, self.space, self.study, self.clock, self.echo = ws, space, study, clock, echo
        self.grid = space.grid
        self.storage_url, self.journal_path, self.seed, self.budget_s = storage_url, journal_path, seed, budget_s
        self.max_epochs, self.threads = max_epochs, threads
        self.key = val_key(ws.metric)
        self.stop_reason = ""
        self.stopping = False  # set by SIGTERM (the harness at the budget): end the trial, write the summary

    def say(self, text: str) -> None:
        if self.echo:
            print(f"[optuna] {text}", flush=True)

    # -- one trial -----------------------------------------------------------------------------
    def propose(self):
        """Ask for a trial whose config fits the time left; None (with the reason) when none does."""
        import optuna

        for _ in range(3):
            trial = self.study.ask()
            overrides = self.space.suggest(trial, self.ws.base_config)
            config = {**self.ws.base_config, **overrides}
            info = {"meta": self.ws.meta}
            suggested = config.get("epochs")
            if self.max_epochs and isinstance(suggested, int):
                suggested = config["epochs"] = min(suggested, self.max_epochs)
            cost = self.space.epoch_cost(config, info)
            if isinstance(suggested, int):
                fitted = self.clock.fit_epochs(suggested, cost)
                if fitted < min(self.space.min_epochs, suggested):
                    trial.set_user_attr("not_run", f"{suggested} epochs do not fit: {fitted} would")
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    self.say(f"trial {trial.number}: does not fit the time left ({fitted} of {suggested} epochs)")
                    continue
                config["epochs"] = fitted
            config = self.space.derive(config, info)
            return trial, config, suggested, cost
        return None

    def run_trial(self, trial, config: dict, suggested: Any, cost: float) -> TrialRecord:
        import optuna

        script = self.ws.next_script()
        changes = {k: v for k, v in config.items() if k not in self.ws.base_config or self.ws.base_config[k] != v}
        script.write_text(
            rewrite_config(
                self.ws.train_source, changes, comment=f"optuna trial {trial.number} ({self.study.study_name})"
            ),
            encoding="utf-8",
        )
        epochs = config.get("epochs") if isinstance(config.get("epochs"), int) else None
        rec = TrialRecord(
            number=trial.number,
            script=script.name,
            epochs=epochs,
            epochs_suggested=suggested if isinstance(suggested, int) else None,
            predicted_s=self.clock.predict_s(epochs, cost) if epochs else None,
            params=dict(trial.params),
            config=config,
        )
        trial.set_user_attr("script", script.name)
        trial.set_user_attr("config", json.dumps(changes, default=str))
        if rec.epochs_suggested and epochs != rec.epochs_suggested:
            trial.set_user_attr("epochs_fitted", epochs)
        shown = ", ".join(f"{k}={_short(v)}" for k, v in changes.items()) or "the baseline's own CONFIG"
        predicted = f"~{rec.predicted_s:.0f} s" if rec.predicted_s else "duration unknown"
        if epochs is not None:
            predicted = f"{epochs} epochs, {predicted}"
        self.say(f"trial {trial.number} -> {script.name}: {shown} ({predicted}, {self.clock.left():.0f} s left)")

        started = time.time()
        proc = subprocess.Popen(
            [sys.executable, script.name],
            cwd=self.ws.path,
            env=trial_env(self.threads),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        lines: queue.Queue = queue.Queue()
        reader = threading.Thread(target=_reader, args=(proc.stdout, lines, script.with_suffix(".log")), daemon=True)
        reader.start()
        reporter = GridReporter(trial, self.grid, self.ws.minimize)
        first_line = last_report_t = None
        ended_by = None  # "PRUNED" | "CUT" | None (the script ended by itself)
        eof = False
        try:
            while not eof:
                try:
                    t, line = lines.get(timeout=0.5)
                except queue.Empty:
                    t, line = time.time(), ""
                if line is None:
                    eof = True
                    break
                if line and first_line is None:
                    first_line = t
                values = parse_metrics(line) if line else None
                if values and self.key in values and ended_by is None:
                    rec.reports += 1
                    progress = values.get("epoch", float(rec.reports))
                    rec.progress_epochs = progress
                    last_report_t = t
                    self.say(
                        f"trial {trial.number} {script.name}: {self.key} {values[self.key]:.4f} at epoch {progress:g}"
                    )
                    if reporter.add(progress, values[self.key]) and trial.should_prune():
                        ended_by = "PRUNED"
                        rec.reason = (
                            f"pruned by optuna ({type(self.study.pruner).__name__}) at epoch {progress:g}: "
                            f"best {self.key} {reporter.best:.4f} is not better than the median of earlier trials"
                        )
                        _terminate(proc)
                if ended_by is None and (self.stopping or self.clock.left() <= 0):
                    ended_by = "CUT"
                    rec.reason = "cut by the optuna agent: the time budget ran out"
                    _terminate(proc)
        finally:
            if proc.poll() is None:
                _terminate(proc)
            reader.join(timeout=10)
        rec.exit_code = proc.returncode
        rec.duration_s = time.time() - started
        rec.value = reporter.best
        if first_line is not None:
            rec.startup_s = first_line - started
            if last_report_t is not None and rec.progress_epochs > 0:
                rec.seconds_per_epoch = (last_report_t - first_line) / rec.progress_epochs
                if cost > 0:
                    rec.seconds_per_unit = rec.seconds_per_epoch / cost

        if ended_by is None and self.stopping and rec.exit_code != 0:
            ended_by = "CUT"  # the harness's SIGTERM reached the script too
            rec.reason = "cut: the harness ended the run at the budget"
        if ended_by == "PRUNED":
            rec.state = "PRUNED"
        elif rec.value is not None and (ended_by == "CUT" or rec.exit_code == 0):
            rec.state = "CUT" if ended_by == "CUT" else "COMPLETE"
        else:
            rec.state = "FAIL"
            rec.reason = rec.reason or f"{script.name} exited with code {rec.exit_code} after {rec.reports} validations"
        for key, value in (("state", rec.state), ("duration_s", round(rec.duration_s, 2)), ("reason", rec.reason)):
            if value:
                trial.set_user_attr(key, value)
        if rec.state == "PRUNED":
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif rec.state in ("COMPLETE", "CUT"):
            self.study.tell(trial, rec.value)  # a cut trial's checkpoints and scores are as real as any
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        marks = [
            {
                "ev": "metrics",
                "t": time.time(),
                "step": 0,
                "metrics": {"optuna_trial": rec.number, "optuna_pruned": 1.0 if rec.state == "PRUNED" else 0.0},
            }
        ]
        if ended_by is not None:  # a script ended by a signal writes no end event: say why it ended
            marks.append(
                {"ev": "end", "t": time.time(), "status": "KILLED", "exit_code": rec.exit_code, "error": rec.reason}
            )
        self.ws.mark(proc.pid, started, marks)
        best = f"{self.key} {rec.value:.4f}" if rec.value is not None else "no score"
        self.say(
            f"trial {trial.number} {rec.state.lower()}: {best} in {rec.duration_s:.1f} s ({rec.reason or 'finished'})"
        )
        return rec

    # -- the search ----------------------------------------------------------------------------
    def search(self, n_trials: int) -> None:
        launched = 0
        while launched < n_trials and not self.stopping:
            ok, why = self.clock.can_launch(min_epochs=self.space.min_epochs)
            if not ok:
                self.stop_reason = f"stopped launching: {why}"
                self.say(self.stop_reason)
                return
            proposal = self.propose()
            if proposal is None:
                self.stop_reason = "stopped launching: three proposals in a row did not fit the time left"
                self.say(self.stop_reason)
                return
            rec = self.run_trial(*proposal)
            self.clock.records.append(rec)
            launched += 1
            write_summary(self, final=False)
        self.stop_reason = self.stop_reason or (
            "the harness ended the run" if self.stopping else f"{n_trials} trials launched (the --trials limit)"
        )
        self.say(self.stop_reason)


def _short(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


# ---------------------------------------------------------------------------------------------
# The study's summary, for the agent run's artifacts
# ---------------------------------------------------------------------------------------------


def write_summary(driver: Driver, *, final: bool) -> dict:
    """study.json, best_config.json, trials.csv (every time); importances and plots (final only, if time allows)."""
    out = driver.ws.artifacts
    out.mkdir(parents=True, exist_ok=True)
    study, records = driver.study, driver.clock.records
    by_number = {r.number: r for r in records}
    states: dict[str, int] = {}
    for r in records:
        states[r.state] = states.get(r.state, 0) + 1
    ours = [r for r in records if r.value is not None and r.state in ("COMPLETE", "CUT")]
    best = None
    if ours:
        pick = min if driver.ws.minimize else max
        best = pick(ours, key=lambda r: r.value)
    summary = {
        "task": driver.space.task,
        "metric": driver.ws.metric,
        "direction": "min" if driver.ws.minimize else "max",
        "study_name": study.study_name,
        "storage": driver.storage_url,
        "sampler": type(study.sampler).__name__,
        "pruner": type(study.pruner).__name__,
        "seed": driver.seed,
        "budget_s": driver.budget_s,
        "deadline": driver.clock.deadline,
        "trials": len(records),
        "states": states,
        "pruned": states.get("PRUNED", 0),
        "stop_reason": driver.stop_reason,
        "final": final,
        "best": None,
    }
    if best is not None:
        summary["best"] = {
            "trial": best.number,
            "script": best.script,
            "value": best.value,
            "params": best.params,
            "config": best.config,
            "epochs": best.epochs,
            "duration_s": round(best.duration_s or 0.0, 2),
            "state": best.state,
        }
        (out / "best_config.json").write_text(json.dumps(best.config, indent=2, default=str))
        (out / "best_params.json").write_text(json.dumps(best.params, indent=2, default=str))
    with open(out / "trials.csv", "w", newline="", encoding="utf-8") as f:
        names = sorted({k for r in records for k in r.params})
        w = csv.writer(f)
        w.writerow(
            [
                "number",
                "script",
                "state",
                "value",
                "epochs",
                "epochs_suggested",
                "duration_s",
                "predicted_s",
                "startup_s",
                "progress_epochs",
                "reports",
                "exit_code",
                "reason",
                *(f"params_{n}" for n in names),
            ]
        )
        for r in records:
            w.writerow(
                [
                    r.number,
                    r.script,
                    r.state,
                    r.value,
                    r.epochs,
                    r.epochs_suggested,
                    _round(r.duration_s),
                    _round(r.predicted_s),
                    _round(r.startup_s),
                    r.progress_epochs,
                    r.reports,
                    r.exit_code,
                    r.reason,
                    *(r.params.get(n, "") for n in names),
                ]
            )
    if final:
        summary["importances"] = _importances(study, out)
        if time.time() < driver.clock.deadline + 10:  # the harness's grace period is 30 s: plots take a few
            summary["plots"] = _plots(study, out)
        journal = driver.journal_path
        if journal is not None and journal.is_file():
            shutil.copy2(journal, out / journal.name)
    summary["trial_records"] = [asdict(by_number[n]) for n in sorted(by_number)]
    (out / "study.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def _importances(study, out: Path) -> dict | str:
    import optuna

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = optuna.importance.get_param_importances(study)
    except Exception as e:  # too few completed trials, a single value, ...
        return f"not computed: {type(e).__name__}: {e}"
    imp = {k: float(v) for k, v in imp.items()}
    (out / "importances.json").write_text(json.dumps(imp, indent=2))
    return imp


def _plots(study, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    made = []
    for name, fn in (
        ("optimization_history.png", vis.plot_optimization_history),
        ("intermediate_values.png", vis.plot_intermediate_values),
        ("param_importances.png", vis.plot_param_importances),
    ):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = fn(study)
                fig = (ax if not hasattr(ax, "flat") else ax.flat[0]).figure
                fig.set_size_inches(8, 5)
                fig.tight_layout()
                fig.savefig(out / name, dpi=100)
                plt.close(fig)
            made.append(name)
        except Exception as e:  # e.g. importances with fewer than two completed trials
            (out / (name + ".txt")).write_text(f"not drawn: {type(e).__name__}: {e}\n")
        plt.close("all")
    return made


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def open_storage(spec: str | None, ws: Workspace):
    """(storage for optuna, its URL or path for people, the journal file if it is one).

    An RDB URL (``sqlite:///...``, ``postgresql+psycopg://...``) is used as is; anything else is the path of
    a journal file; nothing means a journal file in the workspace's ``.bench/optuna/``.
    """
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if spec and "://" in spec:
        return spec, spec, None
    path = Path(spec) if spec else ws.bench / "optuna" / "study.journal"
    path = path if path.is_absolute() else (ws.path / path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path))), str(path), path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m baselines.agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", help="task id (default: TASK_ID of the workspace's prepare.py)")
    p.add_argument(
        "--trials", type=int, default=10_000, help="at most this many trials (default: until the time is up)"
    )
    p.add_argument("--seed", type=int, default=0, help="TPE sampler seed")
    p.add_argument(
        "--storage", help="Optuna storage: an RDB URL or a journal file (default: .bench/optuna/study.journal)"
    )
    p.add_argument("--study", help="study name (default: <task>-<run directory>); an existing study is continued")
    p.add_argument("--pruner", choices=["median", "none"], default="median")
    p.add_argument("--prune-after", type=int, help="completed trials before pruning starts (default: the space's)")
    p.add_argument("--max-epochs", type=int, help="cap every trial's epochs (quick runs and tests)")
    p.add_argument(
        "--threads", type=int, help="OMP/MKL threads of each trial (default: half the cores; 0: leave the env alone)"
    )
    p.add_argument("--budget", type=float, help="seconds (default: $BENCH_BUDGET_S, set by the harness)")
    p.add_argument(
        "--reserve", type=float, help="seconds kept for the summary at the end (default: 3%% of the budget, 5-30 s)"
    )
    args = p.parse_args(argv)

    import optuna

    ws = Workspace(Path.cwd())
    task = args.task or str(ws.prepare_constants.get("TASK_ID", ""))
    space = get_space(task)
    budget = args.budget if args.budget is not None else float(os.environ.get("BENCH_BUDGET_S", "0") or 0)
    if budget <= 0:
        p.error("no budget: run under the harness (BENCH_BUDGET_S) or pass --budget SECONDS")
    started = float(os.environ.get("BENCH_STARTED_AT") or time.time())
    reserve = args.reserve if args.reserve is not None else min(30.0, max(5.0, 0.03 * budget))
    clock = TimeKeeper(started + budget, reserve)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage, storage_url, journal = open_storage(args.storage, ws)
    run_name = ws.path.parent.name if ws.path.name == "workspace" else ws.path.name  # <task>-optuna-r1-<time>
    name = args.study or (run_name if run_name.startswith(f"{task}-") else f"{task}-{run_name}")
    pruner = (
        optuna.pruners.MedianPruner(
            n_startup_trials=space.prune_after if args.prune_after is None else args.prune_after,
            n_warmup_steps=int(round(space.warmup_epochs * space.grid)),
        )
        if args.pruner == "median"
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction="minimize" if ws.minimize else "maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed, n_startup_trials=space.tpe_startup),
        pruner=pruner,
        load_if_exists=True,
    )
    if not study.trials:
        for params in space.first(ws.base_config):
            study.enqueue_trial(params, skip_if_exists=True)
    study.set_user_attr("task", task)
    study.set_user_attr("metric", ws.metric)

    driver = Driver(
        ws,
        space,
        study,
        clock,
        storage_url=storage_url,
        journal_path=journal,
        seed=args.seed,
        budget_s=budget,
        max_epochs=args.max_epochs,
        threads=default_threads() if args.threads is None else args.threads,
    )
    driver.say(
        f"{task}: study {name!r} on {storage_url}; budget {budget:.0f} s, {clock.left():.0f} s left for trials; "
        f"metric {ws.metric} ({'min' if ws.minimize else 'max'}); knobs {', '.join(space.knobs)}; "
        f"{driver.threads or 'default'} thread(s) per trial"
    )

    def on_term(signum, frame):  # only a flag: the trial loop looks at it twice a second
        driver.stopping = True

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        driver.search(args.trials)
    finally:
        signal.signal(signal.SIGTERM, previous)  # a second SIGTERM while summarising ends us, as it should
    summary = write_summary(driver, final=True)
    if summary["best"]:
        b = summary["best"]
        driver.say(
            f"best: trial {b['trial']} ({b['script']}) {driver.key} {b['value']:.4f}; params {json.dumps(b['params'])}"
        )
    driver.say(f"{summary['trials']} trials: {summary['states']}; summary in {ws.artifacts}")
    return 0 if summary["best"] else 1


if __name__ == "__main__":
    sys.exit(main())
