"""PostgreSQL for a shared tracking store.

A private cluster, its database, and a lock for the schema.

Why PostgreSQL: a campaign on a cluster has many harness processes (one per run, on several nodes),
an MLflow server and Optuna workers writing at once; SQLite serialises them on one file that must be
local. One PostgreSQL database holds both MLflow's tables and Optuna's (their names do not overlap),
so a campaign has one place to back up.

- :class:`Cluster`: a private PostgreSQL cluster in a folder (``initdb`` + ``pg_ctl``, run as the
  ``postgres`` user when we are root, since PostgreSQL refuses to run as root), listening on
  127.0.0.1 and trusting local users. What ``bench server --postgres DIR`` and the tests
  (``tests/pg.py``) start; a site with its own PostgreSQL passes its URL instead.
- :func:`advisory_lock`: MLflow creates its schema on first use, and processes doing that at once
  collide (a UniqueViolation). :mod:`bench.tracking.store` creates it under PostgreSQL's advisory
  lock, held on the server's ``postgres`` database so that it can be taken before the campaign's
  database exists; that database is created then if it is missing (:func:`create_database`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError

SCHEMA_LOCK = 0x1C7_5C4E  # the advisory lock key under which the schema is created (any 64-bit number of our own)
DRIVER = "postgresql+psycopg"  # the psycopg 3 driver of the `postgres` extra: `pip install -e '.[postgres]'`


class PostgresError(BenchError, RuntimeError):
    """A PostgreSQL program is missing or failed; the message names it and what it printed."""


def bin_dir() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``).

    Debian's newest, else ``PATH``'s.
    """
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]), reverse=True)
    if debian:
        return debian[0].parent
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


def url(host: str, port: int, database: str, user: str = "postgres", password: str = "") -> str:
    """An SQLAlchemy URL for MLflow and Optuna alike.

    For example ``postgresql+psycopg://postgres@127.0.0.1:5432/mlflow``.
    """
    secret = f":{password}" if password else ""
    return f"{DRIVER}://{user}{secret}@{host}:{port}/{database}"


@dataclass
class Cluster:
    """A private PostgreSQL cluster whose data, socket and log live in ``root``."""

    root: Path
    port: int = 5432
    listen: str = "127.0.0.1"  # it trusts every connection: never "*" without passwords (pg_hba.conf) first

    @property
    def data(self) -> Path:
        """The cluster's data directory (``initdb``'s ``-D``)."""
        return self.root / "data"

    @property
    def log(self) -> Path:
        """The server's log file (``pg_ctl -l``)."""
        return self.root / "postgres.log"

    def uri(self, database: str) -> str:
        """An SQLAlchemy URL of ``database`` on this cluster, as the superuser over local TCP."""
        return url("127.0.0.1", self.port, database)

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A PostgreSQL program, as the postgres user when we are root.

        ``initdb`` and ``postgres`` refuse to run as root.
        """
        found = bin_dir()
        if found is None:
            raise PostgresError("PostgreSQL's programs are not installed (Debian: apt-get install postgresql)")
        cmd = [str(found / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if check and done.returncode != 0:
            raise PostgresError(f"{argv[0]} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-1500:]}")
        return done

    def init(self) -> None:
        """Create the cluster once.

        Trust authentication for local connections; a password for remote ones.
        """
        if (self.data / "PG_VERSION").is_file():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth-local=trust", "--auth-host=trust", "-E", "UTF8"
        )

    def running(self) -> bool:
        """Whether the cluster's server is up (``pg_ctl status``)."""
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def start(self) -> None:
        """Start it (created if needed) and wait until it takes connections.

        A running one is left as it is (its port is then the one it listens on).
        """
        self.init()
        if self.running():  # on the port it was started with (postmaster.pid's fourth line)
            lines = (self.data / "postmaster.pid").read_text().splitlines()
            self.port = int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else self.port
            return
        opts = f"-c listen_addresses={self.listen} -p {self.port} -k {self.root} -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "-t", "120", "start")

    def stop(self) -> None:
        """Stop the server (fast shutdown) if its pid file is there; else nothing runs."""
        if (self.data / "postmaster.pid").is_file():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)


def create_database(uri: str) -> bool:
    """Create the database ``uri`` names if it is missing; True if it exists afterwards.

    It connects to the server's ``postgres`` database. A role that may not create databases gets
    False, and MLflow's own error later.
    """
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    target = sqlalchemy.engine.make_url(uri)
    engine = sqlalchemy.create_engine(target.set(database="postgres"), poolclass=NullPool)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            return _create(conn, target.database)
    except Exception:
        return False
    finally:
        engine.dispose()


def _create(conn, name: str | None) -> bool:
    import sqlalchemy

    if not name:
        return False
    exists = sqlalchemy.text("SELECT 1 FROM pg_database WHERE datname = :name")
    if conn.execute(exists, {"name": name}).first() is not None:
        return True
    quoted = '"' + name.replace('"', '""') + '"'
    try:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {quoted}"))
    except Exception:  # created meanwhile by a process not under the lock, or not allowed
        return conn.execute(exists, {"name": name}).first() is not None
    return True


@contextlib.contextmanager
def advisory_lock(uri: str, key: int = SCHEMA_LOCK, timeout_s: float = 300.0) -> Iterator[None]:
    """Hold PostgreSQL's advisory lock ``key`` on the server of ``uri`` for the block.

    Every process of every node that asks waits its turn; the database ``uri`` names is made if it
    is missing.

    The lock is taken on the server's ``postgres`` database, which exists before the campaign's
    does; if that one cannot be reached (a role limited to its own database), on ``uri``'s database
    itself. If neither answers, the block runs unlocked: the caller's first use of the store then
    says what is wrong.
    """
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    target = sqlalchemy.engine.make_url(uri)
    conn = engine = None
    for database in ("postgres", target.database):
        engine = sqlalchemy.create_engine(target.set(database=database), poolclass=NullPool)
        try:
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            break
        except Exception:
            engine.dispose()
            conn = engine = None
    if conn is None:
        yield
        return
    try:
        deadline = time.monotonic() + timeout_s
        take = sqlalchemy.text("SELECT pg_try_advisory_lock(:key)")
        while not conn.execute(take, {"key": key}).scalar():
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL advisory lock {key} held by another process for {timeout_s:.0f} s")
            time.sleep(0.2)
        if database == "postgres" and target.database != "postgres":
            _create(conn, target.database)
        yield
    finally:
        conn.close()  # the session ends: its advisory locks go with it
        engine.dispose()
