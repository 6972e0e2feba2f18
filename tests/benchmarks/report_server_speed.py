"""Benchmark: ``bench report`` through an MLflow server on PostgreSQL vs straight on the database (prints figures).

    python tests/benchmarks/report_server_speed.py [--keep DIR] [--repeat 2] [--smoke]

1. A private PostgreSQL cluster (``bench.tracking.postgres.Cluster``, in a temporary folder or ``--keep DIR`` to
   keep and reuse it) and MLflow's server on its ``mlflow`` database (``bench.tracking.server.start``, lean flags).
2. The synthetic campaign of ``report_speed.py`` (245 agent runs, 2,940 script runs, ~700 eval runs, tagged
   ``bench.synthetic=true``) written straight into the database through the harness's MlflowWriter.
3. ``bench report`` as a user runs it, a new process each time: with ``MLFLOW_TRACKING_URI`` the database URL; the
   server's URL (runs through the API, histories in bulk requests: ``bench/tracking/server_reader.py``); the server's
   URL with ``BENCH_TRACKING_DB`` naming its database (what ``bench server`` prints: the tables are read directly).
   Issue #16 measured 7.5 s on the database and 160 s through the server (one history request per script run).

The three paths alternate run by run. ``--smoke``: a campaign of 2 agents x 2 tasks x 1 repeat, 2 script runs
each, one report on each path (to check that the script works).

Needs PostgreSQL's programs (Debian's postgresql package) and the ``postgres`` extra (psycopg).
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

from tests.benchmarks.figures import Span, add_smoke, ratio, seconds  # noqa: E402

CAMPAIGN = "synthetic-245x12"


def _time_report(uri: str, out: Path, database: str = "") -> tuple[float, str]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    env.pop("BENCH_TRACKING_DB", None)
    if database:
        env["BENCH_TRACKING_DB"] = database
    cmd = [str(Path(sys.executable).parent / "bench"), "report", "--experiment", CAMPAIGN, "--out", str(out)]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"bench report failed on {uri}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return wall, f"{len(list(out.iterdir()))} files"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keep", type=Path, help="keep the cluster (and its generated campaign) here, reused when present")
    p.add_argument("--repeat", type=int, default=2, help="reports to time on each path (default 2)")
    add_smoke(p)
    args = p.parse_args()
    size = dict(agents=2, tasks=2, repeats=1, scripts=2, evals=1) if args.smoke else {}
    if args.smoke:
        args.repeat = 1

    from bench.tracking import postgres, server
    from tests.pg import free_port

    tmp = Path(tempfile.mkdtemp(prefix="bench-report-server-"))
    os.chmod(tmp, 0o755)
    root = (args.keep or tmp / "pg").resolve()
    cluster = postgres.Cluster(root, port=free_port())
    cluster.start()
    running = None
    try:
        db = cluster.uri("mlflow")
        os.environ["MLFLOW_TRACKING_URI"] = db
        from bench.tracking import store

        eid = store.client().get_experiment_by_name(CAMPAIGN)
        if eid is None:
            import importlib.util

            spec = importlib.util.spec_from_file_location("synthetic", ROOT / "tests" / "analysis" / "synthetic.py")
            synthetic = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(synthetic)
            t = time.perf_counter()
            counts = synthetic.generate(CAMPAIGN, **size)
            print(
                f"generated {counts['agent']} agent runs, {counts['script']} script runs, {counts['eval']} eval runs "
                f"(synthetic) into PostgreSQL in {time.perf_counter() - t:.0f} s"
            )
        running = server.start(db, tmp / "artifacts", port=free_port(), log=tmp / "server.log")
        paths = {"database": (db, ""), "server": (running.url, ""), "server+db": (running.url, db)}
        figures: dict[str, list[float]] = {path: [] for path in paths}
        span = Span()
        for i in range(args.repeat):
            for path, (uri, database) in paths.items():
                wall, files = _time_report(uri, tmp / f"report-{path}-{i}", database)
                figures[path].append(wall)
                print(f"{path:9} run {i + 1}: {wall:.2f} s ({files})", flush=True)
        load = os.getloadavg()[0]
        med = {path: statistics.median(times) for path, times in figures.items()}
        print(f"\nmachine: {os.cpu_count()} CPUs, load average {load:.1f} at the end (other work slows the figures)")
        print(
            f"bench report on 245 agent runs x 12 script runs, median: {med['database']:.2f} s on the database, "
            f"{med['server']:.2f} s through the server ({med['server'] / med['database']:.2f}x), "
            f"{med['server+db']:.2f} s through the server with BENCH_TRACKING_DB "
            f"({med['server+db'] / med['database']:.2f}x)"
        )
        what = f"bench report, median of {args.repeat}, the paths alternating" + (" (smoke)" if size else "")
        fastest = {path: seconds(min(times)) for path, times in figures.items()}
        for path, fid in (("database", "database"), ("server", "server"), ("server+db", "server_db")):
            span.figure(f"report_server_speed.{fid}", seconds(med[path]), f"{path}, {what}")
            span.figure(f"report_server_speed.{fid}.fastest", fastest[path], f"{path}, fastest of {args.repeat}")
        span.figure("report_server_speed.server.ratio", ratio(med["server"] / med["database"]), "server / database")
        return 0
    finally:
        if running is not None:
            running.stop()
        if args.keep is None:
            cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
