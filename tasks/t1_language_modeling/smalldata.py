"""Small GENERATED data for this task, for `bench tasks check` and the test suite (docs/extending.md).

A play-like input.txt with the real 65-character vocabulary (NOT the real data: no score on them means anything). This
file is never copied into an agent's workspace (bench/pipeline/workspace.py copies program.md, train.py and the locked
files only).
"""

from __future__ import annotations

import random
import string
from pathlib import Path

REAL_VOCAB = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase  # the 65 characters of input.txt
N_FAKE = 6000  # characters: 5400 train, 600 val
TINY = {
    "block_size": 16,
    "n_layer": 1,
    "n_head": 2,
    "d_model": 32,
    "batch_size": 8,
    "epochs": 2,
    "warmup_steps": 5,
    "eval_every": 10**9,
}  # validation + checkpoint at the end of each epoch only


def fake_shakespeare(n_chars: int = N_FAKE, seed: int = 0) -> str:
    """Play-like text that uses every character of the real vocabulary (first line) and nothing else."""
    rng = random.Random(seed)
    lines = [REAL_VOCAB.replace("\n", "")]
    while sum(len(line) + 1 for line in lines) < n_chars:
        speaker = rng.choice(["FIRST CITIZEN", "MENENIUS", "ROMEO", "JULIET", "KING RICHARD III"])
        words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8))) for _ in range(rng.randint(3, 12))]
        lines += [f"{speaker}:", " ".join(words) + rng.choice([".", ",", "!", "?", ";", ":", "'", " - &3$"]), ""]
    return ("\n".join(lines) + "\n")[:n_chars]


def write_raw(raw: Path) -> dict:
    text = fake_shakespeare()
    (raw / "input.txt").write_text(text, encoding="utf-8")
    return {"text": text}


VAL_SPLIT = "val"  # the split the self-reported val_score is measured on (prepare.py's name)
