"""Baseline for T5: a 3-hidden-layer MLP predicting the forest cover type (7 classes) from 54 features.

Copy this file to run_<x>.py and edit the copy. The contract (program.md):
  * CONFIG holds every hyperparameter; build_model(CONFIG) rebuilds the model for the official evaluation.
  * model(x) maps x [B, 54] float32 (as load_split gives it) to logits [B, 7].
  * main() trains, measures the validation accuracy after every epoch and saves a scored checkpoint each time.

The network: 54 -> 256 -> 256 -> 128 -> 7, each hidden layer Linear -> BatchNorm -> ReLU -> Dropout(0.3).
Training: Adam (lr 1e-3, the PyTorch default), cross-entropy, batch 4,096, 40 epochs, the whole training set
resident on the device and batches cut from it by index.

    python train.py        # 40 epochs of 113 steps on the full data, a validation + checkpoint after each
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from prepare import N_CLASSES, N_FEATURES, evaluate, load_meta, load_split, log_metrics, save_checkpoint
from task_helpers import run_seed

# Every hyperparameter lives here. The dict is saved inside each checkpoint and handed
# back to build_model(config) by the official evaluation, so keep it plain Python values.
CONFIG = {
    "seed": 0,
    # model
    "in_features": N_FEATURES,  # fixed by the task: 54 (10 standardised + 4 wilderness + 40 soil indicators)
    "num_classes": N_CLASSES,  # fixed by the task: 7
    "hidden": [256, 256, 128],  # widths of the three hidden layers
    "dropout": 0.3,
    # optimisation
    "batch_size": 4096,
    "epochs": 40,  # one epoch = one pass over the training rows (the last incomplete batch is dropped)
    "lr": 1e-3,  # Adam, constant
    "weight_decay": 0.0,
    "max_steps": None,  # stop early after this many steps (None: train all epochs)
    "log_every": 50,  # steps between training-loss log lines (each one costs a host sync)
}


class MLP(nn.Module):
    """Hidden layers of Linear -> BatchNorm1d -> ReLU -> Dropout, then a linear layer to the class logits."""

    def __init__(self, in_features: int, hidden: list[int], num_classes: int, dropout: float):
        super().__init__()
        layers, width = [], in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, 54] -> logits [B, 7]
        return self.head(self.body(x))


def build_model(config: dict) -> nn.Module:
    """Rebuild the model from its config: the official evaluation calls this (rule 7)."""
    return MLP(config["in_features"], config["hidden"], config["num_classes"], config["dropout"])


def main(config: dict = CONFIG) -> None:
    config = {**config, "seed": run_seed(config["seed"])}  # a repeat's own seed when the harness gives one
    torch.manual_seed(config["seed"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # TF32 matmuls for training; the evaluation uses full float32

    # Data: 464,809 rows x 54 float32 are 100 MB, so the training set sits on the device once and each
    # batch is gathered there by index (no DataLoader, no per-step host-to-device copy).
    x_train, y_train = load_split("train")
    for note in load_meta().get("partial_data", []):
        print(f"note: partial data: {note}", flush=True)
    x_train, y_train = x_train.to(device), y_train.to(device)
    n = len(x_train)
    batch_size = config["batch_size"]
    steps_per_epoch = n // batch_size  # dropping the last partial batch keeps BatchNorm away from tiny batches
    if steps_per_epoch == 0:
        raise ValueError(f"batch_size {batch_size} is larger than the {n:,} training rows")
    total_steps = steps_per_epoch * config["epochs"]
    if config["max_steps"] is not None:
        total_steps = min(total_steps, config["max_steps"])

    model = build_model(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    print(
        f"MLP: {sum(p.numel() for p in model.parameters()):,} parameters, {n:,} training rows, "
        f"{steps_per_epoch} steps per epoch, {total_steps} steps, device {device}",
        flush=True,
    )

    # The model is small, so a step is bound by kernel launches, not arithmetic: plain float32 (with TF32
    # matmuls on CUDA) is as fast as bf16 autocast here and keeps BatchNorm statistics exact.
    step, t0 = 0, time.time()
    loss_sum = torch.zeros((), device=device)  # summed on the device: no host sync until we log
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(n, device=device)  # reshuffle every epoch
        for i in range(steps_per_epoch):
            idx = order[i * batch_size : (i + 1) * batch_size]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            step += 1
            if step % config["log_every"] == 0:
                log_metrics(step, loss=loss_sum.item() / config["log_every"], elapsed_s=time.time() - t0)
                loss_sum.zero_()
            if step == total_steps:
                break

        # Validation accuracy: the official metric (prepare.evaluate) on the validation split, and a scored
        # checkpoint every epoch, so that a run stopped by the time budget still has results.
        acc = evaluate(model, "val", device=str(device))["accuracy"]
        log_metrics(step, val_accuracy=acc, epoch=epoch + 1, elapsed_s=time.time() - t0)
        path = save_checkpoint(model, config, acc, step=step)
        print(f"step {step}: val accuracy {acc:.4f}, saved {path}", flush=True)
        if step == total_steps:
            break
    print(f"done: {step} steps in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
