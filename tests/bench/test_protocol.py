"""The paper's protocol (Appendix B: one A100 80 GB, the task's own budget, isolation) and how a run deviates."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from bench import protocol, settings

FORTY_MIN = 40 * 60.0


def kinds(**overrides) -> list[str]:
    facts = dict(
        budget_s=FORTY_MIN,
        task_budget_s=FORTY_MIN,
        hardware="NVIDIA A100-SXM4-80GB",
        sandboxed=True,
        partial_data=False,
    )
    return [d.kind for d in protocol.deviations(**{**facts, **overrides})]


def test_a_run_like_the_papers_has_no_deviation():
    assert kinds() == []
    assert kinds(hardware="NVIDIA A100 80GB PCIe") == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"budget_s": 8 * 60.0}, ["budget"]),
        ({"budget_s": 120 * 60.0}, ["budget"]),  # a longer budget is as incomparable as a shorter one
        ({"hardware": "cpu (AMD EPYC, 2 cores)"}, ["hardware"]),
        ({"hardware": "NVIDIA H100 80GB HBM3"}, ["hardware"]),  # another GPU: not the paper's hardware
        ({"hardware": "NVIDIA A100-SXM4-40GB"}, ["hardware"]),  # the 40 GB A100 has half the memory
        ({"sandboxed": False}, ["sandbox"]),
        ({"partial_data": True}, ["partial-data"]),
        ({"cut_short_at_s": 600.0}, ["cut-short"]),  # a signal or the harness's death 10 min into 40
        ({"cut_short_at_s": FORTY_MIN + 25}, []),  # stopped in the grace period: the agent had its whole budget
        (
            {"budget_s": 60.0, "hardware": "", "sandboxed": False, "partial_data": True},
            ["budget", "hardware", "sandbox", "partial-data"],
        ),
    ],
)
def test_each_deviation_is_named(overrides, expected):
    assert kinds(**overrides) == expected


def test_a_run_cut_short_says_when_in_words():
    facts = dict(hardware="NVIDIA A100-SXM4-80GB", sandboxed=True, partial_data=False)
    (d,) = protocol.deviations(budget_s=FORTY_MIN, task_budget_s=FORTY_MIN, cut_short_at_s=90.0, **facts)
    assert str(d).startswith("cut-short: the harness was stopped 1.5 min into the 40 min budget")


def test_a_deviation_says_how_in_words():
    (d,) = protocol.deviations(
        budget_s=480, task_budget_s=FORTY_MIN, hardware="NVIDIA A100-SXM4-80GB", sandboxed=True, partial_data=False
    )
    assert str(d) == "budget: 8 min instead of the task's 40 min"


def test_the_gpu_is_named_from_nvidia_smi_for_the_visible_device(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"  # answers like the real one, and records the device it was asked about
    smi.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\necho "NVIDIA A100-SXM4-80GB, 81920 MiB"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert protocol.describe_hardware("cuda") == "NVIDIA A100-SXM4-80GB"
    assert "-i 3" in (tmp_path / "args").read_text()
    smi.write_text('#!/bin/sh\necho "Tesla V100-SXM2, 32768 MiB"\n')
    assert protocol.describe_hardware("cuda") == "Tesla V100-SXM2 32GB"
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert protocol.describe_hardware("cuda") == "cuda (unknown GPU)"


def test_a_cpu_is_named_with_its_cores():
    text = protocol.describe_hardware("cpu")
    assert text.startswith("cpu (") and f"{os.cpu_count()} cores" in text
    assert not protocol.is_paper_gpu(text)


HOOK = Path(protocol.__file__).parent / "tracking" / "hook"  # stdlib only, inside the sandbox: spells the names itself


def test_the_hook_spells_only_the_protocols_names():
    spelled = set()
    for path in HOOK.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("BENCH_"):
                spelled.add(node.value)
            elif isinstance(node, ast.keyword) and (node.arg or "").startswith("BENCH_"):
                spelled.add(node.arg)
    assert spelled and spelled <= set(protocol.IN_SANDBOX)
    assert not set(protocol.IN_SANDBOX) & set(settings.BY_NAME)  # the two kinds never share a name


def test_a_process_reads_only_protocol_names_from_the_harness(monkeypatch):
    monkeypatch.setenv(protocol.BUDGET_VAR, "120")
    assert protocol.from_harness(protocol.BUDGET_VAR) == "120"
    with pytest.raises(KeyError, match="BENCH_CACHE_DIR is not an in-sandbox protocol variable"):
        protocol.from_harness("BENCH_CACHE_DIR")
