"""A campaign bundle.

One archive that holds what a campaign recorded, with a manifest of every file's sha256.

Why a bundle: a reader of a result can only check what they can load. The bundle carries the
campaign's MLflow runs (written by :mod:`bench.bundle.export`, loaded into any store by
:mod:`bench.bundle.importer`) and each run's directory as the harness left it (``result.json``, the
evidence, the scored checkpoints and the code recorded with them), so that ``bench verify`` can
re-score and re-audit from it. The manifest makes an edit visible: a file whose bytes differ from
its recorded sha256 is named, and so is a metric in the MLflow runs that no longer agrees with its
run's ``result.json``. (The manifest is no signature: whoever edits a file can rewrite the manifest
too; a reader who wants more compares the manifest's own hash with the one the authors published.)

The layout (``docs/publishing.md`` has it for users)::

    <campaign>-bundle/
      manifest.json                  format, toolkit version, date, campaign, task folder
                                     hashes, files' sha256
      mlflow/experiment.json         the experiment's name and tags (the UI's saved views)
      mlflow/runs/<run_id>.json      one per run: name, parent, status, times, params, tags,
                                     metric histories
      mlflow/artifacts/<run_id>/...  its artifacts
      mlflow/traces/<trace_id>.json  its traces (``mlflow.entities.Trace.to_dict()``)
      runs/<run folder>/...          the run directory, less the data copies (:data:`RUN_FILES`)

This module holds the format: the manifest, :func:`check` and :func:`extract` (what
``bench verify`` calls).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.checksums import sha256
from bench.errors import InputError
from bench.tracking import schema

FORMAT = "1gc7rc-bundle/1"
MANIFEST = "manifest.json"
SUFFIX = ".tar.gz"


# Caps on what a stranger's bundle can make a reader do, checked before anything is written (a
# bundle over one is refused, exit 2, with the reason): the paper's 245-run campaign is about 10,000
# files; a run JSON with every metric's history is a few MB; the bundle's own JSON nests 5 levels
# (the traces' spans, a few more)
MAX_MEMBERS = 50_000
MAX_BYTES = 200 * 2**30  # unpacked, all members together
MAX_JSON_BYTES = 256 * 2**20  # one JSON file of the bundle
MAX_JSON_DEPTH = 64


class BundleError(InputError):
    """Not a bundle, an unreadable one, or a manifest of another format: bad input (exit 2)."""


@dataclass(frozen=True)
class Problem:
    """One difference between a bundle and its manifest or its own records.

    ``kind``: ``hash`` (a file's sha256 differs from the manifest), ``missing`` (in the manifest,
    not in the bundle), ``extra`` (in the bundle, not in the manifest), ``metric`` (an MLflow metric
    differs from its run's result.json), ``artifact`` (a run lists an artifact the bundle lacks),
    ``unsafe`` (a run JSON names a run id, run folder or artifact that is no plain path inside the
    bundle: left unread).
    """

    kind: str
    path: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}" + (f": {self.detail}" if self.detail else "")


SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def safe_name(name: object, what: str) -> str:
    """A run id, trace id or run folder name from a bundle, checked to be one plain path component.

    A bundle is someone else's file: a name such as ``../..`` must not lead an import out of
    its folders.
    """
    if not isinstance(name, str) or not SAFE_NAME.match(name) or len(name) > 255:
        raise BundleError(f"the bundle names a {what} {name!r}: not a plain file name; not a bundle of `bench export`")
    return name


def files_of(top: Path) -> dict[str, str]:
    """Every file under ``top`` but the manifest, relative posix path -> sha256.

    Links are refused: a bundle holds plain files only.
    """
    out = {}
    found = []
    for n, p in enumerate(top.rglob("*")):
        if n >= MAX_MEMBERS:
            raise BundleError(f"{top} holds more than {MAX_MEMBERS:,} entries: not a bundle of `bench export`")
        found.append(p)
    for p in sorted(found):
        rel = p.relative_to(top).as_posix()
        if p.is_symlink():
            raise BundleError(f"{rel} is a link: a bundle holds plain files only")
        if p.is_file() and rel != MANIFEST:
            out[rel] = sha256(p)
    return out


def write_manifest(top: Path, *, campaign: str, tasks: dict, created: str, version: str) -> dict:
    """Hash every file under ``top`` and write ``manifest.json`` beside them.

    Returns the manifest.
    """
    manifest = {
        "format": FORMAT,
        "toolkit_version": version,
        "created": created,
        "campaign": campaign,
        "tasks": dict(sorted(tasks.items())),
        "files": files_of(top),
    }
    (top / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(top: Path) -> dict:
    """The manifest of an extracted bundle folder.

    BundleError when it is missing, unreadable or of another format.
    """
    path = top / MANIFEST
    if not path.is_file():
        raise BundleError(f"{top} has no {MANIFEST}: not a bundle of `bench export`")
    manifest = read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise BundleError(f"{path}: format {got!r}, expected {FORMAT!r} (a bundle of another toolkit version?)")
    if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("campaign"), str):
        raise BundleError(f"{path} lacks its 'files' table or its 'campaign'")
    if len(manifest["files"]) > MAX_MEMBERS:
        raise BundleError(f"{path} lists {len(manifest['files']):,} files, over the {MAX_MEMBERS:,} a bundle may hold")
    return manifest


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest, read without parsing it.

    Strings skipped. A text nested 100,000 deep would make the parser itself fail with
    a RecursionError.
    """
    deepest = level = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        level += 1 if m.group() in "[{" else -1
        deepest = max(deepest, level)
    return deepest


def read_json(path: Path) -> object:
    """One JSON file of a bundle, read within the caps.

    The caps: :data:`MAX_JSON_BYTES`, :data:`MAX_JSON_DEPTH`. BundleError naming the file and the
    cap it passed, or why it is no JSON.
    """
    path = Path(path)
    try:
        if path.is_symlink() or not path.is_file():
            raise BundleError(f"{path.name} is not a plain file: not a bundle of `bench export`")
        if (size := path.stat().st_size) > MAX_JSON_BYTES:
            raise BundleError(f"{path.name} is {size:,} bytes, over the {MAX_JSON_BYTES:,} a bundle's JSON may hold")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BundleError(f"{path.name} cannot be read ({e})") from e
    if (deep := depth(text)) > MAX_JSON_DEPTH:
        raise BundleError(f"{path.name} nests {deep:,} levels deep, over the {MAX_JSON_DEPTH} a bundle's JSON may")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BundleError(f"{path.name} is not valid JSON ({e})") from e


def _top_of(root: Path) -> Path:
    """The one folder of an extracted archive that holds the manifest."""
    tops = [p for p in root.iterdir() if p.is_dir() and (p / MANIFEST).is_file()]
    if len(tops) != 1:
        raise BundleError(f"no single top folder with a {MANIFEST}: not a bundle of `bench export`")
    return tops[0]


def unpack(archive: Path, dest: Path) -> Path:
    """Extract ``archive`` into ``dest`` and return its top folder.

    Members that would leave it, links and devices are refused.
    """
    archive = Path(archive)
    if not archive.is_file():
        raise BundleError(f"{archive}: no such file (a bundle is the .tar.gz that `bench export` wrote)")
    try:
        with tarfile.open(archive, "r:*") as tar:
            # headers only, one at a time and counted: what each member would write is known before
            # anything is, and a flood of members stops at the cap (the headers read so far are all
            # that is held)
            members, size = [], 0
            for m in tar:
                if len(members) >= MAX_MEMBERS:
                    why = f"more than {MAX_MEMBERS:,} members (the paper's whole campaign is about 10,000)"
                    raise BundleError(f"{archive} holds {why}: refused unread, not a bundle of `bench export`")
                if not (m.isfile() or m.isdir()):
                    raise BundleError(f"{archive}: member {m.name} is not a plain file: not a bundle")
                members.append(m)
                size += m.size
                if size > MAX_BYTES:
                    raise BundleError(f"{archive} unpacks to more than {MAX_BYTES:,} bytes: refused unread")
            free = shutil.disk_usage(dest).free
            if size > free:  # a stranger's archive that unpacks to more than the disk holds (a gzip bomb)
                raise BundleError(f"{archive} unpacks to {size:,} bytes and {dest} has {free:,} free: free space first")
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BundleError(f"{archive} is not a readable .tar.gz ({e}): not a bundle of `bench export`") from e
    return _top_of(Path(dest))


@contextmanager
def opened(path: Path) -> Iterator[Path]:
    """The bundle's top folder.

    ``path`` itself when it is an extracted bundle, else a temporary extraction.
    """
    path = Path(path)
    if path.is_dir():
        yield path if (path / MANIFEST).is_file() else _top_of(path)
        return
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as tmp:
        yield unpack(path, Path(tmp))


def manifest(path: Path) -> dict:
    """The manifest of a bundle (archive or extracted folder)."""
    with opened(path) as top:
        return read_manifest(top)


def extract(path: Path, dest: Path) -> Path:
    """Extract the bundle into ``dest`` and return its ``runs/`` folder.

    One sub-folder per run directory; the bundle's other parts are beside it. Nothing is checked
    here: :func:`check` first.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if Path(path).is_dir():
        with opened(path) as src:  # an extracted bundle: copied as it is
            top = dest / src.name
            shutil.copytree(src, top, dirs_exist_ok=True)
    else:
        top = unpack(Path(path), dest)
    return top / "runs"


def check(path: Path) -> list[Problem]:
    """Every difference between a bundle and its manifest or its own records.

    Files changed, missing or added, every MLflow metric that differs from its run's result.json,
    and every listed artifact the bundle lacks. [] when all agree.

    Raises :class:`BundleError` only for bad input (not a bundle).
    """
    with opened(path) as top:
        return check_folder(top)


def check_folder(top: Path) -> list[Problem]:
    """:func:`check` on an extracted bundle folder."""
    recorded = read_manifest(top)["files"]
    present = files_of(top)
    problems = [Problem("missing", rel, "listed in the manifest, absent") for rel in recorded if rel not in present]
    problems += [Problem("extra", rel, "not in the manifest") for rel in present if rel not in recorded]
    problems += [
        Problem("hash", rel, f"sha256 {digest[:12]}... differs from the manifest's {recorded[rel][:12]}...")
        for rel, digest in present.items()
        if rel in recorded and recorded[rel] != digest
    ]
    for run_json in sorted((top / "mlflow" / "runs").glob("*.json")):
        try:
            run = read_json(run_json)
        except BundleError as e:
            problems.append(Problem("hash", run_json.relative_to(top).as_posix(), str(e)))
            continue
        rel = run_json.relative_to(top).as_posix()
        try:
            if not isinstance(run, dict):
                raise BundleError(f"a JSON {type(run).__name__}, not a run")
            safe_name(run.get("run_id"), "run id")
            if run.get("run_folder") is not None:
                safe_name(run["run_folder"], "run folder")
            for a in run.get("artifacts") or ():
                if not isinstance(a, str) or ".." in Path(a).parts or Path(a).is_absolute():
                    raise BundleError(f"an artifact path {a!r} leaves the run's artifacts")
        except BundleError as e:
            problems.append(Problem("unsafe", rel, str(e)))
            continue
        arts = top / "mlflow" / "artifacts" / str(run.get("run_id"))
        problems += [
            Problem(
                "artifact", f"mlflow/artifacts/{run.get('run_id')}/{a}", f"an artifact of run {run.get('run_name')}"
            )
            for a in run.get("artifacts") or ()
            if not (arts / a).is_file()
        ]
        problems += [Problem("metric", rel, d) for d in metric_differences(top, run)]
    return problems


def latest(history: list[dict]) -> float | None:
    """A metric's current value as MLflow shows it.

    The value at the largest step, then the latest time.
    """
    if not history:
        return None
    last = max(history, key=lambda m: (m.get("step") or 0, m.get("timestamp") or 0))
    return math.nan if last.get("value") is None else float(last["value"])


def expected_metrics(result, run: dict) -> dict[str, float | None]:
    """What result.json says a run's metrics are.

    The agent run's outcome, or an eval run's evaluation (None for any other run). ``result``: the
    run's :class:`bench.result.RunResult`.
    """
    kind = (run.get("tags") or {}).get(schema.KIND)
    official = schema.official_metric(result.metric)
    if kind == schema.KIND_AGENT:
        out = {
            schema.SUCCESS: 1.0 if result.status == "success" else 0.0,
            schema.WALL_TIME: result.wall_time_s,
            schema.BUDGET_UTILISATION: result.budget_utilisation,
            schema.CHECKPOINTS: result.checkpoints_found,
            schema.TASK_BASELINE: result.baseline_score,
        }
        if result.score is not None:
            out |= {schema.SCORE: result.score, official: result.score, schema.BEST_VAL: result.outcome.best_val_score}
        return out
    if kind == schema.KIND_EVAL:
        name = str(run.get("run_name") or "")
        for e in result.evaluations:
            if f"eval {Path(e.path).name}"[:250] == name:
                out = {schema.EVAL_VAL_SCORE: e.val_score, schema.EVAL_SAVED_MINUTES: e.saved_s / 60}
                if e.official.value is not None:
                    out[official] = e.official.value
                return out
    return {}


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def metric_differences(top: Path, run: dict) -> list[str]:
    """The metrics of one run JSON that differ from its run folder's result.json.

    Agent and eval runs.
    """
    from bench.result import ResultError, RunResult

    folder = run.get("run_folder")
    if not folder:
        return []
    path = top / "runs" / folder / "result.json"
    if not path.is_file():
        return [f"run {run.get('run_name')}: its run folder runs/{folder} has no result.json"]
    try:
        result = RunResult.load(path)
    except ResultError as e:
        return [f"run {run.get('run_name')}: runs/{folder}/result.json unreadable ({e})"]
    metrics = run.get("metrics") or {}
    out = []
    for key, want in expected_metrics(result, run).items():
        got = latest(metrics.get(key) or [])
        if not _same(got, want):
            now = "absent" if got is None else f"= {got}"
            out.append(f"run {run.get('run_name')} ({folder}): metric {key} {now} in MLflow, {want} in result.json")
    return out
