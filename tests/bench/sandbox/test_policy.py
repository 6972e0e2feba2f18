"""The bwrap arguments a policy becomes (no sandbox is started here) and, in a real sandbox, the nesting
cases that matter: the tracking store inside the readable repo stays hidden, the pinned CLIs under the
hidden cache stay readable while the prepared data beside them does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.sandbox import Policy, bwrap_args, default_hidden, default_readable


def ops(args: list[str]) -> list[tuple[str, str]]:
    """(option, path) for the mount options, in order."""
    out, i = [], 0
    while i < len(args):
        if args[i] in ("--tmpfs", "--remount-ro", "--chdir"):
            out.append((args[i], args[i + 1]))
            i += 2
        elif args[i] in ("--bind", "--ro-bind", "--dev-bind", "--ro-bind-try"):
            out.append((args[i], args[i + 2]))
            i += 3
        else:
            i += 1
    return out


def test_parents_first_and_read_only_tmpfs_after_the_binds(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "scratch"
    repo, mlruns = home / "repo", home / "repo" / "mlruns"
    cache, clis, prepared = home / ".cache" / "x", home / ".cache" / "x" / "clis", home / ".cache" / "x" / "prepared"
    ws = tmp / "run" / "workspace"
    for d in (mlruns, clis, prepared, ws, home / "run" / "home"):
        d.mkdir(parents=True)
    policy = Policy(
        cwd=ws,
        writable=(ws, home / "run" / "home", tmp_path / "missing"),
        readable=(repo, clis, repo / "bench"),
        hidden=(home, cache, mlruns, prepared, tmp_path / "absent"),
        scratch=(tmp,),
        gpu=False,
    )
    got = ops(bwrap_args(policy))
    mounts = [(o, p) for o, p in got if o != "--ro-bind-try"]
    assert mounts == [
        ("--ro-bind", "/"),
        ("--tmpfs", str(home)),
        ("--tmpfs", str(tmp)),  # scratch: stays writable (no --remount-ro)
        ("--ro-bind", str(repo)),  # (repo/bench: already readable through it, no mount)
        ("--tmpfs", str(mlruns)),  # hidden inside the readable repo
        ("--bind", str(home / "run" / "home")),
        ("--bind", str(ws)),
        ("--ro-bind", str(clis)),  # readable inside the hidden cache; the cache and prepared need no mount
        ("--remount-ro", str(home)),
        ("--remount-ro", str(mlruns)),
        ("--chdir", str(ws)),
    ]
    assert ("--ro-bind-try", "/proc/sys") in got
    args = bwrap_args(policy)
    assert args[args.index("--cap-drop") + 1] == "ALL"
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert flag in args
    assert "--new-session" not in args  # the watchdog signals the agent's process group


def test_default_places(monkeypatch, tmp_path):
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("BENCH_DATA_MIRROR", str(tmp_path / "m"))
    hidden = default_hidden()
    assert {tmp_path / "c", tmp_path / "c" / "workspaces", tmp_path / "m"} <= set(hidden)
    readable = default_readable()
    assert (tmp_path / "c" / "clis") in readable


@pytest.mark.usefixtures("bwrap_ok")
def test_nested_views_inside_a_real_sandbox(harness, inside, policy_of, monkeypatch):
    """A repo under the hidden home, readable, with its tracking store hidden; a pinned CLI readable under the
    hidden cache while the prepared data beside it stay hidden."""
    repo = harness.home / "repo"
    (repo / "mlruns").mkdir(parents=True)
    (repo / "bench.py").write_text("code")
    (repo / "mlruns" / "store.db").write_text("runs")
    tool = harness.cache / "clis" / "cli-1.0" / "bin" / "cli"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(repo / "mlruns"))
    policy = policy_of(harness)
    policy = Policy(policy.cwd, policy.writable, (*policy.readable, repo), policy.hidden, gpu=False)
    code = (
        "import json, os\n"
        f"paths = {json.dumps({'repo': str(repo), 'mlruns': str(repo / 'mlruns'), 'tool': str(tool.parent)})}\n"
        f"prepared = {str(harness.secrets['prepared'])!r}\n"
        "print(json.dumps({**{k: sorted(os.listdir(p)) for k, p in paths.items()},\n"
        "                  'prepared': os.path.exists(prepared)}))\n"
    )
    assert inside(policy, code) == {"repo": ["bench.py", "mlruns"], "mlruns": [], "tool": ["cli"], "prepared": False}


def test_the_root_is_never_hidden(tmp_path):
    """HOME=/ (a service account) must not turn into a tmpfs over the whole machine."""
    args = bwrap_args(Policy(cwd=tmp_path, writable=(tmp_path,), hidden=(Path("/"),), scratch=(), gpu=False))
    assert ("--tmpfs", "/") not in ops(args)
