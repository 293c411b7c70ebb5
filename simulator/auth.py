"""SGLang's HTTP auth rules (docs/sglang-reference.md §4), as one pure decision function plus an ASGI wrapper.

- Always open: paths starting with ``/health`` or ``/metrics`` (SGLang matches by prefix), and ``/ready``.
- Inference and read endpoints (NORMAL): need ``--api-key`` when it is set.
- ADMIN_OPTIONAL endpoints (``/set_internal_state``, ``/flush_cache``, ...): open when no key is
  configured; need the api key when only it is set; need the admin key when that is set.
Keys travel as ``Authorization: Bearer KEY``. A refusal is HTTP 401 ``{"error": "Unauthorized"}``.
"""

from __future__ import annotations

import hmac
from enum import Enum

OPEN_PREFIXES = ("/health", "/metrics")
OPEN_PATHS = frozenset({"/ready"})
# SGLang's ADMIN_OPTIONAL endpoints (those the simulator answers, and more so that probes are refused alike).
ADMIN_OPTIONAL_PATHS = frozenset(
    {
        "/set_internal_state",
        "/flush_cache",
        "/pause_generation",
        "/continue_generation",
        "/start_profile",
        "/stop_profile",
        "/abort_request",
        "/slow_down",
        "/freeze_gc",
        "/configure_logging",
        "/update_weights_from_disk",
        "/update_weight_version",
        "/release_memory_occupation",
        "/resume_memory_occupation",
        "/load_lora_adapter",
        "/unload_lora_adapter",
    }
)
UNAUTHORIZED_BODY = b'{"error":"Unauthorized"}'


class AuthLevel(Enum):
    OPEN = "open"
    NORMAL = "normal"
    ADMIN_OPTIONAL = "admin_optional"


def auth_level(path: str) -> AuthLevel:
    if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
        return AuthLevel.OPEN
    if path in ADMIN_OPTIONAL_PATHS:
        return AuthLevel.ADMIN_OPTIONAL
    return AuthLevel.NORMAL


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    # As SGLang: "<scheme> <token>", scheme case-insensitive, the token compared verbatim.
    scheme, sep, token = authorization.partition(" ")
    if not sep or scheme.lower() != "bearer" or not token:
        return None
    return token


def _matches(token: str | None, key: str) -> bool:
    return token is not None and hmac.compare_digest(token.encode(), key.encode())


def is_allowed(path: str, authorization: str | None, api_key: str | None, admin_api_key: str | None) -> bool:
    level = auth_level(path)
    if level is AuthLevel.OPEN:
        return True
    token = bearer_token(authorization)
    if level is AuthLevel.ADMIN_OPTIONAL:
        if admin_api_key:
            return _matches(token, admin_api_key)
        if api_key:
            return _matches(token, api_key)
        return True
    if api_key:
        return _matches(token, api_key)
    return True
