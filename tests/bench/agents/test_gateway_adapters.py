"""How OpenCode and Aider are pointed at the metering gateway (their ``gateway_var`` and ``gateway_path``, and
:func:`bench.gateway.metering.plan`): the upstream the gateway forwards to is the provider's API with the path its
client puts in its base URL, and the CLI's own setting names the gateway's port inside the sandbox. (The real CLIs
through the gateway: test_gateway_clis.py.)"""

from __future__ import annotations

import json

import pytest

from bench.agents.aider import AiderAgent
from bench.agents.base import LaunchContext
from bench.agents.opencode import GATEWAY_VAR, OpenCodeAgent
from bench.gateway import metering

INSIDE = "http://127.0.0.1:47800"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "BENCH_GATEWAY", "BENCH_GATEWAY_RESOLVE"):
        monkeypatch.delenv(var, raising=False)


def ctx_for(tmp_path, model: str) -> LaunchContext:
    (tmp_path / "h").mkdir(exist_ok=True)
    opts = {"bin": "/bin/true"}  # command() names the CLI, not the pinned install (none here)
    return LaunchContext(None, tmp_path, "P", 60, tmp_path / "h", model=model, options=opts)


def planned(agent, tmp_path, model: str) -> metering.Metering:
    ctx = ctx_for(tmp_path, model)
    meter = metering.plan(agent, ctx, agent.endpoints(ctx), tmp_path / "llm.jsonl")
    assert meter is not None
    return meter


@pytest.mark.parametrize(
    ("model", "upstream", "provider"),
    [
        ("openrouter/moonshotai/kimi-k2.6", "https://openrouter.ai/api/v1", "openrouter"),
        ("anthropic/claude-sonnet-4-6", "https://api.anthropic.com/v1", "anthropic"),
        ("openai/gpt-5.5", "https://api.openai.com/v1", "openai"),
        ("google/gemini-2.5-pro", "https://generativelanguage.googleapis.com/v1beta", "google"),
    ],
)
def test_opencode_builtin_providers_get_the_gateway_as_base_url(tmp_path, model, upstream, provider):
    meter = planned(OpenCodeAgent(), tmp_path, model)
    assert meter.gateway.upstream == upstream
    inside = INSIDE + upstream.split(".com", 1)[-1].split(".ai", 1)[-1]  # the same path, at the gateway's port
    assert meter.ctx.base_urls == {GATEWAY_VAR: inside}
    cfg = json.loads(OpenCodeAgent().env(meter.ctx)["OPENCODE_CONFIG_CONTENT"])
    assert cfg["provider"] == {provider: {"options": {"baseURL": inside}}}
    # without a gateway (unsandboxed, BENCH_GATEWAY=0): the vendor's URL, no provider section
    plain = json.loads(OpenCodeAgent().env(ctx_for(tmp_path, model))["OPENCODE_CONFIG_CONTENT"])
    assert "provider" not in plain


def test_opencode_bench_provider_goes_through_the_gateway(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://llm.example.org/v1")
    meter = planned(OpenCodeAgent(), tmp_path, "bench/my-model")
    assert meter.gateway.upstream == "https://llm.example.org/v1"
    cfg = json.loads(OpenCodeAgent().env(meter.ctx)["OPENCODE_CONFIG_CONTENT"])
    assert cfg["provider"]["bench"]["options"]["baseURL"] == f"{INSIDE}/v1"


def test_aider_openai_models_go_through_the_gateway(tmp_path, monkeypatch):
    meter = planned(AiderAgent(), tmp_path, "openai/gpt-5.5")
    assert meter.gateway.upstream == "https://api.openai.com/v1"
    argv = AiderAgent().command(meter.ctx)
    assert argv[argv.index("--openai-api-base") + 1] == f"{INSIDE}/v1"
    env = AiderAgent().env(meter.ctx)  # LiteLLM reads OPENAI_BASE_URL first: it must not name the API itself
    assert env["OPENAI_BASE_URL"] == env["OPENAI_API_BASE"] == f"{INSIDE}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "https://llm.example.org/v1")
    assert planned(AiderAgent(), tmp_path, "gpt-5.5").gateway.upstream == "https://llm.example.org/v1"  # bare name


def test_aider_anthropic_models_go_through_the_gateway(tmp_path):
    meter = planned(AiderAgent(), tmp_path, "anthropic/claude-sonnet-4-6")
    assert meter.gateway.upstream == "https://api.anthropic.com"  # LiteLLM appends /v1/messages
    env = AiderAgent().env(meter.ctx)
    assert env["ANTHROPIC_API_BASE"] == env["ANTHROPIC_BASE_URL"] == INSIDE
    assert "--openai-api-base" not in AiderAgent().command(meter.ctx)


def test_aider_other_litellm_providers_keep_their_route(tmp_path):
    ctx = ctx_for(tmp_path, "gemini/gemini-2.5-pro")
    assert AiderAgent().gateway_var(ctx) is None
    assert metering.plan(AiderAgent(), ctx, AiderAgent().endpoints(ctx), tmp_path / "llm.jsonl") is None
