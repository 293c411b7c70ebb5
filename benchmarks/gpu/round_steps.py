"""Each round of a ``knob_max_ab.py`` run as the servers saw it: their own decode lines in the round's span.

    python3 benchmarks/gpu/round_steps.py policy_off_vs_plain-rounds-32.json \\
        --log gated=spec-server.log.gz --log ungated=plain-server.log.gz

A round's tok/s is the client's. A low round can be a server that ran each step slower at the same batch
(the step: a kept extend, a stall), one that ran fewer requests at a time (the client or the scheduler), or
one whose explored steps drafted; SGLang's decode lines tell these apart. Each one covers
``--decode-log-interval`` decode steps (SGLang's default 40) and gives the batch's running requests, a
speculative server's accepted length (above 1.00 only where steps drafted) and its generation throughput.
Per round and server this prints the decode lines stamped in the round's span (``round_times``, which
``knob_max_ab.py`` saves since 2026-12-07), the decode steps per second they make, the median running
requests, the median generation tok/s of the lines at the level's batch (at least 90 % of it; not the
round's first line, whose span began before the round), and the largest accepted length. On the H200
(2026-12-07) a policy's 0 read 0.84 of plain in its first round at 32, and that run kept no round times
to say which.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spectower.storage.files import FileReadError, parse_json_text, read_text_capped

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: the checkout, for its sibling
from benchmarks.gpu.knob_max_ab import MAX_RESULT_BYTES, utc_span
from benchmarks.gpu.server_log import (
    DEFAULT_DECODE_LOG_INTERVAL,
    DecodeLine,
    decode_lines,
    read_log_lines,
)

AT_LEVEL = 0.9  # a line counts as at the level's batch from this share of it up
STAMP_SLACK_S = 1.0  # a line is stamped to the second: one stamped a second before the span may lie in it


@dataclass(frozen=True)
class RoundSteps:
    """One server's decode lines in one round's span."""

    concurrency: int
    round: int  # from 1
    server: str
    start: float
    end: float
    lines: int
    steps_per_s: float
    median_running: float | None
    median_gen_tok_s: float | None  # of the lines at the level's batch
    max_accept_len: float | None


def round_steps(concurrency: int, index: int, server: str, span: list[float], lines: list[DecodeLine],
                interval: int) -> RoundSteps:  # fmt: skip
    start, end = float(span[0]), float(span[1])
    inside = [line for line in lines if start - STAMP_SLACK_S < line.at <= end]
    # the first line's throughput is over the time since the line before it, which lies before the round
    # (an idle server's gap between rounds: 289 tok/s on a line at 32 running, the H200's of 2026-12-07)
    full = [line.gen_tok_s for line in inside[1:] if line.running >= AT_LEVEL * concurrency]
    accepts = [line.accept_len for line in inside if line.accept_len is not None]
    steps_per_s = len(inside) * interval / max(end - start, 1e-9)
    running = statistics.median(line.running for line in inside) if inside else None
    gen_tok_s = statistics.median(full) if full else None
    accept = max(accepts) if accepts else None
    return RoundSteps(concurrency, index + 1, server, start, end, len(inside), steps_per_s, running,
                      gen_tok_s, accept)  # fmt: skip


def rounds_of_run(saved: dict[str, Any], logs: dict[str, list[DecodeLine]], interval: int
                  ) -> list[RoundSteps]:  # fmt: skip
    """Every level's rounds of a saved run, for each server that has a log, in the run's order."""
    out: list[RoundSteps] = []
    for level in saved["levels"]:
        c = int(level["concurrency"])
        times = level.get("round_times")
        if not times:
            raise ValueError(f"level {c} keeps no round_times (a run saved before 2026-12-07)")
        for server, lines in logs.items():
            for i, span in enumerate(times[server]):
                out.append(round_steps(c, i, server, span, lines, interval))
    return sorted(out, key=lambda r: (r.concurrency, r.round, r.start))


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def describe(row: RoundSteps) -> str:
    span = utc_span(row.start, row.end)
    return (f"C={row.concurrency} round {row.round} {row.server} [{span}]: {row.lines} decode lines, "
            f"{row.steps_per_s:.0f} steps/s, running {_cell(row.median_running, '.0f')}, "
            f"{_cell(row.median_gen_tok_s, '.0f')} tok/s at the level (SGLang's), accept up to "
            f"{_cell(row.max_accept_len, '.2f')}")  # fmt: skip


def _log_arg(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected SERVER=PATH (gated=spec-server.log.gz), got {text!r}")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("result", type=Path, help="a knob_max_ab.py --out file")
    parser.add_argument("--log", type=_log_arg, action="append", required=True, metavar="SERVER=PATH",
                        help="a server's log (gated or ungated, as the run names them); .gz read as gzip")
    parser.add_argument("--decode-log-interval", type=int, default=DEFAULT_DECODE_LOG_INTERVAL,
                        help="the servers' --decode-log-interval (decode steps per line)")
    args = parser.parse_args(argv)
    if args.decode_log_interval < 1:
        parser.error(f"--decode-log-interval: at least 1, got {args.decode_log_interval}")
    try:
        saved = parse_json_text(read_text_capped(args.result, MAX_RESULT_BYTES))
        logs = {name: list(decode_lines(read_log_lines(path))) for name, path in args.log}
        rows = rounds_of_run(saved, logs, args.decode_log_interval)
    except FileReadError as exc:
        raise SystemExit(f"error: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        reason = f"no {exc} field" if isinstance(exc, KeyError) else str(exc)
        raise SystemExit(f"error: {args.result}: not a knob_max_ab.py result with round times ({reason})"
                         ) from None  # fmt: skip
    for row in rows:
        print(describe(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
