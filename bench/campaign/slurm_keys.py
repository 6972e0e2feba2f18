"""The ``[slurm]`` table of a campaign file (:mod:`bench.campaign.spec`) and the key checks both use."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.durations import parse_duration
from bench.preflight import InputError


@dataclass(frozen=True)
class SlurmSettings:
    """The ``[slurm]`` table: how each run becomes a job of a Slurm job array (:mod:`bench.campaign.slurm`).

    A job's time limit is the run's budget + grace + ``eval_margin`` (the collect, evaluate, audit and record after
    the agent's time), so that a job is never ended by the scheduler while its run is within its budget. Left out,
    ``eval_margin`` follows the campaign's evaluation budget (:func:`bench.campaign.limit_keys.eval_margin_s`);
    given, it must cover it."""

    cluster: str = "slurm"  # submitit's AutoExecutor cluster: slurm, or local (submitit's own backend, no Slurm)
    partition: str | None = None
    gpus_per_task: int = 1  # 0 on a CPU-only cluster
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    array_parallelism: int = 64  # at most this many runs at once
    eval_margin_s: float | None = None  # None: the evaluation budget + the scorer's grace + AFTER_EVAL_S
    signal_delay_s: int = 120  # submitit's USR2 before the time limit: time to finish or leave the run resumable
    setup: tuple[str, ...] = ()  # shell lines before each job (module load, source a venv, export ...)
    additional: dict[str, object] = field(default_factory=dict)  # other sbatch options (account, qos, constraint)
    poll_s: float = 30.0  # how often the campaign looks at its jobs


SLURM_KEYS = {
    "cluster", "partition", "gpus_per_task", "cpus_per_task", "mem_gb", "array_parallelism", "eval_margin",
    "signal_delay_s", "setup", "additional", "poll_s",
}  # fmt: skip


def unknown_keys(table: dict, known: set[str], where: str, prefix: str) -> None:
    """One clear line for the first key of ``table`` that is not in ``known``."""
    extra = sorted(set(table) - known)
    if extra:
        raise InputError(f"{where}: {prefix}{extra[0]}: unknown key; known: {', '.join(sorted(known))}")


def integer(value: object, key: str, bad) -> int:
    """``value`` as a whole number (a TOML bool is not one), else ``bad(key, why)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(key, f"must be a whole number (got {value!r})")
    return value


def slurm_settings(value: object, where: str) -> SlurmSettings:
    """The campaign file's ``[slurm]`` table, each key checked (one line naming the key and what to write)."""
    if not isinstance(value, dict):
        raise InputError(f"{where}: slurm: must be a table: [slurm]")
    unknown_keys(value, SLURM_KEYS, where, "slurm.")

    def bad(key: str, why: str) -> InputError:
        return InputError(f"{where}: slurm.{key}: {why}")

    kw: dict[str, object] = {}
    if "cluster" in value:
        if value["cluster"] not in ("slurm", "local"):
            raise bad("cluster", f"must be slurm or local (submitit's local backend) (got {value['cluster']!r})")
        kw["cluster"] = value["cluster"]
    if "partition" in value:
        if not isinstance(value["partition"], str):
            raise bad("partition", "must be a string")
        kw["partition"] = value["partition"]
    for key, least in (("gpus_per_task", 0), ("cpus_per_task", 1), ("array_parallelism", 1), ("signal_delay_s", 0)):
        if key in value:
            n = integer(value[key], key, bad)
            if n < least:
                raise bad(key, f"must be at least {least} (got {n})")
            kw[key] = n
    for key in ("mem_gb", "poll_s"):
        if key in value:
            v = value[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise bad(key, f"must be a positive number (got {v!r})")
            kw[key] = float(v)
    if "eval_margin" in value:
        try:
            kw["eval_margin_s"] = parse_duration(str(value["eval_margin"]))
        except Exception as e:
            raise bad("eval_margin", str(e)) from None
    if "setup" in value:
        if not isinstance(value["setup"], list) or not all(isinstance(s, str) for s in value["setup"]):
            raise bad("setup", 'must be a list of shell lines, e.g. setup = ["module load cuda"]')
        kw["setup"] = tuple(value["setup"])
    if "additional" in value:
        if not isinstance(value["additional"], dict):
            raise bad("additional", 'must be a table of sbatch options, e.g. additional = { account = "lab" }')
        kw["additional"] = dict(value["additional"])
    return SlurmSettings(**kw)
