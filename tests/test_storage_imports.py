"""storage/'s import graph: no module imports another that imports it back (directly or round a longer
circle), and storage imports nothing of ours but what docs/architecture.md allows.

Every import counts, also the ones under ``if TYPE_CHECKING:`` and inside functions: a deferred import
hides a circle from the interpreter, not from the reader."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

STORAGE = REPO_ROOT / "storage"
PACKAGE = "spectower.storage"
# docs/architecture.md, "may import (of ours)": the counters' field names (standard library only)
ALLOWED_OUTSIDE = {"spectower.plugin.engine_counters"}


def _module(path: Path) -> str:
    return PACKAGE if path.name == "__init__.py" else f"{PACKAGE}.{path.stem}"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The spectower modules ``path`` imports (``from spectower.storage import models`` names the
    submodule ``models``; ``from spectower.storage import Database`` names the package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("spectower"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spectower"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in modules or _is_module(sub) else node.module)
    return out


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _graph() -> dict[str, set[str]]:
    paths = sorted(STORAGE.glob("*.py"))
    modules = {_module(p) for p in paths}
    return {_module(p): _imports(p, modules) for p in paths}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt in graph and not state.get(nxt):
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if not state.get(start):
            found = visit(start)
            if found:
                return found
    return None


def test_storage_modules_import_each_other_without_a_circle() -> None:
    graph = _graph()
    # the package's __init__ re-exports; a submodule importing the package itself would be a circle
    internal = {m: {d for d in deps if d.startswith(PACKAGE)} for m, deps in graph.items()}
    assert "spectower.storage.database" in internal  # the walk found the modules
    circle = _cycle(internal)
    assert circle is None, "import circle in storage: " + " -> ".join(circle or [])


def test_storage_imports_nothing_of_ours_outside_what_the_architecture_allows() -> None:
    outside = {
        (m, d)
        for m, deps in _graph().items()
        for d in deps
        if not d.startswith(PACKAGE) and d not in ALLOWED_OUTSIDE
    }
    assert not outside, sorted(outside)


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_cli_starts_without_loading_the_database_layer(tmp_path: Path) -> None:
    """Every ``spectower`` command imports the CLI, and the simulator's commands read their key files
    through ``storage.files``: importing the package loaded SQLAlchemy and sqlmodel for them, 0.4 s of each
    command's start. The package's exports load on first use; reading one still works. Nor does the CLI
    read the package metadata (only --version does), nor a database import numpy before it writes or reads
    a chunk (storage/sealed.py): each command, collector and simulator pays for what it imports (the unit
    lane starts about 300)."""
    probe = (
        "import sys\n"
        "import spectower.console.cli\n"
        "assert 'sqlmodel' not in sys.modules and 'sqlalchemy' not in sys.modules, 'database layer loaded'\n"
        "assert 'importlib.metadata' not in sys.modules, 'the command line read the package metadata'\n"
        "from spectower.storage import SCHEMA_VERSION, open_database\n"
        "assert callable(open_database) and SCHEMA_VERSION >= 1 and 'sqlmodel' in sys.modules\n"
        "import spectower.storage as storage\n"
        "try:\n"
        "    storage.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('an unknown name resolved')\n"
        f"db = open_database({str(tmp_path / 'x.db')!r})\n"
        "sid = db.server_id('http://a')\n"
        "db.insert_many('engine_sample', [{'server_id': sid, 'ts': 1e9 + i} for i in range(10)])\n"
        "assert db.update_rollups() == 10 and db.seal() == 0\n"
        "db.close()\n"
        "assert 'numpy' not in sys.modules, 'a database without chunks imported numpy'\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
