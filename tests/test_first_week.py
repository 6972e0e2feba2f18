"""A new user's first week, outside the benchmark's code: ``make lab`` as root and as a user, notebooks that open
unmodified, and git ignoring what JupyterLab leaves in the clone.

Cheap checks of the files themselves: ``make -n`` (prints the command, runs nothing), the notebooks' JSON, and
``git check-ignore``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# what an IPython kernel reports as language_info (jupyter_client's kernel_info reply, ipykernel 6/7): JupyterLab
# writes it into the notebook when the kernel starts, and marks the notebook modified if it was not there
KERNEL_LANGUAGE_INFO = {"name", "version", "mimetype", "file_extension", "codemirror_mode", "pygments_lexer",
                        "nbconvert_exporter"}  # fmt: skip


def _lab_command() -> str:
    """The jupyter-lab line ``make -n lab`` prints in this clone."""
    out = subprocess.run(["make", "-n", "-C", str(ROOT), "lab"], capture_output=True, text=True, timeout=60, check=True)
    return _lab_line(out.stdout)


def _lab_line(printed: str) -> str:
    return next(line for line in printed.splitlines() if "jupyter-lab --notebook-dir" in line)


# as a user who is not root, the same Makefile (read from stdin) in a folder of that user's own: the clone may lie
# in a folder only its owner enters (mode 0700, as `mktemp -d` and /root are), so the user is never sent into it
AS_USER = """set -e
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cat > "$d/Makefile"
touch "$d/pyproject.toml" "$d/constraints.txt"
make -n -C "$d" lab
"""


def _lab_command_as(user: str) -> str:
    """The jupyter-lab line ``make -n lab`` prints for ``user`` (through runuser), from this clone's Makefile."""
    argv = ["runuser", "-u", user, "--", "env", "-u", "TMPDIR", "sh", "-c", AS_USER]
    out = subprocess.run(argv, input=(ROOT / "Makefile").read_text(), cwd="/", capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return _lab_line(out.stdout)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
def test_make_lab_passes_allow_root_only_to_root():
    """Jupyter refuses to start as root without --allow-root (containers, cloud machines run as root)."""
    as_me = _lab_command()
    assert ("--allow-root" in as_me) == (os.geteuid() == 0), as_me
    if os.geteuid() == 0 and shutil.which("runuser"):  # root here: the same Makefile as a user who is not
        assert "--allow-root" not in _lab_command_as("nobody")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_opens_unmodified(path: Path):
    """Stored as JupyterLab keeps an unchanged notebook: no outputs or execution counts (the test suite executes a
    copy, never the file), and the whole language_info a kernel reports, so its start writes nothing new."""
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert set(nb["metadata"]["language_info"]) == KERNEL_LANGUAGE_INFO
    assert nb["metadata"]["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python",
                                            "name": "python3"}  # fmt: skip


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git clone")
def test_git_ignores_what_jupyterlab_leaves():
    """JupyterLab's checkpoint folder beside the notebooks (bench report's report/: test_report_default.py)."""
    path = "notebooks/.ipynb_checkpoints/02_agent_strategies-checkpoint.ipynb"
    assert subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT).returncode == 0


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git clone")
def test_git_ignores_every_report_folder_the_docs_write():
    """The README's own steps (`bench report ... --out report-two-agents`) leave nothing untracked in the clone."""
    import re

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    outs = {m for p in docs for m in re.findall(r"--out ([\w./-]+)", p.read_text())}
    assert "report-two-agents" in outs and len(outs) >= 3, outs
    for out in sorted(outs):
        path = f"{out}/index.md"
        assert subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT).returncode == 0, out
