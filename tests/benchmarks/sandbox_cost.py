"""Benchmark: what the sandbox and the trusted scoring cost (prints figures; not a test).

    python tests/benchmarks/sandbox_cost.py [--runs 10] [--eval-runs 3] [--data-mirror DIR] [--smoke]

1. Sandbox start-up per agent run: ``python -c pass`` started bare and through the agent sandbox (bwrap + the
   launcher), alternately, ``--runs`` times each; the extra is the difference of the medians.
2. Per traced script inside a running sandbox: a workspace script started by a shell that already runs inside
   the sandbox, vs the same shell outside (the namespaces exist already; nothing is set up per script).
3. Official evaluation of one T6 and one T1 baseline checkpoint: before (the task's in-process evaluation, what
   ``prepare.py --eval`` did before the scorer existed: one process that imports the agent's script) vs after
   (``python -I -m bench.scoring.scorer``: scorer + sandboxed predictor + a second predictor for the probes).
   T6 on the real ETTh1 file and T1 on the real TinyShakespeare (from ``--data-mirror`` or $BENCH_DATA_MIRROR).

Each pair of figures is measured side by side, alternating run by run. ``--smoke``: 2 start-ups, one evaluation of
each (to check that the script works).

Targets: under 1 s extra per run, under 2x the evaluation time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke, ratio  # noqa: E402


def timed(argv: list[str], **kw) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t0


def startup(runs: int, ws: Path) -> None:
    from bench.sandbox import Policy, Sandbox, default_hidden, default_readable

    box = Sandbox(Policy(cwd=ws, writable=(ws,), readable=default_readable(), hidden=default_hidden()))
    bare, boxed = [], []
    argv = [sys.executable, "-c", "pass"]
    span = Span()
    for _ in range(runs):
        bare.append(timed(argv, cwd=ws))
        boxed.append(timed(box.wrap(argv), cwd=ws))
    mb, ms = statistics.median(bare), statistics.median(boxed)
    print(f"start-up per run: bare {mb:.3f} s, sandboxed {ms:.3f} s (median of {runs}): +{ms - mb:.3f} s")
    what = f"python -c pass: {1000 * mb:.0f} ms bare, {1000 * ms:.0f} ms sandboxed, medians of {runs}"
    span.figure("sandbox_cost.startup_extra", f"{1000 * (ms - mb):+.0f} ms", what)
    span.figure("sandbox_cost.startup_bare", f"{1000 * mb:.0f} ms", what)
    span.figure("sandbox_cost.startup_sandboxed", f"{1000 * ms:.0f} ms", what)

    span = Span()
    loop = f"for i in $(seq {runs}); do {sys.executable} -c pass; done"
    outside = timed(["/bin/sh", "-c", loop], cwd=ws) / runs
    inside = (timed(box.wrap(["/bin/sh", "-c", loop]), cwd=ws) - ms) / runs
    print(f"per script inside a running sandbox: {inside:.3f} s vs {outside:.3f} s outside ({runs} scripts)")
    span.figure("sandbox_cost.script_inside", f"{1000 * inside:.0f} ms", f"per script, {runs} scripts")
    span.figure("sandbox_cost.script_outside", f"{1000 * outside:.0f} ms", f"per script, {runs} scripts")
    box.close()


def prepared(task_name: str, mirror: Path, cache: Path) -> tuple[object, Path]:
    os.environ["BENCH_DATA_MIRROR"] = str(mirror)
    os.environ["BENCH_CACHE_DIR"] = str(cache)
    from bench.tasks import data, get_task

    task = get_task(task_name)
    return task, data.prepare(task, progress=False)


def evaluation(task_name: str, mirror: Path, tmp: Path, runs: int) -> None:
    from bench.pipeline.evaluate import CHECKPOINT, stage

    task, data_dir = prepared(task_name, mirror, tmp / "cache")
    ws = tmp / f"ws-{task.id}"
    ws.mkdir()
    for name in ("prepare.py", "train.py", *task.extra_locked):
        shutil.copyfile(task.file(name), ws / name)
    os.symlink(data_dir, ws / "data")
    train = subprocess.Popen([sys.executable, "train.py"], cwd=ws, stdout=subprocess.DEVNULL)
    while train.poll() is None and not list((ws / "checkpoints").glob("*.pt")):  # the first checkpoint will do
        time.sleep(0.5)
    train.kill()
    train.wait()
    ckpt = sorted((ws / "checkpoints").glob("*.pt"))[0]
    eval_dir = stage(task, ws, tmp / f"eval-{task.id}", ckpt)
    before = [sys.executable, "prepare.py", "--eval", str(ckpt), "--device", "cpu"]
    if task.id == "t6":
        before += ["--split", "test"]
    after = [sys.executable, "-I", "-m", "bench.scoring.scorer", "--task-dir", str(task.folder)]
    after += ["--data-dir", str(data_dir), "--eval-dir", str(eval_dir), "--checkpoint", CHECKPOINT]
    after += ["--script", "train.py", "--device", "cpu"]
    old, new = [], []
    span = Span()
    for _ in range(runs):
        old.append(timed(before, cwd=ws))
        new.append(timed(after, cwd=tmp))
    mo, mn = statistics.median(old), statistics.median(new)
    print(
        f"{task.id} evaluation: in-process {mo:.2f} s, scorer + 2 sandboxed predictors {mn:.2f} s "
        f"(median of {runs}): {mn / mo:.2f}x"
    )
    what = f"{task.id.upper()} baseline checkpoint: {mn:.2f} s sandboxed vs {mo:.2f} s in one process, median of {runs}"
    span.figure(f"sandbox_cost.{task.id}.eval_ratio", ratio(mn / mo), what)
    span.figure(f"sandbox_cost.{task.id}.eval_sandboxed", f"{mn:.2f} s", what)
    span.figure(f"sandbox_cost.{task.id}.eval_in_process", f"{mo:.2f} s", what)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--eval-runs", type=int, default=3)
    parser.add_argument("--data-mirror", type=Path, default=os.environ.get("BENCH_DATA_MIRROR"))
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.eval_runs = 2, 1
    with tempfile.TemporaryDirectory(prefix="sandbox-cost-") as tmp:
        tmp = Path(tmp)
        (tmp / "ws").mkdir()
        startup(args.runs, tmp / "ws")
        if not args.data_mirror:
            print("evaluation: skipped (set --data-mirror or BENCH_DATA_MIRROR)")
            return
        evaluation("t6", args.data_mirror, tmp, args.eval_runs)
        evaluation("t1", args.data_mirror, tmp, args.eval_runs)


if __name__ == "__main__":
    main()
