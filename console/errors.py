"""How the command line reports a user's mistake: one clear line, no traceback."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

stderr = Console(stderr=True, highlight=False)

EXIT_USER_ERROR = 2


def print_error(message: str) -> None:
    """Print ``error: message`` on stderr. The message is shown as is (a ``[postgres]`` or ``[N/A]`` in it
    is text, not rich markup) and never wrapped, so one message stays one line."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """Print ``error: message`` on stderr (``print_error``) and leave with ``code``."""
    print_error(message)
    raise typer.Exit(code)


def is_user_error(exc: BaseException) -> bool:
    """Errors our packages raise on purpose for bad input or an unreachable peer."""
    ours = type(exc).__module__.split(".")[0] == "spectower"
    user_error_types = ValueError | ConnectionError | LookupError | PermissionError
    return ours and isinstance(exc, user_error_types)


def strict_json(obj: Any, *, indent: int | None = 2) -> str:
    """``obj`` as strictly valid JSON for ``--json`` output: NaN and +-Infinity (which Python's json
    writes as bare NaN / Infinity, which no JSON parser accepts) become null; other objects their str."""
    # imported here: every command imports this module, and spectower.storage brings sqlmodel (seconds)
    from spectower.storage.files import finite_or_null

    return json.dumps(finite_or_null(obj), indent=indent, allow_nan=False, default=str)
