"""`spectower export ...` and `spectower import ...` (filled in by the storage issue)."""

from __future__ import annotations

import typer

export_app = typer.Typer(no_args_is_help=True, help="Export benchmark runs and samples.")
import_app = typer.Typer(no_args_is_help=True, help="Import benchmark histories.")
