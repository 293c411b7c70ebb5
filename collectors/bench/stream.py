"""One streamed request against SGLang's OpenAI-compatible or native API, timed chunk by chunk."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from .prompts import Prompt
from .records import RequestRecord
from .sse import aiter_json_events

Api = Literal["openai", "generate"]
API_CHOICES: tuple[Api, ...] = ("openai", "generate")
COMPLETIONS_PATH = "/v1/completions"
GENERATE_PATH = "/generate"
DEFAULT_DEADLINE_S = 600.0  # a whole request, when neither the caller nor its client says
ERROR_HEAD_BYTES = 4096  # of an error answer, read for its message
SSE_CONTENT_TYPE = "text/event-stream"


@dataclass(frozen=True)
class RequestShape:
    api: Api
    output_len: int
    model: str = "default"


def request_body(
    prompt: Prompt, shape: RequestShape, output_len: int | None = None
) -> tuple[str, dict[str, Any]]:
    """(path, JSON body). ``ignore_eos`` makes every request produce exactly ``output_len`` tokens."""
    max_tokens = output_len if output_len is not None else shape.output_len
    if shape.api == "generate":
        return GENERATE_PATH, {
            "input_ids": prompt.input_ids,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True},
            "stream": True,
        }
    return COMPLETIONS_PATH, {
        "model": shape.model,
        "prompt": prompt.text,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        # continuous_usage_stats: SGLang then reports the running token count in every chunk, so a chunk
        # that carries several speculated tokens is counted right; without it the final usage chunk is used.
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


async def stream_request(
    client: httpx.AsyncClient,
    prompt: Prompt,
    shape: RequestShape,
    *,
    warmup: bool = False,
    output_len: int | None = None,
    record: RequestRecord | None = None,
    deadline_s: float | None = None,
) -> RequestRecord:
    """Send one streaming request and fill a ``RequestRecord``; errors are recorded, not raised.

    ``record`` may be passed in so that a caller who cancels the task still holds what arrived so far.
    ``deadline_s`` bounds the whole request (connect to the last event); None: the client's read timeout,
    the request timeout its caller configured (httpx applies that per read only, so a stream that keeps
    trickling would never end without this).
    """
    path, body = request_body(prompt, shape, output_len)
    rec = record if record is not None else RequestRecord(index=prompt.index, start=time.perf_counter())
    rec.start = time.perf_counter()
    rec.warmup = warmup
    deadline = deadline_s if deadline_s is not None else (client.timeout.read or DEFAULT_DEADLINE_S)
    try:
        async with (
            asyncio.timeout(deadline),
            client.stream("POST", path, json=body, headers={"Accept": SSE_CONTENT_TYPE}) as resp,
        ):
            if resp.status_code != 200:
                rec.error = f"HTTP {resp.status_code}: {await _head(resp)}"
                return rec
            if shape.api == "generate":
                await _consume_generate(resp, rec)
            else:
                await _consume_openai(resp, rec)
    except TimeoutError:
        rec.error = f"no complete answer within {deadline:g}s"
        return rec
    except (httpx.HTTPError, ValueError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
        return rec
    except Exception as exc:  # an event shaped unlike SGLang's: this request failed, the run goes on
        rec.error = f"unexpected stream content ({type(exc).__name__}: {exc})"
        return rec
    end = time.perf_counter()
    rec.e2e_s = end - rec.start
    rec.success = rec.error is None and rec.output_tokens > 0
    if rec.success and rec.ttft_s is None:
        rec.ttft_s = rec.e2e_s
    return rec


async def _head(resp: httpx.Response) -> str:
    """The start of an error answer (``ERROR_HEAD_BYTES`` at most read, whatever its length)."""
    got = b""
    async for chunk in resp.aiter_bytes():
        got += chunk
        if len(got) >= ERROR_HEAD_BYTES:
            break
    return got[:ERROR_HEAD_BYTES].decode("utf-8", "replace")


def _count(value: object) -> int | None:
    """A token count as sent, or None when it is not one (a bool, a float, a string)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _note_chunk(rec: RequestRecord, total_tokens: int) -> None:
    now = time.perf_counter()
    new = total_tokens - rec.output_tokens
    if new <= 0:
        return
    if rec.ttft_s is None:
        rec.ttft_s = now - rec.start
    rec.chunk_times.append(now)
    rec.chunk_tokens.append(new)
    rec.output_tokens = total_tokens


async def _events(
    resp: httpx.Response, rec: RequestRecord, section: str
) -> AsyncIterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each JSON event of the stream with its ``section`` (``meta_info``, ``usage``): a dict, empty where the
    event has none. An error event ends the stream, its message in ``rec.error``."""
    async for event in aiter_json_events(resp):
        if "error" in event:
            rec.error = f"server error: {event['error']}"
            return
        part = event.get(section)
        yield event, part if isinstance(part, dict) else {}


async def _consume_generate(resp: httpx.Response, rec: RequestRecord) -> None:
    async for event, meta in _events(resp, rec, "meta_info"):
        completion = _count(meta.get("completion_tokens"))
        if completion is None:
            ids = event.get("output_ids")
            completion = len(ids) if isinstance(ids, list) else rec.output_tokens
        _note_chunk(rec, completion)
        prompt_tokens, verify_ct = _count(meta.get("prompt_tokens")), _count(meta.get("spec_verify_ct"))
        if prompt_tokens is not None:
            rec.input_tokens = prompt_tokens
        if verify_ct is not None:
            rec.spec_verify_ct = verify_ct


async def _consume_openai(resp: httpx.Response, rec: RequestRecord) -> None:
    # With continuous_usage_stats (real SGLang supports it) every text chunk carries the running completion
    # count. A server without it only reports the total in the final usage chunk: each text chunk is then
    # counted as one token while streaming, and the total is spread evenly over the chunks at the end
    # (with speculation one chunk carries several tokens, about the same number each step).
    per_chunk_usage = False
    final_total: int | None = None
    async for event, usage in _events(resp, rec, "usage"):
        choices = event.get("choices")
        has_text = isinstance(choices, list) and any(_has_text(c) for c in choices)
        total, prompt_tokens = _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens"))
        if prompt_tokens is not None:
            rec.input_tokens = prompt_tokens
        if total is not None and has_text:
            per_chunk_usage = True
            _note_chunk(rec, total)
        elif total is not None:
            final_total = total
        elif has_text:
            _note_chunk(rec, rec.output_tokens + 1)
    if final_total is None or final_total == rec.output_tokens:
        return
    if not rec.chunk_times:
        _note_chunk(rec, final_total)
    elif per_chunk_usage:
        rec.chunk_tokens[-1] += final_total - rec.output_tokens
        rec.output_tokens = final_total
    else:
        rec.chunk_tokens = spread(final_total, len(rec.chunk_times))
        rec.output_tokens = final_total


def _has_text(choice: object) -> bool:
    """Whether an OpenAI stream choice carries text (a completion's ``text`` or a chat ``delta``)."""
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    return bool(choice.get("text") or (isinstance(delta, dict) and delta.get("content")))


def spread(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal non-negative integers (the first chunks get the remainder)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
