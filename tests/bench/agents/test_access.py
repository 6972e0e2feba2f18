"""Credentials and endpoints checked before a run: the rules per CLI (variables, login files in a temp HOME) and the
endpoint check against the scripted mock (tests/mockllm): a list with the model, a refused port, a model the list
does not hold, a key refused with 401."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench.agents import api_probe
from bench.agents.credentials import need_of
from bench.errors import InputError
from bench.preflight import check_api

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root: tests.mockllm
from tests.bench.campaign.conftest import task_folders  # noqa: E402, F401 (a fixture)
from tests.mockllm import MockLLM  # noqa: E402


def test_claude_code_credentials_in_claude_codes_order(tmp_path):
    assert need_of("claude-code", None, env={}, home=tmp_path).credential is None
    oauth = need_of("claude-code", None, env={"CLAUDE_CODE_OAUTH_TOKEN": "o"}, home=tmp_path).credential
    assert (oauth.kind, oauth.source, oauth.login) == ("Claude login", "CLAUDE_CODE_OAUTH_TOKEN", True)
    env = {"CLAUDE_CODE_OAUTH_TOKEN": "o", "ANTHROPIC_API_KEY": "sk-secret-1", "ANTHROPIC_AUTH_TOKEN": "t"}
    need = need_of("claude-code", "sonnet", env=env, home=tmp_path)
    assert [c.source for c in need.credentials] == [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
    ]
    assert need.credential.headers == {"x-api-key": "sk-secret-1"}
    assert "sk-secret" not in repr(need.credential) + str(need.credential) + repr(need)
    assert need.model is None  # an alias the CLI resolves: not looked for in the list
    assert need.base_url == "https://api.anthropic.com" and need.base_variable is None
    blank = need_of("claude-code", None, env={"ANTHROPIC_API_KEY": "  "}, home=tmp_path)
    assert blank.credential is None
    assert blank.missing() == (
        "claude-code: no credential: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`)"
    )


def test_codex_key_or_chatgpt_login_in_codex_home(tmp_path):
    assert need_of("codex", None, env={}, home=tmp_path).credential is None
    login = tmp_path / ".codex" / "auth.json"
    login.parent.mkdir()
    login.write_text(json.dumps({"OPENAI_API_KEY": None, "tokens": {"access_token": "a", "refresh_token": "r"}}))
    found = need_of("codex", None, env={}, home=tmp_path).credential
    assert (found.kind, found.source, found.login) == ("ChatGPT login", str(login), True)
    elsewhere = tmp_path / "ch"
    elsewhere.mkdir()
    (elsewhere / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-stored"}))
    stored = need_of("codex", None, env={"CODEX_HOME": str(elsewhere)}, home=tmp_path).credential
    assert (stored.kind, stored.login, stored.headers) == ("api key", False, {"Authorization": "Bearer sk-stored"})
    (elsewhere / "auth.json").write_text("{not json")
    assert need_of("codex", None, env={"CODEX_HOME": str(elsewhere)}, home=tmp_path).credential is None
    assert need_of("codex", None, env={"CODEX_API_KEY": "c"}, home=tmp_path).credential.source == "CODEX_API_KEY"
    # with OPENAI_BASE_URL the adapter's provider reads OPENAI_API_KEY only: a login or CODEX_API_KEY is not used
    gateway = need_of("codex", None, env={"OPENAI_BASE_URL": "http://gw/v1", "CODEX_API_KEY": "c"}, home=tmp_path)
    assert gateway.credential is None and gateway.base_variable == "OPENAI_BASE_URL"


def test_gemini_key_or_google_login(tmp_path):
    assert need_of("gemini", None, env={}, home=tmp_path).credential is None
    assert need_of("gemini", None, env={"GEMINI_API_KEY": "g"}, home=tmp_path).credential.headers == {
        "x-goog-api-key": "g"
    }
    (tmp_path / ".gemini").mkdir()
    (tmp_path / ".gemini" / "oauth_creds.json").write_text('{"refresh_token": "r"}')
    assert need_of("gemini", None, env={}, home=tmp_path).credential.kind == "Google login"


def test_provider_prefixes_of_opencode_and_aider(tmp_path):
    router = need_of("opencode", None, env={"OPENROUTER_API_KEY": "r"}, home=tmp_path)  # openrouter/moonshotai/...
    assert (router.api, router.model, router.credential.source) == (
        "openrouter",
        "moonshotai/kimi-k2.6",
        "OPENROUTER_API_KEY",
    )
    assert need_of("opencode", "bench/m", env={}, home=tmp_path) is None  # the adapter's check names OPENAI_BASE_URL
    bench = need_of("opencode", "bench/m", env={"OPENAI_BASE_URL": "http://x/v1"}, home=tmp_path)
    assert (bench.base_url, bench.model, bench.credential) == ("http://x/v1", "m", None)
    assert bench.missing() == "opencode: no credential: set OPENAI_API_KEY"
    # opencode's built-in anthropic provider keeps Anthropic's URL; aider's follows ANTHROPIC_BASE_URL
    moved = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://gw"}
    assert need_of("opencode", "anthropic/claude-x", env=moved, home=tmp_path).base_url == "https://api.anthropic.com"
    assert need_of("aider", "anthropic/claude-x", env=moved, home=tmp_path).base_url == "http://gw"
    assert need_of("aider", "gpt-5.5", env={"OPENAI_API_BASE": "http://b/v1"}, home=tmp_path).base_url == "http://b/v1"
    assert need_of("aider", "ollama/llama3", env={}, home=tmp_path) is None  # no rule: not checked
    for offline in ("baseline", "command", "optuna", "generic"):
        assert need_of(offline, None, env={}, home=tmp_path) is None


# --- the endpoint --------------------------------------------------------------------------------------------


def _claude(url: str, model: str = "claude-sonnet-4-6"):
    return need_of("claude-code", model, env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": url}, home=Path("/nx"))


def test_endpoint_answers_with_the_model_listed():
    with MockLLM(model="claude-sonnet-4-6") as llm:
        need = _claude(llm.url)
        found = api_probe.probe(need)
        assert (found.status, found.models, found.error) == (200, ("claude-sonnet-4-6",), None)
        assert api_probe.problem(need, found) is None
        assert api_probe.problem(_claude(llm.url, "claude-sonnet-4"), found) is None  # a dated version: offered
        wrong = _claude(llm.url, "claude-opus-9")
        assert api_probe.problem(wrong, api_probe.probe(wrong)) == (
            f"claude-code: model 'claude-opus-9' is not offered by {llm.url} (1 listed: claude-sonnet-4-6): "
            "pick one with --model"
        )
        req = llm.requests[0]
        headers = {k.lower(): v for k, v in req.headers.items()}  # HTTP names are case-insensitive
        assert req.path == "/v1/models?limit=1000" and headers["x-api-key"] == "k"
        assert headers["anthropic-version"] == "2023-06-01"


def test_gemini_and_openai_lists_are_read():
    with MockLLM(model="gemini-2.5-pro") as llm:
        g = need_of("gemini", None, env={"GEMINI_API_KEY": "g", "GOOGLE_GEMINI_BASE_URL": llm.url}, home=Path("/nx"))
        assert api_probe.probe(g).models == ("gemini-2.5-pro",)
        o = need_of("codex", "gpt-5.5", env={"OPENAI_API_KEY": "o", "OPENAI_BASE_URL": llm.url + "/v1"})
        found = api_probe.probe(o)
        assert found.models == ("gemini-2.5-pro",) and "gpt-5.5" in api_probe.problem(o, found)
    paths = [r.path for r in llm.requests]
    assert paths == ["/v1beta/models?pageSize=1000", "/v1/models"]
    assert {k.lower(): v for k, v in llm.requests[1].headers.items()}["authorization"] == "Bearer o"


def test_a_refused_port_is_no_answer():
    llm = MockLLM().start()
    llm.stop()
    need = need_of("codex", None, env={"OPENAI_API_KEY": "o", "OPENAI_BASE_URL": llm.url + "/v1"})
    found = api_probe.probe(need, timeout=5)
    assert found.status is None and "refused" in found.error.lower()
    assert api_probe.problem(need, found) == (
        f"codex: the endpoint {llm.url}/v1 does not answer ({found.error}): check OPENAI_BASE_URL"
    )


class _Refuses(BaseHTTPRequestHandler):
    """Every request: 401, as an API answers a bad key."""

    def do_GET(self):
        body = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}'
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def refusing():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_refused_key_is_named_but_a_login_only_proves_reachability(refusing):
    need = _claude(refusing)
    assert api_probe.problem(need, api_probe.probe(need)) == (
        f"claude-code: ANTHROPIC_API_KEY was refused by {refusing} (HTTP 401): set a valid key"
    )
    login = need_of("claude-code", None, env={"CLAUDE_CODE_OAUTH_TOKEN": "o", "ANTHROPIC_BASE_URL": refusing})
    found = api_probe.probe(login)
    assert found.status == 401 and api_probe.problem(login, found) is None


def test_check_api_names_the_first_agent_not_ready(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    check_api([("baseline", None), ("command", None)])  # offline agents: nothing to ask
    with MockLLM(model="gpt-5.5") as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.url + "/v1")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.url)  # an endpoint that answers (a keyless agent's is asked too)
        monkeypatch.setenv("OPENAI_API_KEY", "o")
        check_api([("codex", "gpt-5.5"), ("baseline", None)])
        with pytest.raises(InputError, match="^claude-code: no credential: set ANTHROPIC_API_KEY"):
            check_api([("codex", "gpt-5.5"), ("claude-code", None)])
        with pytest.raises(InputError, match="^codex: model 'gpt-4' is not offered"):
            check_api([("codex", "gpt-4")])
        monkeypatch.setenv("BENCH_API_CHECK", "0")  # the endpoint is not asked; the credential still is
        check_api([("codex", "gpt-4")])


def test_bench_agents_check_shows_cli_credential_and_endpoint(monkeypatch, tmp_path, capsys):
    from bench.cli import main

    clis = tmp_path / "clis"
    fake = clis / "codex-0.169.0"
    (fake / "node_modules" / ".bin").mkdir(parents=True)
    (fake / "node_modules" / ".bin" / "codex").write_text("")
    (fake / ".bench-installed").write_text("")  # installed, as install.py marks it
    monkeypatch.setenv("BENCH_CLI_DIR", str(clis))
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    with MockLLM(model="gpt-5.5") as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown")
        assert main(["agents", "check", "codex", "baseline"]) == 0
        ready = capsys.readouterr().out.splitlines()
        assert main(["agents", "check", "codex", "claude-code"]) == 1  # a named agent is not ready
        missing = capsys.readouterr().out.splitlines()
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-shown")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.url)
        assert main(["agents", "check", "claude-code", "--model", "gpt-5.5"]) == 1  # a key, but no CLI: not ready
        uninstalled = capsys.readouterr().out.splitlines()[1]
    assert uninstalled.startswith("claude-code  not installed") and uninstalled.endswith(
        "not installed: bench agents install claude-code (a run installs it on first use)"
    )
    assert ready[0].split() == ["agent", "CLI", "credential", "endpoint", "status"]
    codex = ready[1].split()
    assert codex[:5] == ["codex", "0.169.0", "API", "key", "OPENAI_API_KEY"]
    assert codex[5:8] == ["HTTP", "200", "in"] and codex[-2:] == [f"({llm.url}/v1)", "ready"]
    assert ready[2].split() == ["baseline", "-", "-", "-", "offline"]
    assert "sk-never-shown" not in "\n".join(ready + missing)
    claude = missing[2]
    assert claude.startswith("claude-code  not installed (2.1.197)") and " none " in claude
    assert claude.endswith(
        "no credential: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`)"
    )


@pytest.mark.usefixtures("task_folders")
def test_a_campaign_with_an_agent_lacking_its_key_fails_before_its_first_run(tmp_path, monkeypatch, capsys):
    """The baseline could run; claude-code has no key: refused whole, before any run, folder or MLflow run."""
    from bench.cli import main
    from tests.bench.campaign.conftest import campaign_file

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(tmp_path / "mlruns"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    body = 'tasks = ["t6"]\nbudget = "40s"\n[[agents]]\nname = "baseline"\n[[agents]]\nname = "claude-code"\n'
    path, _ = campaign_file(tmp_path, body)
    capsys.readouterr()
    with MockLLM() as llm:  # an endpoint that answers: the keyless agent's is asked whether it does
        monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.url)
        assert main(["campaign", "run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "bench: claude-code: no credential: set ANTHROPIC_API_KEY "
        "(or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`)"
    )
    assert not (tmp_path / "workspaces").exists() and not (tmp_path / "mlruns").exists()
