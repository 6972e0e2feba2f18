"""What happens after a run's job ended: final, retried, or given up; the campaign's own log of it.

One campaign process at a time.

The definition of an infrastructure failure (the only thing retried) is in
:mod:`bench.campaign.job`; one that cannot heal (a refused key) is not retried until the credential
changes (``blocked``). The count is per invocation of ``bench campaign run``/``resume``: a run given
up now is tried again by the next invocation (someone fixed the data mirror, the store is back).
Every decision is appended to ``.campaign/events.jsonl`` in the campaign's folder, so that
``bench campaign status`` can say why a run is not final.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections import Counter
from pathlib import Path

from bench.campaign.job import blocked, infra_failure, retire
from bench.campaign.spec import Campaign, RunKey
from bench.errors import InputError
from bench.rundir import inspect

CONTROL = ".campaign"  # in the campaign's folder: its log, lock, children's output, submitit's files


def control_dir(campaign: Campaign) -> Path:
    """The campaign's own folder: its log, lock, children's output, submitit's files."""
    return campaign.folder / CONTROL


class Attempts:
    """Infrastructure failures per run in this invocation, against the campaign's ``retries``."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.failures: Counter[str] = Counter()
        self.gave_up: dict[str, str] = {}  # run id -> why
        self.log = control_dir(campaign) / "events.jsonl"

    def ended(self, key: RunKey, how: str, code: int | None = None) -> str:
        """A job of ``key`` ended: ``final``, ``retry``, ``gave-up`` or ``blocked``.

        ``how``: its exit, in words; ``code``: its exit status when known. ``blocked``: final, but
        refused by its API with an answer that cannot heal (:func:`bench.campaign.job.blocked`; not
        run again until the credential changes). Exit status 2 is bad input found by the run's own
        checks (this node lacks what the campaign's checks found where it started): no retry would
        change it.
        """
        seen = inspect(self.campaign.run_dir(key))
        api = infra_failure(seen.result) if seen.result is not None else None
        if seen.state == "final" and api is None:
            self.note(key, "final", seen.status)
            return "final"
        self.failures[key.run_id] += 1
        n = self.failures[key.run_id]
        why = f"{how}; the run is {seen.state} (no result.json): infrastructure failure {n}"
        if api is not None and (stays := blocked(key, seen.result)):  # a refused key: no retry would change it
            self.failures[key.run_id] -= 1
            self.gave_up[key.run_id] = stays
            self.note(key, "blocked", stays)
            return "blocked"
        if api is not None:  # recorded, but the model API failed, not the agent: set aside and run again
            why = f"infrastructure failure {n}: {api}"
            if n > self.campaign.retries:
                self.gave_up[key.run_id] = why
                self.note(key, "gave-up", f"{why}; gave up after {n} attempt(s), the run stays recorded")
                return "gave-up"
            try:
                moved = retire(self.campaign, self.campaign.run_dir(key))
            except Exception as e:  # the store cannot be reached to delete its agent run: keep the run as it is
                self.gave_up[key.run_id] = f"{why}; not set aside ({e})"
                self.note(key, "gave-up", self.gave_up[key.run_id])
                return "gave-up"
            self.note(key, "retry", f"{why}; the run moved to {moved}")
            return "retry"
        if code == 2:
            why = f"{how}: bad input for this run (see its log); the run is {seen.state}"
        elif n <= self.campaign.retries:
            self.note(key, "retry", why)
            return "retry"
        self.gave_up[key.run_id] = why
        self.note(key, "gave-up", f"{why}; gave up after {n} attempt(s)")
        return "gave-up"

    def note(self, key: RunKey, event: str, why: str) -> None:
        """Append one event of a run to the campaign's log (a JSON line), for a person to read."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        line = {"time": round(time.time(), 3), "run_id": key.run_id, "event": event, "why": why}
        with open(self.log, "a") as f:
            f.write(json.dumps(line) + "\n")


def last_events(campaign: Campaign) -> dict[str, dict]:
    """The last logged event of each run (``bench campaign status``)."""
    out: dict[str, dict] = {}
    path = control_dir(campaign) / "events.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else ():
        try:
            ev = json.loads(line)
            out[ev["run_id"]] = ev
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line
    return out


class CampaignLock:
    """One ``bench campaign run``/``resume`` per campaign at a time (two would start the same runs).

    An exclusive lock on ``.campaign/lock``, released when the process ends however it ends.
    """

    def __init__(self, campaign: Campaign) -> None:
        self.path = control_dir(campaign) / "lock"
        self._file = None

    def __enter__(self) -> CampaignLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "?"
            self._file.close()
            raise InputError(f"the campaign is being run by another bench campaign process ({holder})") from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"pid {os.getpid()}")
        self._file.flush()
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
