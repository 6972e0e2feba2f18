"""The metering gateway.

Every LLM request of a sandboxed CLI, forwarded to its API and counted on the way.

The CLI is pointed, through its own base-URL setting (``ANTHROPIC_BASE_URL``, Codex's provider
``base_url``, ``GOOGLE_GEMINI_BASE_URL``), at ``http://127.0.0.1:PORT`` inside its sandbox; the
sandbox's launcher carries that port to a unix socket served here, on the harness's side
(:class:`bench.sandbox.network.Network`'s ``services``). The gateway forwards each request to the
real endpoint over TLS (the certificate verified, as any client would:
:mod:`bench.gateway.upstream`) and streams the answer back piece by piece as it arrives (SSE is
never buffered whole: :mod:`bench.gateway.streaming`), so no CLI has to honour proxy variables and
the harness, not the CLI, says what a run used.

Per request it appends one JSON line to ``llm.jsonl`` in the run's evidence
(:mod:`bench.gateway.request_log`), written when the request ends (a killed run keeps every line so
far): time, API, model, HTTP status, latency, input/output/cached tokens read from the answer
(:mod:`bench.gateway.usage`), their cost at the price table's rates (:mod:`bench.agents.pricing`),
and ``complete: false`` with ``cut`` when the answer ended before its usage did. **A stream left
early is paid for what the API will bill**: when the client leaves mid-answer the gateway reads the
answer on to its final usage (bounded: ``drain_s`` and
:data:`bench.gateway.streaming.DRAIN_MAX_BYTES`), which is what Anthropic (output only in its
closing ``message_delta``), OpenAI (usage only in its last event) and Gemini (cumulative, the last
chunk) bill; where that usage never comes, the request is charged its ``max_tokens``
(:func:`bench.gateway.budget.output_limit`) at the output rate, the line says ``cost_basis:
max_tokens`` and the run's ``cost_source`` says so (:mod:`bench.gateway.metering`). Credentials
(``Authorization``, ``x-api-key``, ``x-goog-api-key``) are never written (the run's token swapped
for the key on the way out, below), nor a query's key parameters. Each model request's and answer's
body goes, capped and with secrets removed, to ``llm-bodies.jsonl``
(:mod:`bench.gateway.transcript`; the line's ``body`` is its id), for the run's MLflow trace
(:mod:`bench.pipeline.traces`).

**The gateway holds the key.** The agent's environment carries a per-run token (``bench-run-`` and
32 hex digits, one per credential variable) where the harness has the real key
(:func:`bench.gateway.key_swap.run_tokens`, applied by :mod:`bench.pipeline.launch`); the gateway,
given ``keys`` (token -> real value), refuses a request that carries none of its tokens in its
family's credential header (401, ``refused: token``), refuses one whose token appears anywhere else,
the query, another header, the body (400, ``refused: misplaced``: no CLI does that, a probing agent
does), and swaps the token for its real value in that header only before the request leaves
(:mod:`bench.gateway.key_swap`): the key is never written into a URL. The real key is never in the
sandbox: an agent that prints its environment prints a token that is worth nothing once its run's
gateway closes. (A CLI login read from a file, Codex's ``auth.json`` or Gemini's
``oauth_creds.json``, is sent by the CLI itself: such a run's gateway has no ``keys`` and forwards
the login's bearer token as it comes; docs/sandbox-and-rules.md names this residual.)

**Only the endpoints its CLI needs** (:mod:`bench.gateway.routes`, per API family): anything else is
answered here, in the API's error format (404), ``refused: route``; before that, a target another
server could read as another path (dot segments, percent-escapes, a backslash, an absolute form, a
fragment) is refused (400, ``refused: target``), and the target forwarded is the one checked.

``max_cost`` (:mod:`bench.gateway.budget`): each model request reserves its worst case before it is
forwarded and is admitted only while spent plus reserved is below the budget (parallel requests pass
it by one request's worst case at most); once the run's cost reaches it, every further request,
whatever its path, is answered at once, without reaching the API, by an error in the API's own
format (Anthropic and Gemini: 402; OpenAI: 429 ``insufficient_quota``, which Codex does not retry)
that says the run's API budget is spent; the line says ``refused: budget``. While a budget is set, a
model request naming a model the price table does not know is refused (400, ``refused: unpriced``):
its cost could not be counted against the budget (we refuse rather than charge the provider's
highest price, because a guessed price would make the run's recorded cost a guess too).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import h11

from bench import settings
from bench.agents import pricing
from bench.errors import InputError
from bench.gateway import budget, key_swap, refusals, routes, streaming, transcript, upstream
from bench.gateway.budget import _usd, budget_message
from bench.gateway.http1 import MAX_BODY, ClientConnection
from bench.gateway.request_log import RequestLog, safe_path
from bench.gateway.routes import refusal
from bench.gateway.usage import Usage, api_of, request_model

INSIDE_PORT = 47800  # the first loopback port inside the sandbox that reaches a gateway (one per upstream)
IDLE_TIMEOUT_S = 600.0  # a kept-alive client connection with no next request


class Gateway:
    """One upstream API and its log.

    The upstream: ``https://api.anthropic.com``, ``https://api.openai.com/v1``, a loopback mock.

    ``resolve``: host -> address to dial instead of asking DNS; ``cafile``: a CA to trust beside the
    system's; ``max_cost``: the run's API budget in USD (None: none). :meth:`handle` serves one
    client connection (given to a :class:`bench.sandbox.network.UnixServer`); :attr:`spent` is the
    running cost.
    """

    def __init__(
        self,
        upstream: str,
        log: Path,
        *,
        max_cost: float | None = None,
        resolve: dict[str, str] | None = None,
        cafile: str | None = None,
        model: str | None = None,
        drain_s: float | None = None,
        keys: dict[str, str] | None = None,
        family: str | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(
                f"not an http(s) endpoint: {upstream!r}; give the API's base URL, e.g. https://api.anthropic.com"
            )
        self.upstream, self.scheme, self.host = upstream, parts.scheme, parts.hostname
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self.log, self.max_cost, self.model = Path(log), max_cost, model
        self.drain_s = drain_s if drain_s is not None else settings.GATEWAY_DRAIN_S.get()
        self.bodies = transcript.Transcript(self.log.parent / transcript.BODIES_NAME)  # capped, no secrets
        self.address = (resolve or {}).get(self.host, self.host)
        self.context = ssl.create_default_context()
        if cafile:
            self.context.load_verify_locations(cafile)
        self.keys = dict(keys or {})  # run token -> the real credential it stands for (empty: forwarded as sent)
        self.family = family or routes.family_of(upstream)
        self.budget = budget.Budget(max_cost)  # what is spent and reserved
        self.tokens = 0  # input + output tokens of the answers read so far (the live status line's figure)
        self.unpriced = False  # an answer with tokens the price table cannot price: the running cost is not known
        self.capped = False  # the budget refused a request
        self.probes = 0  # requests refused for carrying the run's token outside its credential header
        self.answered = False  # a model request was answered 2xx: from then on the agent could provoke a refusal
        self.refused: str | None = None  # why the run is stopped: the upstream's first answer that cannot heal
        self.access: str | None = None  # the credential's fingerprint (bench.agents.credentials), for the record
        self._end: Callable[[str], None] | None = None  # the watch's early end (end_with)
        self._lock = threading.Lock()
        self._log = RequestLog(self.log)  # llm.jsonl: one line per request, flushed at once
        self._inflight = 0

    @property
    def spent(self) -> float:
        """The running cost in USD of the answers read so far."""
        return self.budget.spent

    def inside_url(self, port: int) -> str:
        """The base URL the CLI is given.

        The gateway's port inside, with the upstream's path (``/v1``).
        """
        return f"http://127.0.0.1:{port}{self.base_path}"

    # --- one client connection --------------------------------------------------------------------
    def handle(self, conn: socket.socket) -> None:
        """Serve one CLI connection: each request in turn, until it closes or idles out."""
        conn.settimeout(IDLE_TIMEOUT_S)
        client = ClientConnection(conn)  # h11 reads the requests and frames the answers
        up: http.client.HTTPConnection | None = None
        try:
            while True:
                req = client.next_request()
                if req is None:
                    return
                method, path, headers, body = req
                with self._lock:
                    self._inflight += 1
                try:
                    up, keep = self._one(client, up, method, path, headers, body)
                finally:
                    with self._lock:
                        self._inflight -= 1
                if not keep:
                    return
        except (OSError, ValueError, http.client.HTTPException, h11.ProtocolError):
            return
        finally:
            if up is not None:
                up.close()
            with contextlib.suppress(OSError):
                conn.close()

    def _connect(self) -> http.client.HTTPConnection:
        return upstream.dial(self.scheme, self.host, self.port, self.address, self.context)

    def _one(self, client: ClientConnection, up, method: str, path: str, headers: list[tuple[str, str]], body: bytes):
        """Forward one request and stream its answer back.

        Returns the upstream connection to reuse and whether the client connection stays open.
        """
        t0 = time.time()
        api = api_of(method, path)
        parsed = _json(body) if api else None
        rec: dict = {"t": round(t0, 3), "method": method, "path": safe_path(path)[:300], "api": api}
        rec["model"] = request_model(api, path, parsed) or self.model
        rec["stream"] = bool(parsed and parsed.get("stream")) or ":streamGenerateContent" in path
        if api == "chat" and parsed and parsed.get("stream"):  # the usage arrives only when asked for
            opts = parsed.get("stream_options") if isinstance(parsed.get("stream_options"), dict) else {}
            if not opts.get("include_usage"):
                parsed["stream_options"] = {**opts, "include_usage": True}
                body = json.dumps(parsed).encode()
        close = any(k.lower() == "connection" and v.lower() == "close" for k, v in headers)
        why = self._refuse(method, path, api, rec["model"], headers, body)
        rid = None
        if why is None and api and self.max_cost is not None:  # reserve the worst case (module doc: the budget)
            rid = self.budget.admit(budget.worst_case(rec["model"], api, body, parsed) or 0.0)
            if rid is None:
                why = "budget", budget.refusal_message(self.budget)
        if why is not None:
            kind, message = why
            self.capped = self.capped or kind == "budget"
            status, payload = refusal(api, path, message, kind, self.family)
            self._note({**rec, "status": status, "refused": kind, "latency_s": round(time.time() - t0, 3)})
            client.send_json(status, payload, close)
            return up, client.keep_alive
        try:
            return self._forward(client, up, method, path, headers, body, rec, parsed, close, rid)
        finally:
            self.budget.settle(rid, None)  # released if _forward raised (settled there otherwise: a no-op)

    def _forward(self, client, up, method, path, headers, body, rec, parsed, close, rid):
        """Forward a request that passed every check and stream its answer back.

        The rest of :meth:`_one`.
        """
        t0, api = rec["t"], rec["api"]
        headers = key_swap.swap(headers, self.keys, self.family)  # the key in the family's header, nowhere else
        out = upstream.request_head(headers, self.host, self.port, body)
        try:
            up, resp = upstream.send(up, self._connect, method, path, out, body)
        except (OSError, http.client.HTTPException) as e:
            # no route to the API: the client sees its connection dropped, as without a gateway
            self._note({**rec, "status": 0, "error": f"{type(e).__name__}: {e}"[:300], "latency_s": 0})
            return None, False
        usage = Usage(api, rec["model"])
        sse = "text/event-stream" in (resp.getheader("Content-Type") or "")
        capture = self.bodies.start(api, headers, body)  # the bodies for the run's MLflow trace
        rec["status"] = resp.status  # the upstream's status, first seen here (an API's 401/403 included)
        if 200 <= resp.status < 300 and refusals.model_request(method, path):
            with self._lock:  # set before any of the answer reaches the CLI: the agent acts only after one
                self.answered = True
        err = bytearray()  # an error answer's start, for what cannot heal (bench.gateway.refusals)
        body_seen = bytearray()  # a JSON answer, for its usage

        def feed(data: bytes) -> None:  # each piece of the answer, as it streams back
            if resp.status >= 400 and len(err) < refusals.ERROR_BODY_MAX:
                err.extend(data[: refusals.ERROR_BODY_MAX - len(err)])
            if capture is not None:
                capture.feed(data, sse)
            if api and sse:
                usage.feed(data)
            elif api and len(body_seen) < MAX_BODY:
                body_seen.extend(data)

        passed = streaming.pass_on(client, resp, up, close=close, drain_s=self.drain_s, feed=feed)
        cut, first, keep = passed.cut, passed.first, passed.keep
        if passed.left:  # the answer was read to its end without the client: its usage is the API's
            rec["client_left"] = True
        if cut is not None or not keep:
            up.close()
            up = None
        else:  # read to its end; closed, so that the kept-alive upstream takes the next request (http.client's read1
            resp.close()  # leaves a Content-Length answer open at its end: the next request then failed and was resent)
        if api and not sse and cut is None:
            usage.read_json(bytes(body_seen))
        end = time.time()
        rec.update(latency_s=round(end - t0, 3), ttfb_s=round((first or end) - t0, 3))
        price = None
        if api:
            model = rec["model"] or usage.model
            rec.update(model=model, input=usage.input, output=usage.output, cached=usage.cached)
            rec.update(cache_write=usage.cache_write, complete=usage.complete)
            price = pricing.cost(model, usage.input, usage.output, usage.cached, usage.cache_write)
            if not usage.complete and 200 <= resp.status < 300 and (cut or rec.get("client_left")):
                price = self._charge_limit(rec, model, usage, body, parsed)  # the API's usage never came
            rec["cost_usd"] = price
            with self._lock:
                self.tokens += usage.input + usage.output
                self.unpriced = self.unpriced or (price is None and usage.input + usage.output > 0)
        self.budget.settle(rid, price)
        if cut:
            rec["cut"] = cut
        rec["spent_usd"] = round(self.spent, 6)
        stop = self._judge(method, path, resp.status, bytes(err), rec) if resp.status >= 400 else None
        self.bodies.finish(capture, rec)
        self._note(rec)  # the refusal's line is written before the run is stopped on it
        if stop is not None:
            stop(self.refused or "")
        return up, keep

    def _judge(self, method: str, path: str, status: int, body: bytes, rec: dict) -> Callable[[str], None] | None:
        """Note an answer that cannot heal (:mod:`bench.gateway.refusals`) on its line.

        The first one before the model ever answered stops the run: returns the watch's early end to
        call (None if not wired yet, or no stop).
        """
        refusal = refusals.judge(method, path, status, body)
        if refusal is None:
            return None
        with self._lock:
            stops = not self.answered and self.refused is None
            rec["refusal"] = {**refusal.to_dict(), "stops": stops, "access": self.access}
            if not stops:
                return None
            self.refused = f"the model API answered {status} ({refusal.error[:80]}), which cannot heal"
            return self._end

    def end_with(self, end: Callable[[str], None]) -> None:
        """The callback that ends the run at the first answer that cannot heal.

        The watch's early end; called at once if one came already (before the watch started).
        """
        with self._lock:
            self._end, why = end, self.refused
        if why is not None:
            end(why)

    def _charge_limit(self, rec: dict, model: str | None, usage: Usage, body: bytes, parsed: dict | None):
        """The cost of an answer left without its final usage.

        Its output limit at the output rate (and, where the answer had not said its input, every
        body byte as an input token, as the budget's worst case).
        """
        limit = max(usage.output, budget.output_limit(rec["api"], parsed))
        rec.update(cost_basis="max_tokens", charged_output=limit)
        if usage.input:
            return pricing.cost(model, usage.input, limit, usage.cached, usage.cache_write)
        rec["charged_input"] = len(body)
        return pricing.cost(model, len(body), limit, 0, len(body))

    def _refuse(
        self, method: str, path: str, api: str | None, model: str | None, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[str, str] | None:
        """Why this request is answered here instead of forwarded, or None to forward it.

        The reason is a (kind, message) pair. In order: a target that is not a plain path, the
        budget (every path, once spent), the run's token anywhere but its family's header, or
        missing from it, the route, an unpriced model under a budget. (A model request that passes
        them all still reserves its worst case against the budget: :meth:`_one`.)
        """
        if (bad := routes.bad_target(path)) is not None:
            return "target", f"1GC-7RC: request target refused: {bad}."
        if self.budget.exhausted:
            return "budget", budget_message(self.max_cost or 0.0, self.spent)
        if self.keys and (where := key_swap.misplaced(headers, path, body, self.keys, self.family)):
            self.probes += 1
            return "misplaced", (
                f"1GC-7RC: this request carries the run's token in its {where}; it goes only in the "
                f"{self.family} API's credential header. The request was refused and counted."
            )
        if self.keys and not key_swap.carries(headers, self.keys, self.family):
            return "token", "1GC-7RC: this request carries no valid run token for the benchmark's gateway."
        if not routes.allowed(self.family, method, path, self.base_path):
            where = path.split("?", 1)[0][:200]
            return "route", f"1GC-7RC: {method} {where} is not an endpoint this run may use ({self.family} API)."
        if api and self.max_cost is not None and pricing.lookup(model) is None:
            return "unpriced", (
                f"1GC-7RC: model {str(model)[:100]!r} has no known price, and this run has an API budget "
                f"(${_usd(self.max_cost)}): only priced models can be used."
            )
        return None

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every request in flight has written its line (the run's record reads them).

        False if some are still open after ``timeout`` (default: the drain's time + 10 s; their line
        comes when they end).
        """
        deadline = time.time() + (self.drain_s + 10.0 if timeout is None else timeout)
        while self._inflight and time.time() < deadline:
            time.sleep(0.05)
        return not self._inflight

    def _note(self, rec: dict) -> None:
        """Append one line to ``llm.jsonl`` (:class:`bench.gateway.request_log.RequestLog`)."""
        self._log.note(rec)


def _json(body: bytes) -> dict | None:
    try:
        o = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return o if isinstance(o, dict) else None
