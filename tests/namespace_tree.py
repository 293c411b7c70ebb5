"""A ``spectower`` package tree made of symbolic links into this checkout, for tools that cannot use the
editable install's import hook: SGLang's CPU test venv and the GPU machine (spectower is not installed
there; the plugin tests put this tree on ``PYTHONPATH``) and mypy (it reads files, not import hooks).

The layout is the one pyproject.toml's package-dir mapping installs: ``spectower/<folder>`` for each
top-level folder, so what runs is the checkout under test, wherever it was cloned.

    python3 tests/namespace_tree.py DEST               # writes DEST/spectower
    python3 tests/namespace_tree.py --dist-info DEST   # and DEST/spectower-<version>.dist-info, whose
                                                       # entry points SGLang's plugin loader reads
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
    links: list[tuple[Path, Path]] = []
    for name, folder in package_dirs().items():
        if name == "spectower":
            # the root's own modules (its __init__, cli_errors ...), each a link: top is a real folder that
            # holds the other folders' links
            links += [(top / module.name, module) for module in sorted((REPO_ROOT / folder).glob("*.py"))]
        else:
            links.append((top / name.removeprefix("spectower."), REPO_ROOT / folder))
    for link, target in links:
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return dest


def write_dist_info(dest: Path) -> Path:
    """``dest/spectower-<version>.dist-info`` with the ``sglang.srt.plugins`` entry points pyproject.toml
    declares, so SGLang's ``load_plugins()`` finds the checkout's plugins as it finds an installed copy's."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    dist = dest / f"spectower-{project['version']}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: spectower\nVersion: {project['version']}\n")
    group = project["entry-points"]["sglang.srt.plugins"]
    lines = ["[sglang.srt.plugins]", *(f"{name} = {value}" for name, value in group.items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return dist


if __name__ == "__main__":
    args = sys.argv[1:]
    with_dist_info = "--dist-info" in args
    args = [a for a in args if a != "--dist-info"]
    if len(args) != 1:
        sys.exit("usage: namespace_tree.py [--dist-info] DEST")
    print(link_tree(Path(args[0])))
    if with_dist_info:
        print(write_dist_info(Path(args[0])))
