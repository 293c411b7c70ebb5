"""The closed loop: exactly C requests in flight, each new one sent the moment one finishes.

This is what SGLang's client does with ``--max-concurrency C --request-rate inf``. Two ways to end a level:
a request count, or a duration after which no new request is sent. Either way every request sent runs to
completion (as in SGLang's client), so the server's counters cover whole requests; the steady interval
(exactly C in flight) ends at the first completion after the last request was sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from ..tasks import cancel_all
from .prompts import PromptFactory
from .records import RequestRecord
from .stream import RequestShape, stream_request

ProgressFn = Callable[[RequestRecord], None]


@dataclass
class LoopResult:
    concurrency: int
    records: list[RequestRecord] = field(default_factory=list)
    phase_start: float = 0.0
    phase_end: float = 0.0
    steady_start: float = 0.0  # every one of the first C requests is decoding
    steady_end: float = 0.0  # the loop stops holding C in flight

    @property
    def steady_s(self) -> float:
        return max(0.0, self.steady_end - self.steady_start)


async def run_closed_loop(
    client: httpx.AsyncClient,
    prompts: PromptFactory,
    shape: RequestShape,
    concurrency: int,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
    first_index: int = 0,
    on_done: ProgressFn | None = None,
    output_len_of: Callable[[int], int] | None = None,
) -> LoopResult:
    """``concurrency`` workers, each sending its next request when the last one finished. ``output_len_of``:
    the output length of request ``index`` (mixed lengths, collectors/bench/lengths.py), else the shape's."""
    if (num_requests is None) == (duration_s is None):
        raise ValueError("give exactly one of num_requests and duration_s")
    result = LoopResult(concurrency=concurrency)
    issued = 0
    last_issue = 0.0
    start = time.perf_counter()
    deadline = start + duration_s if duration_s is not None else None

    def may_issue() -> bool:
        if num_requests is not None:
            return issued < num_requests
        assert deadline is not None
        return time.perf_counter() < deadline

    async def worker() -> None:
        nonlocal issued, last_issue
        while may_issue():
            index = first_index + issued
            issued += 1
            last_issue = time.perf_counter()
            rec = RequestRecord(index=index, start=last_issue)
            result.records.append(rec)
            length = output_len_of(index) if output_len_of is not None else None
            await stream_request(client, prompts(index), shape, record=rec, output_len=length)
            if on_done is not None:
                on_done(rec)

    result.phase_start = start
    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*tasks)
    finally:
        # Also on cancellation (Ctrl-C): no request task outlives the loop.
        await cancel_all(tasks)
    end = time.perf_counter()
    result.phase_end = end
    for rec in result.records:
        if rec.e2e_s is None and rec.error is None:
            rec.aborted = True
    _mark_steady(result, last_issue, None)
    return result


def _mark_steady(result: LoopResult, last_issue: float, cut_at: float | None) -> None:
    """The interval in which exactly C requests were in flight and all of them past their first token."""
    first = sorted(result.records, key=lambda r: r.index)[: result.concurrency]
    first_tokens = [r.start + r.ttft_s for r in first if r.ttft_s is not None]
    steady_start = max(first_tokens) if first_tokens else result.phase_start
    if cut_at is not None:
        steady_end = cut_at
    else:
        ends = [r.start + r.e2e_s for r in result.records if r.e2e_s is not None]
        after = [e for e in ends if e >= last_issue]
        steady_end = min(after) if after else result.phase_end
    if steady_end <= steady_start:  # too few requests for a steady stretch: use the whole phase
        steady_start, steady_end = result.phase_start, result.phase_end
    result.steady_start, result.steady_end = steady_start, steady_end


async def run_warmup(
    client: httpx.AsyncClient,
    prompts: PromptFactory,
    shape: RequestShape,
    count: int,
    concurrency: int,
    output_len: int,
    first_index: int,
) -> list[RequestRecord]:
    """``count`` short requests, at most ``concurrency`` at a time (connections, server caches, graphs)."""
    if count <= 0:
        return []
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int) -> RequestRecord:
        async with sem:
            return await stream_request(
                client, prompts(first_index + i), shape, warmup=True, output_len=output_len
            )

    return list(await asyncio.gather(*(one(i) for i in range(count))))
