"""Snapshots of one launch's counts, saved after each policy run by ``measure_off.sh``
(``stalls-<run>.json``, ``offpath-<run>.json``: a list of each rank's block), set in the order the runs ran
and read back as each run's difference from the one before. The counts only grow within a launch, so the
order needs no clock.

The one reader and command line behind ``loop_phases.py`` and ``off_path_runs.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from spectower.storage.files import parse_json_text, read_text_capped

Snapshot = TypeVar("Snapshot")
Row = TypeVar("Row")

FELL = ("{run}: rank {rank}'s counts fall from the run before: not one launch (a restarted server counts "
        "from 0 again)")


def read_blocks(path: Path, max_bytes: int, block: str) -> list[Any]:
    """The list of each rank's ``block`` a run's snapshot file holds (read capped); anything else is one line
    naming the file."""
    try:
        doc = parse_json_text(read_text_capped(path, max_bytes))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(doc, list) or not doc:
        raise ValueError(f"{path}: expected a list of each rank's {block} block")
    return doc


def in_run_order(saved: dict[str, list[Snapshot]], progress: Callable[[Snapshot], Any]
                 ) -> list[tuple[str, list[Snapshot], list[Snapshot] | None]]:  # fmt: skip
    """Each run's snapshots (one per rank) with the run before's (None for the first), in the order the runs
    ran: by how far rank 0's counts had come (``progress``)."""
    if len({len(ranks) for ranks in saved.values()}) > 1:
        raise ValueError("the files hold different numbers of ranks: not one launch")
    order = sorted(saved, key=lambda run: progress(saved[run][0]))
    out: list[tuple[str, list[Snapshot], list[Snapshot] | None]] = []
    before: list[Snapshot] | None = None
    for run in order:
        out.append((run, saved[run], before))
        before = saved[run]
    return out


def counts_since(run: str, rank: int, now: dict[str, int], before: dict[str, int] | None,
                 keys: Sequence[str]) -> dict[str, int]:  # fmt: skip
    """A run's own counts on one rank: ``now`` less the run before's (``before``; None for the first run),
    for each of ``keys``; counts that fell are one line (``FELL``): not one launch."""
    own = {key: now[key] - (before[key] if before is not None else 0) for key in keys}
    if any(value < 0 for value in own.values()):
        raise ValueError(FELL.format(run=run, rank=rank))
    return own


def main_for(argv: Sequence[str] | None, description: str, files_help: str, run_name: Callable[[Path], str],
             read_ranks: Callable[[Path], list[Snapshot]],
             per_run: Callable[[dict[str, list[Snapshot]]], list[Row]],
             print_rows: Callable[[Sequence[Row]], None],
             as_json: Callable[[Sequence[Row]], list[dict[str, Any]]]) -> int:  # fmt: skip
    """The command line: the snapshot files of one launch (``files_help`` says which), each run named by
    ``run_name``, the rows printed (``--json``: written too); a bad file is one line naming it (exit 2)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("files", nargs="+", type=Path, help=files_help)
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    try:
        rows = per_run({run_name(path): read_ranks(path) for path in args.files})
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_rows(rows)
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(rows), indent=1) + "\n")
    return 0
