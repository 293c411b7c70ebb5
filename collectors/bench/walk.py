"""The load walker behind ``spectower bench load``: closed-loop streaming clients whose number follows a
pattern over time, so a server (or the simulator) visits both sides of its speculation crossover.

Each client is a worker with a slot number k: it sends one streamed request after another (the same
``stream_request`` the sweep uses) while ``k < target(t)``, and retires after its current request once the
target falls below it. Requests are never cut: a lower target takes effect as requests finish.

Patterns (``parse_pattern``), all deterministic given the seed:

- ``day``: a day compressed into ``period``: night (1-2), morning ramp, a midday plateau at 60% of the
  maximum, an afternoon dip, an evening peak at the maximum, a decline; plus short random bursts.
- ``bursty``: a low base (20% of the maximum) with frequent bursts to the maximum.
- ``ramp``: a triangle 1 -> maximum -> 1 over one period.
- ``hover:N``: wanders among N-2..N+2 (a new value every few seconds).
- ``steps:1,8,32``: each level for period/len(levels), in order, repeating.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from ..auth import auth_headers
from ..http import check_http_url
from ..tasks import cancel_all
from .errors import BenchError
from .lengths import OutputLengths, as_lengths
from .limits import MAX_CONCURRENCY, MAX_TOKENS, check_between
from .prompts import PromptFactory
from .records import RequestRecord
from .server import get_server_info
from .stream import Api, RequestShape, stream_request

DEFAULT_PERIOD_S = 300.0
DEFAULT_MAX_CONCURRENCY = 48
DEFAULT_OUTPUT_LEN = 128
DEFAULT_INPUT_LEN = 128
DEFAULT_STATUS_EVERY_S = 5.0
DEFAULT_SEED = 1
HOVER_SPREAD = 2  # hover:N visits N-2..N+2
HOVER_HOLD_S = 5.0  # each hover value holds this long
JUMP_HOLD_S = 1.0  # jump: a new level every second (the simulator's jump trace)
TICK_S = 0.25  # how often the walker re-reads the target
ERROR_BACKOFF_S = 1.0  # a failed request waits this long before its worker tries again
REQUEST_TIMEOUT_S = 600.0

# The day's shape: (fraction of the period, fraction of the maximum); straight lines in between, smoothed.
DAY_KNOTS: tuple[tuple[float, float], ...] = (
    (0.00, 0.0),  # midnight: "night" means 1-2 clients, see NIGHT_LEVEL
    (0.18, 0.0),
    (0.35, 0.60),  # morning ramp up to the midday plateau
    (0.55, 0.60),
    (0.62, 0.45),  # afternoon dip
    (0.72, 0.65),
    (0.80, 1.00),  # evening peak
    (0.86, 1.00),
    (1.00, 0.0),  # decline into the night
)
NIGHT_LEVEL = 1.5
BURST_SLOTS = 12  # per period: each slot may hold one burst
BURST_PROBABILITY = 0.35
BURST_HEIGHT = 0.30  # of the maximum
BURST_LENGTH = 0.35  # of a slot
BURSTY_BASE = 0.20  # of the maximum
BURSTY_PROBABILITY = 0.6

Pattern = Callable[[float], float]


def _smooth(x: float) -> float:
    """Smoothstep: a straight line between two knots with flat ends, so the curve has no corners."""
    return x * x * (3.0 - 2.0 * x)


def day_base(phase: float, max_concurrency: int) -> float:
    """The day curve without bursts at ``phase`` in [0, 1)."""
    phase = phase % 1.0
    top = float(max_concurrency)
    for (x0, y0), (x1, y1) in itertools.pairwise(DAY_KNOTS):
        if x0 <= phase <= x1:
            frac = 0.0 if x1 == x0 else _smooth((phase - x0) / (x1 - x0))
            level = y0 + (y1 - y0) * frac
            return max(NIGHT_LEVEL, level * top)
    return NIGHT_LEVEL


def _bursts(period_s: float, height: float, probability: float, seed: int) -> Pattern:
    """``height`` during seeded bursts; each of BURST_SLOTS slots per period may hold one."""
    slot_s = period_s / BURST_SLOTS

    def burst(t: float) -> float:
        slot = math.floor(t / slot_s)
        rng = random.Random(seed * 7_919 + slot)
        if rng.random() >= probability:
            return 0.0
        start = rng.uniform(0.0, 1.0 - BURST_LENGTH) * slot_s
        offset = t - slot * slot_s
        return height if start <= offset < start + BURST_LENGTH * slot_s else 0.0

    return burst


def day_pattern(period_s: float, max_concurrency: int, seed: int = DEFAULT_SEED) -> Pattern:
    burst = _bursts(period_s, BURST_HEIGHT * max_concurrency, BURST_PROBABILITY, seed)

    def target(t: float) -> float:
        return min(float(max_concurrency), day_base(t / period_s, max_concurrency) + burst(t))

    return target


def bursty_pattern(period_s: float, max_concurrency: int, seed: int = DEFAULT_SEED) -> Pattern:
    base = max(1.0, BURSTY_BASE * max_concurrency)
    burst = _bursts(period_s, max_concurrency - base, BURSTY_PROBABILITY, seed)

    def target(t: float) -> float:
        return base + burst(t)

    return target


def ramp_pattern(period_s: float, max_concurrency: int) -> Pattern:
    def target(t: float) -> float:
        phase = (t / period_s) % 1.0
        tri = 2.0 * phase if phase < 0.5 else 2.0 * (1.0 - phase)
        return 1.0 + tri * (max_concurrency - 1)

    return target


def hover_pattern(center: int, seed: int = DEFAULT_SEED, hold_s: float = HOVER_HOLD_S) -> Pattern:
    def target(t: float) -> float:
        rng = random.Random(seed * 104_729 + math.floor(t / hold_s))
        return float(max(1, center + rng.randint(-HOVER_SPREAD, HOVER_SPREAD)))

    return target


def jump_pattern(max_concurrency: int, seed: int = DEFAULT_SEED, hold_s: float = JUMP_HOLD_S) -> Pattern:
    """Every ``hold_s`` (1 s) a new seeded level drawn uniformly from 1 .. ``max_concurrency``: the live
    form of the simulator's ``jump`` trace, the adversary of any policy that learns from load averages."""

    def target(t: float) -> float:
        rng = random.Random(seed * 7_919 + math.floor(t / hold_s))
        return float(rng.randint(1, max_concurrency))

    return target


def steps_pattern(levels: tuple[int, ...], period_s: float) -> Pattern:
    each = period_s / len(levels)

    def target(t: float) -> float:
        return float(levels[math.floor(t / each) % len(levels)])

    return target


@dataclass(frozen=True)
class PatternSpec:
    text: str
    pattern: Pattern
    ceiling: int  # the most clients it can ask for

    def target(self, t: float) -> int:
        """Whole clients at ``t`` seconds after the start (at least 1)."""
        return max(1, min(self.ceiling, round(self.pattern(t))))


def _positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BenchError(f"--pattern {what}: {text!r} is not a whole number") from None
    return check_between(value, f"--pattern {what}", 1, MAX_CONCURRENCY)


def parse_pattern(
    text: str, period_s: float = DEFAULT_PERIOD_S, max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    seed: int = DEFAULT_SEED,
) -> PatternSpec:  # fmt: skip
    """``day``, ``bursty``, ``ramp``, ``jump``, ``hover:N`` or ``steps:A,B,...``; errors name the flag."""
    if not (math.isfinite(period_s) and period_s > 0):
        raise BenchError(f"--period must be a positive duration, got {period_s}")
    check_between(max_concurrency, "--max-concurrency", 1, MAX_CONCURRENCY)
    raw = (text or "").strip().lower()
    name, _, arg = raw.partition(":")
    if name == "day" and not arg:
        return PatternSpec(raw, day_pattern(period_s, max_concurrency, seed), max_concurrency)
    if name == "bursty" and not arg:
        return PatternSpec(raw, bursty_pattern(period_s, max_concurrency, seed), max_concurrency)
    if name == "ramp" and not arg:
        return PatternSpec(raw, ramp_pattern(period_s, max_concurrency), max_concurrency)
    if name == "jump" and not arg:
        return PatternSpec(raw, jump_pattern(max_concurrency, seed), max_concurrency)
    if name == "hover":
        center = _positive_int(arg, "hover:N")
        return PatternSpec(raw, hover_pattern(center, seed), center + HOVER_SPREAD)
    if name == "steps":
        parts = [p.strip() for p in arg.split(",") if p.strip()]
        if not parts:
            raise BenchError("--pattern steps: give levels, e.g. steps:1,8,32")
        levels = tuple(_positive_int(p, "steps") for p in parts)
        return PatternSpec(raw, steps_pattern(levels, period_s), max(levels))
    raise BenchError(f"--pattern must be day, bursty, ramp, jump, hover:N or steps:A,B,..., got {text!r}")


@dataclass
class WalkStats:
    """Counters the status line and the final summary read (one event loop: no locks needed)."""

    started: float = field(default_factory=time.monotonic)
    target: int = 0
    workers: int = 0
    in_flight: dict[int, RequestRecord] = field(default_factory=dict)
    done: int = 0
    errors: int = 0
    last_error: str | None = None
    finished_tokens: int = 0

    def tokens(self) -> int:
        """Output tokens received so far, including the partial ones of requests still streaming."""
        return self.finished_tokens + sum(r.output_tokens for r in self.in_flight.values())


@dataclass(frozen=True)
class WalkConfig:
    server: str
    pattern: PatternSpec
    duration_s: float | None = None
    api: Api = "generate"
    # one length for every request, or OutputLengths (``--output-len 64-448``): requests of one length finish
    # in waves, which a counter read over a window sees as steps (issue #32)
    output_len: int | OutputLengths = DEFAULT_OUTPUT_LEN
    input_len: int = DEFAULT_INPUT_LEN
    seed: int = DEFAULT_SEED
    status_every_s: float = DEFAULT_STATUS_EVERY_S

    @property
    def output_lengths(self) -> OutputLengths:
        return as_lengths(self.output_len)

    def validate(self) -> WalkConfig:
        check_http_url(self.server, "--server", BenchError)
        if self.duration_s is not None and not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise BenchError(f"--duration must be a positive duration, got {self.duration_s}")
        if self.api not in ("generate", "openai"):
            raise BenchError(f"--api must be generate or openai, got {self.api!r}")
        self.output_lengths.check(minimum=1)
        check_between(self.input_len, "--input-len", 1, MAX_TOKENS)
        return self


StatusFn = Callable[[str], None]
# one request: stream_request's signature as the walker calls it (injected by tests)
SendFn = Callable[..., Awaitable[RequestRecord]]


def status_line(stats: WalkStats, tok_s: float) -> str:
    elapsed = time.monotonic() - stats.started
    line = (
        f"t={elapsed:6.0f}s  target C={stats.target:<3d} in flight {len(stats.in_flight):<3d} "
        f"tok/s {tok_s:8.1f}  done {stats.done}  errors {stats.errors}"
    )
    if stats.last_error:
        line += f"  last error: {stats.last_error[:120]}"
    return line


def final_line(stats: WalkStats, why: str) -> str:
    """The load's last line. The seconds too: a run's whole tok/s (its tokens over them) is what its
    server's counters are set against (benchmarks/gpu/counted_runs.py, through policy_table.read_total)."""
    seconds = time.monotonic() - stats.started
    return (f"stopped ({why}) after {seconds:.1f} s: {stats.done} requests done, {stats.errors} errors, "
            f"{stats.tokens()} tokens")  # fmt: skip


async def walk(
    config: WalkConfig,
    *,
    api_key: str | None = None,
    stop: asyncio.Event | None = None,
    on_status: StatusFn | None = None,
    send: SendFn = stream_request,
) -> WalkStats:
    """Run until ``duration_s`` passes or ``stop`` is set; in-flight requests are then cancelled, and no
    worker starts another (a worker whose cancellation a library swallowed ends all the same)."""
    config.validate()
    stop = stop or asyncio.Event()
    stats = WalkStats()
    ceiling = config.pattern.ceiling
    limits = httpx.Limits(max_connections=ceiling + 4, max_keepalive_connections=ceiling + 4)
    headers = auth_headers(api_key)
    async with httpx.AsyncClient(
        base_url=config.server, limits=limits, timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0),
        headers=headers,
    ) as client:  # fmt: skip
        info = await get_server_info(client)  # unreachable / not SGLang: a clear error before any load
        model = info.served_model_name or "default"
        lengths = config.output_lengths
        shape = RequestShape(api=config.api, output_len=lengths.low, model=model)
        prompts = PromptFactory(config.input_len, as_text=config.api == "openai", seed=config.seed)
        issued = 0
        workers: dict[int, asyncio.Task[None]] = {}
        ending = False  # the walk is over: set before the workers are cancelled, read before each request

        async def worker(slot: int) -> None:
            nonlocal issued
            while slot < stats.target and not stop.is_set() and not ending:
                index = issued
                issued += 1
                rec = RequestRecord(index=index, start=time.perf_counter())
                stats.in_flight[index] = rec
                try:
                    length = lengths.of(index)
                    await send(client, prompts(index), shape, output_len=length, record=rec)
                finally:
                    stats.in_flight.pop(index, None)
                    stats.finished_tokens += rec.output_tokens
                if rec.error is not None:
                    stats.errors += 1
                    stats.last_error = rec.error
                    await asyncio.sleep(ERROR_BACKOFF_S)
                else:
                    stats.done += 1

        start = time.monotonic()
        last_status, last_tokens = start, 0
        try:
            while not stop.is_set():
                now = time.monotonic()
                t = now - start
                if config.duration_s is not None and t >= config.duration_s:
                    break
                stats.target = config.pattern.target(t)
                for slot in [s for s, task in workers.items() if task.done()]:
                    workers.pop(slot)
                for slot in range(stats.target):
                    if slot not in workers:
                        workers[slot] = asyncio.create_task(worker(slot))
                stats.workers = len(workers)
                if on_status is not None and now - last_status >= config.status_every_s:
                    tokens = stats.tokens()
                    on_status(status_line(stats, (tokens - last_tokens) / (now - last_status)))
                    last_status, last_tokens = now, tokens
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=TICK_S)
        finally:
            # Stop now: cancel what is streaming (the server aborts those requests), no task outlives us.
            ending = True
            await cancel_all(workers.values())
    return stats
