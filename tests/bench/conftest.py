"""Fixtures of the adversarial and audit suites (tests/bench/test_adversarial.py, test_audit_rules.py)."""

from __future__ import annotations

import pytest

from bench.result import RunResult
from tests.bench.adversary import _HONEST, HONEST, _guard, _run


@pytest.fixture
def guard(generated_t6):
    return _guard(generated_t6)


@pytest.fixture
def honest(guard) -> RunResult:
    if "t6" not in _HONEST:
        result = _run(guard.task, HONEST)
        assert result.status == "success", result.reason
        assert result.sandboxed is True
        _HONEST["t6"] = result
    return _HONEST["t6"]
