"""The per-task search spaces: only the baseline's knobs, the baseline first, costs and derived keys."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from baselines.rewrite import module_constants, read_config, rewrite_config
from baselines.spaces import SPACES, T1, T6, epochs_that_fit, get_space

ROOT = Path(__file__).resolve().parents[2]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def base_config(folder: str) -> dict:
    d = ROOT / "tasks" / folder
    return read_config((d / "train.py").read_text(), module_constants((d / "prepare.py").read_text()))


def sample(space, base: dict, n: int = 12, seed: int = 0) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(space.suggest(trial, base))
        study.tell(trial, 0.0)
    return out


def test_every_task_has_a_space():
    assert sorted(SPACES) == [f"t{i}" for i in range(1, 8)]
    with pytest.raises(KeyError, match="no search space"):
        get_space("t9")


def test_t6_first_trial_is_exactly_the_baseline_and_suggestions_stay_in_config():
    base = base_config("t6_time_series_forecasting")
    first = T6.first(base)
    assert len(first) == 1 and all(base[k] == v for k, v in first[0].items())
    study = optuna.create_study()
    study.enqueue_trial(first[0])
    trial = study.ask()
    assert {**base, **T6.suggest(trial, base)} == base  # the enqueued trial reproduces the baseline's CONFIG
    for overrides in sample(T6, base):
        assert set(overrides) <= set(base)
        assert overrides["kernel_size"] % 2 == 1  # the moving average needs an odd window
        assert T6.epoch_cost({**base, **overrides}, {}) > 0


def test_t6_space_without_the_new_knobs_only_tunes_what_train_py_has():
    old = {"seq_len": 336, "pred_len": 96, "kernel_size": 25, "lr": 1e-3, "batch_size": 128, "epochs": 5}
    for overrides in sample(T6, old, n=4):
        assert set(overrides) <= set(old)


def test_t1_derives_schedule_eval_and_min_lr_and_costs_grow_with_the_model():
    base = base_config("t1_language_modeling")
    info = {"meta": {"train_chars": 1_003_854, "val_chars": 111_540}}
    for overrides in sample(T1, base):
        config = T1.derive({**base, **overrides}, info)
        assert set(config) == set(base)  # min_lr_ratio and warmup_frac became min_lr and warmup_steps
        assert config["d_model"] % config["n_head"] == 0
        assert 0 <= config["warmup_steps"] and config["eval_every"] >= 5
        assert config["min_lr"] < config["lr"]
        rewrite_config((ROOT / "tasks" / "t1_language_modeling" / "train.py").read_text(), config)
    small = T1.epoch_cost({**base, "d_model": 128, "n_layer": 2}, info)
    assert small < T1.epoch_cost(base, info) < T1.epoch_cost({**base, "d_model": 384, "n_layer": 6}, info)
    assert [t["epochs"] for t in T1.first(base)] == [1, 10]


@pytest.mark.parametrize("task", ["t2", "t3", "t4", "t5", "t7"])
def test_later_tasks_tune_the_table2_knobs_that_their_config_has(task):
    base = {"lr": 1e-3, "weight_decay": 1e-4, "batch_size": 256, "epochs": 10, "dropout": 0.3, "other": 1}
    space = get_space(task)
    for overrides in sample(space, base, n=5):
        assert {"lr", "weight_decay", "batch_size", "epochs", "dropout"} <= set(overrides) <= set(base)
        assert 1e-4 <= overrides["lr"] <= 1e-2
    assert space.first(base) == [{"lr": 1e-3, "weight_decay": 1e-4, "batch_size": 256, "epochs": 10, "dropout": 0.3}]
    assert sample(space, {"other": 1}, n=1) == [{}]  # nothing it knows: nothing tuned


def test_epochs_that_fit():
    assert epochs_that_fit(100, 30) == 3
    assert epochs_that_fit(10, 30) == 0
    assert epochs_that_fit(-5, 30) == 0
    assert epochs_that_fit(100, 0) == 0


@pytest.mark.parametrize("task", ["t2", "t3", "t4", "t5", "t7"])
def test_each_table2_space_tunes_the_real_baseline_config(task):
    """The space reads the task's actual train.py: it must find the Table 2 knobs there and write back valid code."""
    (folder,) = [p.name for p in (ROOT / "tasks").iterdir() if p.name.startswith(f"{task}_")]
    base = base_config(folder)
    space = get_space(task)
    (first,) = space.first(base)
    assert {"lr", "batch_size", "epochs"} <= set(first)  # the baseline's own values are tried first
    for overrides in sample(space, base, n=4):
        assert set(overrides) <= set(base) and {"lr", "batch_size", "epochs"} <= set(overrides)
        source = rewrite_config((ROOT / "tasks" / folder / "train.py").read_text(), overrides)
        assert read_config(source, module_constants((ROOT / "tasks" / folder / "prepare.py").read_text())) == {
            **base,
            **overrides,
        }
