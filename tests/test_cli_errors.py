"""spectower.cli_errors: the one ``error:`` line of every command line (``spectower``, ``python -m
spectower.simulator``). It sits at the namespace's root so the simulator can use it without importing the
console: it must import nothing of ours, and the simulator must reach it there, not through the console.

Every import counts, also the ones under ``if TYPE_CHECKING:`` and inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.namespace_tree import link_tree

MODULE = REPO_ROOT / "spectower" / "cli_errors.py"


def _ours(path: Path) -> set[str]:
    """The spectower modules (or packages) ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "spectower")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "spectower":
            found.add(node.module)
    return found


def test_cli_errors_imports_nothing_of_ours() -> None:
    assert _ours(MODULE) == set()


def test_the_simulator_reports_errors_without_the_console() -> None:
    uses = {
        str(p.relative_to(REPO_ROOT)): sorted(m for m in ours if m.startswith("spectower.console"))
        for p in sorted((REPO_ROOT / "simulator").rglob("*.py"))
        if (ours := _ours(p))
    }
    assert "spectower.cli_errors" in _ours(REPO_ROOT / "simulator" / "__main__.py")  # the walk saw it
    assert not {path: mods for path, mods in uses.items() if mods}


def test_the_link_tree_carries_the_root_module(tmp_path: Path) -> None:
    # mypy and the GPU machine read the package through this tree: a root module it left out was unchecked
    # by mypy and missing for `python -m spectower.simulator` there
    top = link_tree(tmp_path) / "spectower"
    assert (top / "cli_errors.py").resolve() == MODULE
    assert (top / "__init__.py").resolve() == REPO_ROOT / "spectower" / "__init__.py"
