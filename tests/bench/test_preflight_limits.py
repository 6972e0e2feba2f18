"""bench run's limit flags, made from the limits' model and judged by it before anything is created."""

from __future__ import annotations

import pytest

from bench import run_flags
from bench.cli import build_parser
from bench.errors import InputError
from bench.runspec import RunSpec
from bench.sandbox.resource_limits import GIB, MIB, Limits

RUN = ["run", "--agent", "command", "--task", "t6"]


def _limits(*flags: str) -> Limits:
    """The limits of the description ``bench run`` builds from these flags."""
    layer = run_flags.layer(build_parser().parse_args([*RUN, *flags]))
    return RunSpec.build("t6", "command", layer).limits


def test_the_flags_set_each_limit_and_none_switches_one_off():
    limits = _limits("--memory", "2G", "--max-processes", "256", "--workspace-limit", "none", "--log-limit", "8M",
                     "--eval-budget", "30m")  # fmt: skip
    assert limits == Limits(memory_bytes=2 * GIB, processes=256, workspace_bytes=None, log_bytes=8 * MIB, eval_s=1800)
    assert _limits() == Limits()  # no flag: every default


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--memory", "1M"], "--memory 1048576 is too small to run anything: give at least 67108864 (or 'none')"),
        (["--eval-budget", "5s"], "--eval-budget 5 s cannot score a checkpoint: give at least 10s"),
        (["--max-processes", "8"], "--max-processes 8 is too small to run anything: give at least 16"),
    ],
)
def test_a_limit_no_run_can_use_is_one_clear_error(flags, says):
    with pytest.raises(InputError) as e:
        _limits(*flags)
    assert str(e.value).startswith(says), e.value


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--memory", "lots"], "argument --memory: 'lots' is not a size"),
        (["--max-processes", "many"], "argument --max-processes: 'many' is not a count"),
        (["--log-limit", "none"], "argument --log-limit: none: agent.log always has a limit"),
        (["--eval-budget", "soon"], "argument --eval-budget: bad duration 'soon'"),
    ],
)
def test_text_that_is_no_size_count_or_duration_is_argparses_error(flags, says, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*RUN, *flags])
    assert e.value.code == 2 and says in capsys.readouterr().err
