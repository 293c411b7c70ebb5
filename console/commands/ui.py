"""`spectower console` (filled in by the console issue)."""

from __future__ import annotations


def console() -> None:
    """Serve the Streamlit console."""
    raise SystemExit(1)
