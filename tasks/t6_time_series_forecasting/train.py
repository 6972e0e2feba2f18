"""Baseline for T6: DLinear (Zeng et al., 2023) on ETTh1, 336 hours in -> 96 hours out, 7 channels.

Copy this file to run_<x>.py and edit the copy. The contract (program.md):
  * CONFIG holds every hyperparameter; build_model(CONFIG) rebuilds the model for the official evaluation.
  * model(x) maps x [B, 336, 7] float32 (normalised) to [B, 96, 7].
  * main() trains, measures the validation MSE every epoch and saves a scored checkpoint each time.

DLinear splits the look-back window into a trend (a moving average) and a seasonal part (the rest),
maps each part to the horizon with one linear layer over time, and adds the two forecasts.
"""

import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from prepare import PRED_LEN, SEQ_LEN, evaluate, load_split, log_metrics, save_checkpoint
from task_helpers import run_seed

CONFIG = {
    "seq_len": SEQ_LEN,  # fixed by the task: 336 input steps ...
    "pred_len": PRED_LEN,  # ... and 96 output steps
    "kernel_size": 25,  # moving-average window of the trend
    "lr": 1e-3,
    "batch_size": 128,
    "epochs": 5,
    "weight_decay": 0.0,  # L2 penalty of Adam (decoupled with "adamw")
    "optimizer": "adam",  # "adam" | "adamw"
    "loss": "mse",  # training loss: "mse" | "l1" | "huber"
    "lr_schedule": "constant",  # "constant" | "cosine" (per step, to 0) | "halving" (lr / 2 each epoch, as in DLinear)
    "seed": 2021,
    "log_every": 16,  # steps between progress lines (each one costs a host sync)
}


class MovingAverage(nn.Module):
    """Moving average over time, with the series padded by repeating its first and last rows."""

    def __init__(self, kernel_size: int):
        super().__init__()
        self.pad = (kernel_size - 1) // 2
        self.pool = nn.AvgPool1d(kernel_size, stride=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, L, C]
        front = x[:, :1].expand(-1, self.pad, -1)
        back = x[:, -1:].expand(-1, self.pad, -1)
        x = torch.cat([front, x, back], dim=1)  # [B, L + 2 * pad, C]
        return self.pool(x.transpose(1, 2)).transpose(1, 2)  # pool over time -> [B, L, C]


class DLinear(nn.Module):
    """Trend = moving average, seasonal = the rest; one Linear(seq_len -> pred_len) each, shared by all channels."""

    def __init__(self, seq_len: int, pred_len: int, kernel_size: int):
        super().__init__()
        self.trend = MovingAverage(kernel_size)
        self.linear_seasonal = nn.Linear(seq_len, pred_len)
        self.linear_trend = nn.Linear(seq_len, pred_len)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, seq_len, C] -> [B, pred_len, C]
        trend = self.trend(x)
        seasonal = x - trend
        # Linear acts on the last dimension, so put time last: [B, C, seq_len] -> [B, C, pred_len].
        out = self.linear_seasonal(seasonal.transpose(1, 2)) + self.linear_trend(trend.transpose(1, 2))
        return out.transpose(1, 2)


def build_model(config: dict) -> nn.Module:
    """Rebuild the model from its config: the official evaluation calls this (rule 7)."""
    return DLinear(config["seq_len"], config["pred_len"], config["kernel_size"])


LOSSES = {"mse": F.mse_loss, "l1": F.l1_loss, "huber": F.huber_loss}


def lr_at(step: int, epoch: int, total_steps: int, config: dict) -> float:
    """The learning rate of a step under config["lr_schedule"] ("constant" leaves the optimizer alone)."""
    schedule = config.get("lr_schedule", "constant")
    if schedule == "halving":
        return config["lr"] * 0.5**epoch
    if schedule == "cosine":
        return config["lr"] * 0.5 * (1.0 + math.cos(math.pi * step / max(1, total_steps)))
    return config["lr"]


def main(config: dict = CONFIG) -> None:
    config = {**config, "seed": run_seed(config["seed"])}  # a repeat's own seed when the harness gives one
    torch.manual_seed(config["seed"])
    device = "cuda" if torch.cuda.is_available() else "cpu"

    # The whole training set is small (8,209 windows, ~100 MB), so it goes to the device once and
    # batches are cut from it by index: no DataLoader and no per-step host-to-device copies.
    x_train, y_train = load_split("train")
    if device == "cuda":
        x_train = x_train.pin_memory().to(device, non_blocking=True)
        y_train = y_train.pin_memory().to(device, non_blocking=True)
    n = len(x_train)
    batch_size = config["batch_size"]
    steps_per_epoch = n // batch_size  # the last incomplete batch is dropped (as in the official DLinear code)

    model = build_model(config).to(device)
    optimizer_class = torch.optim.AdamW if config.get("optimizer", "adam") == "adamw" else torch.optim.Adam
    optimizer = optimizer_class(model.parameters(), lr=config["lr"], weight_decay=config.get("weight_decay", 0.0))
    loss_fn = LOSSES[config.get("loss", "mse")]
    schedule = config.get("lr_schedule", "constant")
    total_steps = steps_per_epoch * config["epochs"]
    print(
        f"DLinear: {sum(p.numel() for p in model.parameters()):,} parameters, {n:,} training windows, "
        f"{steps_per_epoch} steps/epoch on {device}",
        flush=True,
    )

    # The model is a pair of linear maps: float32 throughout (bf16 autocast would bring no speed here,
    # only rounding noise in a score that is read to three decimals).
    start, step = time.time(), 0
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(n, device=device)  # reshuffle every epoch
        for i in range(steps_per_epoch):
            idx = order[i * batch_size : (i + 1) * batch_size]
            if schedule != "constant":
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, epoch, total_steps, config)
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % config["log_every"] == 0:
                log_metrics(step, loss=loss.item(), epoch=epoch + 1)  # .item() waits for the GPU: only here

        # Validation MSE: the official metric (prepare.evaluate) on the validation split.
        val_mse = evaluate(model, "val", device=device)["mse"]
        log_metrics(step, val_mse=val_mse, epoch=epoch + 1, seconds=time.time() - start)
        save_checkpoint(model, config, val_mse, step=step)  # every epoch: a cut run still leaves a score

    print(f"done: {step} steps in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
