"""How many of each policy run's decode batches the step counters counted, per run of one launch.

``measure_off.sh`` saves ``counters-<run>.json`` after every policy run: each rank's ``counters`` block
(plugin/engine_counters.py), cumulative from the launch. This sets the runs in the order they ran and prints
each as the difference from the one before, per rank: the steps counted in bins, the settling steps, the
verify results that matched no launch (``unmatched``) and the launches that never got one (``dropped``), and,
where the run's ``stalls-<run>.json`` lies beside it, the decode batches the scheduler loop ran (its DECODE
batches) and the share of them the counters counted.

Why it exists: a step the counters lose takes its span with it, and learn decides on their rates; the
check wants the server's own cumulative counts per run, not the collector's intervals (one every 5-6 s),
whose edges cut a run's first and last seconds (on 2026-12-06 that read, at first, as 9-11 % of a drafting
run's batches lost: data/gpu-runs/NOTEBOOK.md).

    python3 benchmarks/gpu/counted_runs.py 1-policies/counters-*.json [--json OUT.json]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loop_phases
from run_snapshots import counts_since, in_run_order, main_for, read_blocks
from spectower.plugin.engine_counters import MODES, validate

MAX_COUNTERS_BYTES = 256 * 1024  # each rank's counters block: a few lists of ~20 bins
COUNTS = ("steps", "settling", "unmatched", "dropped")


@dataclass(frozen=True)
class RunCounted:
    """One run's counting on one rank, and the scheduler loop's DECODE batches where its file was found."""

    run: str
    rank: int
    counts: dict[str, int]
    decode_batches: int | None
    since_launch: bool  # the first run: its counts hold the launch and warm-up too

    @property
    def counted_share(self) -> float | None:
        if not self.decode_batches:
            return None
        return (self.counts["steps"] + self.counts["settling"]) / self.decode_batches


def run_name(path: Path) -> str:
    """``counters-threshold-16.json`` -> ``threshold-16``."""
    return path.stem.removeprefix("counters-")


def read_ranks(path: Path) -> list[dict[str, int]]:
    """Each rank's counts from its counters block saved after a run (a bad block: one line naming the
    file); the run's ``stalls-<run>.json`` beside it, where there is one, adds its DECODE batches."""
    out = []
    for i, block in enumerate(read_blocks(path, MAX_COUNTERS_BYTES, "counters")):
        why = validate(block)
        if why is not None:
            raise ValueError(f"{path}: rank {i}: {why}")
        settling = block.get("settling") or {}
        counts = {"steps": int(sum(sum(block[mode]["steps"]) for mode in MODES)),
                  "settling": int(settling.get("steps", 0)),
                  "unmatched": int(block.get("unmatched", 0)),
                  "dropped": int(block.get("dropped", 0))}  # fmt: skip
        out.append(counts)
    loops = loop_phases.beside(path, run_name(path))
    if loops is not None:
        for counts, report in zip(out, loops, strict=False):
            mode = report.batch_modes.get("DECODE")  # batches run, or results (the simulator counts those)
            counts["decode_batches"] = int(max(mode[0], mode[2])) if mode else 0
    return out


def progress(counts: dict[str, int]) -> int:
    """How far a rank's counting had come: every count only grows within a launch."""
    return sum(counts[key] for key in COUNTS)


def per_run(saved: dict[str, list[dict[str, int]]]) -> list[RunCounted]:
    """Each run's own counts per rank, in the order the runs ran: the difference from the run before."""
    rows: list[RunCounted] = []
    for run, ranks, before in in_run_order(saved, progress):
        for rank, counts in enumerate(ranks):
            earlier = before[rank] if before is not None else None
            own = counts_since(run, rank, counts, earlier, COUNTS)
            decode = None
            if "decode_batches" in counts and (earlier is None or "decode_batches" in earlier):
                decode = counts["decode_batches"] - (earlier["decode_batches"] if earlier else 0)
            rows.append(RunCounted(run, rank, own, decode, since_launch=before is None))
    return rows


def print_rows(rows: Sequence[RunCounted]) -> None:
    print("decode steps the counters counted per run (the difference from the run before): in bins, "
          "settling, verifies unmatched, launches dropped; the scheduler loop's DECODE batches and the share "
          "counted")  # fmt: skip
    for row in rows:
        c = row.counts
        share = f"{row.counted_share:.3f}" if row.counted_share is not None else "-"
        decode = row.decode_batches if row.decode_batches is not None else "-"
        label = row.run + (" *" if row.since_launch else "")
        print(f"  {label:<20}rank {row.rank}: {c['steps']:>7} {c['settling']:>6} {c['unmatched']:>6} "
              f"{c['dropped']:>6}  DECODE {decode:>7}  counted {share}")  # fmt: skip
    if any(row.since_launch for row in rows):
        print("* the first run: its counts also hold everything since the launch (warm-up)")


def as_json(rows: Sequence[RunCounted]) -> list[dict[str, Any]]:
    return [{"run": r.run, "rank": r.rank, "since_launch": r.since_launch, **r.counts,
             "decode_batches": r.decode_batches, "counted_share": r.counted_share} for r in rows]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(argv, (__doc__ or "").split("\n\n")[0], "counters-<run>.json files of one launch",
                    run_name, read_ranks, per_run, print_rows, as_json)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
