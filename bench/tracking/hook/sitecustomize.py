"""1GC-7RC script tracer: loaded by every Python interpreter that an agent starts.

The harness puts this folder on PYTHONPATH, so Python imports this file at start-up
(before the script runs). When the main script is a top-level ``.py`` file of the agent's
workspace (``run_<x>.py``, ``train.py``, ...), it appends JSON lines to a spool file of its
own: a start event (argv, pid, a snapshot of the source) and an end event (FINISHED or
FAILED with the exit code or exception). The task's ``save_checkpoint`` / ``log_metrics``
helpers append to the same file through ``BENCH_SPOOL_FILE``. A process killed by a signal
writes no end event, which the harness reads as KILLED.

Standard library only and no MLflow: the script pays a few milliseconds, not the ~2.7 s of
``import mlflow`` + ``start_run``; the harness is the only MLflow writer and relays the
spool in batches, so a slow or absent tracking server never touches the script.
"""

import os
import sys


def _trace_this_process():
    workspace = os.environ.get("BENCH_WORKSPACE")
    spool_dir = os.environ.get("BENCH_SPOOL_DIR")
    main = sys.argv[0] if getattr(sys, "argv", None) else ""
    if not workspace or not spool_dir or not main.endswith(".py"):
        return  # not under the harness, `python -c`, `python -m`, multiprocessing workers
    path = os.path.realpath(main)
    if os.path.dirname(path) != os.path.realpath(workspace) or os.path.basename(path) == "prepare.py":
        return  # only the agent's own top-level scripts; the locked evaluator is not a launch

    import atexit
    import json
    import time

    spool = os.path.join(spool_dir, f"{time.time_ns()}-{os.getpid()}.jsonl")
    os.environ["BENCH_SPOOL_FILE"] = spool  # for the task helpers, and inherited by forked workers
    state = {"exit_code": 0, "error": None}

    def emit(event):
        try:
            with open(spool, "a", encoding="utf-8") as f:
                f.write(json.dumps(event, default=str) + "\n")
        except OSError:
            pass  # tracing never breaks the script

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            source = f.read(1_000_000)
    except OSError:
        source = ""
    os.makedirs(spool_dir, exist_ok=True)
    emit(
        {
            "ev": "start",
            "t": time.time(),
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "script": os.path.basename(path),
            "argv": list(sys.argv),
            "cwd": os.getcwd(),
            "python": sys.executable,
            "source": source,
        }
    )

    real_exit, real_hook = sys.exit, sys.excepthook

    def exit_(code=0):
        state["exit_code"] = code if isinstance(code, int) else (0 if code is None else 1)
        real_exit(code)

    def excepthook(kind, value, tb):
        if not issubclass(kind, KeyboardInterrupt):
            state["error"] = f"{kind.__name__}: {value}"
        state["exit_code"] = 130 if issubclass(kind, KeyboardInterrupt) else 1
        real_hook(kind, value, tb)

    def at_exit():
        failed = state["exit_code"] != 0
        emit(
            {
                "ev": "end",
                "t": time.time(),
                "status": "FAILED" if failed else "FINISHED",
                "exit_code": state["exit_code"],
                "error": state["error"],
            }
        )

    sys.exit, sys.excepthook = exit_, excepthook
    atexit.register(at_exit)
    os.register_at_fork(after_in_child=lambda: atexit.unregister(at_exit))  # a forked worker is not a launch


def _chain_to_shadowed_sitecustomize():
    """Run the sitecustomize that this file hides (a virtualenv's or a distribution's), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _trace_this_process()
except Exception as e:  # never let tracing stop a script from starting
    print(f"[bench tracer] tracing disabled for this process: {e}", file=sys.stderr)
_chain_to_shadowed_sitecustomize()
