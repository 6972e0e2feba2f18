"""What a rule check reads (:class:`Context`), how a command is quoted, how a finding is made."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import untrusted
from bench.evidence import Evidence
from bench.result import DISQUALIFY, Evaluation, Violation

EVENT_DEPTH = 200  # nesting of one normalised event (its raw CLI object included): far below Python's recursion limit
RULES = {
    1: "edit only train.py and new files: the locked files stay as given",
    2: "no pretrained weights (T3: only the provided DINOv3 backbones)",
    3: "no internet access",
    4: "no package installs",
    5: "work only inside the workspace",
    6: "the time budget",
    7: "the output contract (checkpoints, the forward contract)",
    8: "isolated evaluation: nothing touches the scorer's inputs",
    9: "select on validation, never on test",
}


def finding(rule: int, reason: str, evidence: list[str] | tuple[str, ...] = (), verdict: str = DISQUALIFY) -> Violation:
    """A finding of ``rule``, its evidence bounded (20 items of 500 characters) for result.json."""
    return Violation(rule, reason, verdict, tuple(str(e)[:500] for e in list(evidence)[:20]))


@dataclass(frozen=True)
class Command:
    """A command the run executed, from either source.

    An agent's shell tool call or a process the monitor saw.
    """

    text: str  # the command line as one string
    ref: str  # "events.jsonl#12" or "commands.jsonl#3"
    agents: bool = True  # the agent's own: a tool call, or a process working in the workspace (not its CLI's own
    # housekeeping in its home, such as a CLI fetching its plugins)


@dataclass
class Context:
    """Everything a check may read, gathered once from the run directory and the pipeline."""

    workspace: Path
    run_dir: Path
    task_id: str
    locked: tuple[str, ...]  # the task's locked files
    locked_sha256: dict[str, str]  # at the start
    evaluations: list[Evaluation]
    started_at: float
    budget_s: float
    agent_argv: list[str]
    rejected: list[dict]  # the collect step's rejections: {"path", "reason"}
    offline: bool  # the agent declares no endpoint: every request its sandbox saw came from the run's own code
    own_hosts: tuple[str, ...] = ()  # hosts the agent's CLI asks by itself (update checks): not held against the run
    provided: dict[str, dict] = field(default_factory=dict)  # provided weight files (relative) -> start manifest entry
    data_error: str | None = None  # why the prepared data no longer verify (None: they do)
    originals_changed: list[str] = field(default_factory=list)  # the task's own files that changed during the run
    # where the run's workspace was when it ran (result.json's ``workspace``): the paths the
    # evidence records (tool calls, command lines' folders) are judged against it, so a run folder
    # moved or imported elsewhere (``bench verify`` of a bundle) gets the verdict it got where it
    # ran. None: the workspace has not moved.
    recorded_workspace: Path | None = None
    task_dir: Path | None = None  # the task's own folder (its task.toml's margins: bench.rules.labels)

    @property
    def evidence(self) -> Evidence:
        """The run's ``evidence/`` folder (:mod:`bench.evidence`)."""
        return Evidence(self.run_dir)

    @property
    def deadline(self) -> float:
        """The end of the agent's budget: ``started_at`` + ``budget_s``."""
        return self.started_at + self.budget_s

    @property
    def moved(self) -> bool:
        """The run folder is no longer where it ran.

        Recorded paths are judged lexically against the recorded place (the reader's disk may hold
        anything, links included, at that path).
        """
        return self.recorded_workspace is not None and Path(self.recorded_workspace) != Path(self.workspace)

    def in_workspace(self, path: Path) -> bool:
        """Whether a path the evidence recorded lies in the run's workspace as it was when it ran.

        The path is absolute, or relative to the workspace.
        """
        if self.moved:
            root = Path(os.path.normpath(self.recorded_workspace))
            where = Path(os.path.normpath(path if path.is_absolute() else root / path))
        else:
            root = self.workspace.resolve()
            where = (path if path.is_absolute() else self.workspace / path).resolve()
        return where == root or root in where.parents

    def events(self) -> Iterator[tuple[str, dict]]:
        """(ref, event) for each line of ``events.jsonl``.

        Read line by line (the file may be as large as the agent's log cap), each line parsed with a
        bounded depth (it carries what the agent's CLI printed).
        """
        try:
            f = open(self.run_dir / "events.jsonl", encoding="utf-8", errors="replace")
        except OSError:
            return
        with f:
            for n, line in enumerate(f, 1):
                event = untrusted.loads_json(line, max_depth=EVENT_DEPTH, max_len=len(line))
                if isinstance(event, dict):
                    yield f"events.jsonl#{n}", event

    def tool_calls(self, *tools: str) -> Iterator[tuple[str, dict]]:
        """(ref, event) of each tool call with a target, of ``tools`` only when any are named."""
        for ref, e in self.events():
            if e.get("kind") == "tool_call" and (not tools or e.get("tool") in tools) and e.get("target"):
                yield ref, e

    def commands(self) -> list[Command]:
        """Shell tool calls and observed command lines.

        The agent process itself (its prompt) is not one.
        """
        out = [Command(str(e["target"]), ref) for ref, e in self.tool_calls("shell")]
        agent = [str(a) for a in self.agent_argv]
        for n, rec in enumerate(self.evidence.lines("commands.jsonl"), 1):
            argv = [str(a) for a in rec.get("argv") or []]
            if not argv or (agent and argv[-len(agent) :] == agent):
                continue  # the agent CLI (or the sandbox's launcher of it): its argv is the prompt, not a command
            shell = len(argv) >= 3 and argv[1] in ("-c", "-lc") and Path(argv[0]).name.endswith("sh")
            if Path(argv[0]).name.startswith("python") and len(argv) > 1 and not argv[1].startswith("-"):
                argv = argv[1:]  # a console script run by its shebang (python .../bin/pip install): the script's line
            text = argv[2] if shell else shlex.join(argv)
            cwd = Path(str(rec.get("cwd") or "/"))
            out.append(Command(text, f"commands.jsonl#{n}", self.in_workspace(cwd)))
        return out


Check = Callable[[Context], list[Violation]]
