"""The tracer's output tee: metrics read from printed lines, a stdout tail, and output passed on unchanged."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.tracking import HOOK_DIR

# the tee imports its line parser from the hook folder, as it does when sitecustomize starts it
sys.path.insert(0, str(HOOK_DIR))
_spec = importlib.util.spec_from_file_location("_bench_tee", HOOK_DIR / "_bench_tee.py")
tee = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tee)


# --- the line parser ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, expected",
    [
        ("step 100 | loss 1.2300 | val_bpb 2.3100", (100, {"loss": 1.23, "val_bpb": 2.31})),
        ("step 100: loss=1.23, val_bpb=2.31", (100, {"loss": 1.23, "val_bpb": 2.31})),
        ("[step 100] loss 1.2300 lr 3.0e-04", (100, {"loss": 1.23, "lr": 3e-4})),
        ("iter 200: loss 1.8, time 12.3ms", (200, {"loss": 1.8, "time": 12.3})),
        ("Epoch 3/10 - loss: 0.1234 - val_acc: 0.91", (3, {"loss": 0.1234, "val_acc": 0.91, "epoch": 3.0})),
        ("epoch 3 | train_loss 0.5 | val_mse 0.40", (3, {"train_loss": 0.5, "val_mse": 0.4, "epoch": 3.0})),
        ("iteration 7 loss 2 acc 91.5% dt 1.5s", (7, {"loss": 2.0, "acc": 91.5, "dt": 1.5})),
        ("it 7: loss -1.5E+2", (7, {"loss": -150.0})),
        ("Epoch [1/10], Step [100/600], Loss: 0.2345", (100, {"Loss": 0.2345, "epoch": 1.0})),
        ("Train Epoch: 2 [0/60000 (0%)]\tLoss: 2.302585", (2, {"Loss": 2.302585, "epoch": 2.0})),
        ("step 5 epoch 1 | train/loss 0.5 | eval.acc .75", (5, {"train/loss": 0.5, "eval.acc": 0.75, "epoch": 1.0})),
        ("step 3 epoch 1.5 loss 2", (3, {"epoch": 1.5, "loss": 2.0})),  # a fractional epoch is a plain metric
        ("step 9 | loss 1.5.", (9, {"loss": 1.5})),
        ("Epoch 0: 50%|#####  | 16/32 [00:00<00:00, 40.00it/s, train_loss=0.5]", (0, {"train_loss": 0.5, "epoch": 0})),
    ],
)
def test_parser_reads_common_formats(line, expected):
    assert tee.parse_line(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "saved checkpoints/train_step160_val_bpb3.5974_123.pt",
        "step 160: saved checkpoints/train_step160_val_bpb3.5974_123.pt",  # a marker, but only a path
        "loss 1.23 val_bpb 2.31",  # no step or epoch marker
        "Epoch 3/10",  # a marker without metrics
        "step 100",
        "step 5 | loss nan | acc inf | big 1e999",  # non-finite values
        "32/32 [====] - 1s 5ms/step - loss: 0.1 - acc: 0.9",  # '/step' is a unit, not a marker
        "max_steps 5000 lr 1e-3",
        "Training for 1000 steps, batch 64",
        "step_100 loss 1.0",
        "torch 2.1.0 at step 3",  # a version is no value
        "step 4 | tokens 1,234,567",  # digit groups are no value
        "It took 3 seconds, loss 2",
        "step 2 | " + "x 1 " * 2000,  # too long to parse
    ],
)
def test_parser_ignores_other_lines(line):
    assert tee.parse_line(line) is None


def feed_tee(tmp_path: Path, chunks: list[bytes], stream_prefix: str = "") -> tuple[list[dict], list[str]]:
    """Run the tee's line handling (no processes) over ``chunks``; the spooled events and the tail."""
    spool = tmp_path / "x.jsonl"
    spool.write_text("")
    t = tee.Tee([], -1, -1, str(spool), "")
    s = tee._Stream(-1, -1, stream_prefix)
    for chunk in chunks:
        t.lines(s, chunk)
    t.lines(s, b"", eof=True)
    t.write_tail()
    evs = [json.loads(line) for line in spool.read_text().splitlines()]
    return evs, Path(str(spool) + ".tail").read_text().splitlines()


def test_line_splitting_handles_progress_bars_crlf_ansi_and_chunk_edges(tmp_path):
    chunks = [
        b"\x1b[32mstep 1 | loss 2.0\x1b[0m\n",
        b"step 2 | lo",  # a line split across reads
        b"ss 1.5\r",  # \r at a chunk edge: the first half of \r\n
        b"\nplain line\r\n",
        b"\rEpoch 3: 10%| loss=0.9\rEpoch 3: 20%| loss=0.8\rEpoch 3: 100%| loss=0.7\n",  # a progress bar
        b"no newline at the end",
    ]
    evs, tail = feed_tee(tmp_path, chunks)
    assert all(e["ev"] == "metrics" and e["src"] == "stdout" for e in evs)
    steps = [(e["step"], e["metrics"]) for e in evs]
    assert steps[:2] == [(1, {"loss": 2.0}), (2, {"loss": 1.5})]
    # the bar's refreshes are throttled (at most one a second), its final state is always read; its epoch is one
    # value at step 3, spooled with the first refresh, not again with each
    assert steps[-1] == (3, {"loss": 0.7}) and 3 <= len(steps) <= 4
    assert [m["epoch"] for step, m in steps if "epoch" in m] == [3.0]
    assert tail == [
        "step 1 | loss 2.0",
        "step 2 | loss 1.5",
        "plain line",
        "Epoch 3: 100%| loss=0.7",
        "no newline at the end",
    ]


def test_tail_keeps_the_last_200_lines_and_events_stay_small(tmp_path):
    many = "".join(f"line {i}\n" for i in range(1000)).encode()
    wide = ("step 1 | " + " ".join(f"m{i} {i}" for i in range(400)) + "\n").encode()  # 3.5 KB of metrics
    evs, tail = feed_tee(tmp_path, [many, wide], stream_prefix="[stderr] ")
    assert len(tail) == 200 and tail[0] == "[stderr] line 801" and tail[-1].startswith("[stderr] step 1 |")
    assert len(evs) == 1 and 100 < len(evs[0]["metrics"]) < 400  # cut to one small, atomic append
    assert len(json.dumps(evs[0], separators=(",", ":"))) < 4096


# --- traced scripts ----------------------------------------------------------------------------------
def env_for(ws: Path, **extra: str | None) -> dict[str, str]:
    """The harness's environment for a traced script; ``extra`` values of None are unset."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    env.update(BENCH_WORKSPACE=str(ws), BENCH_SPOOL_DIR=str(ws / ".bench" / "spool"), PYTHONPATH=str(HOOK_DIR))
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


_started: list[subprocess.Popen] = []


def start(ws: Path, name: str, body: str, **kw) -> subprocess.Popen:
    (ws / name).write_text(body)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    env = env_for(ws, **kw.pop("env", {}))
    proc = subprocess.Popen([sys.executable, name], cwd=ws, env=env, **kw)
    _started.append(proc)
    return proc


def spool_of(ws: Path, script: str) -> Path:
    for f in (ws / ".bench" / "spool").glob("*.jsonl"):
        first = f.read_text().split("\n", 1)[0]
        if first and json.loads(first)["script"] == script:
            return f
    raise AssertionError(f"no spool for {script}")


def poll(check, what: str, timeout: float = 30.0):
    """Poll ``check()`` until it returns something truthy, up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_tail(spool: Path) -> list[str] | None:
    tail = Path(str(spool) + ".tail")
    return tail.read_text().splitlines() if tail.exists() else None


def stdout_metrics(spool: Path) -> list[tuple[int, dict]]:
    evs = [json.loads(line) for line in spool.read_text().splitlines()]
    return [(e["step"], e["metrics"]) for e in evs if e["ev"] == "metrics" and e.get("src") == "stdout"]


@pytest.fixture
def ws(tmp_path):
    (tmp_path / ".bench" / "spool").mkdir(parents=True)
    yield tmp_path
    while _started:  # a failed test leaves no script waiting (its tee ends at EOF)
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


PRINTS = r"""
import os, sys
print("traced:", os.environ.get("BENCH_STDOUT_TRACED"), flush=True)
print("step 1 | loss 1.2300 | val_bpb 2.3100", flush=True)
print("Epoch 2/10 - loss: 0.5 - val_acc: 0.91", file=sys.stderr, flush=True)
sys.stdout.write("iter 3: loss=0.25, time 12.3ms\n")
sys.stdout.buffer.write(b"raw \xff bytes\r\n")
sys.stdout.flush()
print("[stderr line]", file=sys.stderr)
print("saved checkpoints/train_step160_val_bpb3.5974_123.pt")
print("unflushed last line, no newline", end="")
"""
EXPECTED_OUT = (
    b"traced: 1\nstep 1 | loss 1.2300 | val_bpb 2.3100\niter 3: loss=0.25, time 12.3ms\nraw \xff bytes\r\n"
    b"saved checkpoints/train_step160_val_bpb3.5974_123.pt\nunflushed last line, no newline"
)
EXPECTED_ERR = b"Epoch 2/10 - loss: 0.5 - val_acc: 0.91\n[stderr line]\n"


def test_output_passes_unchanged_and_metrics_and_tail_are_captured(ws):
    proc = start(ws, "run_p.py", PRINTS)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert (out, err) == (EXPECTED_OUT, EXPECTED_ERR)
    spool = spool_of(ws, "run_p.py")
    got = poll(lambda: len(m := stdout_metrics(spool)) == 3 and m, "three stdout metrics")
    assert sorted(got) == [
        (1, {"loss": 1.23, "val_bpb": 2.31}),
        (2, {"loss": 0.5, "val_acc": 0.91, "epoch": 2.0}),
        (3, {"loss": 0.25, "time": 12.3}),
    ]
    tail = poll(lambda: (t := read_tail(spool)) and t[-1].startswith("unflushed") and t, "the final tail")
    assert "[stderr] Epoch 2/10 - loss: 0.5 - val_acc: 0.91" in tail and "[stderr] [stderr line]" in tail
    assert [line for line in tail if not line.startswith("[stderr] ")] == [
        "traced: 1",
        "step 1 | loss 1.2300 | val_bpb 2.3100",
        "iter 3: loss=0.25, time 12.3ms",
        "raw \ufffd bytes",
        "saved checkpoints/train_step160_val_bpb3.5974_123.pt",
        "unflushed last line, no newline",
    ]
    evs = [json.loads(line) for line in spool.read_text().splitlines()]
    assert evs[0]["ev"] == "start" and evs[-1]["ev"] == "end"  # the script's own lines are spooled before its end


def test_stdout_and_stderr_into_one_pipe_keep_their_order(ws):
    body = "import sys\nfor i in range(200):\n    print(i, file=(sys.stdout, sys.stderr)[i % 2], flush=True)\n"
    proc = start(ws, "run_m.py", body, stderr=subprocess.STDOUT)
    out, _ = proc.communicate(timeout=60)
    assert out == "".join(f"{i}\n" for i in range(200)).encode()


def test_output_is_complete_when_the_script_has_exited(ws):
    """`python run.py > log; cat log` must see the last lines: the exit waits for the tee to pass them on."""
    body = "for i in range(3000):\n    print('step', i, '| loss', 1 / (i + 1))\nprint('the end')\n"
    log = ws / "log.txt"
    with open(log, "wb") as f:
        proc = start(ws, "run_f.py", body, stdout=f)
        assert proc.wait(timeout=60) == 0
    assert log.read_bytes().endswith(b"step 2999 | loss 0.0003333333333333333\nthe end\n")


CHILD_OUTLIVES = r"""
import subprocess, sys
code = "import time\nfor i in range(40):\n    print('child step', i, '| loss', i, flush=True)\n"
code += "    time.sleep(0.005)\nopen('child.done', 'w').close()\n"
subprocess.Popen([sys.executable, "-c", code])
print("parent exits", flush=True)
"""


def test_a_child_that_outlives_the_script_keeps_its_stdout(ws):
    proc = start(ws, "run_c.py", CHILD_OUTLIVES)
    out, err = proc.communicate(timeout=60)  # EOF comes once the child is done too
    assert proc.returncode == 0 and b"Error" not in err, err
    assert (ws / "child.done").exists()
    assert out.decode().splitlines() == ["parent exits"] + [f"child step {i} | loss {i}" for i in range(40)]
    spool = spool_of(ws, "run_c.py")
    poll(lambda: len(stdout_metrics(spool)) == 40, "the child's metrics")
    poll(lambda: (t := read_tail(spool)) and t[-1] == "child step 39 | loss 39", "the child's lines in the tail")


def test_a_killed_script_still_has_its_tail(ws):
    body = "import time\nfor i in range(5):\n    print('step', i, '| loss', i, flush=True)\ntime.sleep(120)\n"
    proc = start(ws, "run_k.py", body)
    assert proc.stdout.readline() == b"step 0 | loss 0\n"
    spool = spool_of(ws, "run_k.py")
    poll(lambda: len(stdout_metrics(spool)) == 5, "metrics before the kill")
    proc.kill()
    proc.communicate(timeout=60)
    tail = poll(lambda: (t := read_tail(spool)) and len(t) == 5 and t, "the tail after SIGKILL")
    assert tail[-1] == "step 4 | loss 4"
    assert [json.loads(line)["ev"] for line in spool.read_text().splitlines()][-1] == "metrics"  # no end event


SIGNALS = r"""
import signal, sys, time
def on_term(*_):
    time.sleep(0.2)  # the tee got the SIGTERM too
    for i in range(100):
        print("saving checkpoint", i, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
try:
    print("ready", flush=True)
    time.sleep(30)  # a failure costs its sleep: not two minutes
except KeyboardInterrupt:
    time.sleep(0.2)
    print("interrupted, cleaning up", flush=True)
    print("ready", flush=True)
    time.sleep(30)  # a failure costs its sleep: not two minutes
"""


def _as_in_a_terminal() -> None:
    """Ctrl-C, Ctrl-\\ and a hang-up at their defaults, as for a command typed in a terminal: a test suite started in
    the background (``make test &``, nohup) has them ignored, and an ignored SIGINT is inherited (measured: SigIgn
    0x81001007 in /proc, the script never saw the Ctrl-C and slept out its time)."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def test_ctrl_c_and_sigterm_to_the_whole_group_leave_the_output_working(ws):
    proc = start(ws, "run_s.py", SIGNALS, start_new_session=True, preexec_fn=_as_in_a_terminal)
    assert proc.stdout.readline() == b"ready\n"
    status = Path(f"/proc/{proc.pid}/status")
    poll(lambda: "State:\tS" in status.read_text(), "the script asleep after its first line", timeout=10)
    masks = [x for x in status.read_text().splitlines() if x.startswith(("State", "Sig", "ShdPnd"))]
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the tee is in the group as well
    line = proc.stdout.readline()
    if line != b"interrupted, cleaning up\n":  # say why, with the signal masks it had when SIGINT was sent
        proc.kill()
        why = f"exit {proc.wait(timeout=60)}; stderr: {proc.stderr.read()!r}; the script's signals: {masks}"
        raise AssertionError(f"{line!r} after SIGINT; {why}")
    assert proc.stdout.readline() == b"ready\n"
    os.killpg(proc.pid, signal.SIGTERM)  # as the watchdog at the budget
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == "".join(f"saving checkpoint {i}\n" for i in range(100)).encode()


def test_a_closed_reader_never_breaks_the_script(ws):
    body = "for i in range(20000):\n    print('line', i, flush=i % 100 == 0)\nopen('done', 'w').close()\n"
    proc = start(ws, "run_e.py", body)
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # `| head -1`: the tee keeps draining, the script never sees EPIPE
    assert proc.wait(timeout=60) == 0
    assert (ws / "done").exists() and b"Error" not in proc.stderr.read()
    tail = poll(lambda: (t := read_tail(spool_of(ws, "run_e.py"))) and t[-1] == "line 19999" and t, "the tail")
    assert len(tail) == 200


def test_trace_stdout_0_turns_the_tee_off(ws):
    body = "import os\nprint('traced:', os.environ.get('BENCH_STDOUT_TRACED'))\nprint('step 1 | loss 2.0')\n"
    proc = start(ws, "run_0.py", body, env={"BENCH_TRACE_STDOUT": "0"})
    out, _ = proc.communicate(timeout=60)
    assert out == b"traced: None\nstep 1 | loss 2.0\n"
    spool = spool_of(ws, "run_0.py")
    assert [json.loads(line)["ev"] for line in spool.read_text().splitlines()] == ["start", "end"]
    assert read_tail(spool) is None


def test_100k_lines_printed_fast_all_arrive(ws):
    body = "for i in range(100_000):\n    print(f'step {i} | loss {i}' if i % 1000 == 0 else f'line {i}')\n"
    proc = start(ws, "run_big.py", body)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = out.decode().splitlines()
    assert len(lines) == 100_000 and lines[-1] == "line 99999" and lines[5000] == "step 5000 | loss 5000"
    spool = spool_of(ws, "run_big.py")
    got = poll(lambda: len(m := stdout_metrics(spool)) == 100 and m, "100 metrics")
    assert [s for s, _ in got] == list(range(0, 100_000, 1000))
    poll(lambda: (t := read_tail(spool)) and len(t) == 200 and t[-1] == "line 99999", "the tail")


NESTED_SWEEP = """
import subprocess, sys
print("sweep step 0 | best 9.5", flush=True)
for lr in ("0.1", "0.2"):
    subprocess.run([sys.executable, "run_train.py", lr], check=True)
print("sweep step 1 | best 1.5", flush=True)
"""
NESTED_TRAIN = """
import sys
for i in range(3):
    print(f"step {i} | loss {float(sys.argv[1]) * (i + 1):.2f}", flush=True)
"""


def test_a_traced_script_run_by_another_keeps_its_metrics_to_itself(ws):
    (ws / "run_train.py").write_text(NESTED_TRAIN)
    proc = start(ws, "run_sweep.py", NESTED_SWEEP)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.decode().splitlines()[-1] == "sweep step 1 | best 1.5" and len(out.splitlines()) == 8
    sweep = spool_of(ws, "run_sweep.py")
    poll(lambda: len(stdout_metrics(sweep)) == 2, "the sweep's own metrics")
    assert stdout_metrics(sweep) == [(0, {"best": 9.5}), (1, {"best": 1.5})]
    trains = [f for f in (ws / ".bench" / "spool").glob("*.jsonl") if f != sweep]
    assert len(trains) == 2
    losses = sorted(m["loss"] for f in trains for _, m in stdout_metrics(f))
    assert losses == [0.1, 0.2, 0.2, 0.3, 0.4, 0.6]
    tail = read_tail(sweep)
    assert tail[0] == "sweep step 0 | best 9.5" and tail[-1] == "sweep step 1 | best 1.5" and len(tail) == 8


def test_a_script_that_points_its_stdout_elsewhere_keeps_it_so(ws):
    body = "import os\nf = open('own.log', 'w')\nos.dup2(f.fileno(), 1)\nprint('to my log')\n"
    proc = start(ws, "run_l.py", body)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == b"" and (ws / "own.log").read_text() == "to my log\n"


TTY = """
import os, sys, time
print("line buffered:", sys.stdout.line_buffering)  # no flush: a terminal's line buffering must pass it on
while not os.path.exists("go"):
    time.sleep(0.01)
print("step 1 | loss 0.5")
"""


def test_a_terminal_keeps_line_buffering(ws):
    import pty
    import select

    master, slave = pty.openpty()
    proc = start(ws, "run_tty.py", TTY, stdout=slave, stderr=slave, env={"PYTHONUNBUFFERED": None})
    os.close(slave)
    got = b""

    def read_some() -> bool:
        nonlocal got
        if select.select([master], [], [], 0.05)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's last writer has gone
                chunk = b""
            got += chunk
            return not chunk
        return False

    poll(lambda: read_some() or b"line buffered: True\r\n" in got, "the first line before the script exits")
    (ws / "go").touch()
    poll(read_some, "EOF on the terminal")
    os.close(master)
    assert proc.wait(timeout=60) == 0
    assert got == b"line buffered: True\r\nstep 1 | loss 0.5\r\n"
    assert stdout_metrics(spool_of(ws, "run_tty.py")) == [(1, {"loss": 0.5})]
