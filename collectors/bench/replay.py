"""The open loop: a request trace sent as it arrived, each request at its own time whatever the server does.

Unlike the closed loop (collectors/bench/loadgen.py, a new request only when one finishes), nothing here
waits for the server: a server slower than the arrivals grows its queue, and that shows as TTFT and
end-to-end latency, as in production. Each request is a prompt of its row's ``ContextTokens`` (cut to what
the server takes beside its output, from ``max_req_input_len`` of /server_info, or to ``--max-context``)
and exactly its ``GeneratedTokens`` output tokens (``ignore_eos``, as a sweep forces its lengths). Every
request has a total deadline. No concurrency is imposed; ``max_in_flight`` is only a safety limit: an
arrival that finds that many requests in flight is not sent, counted (``shed``) and scored as a failure.

The trace, its schedule and its figures (goodput against an SLO) are storage/request_traces.py's, shared
with the simulator's open-loop evaluation.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ...storage.request_traces import DEFAULT_SLO, Arrival, RequestOutcome, Slo, open_loop_figures
from ..auth import auth_headers
from ..http import check_http_url
from ..tasks import cancel_all
from . import server as srv
from .errors import BenchError
from .limits import MAX_CONCURRENCY, MAX_TOKENS, check_between
from .prompts import DEFAULT_SEED, PromptFactory
from .records import RequestRecord
from .stream import API_CHOICES, Api, RequestShape, stream_request

DEFAULT_MAX_IN_FLIGHT = 1024
DEFAULT_REQUEST_DEADLINE_S = 600.0
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ReplayConfig:
    server: str
    trace: str  # the trace file's path, kept with a saved run
    speedup: float = 1.0
    rate_scale: float = 1.0
    slo: Slo = DEFAULT_SLO
    duration_s: float | None = None
    max_context: int | None = None
    api: Api = "openai"
    seed: int = DEFAULT_SEED
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    request_deadline_s: float = DEFAULT_REQUEST_DEADLINE_S
    tag: str | None = None

    def validate(self) -> ReplayConfig:
        check_http_url(self.server, "--server", BenchError)
        if self.api not in API_CHOICES:
            raise BenchError(f"--api: expected one of {', '.join(API_CHOICES)}, got {self.api!r}")
        if self.max_context is not None:
            check_between(self.max_context, "--max-context", 1, MAX_TOKENS)
        check_between(self.max_in_flight, "--max-in-flight", 1, MAX_CONCURRENCY)
        if not (math.isfinite(self.request_deadline_s) and self.request_deadline_s > 0):
            raise BenchError(
                f"--request-deadline: must be a positive duration, got {self.request_deadline_s!r}"
            )
        return self

    def params(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "speedup": self.speedup,
            "rate_scale": self.rate_scale,
            "slo": self.slo.to_json(),
            "duration_s": self.duration_s,
            "max_context": self.max_context,
            "api": self.api,
            "seed": self.seed,
            "max_in_flight": self.max_in_flight,
            "request_deadline_s": self.request_deadline_s,
        }


@dataclass
class ReplayResult:
    config: ReplayConfig
    server_info: dict[str, Any]
    started_at: float
    arrivals: int  # in the schedule
    schedule_span_s: float  # the schedule's first to last arrival
    server_max_input: int | None  # the server's max_req_input_len (None: it does not say)
    knob: int | None  # the server's speculation knob when the replay started (None: no plugin)
    max_running_requests: int | None
    reserved_tokens: int = 0  # slots the server counts on top of every prompt (EAGLE's drafts)
    records: list[RequestRecord] = field(default_factory=list)
    # what the per-request records (collectors/bench/replay_records.py) need beside ``records``: the
    # arrivals as scheduled, the prompt length each sent request had (after a cut) by its arrival index,
    # the arrivals not sent, and the replay's start on the records' clock (``time.perf_counter``)
    schedule: list[Arrival] = field(default_factory=list)
    prompt_tokens: dict[int, int] = field(default_factory=dict)
    shed_indices: list[int] = field(default_factory=list)  # not sent: ``max_in_flight`` were in flight
    clock_start: float = 0.0
    cut_prompts: int = 0  # prompts cut to fit (``prompt_limit``)
    most_late_s: float = 0.0  # the most a request was sent after its time (the client's own lag)
    peak_in_flight: int = 0
    span_s: float = 0.0  # the replay's start to its last answer
    interrupted: bool = False

    @property
    def shed(self) -> int:
        """Arrivals not sent: ``max_in_flight`` requests were in flight (each scored as a failure)."""
        return len(self.shed_indices)

    def outcomes(self) -> list[RequestOutcome]:
        """Every request scored (a shed one as a failure); requests cut short by Ctrl-C are left out."""
        done = [outcome_of(r) for r in self.records if not r.aborted]
        return done + [RequestOutcome(ok=False)] * self.shed

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = open_loop_figures(self.outcomes(), self.span_s, self.config.slo)
        offered = self.arrivals / self.schedule_span_s if self.schedule_span_s > 0 else None
        out.update(
            arrivals=self.arrivals,
            offered_rps=offered,
            shed=self.shed,
            cut_prompts=self.cut_prompts,
            server_max_input=self.server_max_input,
            reserved_tokens=self.reserved_tokens,
            most_late_s=self.most_late_s,
            peak_in_flight=self.peak_in_flight,
            aborted=sum(1 for r in self.records if r.aborted),
        )
        errors = [r.error for r in self.records if r.error]
        out["first_error"] = errors[0] if errors else None
        return out


def outcome_of(record: RequestRecord) -> RequestOutcome:
    """A sent request as the open-loop figures score it (storage.request_traces)."""
    return RequestOutcome(
        ok=record.success, output_tokens=record.output_tokens, ttft_s=record.ttft_s, e2e_s=record.e2e_s
    )


class ReplayProgress:
    """Callbacks the replay makes; the CLI draws a rich progress bar from them (no-ops by default)."""

    def started(self, arrivals: int) -> None: ...

    def sent(self, in_flight: int, shed: int) -> None: ...

    def request_done(self, record: RequestRecord, in_flight: int) -> None: ...


# SGLang (tp_worker.get_worker_info): max_req_input_len = min(context_len - 1, KV tokens - 1) - 5, so the
# context is at least max_req_input_len + 6. It refuses a prompt of max_req_input_len tokens or more
# (managers/utils.validate_input_length) and a prompt + max_new_tokens past the context
# (TokenizerManager._validate_one_request, which also counts EAGLE's draft slots:
# ServerInfo.reserved_output_tokens). One more token is kept for a BOS the tokenizer may add.
CONTEXT_OVER_MAX_INPUT = 6
PROMPT_MARGIN = 2


def prompt_limit(
    server_max_input: int | None, max_context: int | None, output_tokens: int, reserved_tokens: int = 0
) -> int | None:
    """The longest prompt a request with ``output_tokens`` may send: what the server takes with that many
    output tokens and its ``reserved_tokens`` (from its ``max_req_input_len``) and ``--max-context``; None
    when neither says."""
    limits = [] if max_context is None else [max_context]
    if server_max_input is not None and server_max_input > 0:
        room = server_max_input + CONTEXT_OVER_MAX_INPUT - reserved_tokens
        top = min(server_max_input, room - output_tokens, room - 1)
        limits.append(top - PROMPT_MARGIN)
    return max(1, min(limits)) if limits else None


async def run_replay(
    config: ReplayConfig,
    arrivals: list[Arrival],
    *,
    progress: ReplayProgress | None = None,
    api_key: str | None = None,
) -> ReplayResult:
    """Send ``arrivals`` (storage.request_traces.schedule) open-loop and wait for every answer. A cancelled
    replay (Ctrl-C) stops sending, cancels what is in flight and returns what finished, ``interrupted``."""
    config.validate()
    progress = progress or ReplayProgress()
    limits = httpx.Limits(
        max_connections=config.max_in_flight + 8, max_keepalive_connections=min(config.max_in_flight, 256) + 8
    )
    timeout = httpx.Timeout(config.request_deadline_s, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(
        base_url=config.server, limits=limits, timeout=timeout, headers=auth_headers(api_key)
    ) as client:
        info = await srv.get_server_info(client)
        result = ReplayResult(
            config=config,
            server_info=info.info,
            started_at=time.time(),
            arrivals=len(arrivals),
            schedule_span_s=arrivals[-1].t_s - arrivals[0].t_s if arrivals else 0.0,
            schedule=list(arrivals),
            server_max_input=info.max_req_input_len,
            knob=info.knob,
            max_running_requests=info.max_running_requests,
            reserved_tokens=info.reserved_output_tokens,
        )
        shape = RequestShape(api=config.api, output_len=1, model=info.served_model_name or "default")
        await _send_all(client, config, arrivals, shape, result, progress)
    return result


async def _send_all(
    client: httpx.AsyncClient,
    config: ReplayConfig,
    arrivals: list[Arrival],
    shape: RequestShape,
    result: ReplayResult,
    progress: ReplayProgress,
) -> None:
    prompts = PromptFactory(1, as_text=config.api == "openai", seed=config.seed)
    in_flight: set[asyncio.Task[RequestRecord]] = set()

    def finished(task: asyncio.Task[RequestRecord], rec: RequestRecord) -> None:
        in_flight.discard(task)
        if not task.cancelled():
            progress.request_done(rec, len(in_flight))

    progress.started(len(arrivals))
    start = result.clock_start = time.perf_counter()
    # the records' zero on the wall clock: a server's own times (its stalls, plugin/loop_stalls.py) are Unix
    # seconds, so benchmarks/gpu/replay_table.py sets them against the requests by it
    result.started_at = time.time()
    try:
        for index, arrival in enumerate(arrivals):
            wait = start + arrival.t_s - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            result.most_late_s = max(result.most_late_s, time.perf_counter() - start - arrival.t_s)
            if len(in_flight) >= config.max_in_flight:
                result.shed_indices.append(index)
                progress.sent(len(in_flight), result.shed)
                continue
            length = arrival.input_tokens
            limit = prompt_limit(
                result.server_max_input, config.max_context, arrival.output_tokens, result.reserved_tokens
            )
            if limit is not None and length > limit:
                length = limit
                result.cut_prompts += 1
            result.prompt_tokens[index] = length
            rec = RequestRecord(index=index, start=time.perf_counter())
            result.records.append(rec)
            task = asyncio.create_task(
                stream_request(
                    client,
                    prompts(index, length),
                    shape,
                    output_len=arrival.output_tokens,
                    record=rec,
                    deadline_s=config.request_deadline_s,
                )
            )
            in_flight.add(task)
            task.add_done_callback(functools.partial(finished, rec=rec))
            result.peak_in_flight = max(result.peak_in_flight, len(in_flight))
            progress.sent(len(in_flight), result.shed)
        if in_flight:
            await asyncio.gather(*in_flight)
    except asyncio.CancelledError:
        result.interrupted = True
    finally:
        await cancel_all(list(in_flight))  # also on Ctrl-C: no request outlives the replay
        result.span_s = time.perf_counter() - start
        for rec in result.records:
            if rec.e2e_s is None and rec.error is None:
                rec.aborted = True
