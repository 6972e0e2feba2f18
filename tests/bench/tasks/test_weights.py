"""Pretrained weights (T3's DINOv3 backbones): install checks, the missing-file message, workspace copies.

A toy task declares one weights file; its prepare.py ``--check-weights`` does a strict key check, as
T3's does with the real architectures. The weights here are generated tensors, not DINOv3.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from bench.pipeline import evaluate, workspace
from bench.pipeline.audit import AuditInput, audit
from bench.tasks import get_task, weights
from tests.lazy import lazy

torch = lazy("torch")  # imported at its first use (tests/lazy.py)

CHECK_PY = """
import json, sys
import torch
path = sys.argv[sys.argv.index("--check-weights") + 1]
sd = torch.load(path, map_location="cpu", weights_only=True)
if set(sd) != {"w", "b"}:
    print(json.dumps({"error": f"unexpected keys {sorted(sd)}"}))
    sys.exit(1)
print(json.dumps({"ok": True, "arch": "toy", "n_params": sum(t.numel() for t in sd.values())}))
"""


def _write_weights(path: Path, keys: tuple[str, ...] = ("w", "b")) -> str:
    torch.save({k: torch.ones(3) for k in keys}, path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A task folder with one weights entry whose official hash is that of a generated file."""
    good = tmp_path / "downloads" / "toy_backbone-0000.pth"
    good.parent.mkdir()
    digest = _write_weights(good)
    folder = tmp_path / "tasks" / "t9_toy"
    folder.mkdir(parents=True)
    (folder / "task.toml").write_text(
        'id = "t9"\ntitle = "Toy"\ndataset = "toy"\nbudget_minutes = 1\nmetric = "miou"\ndirection = "max"\n'
        'eval_split = "val"\nbaseline_score = 0.5\nextra_locked = ["backbone.py"]\n\n'
        f'[[weights]]\nfile = "{good.name}"\nsha256_prefix = "{digest[:8]}"\ndescription = "a toy backbone"\n'
        'source = "https://example.invalid/gated-form"\n'
    )
    for name, text in (("prepare.py", CHECK_PY), ("backbone.py", "X = 1\n"), ("program.md", "# toy\n")):
        (folder / name).write_text(text)
    (folder / "train.py").write_text("print('train')\n")
    monkeypatch.setenv("BENCH_TASKS_DIR", str(tmp_path / "tasks"))
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    return get_task("t9"), good


def test_missing_weights_say_where_to_get_them(toy) -> None:
    task, good = toy
    with pytest.raises(weights.WeightsError) as err:
        weights.for_task(task)
    message = str(err.value)
    assert good.name in message and "https://example.invalid/gated-form" in message
    assert "bench weights install" in message and "--no-weights" in message


def test_install_checks_and_copies(toy) -> None:
    task, good = toy
    installed = weights.install(good)
    assert installed == weights.weights_dir() / good.name and installed.read_bytes() == good.read_bytes()
    assert weights.for_task(task) == [installed]
    assert sorted(os.listdir(weights.weights_dir())) == [good.name]  # no temporary file left


def test_install_refuses_a_file_with_the_wrong_hash(toy, tmp_path: Path) -> None:
    _, good = toy
    other = tmp_path / "elsewhere" / good.name
    other.parent.mkdir()
    torch.save({"w": torch.zeros(3), "b": torch.zeros(3)}, other)  # same keys, other bytes
    with pytest.raises(weights.WeightsError, match="does not start with.*--no-hash-check"):
        weights.install(other)
    assert not (weights.weights_dir() / good.name).exists()
    assert weights.install(other, hash_check=False).read_bytes() == other.read_bytes()  # the user vouches for it


def test_install_refuses_a_file_the_architecture_cannot_load(toy, tmp_path: Path) -> None:
    task, good = toy
    bad = tmp_path / "bad" / good.name
    bad.parent.mkdir()
    digest = _write_weights(bad, keys=("model.w", "model.b"))  # e.g. a wrapped or converted checkpoint
    toml = task.folder / "task.toml"
    toml.write_text(
        toml.read_text().replace(good.name, bad.name).split("sha256_prefix")[0]
        + f'sha256_prefix = "{digest[:8]}"\ndescription = "x"\nsource = "y"\n'
    )
    with pytest.raises(weights.WeightsError, match="unexpected keys"):
        weights.install(bad)


def test_unknown_file_is_named_in_the_error(toy, tmp_path: Path) -> None:
    stray = tmp_path / "resnet50.pth"
    _write_weights(stray)
    with pytest.raises(weights.WeightsError, match="toy_backbone-0000.pth"):
        weights.install(stray)


def test_workspace_gets_read_only_copies_and_locked_extras(toy, tmp_path: Path) -> None:
    task, good = toy
    installed = weights.install(good)
    data_dir = tmp_path / "prepared"
    data_dir.mkdir()
    ws = workspace.create(task, data_dir, campaign="c", agent="a", repeat=1, root=tmp_path / "ws", weights=[installed])
    copy = ws.path / "weights" / good.name
    assert copy.read_bytes() == good.read_bytes() and not copy.is_symlink()
    assert not os.stat(copy).st_mode & stat.S_IWUSR
    assert not os.stat(ws.path / "backbone.py").st_mode & stat.S_IWUSR
    locked = ws.locked_hashes()
    assert set(locked) == {"prepare.py", "backbone.py"}
    assert ws.scripts() == [ws.path / "train.py"]
    assert audit(AuditInput(ws, locked)).violations == ()
    os.chmod(ws.path / "backbone.py", 0o644)
    (ws.path / "backbone.py").write_text("X = 2\n")  # an agent editing a locked module
    (violation,) = audit(AuditInput(ws, locked)).violations
    assert violation.rule == 1 and "backbone.py was modified" in violation.reason
    staged = evaluate.stage(task, ws.path, tmp_path / "eval")
    assert (staged / "backbone.py").read_text() == "X = 1\n"  # the evaluation uses the task's original
    assert (staged / "train.py").is_file()
