"""System metrics of traced scripts, sampled by the harness (the script pays nothing).

CPU and memory of each script process (with its children, e.g. DataLoader workers) come
from psutil; GPU memory and utilisation from NVML when ``nvidia-ml-py`` is installed and a
GPU is present. Logged on the script's run as ``system/*`` metrics at a low rate.
"""

from __future__ import annotations

import psutil


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
