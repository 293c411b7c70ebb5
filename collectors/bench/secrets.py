"""Keys come from the environment or a file named by it: never from a CLI argument, a log or the DB."""

from __future__ import annotations

import os
from pathlib import Path

ADMIN_KEY_ENV = "SPECTOWER_ADMIN_KEY"
API_KEY_ENV = "SPECTOWER_API_KEY"


def read_secret(env_name: str) -> str | None:
    """``$NAME`` if set, else the first line of the file ``$NAME_FILE``, else None."""
    value = os.environ.get(env_name)
    if value:
        return value.strip()
    path = os.environ.get(f"{env_name}_FILE")
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"{env_name}_FILE: cannot read {path!r} ({exc.strerror})") from None
    if not text:
        raise ValueError(f"{env_name}_FILE: {path!r} is empty")
    return text.splitlines()[0].strip()
