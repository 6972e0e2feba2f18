"""Task T4 (ogbg-molhiv): featurisation as OGB's smiles2graph, the official and the fallback scaffold split,
hiv.zip, the GraphSet / collate_graphs batching, the padded feed (pad_graphs / unpad_graphs), the AUROC metric
through the harness's scorer, the held-out test labels, the GIN baseline and prepare.py --eval.

Runs on GENERATED raw files with the exact schema of OGB's (mol.csv.gz: header HIV_active,smiles,mol_id; split
files: a gzipped column of graph indices; hiv.zip laid out as hiv/mapping, hiv/split/scaffold, hiv/raw): 60
ordinary molecules with made-up labels, NOT the real data, and no score on them means anything (made in
tests/tasks/smalldata.py). The test marked `mirror` featurises the real mol.csv.gz (all 41,127 molecules) from
BENCH_DATA_MIRROR. What every task promises (the checkpoint payload, the --eval JSON, strict loading, errors as JSON,
val_score = the evaluator's score) is checked in test_conformance.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from sklearn.metrics import roc_auc_score

from bench.tasks import load_task
from tests.tasks.smalldata import LABELS, SMILES, SPLIT, SPLITS, gz, mol_csv, split_csv
from tests.tasks.smalldata import write_molhiv_raw as write_raw
from tests.tasks.taskfolder import (
    expected_probes,
    last_json,
    run_prepare,
    run_scorer,
    stage_eval,
    task_modules,
    with_feed,
)

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t4_graph_learning"


def molecules_module():
    """The locked molecules.py of the task folder (OGB's featurisation), as `molecules`."""
    return sys.modules["molecules"]


def arrays(data: Path) -> dict:
    return {p.stem: np.load(p) for p in sorted(data.glob("*.npy"))}


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t4", "auroc", "max", "test")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (60, 0.706, 0.848)
    assert task.locked_files == ("prepare.py", "molecules.py", "task_helpers.py")  # read-only in the workspace, staged
    full, mol, *splits = task.data
    assert (full.file, full.mirror, full.sha256, full.size, full.required) == (
        "hiv.zip",
        "ogbg_molhiv/hiv.zip",
        "",
        None,
        True,
    )
    assert full.url == "https://snap.stanford.edu/ogb/data/graphproppred/csv_mol_download/hiv.zip"
    assert (mol.file, mol.url, mol.mirror, mol.substitute_for, mol.required) == (
        "mol.csv.gz",
        "",
        "ogbg_molhiv/mapping/mol.csv.gz",
        "hiv.zip",
        True,
    )
    assert (mol.sha256, mol.md5, mol.size) == (
        "306c4ad8d54fc6cd40c71da4d0561fdcc73e1188662e6992bae0dda8f65bf6d0",
        "40d5a50e59b469e4275c715d99462d6a",
        404655,
    )
    assert [(s.file, s.mirror, s.size, s.required, s.substitute_for) for s in splits] == [
        ("train.csv.gz", "ogbg_molhiv/split/scaffold/train.csv.gz", 73605, False, "hiv.zip"),
        ("valid.csv.gz", "ogbg_molhiv/split/scaffold/valid.csv.gz", 9254, False, "hiv.zip"),
        ("test.csv.gz", "ogbg_molhiv/split/scaffold/test.csv.gz", 9503, False, "hiv.zip"),
    ]
    with task_modules(TASK_DIR) as (prepare, _):
        assert {s.file: s.sha256 for s in (mol, *splits)} == prepare.KNOWN_SHA256


def test_featurisation_matches_ogb_smiles2graph():
    """Hand-checked graphs, and the examples in the comments of ogb/utils/features.py."""
    with task_modules(TASK_DIR) as (prepare, _):
        mols = molecules_module()
        assert prepare.ATOM_FEATURE_DIMS == mols.ATOM_FEATURE_DIMS == [119, 5, 12, 12, 10, 6, 6, 2, 2]
        assert prepare.BOND_FEATURE_DIMS == mols.BOND_FEATURE_DIMS == [5, 6, 2]

        def graph(smiles):
            mol, sanitized = mols.parse_smiles(smiles)
            return (*mols.mol_to_graph(mol), sanitized)

        # ethanol: C (Z=6 -> 5), degree counts the hydrogens, formal charge 0 -> index 5, SP3 -> 2
        x, ei, ea, ok = graph("CCO")
        assert ok and x.dtype == np.uint8 and ei.dtype == np.int64
        assert x.tolist() == [[5, 0, 4, 5, 3, 0, 2, 0, 0], [5, 0, 4, 5, 2, 0, 2, 0, 0], [7, 0, 2, 5, 1, 0, 2, 0, 0]]
        assert ei.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]  # every bond in both directions, (i, j) then (j, i)
        assert ea.tolist() == [[0, 0, 0]] * 4  # single, no stereo, not conjugated
        # OGB's own examples: the chiral carbon and the E double bond of Cl[C@H](/C=C/C)Br
        x, ei, ea, _ = graph("Cl[C@H](/C=C/C)Br")
        assert x[1].tolist() == [5, 2, 4, 5, 1, 0, 2, 0, 0]
        assert ea[2 * 2].tolist() == [1, 2, 0] and ea[2 * 2 + 1].tolist() == [1, 2, 0]  # bond 2, both directions
        # phenol: aromatic atoms and bonds (type index 3, conjugated), ring membership
        x, ei, ea, _ = graph("c1ccccc1O")
        assert x[0].tolist() == [5, 0, 3, 5, 1, 0, 1, 1, 1] and x[6].tolist() == [7, 0, 2, 5, 1, 0, 1, 0, 0]
        assert ea[0].tolist() == [3, 0, 1] and ei.shape == (2, 14)
        # a salt: two atoms, no bond; Na+ charge +1 -> index 6, hybridisation S -> misc (5)
        x, ei, ea, _ = graph("[Na+].[Cl-]")
        assert x.tolist() == [[10, 0, 0, 6, 0, 0, 5, 0, 0], [16, 0, 0, 4, 0, 0, 2, 0, 0]]
        assert ei.shape == (2, 0) and ea.shape == (0, 3)
        # a molecule of the real file that fails RDKit's valence checks: kept, still aromatic and in rings
        x, ei, ea, ok = graph(SMILES[59])
        assert not ok and x.shape == (19, 9) and ei.shape == (2, 42)
        assert x[5].tolist() == [4, 0, 4, 3, 0, 0, 2, 0, 1]  # boron (Z=5), 4 bonds, charge -2, SP3, in a ring
        assert x[1].tolist() == [5, 0, 3, 5, 0, 0, 1, 1, 1]  # an aromatic carbon: aromaticity was perceived
        with pytest.raises(ValueError, match="cannot parse"):
            mols.parse_smiles("C1CC(")


def test_prepare_with_official_split_files(fake):
    data = fake["ws"] / "data"
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    assert meta["split"] == "official" and meta["source"] == "mol.csv.gz" and meta["graphs"] == 60
    assert meta["counts"] == {"train": 48, "valid": 6, "test": 6}
    assert meta["positives"] == {"train": 12, "valid": 2}  # the test count would say something about its labels
    assert meta["held_out"] == ["labels_test.npy"] == list(load_task(TASK_DIR).held_out)
    assert meta["unsanitized"] == [59] and meta["ogb_raw_check"] is None
    assert meta["sha256_verified"] == {"mol.csv.gz": False, "train.csv.gz": False, "valid.csv.gz": False,
                                       "test.csv.gz": False}  # fmt: skip
    notes = meta["partial_data"]  # generated files: fewer molecules, and not OGB's bytes; but the split is given
    assert notes[0] == "molecules: 60 (15 active), not 41,127 (1,443)" and len(notes) == 5
    assert all("differs from OGB's file" in n for n in notes[1:]) and "partial data: molecules" in fake["stdout"]
    a = arrays(data)
    assert a["node_feat"].dtype == a["edge_feat"].dtype == a["labels_test"].dtype == np.uint8
    assert a["labels"].dtype == np.int8  # -1 for the test molecules: their labels are held out in labels_test.npy
    assert a["node_feat"].shape == (meta["nodes"], 9) and a["edge_feat"].shape == (meta["edges"], 3)
    assert a["edge_index"].shape == (2, meta["edges"]) and a["num_edges"].sum() == meta["edges"]
    assert {s: a[f"split_{s}"].tolist() for s in SPLITS} == SPLIT
    assert a["labels"].tolist() == [-1 if i in SPLIT["test"] else y for i, y in enumerate(LABELS)]
    assert a["labels_test"].tolist() == [LABELS[i] for i in SPLIT["test"]]  # in split_test.npy's order
    with task_modules(fake["ws"]) as (prepare, _):
        mols = molecules_module()
        for i in (0, 31, 55, 59):
            mol, _ = mols.parse_smiles(SMILES[i])
            x, ei, ea = mols.mol_to_graph(mol)
            g = prepare.load_all()[i]
            assert torch.equal(g["x"], torch.from_numpy(x).long()) and torch.equal(
                g["edge_index"], torch.from_numpy(ei)
            )
            assert torch.equal(g["edge_attr"], torch.from_numpy(ea).long()) and g["y"] == LABELS[i]
        test = prepare.load_split("test")
        assert len(test) == 6 and test.x.dtype == test.edge_attr.dtype == torch.int64 and test.y.dtype == torch.float32
        assert test.y.tolist() == [LABELS[i] for i in SPLIT["test"]]
        assert torch.equal(test[0]["x"], prepare.load_all()[54]["x"])  # graphs in the split file's order
        assert len(prepare.load_split("val")) == 6  # "val" is an alias of OGB's "valid"


def test_scaffold_split_orders_groups_as_ogb():
    """Groups by (size, first index) descending; a group never straddles two splits; 80 / 10 / 10 cut-offs."""
    with task_modules(TASK_DIR):
        split = molecules_module().scaffold_split(["a", "b", "a", "c", "b", "d", "a", "e", "f", "g"])
    assert {s: v.tolist() for s, v in split.items()} == {
        "train": [0, 2, 6, 1, 4, 9, 8, 7],  # a (3), b (2), then the singletons from the LAST one: g, f, e
        "valid": [5],  # d: 8 + 1 <= 9
        "test": [3],  # c: would make 10 > 9
    }


def test_fallback_split_is_deterministic_and_separates_scaffolds(tmp_path):
    raw = write_raw(tmp_path / "raw", splits=False)
    with task_modules(TASK_DIR) as (prepare, _):
        prepare.prepare(str(raw), str(tmp_path / "a"))
        prepare.prepare(str(raw), str(tmp_path / "b"))
        meta = prepare.load_meta(str(tmp_path / "a"))
        mols = molecules_module()
        scaffolds = [mols.scaffold_of(mols.parse_smiles(s)[0]) for s in SMILES]
    a, b = arrays(tmp_path / "a"), arrays(tmp_path / "b")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a" / "meta.json").read_bytes() == (tmp_path / "b" / "meta.json").read_bytes()
    parts = [a[f"split_{s}"].tolist() for s in SPLITS]
    assert sorted(sum(parts, [])) == list(range(60))
    assert [len(p) for p in parts] == [48, 6, 6] and meta["counts"] == {"train": 48, "valid": 6, "test": 6}
    owners = [{scaffolds[i] for i in p} for p in parts]
    assert not (owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2])
    assert "" in owners[0]  # the acyclic molecules: the largest group, first into train
    assert meta["split"] == "scaffold-fallback"
    assert meta["partial_data"][-1].startswith("split: the official split files (split/scaffold/*.csv.gz) were absent")


def ogb_raw_files(g: dict, labels) -> dict:
    """GENERATED hiv/raw/*.csv.gz in OGB's layout (each bond once, local node indices) from prepared arrays."""

    def table(rows) -> bytes:
        return gz("".join(",".join(str(int(v)) for v in np.atleast_1d(r)) + "\n" for r in rows))

    return {
        "num-node-list.csv.gz": table(g["num_nodes"]),
        "num-edge-list.csv.gz": table(g["num_edges"] // 2),
        "node-feat.csv.gz": table(g["node_feat"]),
        "edge-feat.csv.gz": table(g["edge_feat"][::2]),
        "edge.csv.gz": table(g["edge_index"][:, ::2].T[:, ::-1]),  # stored (j, i): the check ignores orientation
        "graph-label.csv.gz": table(labels),
    }


def test_hiv_zip_is_read_and_checked_against_ogb_raw_features(fake, tmp_path):
    ref = arrays(fake["ws"] / "data")
    raw_files = ogb_raw_files(ref, LABELS)
    for prefix, tamper in (("hiv/", False), ("", True)):
        raw = tmp_path / f"raw{int(tamper)}"
        raw.mkdir()
        members = {"mapping/mol.csv.gz": mol_csv(), **{f"raw/{k}": v for k, v in raw_files.items()}}
        members.update({f"split/scaffold/{s}.csv.gz": split_csv(SPLIT[s]) for s in SPLITS})
        if tamper:  # one atom of graph 3 gets another atomic number
            feats = ref["node_feat"].copy()
            feats[ref["num_nodes"][:3].sum(), 0] += 1
            members["raw/node-feat.csv.gz"] = ogb_raw_files({**ref, "node_feat": feats}, LABELS)["node-feat.csv.gz"]
        with zipfile.ZipFile(raw / "hiv.zip", "w") as zf:
            for name, blob in members.items():
                zf.writestr(prefix + name, blob)
        (raw / "mol.csv.gz").write_bytes(b"ignored when hiv.zip is present")
        with task_modules(TASK_DIR) as (prepare, _):
            prepare.prepare(str(raw), str(tmp_path / f"data{int(tamper)}"))
            meta = prepare.load_meta(str(tmp_path / f"data{int(tamper)}"))
        got = arrays(tmp_path / f"data{int(tamper)}")
        assert got.keys() == ref.keys() and all(np.array_equal(got[k], ref[k]) for k in ref)
        assert meta["source"] == "hiv.zip" and meta["split"] == "official"
        check = meta["ogb_raw_check"]
        assert (check["graphs"], check["differ"], check["labels_differ"]) == (60, int(tamper), 0)
        assert (check["first"] == [3]) == tamper
        assert any(n.startswith("features: 1 graphs differ") for n in meta["partial_data"]) == tamper


def test_prepare_rejects_bad_raw_data(fake, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "mol.csv.gz").write_bytes(gz("label,smiles\n1,CCO\n"))
    proc = run_prepare(fake["ws"], "--prepare", "--raw-dir", str(bad), "--data-dir", str(tmp_path / "out"))
    assert proc.returncode == 1 and "expected columns ['HIV_active', 'smiles', 'mol_id']" in proc.stderr
    with task_modules(TASK_DIR) as (prepare, _):
        out = str(tmp_path / "out")
        with pytest.raises(FileNotFoundError, match="neither hiv.zip nor mol.csv.gz"):
            prepare.prepare(str(tmp_path), out)
        (bad / "mol.csv.gz").write_bytes(mol_csv(["CCO", "C1CC(", "CC"], [0, 1, 0]))
        with pytest.raises(ValueError, match=r"mol.csv.gz: molecule 1 \(line 3\).*cannot parse"):
            prepare.prepare(str(bad), out)
        (bad / "mol.csv.gz").write_bytes(mol_csv(["CCO", "CC"], [0, 2]))
        with pytest.raises(ValueError, match="line 3 is not 'label"):
            prepare.prepare(str(bad), out)
        write_raw(bad)
        (bad / "test.csv.gz").unlink()
        with pytest.raises(ValueError, match="come as a set"):
            prepare.prepare(str(bad), out)
        (bad / "test.csv.gz").write_bytes(split_csv([54, 55, 60]))
        with pytest.raises(ValueError, match="outside 0..59"):
            prepare.prepare(str(bad), out)
        (bad / "test.csv.gz").write_bytes(split_csv([53, 54]))
        with pytest.raises(ValueError, match="overlap"):
            prepare.prepare(str(bad), out)
        with zipfile.ZipFile(bad / "hiv.zip", "w") as zf:
            zf.writestr("hiv/README", "not the dataset")
        with pytest.raises(ValueError, match="no hiv/mapping/mol.csv.gz"):
            prepare.prepare(str(bad), out)


def test_graphset_batch_equals_collate_graphs(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        train = prepare.load_split("train")
        idx = [5, 0, 17, 3, 47]
        fast, y_fast = train.batch(torch.tensor(idx))
        slow, y_slow = prepare.collate_graphs([train[i] for i in idx])
    for name in ("x", "edge_index", "edge_attr", "batch"):
        assert torch.equal(getattr(fast, name), getattr(slow, name)), name
    assert fast.num_graphs == slow.num_graphs == 5 and torch.equal(y_fast, y_slow)
    assert y_fast.tolist() == [LABELS[i] for i in idx]
    sizes = [train[i]["num_nodes"] for i in idx]
    assert torch.bincount(fast.batch).tolist() == sizes and fast.x.shape == (sum(sizes), 9)
    # every edge joins two nodes of the same graph, and graph k's nodes start after those of graphs 0..k-1
    assert torch.equal(fast.batch[fast.edge_index[0]], fast.batch[fast.edge_index[1]])
    first = np.cumsum([0] + sizes[:-1])
    for k, i in enumerate(idx):
        own = fast.edge_index[:, fast.batch[fast.edge_index[0]] == k] - int(first[k])
        assert torch.equal(own, train[i]["edge_index"])


class AtomCount(nn.Module):
    """Scores a molecule by its number of atoms (ties included): a model with a known output."""

    def __init__(self, shape: str = "flat", value: float | None = None):
        super().__init__()
        self.shape, self.value = shape, value

    def forward(self, batch):
        score = torch.zeros(batch.num_graphs).index_add_(0, batch.batch, torch.ones(len(batch.batch)))
        if self.value is not None:
            score = torch.full_like(score, self.value)
        return {"flat": score, "column": score[:, None], "wide": score[:, None].repeat(1, 2)}[self.shape]


def test_metric_matches_sklearn(fake, tmp_path):
    with task_modules(fake["ws"]) as (prepare, _):
        for split in ("valid", "test", "train"):
            graphs = prepare.load_split(split)
            want = roc_auc_score(graphs.y.numpy(), graphs.num_nodes.numpy())
            for batch_size, shape in ((256, "flat"), (1, "column"), (4, "flat")):
                result = prepare.evaluate(AtomCount(shape), split, batch_size=batch_size)
                assert result == {"auroc": want, "n": len(graphs)}
        # by hand: valid holds graphs 48..53 with 9, 10, 3, 4, 10, 11 atoms, active 48 (9) and 52 (10); of the
        # 8 active/inactive pairs the active one wins 2 (9 > 3, 4) + 2.5 (10 > 3, 4; a tie with 10 counts half)
        assert prepare.load_split("valid").num_nodes.tolist() == [9, 10, 3, 4, 10, 11]
        assert prepare.evaluate(AtomCount(), "valid")["auroc"] == pytest.approx(4.5 / 8, abs=1e-15)
        with pytest.raises(ValueError, match=r"expected one score per graph, a tensor of shape \(6,\) or \(6, 1\)"):
            prepare.evaluate(AtomCount("wide"), "test")
        with pytest.raises(ValueError, match="non-finite"):
            prepare.evaluate(AtomCount(value=float("nan")), "test")
        data = tmp_path / "data"
        shutil.copytree(fake["ws"] / "data", data)
        np.save(data / "split_test.npy", np.array([1, 2, 3]))  # inactive molecules only
        np.save(data / "labels_test.npy", np.zeros(3, dtype=np.uint8))
        with pytest.raises(ValueError, match="only one class"):
            prepare.evaluate(AtomCount(), "test", str(data))


def test_gin_layer_is_the_ogb_formula_and_the_model_scores_graphs():
    with task_modules(TASK_DIR) as (prepare, train):
        config = dict(train.CONFIG, hidden=8, emb_dim=4)
        conv = train.GINConv(config).eval()
        nn.init.constant_(conv.eps, 0.25)
        h = torch.randn(4, 8)
        edge_index = torch.tensor([[0, 1, 1, 2, 3, 2], [1, 0, 2, 1, 2, 3]])
        edge_attr = torch.randint(0, 2, (6, 3))
        e = conv.bond_encoder(edge_attr)
        want = torch.stack([(1.25 * h[i] + sum(torch.relu(h[s] + e[k]) for k, (s, d) in
                             enumerate(edge_index.T.tolist()) if d == i)) for i in range(4)])  # fmt: skip
        torch.testing.assert_close(conv(h, edge_index, edge_attr), conv.mlp(want), rtol=1e-5, atol=1e-5)
        model = train.build_model(train.CONFIG).eval()
        assert sum(p.numel() for p in model.parameters()) > 1_000_000
        assert [m.num_embeddings for m in model.atom_encoder.embeddings] == prepare.ATOM_FEATURE_DIMS
        assert model.atom_encoder.proj.in_features == 64 and model.atom_encoder.proj.out_features == 300
        zeros = torch.zeros
        graphs = [{"x": zeros(n, 9).long(), "edge_index": torch.tensor([[0], [n - 1]]), "edge_attr": zeros(1, 3).long(),
                   "y": 0.0, "num_nodes": n} for n in (2, 3, 5)]  # fmt: skip
        batch, _ = prepare.collate_graphs(graphs)
        assert model(batch).shape == (3,)


def test_baseline_trains_logs_and_checkpoints(trained):
    log = trained["log"]
    assert "step 2 | loss " in log and "3 steps/epoch on cpu" in log
    assert log.count("val_auroc") == 2  # one validation line per epoch
    assert len(trained["checkpoints"]) == 2  # one checkpoint per epoch
    assert all(p.name.startswith("train_step") for p in trained["checkpoints"])


def test_official_auroc_is_recomputed_with_sklearn(small, fake):
    """The --eval value of the trained baseline, recomputed here: the model's scores for the 6 test graphs (the
    split file's molecules, in one batch), against their generated labels, by sklearn's roc_auc_score."""
    run = small.official(TASK_DIR.name)
    result = last_json(run["proc"])
    assert result["n"] == 6
    payload = torch.load(run["checkpoint"], weights_only=True)
    with task_modules(fake["ws"]) as (prepare, train):
        model = train.build_model(payload["config"])
        model.load_state_dict(payload["state_dict"])
        model.eval()
        graphs = prepare.load_all()
        batch, _ = prepare.collate_graphs([graphs[i] for i in SPLIT["test"]])
        with torch.no_grad():
            scores = model(batch).reshape(-1).numpy()
    assert result["value"] == roc_auc_score([LABELS[i] for i in SPLIT["test"]], scores)


# ---------------------------------------------------------------------------
# The official path: padded batches, the harness's scorer, held-out test labels
# ---------------------------------------------------------------------------


def old_evaluate(prepare, model: nn.Module, split: str = "test", batch_size: int = 256) -> float:
    """The evaluation before the harness fed padded batches (prepare.predict + evaluate at commit 24e94a6, kept
    here to compare): GraphSet.batch over the split in batches of 256, model(batch) in float32, roc_auc_score."""
    data = prepare.load_split(split)
    model.eval()
    scores = []
    with torch.no_grad():
        for i in range(0, len(data), batch_size):
            batch, _ = data.batch(torch.arange(i, min(i + batch_size, len(data))))
            scores.append(model(batch).float().reshape(-1))
    return float(roc_auc_score(data.y.numpy(), torch.cat(scores).numpy()))


def tensors(inputs: dict) -> dict:
    return {name: torch.from_numpy(a) for name, a in inputs.items()}


def test_padded_batches_unpad_to_what_collate_graphs_builds(fake):
    """eval_batches -> unpad_graphs gives, batch for batch, the GraphBatch of collate_graphs on the same graphs."""
    with task_modules(fake["ws"]) as (prepare, _):
        everything = prepare.load_all()
        for split, size in (("test", 256), ("train", 7), ("valid", 1)):
            ids = prepare.split_indices(split).tolist()
            parts = [ids[i : i + size] for i in range(0, len(ids), size)]
            feed = prepare.eval_batches(split, batch_size=size)
            assert len(feed) == len(parts)
            for part, (inputs, y) in zip(parts, feed, strict=True):
                assert y.tolist() == [LABELS[i] for i in part]
                b, n, e = len(part), inputs["n_nodes"].max(), inputs["n_edges"].max()
                assert inputs["x"].dtype == inputs["edge_attr"].dtype == np.uint8
                assert inputs["x"].shape == (b, n, 9) and inputs["edge_index"].shape == (b, 2, e)
                assert inputs["edge_attr"].shape == (b, e, 3)
                got = prepare.unpad_graphs(tensors(inputs))
                want, _ = prepare.collate_graphs([everything[i] for i in part])
                for name in ("x", "edge_index", "edge_attr", "batch"):
                    assert getattr(got, name).dtype == torch.int64, name
                    assert torch.equal(getattr(got, name), getattr(want, name)), name
                assert got.num_graphs == want.num_graphs == b
        # a batch of graphs without a single bond (the salt of index 55): edges [b, 2, 0]
        names = ("node_feat", "edge_index", "edge_feat", "num_nodes", "num_edges")
        padded = prepare.pad_graphs([55, 55], {k: np.load(fake["ws"] / "data" / f"{k}.npy") for k in names})
        assert padded["edge_index"].shape == (2, 2, 0) and padded["x"].shape == (2, 2, 9)
        batch = prepare.unpad_graphs(tensors(padded))
        assert batch.batch.tolist() == [0, 0, 1, 1] and batch.edge_index.shape == (2, 0)


def test_forward_and_score_keep_the_old_checks(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        inputs, y = prepare.eval_batches("test")[0]
        assert prepare.forward(AtomCount("column"), tensors(inputs)).shape == (6,)
        with pytest.raises(ValueError, match=r"expected one score per graph, a tensor of shape \(6,\) or \(6, 1\)"):
            prepare.forward(AtomCount("wide"), tensors(inputs))
        scores = np.arange(6, dtype=np.float32)
        assert prepare.score([scores], [y]) == {"auroc": roc_auc_score(y, scores), "n": 6}
        with pytest.raises(ValueError, match="one score per graph"):
            prepare.score([scores[:5]], [y])
        with pytest.raises(ValueError, match="non-finite"):
            prepare.score([np.full(6, np.inf, dtype=np.float32)], [y])
        assert prepare.FEED_BATCH_SIZE == 256


@pytest.mark.parametrize("feed", [256, 4])
def test_official_auroc_through_the_scorer(small, fake, tmp_path, feed):
    """The real scorer on a staged folder (original prepare.py + molecules.py, train.py, the trained baseline's
    checkpoint): its value is sklearn's roc_auc_score on scores computed here (all 6 test graphs in one
    collate_graphs batch), the old evaluation's value and `prepare.py --eval`'s; the baseline passes the probes.
    feed=4: the task folder with FEED_BATCH_SIZE = 4, so that batches of other padded shapes are fed too."""
    ckpt = small.trained(TASK_DIR.name)["checkpoints"][-1]
    task_dir = with_feed(TASK_DIR, tmp_path / "task", feed)
    code, result = run_scorer(task_dir, fake["ws"] / "data", stage_eval(tmp_path / "eval", TASK_DIR, ckpt))
    assert code == 0 and "error" not in result, result
    assert (result["task"], result["metric"], result["split"], result["n"]) == ("t4", "auroc", "test", 6)
    # 6 test graphs: one batch at feed=256; at feed=4 a second one of 2 graphs, padded to another shape than the
    # first, which a cold replay sends again as it was fed (bench.scoring.checks: any batch of the feed can be)
    assert result["checks"] == expected_probes(1 if feed == 256 else 2)

    payload = torch.load(ckpt, weights_only=True)
    with task_modules(fake["ws"]) as (prepare, train):
        model = train.build_model(payload["config"])
        model.load_state_dict(payload["state_dict"])
        model.eval()
        graphs = prepare.load_all()
        batch, _ = prepare.collate_graphs([graphs[i] for i in SPLIT["test"]])
        with torch.no_grad():
            scores = model(batch).reshape(-1).numpy()
        old = old_evaluate(prepare, model)
    assert result["value"] == roc_auc_score([LABELS[i] for i in SPLIT["test"]], scores) == old
    assert result["value"] == last_json(small.official(TASK_DIR.name)["proc"])["value"]


PEEK = """
import torch
import torch.nn as nn

CONFIG = {"peek": %s}


class AtomCount(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.peek = config["peek"]
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, batch):
        atoms = torch.zeros(batch.num_graphs).index_add_(0, batch.batch, torch.ones(len(batch.batch)))
        score = self.scale * atoms
        if self.peek:  # a molecule's score borrows from the molecule before it in the batch
            score = score + 0.5 * score.roll(1)
        return score


def build_model(config):
    return AtomCount(config)
"""


@pytest.mark.parametrize("peek", [False, True])
def test_scorer_flags_a_model_whose_scores_depend_on_the_batch(fake, tmp_path, peek):
    """A forward that mixes the molecules of a batch breaks the contract: the scorer's batch-independence probe
    (the first test graphs again, reversed) says so (error + violation); the same model without the mixing passes
    and scores the AUROC of the atom counts."""
    torch.save({"state_dict": {"scale": torch.ones(1)}, "config": {"peek": peek}, "script": "run_peek.py"},
               tmp_path / "peek.pt")  # fmt: skip
    eval_dir = stage_eval(tmp_path / "eval", TASK_DIR, tmp_path / "peek.pt", {"run_peek.py": PEEK % peek})
    code, result = run_scorer(TASK_DIR, fake["ws"] / "data", eval_dir, "run_peek.py")
    if peek:
        assert code == 1 and "value" not in result, result
        assert "changed with the other samples in its batch" in result["violation"], result
        assert result["violation"] == result["error"]
    else:
        assert code == 0 and result["checks"] == expected_probes(1), result  # 6 test graphs: one feed batch
        atoms = [int(n) for n in np.load(fake["ws"] / "data" / "num_nodes.npy")[SPLIT["test"]]]
        assert result["value"] == roc_auc_score([LABELS[i] for i in SPLIT["test"]], atoms)


def test_workspace_holds_no_test_labels(small, fake, tmp_path):
    """bench.pipeline.workspace.create copies the prepared data without labels_test.npy (task.toml's held_out):
    no file under data/ holds a test label, and `prepare.py --eval` there checks on the valid split."""
    from bench.pipeline.workspace import create

    task = load_task(TASK_DIR)
    ws = create(task, fake["ws"] / "data", campaign="c", agent="a", repeat=0, root=tmp_path).path
    files = sorted(p.relative_to(ws / "data").as_posix() for p in (ws / "data").rglob("*") if p.is_file())
    every = sorted(p.name for p in (fake["ws"] / "data").iterdir() if p.is_file())
    assert files == [f for f in every if f != "labels_test.npy"] and "labels_test.npy" in every
    test_ids = np.array(SPLIT["test"])
    for name in files:  # every file: no test label in an array over the molecules, none in meta.json
        if name.endswith(".npy"):
            a = np.load(ws / "data" / name)
            if name == "labels.npy":
                assert (a[test_ids] == -1).all()
                assert np.delete(a, test_ids).tolist() == np.delete(LABELS, test_ids).tolist()
            else:
                assert len(a) != 60 or name.startswith("num_"), name  # per-molecule arrays: labels and counts only
        else:
            assert name == "meta.json"
            meta = json.loads((ws / "data" / name).read_text(encoding="utf-8"))
            assert "test" not in meta["positives"]
    with task_modules(ws) as (prepare, _):
        assert not prepare.has_test_labels() and (prepare.load_labels()[test_ids] == -1).all()
        assert (prepare.load_all().y[test_ids] == -1).all()
        for call in (prepare.load_split, prepare.split_labels, prepare.eval_batches):
            with pytest.raises(FileNotFoundError, match="the test labels are held out"):
                call("test")
        ckpt = small.trained(TASK_DIR.name)["checkpoints"][-1]
        model = prepare.rebuild_model(torch.load(ckpt, weights_only=True), str(TASK_DIR / "train.py"))
        want = prepare.evaluate(model, "valid")["auroc"]
    shutil.copyfile(ckpt, ws / "checkpoints" / ckpt.name)
    proc = run_prepare(ws, "--eval", f"checkpoints/{ckpt.name}", "--device", "cpu")
    result = last_json(proc)
    assert proc.returncode == 0 and (result["split"], result["value"], result["n"]) == ("valid", want, 6), result


@pytest.mark.mirror
def test_real_mol_csv_featurises_all_41127_molecules(real_mirror, tmp_path):
    """The real mol.csv.gz (no official split files in the mirror): all molecules, OGB's counts, the fallback split."""
    src = real_mirror / "ogbg_molhiv" / "mapping" / "mol.csv.gz"
    source = load_task(TASK_DIR).data[1]
    blob = src.read_bytes()
    assert len(blob) == source.size and hashlib.sha256(blob).hexdigest() == source.sha256
    assert hashlib.md5(blob).hexdigest() == source.md5
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "mol.csv.gz").symlink_to(src)
    data = tmp_path / "data"
    with task_modules(TASK_DIR) as (prepare, _):
        start = time.time()
        prepare.prepare(str(tmp_path / "raw"), str(data))
        print(f"prepared the real ogbg-molhiv in {time.time() - start:.1f} s")
        meta = prepare.load_meta(str(data))
        test = prepare.load_split("test", str(data))
        labels = prepare.load_labels(str(data))  # the test labels filled in from labels_test.npy
    a = arrays(data)
    assert meta["graphs"] == 41127 and len(a["num_nodes"]) == 41127
    assert np.bincount(labels).tolist() == [39684, 1443]
    assert (a["labels"][a["split_test"]] == -1).all() and (a["labels"] >= 0).sum() == 41127 - 4113
    assert a["node_feat"].shape == (meta["nodes"], 9) and a["edge_feat"].shape == (meta["edges"], 3)
    assert meta["nodes"] == 1049163 and meta["edges"] == 2259376  # 25.5 atoms, 27.5 bonds a molecule (OGB)
    assert (a["node_feat"].max(axis=0) < np.array(prepare.ATOM_FEATURE_DIMS)).all()
    assert (a["edge_feat"].max(axis=0) < np.array(prepare.BOND_FEATURE_DIMS)).all()
    assert meta["unsanitized"] == [137, 987, 12882, 18293, 30784, 30785, 35728]  # kept, as OGB does
    assert meta["split"] == "scaffold-fallback" and meta["sha256_verified"] == {"mol.csv.gz": True}
    assert meta["counts"] == {"train": 32901, "valid": 4113, "test": 4113}  # the official sizes
    assert sorted(np.concatenate([a[f"split_{s}"] for s in SPLITS]).tolist()) == list(range(41127))
    assert len(meta["partial_data"]) == 1 and meta["partial_data"][0].startswith("split: the official split files")
    assert len(test) == 4113 and int(test.y.sum()) == 1443 - sum(meta["positives"].values()) > 0
