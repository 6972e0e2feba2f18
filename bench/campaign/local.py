"""The local executor: a campaign on this machine, one run per GPU at a time.

Each run goes in its own ``bench`` process.

Why a process per run (``bench campaign job FILE RUN_ID``, :func:`bench.campaign.job.job_main`): a
run that crashes its harness, leaks memory or is killed takes nothing else down, and this process
only watches them. The children stay in this process's group, so that a signal to the group (Ctrl-C
in a terminal, a lost node) reaches them too.

GPUs, without importing torch here (seconds of import and a CUDA context in a process that trains
nothing): the campaign's ``gpus`` key; else ``CUDA_VISIBLE_DEVICES`` if it is set; else
``nvidia-smi -L``; else none, and the campaign runs one run at a time on a CPU-only machine (the
paper's protocol: sequential on one GPU). Each run's process gets ``CUDA_VISIBLE_DEVICES`` set to
its GPU (the agent, its scripts and the scorer see that one only) and a CPU set: the CPUs this
process may use split evenly between the slots (``sched_setaffinity`` in the child, inherited by
everything it starts), so that a run's data loaders do not starve its neighbour.

A run whose harness is alive in another process (a campaign killed a moment ago, its harness still
dying) is waited for, then counted if that harness ended it, else finished here.

A SIGTERM or SIGINT to this process starts nothing more and hands SIGTERM on to the runs (each
finishes its evaluation and record, :mod:`bench.termination`); it returns once they have ended.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from bench.campaign.job import CPUS_VAR
from bench.campaign.retry import Attempts, control_dir
from bench.campaign.spec import Campaign, RunKey
from bench.campaign.view import Estimate, LiveView
from bench.rundir import inspect


def visible_gpus(env: dict[str, str] | None = None, nvidia_smi: str = "nvidia-smi") -> list[str]:
    """The GPUs this machine lets a campaign use.

    ``CUDA_VISIBLE_DEVICES`` when set (empty: none), else the indices ``nvidia-smi -L`` lists
    (``GPU 0: ...``), else none (no driver, no GPU).
    """
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return [g.strip() for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip() and g.strip() != "-1"]
    try:
        out = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return re.findall(r"^GPU (\d+):", out.stdout, flags=re.M)


def split_cpus(cpus: list[int], n: int) -> list[tuple[int, ...]]:
    """``cpus`` in ``n`` contiguous, even parts.

    The first parts one larger when it does not divide. With fewer CPUs than parts, parts share them
    round-robin (one CPU each).
    """
    cpus = sorted(cpus)
    if n <= 0:
        return []
    if len(cpus) < n:
        return [(cpus[i % len(cpus)],) for i in range(n)]
    size, extra = divmod(len(cpus), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(tuple(cpus[start:end]))
        start = end
    return out


@dataclass(frozen=True)
class Slot:
    """Where one run goes: a GPU (None on a CPU-only machine) and a CPU set."""

    gpu: str | None
    cpus: tuple[int, ...]

    @property
    def where(self) -> str:
        """The slot in a status line: ``gpu 0``, or ``cpu`` without a GPU."""
        return f"gpu {self.gpu}" if self.gpu is not None else "cpu"

    def env(self) -> dict[str, str]:
        """The environment a run's process gets in this slot: its CPU set and its GPU."""
        out = {CPUS_VAR: ",".join(map(str, self.cpus))}
        if self.gpu is not None:
            out["CUDA_VISIBLE_DEVICES"] = self.gpu
        return out


def slots_for(campaign: Campaign) -> list[Slot]:
    """One slot per GPU, each with its share of this process's CPUs; without a GPU, one with all.

    The GPUs are the campaign's ``gpus``, else those found.
    """
    gpus = list(campaign.gpus) if campaign.gpus is not None else visible_gpus()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if not gpus:
        return [Slot(None, tuple(cpus))]
    return [Slot(g, part) for g, part in zip(gpus, split_cpus(cpus, len(gpus)), strict=True)]


@dataclass
class _Child:
    key: RunKey
    slot: Slot
    proc: subprocess.Popen
    t0: float = field(default_factory=time.monotonic)


@dataclass
class LocalOutcome:
    """How the runs given to :meth:`LocalExecutor.run` ended."""

    final: dict[str, str] = field(default_factory=dict)  # run id -> status
    gave_up: dict[str, str] = field(default_factory=dict)  # run id -> why
    elsewhere: list[str] = field(default_factory=list)  # run ids a live harness of another process holds
    stopped: bool = False  # a signal stopped the campaign before every run was started


class LocalExecutor:
    """Runs a campaign's runs on this machine's slots (module docstring)."""

    def __init__(self, campaign: Campaign, slots: list[Slot], *, poll_s: float = 0.5, every_s: float = 30.0):
        self.campaign, self.slots, self.poll_s, self.every_s = campaign, slots, poll_s, every_s
        self._children: dict[int, _Child] = {}
        self._signals: list[int] = []

    def command(self, key: RunKey) -> list[str]:
        """The command line of one run's process (``bench campaign job FILE RUN_ID``)."""
        return [sys.executable, "-m", "bench.cli", "campaign", "job", str(self.campaign.file), key.run_id]

    def run(self, keys: list[RunKey], done_before: int = 0) -> LocalOutcome:
        """Run ``keys`` (the campaign's runs not final yet) to their end.

        ``done_before``: the final ones, for the view.
        """
        out, attempts, estimate = LocalOutcome(), Attempts(self.campaign), Estimate(self.campaign)
        view = LiveView(self.campaign, done_before + len(keys), every_s=self.every_s)
        queue, free = deque(keys), list(self.slots)
        waiting: dict[RunKey, float] = {}  # runs whose harness lives in another process: until it ends
        logs = control_dir(self.campaign) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        if keys:
            view.say(f"{len(keys)} run(s) to go on {len(self.slots)} slot(s): {', '.join(s.where for s in self.slots)}")
        else:
            view.say("nothing to run: every run of the campaign is final (its summary is written again)")
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while ((queue or waiting) and not self._signals) or self._children:
                self._check_waiting(waiting, queue, out, view)
                while free and queue and not self._signals:
                    key = queue.popleft()
                    seen = inspect(self.campaign.run_dir(key))
                    if seen.state == "final":
                        out.final[key.run_id] = seen.status
                    elif seen.state == "running":
                        waiting[key] = time.monotonic()
                        view.say(f"{key.run_id}: its harness is alive in another process; waiting for it to end")
                    else:
                        self._start(key, free.pop(0), logs / f"{key.run_id}.log", view, attempts)
                for pid, child in list(self._children.items()):
                    code = child.proc.poll()
                    if code is None:
                        continue
                    del self._children[pid]
                    free.append(child.slot)
                    free.sort(key=self.slots.index)
                    estimate.observed(child.key, time.monotonic() - child.t0)
                    self._ended(child, code, attempts, queue, out, view)
                running = {c.key: (c.slot.where, c.t0) for c in self._children.values()}
                running.update({k: ("another process", t0) for k, t0 in waiting.items()})
                eta = estimate.eta(list(queue), {k: t0 for k, (_, t0) in running.items()}, len(self.slots))
                view.update(done_before + len(out.final), running, eta)
                time.sleep(self.poll_s)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            view.close()
        out.elsewhere = [k.run_id for k in waiting]
        out.stopped = bool(self._signals) and bool(queue or waiting)
        return out

    def _check_waiting(self, waiting: dict[RunKey, float], queue: deque, out: LocalOutcome, view: LiveView) -> None:
        """A run left to a harness in another process is taken back when that harness ends.

        Counted if it ended the run, else queued first (its job resumes it). Why wait rather than
        leave it: a harness killed just now (a lost node, ``kill -9`` of the campaign and
        ``resume`` at once) can outlive the kill by a moment, and a resume must still bring every
        run to its end.
        """
        for key in list(waiting):
            seen = inspect(self.campaign.run_dir(key))
            if seen.state == "running":
                continue
            del waiting[key]
            if seen.state == "final":
                out.final[key.run_id] = seen.status
                view.say(f"{key.run_id}: {seen.status}, ended by the harness that ran it")
            else:
                queue.appendleft(key)
                view.say(f"{key.run_id}: its harness has ended ({seen.state}); finishing the run here")

    def _start(self, key: RunKey, slot: Slot, log: Path, view: LiveView, attempts: Attempts) -> None:
        env = {**os.environ, **slot.env(), "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as f:
            f.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {slot.where} cpus {slot.cpus}\n".encode())
            f.flush()
            proc = subprocess.Popen(self.command(key), stdout=f, stderr=subprocess.STDOUT, env=env)
        self._children[proc.pid] = _Child(key, slot, proc)
        n = attempts.failures[key.run_id]
        again = f" (attempt {n + 1})" if n else ""
        view.say(f"{key.run_id}: started on {slot.where}{again}; log {log}")

    def _ended(self, child: _Child, code: int, attempts: Attempts, queue: deque, out: LocalOutcome, view) -> None:
        how = f"its bench process was killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        verdict = attempts.ended(child.key, how, code)
        seen = inspect(self.campaign.run_dir(child.key))
        if verdict == "final":
            out.final[child.key.run_id] = seen.status
            score = seen.result.score if seen.result is not None else None
            view.say(f"{child.key.run_id}: {seen.status}" + (f" ({score:.4f})" if score is not None else ""))
        elif verdict == "blocked":  # final, but its API refused the key: not run again until the key changes
            out.final[child.key.run_id] = seen.status
            out.gave_up[child.key.run_id] = attempts.gave_up[child.key.run_id]
            view.say(f"{child.key.run_id}: {seen.status}: {attempts.gave_up[child.key.run_id]}")
        elif verdict == "retry" and not self._signals:
            queue.appendleft(child.key)
            view.say(f"{child.key.run_id}: {how}, not final: an infrastructure failure, tried again")
        else:
            out.gave_up[child.key.run_id] = attempts.gave_up.get(child.key.run_id, f"{how}; stopped before a retry")
            view.say(f"{child.key.run_id}: not final ({how}); {'given up' if verdict == 'gave-up' else 'stopped'}")

    def _on_signal(self, signum: int, frame) -> None:
        """Start nothing more; each running run gets SIGTERM (it finishes what it can and records).

        No printing in a handler: the loop says it.
        """
        self._signals.append(signum)
        for pid in list(self._children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
