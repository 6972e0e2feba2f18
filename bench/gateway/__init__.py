"""The metering gateway.

Every LLM request of a sandboxed CLI, checked, forwarded with the key, metered and budgeted.

Its own package, apart from ``bench/agents/`` (the adapters, their stream parsers, the price table
and the credentials), because it is the harness's hostile edge: what the agent's process sends is
parsed here.

- :mod:`bench.gateway.proxy`: :class:`~bench.gateway.proxy.Gateway`, one upstream API and its
  log (``llm.jsonl``);
- :mod:`bench.gateway.upstream`: the connection to the real API (TLS verified, one redial);
- :mod:`bench.gateway.streaming`: an answer streamed back as it arrives, read on for its usage
  when the CLI leaves;
- :mod:`bench.gateway.request_log`: ``llm.jsonl``, one line per request, no key in it;
- :mod:`bench.gateway.http1`: the side facing the CLI, parsed and framed by h11, bounded;
- :mod:`bench.gateway.routes`: which request targets and endpoints are forwarded, per API family;
- :mod:`bench.gateway.key_swap`: the run's tokens in place of each credential, the key only in its
  family's header;
- :mod:`bench.gateway.budget`: the API budget, spent and reserved (parallel requests cannot
  pass it);
- :mod:`bench.gateway.usage`: token usage read from the API's own answers;
- :mod:`bench.gateway.transcript`: the request and answer bodies kept for the run's MLflow trace;
- :mod:`bench.gateway.metering`: which gateway a launch gets, and what its log says at the record.
- :mod:`bench.gateway.refusals`: the API's answers that cannot heal (a refused key, an unknown
  model): the run stops.

Imports point down: ``pipeline -> gateway -> agents`` (the price table, the adapters' base).
"""
