"""Probe evasion (issue 21): stateful models that answer statelessly exactly where the old, fixed probes looked.

The probes before issue 21 re-asked fixed, public positions: the first batch (determinism), the last row of 8
evenly spaced batches after the first, sent as one batch (history independence), and the first 8 samples
reversed, one fewer, in one batch (batch independence; T1's causality probes were such batches too); the probe
predictor was the only one ever sent a batch of more than one sample. A model that counts its requests can answer
statelessly exactly there and learn from the evaluation stream everywhere else. Against that scorer both models
below passed every probe and beat their honest twins (run on commit d913173, the report of issue 21 gives the
numbers); here, against probes drawn from a per-evaluation secret and cold replays shaped like the feed, they end
disqualified (rule 7, "sent before") while their honest twins (the same code with its state off) score.

* T6: the same hour of the week averaged over every week the stream has shown so far (later windows reveal the
  targets of earlier ones) instead of over the two weeks of its own look-back.
* T1: next-character counts of every block sent before (a cache of the text so far) added to the block's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.result import RunResult
from bench.sandbox.bwrap import probe
from bench.scoring import checks
from bench.scoring.scorer import load_task_module
from bench.tasks import data
from tests.bench.adversary import _guard, _run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
]

# Where the old probes looked, from their public source: the first 8 batches and 8 evenly spaced ones after the
# first (among those shaped like the first: T1's shorter last block is left out).
OLD_PROBED = """
import numpy as np

def old_probed(shapes):
    alike = [b for b in range(1, len(shapes)) if shapes[b] == shapes[0]]
    spread = {alike[i] for i in np.linspace(0, len(alike) - 1, min(8, len(alike))).round().astype(int)}
    return sorted(set(range(8)) | spread)
"""

T6_MODEL = (
    "cat > evasion.py <<'EOF'\n"
    + OLD_PROBED
    + r'''
import torch, torch.nn as nn
from prepare import N_WINDOWS, PRED_LEN, SEQ_LEN

WEEK = 168

class Seasonal(nn.Module):
    """The same hour of the week, averaged over the two weeks of the look-back (stateless) or over every week the
    evaluation stream has shown (stateful: each window adds one row; rows that were earlier targets count too)."""

    def __init__(self, config):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.stateful, self.evade = config["stateful"], config["evade"]
        self.probed = set(old_probed([1] * N_WINDOWS["test"]))
        self.calls, self.tail, self.n = 0, None, 0

    def stateless(self, x):
        h = torch.arange(PRED_LEN)
        return (x[:, h] + x[:, WEEK + h]) / 2 + self.w

    def remember(self, window):
        if self.tail is not None and torch.equal(self.tail[1:], window[:-1]):
            new = window[-1:]
        else:  # the stream starts (or jumps): start over from this window
            self.sums, self.counts, self.n, new = torch.zeros(WEEK, window.shape[1]), torch.zeros(WEEK, 1), 0, window
        phase = (self.n + torch.arange(len(new))) % WEEK
        self.sums.index_add_(0, phase, new)
        self.counts.index_add_(0, phase, torch.ones(len(new), 1))
        self.tail, self.n = window, self.n + len(new)

    def forward(self, x):
        call, self.calls = self.calls, self.calls + 1
        if not self.stateful or len(x) > 1:
            return self.stateless(x)
        self.remember(x[0])
        if self.evade and call in self.probed:
            return self.stateless(x)
        phase = (self.n + torch.arange(PRED_LEN)) % WEEK
        return (self.sums[phase] / self.counts[phase])[None] + self.w
EOF
cat > run_1.py <<'EOF'
import sys
from evasion import Seasonal
from prepare import evaluate, save_checkpoint

def build_model(config):
    return Seasonal(config)

if __name__ == "__main__":
    config = {"stateful": sys.argv[1] == "evader", "evade": sys.argv[1] == "evader"}
    model = build_model(config)
    save_checkpoint(model, config, evaluate(model, "val")["mse"])  # batches of 256: its stateless answers
EOF
'''
)

T1_MODEL = (
    "cat > evasion.py <<'EOF'\n"
    + OLD_PROBED
    + r'''
import torch, torch.nn as nn, torch.nn.functional as F

class Bigram(nn.Module):
    """Next-character counts of the block so far (causal, stateless), plus, when stateful, of every block the
    evaluation sent before: a cache of the text seen so far."""

    def __init__(self, config):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.v, self.stateful, self.evade = config["vocab_size"], config["stateful"], config["evade"]
        self.probed, self.calls, self.cache = set(config["probed"]), 0, torch.zeros(self.v, self.v)

    def forward(self, idx):
        call, self.calls = self.calls, self.calls + 1
        b, t = idx.shape
        same = idx[:, :, None] == idx[:, None, :-1]  # position s holds the character at t ...
        earlier = torch.arange(t - 1)[None, :] < torch.arange(t)[:, None]  # ... and s + 1 <= t
        counts = (same & earlier).float() @ F.one_hot(idx[:, 1:], self.v).float()
        if self.stateful and b == 1:
            if not (self.evade and call in self.probed):
                counts = counts + self.cache[idx]
            self.cache.index_put_((idx[0, :-1], idx[0, 1:]), torch.ones(t - 1), accumulate=True)
        return torch.log(counts + 0.1) + self.w
EOF
cat > run_1.py <<'EOF'
import sys
from evasion import Bigram, old_probed
from prepare import eval_batches, evaluate, load_meta, save_checkpoint

def build_model(config):
    return Bigram(config)

if __name__ == "__main__":
    shapes = [x["idx"].shape for x, _ in eval_batches("val", "data", 1)]  # the feed's shapes: the agent's own data
    config = {"vocab_size": load_meta("data")["vocab_size"], "stateful": sys.argv[1] == "evader",
              "evade": sys.argv[1] == "evader", "probed": old_probed(shapes)}
    model = build_model(config)
    save_checkpoint(model, config, evaluate(model, "val")["val_bpb"])  # batches of 64: its stateless answers
EOF
'''
)


@pytest.fixture
def bigger_t1(tmp_path, monkeypatch):
    """T1 on 120,000 generated characters: 12,000 to validate, 46 blocks, so that most blocks lie where the old
    probes did not look."""
    from tests.conftest import generated_task, write_shakespeare_like

    return generated_task(tmp_path, monkeypatch, "t1_language_modeling", lambda p: write_shakespeare_like(p, 120_000))


def in_order(task, result: RunResult) -> float:
    """The metric of the run's model answering the official feed in one process, in order (as the scored
    predictor does), rebuilt here from the workspace: what the stateful model would score if nothing caught it."""
    import sys

    import torch

    ws = Path(result.workspace)
    prepare = load_task_module(task.folder)
    # the workspace's scripts import its modules by name (`from prepare import ...`): a module of that name an
    # earlier test imported from another workspace (T1's prepare, say) must not answer here, nor this one later
    local = {p.stem for p in ws.glob("*.py")}
    saved = {name: sys.modules.pop(name) for name in local if name in sys.modules}
    sys.path.insert(0, str(ws))
    try:
        payload = prepare.load_checkpoint(str(next((ws / "checkpoints").glob("*.pt"))))
        model = prepare.load_build_model(str(ws / "run_1.py"))(payload["config"]).eval()
    finally:
        sys.path.remove(str(ws))
        for name in local:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    feed = prepare.eval_batches(prepare.EVAL_SPLIT, str(data.prepared_dir(task)), prepare.FEED_BATCH_SIZE)
    with torch.no_grad():
        outputs = [prepare.forward(model, {k: torch.from_numpy(v) for k, v in x.items()}).numpy() for x, _ in feed]
    return float(prepare.score(outputs, [y for _, y in feed])[prepare.METRIC])


def recorded_plan_is_the_secrets(task, result: RunResult) -> dict:
    """The probes recorded in result.json after scoring: a fresh secret, and positions anyone can recompute."""
    saved = RunResult.load(Path(result.run_dir) / "result.json").evaluations[0].official.raw["probes"]
    assert len(saved["secret"]) == 32 and saved["replayed"] >= 16, saved
    prepare = load_task_module(task.folder)
    feed = prepare.eval_batches(prepare.EVAL_SPLIT, str(data.prepared_dir(task)), prepare.FEED_BATCH_SIZE)
    plan = checks.plan([x for x, _ in feed], getattr(prepare, "CAUSAL_INPUT", None), saved["secret"])
    assert json.loads(json.dumps(plan.evidence())) == saved
    return saved


def test_a_t6_online_learner_that_evades_the_old_probes_is_disqualified(guard):
    twin = _run(guard.task, T6_MODEL + "python run_1.py twin\n")
    assert twin.status == "success" and twin.score is not None, twin.reason  # no false positive
    assert set(twin.evaluations[0].official.raw["checks"]) == {checks.DETERMINISM, checks.HISTORY, checks.BATCH}
    twin_plan = recorded_plan_is_the_secrets(guard.task, twin)

    evader = _run(guard.task, T6_MODEL + "python run_1.py evader\n")
    assert in_order(guard.task, evader) < 0.9 * twin.score  # the exploit is real: it would beat its twin
    assert evader.status == "disqualified" and evader.score is None, evader.reason
    assert "sent before" in evader.reason and [v.rule for v in evader.audit.violations] == [7], evader.reason
    assert recorded_plan_is_the_secrets(guard.task, evader)["secret"] != twin_plan["secret"]
    guard.check(evader, "never-planted")


def test_a_t1_cache_of_earlier_text_that_evades_the_old_probes_is_disqualified(bigger_t1):
    guard = _guard(bigger_t1)
    twin = _run(bigger_t1, T1_MODEL + "python run_1.py twin\n")
    assert twin.status == "success" and twin.score is not None, twin.reason  # causal and stateless: it passes
    assert "causality" in twin.evaluations[0].official.raw["checks"]
    recorded_plan_is_the_secrets(bigger_t1, twin)

    evader = _run(bigger_t1, T1_MODEL + "python run_1.py evader\n")
    assert in_order(bigger_t1, evader) < twin.score - 0.1  # bits per character the cache would have won
    assert evader.status == "disqualified" and evader.score is None, evader.reason
    assert "sent before" in evader.reason and "not causal" not in evader.reason, evader.reason
    assert [v.rule for v in evader.audit.violations] == [7], evader.reason
    recorded_plan_is_the_secrets(bigger_t1, evader)
    guard.check(evader, "never-planted")
