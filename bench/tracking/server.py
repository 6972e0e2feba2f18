"""``bench server``.

One MLflow tracking server for a campaign on many nodes, on PostgreSQL, one artifact root.

Why a server: the harness on every node writes through it
(``MLFLOW_TRACKING_URI=http://HEAD:5000``), the UI and ``bench report`` read through it, and
checkpoints go through it into one artifact root (``--artifacts-destination``, a folder of the head
node, or a shared file system) so that no node needs the others' disks. Why PostgreSQL behind it:
many writers at once (see :mod:`bench.tracking.postgres`); the same PostgreSQL server keeps Optuna's
studies (``--storage`` of ``bench baselines tune`` and the ``optuna`` agent) in a database beside
MLflow's (``.../optuna``: not MLflow's own, since both keep their schema version in a table named
``alembic_version``).

The server is MLflow's own, started lean (measured: ``mlflow ui`` defaults to 15
processes and 2.4 GB; one worker and no job runner, 2 processes and ~0.5 GB):
``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow server --backend-store-uri DB
--artifacts-destination DIR --workers N``. Before it starts, the database is created if missing and
MLflow's schema is created once, under PostgreSQL's advisory lock (:mod:`bench.tracking.store`), so
that a server with several workers and harness processes starting with it never race for it.

    bench server --postgres ~/bench-pg   # a private PostgreSQL cluster in ~/bench-pg, its server
    bench server --backend-store-uri postgresql+psycopg://bench:PW@dbhost/campaign --host 0.0.0.0
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.tracking import store


@dataclass
class Server:
    """A running MLflow server started by :func:`start`."""

    proc: subprocess.Popen
    url: str  # what clients set as MLFLOW_TRACKING_URI
    backend: str  # the database behind it (also the Optuna storage URL)
    artifacts: Path

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and its workers (its own process group)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=timeout)


def mlflow_bin() -> str:
    """The ``mlflow`` of this environment (the one whose MLflow the harness uses)."""
    here = Path(sys.executable).parent / "mlflow"
    return str(here) if here.exists() else "mlflow"


def command(
    backend: str, artifacts: Path, host: str, port: int, workers: int = 1, allowed_hosts: str | None = None
) -> list[str]:
    """The lean ``mlflow server`` command line.

    It runs with ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` in its env.
    """
    cmd = [mlflow_bin(), "server", "--backend-store-uri", backend, "--artifacts-destination", str(artifacts)]
    cmd += ["--host", host, "--port", str(port), "--workers", str(workers)]
    if allowed_hosts:
        cmd += ["--allowed-hosts", allowed_hosts]
    return cmd


def public_hosts(port: int) -> str:
    """Host headers a server on every interface accepts.

    This machine's names, localhost and private addresses (MLflow's default without
    ``--allowed-hosts`` is only the last two, which refuses ``http://node01:5000``).
    """
    names = {socket.gethostname(), socket.getfqdn()}
    allowed = [f"{n}{p}" for n in sorted(names) for p in ("", f":{port}")]
    return ",".join(allowed + ["localhost", "localhost:*", "127.0.0.1", "127.0.0.1:*", "10.*", "192.168.*", "172.*"])


def prepare(backend: str) -> None:
    """The database and MLflow's schema, once, under the lock harness processes take for it too.

    The database is created if missing (:func:`bench.tracking.postgres.advisory_lock`); this
    process's tracking URI is left as it is.
    """
    from mlflow.tracking import MlflowClient

    with store.schema_lock(backend):
        MlflowClient(tracking_uri=backend).search_experiments(max_results=1)  # creates the schema on first use


def start(
    backend: str,
    artifacts: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 5000,
    workers: int = 1,
    allowed_hosts: str | None = None,
    log: Path | None = None,
    timeout_s: float = 180.0,
) -> Server:
    """Prepare the database, start the server in its own process group, wait until it answers."""
    prepare(backend)
    artifacts = Path(artifacts).resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    if allowed_hosts is None and host not in ("127.0.0.1", "localhost"):
        allowed_hosts = public_hosts(port)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (the server's stdout for its whole life)
    proc = subprocess.Popen(
        command(backend, artifacts, host, port, workers, allowed_hosts),
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if log:
        out.close()
    name = "127.0.0.1" if host in ("0.0.0.0", "127.0.0.1", "localhost") else host
    server = Server(proc, f"http://{name}:{port}", backend, artifacts)
    try:
        wait_ready(server, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def wait_ready(server: Server, timeout_s: float) -> None:
    """Poll ``/health`` until the server answers.

    Raises if it exits or stays silent for ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise store.StoreError(f"mlflow server exited with {server.proc.returncode} (backend {server.backend})")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"mlflow server at {server.url} did not answer within {timeout_s:.0f} s")


def optuna_storage(backend: str) -> str:
    """Optuna's storage URL beside an MLflow database.

    The same server and credentials, database ``optuna`` (created on first use:
    :func:`baselines.agent.rdb_storage`).
    """
    import sqlalchemy

    if not backend.startswith(("postgresql", "mysql")):
        return backend.replace("mlflow.db", "optuna.db") if backend.startswith("sqlite") else backend
    return sqlalchemy.engine.make_url(backend).set(database="optuna").render_as_string(hide_password=False)


# --- bench server ---------------------------------------------------------------------------------
def add_cli(sub) -> None:
    """Add ``bench server`` to the command line's subcommands."""
    s = sub.add_parser(
        "server",
        help="a shared MLflow tracking server on PostgreSQL for a campaign on many nodes (see README)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument(
        "--postgres", type=Path, metavar="DIR", help="start (or create) a private PostgreSQL in DIR (127.0.0.1 only)"
    )
    s.add_argument("--pg-port", type=int, default=5432, help="its port (default 5432)")
    s.add_argument("--database", default="mlflow", help="the database on it (default mlflow)")
    s.add_argument("--backend-store-uri", metavar="URL", help="an existing database instead: postgresql+psycopg://...")
    s.add_argument("--artifacts-destination", type=Path, help="the artifact root (default: mlruns/artifacts)")
    s.add_argument("--host", default="127.0.0.1", help="0.0.0.0 for the other nodes (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=5000)
    s.add_argument("--workers", type=int, default=1, help="server worker processes (default 1: ~0.5 GB)")
    s.add_argument("--allowed-hosts", help="Host headers accepted (default for 0.0.0.0: this machine's names)")
    s.set_defaults(func=cmd_server)


def cmd_server(args: argparse.Namespace) -> int:
    """Run ``bench server`` until it is stopped; exit 2 for a wrong pair of flags."""
    from bench.tracking import postgres

    if bool(args.postgres) == bool(args.backend_store_uri):
        print("bench server: give --postgres DIR (a private cluster) or --backend-store-uri URL", file=sys.stderr)
        return 2
    cluster = None
    backend = args.backend_store_uri
    if args.postgres:  # local connections only: it trusts them (the nodes talk to the MLflow server, not to it)
        cluster = postgres.Cluster(args.postgres.resolve(), args.pg_port)
        cluster.start()
        backend = cluster.uri(args.database)
    artifacts = args.artifacts_destination or store.artifact_root()
    server = start(
        backend, artifacts, host=args.host, port=args.port, workers=args.workers, allowed_hosts=args.allowed_hosts
    )
    shown = server.url if args.host != "0.0.0.0" else f"http://{socket.getfqdn()}:{args.port}"
    print(
        f"MLflow server on {shown} (backend {backend}, artifacts {server.artifacts}); Ctrl-C to stop.\n"
        f"On every node:  export MLFLOW_TRACKING_URI={shown}\n"
        f"Optuna storage: --storage {optuna_storage(backend)}\n"
        f"Fast reports:   export {store.DATABASE_ENV}={backend}  (bench report reads its tables)",
        flush=True,
    )
    try:
        return server.proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
        if cluster is not None:
            cluster.stop()
