"""Task T7 (AG News, character level): CSV reading, the character encoding, the val split carved from train.csv,
the held-out test split, the accuracy metric, the char-CNN baseline, prepare.py --eval and the official score
through the harness's scorer (bench.scoring.scorer).

Runs on GENERATED train.csv / test.csv files with the exact schema of AG News's (no header; quoted class 1..4,
title, description; `""` for a quote, backslashes in the text): a few hundred rows whose class shows in a few
words (made in tests/tasks/smalldata.py). They are not the real data, and no score on them means anything. The test
marked `mirror` prepares the REAL test.csv from BENCH_DATA_MIRROR (the real train.csv is not in the mirror: a
generated one stands beside it). What every task promises (the checkpoint payload, the --eval JSON, strict loading,
errors as JSON, val_score = the evaluator's score) is checked in test_conformance.py.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from sklearn.metrics import accuracy_score

from bench.pipeline import workspace as workspaces
from bench.tasks import load_task
from tests.tasks.smalldata import ESCAPED_TEXT
from tests.tasks.smalldata import write_agnews_raw as write_raw
from tests.tasks.taskfolder import (
    copy_task,
    expected_probes,
    last_json,
    run_prepare,
    run_scorer,
    stage_eval,
    task_modules,
)

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t7_text_classification"
NARROW = {"embed_dim": 16, "channels": 32, "fc_dim": 64, "batch_size": 32, "epochs": 2, "log_every": 2}


def hand_codes(text: str) -> np.ndarray:
    """The documented encoding, written out plainly: ASCII 1..127 kept, anything else 26, zero-padded to 1,014."""
    codes = [ord(ch) if 1 <= ord(ch) <= 127 else 26 for ch in text[:1014]]
    return np.array(codes + [0] * (1014 - len(codes)), dtype=np.uint8)


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t7", "accuracy", "max", "test")
    assert task.held_out == ("test_x.npy", "test_y.npy")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (40, 0.793, 0.905)
    train, test = task.data
    base = "https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/"
    assert (train.file, train.url, train.mirror, train.md5) == (
        "train.csv",
        base + "train.csv",
        "ag_news_csv/train.csv",
        "b1a00f826fdfbd249f79597b59e1dc12",
    )
    assert (test.file, test.url, test.mirror, test.size) == (
        "test.csv",
        base + "test.csv",
        "ag_news_csv/test.csv",
        1857427,
    )
    assert test.sha256 == "521465c2428ed7f02f8d6db6ffdd4b5447c1c701962353eb2c40d548c3c85699"
    assert test.md5 == "d52ea96a97a2d943681189a97654912d"


def test_encoding_by_hand():
    with task_modules(TASK_DIR) as (prepare, _):
        got = prepare.encode('Caf\u00e9 \\$5 "ok"\\\\x\n\x00\U0001f600!')
        want = [67, 97, 102, 26, 32, 92, 36, 53, 32, 34, 111, 107, 34, 92, 92, 120, 10, 26, 26, 33]
        assert got.dtype == np.uint8 and got.shape == (1014,)
        assert got[:20].tolist() == want and not got[20:].any()  # one code per character, then zero padding
        long = prepare.encode("ab" * 600)
        assert long.tolist() == [97, 98] * 507  # cut at 1,014 characters, no padding
        assert not prepare.encode("").any()


def test_prepare_reads_quotes_and_backslashes(fake):
    data = fake["ws"] / "data"
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    assert meta["classes"] == ["World", "Sports", "Business", "Sci/Tech"]
    assert meta["counts"] == {"train": 228, "val": 12, "test": 40}  # val: 5 % of each class of train.csv's 240
    assert meta["class_counts"] == {"train": [57] * 4, "val": [3] * 4, "test": [10] * 4}
    assert meta["max_len"] == 1014 and meta["truncated"] == {"train": 0, "val": 0, "test": 0}
    assert meta["partial_data"] == [
        "train.csv: 240 of 120,000 samples (not the official file)",
        "test.csv: 40 of 7,600 samples (not the official file)",
    ]
    assert "partial data: train.csv: 240 of 120,000 samples" in fake["stdout"]
    x, y = np.load(data / "test_x.npy"), np.load(data / "test_y.npy")
    assert x.dtype == np.uint8 and x.shape == (40, 1014) and y.dtype == np.int64
    assert y[0] == 1 and np.array_equal(x[0], hand_codes(ESCAPED_TEXT))  # label 2 -> 1
    assert x[0][:20].tobytes() == b'Coach says "we won" '  # the doubled quotes are undone
    assert (x[0] == 92).sum() == 4 and (x[0] == 26).sum() == 2  # 4 backslashes kept; e-acute and euro -> SUB
    with open(fake["raw"] / "train.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    val_rows = np.load(data / "val_rows.npy").tolist()
    train_rows = [i for i in range(240) if i not in val_rows]
    for split, picked in (("train", train_rows), ("val", val_rows)):
        xs, ys = np.load(data / f"{split}_x.npy"), np.load(data / f"{split}_y.npy")
        assert xs.shape == (len(picked), 1014) and ys.tolist() == [int(rows[i][0]) - 1 for i in picked]
        for k, i in enumerate(picked):  # title + " " + description, in file order
            assert np.array_equal(xs[k], hand_codes(rows[i][1] + " " + rows[i][2])), (split, i)


@pytest.mark.parametrize(
    "line, message",
    [
        ('"1","only a title"\n', "has 2 fields; expected 3"),
        ('"5","A title","A description"\n', "the class must be 1..4"),
        ("", "holds no samples"),
    ],
)
def test_prepare_rejects_bad_csv(tmp_path, line, message):
    write_raw(tmp_path / "raw", train_per_class=2, test_per_class=1)
    with open(tmp_path / "raw" / "test.csv", "a", encoding="utf-8") as f:
        f.write(line)
    if not line:
        (tmp_path / "raw" / "test.csv").write_text("", encoding="utf-8")
    with task_modules(TASK_DIR) as (prepare, _), pytest.raises(ValueError, match=message):
        prepare.prepare(str(tmp_path / "raw"), str(tmp_path / "data"))
    assert not (tmp_path / "data").exists()  # both files are checked before anything is written


def test_prepare_cli_fails_clearly_without_train_csv(tmp_path):
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    write_raw(tmp_path / "raw", train_per_class=2, test_per_class=1)
    (tmp_path / "raw" / "train.csv").unlink()
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(tmp_path / "raw"), "--data-dir", "data")
    assert proc.returncode == 1 and "train.csv does not exist" in proc.stderr and "CharCnn_Keras" in proc.stderr


def test_loaders(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        x, y = prepare.load_split("train")
        assert x.shape == (228, 1014) and x.dtype == torch.uint8 and y.dtype == torch.int64
        assert prepare.load_split("val")[0].shape == (12, 1014) and prepare.load_split("test")[0].shape == (40, 1014)
        assert prepare.load_meta()["counts"]["test"] == 40
        with pytest.raises(ValueError, match="unknown split"):
            prepare.load_split("valid")


class CharCount(nn.Module):
    """An untrained, cheap classifier: class = (number of 'e' characters) mod 4."""

    def forward(self, x):
        return nn.functional.one_hot((x == ord("e")).sum(dim=1) % 4, 4).float()


def test_accuracy_matches_sklearn(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        x, y = prepare.load_split("test")
        pred = prepare.predict(CharCount(), "test", batch_size=7)
        assert pred.dtype == torch.int64 and torch.equal(pred, CharCount()(x.long()).argmax(1))
        for batch_size in (7, 256):
            result = prepare.evaluate(CharCount(), "test", batch_size=batch_size)
            assert result["n"] == 40 and result["accuracy"] == accuracy_score(y.numpy(), pred.numpy())
        assert prepare.evaluate(Constant(2), "test")["accuracy"] == 10 / 40  # 10 samples of class 2 (Business)
        with pytest.raises(ValueError, match="expected logits of shape"):
            prepare.evaluate(Constant(2, classes=5), "test")
        with pytest.raises(ValueError, match="non-finite"):
            prepare.evaluate(Constant(2, value=float("nan")), "test")
        batches = prepare.eval_batches("test", batch_size=16)  # what the harness feeds: 16 + 16 + 8 samples
        assert [len(y) for _, y in batches] == [16, 16, 8] and batches[0][0]["x"].dtype == np.uint8
        logits = [prepare.forward(CharCount(), {"x": torch.from_numpy(b["x"])}).numpy() for b, _ in batches]
        assert prepare.score(logits, [y for _, y in batches]) == {"accuracy": accuracy_score(y, pred), "n": 40}
        with pytest.raises(ValueError, match="expected logits of shape"):
            prepare.score([np.zeros((16, 3), np.float32)], [batches[0][1]])


class Constant(nn.Module):
    """Always predicts one class (logits of the right shape)."""

    def __init__(self, label: int, classes: int = 4, value: float = 1.0):
        super().__init__()
        self.label, self.classes, self.value = label, classes, value

    def forward(self, x):
        assert x.dtype == torch.int64 and x.shape[1] == 1014  # the forward contract: int64 codes
        out = torch.zeros(len(x), self.classes)
        out[:, self.label] = self.value
        return out


def test_baseline_architecture():
    with task_modules(TASK_DIR) as (_, train):
        model = train.build_model(train.CONFIG)
        convs = [m for m in model.modules() if isinstance(m, nn.Conv1d)]
        assert [(m.in_channels, m.out_channels, m.kernel_size[0]) for m in convs] == [
            (128, 256, 7),
            (256, 256, 7),
            (256, 256, 3),
            (256, 256, 3),
            (256, 256, 3),
            (256, 256, 3),
        ]
        assert model.features(torch.zeros(1, 128, 1014)).shape == (1, 256, 34)  # 1014 -> 34 positions
        linears = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
        assert linears == [(34 * 256, 1024), (1024, 1024), (1024, 4)]
        assert [m.p for m in model.modules() if isinstance(m, nn.Dropout)] == [0.5, 0.5]
        assert (model.embed.num_embeddings, model.embed.embedding_dim, model.embed.padding_idx) == (128, 128, 0)
        assert model(torch.randint(0, 128, (2, 1014))).shape == (2, 4)
        assert (train.CONFIG["batch_size"], train.CONFIG["epochs"], train.CONFIG["lr"]) == (512, 5, 1e-3)


def test_baseline_trains_logs_and_checkpoints(trained):
    log = trained["log"]
    assert "11.46 M parameters" in log and "step 1 | loss " in log and "step 2 | loss " in log
    assert "note: partial data: train.csv: 240 of 120,000 samples" in log
    assert log.count("val_accuracy") == 1 and len(trained["checkpoints"]) == 1  # max_steps reached: one validation
    assert trained["checkpoints"][0].name.startswith("train_step2_accuracy")


def test_narrow_baseline_checkpoints_every_epoch(fake, tmp_path):
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    shutil.copytree(fake["ws"] / "data", ws / "data")
    out = io.StringIO()
    with task_modules(ws) as (_, train), contextlib.redirect_stdout(out):
        train.main(dict(train.CONFIG, **NARROW))
    assert out.getvalue().count("val_accuracy") == 2  # 228 // 32 = 7 steps an epoch, 2 epochs: one validation each
    assert len(list((ws / "checkpoints").glob("train_step*.pt"))) == 2


def test_official_accuracy_is_recomputed_with_sklearn(small, fake):
    """The --eval value of the trained baseline, recomputed here: the model's argmax on the 40 encoded test.csv
    samples (int64 codes, the forward contract) against the classes of the generated file, by sklearn."""
    run = small.official(TASK_DIR.name)
    result = last_json(run["proc"])
    assert result["n"] == 40
    payload = torch.load(run["checkpoint"], weights_only=True)
    with task_modules(fake["ws"]) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    x = torch.from_numpy(np.load(fake["ws"] / "data" / "test_x.npy")).long()
    with torch.no_grad():
        pred = model(x).argmax(dim=1).numpy()
    with open(fake["raw"] / "test.csv", newline="", encoding="utf-8") as f:
        y = [int(row[0]) - 1 for row in csv.reader(f)]
    assert result["value"] == accuracy_score(y, pred)


# ---------------------------------------------------------------------------
# The val split (carved from train.csv) and the held-out test split
# ---------------------------------------------------------------------------


def test_val_split_is_stratified_seeded_and_disjoint_from_train(fake, tmp_path):
    """val = 5 % of each class of train.csv (3 of 60 here), drawn with a fixed seed; train = the other rows; no
    text is in both, and together they are train.csv exactly (checked on the encoded rows, by hand)."""
    data = fake["ws"] / "data"
    with open(fake["raw"] / "train.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    codes = [hand_codes(r[1] + " " + r[2]).tobytes() for r in rows]
    labels = np.array([int(r[0]) - 1 for r in rows])
    val_x, val_y = np.load(data / "val_x.npy"), np.load(data / "val_y.npy")
    train_x = np.load(data / "train_x.npy")
    val, train = [x.tobytes() for x in val_x], [x.tobytes() for x in train_x]
    assert len(set(codes)) == 240  # the generated rows are all different: a text identifies its row
    assert not set(val) & set(train) and sorted(val + train) == sorted(codes)
    assert np.bincount(val_y, minlength=4).tolist() == [3] * 4
    assert [labels[codes.index(v)] for v in val] == val_y.tolist()
    # seeded: preparing again gives the same rows; the real file's 30,000 rows a class give 1,500 each
    again = copy_task(TASK_DIR, tmp_path / "ws")
    proc = run_prepare(again, "--prepare", "--raw-dir", str(fake["raw"]), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    assert np.array_equal(np.load(again / "data" / "val_rows.npy"), np.load(data / "val_rows.npy"))
    with task_modules(fake["ws"]) as (prepare, _):
        labels = np.repeat(np.arange(4), 30000)[np.random.default_rng(1).permutation(120000)]
        real = prepare.carve_val(labels)
        assert len(set(real.tolist())) == 6000 and np.bincount(labels[real]).tolist() == [1500] * 4
        meta = prepare.load_meta()
    assert meta["val"] == {"from": "train.csv", "fraction": 0.05, "seed": 0, "stratified_by": "class"}


@pytest.fixture(scope="module")
def agent_workspace(small, tmp_path_factory) -> Path:
    """The workspace the harness makes (bench.pipeline.workspace.create) from the prepared data, with a checkpoint
    of the trained baseline copied into its checkpoints/."""
    task = load_task(TASK_DIR)
    ws = workspaces.create(
        task, small.prepared(TASK_DIR.name)["ws"] / "data", campaign="t", agent="a", repeat=1,
        root=tmp_path_factory.mktemp("t7-runs"),
    )  # fmt: skip
    shutil.copy(small.trained(TASK_DIR.name)["checkpoints"][-1], ws.checkpoints / "baseline.pt")
    return ws.path


def test_workspace_holds_no_test_split(agent_workspace):
    names = sorted(p.name for p in (agent_workspace / "data").iterdir())
    assert names == ["meta.json", "train_x.npy", "train_y.npy", "val_rows.npy", "val_x.npy", "val_y.npy"]
    with task_modules(agent_workspace) as (prepare, _), pytest.raises(FileNotFoundError, match="held out"):
        prepare.load_split("test")


def test_eval_in_the_workspace_checks_on_val(agent_workspace):
    """`prepare.py --eval` where the test split is absent: the val accuracy (sklearn on the val rows)."""
    proc = run_prepare(agent_workspace, "--eval", "checkpoints/baseline.pt", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = last_json(proc)
    assert (result["split"], result["n"]) == ("val", 12)
    model = rebuilt(agent_workspace, agent_workspace / "checkpoints" / "baseline.pt")
    x, y = np.load(agent_workspace / "data" / "val_x.npy"), np.load(agent_workspace / "data" / "val_y.npy")
    with torch.no_grad():
        assert result["value"] == accuracy_score(y, model(torch.from_numpy(x).long()).argmax(1).numpy())
    proc = run_prepare(agent_workspace, "--eval", "checkpoints/baseline.pt", "--device", "cpu", "--split", "test")
    assert proc.returncode == 1 and "held out" in last_json(proc)["error"]


# ---------------------------------------------------------------------------
# The official score, by the harness's scorer
# ---------------------------------------------------------------------------


def rebuilt(ws: Path, checkpoint: Path) -> nn.Module:
    payload = torch.load(checkpoint, weights_only=True)
    with task_modules(ws) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    return model.eval()


def old_accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, batch_size: int = 256) -> float:
    """The evaluation before the harness's scorer (prepare.predict + evaluate), copied here: argmax of model(x) on
    int64 codes in batches of 256, float32, correct / samples."""
    model.eval()
    with torch.no_grad():
        pred = torch.cat(
            [model(torch.from_numpy(x[i : i + batch_size]).long()).argmax(dim=1) for i in range(0, len(x), batch_size)]
        )
    return int((pred == torch.from_numpy(y)).sum()) / len(y)


COUNT = """
import torch
import torch.nn as nn


class CharCount(nn.Module):
    \"\"\"class = (number of 'e' characters + offset) mod 4: cheap, and right on some samples only.\"\"\"

    def __init__(self, config):
        super().__init__()
        self.offset = nn.Parameter(torch.tensor(float(config["offset"])))

    def forward(self, x):
        count = (x == ord("e")).sum(dim=1) + self.offset.long()
        return nn.functional.one_hot(count % 4, 4).float()


def build_model(config):
    return CharCount(config)
"""


def test_scorer_value_is_sklearns_and_the_old_evaluations(small, fake, tmp_path):
    """The official value through the real scorer, for the trained baseline (which passes every check) and for a
    script-defined counting model: accuracy_score on the 40 test.csv rows read from the raw file, and the old
    evaluation of the same checkpoint."""
    ws, data = fake["ws"], fake["ws"] / "data"
    with open(fake["raw"] / "test.csv", newline="", encoding="utf-8") as f:
        raw = list(csv.reader(f))
    y = np.array([int(r[0]) - 1 for r in raw])
    x = np.stack([hand_codes(r[1] + " " + r[2]) for r in raw])
    baseline = small.trained(TASK_DIR.name)["checkpoints"][-1]
    script = tmp_path / "run_count.py"
    script.write_text(COUNT, encoding="utf-8")
    with task_modules(ws) as (prepare, _):
        counting = prepare.load_build_model(str(script))({"offset": 1})
        counted = Path(prepare.save_checkpoint(counting, {"offset": 1}, 0.5, path=str(tmp_path / "count.pt")))
    for name, checkpoint, code_file in (("baseline", baseline, ws / "train.py"), ("count", counted, script)):
        eval_dir = stage_eval(tmp_path / name, TASK_DIR, checkpoint, {code_file.name: code_file})
        code, result = run_scorer(TASK_DIR, data, eval_dir, code_file.name)
        assert code == 0 and "error" not in result, result
        assert (result["task"], result["split"], result["n"]) == ("t7", "test", 40)
        assert result["checks"] == expected_probes(1)  # 40 rows: one feed batch of 256
        model = rebuilt(ws, checkpoint) if name == "baseline" else counting.eval()
        with torch.no_grad():
            pred = model(torch.from_numpy(x).long()).argmax(dim=1).numpy()
        assert result["value"] == accuracy_score(y, pred) == old_accuracy(model, x, y), name
    assert 0 < accuracy_score(y, pred) < 1  # the counting model is right on some samples, not on all


@pytest.mark.mirror
def test_real_test_csv(real_mirror, tmp_path):
    """The REAL test.csv (7,600 samples) beside a generated train.csv: counts, encoding of known rows, the metric."""
    real = real_mirror / "ag_news_csv" / "test.csv"
    source = load_task(TASK_DIR).data[1]
    blob = real.read_bytes()
    assert len(blob) == source.size and hashlib.sha256(blob).hexdigest() == source.sha256
    assert hashlib.md5(blob).hexdigest() == source.md5
    write_raw(tmp_path / "raw", train_per_class=5, test_per_class=1)  # val: 1 of each class's 5 rows
    shutil.copy(real, tmp_path / "raw" / "test.csv")
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(tmp_path / "raw"), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((ws / "data" / "meta.json").read_text(encoding="utf-8"))
    assert meta["counts"]["test"] == 7600 and meta["class_counts"]["test"] == [1900] * 4
    assert meta["truncated"]["test"] == 0
    assert meta["partial_data"] == ["train.csv: 20 of 120,000 samples (not the official file)"]  # test.csv is full
    x, y = np.load(ws / "data" / "test_x.npy"), np.load(ws / "data" / "test_y.npy")
    assert x.shape == (7600, 1014) and y[:3].tolist() == [2, 3, 3]  # the file's first labels: 3, 4, 4
    first = (
        "Fears for T N pension after talks Unions representing workers at Turner   Newall say they are "
        "'disappointed' after talks with stricken parent firm Federal Mogul."
    )
    assert np.array_equal(x[0], hand_codes(first))
    second = x[1].tobytes().rstrip(b"\0").decode("ascii")
    assert second.startswith("The Race is On: Second Private Team Sets Launch Date for Human Spaceflight (SPACE.com) ")
    assert "A second\\team of rocketeers competing for the  #36;10 million" in second  # backslash and entity kept
    assert (x > 0).sum(axis=1).max() == 892 and not (x == 26).any()  # the file is plain ASCII
    with task_modules(ws) as (prepare, _):
        pred = prepare.predict(CharCount(), "test", batch_size=1000)
        assert prepare.evaluate(CharCount(), "test")["accuracy"] == accuracy_score(y, pred.numpy())
        assert prepare.evaluate(Constant(0), "test") == {"accuracy": 0.25, "n": 7600}
