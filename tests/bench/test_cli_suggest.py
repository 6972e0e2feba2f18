"""A mistyped flag: the command's own usage and the nearest flag it has, exit 2 (issue 41)."""

from __future__ import annotations

import pytest

from bench.cli import main


@pytest.mark.parametrize(
    ("argv", "usage", "says"),
    [
        (["run", "--agent", "baseline", "--budgt", "3m"], "usage: bench run ", "did you mean --budget?"),
        (["campaign", "resume", "c.toml", "--redo-cutshort"], "usage: bench campaign resume ", "--redo-cut-short?"),
        (["report", "--experimnt", "x"], "usage: bench report ", "did you mean --experiment?"),
        (["report", "--zzzz"], "usage: bench report ", "bench report --help lists them"),
    ],
)
def test_a_mistyped_flag_gets_its_commands_usage_and_the_nearest_flag(argv, usage, says, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith(usage) and says in err
    assert "unrecognized arguments: " + next(a for a in argv if a.startswith("--") and "--agent" != a) in err
