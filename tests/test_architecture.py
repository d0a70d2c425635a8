"""The package's layers (pyproject.toml, [tool.importlinter]; docs/architecture.md): the contracts hold, the
layers name every part of the package, and they do catch an import that goes up, or a fault that reaches
for the reference implementation instead of the vocabulary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: import-linter depends on tomli there
    import tomli as tomllib

pytest.importorskip("importlinter", reason="import-linter is not installed (pip install '.[dev]')")

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """lint-imports on the package under `cwd`, with the contract of `cwd`/pyproject.toml."""
    env = dict(os.environ, PYTHONPATH=str(cwd))  # the package of `cwd`, not the one pip installed
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "--no-logo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [m.strip() for layer in contract["layers"] for m in layer.split("|")]


def test_the_package_keeps_its_layers():
    run = _lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 kept, 0 broken" in run.stdout


def test_the_layers_name_every_module_of_the_package():
    layers = _layers()
    modules = []
    for path in sorted((ROOT / "resilience").rglob("*.py")):
        if path.name == "__init__.py":
            continue  # a package's own __init__ goes with its package (broken's holds the catalogue only)
        modules.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    outside = [m for m in modules if not any(m == layer or m.startswith(layer + ".") for layer in layers)]
    assert outside == [], f"add these to a layer in pyproject.toml [tool.importlinter]: {outside}"


def _lint_with(tmp_path, module: str, code: str):
    """lint-imports on a copy of the package with `code` appended to `module` (a path under resilience/)."""
    shutil.copytree(ROOT / "resilience", tmp_path / "resilience", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "resilience" / module, "a") as f:
        f.write(code)
    return _lint_imports(tmp_path)


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path):
    run = _lint_with(
        tmp_path,
        "checkers/base.py",
        "\n\ndef _upward():\n    from ..runner import run  # a checker reaching for the runner\n",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "resilience.checkers is not allowed to import resilience.runner" in run.stdout
    assert "resilience.checkers.base -> resilience.runner.run" in run.stdout


def test_a_fault_reaching_for_the_reference_breaks_the_contract(tmp_path):
    run = _lint_with(
        tmp_path,
        "faults/corruption.py",
        "\n\ndef _reference_names():\n    from ..checkpoint.commit import staging_name  # not the vocabulary\n",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "resilience.faults is not allowed to import resilience.checkpoint" in run.stdout
    assert "resilience.faults.corruption -> resilience.checkpoint.commit" in run.stdout


def _import_circles() -> list[list[str]]:
    """Every circle of modules inside the package that import each other (directly or round a loop),
    imports inside functions and under TYPE_CHECKING included: the strongly connected components
    of the import graph, each sorted (Tarjan's algorithm, without recursion)."""
    import grimp

    graph = grimp.build_graph("resilience", cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for start in edges:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # back in the caller: carry the lowest index reached up to it
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


def test_no_module_of_the_package_imports_itself_round_a_circle():
    """Import circles make the order of imports matter and hide which module sits below which (a lazy
    import inside a function is one too): each module of a folder sits above or below each other."""
    assert _import_circles() == []


def test_the_circle_finder_finds_a_circle_through_an_import_inside_a_function(tmp_path, monkeypatch):
    shutil.copytree(ROOT / "resilience", tmp_path / "resilience", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "resilience" / "errors.py", "a") as f:
        f.write("\n\ndef _upward():\n    from .vocab import combos  # the bottom layer reaching up\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "resilience" or m.startswith("resilience.")]:
        monkeypatch.delitem(sys.modules, name)
    found = _import_circles()
    assert any({"resilience.errors", "resilience.vocab.combos"} <= set(c) for c in found), found


def _package_exceptions() -> list[type]:
    """Every exception class the package defines (any module, a class made inside a function included
    once made), after importing every module of it."""
    import importlib
    import pkgutil

    import resilience

    for info in pkgutil.walk_packages(resilience.__path__, "resilience."):
        importlib.import_module(info.name)
    found, todo = set(), [BaseException]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return sorted(
        (c for c in found if c.__module__ == "resilience" or c.__module__.startswith("resilience.")),
        key=lambda c: f"{c.__module__}.{c.__qualname__}",
    )


def test_every_error_of_the_package_is_a_resilience_error():
    """One root (as Hypothesis has): `except ResilienceError` catches whatever the package raises as an
    error. BaseExceptions that are no Exception (a stop, a spent budget) are control flow, and a warning
    is not raised as an error."""
    from resilience.errors import ResilienceError

    errors = [c for c in _package_exceptions() if issubclass(c, Exception) and not issubclass(c, Warning)]
    assert len(errors) >= 15  # the walk found the package's errors, not nothing
    outside = [f"{c.__module__}.{c.__qualname__}" for c in errors if not issubclass(c, ResilienceError)]
    assert outside == [], f"derive these from resilience.errors.ResilienceError: {outside}"


def test_a_failed_scenario_is_an_error_of_the_package_and_a_failed_assertion():
    from resilience.errors import ResilienceError
    from resilience.fuzz.judge import ScenarioFailed

    assert issubclass(ScenarioFailed, ResilienceError) and issubclass(ScenarioFailed, AssertionError)


MAX_MODULE_LINES = 500  # a module past it does several jobs: split it by job
MAX_FUNCTION_LINES = 80


def _too_long(root: Path) -> list[str]:
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(root.parent)
        if len(source.splitlines()) >= MAX_MODULE_LINES:
            found.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= MAX_FUNCTION_LINES:
                    found.append(f"{where}:{node.lineno}: {node.name} is {lines} lines")
    return found


def test_every_module_and_function_of_the_package_stays_short():
    assert _too_long(ROOT / "resilience") == []


def test_the_length_check_finds_a_long_module_and_a_long_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "long.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (package / "fn.py").write_text("def f():\n" + "    pass\n" * MAX_FUNCTION_LINES)
    assert _too_long(package) == [
        f"pkg/fn.py:1: f is {MAX_FUNCTION_LINES + 1} lines",
        f"pkg/long.py: {MAX_MODULE_LINES} lines",
    ]
