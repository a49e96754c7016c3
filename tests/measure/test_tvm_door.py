"""The one door: no module but ``measure/tvmapi.py`` reaches TVM's unstable API.

The unstable modules are the adapter's ``UNSTABLE_MODULES`` (read from its source, so
this test imports no TVM and follows the next rename). Every Python file of the
scanned folders is parsed; an import of one of them, an attribute chain through one
(``tvm.<module>.X``) or a string in code naming one (an ``importlib`` call, a script
run in a subprocess) is a bypass. Docstrings and comments may name them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOOR = ROOT / "measure" / "tvmapi.py"
SCANNED = ("tuner", "extract", "measure", "database", "bench", "tests")


def unstable_modules() -> tuple[str, ...]:
    """``UNSTABLE_MODULES`` of ``measure/tvmapi.py``, read from its source."""
    for node in ast.parse(DOOR.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "UNSTABLE_MODULES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{DOOR} defines no UNSTABLE_MODULES")


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def bypasses(source: str, modules: tuple[str, ...]) -> dict[int, str]:
    """Line -> the unstable module name used there, for every bypass in ``source``."""
    def unstable(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in modules)

    mentions = re.compile("|".join(rf"(?<![\w.]){re.escape(m)}(?!\w)" for m in modules))
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found: dict[int, str] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Attribute):
            names = [n for n in [_dotted(node)] if n]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names = [m.group(0) for m in mentions.finditer(node.value)]
        for name in names:
            if unstable(name):
                found.setdefault(node.lineno, name)
    return found


def test_no_module_bypasses_the_door():
    modules = unstable_modules()
    assert modules, "UNSTABLE_MODULES is empty"
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == DOOR:
                continue
            for line, name in sorted(bypasses(path.read_text(encoding="utf-8"), modules).items()):
                found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not found, "unstable TVM API used outside measure/tvmapi.py (import it from there):\n" + "\n".join(found)


def _cases() -> list:
    """Small sources, each with whether the scan must call it a bypass."""
    cases = []
    for m in unstable_modules():
        parent, _, leaf = m.rpartition(".")
        cases += [
            pytest.param(f"import {m}\n", True, id=f"import-{m}"),
            pytest.param(f"import {m} as alias\n", True, id=f"import-as-{m}"),
            pytest.param(f"from {m} import X\n", True, id=f"from-{m}"),
            pytest.param(f"import {m.split('.')[0]}\nx = {m}.X\n", True, id=f"attribute-{m}"),
            pytest.param(f"import importlib\nimportlib.import_module('{m}.x')\n", True, id=f"string-{m}"),
            pytest.param(f'"""A docstring may name {m}."""\n# and so may a comment: {m}\n', False, id=f"prose-{m}"),
            pytest.param(f"from measure.tvmapi import X\nx = X.{leaf}\n", False, id=f"through-the-door-{m}"),
        ]
        if parent:
            cases.append(pytest.param(f"from {parent} import {leaf}\n", True, id=f"from-parent-{m}"))
    return cases


@pytest.mark.parametrize(("source", "bypass"), _cases())
def test_the_scan_tells_a_bypass(source, bypass):
    assert bool(bypasses(source, unstable_modules())) == bypass
