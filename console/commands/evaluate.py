"""`spectower sim evaluate` (filled in by the control issue)."""

from __future__ import annotations

import typer


def evaluate() -> None:
    """Score a policy on a load trace in virtual time."""
    raise typer.Exit(1)
