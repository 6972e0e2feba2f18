"""A channel between the two predictors (issue 29): the scored predictor publishes the evaluation stream as POSIX
record locks on its own staged script, the prober reads them with ``F_GETLK`` and answers every probe as the scored
one did. POSIX locks live on the inode, so they cross every namespace a sandbox makes.

The model is T6's online learner of test_adversarial_probes.py (the same hour of the week averaged over every week
the stream has shown): its state is the stream of rows seen so far, which it publishes as locks, one float32 value a
lock (a read lock of length ``bits + 1`` at ``slot * 2**34``). The predictor that finds no lock at slot 0 on its
first request takes the scored role and publishes; one that finds the locks is the prober, rebuilds the scored
one's history from them and answers each window (and the batch probe's samples) from the history the scored
predictor had there. Run on commit 4459d4d (the prober alive beside the scored one on a CPU, no seccomp filter) it
passed every probe and beat its stateless twin, no finding. Now the prober starts after the scored predictor has
ended (its locks die with it) and a predictor may not take or test a lock at all: the model is disqualified
(rule 7), and the twin still scores.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.sandbox.bwrap import probe
from tests.bench.adversary import _run
from tests.bench.test_adversarial_probes import in_order

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
]

LOCKS = r"""
cat > channel.py <<'EOF'
import fcntl, os, struct, time
import torch, torch.nn as nn
from prepare import PRED_LEN, SEQ_LEN

WEEK, SLOT, ROW = 168, 1 << 34, 7
FLOCK = "hhqqi4x"  # struct flock on 64-bit Linux: type, whence, start, len, pid

class Locks:
    # float32 values as read locks on the staged run_1.py: value i is a lock of length bits + 1 at i * SLOT

    def __init__(self):
        self.fd = os.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_1.py"), os.O_RDONLY)
        self.n = 0

    def put(self, values):
        for v in values.reshape(-1).to(torch.float32).tolist():
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
            fcntl.lockf(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB, bits + 1, self.n * SLOT)
            self.n += 1

    def get(self, i):
        got = fcntl.fcntl(self.fd, fcntl.F_GETLK, struct.pack(FLOCK, fcntl.F_WRLCK, 0, i * SLOT, 1, 0))
        kind, _, start, length, _ = struct.unpack(FLOCK, got)
        if kind == fcntl.F_UNLCK:
            return None
        return struct.unpack("<f", struct.pack("<I", length - 1))[0]

def forecast(rows):
    # the same hour of the week averaged over every row seen so far (rows: [n, 7], float64)
    n = len(rows)
    phase = torch.arange(n) % WEEK
    sums = torch.zeros(WEEK, ROW, dtype=torch.float64).index_add_(0, phase, rows)
    counts = torch.zeros(WEEK, 1, dtype=torch.float64).index_add_(0, phase, torch.ones(n, 1, dtype=torch.float64))
    ahead = (n + torch.arange(PRED_LEN)) % WEEK
    return (sums[ahead] / counts[ahead]).to(torch.float32)

class Online(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.online, self.role, self.rows, self.seen = config["online"], None, None, []
        self.locks = None

    def stateless(self, x):
        h = torch.arange(PRED_LEN)
        return (x[:, h] + x[:, WEEK + h]) / 2 + self.w

    def decide(self):
        try:
            self.locks = Locks()
            self.role = "prober" if self.locks.get(0) is not None else "scored"
        except OSError:  # no locks here: learn alone
            self.locks, self.role = None, "scored"

    def publish(self, rows):
        if self.locks is not None and self.publishing:
            try:
                self.locks.put(rows)
            except OSError:
                self.publishing = False

    def learn(self, window):  # the scored role: the stream so far, published as it grows
        if self.rows is not None and torch.equal(self.rows[-(SEQ_LEN - 1):], window[:-1].double()):
            self.rows = torch.cat([self.rows, window[-1:].double()])
            self.publish(window[-1:])
        else:  # the stream starts (or jumps: the validation pass): start over, publish no more after the first
            self.publishing = self.rows is None
            self.rows = window.double()
            self.publish(window)
        return forecast(self.rows)

    def history(self, window):  # the prober's role: the scored one's history at this window, read from the locks
        want = window.double()
        for _ in range(3000):
            while True:
                i = len(self.seen) * ROW
                values = [self.locks.get(i + j) for j in range(ROW)]
                if any(v is None for v in values):
                    break
                self.seen.append(values)
            rows = torch.tensor(self.seen, dtype=torch.float64)
            for p in range(max(0, len(rows) - SEQ_LEN + 1)):
                if torch.equal(rows[p + SEQ_LEN - 1], want[-1]) and torch.equal(rows[p:p + SEQ_LEN], want):
                    return forecast(rows[:p + SEQ_LEN])
            time.sleep(0.01)  # the scored one has not got there yet
        return forecast(want)

    def forward(self, x):
        if not self.online:
            return self.stateless(x)
        if len(x) > 1 and self.role is None:
            return self.stateless(x)  # the agent's own evaluate(): batches of 256
        if self.role is None:
            self.decide()
        if self.role == "scored" and len(x) == 1:
            return self.learn(x[0])[None] + self.w
        if self.locks is None:
            return self.stateless(x)  # no channel: a batch it cannot place
        return torch.stack([self.history(w) for w in x]) + self.w
EOF
cat > run_1.py <<'EOF'
import sys
from channel import Online
from prepare import evaluate, save_checkpoint

def build_model(config):
    return Online(config)

if __name__ == "__main__":
    config = {"online": sys.argv[1] == "locks"}
    model = build_model(config)
    save_checkpoint(model, config, evaluate(model, "val")["mse"])  # batches of 256: its stateless answers
EOF
"""


def test_a_t6_online_learner_whose_predictors_talk_through_record_locks_is_disqualified(guard):
    twin = _run(guard.task, LOCKS + "python run_1.py twin\n")
    assert twin.status == "success" and twin.score is not None, twin.reason  # the stateless twin scores

    talker = _run(guard.task, LOCKS + "python run_1.py locks\n")
    print(
        "TWIN",
        twin.score,
        "TALKER",
        talker.status,
        talker.score,
        talker.reason,
        "IN_ORDER",
        in_order(guard.task, talker),
    )
    assert in_order(guard.task, talker) < 0.95 * twin.score  # the exploit is real: learning online beats the twin
    assert talker.status == "disqualified" and talker.score is None, talker.reason
    assert "sent before" in talker.reason and [v.rule for v in talker.audit.violations] == [7], talker.reason
    assert (Path(talker.run_dir) / "result.json").is_file()
    guard.check(talker, "never-planted")
