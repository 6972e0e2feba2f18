"""The search: ask the study for a configuration that fits the time left, run it as ``run_<k>.py``, tell the study.

One trial at a time. A trial's validation scores are read from its trace (``baselines.spool``) and reported to
the pruner on a common grid (``baselines.pruning``); a pruned trial, or one still running when the time is up,
is ended with its whole process tree (``baselines.trial_process``) and its trace is marked with the reason.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from baselines.pruning import GridReporter
from baselines.rewrite import rewrite_config
from baselines.spaces import Space
from baselines.spool import TrialSpool, val_key
from baselines.summary import write_summary
from baselines.timing import TimeKeeper, TrialRecord, measure_speed
from baselines.trial_process import TrialProcess, trial_token
from baselines.trial_workspace import TrialWorkspace

POLL_S = 0.5  # how often a running trial's trace is read (and the clock and the harness's SIGTERM looked at)


class Driver:
    """The study's trials, one at a time, in the workspace ``ws``, while ``clock`` says there is time for one."""

    def __init__(
        self,
        ws: TrialWorkspace,
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
        self.token = trial_token()
        self.stop_reason = ""
        self.stopping = False  # set by SIGTERM (the harness at the budget): end the trial, write the summary

    def say(self, text: str) -> None:
        if self.echo:
            print(f"[optuna] {text}", flush=True)

    # -- one trial -----------------------------------------------------------------------------
    def propose(self):
        """(trial, config, epochs suggested, epoch cost) for a config that fits the time left; None when three
        proposals in a row do not (each is told to the study as FAIL, and said)."""
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
        rec = self._write_script(trial, config, suggested, cost)
        script = self.ws.path / rec.script
        process = TrialProcess(script, threads=self.threads, token=self.token)
        spool = TrialSpool(self.ws.spool, process.pid, process.started, self.key)
        reporter = GridReporter(trial, self.grid, self.ws.direction)
        points: list[tuple[float, float]] = []  # (time logged, epochs) of each validation read
        ended_by = None  # "PRUNED" | "CUT" | None (the script ended by itself)
        try:
            while ended_by is None:
                exited = process.exited()  # looked at before reading: nothing it logged is missed
                for v in spool.read():
                    rec.reports += 1
                    progress = v.epoch if v.epoch is not None else float(rec.reports)
                    rec.progress_epochs = progress
                    points.append((v.t, progress))
                    self.say(f"trial {trial.number} {script.name}: {self.key} {v.value:.4f} at epoch {progress:g}")
                    if reporter.add(progress, v.value) and trial.should_prune():
                        ended_by = "PRUNED"
                        rec.reason = (
                            f"pruned by optuna ({type(self.study.pruner).__name__}) at epoch {progress:g}: "
                            f"best {self.key} {reporter.best:.4f} is not better than the median of earlier trials"
                        )
                        break  # validations past the pruned point do not count
                if exited:
                    break
                if ended_by is None and (self.stopping or self.clock.left() <= 0):
                    ended_by = "CUT"
                    rec.reason = "cut by the optuna agent: the time budget ran out"
                if ended_by is None:
                    process.exited(POLL_S)
        finally:
            if ended_by is not None or not process.exited():
                process.end()
        rec.exit_code = process.exit_code
        rec.duration_s = time.time() - process.started
        rec.value = reporter.best
        measure_speed(rec, process.started, points, spool.started_t, cost)
        if ended_by is None and self.stopping and rec.exit_code != 0:
            ended_by = "CUT"  # the harness's SIGTERM reached the script too
            rec.reason = "cut: the harness ended the run at the budget"
        self._finish(trial, rec, ended_by, spool)
        return rec

    def _write_script(self, trial, config: dict, suggested: Any, cost: float) -> TrialRecord:
        """run_<k>.py = train.py with the trial's CONFIG changes; the trial's record and user attributes."""
        script = self.ws.next_script()
        changes = {k: v for k, v in config.items() if k not in self.ws.base_config or self.ws.base_config[k] != v}
        comment = f"optuna trial {trial.number} ({self.study.study_name})"
        script.write_text(rewrite_config(self.ws.train_source, changes, comment=comment), encoding="utf-8")
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
        return rec

    def _finish(self, trial, rec: TrialRecord, ended_by: str | None, spool: TrialSpool) -> None:
        """The trial's state, told to the study and marked on its trace (with the reason if the driver ended it)."""
        import optuna

        if ended_by == "PRUNED":
            rec.state = "PRUNED"
        elif rec.value is not None and (ended_by == "CUT" or rec.exit_code == 0):
            rec.state = "CUT" if ended_by == "CUT" else "COMPLETE"
        else:
            rec.state = "FAIL"
            rec.reason = rec.reason or f"{rec.script} exited with code {rec.exit_code} after {rec.reports} validations"
        if spool.find() is None:  # no validation could be read, so none could be pruned or scored: say why
            rec.reason += "; " if rec.reason else ""
            rec.reason += (
                f"no trace of {rec.script} (pid {spool.pid}) in {spool.spool_dir}: the tracer did not run for it "
                "(BENCH_SPOOL_DIR or BENCH_WORKSPACE unset, or its hook not on PYTHONPATH), so its validation "
                "scores could not be read"
            )
        for key, value in (("state", rec.state), ("duration_s", round(rec.duration_s, 2)), ("reason", rec.reason)):
            if value:
                trial.set_user_attr(key, value)
        if rec.state == "PRUNED":
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif rec.state in ("COMPLETE", "CUT"):
            self.study.tell(trial, rec.value)  # a cut trial's checkpoints and scores are as real as any
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        pruned = 1.0 if rec.state == "PRUNED" else 0.0
        marks = [
            {
                "ev": "metrics",
                "t": time.time(),
                "step": 0,
                "metrics": {"optuna_trial": rec.number, "optuna_pruned": pruned},
            }
        ]
        if ended_by is not None:  # a script ended by a signal writes no end event: say why it ended
            marks.append(
                {"ev": "end", "t": time.time(), "status": "KILLED", "exit_code": rec.exit_code, "error": rec.reason}
            )
        spool.mark(marks)
        best = f"{self.key} {rec.value:.4f}" if rec.value is not None else "no score"
        self.say(
            f"trial {trial.number} {rec.state.lower()}: {best} in {rec.duration_s:.1f} s ({rec.reason or 'finished'})"
        )

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
