"""How the command line reports a user's mistake: one clear line, no traceback."""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

stderr = Console(stderr=True, highlight=False)

EXIT_USER_ERROR = 2


def fail(message: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """Print ``error: message`` on stderr and leave with ``code``. The message is shown as is (a
    ``[postgres]`` or ``[N/A]`` in it is text, not rich markup)."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    raise typer.Exit(code)


def is_user_error(exc: BaseException) -> bool:
    """Errors our packages raise on purpose for bad input or an unreachable peer."""
    ours = type(exc).__module__.split(".")[0] == "spectower"
    user_error_types = ValueError | ConnectionError | LookupError | PermissionError
    return ours and isinstance(exc, user_error_types)


def strict_json(obj: Any, *, indent: int | None = 2) -> str:
    """``obj`` as strictly valid JSON for ``--json`` output: NaN and +-Infinity (which Python's json
    writes as bare NaN / Infinity, which no JSON parser accepts) become null; other objects their str."""
    return json.dumps(_finite(obj), indent=indent, allow_nan=False, default=str)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
