"""Baseline for the example task "spirals": a one-hidden-layer MLP telling two interleaved spirals apart.

Copy this file to run_<x>.py and edit the copy. The contract (program.md):
  * CONFIG holds every hyperparameter; build_model(CONFIG) rebuilds the model for the official evaluation.
  * model(x) maps x [B, 2] float32 (as load_split gives it) to logits [B, 2].
  * main() trains, measures the validation accuracy after every epoch and saves a scored checkpoint each time.

The network: 2 -> 64 -> 2 with a ReLU: too small and too briefly trained for two turns of spiral, on purpose (the
baseline leaves most of the gap to the references in task.toml). Training: Adam (lr 1e-2), cross-entropy, batch 256,
10 epochs on the 4,000 training points: about a second on one CPU core.

    python train.py        # 10 epochs of 15 steps, a validation + checkpoint after each
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from prepare import N_CLASSES, N_FEATURES, evaluate, load_split, log_metrics, save_checkpoint

# Every hyperparameter lives here. The dict is saved inside each checkpoint and handed
# back to build_model(config) by the official evaluation, so keep it plain Python values.
CONFIG = {
    "seed": 0,
    # model
    "in_features": N_FEATURES,  # fixed by the task: 2
    "num_classes": N_CLASSES,  # fixed by the task: 2
    "hidden": [64],  # widths of the hidden layers
    # optimisation
    "batch_size": 256,
    "epochs": 10,  # one epoch = one pass over the training points (the last incomplete batch is dropped)
    "lr": 1e-2,  # Adam, constant
    "log_every": 5,  # steps between training-loss log lines
}


class MLP(nn.Module):
    """Hidden layers of Linear -> ReLU, then a linear layer to the class logits."""

    def __init__(self, in_features: int, hidden: list[int], num_classes: int):
        super().__init__()
        layers, width = [], in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, 2] -> logits [B, 2]
        return self.head(self.body(x))


def build_model(config: dict) -> nn.Module:
    """Rebuild the model from its config: the official evaluation calls this (rule 7)."""
    return MLP(config["in_features"], config["hidden"], config["num_classes"])


def main(config: dict = CONFIG) -> None:
    torch.manual_seed(config["seed"])
    torch.set_num_threads(1)  # a model this small is slower on several threads than on one
    x_train, y_train = load_split("train")
    n, batch_size = len(x_train), config["batch_size"]
    steps_per_epoch = n // batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"batch_size {batch_size} is larger than the {n:,} training points")
    model = build_model(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    print(f"MLP: {sum(p.numel() for p in model.parameters()):,} parameters, {n:,} training points", flush=True)
    step, t0 = 0, time.time()
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(n)
        for i in range(steps_per_epoch):
            idx = order[i * batch_size : (i + 1) * batch_size]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % config["log_every"] == 0:
                log_metrics(step, loss=loss.item(), elapsed_s=time.time() - t0)
        # the official metric on the validation split, and a scored checkpoint every epoch
        acc = evaluate(model, "val")["accuracy"]
        log_metrics(step, val_accuracy=acc, epoch=epoch + 1, elapsed_s=time.time() - t0)
        path = save_checkpoint(model, config, acc, step=step)
        print(f"step {step}: val accuracy {acc:.4f}, saved {path}", flush=True)
    print(f"done: {step} steps in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
