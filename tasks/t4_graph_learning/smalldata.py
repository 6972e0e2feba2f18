"""Small GENERATED data for this task, for `bench tasks check` and the test suite (docs/extending.md).

mol.csv.gz and the scaffold split files in OGB's schema, 60 molecules with made-up labels (NOT the real data: no score
on them means anything). This file is never copied into an agent's workspace (bench/pipeline/workspace.py copies
program.md, train.py and the locked files only).
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

SPLITS = ("train", "valid", "test")
TINY = {"epochs": 2, "batch_size": 16, "log_every": 2}  # 3 steps an epoch on the 48 generated training graphs

# 60 ordinary molecules (a few share a scaffold; acyclic ones share the empty scaffold), with stereo bonds and
# centres, a salt without bonds, and one molecule of the real file that fails RDKit's valence checks (index 59).
SMILES = [
    "CCO", "c1ccccc1O", "CC(=O)O", "CCN(CC)CC", "c1ccncc1", "CC(C)O", "OC(=O)c1ccccc1", "Nc1ccccc1",
    "CC(=O)Nc1ccc(O)cc1", "COc1ccccc1", "C1CCCCC1", "C1CCOC1", "c1ccc2ccccc2c1", "Clc1ccccc1", "CC(C)(C)O",
    "C=CC=O", "CC#N", "O=C1CCCCC1", "c1ccsc1", "c1cc[nH]c1", "CCOC(=O)C", "CN1CCCC1", "OCC(O)CO", "C[C@@H](N)C(=O)O",
    "NC(=O)c1ccccc1", "Cc1ccccc1", "Oc1ccc(Cl)cc1", "Cc1ccncc1", "Oc1ccc2ccccc2c1", "CC1CCCCC1", "OC1CCOC1",
    "Cl[C@H](/C=C/C)Br", "C/C=C\\C", "Brc1ccccc1", "c1ccc(-c2ccccc2)cc1", "Cc1ccc(-c2ccccc2)cc1", "O=C(O)C1CCCCC1",
    "c1ccc2[nH]ccc2c1", "Cc1ccc2[nH]ccc2c1", "C1CCNCC1", "CC1CCNCC1", "O=c1cc[nH]c(=O)[nH]1", "Cc1c[nH]c(=O)[nH]c1=O",
    "CCCCCC", "CCCCO", "c1ccoc1", "Cc1ccco1", "N#Cc1ccccc1", "O=[N+]([O-])c1ccccc1", "CS(=O)(=O)c1ccccc1",
    "C1CC1", "CC1CC1", "c1cnc2ccccc2c1", "Cc1cnc2ccccc2c1", "FC(F)(F)c1ccccc1", "[Na+].[Cl-]", "OCCN1CCOCC1",
    "C1COCCN1", "Nc1ncnc2[nH]cnc12", "Cc1ccc([B-2]2(c3ccc(C)cc3)=NCCO2)cc1",
]  # fmt: skip
LABELS = [1 if i % 4 == 0 else 0 for i in range(len(SMILES))]  # 15 active, in every split
SPLIT = {"train": list(range(48)), "valid": list(range(48, 54)), "test": list(range(54, 60))}  # generated


def gz(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"), mtime=0)


def mol_csv(smiles=SMILES, labels=LABELS) -> bytes:
    """GENERATED mapping/mol.csv.gz: OGB's header and layout (empty mol_id), made-up labels."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["HIV_active", "smiles", "mol_id"])
    w.writerows([y, s, ""] for y, s in zip(labels, smiles, strict=True))
    return gz(out.getvalue())


def split_csv(indices) -> bytes:
    """GENERATED split/scaffold/<split>.csv.gz: one graph index per line, no header (as OGB's)."""
    return gz("".join(f"{i}\n" for i in indices))


def write_molhiv_raw(raw: Path, splits: bool = True) -> Path:
    """GENERATED mol.csv.gz (+ the three split files) in OGB's schema: 60 molecules, made-up labels."""
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "mol.csv.gz").write_bytes(mol_csv())
    if splits:
        for s in SPLITS:
            (raw / f"{s}.csv.gz").write_bytes(split_csv(SPLIT[s]))
    return raw


def write_raw(raw: Path) -> dict:
    write_molhiv_raw(raw)
    return {}


VAL_SPLIT = "valid"  # the split the self-reported val_score is measured on (prepare.py's name)
