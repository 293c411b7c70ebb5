"""Integer bounds of the stored columns and the range check parsers apply where a value enters
(``int_or_none``), kept apart from ``models`` so that a parser checks integers without loading the
database layer (SQLModel, SQLAlchemy)."""

from __future__ import annotations

import math

# Integer columns: SQLite's INTEGER holds a signed 64-bit value, PostgreSQL's INTEGER a signed 32-bit one.
# Parsers range-check integers from outside where they enter (int_or_none), so that a value one backend
# cannot hold never reaches the writer (which would quarantine the row).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def int_or_none(value: object, *, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int | None:
    """``value`` as an int when it is an integer (or an integral finite float) within [lo, hi], else None.
    Booleans are not integers here. The default range fits every integer column on every backend."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if not isinstance(value, int):
        return None
    return value if lo <= value <= hi else None
