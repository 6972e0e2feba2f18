"""``bench ui``: MLflow's UI on the tracking store, started and stopped like a server command.

- A busy port is refused before anything starts: one line, exit status 2 (else the links printed
  would lead to whatever already listens there, an older ``bench ui`` with an older store, and the
  command would "work").
- The MLflow server (its CLI process and uvicorn under it) runs in a process group of its own, so
  that the terminal's Ctrl-C reaches ``bench ui`` alone; SIGINT, SIGTERM and SIGHUP to ``bench ui``
  end that whole group (SIGTERM, then SIGKILL after :data:`GRACE_S`) before it exits, and nothing is
  left holding the port.
- The links are printed once the server answers, each opening a saved view
  (:mod:`bench.tracking.views`) in the UI's model-training mode; the server is MLflow's app with the
  model-training default (:mod:`bench.tracking.uiapp`).
- Lean: one worker and no job runner (``bench server`` measures it: 2 processes, ~0.5 GB).
- Quiet, so that the links stay on the screen: uvicorn without its access log and below warnings
  (:data:`UVICORN_OPTS`; 402 lines over 11 page loads before), the registry store named (MLflow says
  so otherwise), and left out of the server's output: deprecation warnings (Starlette's, which is a
  ``UserWarning`` that ``PYTHONWARNINGS`` cannot name without importing Starlette first, with the
  source line Python prints under it) and the localhost-only security middleware's notice
  (:data:`NOTICES`: a default ``bench ui`` chose). Anything else the server prints (an error, a
  traceback) is passed on.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from importlib.metadata import distributions
from pathlib import Path

from bench.errors import BenchError, InputError
from bench.tracking import store, views

APP = "bench-ui"  # the mlflow.app entry point of pyproject.toml -> bench.tracking.uiapp:app
GRACE_S = 20.0  # from SIGTERM to SIGKILL of the server's group
READY_S = 180.0  # the server answers in ~5 s on a loaded 2-core machine; a cold import can take much longer
MOST = 10  # campaigns linked
UVICORN_OPTS = "--no-access-log --log-level warning"  # after MLflow's --log-config, which sets INFO
# the start of lines of the MLflow CLI's output that describe bench ui's own defaults (a
# localhost-only server)
NOTICES = ("[MLflow] Security middleware enabled with default settings (localhost-only)",)
DEPRECATION = re.compile(r"^\S.*:\d+: \w*DeprecationWarning: ")  # Python's "file:line: Category: message" line


class PortBusy(InputError, OSError):
    """Something already listens on the host and port ``bench ui`` was asked for."""


class _Stop(BenchError):  # noqa: N818 (a signal's way out of the wait, not an error)
    def __init__(self, signum: int):
        self.signum = signum


def check_port(host: str, port: int) -> None:
    """Raise :class:`PortBusy` if ``host:port`` cannot be bound as the server will bind it.

    It binds with SO_REUSEADDR, as uvicorn does: a port in TIME_WAIT is free, one with a listener is
    not.
    """
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.create_server((host, port), family=family):
            pass
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PortBusy(
                f"port {port} on {host} is already in use (another bench ui or MLflow server?): stop it, or give "
                f"bench ui --port N"
            ) from e
        raise


def app_registered() -> bool:
    """Whether this environment has the ``bench-ui`` app, as the ``mlflow`` command will see it.

    An install older than the entry point has not. It is looked up in the environment's
    site-packages (here, ``python -m`` run from a checkout would read a stale ``*.egg-info`` of the
    checkout first).
    """
    import mlflow

    site = str(Path(mlflow.__file__).resolve().parents[1])
    return any(e.name == APP and e.group == "mlflow.app" for d in distributions(path=[site]) for e in d.entry_points)


def command(host: str, port: int, app: bool) -> list[str]:
    """The ``mlflow server`` command line on the store in force."""
    here = Path(sys.executable).parent / "mlflow"
    uri = store.tracking_uri()
    cmd = [str(here) if here.exists() else "mlflow", "server", "--backend-store-uri", uri, "--registry-store-uri", uri]
    cmd += ["--host", host, "--port", str(port), "--workers", "1", "--uvicorn-opts", UVICORN_OPTS]
    if store.is_embedded():
        cmd += ["--artifacts-destination", str(store.artifact_root())]
    if app:
        cmd += ["--app-name", APP]
    return cmd


def stop(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """End the server's whole process group: SIGTERM, then SIGKILL after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break  # the group is gone
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; its workers may not be
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
    proc.poll()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_ready(proc: subprocess.Popen, base: str, timeout_s: float = READY_S) -> None:
    """Wait until the server answers ``/health``.

    StoreError (a RuntimeError) if it exits first or stays silent ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if _answers(base):
            return
        if time.monotonic() > deadline:
            raise store.StoreError(f"the MLflow server did not answer on {base} within {timeout_s:.0f} s")
        time.sleep(0.5)
    raise store.StoreError(
        f"the MLflow server exited with status {proc.returncode} before answering (its output above)"
    )


def print_links(base: str, campaigns: list[tuple[str, str]], most: int = MOST) -> None:
    """Per campaign, a link to each saved view.

    The views are written here too, so that campaigns recorded before the views existed get them.
    """
    from bench.tracking.writer import MlflowWriter, TrackingError

    width = max((len(name) + 1 for name, _ in campaigns[:most]), default=0)  # the links in one column
    for name, exp_id in campaigns[:most]:
        try:
            writer = MlflowWriter(name)
            views.save(writer)
            views.backfill_groups(writer, exp_id)  # runs recorded before bench.group: the per-task view's groups
        except TrackingError as e:
            print(f"  {name}: views not saved ({e}); the experiment: {views.url(base, exp_id, None)}", flush=True)
            continue
        for view in views.all_views():
            print(f"  {name + ':':<{width}} {view.label:<16} {views.url(base, exp_id, view.id)}", flush=True)
    if len(campaigns) > most:
        print(f"  ... and {len(campaigns) - most} more campaigns: bench ui --experiment NAME", flush=True)


def relay_output(source, sink) -> None:
    """The server's output, line by line, less :data:`NOTICES` and deprecation warnings.

    A warning's source line under it goes too. Ends with the server's output.
    """
    after_warning = False  # the line after a warning is its source line, indented
    for line in source:
        if after_warning and line.startswith("  "):
            after_warning = False
            continue
        after_warning = bool(DEPRECATION.match(line))
        if after_warning or line.startswith(NOTICES):
            continue
        try:
            sink.write(line)
            sink.flush()
        except (OSError, ValueError):  # our output is gone (a closed pipe): read on, so the server never blocks
            continue


def serve(host: str, port: int, names: list[str] | None) -> int:
    """Run ``bench ui``; returns its exit status.

    Check the port and the campaigns, start the server, print the links, wait.
    """
    store.client()  # make sure the schema exists before the server reads it
    campaigns = views.experiments(names)  # LookupError for an unknown name
    check_port(host, port)
    app = app_registered()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    print(f"starting the MLflow UI on {base}  (store {store.tracking_uri()}) ...", flush=True)

    def on_signal(signum, _frame):
        raise _Stop(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    proc = None
    try:
        proc = subprocess.Popen(
            command(host, port, app),
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        threading.Thread(target=relay_output, args=(proc.stdout, sys.stdout), daemon=True).start()
        wait_ready(proc, base)
        print(f"MLflow UI on {base}; Ctrl-C to stop", flush=True)
        if not app:
            print("  (this install predates the bench-ui app: run pages may open in GenAI mode; make install)")
        print_links(base, campaigns)
        return proc.wait()
    except _Stop:
        return 0
    finally:
        for s in previous:  # a second Ctrl-C must not cut the stop short and leave the server holding the port
            signal.signal(s, signal.SIG_IGN)
        if proc is not None:
            stop(proc)
        for s, handler in previous.items():
            signal.signal(s, handler)
