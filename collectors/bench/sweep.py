"""The sweep: for each concurrency and each mode, set the knob, warm up, hold C in flight, measure.

The sweep borrows the knob (a sweep lock on the server: the ``Knob`` protocol of collectors/bench/knob.py,
implemented on control's knob client) and gives back the value and the owner it found whatever happens
(error, Ctrl-C). A cancelled sweep
(Ctrl-C cancels the asyncio task) returns the points finished so far with ``interrupted=True``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from ..auth import auth_headers
from ..http import ServerUnreachable, check_http_url
from ..tasks import cancel_all
from . import server as srv
from .errors import BenchError
from .knob import Knob
from .lengths import OutputLengths, as_lengths
from .limits import (
    MAX_CONCURRENCY,
    MAX_REQUESTS_PER_LEVEL,
    MAX_ROUNDS,
    MAX_TOKENS,
    MAX_WARMUP,
    check_between,
)
from .loadgen import LoopResult, run_closed_loop, run_warmup
from .prefill import PrefillProbe, long_length, probe_prefill
from .prompts import DEFAULT_SEED, PromptFactory
from .ratio import Crossover, RatioPoint, best_knob, find_crossover, ratio_interval
from .records import RequestRecord
from .stats import DEFAULT_WINDOWS, point_figures
from .stream import API_CHOICES, Api, RequestShape

Mode = Literal["on", "off", "plain"]
MODE_CHOICES: tuple[Mode, ...] = ("on", "off")  # the knob's modes (--modes)
PLAIN: Mode = "plain"  # a second server launched without speculation (--plain-server); it has no knob
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_INPUT_LEN = 128
DEFAULT_OUTPUT_LEN = 256
DEFAULT_DURATION_S = 20.0
DEFAULT_WARMUP = 2
DEFAULT_ROUNDS = 2  # each point in this many slices, modes alternating
DEFAULT_WARMUP_OUTPUT_LEN = 4  # warm-up only needs connections and the batch size's graphs, not length
DEFAULT_REQUEST_TIMEOUT_S = 600.0
KNOB_REASON = "bench sweep"


@dataclass(frozen=True)
class SweepConfig:
    server: str
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    modes: tuple[Mode, ...] = MODE_CHOICES
    requests_per_level: int | None = None
    duration_per_level: float | None = DEFAULT_DURATION_S
    input_len: int = DEFAULT_INPUT_LEN
    # one length for every request, or OutputLengths (``--output-len 64-448``): one length finishes in waves,
    # which a window's count sees as steps of (concurrency x length) tokens (issue #32)
    output_len: int | OutputLengths = DEFAULT_OUTPUT_LEN
    api: Api = "openai"
    warmup: int = DEFAULT_WARMUP
    tag: str | None = None
    seed: int = DEFAULT_SEED
    windows: int = DEFAULT_WINDOWS
    rounds: int = DEFAULT_ROUNDS
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    plain_server: str | None = None  # measured beside on/off at every level, in the same rounds

    @property
    def output_lengths(self) -> OutputLengths:
        return as_lengths(self.output_len)

    @property
    def measured_modes(self) -> tuple[Mode, ...]:
        """Every mode a round measures, in order: the knob's modes, then the plain server's."""
        return (*self.modes, PLAIN) if self.plain_server else self.modes

    def validate(self) -> SweepConfig:
        check_http_url(self.server, "--server", BenchError)
        if self.plain_server is not None:
            check_http_url(self.plain_server, "--plain-server", BenchError)
            if self.plain_server.rstrip("/") == self.server.rstrip("/"):
                raise BenchError(
                    "--plain-server: the same URL as --server; give a second server launched without "
                    "speculation"
                )
        if not self.concurrency:
            raise BenchError("--concurrency: give at least one level")
        if any(c < 1 or c > MAX_CONCURRENCY for c in self.concurrency):
            raise BenchError(f"--concurrency: every level must be between 1 and {MAX_CONCURRENCY}")
        if not self.modes or any(m not in MODE_CHOICES for m in self.modes):
            raise BenchError(
                f"--modes: expected a list of {', '.join(MODE_CHOICES)}, got {','.join(self.modes)!r}"
            )
        if (self.requests_per_level is None) == (self.duration_per_level is None):
            raise BenchError("--requests-per-level / --duration-per-level: give exactly one")
        if self.requests_per_level is not None:
            check_between(self.requests_per_level, "--requests-per-level", 1, MAX_REQUESTS_PER_LEVEL)
        if self.duration_per_level is not None and not (
            math.isfinite(self.duration_per_level) and self.duration_per_level > 0
        ):
            raise BenchError("--duration-per-level: must be a positive number of seconds")
        check_between(self.input_len, "--input-len", 1, MAX_TOKENS)
        self.output_lengths.check(minimum=2)  # inter-token latency needs two tokens
        if self.api not in API_CHOICES:
            raise BenchError(f"--api: expected one of {', '.join(API_CHOICES)}, got {self.api!r}")
        check_between(self.warmup, "--warmup", 0, MAX_WARMUP)
        check_between(self.rounds, "--rounds", 1, MAX_ROUNDS)
        if self.windows < 2:
            raise BenchError("windows: need at least 2 for a confidence interval")
        return self

    def params(self) -> dict[str, Any]:
        return {
            "concurrency": list(self.concurrency),
            "modes": list(self.modes),
            "requests_per_level": self.requests_per_level,
            "duration_per_level": self.duration_per_level,
            "input_len": self.input_len,
            # the longest (bench_serving's random_output_len on export); the shortest beside it when mixed
            "output_len": self.output_lengths.high,
            **({"output_len_low": self.output_lengths.low} if self.output_lengths.mixed else {}),
            "api": self.api,
            "warmup": self.warmup,
            "rounds": self.rounds,
            "seed": self.seed,
            "windows": self.windows,
            "plain_server": self.plain_server,
        }


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4), sorted and de-duplicated; a bad item is named."""
    levels: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            value = int(item)
        except ValueError:
            raise BenchError(f"--concurrency: {item!r} is not an integer (expected e.g. 1,2,4,8)") from None
        if value < 1 or value > MAX_CONCURRENCY:
            raise BenchError(f"--concurrency: {value} is out of range (1..{MAX_CONCURRENCY})")
        levels.add(value)
    if not levels:
        raise BenchError("--concurrency: empty list (expected e.g. 1,2,4,8)")
    return tuple(sorted(levels))


def parse_modes(text: str) -> tuple[Mode, ...]:
    modes: list[Mode] = []
    for item in (s.strip().lower() for s in text.split(",")):
        if item not in MODE_CHOICES:
            raise BenchError(f"--modes: {item!r} is not one of {', '.join(MODE_CHOICES)}")
        if item not in modes:
            modes.append(item)
    return tuple(modes)


@dataclass
class PointResult:
    concurrency: int
    mode: Mode
    knob_value: int | None  # None for the plain server (no knob)
    figures: dict[str, Any]
    accept_length: float | None
    accept_length_source: str | None
    started_at: float

    @property
    def tok_s(self) -> float | None:
        """The point's throughput for the curve: output tokens/s while exactly C requests were in flight."""
        value = self.figures.get("steady_output_throughput")
        return float(value) if value is not None else None

    @property
    def windows(self) -> list[float]:
        return list(self.figures.get("steady_windows") or [])


@dataclass
class SweepResult:
    config: SweepConfig
    server_info: dict[str, Any]
    max_running_requests: int
    started_at: float
    points: list[PointResult] = field(default_factory=list)
    knob_before: list[int | None] = field(default_factory=list)
    knob_restored: bool = False
    knob_found: str | None = None  # what the sweep found before borrowing the knob (value, owner, lock)
    knob_note: str | None = None  # how it was given back (or why not)
    knob_moves: list[dict[str, Any]] = field(default_factory=list)  # one per slice: ts, value, previous
    interrupted: bool = False
    error: str | None = None
    gpu_inventory: list[dict[str, Any]] | None = None
    plain_server_info: dict[str, Any] | None = None  # --plain-server's /server_info
    prefill: PrefillProbe | None = None  # the server's prefill rate (collectors/bench/prefill.py)

    def point(self, concurrency: int, mode: Mode) -> PointResult | None:
        return next((p for p in self.points if p.concurrency == concurrency and p.mode == mode), None)

    def ratios(self, numerator: Mode = "on", denominator: Mode = "off") -> list[RatioPoint]:
        """``numerator`` / ``denominator`` throughput per level with its interval (on/off by default)."""
        out = []
        for c in sorted({p.concurrency for p in self.points}):
            num, den = self.point(c, numerator), self.point(c, denominator)
            if num is None or den is None:
                continue
            try:
                r, lo, hi = ratio_interval(num.windows, den.windows)
            except ValueError:
                continue
            out.append(RatioPoint(concurrency=c, ratio=r, lo=lo, hi=hi))
        return out

    def crossover(self) -> Crossover | None:
        """Where the knob's on stops beating the knob's off (what ``spectower_spec_max_bs`` can choose)."""
        ratios = self.ratios()
        return find_crossover(ratios) if ratios else None

    def crossover_vs_plain(self) -> Crossover | None:
        """Where speculation (knob on) stops beating a server without speculation (--plain-server)."""
        ratios = self.ratios("on", PLAIN)
        return find_crossover(ratios) if ratios else None

    def best_max_bs(self) -> int | None:
        cross = self.crossover()
        return best_knob(cross, self.max_running_requests) if cross is not None else None


class SweepProgress:
    """Callbacks the sweep makes; the CLI draws a rich progress bar from them (no-ops by default)."""

    def point_started(
        self, concurrency: int, mode: Mode, total_requests: int | None, duration_s: float | None
    ) -> None: ...

    def request_done(self, record: RequestRecord, tokens_so_far: int, elapsed_s: float) -> None: ...

    def slice_finished(self, concurrency: int, mode: Mode) -> None:
        """One (level, mode, round) slice measured: the sweep's overall progress counts these."""

    def point_finished(self, point: PointResult) -> None: ...


def _mode_value(mode: Mode, max_running: int) -> int | None:
    if mode == PLAIN:
        return None  # the plain server has no knob
    return max_running if mode == "on" else 0


async def _plain_server_info(client: httpx.AsyncClient) -> dict[str, Any]:
    """--plain-server's /server_info; refused when that server runs speculation (it would not be plain)."""
    try:
        info = await srv.get_server_info(client)
    except ServerUnreachable as exc:
        raise ServerUnreachable(str(exc).replace("--server", "--plain-server", 1)) from None
    algorithm = info.speculative_algorithm
    if algorithm not in (None, "", "NONE"):
        raise BenchError(
            f"--plain-server {client.base_url}: runs speculation (speculative_algorithm {algorithm}); "
            "give a server launched without --speculative-algorithm"
        )
    return info.info


async def run_sweep(
    config: SweepConfig,
    *,
    knob: Knob,
    progress: SweepProgress | None = None,
    admin_key: str | None = None,
    api_key: str | None = None,
    gpu_inventory: Callable[[], list[dict[str, Any]] | None] | None = None,
    on_start: Callable[[SweepResult], None] | None = None,
) -> SweepResult:
    config.validate()
    progress = progress or SweepProgress()
    top = max(config.concurrency)
    limits = httpx.Limits(max_connections=top + 8, max_keepalive_connections=top + 8)
    timeout = httpx.Timeout(config.request_timeout_s, connect=10.0)
    headers = auth_headers(api_key)
    async with (
        httpx.AsyncClient(base_url=config.server, limits=limits, timeout=timeout, headers=headers) as client,
        contextlib.AsyncExitStack() as stack,
    ):
        info = await srv.get_server_info(client)
        if info.max_running_requests is None:
            raise ServerUnreachable(
                f"--server {config.server}: /server_info reports no max_running_requests (neither "
                "internal_states nor top level)"
            )
        result = SweepResult(
            config=config,
            server_info=info.info,
            max_running_requests=info.max_running_requests,
            started_at=time.time(),
        )
        result.gpu_inventory = gpu_inventory() if gpu_inventory is not None else None
        plain_client: httpx.AsyncClient | None = None
        if config.plain_server is not None:  # checked before the knob is touched; its own knob never is
            plain_client = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=config.plain_server, limits=limits, timeout=timeout, headers=headers
                )
            )
            result.plain_server_info = await _plain_server_info(plain_client)
        result.knob_before = await knob.read()  # raises when the server has no spectower plugin
        if on_start is not None:
            on_start(result)
        model = info.served_model_name or "default"
        shape = RequestShape(api=config.api, output_len=config.output_lengths.low, model=model)
        prompts = PromptFactory(config.input_len, as_text=config.api == "openai", seed=config.seed)
        plain_model = str((result.plain_server_info or {}).get("served_model_name") or "default")
        plain_shape = RequestShape(api=config.api, output_len=config.output_lengths.low, model=plain_model)
        swept = _Target(client, knob, shape, admin_key)
        targets = {mode: swept for mode in config.measured_modes}
        if plain_client is not None:  # no knob there, and no flush: the admin key is the swept server's
            targets[PLAIN] = _Target(plain_client, None, plain_shape, None)
        next_index = 0
        try:
            # Borrow the knob (a sweep lock on the server; refused while others use the server or an
            # operator holds the knob, unless --force); given back with its owner in the finally below.
            result.knob_found = (await knob.borrow(await srv.requests_in_flight(client))).describe()
            long_len = long_length(config.input_len, info.max_req_input_len, info.reserved_output_tokens)
            if long_len is not None:  # before the levels: the server idle, its knob as found
                result.prefill, used = await probe_prefill(
                    client, prompts, shape, config.input_len, long_len, next_index
                )
                next_index += used
            for c in config.concurrency:
                next_index = await _measure_level(c, targets, config, prompts, result, next_index, progress)
        except asyncio.CancelledError:
            result.interrupted = True
        finally:
            result.knob_restored = await _restore(knob, result)
        return result


async def _measure_level(
    c: int,
    targets: dict[Mode, _Target],
    config: SweepConfig,
    prompts: PromptFactory,
    result: SweepResult,
    next_index: int,
    progress: SweepProgress,
) -> int:
    """Every measured mode at concurrency ``c``, ``rounds`` slices each, into ``result.points``; returns the
    next prompt index."""
    # Modes alternate within a level (on, off[, plain], on, off[, plain], ...): a change in the machine's
    # load then hits every mode alike, which the ratios need more than accuracy.
    slices: dict[Mode, list[_Slice]] = {m: [] for m in config.measured_modes}
    for _ in range(config.rounds):
        for mode in config.measured_modes:
            sl, used = await _measure_point(
                targets[mode], config, prompts, c, mode, result.max_running_requests, next_index, progress
            )
            next_index += used
            slices[mode].append(sl)
    for mode in config.measured_modes:
        value = _mode_value(mode, result.max_running_requests)
        point = _point_from_slices(c, mode, value, slices[mode], config.windows)
        result.points.append(point)
        progress.point_finished(point)
    return next_index


async def _restore(knob: Knob, result: SweepResult) -> bool:
    """Give the knob back (value and owner found); the per-slice moves go into the run's own record."""
    result.knob_moves = list(knob.moves)
    try:
        restored, result.knob_note = await knob.give_back()
    except Exception as exc:  # restoring must never mask the error that ended the sweep
        result.knob_note = f"not restored: {type(exc).__name__}: {exc}"
        return False
    return restored


@dataclass
class _Slice:
    """One uninterrupted stretch of one mode at one level (a point is ``rounds`` of them)."""

    loop: LoopResult
    started_at: float
    server_decode_tok_s: float | None
    accept_tokens: float | None  # counter deltas (tokens, verify calls) over the slice
    accept_calls: float | None
    accept_value: float | None  # when counters are missing: flush + avg, or per-request meta_info
    accept_source: str | None


@dataclass
class _Target:
    """Where a mode's slices run: the swept server and its knob, or --plain-server (no knob)."""

    client: httpx.AsyncClient
    knob: Knob | None
    shape: RequestShape
    admin_key: str | None  # for /flush_cache when the server publishes no counters


async def _measure_point(
    target: _Target,
    config: SweepConfig,
    prompts: PromptFactory,
    c: int,
    mode: Mode,
    max_running: int,
    first_index: int,
    progress: SweepProgress,
) -> tuple[_Slice, int]:
    """One slice of ``mode`` at level ``c`` on ``target``."""
    client, shape = target.client, target.shape
    value = _mode_value(mode, max_running)
    if target.knob is not None and value is not None:
        await target.knob.set(value, KNOB_REASON)
    warm = await run_warmup(
        client,
        prompts,
        shape,
        config.warmup,
        c,
        min(config.output_lengths.low, DEFAULT_WARMUP_OUTPUT_LEN),
        first_index,
    )
    failed = [r for r in warm if not r.success]
    if failed and len(failed) == len(warm):
        raise BenchError(f"warm-up at concurrency {c}: every request failed ({failed[0].error})")
    first_index += len(warm)
    speculative = mode != PLAIN
    before = await srv.read_spec_counters(client) if speculative else None
    flushed = speculative and before is None and await srv.flush_cache(client, target.admin_key)
    started_at = time.time()
    per_round_requests = (
        math.ceil(config.requests_per_level / config.rounds)
        if config.requests_per_level is not None
        else None
    )
    per_round_s = config.duration_per_level / config.rounds if config.duration_per_level is not None else None
    progress.point_started(c, mode, per_round_requests, per_round_s)
    sampler = srv.DecodeSampler(client)
    loop = await _sampled_loop(
        target, sampler, prompts, c, per_round_requests, per_round_s, first_index, progress,
        config.output_lengths,
    )  # fmt: skip
    tokens_delta = calls_delta = accept_value = None
    source: str | None = None
    after = await srv.read_spec_counters(client) if before is not None else None
    if before is not None and after is not None and after.verify_calls > before.verify_calls:
        tokens_delta = after.generation_tokens - before.generation_tokens
        calls_delta = after.verify_calls - before.verify_calls
        source = "metrics counters"
    elif speculative:
        accept_value, source = await _fallback_accept_length(client, loop, flushed)
    # The server's own decode rate over the steady interval: when the client keeps up, the client's steady
    # throughput matches it (plus the first token of each request, which prefill produces).
    server_rate = sampler.rate_between(loop.steady_start, loop.steady_end)
    sl = _Slice(loop, started_at, server_rate, tokens_delta, calls_delta, accept_value, source)
    progress.slice_finished(c, mode)
    return sl, len(warm) + len(loop.records)


async def _sampled_loop(
    target: _Target,
    sampler: srv.DecodeSampler,
    prompts: PromptFactory,
    c: int,
    num_requests: int | None,
    duration_s: float | None,
    first_index: int,
    progress: SweepProgress,
    lengths: OutputLengths,
) -> LoopResult:
    """The closed loop of one slice, the server's decode rate sampled beside it, each finished request
    reported to ``progress``."""
    t0 = time.perf_counter()
    tokens = 0

    def done(rec: RequestRecord) -> None:
        nonlocal tokens
        tokens += rec.output_tokens
        progress.request_done(rec, tokens, time.perf_counter() - t0)

    sampling = asyncio.create_task(sampler.run())
    try:
        return await run_closed_loop(
            target.client,
            prompts,
            target.shape,
            c,
            num_requests=num_requests,
            duration_s=duration_s,
            first_index=first_index,
            on_done=done,
            # the same index, the same length, in every mode and on the plain server
            output_len_of=lengths.of if lengths.mixed else None,
        )
    finally:
        await cancel_all([sampling])
        failed = None if sampling.cancelled() else sampling.exception()
        if failed is not None:  # the sampler's own failure is the sweep's, as before it was stopped
            raise failed


def _point_from_slices(
    c: int, mode: Mode, value: int | None, slices: list[_Slice], windows: int
) -> PointResult:
    figures = point_figures([s.loop for s in slices], windows)
    if figures["total_output_tokens"] == 0:
        what = "plain server" if mode == PLAIN else f"spec {mode}"
        raise BenchError(
            f"concurrency {c}, {what}: no output tokens received ({figures.get('first_error') or 'no error'})"
        )
    rates = [(s.server_decode_tok_s, s.loop.steady_s) for s in slices if s.server_decode_tok_s is not None]
    span = sum(w for _, w in rates)
    figures["server_decode_tok_s"] = sum(r * w for r, w in rates) / span if rates and span > 0 else None
    figures["rounds"] = len(slices)
    calls = sum(s.accept_calls or 0 for s in slices)
    accept: float | None
    if calls > 0 and all(s.accept_calls for s in slices):
        accept = sum(s.accept_tokens or 0 for s in slices) / calls
    else:
        values = [s.accept_value for s in slices if s.accept_value is not None]
        accept = sum(values) / len(values) if values else None
    return PointResult(
        concurrency=c,
        mode=mode,
        knob_value=value,
        figures=figures,
        accept_length=accept,
        accept_length_source=next((s.accept_source for s in slices if s.accept_source), None),
        started_at=slices[0].started_at,
    )


async def _fallback_accept_length(
    client: httpx.AsyncClient, loop: LoopResult, flushed: bool
) -> tuple[float | None, str | None]:
    if flushed:
        value = (await srv.get_server_info(client)).avg_spec_accept_length
        if value is not None:
            return value, "flush_cache + server_info"
    done = [r for r in loop.records if r.success and r.spec_verify_ct]
    if done:
        return (
            sum(r.output_tokens for r in done) / sum(r.spec_verify_ct or 0 for r in done),
            "per-request meta_info",
        )
    return None, None
