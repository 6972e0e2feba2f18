"""The gateway holds the key and the money; one redactor of the run's secrets (issue 29, Deliver 5).

End to end: Claude Code's adapter with a scripted stand-in as its CLI, in the sandbox, its requests through the
metering gateway to the TLS mock, a planted key in the harness's environment and an API budget smaller than one
request. The stand-in is the adversary: it tries the API without the run's token, paths outside the allow-list,
a model the price table does not know, every other path once the budget is spent; it echoes the key (as if it had
learned it) and its token into a script's name, a metric name, a param (the script's argv), stdout, a checkpoint
and its final message, and prints a forged cost of -100 USD. Expected: the key is nowhere in its environment, the
mock sees exactly one request (with the real key), each other request is refused in the API's format with the
status written here by hand, the run's cost is that one request's at the price table's rate (worked out here from
the mock's token counts), and neither the key nor the token is anywhere in the tracking store or result.json.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import sys
from pathlib import Path

import pytest

from bench import redact
from bench.gateway import key_swap, metering, routes
from bench.paths import mlruns_dir
from bench.runner import RunSpec, run
from bench.sandbox.bwrap import probe
from bench.tracking import schema
from tests.bench.agents.tlsmock import HOST, TlsMock, make_certs
from tests.lazy import lazy
from tests.mockllm.trajectory import answer

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

STREAMS = (
    Path(__file__).resolve().parents[1] / "fixtures" / "agent-streams"
)  # recorded from the real CLIs (PROVENANCE.md)

STAND_IN = r"""#!PYTHON
import json, os, subprocess, sys, urllib.error, urllib.request

KEY = "PLANTED"  # as if the agent had learned the key: the redactor must still keep it out of the record
token = os.environ.get("ANTHROPIC_API_KEY", "")
base = os.environ["ANTHROPIC_BASE_URL"]


def call(path, body, key=token):
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    if key:
        headers["x-api-key"] = key
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


msg = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
report = {"env_has_key": KEY in json.dumps(dict(os.environ)), "token_shape": token[:10]}
report["no_token"] = call("/v1/messages", msg, key="")[0]
report["wrong_token"] = call("/v1/messages", msg, key="bench-run-" + "0" * 32)[0]
report["batches"] = call("/v1/messages/batches", {"requests": [msg]})[0]
report["complete"] = call("/v1/complete", {"model": "claude-2", "prompt": "hi"})[0]
report["slash"] = call("/v1/messages/", msg)[0]
status, body = call("/v1/messages", {**msg, "model": "claude-unpriced-9"})
report["unpriced"] = status
report["unpriced_type"] = body.get("error", {}).get("type")
report["first"] = call("/v1/messages", msg)[0]
after = ("/v1/messages", "/v1/messages/batches", "/v1/complete", "/v1/messages/count_tokens", "/v1/messages/")
report["after_cap"] = [call(p, msg)[0] for p in after]
print("REPORT " + json.dumps(report), flush=True)

name = "run_" + KEY.replace("-", "_") + ".py"  # a script named with the key
src = (
    "import sys, torch\n"
    "from prepare import log_metrics, save_checkpoint\n"
    f"log_metrics(1, **{{'loss_{KEY}': 1.0, 'loss_{token}': 2.0}})\n"
    f"print('stdout {KEY} {token}', flush=True)\n"
    f"save_checkpoint(torch.nn.Linear(1, 1), {{'note': '{KEY} {token}'}}, 0.5)\n"
)
open(name, "w").write(src)
subprocess.run([sys.executable, name, KEY, token])  # argv: the script run's params
final = {"type": "result", "subtype": "success", "is_error": False, "total_cost_usd": -100.0,
         "usage": {"input_tokens": 1, "output_tokens": 1}, "result": f"all done {KEY} {token}"}
print(json.dumps(final), flush=True)
"""


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A planted Anthropic key in the harness's environment, the TLS mock as its API, a stand-in CLI."""
    ca, cert, key = make_certs(tmp_path)
    monkeypatch.setenv("BENCH_GATEWAY_RESOLVE", f"{HOST}=127.0.0.1")
    monkeypatch.setenv("BENCH_GATEWAY_CA", str(ca))
    secret = "sk-ant-planted-" + secrets.token_hex(16)
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    for var in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "BENCH_GATEWAY"):
        monkeypatch.delenv(var, raising=False)
    mock = TlsMock([answer("fine")] * 3, cert=cert, key=key, model="claude-sonnet-4-5").start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", mock.url_for())
    clis = tmp_path / "clis"
    clis.mkdir()
    monkeypatch.setenv("BENCH_CLI_DIR", str(clis))
    cli = clis / "claude-stand-in"
    cli.write_text(STAND_IN.replace("PYTHON", sys.executable).replace("PLANTED", secret))
    cli.chmod(0o755)
    yield secret, mock, cli
    mock.stop()


def _everything(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink())


@pytest.mark.slow  # a whole benchmark run of a CLI agent through the gateway
@pytest.mark.skipif(probe() is not None, reason="needs a working bubblewrap sandbox")
def test_the_agent_holds_a_token_not_the_key_and_nothing_of_either_is_recorded(planted, generated_t6):
    secret, mock, cli = planted
    spec = RunSpec(task=generated_t6, agent="claude-code", model="claude-sonnet-4-5", budget_s=40, grace_s=3,
                   console=False, campaign=f"trust-{secrets.token_hex(3)}", max_cost=1e-6,
                   options={"bin": str(cli)})  # fmt: skip
    result = run(spec)
    # the harness (this process) stays small: nothing here is read whole (measured 2-core machine: see the report)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mib < 2048, peak_mib
    print(f"harness peak RSS {peak_mib:.0f} MiB")
    text = Path(result.run_dir, "agent.log").read_text()  # the run's own file: what the stand-in printed
    (line,) = [x for x in text.splitlines() if x.startswith("REPORT ")]
    report = json.loads(line[7:])
    # the key never entered the sandbox: its variable holds a run token
    assert report["env_has_key"] is False and report["token_shape"] == "bench-run-", report
    # refused without the token (401), outside the allow-list before the cap (404), an unpriced model under a
    # budget (400), the one good request (200), then every path once the budget is spent (402)
    assert (report["no_token"], report["wrong_token"]) == (401, 401), report
    assert (report["batches"], report["complete"], report["slash"]) == (404, 404, 404), report
    assert (report["unpriced"], report["unpriced_type"]) == (400, "invalid_request_error"), report
    assert report["first"] == 200 and report["after_cap"] == [402] * 5, report
    # the API saw one request, carrying the real key the gateway put in
    (call,) = mock.calls()
    assert {k.lower(): v for k, v in call.headers.items()}["x-api-key"] == secret
    # the cost: the gateway's, the one request at claude-sonnet-4-5's 3 / 15 USD per 1M tokens; never the CLI's -100
    ((tin, tout),) = mock.usages
    cost = result.agent_events["metrics"][schema.COST_USD]
    assert cost == pytest.approx((tin * 3 + tout * 15) / 1e6, abs=1e-6) and cost > 0
    assert result.agent_events["cost_source"] == "gateway"
    assert result.agent_events["cli_metrics"][schema.COST_USD] == -100.0  # kept for comparison, not used
    lines = metering.read(metering.log_path(Path(result.run_dir)))
    refused = sorted(r.get("refused") or "-" for r in lines)
    assert refused == sorted(["token"] * 2 + ["route"] * 3 + ["unpriced", "-"] + ["budget"] * 5), refused
    assert result.agent_events["gateway"]["refused"] == {"budget": 5, "route": 3, "token": 2, "unpriced": 1}
    # nothing of the key or the token in result.json or anywhere in the tracking store (database and artifacts)
    tokens = {x for x in text.split() if x.startswith("bench-run-") and len(x) >= 42}
    assert tokens, "the stand-in echoed its token"
    result_json = Path(result.run_dir, "result.json").read_bytes()
    store = _everything(mlruns_dir())
    for value in (secret, *(t[:42] for t in tokens)):
        assert value.encode() not in result_json, value
        assert value.encode() not in store, value
    assert b"[redacted:ANTHROPIC_API_KEY]" in result_json  # the final message, redacted (not dropped)
    # what was echoed reached the store, redacted: the metric names, the script's stdout tail and its checkpoint
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    names = {k for r in runs for k in r.data.metrics}
    assert {"loss_redacted-ANTHROPIC_API_KEY", "loss_redacted-run-token"} <= names, names
    argv = [r.data.params.get("argv", "") for r in runs]
    assert any("[redacted:ANTHROPIC_API_KEY] [redacted:run-token]" in a for a in argv), argv
    assert store.count(b"stdout [redacted:ANTHROPIC_API_KEY] [redacted:run-token]") >= 1
    checkpoints = [p.read_bytes() for p in mlruns_dir().rglob("*.pt")]
    assert any(b"[redacted:ANTHROPIC_API_KEY] [redacted:run-token]" in c for c in checkpoints), len(checkpoints)


# --- pieces, each against a hand-made case ---------------------------------------------------------------------


def test_a_forged_cli_cost_is_never_the_runs_cost(tmp_path):
    """The CLI's own cost is written by the agent: -100 from the stream is kept aside, never recorded as the cost,
    with or without a gateway log; an unpriced gateway line makes the cost unknown, not the CLI's."""
    events = {"metrics": {schema.COST_USD: -100.0, schema.TOKENS_INPUT: 5.0}}
    none = metering.merge(events, tmp_path / "absent.jsonl")
    assert none["metrics"][schema.COST_USD] is None and none["cost_source"] == "unknown"
    assert none["cli_metrics"][schema.COST_USD] == -100.0
    log = tmp_path / "llm.jsonl"
    rec = {"t": 1.0, "api": "anthropic", "model": "claude-unpriced-9", "status": 200, "input": 10, "output": 5}
    log.write_text(json.dumps({**rec, "cost_usd": None}) + "\n")
    unpriced = metering.merge(events, log)
    assert unpriced["metrics"][schema.COST_USD] is None and unpriced["cost_source"] == "unknown"
    priced = {**rec, "model": "claude-sonnet-4-5", "cost_usd": (10 * 3 + 5 * 15) / 1e6}
    log.write_text(json.dumps(priced) + "\n")
    merged = metering.merge(events, log)
    assert merged["metrics"][schema.COST_USD] == pytest.approx(105 / 1e6) and merged["cost_source"] == "gateway"


@pytest.mark.parametrize(
    ("family", "method", "path", "ok"),
    [
        ("anthropic", "POST", "/v1/messages?beta=true", True),
        ("anthropic", "POST", "/v1/messages/count_tokens", True),
        ("anthropic", "POST", "/v1/messages/batches", False),
        ("anthropic", "POST", "/v1/complete", False),
        ("anthropic", "POST", "/v1/messages/", False),
        ("anthropic", "GET", "/v1/messages", False),
        ("anthropic", "POST", "/v1/responses", False),
        ("openai", "POST", "/v1/responses", True),
        ("openai", "POST", "/v1/chat/completions", True),
        ("openai", "GET", "/v1/models", True),
        ("openai", "POST", "/v1/batches", False),
        ("openai", "POST", "/v1/files", False),
        ("openai", "POST", "/v1/embeddings", False),
        ("openai", "POST", "/v1/messages", False),
        ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", True),
        ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:countTokens", True),
        ("gemini", "POST", "/v1beta/models/gemini-2.5-pro:batchGenerateContent", False),
        ("gemini", "POST", "/v1beta/files", False),
        ("chatgpt", "POST", "/backend-api/codex/responses", True),
        ("chatgpt", "GET", "/backend-api/wham/usage", True),
        ("chatgpt", "POST", "/backend-api/codex/files", False),
    ],
)
def test_each_family_forwards_only_its_endpoints(family, method, path, ok):
    base = {"openai": "/v1", "chatgpt": "/backend-api/codex"}.get(family, "")
    assert routes.allowed(family, method, path, base) is ok


def test_what_the_real_clis_sent_is_allowed():
    """The recorded requests of the pinned CLIs (fixtures/agent-streams) pass their family's list."""
    family = {"claude": "anthropic", "codex": "openai", "gemini": "gemini", "opencode": "openai"}
    files = sorted(STREAMS.glob("*request*.json"))
    if not files:
        pytest.skip("no recorded CLI requests here")
    for f in files:
        path = json.loads(f.read_text())["path"]
        assert routes.allowed(family[f.name.split("_")[0]], "POST", path, ""), (f.name, path)


def test_run_tokens_replace_every_copy_of_a_key_and_swap_back(monkeypatch):
    env = {"OPENAI_API_KEY": "sk-real-openai-0123456789", "CODEX_API_KEY": "sk-real-openai-0123456789", "X": "1"}
    out, held = key_swap.run_tokens(env, {"sk-real-openai-0123456789": "OPENAI_API_KEY"})
    assert out["OPENAI_API_KEY"] == out["CODEX_API_KEY"] != env["OPENAI_API_KEY"] and out["X"] == "1"
    token = out["OPENAI_API_KEY"]
    assert redact.RUN_TOKEN.fullmatch(token) and held == {token: env["OPENAI_API_KEY"]}
    headers = key_swap.swap([("Authorization", f"Bearer {token}"), ("X-Other", token)], held, "openai")
    assert headers == [("Authorization", "Bearer sk-real-openai-0123456789"), ("X-Other", token)]
    assert key_swap.carries([("x-api-key", token)], held, "anthropic")
    assert not key_swap.carries([("x-api-key", token)], held, "openai")  # not the header OpenAI's clients use
    assert not key_swap.carries([("x-api-key", "sk-real-openai-0123456789")], held, "anthropic")


def test_the_redactor_finds_a_secret_cut_by_a_piece_boundary(tmp_path, monkeypatch):
    secret = "pw-" + secrets.token_hex(20)
    monkeypatch.setenv("BENCH_TEST_DB_URL", f"postgresql://u:{secret}@h/db")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-" + secret[::-1])
    r = redact.Redactor()
    f = tmp_path / "ckpt.bin"
    for cut in (3, len(secret) // 2):  # the secret straddles the first 1 MiB boundary
        head = os.urandom(redact.CHUNK - cut).replace(b"p", b"q")
        f.write_bytes(head + secret.encode() + b"\x00" * 100 + ("tok-" + secret[::-1]).encode())
        out = redact.redacted_file(f, tmp_path / f"out{cut}", r)
        data = out.read_bytes()
        assert out != f and secret.encode() not in data and secret[::-1].encode() not in data
        assert data.startswith(head) and data.count(b"[redacted:") == 2
    assert r.text(f"loss_{secret}", key=True) == "loss_redacted-BENCH_TEST_DB_URL"
    assert r.text("task-abcdefghijklmnopqrstuv") == "task-abcdefghijklmnopqrstuv"  # not key-shaped: kept


def test_an_unpriced_model_under_a_budget_is_refused_before_the_run():
    from bench.errors import InputError
    from bench.preflight import check_priced

    with pytest.raises(InputError, match="'gpt-unpriced-7' has no price"):
        check_priced("codex", "gpt-unpriced-7", 5.0)
    check_priced("codex", "gpt-unpriced-7", None)  # no budget: its cost is recorded as unknown, the run goes on
    check_priced("codex", "gpt-5.5", 5.0)  # priced
    check_priced("claude-code", "sonnet", 5.0)  # an alias the CLI resolves: the gateway prices what it sends
    check_priced("command", None, 5.0)  # no API


def test_a_login_files_tokens_are_redacted_from_the_record(tmp_path):
    """A login the CLI reads itself cannot be swapped; its tokens are still kept out of what the harness records."""
    refresh, access = "rt-" + secrets.token_hex(12), "at-" + secrets.token_hex(12)
    f = tmp_path / "auth.json"
    f.write_text(json.dumps({"tokens": {"refresh_token": refresh, "access_token": access, "account_id": "acc-1"}}))
    assert key_swap.register_logins([f, tmp_path / "absent.json"]) == 2
    assert redact.text(f"x {refresh} y {access} acc-1") == "x [redacted:login] y [redacted:login] acc-1"
