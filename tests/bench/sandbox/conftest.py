"""Fixtures of the sandbox tests: a fake harness layout in tmp_path with secrets planted in every place an
agent must not reach, and a helper that runs Python code inside a real bwrap sandbox and returns what it saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.sandbox import Policy, Sandbox, default_hidden, default_readable, probe


@pytest.fixture
def bwrap_ok() -> None:
    """Skip (with bwrap's reason) where no sandbox can be built."""
    reason = probe()
    if reason is not None:
        pytest.skip(f"bubblewrap cannot run here: {reason}")


def plant(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def harness(tmp_path, monkeypatch) -> SimpleNamespace:
    """The harness's places, moved into tmp_path (never the real ~/.cache or mlruns/), each holding a secret;
    one run directory ``run-a`` whose workspace and private home the sandbox may write, and a sibling run."""
    cache, mlruns, mirror, home = tmp_path / "cache", tmp_path / "mlruns", tmp_path / "mirror", tmp_path / "home"
    workspaces = cache / "workspaces"
    for var, path in (
        ("BENCH_CACHE_DIR", cache),
        ("BENCH_WORKSPACES_DIR", workspaces),
        ("BENCH_MLRUNS_DIR", mlruns),
        ("BENCH_DATA_MIRROR", mirror),
        ("HOME", home),
    ):
        monkeypatch.setenv(var, str(path))
    monkeypatch.delenv("BENCH_CLI_DIR", raising=False)
    run_dir = workspaces / "camp" / "run-a"
    h = SimpleNamespace(
        tmp=tmp_path,
        cache=cache,
        workspaces=workspaces,
        mlruns=mlruns,
        mirror=mirror,
        home=home,
        run_dir=run_dir,
        ws=run_dir / "workspace",
        private_home=run_dir / "home",
        secrets={
            "prepared": plant(cache / "prepared" / "t6" / "test.npy", "TEST-LABELS"),
            "mirror": plant(mirror / "ETTh1" / "ETTh1.csv", "RAW-DATA"),
            "home": plant(home / ".ssh" / "id_ed25519", "PRIVATE-KEY"),
            "mlruns": plant(mlruns / "mlflow.db", "TRACKING-STORE"),
            "sibling": plant(workspaces / "camp" / "run-b" / "result.json", '{"score": 0.5}'),
            "own_result": plant(run_dir / "result.json", '{"score": 0.4}'),
            "own_log": plant(run_dir / "agent.log", "LOG"),
            "tmp": plant(tmp_path / "loose-in-tmp.txt", "TMP-SECRET"),
        },
    )
    h.ws.mkdir(parents=True)
    h.private_home.mkdir(parents=True)
    plant(h.ws / "train.py", "print('hi')\n")
    return h


def agent_policy(h: SimpleNamespace, endpoints: tuple[str, ...] = ()) -> Policy:
    """The policy bench.pipeline.launch gives an agent, for the fake layout."""
    return Policy(
        cwd=h.ws,
        writable=(h.ws, h.private_home),
        readable=default_readable(),
        hidden=default_hidden(),
        endpoints=endpoints,
    )


def run_inside(policy: Policy, code: str, timeout: float = 120, env: dict | None = None) -> dict:
    """Run ``code`` with this Python in a sandbox of ``policy``; it must print one JSON object last."""
    with Sandbox(policy) as box:
        proc = subprocess.run(
            box.wrap([sys.executable, "-c", code]),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env if env is not None else dict(os.environ),
        )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def inside():
    """:func:`run_inside`, for the tests (a conftest is not importable under --import-mode=importlib)."""
    return run_inside


@pytest.fixture
def policy_of():
    """:func:`agent_policy`, for the tests."""
    return agent_policy
