"""System metrics of traced scripts and of the agent's process tree, sampled by the harness.

They are sampled on the host.

The script pays nothing: the harness reads each script's CPU and memory (with its children, e.g.
DataLoader workers) with psutil and its GPU memory and utilisation with NVML (``nvidia-ml-py``, when
installed and a GPU is there), by the script's *host* pid (:mod:`bench.tracking.hostpids`: the
spool's pid is the sandbox's), and logs them on the script's run as ``system/*`` series. The agent
run gets the same series for the whole tree and, at the end, the tree's GPU memory peak and mean GPU
utilisation (how hard the agent used the card); without NVML those are absent, not 0, and the run
says why (:func:`note`).

:class:`SystemMetrics` samples in a thread of its own, not in the relay's loop: a script whose spool
takes minutes to relay (a flood) or that the store keeps refusing must not stop the samples of every
script of the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import psutil

from bench.processes import find_tree, running
from bench.tracking import hostpids, schema

INTERVAL_S = 10.0  # one sample per running script every ~10 s, and of the agent's tree
TICK_S = 1.0  # how often the thread looks for new scripts (the first sample of a script comes one tick after)
EARLY_S, EARLY_INTERVAL_S = 30.0, 2.0  # a script's first 30 s are sampled every 2 s: a short script has a series too
MAX_WATCHED = 256  # processes of a run watched at once (a fork bomb of scripts costs the harness no more)
MAX_BUFFERED = 32  # samples of a process kept until the relay names its script run (its first ~minute)
NOT_AVAILABLE = 2**63  # NVML's "not available" memory (an unsigned -1) and above: counted as unknown, i.e. 0

# (run id, pid in the spool, start time in the spool, training step, script name) of each script
# still running
Target = tuple[str, int, float, int, str]


class Gpu:
    """The GPU reader: NVML, initialised once.

    Absent (no package, no driver, no GPU) means no GPU metrics, and ``why`` says why.

    ``nvml``: a module with pynvml's functions (the tests inject a fake one); None imports
    ``pynvml``.
    """

    def __init__(self, nvml: ModuleType | object | None = None):
        self.nvml, self.handles, self.why = None, [], ""
        try:
            if nvml is None:
                import pynvml as nvml
            nvml.nvmlInit()
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            self.nvml = nvml
        except ImportError:
            self.why = "nvidia-ml-py is not installed"
        except Exception as e:  # NVMLError: no driver library, no GPU, no permission
            self.why = f"NVML did not start: {e}"[:200]

    def devices(self) -> list[tuple[list[tuple[int, float]], float]]:
        """Per GPU, its compute processes' memory and its utilisation.

        ``[(host pid, MB)]`` of its compute processes (NVML reports host pids) and its utilisation
        %.
        """
        out = []
        for handle in self.handles if self.nvml is not None else ():
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                used = [(int(p.pid), _mb(getattr(p, "usedGpuMemory", None))) for p in procs]
                out.append((used, float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)))
            except Exception:  # one GPU that does not answer (lost, reset) costs its own values only
                continue
        return out


def _mb(used: object) -> float:
    return used / 2**20 if isinstance(used, int) and 0 <= used < NOT_AVAILABLE else 0.0


def gpu_usage(devices: list[tuple[list[tuple[int, float]], float]], pids: set[int]) -> dict[str, float]:
    """GPU memory of ``pids`` summed over the GPUs, and the utilisation of the busiest one they use.

    NVML's utilisation is per GPU: a GPU none of them uses counts 0, whatever else runs there.
    """
    memory, util = 0.0, 0.0
    for used, percent in devices:
        mine = [mb for pid, mb in used if pid in pids]
        if mine:
            memory += sum(mine)
            util = max(util, percent)
    return {schema.SYSTEM_GPU_MEMORY: memory, schema.SYSTEM_GPU_UTILIZATION: util}


class CpuMeter:
    """CPU % of a group of processes since its last sample (100 = one core), from their CPU times.

    psutil's ``cpu_percent(interval=None)`` answers 0.0 the first time it sees a process, which a
    short script never passes.
    """

    def __init__(self):
        self._last: dict[tuple[int, float], float] = {}  # (pid, creation time) -> CPU seconds at the last sample
        self._at = time.time()

    def percent(self, procs: list[psutil.Process]) -> float:
        """CPU % since the last call.

        A process first seen now counts from its start or the last call, the later.
        """
        now, used, total = time.time(), {}, 0.0
        cores = psutil.cpu_count() or 1
        for proc in procs:
            try:
                times = proc.cpu_times()
                key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            used[key] = times.user + times.system
            since = max(self._at, key[1])
            spent = used[key] - self._last.get(key, 0.0)
            total += min(max(spent, 0.0) / max(now - since, TICK_S / 2) * 100, 100.0 * cores)
        self._last, self._at = used, now
        return total


def family(proc: psutil.Process) -> list[psutil.Process]:
    """The process and its descendants (its DataLoader workers, its output tee).

    [] once it has ended.
    """
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def _resident_mb(procs: list[psutil.Process]) -> float:
    rss = 0
    for proc in procs:
        try:
            rss += proc.memory_info().rss
        except psutil.Error:
            continue
    return rss / 2**20


@dataclass
class _Watched:
    """A process of the run that runs a ``.py`` file, sampled from the moment the harness sees it.

    Its samples wait in ``buffered`` until the relay names its script's run and the process is bound
    to it (:func:`.hostpids.bind`).
    """

    proc: psutil.Process
    since: float
    due: float
    cpu: CpuMeter = field(default_factory=CpuMeter)
    run_id: str | None = None
    buffered: list[tuple[float, dict[str, float]]] = field(default_factory=list)


@dataclass
class _Tree:
    """The agent's whole tree: the sandbox's root on the host and the run token."""

    root: int
    token: str | None
    run_id: Callable[[], str | None]
    since: float
    due: float
    cpu: CpuMeter = field(default_factory=CpuMeter)


class SystemMetrics:
    """Samples every running traced script and logs the values with ``log(run_id, rows)``.

    Once :meth:`follow` names it, the agent's tree is sampled too.

    Every process of the run that runs a ``.py`` file is sampled from the first tick that sees it,
    before the relay has read its spool (the agent run, and with it the script runs, may open
    seconds after the first scripts start); its samples are kept (``MAX_BUFFERED``) and logged at
    step 0 once the relay's ``targets`` name its script and it is bound. ``targets`` must answer
    without waiting for the relay (it reads a snapshot the relay replaces whole); a failed sample or
    log is counted (``failures``) and the thread goes on: system metrics are best effort, never a
    stop. Without :meth:`follow` nothing is sampled: the spool's pids mean nothing on the host.
    ``totals`` is what the relay keeps in ``relay.json`` for the agent run's figures
    (:func:`summary`).
    """

    def __init__(
        self,
        targets: Callable[[], list[Target]],
        log: Callable[[str, list], object],
        interval: float = INTERVAL_S,
        *,
        tick: float = TICK_S,
        nvml: object | None = None,
    ):
        self.targets, self.log, self.interval, self.tick = targets, log, interval, tick
        self.samples = self.failures = 0
        self.totals: dict = {"nvml": None, "why": "", "samples": 0, "gpu_samples": 0}
        self.totals |= {"gpu_memory_peak_mb": 0.0, "gpu_utilization_sum": 0.0}
        self._nvml, self._gpu = nvml, None
        self._tree: _Tree | None = None
        self._watched: dict[tuple[int, float], _Watched] = {}  # (host pid, creation time) -> a script process
        self._bound: dict[str, tuple[int, float]] = {}  # run id -> its process; never bound again (pids are reused)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()  # follow() (the runner) and the relay's start (the run opening) race

    def follow(self, root_pid: int, token: str | None, run_id: Callable[[], str | None]) -> None:
        """Sample the processes of the agent whose host root is ``root_pid`` from now on.

        They are its tree and the processes carrying ``token``. The tree's own series go to
        ``run_id()``, the agent run, once it exists.
        """
        now = time.time()
        self._tree = _Tree(root_pid, token, run_id, now, now + self.tick)
        self.start()

    def host_pid(self, run_id: str) -> int | None:
        """The host pid the script of ``run_id`` was bound to (None: not bound, so not sampled)."""
        key = self._bound.get(run_id)
        return key[0] if key is not None else None

    def start(self) -> None:
        """Start the sampling thread (once; :meth:`follow` and the relay's start both ask)."""
        with self._starting:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._loop, name="bench-sysmetrics", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """Stop the sampling thread and wait for it (at most 30 s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick):
            self.sample_once()

    @property
    def gpu(self) -> Gpu:
        """The NVML reader, opened on first use (``totals`` says whether NVML answered)."""
        if self._gpu is None:
            self._gpu = Gpu(self._nvml)
            self.totals["nvml"], self.totals["why"] = self._gpu.nvml is not None, self._gpu.why
        return self._gpu

    def sample_once(self, force: bool = False) -> None:
        """Watch for new script processes, bind those the relay names, then sample what is due.

        Each script and the tree are sampled when their time has come (``force``: all now). Scripts
        on their training-step axis, the tree on seconds since launch.
        """
        tree = self._tree
        if tree is None:
            return
        now, devices = time.time(), None
        targets = {run_id: (pid, started, step, script) for run_id, pid, started, step, script in self.targets()}
        try:  # the token's search reads every process's environment: every interval, the tree's walk each tick
            procs = find_tree(tree.root, tree.token) if force or now >= tree.due else family(psutil.Process(tree.root))
        except psutil.Error:
            procs = []
        self._discover(procs, now)
        self._bind(targets)
        for key, watched in list(self._watched.items()):
            try:
                if not running(watched.proc):
                    del self._watched[key]
                    continue
                if now < watched.due and not force:
                    continue
                devices = devices if devices is not None else self.gpu.devices()
                values = self._measure(family(watched.proc), watched.cpu, devices)
                watched.due = now + (EARLY_INTERVAL_S if now - watched.since < EARLY_S else self.interval)
                if values and watched.run_id is None and len(watched.buffered) < MAX_BUFFERED:
                    watched.buffered.append((now, values))
                elif values and watched.run_id in targets:  # (a run the relay closed takes no more)
                    step = targets[watched.run_id][2]
                    self.log(watched.run_id, [(k, v, step, None) for k, v in values.items()])
                    self.samples += 1
            except Exception:  # a store outage, a vanished process: the next sample tries again
                self.failures += 1
        self._sample_tree(now, procs, devices, force)

    def _discover(self, procs: list[psutil.Process], now: float) -> None:
        for proc in procs:
            try:
                key = (proc.pid, proc.create_time())
                if key in self._watched or len(self._watched) >= MAX_WATCHED:
                    continue
                if any(arg.endswith(".py") for arg in proc.cmdline()[1:]):
                    watched = self._watched[key] = _Watched(proc, since=now, due=now + self.tick)
                    watched.cpu.percent(family(proc))  # the CPU times its first sample counts from
            except psutil.Error:
                continue

    def _bind(self, targets: dict[str, tuple[int, float, int, str]]) -> None:
        """Bind each script the relay names to its process, once.

        Log what was sampled before, at step 0.
        """
        for run_id, (pid, started, _, script) in targets.items():
            if run_id in self._bound:
                continue
            free = [w.proc for w in self._watched.values() if w.run_id is None]
            proc = hostpids.bind(free, pid, started, script)
            if proc is None:
                continue
            key = (proc.pid, proc.create_time())
            watched, self._bound[run_id] = self._watched[key], key
            watched.run_id = run_id
            try:
                rows = [(k, v, 0, at) for at, values in watched.buffered for k, v in values.items()]
                if rows:
                    self.log(run_id, rows)
                    self.samples += len(watched.buffered)
            except Exception:
                self.failures += 1
            watched.buffered.clear()

    def _measure(self, procs: list[psutil.Process], cpu: CpuMeter, devices: list) -> dict[str, float]:
        if not procs:
            return {}
        values = {schema.SYSTEM_CPU: cpu.percent(procs), schema.SYSTEM_MEMORY: _resident_mb(procs)}
        if self.gpu.nvml is not None:
            values |= gpu_usage(devices, {p.pid for p in procs})
        return values

    def _sample_tree(self, now: float, procs: list | None, devices: list | None, force: bool) -> None:
        tree = self._tree
        if tree is None or (now < tree.due and not force):
            return
        tree.due = now + self.interval
        try:
            procs = procs if procs is not None else find_tree(tree.root, tree.token)
            values = self._measure(procs, tree.cpu, devices if devices is not None else self.gpu.devices())
            if not values:
                return
            self.totals["samples"] += 1
            if self.gpu.nvml is not None:
                self.totals["gpu_samples"] += 1
                peak = max(self.totals["gpu_memory_peak_mb"], values[schema.SYSTEM_GPU_MEMORY])
                self.totals["gpu_memory_peak_mb"] = peak
                self.totals["gpu_utilization_sum"] += values[schema.SYSTEM_GPU_UTILIZATION]
            if run_id := tree.run_id():
                self.log(run_id, [(k, v, int(now - tree.since), None) for k, v in values.items()])
        except Exception:
            self.failures += 1


def summary(totals: dict) -> dict:
    """The system part of result.json's ``scripts``.

    Whether GPU metrics were taken (and why not), and the tree's GPU memory peak (MB) and mean GPU
    utilisation (%) over the samples, when they were.
    """
    out = {"samples": totals.get("samples", 0), "nvml": totals.get("nvml"), "why": totals.get("why", "")}
    if totals.get("nvml") and totals.get("gpu_samples"):
        out["gpu_memory_peak_mb"] = totals["gpu_memory_peak_mb"]
        out["gpu_utilization_mean_percent"] = totals["gpu_utilization_sum"] / totals["gpu_samples"]
    return out


def agent_metrics(scripts: dict) -> dict[str, float]:
    """The agent run's GPU figures from result.json's ``scripts`` (none without NVML)."""
    system = scripts.get("system") or {}
    figures = {
        schema.GPU_MEMORY_PEAK_MB: "gpu_memory_peak_mb",
        schema.GPU_UTILIZATION_MEAN: "gpu_utilization_mean_percent",
    }
    return {name: system[key] for name, key in figures.items() if key in system}


def note(scripts: dict) -> str:
    """One line for the agent run (its ``bench.gpu_metrics`` tag and description).

    Where its GPU figures came from, or why it has none; "" when ``scripts`` has no system part.
    """
    system = scripts.get("system")
    if not system:
        return ""
    if system.get("nvml"):
        return "nvml" if "gpu_memory_peak_mb" in system else "no GPU metrics (no sample of the agent's processes)"
    if system.get("nvml") is None:
        return "no GPU metrics (no sample of the agent's processes)"
    return f"no GPU metrics (no NVML): {system.get('why') or 'unavailable'}"
