"""One error base: every exception class of the three packages derives from ``bench.errors.BenchError``.

``bench`` catches that base once and exits with the error's ``exit_code`` (2 when the user's input is what is
wrong, :class:`~bench.errors.InputError`; 1 when the work could not finish), so an error class outside it would
reach the user as a traceback. The classes are found in the source with ``ast`` (a class defined in a function
too) and checked on the imported module, so a base given through an alias or another module counts as it is.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
import types

import pytest

from bench import cli
from bench.errors import BenchError, InputError, Problems
from bench.tasks.data import DataError
from bench.tasks.registry import TaskError
from bench.tasks.smalldata import SmallDataError
from bench.tasks.weights import WeightsError
from tests.test_imports import modules


def _resolve(node: ast.expr, namespace: dict) -> object:
    """The object a base expression (``Name`` or dotted ``Attribute``) names in a module, else None."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, namespace)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def outside_the_base(module: types.ModuleType, source: str) -> list[str]:
    """The exception classes ``source`` defines that do not derive from BenchError (``module`` is it, imported).

    A class reachable by name (at module level, or inside a class) is checked as the module holds it; a class
    defined inside a function by what its bases name in the module (one with a base made in that function too
    is not judged).
    """
    found: list[str] = []

    def visit(node: ast.AST, owner: object | None, path: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{path}{child.name}"
                cls = getattr(owner, child.name, None) if owner is not None else None
                if not isinstance(cls, type):  # defined in a function: judged by its bases
                    cls = None
                    bases = [_resolve(b, vars(module)) for b in child.bases]
                    if any(isinstance(b, type) and issubclass(b, BaseException) for b in bases) and not any(
                        isinstance(b, type) and issubclass(b, BenchError) for b in bases
                    ):
                        found.append(name)
                elif issubclass(cls, BaseException) and not issubclass(cls, BenchError):
                    found.append(name)
                visit(child, cls, f"{name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, None, f"{path}{child.name}.<locals>.")
            else:
                visit(child, owner, path)

    visit(ast.parse(source), module, "")
    return found


def test_the_check_finds_a_class_outside_the_base_wherever_it_is_defined() -> None:
    """The check itself can fail: a made-up module with one class of each kind, in and outside the base."""
    source = """
from bench.errors import BenchError, InputError
import bench.errors as errors

class Good(InputError, LookupError): ...
class Aliased(errors.BenchError): ...
class Bad(RuntimeError): ...
class Holder:
    class Inner(KeyError): ...
    class Fine(BenchError): ...
class NotAnError: ...
def f():
    class Local(ValueError): ...
    class LocalGood(BenchError, OSError): ...
    class Unknown(Local): ...
"""
    module = types.ModuleType("made_up")
    exec(compile(source, "made_up.py", "exec"), vars(module))
    assert outside_the_base(module, source) == ["Bad", "Holder.Inner", "f.<locals>.Local"]


def test_every_exception_class_derives_from_bench_error() -> None:
    offenders = []
    for name, path in sorted(modules().items()):
        module = sys.modules.get(name) or importlib.import_module(name)
        offenders += [f"{name}.{cls}" for cls in outside_the_base(module, path.read_text())]
    assert not offenders, (
        "exception classes outside bench.errors.BenchError (derive from InputError when the user's input is "
        f"wrong, else from BenchError; keep a stdlib base that callers catch as a second base): {offenders}"
    )


def test_the_kinds_the_user_meets_keep_the_bases_their_callers_catch() -> None:
    """A caller that caught the stdlib error before still catches it; the exit code says whose problem it is."""
    assert issubclass(TaskError, InputError) and issubclass(TaskError, LookupError)
    assert issubclass(SmallDataError, InputError) and issubclass(SmallDataError, ValueError)
    assert issubclass(WeightsError, InputError) and issubclass(WeightsError, RuntimeError)
    assert issubclass(DataError, BenchError) and issubclass(DataError, RuntimeError)
    assert not issubclass(DataError, InputError)  # the data could not be had: not the user's argument


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InputError("--budget must be positive: give a duration such as 30m"), 2),
        (Problems(["set OPENAI_API_KEY", "start the gateway"]), 2),
        (TaskError("unknown task 't9'; known tasks: t1, t2"), 2),
        (SmallDataError("smalldata.py: define TINY"), 2),
        (WeightsError("t3 provides pretrained weights: run bench weights install FILE"), 2),
        (DataError("t6: the mirror has no file; set BENCH_DATA_MIRROR"), 1),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_bench_turns_an_error_into_its_exit_code_and_one_line(error, code, monkeypatch, capsys) -> None:
    """``bench`` prints the message after ``bench:`` and exits with the kind's code; no traceback."""

    def command(args) -> int:
        raise error

    monkeypatch.setattr(cli, "cmd_tasks", command)  # build_parser binds `bench tasks` to it on each call
    assert error.exit_code == code
    assert cli.main(["tasks"]) == code
    err = capsys.readouterr().err
    assert err == f"bench: {error}\n"
    assert "Traceback" not in err
