"""The keys for SGLang servers, and how they travel: from the environment or a file, never the CLI.

The one key reader of spectower: the collector and the load generators (the API key of an ``--api-key``
server), the knob client and the sweeps (the admin key, control/credentials.py), the console (its admin
key file) all read through ``read_key``. A value in the environment wins over a file, so a one-off override
needs no file edit; a key file must hold exactly one line (a second line is refused, not silently dropped).
A key is sent as ``Authorization: Bearer KEY`` (``auth_headers``); it never reaches a log, an error
message (errors name the variable or the file, not the value) or storage.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..storage.files import MAX_KEY_FILE_BYTES, FileReadError, read_text_capped

ADMIN_KEY_ENV = "SPECTOWER_ADMIN_KEY"
ADMIN_KEY_FILE_ENV = "SPECTOWER_ADMIN_KEY_FILE"
API_KEY_ENV = "SPECTOWER_API_KEY"
API_KEY_FILE_ENV = "SPECTOWER_API_KEY_FILE"


class CredentialError(ValueError):
    """A key file is missing, unreadable, empty or more than one line (the message names its setting)."""


def read_key_file(path: str | os.PathLike[str], source: str) -> str:
    """The key in the file at ``path``: one non-empty line. ``source`` names the setting that gave the path
    (``SPECTOWER_ADMIN_KEY_FILE``, a Streamlit secret) in every error."""
    where = Path(path).expanduser()
    try:
        text = read_text_capped(where, MAX_KEY_FILE_BYTES)
    except FileReadError as exc:
        raise CredentialError(f"{source}: {exc}: {where}") from None
    key = text.strip()
    if not key:
        raise CredentialError(f"{source}: the key file {where} is empty")
    if "\n" in key:
        raise CredentialError(f"{source}: the key file {where} must hold one line (the key)")
    return key


def read_key(value_var: str, file_var: str, env: Mapping[str, str] | None = None) -> str | None:
    """``$value_var`` if set, else the key in the file ``$file_var`` names, else None."""
    env = os.environ if env is None else env
    value = env.get(value_var)
    if value is not None and value.strip():
        return value.strip()
    name = env.get(file_var)
    return read_key_file(name, file_var) if name else None


def load_api_key(env: Mapping[str, str] | None = None) -> str | None:
    """The API key from ``SPECTOWER_API_KEY`` or the file named by ``SPECTOWER_API_KEY_FILE``."""
    return read_key(API_KEY_ENV, API_KEY_FILE_ENV, env)


def load_admin_key(env: Mapping[str, str] | None = None) -> str | None:
    """The admin key from ``SPECTOWER_ADMIN_KEY`` or the file named by ``SPECTOWER_ADMIN_KEY_FILE``."""
    return read_key(ADMIN_KEY_ENV, ADMIN_KEY_FILE_ENV, env)


def auth_headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}
