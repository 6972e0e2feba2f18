"""The paper's nine rules (§3.4), each checked from evidence the agent could not write.

The audit step (:mod:`bench.pipeline.audit`) gathers a :class:`Context` from the run directory and
asks every check in :data:`CHECKS`; each returns findings (:class:`~bench.result.Violation`): the
rule, one sentence, a verdict and the evidence to look at. The evidence is harness-side only:

- ``evidence/`` (:mod:`bench.evidence`): workspace manifests before and after, the locked files'
  state at each checkpoint arrival, the command lines the launch monitor saw, the sources of the
  scripts as they ran, the requests through the sandbox's proxy, the processes that outlived the
  agent;
- ``events.jsonl``: the agent's tool calls, parsed by the harness from the CLI's output
  (``events.jsonl#N`` is the N-th line);
- the scorer's results (the forward-contract probes, the harness's own validation score) and the
  collect step's rejections.

Verdicts: ``disqualify`` where the evidence shows the rule broken (a locked file written, a package
installed, a hub download in a script that ran); ``flag`` where it shows an attempt that the sandbox
or the pipeline made harmless, or something a person should judge (a read outside the workspace, a
request to a host that may be the agent CLI's own telemetry). Modules: :mod:`.files` (rules 1, 2, 4,
5 from the file system), :mod:`.conduct` (rules 2-6 from commands, sources, requests and processes),
:mod:`.scoring` (rules 7-9), :mod:`.labels` (rule 9: a score that carries its labels, a score
outside what the task allows).
"""

from __future__ import annotations

from bench.result import DISQUALIFY, FLAG, Violation
from bench.rules import conduct, files, labels, scoring
from bench.rules.context import RULES, Check, Context, finding

__all__ = ["CHECKS", "RULES", "Context", "run_all"]

CHECKS: list[Check] = [*files.CHECKS, *conduct.CHECKS, *scoring.CHECKS, *labels.CHECKS]


def run_all(ctx: Context) -> tuple[Violation, ...]:
    """Every check, the findings in rule order.

    A check that fails is itself a flagged finding: never silent.
    """
    found: list[Violation] = []
    for check in CHECKS:
        try:
            found += check(ctx)
        except Exception as e:  # an audit that crashes must not lose the run; it says it could not check
            found.append(finding(0, f"the check {check.__name__} failed: {type(e).__name__}: {e}", verdict=FLAG))
    return tuple(sorted(found, key=lambda v: (v.rule, v.verdict != DISQUALIFY)))
