"""Where the console reads from and who may act: database URL, refresh rates, time ranges, credentials.

Everything an operator can configure comes from the environment (set by ``spectower console``) or from
Streamlit secrets; nothing secret is ever read from a command line argument or written to the database.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_DB_URL = "SPECTOWER_DB"
ENV_ADMIN_KEY = "SPECTOWER_ADMIN_KEY"
ENV_ADMIN_KEY_FILE = "SPECTOWER_ADMIN_KEY_FILE"
ENV_OPERATOR = "SPECTOWER_OPERATOR"
ENV_REFRESH_S = "SPECTOWER_CONSOLE_REFRESH_S"

DEFAULT_REFRESH_S = 5.0  # live fragments re-read storage this often (the collector samples at ~1 Hz)
DEFAULT_STALE_AFTER_S = 15.0  # a newest sample older than this is shown as stale, not as "now"
DEFAULT_MAX_POINTS = 600  # every time-series chart reads at most this many buckets per line
DEFAULT_TIME_RANGE = "1 h"
TIME_RANGES_S: dict[str, float] = {
    "15 min": 15 * 60.0,
    "1 h": 3600.0,
    "6 h": 6 * 3600.0,
    "24 h": 24 * 3600.0,
    "7 d": 7 * 86400.0,
}
COLLECT_HINT = "spectower collect --server http://127.0.0.1:30000 --gpu nvml --db {db} --interval 1s"


def db_url() -> str:
    """The database the console reads: ``$SPECTOWER_DB`` (set by ``spectower console --db``).

    Same rule as every other command (storage.default_db_url): plain paths become sqlite URLs.
    """
    from spectower.storage import default_db_url

    return default_db_url(os.environ.get(ENV_DB_URL) or None)


def refresh_s() -> float:
    raw = os.environ.get(ENV_REFRESH_S)
    try:
        return max(0.5, float(raw)) if raw else DEFAULT_REFRESH_S
    except ValueError:
        return DEFAULT_REFRESH_S


def collect_hint(url: str | None = None) -> str:
    return COLLECT_HINT.format(db=url or db_url())


@dataclass(frozen=True)
class Operator:
    """Who acts from the Control page, with the admin key the knob client needs."""

    name: str
    admin_key: str

    @property
    def actor(self) -> str:
        return f"operator:{self.name}"

    def __repr__(self) -> str:  # never print the key
        return f"Operator(name={self.name!r}, admin_key=<hidden>)"


@dataclass(frozen=True)
class CredentialStatus:
    operator: Operator | None
    why_not: str  # empty when operator is set


def _secrets_section(secrets: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if secrets is None:
        return {}
    try:  # `not secrets` would already raise: Streamlit parses secrets.toml lazily
        section = secrets.get("spectower")
    except Exception:  # Streamlit raises when no secrets.toml exists
        return {}
    return section if isinstance(section, Mapping) else {}


def operator_credentials(
    env: Mapping[str, str] | None = None, secrets: Mapping[str, Any] | None = None
) -> CredentialStatus:
    """The operator identity and admin key, from env first, then ``[spectower]`` in Streamlit secrets.

    Secrets keys: ``admin_key`` or ``admin_key_file``, and ``operator``.
    """
    env = os.environ if env is None else env
    section = _secrets_section(secrets)
    key = env.get(ENV_ADMIN_KEY) or None
    key_file = env.get(ENV_ADMIN_KEY_FILE) or None
    if key is None and key_file is None:
        key = section.get("admin_key") or None
        key_file = section.get("admin_key_file") or None
    if key is None and key_file is not None:
        try:
            key = Path(key_file).read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            return CredentialStatus(None, f"the admin key file {key_file} cannot be read ({exc.strerror})")
        if key is None:
            return CredentialStatus(None, f"the admin key file {key_file} is empty")
    if key is None:
        return CredentialStatus(
            None,
            f"no admin key: set {ENV_ADMIN_KEY_FILE} (or {ENV_ADMIN_KEY}) and {ENV_OPERATOR} before "
            "`spectower console`, or add [spectower] admin_key_file / operator to .streamlit/secrets.toml",
        )
    name = env.get(ENV_OPERATOR) or section.get("operator") or None
    if not name:
        return CredentialStatus(
            None, f"no operator name: set {ENV_OPERATOR} (or [spectower] operator in Streamlit secrets)"
        )
    return CredentialStatus(Operator(name=str(name), admin_key=key), "")
