"""What reading a server's decode counters costs, as each plugin since 0.4.13 stores them.

    python3 benchmarks/counter_read_bench.py [--intervals 720,3600] [--repeats 7] [--dir /tmp/x]

The console's live curve reads ``storage.queries.counter_samples`` every refresh and learn's warm start reads
``storage.queries.counter_intervals`` once; since plugin 0.4.14 both read the ``prefilled`` rows beside the
decode ones (each stored interval's block, each per-bin sample's prefilled steps), so a window of such a
plugin holds half as many rows again; since 0.4.15 both read the ``slots`` rows (each mode's requests per step
in every bin) and the ``mix`` rows (an exploring part's request mix, a few intervals in a hundred) as well
(``counter_samples`` since 2026-12-06's eighth session: the console levels the explored drafting for the mix
as learn does). For each window size (intervals of 5 s, the collector's default: 720 is an hour) it fills a
fresh SQLite database three times, as plugin 0.4.13 stores its counters (drafted, gated and outside rows in 4
bins), as 0.4.14 does (the prefilled rows too) and as 0.4.15 does (the slots and mix rows too), then prints
the median and the best of ``--repeats`` reads of each query over the whole window (raw tier).

Bad input: one line naming the option, exit 2.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from number_lists import number_list
from spectower.storage import open_database, queries
from spectower.storage.counter_modes import MIX_ROWS, OUTSIDE_MODES, PREFILLED_MODES, SLOTS_MODES
from spectower.storage.models import EngineCounterSample

T0 = 1_760_000_400.0
STEP_S = 5.0  # the collector's default interval
BINS = (8, 16, 32, 64)
# what each stores: decode and outside rows; + prefilled; + slots and mix
PLUGINS = ("0.4.13", "0.4.14", "0.4.15")
MIX_EVERY = 30  # intervals per exploring part's mix rows (a window every 90-145 s at a steady load)


def rows(sid: int, intervals: int, plugin: str) -> list[EngineCounterSample]:
    """Each interval's rows as the collector stores a busy server's: both modes and their outside seconds
    in every bin; from plugin 0.4.14 each mode's prefilled steps (a tenth of its steps); from 0.4.15 each
    mode's slots in every bin and, every ``MIX_EVERY`` intervals, one part's mix rows in the top bin."""
    out = []
    for k in range(intervals):
        ts = T0 + STEP_S * (k + 1)
        for b in BINS:
            for mode, steps, tokens, seconds in (("drafted", 300, 600 * b, 3.0), ("gated", 20, 20 * b, 0.15)):
                cells = [(mode, steps, tokens, seconds), (OUTSIDE_MODES[mode], 0, 0, seconds * 0.03)]
                if plugin >= "0.4.14":
                    cells.append((PREFILLED_MODES[mode], steps // 10, tokens // 10, seconds / 8))
                if plugin >= "0.4.15":
                    cells.append((SLOTS_MODES[mode], 0, steps * b, 0.0))
                out += [EngineCounterSample(server_id=sid, ts=ts, batch_size=b, mode=m, steps=n, tokens=t,
                                            time_s=sec) for m, n, t, sec in cells]  # fmt: skip
        if plugin >= "0.4.15" and k % MIX_EVERY == 0:
            accept, inverse = MIX_ROWS  # one part of 48 requests: their accept sum and inverse sum
            out += [EngineCounterSample(server_id=sid, ts=ts, batch_size=BINS[-1], mode=accept, steps=1,
                                        tokens=48, time_s=144.0),
                    EngineCounterSample(server_id=sid, ts=ts, batch_size=BINS[-1], mode=inverse, steps=0,
                                        tokens=0, time_s=18.0)]  # fmt: skip
    return out


def timed(read: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, best) seconds of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def parse_sizes(text: str) -> list[int]:
    return number_list(text, "--intervals", int, lambda n: 2 <= n <= 100_000, "each between 2 and 100000")


def read_times(path: Path, intervals: int, plugin: str, repeats: int) -> tuple[int, list[str]]:
    """Fill a database at ``path`` with ``intervals`` intervals of rows; (rows, each query's figure)."""
    db = open_database(path)
    try:
        sid = db.server_id("http://bench")
        found = rows(sid, intervals, plugin)
        writer = db.writer(maintenance=None)
        try:
            writer.put(*found)
            assert writer.flush(600)
        finally:
            writer.close()
        end = T0 + STEP_S * (intervals + 1)
        figures = []
        for read in (queries.counter_samples, queries.counter_intervals):
            window = functools.partial(read, db, sid, T0, end, max_intervals=intervals + 1)
            median, best = timed(window, repeats)
            figures.append(f"{1000 * median:8.1f} ms (best {1000 * best:6.1f})")
        return len(found), figures
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--intervals", default="720,3600", help="window sizes, 5-s intervals (720: an hour)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None, help="where the databases go (default: a temp dir)")
    args = parser.parse_args(argv)
    try:
        sizes = parse_sizes(args.intervals)
        if args.repeats < 1:
            raise ValueError(f"--repeats: at least 1, got {args.repeats}")
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"{'intervals':>9} {'rows':>7} {'plugin':>9} {'counter_samples':>22} {'counter_intervals':>22}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in sizes:
            for plugin in PLUGINS:
                path = Path(tmp) / f"{n}-{plugin}.db"
                count, figures = read_times(path, n, plugin, args.repeats)
                print(f"{n:>9} {count:>7} {plugin:>9} {figures[0]:>22} {figures[1]:>22}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
