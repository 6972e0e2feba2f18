"""Run `python prepare.py ARGS` for many ARGS at the cost of one interpreter start-up.

POSIX only; run as a script.

    cd WORKSPACE && python forked_cli.py CASES.json RESULTS.json

CASES.json holds {case: [args...]}; RESULTS.json gets {case: {"returncode", "stdout", "stderr"}}.

Starting Python and importing torch costs ~1.4 s a process, far more than most `prepare.py --eval`
failures take. Here the workspace's prepare.py is imported once (its main() is guarded, so this runs
no command and no torch op), and each case runs in a forked child exactly as `python prepare.py
ARGS` would: prepare.py executed as __main__ with sys.argv = ["prepare.py", *ARGS], the workspace
first on sys.path, a fresh `prepare` module for the scripts that import it, its own stdout/stderr,
and an uncaught exception printed as a traceback with exit status 1.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import traceback


def _child(args: list[str], out: str, err: str) -> None:
    """Run prepare.py in the forked child as `python prepare.py ARGS` would.

    The child then exits with its status.
    """
    code = 1
    try:
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        sys.argv = ["prepare.py", *args]
        sys.modules.pop("prepare", None)  # train.py's `from prepare import ...` gets a module of its own
        try:
            runpy.run_path("prepare.py", run_name="__main__")
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    """Import ``prepare`` once, run each case in a fork of this process, write the results."""
    cases_file, results_file = sys.argv[1:3]
    with open(cases_file, encoding="utf-8") as f:
        cases: dict[str, list[str]] = json.load(f)
    sys.path[0] = os.getcwd()  # as for `python prepare.py`: the script's folder first
    import prepare  # noqa: F401 - torch, numpy, ... imported once, before the forks

    parallel = os.cpu_count() or 2
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = {case: (os.path.join(tmp, f"{i}.out"), os.path.join(tmp, f"{i}.err")) for i, case in enumerate(cases)}
        running: dict[int, str] = {}
        waiting = list(cases)
        while waiting or running:
            while waiting and len(running) < parallel:
                case = waiting.pop(0)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(cases[case], *files[case])
                running[pid] = case
            pid, status = os.wait()
            case = running.pop(pid)
            out, err = files[case]
            with (
                open(out, encoding="utf-8", errors="replace") as fo,
                open(err, encoding="utf-8", errors="replace") as fe,
            ):
                results[case] = {
                    "returncode": os.waitstatus_to_exitcode(status),
                    "stdout": fo.read(),
                    "stderr": fe.read(),
                }
    with open(results_file, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
