"""What the scheduler's loop spent its time on in each policy run of one launch.

``measure_off.sh`` saves ``stalls-<run>.json`` after every policy run: each rank's ``loop`` block of the
plugin (plugin/loop_stalls.py), whose phase times and calls count from the launch. This sets the runs in the
order they ran (the counts only grow, so the order needs no clock) and prints each run as the difference from
the one before: per rank, the loop's turns and batches, and the seconds of each phase with their cost per
turn (taking in requests, scheduling) or per batch (running it, waiting for its result). The first run's
figures also hold the launch and warm-up, and it is marked so.

Why it exists: on the H100 of 2026-12-05 (the 0.5 pair under Azure's replay) every run after always off
spent about 3x its seconds taking in requests (14 s against 4.5 s over runs of 180 s), while the runs' tokens
were the same. Whether that is the policy's reads, the queue, or the order of the runs is for the next calls
to tell (data/gpu-runs/NOTEBOOK.md); this prints the figure for every launch from now on, and from plugin
0.4.11 on each run's ``input`` split by what its calls handled (nothing, generate requests, control reads).

    python3 benchmarks/gpu/loop_phases.py 1-policies/stalls-*.json [--json OUT.json]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from run_snapshots import FELL, in_run_order, main_for, read_blocks
from spectower.collectors.sglang.stalls import PHASES, LoopReport, loop_report

MAX_STALLS_BYTES = 4 * 1024 * 1024  # each rank's loop block: a few kB with its recent stalls' stacks


@dataclass(frozen=True)
class RunLoop:
    """One run's share of the loop on one rank: calls and seconds per phase."""

    run: str
    rank: int
    calls: dict[str, int]
    seconds: dict[str, float]
    since_launch: bool  # the first run: its figures hold the launch and warm-up too
    # ``input`` by the kind of requests a call handled (plugin 0.4.11 on): kind -> (calls, seconds, requests)
    input_kinds: dict[str, tuple[int, float, int]] = field(default_factory=dict)
    # batches by forward mode (0.4.11 on): mode -> (batches run, run s, results, result s, new tokens)
    batch_modes: dict[str, tuple[int, float, int, float, int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The run's name as the tables print it: the first run's marked (its figures hold the launch)."""
        return self.run + (" *" if self.since_launch else "")

    def per_call_ms(self, phase: str) -> float | None:
        calls = self.calls.get(phase, 0)
        return 1000.0 * self.seconds.get(phase, 0.0) / calls if calls > 0 else None


def run_name(path: Path) -> str:
    """``stalls-threshold-47.json`` -> ``threshold-47``."""
    return path.stem.removeprefix("stalls-")


def read_ranks(path: Path) -> list[LoopReport]:
    """Each rank's loop block saved after a run; a file without one is one line naming it."""
    doc = read_blocks(path, MAX_STALLS_BYTES, "loop")
    reports = [loop_report(block) for block in doc]
    if any(report is None or not report.phase_calls for report in reports):
        raise ValueError(f"{path}: a rank has no loop block with its phases' calls (a plugin before 0.4.7?)")
    return [report for report in reports if report is not None]


def beside(path: Path, run: str) -> list[LoopReport] | None:
    """The loop blocks saved from the same read as another snapshot of ``run`` (``stalls-<run>.json`` in
    ``path``'s folder), None where there is no such file."""
    stalls = path.with_name(f"stalls-{run}.json")
    return read_ranks(stalls) if stalls.is_file() else None


def progress(report: LoopReport) -> tuple[int, float]:
    """How far a rank's loop had come: every phase's calls, then seconds (both only grow within a launch;
    the simulator counts results alone)."""
    return sum(report.phase_calls.values()), sum(report.phase_seconds.values())


def per_run(saved: dict[str, list[LoopReport]]) -> list[RunLoop]:
    """Each run's own figures per rank, in the order the runs ran: the difference from the run before."""
    rows: list[RunLoop] = []
    for run, ranks, before in in_run_order(saved, progress):
        for rank, report in enumerate(ranks):
            earlier = before[rank] if before is not None else None
            calls = {p: report.phase_calls.get(p, 0) - (earlier.phase_calls.get(p, 0) if earlier else 0)
                     for p in PHASES}  # fmt: skip
            seconds = {p: report.phase_seconds.get(p, 0.0) - (earlier.phase_seconds.get(p, 0.0) if earlier
                                                               else 0.0) for p in PHASES}  # fmt: skip
            if any(value < 0 for value in (*calls.values(), *seconds.values())):
                raise ValueError(FELL.format(run=run, rank=rank))
            first = before is None
            kinds = _since(report.input_kinds, earlier.input_kinds if earlier else None)
            modes = _since(report.batch_modes, earlier.batch_modes if earlier else None)
            rows.append(RunLoop(run=run, rank=rank, calls=calls, seconds=seconds, since_launch=first,
                                input_kinds=kinds, batch_modes=modes))  # fmt: skip
    return rows


Counts = TypeVar("Counts", bound=tuple[Any, ...])


def _since(now: dict[str, Counts], before: dict[str, Counts] | None) -> dict[str, Counts]:
    """A run's counts per key (input kind, batch mode): the difference from the run before, field by field
    (a key new in the run counts from 0)."""
    out = {}
    for key, counts in now.items():
        was = before.get(key) if before is not None else None
        if was is not None:
            counts = cast(Counts, tuple(a - b for a, b in zip(counts, was, strict=True)))
        out[key] = counts
    return out


def _cell(seconds: float, per_call: float | None, unit: str) -> str:
    return f"{seconds:7.1f} s ({per_call:.3f} {unit})" if per_call is not None else f"{seconds:7.1f} s (-)"


def print_rows(rows: Sequence[RunLoop]) -> None:
    print("the scheduler loop per run (the difference from the run before; per turn for input and schedule, "
          "per batch for run and result)")  # fmt: skip
    print(f"{'run':<18}{'rank':>5}{'turns':>9}{'batches':>9}  "
          + "".join(f"{phase:<22}" for phase in PHASES))  # fmt: skip
    for row in rows:
        cells = "".join(
            f"{_cell(row.seconds[p], row.per_call_ms(p), 'ms'):<22}" for p in PHASES
        )
        name = row.label
        print(f"{name:<18}{row.rank:>5}{row.calls['input']:>9}{row.calls['result']:>9}  {cells}")
    if any(row.since_launch for row in rows):
        print("* the first run: its figures also hold everything since the launch (warm-up, graphs)")
    if any(row.input_kinds for row in rows):
        print_input_kinds(rows)
    if any(row.batch_modes for row in rows):
        print_batch_modes(rows)


def print_input_kinds(rows: Sequence[RunLoop]) -> None:
    """Each run's ``input`` seconds by what the calls handled (plugin 0.4.11 on), the largest first."""
    print("taking in requests by what came in, per run: kind calls, seconds (ms a call; requests)")
    for row in rows:
        kinds = sorted(row.input_kinds.items(), key=lambda item: -item[1][1])
        cells = "; ".join(
            f"{kind} {calls}, {seconds:.2f} s ({1000.0 * seconds / calls:.3f} ms; {requests})"
            for kind, (calls, seconds, requests) in kinds if calls > 0
        )  # fmt: skip
        print(f"  {row.label:<18}rank {row.rank}: {cells or '-'}")


def print_batch_modes(rows: Sequence[RunLoop]) -> None:
    """Each run's batches by forward mode (plugin 0.4.11 on): a prefill's GPU time is waited for in its
    result in the overlap loop, so EXTEND's result seconds are the prefills' time."""
    print("batches by forward mode, per run: mode batches, run s + result s (ms a batch; new tokens)")
    for row in rows:
        modes = sorted(row.batch_modes.items(), key=lambda item: -(item[1][1] + item[1][3]))
        # batches: those run (the simulator's ranks report results alone)
        cells = "; ".join(
            f"{mode} {max(runs, results)}, {run_s:.1f} + {result_s:.1f} s "
            f"({1000.0 * (run_s + result_s) / max(runs, results):.2f} ms; {tokens})"
            for mode, (runs, run_s, results, result_s, tokens) in modes if max(runs, results) > 0
        )  # fmt: skip
        print(f"  {row.label:<18}rank {row.rank}: {cells or '-'}")


def as_json(rows: Sequence[RunLoop]) -> list[dict[str, Any]]:
    return [{"run": r.run, "rank": r.rank, "since_launch": r.since_launch, "calls": r.calls,
             "seconds": {p: round(s, 6) for p, s in r.seconds.items()},
             "input_kinds": {k: {"calls": c, "seconds": round(s, 6), "requests": n}
                             for k, (c, s, n) in r.input_kinds.items()},
             "batch_modes": {m: {"runs": n, "run_s": round(rs, 6), "results": k, "result_s": round(ts, 6),
                                 "tokens": t} for m, (n, rs, k, ts, t) in r.batch_modes.items()}}
            for r in rows]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(argv, __doc__.split("\n\n")[0], "stalls-<run>.json files of one launch", run_name,
                    read_ranks, per_run, print_rows, as_json)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
