"""The Slurm executor, on submitit.

Each run of a campaign is one task of a Slurm job array (``executor = "slurm"``).

A job runs :class:`RunJob`: the run's own ``bench campaign job FILE RUN_ID`` process
(:func:`bench.campaign.job. job_main`), which starts, resumes or leaves the run as its directory
says, so a job can be run again at any time.

- Resources: ``gpus_per_task`` GPUs per job (1; 0 on a CPU-only cluster, and in the tests: there is
  no GPU here; Slurm sets ``CUDA_VISIBLE_DEVICES`` to the job's), ``cpus_per_task``, ``mem_gb``,
  ``partition``, and any sbatch option through ``additional``. Runs are grouped by budget, one array
  per budget, each job's time limit the budget + grace + ``eval_margin`` + one minute of start-up,
  so that no job meets its limit while its run is within its budget. ``eval_margin`` follows the
  campaign's ``eval_budget`` (the evaluation of all of a run's candidates, 1 h by default): that
  budget, the scorer's minute to report and 10 minutes for the rest, unless the file gives one
  (which must cover the budget and the minute).
- Signals. submitit asks Slurm for SIGUSR2 ``signal_delay_s`` before the time limit (some clusters
  send it on preemption too); submitit's handler calls :meth:`RunJob.checkpoint`, which hands
  SIGTERM to the run's process (it finishes its collect, evaluate and record if it can:
  :mod:`bench.termination`), waits for it, and returns the same job for submitit to requeue: the
  requeued job finds the run final (nothing to do) or with run.json (it resumes it). The run's
  process ignores SIGUSR2 itself. SIGTERM at the time limit or on ``scancel``: submitit's process
  ignores it, the run's process finishes what it can; if Slurm's SIGKILL comes first, run.json stays
  and the run's next job resumes it.
- A job that ended with its run not final is an infrastructure failure (:mod:`bench.campaign.job`):
  resubmitted, as a job of its own, up to ``retries`` times.
- Watching: this process polls the run directories (the truth) and the jobs every ``poll_s``: a job
  is over when submitit has its result or Slurm no longer lists it (``squeue``: ``sacct`` needs
  Slurm's accounting database, which small clusters lack). The jobs are kept in
  ``.campaign/jobs.json``; Ctrl-C here leaves them running, and ``bench campaign resume FILE``
  watches them again instead of submitting twice.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from itertools import groupby

import psutil

from bench.campaign.local import LocalOutcome
from bench.campaign.retry import Attempts, control_dir
from bench.campaign.spec import Campaign, RunKey
from bench.campaign.view import Estimate, LiveView

ENV_PREFIXES = ("BENCH_", "MLFLOW_")  # what a job must see as the campaign did (the stores, the cache, the tasks)


@dataclass
class RunJob:
    """What a Slurm job runs.

    One run's ``bench campaign job`` process, with the campaign's environment.
    """

    file: str
    env: dict[str, str]
    signal_delay_s: int = 120
    _proc: subprocess.Popen | None = field(default=None, repr=False, compare=False)

    def __call__(self, run_id: str) -> int:
        """Run one run's job process to its end; its exit status."""
        cmd = [sys.executable, "-m", "bench.cli", "campaign", "job", self.file, run_id]
        self._proc = subprocess.Popen(cmd, env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"})
        while self._proc.poll() is None:  # not wait(): submitit's signal handler may need to wait on it too
            time.sleep(1.0)
        return self._proc.returncode

    def checkpoint(self, run_id: str):
        """The hook submitit calls on SIGUSR2 (time limit near, or preemption).

        Let the run finish what it can, then be requeued; the requeued job does nothing for a final
        run and resumes an unfinished one.
        """
        from submitit.helpers import DelayedSubmission

        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + max(5.0, self.signal_delay_s - 15.0)
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        return DelayedSubmission(RunJob(self.file, self.env, self.signal_delay_s), run_id)

    def __getstate__(self) -> dict:
        return {"file": self.file, "env": self.env, "signal_delay_s": self.signal_delay_s, "_proc": None}


def time_limit_min(campaign: Campaign, budget_s: float) -> int:
    """A job's time limit in minutes.

    Budget + grace + the evaluation margin (which follows the campaign's evaluation budget:
    :attr:`Campaign.eval_margin_s`) + a minute to start.
    """
    return math.ceil((budget_s + campaign.spec.grace_s + campaign.eval_margin_s + 60) / 60)


def _executor(campaign: Campaign, budget_s: float):
    import submitit

    s = campaign.slurm
    ex = submitit.AutoExecutor(folder=control_dir(campaign) / "submitit" / "%j", cluster=s.cluster)
    params: dict[str, object] = {
        "name": f"bench-{campaign.name}",
        "timeout_min": time_limit_min(campaign, budget_s),
        "tasks_per_node": 1,
        "nodes": 1,
        "stderr_to_stdout": True,
        "slurm_array_parallelism": s.array_parallelism,
        "slurm_signal_delay_s": s.signal_delay_s,
    }
    if s.gpus_per_task:
        params["gpus_per_node"] = s.gpus_per_task
    if s.cpus_per_task:
        params["cpus_per_task"] = s.cpus_per_task
    if s.mem_gb:
        params["mem_gb"] = s.mem_gb
    if s.partition:
        params["slurm_partition"] = s.partition
    if s.setup:
        params["slurm_setup"] = list(s.setup)
    if s.additional:
        params["slurm_additional_parameters"] = dict(s.additional)
    ex.update_parameters(**params)
    return ex


def job_alive(job_id: str, cluster: str) -> bool:
    """Whether a job recorded in jobs.json is still queued or running.

    Asked of ``squeue``; for submitit's local executor, of the pid.
    """
    if cluster == "local":
        try:
            return psutil.Process(int(job_id)).status() != psutil.STATUS_ZOMBIE
        except (psutil.Error, ValueError):
            return False
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return True  # cannot tell: watched again at the next poll rather than submitted twice
    return out.returncode == 0 and bool(out.stdout.strip())


class SlurmExecutor:
    """Submits the campaign's runs as job arrays and watches them to their end.

    See the module docstring.
    """

    def __init__(self, campaign: Campaign, *, every_s: float = 30.0) -> None:
        self.campaign, self.every_s = campaign, every_s
        self.jobs_file = control_dir(campaign) / "jobs.json"
        self._signals: list[int] = []

    def recorded_jobs(self) -> dict[str, str]:
        """Run id -> Slurm job id, as ``jobs.json`` recorded them (empty when it cannot be read)."""
        try:
            return {str(k): str(v) for k, v in json.loads(self.jobs_file.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def _save(self, jobs: dict[str, str]) -> None:
        self.jobs_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.jobs_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(jobs, indent=1))
        os.replace(tmp, self.jobs_file)

    def submit(self, keys: list[RunKey]) -> dict[RunKey, object]:
        """One job array per budget; the jobs by run."""
        env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
        job = RunJob(str(self.campaign.file), env, self.campaign.slurm.signal_delay_s)
        out: dict[RunKey, object] = {}
        by_budget = sorted(keys, key=lambda k: self.campaign.budget_of(k.task))
        for budget, group in groupby(by_budget, key=lambda k: self.campaign.budget_of(k.task)):
            group = list(group)
            jobs = _executor(self.campaign, budget).map_array(job, [k.run_id for k in group])
            out.update(zip(group, jobs, strict=True))
        self._save({**self.recorded_jobs(), **{k.run_id: str(j.job_id) for k, j in out.items()}})
        return out

    def run(self, keys: list[RunKey], done_before: int = 0) -> LocalOutcome:
        """Submit ``keys`` (runs not final) and watch every job to its end.

        Those with a live job are watched, not submitted again; a signal stops the watching, not
        the jobs.
        """
        out, attempts, estimate = LocalOutcome(), Attempts(self.campaign), Estimate(self.campaign)
        view = LiveView(self.campaign, done_before + len(keys), every_s=self.every_s)
        cluster = self.campaign.slurm.cluster
        recorded = self.recorded_jobs()
        adopted = {
            k: recorded[k.run_id] for k in keys if k.run_id in recorded and job_alive(recorded[k.run_id], cluster)
        }
        watching: dict[RunKey, tuple[object | None, str, float]] = {
            k: (None, j, time.monotonic()) for k, j in adopted.items()
        }
        fresh = [k for k in keys if k not in adopted]
        if adopted:
            view.say(f"{len(adopted)} run(s) have a live job already: watched, not submitted again")
        if fresh:
            jobs = self.submit(fresh)
            ids = sorted({str(j.job_id).split("_")[0] for j in jobs.values()})
            view.say(f"submitted {len(fresh)} run(s) to {cluster}: job(s) {', '.join(ids)}")
            watching.update({k: (j, str(j.job_id), time.monotonic()) for k, j in jobs.items()})
        old = {sig: signal.signal(sig, lambda s, f: self._signals.append(s)) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while watching and not self._signals:
                for key, (job, job_id, t0) in list(watching.items()):
                    if not self._over(job, job_id, cluster):
                        continue
                    del watching[key]
                    estimate.observed(key, time.monotonic() - t0)
                    verdict = attempts.ended(key, f"job {job_id} ended", self._exit_code(job))
                    if verdict == "final":
                        out.final[key.run_id] = self._status(key)
                        view.say(f"{key.run_id}: {out.final[key.run_id]} (job {job_id})")
                    elif verdict == "blocked":  # final, but its API refused the key: not run until the key changes
                        out.final[key.run_id] = self._status(key)
                        out.gave_up[key.run_id] = attempts.gave_up[key.run_id]
                        view.say(f"{key.run_id}: {out.final[key.run_id]} (job {job_id}): {out.gave_up[key.run_id]}")
                    elif verdict == "retry":
                        again = self.submit([key])[key]
                        watching[key] = (again, str(again.job_id), time.monotonic())
                        view.say(f"{key.run_id}: job {job_id} ended, run not final: resubmitted as {again.job_id}")
                    else:
                        out.gave_up[key.run_id] = attempts.gave_up[key.run_id]
                        view.say(f"{key.run_id}: job {job_id} ended, run not final; given up")
                running = {k: (f"job {j}", t0) for k, (_, j, t0) in watching.items()}
                slots = min(self.campaign.slurm.array_parallelism, max(1, len(watching)))
                view.update(
                    done_before + len(out.final),
                    running,
                    estimate.eta([], {k: t for k, (_, t) in running.items()}, slots),
                )
                self._sleep(self.campaign.slurm.poll_s)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            view.close()
        if watching:
            out.stopped = True
            view.say(
                f"stopped watching; {len(watching)} job(s) go on. See them: bench campaign status {self.campaign.file}"
            )
        return out

    def _over(self, job, job_id: str, cluster: str) -> bool:
        """Whether submitit wrote the job's result, or the scheduler no longer has it.

        Not ``job.done()`` on Slurm: it asks ``sacct``, which fails loudly without Slurm's
        accounting database.
        """
        if job is not None and job.paths.result_pickle.exists():
            return True
        if cluster == "local" and job is not None:
            return job.done()
        return not job_alive(job_id, cluster)

    @staticmethod
    def _exit_code(job) -> int | None:
        """The run process's exit status as the job returned it.

        None: unknown, e.g. the job was killed.
        """
        try:
            return int(job.result()) if job is not None and job.paths.result_pickle.exists() else None
        except Exception:  # the job raised, or its result cannot be read: unknown
            return None

    def _status(self, key: RunKey) -> str:
        from bench.rundir import inspect

        return inspect(self.campaign.run_dir(key)).status

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self._signals:
            time.sleep(min(0.5, end - time.monotonic()))
