"""The agent sandbox (bubblewrap).

An allow-listed view with one writable workspace, no network but the model's API, and a process tree
that cannot outlive the run.

Why a sandbox and not conventions: the benchmark measures agents that may cheat (the hostile-input
boundary: CONTRIBUTING.md; docs/sandbox-and-rules.md, "What the sandbox enforces"). Without one, an
agent's code can rewrite ``result.json``, other runs, the prepared data, the tracking store and the
harness itself, reach the internet, and leave processes behind that no process group or run token
finds. With it, those are not rules an audit checks afterwards but things that cannot happen. The
pieces: :mod:`.bwrap` (the binary and its probe), :mod:`.view` (the allow-list: what a sandbox sees
and why), :mod:`.policy` (one sandbox's view and its bwrap arguments), :mod:`.sockets` (the host's
unix sockets a view would show, masked), :mod:`.network` (the bridges out), :mod:`.environment` (the
allow-listed variables) and :mod:`.launcher` (the first process inside). ``bench sandbox view``
prints the view.

    policy = Policy(cwd=ws, writable=(ws, home), readable=default_readable(),
                    hidden=default_hidden(), endpoints=("https://api.anthropic.com",))
    with Sandbox(policy) as box:
        proc = subprocess.Popen(box.wrap(argv), env=agent_environment(...),
                                start_new_session=True)

A sandbox costs about the start of one small Python process per agent run (the launcher) and nothing
per process started inside it: those are ordinary processes in namespaces that already exist.

Caveats: ``--die-with-parent`` uses the kernel's parent-death signal, which fires when the *thread*
that started bwrap exits, so start it from a thread that lives as long as the run (the runner's main
thread). GPUs: the NVIDIA device nodes, driver libraries and toolkits are bound when present
(``Policy.gpu``); tested on a simulated layout, not on a GPU here.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from bench.sandbox import seccomp
from bench.sandbox.bwrap import SandboxUnavailable, probe, require
from bench.sandbox.environment import agent_environment
from bench.sandbox.network import Network
from bench.sandbox.policy import Policy, bwrap_args, default_hidden, default_readable
from bench.sandbox.resource_limits import RunGroup, shell_prelude

LAUNCHER = Path(__file__).resolve().with_name("launcher.py")
# The harness starts bwrap with SIGTERM ignored (an ignored signal survives exec): bwrap itself
# would die of the watchdog's SIGTERM and take the whole sandbox with it, cutting the grace
# period short. The launcher inside handles SIGTERM again, so the agent and its scripts get the
# default action.
IGNORE_TERM = ["/bin/sh", "-c", 'trap "" TERM; exec "$@"', "bench-sandbox"]  # without a run group: shell_prelude([])


def interpreter_paths(python: str = sys.executable) -> tuple[Path, ...]:
    """What the launcher needs to run.

    The interpreter's prefixes and folders (a pyenv under ``~``), the launcher.
    """
    exe = Path(python)
    return (
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(sys.base_exec_prefix),
        exe.parent,
        exe.resolve().parent,
        LAUNCHER,
    )


def _cleanup(network: Network, runtime_dir: Path | None, stubs: list[Path] | None = None) -> None:
    network.close()
    if runtime_dir is not None:
        shutil.rmtree(runtime_dir, ignore_errors=True)
    for stub in stubs or ():  # the empty mount points of the policy's files (a login): nothing stays behind
        try:
            if stub.is_file() and not stub.is_symlink() and stub.stat().st_size == 0:
                stub.unlink()
        except OSError:
            pass


def _mount_points(files: tuple[tuple[Path, Path], ...]) -> list[Path]:
    """The empty files that ``files``' destinations are bound onto, made here.

    bwrap would make them too, but then nobody would remove them; only those that did not exist, so
    the caller's own files are never removed.
    """
    made = []
    for _, dest in files:
        dest = Path(dest)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.touch(mode=0o600)
            made.append(dest)
    return made


class Sandbox:
    """One sandbox: its policy, and its network bridges when it has endpoints.

    With endpoints it also has their runtime folder (the unix sockets); without endpoints there
    is neither.

    :meth:`wrap` turns an argv into the command that runs it inside; several commands may be
    wrapped, each gets a sandbox of its own built from the same policy and sharing the bridges.
    :meth:`close` (or leaving the ``with`` block) stops the bridges and removes the runtime folder;
    do it once the processes ended. Raises :class:`SandboxUnavailable` when bwrap cannot run here
    (:func:`probe` says why).
    """

    def __init__(
        self,
        policy: Policy,
        *,
        python: str | None = None,
        limits: RunGroup | None = None,
        services: dict[int, Callable[[socket.socket], None]] | None = None,
    ) -> None:
        self.limits = limits  # memory and processes: the run's cgroup joined first, or the launcher's rlimits
        self.binary = require()
        self.python = python or sys.executable
        self.policy = policy
        networked = policy.endpoints or policy.network_log is not None or services
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="bench-sandbox-")) if networked else None
        # services: loopback ports inside served by handlers of the harness (the metering gateway)
        self.network = Network(policy.endpoints, self.runtime_dir, policy.network_log, services)
        stubs = _mount_points(policy.files)
        self._finalizer = weakref.finalize(self, _cleanup, self.network, self.runtime_dir, stubs)
        try:
            self.network.start()
        except BaseException:
            self.close()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` in the sandbox, with the policy's cwd.

        The environment given to it is passed on (plus the proxy variables when a remote endpoint
        is allowed).
        """
        shown = self.limits.shown() if self.limits is not None and self.policy.own_cgroup else ()
        view = replace(
            self.policy,
            readable=(*self.policy.readable, *interpreter_paths(self.python)),
            files=(*self.policy.files, *shown),  # the run's own group only, read-only
        )
        args = ["--unshare-cgroup-try", *seccomp.bwrap_args(self.policy.seccomp), *bwrap_args(view, self.runtime_dir)]
        for name, value in self.network.env.items():
            args += ["--setenv", name, value]
        listen = [a for spec in self.network.listen for a in ("--listen", spec)]
        rlimits = self.limits.launcher_args() if self.limits else []
        inner = [self.python, "-I", "-S", str(LAUNCHER), *listen, *rlimits, "--", *argv]
        before = seccomp.shell_open(self.policy.seccomp)  # the filter on the descriptor bwrap reads it from
        prelude = self.limits.prelude(before) if self.limits else shell_prelude([], before)
        return [*prelude, self.binary, *args, "--", *inner]

    def close(self) -> None:
        """Stop the bridges and remove the runtime folder (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "LAUNCHER",
    "Policy",
    "Sandbox",
    "SandboxUnavailable",
    "agent_environment",
    "bwrap_args",
    "default_hidden",
    "default_readable",
    "probe",
]
