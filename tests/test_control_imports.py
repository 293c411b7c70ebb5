"""control/ reads and writes the database only through storage (docs/architecture.md, "One implementation
per job": every query is in ``storage/queries.py``): no control module imports SQLAlchemy or SQLModel, or
opens a session of its own.

Every import counts, also the ones under ``if TYPE_CHECKING:`` and inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

CONTROL = REPO_ROOT / "control"
DATABASE_LIBRARIES = ("sqlalchemy", "sqlmodel")


def _database_uses(path: Path) -> list[str]:
    """``line: what`` for each import of a database library and each ``.session(...)`` call in ``path``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        found += [f"{node.lineno}: import {n}" for n in names if n.split(".")[0] in DATABASE_LIBRARIES]
        call = node.func if isinstance(node, ast.Call) else None
        if isinstance(call, ast.Attribute) and call.attr == "session":
            found.append(f"{node.lineno}: .session(...)")
    return found


def test_control_reaches_the_database_only_through_storage() -> None:
    paths = sorted(CONTROL.rglob("*.py"))
    assert CONTROL / "runner.py" in paths and CONTROL / "audit.py" in paths  # the walk found the modules
    uses = {str(p.relative_to(REPO_ROOT)): u for p in paths if (u := _database_uses(p))}
    assert not uses, uses


def test_the_finder_sees_imports_and_sessions(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from sqlmodel import select\nimport sqlalchemy.orm\nimport json\n"
        "def f(db):\n    with db.session(write=True) as s:\n        return s\n"
    )
    assert _database_uses(sample) == ["1: import sqlmodel", "2: import sqlalchemy.orm", "5: .session(...)"]
