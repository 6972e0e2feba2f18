"""Issue 38's done-when: T6's test rows do not cross from a scored predictor through the page cache, to the prober or
to another run's agent, with a receiver that only times plain reads (no call a filter could deny) or asks with
``RWF_NOWAIT`` (here without the filter: what closes the channel is the drop and the lock, not the filter).

* the prober (after the scored predictor): the predictors' group drops the pages it loaded
  (:meth:`RunGroup.drop_page_cache`) before the prober runs agent code;
* an agent of another run, live while the evaluation is asked for: the evaluation waits for it to end
  (:mod:`bench.sandbox.evaluation_lock`), so its receiver reads before anything is sent; the next run's agent starts
  after the evaluation, whose pages were dropped.

Each must receive under 1 % of the rows (bit for bit). The control is the same sender and receivers without the
drop and without the lock (``BENCH_EVAL_BESIDE_AGENTS=1``: the code before this change): it receives most rows.
Asserted are rows received, never durations; a timing receiver on a loaded 2-core machine can still misread, so
each receiver reads :data:`TRIES` times and each bit is the majority's, and a timing control that still receives
less than half skips the test (the protections' zero would then prove nothing) with the count in its reason.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.sandbox import Policy, Sandbox, default_hidden, default_readable, evaluation_lock, probe
from bench.sandbox.resource_limits import Limits, RunGroup
from bench.scoring.scorer import sandbox_wrap
from tests.bench.sandbox import page_cache_channel as ch

pytestmark = [
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
    pytest.mark.slow,  # a 168 MiB cold file sent and read 24 times: about 1-3 min on the 2-core machine
]

N_ROWS = 48  # what the prober read in a real run: 10,752 bits
TRIES = 3  # each bit the majority of three reads (a timing receiver misreads a slot under load now and then)
SLOTS = {"timing": ch.SLOT, "nowait": 1}  # pages a bit: the timing receiver keeps the fastest of 4 first touches


@pytest.fixture
def boxes(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_EVAL_LOCK", str(tmp_path / "evaluation.lock"))
    eval_dir, ws = tmp_path / "eval", tmp_path / "ws"
    eval_dir.mkdir()
    ws.mkdir()
    policy = Policy(cwd=ws, writable=(ws,), readable=(*default_readable(), eval_dir), hidden=default_hidden())
    scored, prober, agent = sandbox_wrap(eval_dir), sandbox_wrap(eval_dir), Sandbox(policy, limits=RunGroup(Limits()))
    if not scored.limits.active:
        pytest.skip(f"no cgroup here ({scored.limits.error or 'rlimits'}): nothing to drop the pages from")
    yield eval_dir, ws, scored, prober, agent
    for box in (scored, prober, agent):
        box.close()
        box.limits.remove()


def _majority(tries: list[dict]) -> dict:
    bits = [np.frombuffer(t["bits"].encode(), dtype=np.uint8) == ord("1") for t in tries if "bits" in t]
    if not bits:
        return tries[0]
    votes = np.sum(bits, axis=0) * 2 > len(bits)
    return {"bits": "".join("1" if v else "0" for v in votes)}


def _cold(path: Path) -> None:
    ch.evict(path)
    if ch.cached_fraction(path) > 0.01:
        pytest.skip("this file system keeps the file's pages cached after fadvise(DONTNEED): no cold file to test")


def _to_the_prober(scored, prober, eval_dir: Path, path: Path, how: str, protected: bool) -> int:
    """Rows the prober's receiver gets after the scored predictor sent them (and the group dropped its pages)."""
    sent, slot = ch.rows(N_ROWS), SLOTS[how]
    bits, tries = ch.to_bits(sent), []
    for _ in range(TRIES):
        _cold(path)
        ch.send(scored.wrap, eval_dir, path, bits, slot)
        if protected:
            assert scored.limits.drop_page_cache() is None  # what the scorer does before its prober runs agent code
        tries.append(ch.receive(prober.wrap, eval_dir, path, len(bits), how, slot))
    return ch.rows_received(sent, _majority(tries))


def _to_another_runs_agent(scored, agent, eval_dir, ws, path, how, protected, monkeypatch) -> tuple[int, int, list]:
    """Run B's agent is live when run A's evaluation is asked for; it reads as soon as the evaluation has sent, or
    is waiting for it. Then run C's agent starts and reads. Rows B and C received, and the order things happened."""
    sent, slot = ch.rows(N_ROWS), SLOTS[how]
    bits = ch.to_bits(sent)
    ready = threading.Event()  # the evaluation has sent, or it waits for the lock
    monkeypatch.setattr(evaluation_lock, "_announcer", lambda *_: lambda waited: ready.set())
    monkeypatch.setenv("BENCH_EVAL_BESIDE_AGENTS", "0" if protected else "1")
    got_b, got_c, order = [], [], []

    def evaluation_of_run_a() -> None:
        try:
            with evaluation_lock.evaluating(600.0, console=False):
                order.append("A sends")
                ch.send(scored.wrap, eval_dir, path, bits, slot)
                ready.set()
                if protected:
                    order.append("A done" if scored.limits.drop_page_cache() is None else "A not dropped")
                else:
                    order.append("A done")
        finally:
            ready.set()  # a failed send must not leave run B waiting

    for _ in range(TRIES):
        _cold(path)
        ready.clear()
        with evaluation_lock.agent_alive(600.0, console=False):  # run B's agent
            a = threading.Thread(target=evaluation_of_run_a)
            a.start()
            assert ready.wait(600)
            got_b.append(ch.receive(agent.wrap, ws, path, len(bits), how, slot))
            order.append("B read")
        a.join(600)
        with evaluation_lock.agent_alive(600.0, console=False):  # run C's agent, launched after
            got_c.append(ch.receive(agent.wrap, ws, path, len(bits), how, slot))
    return ch.rows_received(sent, _majority(got_b)), ch.rows_received(sent, _majority(got_c)), order


def _receivers(boxes, how: str):
    """The prober's and the agent's sandbox as the receiver runs in them (without the filter for RWF_NOWAIT, which
    the filter alone answers with EOPNOTSUPP: test_page_cache.py)."""
    _, _, _, prober, agent = boxes
    if how == "timing":
        return prober, agent, []
    made = [Sandbox(replace(prober.policy, seccomp=None)), Sandbox(replace(agent.policy, seccomp=None))]
    return made[0], made[1], made


@pytest.mark.parametrize("how", ["timing", "nowait"])
def test_no_test_row_reaches_the_prober_or_another_runs_live_agent(boxes, how, monkeypatch):
    eval_dir, ws, scored, _, _ = boxes
    path = ch.shared_file(eval_dir / "shared.bin", N_ROWS * ch.ROW_BITS, SLOTS[how])
    prober, agent, made = _receivers(boxes, how)
    try:
        before_prober = _to_the_prober(scored, prober, eval_dir, path, how, protected=False)
        before_b, _, before_order = _to_another_runs_agent(scored, agent, eval_dir, ws, path, how, False, monkeypatch)
        now_prober = _to_the_prober(scored, prober, eval_dir, path, how, protected=True)
        now_b, now_c, order = _to_another_runs_agent(scored, agent, eval_dir, ws, path, how, True, monkeypatch)
    finally:
        for box in made:
            box.close()
    print(f"{how}: rows received of {N_ROWS}, before (no drop, no lock): prober {before_prober}, live agent "
          f"{before_b}; now: prober {now_prober}, live agent {now_b}, next agent {now_c}")  # fmt: skip
    # today: under 1 % of the rows (of 48: none), to every receiver
    assert now_prober < N_ROWS / 100 and now_b < N_ROWS / 100 and now_c < N_ROWS / 100, (now_prober, now_b, now_c)
    assert order[:3] == ["B read", "A sends", "A done"]  # the evaluation waited for the live agent to end
    assert before_order[:2] == ["A sends", "A done"]  # the control: it did not wait
    # the control (no drop, no lock): most rows, else this machine cannot read the channel now and the zeros above
    # prove nothing
    if how == "timing" and min(before_prober, before_b) <= N_ROWS // 2:
        pytest.skip(
            f"the timing control received {before_prober} (prober) and {before_b} (agent) of {N_ROWS} rows: this "
            "machine's load hides the channel from the timing receiver now, so the protections' result shows nothing"
        )
    assert before_prober > N_ROWS // 2 and before_b > N_ROWS // 2, (before_prober, before_b)
