"""1GC-7RC script tracer: loaded by every Python interpreter that an agent starts.

The harness puts this folder on PYTHONPATH, so Python imports this file at start-up
(before the script runs). When the main script is a top-level ``.py`` file of the agent's
workspace (``run_<x>.py``, ``train.py``, ...), it appends JSON lines to a spool file of its
own: a start event (argv, pid, a snapshot of the source) and an end event (FINISHED or
FAILED with the exit code or exception). The task's ``save_checkpoint`` / ``log_metrics``
helpers append to the same file through ``BENCH_SPOOL_FILE``. A process killed by a signal
writes no end event, which the harness reads as KILLED.

The script's stdout and stderr also pass through an output tee (``_bench_tee.py``, a separate small
process): it copies every byte on unchanged, appends the step metrics it reads in printed lines
(``step 100 | loss 1.23``) to the same spool with ``"src": "stdout"``, and keeps the last 200 lines
in ``<spool>.tail``. ``BENCH_TRACE_STDOUT=0`` turns it off; ``BENCH_STDOUT_TRACED=1`` tells that it
is on.

Standard library only and no MLflow: the script pays a few milliseconds, not the ~2.7 s of
``import mlflow`` + ``start_run``; the harness is the only MLflow writer and relays the
spool in batches, so a slow or absent tracking server never touches the script.
"""

import os
import stat
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
    if os.environ.get("BENCH_TRACE_STDOUT", "1") != "0":
        _start_tee(spool)  # registers its exit handshake after at_exit, so it runs first (atexit is LIFO)


def _start_tee(spool):
    """Put the output tee (``_bench_tee.py``) between this process's fds 1, 2 and their files.

    The tee is a separate process, started with ``posix_spawn`` (cheap, no ``subprocess`` import)
    and not waited for: the script goes on at once. It inherits the original fds 1 and 2 and copies
    every byte to them as it arrives; this process's fds 1 and 2 become pipes to it.
    ``sys.stdout``/``sys.stderr`` keep their objects and buffering (their fd numbers are unchanged).
    Children inherit the pipes, so their output is seen too, and the tee outlives this process until
    the last writer has gone. If anything fails before the fds are switched, the script keeps its
    original stdout.

    """
    import atexit

    if not sys.executable or not hasattr(os, "posix_spawn"):
        return
    try:
        st1, st2 = os.fstat(1), os.fstat(2)
    except OSError:
        return  # a closed stdout or stderr stays as it is
    # Same pipe, terminal or file (2>&1): one pipe keeps the exact order of stdout and stderr lines.
    merged = (st1.st_dev, st1.st_ino) == (st2.st_dev, st2.st_ino) and (
        not stat.S_ISREG(st1.st_mode) or os.lseek(1, 0, os.SEEK_CUR) == os.lseek(2, 0, os.SEEK_CUR)
    )
    # Output that goes into an enclosing traced script's tee (a sweep running train.py): the lines
    # we read metrics from are claimed there, so that they count for this script only.
    outer = os.environ.get("BENCH_TEE_PIPES", "").split(",")
    upstream = ",".join(str(fd) for fd, st in ((1, st1), (2, st2)) if f"{st.st_dev}:{st.st_ino}" in outer)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    orig_out, orig_err = os.dup(1), os.dup(2)  # not inheritable: only to write there again at exit
    out_r, out_w = os.pipe()
    err_r, err_w = (-1, out_w) if merged else os.pipe()
    ctl_r, ctl_w = os.pipe()
    ack_r, ack_w = os.pipe()
    theirs = [fd for fd in (out_r, err_r, ctl_r, ack_w) if fd >= 0]
    try:
        for fd in theirs:
            os.set_inheritable(fd, True)
        env = dict(os.environ)
        env.update(
            BENCH_TEE_FDS=f"{out_r},{err_r},{ctl_r},{ack_w}",
            BENCH_TEE_HOOK=os.path.dirname(os.path.abspath(__file__)),
            BENCH_TEE_UPSTREAM=os.environ.get("BENCH_TEE_CLAIMS", "") if upstream else "",
            BENCH_TEE_UPSTREAM_FDS=upstream,
        )
        code = "import os,sys;sys.path.insert(0,os.environ['BENCH_TEE_HOOK']);import _bench_tee;_bench_tee.main()"
        os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", code], env)
    except Exception as e:
        for fd in {out_w, err_w, ctl_w, ack_r, orig_out, orig_err, *theirs}:
            os.close(fd)
        print(f"[bench tracer] output not traced: {e}", file=sys.stderr)
        return
    for fd in theirs:
        os.close(fd)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    for fd in {out_w, err_w}:
        os.close(fd)
    pipes = [(st.st_dev, st.st_ino) for st in (os.fstat(1), os.fstat(2))]
    os.environ.update(
        BENCH_STDOUT_TRACED="1",
        BENCH_TEE_PIPES=",".join(f"{dev}:{ino}" for dev, ino in pipes),
        BENCH_TEE_CLAIMS=spool + ".claims",
    )

    def handshake():
        """At exit: flush, let the tee pass on all output so far, then write to the real fds again.

        Without this, ``python train.py > log; tail log`` could read the log before the tee has
        copied the last lines. Output after this point (finalizers) goes straight to the original
        files, still in order.
        """
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        ours = []  # the fds the script has not pointed elsewhere itself
        for fd, pipe in ((1, pipes[0]), (2, pipes[1])):
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == pipe:
                    ours.append(fd)
            except OSError:
                pass
        try:
            import select

            poller = select.poll()
            poller.register(ack_r, select.POLLIN)
            if ours and not poller.poll(0):  # an event before we ask: the tee has gone (no SIGPIPE for us)
                os.write(ctl_w, b"x")
                poller.poll(5000)  # the answer, EOF if the tee died, or give up waiting
        except OSError:
            pass
        for fd in ours:
            try:
                os.dup2((orig_out, orig_err)[fd - 1], fd)
            except OSError:
                pass

    atexit.register(handshake)
    os.register_at_fork(after_in_child=lambda: atexit.unregister(handshake))


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
