"""The two keys of an SGLang server, together: the admin key (for ``/set_internal_state``) and the API key
(for ``--api-key`` servers), read by the one key reader (``collectors.auth``: environment or a one-line file).

Keys never reach logs, the database or an exception message: errors name the variable or the file, not
the value, and ``Credentials`` never prints one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..collectors.auth import CredentialError, load_admin_key, load_api_key

__all__ = ["CredentialError", "Credentials", "load_admin_key", "load_api_key", "load_credentials"]


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


def load_credentials(env: Mapping[str, str] | None = None) -> Credentials:
    return Credentials(admin_key=load_admin_key(env), api_key=load_api_key(env))
