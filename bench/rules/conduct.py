"""Rules 2, 3, 4 and 6 from what the run did.

The commands it ran (the agent's shell tool calls and every command line the launch monitor saw),
the sources of the scripts as they ran, the requests that reached the sandbox's proxy, and the
processes that outlived the agent or the budget.
"""

from __future__ import annotations

import re
from dataclasses import replace

from bench.evidence import UNTIMED
from bench.result import FLAG, Violation
from bench.rules import tracer
from bench.rules.context import Context, finding

# a command word where a shell starts a command: at the start, after ; & | ( ` $( or a newline,
# after sudo, env or VAR=value, with or without a path (/usr/bin/curl); "grep curl notes.txt" and
# "echo use curl" are not commands
_START = r"(?:^|[;&|(`\n]|\$\()\s*(?:(?:sudo|env|exec|nohup|time)\s+|\w+=\S*\s+)*(?:\S*/)?"
INSTALL = re.compile(
    _START + r"(?:(?:python[\d.]*\s+-m\s+)?pip[\d.]*(?:\s+-{1,2}[\w-]+)*\s+(?:install|download|wheel)\b"
    r"|uv\s+(?:pip\s+install|add|sync|tool\s+install)\b|uvx\s"
    r"|(?:conda|mamba|micromamba)\s+(?:install|create|env\s+create)\b"
    r"|(?:npm|pnpm|yarn|bun)\s+(?:install|i|add|ci)\b|npx\s"
    r"|apt(?:-get)?\s+install\b|easy_install\b|poetry\s+(?:add|install)\b|python[\d.]*\s+setup\.py\s+(?:install|develop)\b)"
)
FETCH = re.compile(
    _START + r"(?:curl|wget|aria2c|axel|lftp|scp|sftp|ssh|rsync|ncat|nc|telnet|gdown|kaggle)(?:\s|$)"
    r"|" + _START + r"git\s+(?:clone|fetch|pull|ls-remote|submodule)\b"
    r"|" + _START + r"(?:huggingface-cli|hf)\s+download\b"
)
PYTHON_FETCH = re.compile(r"\burlopen\s*\(|\burlretrieve\s*\(|\brequests\.(?:get|post)\s*\(|\bhttp\.client\b|\bhttpx\.")
PRETRAINED = re.compile(
    r"\bfrom_pretrained\s*\(|\btorch\.hub\.load\b|\bhf_hub_download\s*\(|\bsnapshot_download\s*\("
    r"|\bload_state_dict_from_url\s*\(|\bpretrained\s*=\s*True\b|\bweights\s*=\s*['\"]?(?:DEFAULT|IMAGENET)"
    r"|Weights\.(?:DEFAULT|IMAGENET)"
)


def _command_findings(ctx: Context, rule: int, pattern: re.Pattern, what: str) -> list[Violation]:
    """A finding for the commands matching ``pattern``.

    Disqualifying when the agent ran one (a tool call, or a process working in the workspace),
    flagged when only its CLI's own housekeeping elsewhere did.
    """
    hits = [c for c in ctx.commands() if pattern.search(c.text)]
    if not hits:
        return []
    ours = [c for c in hits if c.agents]
    first = (ours or hits)[0]
    evidence = [f"{c.ref}: {c.text[:300]}" for c in ours or hits]
    return [finding(rule, f"{what}: {first.text[:160]}", evidence, "disqualify" if ours else FLAG)]


def _ran_sources(ctx: Context) -> list[tuple[str, str, str]]:
    """(script, sha256, source) of each workspace script the monitor saw running, as it was then."""
    seen, out = set(), []
    for rec in ctx.evidence.lines("launches.jsonl"):
        digest = rec.get("sha256")
        if digest and digest not in seen:
            seen.add(digest)
            out.append((str(rec.get("script")), digest, ctx.evidence.source(digest)))
    return out


def no_pretrained_weights(ctx: Context) -> list[Violation]:
    """Rule 2 (code): a script that ran calls a model hub, or a command fetched a model.

    The calls are ``from_pretrained``, ``torch.hub.load``, ``hf_hub_download``,
    ``pretrained=True``... T3's provided DINOv3 files are loaded from ``weights/`` with
    ``torch.load`` and match none of these.
    """
    hits = []
    for script, digest, source in _ran_sources(ctx):
        for n, line in enumerate(source.splitlines(), 1):
            if PRETRAINED.search(line) and not line.lstrip().startswith("#"):
                hits.append(f"sources/{digest[:12]}.py ({script}) line {n}: {line.strip()[:200]}")
    out = _command_findings(ctx, 2, PRETRAINED, "a command names a model hub call")
    out = [replace(v, verdict=FLAG) for v in out]  # a command that names one may only search for it (grep)
    if hits:
        out.insert(0, finding(2, f"pretrained weights were asked for: {hits[0].split(': ', 1)[-1][:160]}", hits))
    return out


def no_internet(ctx: Context) -> list[Violation]:
    """Rule 3: a command that fetches, a script that ran an HTTP client call, a refused request.

    A command that fetches: curl, wget, git clone, a hub download; every request the sandbox's proxy
    refused counts. An offline agent's run has no business with the proxy at all; an LLM agent's
    CLI may ask its own telemetry hosts, so a refused request is then flagged.
    """
    out = _command_findings(ctx, 3, FETCH, "a command reached for the internet")
    refused = [
        f"network.jsonl#{n}: {r.get('method')} {r.get('host')}:{r.get('port')} refused"
        for n, r in enumerate(ctx.evidence.lines("network.jsonl"), 1)
        if not r.get("allowed") and r.get("host") not in ctx.own_hosts
    ]
    if refused:
        verdict = "disqualify" if ctx.offline else FLAG
        why = f"{len(refused)} request(s) to hosts outside the agent's endpoints were refused by the sandbox"
        out.append(finding(3, why, refused, verdict))
    clients = []
    for script, digest, source in _ran_sources(ctx):
        for n, line in enumerate(source.splitlines(), 1):
            if PYTHON_FETCH.search(line) and not line.lstrip().startswith("#"):
                clients.append(f"sources/{digest[:12]}.py ({script}) line {n}: {line.strip()[:200]}")
    if clients:
        out.append(finding(3, f"a script that ran makes HTTP requests ({clients[0].split(': ', 1)[1][:120]})",
                           clients, FLAG))  # fmt: skip
    return out


def no_package_installs(ctx: Context) -> list[Violation]:
    """Rule 4 (commands): pip/uv/conda/npm/apt installs, ``--target`` and vendored wheels too."""
    return _command_findings(ctx, 4, INSTALL, "a package install was run")


def within_budget(ctx: Context) -> list[Violation]:
    """Rule 6: work after the budget (scripts, processes, checkpoints), flagged.

    Scripts started after the budget, processes that ignored SIGTERM until the grace was over or
    were still running when the harness ended the run after the budget, checkpoints that came too
    late or were overwritten after they were first seen (placed at their new content's time). All
    of it was stopped or discarded by the harness, hence flags: the work did not count, a person may
    want to know.
    """
    out = []
    late = [
        f"launches.jsonl#{n}: {r.get('script')} (pid {r.get('pid')}) started {r['started'] - ctx.started_at:.0f} s in"
        for n, r in enumerate(ctx.evidence.lines("launches.jsonl"), 1)
        if isinstance(r.get("started"), int | float) and r["started"] > ctx.deadline
    ]
    if late:
        out.append(finding(6, f"{len(late)} script(s) started after the {ctx.budget_s:.0f} s budget", late, FLAG))
    alive = []
    for n, rec in enumerate(ctx.evidence.lines("processes.jsonl"), 1):
        if rec.get("phase") != "end" or rec.get("t", 0) > ctx.deadline:  # grace-over, resume, or an end past it
            alive += [f"processes.jsonl#{n} ({rec.get('phase')}): pid {p.get('pid')} {p.get('argv', '')}"[:300]
                      for p in rec.get("processes") or []]  # fmt: skip
    if alive:
        out.append(finding(6, f"{len(alive)} process(es) of the run were still running past the budget", alive, FLAG))
    too_late = [
        f"{r['path']}: {r['reason']}"
        for r in ctx.rejected
        if any(why in r["reason"] for why in ("deadline", "not seen"))
    ]
    if too_late:
        out.append(
            finding(6, f"{len(too_late)} checkpoint(s) came after the deadline and were not scored", too_late, FLAG)
        )
    untimed = [f"{r['path']}: {r['reason']}" for r in ctx.rejected if UNTIMED in r["reason"]]
    if untimed:
        why = f"{len(untimed)} checkpoint(s) hold bytes the harness never saw while the run went on: not scored"
        out.append(finding(6, why, untimed, FLAG))
    overwritten = _overwrites(ctx)
    if overwritten:
        why = (
            f"{len(overwritten)} checkpoint(s) were overwritten after the harness first saw them: each is placed "
            "at the time its last content was seen, not at its first sight"
        )
        out.append(finding(6, why, overwritten, FLAG))
    return out


def _overwrites(ctx: Context) -> list[str]:
    """Checkpoints whose content changed after the harness first saw them.

    ``arrivals.jsonl`` records each change with the new content's identity. One line each, with both
    times. The later content is the one scored and it is placed at its own time
    (:mod:`bench.pipeline.collect`); a name saved early and filled late gains nothing, but a person
    may want to know (an honest script that rewrites ``best.pt`` shows here too).
    """
    first: dict[str, dict] = {}
    last: dict[str, tuple[int, dict]] = {}
    for n, rec in enumerate(ctx.evidence.lines("arrivals.jsonl"), 1):
        path = rec.get("path")
        if not isinstance(path, str) or not isinstance(rec.get("seen_at"), int | float):
            continue
        if path not in first:
            first[path] = rec
        elif isinstance(rec.get("change"), int) and rec["change"] > 0:
            last[path] = (n, rec)
    out = []
    for path, (n, rec) in last.items():
        was, now = (first[path].get("identity") or {}), (rec.get("identity") or {})
        how = " (written after the harness died: its mtime)" if rec.get("fallback") == "mtime" else ""
        out.append(
            f"arrivals.jsonl#{n}: {path[:200]} first seen at {first[path]['seen_at'] - ctx.started_at:.1f} s, "
            f"content changed at {rec['seen_at'] - ctx.started_at:.1f} s{how} ({rec['change']} change(s); sha256 "
            f"{str(was.get('sha256'))[:12]} -> {str(now.get('sha256'))[:12]})"
        )
    return out


CHECKS = [no_pretrained_weights, no_internet, no_package_installs, within_budget, *tracer.CHECKS]
