"""File checksums, computed in one place.

The data fetcher, the weights installer and the rule-1 audit all ask the same question ("are these
the bytes we expect?") and must answer it the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20  # 1 MB: large enough to be fast, small enough to keep memory flat on multi-GB archives


class Digest:
    """Size, sha256 and md5 computed in one pass, so verification never re-reads a multi-GB file."""

    def __init__(self) -> None:
        self._sha256 = hashlib.sha256()
        self._md5 = hashlib.md5(usedforsecurity=False)  # an identity check against published sums, not security
        self.size = 0

    def update(self, chunk: bytes) -> None:
        """Add the next bytes to both digests and the size."""
        self._sha256.update(chunk)
        self._md5.update(chunk)
        self.size += len(chunk)

    @property
    def sha256(self) -> str:
        """The sha256 of the bytes so far, in hex."""
        return self._sha256.hexdigest()

    @property
    def md5(self) -> str:
        """The md5 of the bytes so far, in hex (for published md5 sums)."""
        return self._md5.hexdigest()

    def mismatches(self, size: int | None = None, sha256: str = "", md5: str = "") -> list[str]:
        """One 'what: expected X, got Y' entry per declared property the bytes do not match.

        A property given empty (or None) is not declared.
        """
        want = {"size": size, "sha256": sha256.lower(), "md5": md5.lower()}
        got = {"size": self.size, "sha256": self.sha256, "md5": self.md5}
        return [f"{k}: expected {v}, got {got[k]}" for k, v in want.items() if v not in (None, "") and v != got[k]]


def digest_file(path: Path) -> Digest:
    """The :class:`Digest` of a file on disk."""
    digest = Digest()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest


def sha256(path: Path) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


# Left out of a folder's hash: files that running or testing the code writes beside it, not the
# task's content.
TREE_SKIP_DIRS = frozenset({"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
TREE_SKIP_SUFFIXES = (".pyc", ".pyo")


def tree_files(folder: Path) -> list[str]:
    """The files :func:`tree_sha256` covers: relative posix paths, sorted (Python string order)."""
    folder = Path(folder)
    out = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(part in TREE_SKIP_DIRS for part in rel.parts) or path.name.endswith(TREE_SKIP_SUFFIXES):
            continue
        if path.is_file():
            out.append(rel.as_posix())
    return sorted(out)


def tree_sha256(folder: Path) -> str:
    r"""One sha256 for a folder's content (a task folder), so that a result names the task that ran.

    It is the sha256 of the folder's ``sha256sum``-style manifest: one line
    ``"<sha256>  <relative path>\n"`` per file (links followed), sorted by path; caches
    (``__pycache__``, ``*.pyc``, ``.git``...) are left out, so importing the task's code does not
    change it while editing any of its files does. The same value comes from
    ``find . -type f ... | sed 's|^\./||' | LC_ALL=C sort | xargs sha256sum | sha256sum`` for
    ASCII names.
    """
    folder = Path(folder)
    manifest = "".join(f"{sha256(folder / rel)}  {rel}\n" for rel in tree_files(folder))
    return hashlib.sha256(manifest.encode()).hexdigest()
