"""Small GENERATED data for every task folder, and the baseline trained on it once per test session.

Every task folder under tasks/ provides its small data in its own smalldata.py (the contract `bench tasks check`
reads: bench/tasks/smalldata.py, docs/extending.md): a generator that writes raw files with the exact schema of the
real ones (NOT the real data: no score on them means anything), a tiny baseline config that trains a few steps on a
CPU, and the split the baseline reports its validation score on. FACTORIES holds them, keyed by folder name; the
names the per-task tests import are re-exported here from the folders' modules (defined once, there). The
conformance suite (test_conformance.py) runs over every task folder and fails for one without smalldata.py.

SmallTasks (the session fixture `small` in conftest.py) prepares each task's workspace and trains its baseline
at most once per session, for the conformance suite and the per-task test files alike.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
from collections.abc import Callable
from types import ModuleType

import pytest
import torch

from bench.tasks import smalldata
from bench.tasks.smalldata import SmallData
from tests.tasks.taskfolder import TASKS_DIR, copy_task, run_prepare, task_modules


def _task(folder: str) -> ModuleType:
    """A built-in task folder's smalldata.py (bench.tasks.smalldata loads each once: one definition, here reused)."""
    return smalldata.module(TASKS_DIR / folder)


_T1, _T2, _T3 = _task("t1_language_modeling"), _task("t2_image_classification"), _task("t3_semantic_segmentation")
_T4, _T5, _T6 = _task("t4_graph_learning"), _task("t5_tabular_prediction"), _task("t6_time_series_forecasting")
_T7 = _task("t7_text_classification")

# the names the per-task tests import, defined in each task folder's smalldata.py
REAL_VOCAB, fake_shakespeare, T1_TINY = _T1.REAL_VOCAB, _T1.fake_shakespeare, _T1.TINY
SUBSET_ZIP, FULL_ZIP, write_tiny_imagenet_like, T2_TINY = (
    _T2.SUBSET_ZIP,
    _T2.FULL_ZIP,
    _T2.write_tiny_imagenet_like,
    _T2.TINY,
)
FULL_TAR, LABELS_ZIP, CONVNEXT_FILE, VIT_FILE = _T3.FULL_TAR, _T3.LABELS_ZIP, _T3.CONVNEXT_FILE, _T3.VIT_FILE
TRAIN_IDS, VAL_IDS, jpeg, png, make_pairs = _T3.TRAIN_IDS, _T3.VAL_IDS, _T3.jpeg, _T3.png, _T3.make_pairs
write_voc_tar, write_substitutes, T3_TINY = _T3.write_voc_tar, _T3.write_substitutes, _T3.TINY
SPLITS, SMILES, LABELS, SPLIT, T4_TINY = _T4.SPLITS, _T4.SMILES, _T4.LABELS, _T4.SPLIT, _T4.TINY
gz, mol_csv, split_csv, write_molhiv_raw = _T4.gz, _T4.mol_csv, _T4.split_csv, _T4.write_molhiv_raw
ROWS, make_covtype_like, write_covtype, T5_TINY = _T5.ROWS, _T5.make_covtype_like, _T5.write_covtype, _T5.TINY
ETT_COLUMNS, T6_TINY = _T6.ETT_COLUMNS, _T6.TINY
ESCAPED_TEXT, write_agnews_raw, T7_TINY = _T7.ESCAPED_TEXT, _T7.write_agnews_raw, _T7.TINY


# ---------------------------------------------------------------------------
# The registry: one entry per task folder
# ---------------------------------------------------------------------------

FACTORIES: dict[str, SmallData] = {
    folder.name: smalldata.load(folder) for folder in sorted(TASKS_DIR.iterdir()) if (folder / smalldata.FILE).is_file()
}


def factory(task_name: str) -> SmallData:
    """The small-data factory of a task folder; a test FAILS (never skips) for a folder without one."""
    if task_name not in FACTORIES:
        pytest.fail(
            f"task folder {task_name!r} has no small-data factory: add smalldata.py to the task folder "
            "(write_raw: a generator of its raw files in the real schema, TINY: a tiny baseline config, VAL_SPLIT: "
            "its validation split; docs/extending.md)",
            pytrace=False,
        )
    return FACTORIES[task_name]


class SmallTasks:
    """Each task's generated data, prepared workspace, trained baseline and official evaluation, made at most once
    per session (a failure is remembered too, so that it is not retried by every test that needs it)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory):
        self._tmp = tmp_path_factory
        self._done: dict[tuple[str, str], object] = {}

    def _once(self, key: tuple[str, str], make: Callable[[], object]):
        if key not in self._done:
            try:
                self._done[key] = make()
            except (Exception, pytest.fail.Exception) as e:  # pytest.fail() raises a BaseException
                self._done[key] = e
                raise
        value = self._done[key]
        if isinstance(value, BaseException):
            raise value
        return value

    def prepared(self, name: str) -> dict:
        """A copy of the task folder with data/ prepared by `prepare.py --prepare` from generated raw files:
        {"ws", "raw", "stdout" (of --prepare), **what the generator returned}."""

        def make() -> dict:
            spec = factory(name)
            root = self._tmp.mktemp(name)
            ws = copy_task(TASKS_DIR / name, root / "ws")
            raw = root / "raw"
            raw.mkdir()
            facts = spec.write_raw(raw)
            proc = run_prepare(ws, "--prepare", "--raw-dir", str(raw), "--data-dir", "data")
            assert proc.returncode == 0, f"{name}: prepare.py --prepare failed:\n{proc.stdout}\n{proc.stderr}"
            if spec.setup is not None:
                spec.setup(ws)
            return {"ws": ws, "raw": raw, "stdout": proc.stdout, **facts}

        return self._once((name, "prepared"), make)

    def trained(self, name: str) -> dict:
        """The baseline's train.main() with the tiny config, in-process on the CPU (CUDA hidden, so that its scores
        are the CPU evaluator's): {"log", "checkpoints" (in the order written), "config", "started", "finished"}."""

        def make() -> dict:
            spec = factory(name)
            ws = self.prepared(name)["ws"]
            out = io.StringIO()
            with (
                task_modules(ws) as (_, train),
                contextlib.redirect_stdout(out),
                pytest.MonkeyPatch.context() as mp,
            ):
                mp.setattr(torch.cuda, "is_available", lambda: False)
                config = dict(train.CONFIG, **spec.tiny)
                given = copy.deepcopy(config)
                started = time.time()
                train.main(config)
                finished = time.time()
            checkpoints = sorted((ws / "checkpoints").glob("*.pt"), key=lambda p: (p.stat().st_mtime_ns, p.name))
            assert checkpoints, f"{name}: the baseline saved no checkpoint with {spec.tiny}; log:\n{out.getvalue()}"
            return {
                "log": out.getvalue(),
                "checkpoints": checkpoints,
                "config": given,
                "started": started,
                "finished": finished,
            }

        return self._once((name, "trained"), make)

    def official(self, name: str) -> dict:
        """`python prepare.py --eval <last checkpoint> --device cpu` in the workspace, as an agent runs it:
        {"checkpoint", "proc", "wall" (seconds the subprocess took, measured here)}."""

        def make() -> dict:
            ws = self.prepared(name)["ws"]
            ckpt = self.trained(name)["checkpoints"][-1]
            start = time.perf_counter()
            proc = run_prepare(ws, "--eval", str(ckpt.relative_to(ws)), "--device", "cpu")
            return {"checkpoint": ckpt, "proc": proc, "wall": time.perf_counter() - start}

        return self._once((name, "official"), make)
