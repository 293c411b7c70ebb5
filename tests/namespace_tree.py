"""A ``spectower`` package tree made of symbolic links into this checkout, for tools that cannot use the
editable install's import hook: SGLang's CPU test venv and the GPU machine (spectower is not installed
there; the plugin tests put this tree on ``PYTHONPATH``) and mypy (it reads files, not import hooks).

The layout is the one pyproject.toml's package-dir mapping installs: ``spectower/<folder>`` for each
top-level folder, so what runs is the checkout under test, wherever it was cloned.

    python3 tests/namespace_tree.py DEST      # writes DEST/spectower
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, str]:
    """pyproject.toml's package-dir mapping: installed name -> folder in the checkout."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return mapping


def link_tree(dest: Path) -> Path:
    """Write ``dest/spectower`` (idempotent) and return ``dest``, ready to go on ``sys.path``."""
    top = dest / "spectower"
    top.mkdir(parents=True, exist_ok=True)
    for name, folder in package_dirs().items():
        if name == "spectower":
            link, target = top / "__init__.py", REPO_ROOT / folder / "__init__.py"
        else:
            link, target = top / name.removeprefix("spectower."), REPO_ROOT / folder
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return dest


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: namespace_tree.py DEST")
    print(link_tree(Path(sys.argv[1])))
