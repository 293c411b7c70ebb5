"""What the off path did in each policy run of one launch: draft extends skipped, batches drained, prefills
that skipped the draft's pass.

``measure_off.sh`` saves ``offpath-<run>.json`` after every policy run: each rank's ``gated_decode`` block of
the plugin (``draft_holes.ExtendSkip.report``), whose counts run from the launch. This sets the runs in the
order they ran (the counts only grow, so the order needs no clock) and prints each run as the difference from
the one before, per rank: decode batches whose draft extend was skipped, batches drained before drafting
again, drains cut short, and prefill batches that skipped the draft's pass (plugin 0.4.9 under a lock at 0,
0.4.10 also where the next decode batch is gated), with the requests still holed at the run's end.

Why it exists: plugin 0.4.10 skips the draft's prefill under a policy too, so on a replay each policy's runs
say how much of its prefill it saved, and how many batches its drains held gated, beside always off's
(data/gpu-runs/NOTEBOOK.md, "Ready").

    python3 benchmarks/gpu/off_path_runs.py 1-policies/offpath-*.json [--json OUT.json]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loop_phases
from run_snapshots import counts_since, in_run_order, main_for, read_blocks

MAX_OFFPATH_BYTES = 64 * 1024  # each rank's gated_decode block: a few counts
COUNTS = ("batches_skipped", "batches_drained", "drains_cut_short", "prefills_skipped")


@dataclass(frozen=True)
class RunOffPath:
    """One run's off path on one rank: its counts, and the requests still holed at its end."""

    run: str
    rank: int
    counts: dict[str, int]
    holed_at_end: int
    since_launch: bool  # the first run: its counts hold the launch and warm-up too


def run_name(path: Path) -> str:
    """``offpath-threshold-16.json`` -> ``threshold-16``."""
    return path.stem.removeprefix("offpath-")


def read_ranks(path: Path) -> list[dict[str, int]]:
    """Each rank's gated_decode block saved after a run; a file without one is one line naming it."""
    doc = read_blocks(path, MAX_OFFPATH_BYTES, "gated_decode")
    ranks = []
    for i, block in enumerate(doc):
        if not isinstance(block, dict):
            raise ValueError(f"{path}: rank {i} has no gated_decode block (the skip hooks not loaded?)")
        bad = [key for key in (*COUNTS, "holed_requests")
               if isinstance(block.get(key, 0), bool) or not isinstance(block.get(key, 0), int)]  # fmt: skip
        if bad:
            raise ValueError(f"{path}: rank {i}'s {bad[0]} is not a whole number")
        # a plugin before 0.4.9 has no prefills_skipped: none skipped
        ranks.append({key: int(block.get(key, 0)) for key in (*COUNTS, "holed_requests")})
    # A run that skipped nothing (it drafted throughout, or a simulator's idle rank) leaves these counts where
    # the run before left them, and the order would fall to the files' names: the loop block saved from the
    # same read beside it (stalls-<run>.json) counts every batch, so it breaks such ties.
    loops = loop_phases.beside(path, run_name(path))
    if loops is not None:
        for block, loop in zip(ranks, loops, strict=False):
            block[LOOP_PROGRESS] = sum(loop.phase_calls.values())
    return ranks


LOOP_PROGRESS = "loop_calls"  # not a count of the off path: only what orders the runs


def per_run(saved: dict[str, list[dict[str, int]]]) -> list[RunOffPath]:
    """Each run's own counts per rank, in the order the runs ran: the difference from the run before."""
    rows: list[RunOffPath] = []
    def progress(block: dict[str, int]) -> tuple[int, int]:
        return sum(block[key] for key in COUNTS), block.get(LOOP_PROGRESS, 0)

    for run, ranks, before in in_run_order(saved, progress):
        for rank, block in enumerate(ranks):
            counts = counts_since(run, rank, block, before[rank] if before is not None else None, COUNTS)
            rows.append(RunOffPath(run, rank, counts, block["holed_requests"], before is None))
    return rows


def print_rows(rows: Sequence[RunOffPath]) -> None:
    print("the off path per run (the difference from the run before)")
    print(f"{'run':<18}{'rank':>5}{'extends skipped':>17}{'drained':>9}{'cut short':>11}"
          f"{'prefills skipped':>18}{'holed at end':>14}")  # fmt: skip
    for row in rows:
        c = row.counts
        name = row.run + (" *" if row.since_launch else "")
        print(f"{name:<18}{row.rank:>5}{c['batches_skipped']:>17}{c['batches_drained']:>9}"
              f"{c['drains_cut_short']:>11}{c['prefills_skipped']:>18}{row.holed_at_end:>14}")  # fmt: skip
    if any(row.since_launch for row in rows):
        print("* the first run: its counts also hold everything since the launch (warm-up)")


def as_json(rows: Sequence[RunOffPath]) -> list[dict[str, Any]]:
    return [{"run": r.run, "rank": r.rank, "since_launch": r.since_launch, "counts": r.counts,
             "holed_at_end": r.holed_at_end} for r in rows]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(argv, __doc__.split("\n\n")[0], "offpath-<run>.json files of one launch", run_name,
                    read_ranks, per_run, print_rows, as_json)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
