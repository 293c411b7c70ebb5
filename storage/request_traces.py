"""Request traces (the Azure LLM inference trace format) and what an open-loop replay of one is judged by.

A request trace is a CSV file with the header ``TIMESTAMP,ContextTokens,GeneratedTokens`` (other columns are
ignored): one row per request, its arrival time (an ISO 8601 time as Azure writes it, ``2023-11-16
18:15:46.6805900``, or plain seconds), its prompt length and its output length in tokens, in time order.
``data/traces/`` holds the first half hour of Azure's conversation trace.

Open loop means every request arrives at its own time whether or not the server has kept up: a slower
server grows its queue. ``schedule`` turns a trace into arrivals (``speedup`` compresses time, ``rate_scale``
thins or thickens the requests, seeded); ``open_loop_figures`` scores what came back: latency percentiles,
tokens/s, and goodput, the requests per second that met an ``Slo``. The live replay (`bench replay`,
collectors/bench/replay.py) and the virtual-time one (`sim evaluate --trace FILE.csv`,
simulator/open_loop.py) both use this module, so a trace reads, arrives and scores the same in both.

Standard library only (the simulator imports it, as it imports storage.files).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .files import FileReadError, read_text_capped

MAX_REQUEST_TRACE_BYTES = 64 << 20  # Azure's week-long 2024 traces are larger: cut them first
MAX_REQUEST_TRACE_ROWS = 2_000_000
MAX_TRACE_TOKENS = 1 << 20  # a prompt or an answer: past any model's context
MAX_TRACE_SPAN_S = 30 * 86400.0
MAX_SPEEDUP = 1_000_000.0
MAX_RATE_SCALE = 100.0
MAX_ARRIVALS = 10_000_000
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class RequestTraceError(ValueError):
    """A request trace (or a schedule of one) that cannot be used; the message names the row and column."""


@dataclass(frozen=True)
class TraceRequest:
    t_s: float  # seconds after the trace's first request
    input_tokens: int
    output_tokens: int
    row: int  # the data row (1 = the first after the header)


@dataclass(frozen=True)
class RequestTrace:
    name: str
    requests: tuple[TraceRequest, ...]

    @property
    def duration_s(self) -> float:
        return self.requests[-1].t_s


def is_request_trace_path(name_or_path: str) -> bool:
    """Whether a ``--trace`` value names a request trace (a CSV file) rather than a concurrency trace."""
    return Path(name_or_path).suffix.lower() == ".csv"


def load_request_trace(path: str, max_bytes: int = MAX_REQUEST_TRACE_BYTES) -> RequestTrace:
    """The request trace in ``path``; ``RequestTraceError`` (one line naming the file) if unusable."""
    try:
        text = read_text_capped(path, max_bytes)
    except FileReadError as exc:
        raise RequestTraceError(f"trace {path!r}: {exc}") from None
    return parse_request_trace(text, source=path)


def _header(row: list[str], source: str) -> dict[str, int]:
    found = {name.strip().lower(): i for i, name in enumerate(row)}
    missing = [c for c in COLUMNS if c.lower() not in found]
    if missing:
        raise RequestTraceError(
            f"{source}: line 1 (header) lacks column {', '.join(missing)}; expected {','.join(COLUMNS)}"
        )
    return {c: found[c.lower()] for c in COLUMNS}


def _tokens(text: str, where: str, column: str, lo: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise RequestTraceError(f"{where}, column {column}: expected a whole number, got {text!r}") from None
    if not lo <= value <= MAX_TRACE_TOKENS:
        raise RequestTraceError(
            f"{where}, column {column}: must be between {lo} and {MAX_TRACE_TOKENS}, got {value}"
        )
    return value


def _arrival(text: str, where: str) -> datetime | float:
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise RequestTraceError(
                f"{where}, column TIMESTAMP: seconds must be finite and >= 0, got {raw!r}"
            )
        return seconds
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        raise RequestTraceError(
            f"{where}, column TIMESTAMP: expected a time like 2023-11-16 18:15:46.68 or seconds, got {raw!r}"
        ) from None


def _offset(stamp: datetime | float, first: datetime | float, where: str) -> float:
    """Seconds from the first row's time to ``stamp`` (both seconds, or both times of one kind)."""
    if isinstance(stamp, float) != isinstance(first, float):
        raise RequestTraceError(
            f"{where}, column TIMESTAMP: mixes plain seconds with dates (row 1 is "
            f"{'seconds' if isinstance(first, float) else 'a date'})"
        )
    if isinstance(stamp, float) and isinstance(first, float):
        return stamp - first
    assert isinstance(stamp, datetime) and isinstance(first, datetime)
    try:
        return (stamp - first).total_seconds()
    except TypeError:
        raise RequestTraceError(
            f"{where}, column TIMESTAMP: mixes times with and without a time zone (see row 1)"
        ) from None


def parse_request_trace(text: str, source: str = "trace") -> RequestTrace:
    """Parse a request trace's CSV text; ``RequestTraceError`` naming the row and column of what is wrong."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise RequestTraceError(
            f"{source}: empty; expected the header {','.join(COLUMNS)} and one row per request"
        )
    try:
        rows = list(csv.reader(lines))
    except csv.Error as exc:
        raise RequestTraceError(f"{source}: not CSV ({exc})") from None
    index = _header(rows[0], source)
    body = [r for r in rows[1:] if any(cell.strip() for cell in r)]
    if not body:
        raise RequestTraceError(f"{source}: no requests after the header")
    if len(body) > MAX_REQUEST_TRACE_ROWS:
        raise RequestTraceError(f"{source}: too many requests ({len(body)} > {MAX_REQUEST_TRACE_ROWS})")
    first: datetime | float | None = None
    requests: list[TraceRequest] = []
    for n, row in enumerate(body, start=1):
        where = f"{source}: row {n}"
        if len(row) <= max(index.values()):
            raise RequestTraceError(f"{where}: {len(row)} columns, the header has {len(rows[0])}")
        stamp = _arrival(row[index["TIMESTAMP"]], where)
        first = stamp if first is None else first
        t = _offset(stamp, first, where)
        if requests and t < requests[-1].t_s:
            raise RequestTraceError(
                f"{where}, column TIMESTAMP: goes back in time (before row {n - 1}); "
                "rows must be in arrival order"
            )
        if t > MAX_TRACE_SPAN_S:
            raise RequestTraceError(
                f"{where}, column TIMESTAMP: {t:.0f} s after row 1, past the "
                f"{MAX_TRACE_SPAN_S:.0f} s a trace may span"
            )
        requests.append(
            TraceRequest(
                t_s=t,
                input_tokens=_tokens(row[index["ContextTokens"]], where, "ContextTokens", 1),
                output_tokens=_tokens(row[index["GeneratedTokens"]], where, "GeneratedTokens", 1),
                row=n,
            )
        )
    return RequestTrace(name=Path(source).stem, requests=tuple(requests))


@dataclass(frozen=True)
class Arrival:
    t_s: float  # when it is sent, seconds after the replay starts
    input_tokens: int
    output_tokens: int
    row: int  # the trace row it comes from (a thickened trace sends some rows more than once)


def schedule(
    trace: RequestTrace,
    speedup: float = 1.0,
    rate_scale: float = 1.0,
    seed: int = 0,
    duration_s: float | None = None,
) -> list[Arrival]:
    """The arrivals of an open-loop replay of ``trace``, in time order.

    ``speedup``: every time is divided by it (a 30-minute trace at 3 plays in 10 minutes). ``rate_scale``:
    each row is sent ``floor(rate_scale)`` times plus once more with probability its fraction (seeded: one
    seed, one schedule), so 0.5 keeps about every other request and 2.5 sends about two and a half times as
    many; a row's extra copies arrive at seeded times between it and the next row, so the bursts keep their
    shape. ``duration_s``: only arrivals before it (after the speedup)."""
    if not (math.isfinite(speedup) and 0 < speedup <= MAX_SPEEDUP):
        raise RequestTraceError(f"--speedup must be > 0 and at most {MAX_SPEEDUP:g}, got {speedup!r}")
    if not (math.isfinite(rate_scale) and 0 < rate_scale <= MAX_RATE_SCALE):
        raise RequestTraceError(
            f"--rate-scale must be > 0 and at most {MAX_RATE_SCALE:g}, got {rate_scale!r}"
        )
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise RequestTraceError(f"--duration must be a positive number of seconds, got {duration_s!r}")
    if len(trace.requests) * math.ceil(rate_scale) > MAX_ARRIVALS:
        raise RequestTraceError(f"--rate-scale {rate_scale:g}: more than {MAX_ARRIVALS} arrivals")
    rng = random.Random(f"request-trace:{seed}")
    whole, fraction = math.floor(rate_scale), rate_scale - math.floor(rate_scale)
    reqs = trace.requests
    out: list[Arrival] = []
    for i, req in enumerate(reqs):
        gap = (reqs[i + 1].t_s - req.t_s) if i + 1 < len(reqs) else 0.0
        copies = whole + (1 if rng.random() < fraction else 0)
        for k in range(copies):
            t = req.t_s if k == 0 else req.t_s + rng.random() * gap
            out.append(Arrival(t / speedup, req.input_tokens, req.output_tokens, req.row))
    out.sort(key=lambda a: (a.t_s, a.row))
    if duration_s is not None:
        out = [a for a in out if a.t_s < duration_s]
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, which SGLang's client uses)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Slo:
    """What a request must meet to count in goodput: its time to first token, its mean inter-token latency
    (the time per output token after the first), and optionally its end-to-end latency."""

    ttft_s: float = 2.0
    itl_s: float = 0.1
    e2e_s: float | None = None

    def text(self) -> str:
        parts = [f"ttft={self.ttft_s:g}s", f"itl={self.itl_s * 1000:g}ms"]
        return ",".join([*parts, f"e2e={self.e2e_s:g}s"] if self.e2e_s is not None else parts)

    def to_json(self) -> dict[str, float | None]:
        return {"ttft_s": self.ttft_s, "itl_s": self.itl_s, "e2e_s": self.e2e_s}


DEFAULT_SLO = Slo()


@dataclass(frozen=True)
class RequestOutcome:
    """One replayed request as scored: whether it completed, its output tokens, and its latencies."""

    ok: bool
    output_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None

    @property
    def itl_s(self) -> float | None:
        """The mean inter-token latency after the first token; None with fewer than two tokens."""
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def meets(self, slo: Slo) -> bool:
        if not self.ok or self.ttft_s is None or self.ttft_s > slo.ttft_s:
            return False
        itl = self.itl_s
        if itl is not None and itl > slo.itl_s:
            return False
        return slo.e2e_s is None or (self.e2e_s is not None and self.e2e_s <= slo.e2e_s)


PERCENTILES = (50, 90, 99)


def _percentiles(name: str, values: list[float]) -> dict[str, float | None]:
    return {f"{name}_p{q}_s": (percentile(values, q) if values else None) for q in PERCENTILES}


def open_loop_figures(outcomes: Iterable[RequestOutcome], span_s: float, slo: Slo) -> dict[str, object]:
    """The figures an open-loop replay is judged by, over ``span_s`` seconds (the replay's start to its last
    answer): TTFT, ITL and end-to-end percentiles of the completed requests, output tokens/s, requests/s,
    and goodput (requests/s that completed within the SLO)."""
    done = list(outcomes)
    ok = [o for o in done if o.ok]
    span = max(span_s, 1e-9)
    met = sum(1 for o in ok if o.meets(slo))
    tokens = sum(o.output_tokens for o in done)
    return {
        "requests": len(done),
        "completed": len(ok),
        "failed": len(done) - len(ok),
        "slo_met": met,
        "output_tokens": tokens,
        "span_s": span_s,
        "request_rps": len(ok) / span,
        "output_tok_s": tokens / span,
        "goodput_rps": met / span,
        **_percentiles("ttft", [o.ttft_s for o in ok if o.ttft_s is not None]),
        **_percentiles("itl", [v for o in ok if (v := o.itl_s) is not None]),
        **_percentiles("e2e", [o.e2e_s for o in ok if o.e2e_s is not None]),
        "slo": slo.to_json(),
    }
