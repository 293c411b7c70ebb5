"""Server-sent events as the SSE spec defines them.

Lines end only at LF, CRLF or CR. ``httpx.Response.aiter_lines()`` splits on every ``str.splitlines``
break (U+2028, U+0085, ...), and generated text can contain those characters unescaped (orjson does not
escape them), which cuts a JSON payload in half: seen on a real SGLang server. ``httpx-sse`` splits as the
spec says, so every stream goes through it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
from httpx_sse import EventSource, SSEError

DONE_MARKER = "[DONE]"
# The longest line a stream may send: SGLang's native stream repeats the whole text and ids so far in each
# event, so a long answer's lines are large, but far below this; a line past it is a broken peer.
DEFAULT_MAX_LINE_CHARS = 16 * 1024 * 1024


class StreamFormatError(ValueError):
    """A stream that is not SSE or whose event data is not JSON."""


class _LineCapped:
    """The response as ``EventSource`` reads it (its headers and ``aiter_text``), with the characters since
    the last line break bounded: ``httpx-sse`` buffers a line until it ends, and a peer that never ends
    one would grow that buffer without limit."""

    def __init__(self, response: httpx.Response, max_line_chars: int) -> None:
        self._response = response
        self._max = max_line_chars
        self.headers = response.headers

    async def aiter_text(self) -> AsyncIterator[str]:
        pending = 0
        async for text in self._response.aiter_text():
            cut = max(text.rfind("\n"), text.rfind("\r"))
            pending = pending + len(text) if cut < 0 else len(text) - cut - 1
            if pending > self._max:
                raise StreamFormatError(f"a stream line is longer than {self._max} characters")
            yield text


async def aiter_json_events(
    response: httpx.Response, max_line_chars: int = DEFAULT_MAX_LINE_CHARS
) -> AsyncIterator[dict[str, Any]]:
    """Yield each event's data decoded as JSON, stopping at ``data: [DONE]``; a line longer than
    ``max_line_chars`` is a ``StreamFormatError``."""
    capped = cast(httpx.Response, _LineCapped(response, max_line_chars))
    try:
        async for event in EventSource(capped).aiter_sse():
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
