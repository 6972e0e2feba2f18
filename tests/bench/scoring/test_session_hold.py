"""A held predictor session (the scorer's prober, issue 29): Python and torch start at once, but no file of the staged
folder runs before it is let go, and its time limit starts only then (it may wait for the whole scored feed)."""

from __future__ import annotations

import math
import time

import pytest

from bench.scoring.session import LoadError, Session

PREPARE = """
import pathlib
pathlib.Path("ran").write_text("the staged prepare.py ran")  # an unsandboxed test session may write here
FEED_BATCH_SIZE = 1

def load_checkpoint(path):
    raise ValueError("no checkpoint in this test")
"""


def test_a_held_session_runs_no_staged_code_and_has_no_deadline_before_it_is_let_go(tmp_path):
    (tmp_path / "prepare.py").write_text(PREPARE)
    log = tmp_path / "predictor.log"
    with Session(tmp_path, "checkpoint.pt", "run_1.py", device="cpu", timeout_s=60, log=log, hold=True) as held:
        assert held.deadline == math.inf  # the guard never ends a held predictor
        time.sleep(3)  # time enough for the staged code to run, had it not been held
        assert not (tmp_path / "ran").exists(), log.read_text()
        assert held.proc.poll() is None and not held.timed_out
        with pytest.raises(LoadError, match="cannot read the checkpoint"):
            held.ready()  # let go: the staged code runs now
        assert held.deadline <= time.monotonic() + 60  # its clock runs from then
    assert (tmp_path / "ran").read_text() == "the staged prepare.py ran"
