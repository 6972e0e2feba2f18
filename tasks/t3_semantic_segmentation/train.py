"""Baseline for T3: a DINOv3 ConvNeXt-Tiny encoder + a light FPN decoder, segmenting Pascal VOC 2012 at 224 x 224.

Copy this file to run_<x>.py and edit the copy. The contract (program.md):
  * CONFIG holds every hyperparameter; build_model(CONFIG) rebuilds the model for the official evaluation.
    build_model() builds the architecture only: the pretrained weights are loaded in main(), never in
    build_model() (the evaluation has no weights/ folder; it loads your checkpoint instead).
  * model(x) maps x [B, 3, 224, 224] float32 (prepare.normalize()d) to logits [B, 21, 224, 224].
  * main() trains, measures the validation mIoU at the end of every epoch, and saves a scored checkpoint each time.

The encoder is the ConvNeXt-Tiny of dinov3.py (a locked file), initialised from the DINOv3 weights in weights/.
Its four stages give feature maps at strides 4, 8, 16 and 32 (96, 192, 384, 768 channels; 56, 28, 14 and 7 pixels
a side at 224). The FPN decoder projects each to 128 channels (1x1 "lateral" convolutions), adds every coarser map,
upsampled, to the next finer one (top-down path), smooths each with a 3x3 convolution, upsamples all four to
stride 4, concatenates and fuses them with a 3x3 convolution, classifies every pixel (1x1 convolution to 21
classes) and upsamples the logits bilinearly to the input size.
Training: AdamW (lr 1e-4) on the whole network, batch 16, 15 epochs, cross-entropy that ignores the void label
255, random horizontal flips (image and mask together) and colour jitter (the image only).

    python train.py        # 15 epochs of 91 steps on the full data
"""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from dinov3 import convnext_tiny, load_backbone_weights, weights_path
from prepare import IGNORE_INDEX, N_CLASSES, evaluate, load_meta, load_split, log_metrics, normalize, save_checkpoint
from task_helpers import run_seed

# Every hyperparameter lives here. The dict is saved inside each checkpoint and handed
# back to build_model(config) by the official evaluation, so keep it plain Python values.
CONFIG = {
    "seed": 0,
    # model
    "num_classes": N_CLASSES,  # fixed by the task: 21 (background + 20 object classes)
    "pretrained": weights_path("convnext_tiny"),  # the DINOv3 file in weights/; None = random initialisation
    "fpn_dim": 128,  # channels of every pyramid level in the decoder
    "dropout": 0.0,  # Dropout2d before the classifier
    "drop_path_rate": 0.0,  # stochastic depth in the encoder (0 = off)
    # data augmentation (training only)
    "flip": True,  # mirror half of the images left-right (with their masks)
    "jitter": 0.2,  # colour jitter of the images (never the masks): brightness, contrast, saturation x U(0.8, 1.2)
    # optimisation
    "batch_size": 16,
    "epochs": 15,  # one epoch = one pass over the training images (the last incomplete batch is dropped)
    "lr": 1e-4,  # AdamW, constant
    "backbone_lr_mult": 1.0,  # the encoder's lr = lr x this (1.0: the whole network at the same rate)
    "weight_decay": 0.01,  # AdamW's default, on every parameter
    "max_steps": None,  # stop early after this many steps (None: train all epochs)
    "log_every": 20,  # steps between training-loss log lines (each one costs a host sync)
    "eval_batch_size": 32,
    "channels_last": True,  # NHWC memory layout on CUDA: faster convolutions with bf16 tensor cores
    "compile": False,  # torch.compile the model (CUDA only); checkpoints still save the plain module
}


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


def conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    )


class FPNDecoder(nn.Module):
    """Feature Pyramid Network (Lin et al., 2017) with a semantic head: 4 feature maps -> per-pixel logits."""

    def __init__(self, in_channels: list[int], dim: int, num_classes: int, dropout: float):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, dim, 1) for c in in_channels)
        self.smooth = nn.ModuleList(conv_bn_relu(dim, dim, 3) for _ in in_channels)
        self.fuse = conv_bn_relu(len(in_channels) * dim, dim, 3)
        self.dropout = nn.Dropout2d(dropout)
        self.classifier = nn.Conv2d(dim, num_classes, 1)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        """features: finest first (stride 4, 8, 16, 32) -> logits at stride 4."""
        maps = [lateral(f) for lateral, f in zip(self.lateral, features, strict=True)]
        for i in range(len(maps) - 1, 0, -1):  # top-down: coarse semantics flow into the finer maps
            maps[i - 1] = maps[i - 1] + F.interpolate(maps[i], size=maps[i - 1].shape[-2:], mode="bilinear")
        maps = [smooth(m) for smooth, m in zip(self.smooth, maps, strict=True)]
        size = maps[0].shape[-2:]
        maps = [maps[0]] + [F.interpolate(m, size=size, mode="bilinear") for m in maps[1:]]
        return self.classifier(self.dropout(self.fuse(torch.cat(maps, dim=1))))


class Segmenter(nn.Module):
    """DINOv3 ConvNeXt-Tiny encoder + FPN decoder; logits upsampled to the input size."""

    def __init__(self, config: dict):
        super().__init__()
        self.backbone = convnext_tiny(drop_path_rate=config["drop_path_rate"])
        self.decoder = FPNDecoder(self.backbone.embed_dims, config["fpn_dim"], config["num_classes"], config["dropout"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, 3, H, W] normalised (H, W multiples of 32) -> logits [B, num_classes, H, W]."""
        features = self.backbone.stage_outputs(x)  # strides 4, 8, 16, 32; the last one through the final LayerNorm
        logits = self.decoder(features)  # [B, num_classes, H / 4, W / 4]
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear")


def build_model(config: dict) -> nn.Module:
    """The official evaluation calls this with the config stored in the checkpoint (rule 7).

    Architecture only, randomly initialised: main() loads the pretrained encoder weights, and the evaluation
    loads the whole trained state dict from your checkpoint.
    """
    return Segmenter(config)


# ---------------------------------------------------------------------------
# Data augmentation on the device, a whole batch at once (no torchvision, no DataLoader).
# Geometric transforms move the image AND its mask; photometric ones touch the IMAGE ONLY. A mask holds class
# ids: "brightening" it would turn one class into another (or into the void label 255).
# ---------------------------------------------------------------------------


def random_flip(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mirror a random half of the images left-right, each together with its mask: x [B, 3, H, W], y [B, H, W]."""
    flip = torch.rand(x.shape[0], device=x.device) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(3), x)
    y = torch.where(flip[:, None, None], y.flip(2), y)
    return x, y


def grey(x: torch.Tensor) -> torch.Tensor:
    """Luminance of RGB images (ITU-R 601, as PIL and torchvision): [B, 3, H, W] -> [B, 1, H, W]."""
    return (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)


def colour_jitter(x: torch.Tensor, strength: float) -> torch.Tensor:
    """Random brightness, contrast and saturation per IMAGE (x float in 0..1), in this fixed order."""
    B = x.shape[0]
    factors = 1 + strength * (2 * torch.rand(3, B, 1, 1, 1, device=x.device) - 1)  # U(1 - s, 1 + s)
    x = (x * factors[0]).clamp(0, 1)  # brightness: blend with black
    mean = grey(x).mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * factors[1] + mean).clamp(0, 1)  # contrast: blend with the image's mean grey
    g = grey(x)
    return ((x - g) * factors[2] + g).clamp(0, 1)  # saturation: blend with the greyscale image


def augment(x: torch.Tensor, y: torch.Tensor, config: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images [B, 3, H, W] + masks [B, H, W] -> float images in 0..1 (normalize() comes after) + masks.

    The masks come back with the same values, only mirrored where their image is.
    """
    if config["flip"]:
        x, y = random_flip(x, y)
    x = x.float() / 255.0
    if config["jitter"]:
        x = colour_jitter(x, config["jitter"])  # the image only
    return x, y


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


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

    # The model, with the pretrained DINOv3 weights in its encoder (a clear error if the file is missing).
    model = build_model(config)
    if config["pretrained"]:
        load_backbone_weights(model.backbone, config["pretrained"])
        print(f"encoder initialised from {config['pretrained']}", flush=True)
    else:
        print("note: no pretrained weights: the encoder starts from a random initialisation", flush=True)
    model = model.to(device, memory_format=memory_format)

    # Data: 1,464 uint8 images of 224 x 224 are 220 MB, so they sit on the device once; each batch is gathered
    # and augmented there (no DataLoader, no per-step host-to-device copy).
    x_train, y_train = load_split("train")
    for note in load_meta().get("partial_data", []):
        print(f"note: partial data: {note}", flush=True)
    if device.type == "cuda":
        x_train = x_train.pin_memory().to(device, non_blocking=True)
        y_train = y_train.pin_memory().to(device, non_blocking=True)
    n = len(x_train)
    batch_size = config["batch_size"]
    steps_per_epoch = max(1, n // batch_size)
    total_steps = steps_per_epoch * config["epochs"]
    if config["max_steps"] is not None:
        total_steps = min(total_steps, config["max_steps"])
    print(
        f"Segmenter: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, {n:,} training images, "
        f"{steps_per_epoch} steps per epoch, {total_steps} steps, device {device}",
        flush=True,
    )

    # AdamW on everything; the encoder may get a smaller learning rate (backbone_lr_mult).
    optimizer = torch.optim.AdamW(
        [
            {"params": model.backbone.parameters(), "lr": config["lr"] * config["backbone_lr_mult"]},
            {"params": model.decoder.parameters(), "lr": config["lr"]},
        ],
        lr=config["lr"],
        weight_decay=config["weight_decay"],
    )
    # torch.compile renames the state dict keys (_orig_mod.*); evaluate and save `model`, train `train_model`.
    train_model = torch.compile(model) if config["compile"] and device.type == "cuda" else model

    def validate(epoch: float) -> None:
        """The validation score, exactly as the official evaluation computes it, and a scored checkpoint."""
        miou = evaluate(model, "val", device=str(device), batch_size=config["eval_batch_size"])["miou"]
        log_metrics(step, val_miou=miou, epoch=epoch, elapsed_s=time.time() - t0)
        path = save_checkpoint(model, config, miou, step=step)
        print(f"step {step}: val mIoU {miou:.4f}, saved {path}", flush=True)

    step, t0 = 0, time.time()
    loss_sum = torch.zeros((), device=device)  # summed on the device: no host sync until we log
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(n, device=device)  # reshuffle every epoch
        for i in range(steps_per_epoch):
            idx = order[i * batch_size : (i + 1) * batch_size]
            x, y = augment(x_train[idx], y_train[idx], config)
            x = normalize(x).contiguous(memory_format=memory_format)

            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits = train_model(x)
            loss = F.cross_entropy(logits.float(), y.long(), ignore_index=IGNORE_INDEX)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            step += 1

            if step % config["log_every"] == 0:
                log_metrics(step, loss=loss_sum.item() / config["log_every"], elapsed_s=time.time() - t0)
                loss_sum.zero_()
            if i == steps_per_epoch - 1 or step == total_steps:
                validate(epoch + (i + 1) / steps_per_epoch)
            if step == total_steps:
                break
        if step == total_steps:
            break
    print(f"done: {step} steps in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
