"""Every problem before a campaign starts, in one report: two agents without their key (one of them with a closed
endpoint too) and one whose endpoint is closed are four lines of one try (exit 2), and nothing of the campaign is
created. A campaign file with several mistakes is refused with all of them at once too."""

from __future__ import annotations

import socket

from bench.cli import main
from tests.bench.campaign.conftest import campaign_file
from tests.mockllm import MockLLM

KEYS = (
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY",
    "CODEX_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "CODEX_HOME", "BENCH_API_CHECK",
)  # fmt: skip


def closed_port() -> int:
    """A local port nobody listens on: bound by the kernel's choice, then closed (a connect is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_missing_keys_and_a_closed_endpoint_are_one_report(task_folders, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no login file of the user's is read
    for var in KEYS:
        monkeypatch.delenv(var, raising=False)
    closed = f"http://127.0.0.1:{closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", closed)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")  # codex has its key; its endpoint does not answer
    body = 'tasks = ["t6"]\nsandbox = false\n'
    body += '[[agents]]\nname = "claude-code"\n[[agents]]\nname = "gemini"\n[[agents]]\nname = "codex"\n'
    body += 'model = "gpt-5.5"\n'
    path, name = campaign_file(tmp_path, body)

    with MockLLM() as llm:  # gemini's endpoint answers (asked without a key: whether it is there at all)
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", llm.url)
        shut = f"http://127.0.0.1:{closed_port()}"
        monkeypatch.setenv("ANTHROPIC_BASE_URL", shut)  # claude-code has no key AND its endpoint is closed
        assert main(["campaign", "run", str(path)]) == 2
    err = capsys.readouterr().err
    lines = [line.removeprefix("  - ") for line in err.splitlines()[1:]]
    assert err.startswith("bench: 4 problems, found before anything was created"), err
    assert lines[0].startswith("claude-code: no credential: set ANTHROPIC_API_KEY"), err  # the keys, then endpoints
    assert lines[1].startswith("gemini: no credential: set GEMINI_API_KEY"), err
    assert lines[2].startswith(f"claude-code: the endpoint {shut} does not answer"), err
    assert lines[2].endswith("check ANTHROPIC_BASE_URL"), err
    assert lines[3].startswith(f"codex: the endpoint {closed} does not answer"), err
    assert lines[3].endswith("check OPENAI_BASE_URL"), err
    assert len(lines) == 4, err
    assert not (tmp_path / "workspaces").exists()  # nothing of the campaign was created


def test_a_campaign_file_with_several_mistakes_names_them_all(task_folders, tmp_path, capsys):
    body = 'tasks = ["t6", "t99"]\nrepeats = 0\nbudget = 40\n'
    body += '[[agents]]\nname = "baseline"\nmodle = "x"\n[[agents]]\nname = "nobody"\n'
    path, _ = campaign_file(tmp_path, body)
    assert main(["campaign", "plan", str(path)]) == 2
    err = capsys.readouterr().err
    said = [line.removeprefix("  - ").removeprefix(f"{path}: ") for line in err.splitlines()[1:]]
    assert err.startswith("bench: 5 problems"), err
    assert [s.split(":")[0] for s in said] == ["repeats", "budget", "tasks", "agents[0].modle", "agents[1].name"], err


def test_a_typo_in_the_file_and_a_missing_key_are_one_report(task_folders, tmp_path, monkeypatch, capsys):
    """Two unknown keys (each named, not only the first) and an agent without its key, in one try of `campaign run`:
    the file's mistakes do not hide what the machine lacks for the agents the file names well."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in KEYS:
        monkeypatch.delenv(var, raising=False)
    body = 'tasks = ["t6"]\nbudgett = "3m"\ngpuss = 1\n[[agents]]\nname = "claude-code"\n'
    path, _ = campaign_file(tmp_path, body)
    with MockLLM() as llm:  # its endpoint answers: only the key is missing
        monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.url)
        assert main(["campaign", "run", str(path)]) == 2
    err = capsys.readouterr().err
    said = [line.removeprefix("  - ").removeprefix(f"{path}: ") for line in err.splitlines()[1:]]
    assert err.startswith("bench: 3 problems"), err
    assert [s.split(":")[0] for s in said] == ["budgett", "gpuss", "claude-code"], err
    assert said[2].startswith("claude-code: no credential: set ANTHROPIC_API_KEY"), err
    assert main(["campaign", "plan", str(path)]) == 2  # plan reads the file only: the machine is not asked
    assert [line for line in capsys.readouterr().err.splitlines() if "claude-code" in line] == []
    assert not (tmp_path / "workspaces").exists()
