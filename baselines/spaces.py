"""One define-by-run search space per task, over the knobs of the task's baseline ``train.py``.

A space suggests values for keys of the baseline's ``CONFIG`` (only keys that the workspace's
``train.py`` has, so a changed baseline never gets a knob it does not read), says which trials to run
first (the baseline itself where a baseline run fits any budget), how expensive one epoch of a config
is (relative units that the driver calibrates into seconds from the trials it has run, to fit epochs
into the time left), and how the validation reports of a trial map onto the pruner's steps.

The paper's Table 2 fixes what each baseline is; the spaces stay around it: learning rate, weight
decay, batch size, epochs, dropout, width/depth and schedule, not a different model family.

    T1  GPT-4L-256d        lr, warm-up, cosine floor, weight decay, dropout, depth, width, heads, block, batch, epochs
    T2  ResBlock CNN       lr, weight decay, batch, epochs, width, dropout, label smoothing
    T3  ConvNeXt-T + FPN   lr, weight decay, batch, epochs, decoder width
    T4  GIN (5 layers)     lr, weight decay, batch, epochs, hidden, layers, dropout
    T5  MLP (3 layers)     lr, weight decay, batch, epochs, hidden, dropout
    T6  DLinear            lr, batch, epochs, schedule, weight decay, optimizer, loss, moving-average kernel
    T7  char-CNN           lr, weight decay, batch, epochs, dropout, channels
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.errors import InputError

Config = dict[str, Any]
Info = dict[str, Any]  # what the driver knows: "meta" (data/meta.json of the workspace, if any)


class SpaceError(InputError, KeyError):
    """A task with no search space (the optuna baseline tunes the seven tasks it has one for)."""


@dataclass(frozen=True)
class Space:
    """The search space of one task.

    suggest(trial, base) -> the CONFIG values of one trial (define-by-run: only keys ``base`` has).
    first(base) -> Optuna params of the trials to run first (e.g. the baseline itself).
    derive(config, info) -> the config with keys that follow from others (after the epochs are fitted).
    epoch_cost(config, info) -> relative cost of one epoch; seconds = cost x a rate measured on trials.
    grid: pruner steps per epoch (validation reports are carried onto this grid).
    warmup_epochs: no pruning before this much training.
    """

    task: str
    suggest: Callable[[Any, Config], Config]
    first: Callable[[Config], list[dict]] = lambda base: []
    derive: Callable[[Config, Info], Config] = lambda config, info: config
    epoch_cost: Callable[[Config, Info], float] = lambda config, info: 1.0
    grid: int = 1
    warmup_epochs: float = 1.0
    min_epochs: int = 1
    tpe_startup: int = 5  # random trials before TPE models the results (enqueued trials count)
    prune_after: int = 3  # completed trials before the pruner may prune
    knobs: tuple[str, ...] = field(default_factory=tuple)  # documentation: the CONFIG keys it tunes


def _has(base: Config, key: str) -> bool:
    return key in base


# ---------------------------------------------------------------------------------------------
# T6: DLinear on ETTh1 (train.py knobs: lr, batch_size, epochs, lr_schedule, weight_decay, optimizer,
# loss, kernel_size; all default to the paper's baseline).
# ---------------------------------------------------------------------------------------------

T6_BASELINE = {
    "lr": 1e-3,
    "batch_size": 128,
    "epochs": 5,
    "lr_schedule": "constant",
    "weight_decay": 0.0,
    "optimizer": "adam",
    "loss": "mse",
    "kernel_size": 25,
}


def _t6(trial, base: Config) -> Config:
    c: Config = {}
    c["lr"] = trial.suggest_float("lr", 2e-4, 2e-2, log=True)
    c["batch_size"] = trial.suggest_categorical("batch_size", [16, 32, 64, 128, 256])
    c["epochs"] = trial.suggest_int("epochs", 3, 30)
    if _has(base, "lr_schedule"):
        c["lr_schedule"] = trial.suggest_categorical("lr_schedule", ["constant", "cosine", "halving"])
    if _has(base, "weight_decay"):
        c["weight_decay"] = trial.suggest_categorical("weight_decay", [0.0, 1e-5, 1e-4, 1e-3, 1e-2])
    if _has(base, "optimizer"):
        c["optimizer"] = trial.suggest_categorical("optimizer", ["adam", "adamw"])
    if _has(base, "loss"):
        c["loss"] = trial.suggest_categorical("loss", ["mse", "l1", "huber"])
    if _has(base, "kernel_size"):
        c["kernel_size"] = trial.suggest_categorical("kernel_size", [13, 25, 37, 49])  # odd: the padding is symmetric
    return c


def _t6_first(base: Config) -> list[dict]:
    return [{k: v for k, v in T6_BASELINE.items() if k in ("lr", "batch_size", "epochs") or k in base}]


def _t6_cost(config: Config, info: Info) -> float:
    # 8,209 windows per epoch: the work is the same for every batch size, plus a per-step overhead
    # that dominates small batches on a CPU, plus one validation pass (2,785 windows).
    return 1.0 + 24.0 / config["batch_size"] + 0.3


T6 = Space(
    task="t6",
    suggest=_t6,
    first=_t6_first,
    epoch_cost=_t6_cost,
    grid=1,  # one validation per epoch
    warmup_epochs=2,
    min_epochs=2,
    tpe_startup=5,
    prune_after=3,
    knobs=("lr", "batch_size", "epochs", "lr_schedule", "weight_decay", "optimizer", "loss", "kernel_size"),
)


# ---------------------------------------------------------------------------------------------
# T1: character-level GPT on TinyShakespeare (train.py knobs: all already in CONFIG).
# ---------------------------------------------------------------------------------------------

T1_TRAIN_CHARS = 1_003_854  # when data/meta.json is not there to say
T1_VAL_CHARS = 111_540
T1_EVALS_PER_EPOCH = 4


def _t1(trial, base: Config) -> Config:
    c: Config = {}
    c["n_layer"] = trial.suggest_int("n_layer", 2, 6)
    c["d_model"] = trial.suggest_categorical("d_model", [128, 192, 256, 384])
    c["n_head"] = trial.suggest_categorical("n_head", [2, 4, 8])  # every width above divides by 8
    c["block_size"] = trial.suggest_categorical("block_size", [64, 128, 256])
    c["batch_size"] = trial.suggest_categorical("batch_size", [16, 32, 64, 128])
    c["dropout"] = trial.suggest_float("dropout", 0.0, 0.25)
    c["lr"] = trial.suggest_float("lr", 3e-4, 5e-3, log=True)
    c["min_lr_ratio"] = trial.suggest_categorical("min_lr_ratio", [0.01, 0.1])  # -> min_lr (derived)
    c["warmup_frac"] = trial.suggest_float("warmup_frac", 0.0, 0.2)  # -> warmup_steps (derived)
    c["weight_decay"] = trial.suggest_categorical("weight_decay", [0.0, 0.01, 0.1])
    c["epochs"] = trial.suggest_int("epochs", 1, 10)
    return c


def _t1_first(base: Config) -> list[dict]:
    # A scaled-down nanoGPT "shakespeare-char" recipe (higher learning rate, short warm-up, no dropout at
    # this training length): one epoch first, which also measures the speed, then the same recipe asked for
    # many epochs, which the driver cuts to what the time left holds (on a CPU: the rest of the budget).
    recipe = {
        "n_layer": 4,
        "d_model": 192,
        "n_head": 4,
        "block_size": 128,
        "batch_size": 32,
        "dropout": 0.0,
        "lr": 2e-3,
        "min_lr_ratio": 0.1,
        "warmup_frac": 0.05,
        "weight_decay": 0.1,
    }
    return [{**recipe, "epochs": 1}, {**recipe, "epochs": 10}]


def _t1_steps(config: Config, info: Info) -> int:
    n = int(info.get("meta", {}).get("train_chars", T1_TRAIN_CHARS))
    return max(1, ((n - 1) // config["block_size"]) // config["batch_size"])


def _t1_derive(config: Config, info: Info) -> Config:
    c = dict(config)
    ratio = c.pop("min_lr_ratio", None)
    if ratio is not None:
        c["min_lr"] = c["lr"] * ratio
    frac = c.pop("warmup_frac", None)
    steps = _t1_steps(c, info)
    if frac is not None:
        c["warmup_steps"] = int(round(frac * steps * c["epochs"]))
    # A validation (and a checkpoint) a few times per epoch, whatever the batch: enough points for the
    # pruner and the anytime view, and evaluation stays a small share of the time.
    c["eval_every"] = max(5, steps // T1_EVALS_PER_EPOCH)
    return c


def _t1_cost(config: Config, info: Info) -> float:
    meta = info.get("meta", {})
    n_train = int(meta.get("train_chars", T1_TRAIN_CHARS))
    n_val = int(meta.get("val_chars", T1_VAL_CHARS))
    d, layers, block = config["d_model"], config["n_layer"], config["block_size"]
    per_token = layers * (12 * d * d + 2 * block * d) + 2 * 65 * d  # matmul flops / 2 per token, attention included
    steps = _t1_steps(config, info)
    overhead = steps * layers * 2e4  # a fixed per-step cost (kernel launches, optimizer) in the same units
    train = n_train * per_token * 3  # forward + backward
    evals = T1_EVALS_PER_EPOCH * n_val * per_token  # forward only
    return (train + evals + overhead) / 1e12


T1 = Space(
    task="t1",
    suggest=_t1,
    first=_t1_first,
    derive=_t1_derive,
    epoch_cost=_t1_cost,
    grid=20,  # pruner steps of 1/20 epoch; validations come every ~1/4 epoch
    warmup_epochs=0.5,
    min_epochs=1,
    tpe_startup=4,
    prune_after=2,
    knobs=(
        "n_layer",
        "d_model",
        "n_head",
        "block_size",
        "batch_size",
        "dropout",
        "lr",
        "min_lr",
        "warmup_steps",
        "weight_decay",
        "epochs",
    ),
)


# ---------------------------------------------------------------------------------------------
# T2-T5, T7: the paper's Table 2 baselines. Their train.py files define the knob names; the spaces
# below tune each knob that the workspace's CONFIG has, around the baseline's value.
# ---------------------------------------------------------------------------------------------

LR_KEYS = ("lr", "learning_rate")
WD_KEYS = ("weight_decay", "wd")
BATCH_KEYS = ("batch_size",)
EPOCH_KEYS = ("epochs",)
DROPOUT_KEYS = ("dropout", "drop", "fc_dropout")


def _key(base: Config, names: tuple[str, ...]) -> str | None:
    return next((k for k in names if k in base), None)


def _around_lr(trial, base: Config, low: float = 0.1, high: float = 10.0) -> Config:
    key = _key(base, LR_KEYS)
    if key is None or not isinstance(base[key], int | float) or base[key] <= 0:
        return {}
    return {key: trial.suggest_float("lr", base[key] * low, base[key] * high, log=True)}


def _generic(
    trial,
    base: Config,
    *,
    batch: list[int],
    epochs: tuple[int, int],
    widths: dict[str, list[int]] | None = None,
    depths: dict[str, tuple[int, int]] | None = None,
    dropout: tuple[float, float] | None = (0.0, 0.5),
    weight_decay: list[float] = (0.0, 1e-5, 1e-4, 1e-3, 1e-2, 5e-2),
    extra: Callable[[Any, Config], Config] | None = None,
) -> Config:
    """lr (x0.1-x10 of the baseline's), weight decay, batch, epochs, dropout, widths and depths when CONFIG has them."""
    c = _around_lr(trial, base)
    if (k := _key(base, WD_KEYS)) is not None:
        c[k] = trial.suggest_categorical("weight_decay", list(weight_decay))
    if (k := _key(base, BATCH_KEYS)) is not None:
        c[k] = trial.suggest_categorical("batch_size", batch)
    if (k := _key(base, EPOCH_KEYS)) is not None:
        c[k] = trial.suggest_int("epochs", *epochs)
    if dropout is not None and (k := _key(base, DROPOUT_KEYS)) is not None:
        c[k] = trial.suggest_float("dropout", *dropout)
    for key, choices in (widths or {}).items():
        if key in base:
            c[key] = trial.suggest_categorical(key, choices)
    for key, (lo, hi) in (depths or {}).items():
        if key in base:
            c[key] = trial.suggest_int(key, lo, hi)
    if extra is not None:
        c.update(extra(trial, base))
    return c


def _baseline_first(params: tuple[str, ...]) -> Callable[[Config], list[dict]]:
    """Enqueue the baseline's own values of the listed knobs (those that are in CONFIG and in the space)."""

    def first(base: Config) -> list[dict]:
        aliases = {"lr": LR_KEYS, "weight_decay": WD_KEYS, "batch_size": BATCH_KEYS, "epochs": EPOCH_KEYS}
        out = {}
        for p in params:
            key = _key(base, aliases.get(p, (p,)))
            if key is not None and isinstance(base[key], int | float) and not isinstance(base[key], bool):
                out[p] = base[key]
        return [out] if out else []

    return first


def _t2(trial, base: Config) -> Config:  # ResBlock CNN, 64-128-256-512 channels, batch 256
    def extra(trial, base):
        return (
            {"label_smoothing": trial.suggest_float("label_smoothing", 0.0, 0.2)} if "label_smoothing" in base else {}
        )

    return _generic(
        trial,
        base,
        batch=[128, 256, 512],
        epochs=(5, 40),
        widths={"width": [32, 48, 64, 96], "base_channels": [32, 48, 64, 96]},
        dropout=(0.0, 0.3),
        extra=extra,
    )


def _t3(trial, base: Config) -> Config:  # ConvNeXt-T DINOv3 encoder + FPN decoder, 15 epochs, lr 1e-4, batch 16
    def extra(trial, base):
        return (
            {"backbone_lr_mult": trial.suggest_float("backbone_lr_mult", 0.05, 1.0, log=True)}
            if ("backbone_lr_mult" in base)
            else {}
        )

    return _generic(
        trial,
        base,
        batch=[8, 16, 32],
        epochs=(8, 40),
        widths={"fpn_dim": [128, 192, 256], "decoder_dim": [128, 192, 256]},
        dropout=(0.0, 0.3),
        extra=extra,
    )


def _t4(trial, base: Config) -> Config:  # GIN, 5 layers, hidden 300, batch 256
    return _generic(
        trial,
        base,
        batch=[64, 128, 256, 512],
        epochs=(10, 100),
        widths={"hidden": [128, 200, 300, 400], "hidden_dim": [128, 200, 300, 400], "emb_dim": [32, 64, 128]},
        depths={"num_layers": (3, 7), "n_layers": (3, 7)},
        dropout=(0.0, 0.6),
    )


def _t5(trial, base: Config) -> Config:  # MLP 256-256-128, BatchNorm, dropout 0.3, batch 4096, 40 epochs
    def extra(trial, base):
        if "hidden" in base and isinstance(base["hidden"], list):
            width = trial.suggest_categorical("width", [256, 512, 1024])
            depth = trial.suggest_int("depth", 2, 5)
            return {"hidden": [width] * (depth - 1) + [width // 2]}
        return {}

    return _generic(
        trial,
        base,
        batch=[1024, 2048, 4096, 8192],
        epochs=(20, 150),
        widths={"hidden_dim": [256, 512, 1024]},
        dropout=(0.0, 0.5),
        extra=extra,
    )


def _t7(trial, base: Config) -> Config:  # char-CNN, 6 conv layers of 256 channels, FC 1024, dropout 0.5, batch 512
    return _generic(
        trial,
        base,
        batch=[128, 256, 512, 1024],
        epochs=(5, 30),
        widths={"channels": [128, 256, 384], "conv_channels": [128, 256, 384], "fc_dim": [512, 1024, 2048]},
        dropout=(0.1, 0.6),
    )


_FIRST = ("lr", "weight_decay", "batch_size", "epochs", "dropout")
T2 = Space("t2", _t2, first=_baseline_first(_FIRST), warmup_epochs=2, min_epochs=2)
T3 = Space("t3", _t3, first=_baseline_first(_FIRST), warmup_epochs=2, min_epochs=2)
T4 = Space("t4", _t4, first=_baseline_first(_FIRST), warmup_epochs=3, min_epochs=3)
T5 = Space("t5", _t5, first=_baseline_first(_FIRST), warmup_epochs=3, min_epochs=3)
T7 = Space("t7", _t7, first=_baseline_first(_FIRST), warmup_epochs=1, min_epochs=1)

SPACES: dict[str, Space] = {s.task: s for s in (T1, T2, T3, T4, T5, T6, T7)}


def get_space(task_id: str) -> Space:
    try:
        return SPACES[task_id]
    except KeyError:
        raise SpaceError(f"no search space for task {task_id!r}; known: {', '.join(sorted(SPACES))}") from None


def epochs_that_fit(seconds: float, epoch_seconds: float) -> int:
    """Whole epochs of ``epoch_seconds`` each that fit into ``seconds`` (0 if not even one)."""
    if epoch_seconds <= 0 or not math.isfinite(epoch_seconds):
        return 0
    return max(0, int(seconds // epoch_seconds))
