"""How the command line reports a user's mistake: one clear line, no traceback."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

stderr = Console(stderr=True, highlight=False)

EXIT_USER_ERROR = 2


def fail(message: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """Print ``error: message`` on stderr and leave with ``code``."""
    stderr.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def is_user_error(exc: BaseException) -> bool:
    """Errors our packages raise on purpose for bad input or an unreachable peer."""
    ours = type(exc).__module__.split(".")[0] == "spectower"
    user_error_types = ValueError | ConnectionError | LookupError | PermissionError
    return ours and isinstance(exc, user_error_types)
