"""The software a score depends on (bench/software.py): read without importing torch, checked here against the
packages' own module attributes, and the differences verify names."""

from __future__ import annotations

import platform
import types

import numpy
import pytest

from bench import software
from bench.bundle import verify_cli


def test_the_versions_are_the_ones_the_packages_themselves_report():
    import sklearn
    import torch

    found = software.versions()
    assert found["python"] == platform.python_version()
    assert found["torch"] == torch.__version__ and found["numpy"] == numpy.__version__
    assert found["scikit-learn"] == sklearn.__version__
    assert software.torch_cuda() == torch.version.cuda  # None for the CPU build, '12.8' for a CUDA one
    assert ("cuda" in found) == (torch.version.cuda is not None)


def test_torchs_cuda_build_and_the_driver_are_read_from_their_files(tmp_path, monkeypatch):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.13.0+cu128'\ncuda: Optional[str] = '12.8'\n")
    spec = types.SimpleNamespace(submodule_search_locations=[str(tmp_path / "torch")])
    monkeypatch.setattr(software.importlib.util, "find_spec", lambda name: spec)
    assert software.torch_cuda() == "12.8"
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.124.06  Tue Mar 11 2025\nGCC version: 12\n")
    monkeypatch.setattr(software, "DRIVER", driver)
    assert software.nvidia_driver() == "570.124.06"


def test_differences_name_each_version_on_either_side():
    recorded = {"python": "3.11.7", "torch": "2.13.0+cu128", "cuda": "12.8", "numpy": "2.4.6"}
    here = {"python": "3.11.7", "torch": "2.13.0+cpu", "numpy": "2.4.6"}
    assert software.differences(recorded, here) == ["cuda 12.8 (here absent)", "torch 2.13.0+cu128 (here 2.13.0+cpu)"]
    assert software.differences(here, dict(here)) == []


@pytest.mark.parametrize("recorded", [{}, {"python": "0.0.1", "torch": "1.0"}])
def test_verify_prints_the_recorded_software_beside_this_machines(recorded, capsys):
    check = types.SimpleNamespace(software=recorded)
    verify_cli.print_software([check])
    out = capsys.readouterr().out
    assert "software here:     python " + platform.python_version() in out
    if recorded:
        assert "software recorded: python 0.0.1, torch 1.0" in out
        assert f"python 0.0.1 (here {platform.python_version()})" in out
    else:
        assert "software recorded: none" in out
