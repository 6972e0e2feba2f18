"""bench run's limit flags, read and checked before anything is created (bench.preflight.parse_limits)."""

from __future__ import annotations

import pytest

from bench.errors import InputError
from bench.preflight import parse_limits
from bench.sandbox.resource_limits import GIB, MIB, Limits


def test_the_flags_set_each_limit_and_none_switches_one_off():
    limits = parse_limits(memory="2G", processes="256", workspace="none", log="8M", eval_budget="30m")
    assert limits == Limits(memory_bytes=2 * GIB, processes=256, workspace_bytes=None, log_bytes=8 * MIB, eval_s=1800)
    assert parse_limits() == Limits()  # no flag: every default


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"memory": "lots"}, "--memory"),
        ({"memory": "1M"}, "--memory"),
        ({"processes": "many"}, "--max-processes"),
        ({"log": "none"}, "--log-limit"),
        ({"eval_budget": "5s"}, "--eval-budget"),
        ({"eval_budget": "soon"}, "--eval-budget"),
    ],
)
def test_a_limit_no_run_can_use_is_one_clear_error(flags, says):
    with pytest.raises(InputError, match=says):
        parse_limits(**flags)
