"""How control/ reaches the database: short, synchronous transactions, one per audit row or state change.

Audit rows must not sit in a queue (the sample writer's job): an operator's set is recorded before the
command returns. ``db`` is storage's database object (anything with an ``engine``) or a SQLAlchemy Engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session


def engine_of(db: Any) -> Engine:
    if isinstance(db, Engine):
        return db
    engine = getattr(db, "engine", None)
    if isinstance(engine, Engine):
        return engine
    raise TypeError(f"expected storage's database or an SQLAlchemy Engine, got {type(db).__name__}")


def _write_options(engine: Engine) -> dict[str, Any]:
    try:
        from spectower.storage.dialect import write_options
    except ImportError:  # pragma: no cover - storage always ships it; keep control importable alone
        return {}
    return write_options(engine)


@contextmanager
def read_session(db: Any) -> Iterator[Session]:
    if not isinstance(db, Engine) and hasattr(db, "session"):
        with db.session() as session:
            yield session
        return
    with Session(engine_of(db), expire_on_commit=False) as session:
        yield session


@contextmanager
def write_session(db: Any) -> Iterator[Session]:
    """A session whose transaction takes SQLite's write lock at BEGIN and commits on a clean exit."""
    if not isinstance(db, Engine) and hasattr(db, "session"):
        with db.session(write=True) as session:  # storage.Database: commit on exit, rollback on error
            yield session
        return
    engine = engine_of(db)
    with Session(engine.execution_options(**_write_options(engine)), expire_on_commit=False) as session:
        yield session
        session.commit()
