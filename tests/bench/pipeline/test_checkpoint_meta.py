"""The harness reads checkpoints and picks the evaluation device without importing torch (issue #16: 2.7 s of a
`bench run`), and reads exactly what ``torch.load(weights_only=True)`` reads."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import zipfile

import pytest

from bench import protocol
from bench.paths import ROOT
from bench.pipeline import checkpoint_meta, collect
from tests.lazy import lazy

torch = lazy("torch")  # imported at its first use (tests/lazy.py)


def payload(model: torch.nn.Module) -> dict:
    """What the tasks' save_checkpoint() stores (prepare.py's helper block)."""
    return {
        "format": "1gc-7rc/checkpoint-v1",
        "state_dict": model.state_dict(),
        "config": {"lr": 0.001, "layers": [64, 32], "name": "mlp", "nested": {"dropout": 0.1}},
        "script": "run_1.py",
        "val_score": 0.4321,
        "metric": "mse",
        "step": 320,
        "time": 1_780_000_000.5,
    }


def test_the_payload_reads_as_torch_reads_it_without_the_weights(tmp_path):
    path = tmp_path / "c.pt"
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    torch.save(payload(model), path)
    ours = checkpoint_meta.load(path)
    theirs = torch.load(path, map_location="cpu", weights_only=True)
    fields = set(theirs) - {"state_dict"}
    assert set(ours) == set(theirs) and {k: ours[k] for k in fields} == {k: theirs[k] for k in fields}
    assert list(ours["state_dict"]) == list(theirs["state_dict"])  # every tensor named, none read
    assert all(isinstance(t, checkpoint_meta.Tensor) for t in ours["state_dict"].values())


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_pickle_naming_other_code_is_refused_and_nothing_runs(tmp_path, monkeypatch):
    """A forged checkpoint (torch's zip layout, a data.pkl that calls os.system): refused, nothing executed."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"state_dict": {}, "config": _Evil(), "val_score": 0.1}))
    with pytest.raises(pickle.UnpicklingError, match="unsupported global"):
        checkpoint_meta.load(path)
    assert not (tmp_path / "pwned").exists()
    found, rejected = collect.scan(tmp_path, started_at=0.0, metric="mse")
    assert found == [] and [r.reason.split(":")[0] for r in rejected] == ["unreadable checkpoint"]


def test_other_formats_are_left_to_torch(tmp_path):
    legacy = tmp_path / "legacy.pt"
    torch.save(payload(torch.nn.Linear(2, 2)), legacy, _use_new_zipfile_serialization=False)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert checkpoint_meta.load(legacy) is None and checkpoint_meta.load(tmp_path / "notes.txt") is None
    found, rejected = collect.scan(tmp_path, started_at=0.0, metric="mse")
    # torch refuses to mmap its legacy format: rejected as before this reader existed, and so is the text file
    assert found == [] and len(rejected) == 2


def test_the_device_is_what_torch_says(monkeypatch):
    assert protocol.default_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert protocol.default_device() == "cpu"


NO_TORCH = """
import sys
from pathlib import Path
from bench.pipeline import collect, evaluate
from bench import preflight
device = evaluate.default_device()
preflight.check_device("cpu")
found, rejected = collect.scan(Path(sys.argv[1]), started_at=0.0, metric="mse")
assert [c.val_score for c in found] == [0.4321] and not rejected, rejected
print(device, "torch" in sys.modules)
"""


def test_collecting_and_choosing_the_device_import_no_torch(tmp_path):
    torch.save(payload(torch.nn.Linear(4, 3)), tmp_path / "run_1_step320.pt")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [protocol.default_device(), "False"]
