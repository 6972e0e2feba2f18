"""``bench export`` and ``bench import``.

The command line of campaign bundles (:mod:`bench.bundle.archive`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

TRACKING_URI = "MLFLOW_TRACKING_URI"  # MLflow's own variable: the store in force (bench.tracking.store reads it)


@contextlib.contextmanager
def tracking_uri(uri: str | None) -> Iterator[None]:
    """The store named by ``--tracking-uri`` for the length of one command.

    The variable is put back as it was afterwards.
    """
    if not uri:
        yield
        return
    before = os.environ.get(TRACKING_URI)
    os.environ[TRACKING_URI] = uri
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TRACKING_URI, None)
        else:
            os.environ[TRACKING_URI] = before


def cmd_export(args: argparse.Namespace) -> int:
    """``bench export``, against the store ``--tracking-uri`` names."""
    from bench.bundle import export as bundle_export

    with tracking_uri(args.tracking_uri):
        return bundle_export.main(args.campaign, args.bundle, args.runs_dir, args.quiet)


def cmd_import(args: argparse.Namespace) -> int:
    """``bench import``, into the store ``--tracking-uri`` names."""
    from bench.bundle import importer as bundle_import

    with tracking_uri(args.tracking_uri):
        return bundle_import.main(args.bundle, args.runs_dir, args.force, args.quiet, name=args.as_name)


def add_cli(sub) -> None:
    """Add ``bench export`` and ``bench import`` to the command line's sub-commands."""
    store = "the tracking store (default: $MLFLOW_TRACKING_URI, else the embedded store)"
    s = sub.add_parser(
        "export",
        help="write a campaign's MLflow runs and run folders as one bundle (.tar.gz) with a manifest of sha256s",
    )
    s.add_argument("campaign", help="the campaign (= MLflow experiment) to export")
    s.add_argument("bundle", help="the archive to write, e.g. mine.tar.gz")
    s.add_argument("--tracking-uri", help=store)
    s.add_argument("--runs-dir", help="where the run folders are when their recorded place moved")
    s.add_argument("--quiet", action="store_true", help="no progress line per run")
    s.set_defaults(func=cmd_export)
    s = sub.add_parser("import", help="load a bundle of `bench export` into a tracking store (twice adds nothing)")
    s.add_argument("bundle", help="the archive `bench export` wrote")
    s.add_argument("--tracking-uri", help=store)
    s.add_argument("--runs-dir", help="where the run folders go (default: this machine's folder of the campaign)")
    s.add_argument("--force", action="store_true", help="import even where files differ from the manifest")
    s.add_argument(
        "--as",
        dest="as_name",
        metavar="NEW_NAME",
        help="import the campaign under this name (an import never merges into a campaign the store already has)",
    )
    s.add_argument("--quiet", action="store_true", help="no progress line per run")
    s.set_defaults(func=cmd_import)
