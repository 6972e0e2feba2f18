"""Every benchmark of tests/benchmarks/ at its documented size, its figures written to docs/benchmarks.md (``make
bench``; not a benchmark itself).

    python tests/benchmarks/make_figures.py [--only eval_cost,tracer_cost] [--out docs/benchmarks.md]

Runs each script of :data:`BENCHMARKS` in turn (one at a time: each is a measurement), shows its output as it comes,
and collects its ``FIGURE`` lines (``tests/benchmarks/figures.py``). The file says the machine, the commit, when and
how long, and for every figure the load average at the start and at the end of its measurement. It is rewritten after
each script, so a script that fails (its section says so, and the command exits 1) loses none of the others;
``--only`` measures the scripts named again and keeps the other sections as they were. The README's and the docs'
performance numbers are quoted from this file (``<!--fig:ID-->value``): once it is written, each quote is set to the
file's value (where it still reads as the file had it, or is ``?``: a new quote; the pages it changed are named:
read the sentences around them again), and tests/test_benchmarks.py
checks that every quoted value is the file's.

Needs ``BENCH_DATA_MIRROR`` (eval_cost, sandbox_cost, verify_jobs and label_margins measure the real data),
PostgreSQL's programs and psycopg (report_server_speed), and the git history (prober_order_cost, gateway_latency).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import LINE, load  # noqa: E402

OUT = ROOT / "docs" / "benchmarks.md"
QUOTE = re.compile(r"<!--fig:([\w.-]+)-->")
PLACEHOLDER = "?"  # a new quote's value until make bench fills it in
# script -> its arguments at the documented size (what the figures file says was run), cheapest first; on the shared
# 2-core machine at load 5-14 they took 57 min in all (each section of the file says its own time)
BENCHMARKS: dict[str, list[str]] = {
    "gateway_latency": ["--runs", "100", "--rounds", "2"],
    "tracer_cost": ["--runs", "20", "--steps", "1000", "--repeats", "5"],
    "reader_speed": ["--repeat", "5"],
    "trace_size": [],
    "prober_order_cost": ["--runs", "3"],
    "verify_jobs": ["--runs", "20"],
    "page_cache_channel": ["--rows", "48", "--repeats", "3"],
    "label_margins": ["--real-t6", "--seeds", "3", "--small", "t4,t5,t7"],
    "run_overhead": ["--runs", "3"],
    "sandbox_cost": ["--runs", "10", "--eval-runs", "1"],
    "report_speed": ["--repeat", "2"],
    "report_server_speed": ["--repeat", "2"],
    "eval_cost": ["--runs", "1"],
}
NEEDS_MIRROR = {"eval_cost", "sandbox_cost", "verify_jobs", "label_margins"}
SECTION = re.compile(r"^## `(\w+)`$", re.M)
ROW = re.compile(
    r"^\| `(?P<id>[\w.-]+)` \| (?P<value>[^|]+?) \| (?P<start>[\d.]+) \| (?P<end>[\d.]+) \| (?P<what>.*) \|$", re.M
)
HEAD = """# Benchmark figures

Written by `make bench` (`tests/benchmarks/make_figures.py`), which runs every script of `tests/benchmarks/` at the
size below; edit nothing here by hand. The README's and the other pages' performance numbers are quoted from this
file, and a test checks that they are. Each figure gives the machine's 1-minute load average when its measurement
started and when it ended: on a loaded machine the figures move by more than most changes do, so compare figures
measured at similar loads. Ratios are measured side by side in one run, the two sides alternating.

| the run | |
|---|---|
"""


def machine() -> list[tuple[str, str]]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        mem = next(int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal")) / 2**20
        memory = f"{mem:.0f} GiB"
    except (OSError, StopIteration):
        memory = "?"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    import torch

    return [
        ("machine", f"{cpu}, {os.cpu_count()} CPUs, {memory} of memory, no GPU used"),
        ("software", f"Python {platform.python_version()}, torch {torch.__version__}, {platform.system()}"),
        ("commit", commit.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")),
    ]


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def duration(s: float) -> str:
    return f"{int(s // 60)} min {s % 60:.0f} s" if s >= 60 else f"{s:.0f} s"


def run_one(name: str) -> str:
    """Run one benchmark, its output shown as it comes; its section of the file."""
    argv = [sys.executable, f"tests/benchmarks/{name}.py", *BENCHMARKS[name]]
    shown = " ".join(["python", *argv[1:]])
    print(f"\n=== {shown}", flush=True)
    t0, load0, figures, tail = time.time(), load(), [], []
    with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
            tail = [*tail[-19:], line.rstrip()]
            if m := LINE.match(line.rstrip("\n")):
                figures.append(m)
    wall, load1 = time.time() - t0, load()
    head = f"## `{name}`\n\n`{shown}`: {when(t0)}, {duration(wall)}, load {load0:.2f} -> {load1:.2f}\n\n"
    if proc.returncode != 0 or not figures:
        why = f"exit {proc.returncode}" if proc.returncode else "no FIGURE line"
        return head + f"**Failed** ({why}); its last lines:\n\n```text\n" + "\n".join(tail) + "\n```\n"
    rows = "| figure | value | load at start | load at end | what |\n|---|---|---|---|---|\n"
    for m in figures:
        rows += f"| `{m['id']}` | {m['value']} | {m['start']} | {m['end']} | {m['what'] or ''} |\n"
    return head + rows


def sections(text: str) -> dict[str, str]:
    """The file's sections by script name."""
    starts = [(m.group(1), m.start()) for m in SECTION.finditer(text)]
    return {
        name: text[a:b].rstrip() + "\n"
        for (name, a), (_, b) in zip(starts, [*starts[1:], ("", len(text))], strict=True)
    }


def figures(text: str) -> dict[str, str]:
    """Figure id -> value as quoted, from the file's text."""
    return {m["id"]: m["value"] for m in ROW.finditer(text)}


def write(out: Path, mine: dict[str, str], keep: bool, started: float, load0: float) -> None:
    """The file: this command's sections, and with ``keep`` (``--only``) the others as the file holds them now (read
    again at each write, under a lock, so that another ``--only`` command writing the file meanwhile loses nothing)."""
    rows = machine() + [("written", f"{when(time.time())}; this command {duration(time.time() - started)}, load "
                                    f"{load0:.2f} -> {load():.2f}")]  # fmt: skip
    folder = os.open(out.parent, os.O_RDONLY)  # the lock: the file's folder (no lock file left behind)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        done = {**(sections(out.read_text()) if keep and out.is_file() else {}), **mine}
        body = HEAD + "".join(f"| {k} | {v} |\n" for k, v in rows)
        body += "\n" + "\n".join(done[name] for name in BENCHMARKS if name in done)
        tmp = out.with_name(out.name + ".new")
        tmp.write_text(body)
        tmp.replace(out)  # a reader never sees half a file
    finally:
        os.close(folder)  # and the lock with it


def requote(pages: list[Path], values: dict[str, str], before: dict[str, str]) -> list[str]:
    """Set every ``<!--fig:ID-->value`` quote of ``pages`` to the figure's value in ``values``; the pages changed.

    A quote is replaced where it still reads as the file had it (``before``) or is the placeholder ``?`` (a new quote);
    any other quote (an id the file lacks, a value edited by hand) is left as it is, and the test names it."""
    changed = []
    for page in pages:
        text = page.read_text()
        out, pos = [], 0
        for m in QUOTE.finditer(text):
            fid = m.group(1)
            old = next((v for v in (before.get(fid), PLACEHOLDER) if v and text.startswith(v, m.end())), None)
            if fid in values and old is not None:
                out += [text[pos : m.end()], values[fid]]
                pos = m.end() + len(old)
        new = "".join(out) + text[pos:]
        if new != text:
            page.write_text(new)
            changed.append(page.relative_to(ROOT).as_posix())
    return changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated scripts to measure again (the others' sections are kept)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"--only: no benchmark {', '.join(unknown)}; the benchmarks: {', '.join(BENCHMARKS)}")
    if NEEDS_MIRROR & set(names) and not os.environ.get("BENCH_DATA_MIRROR"):
        raise SystemExit(
            f"{', '.join(sorted(NEEDS_MIRROR & set(names)))} measure the real data: set BENCH_DATA_MIRROR to the "
            "offline data mirror (docs/tasks-and-data.md), or leave them out with --only"
        )
    done: dict[str, str] = {}
    before = figures(args.out.read_text()) if args.out.is_file() else {}
    started, load0, failed = time.time(), load(), []
    for name in names:
        done[name] = run_one(name)
        failed += [name] if "**Failed**" in done[name] else []
        write(args.out, done, bool(args.only), started, load0)
    pages = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != args.out.resolve())]
    changed = requote(pages, figures(args.out.read_text()), before)
    print("\nquotes updated in: " + (", ".join(changed) if changed else "none (the pages already quote these values)"))
    print(
        f"\nwrote {args.out} in {duration(time.time() - started)}"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
