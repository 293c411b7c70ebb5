"""`spectower control ...` (filled in by its issue)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="control commands")


def sglang_config() -> None:
    """Write SGLang's --speculative-adaptive-config for spectower and print the launch flags."""
    raise typer.Exit(1)
