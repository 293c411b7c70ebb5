"""Where the keys for an SGLang server come from: the environment or a file, never the command line.

Keys never reach logs, the database or an exception message: errors name the variable or the file, not
the value. A value in the environment wins over a file so a one-off override needs no file edit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ADMIN_KEY_ENV = "SPECTOWER_ADMIN_KEY"
ADMIN_KEY_FILE_ENV = "SPECTOWER_ADMIN_KEY_FILE"
API_KEY_ENV = "SPECTOWER_API_KEY"
API_KEY_FILE_ENV = "SPECTOWER_API_KEY_FILE"


class CredentialError(ValueError):
    """A key file named in the environment is missing, unreadable or empty."""


@dataclass(frozen=True)
class Credentials:
    """The admin key (for ``/set_internal_state``) and the API key (for ``--api-key`` servers)."""

    admin_key: str | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # never print a key, even by accident in a debug line
        return (
            f"Credentials(admin_key={'set' if self.admin_key else 'unset'}, "
            f"api_key={'set' if self.api_key else 'unset'})"
        )


def _read_key(value_var: str, file_var: str, env: Mapping[str, str]) -> str | None:
    value = env.get(value_var)
    if value is not None and value.strip():
        return value.strip()
    file_name = env.get(file_var)
    if not file_name:
        return None
    path = Path(file_name).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CredentialError(f"{file_var} names a file that does not exist: {path}") from None
    except OSError as exc:
        raise CredentialError(f"{file_var}: cannot read {path}: {exc.strerror}") from None
    key = text.strip()
    if not key:
        raise CredentialError(f"{file_var}: the key file {path} is empty")
    if "\n" in key:
        raise CredentialError(f"{file_var}: the key file {path} must hold one line (the key)")
    return key


def load_admin_key(env: Mapping[str, str] | None = None) -> str | None:
    """The admin key from ``SPECTOWER_ADMIN_KEY`` or the file named by ``SPECTOWER_ADMIN_KEY_FILE``."""
    return _read_key(ADMIN_KEY_ENV, ADMIN_KEY_FILE_ENV, os.environ if env is None else env)


def load_api_key(env: Mapping[str, str] | None = None) -> str | None:
    """The API key from ``SPECTOWER_API_KEY`` or the file named by ``SPECTOWER_API_KEY_FILE``."""
    return _read_key(API_KEY_ENV, API_KEY_FILE_ENV, os.environ if env is None else env)


def load_credentials(env: Mapping[str, str] | None = None) -> Credentials:
    return Credentials(admin_key=load_admin_key(env), api_key=load_api_key(env))
