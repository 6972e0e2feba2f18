"""The run's API budget at the metering gateway.

What is spent, what requests in flight may still cost, and the most one request can cost.

Why reservations: the gateway learns a request's cost only when its answer ends, so a budget checked
against what is spent alone lets every request sent before the first answer is counted through (20
parallel requests of $0.45 each under $1.00: all 20 forwarded, $9.00 spent). Now each model request
reserves its worst case (:func:`worst_case`: every byte of its body an input token at the dearest
input rate, plus its ``max_tokens`` at the output rate) before it is forwarded, and is admitted only
while what is spent plus what is reserved is below the budget (:meth:`Budget.admit`); its answer
settles the reservation on the actual usage (:meth:`Budget.settle`). So requests in parallel can
pass the budget by at most one request's worst case, the last one admitted, and a lone agent's
request is admitted at once, as before, whenever the budget is not spent.

A request that finds the budget committed to requests in flight (not yet spent) waits for them to
settle, up to :data:`RESERVE_WAIT_S`, rather than being refused: an honest CLI that sends its next
request a moment before the gateway has counted the previous answer, or runs two requests side by
side near the end of its budget, is delayed, not stopped.
"""

from __future__ import annotations

import itertools
import threading
import time

from bench.agents import pricing

# where a request names no output limit: the largest output limit among the price table's models
# (Claude Opus 4.x and GPT-5.x: 128k tokens), so that the worst case is never below what the API
# can bill
DEFAULT_OUTPUT_LIMIT = 128_000
RESERVE_WAIT_S = 60.0  # the longest a request waits for reservations in flight to settle before it is refused
BUDGET_PREFIX = "1GC-7RC: the run's API budget"


def _usd(x: float) -> str:
    return f"{x:.2f}" if x >= 0.01 else f"{x:g}"


def budget_message(max_cost: float, spent: float) -> str:
    """What a CLI (and its model) is told when the run's budget is spent."""
    return (
        f"{BUDGET_PREFIX} of ${_usd(max_cost)} is spent (${spent:.4f} used): no further model requests are possible "
        "in this run. Stop here."
    )


def refusal_message(b: Budget) -> str:
    """What a CLI is told when its request would pass the budget.

    Spent, or committed to requests in flight.
    """
    if b.exhausted or b.max_cost is None:
        return budget_message(b.max_cost or 0.0, b.spent)
    return (
        f"{BUDGET_PREFIX} of ${_usd(b.max_cost)} is committed to requests in flight (${b.spent:.4f} spent, "
        f"${b.committed() - b.spent:.4f} reserved for their worst case): no further model request can start now."
    )


def max_tokens(api: str | None, body: dict | None) -> int | None:
    """The output limit a model request names; None where it names none.

    Anthropic and Chat ``max_tokens``, Chat's ``max_completion_tokens``, Responses'
    ``max_output_tokens``, Gemini's ``generationConfig.maxOutputTokens``.
    """
    if not isinstance(body, dict):
        return None
    fields = {
        "anthropic": (body, ("max_tokens",)),
        "chat": (body, ("max_completion_tokens", "max_tokens")),
        "responses": (body, ("max_output_tokens",)),
        "gemini": (body.get("generationConfig"), ("maxOutputTokens",)),
    }
    where, names = fields.get(api or "", (None, ()))
    if not isinstance(where, dict):
        return None
    for name in names:
        v = where.get(name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def output_limit(api: str | None, body: dict | None) -> int:
    """The most output tokens this request can be billed for.

    Its ``max_tokens``, else :data:`DEFAULT_OUTPUT_LIMIT`.
    """
    return max_tokens(api, body) or DEFAULT_OUTPUT_LIMIT


def worst_case(model: str | None, api: str | None, body: bytes, parsed: dict | None) -> float | None:
    """The most a model request can cost in USD (None for a model without a price).

    Each body byte taken as an input token (a token is at least one byte of the prompt) at the row's
    dearer rate of plain input and cache writes, plus the output limit at the output rate.
    """
    n = len(body)
    return pricing.cost(model, n, output_limit(api, parsed), 0, n)


class Budget:
    """The running cost of one gateway and the reservations of its requests in flight.

    ``max_cost`` None: no budget (everything is admitted; the cost is still counted).
    """

    def __init__(self, max_cost: float | None) -> None:
        self.max_cost = max_cost
        self.spent = 0.0
        self.reserved: dict[int, float] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()

    @property
    def exhausted(self) -> bool:
        """Whether what is spent has reached the budget (never without one)."""
        return self.max_cost is not None and self.spent >= self.max_cost

    def admit(self, worst: float, wait_s: float = RESERVE_WAIT_S) -> int | None:
        """Reserve ``worst`` USD for a request and return the reservation's id.

        None when the budget is spent or stays committed to requests in flight for ``wait_s``.
        """
        with self._cond:
            if self.max_cost is None:
                return self._reserve(worst)
            deadline = time.monotonic() + wait_s
            while self.spent < self.max_cost and self.spent + sum(self.reserved.values()) >= self.max_cost:
                left = deadline - time.monotonic()
                if left <= 0 or not self.reserved:
                    return None
                self._cond.wait(left)
            return None if self.spent >= self.max_cost else self._reserve(worst)

    def _reserve(self, worst: float) -> int:
        rid = next(self._ids)
        self.reserved[rid] = max(0.0, worst)
        return rid

    def settle(self, rid: int | None, actual: float | None) -> None:
        """Release a reservation and add what the request cost.

        ``rid`` None: none was made; ``actual`` None: the cost is unknown.
        """
        with self._cond:
            if rid is not None:
                self.reserved.pop(rid, None)
            if actual is not None:
                self.spent += actual
            self._cond.notify_all()

    def committed(self) -> float:
        """What is spent plus what requests in flight may still cost."""
        with self._cond:
            return self.spent + sum(self.reserved.values())
