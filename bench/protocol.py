"""The paper's protocol facts of a run, and how a run deviates from them.

The paper's results are comparable because every run had the same budget, hardware and rules (§3.4,
Appendix B: one NVIDIA A100 80 GB, the task's own wall-clock budget, isolation). A run made
otherwise is still useful (a CPU smoke test, a shorter pilot, a partial dataset) but must never sit
unmarked beside the published rows. This module names each deviation once; the record step writes
them as tags (:mod:`bench.tracking.schema`) and the reports mark and, for ``--published``
comparisons, leave out such runs.

The hardware is described, and the evaluation device chosen (:func:`default_device`), without
importing torch (``nvidia-smi`` for a GPU, ``/proc/cpuinfo`` for a CPU), so that the harness does
not pay a torch import to say what it runs on.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PAPER_HARDWARE = "NVIDIA A100 80GB"  # Appendix B: one A100 SXM4 80 GB on a DGX A100 node
# the deviations a run can have, in the order the reports list them
BUDGET, HARDWARE, SANDBOX, PARTIAL = "budget", "hardware", "sandbox", "partial-data"
CUT_SHORT = "cut-short"  # the harness, not the agent or the budget, ended the agent's time (a signal, its death)
KINDS = (BUDGET, HARDWARE, SANDBOX, PARTIAL, CUT_SHORT)

# The in-sandbox protocol: the variables the harness gives the agent's processes
# (bench/pipeline/launch.py) and those the tracer hook sets for the scripts it traces. They are the
# run's wiring, not user settings (those are in bench/settings.py). The hook (bench/tracking/hook/,
# stdlib only, inside the sandbox) spells them itself; tests/bench/test_protocol.py checks that its
# names are these.
RUN_TOKEN_VAR = "BENCH_RUN_TOKEN"  # marks every process of a run (bench.processes finds and ends them by it)
WORKSPACE_VAR = "BENCH_WORKSPACE"  # the agent's workspace
SPOOL_DIR_VAR = "BENCH_SPOOL_DIR"  # where traced scripts append their events (bench.tracking.relay reads them)
BUDGET_VAR = "BENCH_BUDGET_S"  # the agent's budget, seconds
STARTED_AT_VAR = "BENCH_STARTED_AT"  # time.time() at the launch
PROMPT_VAR = "BENCH_PROMPT"  # the task prompt, for the command agent's own command
TRACE_STDOUT_VAR = "BENCH_TRACE_STDOUT"  # "0": the tracer leaves stdout alone
# the run's recorded seed (RunSpec.seed): a seeded agent's repeat (baseline, optuna; command with
# --seed) trains with it; the tasks' train.py read it through task_helpers.run_seed, so repeats
# measure the task's run-to-run noise
SEED_VAR = "BENCH_SEED"
# set by the tracer hook for the script it traces and its children, never passed on by the harness:
SPOOL_FILE_VAR = "BENCH_SPOOL_FILE"  # this script's spool file
STDOUT_TRACED_VAR = "BENCH_STDOUT_TRACED"  # "1": an enclosing script's tee reads this one's output
TEE_PIPES_VAR, TEE_CLAIMS_VAR = "BENCH_TEE_PIPES", "BENCH_TEE_CLAIMS"  # the enclosing tee's pipes and claims file
TEE_FDS_VAR, TEE_HOOK_VAR = "BENCH_TEE_FDS", "BENCH_TEE_HOOK"  # the tee process's fds and the hook's folder
TEE_UPSTREAM_VAR, TEE_UPSTREAM_FDS_VAR = "BENCH_TEE_UPSTREAM", "BENCH_TEE_UPSTREAM_FDS"
TRACER_ONLY = (SPOOL_FILE_VAR, STDOUT_TRACED_VAR, TEE_PIPES_VAR, TEE_CLAIMS_VAR)  # an adapter may not set these
IN_SANDBOX = (
    RUN_TOKEN_VAR,
    WORKSPACE_VAR,
    SPOOL_DIR_VAR,
    BUDGET_VAR,
    STARTED_AT_VAR,
    PROMPT_VAR,
    TRACE_STDOUT_VAR,
    SEED_VAR,
    *TRACER_ONLY,
    TEE_FDS_VAR,
    TEE_HOOK_VAR,
    TEE_UPSTREAM_VAR,
    TEE_UPSTREAM_FDS_VAR,
)


def from_harness(name: str) -> str:
    """What the harness (or the tracer) passed this process under an :data:`IN_SANDBOX` name.

    "" if nothing. For code that runs as the agent, such as the optuna baseline's driver.
    """
    if name not in IN_SANDBOX:
        raise KeyError(f"{name} is not an in-sandbox protocol variable (user settings: bench.settings)")
    return os.environ.get(name, "")


@dataclass(frozen=True)
class Deviation:
    """One way a run left the paper's protocol.

    ``kind`` (one of :data:`KINDS`) and a sentence saying how.
    """

    kind: str
    note: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.note}"


def is_paper_gpu(name: str) -> bool:
    """True for the paper's GPU class (an A100 with 80 GB), however the vendor string spells it."""
    n = name.upper().replace(" ", "").replace("-", "")
    return "A100" in n and "80G" in n


def deviations(
    *,
    budget_s: float,
    task_budget_s: float,
    hardware: str,
    sandboxed: bool,
    partial_data: bool,
    cut_short_at_s: float | None = None,
) -> list[Deviation]:
    """How a run deviates from the protocol; empty for a run the paper would have counted.

    ``cut_short_at_s``: when the harness was interrupted (a signal) or died (and
    ``bench run --resume`` finished the run), the seconds into the run at which that happened.
    Before the budget's end the agent may not have had its whole budget: the run is then a
    measurement of the infrastructure as much as of the agent, and is marked.
    """
    out = []
    if abs(budget_s - task_budget_s) > 0.5:
        out.append(Deviation(BUDGET, f"{budget_s / 60:g} min instead of the task's {task_budget_s / 60:g} min"))
    if not is_paper_gpu(hardware):
        out.append(Deviation(HARDWARE, f"{hardware or 'unknown'} instead of one {PAPER_HARDWARE}"))
    if not sandboxed:
        out.append(Deviation(SANDBOX, "the agent ran without the sandbox (--unsandboxed)"))
    if partial_data:
        out.append(Deviation(PARTIAL, "the task ran on an incomplete dataset"))
    if cut_short_at_s is not None and cut_short_at_s < budget_s - 0.5:
        out.append(
            Deviation(
                CUT_SHORT,
                f"the harness was stopped {cut_short_at_s / 60:.1f} min into the {budget_s / 60:g} min budget "
                "(a signal, or it died and the run was resumed): the agent may not have had its whole budget",
            )
        )
    return out


def describe_hardware(device: str) -> str:
    """What the evaluation device is, in words.

    ``NVIDIA A100-SXM4-80GB`` or ``cpu (AMD EPYC 7742, 16 cores)``.

    For ``cuda`` it is the first GPU the run may see (``CUDA_VISIBLE_DEVICES`` honoured), read from
    ``nvidia-smi``; when that is missing or fails the answer is ``cuda (unknown GPU)``.
    """
    if device.startswith("cuda"):
        return _gpu_name() or "cuda (unknown GPU)"
    return f"cpu ({_cpu_model()}, {os.cpu_count() or 1} cores)"


def _gpu_name() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    cmd = [smi, "--query-gpu=name,memory.total", "--format=csv,noheader"]
    if visible:
        cmd += ["-i", visible]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()[0] if out.strip() else ""
    name, _, memory = first.partition(",")
    if not name:
        return None
    mib = "".join(c for c in memory if c.isdigit())
    size = f" {round(int(mib) / 1024)}GB" if mib and "GB" not in name.upper() else ""
    return f"{name.strip()}{size}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def default_device() -> str:
    """``cuda`` when this machine has a GPU that torch can use, else ``cpu``.

    What ``torch.cuda.is_available()`` says, read without importing torch (2.7 s of a `bench run`
    that takes seconds, issue #16).

    The answer is ``cuda`` when the installed torch is a CUDA (or ROCm) build (its
    ``torch/version.py``), the run may see a device (``CUDA_VISIBLE_DEVICES`` is not empty or
    ``-1``) and the driver shows one (``/proc/driver/nvidia/gpus/*``, else ``nvidia-smi -L``;
    ``/dev/kfd`` for ROCm). ``--device`` overrides it.
    """
    import importlib.util

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return "cpu"
    try:
        spec = importlib.util.find_spec("torch")  # finds the package without importing it
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "cpu"
    try:
        build = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return "cpu"
    built_for = {
        name: value
        for line in build.splitlines()
        for name in ("cuda", "hip")
        if line.startswith((f"{name} =", f"{name}:")) and (value := line.partition("=")[2].strip()) != "None"
    }
    if "hip" in built_for:
        return "cuda" if Path("/dev/kfd").exists() else "cpu"
    if "cuda" not in built_for:
        return "cpu"
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return "cuda"
    smi = shutil.which("nvidia-smi")
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout if smi else ""
    except (OSError, subprocess.SubprocessError):
        listed = ""
    return "cuda" if "GPU" in listed else "cpu"
