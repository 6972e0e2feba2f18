"""Rules 1, 2, 4 and 5 from the file system.

The harness's manifests of the workspace (before the agent started, at each checkpoint arrival,
after everything ended), the private home it gave the agent, and the tool calls that name files.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench import untrusted
from bench.evidence import STAT_KEYS, locked_state
from bench.result import FLAG, Violation
from bench.rules.context import Context, finding

WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".h5", ".onnx", ".gguf", ".msgpack")
# where model hubs put what they download: a pretrained model the run fetched, whatever the code
# that asked
HUB_CACHE = re.compile(
    r"(^|/)(huggingface/hub|hub/checkpoints|torch/hub|models--[^/]+|\.cache/(torch|huggingface))(/|$)"
)
# what a package install leaves behind, in the workspace or the home
INSTALLED = re.compile(
    r"(^|/)([^/]+\.dist-info|[^/]+\.egg-info|site-packages|node_modules|__pypackages__)(/|$)|\.whl$|(^|/)\.venv/"
)


def _short(sha: str | None) -> str:
    return (sha or "?")[:12]


def locked_files_kept(ctx: Context) -> list[Violation]:
    """Rule 1: each locked file kept its start bytes throughout, and was never written.

    Its bytes are checked at the end and whenever a checkpoint arrived; never written: its inode
    change time and inode number are those of the start (a write, a ``chmod`` or a replacement moves
    them even when the bytes are restored).
    """
    start = ctx.evidence.read_json("manifest-start.json")
    end = ctx.evidence.read_json("manifest-end.json")
    out = []
    for name in ctx.locked:
        want, was = ctx.locked_sha256.get(name), start.get(name) or {}
        now = end.get(name) if end else locked_state(ctx.workspace, [name])[name]
        if now is None or now.get("missing"):
            out.append(
                finding(1, f"the locked {name} was deleted from the workspace", [f"manifest-end.json: no {name}"])
            )
            continue
        if now.get("sha256") and want and now["sha256"] != want:
            out.append(
                finding(
                    1,
                    f"the locked {name} was modified (sha256 {_short(now['sha256'])}, expected {_short(want)})",
                    [f"manifest-start.json {name} sha256 {want}", f"manifest-end.json {name} sha256 {now['sha256']}"],
                )
            )
            continue
        during = [
            (rec, rec["locked"][name])
            for rec in ctx.evidence.lines("arrivals.jsonl")
            if (rec.get("locked") or {}).get(name, {}).get("sha256") not in (None, want)
        ]
        if during:
            rec, state = during[0]
            out.append(
                finding(
                    1,
                    f"the locked {name} was modified while the run went on and restored before the end "
                    f"(sha256 {_short(state.get('sha256'))} when {rec['path']} arrived)",
                    [f"arrivals.jsonl: {rec['path']} at {rec.get('seen_at')}: {name} sha256 {state.get('sha256')}"],
                )
            )
            continue
        moved = [k for k in ("ctime_ns", "ino") if was.get(k) is not None and now.get(k) not in (None, was[k])]
        if moved:
            out.append(
                finding(
                    1,
                    f"the locked {name} was written or replaced during the run and its bytes restored "
                    f"({' and '.join(moved)} changed)",
                    [f"{name} {k}: start {was.get(k)}, end {now.get(k)}" for k in moved],
                )
            )
    writes = [(ref, e) for ref, e in ctx.tool_calls("write", "edit") if Path(str(e["target"])).name in ctx.locked]
    if writes and not out:
        refs = [f"{ref}: {e['tool']} {e['target']}" for ref, e in writes]
        out.append(
            finding(1, f"the agent called {writes[0][1]['tool']} on the locked {writes[0][1]['target']}", refs, FLAG)
        )
    return out


# the searches behind rules 2 and 4 keep only what they look for (bench.untrusted.walk's ``match``):
# decoys that sort first cost them time, never the place of the evidence; what bounds them is
# entries looked at and seconds
SEARCH_LIMITS = untrusted.Limits(max_entries=50_000, max_depth=256, max_seen=5_000_000, max_seconds=120.0)


def _is_weight(rel: str) -> bool:
    return bool(HUB_CACHE.search(rel)) and rel.endswith(WEIGHT_SUFFIXES)


def _is_installed(rel: str) -> bool:
    return bool(INSTALLED.search(rel))


class Search:
    """What one rule's search of the workspace and the agent's home found, and where it was cut.

    Paths read ``workspace/...``, ``home/...``; each cut of a walk it relied on is a line naming the
    walk and the cap.
    """

    def __init__(self) -> None:
        self.found: list[str] = []
        self.cut: list[str] = []


def _manifest_cut(manifest: dict) -> str | None:
    cut = manifest.get("...") if isinstance(manifest, dict) else None
    return cut.get("why", "cut") if isinstance(cut, dict) else None


def _wanted(rel: str) -> bool:
    """What any rule's search keeps: one walk per folder serves rules 2 and 4."""
    return bool(HUB_CACHE.search(rel)) or _is_installed(rel)


def _searched(ctx: Context, root: Path) -> tuple[list[str], list[untrusted.Finding]]:
    """``root``'s files that a rule searches for (relative paths) and the walk's findings.

    Walked once per audit (kept on the context: each walk may look at millions of entries for up to
    ``SEARCH_LIMITS.max_seconds``).
    """
    memo = ctx.__dict__.setdefault("_searched", {})
    if root not in memo:
        files, findings = untrusted.walk(root, SEARCH_LIMITS, match=_wanted)
        listed = [*files, *(Path(f.path) for f in findings if f.what in (untrusted.LINK, untrusted.SPARSE))]
        memo[root] = ([p.relative_to(root).as_posix() for p in listed], findings)
    return memo[root]


def _search(ctx: Context, match, workspace_match=None) -> Search:
    """The new workspace files and the agent's home's files that a rule's patterns take.

    New workspace files: manifest-end minus manifest-start, taken by ``workspace_match`` (else
    ``match``); the home's files are taken by ``match``. Where a manifest was cut at its cap, the
    workspace is searched for the rule's own patterns instead (what manifest-start listed is not
    new); each cut is named in ``cut``.
    """
    out, wmatch = Search(), workspace_match or match
    start, end = ctx.evidence.read_json("manifest-start.json"), ctx.evidence.read_json("manifest-end.json")
    out.found = [f"workspace/{rel}" for rel in end if rel != "..." and rel not in start and wmatch(rel)]
    cuts = {
        name: why
        for name, m in (("manifest-start.json", start), ("manifest-end.json", end))
        if (why := _manifest_cut(m))
    }
    if cuts:
        rels, findings = _searched(ctx, ctx.workspace)
        listed = {rel for rel in rels if wmatch(rel)}
        out.found += sorted(
            f"workspace/{rel}" for rel in listed if rel not in start and f"workspace/{rel}" not in out.found
        )
        out.cut += [
            f"{name}: the workspace's manifest stopped ({why}); the workspace searched instead"
            for name, why in cuts.items()
        ]
        out.cut += [
            f"the workspace's search stopped: {untrusted.plain(str(f))}" for f in findings if f.what in untrusted.CUT
        ]
        if "manifest-start.json" in cuts:
            out.cut.append("manifest-start.json was cut: a file found may have been there before the agent started")
    home = ctx.run_dir / "home"  # the agent's private home: agent-made, searched through the boundary
    rels, findings = _searched(ctx, home)
    out.found += [f"home/{rel}" for rel in rels if match(rel)]
    out.cut += [f"the home's search stopped: {untrusted.plain(str(f))}" for f in findings if f.what in untrusted.CUT]
    return out


def _review(rule: int, what: str, search: Search) -> list[Violation]:
    """A search that was cut and found nothing cannot clear the run.

    It is flagged for a person, with the cut.
    """
    if not search.cut or search.found:
        return []
    reason = f"the audit's search for {what} was cut short ({search.cut[0]}): review the run by hand"
    return [finding(rule, reason, search.cut, FLAG)]


def no_foreign_weights(ctx: Context) -> list[Violation]:
    """Rule 2 (files): weights in a model hub's cache, and provided weights no longer as provided.

    The hub's download cache is looked for in the workspace and the agent's home; the provided
    weight files are T3's DINOv3.
    """
    out = []
    search = _search(ctx, _is_weight, workspace_match=lambda rel: bool(HUB_CACHE.search(rel)))
    if hub := search.found:
        out.append(
            finding(2, f"a model hub's download cache holds {len(hub)} file(s): pretrained weights fetched", hub)
        )
    out += _review(2, "a model hub's downloads", search)
    end = ctx.evidence.read_json("manifest-end.json")
    for rel, was in ctx.provided.items():
        now = end.get(rel) if end else was
        if now is None and _manifest_cut(end):  # not listed because the listing stopped: look at the file itself
            now = locked_state(ctx.workspace, [rel])[rel]
        moved = [k for k in STAT_KEYS if now is None or now.get(k) != was.get(k)]
        if moved:
            why = (
                "deleted" if now is None or now.get("missing") else f"written or replaced ({', '.join(moved)} changed)"
            )
            out.append(finding(2, f"the provided {rel} was {why}", [f"manifest-start/end.json {rel}: {moved}"], FLAG))
    return out


def no_installed_packages(ctx: Context) -> list[Violation]:
    """Rule 4 (files): what installs leave behind, new in the workspace or the agent's home.

    Those are ``*.dist-info``, ``site-packages``, wheels and ``node_modules`` that appeared during
    the run.
    """
    search = _search(ctx, _is_installed)
    found = search.found
    if not found:
        return _review(4, "installed packages", search)
    return [finding(4, f"packages were installed: {len(found)} installed file(s) appeared, e.g. {found[0]}", found)]


def stays_in_workspace(ctx: Context) -> list[Violation]:
    """Rule 5: links leading out of the workspace.

    Tool calls that write or read files outside it.
    """
    root = ctx.workspace.resolve()
    out = []
    for p in (Path(f.path) for f in _listing(ctx)[1] if f.what == untrusted.LINK):
        target = p.resolve()
        if root != target and root not in target.parents:
            rel = untrusted.plain(str(p.relative_to(ctx.workspace)))
            out.append(finding(5, f"{rel} links outside the workspace to {target}", [f"workspace/{rel} -> {target}"]))
    for tools, verdict, what in ((("write", "edit"), None, "wrote"), (("read",), FLAG, "read")):
        outside = []
        for ref, e in ctx.tool_calls(*tools):
            target = Path(str(e["target"]))
            if not ctx.in_workspace(target):  # judged where the run ran (a moved run folder: its recorded place)
                outside.append(f"{ref}: {e['tool']} {target}")
        if outside:
            reason = (
                f"the agent {what} {len(outside)} file(s) outside the workspace, e.g. {outside[0].split(': ', 1)[1]}"
            )
            out.append(finding(5, reason, outside, verdict or "disqualify"))
    return out


def _listing(ctx: Context) -> tuple[list[Path], list[untrusted.Finding]]:
    """The workspace's links and the files the harness refuses to read, as its walk finds them.

    The walk is :func:`bench.untrusted.walk`: no link followed, no recursion, bounded; a search that
    keeps no regular file, so a flood of them cannot push a link past the cap (only the entries
    looked at and the time bound it, and a cut is :func:`hostile_files`' flag).
    """
    memo = ctx.__dict__.setdefault("_searched", {})  # walked once per audit: rule 5's two checks read it
    if "listing" not in memo:
        memo["listing"] = untrusted.walk(ctx.workspace, AUDIT_LIMITS, match=lambda rel: False)
    return memo["listing"]


AUDIT_LIMITS = untrusted.Limits(max_entries=200_000, max_depth=256, max_seen=5_000_000, max_seconds=120.0)
# what the harness refuses to read, in words, for the audit's reason
HOSTILE = {untrusted.NOT_REGULAR: "special file(s)", untrusted.SPARSE: "sparse file(s)",
           untrusted.TOO_MANY: "a flood of entries", untrusted.TOO_DEEP: "folders nested too deep",
           untrusted.TOO_SLOW: "more than the audit's listing could look at in time"}  # fmt: skip


def hostile_files(ctx: Context) -> list[Violation]:
    """Rule 5 (flag): files in the workspace that the harness refuses to read.

    Refused by :mod:`bench.untrusted`: FIFOs, sockets or devices (a FIFO named like a spool file
    blocked an unguarded harness forever), sparse files (1 GiB that takes no disk, read whole by an
    unguarded harness), more entries or deeper folders than the caps. None of them harms a run now,
    so each is a flag naming the act for a person, not a disqualification; links leading out are
    :func:`stays_in_workspace`'s (disqualify).
    """
    files, findings = _listing(ctx)
    hostile = [f for f in findings if f.what in HOSTILE]
    if not hostile:
        return []
    counts: dict[str, int] = {}
    for f in hostile:
        counts[f.what] = counts.get(f.what, 0) + 1
    words = ", ".join(f"{n} {HOSTILE[what]}" for what, n in sorted(counts.items()))
    evidence = [f"{untrusted.plain(_rel(ctx, f.path))}: {f.what} ({untrusted.plain(f.detail)})" for f in hostile]
    return [finding(5, f"the workspace holds what the harness refuses to read: {words}", evidence, FLAG)]


def cut_walks(ctx: Context) -> list[Violation]:
    """Every listing of the agent's files that stopped at a cap is a finding (flag).

    Each names the walk and the cap: the workspace's manifests (``"..."`` in
    manifest-start/end.json) and the collect step's listing of ``checkpoints/`` (a rejection that
    says ``too-many``, ``too-deep`` or ``too-slow``). The audit's own listings say theirs in the
    rule they serve (:func:`_review`, :func:`hostile_files`).
    """
    out = []
    for name in ("manifest-start.json", "manifest-end.json"):
        if why := _manifest_cut(ctx.evidence.read_json(name)):
            out.append(finding(5, f"the workspace's listing {name} was cut: {why}", [f"evidence/{name}: {why}"], FLAG))
    cut = [f"{r['path']}: {r['reason']}" for r in ctx.rejected if any(k in str(r.get("reason")) for k in untrusted.CUT)]
    if cut:
        out.append(finding(7, f"the listing of checkpoints/ was cut: {cut[0]}", cut, FLAG))
    return out


def _rel(ctx: Context, path: str) -> str:
    try:
        return "workspace/" + Path(path).relative_to(ctx.workspace).as_posix()
    except ValueError:
        return path


CHECKS = [locked_files_kept, no_foreign_weights, no_installed_packages, stays_in_workspace, hostile_files, cut_walks]
