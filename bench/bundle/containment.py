"""The one rule for every path an import or export touches.

Each destination lies under the folder it belongs to.

A bundle is someone else's file, and its names are theirs: a campaign named ``..`` made an import
copy run folders into the toolkit's cache (a folder named ``prepared`` with planted test labels, one
named ``clis`` with a planted agent CLI). So every name a bundle gives a destination is checked
here, before anything is written:

* a campaign name or a run folder name that is empty, ``.``, ``..``, absolute, or holds a ``..``
  part is refused (:class:`Refused`, exit 2, naming it);
* each destination is resolved (links followed) and must lie strictly under its base: the campaign's
  folder of run directories, or ``--runs-dir``;
* no destination may be, hold, or lie inside a folder the toolkit keeps for itself
  (:func:`protected`: the downloaded and prepared data, the weights, the agents' CLIs, the task
  folders, the embedded tracking store's database and artifacts), whatever the base, so a
  ``--runs-dir`` pointed at the cache cannot write into it either.

``bench export`` asks :func:`inside` too: it packs only run folders that lie under the campaign's
folder (or ``--runs-dir``), never a path an imported tag names.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from bench import paths
from bench.bundle.archive import BundleError


class Refused(BundleError):
    """A name or destination that would leave its folder or reach the toolkit's own.

    Bad input (exit 2).
    """


def protected() -> list[Path]:
    """The folders and files no import may write into.

    The data (downloaded and prepared), the weights, the CLIs, the task folders, and the embedded
    tracking store's database and artifacts (a reader's ``theirs/runs`` beside ``theirs/mlflow.db``
    is theirs to choose).
    """
    cache, store = paths.cache_dir(), paths.mlruns_dir()
    kept = [cache / "raw", cache / "prepared", cache / "weights", paths.clis_dir(), paths.tasks_dir()]
    return [*kept, store / "mlflow.db", store / "artifacts"]


def check_name(name: object, what: str) -> str:
    """``name`` when it can name a folder under another; :class:`Refused` naming it otherwise.

    No empty, ``.``, ``..``, absolute or ``..``-holding name. ``what``: the name's role in the
    message ("campaign", ...).
    """
    if not isinstance(name, str) or not name.strip():
        raise Refused(f"the bundle names a {what} {name!r}: an empty name cannot name a folder; nothing imported")
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or any(p in (".", "..") for p in parts) or name.strip() in (".", ".."):
        raise Refused(
            f"the bundle names a {what} {name!r}: it would lead out of its folder (a name may not be absolute or "
            f"hold '.' or '..'); nothing imported (`bench import --as NAME` gives the campaign another name)"
        )
    return name


def inside(path: Path, base: Path) -> bool:
    """Whether ``path``, resolved (links followed), lies strictly under ``base``, resolved."""
    root, where = Path(base).resolve(), Path(path).resolve()
    return root in where.parents


def clear(path: Path, what: str) -> Path:
    """``path`` when it is clear of every :func:`protected` folder; Refused naming both otherwise.

    Clear: neither one of them, inside one, nor holding one (``--runs-dir`` pointed at the cache,
    say, is refused).
    """
    where = Path(path).resolve()
    for keep in protected():
        keep = keep.resolve()
        if where == keep or keep in where.parents or where in keep.parents:
            raise Refused(
                f"the {what} {path} would put run folders at {where}, where the toolkit keeps {keep.name!r} "
                f"({keep}): nothing imported; give --runs-dir a folder of its own"
            )
    return Path(path)


def destination(base: Path, name: str, what: str) -> Path:
    """``base / name`` once checked.

    A plain name, strictly under ``base`` after resolution, and clear of every :func:`protected`
    folder (neither one of them, inside one, nor holding one).
    """
    dest = Path(base) / check_name(name, what)
    if not inside(dest, base):
        raise Refused(f"the bundle's {what} {name!r} resolves to {dest.resolve()}, outside {Path(base).resolve()}")
    clear(dest, what + " " + repr(name))
    return dest
