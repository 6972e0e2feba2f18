# =============================================================================
# prepare.py for T4 (graph learning, ogbg-molhiv): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# What is here, in order:
#   1. constants (task, counts, checksums; OGB's feature lists are in molecules.py, also locked)
#   2. preparation: OGB's files -> molecular graphs (molecules.py, with RDKit) + the split, as arrays in data/
#   3. loaders the training scripts import (load_split -> GraphSet, collate_graphs, load_meta)
#   4. the evaluation: the inputs the harness feeds, the forward contract, the metric (ROC-AUC on the test molecules)
#   5. checkpoint + logging helpers (task_helpers.py, shared by all seven tasks)
#   6. main(): the command line
#
#   python prepare.py --prepare --raw-dir RAW --data-dir OUT
#   python prepare.py --eval checkpoints/<file>.pt [--script PATH] [--data-dir DIR] [--device cpu|cuda]
#                     [--split train|valid|test] [--batch-size N]   (your own check; the harness scores officially)
# =============================================================================

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import os
import sys
import time
import zipfile
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

# OGB's featurisation lives in molecules.py beside this file (locked too). Training scripts import the feature
# vocabulary sizes from here: `from prepare import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS`.
from molecules import (
    ALLOWABLE,  # noqa: F401  (re-exported: OGB's feature lists)
    ATOM_FEATURE_DIMS,
    ATOM_FEATURES,
    BOND_FEATURE_DIMS,
    BOND_FEATURES,
    compare_with_ogb_raw,
    featurize,
    int_table,
    scaffold_split,
)

# The checkpoint and logging helpers every task shares live in task_helpers.py beside this file (locked too);
# section 5 gives two of them this task's metric. Training scripts import them all from here:
# `from prepare import log_metrics, save_checkpoint`.
from task_helpers import CHECKPOINT_DIR, load_build_model, load_checkpoint, log_metrics, rebuild_model  # noqa: F401
from task_helpers import save_checkpoint as helpers_save_checkpoint
from task_helpers import self_check as helpers_self_check

# ---------------------------------------------------------------------------
# 1. Constants
# ---------------------------------------------------------------------------

TASK_ID = "t4"
METRIC = "auroc"  # area under the ROC curve of the per-molecule scores (sklearn's roc_auc_score, as OGB's Evaluator)
DIRECTION = "max"  # higher is better
EVAL_SPLIT = "test"
DATA_DIR = "data"

ZIP_FILE = "hiv.zip"  # OGB's archive: hiv/mapping/mol.csv.gz, hiv/split/scaffold/*.csv.gz, hiv/raw/*.csv.gz
MOL_FILE = "mol.csv.gz"  # header HIV_active,smiles,mol_id; one molecule per row, in OGB's graph order
SPLITS = ("train", "valid", "test")  # OGB's names; "val" is accepted for "valid"
MOL_COLUMNS = ["HIV_active", "smiles", "mol_id"]
N_GRAPHS = 41127  # the official counts: 41,127 molecules, 1,443 of them active (label 1)
N_POSITIVE = 1443
OFFICIAL_SPLIT_SIZES = {"train": 32901, "valid": 4113, "test": 4113}
# The labels of the test molecules live in a file of their own, which the harness keeps out of your workspace
# (paper rule 9): labels.npy holds HIDDEN (-1) for them, labels_test.npy their labels in split_test.npy's order.
LABELS_FILE = "labels.npy"
TEST_LABELS_FILE = "labels_test.npy"
HIDDEN = -1
# sha256 of OGB's files (Git-LFS pointers of an extracted copy; see shared/data/SOURCES.md). The harness checks
# loose files itself; members of hiv.zip are checked here. A mismatch is reported in meta.json, not fatal.
KNOWN_SHA256 = {
    "mol.csv.gz": "306c4ad8d54fc6cd40c71da4d0561fdcc73e1188662e6992bae0dda8f65bf6d0",
    "train.csv.gz": "9f1e46e77897b3de3d19452cbd47c312e2844a0ec664c1c9dc897c10d12e42f0",
    "valid.csv.gz": "eaf4d6b4630f9e689d2b203669674d0dc309673319e8ac32daa9e9ca90e2e1fa",
    "test.csv.gz": "27485729d83edd6f47eb3b8daff69fdb32c9df6b36b17204ef87f8dc1a30eab1",
}


# ---------------------------------------------------------------------------
# 2. Preparation: SMILES -> graphs (OGB's smiles2graph) + split -> data/*.npy + data/meta.json
# The features are computed (molecules.py, RDKit) from the SMILES of mol.csv.gz, whichever source is present, so
# that there is one code path. When hiv.zip also holds OGB's pre-featurised raw/ files, they are compared with ours.
# ---------------------------------------------------------------------------


def read_sources(raw_dir: str) -> dict:
    """The raw bytes: {"source", "mol", "splits" (or None), "raw" (OGB's raw/ files, or {}), "checksums"}.

    hiv.zip wins when present (members under hiv/ or at the top); else mol.csv.gz and, optionally, all three of
    train/valid/test.csv.gz (OGB's split/scaffold files) in raw_dir.
    """
    zpath, files = os.path.join(raw_dir, ZIP_FILE), [f"{s}.csv.gz" for s in SPLITS]
    if os.path.isfile(zpath):
        with zipfile.ZipFile(zpath) as zf:
            names = set(zf.namelist())
            prefix = "hiv/" if f"hiv/mapping/{MOL_FILE}" in names else ""
            if f"{prefix}mapping/{MOL_FILE}" not in names:
                raise ValueError(f"{zpath}: no hiv/mapping/{MOL_FILE}; is this OGB's ogbg-molhiv archive?")
            members = {f: f"{prefix}split/scaffold/{f}" for f in files}
            found = {f: zf.read(m) for f, m in members.items() if m in names}
            raw = {n[len(prefix) + 4 :]: zf.read(n) for n in names if n.startswith(prefix + "raw/") and n[-3:] == ".gz"}
            mol = zf.read(f"{prefix}mapping/{MOL_FILE}")
        source = ZIP_FILE
    else:
        path = os.path.join(raw_dir, MOL_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{raw_dir} holds neither {ZIP_FILE} nor {MOL_FILE}: download "
                f"https://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/{ZIP_FILE} into it "
                "(or let the harness fetch the data)"
            )
        with open(path, "rb") as f:
            mol = f.read()
        found, raw, source = {}, {}, MOL_FILE
        for f in files:
            if os.path.isfile(os.path.join(raw_dir, f)):
                with open(os.path.join(raw_dir, f), "rb") as fh:
                    found[f] = fh.read()
    if found and len(found) != len(files):
        raise ValueError(f"{raw_dir}: the split files come as a set; found {sorted(found)}, expected all of {files}")
    blobs = {MOL_FILE: mol, **found}
    checksums = {f: hashlib.sha256(b).hexdigest() == KNOWN_SHA256[f] for f, b in blobs.items()}
    return {"source": source, "mol": mol, "splits": found or None, "raw": raw, "checksums": checksums}


def read_molecules(blob: bytes) -> tuple[list[str], np.ndarray]:
    """mol.csv.gz -> (SMILES list, labels uint8 [G])."""
    try:
        rows = list(csv.reader(io.StringIO(gzip.decompress(blob).decode("utf-8"))))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"{MOL_FILE}: not a gzipped UTF-8 CSV ({e})") from e
    if not rows or rows[0] != MOL_COLUMNS:
        raise ValueError(f"{MOL_FILE}: expected columns {MOL_COLUMNS}, found {rows[0] if rows else 'an empty file'}")
    rows = [r for r in rows[1:] if r]
    if not rows:
        raise ValueError(f"{MOL_FILE}: holds a header but no molecules")
    bad = [n for n, r in enumerate(rows, 2) if len(r) != 3 or r[0] not in ("0", "1") or not r[1]]
    if bad:
        raise ValueError(f"{MOL_FILE}: line {bad[0]} is not 'label (0 or 1),smiles,mol_id': {rows[bad[0] - 2]}")
    return [r[1] for r in rows], np.array([int(r[0]) for r in rows], dtype=np.uint8)


def read_official_split(blobs: dict, n: int) -> dict[str, np.ndarray]:
    split = {s: int_table(blobs[f"{s}.csv.gz"], f"{s}.csv.gz", 1) for s in SPLITS}
    every = np.concatenate(list(split.values()))
    if len(every) and (every.min() < 0 or every.max() >= n):
        raise ValueError(f"the split files name molecules outside 0..{n - 1}: are they from another dataset?")
    if len(np.unique(every)) != len(every):
        raise ValueError("the split files overlap or repeat molecules")
    return split


def prepare(raw_dir: str, data_dir: str) -> None:
    """Featurise every molecule, split, and save the arrays and meta.json; describe any shortfall in partial_data."""
    start = time.time()
    src = read_sources(raw_dir)
    smiles, labels = read_molecules(src["mol"])
    official = src["splits"] is not None
    try:
        g = featurize(smiles, scaffolds=not official)
    except ValueError as e:  # a SMILES that RDKit cannot parse at all
        raise ValueError(f"{MOL_FILE}: {e}") from e
    split = read_official_split(src["splits"], len(smiles)) if official else scaffold_split(g["scaffolds"])
    raw_check = compare_with_ogb_raw(g, labels, src["raw"])

    notes = []  # one line per way these data differ from OGB's official ogbg-molhiv
    if len(smiles) != N_GRAPHS or int(labels.sum()) != N_POSITIVE:
        notes.append(f"molecules: {len(smiles):,} ({int(labels.sum()):,} active), not {N_GRAPHS:,} ({N_POSITIVE:,})")
    for f, ok in src["checksums"].items():
        if not ok:
            where = f" in {ZIP_FILE}" if src["source"] == ZIP_FILE else ""
            notes.append(f"{f}{where} differs from OGB's file (sha256 {KNOWN_SHA256[f][:12]}...)")
    if not official:
        sizes = "/".join(f"{len(split[s]):,}" for s in SPLITS)
        notes.append(
            "split: the official split files (split/scaffold/*.csv.gz) were absent; recomputed with OGB's "
            f"scaffold-split procedure (RDKit Murcko scaffolds, 80/10/10): train/valid/test {sizes}, the "
            "membership may differ from the official split"
        )
    if raw_check and raw_check["differ"]:
        notes.append(f"features: {raw_check['differ']:,} graphs differ from OGB's pre-featurised raw/ files")

    os.makedirs(data_dir, exist_ok=True)
    for name in ("node_feat", "edge_index", "edge_feat", "num_nodes", "num_edges"):
        np.save(os.path.join(data_dir, f"{name}.npy"), g[name])
    shown = labels.astype(np.int8)
    shown[split["test"]] = HIDDEN
    np.save(os.path.join(data_dir, LABELS_FILE), shown)  # int8 [G]: 0 / 1, HIDDEN for the test molecules
    np.save(os.path.join(data_dir, TEST_LABELS_FILE), labels[split["test"]])  # uint8, in split_test's order
    for s in SPLITS:
        np.save(os.path.join(data_dir, f"split_{s}.npy"), split[s])
    from rdkit import __version__ as rdkit_version

    meta = {
        "graphs": len(smiles),
        "nodes": int(g["num_nodes"].sum()),
        "edges": int(g["num_edges"].sum()),  # directed: every bond twice
        "counts": {s: len(split[s]) for s in SPLITS},
        "positives": {s: int(labels[split[s]].sum()) for s in ("train", "valid")},  # test: held out with its labels
        "held_out": [TEST_LABELS_FILE],  # not in a workspace: only the harness's scorer reads the test labels
        "split": "official" if official else "scaffold-fallback",
        "atom_features": ATOM_FEATURES,
        "atom_feature_dims": ATOM_FEATURE_DIMS,
        "bond_features": BOND_FEATURES,
        "bond_feature_dims": BOND_FEATURE_DIMS,
        "source": src["source"],
        "sha256_verified": src["checksums"],
        "rdkit": rdkit_version,
        "unsanitized": g["unsanitized"],  # molecules that fail RDKit's valence checks (kept)
        "ogb_raw_check": raw_check,  # None when the archive's raw/ files were not available
        "partial_data": notes,
    }
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(
        f"prepared {len(smiles):,} graphs ({meta['split']} split: "
        + ", ".join(f"{s} {n:,}" for s, n in meta["counts"].items())
        + f") from {src['source']} in {time.time() - start:.1f} s into {data_dir}"
        + "".join(f"\n  partial data: {n}" for n in notes)
    )


# ---------------------------------------------------------------------------
# 3. Loaders (import these in your training script)
# ---------------------------------------------------------------------------


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """Counts, feature names and dims, split kind, partial_data notes, as written by prepare()."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


@dataclass
class GraphBatch:
    """A mini-batch of graphs as one big disconnected graph: what model(batch) receives (no labels)."""

    x: torch.Tensor  # [N, 9] int64 atom features: indices into the lists of ATOM_FEATURES
    edge_index: torch.Tensor  # [2, E] int64: edge k goes from node edge_index[0, k] to node edge_index[1, k]
    edge_attr: torch.Tensor  # [E, 3] int64 bond features: indices into the lists of BOND_FEATURES
    batch: torch.Tensor  # [N] int64: the graph (0 .. num_graphs - 1) each node belongs to
    num_graphs: int

    def to(self, device, non_blocking: bool = False) -> GraphBatch:
        t = (self.x, self.edge_index, self.edge_attr, self.batch)
        return GraphBatch(*(v.to(device, non_blocking=non_blocking) for v in t), self.num_graphs)


def collate_graphs(graphs: list[dict]) -> tuple[GraphBatch, torch.Tensor]:
    """Batch single graphs (dicts as GraphSet[i] gives them): concatenate the node and edge features, shift each
    graph's edge indices by the number of nodes before it, and record each node's graph. Returns (batch, y)."""
    offsets = np.cumsum([0] + [g["num_nodes"] for g in graphs])
    batch = GraphBatch(
        x=torch.cat([g["x"] for g in graphs]),
        edge_index=torch.cat([g["edge_index"] + int(o) for g, o in zip(graphs, offsets, strict=False)], dim=1),
        edge_attr=torch.cat([g["edge_attr"] for g in graphs]),
        batch=torch.cat([torch.full((g["num_nodes"],), i, dtype=torch.long) for i, g in enumerate(graphs)]),
        num_graphs=len(graphs),
    )
    return batch, torch.tensor([float(g["y"]) for g in graphs], dtype=torch.float32)


class GraphSet:
    """Graphs stored back to back: x [N, 9], edge_index [2, E] (node indices LOCAL to each graph), edge_attr [E, 3]
    (all int64), y [G] float32, num_nodes / num_edges [G] int64. Move it to the GPU once with .to("cuda");
    batch(idx) then gathers a mini-batch there with a few vectorised ops (no Python loop over graphs)."""

    def __init__(self, x, edge_index, edge_attr, y, num_nodes, num_edges, counts_cpu=None):
        self.x, self.edge_index, self.edge_attr, self.y = x, edge_index, edge_attr, y
        self.num_nodes, self.num_edges = num_nodes, num_edges
        zero = num_nodes.new_zeros(1)
        self.node_ptr = torch.cat([zero, num_nodes.cumsum(0)])  # graph i owns nodes node_ptr[i] .. node_ptr[i+1]-1
        self.edge_ptr = torch.cat([zero, num_edges.cumsum(0)])
        # CPU copies of the counts: batch() sizes its outputs from them, so it never waits for the GPU.
        self._counts = counts_cpu if counts_cpu is not None else (num_nodes.cpu(), num_edges.cpu())

    def __len__(self) -> int:
        return len(self.y)

    @property
    def device(self) -> torch.device:
        return self.x.device

    def to(self, device) -> GraphSet:
        t = (self.x, self.edge_index, self.edge_attr, self.y, self.num_nodes, self.num_edges)
        return GraphSet(*(v.to(device) for v in t), counts_cpu=self._counts)

    def __getitem__(self, i: int) -> dict:
        """One graph: {"x", "edge_index" (local), "edge_attr", "y", "num_nodes"}."""
        n0, n1, e0, e1 = self.node_ptr[i], self.node_ptr[i + 1], self.edge_ptr[i], self.edge_ptr[i + 1]
        return {"x": self.x[n0:n1], "edge_index": self.edge_index[:, e0:e1], "edge_attr": self.edge_attr[e0:e1],
                "y": self.y[i], "num_nodes": int(n1 - n0)}  # fmt: skip

    def _gather(self, idx):
        """Node and edge ids of the graphs idx (in that order), each node's and edge's position in idx, and the
        first new node index of each graph. idx on the CPU costs no host-device sync (on the GPU: one)."""
        idx = torch.as_tensor(idx, dtype=torch.long)
        idx_cpu = idx.cpu()
        total_n, total_e = int(self._counts[0][idx_cpu].sum()), int(self._counts[1][idx_cpu].sum())
        idx = idx.to(self.device, non_blocking=True)
        nn_, ne_ = self.num_nodes[idx], self.num_edges[idx]
        pos = torch.arange(len(idx), device=self.device)
        node_graph = torch.repeat_interleave(pos, nn_, output_size=total_n)
        edge_graph = torch.repeat_interleave(pos, ne_, output_size=total_e)
        node_start, edge_start = nn_.cumsum(0) - nn_, ne_.cumsum(0) - ne_  # where each graph starts in the output
        node_ids = self.node_ptr[idx][node_graph] + torch.arange(total_n, device=self.device) - node_start[node_graph]
        edge_ids = self.edge_ptr[idx][edge_graph] + torch.arange(total_e, device=self.device) - edge_start[edge_graph]
        return idx, node_ids, edge_ids, node_graph, edge_graph, node_start

    def batch(self, idx) -> tuple[GraphBatch, torch.Tensor]:
        """The graphs idx as one GraphBatch (edge indices shifted, as collate_graphs does) and their labels y."""
        idx, node_ids, edge_ids, node_graph, edge_graph, node_start = self._gather(idx)
        edge_index = self.edge_index[:, edge_ids] + node_start[edge_graph]
        batch = GraphBatch(self.x[node_ids], edge_index, self.edge_attr[edge_ids], node_graph, len(idx))
        return batch, self.y[idx]

    def subset(self, idx) -> GraphSet:
        """A new GraphSet holding the graphs idx, in that order."""
        idx, node_ids, edge_ids, _, _, _ = self._gather(idx)
        counts = tuple(c[idx.cpu()] for c in self._counts)
        t = (self.x[node_ids], self.edge_index[:, edge_ids], self.edge_attr[edge_ids], self.y[idx])
        return GraphSet(*t, self.num_nodes[idx], self.num_edges[idx], counts_cpu=counts)


def _split_name(split: str) -> str:
    split = "valid" if split == "val" else split
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    return split


def _check_prepared(data_dir: str) -> None:
    if not os.path.isfile(os.path.join(data_dir, LABELS_FILE)):
        raise FileNotFoundError(
            f"no prepared data in {data_dir!r}: run `python prepare.py --prepare` first or pass --data-dir"
        )


def has_test_labels(data_dir: str = DATA_DIR) -> bool:
    """Whether the test labels are in data_dir: in the harness's copy, never in your workspace (rule 9)."""
    return os.path.isfile(os.path.join(data_dir, TEST_LABELS_FILE))


def load_labels(data_dir: str = DATA_DIR) -> np.ndarray:
    """The label of every graph in OGB's order, int8 [G]: 1 active, 0 inactive, HIDDEN (-1) for the test molecules
    where their labels are held out (your workspace); with labels_test.npy present, the test labels filled in."""
    _check_prepared(data_dir)
    labels = np.load(os.path.join(data_dir, LABELS_FILE)).astype(np.int8)
    if has_test_labels(data_dir):
        labels[split_indices("test", data_dir).numpy()] = np.load(os.path.join(data_dir, TEST_LABELS_FILE))
    return labels


def split_labels(split: str, data_dir: str = DATA_DIR) -> np.ndarray:
    """The labels of one split's graphs in the split file's order, uint8 [n]. The test labels are held out of your
    workspace: asking for them there raises FileNotFoundError (train and select on "train" and "valid")."""
    split = _split_name(split)
    _check_prepared(data_dir)
    if split == "test":
        if not has_test_labels(data_dir):
            raise FileNotFoundError(
                f"{os.path.join(data_dir, TEST_LABELS_FILE)} is not here: the test labels are held out (paper rule "
                "9), only the harness's scorer reads them; use the 'valid' split for your own scores"
            )
        return np.load(os.path.join(data_dir, TEST_LABELS_FILE)).astype(np.uint8)
    return np.load(os.path.join(data_dir, LABELS_FILE))[split_indices(split, data_dir).numpy()].astype(np.uint8)


def load_all(data_dir: str = DATA_DIR) -> GraphSet:
    """All graphs, in OGB's order (row i of mol.csv.gz), as a CPU GraphSet; y = load_labels(): -1.0 for the test
    molecules when their labels are held out (in your workspace)."""

    def arr(name: str) -> torch.Tensor:
        return torch.from_numpy(np.load(os.path.join(data_dir, f"{name}.npy")))

    y = torch.from_numpy(load_labels(data_dir)).float()
    return GraphSet(arr("node_feat").long(), arr("edge_index").long(), arr("edge_feat").long(), y,
                    arr("num_nodes"), arr("num_edges"))  # fmt: skip


def split_indices(split: str, data_dir: str = DATA_DIR) -> torch.Tensor:
    """Graph indices (into load_all()) of one split, int64."""
    return torch.from_numpy(np.load(os.path.join(data_dir, f"split_{_split_name(split)}.npy")))


def load_split(split: str, data_dir: str = DATA_DIR) -> GraphSet:
    """The graphs of one split ("train", "valid" (or "val"), "test") as a CPU GraphSet, in the split file's order.
    "test" needs the held-out test labels: in your workspace it raises FileNotFoundError."""
    if _split_name(split) == "test":
        split_labels(split, data_dir)  # a clear error where the test labels are held out
    idx = split_indices(split, data_dir)
    return load_all(data_dir).subset(idx)


# ---------------------------------------------------------------------------
# 4. Evaluation: the official metric
# The harness scores a checkpoint in two processes: a sandboxed predictor runs
# the model through forward() on the inputs of eval_batches(), and a scorer
# that never runs your code compares its outputs with the labels in score().
# evaluate() does all three in one process: call it for your validation score.
# ---------------------------------------------------------------------------

# The molecules are independent samples: a graph's score depends on its own atoms and bonds only, so any batch size
# is safe (no input reveals another molecule's label) and gives the same scores up to float rounding. 256 graphs
# (~6,500 atoms, at most 1.5 MB padded) make 17 batches of the 4,113 test molecules, each enough work for a GPU, and
# are the batches of the evaluation before the harness fed them: the official AUROC is the same number as then.
FEED_BATCH_SIZE = 256


def pad_graphs(graph_ids, arrays: dict) -> dict:
    """The graphs graph_ids, padded into one batch of numpy arrays (what the harness sends the model):
    x [b, max_nodes, 9] uint8, edge_index [b, 2, max_edges] int32 (node indices local to each graph),
    edge_attr [b, max_edges, 3] uint8, n_nodes / n_edges [b] int32; zeros beyond each graph's counts.
    `arrays`: the prepared node_feat, edge_index, edge_feat, num_nodes, num_edges (numpy)."""
    graph_ids = np.asarray(graph_ids, dtype=np.int64)
    nodes, edges = arrays["num_nodes"][graph_ids], arrays["num_edges"][graph_ids]
    node_ptr = np.concatenate([[0], np.cumsum(arrays["num_nodes"])])
    edge_ptr = np.concatenate([[0], np.cumsum(arrays["num_edges"])])
    b, m, e = len(graph_ids), int(nodes.max(initial=0)), int(edges.max(initial=0))
    x = np.zeros((b, m, len(ATOM_FEATURE_DIMS)), dtype=np.uint8)
    edge_index = np.zeros((b, 2, e), dtype=np.int32)
    edge_attr = np.zeros((b, e, len(BOND_FEATURE_DIMS)), dtype=np.uint8)
    for k, g in enumerate(graph_ids):
        n0, e0, n, ne = node_ptr[g], edge_ptr[g], nodes[k], edges[k]
        x[k, :n] = arrays["node_feat"][n0 : n0 + n]
        edge_index[k, :, :ne] = arrays["edge_index"][:, e0 : e0 + ne]
        edge_attr[k, :ne] = arrays["edge_feat"][e0 : e0 + ne]
    return {"x": x, "edge_index": edge_index, "edge_attr": edge_attr, "n_nodes": nodes.astype(np.int32),
            "n_edges": edges.astype(np.int32)}  # fmt: skip


def unpad_graphs(inputs: dict) -> GraphBatch:
    """A padded batch (tensors, as pad_graphs makes them) -> the GraphBatch collate_graphs builds from the same
    graphs: nodes and edges graph after graph, edge indices shifted, all int64, on the inputs' device."""
    x, edge_index, edge_attr = inputs["x"], inputs["edge_index"], inputs["edge_attr"]
    nodes, edges = inputs["n_nodes"].long(), inputs["n_edges"].long()
    b, device = x.shape[0], x.device
    node_mask = torch.arange(x.shape[1], device=device) < nodes[:, None]  # [b, max_nodes]: the real atoms
    edge_mask = torch.arange(edge_attr.shape[1], device=device) < edges[:, None]  # [b, max_edges]: the real bonds
    start = nodes.cumsum(0) - nodes  # each graph's first node in the batch
    shifted = (edge_index.long() + start[:, None, None]).transpose(0, 1)  # [2, b, max_edges]
    return GraphBatch(
        x=x[node_mask].long(),
        edge_index=shifted[:, edge_mask],
        edge_attr=edge_attr[edge_mask].long(),
        batch=torch.repeat_interleave(torch.arange(b, device=device), nodes),
        num_graphs=b,
    )


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = 256) -> list:
    """[(inputs, labels)] of `split` in the split file's order: inputs = pad_graphs(...) of batch_size graphs
    (numpy), labels uint8 [b]."""
    split = _split_name(split)
    _check_prepared(data_dir)
    labels = split_labels(split, data_dir)
    ids = split_indices(split, data_dir).numpy()
    names = ("node_feat", "edge_index", "edge_feat", "num_nodes", "num_edges")
    arrays = {name: np.load(os.path.join(data_dir, f"{name}.npy")) for name in names}
    return [(pad_graphs(ids[i : i + batch_size], arrays), labels[i : i + batch_size])
            for i in range(0, len(ids), batch_size)]  # fmt: skip


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: model(batch) with batch = unpad_graphs(inputs), a GraphBatch of b molecules, returns one
    score per molecule, [b] or [b, 1] (higher = more likely active); returned as float32 [b].

    Float32 on every device (no autocast; the harness also turns TF32 off): the scores depend neither on bf16
    rounding nor on bf16 support of the model's ops.
    """
    batch = unpad_graphs(inputs)
    with torch.autocast(device_type=batch.x.device.type, enabled=False):
        out = model(batch)
    b = batch.num_graphs
    if not isinstance(out, torch.Tensor) or tuple(out.shape) not in ((b,), (b, 1)):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"model(batch) returned {shape} for a batch of {b} graphs; expected one score per graph, "
            f"a tensor of shape ({b},) or ({b}, 1)"
        )
    return out.float().reshape(-1)


def score(outputs: list, targets: list) -> dict:
    """sklearn's roc_auc_score(labels, scores) over every graph (as OGB's Evaluator): {"auroc": float, "n": graphs}."""
    from sklearn.metrics import roc_auc_score

    for scores, y in zip(outputs, targets, strict=True):
        if scores.shape != y.shape:
            raise ValueError(
                f"the model returned scores of shape {tuple(scores.shape)} for a batch of {len(y)} graphs; "
                f"expected one score per graph, a tensor of shape ({len(y)},) or ({len(y)}, 1)"
            )
    scores, y = np.concatenate(outputs), np.concatenate(targets)
    if not np.isfinite(scores).all():
        raise ValueError(f"the model produced non-finite scores on {int((~np.isfinite(scores)).sum())} graphs")
    if len(np.unique(y)) < 2:
        raise ValueError("the split holds only one class: the ROC-AUC is undefined")
    return {METRIC: float(roc_auc_score(y, scores)), "n": len(y)}


@torch.no_grad()
def evaluate(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 256
) -> dict:
    """score(forward(model, inputs)) over `split` in this process: {"auroc": float, "n": number of graphs}.

    Call it with split="valid" for the validation score your script reports: that is exactly the official metric
    on the validation split. The value is sklearn's roc_auc_score(labels, scores), as OGB's Evaluator computes it;
    any score that ranks the molecules (logit or probability of being active) gives the same AUROC. Runs under
    model.eval() in plain float32 (no autocast, no TF32), in a fixed order and fixed batches.
    """
    was_training = model.training
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    outputs, targets = [], []
    try:
        for inputs, y in eval_batches(split, data_dir, batch_size):
            out = forward(model, {k: torch.from_numpy(v).to(device) for k, v in inputs.items()})
            outputs.append(out.cpu().numpy())
            targets.append(y)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        model.train(was_training)
    return score(outputs, targets)


# ---------------------------------------------------------------------------
# 5. Checkpoint + logging helpers (the output contract, paper rule 7)
# They are the same for every task, so they live in task_helpers.py beside
# this file (locked too) and are imported at the top: log_metrics,
# load_checkpoint, rebuild_model. The two below give the shared ones this
# task's metric and evaluation.
# ---------------------------------------------------------------------------


def save_checkpoint(
    model: nn.Module, config: dict, val_score: float, *, step: int | None = None, path: str | None = None
) -> str:
    """Save a scored checkpoint into checkpoints/ and return its path (task_helpers.save_checkpoint).

    `config`: plain Python values, passed back to your script's build_model(config).
    `val_score`: your own measurement of METRIC on the validation split.
    """
    return helpers_save_checkpoint(model, config, val_score, METRIC, step=step, path=path)


def self_check(checkpoint: str, script: str | None = None, split: str = EVAL_SPLIT, **eval_options) -> dict:
    """Your own check of one checkpoint: rebuilt as the harness rebuilds it, scored by evaluate() here."""
    return helpers_self_check(
        checkpoint,
        script,
        split,
        evaluate=evaluate,
        task_id=TASK_ID,
        metric=METRIC,
        direction=DIRECTION,
        **eval_options,
    )


# ---------------------------------------------------------------------------
# 6. Command line
# ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=f"{TASK_ID}: data preparation and your own check of a checkpoint")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true", help="build the prepared data from the raw files")
    mode.add_argument("--eval", metavar="CHECKPOINT", help="score a checkpoint on a split (your own check)")
    parser.add_argument("--raw-dir", help=f"folder holding {ZIP_FILE}, or {MOL_FILE} [+ split files] (with --prepare)")
    parser.add_argument("--data-dir", default=DATA_DIR, help="prepared data folder (default: data)")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--split",
        choices=["train", "valid", "val", "test"],
        help="default: test if its labels are in --data-dir, else valid (in your workspace)",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    if args.prepare:
        if not args.raw_dir:
            parser.error("--prepare needs --raw-dir")
        prepare(args.raw_dir, args.data_dir)
        return
    split = _split_name(args.split) if args.split else (EVAL_SPLIT if has_test_labels(args.data_dir) else "valid")
    try:
        result = self_check(
            args.eval, args.script, split, data_dir=args.data_dir, device=args.device, batch_size=args.batch_size
        )
    except Exception as e:  # any failure: one JSON line saying what to fix, exit 1
        print(json.dumps({"task": TASK_ID, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
