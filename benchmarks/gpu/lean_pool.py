"""Explored against steady rates pooled over launches (issue #32, item 2): do the rates exploration measures
agree within 3 % with a steady stream's, once more windows than one call allows are pooled?

    python3 benchmarks/gpu/lean_pool.py LAUNCH.json [LAUNCH.json ...] [--bound 0.03] [--json OUT.json]

Each file is one launch's ``explore_lean.py --json`` (a steady level's windowed run gives a few windows per
session: 2026-12-06's 780-s run at 48 held 5, an interval 5.6 % wide). Per bin and side, every explored cell
of every launch is pooled against its own launch's steady rate, corrected by its own launch's tax (a launch's
rates and tax are its own: the pooled figure is a ratio of sums, explored tokens x scale over explored
seconds x steady tok/s):

    pooled = sum(tokens_i x scale_i) / sum(seconds_i x steady_i)

so a launch counts by its explored seconds, and with one launch it is that launch's corrected ratio. The 95 %
interval is a stratified bootstrap: each cell's explored intervals and its steady intervals resampled with
replacement on their own (``explore_lean.ratio_bounds`` is this bootstrap of one cell). The verdict:
``within`` when the interval lies inside 1 +- bound, ``outside`` when it excludes the whole band, else
``open``. Pool launches of one card and one pair: a different card moves the rates, and the lean is what
is asked. Bad input: one line naming the file and what was wrong, exit 2.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spectower.storage.request_traces import percentile

DEFAULT_BOUND = 0.03  # item 2: within 3 %
# each ratio's interval: a bootstrap over the collector's intervals (one every 5-6 s) of each side, seeded
# (explore_lean.py's one cell draws the same way: its ratio_bounds is this bootstrap of that cell)
DRAWS = 1000
SEED = 1

Cells = list[list[float]]  # one [steps, tokens, step seconds] per collector interval


@dataclass(frozen=True)
class Cell:
    """One launch's explored cell of a bin and side: its intervals, its launch's steady ones, its scale."""

    source: str
    run: str
    explored: Cells
    steady: Cells
    scale: float


def _cells(value: Any, where: str) -> Cells:
    if not isinstance(value, list) or not all(
        isinstance(c, list) and len(c) == 3 and all(isinstance(x, int | float) and x >= 0 for x in c)
        for c in value
    ):
        raise ValueError(f"{where}: expected a list of [steps, tokens, seconds], each a number >= 0")
    return [[float(x) for x in c] for c in value]


def read_launch(path: Path) -> dict[tuple[int, str], list[Cell]]:
    """(bin, mode) -> the launch's explored cells with their intervals (rows without them are skipped:
    fewer than ``--min-steps`` explored steps, or an ``explore_lean.py`` before the intervals were saved)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not an explore_lean.py --json file ({exc})") from None
    rows = data.get("lean") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: no 'lean' list: not an explore_lean.py --json file")
    out: dict[tuple[int, str], list[Cell]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "explored_cells" not in row:
            continue
        where = f"{path}: lean[{i}]"
        b, mode, scale = row.get("bin"), row.get("mode"), row.get("scale")
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"{where}.bin: expected a batch-size bin (an integer >= 1), got {b!r}")
        if mode not in ("drafted", "gated"):
            raise ValueError(f"{where}.mode: expected 'drafted' or 'gated', got {mode!r}")
        if not isinstance(scale, int | float) or not scale > 0:
            raise ValueError(f"{where}.scale: expected a number > 0, got {scale!r}")
        cell = Cell(str(path), str(row.get("run")), _cells(row["explored_cells"], f"{where}.explored_cells"),
                    _cells(row.get("steady_cells"), f"{where}.steady_cells"), float(scale))  # fmt: skip
        out.setdefault((b, mode), []).append(cell)
    return out


def _rate(cells: Cells) -> float | None:
    seconds = sum(c[2] for c in cells)
    return sum(c[1] for c in cells) / seconds if seconds > 0 else None


def pooled_ratio(cells: Sequence[Cell], draw: random.Random | None = None) -> float | None:
    """sum(tokens x scale) / sum(seconds x steady rate) over the cells; with ``draw``, each cell's explored
    and steady intervals resampled first. None where a steady side has no seconds."""
    tokens = expected = 0.0
    for cell in cells:
        explored, steady = cell.explored, cell.steady
        if draw is not None:
            explored = draw.choices(explored, k=len(explored))
            steady = draw.choices(steady, k=len(steady))
        steady_rate = _rate(steady)
        if steady_rate is None or steady_rate <= 0:
            return None
        tokens += sum(c[1] for c in explored) * cell.scale
        expected += sum(c[2] for c in explored) * steady_rate
    return tokens / expected if expected > 0 else None


def pooled_bounds(cells: Sequence[Cell], draws: int = DRAWS, seed: int = SEED) -> tuple[float, float] | None:
    """The 95 % interval of ``pooled_ratio``; None where any cell has fewer than two intervals a side."""
    if any(len(c.explored) < 2 or len(c.steady) < 2 for c in cells):
        return None
    rng = random.Random(seed)
    out = [r for _ in range(draws) if (r := pooled_ratio(cells, rng)) is not None]
    return (percentile(out, 2.5), percentile(out, 97.5)) if out else None


def verdict(bounds: tuple[float, float] | None, bound: float) -> str:
    if bounds is None:
        return "open"
    low, high = bounds
    if 1 - bound <= low and high <= 1 + bound:
        return "within"
    if high < 1 - bound or low > 1 + bound:
        return "outside"
    return "open"


def pool(launches: Sequence[dict[tuple[int, str], list[Cell]]], bound: float) -> list[dict[str, Any]]:
    """Per (bin, side) over every launch: the pooled ratio, its interval and the verdict."""
    keys = sorted({key for launch in launches for key in launch})
    rows = []
    for b, mode in keys:
        cells = [cell for launch in launches for cell in launch.get((b, mode), [])]
        ratio, bounds = pooled_ratio(cells), pooled_bounds(cells)
        sources = list(dict.fromkeys(c.source for c in cells))
        # each launch's own ratio beside the pooled one: launches that disagree are read before the pool is
        by_launch = [pooled_ratio([c for c in cells if c.source == source]) for source in sources]
        rows.append({
            "bin": b, "mode": mode, "launches": len({c.source for c in cells}), "cells": len(cells),
            "steps": int(sum(x[0] for c in cells for x in c.explored)),
            "intervals": sum(len(c.explored) for c in cells),
            "ratio": ratio, "low": bounds[0] if bounds else None, "high": bounds[1] if bounds else None,
            "verdict": verdict(bounds, bound), "by_launch": by_launch,
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("launches", nargs="+", type=Path, help="each launch's explore_lean.py --json")
    parser.add_argument(
        "--bound", type=float, default=DEFAULT_BOUND,
        help=f"the band around 1 a verdict reads against (default {DEFAULT_BOUND})",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        if not 0 < args.bound < 1:
            raise ValueError(f"--bound: expected a number between 0 and 1, got {args.bound}")
        launches = [read_launch(path) for path in args.launches]
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    rows = pool(launches, args.bound)
    print(f"explored / steady per bin and side, pooled over {len(launches)} launch(es): "
          "sum(tokens x scale) / sum(seconds x the launch's steady tok/s); 95 % interval from a stratified "
          f"bootstrap of {DRAWS} "
          f"draws; verdict against 1 +- {args.bound:g}")  # fmt: skip
    print(f"{'bin':>4} {'mode':<8} {'launches':>8} {'cells':>5} {'steps':>6} {'ints.':>5} {'pooled':>7} "
          f"{'95 % interval':>13}  verdict  by launch")  # fmt: skip
    for row in rows:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}"
        interval = "-" if row["low"] is None else f"{row['low']:.3f}-{row['high']:.3f}"
        print(f"{row['bin']:>4} {row['mode']:<8} {row['launches']:>8} {row['cells']:>5} {row['steps']:>6} "
              f"{row['intervals']:>5} {ratio:>7} {interval:>13}  {row['verdict']:<7}  "
              + " ".join("-" if r is None else f"{r:.3f}" for r in row["by_launch"]))  # fmt: skip
    if not rows:
        print("  no explored cell with its intervals (explore_lean.py --json of this session or later)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
