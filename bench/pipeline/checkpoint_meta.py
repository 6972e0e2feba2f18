"""A checkpoint's payload read without torch and without its weights.

Val_score, metric, script, step, time, config.

Why: collecting candidates needs only the small fields ``save_checkpoint`` stores beside the
weights, yet reading them with ``torch.load`` makes the harness import torch: 2.7 s of a `bench run`
whose agent may take seconds (issue #16). ``torch.save`` writes a zip archive whose
``<name>/data.pkl`` pickles the payload, each tensor as a call of a torch function on a storage that
lives in another member; so the payload is read here from that pickle alone, every torch global
replaced by a placeholder (weights are never read), every other global refused except the few plain
containers ``torch.load(weights_only=True)`` allows too. Nothing in the file is ever called.

Returns None for a file in another format (not a zip, or torch's legacy format);
:func:`bench.pipeline.collect.read` then falls back to ``torch.load``. A broken or hostile pickle
raises (``pickle.UnpicklingError`` and friends), and the collection rejects the file as unreadable,
as it does for one ``torch.load`` refuses.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from pathlib import Path

MAX_PICKLE = 64 << 20  # bytes of data.pkl read: a payload's fields and its tensors' descriptions, never the weights
# globals a weights-only checkpoint may name besides torch's own (torch.load(weights_only=True)
# allows these too)
PLAIN = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
    ("builtins", "bytearray"): bytearray,
}


class Tensor:
    """What a tensor of the payload reads as: its weights stay in the file."""

    def __repr__(self) -> str:
        return "<tensor not loaded>"


def _torch_global(*args, **kwargs) -> Tensor:
    return Tensor()


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module == "torch" or module.startswith("torch."):
            return _torch_global  # tensor rebuilders, storage types, dtypes: a placeholder, never torch's code
        if (module, name) in PLAIN:
            return PLAIN[(module, name)]
        raise pickle.UnpicklingError(f"unsupported global {module}.{name} (not a weights-only checkpoint)")

    def persistent_load(self, pid):
        return None  # a storage of the weights: not read


def load(path: Path) -> object | None:
    """The payload of a checkpoint in ``torch.save``'s zip format, tensors as :class:`Tensor`.

    None for other files.
    """
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        return None
    with archive:
        pickles = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/data.pkl")]
        if len(pickles) != 1:
            return None
        with archive.open(pickles[0]) as f:
            data = f.read(MAX_PICKLE + 1)
    if len(data) > MAX_PICKLE:
        raise pickle.UnpicklingError(f"data.pkl larger than {MAX_PICKLE >> 20} MB")
    return _Unpickler(io.BytesIO(data)).load()
