# =============================================================================
# molecules.py for T4 (graph learning, ogbg-molhiv): LOCKED, like prepare.py.
# Do not modify: the harness prepares and evaluates with the original copy of this file.
#
# OGB's molecular featurisation, written out so that you can read exactly what the numbers in data/ mean:
#   1. OGB's atom and bond feature vocabularies (ogb.utils.features), same lists, same order
#   2. smiles2graph: SMILES -> RDKit molecule -> atom features [n, 9], bonds in both directions, bond features
#   3. the scaffold split (Bemis-Murcko scaffolds, as OGB made its official split)
#   4. featurize() for the whole file, and the check against OGB's own pre-featurised files
# prepare.py calls these once, when the data are prepared; training scripts only need the *_FEATURE_DIMS,
# which prepare.py re-exports. RDKit is imported inside the functions that need it, so importing this file is cheap.
# =============================================================================

from __future__ import annotations

import gzip
import io
import sys

import numpy as np

# ---------------------------------------------------------------------------
# 1. Feature vocabularies
# ---------------------------------------------------------------------------

# OGB's feature vocabularies (ogb.utils.features.allowable_features), same lists, same order. A feature is the
# index of the value in its list; a value not in the list maps to the last entry ("misc"), as OGB's safe_index.
ALLOWABLE = {
    "atomic_num": list(range(1, 119)) + ["misc"],  # index = Z - 1
    "chirality": ["CHI_UNSPECIFIED", "CHI_TETRAHEDRAL_CW", "CHI_TETRAHEDRAL_CCW", "CHI_OTHER", "misc"],
    "degree": list(range(11)) + ["misc"],  # total degree, hydrogens included
    "formal_charge": list(range(-5, 6)) + ["misc"],
    "num_hs": list(range(9)) + ["misc"],  # total number of hydrogens
    "num_radical_e": list(range(5)) + ["misc"],
    "hybridization": ["SP", "SP2", "SP3", "SP3D", "SP3D2", "misc"],
    "is_aromatic": [False, True],
    "is_in_ring": [False, True],
    "bond_type": ["SINGLE", "DOUBLE", "TRIPLE", "AROMATIC", "misc"],
    "bond_stereo": ["STEREONONE", "STEREOZ", "STEREOE", "STEREOCIS", "STEREOTRANS", "STEREOANY"],
    "is_conjugated": [False, True],
}
ATOM_FEATURES = ["atomic_num", "chirality", "degree", "formal_charge", "num_hs", "num_radical_e", "hybridization",
                 "is_aromatic", "is_in_ring"]  # fmt: skip
BOND_FEATURES = ["bond_type", "bond_stereo", "is_conjugated"]
ATOM_FEATURE_DIMS = [len(ALLOWABLE[k]) for k in ATOM_FEATURES]  # [119, 5, 12, 12, 10, 6, 6, 2, 2]
BOND_FEATURE_DIMS = [len(ALLOWABLE[k]) for k in BOND_FEATURES]  # [5, 6, 2]
_INDEX = {k: {v: i for i, v in enumerate(values)} for k, values in ALLOWABLE.items()}


# ---------------------------------------------------------------------------
# 2.-3. One molecule -> one graph (OGB's smiles2graph); the scaffold split
# ---------------------------------------------------------------------------


def _feature(name: str, value) -> int:
    table = _INDEX[name]
    return table.get(value, len(table) - 1)


def parse_smiles(smiles: str):
    """RDKit molecule of a SMILES: (mol, sanitized). 7 molecules of ogbg-molhiv fail RDKit's valence checks (Al, B,
    Ge with 'too many' bonds); they are kept, as in OGB, parsed without those checks but otherwise sanitised."""
    from rdkit import Chem

    mol = Chem.MolFromSmiles(smiles)
    if mol is not None:
        return mol, True
    mol = Chem.MolFromSmiles(smiles, sanitize=False)
    if mol is None:
        raise ValueError(f"RDKit cannot parse the SMILES {smiles!r}")
    mol.UpdatePropertyCache(strict=False)
    flags = Chem.SanitizeFlags.SANITIZE_ALL ^ Chem.SanitizeFlags.SANITIZE_PROPERTIES
    Chem.SanitizeMol(mol, flags, catchErrors=True)  # rings, aromaticity, conjugation, hybridisation
    return mol, False


def mol_to_graph(mol) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OGB's smiles2graph: atom features [n, 9], edge_index [2, 2 * bonds] (each bond in both directions,
    (i, j) then (j, i)) and bond features [2 * bonds, 3]."""
    x = [
        [
            _feature("atomic_num", a.GetAtomicNum()),
            _feature("chirality", str(a.GetChiralTag())),
            _feature("degree", a.GetTotalDegree()),
            _feature("formal_charge", a.GetFormalCharge()),
            _feature("num_hs", a.GetTotalNumHs()),
            _feature("num_radical_e", a.GetNumRadicalElectrons()),
            _feature("hybridization", str(a.GetHybridization())),
            _feature("is_aromatic", a.GetIsAromatic()),
            _feature("is_in_ring", a.IsInRing()),
        ]
        for a in mol.GetAtoms()
    ]
    edges, feats = [], []
    for b in mol.GetBonds():
        i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
        f = [
            _feature("bond_type", str(b.GetBondType())),
            _feature("bond_stereo", str(b.GetStereo())),
            _feature("is_conjugated", b.GetIsConjugated()),
        ]
        edges += [(i, j), (j, i)]
        feats += [f, f]
    edge_index = np.array(edges, dtype=np.int64).reshape(-1, 2).T
    return np.array(x, dtype=np.uint8).reshape(-1, 9), edge_index, np.array(feats, dtype=np.uint8).reshape(-1, 3)


def scaffold_of(mol) -> str:
    """Bemis-Murcko scaffold SMILES with chirality ('' for a molecule without rings), as OGB's split used."""
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    try:
        return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=True)
    except Exception:  # the few molecules that fail valence checks: the same scaffold, without those checks
        core = Chem.MurckoDecompose(mol)
        core.UpdatePropertyCache(strict=False)
        return Chem.MolToSmiles(core, isomericSmiles=True)


def scaffold_split(scaffolds: list[str], fractions=(0.8, 0.1, 0.1)) -> dict[str, np.ndarray]:
    """OGB's scaffold split (Hu et al. 2019, pretrain-gnns `scaffold_split`): group the molecules by scaffold, order
    the groups by (size, first index) DEscending, and fill train up to 80 %, valid up to 90 %, the rest is test.
    A group never straddles two splits. Deterministic: no randomness anywhere."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(scaffolds):
        groups.setdefault(s, []).append(i)
    ordered = sorted(groups.values(), key=lambda g: (len(g), g[0]), reverse=True)
    train_cut, valid_cut = fractions[0] * len(scaffolds), (fractions[0] + fractions[1]) * len(scaffolds)
    out: dict[str, list[int]] = {"train": [], "valid": [], "test": []}
    for g in ordered:
        if len(out["train"]) + len(g) <= train_cut:
            out["train"] += g
        elif len(out["train"]) + len(out["valid"]) + len(g) <= valid_cut:
            out["valid"] += g
        else:
            out["test"] += g
    return {s: np.array(v, dtype=np.int64) for s, v in out.items()}


# ---------------------------------------------------------------------------
# 4. The whole file; OGB's raw/ files (gzipped integer CSVs) to compare with
# ---------------------------------------------------------------------------


def int_table(blob: bytes, name: str, ndmin: int) -> np.ndarray:
    """A headerless gzipped CSV of integers (OGB's split and raw files)."""
    try:
        return np.loadtxt(
            io.StringIO(gzip.decompress(blob).decode("ascii")), delimiter=",", dtype=np.int64, ndmin=ndmin
        )
    except (OSError, ValueError, EOFError) as e:
        raise ValueError(f"{name}: not a gzipped CSV of integers ({e})") from e


def featurize(smiles: list[str], scaffolds: bool) -> dict:
    """Graphs of all molecules, concatenated; plus their scaffolds when asked for (the fallback split)."""
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")  # the 7 valence failures would print a warning each
    xs, eis, eas, unsanitized, scafs = [], [], [], [], []
    for i, s in enumerate(smiles):
        try:
            mol, ok = parse_smiles(s)
        except ValueError as e:
            raise ValueError(f"molecule {i} (line {i + 2}): {e}") from e
        x, ei, ea = mol_to_graph(mol)
        xs.append(x)
        eis.append(ei)
        eas.append(ea)
        if not ok:
            unsanitized.append(i)
        if scaffolds:
            scafs.append(scaffold_of(mol))
        if (i + 1) % 10000 == 0 or i + 1 == len(smiles):  # RDKit takes ~1 ms a molecule: show progress
            print(f"featurised {i + 1:,} of {len(smiles):,} molecules", file=sys.stderr, flush=True)
    return {
        "node_feat": np.concatenate(xs),
        "edge_index": np.concatenate(eis, axis=1),  # node indices local to each graph
        "edge_feat": np.concatenate(eas),
        "num_nodes": np.array([len(x) for x in xs], dtype=np.int64),
        "num_edges": np.array([len(e) for e in eas], dtype=np.int64),  # directed edges = 2 x bonds
        "unsanitized": unsanitized,
        "scaffolds": scafs,
    }


def compare_with_ogb_raw(g: dict, labels: np.ndarray, raw: dict) -> dict | None:
    """Compare our graphs with OGB's pre-featurised raw/ files (if the archive has them): graphs that differ."""
    need = ["num-node-list.csv.gz", "num-edge-list.csv.gz", "node-feat.csv.gz", "edge-feat.csv.gz", "edge.csv.gz"]
    if not all(n in raw for n in need):
        return None
    t = {n: int_table(raw[n], f"raw/{n}", 1 if "list" in n else 2) for n in need}
    nn_raw, nb_raw = t["num-node-list.csv.gz"], t["num-edge-list.csv.gz"]  # bonds: OGB stores each once
    G = len(g["num_nodes"])
    rows = [len(t[n]) for n in ("node-feat.csv.gz", "edge-feat.csv.gz", "edge.csv.gz")]
    if len(nn_raw) != G or len(nb_raw) != G or rows != [nn_raw.sum(), nb_raw.sum(), nb_raw.sum()]:
        return {"graphs": G, "differ": G, "reason": "the raw/ files do not describe the same number of graphs"}
    same = (nn_raw == g["num_nodes"]) & (2 * nb_raw == g["num_edges"])
    node_ok = np.repeat(same, g["num_nodes"]), np.repeat(same, nn_raw)
    bond_ok = np.repeat(same, g["num_edges"] // 2), np.repeat(same, nb_raw)
    # bonds as unordered atom pairs: the check does not depend on which end OGB stored first
    ours = (
        g["node_feat"][node_ok[0]],
        g["edge_feat"][::2][bond_ok[0]],
        np.sort(g["edge_index"][:, ::2].T, 1)[bond_ok[0]],
    )
    theirs = (
        t["node-feat.csv.gz"][node_ok[1]],
        t["edge-feat.csv.gz"][bond_ok[1]],
        np.sort(t["edge.csv.gz"], 1)[bond_ok[1]],
    )
    bad_graphs = set(np.flatnonzero(~same).tolist())
    for a, b, counts in zip(ours, theirs, (g["num_nodes"], g["num_edges"] // 2, g["num_edges"] // 2), strict=True):
        if a.shape != b.shape:
            return {"graphs": G, "differ": G, "reason": "the raw/ files have other columns"}
        owner = np.repeat(np.arange(len(same)), counts)[np.repeat(same, counts)]
        bad_graphs |= set(owner[(a != b).any(axis=1)].tolist())
    result = {"graphs": G, "differ": len(bad_graphs), "first": sorted(bad_graphs)[:10]}
    if "graph-label.csv.gz" in raw:
        result["labels_differ"] = int((int_table(raw["graph-label.csv.gz"], "raw/graph-label", 1) != labels).sum())
    return result
