"""`spectower collect` (filled in by the collectors issue)."""

from __future__ import annotations


def collect() -> None:
    """Run the collection daemon."""
    raise SystemExit(1)
