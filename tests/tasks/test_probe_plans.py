"""Every scored evaluation carries each check its task promises, whatever the secret.

The probes' positions follow from a per-evaluation secret (bench.scoring.checks), so a check that only some secrets
give would make a task's promise a matter of luck. Once, T1's causality check was given up for 7 % of secrets on a
test's three-block feed (a splice tried only at the first secret batch and cut, whose donors had to start at the
cut itself: the short last block found none), and `test_scorer_passes_the_trained_baseline` failed once in a full run
and never alone. Here each task's small generated data is planned for many secrets, and the expected promises come
from the task's declared contract (CAUSAL_INPUT) and the feed's length, not from the plan.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.scoring import checks
from tests.tasks.taskfolder import TASKS_DIR, expected_probes, task_modules

TASKS = sorted(p.name for p in TASKS_DIR.iterdir() if (p / "task.toml").is_file())
SECRETS = [f"{i:032x}" for i in range(300)]  # fixed, so a failure names its secret; 300 ~ 1 in 100 missed surely


def _feed(small, name: str) -> tuple[list[dict[str, np.ndarray]], str | None]:
    ws = small.prepared(name)["ws"]
    with task_modules(ws) as (prepare, _):
        feed = prepare.eval_batches(prepare.EVAL_SPLIT, str(ws / "data"), prepare.FEED_BATCH_SIZE)
        return [x for x, _ in feed], getattr(prepare, "CAUSAL_INPUT", None)


@pytest.mark.parametrize("name", TASKS)
def test_every_secret_gives_every_check_the_task_promises(small, name):
    inputs, causal = _feed(small, name)
    promised = expected_probes(len(inputs)) + (["causality"] if causal else [])
    order = [checks.DETERMINISM, checks.HISTORY, checks.BATCH, checks.CAUSALITY]
    promised = [p for p in order if p in promised]
    for secret in SECRETS:
        found = checks.plan(inputs, causal, secret)
        assert found.promises == promised, (name, secret, found.stretches)
        assert "unchecked" not in found.evidence(), (name, secret)


def test_t1s_small_feed_checks_causality_for_the_secrets_that_once_skipped_it(small):
    """Secrets for which the old plan placed no causality probe on this feed (found by running it): now each has
    two, the last block's included, each a real splice (the character after the cut differs)."""
    inputs, causal = _feed(small, "t1_language_modeling")
    assert [x[causal].shape for x in inputs] == [(1, 256), (1, 256), (1, 85)]
    for secret in ("19", "1e", "2c", "37", "48"):
        found = checks.plan(inputs, causal, secret.rjust(32, "0"))
        probes = [p for p in found.probes if p.promise == checks.CAUSALITY]
        assert probes, secret
        for probe in probes:
            (b, _), cut = probe.rows[0], probe.upto
            x, original = probe.inputs[causal][0], inputs[b][causal][0]
            assert np.array_equal(x[: cut + 1], original[: cut + 1]) and x[cut + 1] != original[cut + 1]


def test_a_feed_that_allows_no_splice_says_so_instead_of_dropping_the_check():
    """Text of one repeated character: no position after a cut can be changed into other text, so no causality
    probe exists for any secret; the plan records why, and the scorer's result carries it with the probes."""
    feed = [{"idx": np.full((1, 32), 7, dtype=np.int64)} for _ in range(6)]
    for secret in SECRETS[:20]:
        found = checks.plan(feed, "idx", secret)
        assert checks.CAUSALITY not in found.promises
        assert "repeated character" in found.evidence()["unchecked"][checks.CAUSALITY]
