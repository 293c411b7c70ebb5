"""Secrets never reach the database: every stored copy of a server's /server_info goes through here.

A real SGLang /server_info lists every resolved server argument, ``admin_api_key`` and ``api_key``
included (seen on a real 0.5.17 server), and ``launch_command`` repeats the ``--api-key`` flags.
"""

from __future__ import annotations

import json
import re
from typing import Any

REDACTED = "<redacted>"
SECRET_KEY_RE = re.compile(r"(^|_)(api_key|password|secret|token_secret|auth_token)$")
SECRET_FLAG_RE = re.compile(r"(--(?:admin-)?api-key|--ssl-keyfile-password)(=|\s+)(\S+)")


def redact(obj: Any) -> Any:
    """A copy with every secret value replaced (keys named like api_key/password; --api-key flags)."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and SECRET_KEY_RE.search(k) and v not in (None, "", [], {}):
                out[k] = REDACTED
            elif k == "launch_command" and isinstance(v, str):
                out[k] = redact_flags(v)
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def redact_flags(command: str) -> str:
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
