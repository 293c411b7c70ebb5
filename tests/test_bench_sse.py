"""SSE parsing as the spec says: U+2028 / U+0085 inside the JSON, and LF, CRLF, CR line ends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from spectower.collectors.bench.sse import StreamFormatError, aiter_json_events

# Generated text a real server streamed unescaped (orjson leaves these as raw characters).
TRICKY_TEXTS = ["a\u2028b", "c\u0085d", "\u2029e\u000bf\u000cg\u001c", "plain", "é\u2028ü"]


def _payload(line_end: str) -> bytes:
    parts = []
    for i, text in enumerate(TRICKY_TEXTS):
        data = json.dumps({"i": i, "text": text}, ensure_ascii=False)
        parts.append(f"data: {data}{line_end}{line_end}")
    parts.append(f": a comment{line_end}data: [DONE]{line_end}{line_end}")
    return "".join(parts).encode("utf-8")


def _chunked(body: bytes, size: int) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


async def _events(chunks: list[bytes]) -> list[dict]:
    async def stream() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sim") as client,
        client.stream("POST", "/generate") as resp,
    ):
        return [event async for event in aiter_json_events(resp)]


@pytest.mark.anyio
@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"], ids=["LF", "CRLF", "CR"])
@pytest.mark.parametrize("chunk_size", [1, 3, 7, 64, 100_000])
async def test_json_with_unicode_line_separators_survives(line_end: str, chunk_size: int) -> None:
    # chunk sizes 1 and 3 split inside multi-byte UTF-8 sequences and between CR and LF
    events = await _events(_chunked(_payload(line_end), chunk_size))
    assert [e["text"] for e in events] == TRICKY_TEXTS
    assert [e["i"] for e in events] == list(range(len(TRICKY_TEXTS)))


@pytest.mark.anyio
async def test_aiter_lines_would_have_cut_the_json() -> None:
    """The gotcha is real: httpx's line iterator splits on U+2028, which is why we use httpx-sse."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_payload("\n"))

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sim") as client,
        client.stream("GET", "/") as resp,
    ):
        lines = [line async for line in resp.aiter_lines() if line.startswith("data: {")]
    with pytest.raises(json.JSONDecodeError):
        for line in lines:
            json.loads(line.removeprefix("data: "))


@pytest.mark.anyio
async def test_stops_at_done_and_ignores_the_rest() -> None:
    body = b'data: {"a": 1}\n\ndata: [DONE]\n\ndata: {"a": 2}\n\n'
    assert await _events([body]) == [{"a": 1}]


@pytest.mark.anyio
async def test_multi_line_data_joins_with_newline() -> None:
    body = b'data: {"a":\ndata: 1}\n\n'
    assert await _events([body]) == [{"a": 1}]


@pytest.mark.anyio
async def test_non_json_data_is_a_clear_error() -> None:
    with pytest.raises(StreamFormatError, match="not JSON"):
        await _events([b"data: {half\n\n"])


@pytest.mark.anyio
async def test_wrong_content_type_is_a_clear_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=b"{}")

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sim") as client,
        client.stream("GET", "/") as resp,
    ):
        with pytest.raises(StreamFormatError, match="text/event-stream"):
            [e async for e in aiter_json_events(resp)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
