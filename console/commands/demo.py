"""`spectower demo` (filled in by the demo issue)."""

from __future__ import annotations


def demo() -> None:
    """Run the whole thing locally against the simulator."""
    raise SystemExit(1)
