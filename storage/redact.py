"""Secrets never reach the database: every stored copy of a server's /server_info goes through here.

A real SGLang /server_info lists every resolved server argument, ``admin_api_key`` and ``api_key``
included (seen on a real 0.5.17 server), and ``launch_command`` repeats the ``--api-key`` flags.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

REDACTED = "<redacted>"
SECRET_KEY_RE = re.compile(
    r"(^|_)(api_key|password|passphrase|secret|token_secret|auth_token|private_key)$", re.IGNORECASE
)
# keys whose string value is a token (hf_token, access_token, token): numbers under such names are counts
SECRET_TOKEN_KEY_RE = re.compile(r"(^|_)token$", re.IGNORECASE)
_FLAGS = r"--(?:admin-)?api-key|--ssl-keyfile-password|--hf-token|--token|--access-token|--password"
# the value: a quoted string (spaces and escaped quotes inside), or everything up to the next space
SECRET_FLAG_RE = re.compile(rf"({_FLAGS})(=|\s+)('(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|\S+)")
SECRET_FLAG_NAMES = frozenset(_FLAGS.replace("(?:admin-)?", "").split("|")) | {"--admin-api-key"}


def redact(obj: Any) -> Any:
    """A copy with every secret value replaced (keys named like api_key/password; --api-key flags)."""
    if isinstance(obj, dict):
        # Copied whole (in C), then only what may change is visited: a /server_info is ~1 000 keys, read
        # every few seconds per server, nearly all plain names with numbers or short strings.
        out = dict(obj)
        for k, v in obj.items():
            if isinstance(v, str):
                if "--" in v:  # launch_command, or any other string carrying a command line
                    out[k] = redact_flags(v)
            elif isinstance(v, _CONTAINERS):
                out[k] = redact(v)
        for k in _named_secret(tuple(obj)):
            if _is_secret(k, obj[k]):
                out[k] = REDACTED
        return out
    if isinstance(obj, list):
        # an argv list: ["--api-key", "KEY"] / ["--api-key=KEY"]
        items: list[Any] = []
        hide_next = False
        for v in obj:
            if hide_next and isinstance(v, str):
                items.append(REDACTED)
                hide_next = False
                continue
            hide_next = isinstance(v, str) and v in SECRET_FLAG_NAMES
            items.append(redact_flags(v) if isinstance(v, str) else redact(v))
        return items
    return obj


_CONTAINERS = (dict, list)


@functools.lru_cache(maxsize=256)
def _named_secret(keys: tuple[Any, ...]) -> tuple[str, ...]:
    """The keys of a dict whose names say their values may be secrets (a server answers the same key set
    every time: worked out once per set)."""
    return tuple(k for k in keys if isinstance(k, str) and _key_kind(k) != _PLAIN)


def _is_secret(key: Any, value: Any) -> bool:
    if not isinstance(key, str):
        return False
    kind = _key_kind(key)
    if kind == _SECRET and value not in (None, "", [], {}):
        return True
    return kind == _TOKEN and isinstance(value, str) and bool(value)


_PLAIN, _SECRET, _TOKEN = 0, 1, 2


@functools.lru_cache(maxsize=4096)
def _key_kind(key: str) -> int:
    """What a key's name says of its value (a /server_info repeats the same few hundred keys every read, so
    the collector asks these two patterns once per name, not once per key per read)."""
    if SECRET_KEY_RE.search(key):
        return _SECRET
    return _TOKEN if SECRET_TOKEN_KEY_RE.search(key) else _PLAIN


def redact_flags(command: str) -> str:
    if "--" not in command:  # every flag it hides starts with --
        return command
    return SECRET_FLAG_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", command)


def redact_json_text(text: str | None) -> str | None:
    """The same for a JSON document kept as text (BenchRun.server_info_json); non-JSON is kept as is."""
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return redact_flags(text)
    return json.dumps(redact(doc), allow_nan=True)
