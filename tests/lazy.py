"""A module that is imported when a test first uses it, not when pytest collects the test file.

torch (3.6 s), MLflow's server app (2.8 s) and mlflow (1.7 s) are most of the cost of collecting the suite, and every
pytest-xdist worker collects every file; a test file that names them at its top made each `pytest tests/x.py` and
each worker pay for them before the first test ran. ``mlflow = lazy("mlflow")`` keeps the module's name for the tests
that use it and imports it at the first attribute they read.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class _Lazy(ModuleType):
    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self.__name__), attr)

    def __setattr__(self, attr: str, value) -> None:
        setattr(importlib.import_module(self.__name__), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(importlib.import_module(self.__name__), attr)

    @property
    def __dict__(self):  # what monkeypatch reads to undo a setattr
        return importlib.import_module(self.__name__).__dict__

    def __dir__(self):
        return dir(importlib.import_module(self.__name__))


def lazy(name: str) -> ModuleType:
    """``name``'s module, imported at the first attribute read; reads, writes and deletes go to the module in
    ``sys.modules`` (monkeypatch.setattr through it patches the real module)."""
    return _Lazy(name)
