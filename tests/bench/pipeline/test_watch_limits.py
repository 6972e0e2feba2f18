"""The workspace's size limit (bench.pipeline.watch.WorkspaceGuard): noted past the limit, the run ended past the
margin; and a limit's end of the run through the Watchdog (SIGTERM, the grace, as at the budget)."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.pipeline.watch import Watchdog, WorkspaceGuard
from bench.sandbox.resource_limits import MIB


class _Dog:
    elapsed_s = 12.34

    def __init__(self) -> None:
        self.ended: list[str] = []

    def end(self, why: str) -> None:
        self.ended.append(why)


def test_past_the_limit_is_noted_and_past_the_margin_ends_the_run(tmp_path):
    dog = _Dog()
    guard = WorkspaceGuard(tmp_path, 10 * MIB, dog)
    (tmp_path / "a.bin").write_bytes(b"x" * (9 * MIB))
    assert guard.measure() == 9 * MIB and guard.hit is None
    (tmp_path / "b.bin").write_bytes(b"x" * (1536 * 1024))  # 10.5 MiB: over the limit, within its 10 % margin
    guard.measure()
    assert guard.hit == {"limit": "workspace", "value": 10 * MIB, "bytes": 10752 * 1024, "at_s": 12.3, "ended": False}
    assert dog.ended == []
    (tmp_path / "c.bin").write_bytes(b"x" * MIB)  # 11.5 MiB > 11 MiB
    guard.measure()
    assert guard.hit["ended"] is True and guard.hit["bytes"] == 11776 * 1024
    assert dog.ended == ["the workspace holds 12 MiB, over its 10 MiB limit"]


def test_a_limit_ends_the_agent_as_the_budget_would(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    dog = Watchdog(proc, budget_s=300, token=None, grace_s=1)
    dog.tick_s = 0.05
    dog.start()
    t0 = time.monotonic()
    dog.end("the workspace holds too much")
    proc.wait(timeout=30)
    dog.stop()
    assert time.monotonic() - t0 < 20 and proc.returncode == -15  # SIGTERM, not the budget's end in 300 s
    assert dog.ended_why == "the workspace holds too much" and not dog.timed_out
