"""One streamed request -> RequestRecord, over MockTransport (unit level) and a real captured stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from spectower.collectors.bench.prompts import PromptFactory
from spectower.collectors.bench.stream import RequestShape, request_body, stream_request


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _sse(events: list[object]) -> bytes:
    out = []
    for e in events:
        out.append(f"data: {e if isinstance(e, str) else json.dumps(e, ensure_ascii=False)}\n\n")
    return "".join(out).encode()


async def _run(body: bytes, shape: RequestShape, status: int = 200, seen: list | None = None):
    async def stream() -> AsyncIterator[bytes]:
        # one event per chunk, like a server flushing each step
        for part in body.split(b"\n\n"):
            if part:
                yield part + b"\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append((request.url.path, json.loads(request.content)))
        if status != 200:
            return httpx.Response(status, json={"error": "nope"})
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    prompts = PromptFactory(8, as_text=shape.api == "openai", seed=3)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sim") as client:
        return await stream_request(client, prompts(0), shape)


@pytest.mark.anyio
async def test_real_generate_stream(real_data: Path) -> None:
    body = (real_data / "sglang-0.5.17-h200" / "generate_stream.txt").read_bytes()
    rec = await _run(body, RequestShape(api="generate", output_len=24))
    assert rec.success and rec.error is None
    assert rec.output_tokens == 24
    assert rec.input_tokens == 2
    assert rec.spec_verify_ct == 23
    assert sum(rec.chunk_tokens) == 24
    assert rec.ttft_s is not None and rec.e2e_s is not None and 0 <= rec.ttft_s <= rec.e2e_s
    assert len(rec.itl_s) == len(rec.chunk_times) - 1


@pytest.mark.anyio
async def test_generate_counts_several_tokens_per_chunk() -> None:
    events = [
        {"text": "a", "meta_info": {"completion_tokens": 1, "prompt_tokens": 8}},
        {"text": "abc", "meta_info": {"completion_tokens": 4, "prompt_tokens": 8}},
        {"text": "abcdef", "meta_info": {"completion_tokens": 6, "prompt_tokens": 8, "spec_verify_ct": 2}},
        "[DONE]",
    ]
    seen: list = []
    rec = await _run(_sse(events), RequestShape(api="generate", output_len=6), seen=seen)
    assert rec.chunk_tokens == [1, 3, 2]
    assert rec.output_tokens == 6 and rec.spec_verify_ct == 2
    assert rec.tpot_s == pytest.approx((rec.e2e_s - rec.ttft_s) / 5)
    path, body = seen[0]
    assert path == "/generate"
    assert len(body["input_ids"]) == 8 and body["stream"] is True
    assert body["sampling_params"] == {"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True}


@pytest.mark.anyio
async def test_openai_with_continuous_usage() -> None:
    def chunk(text: str, done: int) -> dict:
        return {
            "choices": [{"index": 0, "text": text, "finish_reason": None}],
            "usage": {"prompt_tokens": 9, "completion_tokens": done},
        }

    events = [
        chunk("x", 1),
        chunk("yy\u2028", 3),
        chunk("z", 5),
        {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}},
        "[DONE]",
    ]
    seen: list = []
    rec = await _run(_sse(events), RequestShape(api="openai", output_len=5, model="m"), seen=seen)
    assert rec.success
    assert rec.chunk_tokens == [1, 2, 2] and rec.output_tokens == 5 and rec.input_tokens == 9
    path, body = seen[0]
    assert path == "/v1/completions" and body["model"] == "m" and body["max_tokens"] == 5
    assert body["stream_options"]["include_usage"] is True and isinstance(body["prompt"], str)


@pytest.mark.anyio
async def test_openai_without_per_chunk_usage_uses_the_final_total() -> None:
    events = [{"choices": [{"text": t}]} for t in ("a", "b", "c")]
    events.append({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 7}})
    rec = await _run(_sse([*events, "[DONE]"]), RequestShape(api="openai", output_len=7))
    assert rec.output_tokens == 7 and sum(rec.chunk_tokens) == 7 and len(rec.chunk_tokens) == 3


@pytest.mark.anyio
async def test_http_error_is_recorded_not_raised() -> None:
    rec = await _run(b"", RequestShape(api="openai", output_len=4), status=503)
    assert not rec.success and rec.error is not None and "503" in rec.error


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("api", "text_event"),
    [
        ("generate", {"text": "ab", "meta_info": {"completion_tokens": 2}}),
        ("openai", {"choices": [{"text": "ab"}], "usage": {"completion_tokens": 2}}),
    ],
)
async def test_server_error_event_is_recorded_and_ends_the_stream(api: str, text_event: dict) -> None:
    events = [{"error": {"message": "boom"}}, text_event, "[DONE]"]
    rec = await _run(_sse(events), RequestShape(api=api, output_len=4))
    assert not rec.success and "boom" in (rec.error or "") and rec.output_tokens == 0


@pytest.mark.anyio
async def test_events_shaped_unlike_sglangs_are_skipped_not_raised() -> None:
    # each of these raised out of stream_request before (AttributeError, OverflowError, TypeError) and
    # took a whole sweep down with it
    generate = [
        {"meta_info": "x"},
        "{\"meta_info\": {\"completion_tokens\": Infinity}}",
        {"meta_info": {"completion_tokens": [1], "prompt_tokens": True}},
        {"text": "ab", "meta_info": {"completion_tokens": 2}},
        "[DONE]",
    ]
    rec = await _run(_sse(generate), RequestShape(api="generate", output_len=2))
    assert rec.error is None and rec.output_tokens == 2 and rec.input_tokens != 1
    openai = [{"choices": [1, {"delta": "x"}], "usage": 5}, {"choices": [{"text": "a"}]}, "[DONE]"]
    rec = await _run(_sse(openai), RequestShape(api="openai", output_len=1))
    assert rec.error is None and rec.output_tokens == 1


@pytest.mark.anyio
async def test_a_line_that_never_ends_is_an_error_not_a_growing_buffer() -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield b"data: {\"text\": \""
        for _ in range(40):
            yield b"x" * (1 << 20)  # 40 MiB without a line break, past the 16 MiB line cap

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=endless())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sim") as client:
        rec = await stream_request(client, PromptFactory(8, as_text=False)(0), RequestShape("generate", 4))
    assert not rec.success and "longer than" in (rec.error or "")


@pytest.mark.anyio
async def test_a_stream_that_stops_sending_ends_at_the_deadline() -> None:
    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n\n'
        await never.wait()  # the server keeps the connection open and sends nothing more
        yield b""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stalled())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sim") as client:
        rec = await stream_request(client, PromptFactory(8, as_text=False)(0), RequestShape("generate", 4),
                                   deadline_s=0.2)  # fmt: skip
    assert not rec.success and rec.error == "no complete answer within 0.2s" and rec.output_tokens == 1


@pytest.mark.anyio
async def test_an_error_answer_is_read_only_as_far_as_its_head() -> None:
    pulled = []

    async def huge() -> AsyncIterator[bytes]:
        for i in range(1000):
            pulled.append(i)
            yield b"e" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=huge())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sim") as client:
        rec = await stream_request(client, PromptFactory(8, as_text=False)(0), RequestShape("generate", 4))
    assert rec.error is not None and rec.error.startswith("HTTP 500: eee") and len(rec.error) < 4200
    assert len(pulled) < 10


def test_prompts_are_seeded_and_sized() -> None:
    ids = PromptFactory(16, as_text=False, seed=5)
    assert ids(3) == PromptFactory(16, as_text=False, seed=5)(3)
    assert ids(3) != ids(4)
    assert len(ids(0).input_ids or []) == 16
    text = PromptFactory(10, as_text=True, seed=5)(0).text or ""
    assert len(text.split()) == 10
    path, body = request_body(ids(0), RequestShape(api="generate", output_len=3))
    assert path == "/generate" and body["input_ids"] == ids(0).input_ids
