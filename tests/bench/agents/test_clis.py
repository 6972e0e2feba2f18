"""End to end with the real agent CLIs, each driven by the scripted mock LLM (tests/mockllm).

For every CLI: the pinned version is installed (once, cached in ``BENCH_CLI_DIR``, by default a
folder in the system temp dir shared by test sessions), the mock plays read program.md -> write
run_1.py -> run it -> answer, and ``bench.runner.run`` must end with the script traced, a scored
checkpoint and an official score. Then the two ways an API fails: HTTP 400 on every request and a
refused connection; either way the run must end by itself or by the watchdog, never hang.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pytest

import bench.agents
from bench.agents import credentials, install
from bench.agents.aider import AiderAgent
from bench.agents.base import AgentError, LaunchContext
from bench.agents.claude_code import ClaudeCodeAgent
from bench.agents.codex import CodexAgent
from bench.agents.gemini import GeminiAgent
from bench.agents.generic import GenericAgent
from bench.agents.opencode import OpenCodeAgent
from bench.runner import RunSpec, run
from bench.tracking import schema

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root: tests.mockllm
from tests.mockllm import MockLLM, default_trajectory, run1_from_train  # noqa: E402

ERROR_BUDGET_S = 45.0  # an HTTP 400 must end the run well before this
REFUSED_BUDGET_S = 20.0  # every CLI retries a refused connection past this (Codex forever): the watchdog ends it


@dataclass(frozen=True)
class Case:
    adapter: type
    model: str
    base_url: str  # the variable that points the CLI at the mock
    suffix: str  # appended to the mock's URL (OpenAI clients want the /v1)
    key: str
    write_tool: str  # the CLI's own tool the mock must have used to write run_1.py
    shell_tool: str


CASES = {
    "claude-code": Case(
        ClaudeCodeAgent, "claude-sonnet-4-6", "ANTHROPIC_BASE_URL", "", "ANTHROPIC_API_KEY", "Write", "Bash"
    ),
    "codex": Case(CodexAgent, "gpt-5.5", "OPENAI_BASE_URL", "/v1", "OPENAI_API_KEY", "apply_patch", "exec_command"),
    "opencode": Case(OpenCodeAgent, "bench/mock-model", "OPENAI_BASE_URL", "/v1", "OPENAI_API_KEY", "write", "bash"),
    "gemini": Case(
        GeminiAgent, "gemini-2.5-pro", "GOOGLE_GEMINI_BASE_URL", "", "GEMINI_API_KEY", "write_file", "run_shell_command"
    ),
    "aider": Case(AiderAgent, "openai/mock-model", "OPENAI_BASE_URL", "/v1", "OPENAI_API_KEY", "", ""),
}


@pytest.fixture(scope="session")
def cli_dir() -> Path:
    """Installed CLIs outlive a test session (hundreds of MB each): BENCH_CLI_DIR, or one temp folder."""
    return Path(os.environ.get("BENCH_CLI_DIR") or Path(tempfile.gettempdir()) / "1gc-7rc-test-clis")


@pytest.fixture
def agent(request, cli_dir, monkeypatch):
    """The CLI's adapter, registered for this test, its CLI installed, and the mock's variables cleared."""
    name = request.param
    if install.CLIS[name].kind == "npm" and not shutil.which("npm"):
        pytest.skip("needs Node.js >= 20 with npm")
    if install.CLIS[name].kind == "pypi" and not any(shutil.which(p) for p in install.AIDER_PYTHONS):
        pytest.skip(f"needs one of {', '.join(install.AIDER_PYTHONS)} for Aider's own venv")
    monkeypatch.setenv("BENCH_CLI_DIR", str(cli_dir))
    install.ensure_cli(name)
    monkeypatch.setitem(bench.agents.AGENTS, name, CASES[name].adapter())
    for var in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return name


def point_at(monkeypatch, case: Case, llm: MockLLM) -> None:
    monkeypatch.setenv(case.base_url, llm.url + case.suffix)
    monkeypatch.setenv(case.key, "dummy-key-for-the-mock")


def campaign() -> str:
    return f"test-clis-{uuid.uuid4().hex[:8]}"


NAMES = list(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("agent", NAMES, indirect=True)
def test_cli_completes_the_scripted_trajectory(agent, generated_t6, monkeypatch):
    case = CASES[agent]
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    with MockLLM(default_trajectory(run1), model=case.model) as llm:
        point_at(monkeypatch, case, llm)
        spec = RunSpec(
            task=generated_t6,
            agent=agent,
            model=case.model,
            budget_s=180,
            grace_s=5,
            console=False,
            campaign=campaign(),
        )
        result = run(spec)
    log = "\n".join(llm.summary())
    ws = Path(result.workspace)
    assert (ws / "run_1.py").read_text().strip() == run1.strip(), log
    assert result.scripts["launched"] >= 1, log
    assert result.checkpoints_found >= 1, log
    assert result.status == "success", (result.reason, log)
    # the real CLI doing honest work leaves no finding for the audit: not its own housekeeping, not its tool calls
    assert result.audit.violations == (), result.audit.violations
    assert not result.timed_out and result.wall_time_s < spec.budget
    tools = [r.reply.get("tool") for r in llm.turns()]
    if case.write_tool:
        assert case.write_tool in tools and case.shell_tool in tools, log
    home = Path(result.run_dir) / "home"
    assert home.is_dir() and home not in ws.parents  # the CLI's state stays out of the workspace
    # the CLI's own event stream, parsed live: tool calls and tokens, on the agent run in MLflow
    events = [json.loads(line) for line in (Path(result.run_dir) / "events.jsonl").read_text().splitlines()]
    writes = [e for e in events if e["kind"] == "tool_call" and e["tool"] in ("write", "edit")]
    assert any((e["target"] or "").endswith("run_1.py") for e in writes), events
    assert any(e["kind"] == "tool_call" and e["tool"] == "shell" and "run_1.py" in (e["target"] or "") for e in events)
    agent_metrics = mlflow.tracking.MlflowClient().get_run(result.mlflow_run_id).data.metrics
    assert agent_metrics[schema.TOKENS_INPUT] > 0 and agent_metrics[schema.TOKENS_OUTPUT] > 0, agent_metrics
    assert agent_metrics[schema.TOOL_CALLS] >= 2 and agent_metrics[schema.FILE_WRITES] >= 1, agent_metrics


@pytest.mark.slow
@pytest.mark.parametrize("agent", NAMES, indirect=True)
def test_cli_ends_when_the_api_answers_400(agent, generated_t6, monkeypatch):
    case = CASES[agent]
    with MockLLM(default_trajectory("print('never written')\n"), fail_status=400) as llm:
        point_at(monkeypatch, case, llm)
        spec = RunSpec(
            task=generated_t6,
            agent=agent,
            model=case.model,
            budget_s=ERROR_BUDGET_S,
            grace_s=5,
            console=False,
            campaign=campaign(),
        )
        result = run(spec)
    assert llm.calls(), "the CLI never reached the mock"
    assert all(r.status == 400 for r in llm.calls() if r.api != "models")
    assert result.status == "failed", result.reason
    assert not (Path(result.workspace) / "run_1.py").exists()
    assert result.wall_time_s < spec.budget and not result.timed_out


@pytest.mark.slow
@pytest.mark.parametrize("agent", NAMES, indirect=True)
def test_cli_ends_when_the_connection_is_refused(agent, generated_t6, monkeypatch):
    case = CASES[agent]
    llm = MockLLM().start()
    llm.stop()  # nothing listens on the port any more
    point_at(monkeypatch, case, llm)
    spec = RunSpec(
        task=generated_t6,
        agent=agent,
        model=case.model,
        budget_s=REFUSED_BUDGET_S,
        grace_s=5,
        console=False,
        campaign=campaign(),
    )
    result = run(spec)
    # Either the CLI gives up by itself before the budget, or it retries until the watchdog ends it at the budget;
    # never a success. A CLI that reported its failed connections (Claude Code's api_retry, Codex's Reconnecting:
    # measured) is an infrastructure failure, not the agent's failure or timeout (bench.agents.health).
    if result.timed_out:
        assert spec.budget <= result.wall_time_s <= spec.budget + spec.grace_s + 5
    else:
        assert result.wall_time_s < spec.budget
    if agent in MEASURED:
        assert result.status == "interrupted", (result.status, result.reason)
        assert result.reason.startswith("infrastructure failure: the model API never answered (connection"), (
            result.reason
        )
        assert result.agent_events["api_failure"]["kind"] == "connection"
    else:  # not run here (no npm registry): what it prints on a refused connection is not measured yet
        assert result.status in ("failed", "timeout", "interrupted"), (result.status, result.reason)
    assert not (Path(result.workspace) / "run_1.py").exists()


MEASURED = ("claude-code", "codex")  # the CLIs whose API-failure output bench.agents.health was measured against


@pytest.mark.slow
@pytest.mark.parametrize("agent", MEASURED, indirect=True)
def test_a_run_whose_api_refuses_the_key_ends_early_as_an_infrastructure_failure(agent, generated_t6, monkeypatch):
    """Without the metering gateway (``BENCH_GATEWAY=0``: the CLI's own stream is all the harness reads), the mock
    answers 401 to every model request (its model list answers, as a key that was revoked after the check would):
    Claude Code retries for minutes and is ended after the window, Codex gives up by itself; either way the run is
    interrupted, an infrastructure failure, well before its budget. (With the gateway, the next test: at once.)"""
    case = CASES[agent]
    monkeypatch.setenv("BENCH_API_FAIL_WINDOW", "5")
    monkeypatch.setenv("BENCH_GATEWAY", "0")
    with MockLLM(default_trajectory("print('never written')\n"), fail_status=401, model=case.model) as llm:
        point_at(monkeypatch, case, llm)
        spec = RunSpec(task=generated_t6, agent=agent, model=case.model, budget_s=150, grace_s=5, console=False,
                       campaign=campaign())  # fmt: skip
        result = run(spec)
    assert [r.status for r in llm.calls() if r.api != "models"][:2] == [401, 401]
    assert result.status == "interrupted" and not result.timed_out, (result.status, result.reason)
    assert result.reason.startswith("infrastructure failure: the model API"), result.reason
    failure = result.agent_events["api_failure"]
    assert failure["kind"] == "auth" and failure["errors"] >= 2, failure
    assert result.wall_time_s < 60, result.wall_time_s  # Claude Code alone would retry for ~3 min
    mlflow_run = mlflow.tracking.MlflowClient().get_run(result.mlflow_run_id)
    assert mlflow_run.info.status == "KILLED" and mlflow_run.data.tags[schema.STATUS] == "interrupted"


@pytest.mark.slow
@pytest.mark.parametrize("agent", MEASURED, indirect=True)
def test_a_refused_key_stops_the_run_at_the_first_refusal_through_the_gateway(agent, generated_t6, monkeypatch):
    """Through the metering gateway, the mock answering 401 to every model request: the gateway stops the CLI at the
    first 401 (Claude Code would retry for minutes), the run is recorded as an infrastructure failure that names the
    authentication error, with the fingerprint of the refused credential."""
    case = CASES[agent]
    monkeypatch.delenv("BENCH_API_FAIL_WINDOW", raising=False)  # the default window (3 min) would come far later
    monkeypatch.delenv("BENCH_GATEWAY", raising=False)
    with MockLLM(default_trajectory("print('never written')\n"), fail_status=401, model=case.model) as llm:
        point_at(monkeypatch, case, llm)
        spec = RunSpec(
            task=generated_t6, agent=agent, model=case.model, budget_s=150, console=False, campaign=campaign()
        )  # fmt: skip  (the default grace, 30 s: the stop must not wait it out)
        result = run(spec)
    assert result.sandboxed and spec.grace_s == 30
    lines = [json.loads(x) for x in (Path(result.run_dir) / "evidence" / "llm.jsonl").read_text().splitlines()]
    refusals = [r for r in lines if r.get("refusal")]
    first = refusals[0]
    assert first["status"] == 401 and first["refusal"]["kind"] == "auth" and first["refusal"]["stops"], first
    assert not any(r.get("refusal", {}).get("stops") for r in refusals[1:])  # one stop, whatever came after it
    refused_at = first["t"] + first["latency_s"]  # when the gateway had the whole 401 answer
    agent_end = result.started_at + result.wall_time_s  # the watch's record of the agent's end
    assert agent_end - refused_at < 30, (agent_end - refused_at, lines)
    assert result.status == "interrupted" and not result.timed_out, (result.status, result.reason)
    assert result.reason.startswith("infrastructure failure: the model API refused the run's credential: 401 "), (
        result.reason
    )
    assert "authentication_error" in result.reason and "mock: the request was rejected" in result.reason
    failure = result.agent_events["api_failure"]
    assert failure["kind"] == "auth" and failure["status"] == 401 and failure["heals"] is False, failure
    # the credential's fingerprint, not the key: what a campaign compares with the key it has now
    assert failure["access"] == credentials.fingerprint(agent, case.model)
    assert "dummy-key-for-the-mock" not in (Path(result.run_dir) / "result.json").read_text()
    mlflow_run = mlflow.tracking.MlflowClient().get_run(result.mlflow_run_id)
    assert mlflow_run.info.status == "KILLED" and mlflow_run.data.tags[schema.STATUS] == "interrupted"


GENERIC_CODEX = """
command = [
    "{bin:codex}", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
    "-C", "{workspace}", "-m", "{model}", "-c", "allow_login_shell=false", "-c", "model_provider=mock",
    "-c", 'model_providers.mock={name="mock", base_url="{env:OPENAI_BASE_URL}", env_key="OPENAI_API_KEY"}',
    "{prompt}",
]
model = "gpt-5.5"
parser = "codex"

[env]
CODEX_HOME = "{home}"
"""


@pytest.mark.slow
def test_generic_agent_runs_a_cli_described_in_toml(generated_t6, cli_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_CLI_DIR", str(cli_dir))
    monkeypatch.setitem(bench.agents.AGENTS, "generic", GenericAgent())
    config = tmp_path / "codex.toml"
    config.write_text(GENERIC_CODEX)
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    with MockLLM(default_trajectory(run1)) as llm:
        point_at(monkeypatch, CASES["codex"], llm)
        spec = RunSpec(
            task=generated_t6,
            agent="generic",
            budget_s=180,
            grace_s=5,
            console=False,
            campaign=campaign(),
            options={"config": str(config)},
        )
        result = run(spec)
    assert result.status == "success", (result.reason, llm.summary())
    assert result.agent_argv[0].endswith("/codex") and "gpt-5.5" in result.agent_argv
    assert (Path(result.workspace) / "run_1.py").is_file()


# --- the adapters' command lines and environments (fast: no CLI is started) ---------------------------------


def ctx_for(tmp_path, model=None, **options) -> LaunchContext:
    ws = tmp_path / "run" / "workspace"
    ws.mkdir(parents=True)
    for name in ("program.md", "train.py"):
        (ws / name).write_text("x")
    options.setdefault("bin", "/opt/cli")
    return LaunchContext(
        task=None,
        workspace=ws,
        prompt="PROMPT",
        budget_s=60,
        home=tmp_path / "run" / "home",
        model=model,
        options=options,
    )


def test_every_adapter_keeps_cli_state_in_the_private_home(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    for adapter in (ClaudeCodeAgent(), CodexAgent(), OpenCodeAgent(), GeminiAgent(), AiderAgent()):
        ctx = ctx_for(tmp_path / adapter.name, model="bench/m" if adapter.name == "opencode" else None)
        argv, env = adapter.command(ctx), adapter.env(ctx)
        assert argv[0] == "/opt/cli" and "PROMPT" in argv
        assert adapter.parser_name(ctx) == adapter.name
        assert env["HOME"] == str(ctx.home) and all(Path(env[v]).is_dir() for v in env if v.startswith("XDG_"))
        assert all(str(ctx.workspace) not in env[v] for v in env if v.startswith(("HOME", "XDG_", "CODEX")))


def test_claude_code_argv(tmp_path, monkeypatch):
    ctx = ctx_for(tmp_path, model="claude-sonnet-4-6")
    argv = ClaudeCodeAgent().command(ctx)
    assert argv[1:] == [
        "-p",
        "PROMPT",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--model",
        "claude-sonnet-4-6",
    ]
    env = ClaudeCodeAgent().env(ctx)
    assert env.get("IS_SANDBOX") == ("1" if os.geteuid() == 0 else None)


def test_codex_custom_provider_only_with_a_base_url(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.delenv("CODEX_API_KEY", raising=False)
    ctx = ctx_for(tmp_path)
    argv = CodexAgent().command(ctx)
    assert argv[1:3] == ["exec", "--json"] and argv[-1] == "PROMPT" and "gpt-5.5" in argv
    assert not any(a.startswith("model_provider") for a in argv)
    env = CodexAgent().env(ctx)
    assert env["CODEX_HOME"] == str(ctx.home / ".codex") and env["CODEX_API_KEY"] == "k"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://h:1/v1")
    argv = CodexAgent().command(ctx)
    assert 'model_provider="bench"' in argv
    provider = next(a for a in argv if a.startswith("model_providers.bench="))
    assert 'base_url="http://h:1/v1"' in provider and 'wire_api="responses"' in provider
    assert "allow_login_shell=false" in argv


def test_opencode_config_content(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    ctx = ctx_for(tmp_path)
    argv = OpenCodeAgent().command(ctx)
    assert argv[1:4] == ["run", "--format", "json"] and argv[argv.index("-m") + 1] == "openrouter/moonshotai/kimi-k2.6"
    cfg = json.loads(OpenCodeAgent().env(ctx)["OPENCODE_CONFIG_CONTENT"])
    assert cfg["permission"] == {"*": "allow"} and "provider" not in cfg
    custom = ctx_for(tmp_path / "b", model="bench/m")
    with pytest.raises(AgentError, match="OPENAI_BASE_URL"):
        OpenCodeAgent().command(custom)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://h:1/v1")
    cfg = json.loads(OpenCodeAgent().env(custom)["OPENCODE_CONFIG_CONTENT"])
    assert (
        cfg["provider"]["bench"]["options"]["baseURL"] == "http://h:1/v1" and "m" in cfg["provider"]["bench"]["models"]
    )


def test_gemini_writes_settings_into_the_private_home(tmp_path):
    ctx = ctx_for(tmp_path)
    argv = GeminiAgent().command(ctx)
    assert argv[1:] == ["-p", "PROMPT", "-o", "stream-json", "--yolo", "--skip-trust", "-m", "gemini-2.5-pro"]
    GeminiAgent().env(ctx)
    settings = json.loads((ctx.home / ".gemini" / "settings.json").read_text())
    assert settings["telemetry"]["enabled"] is False


def test_aider_never_says_yes_always(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://h:1/v1")
    argv = AiderAgent().command(ctx_for(tmp_path))
    assert "--yes-always" not in argv  # it would answer "no" to running shell commands
    assert argv[argv.index("--openai-api-base") + 1] == "http://h:1/v1"
    assert argv[-2:] == ["--message", "PROMPT"] and argv.count("--read") == 2


def test_generic_placeholders(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_URL", "http://h:1")
    config = tmp_path / "c.toml"
    config.write_text(
        'command = "mycli --json \'{\\"a\\": 1}\' -m {model} -p {prompt} -C {workspace}"\n'
        'model = "m0"\nparser = "gemini"\nprivate_home = false\n[env]\nURL = "{env:MY_URL}/v1"\nH = "{home}"\n'
    )
    ctx = ctx_for(tmp_path, config=str(config))
    agent = GenericAgent()
    assert agent.command(ctx) == ["mycli", "--json", '{"a": 1}', "-m", "m0", "-p", "PROMPT", "-C", str(ctx.workspace)]
    assert agent.parser_name(ctx) == "gemini"
    assert agent.env(ctx) == {"URL": "http://h:1/v1", "H": str(ctx.home)}
    with pytest.raises(AgentError, match="config=PATH"):
        agent.command(ctx_for(tmp_path / "n"))


def test_ensure_cli_trusts_a_finished_install_and_install_main_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCH_CLI_DIR", str(tmp_path))
    folder = install.install_dir("gemini")
    binary = install.binary_path("gemini")
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    assert not install.is_installed("gemini")  # no marker: a half-finished install
    (folder / install.MARKER).write_text("done")
    assert install.ensure_cli("gemini") == binary
    assert install.install_main(["gemini"]) == 0 and "already installed" in capsys.readouterr().out
    assert install.install_main(["nope"]) == 2
