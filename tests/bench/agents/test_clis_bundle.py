"""A real agent CLI's campaign, published and checked by a stranger: it verifies from its bundle and from another
folder with the verdict it recorded.

Claude Code and Codex record the absolute paths they write (``<author's folder>/.../workspace/run_1.py``); a re-audit
that judged them against the run folder's new place found rule 5 ("wrote 1 file outside the workspace") and turned
both honest runs into ``disqualified``. The audit now judges a moved run where it ran. The reader's import also
compares a run folder already in its place with the bundle's: a different ``result.json`` is refused, named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.runner import RunSpec, run
from tests.bench.agents import test_clis as clis
from tests.bench.bundle_support import _use_store
from tests.mockllm import MockLLM, default_trajectory, run1_from_train

cli_dir, agent = clis.cli_dir, clis.agent  # the real CLIs' fixtures: each installed once, registered for the test
CASES, campaign, point_at = clis.CASES, clis.campaign, clis.point_at


@pytest.mark.slow  # a whole benchmark run of a real CLI, then three verifications (each re-scores the run)
@pytest.mark.parametrize("agent", ["claude-code", "codex"], indirect=True)
def test_a_real_agents_campaign_verifies_from_its_bundle_and_from_a_readers_folder(
    agent, generated_t6, monkeypatch, tmp_path, capsys
):
    case = CASES[agent]
    name = campaign()
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    with MockLLM(default_trajectory(run1), model=case.model) as llm:
        point_at(monkeypatch, case, llm)
        result = run(RunSpec(task=generated_t6, agent=agent, model=case.model, budget_s=180, grace_s=5,
                             console=False, campaign=name))  # fmt: skip
    assert result.status == "success", result.reason
    events = (Path(result.run_dir) / "events.jsonl").read_text()
    assert str(Path(result.workspace) / "run_1.py") in events  # the CLI recorded the absolute path it wrote

    archive = tmp_path / "bundle.tar.gz"
    assert main(["export", name, str(archive), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["verify", str(archive), "--quiet"]) == 0, capsys.readouterr().out  # checked from a temp folder
    out = capsys.readouterr().out
    assert "success" in out and "recomputed as recorded" in out

    runs = tmp_path / "their-runs"  # the reader: a fresh store and a folder of their own
    _use_store(monkeypatch, tmp_path / "theirs")
    assert main(["import", str(archive), "--quiet", "--runs-dir", str(runs)]) == 0
    assert main(["verify", str(runs), "--quiet"]) == 0, capsys.readouterr().out
    folder = runs / Path(result.run_dir).name
    assert folder.is_dir() and folder.resolve() != Path(result.run_dir).resolve()

    edited = json.loads((folder / "result.json").read_text())
    edited["outcome"]["score"] = 0.001
    (folder / "result.json").write_text(json.dumps(edited))
    capsys.readouterr()
    _use_store(monkeypatch, tmp_path / "third")
    assert main(["import", str(archive), "--quiet", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and "result.json differs" in err, err
