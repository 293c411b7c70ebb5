"""How the command line reports a user's mistake: one clear line, no traceback."""

from __future__ import annotations

import json
from typing import Any

# The one ``error:`` line, ``fail`` (a command's own refusal) and the exit code are shared with the
# simulator's command line, which may not import the console; re-exported here, where commands look for them.
from spectower.cli_errors import EXIT_USER_ERROR, fail, is_user_error, print_error, stderr

__all__ = ["EXIT_USER_ERROR", "fail", "is_user_error", "print_error", "stderr", "strict_json"]


def strict_json(obj: Any, *, indent: int | None = 2) -> str:
    """``obj`` as strictly valid JSON for ``--json`` output: NaN and +-Infinity (which Python's json
    writes as bare NaN / Infinity, which no JSON parser accepts) become null; other objects their str."""
    # imported here: every command imports this module, and spectower.storage brings sqlmodel (seconds)
    from ..storage.files import finite_or_null

    return json.dumps(finite_or_null(obj), indent=indent, allow_nan=False, default=str)
