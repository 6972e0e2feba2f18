"""bench/scoring/leakage.py on synthetic targets (the fast tier; tests/tasks/test_label_scan.py runs it on every
task's small data and through the real scorer): what is found, where, and what is not claimed."""

from __future__ import annotations

import base64
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.scoring import leakage

RNG = np.random.default_rng(7)
SERIES = RNG.standard_normal((3216, 7)).astype(np.float32)  # a T6-shaped test segment: 336 look-back rows first
T6_TARGETS = [SERIES[336 + i : 432 + i][None] for i in range(2785)]  # the feed's targets, one window at a time
LABELS = RNG.integers(0, 4, 7600)  # a T7-shaped label sequence
T7_TARGETS = [LABELS[i : i + 256] for i in range(0, 7600, 256)]


def _folder(tmp_path: Path, payload: dict, script: str = "x = 1\n") -> Path:
    folder = tmp_path / "eval"
    folder.mkdir(exist_ok=True)
    torch.save(payload, folder / "checkpoint.pt")
    (folder / "train.py").write_text(script, encoding="utf-8")
    return folder


def _honest() -> dict:
    return {"state_dict": torch.nn.Linear(336, 96).state_dict(), "config": {"lr": 1e-3}, "val_score": 0.5}


def test_an_honest_checkpoint_is_not_claimed(tmp_path):
    result = leakage.scan(_folder(tmp_path, _honest()), "checkpoint.pt", leakage.SERIES, T6_TARGETS)
    assert result["found"] == [] and result["windows"] == 2 * leakage.WINDOWS
    assert result["encodings"] == ["2 decimals", "float16", "float32", "float64"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("channel_major", [False, True])
def test_the_test_series_in_a_tensor_is_found_and_named(tmp_path, dtype, channel_major):
    rows = SERIES[336:].astype(dtype)
    payload = _honest()
    payload["state_dict"]["lut"] = torch.from_numpy(np.ascontiguousarray(rows.T if channel_major else rows))
    found = leakage.scan(_folder(tmp_path, payload), "checkpoint.pt", leakage.SERIES, T6_TARGETS)["found"]
    (hit,) = [f for f in found if f["encoding"] == np.dtype(dtype).name]
    assert hit["order"] == ("channel-major" if channel_major else "time-major")
    assert hit["windows"] == hit["of"] == leakage.WINDOWS and hit["where"].endswith("(tensor 'lut')")


def test_the_series_printed_in_a_script_is_found(tmp_path):
    text = "LUT = [" + ", ".join(f"{v:.4f}" for v in SERIES[336:].reshape(-1)) + "]\n"
    found = leakage.scan(_folder(tmp_path, _honest(), text), "checkpoint.pt", leakage.SERIES, T6_TARGETS)["found"]
    hit = {f["where"]: f["windows"] for f in found}
    assert hit["train.py (numbers to 2 decimals)"] >= 12, found  # a 4-decimal print rounds apart ~1 % of values
    assert set(hit) <= {"train.py (numbers to 2 decimals)", "train.py (numbers as float16)"}


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.float32])
def test_labels_in_a_tensor_a_config_list_or_a_base64_literal_are_found(tmp_path, dtype):
    payload = _honest()
    payload["state_dict"]["lut"] = torch.from_numpy(LABELS.astype(dtype))
    found = leakage.scan(_folder(tmp_path, payload), "checkpoint.pt", leakage.LABELS, T7_TARGETS)["found"]
    assert any(f["encoding"] == np.dtype(dtype).name and "(tensor 'lut')" in f["where"] for f in found), found
    listed = {**_honest(), "config": {"answers": LABELS.tolist()}}
    found = leakage.scan(_folder(tmp_path, listed), "checkpoint.pt", leakage.LABELS, T7_TARGETS)["found"]
    assert any(f["where"].startswith("checkpoint.pt:data.pkl integers") for f in found), found
    blob = base64.b64encode(zlib.compress(LABELS.astype(dtype).tobytes())).decode()
    script = f"import base64, zlib\nLUT = {blob!r}\n"
    found = leakage.scan(_folder(tmp_path, _honest(), script), "checkpoint.pt", leakage.LABELS, T7_TARGETS)["found"]
    assert any(f["where"] == "train.py (base64 literal 1)" for f in found), found


def test_text_is_found_as_its_characters_or_its_ids(tmp_path):
    vocab = [chr(c) for c in range(32, 127)] + ["\n"]
    ids = RNG.integers(0, len(vocab), 20_000)
    targets = [ids[i : i + 1024].reshape(4, 256) for i in range(0, 19_456, 1024)]  # blocks of 256
    text = "".join(vocab[i] for i in ids)
    script = f"TEXT = {text!r}\n"  # its newlines escaped
    found = leakage.scan(_folder(tmp_path, _honest(), script), "checkpoint.pt", leakage.TEXT, targets, vocab=vocab)
    hit = {(f["where"], f["encoding"]): f["windows"] for f in found["found"]}
    assert hit[("train.py (escapes read)", "utf-8")] == leakage.WINDOWS  # raw, only the windows without a newline
    assert set(hit) <= {("train.py (escapes read)", "utf-8"), ("train.py", "utf-8")}
    payload = _honest()
    payload["ids"] = torch.from_numpy(ids.astype(np.int16))  # int16 is not looked for; uint16 (its bytes) is
    found = leakage.scan(_folder(tmp_path, payload), "checkpoint.pt", leakage.TEXT, targets, vocab=vocab)["found"]
    assert [f["encoding"] for f in found] == ["uint16"]


def test_uninformative_windows_and_few_found_are_not_claimed(tmp_path):
    """A label run (zeros) is never a window, so a zero-filled tensor matches nothing; two windows are not three."""
    labels = np.zeros(5000, dtype=np.int64)
    labels[::97] = 1  # isolated positives: a window holds at most one run of ones
    assert leakage.windows(leakage.LABELS, [labels]) == []
    payload = _honest()
    payload["head"] = torch.from_numpy(LABELS[: 7600 * 2 // 16].astype(np.int64))  # an eighth of the split
    found = leakage.scan(_folder(tmp_path, payload), "checkpoint.pt", leakage.LABELS, T7_TARGETS)["found"]
    assert found == []
    with pytest.raises(ValueError, match="targets must be one of series, labels, text"):
        leakage.windows("images", T7_TARGETS)


def test_a_checkpoint_that_is_no_zip_and_targets_that_are_no_arrays(tmp_path):
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "checkpoint.pt").write_bytes(b"\x80\x02" + LABELS.astype(np.int64).tobytes())  # a legacy-format file
    found = leakage.scan(folder, "checkpoint.pt", leakage.LABELS, T7_TARGETS)["found"]
    assert [(f["where"], f["encoding"]) for f in found] == [("checkpoint.pt", "int64")]
    skipped = leakage.scan(folder, "checkpoint.pt", leakage.LABELS, [np.array(["a", "b"])])
    assert skipped["found"] == [] and skipped["skipped"]
