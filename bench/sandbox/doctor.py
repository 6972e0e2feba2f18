"""``bench sandbox view``.

The view a run's sandboxes will get on this machine, entry by entry, and why.

Why a command: the allow-list depends on the machine (where Python lives, merged /usr or not,
a GPU, the CLIs installed, the host's unix sockets), so the only honest documentation of what
an agent can see is the list computed here, from the same code that builds the bwrap
arguments (:func:`.policy.plan`).
"""

from __future__ import annotations

import argparse
import errno

from bench.sandbox.policy import Policy, default_hidden, default_readable, plan
from bench.sandbox.view import Bind


def planned_view(purpose: str, gpu: bool = True) -> list[Bind]:
    """The view of a run's ``agent`` or ``predictor`` sandbox, with placeholder run folders.

    The placeholders are not made here.
    """
    from bench.paths import workspaces_dir

    run_dir = workspaces_dir() / "CAMPAIGN" / "RUN"
    if purpose == "agent":
        home, ws = Bind(run_dir / "home", "rw", "the agent's private HOME"), run_dir / "workspace"
        policy = Policy(
            cwd=ws,
            writable=(Bind(ws, "rw", "the agent's workspace"), home),
            readable=default_readable("agent"),
            hidden=default_hidden(),
            gpu=gpu,
        )
    else:
        staged = Bind(run_dir / "eval" / "CANDIDATE", "ro", "the staged evaluation folder (task originals, scripts)")
        readable = (*default_readable("predictor"), staged)
        policy = Policy(cwd=staged.path, writable=(), readable=readable, hidden=default_hidden(), gpu=gpu)
    return plan(policy, keep_missing=True)


def format_view(binds: list[Bind]) -> str:
    """The view as a table, one entry a line, sorted by path: mode, path, why."""
    width = max(len(str(b.path)) for b in binds)
    lines = [f"  {'mode':8} {'path':{width}}  why"]
    for b in sorted(binds, key=lambda b: str(b.path)):  # bwrap's order is parents first; people read by path
        path = f"{b.path} -> {b.target}" if b.target else str(b.path)
        lines.append(f"  {b.mode:8} {path:{width}}  {b.why}")
    return "\n".join(lines)


def describe_filter(purpose: str) -> str:
    """What the sandbox's seccomp profile denies and which cgroup it shows, in one line.

    The profile: :mod:`.seccomp`.
    """
    from bench.sandbox import seccomp

    profile = seccomp.PROFILES[purpose]
    group = "the run's own cgroup" if purpose == "agent" else "no cgroup"
    args = "; ".join(
        f"{errno.errorcode[a.err]} for {a.call} with arg {a.arg} "
        + (f"& {a.mask:#x}" if a.mask else "in " + ", ".join(str(v) for v in a.values))
        for a in profile.args
    )
    return (
        f"seccomp ({profile.name}): EPERM for {', '.join(profile.calls)}; ENOSYS for {', '.join(profile.absent)}; "
        f"{args}; /sys/fs/cgroup shows {group}"
    )


def cmd_view(args: argparse.Namespace) -> int:
    """``bench sandbox view``: each sandbox's view and filter, and whether bwrap works here."""
    from bench.sandbox.bwrap import probe

    purposes = ["predictor"] if args.predictor else ["agent", "predictor"]
    for purpose in purposes:
        binds = planned_view(purpose, gpu=not args.no_gpu)
        title = "the agent's sandbox (bench run)" if purpose == "agent" else "the predictor's sandbox (evaluation)"
        print(
            f"{title}: {len(binds)} entries; nothing else exists inside (ro: read-only, rw: read-write, empty: "
            "an empty read-only folder, scratch: private tmpfs, mask: /dev/null over a secret or socket)"
        )
        print(format_view(binds))
        print(f"  {describe_filter(purpose)}")
        print()
    reason = probe()
    print("bubblewrap: " + ("works here" if reason is None else f"cannot run here: {reason}"))
    return 0


def add_cli(sub: argparse._SubParsersAction) -> None:
    """``bench sandbox view [--predictor] [--no-gpu]``."""
    s = sub.add_parser("sandbox", help="the sandbox: print the view a run's agent and predictor will get")
    ssub = s.add_subparsers(dest="sandbox_command", required=True)
    v = ssub.add_parser("view", help="each path a sandbox sees, read-only or read-write, and why it is there")
    v.add_argument("--predictor", action="store_true", help="only the predictor's sandbox")
    v.add_argument("--no-gpu", action="store_true", help="leave out the GPU's entries (as Policy(gpu=False))")
    v.set_defaults(func=cmd_view)
