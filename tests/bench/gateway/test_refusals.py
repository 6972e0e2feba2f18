"""Answers that cannot heal (bench.gateway.refusals): judged from the vendors' error shapes, and the gateway stops the
run at the first one, before the model ever answered, through the callback the watch gives it."""

from __future__ import annotations

import json
import threading

import pytest

from bench.gateway import metering
from bench.gateway.refusals import describe, judge, model_request
from tests.bench.agents.tlsmock import TlsMock
from tests.bench.gateway.test_proxy import certs, gateway, lines, post, serve  # noqa: F401  (certs: a fixture)
from tests.mockllm.trajectory import answer

ANTHROPIC_401 = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
OPENAI_401 = {
    "error": {
        "message": "Incorrect API key provided: sk-proj-abcdefgh****************wxyz. You can find your API key at ...",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
GEMINI_BAD_KEY = {
    "error": {
        "code": 400,
        "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT",
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
    }
}
GEMINI_TOO_LONG = {
    "error": {"code": 400, "message": "The input token count exceeds the maximum", "status": "INVALID_ARGUMENT"}
}
ANTHROPIC_404 = {"type": "error", "error": {"type": "not_found_error", "message": "model: claude-nonexistent-9"}}
OPENAI_404 = {"error": {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error",
                        "param": None, "code": "model_not_found"}}  # fmt: skip
GEMINI_403 = {"error": {"code": 403, "message": "Permission denied on resource", "status": "PERMISSION_DENIED"}}


def b(doc: dict) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("method", "path", "status", "body", "kind", "said"),
    [
        ("POST", "/v1/messages?beta=true", 401, ANTHROPIC_401, "auth", "authentication_error: invalid x-api-key"),
        ("POST", "/v1/responses", 401, OPENAI_401, "auth", "invalid_api_key: Incorrect API key provided: [REDACTED]"),
        (
            "POST",
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
            400,
            GEMINI_BAD_KEY,
            "auth",
            "INVALID_ARGUMENT: API_KEY_INVALID: API key",
        ),
        ("POST", "/v1beta/models/gemini-2.5-pro:generateContent", 403, GEMINI_403, "permission", "PERMISSION_DENIED"),
        ("POST", "/v1/messages", 404, ANTHROPIC_404, "model", "not_found_error: model: claude-nonexistent-9"),
        ("POST", "/v1/chat/completions", 404, OPENAI_404, "model", "model_not_found: The model `gpt-9` does not exist"),
    ],
)
def test_each_apis_refusal_that_cannot_heal_is_named(method, path, status, body, kind, said):
    refusal = judge(method, path, status, b(body))
    assert refusal is not None and (refusal.kind, refusal.status) == (kind, status)
    assert refusal.error.startswith(said), refusal.error
    assert "abcdefgh" not in refusal.error  # OpenAI's echo of the key's start is not kept


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        ("POST", "/v1/messages", 429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}),
        ("POST", "/v1/messages", 529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
        ("POST", "/v1/responses", 500, {"error": {"message": "server error", "type": "server_error"}}),
        ("POST", "/v1beta/models/gemini-2.5-pro:generateContent", 400, GEMINI_TOO_LONG),  # the request's fault
        ("GET", "/v1/models/gpt-9", 404, OPENAI_404),  # a model lookup, not a model request
        ("GET", "/backend-api/wham/usage", 401, OPENAI_401),  # Codex's account check under a ChatGPT login
        ("POST", "/v1/messages/count_tokens", 401, ANTHROPIC_401),  # a side call: the model request that follows says
        ("POST", "/v1/messages", 200, {"type": "message"}),
    ],
)
def test_what_heals_or_is_the_requests_fault_keeps_todays_window(method, path, status, body):
    assert judge(method, path, status, b(body)) is None


def test_model_requests_and_an_error_body_in_no_known_shape():
    assert model_request("POST", "/backend-api/codex/responses") and model_request(
        "POST", "/v1internal:generateContent"
    )
    assert not model_request("POST", "/v1/messages/count_tokens") and not model_request("GET", "/v1/models")
    assert describe(b"<html>401 Unauthorized</html>") == "<html>401 Unauthorized</html>"
    assert describe(b"") == "no error body"


def _stops(gw) -> list[str]:
    called: list[str] = []
    gw.end_with(called.append)
    return called


def test_the_first_refusal_before_any_answer_stops_the_run_once(certs, tmp_path):  # noqa: F811
    with TlsMock([answer("never")], cert=certs[1], key=certs[2], model="mock", fail_status=401) as mock:
        gw = gateway(mock, certs, tmp_path)
        gw.access = "sha256:0123456789ab"
        called = _stops(gw)
        server, sock = serve(gw, tmp_path)
        try:
            for _ in range(3):  # the CLI retries: one stop only
                status, _, data = post(sock, "/v1/messages", {"model": "mock", "max_tokens": 10, "messages": []})
                assert status == 401 and b"authentication_error" in data  # the CLI still gets the API's answer
            recs = lines(tmp_path, 3)
        finally:
            server.close()
    assert len(called) == 1 and "401" in called[0] and "authentication_error" in called[0], called
    assert [r["refusal"]["stops"] for r in recs] == [True, False, False]
    failure = metering.merge({}, tmp_path / "llm.jsonl")["api_failure"]
    assert (failure["kind"], failure["status"], failure["heals"], failure["errors"]) == ("auth", 401, False, 3)
    assert failure["access"] == "sha256:0123456789ab" and failure["at"] == recs[0]["t"]
    assert failure["why"].startswith("the model API refused the run's credential: 401 authentication_error: mock:")
    assert "(POST /v1/messages)" in failure["why"]


def test_a_refusal_before_the_watch_is_wired_stops_the_run_when_it_is(certs, tmp_path):  # noqa: F811
    with TlsMock([answer("never")], cert=certs[1], key=certs[2], model="mock", fail_status=403) as mock:
        gw = gateway(mock, certs, tmp_path)
        server, sock = serve(gw, tmp_path)
        try:
            assert post(sock, "/v1/messages", {"model": "mock", "max_tokens": 10, "messages": []})[0] == 403
            lines(tmp_path, 1)
        finally:
            server.close()
    called = _stops(gw)  # wired after the refusal: called at once
    assert len(called) == 1 and "403" in called[0]


def test_after_the_model_answered_a_refusal_does_not_stop_the_run(certs, tmp_path):  # noqa: F811
    """Once the model has answered, the agent could provoke a refusal (an extra credential header, an unknown
    model) to end its own run as an infrastructure failure: the gateway notes it, the health window decides."""
    with TlsMock([answer("All done here.")], cert=certs[1], key=certs[2], model="mock") as mock:
        gw = gateway(mock, certs, tmp_path)
        called = _stops(gw)
        server, sock = serve(gw, tmp_path)
        try:
            assert post(sock, "/v1/messages", {"model": "mock", "max_tokens": 10, "messages": []})[0] == 200
            mock.fail_status = 401
            assert post(sock, "/v1/messages", {"model": "mock", "max_tokens": 10, "messages": []})[0] == 401
            recs = lines(tmp_path, 2)
        finally:
            server.close()
    assert called == [] and "refusal" not in recs[0] and recs[1]["refusal"]["stops"] is False
    assert "api_failure" not in metering.merge({}, tmp_path / "llm.jsonl")


def test_a_stop_from_the_gateway_ends_the_agent_within_the_short_grace(tmp_path):
    """The watchdog's early end with the stop's grace: an agent that ignores SIGTERM is killed after
    STOP_GRACE_S, not after the budget's grace."""
    import subprocess
    import sys
    import time

    from bench.gateway.refusals import STOP_GRACE_S
    from bench.pipeline.watch import Watchdog

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    dog = Watchdog(proc, budget_s=600, grace_s=300, token=None)
    dog.tick_s = 0.1
    dog.start()
    time.sleep(0.5)  # the child has set its handler
    done = threading.Event()
    threading.Thread(target=lambda: (proc.wait(), done.set()), daemon=True).start()
    dog.end("the model API answered 401", grace_s=STOP_GRACE_S)
    assert done.wait(STOP_GRACE_S + 60), "not killed after the stop's grace"  # the budget's grace is 300 s here
    dog.stop(let_grace_finish=False)
    assert proc.returncode == -9 and dog.ended_why == "the model API answered 401" and dog.grace_s == STOP_GRACE_S
