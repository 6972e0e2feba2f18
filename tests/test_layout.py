"""The house rules a reader relies on: the fixed top-level layout and modules small enough to read in one sitting.

The layout is CONTRIBUTING.md's "Layout"; the size (aim < 400 lines) its "Size guide". The size is a guide, not a
reason to split: a cap at 420 lines had started to shape modules instead of concepts (issue 30: a re-export shim,
splits made for the count). So a module past the aim is only named in a warning (one concept may need more); the
test fails past a generous ceiling of 800 lines, where a module has surely grown past one concept.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AIM_LINES = 400  # a guide: past it, a warning names the module (split it only where it holds two concepts)
MAX_LINES = 800  # the ceiling: past it, the test fails


def test_top_level_layout() -> None:
    for folder in ("bench", "tasks", "baselines", "analysis", "notebooks", "mlruns", "tests"):
        assert (ROOT / folder).is_dir(), folder
    assert (ROOT / "ARCHITECTURE.md").is_file()


# CONTRIBUTING.md's "Layout" (fixed), no others
LAYOUT = {"bench", "tasks", "baselines", "analysis", "notebooks", "mlruns", "tests", "docs", "campaigns"}


def test_no_folder_outside_the_fixed_layout() -> None:
    """What the project commits lives in the nine folders of CONTRIBUTING.md's "Layout" (and dot-folders such as
    .ci): a new top-level folder (an images/ beside the docs, say) breaks the map every reader learnt."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: the committed files cannot be listed")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {f.split("/")[0] for f in files.splitlines() if "/" in f and not f.startswith(".")}
    assert folders - LAYOUT == set(), "move these under one of " + ", ".join(sorted(LAYOUT))


def module_lines() -> dict[str, int]:
    return {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for pkg in ("bench", "analysis", "baselines")
        for path in (ROOT / pkg).rglob("*.py")
    }


def test_no_module_is_too_long_to_read_in_one_sitting() -> None:
    lines = module_lines()
    past_aim = {name: n for name, n in sorted(lines.items()) if AIM_LINES < n <= MAX_LINES}
    if past_aim:
        warnings.warn(
            f"past the {AIM_LINES}-line aim (a guide: split only what holds two concepts): {past_aim}", stacklevel=1
        )
    too_long = {name: n for name, n in lines.items() if n > MAX_LINES}
    assert not too_long, f"past {MAX_LINES} lines: these modules hold more than one concept; split them: {too_long}"


def test_every_pipeline_step_has_its_module() -> None:
    steps = ("workspace", "launch", "watch", "collect", "evaluate", "audit", "record")
    assert [s for s in steps if not (ROOT / "bench" / "pipeline" / f"{s}.py").is_file()] == []
    runner = (ROOT / "bench" / "runner.py").read_text()
    calls = ("workspace.create(", "launch.launch(", "watch.watch(", "collect.collect(",
             "evaluate.evaluate_candidates(", "audit.audit(", "record.save(")  # fmt: skip
    order = [runner.index(c) for c in calls]  # run() calls the steps in pipeline order
    assert order == sorted(order)


# What a reader of this repository cannot open: the project's private design notes and shared folders. The rules
# are in CONTRIBUTING.md and ARCHITECTURE.md; data the tests read is copied in (with its PROVENANCE.md). The data
# mirror (BENCH_DATA_MIRROR) is a setting, named by its variable.
OUTSIDE = re.compile(r"DESIGN\.md|[A-Z0-9]+-NOTES\.md|STYLE\.md|shared/(docs|seeds|paper|agent-streams)")


def outside_references(root: Path) -> list[str]:
    """``file:line`` of every tracked text file's line that names a document outside the repository."""
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        found += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    return found


def test_no_file_refers_to_a_document_outside_the_repository() -> None:
    found = [f for f in outside_references(ROOT) if not f.startswith("tests/test_layout.py:")]
    assert not found, f"cite CONTRIBUTING.md or ARCHITECTURE.md, or copy the data in: {found}"


def test_an_outside_reference_is_found(tmp_path: Path) -> None:
    """The check itself can fail: a made-up repository citing a design note is named, a clean one is not."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text('"""See ../shared/docs/DESIGN.md."""\n')
    (tmp_path / "b.md").write_text("See CONTRIBUTING.md.\n")
    subprocess.run(["git", "add", "a.py", "b.md"], cwd=tmp_path, check=True)
    assert outside_references(tmp_path) == ["a.py:1"]
