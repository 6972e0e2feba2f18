"""Baseline for task T1: a small GPT that models TinyShakespeare one character at a time.

Copy this file to run_<x>.py and change what you like: CONFIG, the model, the training loop.
Keep the contract: a module-level build_model(config), training only under
`if __name__ == "__main__":`, and scored checkpoints saved through prepare.save_checkpoint().

    python train.py        # 5 epochs; evaluates val_bpb and saves a checkpoint every 20 steps and every epoch

The model is scored on fixed blocks of 256 characters (prepare.EVAL_BLOCK_SIZE), whatever its block_size:
GPT.forward runs an input longer than block_size in consecutive windows of block_size.
"""

import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from prepare import evaluate, load_ids, load_meta, log_metrics, save_checkpoint
from task_helpers import run_seed

# Every hyperparameter lives here. The dict is saved inside each checkpoint and handed
# back to build_model(config) by the official evaluation, so keep it plain Python values.
CONFIG = {
    "seed": 1337,
    # model
    "vocab_size": 65,  # overwritten from data/meta.json at start-up
    "block_size": 256,  # context length in training; the evaluation always reads blocks of 256 characters
    "n_layer": 4,
    "n_head": 4,
    "d_model": 256,
    "dropout": 0.1,
    # optimisation
    "batch_size": 64,
    "epochs": 5,  # one epoch = one pass over the training text in non-overlapping blocks
    "lr": 3e-4,
    "min_lr": 3e-5,  # the cosine decay ends here, at the last step
    "warmup_steps": 200,
    "weight_decay": 0.1,
    "betas": [0.9, 0.95],
    "grad_clip": 1.0,
    "log_every": 10,  # steps between training-loss log lines
    "eval_every": 20,  # steps between validation + checkpoint (also after every epoch): a run cut short still scores
    "compile": False,  # torch.compile the model (CUDA only); checkpoints still save the plain module
}


# ---------------------------------------------------------------------------
# The model: token + learned position embeddings, n_layer pre-LayerNorm blocks
# (causal self-attention, GELU MLP), a final LayerNorm and an output layer that
# shares its weights with the token embedding.
# ---------------------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        self.n_head = config["n_head"]
        self.dropout = config["dropout"]
        self.qkv = nn.Linear(config["d_model"], 3 * config["d_model"])
        self.proj = nn.Linear(config["d_model"], config["d_model"])
        self.resid_drop = nn.Dropout(config["dropout"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # [B, T, C] -> [B, n_head, T, head_dim]
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        d = config["d_model"]
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(config["dropout"]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        d = config["d_model"]
        self.block_size = config["block_size"]
        self.tok_emb = nn.Embedding(config["vocab_size"], d)
        self.pos_emb = nn.Embedding(config["block_size"], d)
        self.drop = nn.Dropout(config["dropout"])
        self.blocks = nn.ModuleList(Block(config) for _ in range(config["n_layer"]))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, config["vocab_size"], bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: LongTensor [B, T] -> logits [B, T, vocab_size].

        The evaluation sends up to 256 positions: an input longer than block_size is run in consecutive windows
        of block_size, each on its own (still causal: a position sees only earlier ones of its window).
        """
        T = idx.shape[1]
        if T > self.block_size:
            return torch.cat([self(window) for window in idx.split(self.block_size, dim=1)], dim=1)
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build_model(config: dict) -> nn.Module:
    """The official evaluation calls this with the config stored in the checkpoint."""
    return GPT(config)


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


def lr_at(step: int, total_steps: int, config: dict) -> float:
    """Linear warm-up to lr, then cosine decay to min_lr at the last step."""
    if step < config["warmup_steps"]:
        return config["lr"] * (step + 1) / config["warmup_steps"]
    progress = (step - config["warmup_steps"]) / max(1, total_steps - 1 - config["warmup_steps"])
    progress = min(progress, 1.0)
    return config["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * progress)) * (config["lr"] - config["min_lr"])


def main(config: dict = CONFIG) -> None:
    config = {**config, "seed": run_seed(config["seed"])}  # a repeat's own seed when the harness gives one
    torch.manual_seed(config["seed"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    use_bf16 = device.type == "cuda"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # Data: the whole training text is 1 M ids, so it sits on the device once and
    # batches are gathered there (no host-to-device copy per step).
    meta = load_meta()
    config["vocab_size"] = meta["vocab_size"]
    train_ids = torch.from_numpy(load_ids("train").astype("int64")).to(device)
    bs = config["block_size"]
    n_blocks = (len(train_ids) - 1) // bs  # block i reads ids[i*bs : i*bs+bs] and predicts ids[i*bs+1 : i*bs+bs+1]
    steps_per_epoch = n_blocks // config["batch_size"]  # the last incomplete batch is dropped
    total_steps = steps_per_epoch * config["epochs"]
    offsets = torch.arange(bs + 1, device=device)

    model = build_model(config).to(device)
    print(
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, {steps_per_epoch} steps per epoch, "
        f"{total_steps} steps, device {device}",
        flush=True,
    )
    # Weight decay on matrices and embeddings only, not on biases and LayerNorm gains.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config["lr"],
        betas=tuple(config["betas"]),
        fused=device.type == "cuda",
    )
    # torch.compile renames the state dict keys (_orig_mod.*); evaluate and save `model`, train `train_model`.
    train_model = torch.compile(model) if config["compile"] and device.type == "cuda" else model

    generator = torch.Generator().manual_seed(config["seed"])
    step, t0 = 0, time.time()
    loss_sum = torch.zeros((), device=device)  # summed on the device: no host sync until we log
    for epoch in range(config["epochs"]):
        model.train()
        order = torch.randperm(n_blocks, generator=generator).to(device)
        for i in range(steps_per_epoch):
            starts = order[i * config["batch_size"] : (i + 1) * config["batch_size"]] * bs
            chunk = train_ids[starts[:, None] + offsets]  # [batch, bs + 1]
            x, y = chunk[:, :-1], chunk[:, 1:]

            lr = lr_at(step, total_steps, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits = train_model(x)
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config["grad_clip"])
            optimizer.step()
            loss_sum += loss.detach()
            step += 1

            if step % config["log_every"] == 0:
                log_metrics(step, loss=loss_sum.item() / config["log_every"], elapsed_s=time.time() - t0)
                loss_sum.zero_()
            last_of_epoch = i == steps_per_epoch - 1
            if last_of_epoch or step % config["eval_every"] == 0:
                # The validation score, exactly as the official evaluation computes it, and a scored
                # checkpoint, so that a run stopped by the time budget still has results.
                val_bpb = evaluate(model, "val", device=device)["val_bpb"]
                log_metrics(step, val_bpb=val_bpb, epoch=epoch + (i + 1) / steps_per_epoch, elapsed_s=time.time() - t0)
                path = save_checkpoint(model, config, val_bpb, step=step)
                print(f"step {step}: val_bpb {val_bpb:.4f}, saved {path}", flush=True)


if __name__ == "__main__":
    main()
