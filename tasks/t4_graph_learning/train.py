"""Baseline for T4: a 5-layer GIN (Xu et al., 2019) predicts whether a molecule inhibits HIV (ogbg-molhiv).

Copy this file to run_<x>.py and edit the copy. The contract (program.md):
  * CONFIG holds every hyperparameter; build_model(CONFIG) rebuilds the model for the official evaluation.
  * model(batch) maps a prepare.GraphBatch of B molecules to B scores (logits: higher = more likely active).
  * main() trains, measures the validation AUROC every epoch and saves a scored checkpoint each time.

Plain PyTorch, no graph library: message passing is a gather (h[src]) followed by a scatter-add
(index_add_ over the target nodes), and mean pooling is a scatter-add over the node -> graph vector.

    python train.py        # 5 epochs of 129 steps (batch 256), a validation + checkpoint after each
"""

import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from prepare import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS, evaluate, load_split, log_metrics, save_checkpoint
from task_helpers import run_seed

# Every hyperparameter lives here. The dict is saved inside each checkpoint and handed
# back to build_model(config) by the official evaluation, so keep it plain Python values.
CONFIG = {
    "seed": 0,
    # model
    "atom_feature_dims": ATOM_FEATURE_DIMS,  # vocabulary size of each of the 9 atom features (OGB's lists)
    "bond_feature_dims": BOND_FEATURE_DIMS,  # ... and of each of the 3 bond features
    "emb_dim": 64,  # one learned embedding of this size per feature value; the 9 (or 3) are summed ...
    "hidden": 300,  # ... and projected by a Linear to the hidden size of the GIN layers
    "num_layers": 5,
    "dropout": 0.5,
    # optimisation
    "batch_size": 256,  # graphs per step
    "epochs": 5,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "bf16": True,  # bf16 autocast for the training forward pass on CUDA (the evaluation is always float32)
    "log_every": 20,  # steps between training-loss log lines (each one waits for the GPU)
}


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


class FeatureEncoder(nn.Module):
    """Categorical features [n, k] -> [n, hidden]: one nn.Embedding(dim_i, emb_dim) per feature, summed, then a
    Linear(emb_dim, hidden). (OGB's AtomEncoder/BondEncoder embed straight to the hidden size; the paper's
    baseline embeds to d=64 and works at hidden size 300, hence the projection.)"""

    def __init__(self, feature_dims: list[int], emb_dim: int, hidden: int):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(dim, emb_dim) for dim in feature_dims)
        for emb in self.embeddings:
            nn.init.xavier_uniform_(emb.weight)
        self.proj = nn.Linear(emb_dim, hidden)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.proj(sum(emb(feats[:, i]) for i, emb in enumerate(self.embeddings)))


class GINConv(nn.Module):
    """OGB's GIN layer with edge features: h_i' = MLP((1 + eps) * h_i + sum_{j -> i} relu(h_j + e_ji))."""

    def __init__(self, config: dict):
        super().__init__()
        h = config["hidden"]
        self.bond_encoder = FeatureEncoder(config["bond_feature_dims"], config["emb_dim"], h)
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(h, 2 * h), nn.BatchNorm1d(2 * h), nn.ReLU(), nn.Linear(2 * h, h))

    def forward(self, h: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        messages = F.relu(h[src] + self.bond_encoder(edge_attr)).float()  # one message per directed edge
        # Sum the messages arriving at each node (scatter-add), in float32 even under bf16 autocast. On CUDA the
        # additions run as atomics in no fixed order, so two runs can differ in the last bits (not bit-reproducible).
        aggregated = torch.zeros(h.shape[0], messages.shape[1], device=h.device).index_add_(0, dst, messages)
        return self.mlp((1 + self.eps) * h.float() + aggregated)


class GIN(nn.Module):
    """Atom encoder -> num_layers x (GINConv, BatchNorm, ReLU, dropout) -> mean pooling -> MLP head -> 1 logit."""

    def __init__(self, config: dict):
        super().__init__()
        h = config["hidden"]
        self.dropout = config["dropout"]
        self.atom_encoder = FeatureEncoder(config["atom_feature_dims"], config["emb_dim"], h)
        self.convs = nn.ModuleList(GINConv(config) for _ in range(config["num_layers"]))
        self.norms = nn.ModuleList(nn.BatchNorm1d(h) for _ in range(config["num_layers"]))
        self.head = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Dropout(self.dropout), nn.Linear(h, 1))

    def forward(self, batch) -> torch.Tensor:
        """batch: a prepare.GraphBatch (x, edge_index, edge_attr, batch, num_graphs) -> logits [num_graphs]."""
        h = self.atom_encoder(batch.x)
        for layer, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            h = norm(conv(h, batch.edge_index, batch.edge_attr))
            if layer < len(self.convs) - 1:  # as in OGB's GNN_node: no ReLU after the last layer
                h = F.relu(h)
            h = F.dropout(h, self.dropout, training=self.training)
        # Mean pooling: sum the node vectors of each graph (scatter-add over batch.batch), divide by the node count.
        h = h.float()
        sums = torch.zeros(batch.num_graphs, h.shape[1], device=h.device).index_add_(0, batch.batch, h)
        counts = torch.zeros(batch.num_graphs, device=h.device).index_add_(0, batch.batch, torch.ones_like(h[:, 0]))
        return self.head(sums / counts.clamp(min=1).unsqueeze(1)).squeeze(1)


def build_model(config: dict) -> nn.Module:
    """Rebuild the model from its config: the official evaluation calls this (rule 7)."""
    return GIN(config)


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------


def main(config: dict = CONFIG) -> None:
    config = {**config, "seed": run_seed(config["seed"])}  # a repeat's own seed when the harness gives one
    torch.manual_seed(config["seed"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    use_bf16 = config.get("bf16", True) and device.type == "cuda"

    # The whole training set (33 K graphs, 831 K atoms, ~130 MB) goes to the device once; every batch is then
    # gathered there by GraphSet.batch (a vectorised collate) from a shuffled list of graph indices.
    train = load_split("train").to(device)
    n, batch_size = len(train), config["batch_size"]
    steps_per_epoch = math.ceil(n / batch_size)  # the last, smaller batch is kept (as OGB's DataLoader does)

    model = build_model(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    print(
        f"GIN: {sum(p.numel() for p in model.parameters()):,} parameters, {n:,} training graphs, "
        f"{steps_per_epoch} steps/epoch on {device}",
        flush=True,
    )

    generator = torch.Generator().manual_seed(config["seed"])
    start, step = time.time(), 0
    loss_sum = torch.zeros((), device=device)  # summed on the device: no host sync until we log
    for epoch in range(config["epochs"]):
        model.train()
        # The order is drawn on the CPU (pinned, so copies to the GPU do not wait): the batch sizes in atoms
        # are then known on the host, and gathering a batch never waits for the GPU.
        order = torch.randperm(n, generator=generator)
        if device.type == "cuda":
            order = order.pin_memory()
        for i in range(steps_per_epoch):
            batch, y = train.batch(order[i * batch_size : (i + 1) * batch_size])
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits = model(batch)
            loss = F.binary_cross_entropy_with_logits(logits.float(), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            step += 1
            if step % config["log_every"] == 0:
                log_metrics(step, loss=loss_sum.item() / config["log_every"], epoch=epoch + 1)  # waits for the GPU
                loss_sum.zero_()

        # Validation AUROC: the official metric (prepare.evaluate) on the validation split.
        val_auroc = evaluate(model, "valid", device=device.type)["auroc"]
        log_metrics(step, val_auroc=val_auroc, epoch=epoch + 1, seconds=time.time() - start)
        save_checkpoint(model, config, val_auroc, step=step)  # every epoch: a cut run still leaves a score

    print(f"done: {step} steps in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
