"""Benchmark: what running the prober after the scored predictor costs (issue 29; prints figures, not a test).

    python tests/benchmarks/prober_order_cost.py [--runs 3] [--before COMMIT] [--smoke]

The trusted evaluation of one T6 checkpoint on generated ETTh1-shaped data (the real shapes: 2,785 test and 2,785
val windows; NOT the real values: the cost depends on the shapes), timed whole, alternately: the scorer of
``--before`` (a commit where the prober answered its probes in a thread beside the scored predictor on a CPU), and
the scorer of this working tree (the prober runs the agent's code only after the scored predictor has ended; it
is started beside it and held, so its Python and torch start-up still overlap). The model is eval_cost.py's T6
stand-in (one linear map over time), so the figures are the harness's own cost, not a model's. ``--smoke``: one run of
each (to check that the script works). Needs the git history (``--before`` must be in the clone).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.eval_cost import CLASSES, STANDIN, generate  # noqa: E402
from tests.benchmarks.figures import Span, add_smoke  # noqa: E402
from tests.conftest import write_etth1_like  # noqa: E402

BEFORE = "4459d4d"  # the last scorer whose prober answered beside the scored predictor


def checkout(commit: str, into: Path) -> Path:
    """The ``bench`` package of ``commit``, extracted into ``into`` (git archive: the working tree is not touched)."""
    blob = subprocess.run(["git", "archive", commit, "bench"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    # its predictor imports bench.scoring.wire through the editable install, which names this tree (whose files its
    # sandbox does not bind): it imports the extracted package instead
    predictor = into / "bench" / "scoring" / "predictor.py"
    line = "    from bench.scoring import wire  # the repo is readable in the sandbox\n"
    fix = "    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))\n"
    predictor.write_text(predictor.read_text().replace(line, fix + line))
    return into


def staged(tmp: Path) -> tuple[Path, Path, Path]:
    """(task folder, prepared data, staged evaluation folder with the stand-in and its checkpoint)."""
    import torch

    from bench.tasks import get_task

    task = get_task("t6")
    mirror = tmp / "mirror"
    write_etth1_like(mirror / "ETTh1" / "ETTh1.csv")
    data_dir = tmp / "data-t6"
    generate("t6", data_dir, np.random.default_rng(0), mirror)
    ev = tmp / "eval-t6"
    ev.mkdir()
    for name in task.locked_files:
        shutil.copyfile(task.file(name), ev / name)
    script = "import torch\nimport torch.nn as nn\n" + CLASSES["t6"]
    script += f"\n\ndef build_model(config):\n    return {STANDIN['t6']}\n"
    (ev / "standin.py").write_text(script)
    space: dict = {}
    exec(compile(script, "standin.py", "exec"), space)
    torch.manual_seed(0)
    payload = {"format": "1gc-7rc/checkpoint-v1", "state_dict": space["build_model"]({}).state_dict(), "config": {},
               "step": 0, "script": "standin.py", "val_score": 0.0, "metric": task.metric, "time": 0.0}  # fmt: skip
    torch.save(payload, ev / "checkpoint.pt")
    return task.folder, data_dir, ev


def timed(package_root: Path, args: list[str], cwd: Path) -> tuple[float, dict]:
    """The scorer whose ``bench`` package lies in ``package_root``, in a fresh process (exited with os._exit, as
    ``python -m bench.scoring.scorer`` does)."""
    code = (
        f"import os, sys; sys.path.insert(0, {str(package_root)!r}); from bench.scoring.scorer import main; "
        f"sys.stdout.flush(); os._exit(main({args!r}))"
    )
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=1200)
    seconds = time.perf_counter() - t0
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if out.get("error"):
        log = Path(args[args.index("--eval-dir") + 1]).with_suffix(".predictor.log")
        raise RuntimeError(f"{package_root}: {out['error']}\n{log.read_text()[-3000:] if log.is_file() else ''}")
    return seconds, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", default=BEFORE)
    add_smoke(parser)
    options = parser.parse_args()
    if options.smoke:
        options.runs = 1
    known = subprocess.run(["git", "cat-file", "-e", f"{options.before}^{{commit}}"], cwd=ROOT, capture_output=True)
    if known.returncode != 0:
        raise SystemExit(
            f"--before {options.before}: no such commit in {ROOT} (a shallow clone? git fetch --unshallow)"
        )
    with tempfile.TemporaryDirectory(prefix="prober-cost-") as tmp:
        tmp = Path(tmp)
        old = checkout(options.before, tmp / "before")
        task_dir, data_dir, ev = staged(tmp)
        args = ["--task-dir", str(task_dir), "--data-dir", str(data_dir), "--eval-dir", str(ev)]
        args += ["--checkpoint", "checkpoint.pt", "--script", "standin.py", "--device", "cpu"]
        times: dict[str, list[float]] = {"before": [], "after": []}
        span = Span()
        for _ in range(options.runs):
            for name, root in (("before", old), ("after", ROOT)):
                seconds, out = timed(root, args, tmp)
                times[name].append(seconds)
                print(f"{name}: {seconds:.2f} s (mse {out['value']:.4f}, {out['probes']['replayed']} replayed)")
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        pairs = statistics.median(y - x for x, y in zip(times["before"], times["after"], strict=True))
        print(f"median of {options.runs}: before {b:.2f} s, after {a:.2f} s, {a - b:+.2f} s ({a / b - 1:+.0%})")
        print(f"median of the {options.runs} paired differences (after - before, run by run): {pairs:+.2f} s")
        what = f"T6 stand-in, medians of {options.runs}, the two orders alternating"
        span.figure("prober_order_cost.before", f"{b:.2f} s", f"the scorer of {options.before}, {what}")
        span.figure("prober_order_cost.after", f"{a:.2f} s", f"this tree's scorer, {what}")
        span.figure("prober_order_cost.extra", f"{a - b:+.2f} s ({a / b - 1:+.0%})", f"after - before, {what}")


if __name__ == "__main__":
    main()
