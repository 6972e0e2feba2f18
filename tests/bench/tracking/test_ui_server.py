"""`bench ui` as a server command (bench/tracking/ui.py): a busy port is refused in one line before any link, and a
SIGTERM or SIGINT to `bench ui` ends its MLflow server too, leaving nothing listening on the port (psutil's view of
the machine's sockets, not bench ui's own account). Real processes: `bench ui` on a store of its own, the real
MLflow server (~10 s to answer on a loaded 2-core machine).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import psutil
import pytest

from bench.tracking import schema, ui
from bench.tracking.writer import MlflowWriter

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listeners(port: int) -> list[int]:
    """Pids of the processes with a socket listening on ``port`` (any address)."""
    return [
        c.pid for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "BENCH_MLRUNS_DIR": str(tmp_path / "mlruns")}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def _bench_ui(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.cli", "ui", "--port", str(port), *extra],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the test's own group: a leftover is killed by the fixture, not by the runner
    )


def _wait_links(proc: subprocess.Popen, n: int) -> list[str]:
    """bench ui's output until it printed ``n`` links (it prints them once its server answers)."""
    lines = []
    while sum("http" in line and "#/experiments/" in line for line in lines) < n:
        line = proc.stdout.readline()
        if not line:
            pytest.fail("bench ui ended before printing its links:\n" + "".join(lines))
        lines.append(line)
    return lines


@pytest.fixture
def campaign_store(tmp_path, monkeypatch):
    """A store with one campaign holding one agent run, in tmp_path; its name."""
    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(tmp_path / "mlruns"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    name = f"ui-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(name)
    w.end_run(w.create_run("t6-baseline-r1", {schema.KIND: schema.KIND_AGENT}))
    return name


def test_a_busy_port_is_one_line_and_a_non_zero_exit_before_any_link(tmp_path, campaign_store):
    port = _free_port()
    with socket.create_server(("127.0.0.1", port)):  # something else listens there
        proc = _bench_ui(tmp_path, port)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert out.strip().splitlines() == [
        f"bench: bench ui: port {port} on 127.0.0.1 is already in use (another bench ui or MLflow server?): "
        "stop it, or give bench ui --port N"
    ]


def test_the_port_check_takes_a_port_in_time_wait_as_free():
    """uvicorn binds with SO_REUSEADDR: a port a closed connection left in TIME_WAIT is free for it, so for us."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the server side closes first: its end goes to TIME_WAIT
        client.close()
    ui.check_port("127.0.0.1", port)  # no PortBusy
    with socket.create_server(("127.0.0.1", port)), pytest.raises(ui.PortBusy, match=f"port {port} on 127.0.0.1"):
        ui.check_port("127.0.0.1", port)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_bench_ui_leaves_nothing_listening_on_its_port(tmp_path, campaign_store, sig):
    port = _free_port()
    proc = _bench_ui(tmp_path, port, "--experiment", campaign_store)
    try:
        lines = _wait_links(proc, 3)
        assert any("MLflow UI on" in line for line in lines)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200
        for page in ("/", "/ajax-api/2.0/mlflow/experiments/search?max_results=5", "/static-files/nothing-here"):
            try:  # a few pages, one of them missing: each would be an access-log line
                urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=30).close()
            except urllib.error.HTTPError as e:
                assert e.code == 404
        servers = _listeners(port)
        assert servers and proc.pid not in servers  # the MLflow server (uvicorn) listens, not bench ui itself
        second = _bench_ui(tmp_path, port)  # a second bench ui on the same port: refused, the first one unharmed
        out, _ = second.communicate(timeout=120)
        assert second.returncode == 2 and len(out.strip().splitlines()) == 1 and "already in use" in out

        os.kill(proc.pid, sig)  # bench ui alone, not its group: it must end the server itself
        assert proc.wait(timeout=60) == 0
        out = "".join(lines) + proc.stdout.read()  # all it printed: quiet, so that its links stay on the screen
        assert not re.search(r'"GET /\S* HTTP/[\d.]+" \d{3}', out), out  # uvicorn's access lines
        assert "Warning" not in out and "[MLflow]" not in out and "Registry store" not in out, out
        assert out.splitlines()[-1].startswith(f"  {campaign_store}: compare agents"), out  # the links last
        deadline = time.monotonic() + 30
        while _listeners(port) and time.monotonic() < deadline:  # its SIGTERM-to-SIGKILL grace is 20 s
            time.sleep(0.5)
        assert _listeners(port) == []
        assert not [p for p in servers if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for pid in _listeners(port):  # a server that outlived the test (the failure this test catches)
            os.kill(pid, signal.SIGKILL)


def test_the_app_serves_mlflows_page_with_the_model_training_default_first():
    """The bench-ui app (bench/tracking/uiapp.py): every UI route's page is MLflow's index.html with the script
    that stores the model-training mode when the browser has none and the views' script (the browser test checks
    what it does), before the UI's own (deferred) script."""
    from bench.tracking import uiapp

    assert ui.app_registered()  # pyproject.toml's mlflow.app entry point, as the mlflow command sees it
    assert ui.command("127.0.0.1", 5000, app=True)[-2:] == ["--app-name", "bench-ui"]
    page = uiapp.flask_app.test_client().get("/").get_data(as_text=True)
    original = (Path(uiapp.flask_app.static_folder) / "index.html").read_text()
    # the views' script names no campaign here: this process is no MLflow server (no backend store to read)
    head = "<head>" + uiapp.SCRIPT + uiapp.views_script([]) + uiapp.ROUND_SCRIPT
    assert page == original.replace("<head>", head, 1)
    assert page.index(uiapp.SCRIPT) < page.index("static/js/main.")
    assert '"mlflow.workflowType_v1": "\\"machine_learning\\""' in uiapp.SCRIPT  # the stored value is JSON text
