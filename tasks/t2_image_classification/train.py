"""Baseline for T2: a residual CNN (ResNet-18 layout) classifying TinyImageNet's 200 classes at 64 x 64.

Copy this file to run_<x>.py and edit the copy. The contract (program.md):
  * CONFIG holds every hyperparameter; build_model(CONFIG) rebuilds the model for the official evaluation.
  * model(x) maps x [B, 3, 64, 64] float32 (prepare.normalize()d) to logits [B, 200].
  * main() trains, measures the validation top-1 accuracy every `eval_every` steps and at the end of every
    epoch, and saves a scored checkpoint each time.

The network: a 3x3 stem convolution, then four stages of BasicBlocks (two 3x3 convolutions with a skip
connection) at 64 -> 128 -> 256 -> 512 channels, each later stage halving the resolution with a stride-2
convolution (64 -> 32 -> 16 -> 8 pixels), global average pooling and one linear layer.
Training: SGD with Nesterov momentum, a short linear warm-up and a cosine decay to zero, on the GPU-resident
uint8 images with random crops (8-pixel zero padding), horizontal flips and colour jitter done on the GPU.

    python train.py        # 5 epochs of 390 steps on the full data (78 on the mirror's 20,000-image subset)
"""

import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from prepare import IMAGE_SIZE, N_CLASSES, evaluate, load_meta, load_split, log_metrics, normalize, save_checkpoint
from task_helpers import run_seed

# Every hyperparameter lives here. The dict is saved inside each checkpoint and handed
# back to build_model(config) by the official evaluation, so keep it plain Python values.
CONFIG = {
    "seed": 0,
    # model
    "num_classes": N_CLASSES,  # fixed by the task: 200
    "width": 64,  # channels of the first stage; the four stages have width x 1, 2, 4, 8 = 64-128-256-512
    "blocks_per_stage": [2, 2, 2, 2],  # BasicBlocks per stage: the ResNet-18 layout
    # data augmentation (training only)
    "crop_padding": 8,  # zero-pad 8 pixels on each side, then crop a random 64 x 64 window
    "flip": True,  # mirror half of the images left-right
    "jitter": 0.4,  # colour jitter: brightness, contrast and saturation each scaled by U(1 - 0.4, 1 + 0.4)
    # optimisation
    "batch_size": 256,
    "epochs": 5,  # one epoch = one pass over the training images (the last incomplete batch is dropped)
    "lr": 0.1,  # peak learning rate of SGD (0.1 for batch 256, as in the ResNet paper)
    "momentum": 0.9,
    "nesterov": True,
    "weight_decay": 5e-4,  # on convolution and linear weights only, not on BatchNorm parameters or biases
    "warmup_epochs": 0.5,  # linear warm-up from ~0 to lr, then cosine decay to 0 at the last step
    "label_smoothing": 0.0,
    "max_steps": None,  # stop early after this many steps (None: train all epochs)
    "log_every": 50,  # steps between training-loss log lines (each one costs a host sync)
    "eval_every": 200,  # steps between validation + checkpoint (also after every epoch): a run cut short still scores
    "eval_batch_size": 500,
    "channels_last": True,  # NHWC memory layout on CUDA: faster convolutions with bf16 tensor cores
    "compile": False,  # torch.compile the model (CUDA only); checkpoints still save the plain module
}


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm, added to a skip connection (He et al., 2016)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Identity()
        if stride != 1 or in_channels != out_channels:  # match the shape of the skip path with a 1x1 convolution
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        width = config["width"]
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, channels = [], width
        for i, n_blocks in enumerate(config["blocks_per_stage"]):
            out_channels = width * 2**i
            for j in range(n_blocks):
                stride = 2 if i > 0 and j == 0 else 1  # the first block of stages 2-4 halves the resolution
                layers.append(BasicBlock(channels, out_channels, stride))
                channels = out_channels
        self.stages = nn.Sequential(*layers)
        self.head = nn.Linear(channels, config["num_classes"])
        for m in self.modules():  # the initialisation of torchvision's ResNet
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, 3, 64, 64] normalised -> logits [B, num_classes]."""
        x = self.stages(self.stem(x))  # [B, 8 * width, 8, 8]
        return self.head(x.mean(dim=(2, 3)))  # global average pooling, then the linear classifier


def build_model(config: dict) -> nn.Module:
    """The official evaluation calls this with the config stored in the checkpoint (rule 7)."""
    return ResNet(config)


# ---------------------------------------------------------------------------
# Data augmentation on the device, a whole batch at once (no torchvision, no DataLoader)
# ---------------------------------------------------------------------------


def random_crop(x: torch.Tensor, padding: int) -> torch.Tensor:
    """Zero-pad every image by `padding` pixels, then cut a random IMAGE_SIZE window out of each one."""
    B = x.shape[0]
    padded = F.pad(x, (padding, padding, padding, padding))  # [B, 3, 64 + 2p, 64 + 2p]
    dy, dx = torch.randint(0, 2 * padding + 1, (2, B, 1), device=x.device)  # top-left corner of each window
    grid = torch.arange(IMAGE_SIZE, device=x.device)
    rows = (dy + grid)[:, None, :, None]  # [B, 1, 64, 1]
    cols = (dx + grid)[:, None, None, :]  # [B, 1, 1, 64]
    batch = torch.arange(B, device=x.device)[:, None, None, None]
    channel = torch.arange(3, device=x.device)[None, :, None, None]
    return padded[batch, channel, rows, cols]  # gather: [B, 3, 64, 64]


def grey(x: torch.Tensor) -> torch.Tensor:
    """Luminance of RGB images (ITU-R 601, as PIL and torchvision): [B, 3, H, W] -> [B, 1, H, W]."""
    return (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)


def colour_jitter(x: torch.Tensor, strength: float) -> torch.Tensor:
    """Random brightness, contrast and saturation per image (x float in 0..1), in this fixed order.

    The same blends as torchvision's ColorJitter(strength, strength, strength), which randomises the order.
    """
    B = x.shape[0]
    factors = 1 + strength * (2 * torch.rand(3, B, 1, 1, 1, device=x.device) - 1)  # U(1 - s, 1 + s)
    x = (x * factors[0]).clamp(0, 1)  # brightness: blend with black
    mean = grey(x).mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * factors[1] + mean).clamp(0, 1)  # contrast: blend with the image's mean grey
    g = grey(x)
    return ((x - g) * factors[2] + g).clamp(0, 1)  # saturation: blend with the greyscale image


def augment(x: torch.Tensor, config: dict) -> torch.Tensor:
    """uint8 images [B, 3, 64, 64] -> augmented float images in 0..1 (normalize() comes after)."""
    if config["crop_padding"]:
        x = random_crop(x, config["crop_padding"])
    if config["flip"]:
        flip = torch.rand(x.shape[0], device=x.device) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(3), x)
    x = x.float() / 255.0
    if config["jitter"]:
        x = colour_jitter(x, config["jitter"])
    return x


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


def lr_at(step: int, total_steps: int, warmup_steps: int, config: dict) -> float:
    """Linear warm-up to lr over warmup_steps, then cosine decay to 0 at the last step."""
    if step < warmup_steps:
        return config["lr"] * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return config["lr"] * 0.5 * (1.0 + math.cos(math.pi * progress))


def main(config: dict = CONFIG) -> None:
    config = {**config, "seed": run_seed(config["seed"])}  # a repeat's own seed when the harness gives one
    torch.manual_seed(config["seed"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    use_bf16 = device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # pick the fastest convolution kernels for these fixed shapes
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    memory_format = (
        torch.channels_last if config["channels_last"] and device.type == "cuda" else torch.contiguous_format
    )

    # Data: 100,000 uint8 images are 1.2 GB, so they sit on the device once; each batch is gathered and
    # augmented there (no DataLoader, no per-step host-to-device copy).
    x_train, y_train = load_split("train")
    for note in load_meta().get("partial_data", []):
        print(f"note: partial data: {note}", flush=True)
    if device.type == "cuda":
        x_train = x_train.pin_memory().to(device, non_blocking=True)
        y_train = y_train.pin_memory().to(device, non_blocking=True)
    n = len(x_train)
    batch_size = config["batch_size"]
    steps_per_epoch = n // batch_size
    total_steps = steps_per_epoch * config["epochs"]
    if config["max_steps"] is not None:
        total_steps = min(total_steps, config["max_steps"])
    warmup_steps = max(1, round(config["warmup_epochs"] * steps_per_epoch))

    model = build_model(config).to(device, memory_format=memory_format)
    print(
        f"ResNet: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, {n:,} training images, "
        f"{steps_per_epoch} steps per epoch, {total_steps} steps, device {device}",
        flush=True,
    )
    # Weight decay on convolution and linear weights only, not on BatchNorm scales/shifts or biases.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.SGD(
        [{"params": decay, "weight_decay": config["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config["lr"],
        momentum=config["momentum"],
        nesterov=config["nesterov"],
    )
    # torch.compile renames the state dict keys (_orig_mod.*); evaluate and save `model`, train `train_model`.
    train_model = torch.compile(model) if config["compile"] and device.type == "cuda" else model

    def validate(epoch: float) -> None:
        """The validation score, exactly as the official evaluation computes it, and a scored checkpoint."""
        acc = evaluate(model, "val", device=str(device), batch_size=config["eval_batch_size"])["top1_acc"]
        log_metrics(step, val_top1_acc=acc, epoch=epoch, elapsed_s=time.time() - t0)
        path = save_checkpoint(model, config, acc, step=step)
        print(f"step {step}: val top1_acc {acc:.4f}, saved {path}", flush=True)

    step, t0 = 0, time.time()
    loss_sum = torch.zeros((), device=device)  # summed on the device: no host sync until we log
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(n, device=device)  # reshuffle every epoch
        for i in range(steps_per_epoch):
            idx = order[i * batch_size : (i + 1) * batch_size]
            x = normalize(augment(x_train[idx], config)).contiguous(memory_format=memory_format)
            y = y_train[idx]

            lr = lr_at(step, total_steps, warmup_steps, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits = train_model(x)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=config["label_smoothing"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            step += 1

            if step % config["log_every"] == 0:
                log_metrics(step, loss=loss_sum.item() / config["log_every"], lr=lr, elapsed_s=time.time() - t0)
                loss_sum.zero_()
            last_of_epoch = i == steps_per_epoch - 1
            if last_of_epoch or step % config["eval_every"] == 0 or step == total_steps:
                validate(epoch + (i + 1) / steps_per_epoch)
            if step == total_steps:
                break
        if step == total_steps:
            break
    print(f"done: {step} steps in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
