"""The ``bench`` executable (bench/entrypoint.py): main's exit code after all its output and exit handlers, and a
reader that goes away (``bench tasks | head -1``, quitting ``less``) ends nothing and prints no traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from bench.entrypoint import PipeGuard


def _bench(code: str, tmp_path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "BENCH_WORKSPACES_DIR": str(tmp_path / "ws"), "BENCH_MLRUNS_DIR": str(tmp_path / "mlruns")}
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True, **kwargs)


def test_the_exit_code_is_mains_after_its_output_and_exit_handlers(tmp_path):
    """The executable ends the process itself once a command is done (skipping the interpreter's slow teardown):
    the exit code is main's, everything printed comes out, and exit handlers still run."""
    code = (
        "import atexit, sys\n"
        "from bench.entrypoint import main\n"
        "atexit.register(lambda: print('exit handler ran', flush=True))\n"
        "print('before', end='')\n"  # unflushed output must come out too
        "sys.argv = ['bench', 'run', '--agent', 'command', '--agent-command', 'true', '--task', 'nope']\n"
        "main()\n"
        "print('never here')\n"
    )
    proc = _bench(code, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert out == "beforeexit handler ran\n"
    (line,) = err.splitlines()
    assert line.startswith("bench: ") and "nope" in line


def test_a_reader_that_went_away_is_no_traceback(tmp_path):
    """`bench tasks | head -0`: the pipe's reader is gone before bench writes; bench still ends as it would."""
    code = "import sys\nfrom bench.entrypoint import main\nsys.argv = ['bench', 'tasks']\nmain()\n"
    proc = _bench(code, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves at once, before the interpreter has even started
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert "BrokenPipeError" not in err and "Traceback" not in err, err


def test_the_guard_sends_the_rest_to_devnull_once_the_reader_is_gone():
    read, write = os.pipe()
    stream = PipeGuard(io.TextIOWrapper(os.fdopen(write, "wb"), line_buffering=True))
    stream.write("seen\n")
    assert os.read(read, 100) == b"seen\n"
    os.close(read)
    for _ in range(3):  # EPIPE from here on: neither write nor flush raises
        assert stream.write("lost\n") == 5
        stream.flush()
    assert stream.closed_by_reader and stream.fileno() == write  # the same descriptor, now /dev/null
