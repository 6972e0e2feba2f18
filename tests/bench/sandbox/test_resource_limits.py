"""The run's limits (bench.sandbox.resource_limits): sizes, the cgroup found or made, the launcher's rlimits, disk
usage."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench.sandbox import LAUNCHER, limits
from bench.sandbox.resource_limits import (
    GIB,
    MIB,
    CgroupSupport,
    LimitError,
    Limits,
    RunGroup,
    cgroup_support,
    parse_size,
    shell_prelude,
    tree_bytes,
)


def test_sizes_are_read_in_powers_of_1024():
    assert parse_size("64G") == 64 * 2**30
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("1.5g") == 3 * 2**29
    assert parse_size("1048576") == 1048576
    assert parse_size("2k") == 2048
    with pytest.raises(LimitError, match="not a size"):
        parse_size("lots")


def test_limits_no_run_can_live_with_are_refused():
    """The model refuses them however they are made: built in Python, read from the flags' values."""
    with pytest.raises(ValidationError, match="1000 is too small to run anything"):
        Limits(memory_bytes=1000)
    flag = lambda loc: limits.FLAGS[loc[0]]  # noqa: E731
    with pytest.raises(LimitError, match=r"^--memory 1000 is too small to run anything: give at least 67108864"):
        limits.read({"memory_bytes": 1000}, "python", flag)
    with pytest.raises(LimitError, match=r"^--eval-budget 0 s cannot score a checkpoint"):
        limits.read({"eval_s": 0.0}, "python", flag)
    Limits(memory_bytes=None, processes=None, workspace_bytes=None).check()  # "none" switches a limit off
    assert Limits(log_bytes=1 * MIB).line_bytes == 512 * 1024  # a line is at most half the log
    assert Limits().line_bytes == 4 * MIB


def _proc_files(tmp_path: Path, cgroup: str, mountinfo: str) -> tuple[str, str]:
    (tmp_path / "cgroup").write_text(cgroup)
    (tmp_path / "mountinfo").write_text(mountinfo)
    return str(tmp_path / "cgroup"), str(tmp_path / "mountinfo")


def test_a_delegated_v2_group_is_used_and_an_undelegated_one_is_not(tmp_path):
    root = tmp_path / "cg2"
    own = root / "user.slice" / "me"
    own.mkdir(parents=True)
    (own / "cgroup.subtree_control").write_text("cpu memory pids\n")
    files = _proc_files(tmp_path, "0::/user.slice/me\n", f"30 25 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n")
    found = cgroup_support(*files)
    assert found == CgroupSupport(2, {"": own})
    (own / "cgroup.subtree_control").write_text("cpu\n")  # memory and pids not delegated: no cgroup, rlimits
    assert cgroup_support(*files) is None


def test_v1_hierarchies_are_used_when_v2_has_no_controllers(tmp_path):
    mem, pids = tmp_path / "memory", tmp_path / "pids"
    (mem / "box").mkdir(parents=True)
    pids.mkdir()
    cgroup = "4:memory:/box\n8:pids:/\n0::/\n"
    mountinfo = (
        f"1 0 0:1 / {mem} rw - cgroup cgroup rw,memory\n"
        f"2 0 0:2 / {pids} rw - cgroup cgroup rw,pids\n"
        f"3 0 0:3 / {tmp_path / 'unified'} rw - cgroup2 cgroup2 rw\n"
    )
    assert cgroup_support(*_proc_files(tmp_path, cgroup, mountinfo)) == CgroupSupport(
        1, {"memory": mem / "box", "pids": pids}
    )


def test_a_v2_group_gets_its_limits_and_reports_what_the_kernel_refused(tmp_path):
    group = RunGroup(Limits(memory_bytes=2 * GIB, processes=100), "run1", CgroupSupport(2, {"": tmp_path}))
    path = tmp_path / "run1"
    assert (path / "memory.max").read_text() == str(2 * GIB) and (path / "pids.max").read_text() == "100"
    assert group.enforcement == "cgroup v2" and group.launcher_args() == []  # the cgroup, not rlimits
    assert group.prelude() == [
        "/bin/sh",
        "-c",
        f'trap "" TERM; echo $$ > {path / "cgroup.procs"} || exit 125; exec "$@"',
        "bench-sandbox",
    ]
    assert group.hits() == []
    (path / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    (path / "pids.events").write_text("max 12\n")
    assert group.hits() == [
        {"limit": "memory", "value": 2 * GIB, "oom_kills": 1, "refused": 7},
        {"limit": "processes", "value": 100, "forks_refused": 12},
    ]


def test_without_a_cgroup_the_launcher_gets_rlimits():
    group = RunGroup(Limits(memory_bytes=GIB, processes=64), support=None)
    assert not group.active and group.enforcement == "rlimit"
    assert group.launcher_args() == ["--rlimit", f"DATA={GIB}", "--rlimit", "NPROC=64"]


def test_the_launcher_lowers_the_agents_data_limit_before_it_starts():
    def launch(*argv: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-I", "-S", str(LAUNCHER), "--rlimit", f"DATA={300 * MIB}", "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    shown = launch("/bin/sh", "-c", "ulimit -d")
    assert shown.stdout.strip() == str(300 * 1024), shown  # ulimit -d is in KiB
    hog = launch(sys.executable, "-c", "b = bytearray(600 * 2**20); print('granted')")
    assert "granted" not in hog.stdout and "MemoryError" in hog.stderr, hog
    fine = launch(sys.executable, "-c", "b = bytearray(50 * 2**20); print('granted')")
    assert fine.stdout.strip() == "granted", fine


@pytest.mark.skipif(cgroup_support() is None, reason="this machine lets the harness make no cgroup")
def test_a_real_cgroup_holds_a_memory_hog_and_a_fork_loop():
    group = RunGroup(Limits(memory_bytes=256 * MIB, processes=40))
    try:
        assert group.active, group.error
        script = (
            "import os, time\n"
            "n = 0\n"
            "for i in range(200):\n"
            "    try:\n"
            "        pid = os.fork()\n"
            "    except OSError:\n"
            "        break\n"
            "    if pid == 0:\n"
            "        time.sleep(3)\n"
            "        os._exit(0)\n"
            "    n += 1\n"
            "print('forked', n, flush=True)\n"
        )
        forks = subprocess.run([*group.prelude(), sys.executable, "-c", script], capture_output=True, text=True)
        n = int(forks.stdout.split()[-1])
        assert 20 < n < 40, forks  # the shell and python count too
        hog = subprocess.run([*group.prelude(), sys.executable, "-c", "b = bytearray(1024 * 2**20); print('granted')"],
                             capture_output=True, text=True)  # fmt: skip
        assert "granted" not in hog.stdout and hog.returncode != 0, hog
        time.sleep(0.5)
        hits = {h["limit"]: h for h in group.hits()}
        assert hits["processes"]["forks_refused"] >= 1 and "memory" in hits, hits
    finally:
        group.remove()
    assert not any(p.exists() for p in group.procs_files())


def test_shell_prelude_refuses_to_start_when_it_cannot_join(tmp_path):
    missing = tmp_path / "gone" / "cgroup.procs"
    done = subprocess.run([*shell_prelude([missing]), "echo", "started"], capture_output=True, text=True)
    assert done.returncode == 125 and "started" not in done.stdout


def test_tree_bytes_counts_each_file_once_and_follows_no_link(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 3000)
    os.link(tmp_path / "a", tmp_path / "sub" / "a-again")
    (tmp_path / "link").symlink_to("/usr")
    blocks = max(3000, os.stat(tmp_path / "sub" / "b").st_blocks * 512) + max(
        1000, os.stat(tmp_path / "a").st_blocks * 512
    )
    assert tree_bytes(tmp_path) == blocks
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(10 * GIB)  # a sparse file counts by its size: copying it (staging) would write all of it
    assert tree_bytes(tmp_path) == blocks + 10 * GIB


def test_a_gpu_predictor_without_a_cgroup_gets_no_data_rlimit():
    cuda = RunGroup(Limits(memory_bytes=GIB, processes=64), support=None, data_rlimit=False)
    assert cuda.launcher_args() == ["--rlimit", "NPROC=64"]  # CUDA's reservations are not tested under RLIMIT_DATA
