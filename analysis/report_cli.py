"""The ``bench report`` sub-command's arguments, and the campaign summaries the run commands write, apart from the
report itself.

``bench`` builds its whole parser on every start, ``bench run`` included; the report pulls in pandas and matplotlib
(about 0.6 s here), so this module names the arguments with argparse alone and imports :mod:`analysis.report`
only when ``bench report`` (or ``python -m analysis.report_cli``) actually runs, or a summary is written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path


def cmd_report(args: argparse.Namespace) -> int:
    from analysis import report

    return report.cmd_report(args)


def write_summaries(campaigns: Iterable[str], prefix: str = "[bench]") -> None:
    """The campaign summary of each campaign (:mod:`analysis.summary`: Agg per entry and the report, as MLflow runs),
    one printed line each; what ``bench run`` and ``bench campaign run`` do at their end. Best effort: a failure is
    one line, since the runs are recorded and the command's exit status is theirs."""
    try:
        from analysis import summary
        from analysis.report import write_report
    except Exception as e:  # the analysis cannot even be imported: the runs still stand
        print(f"{prefix} campaign summary not written: {type(e).__name__}: {e}", flush=True)
        return
    for campaign in dict.fromkeys(campaigns):
        print(f"{prefix} {summary.summary_line(campaign, render=write_report)}", flush=True)


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Add the ``report`` sub-command to ``bench``'s sub-parsers (``set_defaults(func=cmd_report)``)."""
    s = subparsers.add_parser("report", help="leaderboard, the paper's tables and figures, anytime curves, timelines")
    s.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="MLflow experiment (campaign) to report; repeat for several (default: the latest campaign, named in "
        "the output)",
    )
    s.add_argument(
        "--out", default="report", help="output folder (default: ./report, which git ignores in the toolkit's clone)"
    )
    s.add_argument("--published", action="store_true", help="add the paper's published rows")
    s.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="entries for the paired comparison, e.g. 'Opus 4.7' 'mine:baseline' (default: top two)",
    )
    s.add_argument(
        "--include-nonstandard",
        action="store_true",
        help="with --published: keep runs made outside the paper's protocol (budget, hardware, sandbox, data), "
        "marked; by default they are left out of the comparison with the paper",
    )
    s.add_argument(
        "--calibration",
        action="store_true",
        help="add the Optuna-tuned row (baselines/results/*.json), labelled with where and how it was tuned",
    )
    s.add_argument(
        "--calibration-dir",
        type=Path,
        default=None,
        help="tuned-baseline results for the Optuna-tuned row (default: baselines/results; implies --calibration)",
    )
    s.add_argument(
        "--record",
        action="store_true",
        help="also (re)write the campaign's summary runs in the store, as the campaign does when it ends (by "
        "default a report only reads the store)",
    )
    s.set_defaults(func=cmd_report)
    return s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.report_cli")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
