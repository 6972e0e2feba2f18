"""The environment a score depends on is pinned: every requirement of pyproject.toml has an upper bound, and
constraints.txt (what `make install` installs with) pins each of them at a version inside its range."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    lines = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return [Requirement(line) for line in [*lines, *PYPROJECT["build-system"]["requires"]]]


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith("#")]
    assert all(len(p) == 2 for p in pins), "constraints.txt: one name==version a line"
    return {canonicalize_name(name): version for name, version in pins}


def test_every_requirement_has_an_upper_bound():
    uncapped = [str(r) for r in _requirements() if not any(s.operator in ("<", "<=", "==", "~=") for s in r.specifier)]
    assert uncapped == [], f"cap these in pyproject.toml: {uncapped}"


def test_constraints_pin_every_requirement_inside_its_range():
    pins = _pins()
    build = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["build-system"]["requires"]}
    for req in _requirements():
        name = canonicalize_name(req.name)
        if name in build:
            continue  # the build backend runs in pip's isolated build environment, which -c does not reach
        assert name in pins, f"constraints.txt pins no {req.name}: run `make constraints`"
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} is outside {req}"
    assert not [v for v in pins.values() if "+" in v], "a local version label (+cpu) would refuse the CUDA build"


def test_make_install_installs_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    installs = re.findall(r"pip install [^\n]*'\.\[\w+\]'", makefile)
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert re.search(r"pip install -q -c constraints.txt torch\b", makefile)  # torch first, at its pinned version
