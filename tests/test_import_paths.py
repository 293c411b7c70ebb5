"""Imports a reader can follow in the checkout as it lies, without an install (issue #33, item 2).

The checkout keeps its top-level folders (``storage/``, ``console/``, ...) and the install names them
``spectower.<folder>`` (pyproject.toml's package-dir), so an absolute ``spectower.storage.queries`` points
nowhere in the checkout. Between the packages, the product's code therefore imports relatively, and every
relative import names a file or folder that is there: ``from ..storage import queries`` in
``console/data.py`` is ``storage/queries.py``. Two kinds of file keep absolute imports, each for a reason:
the Streamlit scripts (``console/app.py`` and ``console/pages/*.py``: Streamlit runs them as scripts,
outside any package), and the namespace root's own modules (``spectower.cli_errors`` *is*
``spectower/cli_errors.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.test_floors import INSTALLED, _python_files

SCRIPTS = ("console/app.py", "console/pages/")


def _is_script(path: Path) -> bool:
    return str(path.relative_to(REPO_ROOT)).startswith(SCRIPTS)


def absolute_imports_of_folders(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """``file:line: module`` for each absolute import of an installed folder (``spectower.<folder>...``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "spectower" and len(parts) > 1 and parts[1] in INSTALLED - {"spectower"}:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {name}")
    return found


def unfollowable_relative_imports(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """``file:line: from X import name`` for each relative import that names no file or folder of the
    checkout (resolved from the file's own folder, one folder up per dot after the first); ``from .. import
    name`` may also name what that folder's ``__init__.py`` defines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.ImportFrom) and node.level > 0):
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        shown = f"{path.relative_to(root)}:{node.lineno}: from {'.' * node.level}{node.module or ''} import"
        if not base.is_relative_to(root):
            found.append(f"{shown} ... (above the checkout)")
        elif node.module:
            target = base.joinpath(*node.module.split("."))
            if not (target.with_suffix(".py").exists() or (target / "__init__.py").exists()):
                found.append(f"{shown} ...")
        else:
            defined = _defined_names(base / "__init__.py")
            found += [f"{shown} {alias.name}" for alias in node.names
                      if not ((base / f"{alias.name}.py").exists() or (base / alias.name).is_dir()
                              or alias.name in defined)]  # fmt: skip
    return found


def _defined_names(init: Path) -> set[str]:
    if not init.exists():
        return set()
    names: set[str] = set()
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
    return names


def _product_files() -> list[Path]:
    return [p for folder in sorted(INSTALLED) for p in _python_files(folder)]


def test_the_packages_import_each_other_by_folder_path() -> None:
    absolute = [hit for p in _product_files() if not _is_script(p) for hit in absolute_imports_of_folders(p)]
    assert not absolute, "\n".join(absolute)


def test_every_relative_import_names_a_file_or_folder_of_the_checkout() -> None:
    lost = [hit for p in _product_files() for hit in unfollowable_relative_imports(p)]
    assert not lost, "\n".join(lost)


def test_the_checks_see_an_absolute_import_and_a_relative_one_that_leads_nowhere(tmp_path: Path) -> None:
    for folder in ("console", "storage", "spectower"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("VERSION = 1\n")
    (tmp_path / "storage" / "queries.py").write_text("")
    probe = tmp_path / "console" / "probe.py"
    probe.write_text("from spectower.storage import queries\nfrom ..storage import queries\n"
                     "from ..storage.nowhere import x\nfrom spectower.cli_errors import fail\n"
                     "from .. import storage, nowhere\nfrom ..storage import VERSION\nfrom .... import far\n")
    assert absolute_imports_of_folders(probe, tmp_path) == ["console/probe.py:1: spectower.storage"]
    assert unfollowable_relative_imports(probe, tmp_path) == [
        "console/probe.py:3: from ..storage.nowhere import ...",
        "console/probe.py:5: from .. import nowhere",
        "console/probe.py:7: from .... import ... (above the checkout)",
    ]
