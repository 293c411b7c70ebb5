"""One streamed request against SGLang's OpenAI-compatible or native API, timed chunk by chunk."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from spectower.collectors.bench.prompts import Prompt
from spectower.collectors.bench.records import RequestRecord
from spectower.collectors.bench.sse import aiter_json_events

Api = Literal["openai", "generate"]
API_CHOICES: tuple[Api, ...] = ("openai", "generate")
COMPLETIONS_PATH = "/v1/completions"
GENERATE_PATH = "/generate"


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
) -> RequestRecord:
    """Send one streaming request and fill a ``RequestRecord``; errors are recorded, not raised.

    ``record`` may be passed in so that a caller who cancels the task still holds what arrived so far.
    """
    path, body = request_body(prompt, shape, output_len)
    rec = record if record is not None else RequestRecord(index=prompt.index, start=time.perf_counter())
    rec.start = time.perf_counter()
    rec.warmup = warmup
    try:
        async with client.stream("POST", path, json=body, headers={"Accept": "text/event-stream"}) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", "replace")
                rec.error = f"HTTP {resp.status_code}: {text[:200]}"
                return rec
            if shape.api == "generate":
                await _consume_generate(resp, rec)
            else:
                await _consume_openai(resp, rec)
    except (httpx.HTTPError, ValueError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"
        return rec
    end = time.perf_counter()
    rec.e2e_s = end - rec.start
    rec.success = rec.error is None and rec.output_tokens > 0
    if rec.success and rec.ttft_s is None:
        rec.ttft_s = rec.e2e_s
    return rec


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


async def _consume_generate(resp: httpx.Response, rec: RequestRecord) -> None:
    async for event in aiter_json_events(resp):
        if "error" in event:
            rec.error = f"server error: {event['error']}"
            return
        meta = event.get("meta_info") or {}
        completion = meta.get("completion_tokens")
        if completion is None:
            ids = event.get("output_ids")
            completion = len(ids) if isinstance(ids, list) else rec.output_tokens
        _note_chunk(rec, int(completion))
        if isinstance(meta.get("prompt_tokens"), int):
            rec.input_tokens = meta["prompt_tokens"]
        if isinstance(meta.get("spec_verify_ct"), int):
            rec.spec_verify_ct = meta["spec_verify_ct"]


async def _consume_openai(resp: httpx.Response, rec: RequestRecord) -> None:
    # With continuous_usage_stats (real SGLang supports it) every text chunk carries the running completion
    # count. A server without it only reports the total in the final usage chunk: each text chunk is then
    # counted as one token while streaming, and the total is spread evenly over the chunks at the end
    # (with speculation one chunk carries several tokens, about the same number each step).
    per_chunk_usage = False
    final_total: int | None = None
    async for event in aiter_json_events(resp):
        if "error" in event:
            rec.error = f"server error: {event['error']}"
            return
        usage = event.get("usage")
        choices = event.get("choices") or []
        has_text = any((c.get("text") or (c.get("delta") or {}).get("content")) for c in choices)
        total = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            rec.input_tokens = usage["prompt_tokens"]
        if isinstance(total, int) and has_text:
            per_chunk_usage = True
            _note_chunk(rec, total)
        elif isinstance(total, int):
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


def spread(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal non-negative integers (the first chunks get the remainder)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
