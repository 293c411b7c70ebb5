"""How long the running requests' contexts were, per run and mode, from a server's own decode lines.

    python3 benchmarks/gpu/decode_context.py runs/spec-server.log.gz \\
        --run on=1796693874:1796693935 --run learn-24=1796693938:1796693990

Issue #32, item 2: a gated bin's explored drafting read 3-7 % above always on's steady drafting on an H100
(data/gpu-runs/NOTEBOOK.md). One reading of it: the exploring part starts from a batch younger than a steady
stream's, whose shorter contexts make cheaper steps. SGLang's decode lines say how many KV tokens the running
requests held (``#token``) and how many ran (``#running-req``), once every ``--decode-log-interval`` steps;
their ratio is the mean context a running request held then. Per run (``NAME=START:END``, Unix seconds: the
first two fields of ``explore_lean.py --run``, which adds the run's ceiling) this prints the lines whose
accepted length says they drafted (``--drafted-from``, default 1.5: a line covers 40 steps, so one that met an
exploring part's edge reads in between) and those that ran gated (accepted length under ``--gated-below``,
default 1.2), each with its mean batch, its mean KV tokens per running request and that mean's 95 % bootstrap
interval over the lines.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: the checkout, for its sibling
from benchmarks.gpu.server_log import DecodeLine, decode_lines, read_log_lines

DEFAULT_DRAFTED_FROM = 1.5
DEFAULT_GATED_BELOW = 1.2
DEFAULT_MIN_RUNNING = 1  # lines with fewer running requests are left out (idle, or a level's edge)
BOOTSTRAP_DRAWS = 2000


@dataclass(frozen=True)
class Group:
    """One run's decode lines of one mode."""

    run: str
    mode: str  # "drafted" or "gated"
    lines: int
    mean_running: float
    kv_per_request: float
    low: float | None  # the mean's 95 % bootstrap interval (None: fewer than 2 lines)
    high: float | None


def parse_run(text: str) -> tuple[str, float, float]:
    """``NAME=START:END`` (Unix seconds) as (name, start, end)."""
    name, sep, span = text.partition("=")
    start, colon, end = span.partition(":")
    try:
        first, last = float(start), float(end)
    except ValueError:
        first = last = float("nan")
    if not name or not sep or not colon or not first < last:
        raise argparse.ArgumentTypeError(f"expected NAME=START:END with START < END (Unix s), got {text!r}")
    return name, first, last


def mean_interval(values: Sequence[float], seed: int = 0) -> tuple[float | None, float | None]:
    """The mean's 95 % interval from a bootstrap over ``values`` (None, None for fewer than 2)."""
    if len(values) < 2:
        return None, None
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP_DRAWS))
    return means[int(0.025 * BOOTSTRAP_DRAWS)], means[int(0.975 * BOOTSTRAP_DRAWS) - 1]


def groups(lines: Sequence[DecodeLine], run: str, start: float, end: float, drafted_from: float,
           gated_below: float, min_running: int = DEFAULT_MIN_RUNNING) -> list[Group]:  # fmt: skip
    """The run's drafted and gated lines (stamped within [start, end], ``min_running`` requests or more)."""
    inside = [ln for ln in lines if start <= ln.at <= end and ln.running >= min_running]
    out = []
    for mode, keep in (("drafted", lambda a: a >= drafted_from), ("gated", lambda a: a < gated_below)):
        chosen = [ln for ln in inside if ln.accept_len is not None and keep(ln.accept_len)]
        if not chosen:
            continue
        per_request = [ln.kv_tokens / ln.running for ln in chosen]
        low, high = mean_interval(per_request)
        out.append(Group(run, mode, len(chosen), statistics.fmean(ln.running for ln in chosen),
                         statistics.fmean(per_request), low, high))  # fmt: skip
    return out


def describe(group: Group) -> str:
    interval = "-" if group.low is None or group.high is None else f"{group.low:.1f}-{group.high:.1f}"
    return (f"{group.run:14s} {group.mode:8s} {group.lines:6d} {group.mean_running:8.1f} "
            f"{group.kv_per_request:10.1f}  {interval}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("log", type=Path, help="the server's log (.gz read as gzip)")
    parser.add_argument("--run", type=parse_run, action="append", required=True, help="NAME=START:END")
    parser.add_argument("--drafted-from", type=float, default=DEFAULT_DRAFTED_FROM,
                        help="a line drafted from this accepted length up")  # fmt: skip
    parser.add_argument("--gated-below", type=float, default=DEFAULT_GATED_BELOW,
                        help="a line ran gated below this accepted length")  # fmt: skip
    parser.add_argument("--min-running", type=int, default=DEFAULT_MIN_RUNNING)
    args = parser.parse_args(argv)
    if not args.gated_below <= args.drafted_from:
        parser.error("--gated-below must not exceed --drafted-from")
    try:
        lines = decode_lines(read_log_lines(args.log))
    except (OSError, ValueError) as exc:
        parser.error(f"log: {exc}")
    print("the running requests' contexts per run and mode, from SGLang's decode lines: lines, mean running "
          "requests, mean KV tokens per running request (#token / #running-req), its 95 % bootstrap "
          "interval")  # fmt: skip
    print(f"{'run':14s} {'mode':8s} {'lines':>6s} {'running':>8s} {'kv/request':>10s}  95 %")
    for name, start, end in args.run:
        found = groups(lines, name, start, end, args.drafted_from, args.gated_below, args.min_running)
        if not found:
            print(f"{name:14s} no decode line in its span")
        for group in found:
            print(describe(group))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
