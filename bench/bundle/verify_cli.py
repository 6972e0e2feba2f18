"""``bench verify RUN|CAMPAIGN|BUNDLE``.

Which runs to check, the table of recorded vs recomputed, the exit status.

The target is told apart by what it is on disk, in this order: a bundle of ``bench export`` (a file,
or a folder with the bundle's manifest: :func:`bench.bundle.archive.check` names every file that
differs from the manifest, every MLflow metric that differs from its run's result.json and every
artifact missing, then its runs are extracted and checked), a run directory, a folder of run
directories, or a campaign's name (its folder of run directories). Each run is checked by
:func:`bench.bundle.verify.verify_run`; runs on disk are also compared with the tracking store
(:mod:`bench.bundle.verify_store`). Exit 0 when everything matches, 1 when anything differs, 2 for a
target that is none of these (:class:`bench.errors.InputError`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import settings
from bench.errors import InputError
from bench.markup import one_line
from bench.progress import StatusLine
from bench.result import ResultError, RunResult
from bench.rundir import RESULT_FILE, RunDir

WIDE = 26  # the run and checkpoint columns (names are cut with an ellipsis beyond it)


def targets(target: str, stack: contextlib.ExitStack) -> tuple[list[Path], list[str], bool]:
    """What ``target`` names, as three values.

    (the run directories to check, the bundle's own problems, whether they came from a bundle).
    """
    from bench.bundle import archive as bundle
    from bench.pipeline import workspace

    path = Path(target)
    is_bundle = path.is_file() or (path.is_dir() and _has_manifest(path))
    if is_bundle:
        try:
            problems = [str(p) for p in bundle.check(path)]
            runs = bundle.extract(path, Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-verify-"))))
        except bundle.BundleError as e:
            raise InputError(str(e)) from e
        folders = sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []
        return folders, [*problems, *_without_folder(runs)], True
    if path.is_dir() and RunDir(path).is_run_dir():
        if not (path / RESULT_FILE).is_file():
            raise InputError(f"{path} has no result.json: finish the run first (bench run --resume)")
        return [path], [], False
    folder = path if path.is_dir() else workspace.campaign_dir(target)
    runs = sorted(p for p in folder.iterdir() if RunDir(p).is_run_dir()) if folder.is_dir() else []
    if not runs:
        raise InputError(
            f"verify: {target!r} is no run directory, campaign or bundle (no campaign folder {folder}); give "
            "the run dir bench run printed, a campaign's name, or a .tar.gz of bench export"
        )
    return runs, [], False


def _without_folder(runs: Path) -> list[str]:
    """The bundle's agent runs whose run folder it does not hold (``bench export`` found none).

    Each named, since nothing of such a run can be re-scored or re-audited.
    """
    from bench.bundle import archive as bundle
    from bench.tracking import schema

    out = []
    for path in sorted((runs.parent / "mlflow" / "runs").glob("*.json")):
        try:
            run = bundle.read_json(path)
        except bundle.BundleError:
            continue  # named by the bundle's own check
        if not isinstance(run, dict):
            continue
        if (run.get("tags") or {}).get(schema.KIND) != schema.KIND_AGENT:
            continue
        folder = str(run.get("run_folder") or "")
        if not folder or not (runs / folder / RESULT_FILE).is_file():
            name = one_line(run.get("run_name") or run.get("run_id"), 120)
            out.append(f"MLflow run {name}: the bundle holds no run folder{f' runs/{folder}' if folder else ''} with "
                       "its result.json: it cannot be re-scored")  # fmt: skip
    return out


def _has_manifest(path: Path) -> bool:
    from bench.bundle import archive as bundle

    return (path / bundle.MANIFEST).is_file() or any((p / bundle.MANIFEST).is_file() for p in path.iterdir())


PROVED = (
    "re-computed here: each recorded checkpoint, staged with its recorded code and the task's locked files, scores "
    "as recorded under the recorded probes on this machine's own copy of the data; the audit of the recorded "
    "evidence gives the recorded verdict; the MLflow records agree with result.json{bundle}."
)
NOT_PROVED = (
    "not proved, and no bundle can prove it: that the checkpoints, the times and the evidence came from a run of "
    "that agent within that budget (whoever produced the files can rewrite them consistently); a published sha256 "
    "of the archive proves only which bundle was published."
)


def cmd_verify(args: argparse.Namespace) -> int:
    """``bench verify``: 0 when everything matches, 1 when something differs, 2 for bad input."""
    tasks = {"BENCH_TASKS_DIR": Path(args.tasks_dir).resolve()} if args.tasks_dir else {}
    if args.jobs < 1:
        raise InputError(f"--jobs {args.jobs}: give 1 or more runs to verify side by side")
    with contextlib.ExitStack() as stack:
        stack.enter_context(settings.override(**tasks))
        run_dirs, problems, from_bundle = targets(args.target, stack)
        experiment = None if from_bundle or Path(args.target).exists() else args.target  # a campaign by its name
        checks = run_all(run_dirs, device=args.device, store=not from_bundle, quiet=args.quiet, jobs=args.jobs,
                         experiment=experiment)  # fmt: skip
    print_table(checks)
    print_software(checks)
    differences = [*problems, *(f"{c.label}: {d}" for c in checks for d in c.differences)]
    if problems:
        print(f"\nthe bundle ({len(problems)} difference(s) from its manifest or its records):")
        for p in problems:
            print(f"  - {one_line(p, 400)}")
    for c in checks:
        if c.differences or c.flags:
            print(f"\n{one_line(c.label, 200)} ({c.run_dir}):")
            for d in c.differences:
                print(f"  - {one_line(d, 600)}")
            for f in c.flags:
                print(f"  - score check, {one_line(f, 600)}")
            if c.versions:
                print(f"  (this machine's software differs from the run's: {', '.join(c.versions)})")
    n = len(checks)
    if flagged := [c for c in checks if c.flags]:
        why = "a checkpoint or script that carries the evaluation's targets, or a score outside what the task allows"
        print(f"\nbench verify: {len(flagged)} of {n} run(s) flagged by the score checks ({why}): read the findings")
    if differences:
        where = f"{sum(bool(c.differences) for c in checks)} of {n} run(s)" + (" and the bundle" if problems else "")
        print(f"\nbench verify: {len(differences)} difference(s) in {where}: not what was recorded")
        print(NOT_PROVED)
        return 1
    if flagged:
        print(NOT_PROVED)
        return 1
    print(f"\nbench verify: {n} run(s) recomputed as recorded.")
    print(PROVED.format(bundle=", and the bundle's files agree with its manifest" if from_bundle else ""))
    print(NOT_PROVED)
    return 0


def print_software(checks: list) -> None:
    """The software the runs recorded beside this machine's, and which versions differ.

    A number that moved may have moved with them.
    """
    from bench import software

    here = software.versions()
    seen: list[dict] = []
    for c in checks:
        rec = getattr(c, "software", None) or {}
        if rec and rec not in seen:
            seen.append(rec)
    print("\nsoftware here:     " + ", ".join(f"{k} {v}" for k, v in here.items()))
    if not seen:
        print("software recorded: none (no run's result.json could be read)")
    for rec in seen:
        diff = software.differences(rec, here)
        print("software recorded: " + ", ".join(f"{k} {v}" for k, v in rec.items()))
        print("  differs here: " + ", ".join(diff) if diff else "  the same here")


def expectation(run_dirs: list[Path], device: str | None, jobs: int) -> str | None:
    """One line said before verify starts.

    How long the runs' evaluations took when they were recorded, and the most their re-scoring may
    take here (each candidate within :func:`bench.bundle.verify.timeout_s`).
    """
    from bench import protocol
    from bench.bundle import verify

    spent = most = 0.0
    for run_dir in run_dirs:
        try:
            result = RunResult.load(run_dir)
        except ResultError:
            continue
        rec = verify.recorded_device_of(result)
        here = device or (rec if rec == "cpu" or protocol.default_device() != "cpu" else "cpu")
        a, b = verify.expected_s(result, verify.same_kind(result, here, rec))
        spent, most = spent + a, most + b
    if not run_dirs:
        return None
    from bench.durations import fmt_s

    return (f"[verify] {len(run_dirs)} run(s): their evaluations took {fmt_s(spent)} when recorded; expect about "
            f"{fmt_s(spent / jobs)} plus staging here ({jobs} at a time), at most {fmt_s(most / jobs)}")  # fmt: skip


def run_all(
    run_dirs: list[Path],
    *,
    device: str | None,
    store: bool,
    quiet: bool,
    jobs: int = 1,
    experiment: str | None = None,
) -> list:
    """Each run verified (``jobs`` side by side), one line each as it ends.

    With a status line (runs done, time left) for many. ``experiment``: the MLflow experiment the
    runs are in, when it is not the campaign their result.json names (a campaign imported ``--as``
    another name).
    """
    from concurrent.futures import ThreadPoolExecutor

    from bench.bundle import verify, verify_store

    results: dict[Path, RunResult] = {}
    status = StatusLine("bench verify", every_s=15.0, enabled=not quiet and len(run_dirs) > 1)
    if not quiet and (line := expectation(run_dirs, device, jobs)):
        print(line, file=sys.stderr, flush=True)
    t0 = time.monotonic()
    lock = threading.Lock()
    done: list = []

    def one(run_dir: Path):
        try:
            result = RunResult.load(run_dir) if (run_dir / RESULT_FILE).is_file() else None
        except ResultError as e:
            result, why = None, f"result.json cannot be read: {one_line(e, 300)}"
        else:
            why = "no result.json: the run is not finished (bench run --resume)"
        if result is None:
            check = verify.RunCheck(run_dir.name, run_dir, "unreadable", None)
            check.differences.append(why)
        else:
            check = verify.verify_run(run_dir, result, device=device)
            check.software = dict(result.software)
        with lock:
            if result is not None:
                results[run_dir] = result
            done.append(check)
            said = "matches" if check.ok else f"{len(check.differences)} difference(s)"
            if not quiet:
                status.print(f"[verify] {one_line(check.label, 80)}: {said} ({check.seconds:.1f} s)")
            elapsed = time.monotonic() - t0
            status.set(runs=f"{len(done)}/{len(run_dirs)}", differ=sum(not c.ok for c in done))
            status.update(elapsed, elapsed / len(done) * (len(run_dirs) - len(done)))
        return check

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        checks = list(pool.map(one, run_dirs))  # in the targets' order, whatever order they end in
    status.close()
    if store and results:
        found = verify_store.differences(results, experiment=experiment)
        for check in checks:
            check.differences += found.get(check.run_dir, [])
    return checks


def _cut(text: object, width: int = WIDE) -> str:
    flat = one_line(text, 400)
    return flat if len(flat) <= width else flat[: width - 1] + "\u2026"


def _num(value: float | None) -> str:
    return "-" if value is None else repr(float(value))  # every digit: a bitwise comparison shows as one


def print_table(checks: list) -> None:
    """Per run: each candidate's recorded and recomputed official value, then the verdict row.

    Every digit of each value. The verdict row: the run's status recorded and recomputed, and
    whether its official score is the same.
    """
    head = f"{'run':{WIDE}} {'candidate':16} {'checkpoint':{WIDE}} {'recorded':>22} {'recomputed':>22}"
    head += f"  {'device':11} ok"
    print("\n" + head)
    for c in checks:
        dev = f"{c.recorded_device or '-'}->{c.device or '-'}"
        for cand in c.candidates:
            shown = _num(cand.recomputed.value) if cand.recomputed else (cand.note.split(":")[0] or "-")
            print(
                f"{_cut(c.label):{WIDE}} {_cut(','.join(cand.labels), 16):16} {_cut(cand.name):{WIDE}} "
                f"{_num(cand.recorded.value):>22} {_cut(shown, 22):>22}  {dev:11} {'yes' if _same(cand) else 'NO'}"
            )
        score = "score same" if c.score == c.recorded_score else "score DIFFERS"
        score = "score within tolerance" if c.score_ok and c.score != c.recorded_score else score
        now = c.status or "not recomputed"
        print(f"{_cut(c.label):{WIDE}} {'verdict':16} {score:{WIDE}} {c.recorded_status:>22} {_cut(now, 22):>22}  "
              f"{dev:11} {'yes' if c.ok else 'NO'}")  # fmt: skip


def _same(cand) -> bool:
    if cand.recomputed is None:
        from bench.bundle.verify import NOT_SCORED

        return cand.note.startswith(NOT_SCORED)  # nothing was scored at the run either
    return cand.recorded.value == cand.recomputed.value


def add_cli(sub) -> None:
    """Add ``bench verify`` to the command line's sub-commands."""
    s = sub.add_parser(
        "verify",
        help="re-score every scored candidate of a run, a campaign or a bundle from what it recorded, re-run the "
        "audit, and name every difference (exit 0: all match, 1: something differs, 2: bad input)",
    )
    s.add_argument("target", help="a run directory, a campaign's name, or a bundle of bench export (.tar.gz)")
    s.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="where to re-score (default: the recorded device if this machine has one, else cpu; another kind "
        "than the recorded is compared within the task's [scoring] verify_tolerance)",
    )
    s.add_argument(
        "--tasks-dir",
        metavar="DIR",
        help="the task folders to match by their recorded hash (default: BENCH_TASKS_DIR, the repository's tasks/)",
    )
    s.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="verify N runs side by side (each re-scoring is one scorer process; give at most the cores you can spare)",
    )
    s.add_argument("--quiet", action="store_true", help="no line per run, no status line")
    s.set_defaults(func=cmd_verify)
