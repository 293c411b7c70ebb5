"""Small pieces (issue #33): no function of the installed code over 80 lines, no module over 600.

The installed code is every folder pyproject.toml maps into the ``spectower`` package (its
[tool.setuptools.package-dir]), read from the checkout with ``ast``. A function's length runs from its
``def`` line to its last line (decorators apart), nested functions counted inside their parent and again
on their own; a module's is its line count.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO_ROOT

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600

# Offenders still to split (an entry that no longer offends fails the test too, so the list only shrinks).
NOT_YET_SPLIT: set[str] = set()


def product_folders() -> list[Path]:
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return sorted({REPO_ROOT / folder for folder in setuptools["package-dir"].values()})


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, Function):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def oversized(source: str, where: str) -> dict[str, str]:
    """What in one module breaks a limit: ``where`` (the module) or ``where:qualified.name``, with why."""
    found: dict[str, str] = {}
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found[where] = f"{lines} lines (module limit {MAX_MODULE_LINES})"
    for name, node in _functions(ast.parse(source, filename=where)):
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES:
            found[f"{where}:{name}"] = f"{length} lines (function limit {MAX_FUNCTION_LINES})"
    return found


def installed_oversized() -> dict[str, str]:
    found: dict[str, str] = {}
    for folder in product_folders():
        for path in sorted(folder.rglob("*.py")):
            found.update(oversized(path.read_text(encoding="utf-8"), path.relative_to(REPO_ROOT).as_posix()))
    return found


def test_no_function_over_80_lines_and_no_module_over_600() -> None:
    found = installed_oversized()
    offenders = {k: why for k, why in found.items() if k not in NOT_YET_SPLIT}
    assert not offenders, "split by meaning (named helpers), not by line count:\n" + "\n".join(
        f"  {k}: {why}" for k, why in sorted(offenders.items())
    )
    fixed = sorted(NOT_YET_SPLIT - set(found))
    assert not fixed, f"no longer over the limit: remove from NOT_YET_SPLIT: {fixed}"


def test_the_check_names_what_breaks_the_limit() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))  # + the def line: one too many
    source = f"class Panel:\n    def draw(self) -> None:\n{body.replace('    ', '        ')}\n"
    source += "def fits() -> None:\n" + "\n".join(f"    y{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    assert oversized(source, "console/x.py") == {
        "console/x.py:Panel.draw": f"{MAX_FUNCTION_LINES + 1} lines (function limit {MAX_FUNCTION_LINES})"
    }
    long_module = "\n".join("z = 1" for _ in range(MAX_MODULE_LINES + 1))
    assert oversized(long_module, "simulator/y.py") == {
        "simulator/y.py": f"{MAX_MODULE_LINES + 1} lines (module limit {MAX_MODULE_LINES})"
    }
    assert oversized("\n".join("z = 1" for _ in range(MAX_MODULE_LINES)), "simulator/y.py") == {}


def test_every_installed_folder_is_checked() -> None:
    names = {folder.name for folder in product_folders()}
    assert {"collectors", "storage", "control", "simulator", "console", "spectower"} <= names


def test_test_and_benchmark_helpers_stay_out_of_the_package() -> None:
    """benchmarks/synthetic.py (made-up histories) was console/synthetic.py: nothing installed may need the
    helpers of tests/ or benchmarks/, which the wheel does not carry."""
    reaching_out = []
    for folder in product_folders():
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                if any(name.split(".")[0] in ("tests", "benchmarks") for name in names):
                    reaching_out.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert reaching_out == []
    assert not [p for folder in product_folders() for p in folder.rglob("synthetic.py")]
