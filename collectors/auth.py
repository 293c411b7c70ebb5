"""The API key for ``--api-key`` protected SGLang servers: from the environment or a file, never the CLI.

Same variables as the control client (``SPECTOWER_API_KEY``, or ``SPECTOWER_API_KEY_FILE`` naming a file of
one line). The key is sent as ``Authorization: Bearer KEY``; it never reaches a log, an error or storage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

API_KEY_ENV = "SPECTOWER_API_KEY"
API_KEY_FILE_ENV = "SPECTOWER_API_KEY_FILE"


class ApiKeyError(ValueError):
    """The key file named in the environment is missing, unreadable or not one line."""


def load_api_key(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    value = env.get(API_KEY_ENV, "").strip()
    if value:
        return value
    name = env.get(API_KEY_FILE_ENV)
    if not name:
        return None
    path = Path(name).expanduser()
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ApiKeyError(f"{API_KEY_FILE_ENV}: cannot read {path}: {exc.strerror or exc}") from None
    if not text or "\n" in text:
        raise ApiKeyError(f"{API_KEY_FILE_ENV}: {path} must hold exactly one line (the key)")
    return text


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
