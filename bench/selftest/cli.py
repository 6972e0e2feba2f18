"""``bench selftest``.

The GPU proof kit's command line (the package docstring says how to run it where).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_selftest(args: argparse.Namespace) -> int:
    """Run ``bench selftest`` with the parsed flags; exit 0 when every check passed."""
    from bench.selftest import kit

    return kit.main(args.device, args.out, args.work, args.t1_steps, args.keep, args.eval_runs)


def add_cli(sub) -> None:
    """Add ``bench selftest`` to the command line's subcommands."""
    s = sub.add_parser(
        "selftest",
        help="the GPU proof kit: CUDA in the sandbox, T6 baseline, T1 steps/s bare vs bench run, evaluation cost",
    )
    s.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="cuda: prove the card; cpu: test the kit itself with small budgets (CI); auto: cuda if seen",
    )
    s.add_argument("--out", type=Path, default=Path("selftest-report"), help="where selftest.json/.md go")
    s.add_argument("--work", type=Path, help="keep the runs, store and cache here (default: a temporary folder)")
    s.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    s.add_argument("--t1-steps", type=int, help="T1 training steps timed (default: 300 on cuda, 40 on cpu)")
    s.add_argument("--eval-runs", type=int, default=1, help="repeats of each timed evaluation (the median is shown)")
    s.set_defaults(func=cmd_selftest)
