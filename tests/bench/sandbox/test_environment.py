"""The agent's environment is an allow-list: the harness's tracking, paths and secrets never reach it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.agents import AGENTS
from bench.agents.base import LaunchContext
from bench.agents.generic import GenericAgent
from bench.pipeline.launch import agent_env
from bench.pipeline.workspace import Workspace
from bench.processes import TOKEN_VAR
from bench.sandbox import agent_environment
from bench.tracking import HOOK_DIR

HARNESS = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "xterm",
    "CUDA_VISIBLE_DEVICES": "0",
    "OMP_NUM_THREADS": "2",
    "HOME": "/root",
    "MLFLOW_TRACKING_URI": "http://tracking:5000",
    "MLFLOW_TRACKING_PASSWORD": "hunter2",
    "MLFLOW_RUN_ID": "abc",
    "BENCH_CACHE_DIR": "/cache",
    "BENCH_DATA_MIRROR": "/mirror",
    "SECRET": "s3cr3t",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "GITHUB_TOKEN": "gh",
    "PYTHONPATH": "/harness/only",
    "VIRTUAL_ENV": "/venv",
    "ANTHROPIC_API_KEY": "sk-ant",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9999",
    "OPENAI_API_KEY": "sk-openai",
}


def test_only_the_allow_list_the_passthrough_and_extra_get_through():
    env = agent_environment(HARNESS, ("ANTHROPIC_*", "BENCH_*", "MLFLOW_*"), {"BENCH_WORKSPACE": "/w", "HOME": "/h"})
    assert env == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "xterm",
        "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "2",
        "ANTHROPIC_API_KEY": "sk-ant",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9999",
        "BENCH_WORKSPACE": "/w",  # set by the harness (extra), not inherited
        "HOME": "/h",
    }  # BENCH_* and MLFLOW_* are refused even when a passthrough pattern names them


def test_launch_builds_the_agent_environment_from_the_allow_list(tmp_path, monkeypatch):
    for k, v in HARNESS.items():
        monkeypatch.setenv(k, v)
    ws = Workspace(tmp_path / "run", task=None)
    claude = AGENTS["claude-code"]
    ctx = LaunchContext(task=None, workspace=ws.path, prompt="P", budget_s=60, home=tmp_path / "run" / "home")
    env = agent_env(ws, "tok", {"HOME": str(ctx.home)}, 60.0, 123.0, claude.passthrough(ctx))
    for gone in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_RUN_ID", "BENCH_CACHE_DIR", "SECRET"):
        assert gone not in env, gone
    assert not {"BENCH_DATA_MIRROR", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "VIRTUAL_ENV", "OPENAI_API_KEY"} & set(
        env
    )
    assert env["ANTHROPIC_API_KEY"] == "sk-ant" and env["HOME"] == str(ctx.home)
    assert env["PYTHONPATH"] == str(HOOK_DIR)  # the tracer only, never the harness's PYTHONPATH
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert env[TOKEN_VAR] == "tok" and env["BENCH_WORKSPACE"] == str(ws.path)
    assert env["BENCH_SPOOL_DIR"] == str(ws.spool_dir) and env["BENCH_BUDGET_S"] == "60.0"
    assert env["PYTHONUNBUFFERED"] == "1" and env["BENCH_STARTED_AT"] == "123.0"


def test_every_agent_declares_its_variables_and_endpoints(tmp_path, monkeypatch):
    for var in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "OPENAI_API_BASE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # a user's Codex or Google login would move those CLIs' endpoints
    monkeypatch.delenv("CODEX_HOME", raising=False)
    ctx = LaunchContext(task=None, workspace=tmp_path, prompt="P", budget_s=60, home=tmp_path / "h")
    expected = {
        "baseline": (),
        "command": (),
        "optuna": (),
        "claude-code": ("https://api.anthropic.com",),
        "codex": ("https://api.openai.com",),
        "opencode": ("https://openrouter.ai",),
        "gemini": ("https://generativelanguage.googleapis.com",),
        "aider": ("https://api.openai.com",),
    }
    variables = {  # the harness variables each may receive: its keys and base URLs, as its CLI reads them
        "claude-code": ("ANTHROPIC_*", "CLAUDE_CODE_*"),
        "codex": ("OPENAI_*", "CODEX_*"),
        "opencode": ("OPENROUTER_API_KEY", "OPENAI_*", "OPENCODE_*"),
        "gemini": ("GEMINI_API_KEY", "GOOGLE_*"),
        "aider": ("OPENAI_*", "ANTHROPIC_*", "AIDER_*"),
    }
    for name, urls in expected.items():
        assert AGENTS[name].endpoints(ctx) == urls, name
        assert AGENTS[name].passthrough(ctx) == variables.get(name, ()), name  # offline agents: none
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:8080")
    assert AGENTS["claude-code"].endpoints(ctx) == ("http://127.0.0.1:8080",)  # a gateway, the mock
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8081/v1")
    bench_model = LaunchContext(task=None, workspace=tmp_path, prompt="P", budget_s=60, home=tmp_path, model="bench/m")
    assert AGENTS["opencode"].endpoints(bench_model) == ("http://127.0.0.1:8081/v1",)


def test_the_generic_agent_reads_its_variables_and_endpoints_from_its_config(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_URL", "http://127.0.0.1:7000")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    explicit, implicit = tmp_path / "a.toml", tmp_path / "b.toml"
    explicit.write_text('command = "x"\npassthrough = ["MYCLI_*"]\nendpoints = ["https://api.example.com"]\n')
    implicit.write_text('command = "x"\n[env]\nBASE = "{env:MY_URL}/v1"\nOTHER = "1"\n')

    def ctx(path):
        opts = {"config": str(path)}
        return LaunchContext(task=None, workspace=tmp_path, prompt="P", budget_s=60, home=tmp_path, options=opts)

    agent = GenericAgent()
    assert agent.passthrough(ctx(explicit)) == ("MYCLI_*",)
    assert agent.endpoints(ctx(explicit)) == ("https://api.example.com",)
    assert agent.passthrough(ctx(implicit)) == ("ANTHROPIC_*", "OPENAI_*")
    assert agent.endpoints(ctx(implicit)) == ("http://127.0.0.1:7000/v1",)
