"""Where the console reads from and who may act: database URL, refresh rates, time ranges, credentials.

Everything an operator can configure comes from the environment (set by ``spectower console``) or from
Streamlit secrets; nothing secret is ever read from a command line argument or written to the database.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_DB_URL = "SPECTOWER_DB"
ENV_ADMIN_KEY = "SPECTOWER_ADMIN_KEY"
ENV_ADMIN_KEY_FILE = "SPECTOWER_ADMIN_KEY_FILE"
ENV_OPERATOR = "SPECTOWER_OPERATOR"
ENV_REFRESH_S = "SPECTOWER_CONSOLE_REFRESH_S"
# Who clicked: "shared" (SPECTOWER_OPERATOR, the local default), "oidc" (Streamlit's st.login / st.user,
# configured under [auth] in .streamlit/secrets.toml) or "header" (a trusted reverse proxy's header).
ENV_IDENTITY = "SPECTOWER_CONSOLE_IDENTITY"
ENV_IDENTITY_HEADER = "SPECTOWER_IDENTITY_HEADER"
ENV_OIDC_PROVIDER = "SPECTOWER_OIDC_PROVIDER"
ENV_ALLOWED_HOSTS = "SPECTOWER_CONSOLE_ALLOWED_HOSTS"
IDENTITY_MODES = ("shared", "oidc", "header")
DEFAULT_IDENTITY_HEADER = "X-Forwarded-User"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_NOT_ACTOR_CHARS = re.compile(r"[^A-Za-z0-9_.@+:-]")

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
    from ..storage import default_db_url

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
    login_needed: bool = False  # OIDC: nobody is signed in yet (the page offers st.login)
    identity: str = "shared"  # how the operator was identified


def allowed_hosts(bind_host: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The Host header values the console accepts (Streamlit's ``server.allowedHosts``): loopback, the
    address it binds (unless a wildcard), and ``SPECTOWER_CONSOLE_ALLOWED_HOSTS`` (comma-separated, for the
    name a reverse proxy serves it under). Anything else (a DNS-rebinding page) is refused."""
    env = os.environ if env is None else env
    hosts = list(LOOPBACK_HOSTS)
    if bind_host.strip() not in ("", "0.0.0.0", "::", "*"):
        hosts.append(bind_host.strip().strip("[]"))
    hosts.extend(h.strip() for h in (env.get(ENV_ALLOWED_HOSTS) or "").split(",") if h.strip())
    return list(dict.fromkeys(hosts))


def actor_name(raw: str) -> str:
    """An identity (an e-mail, a proxy's user name) as an audit actor name: 1-64 of ``A-Za-z0-9_.@+:-``."""
    return _NOT_ACTOR_CHARS.sub("_", raw.strip())[:64]


def identity_mode(env: Mapping[str, str], section: Mapping[str, Any]) -> str:
    mode = str(env.get(ENV_IDENTITY) or section.get("identity") or "shared").strip().lower()
    if mode not in IDENTITY_MODES:
        raise ValueError(f"{ENV_IDENTITY} must be one of {', '.join(IDENTITY_MODES)}, got {mode!r}")
    return mode


def _who(
    mode: str,
    env: Mapping[str, str],
    section: Mapping[str, Any],
    user: Mapping[str, Any] | None,
    headers: Mapping[str, str] | None,
) -> tuple[str | None, str, bool]:
    """(name, why not, login needed) for the configured identity mode."""
    if mode == "oidc":
        if not user or not user.get("is_logged_in"):
            return None, "sign in (OpenID Connect) to act; until then the page is read-only", True
        raw = user.get("email") or user.get("preferred_username") or user.get("sub") or user.get("name")
        if not raw:
            return None, "the identity provider returned no email, preferred_username or sub", False
        return actor_name(str(raw)), "", False
    if mode == "header":
        header = str(
            env.get(ENV_IDENTITY_HEADER) or section.get("identity_header") or DEFAULT_IDENTITY_HEADER
        )
        value = None
        for key, val in (headers or {}).items():
            if key.lower() == header.lower():
                value = val
        if not value or not str(value).strip():
            return None, f"the trusted proxy sent no {header} header (who is acting is unknown)", False
        return actor_name(str(value)), "", False
    name = env.get(ENV_OPERATOR) or section.get("operator") or None
    if not name:
        why = f"no operator name: set {ENV_OPERATOR} (or [spectower] operator in Streamlit secrets)"
        return None, why, False
    return str(name), "", False


def _secrets_section(secrets: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if secrets is None:
        return {}
    try:  # `not secrets` would already raise: Streamlit parses secrets.toml lazily
        section = secrets.get("spectower")
    except Exception:  # Streamlit raises when no secrets.toml exists
        return {}
    return section if isinstance(section, Mapping) else {}


def operator_credentials(
    env: Mapping[str, str] | None = None,
    secrets: Mapping[str, Any] | None = None,
    *,
    user: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> CredentialStatus:
    """Who acts, and the admin key, from env first, then ``[spectower]`` in Streamlit secrets.

    Secrets keys: ``admin_key`` or ``admin_key_file``, ``operator``, ``identity`` (shared / oidc / header)
    and ``identity_header``. ``user`` is Streamlit's ``st.user`` (OIDC), ``headers`` the request's headers
    (``st.context.headers``, for a trusted reverse proxy's identity header).
    """
    env = os.environ if env is None else env
    section = _secrets_section(secrets)
    try:
        mode = identity_mode(env, section)
    except ValueError as exc:
        return CredentialStatus(None, str(exc))
    key = env.get(ENV_ADMIN_KEY) or None
    key_file = env.get(ENV_ADMIN_KEY_FILE) or None
    source = ENV_ADMIN_KEY_FILE
    if key is None and key_file is None:
        key = section.get("admin_key") or None
        key_file = section.get("admin_key_file") or None
        source = "[spectower] admin_key_file"
    if key is None and key_file is not None:
        from ..collectors.auth import CredentialError, read_key_file

        try:  # the one key reader: one line, and errors that name the setting, never the key
            key = read_key_file(key_file, source)
        except CredentialError as exc:
            return CredentialStatus(None, str(exc))
    if key is None:
        return CredentialStatus(
            None,
            f"no admin key: set {ENV_ADMIN_KEY_FILE} (or {ENV_ADMIN_KEY}) and {ENV_OPERATOR} before "
            "`spectower console`, or add [spectower] admin_key_file / operator to .streamlit/secrets.toml",
        )
    name, why, login = _who(mode, env, section, user, headers)
    if not name:
        return CredentialStatus(None, why, login_needed=login, identity=mode)
    return CredentialStatus(Operator(name=name, admin_key=key), "", identity=mode)
