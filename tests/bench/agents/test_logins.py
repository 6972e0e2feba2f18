"""The CLIs' real logins: found and named by the check, given to their own run's sandbox read-only, forwarded by the
gateway untouched, never written anywhere.

Logins (docs/agents-and-credentials.md, "Logins"): Claude Code's ``CLAUDE_CODE_OAUTH_TOKEN`` (a variable), Codex's
``auth.json`` (a ChatGPT login, in ``CODEX_HOME``), Gemini CLI's ``~/.gemini/oauth_creds.json`` (a Google login).
The sandbox tests launch the real adapters through the real launch path (bwrap, the private home, the allow-listed
environment) with a tiny shell script as the CLI (``--agent-option bin=``), which reports what it can see and do.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from bench.agents import AGENTS, credentials
from bench.agents.base import LaunchContext
from bench.agents.credentials import need_of
from bench.errors import InputError
from bench.gateway import metering
from bench.paths import mlruns_dir
from bench.pipeline.launch import launch
from bench.pipeline.watch import watch
from bench.pipeline.workspace import Workspace
from bench.preflight import check_api
from bench.runspec import RunSpec
from bench.sandbox import probe
from tests.bench.gateway.test_proxy import UnixHTTP, certs, gateway, lines, mock, serve  # noqa: F401 (fixtures)
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_HOME",
    "GEMINI_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
)
CLAUDE_TOKEN = "sk-ant-oat01-LOGIN-VALUE-7f3a9c"  # the shape `claude setup-token` prints
ACCESS_SECRET = "ACCESS-VALUE-51d2e8"  # inside the ChatGPT access token's claims: findable in any copy


def _jwt(claims: dict) -> str:
    def part(o: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(o).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def chatgpt_login(folder: Path, expires_in: float = 3600, **extra) -> Path:
    """An ``auth.json`` as ``codex login`` writes it (ChatGPT mode; the claims Codex reads)."""
    exp = int(time.time() + expires_in)
    auth = {"chatgpt_account_id": "acc-1", "chatgpt_plan_type": "plus", "note": ACCESS_SECRET}
    tokens = {
        "id_token": _jwt({"email": "r@example.org", "exp": exp, "https://api.openai.com/auth": auth}),
        "access_token": _jwt({"exp": exp, "https://api.openai.com/auth": auth}),
        "refresh_token": "rt-REFRESH-VALUE-0c4d",
        "account_id": "acc-1",
    }
    data = {"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "tokens": tokens, "last_refresh": "2026-11-26T09:00:00Z"}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "auth.json").write_text(json.dumps({**data, **extra}))
    return folder / "auth.json"


def google_login(home: Path) -> Path:
    path = home / ".gemini" / "oauth_creds.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    creds = {"access_token": "ya29.GOOGLE-ACCESS-3e1", "refresh_token": "1//GOOGLE-REFRESH-9b2", "token_type": "Bearer"}
    path.write_text(json.dumps({**creds, "expiry_date": int(time.time() * 1000) + 3_600_000}))
    return path


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A user's home with no credential in the environment (the user's real ones are never read)."""
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("BENCH_API_CHECK", "0")  # the credential only: no request leaves this machine
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    return home


# --- found and named --------------------------------------------------------------------------------------


def test_the_check_names_each_login_and_which_credential_wins(home, monkeypatch, capsys):
    from bench.cli import main

    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", CLAUDE_TOKEN)
    chatgpt_login(home / ".codex")
    google_login(home)
    assert main(["agents", "check", "claude-code", "codex", "gemini"]) in (0, 1)  # 1: a CLI not installed here
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "login CLAUDE_CODE_OAUTH_TOKEN (Claude)" in rows["claude-code"]
    assert "login ~/.codex/auth.json (ChatGPT)" in rows["codex"]
    assert "login ~/.gemini/oauth_creds.json (Google)" in rows["gemini"]
    assert CLAUDE_TOKEN not in str(rows) and ACCESS_SECRET not in str(rows)
    # a key beside a login is what the run uses, and what the check names
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api-key-1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-key-1")
    assert str(need_of("claude-code", None).credential) == "API key ANTHROPIC_API_KEY"
    assert str(need_of("codex", None).credential) == "API key OPENAI_API_KEY"
    monkeypatch.delenv("OPENAI_API_KEY")
    elsewhere = home / "codex-home"
    monkeypatch.setenv("CODEX_HOME", str(elsewhere))
    chatgpt_login(elsewhere)
    need = need_of("codex", None)
    assert str(need.credential) == "login ~/codex-home/auth.json (ChatGPT)"
    assert need.base_url == credentials.CHATGPT_BACKEND  # a ChatGPT login's model requests go there
    check_api([("claude-code", None), ("codex", None), ("gemini", None)])  # all three pass the check before a run


def test_an_unsandboxed_run_on_a_login_file_is_refused_before_anything_starts(home, monkeypatch, capsys):
    """A login file reaches a CLI only as a bind into the sandbox: `bench run --unsandboxed` on one would start a CLI
    without it. One line naming the file and what to set, exit 2, no run directory; a key instead is accepted."""
    from bench.cli import main
    from bench.paths import workspaces_dir

    chatgpt_login(home / ".codex")
    campaign = "unsandboxed-login"
    argv = ["run", "--agent", "codex", "--task", "t6", "--unsandboxed", "--budget", "1m", "--campaign", campaign]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "codex: an unsandboxed run cannot use the login in" in line and "auth.json" in line
    assert "set OPENAI_API_KEY, or run without --unsandboxed" in line
    assert not (workspaces_dir() / campaign).exists()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-key-1")  # a key wins over the login: nothing to bind
    from bench.preflight import check_unsandboxed_login

    check_unsandboxed_login("codex", None)
    check_unsandboxed_login("claude-code", None)  # no credential at all: check_api says so, not this check


@pytest.mark.parametrize(
    ("agent", "write", "said"),
    [
        ("codex", lambda h: chatgpt_login(h / ".codex").write_text("{not json"), "is not valid JSON"),
        ("codex", lambda h: chatgpt_login(h / ".codex", expires_in=-7200), "expired ("),
        ("codex", lambda h: chatgpt_login(h / ".codex", expires_in=120), "expired ("),  # Codex would refresh it now
        ("codex", lambda h: chatgpt_login(h / ".codex", tokens={"access_token": "a"}), "no access or refresh token"),
        ("codex", lambda h: chatgpt_login(h / ".codex", tokens={"access_token": "a", "refresh_token": "r"},
                                          last_refresh="2026-11-01T00:00:00Z"), "days old (Codex refreshes it)"),
        ("gemini", lambda h: google_login(h).write_text('{"access_token": "ya29.x"}'), "has no refresh token"),
        ("gemini", lambda h: google_login(h).write_text("[]"), "is not a JSON object"),
    ],
)  # fmt: skip
def test_a_broken_login_is_one_line_saying_what_to_run(home, agent, write, said):
    write(home)
    need = need_of(agent, None)
    assert need.credential is None
    file = "~/.codex/auth.json" if agent == "codex" else "~/.gemini/oauth_creds.json"
    todo = "log in again with `codex login`" if agent == "codex" else "run `gemini`, then /auth (Login with Google)"
    line = need.missing()
    assert line.startswith(f"{agent}: the ") and f" {file} " in line and said in line and todo in line, line
    assert "\n" not in line
    with pytest.raises(InputError) as e:  # bench run / campaign run: exit 2 before anything is created
        check_api([(agent, None)])
    assert str(e.value) == line


# --- the sandbox: read-only, this agent only, nothing left behind -----------------------------------------

REPORT = """#!/bin/bash
f="$HOME/{inside}"
if [ -e "$f" ]; then echo "seen $(sha256sum < "$f" | cut -c1-64)"; else echo "absent"; fi
echo x >> "$f" 2>/dev/null && echo "appended" || echo "append refused"
mv "$f" "$f.moved" 2>/dev/null && echo "moved" || echo "move refused"
rm -f "$f" 2>/dev/null; [ -e "$f" ] && echo "rm refused" || echo "removed"
chmod 666 "$f" 2>/dev/null && echo "chmod done" || echo "chmod refused"
[ -e "{source}" ] && echo "source visible" || echo "source hidden"
[ -n "$CLAUDE_CODE_OAUTH_TOKEN" ] && echo "token $(printf %s "$CLAUDE_CODE_OAUTH_TOKEN" | sha256sum | cut -c1-64)" \
  || echo "no token"
"""


def _launch(agent_name: str, tmp: Path, script: Path) -> tuple[list[str], Workspace]:
    """The agent's adapter launched as a run does (sandbox, private home, its environment), the script as its CLI;
    the script's report (its lines of agent.log)."""
    ws = Workspace(tmp / f"run-{agent_name}", task=None)
    for d in (ws.path, ws.checkpoints, ws.spool_dir):
        d.mkdir(parents=True, exist_ok=True)
    spec = RunSpec("login", agent_name, budget_s=60, device="cpu", console=False, options={"bin": str(script)})
    launched = launch(AGENTS[agent_name], ws, spec)
    watch(launched, 60, 2)  # the script gets the CLI's arguments and ignores them
    text = ws.log.read_text()
    return [x for x in text.splitlines() if x.split(" ", 1)[0] in REPORT_WORDS], ws


REPORT_WORDS = {
    "seen",
    "absent",
    "appended",
    "append",
    "moved",
    "move",
    "rm",
    "removed",
    "chmod",
    "source",
    "token",
    "no",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _everything_under(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.skipif(probe() is not None, reason="needs a working bubblewrap sandbox")
@pytest.mark.parametrize(
    ("owner", "other", "inside"),
    [("codex", "gemini", ".codex/auth.json"), ("gemini", "codex", ".gemini/oauth_creds.json")],
)
def test_a_login_file_is_read_only_in_its_agents_sandbox_and_absent_from_the_others(home, tmp_path, monkeypatch,
                                                                                   owner, other, inside):  # fmt: skip
    clis = tmp_path / "clis"  # the pinned CLIs' folder is what a sandbox may read: the stand-in CLI lives there
    clis.mkdir()
    monkeypatch.setenv("BENCH_CLI_DIR", str(clis))
    source = chatgpt_login(home / ".codex") if owner == "codex" else google_login(home)
    original = source.read_bytes()
    script = clis / "report.sh"
    script.write_text(REPORT.replace("{source}", str(source)).replace("{inside}", inside))
    script.chmod(0o755)
    seen, ws = _launch(owner, tmp_path, script)
    assert seen[0] == f"seen {_sha(original)}", seen  # the CLI reads the login where it looks for it ...
    assert seen[1:4] == ["append refused", "move refused", "rm refused"], seen  # ... and cannot change it
    assert "chmod refused" in seen, seen
    assert "source hidden" in seen  # the user's own file (their home) is not in the view
    assert source.read_bytes() == original  # the user's login is untouched
    not_seen, ws_other = _launch(other, tmp_path, script)
    assert not_seen[0] == "absent" and "source hidden" in not_seen, not_seen
    for run in (ws, ws_other):  # no copy and no mount point stays in the run's folder (the private home is there)
        assert not (run.run_dir / "home" / inside).exists()
        assert b"REFRESH-VALUE" not in _everything_under(run.run_dir) and b"GOOGLE-REFRESH" not in _everything_under(
            run.run_dir
        )


@pytest.mark.skipif(probe() is not None, reason="needs a working bubblewrap sandbox")
def test_the_claude_login_variable_reaches_claude_codes_sandbox_only(home, tmp_path, monkeypatch):
    clis = tmp_path / "clis"
    clis.mkdir()
    monkeypatch.setenv("BENCH_CLI_DIR", str(clis))
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", CLAUDE_TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-key-1")  # codex runs on a key: its own variables only
    script = clis / "report.sh"
    script.write_text(REPORT.replace("{source}", "/nonexistent").replace("{inside}", "none"))
    script.chmod(0o755)
    claude, ws = _launch("claude-code", tmp_path, script)
    # the sandbox gets the run's token in the variable, never the login itself: the gateway swaps it (issue 29)
    assert any(x.startswith("token ") for x in claude) and f"token {_sha(CLAUDE_TOKEN.encode())}" not in claude, claude
    codex, ws_codex = _launch("codex", tmp_path, script)
    assert "no token" in codex, codex
    for run in (ws, ws_codex):
        assert CLAUDE_TOKEN.encode() not in _everything_under(run.run_dir)


# --- through the gateway: the login's headers untouched, never logged --------------------------------------


def test_the_gateway_forwards_a_logins_headers_byte_for_byte_and_logs_none(mock, certs, tmp_path):  # noqa: F811
    from bench.gateway.proxy import Gateway
    from tests.bench.agents.tlsmock import HOST

    access = chatgpt_login(tmp_path / "c").read_text()
    bearer = "Bearer " + json.loads(access)["tokens"]["access_token"]
    # two APIs through one gateway: the union of their endpoint lists (family "any")
    gw = Gateway(mock.url_for() + "/backend-api/codex", tmp_path / "llm.jsonl", resolve={HOST: "127.0.0.1"},
                 cafile=str(certs[0]), family="any")  # fmt: skip
    server, sock = serve(gw, tmp_path)
    sent = [
        ("/backend-api/codex/responses", {"Authorization": bearer, "chatgpt-account-id": "acc-1"}),
        ("/v1/messages?beta=true", {"Authorization": f"Bearer {CLAUDE_TOKEN}", "anthropic-beta": "oauth-2025-04-20"}),
    ]
    try:
        for path, headers in sent:
            c = UnixHTTP(sock)
            body = {"model": "gpt-5.5", "input": "hi", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
            assert c.getresponse().read() is not None
            c.close()
        logged = lines(tmp_path, 2)
    finally:
        server.close()
    got = [{k.lower(): v for k, v in call.headers.items()} for call in mock.calls()]
    for (_, headers), received in zip(sent, got, strict=True):
        for name, value in headers.items():
            assert received[name.lower()] == value  # byte for byte
    assert [r["path"] for r in logged] == ["/backend-api/codex/responses", "/v1/messages?beta=true"]
    text = (tmp_path / "llm.jsonl").read_text()
    assert ACCESS_SECRET not in text and bearer[7:] not in text and CLAUDE_TOKEN not in text


def test_a_chatgpt_login_is_pointed_at_the_gateway_with_the_whole_backend(home, tmp_path, monkeypatch):
    """Codex 0.169.0 under a ChatGPT login ignores OPENAI_BASE_URL; a provider with ``requires_openai_auth`` and its
    ``base_url``, and ``chatgpt_base_url``, move all of its requests (seen with the real CLI against a recording
    server: /backend-api/codex/responses, /codex/models, /wham/accounts/check, /ps/plugins, each with the login's
    Authorization and chatgpt-account-id)."""
    chatgpt_login(home / ".codex")
    codex = AGENTS["codex"]
    ctx = LaunchContext(task=None, workspace=tmp_path, prompt="P", budget_s=60, home=tmp_path / "h", model="gpt-5.5")
    assert codex.endpoints(ctx) == ("https://chatgpt.com/backend-api/codex",)
    meter = metering.plan(codex, ctx, codex.endpoints(ctx), tmp_path / "llm.jsonl")
    assert meter is not None and meter.gateway.upstream == "https://chatgpt.com/backend-api/codex"
    argv = codex.command(meter.ctx)
    inside = "http://127.0.0.1:47800/backend-api/codex"
    provider = (
        f'model_providers.bench={{name="bench", base_url="{inside}", wire_api="responses", requires_openai_auth=true}}'
    )
    assert provider in argv and 'chatgpt_base_url="http://127.0.0.1:47800/backend-api/"' in argv
    assert not any("env_key" in a for a in argv)  # the login, not a variable, authenticates
    for off in ("analytics.enabled=false", "features.plugins=false", "features.apps=false"):  # connectors, telemetry
        assert off in argv
    assert codex.login_files(ctx) == ((home / ".codex" / "auth.json", tmp_path / "h" / ".codex" / "auth.json"),)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-key-1")  # a key wins: no login file, the key's provider
    assert codex.login_files(ctx) == () and codex.endpoints(ctx) == ("https://api.openai.com",)
    gemini = AGENTS["gemini"]
    assert gemini.login_files(ctx) == () and gemini.gateway_var(ctx) is None
    google_login(home)
    assert gemini.endpoints(ctx) == ("https://cloudcode-pa.googleapis.com", "https://oauth2.googleapis.com")
    assert metering.plan(gemini, ctx, gemini.endpoints(ctx), tmp_path / "g.jsonl") is None  # through the proxy
    gemini.env(ctx)
    settings = json.loads((ctx.home / ".gemini" / "settings.json").read_text())
    assert settings["security"]["auth"]["selectedType"] == "oauth-personal"


# --- end to end: Claude Code on its login, through the gateway to the TLS mock -----------------------------


@pytest.mark.slow
@pytest.mark.skipif(probe() is not None, reason="needs a working bubblewrap sandbox")
def test_claude_code_on_its_login_runs_through_the_gateway_and_the_token_is_written_nowhere(
    generated_t6, tmp_path, monkeypatch
):
    from bench.agents import install
    from bench.runner import RunSpec, run
    from tests.bench.agents import test_clis
    from tests.bench.agents.tlsmock import HOST, TlsMock, make_certs
    from tests.mockllm import default_trajectory, run1_from_train

    clis = os.environ.get("BENCH_CLI_DIR") or str(Path(tempfile.gettempdir()) / "1gc-7rc-test-clis")
    monkeypatch.setenv("BENCH_CLI_DIR", clis)  # where tests/bench/agents/test_clis.py installs the CLIs
    if not install.is_installed("claude-code"):
        pytest.skip("needs Claude Code 2.1.197 installed (tests/bench/agents/test_clis.py installs it)")
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    ca, cert, key = make_certs(tmp_path)
    monkeypatch.setenv("BENCH_GATEWAY_RESOLVE", f"{HOST}=127.0.0.1")
    monkeypatch.setenv("BENCH_GATEWAY_CA", str(ca))
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    with TlsMock(default_trajectory(run1), cert=cert, key=key, model="claude-sonnet-4-6") as llm:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", llm.url_for())
        monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", CLAUDE_TOKEN)
        spec = RunSpec(task=generated_t6, agent="claude-code", model="claude-sonnet-4-6", budget_s=150, grace_s=5,
                       console=False, campaign=test_clis.campaign())  # fmt: skip
        result = run(spec)
        calls = llm.calls("anthropic")
    assert result.status == "success", result.reason
    assert calls and all(c.headers.get("Authorization") == f"Bearer {CLAUDE_TOKEN}" for c in calls)
    assert all("oauth-2025-04-20" in c.headers.get("anthropic-beta", "") for c in calls)
    assert not any("x-api-key" in {k.lower() for k in c.headers} for c in calls)
    run_dir = Path(result.run_dir)
    assert (run_dir / "evidence" / "llm.jsonl").exists() and (run_dir / "agent.log").exists()
    everything = _everything_under(run_dir)  # llm.jsonl, agent.log, run.json, result.json, events, evidence
    assert CLAUDE_TOKEN.encode() not in everything
    data = mlflow.tracking.MlflowClient().get_run(result.mlflow_run_id).data
    assert CLAUDE_TOKEN not in json.dumps([data.params, data.tags, list(data.metrics)])
    store = mlruns_dir()  # the whole tracking store: its database, artifacts and traces
    assert store.is_dir() and all(CLAUDE_TOKEN.encode() not in p.read_bytes() for p in store.rglob("*") if p.is_file())
    assert result.agent_events["cost_source"] == "gateway"
