"""A campaign file's limits (the ``bench run`` limit flags as keys): what a valid one gives every run, each mistake
refused in one line naming the key before anything starts, and a Slurm job's time limit that follows the
evaluation budget."""

from __future__ import annotations

import pytest

from bench.campaign import spec
from bench.campaign.job import spec_of
from bench.campaign.slurm import time_limit_min
from bench.cli import main
from bench.sandbox.resource_limits import GIB, KIB, MIB, Limits
from tests.bench.campaign.conftest import campaign_file

AGENT = '[[agents]]\nname = "baseline"\n'


def test_the_limit_keys_reach_every_runs_spec(task_folders, tmp_path):
    body = 'tasks = ["t6", "t5"]\nrepeats = 2\nmemory = "6G"\nmax_processes = 512\nworkspace_limit = "none"\n'
    body += 'log_limit = 1048576\neval_budget = "20m"\n'
    path, _ = campaign_file(tmp_path, body + AGENT)
    c = spec.load(path)
    own = Limits(memory_bytes=6 * GIB, processes=512, workspace_bytes=None, log_bytes=MIB, eval_s=1200.0)
    assert c.spec.limits == own
    assert {spec_of(c, key).limits for key in c.runs()} == {own}  # all four runs, each with the file's limits


def test_absent_keys_are_the_flags_defaults(task_folders, tmp_path):
    path, _ = campaign_file(tmp_path, 'tasks = ["t6"]\nlog_limit = "64K"\n' + AGENT)
    c = spec.load(path)
    assert c.spec.limits == Limits(log_bytes=64 * KIB)  # the least log limit is allowed; the rest: bench run's defaults
    assert spec_of(c, c.runs()[0]).limits.eval_s == 3600.0


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('memory = "lots"', "memory: 'lots' is not a size"),
        ('memory = "1M"', "memory: '1M' is too small to run anything: give at least \"64M\""),
        ("memory = 1.5", 'memory: write a size as a string, e.g. memory = "64G"'),
        ("memory = true", "memory: write a size as a string"),
        ('max_processes = "many"', "max_processes: must be a whole number (got 'many')"),
        ("max_processes = 8", "max_processes: 8 is too small to run anything: give at least 16"),
        ('workspace_limit = "10K"', "workspace_limit: '10K' is too small to run anything: give at least \"1M\""),
        ('log_limit = "none"', "log_limit: cannot be none: agent.log always has a limit"),
        ('eval_budget = "none"', "eval_budget: cannot be none: the evaluation always has a budget"),
        ("eval_budget = 600", 'eval_budget: write a duration as a string, e.g. eval_budget = "1h"'),
        ('eval_budget = "soon"', "eval_budget: bad duration"),
        ('eval_budget = "5s"', "eval_budget: '5s' cannot score a checkpoint: give at least 10s"),
        ('memroy = "6G"', "memroy: unknown key"),
        # a given Slurm margin must cover the evaluation budget and the scorer's minute to report
        ('eval_budget = "30m"\n[slurm]\neval_margin = "30m"', "slurm.eval_margin: 30:00 does not cover"),
    ],
)
def test_a_bad_limit_is_refused_in_one_line_naming_the_key(task_folders, tmp_path, capsys, line, expected):
    path, _ = campaign_file(tmp_path, f'tasks = ["t6"]\n{line}\n{AGENT}')
    capsys.readouterr()
    assert main(["campaign", "run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err and str(path) in err, err
    assert not (tmp_path / "workspaces").exists()


def test_a_slurm_jobs_time_limit_follows_the_evaluation_budget(task_folders, tmp_path):
    base = 'tasks = ["t6"]\nbudget = "40m"\nexecutor = "slurm"\n'
    c = spec.load(campaign_file(tmp_path, base + AGENT)[0])
    # the default 1 h budget: 2400 + 30 grace + (3600 + 60 scorer grace + 600 after) + 60 = 6750 s = 112.5 min
    assert c.slurm.eval_margin_s is None and c.eval_margin_s == 4260
    assert time_limit_min(c, c.spec.budget_s) == 113
    c = spec.load(campaign_file(tmp_path, base + 'eval_budget = "2h"\n' + AGENT)[0])
    assert time_limit_min(c, c.spec.budget_s) == 173  # (2400 + 30 + 7200 + 60 + 600 + 60) / 60 = 172.5
    given = base + 'eval_budget = "15m"\n' + AGENT + '[slurm]\neval_margin = "16m"\n'
    c = spec.load(campaign_file(tmp_path, given)[0])
    assert c.eval_margin_s == 960 and time_limit_min(c, c.spec.budget_s) == 58  # (2400 + 30 + 960 + 60) / 60 = 57.5


def test_an_eval_margin_given_without_an_eval_budget_sets_the_budget_it_fits(task_folders, tmp_path):
    """A campaign file written before eval_budget existed (``eval_margin = "20m"``) keeps working: its runs' evaluation
    budget is what the margin leaves after the scorer's 60 s and the 10 minutes after the evaluation."""
    base = 'tasks = ["t6"]\nbudget = "40m"\nexecutor = "slurm"\n' + AGENT
    c = spec.load(campaign_file(tmp_path, base + '[slurm]\neval_margin = "20m"\n')[0])
    assert c.spec.limits.eval_s == 1200 - 60 - 600  # 9 minutes
    assert c.eval_margin_s == 1200 and time_limit_min(c, c.spec.budget_s) == 62  # (2400 + 30 + 1200 + 60) / 60 = 61.5
    c = spec.load(campaign_file(tmp_path, base + '[slurm]\neval_margin = "4m"\n')[0])
    assert c.spec.limits.eval_s == 240 - 60 - 120  # the time after the evaluation takes at most half of a short margin
