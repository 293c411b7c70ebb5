"""Every import runs down a floor (docs/architecture.md, "Floors"): a package imports its own floor or one
below it, never one above. The order is declared once, here (``FLOORS``); an import that runs up fails the
test with its file, line and edge.

Every import counts, also the ones under ``if TYPE_CHECKING:`` and inside functions: a deferred import
hides an upward edge from the interpreter, not from the reader. Relative imports stay inside a package.
The bottom floor, the code SGLang loads (``plugin/``), also imports nothing outside the standard library at
module level: sglang and torch only inside its hooks (tests/test_packaging.py imports it with nothing else
installed)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# Bottom first. A folder may import folders on its own floor or below. The folders are the checkout's
# top-level ones; the installed names are spectower.<folder> (pyproject.toml's package-dir), and
# ``spectower`` alone is the namespace's root (its version, cli_errors).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("plugin",),  # runs inside SGLang's processes; the wire contracts every side reads (standard library)
    ("spectower",),  # the namespace's root: how a command line reports a mistake
    ("storage",),  # the database; nothing above it
    ("collectors",),  # outside sources -> typed samples, into storage
    ("control",),  # the knob from outside: client, audit, policies; reads storage, talks to servers
    ("simulator",),  # an emulated server and the policy harness
    ("console",),  # what an operator touches: the command line, the pages, the demo
    ("benchmarks",),  # measurements of the product, the simulator and real GPUs (benchmarks/gpu/)
    ("tests",),
)
FLOOR_OF = {folder: level for level, folders in enumerate(FLOORS) for folder in folders}
# Installed as spectower.<folder> (pyproject.toml's package-dir); the others are folders of the checkout.
INSTALLED = {"plugin", "spectower", "storage", "collectors", "control", "simulator", "console"}
# Imported lazily inside the plugin's hooks, only where SGLang runs.
PLUGIN_LAZY = {"sglang", "torch"}


def _folder_of(module: str) -> str | None:
    """The top-level folder an absolute import names, or None when it is not ours."""
    parts = module.split(".")
    if parts[0] == "spectower":
        return parts[1] if len(parts) > 1 and parts[1] in FLOOR_OF else "spectower"
    return parts[0] if parts[0] in FLOOR_OF and parts[0] != "spectower" else None


def _package_of(path: Path, folder: str) -> list[str]:
    """The installed package ``path`` (in ``folder``) belongs to, as parts: ``plugin/knob_gate.py`` ->
    ``["spectower", "plugin"]``; a folder that is not installed keeps its own name (``["tests"]``)."""
    inside = list(path.relative_to(REPO_ROOT / folder).parent.parts) if path.is_relative_to(REPO_ROOT) else []
    top = ["spectower"] if folder == "spectower" else ["spectower", folder]
    return (top if folder in INSTALLED else [folder]) + inside


def _imports(tree: ast.AST, package: list[str] | None = None) -> Iterator[tuple[int, str, bool]]:
    """``(line, module, at_module_level)`` for each import in ``tree``; a relative import is made absolute
    from ``package`` (``from .. import storage`` in ``spectower.collectors`` is ``spectower.storage``)."""
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        top = id(node) not in nested
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, top))
        elif isinstance(node, ast.ImportFrom) and package is not None:
            base = package[: len(package) - (node.level - 1)] if node.level - 1 < len(package) else []
            if node.module:
                found.append((node.lineno, ".".join([*base, node.module]), top))
            else:  # from .. import storage: each name may be a module
                found += [(node.lineno, ".".join([*base, alias.name]), top) for alias in node.names]
    yield from sorted(found)


def _shown(path: Path) -> Path:
    return path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path


def upward_imports(path: Path, folder: str) -> list[str]:
    """``file:line: folder (floor i) imports module (folder, floor j)`` for each import of ``path`` (in
    ``folder``) that runs up a floor."""
    found: list[str] = []
    shown = _shown(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for line, module, _ in _imports(tree, _package_of(path, folder)):
        target = _folder_of(module)
        if target is not None and FLOOR_OF[target] > FLOOR_OF[folder]:
            found.append(
                f"{shown}:{line}: {folder} (floor {FLOOR_OF[folder]}) imports {module} "
                f"({target}, floor {FLOOR_OF[target]}): runs up"
            )
    return found


def outside_the_standard_library(path: Path) -> list[str]:
    """``file:line: module`` for each import of ``path`` the plugin may not make: at module level anything
    but the standard library and the plugin itself; inside a function, also sglang and torch."""
    found: list[str] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for line, module, top_level in _imports(tree, _package_of(path, "plugin")):
        root = module.split(".")[0]
        if module == "spectower.plugin" or module.startswith("spectower.plugin."):
            continue
        if root in sys.stdlib_module_names or (not top_level and root in PLUGIN_LAZY):
            continue
        found.append(f"{_shown(path)}:{line}: {module}")
    return found


def _python_files(folder: str) -> list[Path]:
    """The project's own files: not what a build unpacked beside them (benchmarks/gpu/bundle/ holds SGLang's
    site-packages for the GPU machine, git-ignored) nor caches."""
    skipped = {"bundle", "__pycache__", ".venv"}
    files = (REPO_ROOT / folder).rglob("*.py")
    return sorted(p for p in files if not skipped & set(p.relative_to(REPO_ROOT).parts))


def test_the_floors_name_every_top_level_folder_with_python() -> None:
    # a new top-level folder of code must be given a floor (else its imports would go unchecked)
    with_code = {p.parent.name for p in REPO_ROOT.glob("*/*.py")} - {"build", "docs"}
    assert with_code <= set(FLOOR_OF), sorted(with_code - set(FLOOR_OF))


@pytest.mark.parametrize("folder", [f for floor in FLOORS for f in floor])
def test_no_import_runs_up_a_floor(folder: str) -> None:
    files = _python_files(folder)
    assert files, f"no Python files under {folder}/"
    upward = [edge for path in files for edge in upward_imports(path, folder)]
    assert not upward, "\n".join(upward)


def test_the_plugin_imports_only_the_standard_library() -> None:
    files = _python_files("plugin")
    assert REPO_ROOT / "plugin" / "knob_gate.py" in files
    outside = [hit for path in files for hit in outside_the_standard_library(path)]
    assert not outside, "\n".join(outside)


def test_the_checks_see_an_upward_import_and_a_foreign_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from spectower.storage import queries\n"
        "def later():\n    from spectower.control.knob import KnobClient\n"
        "import tests.conftest\nfrom spectower.plugin import knob_contract\n"
    )
    assert upward_imports(sample, "collectors") == [
        f"{sample}:3: collectors (floor 3) imports spectower.control.knob (control, floor 4): runs up",
        f"{sample}:4: collectors (floor 3) imports tests.conftest (tests, floor 8): runs up",
    ]
    assert upward_imports(sample, "console") == [
        f"{sample}:4: console (floor 6) imports tests.conftest (tests, floor 8): runs up"
    ]
    # relative imports count as what they name once installed: collectors/sglang/x.py's ``...control``
    relative = REPO_ROOT / "collectors" / "sglang" / "relative_probe.py"
    tree = ast.parse("from ...control import knob\nfrom ... import storage\nfrom . import counters\n")
    assert list(_imports(tree, _package_of(relative, "collectors"))) == [
        (1, "spectower.control", True),
        (2, "spectower.storage", True),
        (3, "spectower.collectors.sglang.counters", True),
    ]
    plugin_like = tmp_path / "hooks.py"
    plugin_like.write_text(
        "import json\nimport httpx\nfrom spectower.plugin import explore\n"
        "def hook():\n    import sglang.srt\n    import numpy\n"
    )
    assert outside_the_standard_library(plugin_like) == [f"{plugin_like}:2: httpx", f"{plugin_like}:6: numpy"]
