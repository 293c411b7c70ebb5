"""Server-sent events as the SSE spec defines them.

Lines end only at LF, CRLF or CR. ``httpx.Response.aiter_lines()`` splits on every ``str.splitlines``
break (U+2028, U+0085, ...), and generated text can contain those characters unescaped (orjson does not
escape them), which cuts a JSON payload in half: seen on a real SGLang server. ``httpx-sse`` splits as the
spec says, so every stream goes through it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError

DONE_MARKER = "[DONE]"


class StreamFormatError(ValueError):
    """A stream that is not SSE or whose event data is not JSON."""


async def aiter_json_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Yield each event's data decoded as JSON, stopping at ``data: [DONE]``."""
    try:
        async for event in EventSource(response).aiter_sse():
            data = event.data
            if not data:
                continue
            if data == DONE_MARKER:
                return
            try:
                payload = json.loads(data)
            except json.JSONDecodeError as exc:
                raise StreamFormatError(f"SSE event data is not JSON ({exc.msg}): {data[:120]!r}") from None
            if not isinstance(payload, dict):
                raise StreamFormatError(f"SSE event data is not a JSON object: {data[:120]!r}")
            yield payload
    except SSEError as exc:
        raise StreamFormatError(str(exc)) from None
