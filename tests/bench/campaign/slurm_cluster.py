"""A real single-node Slurm for the campaign tests: Debian's
slurm-wlm and munge (installed by .ci/run when missing), munged, a controller and a node on this machine with a
configuration of their own in a scratch folder, stopped after the tests (munged only if it was started here).

Every step that can fail (not root, a package missing, a daemon that does not start, a node that never becomes idle,
a port taken) skips the test with what failed, in one line.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

MUNGE_KEY = Path("/etc/munge/munge.key")


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


def _munged() -> int | None:
    """munged running already (pid), started here (pid) or skip; returns the pid to stop, None if not ours."""
    if _run(["pgrep", "-x", "munged"]).returncode == 0:
        return None
    for folder in ("/run/munge", "/etc/munge", "/var/lib/munge", "/var/log/munge"):
        Path(folder).mkdir(parents=True, exist_ok=True)
    if not MUNGE_KEY.is_file():
        MUNGE_KEY.write_bytes(os.urandom(1024))
    chown = _run(["chown", "-R", "munge:", "/etc/munge", "/run/munge", "/var/lib/munge", "/var/log/munge"])
    if chown.returncode != 0:
        pytest.skip(f"cannot give munge its folders: {chown.stderr.strip()}")
    MUNGE_KEY.chmod(0o400)
    started = _run(["su", "munge", "-s", "/bin/sh", "-c", "/usr/sbin/munged"])
    if started.returncode != 0:
        pytest.skip(f"munged did not start: {(started.stderr or started.stdout).strip()}")
    pid = Path("/run/munge/munged.pid")
    return int(pid.read_text()) if pid.is_file() else None


def _config(d: Path) -> Path:
    host = socket.gethostname().split(".")[0]
    mem_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 - 2048
    for sub in ("state", "spool", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    conf = d / "slurm.conf"
    conf.write_text(
        f"""ClusterName=benchtest
SlurmctldHost={host}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/ctld.log
SlurmdLogFile={d}/log/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SchedulerType=sched/backfill
ReturnToService=2
KillWait=30
NodeName={host} CPUs={os.cpu_count()} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""
    )
    return conf


def _stop(pid_file: Path) -> None:
    try:
        os.kill(int(pid_file.read_text()), 15)
    except (OSError, ValueError):
        pass


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node Slurm; yields the environment for its commands (``SLURM_CONF``)."""
    if os.geteuid() != 0:
        pytest.skip("the single-node Slurm needs root (munged as user munge, slurmd)")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "squeue") if shutil.which(b) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (apt-get install -y slurm-wlm munge; .ci/run does it)")
    if _run(["pgrep", "-x", "slurmctld"]).returncode == 0:
        pytest.skip("a slurmctld runs already on this machine: its ports are taken")
    d = tmp_path_factory.mktemp("slurm")
    munged = _munged()
    conf = _config(d)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        for daemon in ("slurmctld", "slurmd"):
            started = _run([f"/usr/sbin/{daemon}", "-f", str(conf)], env=env)
            if started.returncode != 0:
                pytest.skip(f"{daemon} did not start: {(started.stderr or started.stdout).strip()[:300]}")
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            state = _run(["sinfo", "-h", "-o", "%T"], env=env).stdout.strip()
            if state in ("idle", "mixed"):
                break
            time.sleep(1)
        else:
            log = (d / "log" / "ctld.log").read_text()[-300:] if (d / "log" / "ctld.log").is_file() else ""
            pytest.skip(f"the Slurm node never became idle (sinfo: {state!r}); {log}")
        yield {"SLURM_CONF": str(conf)}
    finally:
        _stop(d / "slurmd.pid")
        _stop(d / "slurmctld.pid")
        if munged:
            try:
                os.kill(munged, 15)
            except OSError:
                pass
