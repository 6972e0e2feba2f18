"""Baseline for T7: a character-level CNN (after Zhang, Zhao & LeCun 2015, "small") classifying AG News into 4 topics.

Copy this file to run_<x>.py and edit the copy. The contract (program.md):
  * CONFIG holds every hyperparameter; build_model(CONFIG) rebuilds the model for the official evaluation.
  * model(x) maps x [B, 1014] int64 character codes (0 = padding) to logits [B, 4].
  * main() trains on the train split, measures the accuracy on the val split (6,000 samples carved from train.csv;
    test.csv, the scored split, is held out of the workspace) at the end of every epoch and saves a scored
    checkpoint each time.

The network: a 128-dim embedding of the 128 ASCII codes, six 1-D convolutions of 256 channels (kernels 7, 7, 3, 3,
3, 3, each followed by a ReLU; max-pooling by 3 after the 1st, 2nd and 6th), which turn 1,014 characters into
34 positions x 256 channels, then two fully connected layers of 1,024 units with dropout 0.5 and the output layer.
Zhang et al. feed one-hot characters; here a learned embedding stands in for them (paper section 3.2).
Training: Adam at lr 1e-3 (as in the Keras char-CNN this task's data files come from), batch 512, 5 epochs,
bf16 autocast on CUDA, the encoded training set resident on the device and batches cut from it by index.

    python train.py        # 5 epochs of 222 steps on the 114,000 training samples
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from prepare import MAX_LEN, N_CLASSES, PAD, VOCAB_SIZE, evaluate, load_meta, load_split, log_metrics, save_checkpoint
from task_helpers import run_seed

# Every hyperparameter lives here. The dict is saved inside each checkpoint and handed
# back to build_model(config) by the official evaluation, so keep it plain Python values.
CONFIG = {
    "seed": 0,
    # model
    "vocab_size": VOCAB_SIZE,  # fixed by the task: codes 0..127
    "max_len": MAX_LEN,  # fixed by the task: 1,014 characters
    "num_classes": N_CLASSES,  # fixed by the task: 4
    "embed_dim": 128,
    "channels": 256,  # of every convolution
    "kernels": [7, 7, 3, 3, 3, 3],  # one entry per convolution
    "pool_after": [0, 1, 5],  # max-pool (kernel 3, stride 3) after these convolutions (0-based)
    "pool": 3,
    "fc_dim": 1024,  # two hidden fully connected layers of this width
    "dropout": 0.5,  # after each of them
    # optimisation
    "batch_size": 512,
    "epochs": 5,  # one epoch = one pass over the 114,000 training samples (the last incomplete batch is dropped)
    "lr": 1e-3,  # Adam, constant
    "weight_decay": 0.0,
    "max_steps": None,  # stop early after this many steps (None: train all epochs)
    "log_every": 50,  # steps between training-loss log lines (each one costs a host sync)
    "eval_batch_size": 512,
    "compile": False,  # torch.compile the model (CUDA only); checkpoints still save the plain module
}


class CharCNN(nn.Module):
    """Embedding -> 6 x (Conv1d + ReLU, three of them max-pooled) -> 2 x (Linear + ReLU + Dropout) -> Linear."""

    def __init__(self, config: dict):
        super().__init__()
        self.embed = nn.Embedding(config["vocab_size"], config["embed_dim"], padding_idx=PAD)  # padding stays zero
        layers, width, length = [], config["embed_dim"], config["max_len"]
        for i, k in enumerate(config["kernels"]):
            layers += [nn.Conv1d(width, config["channels"], k), nn.ReLU()]
            width, length = config["channels"], length - k + 1  # no padding: each convolution shortens by k - 1
            if i in config["pool_after"]:
                layers.append(nn.MaxPool1d(config["pool"]))  # stride = kernel: the length is divided by 3
                length //= config["pool"]
        self.features = nn.Sequential(*layers)  # [B, embed_dim, 1014] -> [B, 256, 34] for the baseline
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(width * length, config["fc_dim"]),
            nn.ReLU(),
            nn.Dropout(config["dropout"]),
            nn.Linear(config["fc_dim"], config["fc_dim"]),
            nn.ReLU(),
            nn.Dropout(config["dropout"]),
            nn.Linear(config["fc_dim"], config["num_classes"]),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, 1014] int64 -> logits [B, 4]
        h = self.embed(x).transpose(1, 2)  # [B, 1014, embed_dim] -> channels first for Conv1d
        return self.classifier(self.features(h))


def build_model(config: dict) -> nn.Module:
    """Rebuild the model from its config: the official evaluation calls this (rule 7)."""
    return CharCNN(config)


def main(config: dict = CONFIG) -> None:
    config = {**config, "seed": run_seed(config["seed"])}  # a repeat's own seed when the harness gives one
    torch.manual_seed(config["seed"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    use_bf16 = device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # pick the fastest convolution kernels for these fixed shapes
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # Data: 114,000 samples x 1,014 uint8 codes are 116 MB, so they sit on the device once and each batch is
    # gathered there by index (no DataLoader, no per-step host-to-device copy).
    x_train, y_train = load_split("train")
    for note in load_meta().get("partial_data", []):
        print(f"note: partial data: {note}", flush=True)
    x_train, y_train = x_train.to(device), y_train.to(device)
    n = len(x_train)
    batch_size = config["batch_size"]
    steps_per_epoch = n // batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"batch_size {batch_size} is larger than the {n:,} training samples")
    total_steps = steps_per_epoch * config["epochs"]
    if config["max_steps"] is not None:
        total_steps = min(total_steps, config["max_steps"])

    model = build_model(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    print(
        f"CharCNN: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, {n:,} training samples, "
        f"{steps_per_epoch} steps per epoch, {total_steps} steps, device {device}",
        flush=True,
    )
    # torch.compile renames the state dict keys (_orig_mod.*); evaluate and save `model`, train `train_model`.
    train_model = torch.compile(model) if config["compile"] and device.type == "cuda" else model

    def validate(epoch: float) -> None:
        """The val accuracy, exactly as the official evaluation computes it (on test.csv), and a scored checkpoint."""
        acc = evaluate(model, "val", device=str(device), batch_size=config["eval_batch_size"])["accuracy"]
        log_metrics(step, val_accuracy=acc, epoch=epoch, elapsed_s=time.time() - t0)
        path = save_checkpoint(model, config, acc, step=step)
        print(f"step {step}: val accuracy {acc:.4f}, saved {path}", flush=True)

    step, t0 = 0, time.time()
    loss_sum = torch.zeros((), device=device)  # summed on the device: no host sync until we log
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(n, device=device)  # reshuffle every epoch
        for i in range(steps_per_epoch):
            idx = order[i * batch_size : (i + 1) * batch_size]
            x, y = x_train[idx].long(), y_train[idx]
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits = train_model(x)
            loss = F.cross_entropy(logits.float(), y)
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
        # Every epoch (and at max_steps): a run stopped by the time budget still has a scored checkpoint.
        validate(epoch + (i + 1) / steps_per_epoch)
        if step == total_steps:
            break
    print(f"done: {step} steps in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
