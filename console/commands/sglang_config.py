"""`spectower sglang-config` (filled in by the control issue)."""

from __future__ import annotations

import typer


def sglang_config() -> None:
    """Write SGLang's --speculative-adaptive-config for spectower and print the launch flags."""
    raise typer.Exit(1)
