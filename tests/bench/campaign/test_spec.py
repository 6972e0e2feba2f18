"""The campaign file: what a valid one gives (the matrix, stable ids worked out here by hand), and every mistake
refused whole before anything is created, in one line with exit status 2."""

from __future__ import annotations

import hashlib

import pytest

from bench.campaign import spec
from bench.cli import main
from tests.bench.campaign.conftest import campaign_file

GOOD = """
tasks = ["t6", "t5"]
repeats = 2
budget = "40s"
[[agents]]
name = "baseline"
[[agents]]
name = "command"
agent_command = "python train.py"
"""


def test_a_valid_file_gives_the_matrix_with_stable_ids(task_folders, tmp_path):
    path, name = campaign_file(tmp_path, GOOD)
    c = spec.load(path)
    got = (c.name, c.task_ids, c.repeats, c.spec.budget_s, c.spec.grace_s, c.retries)
    assert got == (name, ("t6", "t5"), 2, 40.0, 30.0, 2)
    assert [a.label for a in c.agents] == ["baseline", "command"]
    assert c.agents[1].options == {"command": "python train.py"}
    runs = c.runs()
    assert len(runs) == 8 and len({r.run_id for r in runs}) == 8
    # repeat by repeat: every (agent, task) has its first repeat before any second
    assert [(r.repeat, r.task, r.agent.name) for r in runs[:4]] == [
        (1, "t6", "baseline"), (1, "t6", "command"), (1, "t5", "baseline"), (1, "t5", "command"),
    ]  # fmt: skip
    digest = hashlib.sha256(f'["{name}", "command", "", "t5", 2]'.encode()).hexdigest()[:8]
    assert runs[-1].run_id == f"t5-command-r2-{digest}"
    assert c.run_dir(runs[-1]) == tmp_path / "workspaces" / name / f"t5-command-r2-{digest}"
    assert [r.run_id for r in spec.load(path).runs()] == [r.run_id for r in runs]  # the same on every read


def test_the_model_is_part_of_the_id_and_all_means_every_task(task_folders, tmp_path):
    body = 'tasks = "all"\n[[agents]]\nname = "optuna"\n[[agents]]\nname = "generic"\nmodel = "a/b"\n'
    body += f'options = {{ config = "{tmp_path / "agent.toml"}" }}\n'
    (tmp_path / "agent.toml").write_text('command = ["true"]\n')
    path, name = campaign_file(tmp_path, body)
    c = spec.load(path)
    assert c.task_ids == ("t5", "t6") and c.repeats == 1 and c.spec.budget_s is None  # the registry: only these two
    digest = hashlib.sha256(f'["{name}", "generic", "a/b", "t5", 1]'.encode()).hexdigest()[:8]
    assert c.runs()[1].run_id == f"t5-generic-a-b-r1-{digest}"
    assert c.budget_of("t6") == task_folders["t6"].budget_s


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('tasks = ["t6"]\nrepeat = 2\n[[agents]]\nname = "baseline"\n', "repeat: unknown key"),
        ('tasks = ["t6"]\n[[agents]]\nname = "baseline"\nmodle = "x"\n', "agents[0].modle: unknown key"),
        ('tasks = ["t6"]\n[[agents]]\nname = "claude"\n', "agents[0].name: unknown agent 'claude'"),
        ('tasks = ["t6", "t9"]\n[[agents]]\nname = "baseline"\n', "tasks: "),
        ('tasks = ["t6"]\nbudget = "40 minutes"\n[[agents]]\nname = "baseline"\n', "budget: bad duration"),
        ('tasks = ["t6"]\nbudget = 40\n[[agents]]\nname = "baseline"\n', 'budget = "40m"'),
        ('tasks = ["t6"]\nrepeats = 0\n[[agents]]\nname = "baseline"\n', "repeats: must be at least 1"),
        ('tasks = ["t6"]\n[[agents]]\nname = "baseline"\nagent_command = "x"\n', "is for the command agent only"),
        ('tasks = ["t6"]\n[[agents]]\nname = "command"\n', "the command agent needs the command"),
        ('tasks = ["t6"]\n[[agents]]\nname = "baseline"\n[[agents]]\nname = "baseline"\n', "listed twice"),
        ('tasks = ["t6"]\n', "agents: missing"),
        ('tasks = ["t6"]\nexecutor = "k8s"\n[[agents]]\nname = "baseline"\n', "executor: must be one of"),
        ('tasks = ["t6"]\n[slurm]\ngpus = 1\n[[agents]]\nname = "baseline"\n', "slurm.gpus: unknown key"),
        ('tasks = ["t6"]\ngpus = "0,1"\n[[agents]]\nname = "baseline"\n', "gpus: must be a list"),
        ('tasks = ["t6"\n', "is not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_in_one_line_before_anything_is_created(task_folders, tmp_path, capsys, body, expected):
    path, name = campaign_file(tmp_path, body)
    capsys.readouterr()
    assert main(["campaign", "run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err and str(path) in err, err
    assert not (tmp_path / "workspaces").exists()


def test_no_file_no_name_and_resume_before_a_run(task_folders, tmp_path, capsys):
    assert main(["campaign", "status", str(tmp_path / "none.toml")]) == 2
    assert "no campaign file" in capsys.readouterr().err
    (tmp_path / "c.toml").write_text('tasks = ["t6"]\n[[agents]]\nname = "baseline"\n')
    assert main(["campaign", "run", str(tmp_path / "c.toml")]) == 2
    assert "name: missing" in capsys.readouterr().err
    path, name = campaign_file(tmp_path, GOOD)
    assert main(["campaign", "resume", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"campaign {name} has not started" in err and f"bench campaign run {path}" in err


def test_an_unpriced_model_under_a_campaigns_api_budget_is_refused_before_anything_starts(
    task_folders, tmp_path, capsys, monkeypatch
):
    """The metering gateway refuses every request for a model it cannot price while a budget is set, so each of the
    campaign's runs could only fail: the whole file is refused first, as `bench run --max-cost` is."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    body = 'tasks = ["t6"]\nmax_cost = 5.0\n[[agents]]\nname = "codex"\nmodel = "gpt-nobody-priced-9"\n'
    path, _ = campaign_file(tmp_path, body)
    capsys.readouterr()
    assert main(["campaign", "run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "gpt-nobody-priced-9" in err and "has no price" in err, err
    assert not (tmp_path / "workspaces").exists()


def test_campaign_status_columns_line_up_for_long_agent_labels(tmp_path, monkeypatch, capsys):
    """The paper's file: opencode's "opencode (openrouter/moonshotai/kimi-k2.6)" is longer than any fixed column;
    every row's task id starts under the header's "task" (a fixed width shifted each opencode row)."""
    from pathlib import Path

    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "workspaces"))  # nothing of it has run: all pending
    paper = Path(__file__).resolve().parents[3] / "campaigns" / "paper.toml"
    assert main(["campaign", "status", str(paper)]) == 0
    head, *rows = capsys.readouterr().out.split("\n\n")[0].splitlines()
    at = head.index(" task ") + 1
    assert len(rows) == 245 and any("kimi-k2.6" in r for r in rows)
    assert {r[at : at + 3] for r in rows} == {f"t{i} " for i in range(1, 8)}
    assert {r[head.index("state") : head.index("state") + 8] for r in rows} == {"pending "}
