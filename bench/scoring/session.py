"""One predictor process seen from the trusted side.

Start it (in the sandbox), feed it batches, check what it says.

The predictor's answers are untrusted input: each must be one array frame named ``out`` of a numeric
dtype with the batch's samples along dim 0, within a size bound, and it must come before the
deadline (a thread kills the predictor at the deadline, and the blocked read then fails). The
predictor gets CPU-time and, on a CPU, memory limits (``RLIMIT_CPU``, ``RLIMIT_AS``: an
address-space limit would break CUDA's reservations, so on a GPU only the wall-clock deadline and
the CPU time bound it).
"""

from __future__ import annotations

import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from bench import settings
from bench.errors import BenchError
from bench.scoring import wire

PREDICTOR = Path(__file__).with_name("predictor.py")
# what the predictor's environment keeps of the harness's (it holds no keys, no MLflow or BENCH_
# variables)
PREDICTOR_ENV = ("PATH", "LANG", "LC_ALL", "HOME", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class PredictorError(BenchError, RuntimeError):
    """The predictor failed, timed out or broke the protocol.

    The checkpoint gets no score, with this reason.
    """


class LoadError(PredictorError):
    """The predictor could not build the model or load the checkpoint into it.

    Its hello was an error: the file is unusable, not a cheat, so the harness may score the next
    candidate instead.
    """


def _limits(cpu_s: int, mem_bytes: int | None):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))

    return apply


def _default_mem() -> int:
    import psutil

    return int(psutil.virtual_memory().total * 0.8)


class Session:
    """A running predictor for one checkpoint.

    ``predict(inputs)`` returns its outputs for one batch.

    The process starts at construction and builds the model while the caller does other work (the
    scorer loads the labels meanwhile); the first ``predict`` (or ``ready``) waits for it. A
    ``hold`` session imports Python's and torch's modules at once but runs no agent code before its
    first ``ready``: the scorer's prober, which must not run the agent's model while the scored
    predictor is alive (:mod:`bench.scoring.scorer`).
    """

    def __init__(
        self,
        eval_dir: Path,
        checkpoint: str,
        script: str,
        *,
        device: str,
        timeout_s: float,
        log: Path,
        wrap=None,  # argv -> argv: the sandbox (None: unsandboxed, marked so by the caller)
        max_output_bytes: int = wire.MAX_FRAME,
        hold: bool = False,  # start Python and torch now, run the agent's code only at the first ready()/predict()
    ) -> None:
        argv = [sys.executable, "-I", "-B", str(PREDICTOR), "--checkpoint", checkpoint, "--script", script]
        argv += ["--device", device, *(["--hold"] if hold else [])]
        self._held = hold
        if wrap is not None:
            argv = wrap(argv)
        # a thread count the user set (OMP/MKL_NUM_THREADS, as the agent's scripts get them) holds
        # for the predictor
        env = {k: v for k, v in os.environ.items() if k in PREDICTOR_ENV}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        cpu_s = int(timeout_s * max(1, os.cpu_count() or 1)) + 10
        mem = None if device == "cuda" else (int(settings.PREDICTOR_MEM_GB.get() * 2**30) or _default_mem())
        self._log = open(log, "ab")
        self.max_output_bytes = max_output_bytes
        self.proc = subprocess.Popen(
            argv,
            cwd=eval_dir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            preexec_fn=_limits(cpu_s, mem),
            start_new_session=True,
        )
        self.timeout_s = timeout_s
        # a held session's clock starts when it is let go: it may wait for the whole scored feed
        # first
        self.deadline = math.inf if hold else time.monotonic() + timeout_s
        self.timed_out = False
        self._done = threading.Event()
        threading.Thread(target=self._guard, daemon=True).start()
        self.n_params: int | None = None
        self._ready = False

    def ready(self) -> Session:
        """Wait for the predictor's hello.

        The model is built and loaded (or why it could not be).
        """
        if not self._ready:
            if self._held:  # let it go: build the model (the agent's code runs from here on), its full time ahead
                self._held = False
                self.deadline = time.monotonic() + self.timeout_s
                try:
                    wire.send_json(self.proc.stdin, {"op": "go"})
                except (BrokenPipeError, OSError):
                    pass  # it ended already: the read below says how
            hello = self._receive()
            if "error" in hello:
                raise LoadError(str(hello["error"]))
            if not hello.get("ready"):
                raise PredictorError("the predictor did not say it was ready")
            self.n_params, self._ready = hello.get("n_params"), True
        return self

    def _guard(self) -> None:
        while not self._done.wait(0.2):
            if time.monotonic() > self.deadline:
                self.timed_out = True
                self._kill()
                return

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the predictor and anything it started
        except ProcessLookupError:
            pass

    def _receive(self) -> dict:
        try:
            return wire.receive(self.proc.stdout, self.max_output_bytes)
        except wire.WireError as e:
            self.proc.poll()
            if self.timed_out:
                raise PredictorError("the evaluation exceeded its time limit") from e
            code = self.proc.wait(timeout=10) if self.proc.returncode is None else self.proc.returncode
            raise PredictorError(f"the predictor ended without an answer (exit {code}): {e}") from e

    def predict(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The predictor's outputs for one batch of inputs; PredictorError when it gives none."""
        self.ready()
        n = len(next(iter(inputs.values())))
        try:
            wire.send_arrays(self.proc.stdin, inputs)
        except (BrokenPipeError, OSError) as e:
            raise PredictorError(f"the predictor stopped reading its inputs: {e}") from e
        frame = self._receive()
        if "error" in frame:
            raise PredictorError(str(frame["error"]))
        out = frame.get("out")
        if not isinstance(out, np.ndarray) or out.dtype.kind not in "biuf":
            raise PredictorError("the predictor's answer is not a numeric array named 'out'")
        if out.ndim == 0 or out.shape[0] != n:
            raise PredictorError(f"forward returned {out.shape[0] if out.ndim else 'a scalar'} rows for {n} samples")
        if out.dtype.kind == "f" and not np.isfinite(out).all():
            raise PredictorError("the model produced non-finite outputs")
        return out

    def close(self) -> None:
        """End the predictor and everything it started, at once.

        Nothing it could still do is needed (its answers are in, its log is flushed after each one),
        and a clean interpreter exit costs about 0.6 s with torch.
        """
        self._kill()
        self.proc.wait()
        self._done.set()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._log.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
