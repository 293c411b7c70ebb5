"""How full each replay run kept the server's KV cache, from SGLang's own batch lines in the launch's log.

Why: on the H100 of 2026-12-05 (the 0.5 pair under Azure's replay, a plain server beside the speculative one)
the KV pool held 84 884 tokens, and every run filled it to 0.99 at its peaks: requests waited with fewer than
``--max-running-requests`` running, and one retraction sent 4 094 tokens back to prefill. There a server that
falls a little behind holds more requests, fills the pool sooner and admits fewer, so a lag of about 1 % of
delivered tokens became a 43 % longer p99 TTFT. This prints, per run, what the scheduler logged while it ran:

- its decode lines (SGLang logs one every ``--decode-log-interval`` batches): the token usage's mean, highest
  and share of lines at or above 0.9, the running and queued requests, and the lines where requests queued
  while fewer than the most requests ran (admission held back by the pool, not by the request limit);
- its retractions (``KV cache pool is full. Retract requests.``): how many, and the tokens they gave back;
- its prefill lines: the prompts and prompt tokens it took in, and those the radix cache already held.

Each run's window is its replay's (``started_at`` to ``started_at + span_s`` in ``replay-<run>.json``); the
log's bracketed times are read as UTC, as server_log.py reads them.

    python3 benchmarks/gpu/kv_pressure.py --server-log spec-server.log.gz replay-*.json [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from spectower.storage.files import FileReadError, parse_json_text, read_text_capped

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: the checkout, for its sibling
from benchmarks.gpu.replay_table import MAX_REPLAY_BYTES
from benchmarks.gpu.server_log import LOG_LINE_TIME, last_line_time, log_time, read_log_lines

FULL = 0.9  # a token usage at or above it is a full pool: admission waits for tokens to free
_DECODE = re.compile(LOG_LINE_TIME + r"Decode batch, #running-req: (\d+), #token: (\d+), "
                     r"token usage: ([\d.]+),.*#queue-req: (\d+)")  # fmt: skip
_PREFILL = re.compile(LOG_LINE_TIME + r"Prefill batch, #new-seq: (\d+), #new-token: (\d+), "
                      r"#cached-token: (\d+),")  # fmt: skip
_RETRACT = re.compile(LOG_LINE_TIME + r"KV cache pool is full\. Retract requests\. "
                      r"#retracted_reqs: (\d+), #new_tokens_gained: (\d+)")  # fmt: skip
_LIMIT = re.compile(r"max_running_requests=(\d+)")


@dataclass(frozen=True)
class LogEvents:
    """The batch lines of one log: (time, running, tokens, usage, queued) per decode line, (time, prompts,
    new tokens, cached tokens) per prefill line, (time, requests, tokens) per retraction."""

    decode: tuple[tuple[float, int, int, float, int], ...]
    prefill: tuple[tuple[float, int, int, int], ...]
    retract: tuple[tuple[float, int, int], ...]
    max_running: int | None
    last_line_at: float | None = None  # how far the log reaches (server_log.last_line_time)


@dataclass(frozen=True)
class RunPressure:
    run: str
    decode_lines: int
    usage_mean: float | None
    usage_max: float | None
    full_share: float | None  # of the decode lines, at or above FULL
    running_mean: float | None
    queued_mean: float | None
    queued_max: int
    held_back_lines: int  # requests queued while fewer than max_running ran
    retractions: int
    retracted_tokens: int
    prompts: int
    prompt_tokens: int
    cached_tokens: int
    # how much of the run the log reaches (its last stamped line): "whole", "part" (the log ends during the
    # run) or "none" (it ends before the run began: a run of a later call than the one that handed it back)
    covered: str = "whole"


def parse_log(lines: Iterable[str]) -> LogEvents:
    lines = list(lines)
    decode, prefill, retract = [], [], []
    max_running: int | None = None
    for line in lines:
        if (m := _DECODE.search(line)) is not None:
            decode.append((log_time(m[1], m[2]), int(m[3]), int(m[4]), float(m[5]), int(m[6])))
        elif (m := _PREFILL.search(line)) is not None:
            prefill.append((log_time(m[1], m[2]), int(m[3]), int(m[4]), int(m[5])))
        elif (m := _RETRACT.search(line)) is not None:
            retract.append((log_time(m[1], m[2]), int(m[3]), int(m[4])))
        elif max_running is None and (m := _LIMIT.search(line)) is not None:
            max_running = int(m[1])
    return LogEvents(tuple(decode), tuple(prefill), tuple(retract), max_running, last_line_time(lines))


def run_window(path: Path) -> tuple[float, float]:
    """A replay run's span on the wall clock, from its ``--json``; one line naming the file without it."""
    try:
        doc = parse_json_text(read_text_capped(path, MAX_REPLAY_BYTES))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    start, span = (doc.get("started_at"), doc.get("span_s")) if isinstance(doc, dict) else (None, None)
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in (start, span)):
        raise ValueError(f"{path}: not a bench replay --json result with started_at and span_s")
    return float(start), float(start) + float(span)  # type: ignore[arg-type]


def pressure(run: str, events: LogEvents, start: float, end: float) -> RunPressure:
    decode = [d for d in events.decode if start <= d[0] <= end]
    prefill = [p for p in events.prefill if start <= p[0] <= end]
    retract = [r for r in events.retract if start <= r[0] <= end]
    usage = [d[3] for d in decode]
    limit = events.max_running
    held = sum(1 for d in decode if d[4] > 0 and (limit is None or d[1] < limit))

    def mean(values: Sequence[float]) -> float | None:
        return statistics.fmean(values) if values else None

    last = events.last_line_at
    covered = "none" if last is None or last < start else "part" if last < end else "whole"

    return RunPressure(
        run=run, decode_lines=len(decode), usage_mean=mean(usage), usage_max=max(usage, default=None),
        full_share=sum(u >= FULL for u in usage) / len(usage) if usage else None,
        running_mean=mean([d[1] for d in decode]), queued_mean=mean([d[4] for d in decode]),
        queued_max=max((d[4] for d in decode), default=0), held_back_lines=held,
        retractions=sum(r[1] for r in retract), retracted_tokens=sum(r[2] for r in retract),
        prompts=sum(p[1] for p in prefill), prompt_tokens=sum(p[2] for p in prefill),
        cached_tokens=sum(p[3] for p in prefill), covered=covered,
    )  # fmt: skip


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_rows(rows: Sequence[RunPressure], max_running: int | None) -> None:
    limit = f"< {max_running}" if max_running is not None else "(limit not in the log)"
    print(f"the KV pool per run, from SGLang's decode lines: token usage mean / highest / share >= {FULL:g}; "
          f"requests running and queued; lines queued with running {limit}; retractions; "
          "prefill")  # fmt: skip
    print(f"{'run':<16}{'lines':>6}{'usage':>7}{'max':>6}{'full':>6}{'running':>9}{'queued':>8}{'max':>5}"
          f"{'held':>6}{'retract':>9}{'tokens':>8}{'prompts':>9}{'prompt tok':>12}{'cached':>8}")  # fmt: skip
    for r in rows:
        if r.covered == "none":  # a row of zeros would read as an idle pool
            print(f"{r.run:<16} not in the server log: it ends before this run began")
            continue
        mark = " *" if r.covered == "part" else ""
        print(f"{r.run:<16}{r.decode_lines:>6}{_f(r.usage_mean):>7}{_f(r.usage_max):>6}{_f(r.full_share):>6}"
              f"{_f(r.running_mean, 1):>9}{_f(r.queued_mean, 1):>8}{r.queued_max:>5}{r.held_back_lines:>6}"
              f"{r.retractions:>9}{r.retracted_tokens:>8}{r.prompts:>9}{r.prompt_tokens:>12}"
              f"{r.cached_tokens:>8}{mark}")  # fmt: skip
    if any(r.covered == "part" for r in rows):
        print("* the server log ends during this run: its figures hold the part of the run the log reaches")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="replay-<run>.json files of one launch")
    parser.add_argument("--server-log", type=Path, required=True, help="the launch's SGLang log (.gz too)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    try:
        windows = {path.stem.removeprefix("replay-"): run_window(path) for path in args.runs}
        events = parse_log(read_log_lines(args.server_log))
    except (OSError, ValueError, FileReadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = sorted((pressure(run, events, *span) for run, span in windows.items()),
                  key=lambda row: windows[row.run][0])  # fmt: skip
    print_rows(rows, events.max_running)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
