"""run_<k>.py = train.py with only CONFIG's values changed (baselines.rewrite)."""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

import pytest

from baselines.rewrite import ConfigError, literal, module_constants, read_config, rewrite_config

ROOT = Path(__file__).resolve().parents[2]
T6 = ROOT / "tasks" / "t6_time_series_forecasting"
T1 = ROOT / "tasks" / "t1_language_modeling"

SOURCE = '''"""doc"""
import os

SEQ = 336

CONFIG = {
    "seq_len": SEQ,  # fixed
    "lr": 1e-3,  # learning rate
    "name": "dlinear",
    "betas": [0.9, 0.95],
    "epochs": 5
}


def main():
    return CONFIG
'''


def changed_lines(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_values_are_replaced_in_place_and_comments_kept():
    out = rewrite_config(SOURCE, {"lr": 0.0025, "name": "x", "betas": [0.8, 0.99]})
    assert '    "lr": 0.0025,  # learning rate\n' in out
    assert '    "name": "x",\n' in out and '    "betas": [0.8, 0.99],\n' in out
    assert '"seq_len": SEQ,  # fixed' in out  # an untouched expression stays an expression
    assert len(changed_lines(SOURCE, out)) == 6  # three lines out, three in: nothing else moved
    assert read_config(out) == {"seq_len": 336, "lr": 0.0025, "name": "x", "betas": [0.8, 0.99], "epochs": 5}


def test_new_keys_are_added_before_the_closing_brace_with_a_comma():
    out = rewrite_config(SOURCE, {"epochs": 9, "weight_decay": 0.01})
    ast.parse(out)
    assert '    "epochs": 9,\n    "weight_decay": 0.01,  # added by the trial\n}' in out
    assert read_config(out)["weight_decay"] == 0.01 and read_config(out)["epochs"] == 9


def test_comment_goes_on_the_config_line_and_an_empty_change_is_the_identity():
    out = rewrite_config(SOURCE, {}, comment="optuna trial 0 (study)")
    assert out.replace("  # optuna trial 0 (study)", "") == SOURCE
    assert "CONFIG = {  # optuna trial 0 (study)\n" in out
    assert rewrite_config(SOURCE, {}) == SOURCE


def test_one_line_config_and_annotated_assignment():
    src = 'CONFIG: dict = {"a": 1, "b": 2}\nX = 1\n'
    out = rewrite_config(src, {"b": 3, "c": "z"}, comment="ignored on one line")
    assert out == 'CONFIG: dict = {"a": 1, "b": 3, "c": "z"}\nX = 1\n'


def test_read_config_resolves_names_from_prepare_constants():
    source = (T6 / "train.py").read_text()
    constants = module_constants((T6 / "prepare.py").read_text())
    config = read_config(source, constants)
    assert config["seq_len"] == 336 and config["pred_len"] == 96 and config["kernel_size"] == 25
    assert "seq_len" not in read_config(source)  # SEQ_LEN lives in prepare.py: unresolved, so not a knob
    assert module_constants("A = [1, 2, 3]\nN = len(A)\nM = len(B)\n") == {"A": [1, 2, 3], "N": 3}


def test_real_baselines_rewrite_to_exactly_their_config_change():
    for folder in (T6, T1):
        source = (folder / "train.py").read_text()
        constants = module_constants((folder / "prepare.py").read_text())
        base = read_config(source, constants)
        out = rewrite_config(source, {"lr": 0.00123, "epochs": 7})
        assert read_config(out, constants) == {**base, "lr": 0.00123, "epochs": 7}
        assert len(changed_lines(source, out)) == 4, folder.name


def test_missing_or_malformed_config_is_reported():
    with pytest.raises(ConfigError, match="no module-level"):
        rewrite_config("x = 1\n", {"a": 1})
    with pytest.raises(ConfigError, match="string keys"):
        rewrite_config("CONFIG = {**A}\n", {"a": 1})
    with pytest.raises(ConfigError, match="cannot write"):
        literal(object())


def test_literals_round_trip():
    for value in (1, 2.5e-4, True, None, 'a"b', [1, "x"], (1,), {"k": [1.0]}):
        assert ast.literal_eval(literal(value)) == value
