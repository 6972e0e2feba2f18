"""The independent launch counter: which command lines are launches of workspace scripts."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.pipeline.launch_monitor import LaunchMonitor, workspace_script


def test_workspace_script_recognises_python_launches_of_top_level_scripts(tmp_path):
    ws = tmp_path / "ws"
    (ws / "sub").mkdir(parents=True)
    py = "/usr/bin/python3"
    assert workspace_script([py, "run_1.py", "--lr", "3"], str(ws), ws) == "run_1.py"
    assert workspace_script([py, "-u", "-X", "dev", str(ws / "train.py")], "/", ws) == "train.py"
    assert workspace_script(["python3.11", "-W", "ignore", "./run_2.py"], str(ws), ws) == "run_2.py"
    assert workspace_script([py, "prepare.py", "--eval", "x.pt"], str(ws), ws) is None  # the locked evaluator
    assert workspace_script([py, "-c", "import run_1"], str(ws), ws) is None
    assert workspace_script([py, "-m", "torch.distributed.run", "run_1.py"], str(ws), ws) is None
    assert workspace_script([py, "sub/run_1.py"], str(ws), ws) is None  # not top level
    assert workspace_script([py, "/elsewhere/run_1.py"], str(ws), ws) is None
    assert workspace_script(["bash", "run_1.py"], str(ws), ws) is None
    assert workspace_script([], str(ws), ws) is None


def test_monitor_counts_each_script_process_once_across_a_tree(tmp_path):
    ws = tmp_path
    (ws / "run_1.py").write_text("import time; time.sleep(3)")
    (ws / "run_2.py").write_text("import time; time.sleep(3)")
    shell = subprocess.Popen(
        ["bash", "-c", f"{sys.executable} run_1.py & {sys.executable} run_2.py & wait"], cwd=ws, start_new_session=True
    )
    monitor = LaunchMonitor(shell.pid, None, ws, interval=0.1).start()
    deadline = time.time() + 30
    while monitor.count < 2 and time.time() < deadline:
        time.sleep(0.05)
    shell.wait(timeout=60)
    monitor.stop()
    assert sorted(launch.script for launch in monitor.launches.values()) == ["run_1.py", "run_2.py"]
