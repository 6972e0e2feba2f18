"""The fast tier's guard: a test not marked ``slow`` starts no whole benchmark run.

A whole run (``bench.runner.run``: an agent launched, watched under its budget, its checkpoints evaluated, audited
and recorded; in this process, or in a ``bench run``, ``bench demo``, ``bench selftest`` or campaign subprocess)
costs tens of seconds to minutes, and ``make test`` (``-m "not slow"``) is the tier a contributor runs in minutes.
tests/conftest.py wraps ``bench.runner.run`` (:func:`wrap_runner`), installs :func:`audit` as the test process's
audit hook, and calls :func:`begin` and :func:`end` around each test. While a test not marked slow runs, a whole run
is refused before its agent starts (the test fails at once instead of waiting out a budget) and named again at the
test's end, in case the code under test swallowed the refusal. The launch, watch and scoring steps on their own (a few
seconds each, with the process machinery they test) stay in the fast tier. A subprocess's own children are not
seen: the ``bench`` commands that run agents are recognised by their command line.

A module of its own (not the conftest) because the tests of the guard must see the same state as the hook, and a
conftest is not importable under ``--import-mode=importlib``.
"""

from __future__ import annotations

import functools
import os

# the slow tier is opt-in (as inspect_ai's --runslow; tests/conftest.py): what a skipped slow test and the session say
RUN_SLOW = "run `make test-slow` or `pytest --runslow -m slow` (both tiers: `make test-all` or `pytest --runslow`)"
SLOW_SKIPPED = f"slow tier: {RUN_SLOW}"
# each tier's ceiling per test, its setup included (pytest-timeout; a test's own @pytest.mark.timeout wins), far above
# the slowest test of each on the shared 2-core machine (--durations=25), so that only a hang reaches it: the fast
# tier's slowest took 26-32 s at load 2-3 (T4's 41,127 real molecules; the fast tier as a whole runs ~4 times slower at
# load 9-12), the slow tier's 262 s (a setup that runs the real campaign of several `bench run`s)
FAST_TIMEOUT_S = 300
SLOW_TIMEOUT_S = 1800

CLI_RUNS = {("run",), ("demo",), ("selftest",), ("campaign", "run"), ("campaign", "job")}

_guarded = False  # the running test is not marked slow
_in_run = 0  # bench.runner.run calls under way in this process
_started: list[str] = []  # the whole runs it started


class WholeRunInFastTier(RuntimeError):
    """A test not marked slow started a whole benchmark run."""


def whole_run(argv) -> str | None:
    """What a process about to start is, when it is a whole benchmark run; None otherwise."""
    words = [os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple)) else str(argv).split()
    for i, word in enumerate(words):
        module = i > 0 and words[i - 1] == "-m" and word in ("bench", "bench.cli", "bench.entrypoint")
        if os.path.basename(word) == "bench" or module:
            command = tuple(w for w in words[i + 1 :] if not w.startswith("-"))[:2]
            for known in (command, command[:1]):
                if known in CLI_RUNS:
                    return f"a `bench {' '.join(known)}` process"
    return None


def audit(event: str, args: tuple) -> None:
    """The audit hook (``sys.addaudithook``): refuses a whole run while a test not marked slow runs."""
    if event != "subprocess.Popen" or not _guarded:
        return
    what = whole_run(args[1])
    if what:
        refuse(what)


def refuse(what: str) -> None:
    """Refuse ``what`` (a whole run) when the running test is not marked slow."""
    if _guarded:
        _started.append(what)
        raise WholeRunInFastTier(f"{what} in a test not marked slow: mark it @pytest.mark.slow (with the reason)")


def wrap_runner() -> None:
    """``bench.runner.run`` refuses to launch its agent while a test not marked slow runs (called before any test
    module is imported, so that every ``from bench.runner import run`` gets the wrapped one). The refusal is at the
    launch, not at the call: a run that its checks stop before anything starts is a fast test."""
    global _in_run
    try:
        from bench import runner
        from bench.pipeline import launch
    except Exception:  # noqa: BLE001 (a tree that does not import: its tests say why; the CLI runs are still seen)
        return
    if getattr(runner.run, "__wrapped__", None) is not None:
        return

    @functools.wraps(runner.run)
    def run(*args, **kwargs):
        global _in_run
        _in_run += 1
        try:
            return run.__wrapped__(*args, **kwargs)
        finally:
            _in_run -= 1

    @functools.wraps(launch.launch)
    def launch_agent(*args, **kwargs):
        if _in_run:
            refuse("bench.runner.run")
        return launch_agent.__wrapped__(*args, **kwargs)

    runner.run, launch.launch = run, launch_agent


def guarded() -> bool:
    return _guarded


def begin(slow: bool) -> None:
    global _guarded
    _guarded = not slow
    _started.clear()


def end() -> list[str]:
    """The whole runs the test that ends started while guarded (and forgets them)."""
    global _guarded
    started = sorted(set(_started)) if _guarded else []
    _guarded = False
    _started.clear()
    return started


def forget() -> None:
    """Forget the refusals so far (the guard's own test provokes one)."""
    _started.clear()


def started() -> list[str]:
    return list(_started)
