"""System metrics of traced scripts, sampled by the harness (the script pays nothing).

CPU and memory of each script process (with its children, e.g. DataLoader workers) come
from psutil; GPU memory and utilisation from NVML when ``nvidia-ml-py`` is installed and a
GPU is present. Logged on the script's run as ``system/*`` metrics at a low rate.

:class:`SystemMetrics` samples in a thread of its own, not in the relay's loop: a script whose spool takes minutes
to relay (a flood) or that the store keeps refusing must not stop the samples of every script of the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psutil

INTERVAL_S = 10.0  # one sample per running script every ~10 s


class _Gpu:
    """NVML, initialised once; absent (no package, no driver, no GPU) means no GPU metrics."""

    def __init__(self):
        self.nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.nvml = pynvml
        except Exception:
            self.handles = []

    def usage(self, pids: set[int]) -> dict[str, float]:
        if self.nvml is None:
            return {}
        memory, util = 0.0, 0.0
        for h in self.handles:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
                mine = [p for p in procs if p.pid in pids]
                if mine:
                    memory += sum((p.usedGpuMemory or 0) for p in mine) / 2**20
                    util = max(util, float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu))
            except Exception:
                continue
        return {"system/gpu_memory_mb": memory, "system/gpu_utilization_percent": util} if memory else {}


class Sampler:
    """Keeps psutil handles between samples so that cpu_percent measures the interval since the last one."""

    def __init__(self):
        self._procs: dict[int, psutil.Process] = {}
        self._gpu: _Gpu | None = None

    def sample(self, pid: int) -> dict[str, float]:
        """CPU % (100 = one core) and resident memory of the process and its descendants, plus GPU use."""
        try:
            root = self._procs.get(pid) or self._procs.setdefault(pid, psutil.Process(pid))
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            self._procs.pop(pid, None)
            return {}
        cpu, rss, pids = 0.0, 0, set()
        for p in tree:
            try:
                handle = self._procs.setdefault(p.pid, p)
                cpu += handle.cpu_percent(interval=None)
                rss += handle.memory_info().rss
                pids.add(p.pid)
            except psutil.Error:
                self._procs.pop(p.pid, None)
        if self._gpu is None:
            self._gpu = _Gpu()
        return {"system/cpu_percent": cpu, "system/memory_mb": rss / 2**20, **self._gpu.usage(pids)}


# (run id, pid, start time, training step) of each traced script still running: what the relay publishes
Target = tuple[str, int, float, int]


class SystemMetrics:
    """Samples every running traced script every ``interval`` s and logs the values with ``log(run_id, rows)``.

    ``targets`` must answer without waiting for the relay (it reads a snapshot the relay replaces whole); a failed
    sample or log is counted (``failures``) and the thread goes on: system metrics are best effort, never a stop.
    """

    def __init__(self, targets: Callable[[], list[Target]], log: Callable[[str, list], object], interval: float):
        self.targets, self.log, self.interval = targets, log, interval
        self.sampler = Sampler()
        self.samples = self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="bench-sysmetrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample_once()

    def sample_once(self) -> None:
        """One sample of every running script (on its training-step axis; the timestamps give the wall clock)."""
        for run_id, pid, started, step in self.targets():
            try:
                if alive(pid, started):
                    values = self.sampler.sample(pid)
                    if values:
                        self.log(run_id, [(k, v, step, None) for k, v in values.items()])
                        self.samples += 1
            except Exception:  # a store outage, a vanished process: the next sample tries again
                self.failures += 1


def alive(pid: int, started: float) -> bool:
    """True while the traced process still runs (guarding against pid reuse)."""
    try:
        p = psutil.Process(pid)
        return p.create_time() <= started + 1 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, OverflowError):
        return False
