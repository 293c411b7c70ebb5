"""The pauses an SGLang server's log tells of, outside the scheduler's own stalls: read into ``LauncherHold``s
so a replay's slow requests can be set against them by time (benchmarks/gpu/replay_table.py).

Two kinds of line are kept, every other line of the log is skipped:

- ``held``: the plugin's watch thread (plugin/stall_watch.py) woke late because its process's Python was
  held (the GIL, a collection or the CPU). In SGLang's launcher, which serves HTTP and runs the tokenizer
  manager, this line is the only trace such a pause leaves. It names its process (the scheduler's watch logs
  the same line), ends at the UTC time of day it gives (to the tenth of a second), and lasted the seconds it
  gives. Its date is the log line's; a watch line without a dated bracket (printed where the process had no
  logging configured) cannot be placed and is skipped.
- ``gc``: SGLang's ``LONG GARBAGE COLLECTION DETECTED`` warning (``--gc-warning-threshold-secs``; only the
  tokenizer manager, in the launcher, installs it), logged just after the collection ends, so it ends at the
  line's time (to the second), with the collected generation's objects as SGLang counts them after it.

Its decode lines are read too (``decode_lines``): SGLang's scheduler logs one every ``--decode-log-interval``
decode steps (40 by default) with the batch's running requests, the KV tokens in use, a speculative
server's mean accepted length and its generation throughput over those steps, so a stretch of time reads
as the server saw it: how many steps it ran, at what batch, drafting or not (benchmarks/gpu/round_steps.py).

The bracketed time SGLang's log lines start with (``[2026-12-05 01:58:58]``, or ``[... TP0]`` with a rank
tag, or ``[...01:58:58.123]`` with SGLANG_LOG_MS) is the machine's local time, read here as UTC: the GPU
machines' clocks are UTC, and the watch lines, which say UTC, agree with their brackets.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from spectower.storage.files import FileReadError

MAX_LOG_BYTES = 64 * 1024 * 1024  # a whole launch's log is a few MB; a .gz is capped at this much inflated
# How far a pause may lie outside the times its line gives, either side, when set against a stretch of time:
# a watch line's end is cut to the tenth of a second; a collection's line is stamped to the second, after it.
HELD_SLACK_S = 0.1
GC_SLACK_S = 1.0
DAY_S = 86_400.0

# SGLang's bracketed time of a log line (module docstring) and anything up to the message
LOG_LINE_TIME = r"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?)(?: [A-Z]+\d+)*\] .*?"
# the line plugin/stall_watch.py's _log_late writes (late_s with two decimals, clock_text's time of day)
_HELD = re.compile(
    LOG_LINE_TIME + r"spectower watch: pid (\d+): this process's Python was held (\d+\.\d\d) s "
    r"\(the GIL, a collection or the CPU\), to (\d{2}):(\d{2}):(\d{2})\.(\d) UTC"
)
# the line sglang.srt.utils.common.configure_gc_warning's callback writes
_GC = re.compile(
    LOG_LINE_TIME + r"LONG GARBAGE COLLECTION DETECTED \| Generation (\d+) \| Duration: (\d+(?:\.\d+)?)s "
    r"\| # Objects: ((?:gen\d+=\d+(?:, )?)+)"
)


# the line SGLang's scheduler writes every --decode-log-interval decode steps (``accept len`` on a
# speculative server only)
_DECODE = re.compile(
    LOG_LINE_TIME + r"Decode batch, #running-req: (\d+), #token: (\d+), .*?"
    r"(?:accept len: (\d+(?:\.\d+)?), .*?)?gen throughput \(token/s\): (\d+(?:\.\d+)?)"
)
DEFAULT_DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval: decode steps per decode line


@dataclass(frozen=True)
class DecodeLine:
    """One of SGLang's decode lines: stamped ``at`` (Unix time, to the second unless SGLANG_LOG_MS), over
    the last ``--decode-log-interval`` decode steps."""

    at: float
    running: int
    kv_tokens: int
    accept_len: float | None  # a speculative server's accepted tokens per request-step (1.00: none drafted)
    gen_tok_s: float


def parse_decode_line(line: str) -> DecodeLine | None:
    """The decode line this log line is, or None for any other line."""
    if (m := _DECODE.search(line)) is None:
        return None
    day, stamp, running, kv_tokens, accept, tok_s = m.groups()
    return DecodeLine(log_time(day, stamp), int(running), int(kv_tokens),
                      None if accept is None else float(accept), float(tok_s))  # fmt: skip


def decode_lines(lines: Iterable[str]) -> tuple[DecodeLine, ...]:
    """Every decode line of the log, in the log's order."""
    return tuple(found for line in lines if (found := parse_decode_line(line)) is not None)


@dataclass(frozen=True)
class LauncherHold:
    """One pause a server log tells of: a process's Python held (``held``) or a long garbage collection in
    SGLang's tokenizer manager (``gc``), ending at ``at`` (Unix time)."""

    at: float
    seconds: float
    kind: Literal["held", "gc"]
    pid: int | None = None  # the held process's (a gc line names none)
    generation: int | None = None  # a gc line's collected generation
    objects: int | None = None  # ... and its objects as SGLang counted them

    @property
    def began(self) -> float:
        return self.at - self.seconds

    @property
    def slack_s(self) -> float:
        return GC_SLACK_S if self.kind == "gc" else HELD_SLACK_S


def log_time(day: str, clock: str) -> float:
    """A log line's bracketed day and time of day as Unix seconds, read as UTC (module docstring)."""
    return datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=UTC).timestamp()


def parse_line(line: str) -> LauncherHold | None:
    """The pause one log line tells of, or None for any other line."""
    if (held := _HELD.search(line)) is not None:
        day, stamp, pid, seconds, hh, mm, ss, tenth = held.groups()
        logged = log_time(day, stamp)
        at = log_time(day, f"{hh}:{mm}:{ss}.{tenth}")
        if at < logged - DAY_S / 2:  # the watch's clock passed midnight before the line was stamped
            at += DAY_S
        elif at > logged + DAY_S / 2:  # the line was stamped just after midnight
            at -= DAY_S
        return LauncherHold(at, float(seconds), "held", pid=int(pid))
    if (gc := _GC.search(line)) is not None:
        day, stamp, generation, seconds, counts = gc.groups()
        objects = dict(re.findall(r"gen(\d+)=(\d+)", counts))
        found = objects.get(generation)
        return LauncherHold(log_time(day, stamp), float(seconds), "gc", generation=int(generation),
                            objects=None if found is None else int(found))  # fmt: skip
    return None


_STAMP = re.compile(LOG_LINE_TIME)


def last_line_time(lines: Sequence[str]) -> float | None:
    """The time stamped on the log's last line that carries one (None: none does): how far the log reaches. A
    call that hands back no log leaves its runs past the end of the one an earlier call handed back."""
    for line in reversed(lines):
        if (m := _STAMP.search(line)) is not None:
            return log_time(m[1], m[2])
    return None


def parse_server_log(lines: Iterable[str]) -> tuple[LauncherHold, ...]:
    """Every pause the log's lines tell of, in the log's order."""
    return tuple(hold for line in lines if (hold := parse_line(line)) is not None)


def read_log_lines(path: Path, max_bytes: int = MAX_LOG_BYTES) -> list[str]:
    """An SGLang server log's lines (plain text, or gzip when it ends in ``.gz``), refused past ``max_bytes``
    (of text, inflated); a file that cannot be read is a ``FileReadError`` naming it. Bytes that are not UTF-8
    (a log copied while a line was being written) are replaced: it is a log."""
    try:
        with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:  # gzip.BadGzipFile is one
        raise FileReadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (EOFError, zlib.error) as exc:
        raise FileReadError(f"{path}: cannot read (a damaged gzip file: {exc})") from None
    if len(raw) > max_bytes:
        raise FileReadError(f"{path}: more than {max_bytes} bytes")
    return raw.decode("utf-8", errors="replace").splitlines()


def holds_during(holds: Iterable[LauncherHold], start: float, end: float) -> list[LauncherHold]:
    """The pauses that may overlap ``start``..``end`` (Unix times), each widened by its line's slack, in order
    of their beginning."""
    found = [hold for hold in holds if hold.began - hold.slack_s <= end and hold.at + hold.slack_s >= start]
    return sorted(found, key=lambda hold: hold.began)
