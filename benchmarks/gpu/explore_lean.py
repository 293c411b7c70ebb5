"""Do the rates exploration measures lean? Per batch-size bin, explored against steady, from one policy.db.

Issue #32, item 2. ``measure_off.sh``'s policy phase runs the same day-shaped load under several policies on
one server while ``spectower collect`` stores the plugin's decode counters (``engine_counter_sample``). Under
a policy's ceiling a bin at or below it drafts and explores gated batches; a bin above it is gated and
explores drafting ones (in windows, plugin/explore.py). Under an operator's lock (always on, always off)
nothing explores: those runs are the steady rates. For every bin this prints output tok/s of step time per
mode (from plugin 0.4.13 the step time holds each mode's seconds outside its steps, as storage reads every
stored interval: ``engine_counters.with_outside``), explored against steady, and the gated ratio again after
learn's kept-extend correction (the tax the server's extend rows measure over the runs, plugin 0.4.6, else
``kept_extend_tax``: control/kept_extend.py), which is what learn's estimate uses.

Each ratio carries a 95 % interval: a bootstrap over the collector's intervals (one every 5-6 s) of the
explored and the steady side, and the count of explored intervals it pools. Explored steps come in windows
(an exploring part of at most 3 s), so read the interval with that count.

Then what each run's ceiling made of each bin ("served per bin"): all its steps there, drafted and gated,
against always off's gated rate. Below a partial ceiling a bin can serve less than always off without
drafting: after each burst the gated-decode plugin's drain holds it at 0 steps with the draft extend (the 0.5
pair under Azure's replay, 2026-12-05: 0.84-0.92 of always off, drafting under 12 % of those bins' steps).

Then the request mix of the explored drafting (plugin 0.4.15), from each run's stored intervals as above:
per bin, the explored drafted steps' mean batch and tokens per request-step against always on's, the
exploring parts' requests' arithmetic and harmonic mean accept (their lean A/H), and the explored rate
against always on's raw, mix-levelled as learn levels it (its tokens at ``slots x H``: what its steps would
have committed with a drafting stream's mix) and as learn reads it (the mix, then the prefills).

Then what exploring cost each run under a ceiling, in time, beside its step seconds and the seconds its
counter intervals cover (the rest of them is time outside every counted step): the step seconds of drafting
explored above the ceiling, and the seconds more than their tokens would have taken gated (the bin's own
gated rate in that run), as shares of the run's step time. Explored drafting batches cost 2-5x a gated step
where contexts are long (Azure's replay on the H200, 2026-12-04), so a share of batches is a larger share of
time.

    python3 benchmarks/gpu/explore_lean.py --db policy.db --run learn=START:END:48 --run on=START:END:max \\
        --run off=START:END:0 [--steady-on on] [--steady-off off] [--json OUT.json]

``START:END`` are unix seconds (the runs' control events say them), the third field the run's ceiling
(``max``: always on, ``0``: always off). ``--runs-from-db`` finds them instead for the replays the database
holds (``bench replay``'s saved runs, as ``measure_off.sh`` makes them): each run from its start for its
measured duration, split where a set moved the ceiling (``learn@16``, ``learn@8``), an operator's set of 0
as ``0`` and of the server's maximum as ``max``; in a database without replays, the closed-loop runs the
policy phase audited (``policy run: X`` to ``policy run X done``; ``LOAD_PATTERN=steps:16,48,64`` gives
steady levels per bin). Counters are read through storage's one query module. The
bin the ceiling falls in runs both modes by design (the gate reopens below the ceiling minus a margin):
``mixed``.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lean_pool import DRAWS, SEED, Cell, pooled_bounds  # sibling scripts, as this one is run
from load_pairs import repeats_of, run_mean
from policy_table import read_pattern
from spectower.control import kept_extend, mix_levelled, prefilled
from spectower.control.policy import learn_counters
from spectower.control.policy.learn import OPTION_DEFAULTS
from spectower.control.prefilled import (
    ModeSteps,
    levelled_seconds,
    levelled_tok_s,
    steady_prefill_s_per_token,
)
from spectower.plugin.engine_counters import MAX_BIN, MIX_FIELDS, counter_bins
from spectower.storage import queries
from spectower.storage.database import RECORDED_XZ, Database, open_database, open_recorded
from spectower.storage.models import BenchPoint, BenchRun, ControlEvent
from sqlmodel import select

FORMATS = (("explored_tok_s", ".0f"), ("steady_tok_s", ".0f"), ("ratio", ".3f"), ("corrected", ".3f"))
TOP = 1 << 30  # the ceiling of an always-on run: above every bin
ALL_BINS = counter_bins(MAX_BIN)  # the plugin's bins: each one's lower edge is the one before it
CLIENT_SKIP_S = 10.0  # --load-logs: each run's first seconds left out (its clients starting)


@dataclass(frozen=True)
class Run:
    name: str
    start: float
    end: float
    ceiling: int  # TOP: drafts every bin; 0: gates every bin


def parse_run(text: str) -> Run:
    """``NAME=START:END:CEILING`` (CEILING: an integer or ``max``), or ValueError naming the problem."""
    name, _, rest = text.partition("=")
    parts = rest.split(":")
    if not name or len(parts) != 3:
        raise ValueError(f"--run: expected NAME=START:END:CEILING, got {text!r}")
    try:
        start, end = float(parts[0]), float(parts[1])
        ceiling = TOP if parts[2] == "max" else int(parts[2])
    except ValueError:
        raise ValueError(
            f"--run: START and END must be numbers, CEILING an integer or max, got {text!r}"
        ) from None
    if not start < end or ceiling < 0:
        raise ValueError(f"--run: needs START < END and CEILING >= 0, got {text!r}")
    return Run(name, start, end, ceiling)


def runs_from_db(db: Database, max_running_requests: int) -> list[Run]:
    """The runs the database holds, each split where a confirmed set moved the ceiling: its saved replays
    (``bench replay``'s runs, each from its start for its measured duration), else the closed-loop runs
    ``measure_off.sh``'s policy phase audits (its ``policy run: X`` event to its ``policy run X done``)."""
    with db.session() as session:
        replay = select(BenchRun).where(BenchRun.source == "replay").order_by(BenchRun.created_at)
        replays = session.exec(replay).all()
        points = {p.run_id: p for p in session.exec(select(BenchPoint)).all()}
        events = session.exec(select(ControlEvent).order_by(ControlEvent.ts)).all()
    sets = [e for e in events if e.action == "set" and e.confirmed and e.new_max_bs is not None]
    spans: list[tuple[str, float, float]] = []
    for run in replays:
        point = points.get(run.id)
        if point is not None and point.duration_s:
            name = (run.tag or f"run-{run.id}").removeprefix("replay-")
            spans.append((name, float(run.created_at), float(run.created_at) + float(point.duration_s)))
    if not spans:
        spans = audited_runs(events)
    out: list[Run] = []
    for name, start, end in spans:
        out += split_at_sets(name, start, end, sets, max_running_requests)
    return out


# measure_off.sh's audit reasons: "policy run: X" opens a run, "policy run X done" ends it
RUN_OPENS, RUN_ENDS = "policy run: ", ("policy run ", " done")


def audited_runs(events: Sequence[ControlEvent]) -> list[tuple[str, float, float]]:
    """(name, start, end) of each run ``measure_off.sh``'s policy phase audited: its first ``policy run: X``
    event (the lock's set, or the release before a policy starts) to its ``policy run X done`` release; a
    policy run again is ``X-2``, ``X-3``, ... as the script names its logs (``lib.sh``'s ``run_label``)."""
    out: list[tuple[str, float, float]] = []
    started: float | None = None
    for event in events:
        reason = event.reason
        if started is None and reason.startswith(RUN_OPENS):
            started = float(event.ts)
        elif started is not None and reason.startswith(RUN_ENDS[0]) and reason.endswith(RUN_ENDS[1]):
            name = reason.removeprefix(RUN_ENDS[0]).removesuffix(RUN_ENDS[1]).replace(":", "-")
            taken = {label for label, _, _ in out}
            label, n = name, 2
            while label in taken:
                label, n = f"{name}-{n}", n + 1
            out.append((label, started, float(event.ts)))
            started = None
    return out


def split_at_sets(
    name: str, start: float, end: float, sets: Sequence[ControlEvent], max_running_requests: int
) -> list[Run]:
    """One run per ceiling it held: cut where a confirmed set moved it (the last set before its start gives
    its first); the stretch before any set is left out (its ceiling unknown)."""
    before = [e for e in sets if e.ts <= start]
    ceiling = before[-1].new_max_bs if before else None
    cuts = [e for e in sets if start < e.ts < end]
    bounds = [start, *(float(e.ts) for e in cuts), end]
    ceilings = [ceiling, *(e.new_max_bs for e in cuts)]
    out: list[Run] = []
    for i, value in enumerate(ceilings):
        if value is None:
            continue
        top = value >= max_running_requests
        label = name if len(ceilings) == 1 else f"{name}@{'max' if top else value}"
        out.append(Run(label, bounds[i], bounds[i + 1], TOP if top else int(value)))
    return out


# How far before a run the intervals are read, to know where its first one starts (the one before it ends)
LOOKBACK_S = 60.0


def run_intervals(db: Database, server_id: int, run: Run) -> list[dict[str, Any]]:
    """The server's stored counter intervals that lie within the run: each starts (the interval before it
    ends) at or after the run's start. One that spans the start holds the run before's last batches (a
    rehearsal on the simulator: a 5-s interval over the set of an operator's off carried 22 of always on's
    drafted steps into it)."""
    read = queries.counter_intervals(db, server_id, run.start - LOOKBACK_S, run.end, max_intervals=100_000)
    # each keeps where it began (``from_ts``), so a run's covered seconds can be told from its span
    return [{**now, "from_ts": float(before["ts"])} for before, now in itertools.pairwise(read)
            if float(before["ts"]) >= run.start]  # fmt: skip


def covered_s(intervals: Sequence[dict[str, Any]]) -> float:
    """The seconds ``run_intervals``' intervals cover: less than the run's span by up to an interval at
    each end (the collector stores one every 5-6 s), so a run's counted steps are those seconds' alone."""
    return sum(float(i["ts"]) - float(i["from_ts"]) for i in intervals)


def bin_cells(intervals: Sequence[dict[str, Any]]) -> dict[tuple[int, str], list[list[float]]]:
    """(bin, mode) -> one [steps, tokens, step seconds] per interval with steps there."""
    out: dict[tuple[int, str], list[list[float]]] = {}
    for interval in intervals:
        for i, b in enumerate(interval["bins"]):
            for mode in ("drafted", "gated"):
                block = interval[mode]
                if block["steps"][i] > 0:
                    out.setdefault((int(b), mode), []).append(
                        [block["steps"][i], block["tokens"][i], block["time_s"][i]]
                    )
    return out


def summed(cells: dict[tuple[int, str], list[list[float]]]) -> dict[tuple[int, str], list[float]]:
    """(bin, mode) -> [steps, tokens, step seconds] summed over the intervals."""
    return {key: [sum(c[i] for c in rows) for i in range(3)] for key, rows in cells.items()}


def ratio_bounds(explored: Sequence[Sequence[float]], steady: Sequence[Sequence[float]],
                 draws: int = DRAWS, seed: int = SEED) -> tuple[float, float] | None:
    """The 95 % interval of (explored tok/s of step time) / (steady's), each side's intervals resampled with
    replacement; None with fewer than two intervals on a side. Explored steps come in windows (an exploring
    part of up to 3 s spans a few intervals), so the interval is somewhat narrower than the windows allow:
    read it with the count of intervals beside it. One cell of ``lean_pool``'s bootstrap, which pools many."""
    cell = Cell("", "", [list(c) for c in explored], [list(c) for c in steady], 1.0)
    return pooled_bounds([cell], draws, seed)


def rate(cell: Sequence[float] | None, min_steps: int) -> float | None:
    """Output tok/s of step time, None below ``min_steps`` steps."""
    if cell is None or cell[0] < min_steps or cell[2] <= 0:
        return None
    return cell[1] / cell[2]


def pooled(totals: dict[str, dict[tuple[int, str], list[float]]], names: Sequence[str]
           ) -> dict[tuple[int, str], list[float]]:
    """Cells summed over the named runs: a steady mode's rate per bin from every run of it."""
    out: dict[tuple[int, str], list[float]] = {}
    for name in names:
        for key, cell in totals.get(name, {}).items():
            into = out.setdefault(key, [0.0, 0.0, 0.0])
            for i, value in enumerate(cell):
                into[i] += value
    return out


def lean_table(
    totals: dict[str, dict[tuple[int, str], list[float]]],
    runs: Sequence[Run],
    steady_on: str,
    steady_off: str,
    tax: float,
    min_steps: int,
    cells: dict[str, dict[tuple[int, str], list[list[float]]]] | None = None,
) -> list[dict[str, Any]]:
    """Per bin and explored run: the explored rate of the mode the ceiling did not choose, over the steady
    rate of that mode (the always-on runs' drafted, the always-off runs' gated, each pooled with its
    repeats). With ``cells`` (``bin_cells`` per run), each ratio's 95 % interval (``ratio_bounds``) and the
    count of intervals its explored rate pools."""
    bins = sorted({b for cells in totals.values() for b, _ in cells})
    on_runs, off_runs = repeats_of(steady_on, totals), repeats_of(steady_off, totals)
    on_cells, off_cells = pooled(totals, on_runs), pooled(totals, off_runs)
    per_interval = cells or {}
    steady_intervals = {  # (bin, mode) -> the steady runs' intervals there, pooled as their totals are
        "drafted": lambda b: [c for n in on_runs for c in per_interval.get(n, {}).get((b, "drafted"), [])],
        "gated": lambda b: [c for n in off_runs for c in per_interval.get(n, {}).get((b, "gated"), [])],
    }
    rows = []
    for b in bins:
        steady = {  # no steady run of a mode (its name ""): no ratio for it
            "drafted": rate(on_cells.get((b, "drafted")), min_steps),
            "gated": rate(off_cells.get((b, "gated")), min_steps),
        }
        for run in runs:
            if run.name in (*on_runs, *off_runs):
                continue
            mode = explored_mode(b, run.ceiling)
            if mode is None:
                rows.append({"bin": b, "run": run.name, "mode": "mixed", "steps": 0})
                continue
            cell = totals[run.name].get((b, mode))
            explored = rate(cell, min_steps)
            row: dict[str, Any] = {
                "bin": b,
                "run": run.name,
                "mode": mode,
                "steps": int(cell[0]) if cell else 0,
                "explored_tok_s": explored,
                "steady_tok_s": steady[mode],
            }
            if explored is not None and steady[mode]:
                row["ratio"] = explored / steady[mode]
                # learn reads a drafted bin's explored gated rate as if the extend were skipped: / (1 - tax)
                scale = 1.0 / (1.0 - tax) if mode == "gated" else 1.0
                row["corrected"] = row["ratio"] * scale
                explored_intervals = per_interval.get(run.name, {}).get((b, mode), [])
                if explored_intervals:
                    row["intervals"] = len(explored_intervals)
                    # both sides' intervals and the scale, so lean_pool.py can pool launches exactly
                    row["scale"] = scale
                    row["explored_cells"] = explored_intervals
                    row["steady_cells"] = steady_intervals[mode](b)
                    bounds = ratio_bounds(explored_intervals, row["steady_cells"])
                    if bounds is not None:  # of the corrected ratio, which is what learn reads
                        row["low"], row["high"] = bounds[0] * scale, bounds[1] * scale
            rows.append(row)
    return rows


def served_table(
    totals: dict[str, dict[tuple[int, str], list[float]]],
    runs: Sequence[Run],
    steady_off: str,
    min_steps: int,
) -> list[dict[str, Any]]:
    """Per bin and run (the always-off run aside): what the run's ceiling made of the bin, all its steps
    there (drafted and gated) as output tok/s of step time, over the always-off run's gated rate. Below a
    partial ceiling a bin need not draft: after a burst the gated-decode plugin holds it at 0 steps with the
    draft extend until the holed requests finish (the drain), so the bin can serve less than always off
    without drafting at all (the 0.5 pair under Azure's replay, 2026-12-05: learn at 24 drafted bins 1-12
    only, its bins 16 and 24 drained at 0.80 and 0.92 of off's rate)."""
    out = []
    off_runs = repeats_of(steady_off, totals)
    off_cells = pooled(totals, off_runs)
    bins = sorted({b for cells in totals.values() for b, _ in cells})
    for b in bins:
        off = rate(off_cells.get((b, "gated")), min_steps)
        for run in runs:
            if run.name in off_runs:
                continue
            drafted = totals[run.name].get((b, "drafted"), [0.0, 0.0, 0.0])
            gated = totals[run.name].get((b, "gated"), [0.0, 0.0, 0.0])
            both = [d + g for d, g in zip(drafted, gated, strict=True)]
            served = rate(both, min_steps)
            if served is None:
                continue
            row: dict[str, Any] = {
                "bin": b,
                "run": run.name,
                "drafted_steps": int(drafted[0]),
                "gated_steps": int(gated[0]),
                "served_tok_s": served,
                "off_tok_s": off,
            }
            if off:
                row["ratio"] = served / off
            out.append(row)
    return out


def explore_cost(
    totals: dict[str, dict[tuple[int, str], list[float]]], runs: Sequence[Run], min_steps: int,
    covered: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Per run under a ceiling: its step seconds, the seconds of drafting explored above the ceiling, and
    the extra seconds that cost (those steps' time less what their tokens took gated in the same bin, at
    that bin's gated rate in the run). Only drafting above the ceiling is counted: every batch there is
    gated by the ceiling, so each drafted one explored; below it the gate's margin and dwell also gate
    batches, so a gated batch there need not be an explored one. Bins with fewer than ``min_steps`` gated
    steps are left out of the extra. Every run is listed, a ceiling of 0 too: a policy's 0 explores (its
    stream drafts the smallest batches, plugin/explore.py's floor), and an operator's locked 0 reads 0 s,
    which is what the lock promises."""
    out = []
    for run in runs:
        cells = totals[run.name]
        bins = sorted({b for b, _ in cells})
        total = sum(cell[2] for cell in cells.values())
        tokens = sum(cell[1] for cell in cells.values())
        explored = extra = 0.0
        for b in bins:
            cell = cells.get((b, "drafted"))
            if explored_mode(b, run.ceiling) != "drafted" or cell is None or not cell[1]:
                continue
            explored += cell[2]
            gated = cells.get((b, "gated"))
            if gated is not None and gated[0] >= min_steps and gated[1] > 0:
                extra += cell[2] - cell[1] * gated[2] / gated[1]
        if total > 0:
            share = {"explored_share": explored / total, "extra_share": extra / total}
            # the seconds its intervals cover (its span where not given): the step seconds' share of them
            # is the time outside every counted step (prefill outside a step's span, the scheduler's own)
            span = (covered or {}).get(run.name, run.end - run.start)
            out.append({"run": run.name, "step_s": total, "covered_s": span, "tokens": tokens,
                        "tok_s": tokens / total, "explored_s": explored, "extra_s": extra,
                        **share})  # fmt: skip
    return out


def add_client_rates(costs: list[dict[str, Any]], folder: Path, skip_s: float) -> None:
    """Each run's client-side output tok/s (its ``load-<run>.log`` in ``folder``: the 5-s lines after
    ``skip_s``, ``load_pairs.run_mean``) beside its counters' rate, and their ratio, where the run is one
    span (a run split where its ceiling moved has one client log for several rows: left out). The counters
    time decode steps only, so the ratio is the share of the client's time the steps account for; on the
    H200 (2026-12-06) drafting runs read 2-3 % lower than gated ones, the lead learn decides on."""
    names = [row["run"].split("@")[0] for row in costs]
    for row, name in zip(costs, names, strict=True):
        log = folder / f"load-{name}.log"
        if names.count(name) != 1 or not log.exists():
            continue
        client, _lines = run_mean(log, skip_s)
        row["client_tok_s"], row["client_over_counted"] = client, client / row["tok_s"]


def mixed_loads(folder: Path, flag: str, names: Sequence[str]) -> str | None:
    """A line saying that the steady runs ``names`` (a lock and its repeats, pooled) ran different load
    patterns (their ``load-<run>.log`` headers in ``folder``), else None. A bin's steady rate follows the
    batch within it: on an H100 (2026-12-07) always on's bin 48 served 5 540 tok/s of step time under the day
    (mean batch 38) and 6 173 under steps:48 (47): pooled, a half ceiling's explored drafting under 48 read
    1.092 of "steady", against its own load's 1.017."""
    patterns = {name: read_pattern(folder / f"load-{name}.log") for name in names
                if (folder / f"load-{name}.log").exists()}  # fmt: skip
    if len({p for p in patterns.values() if p is not None}) < 2:
        return None
    said = "; ".join(f"{name}: {pattern or '?'}" for name, pattern in patterns.items())
    return (f"{flag}: pooled over runs under different loads ({said}): a bin's steady rate follows the batch "
            f"within it, so a ratio leans toward the load it shares; give {flag} one run (e.g. {names[-1]})")


def extend_table(db: Database, server_id: int, runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per run and bin, the steady gated steps that kept the draft extend and those that skipped it (the
    counters' ``extend`` block, plugin 0.4.6): steps and tok/s of step time each, and the run's own tax where
    both sides have ``kept_extend.MIN_STEPS``. A ceiling at the server's maximum keeps it on its drain (the
    holed requests a run before left, settling) and its explored gated runs, a gated bin's windows on their
    warm parts (settling too), and the locks skip it: so one run's kept rate can be read against another's
    skipped one, beside the lean table's explored gated ratio (in the bins), which is what learn corrects
    (2026-12-06: that one 5.6-5.8 % short at 48 on an H100 and the H200, the warm parts 6.6 % and 10.0 %).
    The first stored interval of a run may hold up to one collector interval of the run before."""
    out = []
    for run in runs:
        found = queries.extend_totals(db, server_id, run.start, run.end, max_intervals=100_000)
        if found is None:
            continue
        bins, block = found
        own = kept_extend.from_totals(found)
        taxes = {b.batch_size: b.tax for b in own.bins} if own else {}
        for i, b in enumerate(bins):
            sides = {kind: [block[kind][key][i] for key in ("steps", "tokens", "time_s")] for kind in block}
            if not any(cell[0] for cell in sides.values()):
                continue
            row: dict[str, Any] = {"run": run.name, "bin": b}
            for kind, (steps, tokens, seconds) in sides.items():
                row[f"{kind}_steps"] = int(steps)
                row[f"{kind}_tok_s"] = tokens / seconds if steps and seconds > 0 else None
            row["tax"] = taxes.get(b)
            out.append(row)
    return out


def interval_prefilled(intervals: Sequence[dict[str, Any]]) -> list[dict[tuple[int, str], list[float]]]:
    """Per interval of ``run_intervals``, (bin, mode) -> [steps, tokens, seconds] of its steps whose span held
    a prefill: the stored interval's ``prefilled`` block (plugin 0.4.14; ``storage.queries.counter_intervals``
    gives it as ``rates()`` does), empty where it has none."""
    out = []
    for interval in intervals:
        block = interval.get("prefilled") or {}
        out.append({(int(b), mode): [block[mode][key][i] for key in ("steps", "tokens", "time_s")]
                    for mode in block for i, b in enumerate(interval["bins"])
                    if block[mode]["steps"][i]})  # fmt: skip
    return out


def prefilled_cells(intervals: Sequence[dict[str, Any]]) -> dict[tuple[int, str], list[float]]:
    """(bin, mode) -> [steps, tokens, seconds] of the run's steps whose span held a prefill, summed over its
    intervals (``interval_prefilled``); empty before plugin 0.4.14."""
    out: dict[tuple[int, str], list[float]] = {}
    for cells in interval_prefilled(intervals):
        for key, cell in cells.items():
            into = out.setdefault(key, [0.0, 0.0, 0.0])
            for i, value in enumerate(cell):
                into[i] += value
    return out


def levelled_cells(intervals: Sequence[dict[str, Any]], pre: Sequence[dict[tuple[int, str], list[float]]],
                   b: int, mode: str, pure_s: float, per_token_s: float) -> list[list[float]]:  # fmt: skip
    """The cell's intervals as ``prefilled.levelled_intervals`` levels them: each interval's prefilled steps
    at the pooled pure step time, plus ``per_token_s`` for each output token; one [steps, tokens, seconds]
    per interval with steps there (``bin_cells``' shape, for ``ratio_bounds``)."""
    out = []
    for interval, cells in zip(intervals, pre, strict=True):
        bins = [int(x) for x in interval["bins"]]
        i = bins.index(b) if b in bins else -1
        if i < 0 or interval[mode]["steps"][i] <= 0:
            continue
        steps, tokens, seconds = (interval[mode][k][i] for k in ("steps", "tokens", "time_s"))
        held = cells.get((b, mode), [0.0, 0.0, 0.0])
        out.append([steps, tokens, levelled_seconds(seconds, held[0], held[2], tokens, pure_s, per_token_s)])
    return out


def mode_steps(cell: Sequence[float] | None, prefilled: Sequence[float] | None) -> ModeSteps | None:
    if not cell or cell[0] <= 0:
        return None
    return ModeSteps(*cell[:3], *(prefilled or (0.0, 0.0, 0.0))[:3])


def pure_tok_s(cell: ModeSteps | None) -> float | None:
    """Output tok/s of the cell's prefill-free steps alone."""
    pure = cell.pure_step_s() if cell is not None else None
    return None if cell is None or pure is None else cell.tokens / cell.steps / pure


def prefill_table(
    totals: dict[str, dict[tuple[int, str], list[float]]],
    prefilled: dict[str, dict[tuple[int, str], list[float]]],
    lean: Sequence[dict[str, Any]],
    steady_on: str,
    steady_off: str,
    tax: float,
    per_interval: Mapping[str, tuple[Sequence[dict[str, Any]], Sequence[dict[tuple[int, str], list[float]]]]]
    | None = None,
) -> list[dict[str, Any]]:
    """Per explored cell of the lean table where the counters say which steps held a prefill (plugin
    0.4.14): the share of its steps that did, against the steady run's; the explored over the steady rate of
    the steps without one (``pure``); and levelled as learn levels it (control/prefilled.py,
    ``levelled_intervals``): the explored cell's pure steps plus its mode's steady prefill seconds per token
    (the steady runs' cells over every bin), against the steady cell as measured. The gated side corrected
    by the tax as learn reads it. With ``per_interval`` (per run, its intervals and ``interval_prefilled``'s
    cells) and the lean row's steady intervals, the levelled ratio's 95 % interval (``ratio_bounds``)."""
    steady_runs = {"drafted": repeats_of(steady_on, totals), "gated": repeats_of(steady_off, totals)}
    steady_cells = {mode: (pooled(totals, names), pooled(prefilled, names))
                    for mode, names in steady_runs.items()}  # fmt: skip
    per_token = {mode: steady_prefill_s_per_token(
                     [c for key, cell in cells.items() if key[1] == mode
                      and (c := mode_steps(cell, pre.get(key))) is not None])
                 for mode, (cells, pre) in steady_cells.items()}  # fmt: skip
    out = []
    for row in lean:
        if row.get("explored_tok_s") is None or row["run"] not in prefilled or not prefilled[row["run"]]:
            continue
        b, mode = row["bin"], row["mode"]
        steady_totals, steady_prefilled = steady_cells[mode]
        mine = mode_steps(totals[row["run"]].get((b, mode)), prefilled[row["run"]].get((b, mode)))
        theirs = mode_steps(steady_totals.get((b, mode)), steady_prefilled.get((b, mode)))
        p = per_token[mode]
        explored = levelled_tok_s(mine, p) if mine is not None and p is not None else None
        steady = theirs.tokens / theirs.time_s if theirs is not None and theirs.time_s > 0 else None
        shares = [c.prefilled_steps / c.steps if c is not None else 0.0 for c in (mine, theirs)]
        entry: dict[str, Any] = {"bin": b, "run": row["run"], "mode": mode, "explored_prefilled": shares[0],
                                 "steady_prefilled": shares[1], "prefill_s_per_token": p,
                                 "explored_tok_s": explored, "steady_tok_s": steady}  # fmt: skip
        pure = [pure_tok_s(c) for c in (mine, theirs)]
        scale = 1.0 / (1.0 - tax) if mode == "gated" else 1.0
        if pure[0] is not None and pure[1]:
            entry["pure"] = pure[0] / pure[1] * scale
        if explored is not None and steady:
            entry["ratio"] = explored / steady
            entry["corrected"] = entry["ratio"] * scale
            found = (per_interval or {}).get(row["run"])
            pure_s = mine.pure_step_s() if mine is not None else None
            if found is not None and pure_s is not None and p is not None and row.get("steady_cells"):
                mine_cells = levelled_cells(*found, b, mode, pure_s, p)
                bounds = ratio_bounds(mine_cells, row["steady_cells"])
                if bounds is not None:
                    entry["low"], entry["high"] = bounds[0] * scale, bounds[1] * scale
        out.append(entry)
    return out


def drafted_cell(intervals: Sequence[Mapping[str, Any]], b: int) -> dict[str, float]:
    """Bin ``b``'s drafted steps, tokens and seconds summed over the intervals, with the slots of those steps
    and the exploring parts' mix sums where the intervals carry them (plugin 0.4.15, stored since then:
    ``storage.queries.counter_intervals``)."""
    cell = dict.fromkeys(("steps", "tokens", "time_s", "slots", *MIX_FIELDS), 0.0)
    for interval in intervals:
        bins = [int(x) for x in interval["bins"]]
        if b not in bins:
            continue
        i = bins.index(b)
        for field in ("steps", "tokens", "time_s"):
            cell[field] += float(interval["drafted"][field][i])
        slots, mix = interval.get("slots"), interval.get("mix")
        if slots is not None:
            cell["slots"] += float(slots["drafted"][i])
        if mix is not None:
            for field in MIX_FIELDS:
                cell[field] += float(mix[field][i])
    return cell


def drafted_reading(cell: Mapping[str, float], prefix: str = "") -> dict[str, Any]:
    """A drafted cell's steps, mean batch (slots per step), accept per slot and tok/s of step time."""
    return {f"{prefix}steps": int(cell["steps"]), f"{prefix}batch": cell["slots"] / cell["steps"],
            f"{prefix}accept": cell["tokens"] / cell["slots"],
            f"{prefix}tok_s": cell["tokens"] / cell["time_s"]}  # fmt: skip


def mix_table(found: Mapping[str, Sequence[dict[str, Any]]], runs: Sequence[Run], steady_on: str,
              steady_off: str, min_steps: int) -> list[dict[str, Any]]:  # fmt: skip
    """Per run under a policy (not the steady runs: under their locks nothing explores) and bin its ceiling
    gated (``explored_mode``: drafted) with ``min_steps`` explored drafted steps and their slots counted
    (plugin 0.4.15), from the run's own stored intervals (``run_intervals``, as the lean table reads them):
    the explored cell's mean batch and accept per slot, always on's (its runs pooled, as the lean table pools
    them) in the same bin, the cell's exploring parts' A, H and A/H, and tok/s of step time explored against
    steady three ways: raw; mix-levelled as learn levels it (``mix_levelled.mix_levelled_intervals`` over the
    run's intervals as learn's window: H pooled over the window's parts, none where they are fewer than it
    asks); and as learn reads the cell (``learn_counters.as_choices``: the mix, then the prefills).

    Read from the intervals, not from ``counters-<run>.json``: a run's file holds its first piece too, the
    seconds before the policy's first set, in which the load's fresh batch drafted under the ceiling before
    (2026-12-06, H100: threshold:24's file counted 121 explored steps at 48 accepting 2.813 a slot, of which
    47 were that piece's, at 3.03; the part alone, 74 steps, accepted 2.673). The interval that spans a run's
    start is no run's (``run_intervals``), so that piece is in neither."""
    on_runs, off_runs = repeats_of(steady_on, found), repeats_of(steady_off, found)
    bins = sorted({int(b) for intervals in found.values() for i in intervals for b in i["bins"]})
    steady = {b: drafted_cell([i for name in on_runs for i in found[name]], b) for b in bins}
    # the steady runs' prefill costs: what learn keeps from a spell of each stream before a window without
    # one (a load held on one side of the ceiling), the "kept" column
    spells = [(i, [name in on_runs] * len(i["bins"])) for name in (*on_runs, *off_runs) for i in found[name]]
    kept_costs = prefilled.steady_costs([i for i, _ in spells], [m for _, m in spells])

    def counted(cell: Mapping[str, float]) -> bool:
        """Enough steps to read, and their slots and time counted."""
        return cell["steps"] >= min_steps and cell["slots"] > 0 and cell["time_s"] > 0

    rows = []
    for run in runs:
        intervals = found.get(run.name, [])
        if run.name in (*on_runs, *off_runs) or not intervals:
            continue
        masks = [learn_counters.drafted_by(list(i["bins"]), run.ceiling) for i in intervals]
        window = mix_levelled.window_mix(intervals)
        readings = {"mix": mix_levelled.mix_levelled_intervals(intervals, masks),
                    "learn": learn_counters.as_choices(list(intervals), masks, 1.0),
                    "kept": learn_counters.as_choices(list(intervals), masks, 1.0, kept_costs)}  # fmt: skip
        for b in bins:
            cell = drafted_cell(intervals, b)
            if explored_mode(b, run.ceiling) != "drafted" or not counted(cell):
                continue
            row: dict[str, Any] = {"bin": b, "run": run.name, **drafted_reading(cell)}
            if window is not None:
                row |= {"window_parts": window.parts, "window_harmonic": window.harmonic,
                        "window_draw": _draw(window)}  # fmt: skip
            if cell["requests"] > 0 and cell["inverse_sum"] > 0:
                harmonic = cell["requests"] / cell["inverse_sum"]
                row |= {"parts": int(cell["parts"]), "requests": int(cell["requests"]),
                        "arithmetic": cell["accept_sum"] / cell["requests"],
                        "harmonic": harmonic}  # fmt: skip
                row["mix_lean"] = row["arithmetic"] / harmonic
            if counted(steady[b]):
                row |= drafted_reading(steady[b], "steady_")
                row["ratio"] = row["tok_s"] / row["steady_tok_s"]
                for key, levelled in readings.items():
                    read = drafted_cell(levelled, b)
                    row[key] = read["tokens"] / read["time_s"] / row["steady_tok_s"]
            rows.append(row)
    return rows


def _draw(window: mix_levelled.WindowMix) -> float | None:
    """``mix_levelled.draw_half_width`` as a share of H: what learn's levelling asks a cell's gap from H to
    pass (``mix_levelled.tells_apart``); None with fewer than 2 intervals."""
    half = mix_levelled.draw_half_width(window)
    return None if half is None else math.expm1(half)


def print_mix(rows: Sequence[dict[str, Any]]) -> None:
    """The request-mix table (``mix_table``); nothing where no run has one (the counters before 0.4.15)."""
    if not rows:
        return
    print("the request mix of the explored drafting (plugin 0.4.15; each run's stored intervals): the "
          "explored drafted steps' mean batch (slots per step) and tokens per slot (accept per request), "
          "always on's steady drafted cell's beside them; the cell's exploring parts' first batches: their "
          "requests' arithmetic (A) and harmonic (H) mean accept and A/H; the run's parts in all bins "
          "(learn's window: it levels with 2 or more); explored / steady tok/s of step time: raw, "
          "mix-levelled as learn levels it (the explored tokens at slots x the window's H, where the cell's "
          "gap from H passes H's draw: its 95 % half-width over the window's intervals, 'draw'), as "
          "learn reads it from the run alone (the mix, then the prefills) and as it reads it after a spell "
          "of the steady runs, their prefill costs kept ('kept')")  # fmt: skip
    columns = (("steady_batch", ".1f", 7), ("steady_accept", ".3f", 7), ("parts", "d", 5),
               ("arithmetic", ".3f", 6), ("harmonic", ".3f", 6), ("mix_lean", ".3f", 6),
               ("window_parts", "d", 6), ("window_draw", ".3f", 6), ("ratio", ".3f", 6), ("mix", ".3f", 6),
               ("learn", ".3f", 6), ("kept", ".3f", 6))  # fmt: skip
    heads = ("on bat.", "on acc.", "parts", "A", "H", "A/H", "window", "draw", "ratio", "mix", "learn",
             "kept")  # fmt: skip
    print(f"{'bin':>4} {'run':<18} {'steps':>6} {'batch':>6} {'acc.':>6} "
          + " ".join(f"{h:>{w}}" for h, (_, _, w) in zip(heads, columns, strict=True)))
    for row in rows:
        values = ["-" if row.get(key) is None else format(row[key], fmt) for key, fmt, _ in columns]
        head = (f"{row['bin']:>4} {row['run']:<18} {row['steps']:>6} "
                f"{row['batch']:>6.1f} {row['accept']:>6.3f}")
        print(head, " ".join(f"{v:>{w}}" for v, (_, _, w) in zip(values, columns, strict=True)))


def explored_mode(b: int, ceiling: int) -> str | None:
    """The mode a run explored in the plugin's bin ``b`` (batches from the bin before it, exclusive, to
    ``b``): drafted when every one of them is above the ceiling, gated when every one is at or below it and
    the bin is not the ceiling's own (where the gate's hysteresis gates some by design); None (mixed)
    otherwise. A ceiling at the server's maximum (TOP) gates no batch by load, so no bin is its own: every
    bin explores the gated side (2026-12-06, a rehearsal of threshold:64 at ``steps:16`` read bin 16 as
    mixed). The bin's lower edge is the plugin's bin before it, not the bin the data held before it: a
    steady level of 48 fills bin 48 alone, whose batches 33-48 all lie above a ceiling of 24 (2026-12-06's
    H100 level-48 run read threshold:24's explored drafting there as mixed and showed none of it)."""
    i = bisect.bisect_left(ALL_BINS, b)
    below = ALL_BINS[i - 1] if i else 0
    if below >= ceiling:
        return "drafted"
    own = max((x for x in ALL_BINS if x <= ceiling), default=0) if ceiling < TOP else 0
    if b <= ceiling and b != own:
        return "gated"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--db", required=True, help="the policy runs' database (a path or a URL; a "
                        "committed NAME.db.xz is read from a copy)")
    parser.add_argument("--run", action="append", default=[], help="NAME=START:END:CEILING, once per run")
    parser.add_argument("--runs-from-db", action="store_true",
                        help="the database's replays (else its audited policy runs) as runs, "
                             "split where the ceiling moved")  # fmt: skip
    parser.add_argument("--max-running-requests", type=int, default=64,
                        help="with --runs-from-db: a set at or above it is always on")  # fmt: skip
    parser.add_argument("--steady-on", default="on", help="the always-on run's name, pooled with its repeats "
                        "(on-2, ...: another level of the launch); default on, '' none")
    parser.add_argument(
        "--steady-off", default="off",
        help="the always-off run's name, pooled with its repeats (default off; '' none)",
    )
    parser.add_argument(
        "--min-steps", type=int, default=50, help="fewer steps in a cell: no rate (default 50)"
    )
    parser.add_argument("--all", action="store_true",
                        help="print every bin and run, also those without an explored rate")
    parser.add_argument("--load-logs", type=Path, help="the runs' load-<run>.log folder: each run's "
                        "client-side tok/s beside its counters' (closed-loop runs)")  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        return report(args, stack)


def report(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    try:
        runs = [parse_run(text) for text in args.run]
        steady = {"--steady-on": args.steady_on, "--steady-off": args.steady_off}
        if not args.runs_from_db:
            for flag, name in steady.items():
                if name and name not in {r.name for r in runs}:
                    raise ValueError(f"{flag}: no --run named {name!r}")
        if args.db.endswith(RECORDED_XZ):  # a committed run's database: read from a copy
            db = stack.enter_context(open_recorded(args.db))
        else:
            db = open_database(args.db, existing=True)
        if args.runs_from_db:
            runs += runs_from_db(db, args.max_running_requests)
            if not runs:
                raise ValueError("--runs-from-db: the database holds no saved replay, no audited policy run")
            # a found run set may lack a steady one: no ratio for that mode
            steady = {flag: name if name in {r.name for r in runs} else "" for flag, name in steady.items()}
        servers = queries.servers(db)
        if len(servers) != 1 or servers[0].id is None:
            raise ValueError(f"--db: expected the counters of one server, found {len(servers)}")
        server_id = servers[0].id
        found = {run.name: run_intervals(db, server_id, run) for run in runs}
        cells = {name: bin_cells(intervals) for name, intervals in found.items()}
        covered = {name: covered_s(intervals) for name, intervals in found.items()}
        totals = {name: summed(found) for name, found in cells.items()}
        prefilled = {run.name: prefilled_cells(found[run.name]) for run in runs}
        per_interval = {name: (intervals, interval_prefilled(intervals))
                        for name, intervals in found.items() if prefilled.get(name)}  # fmt: skip
        # the kept extend's tax as the server's own extend rows measure it over the runs (plugin 0.4.6)
        span = (min(r.start for r in runs), max(r.end for r in runs)) if runs else None
        extend = queries.extend_totals(db, server_id, *span, max_intervals=100_000) if span else None
        extend_rows = extend_table(db, server_id, runs)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except FileNotFoundError as exc:  # a committed NAME.db.xz that is not there (open_recorded)
        print(f"--db: {exc}", file=sys.stderr)
        return 2
    assumed = float(OPTION_DEFAULTS["kept_extend_tax"])
    tax, tax_text = kept_extend.or_assumed(kept_extend.from_totals(extend), assumed)
    rows = lean_table(totals, runs, steady["--steady-on"], steady["--steady-off"], tax, args.min_steps, cells)
    if args.load_logs is not None:
        for flag, name in steady.items():
            mixed = mixed_loads(args.load_logs, flag, repeats_of(name, totals))
            if mixed:
                print(f"warning: {mixed}")
    print(f"explored / steady output tok/s of step time per bin; corr.: gated / (1 - {tax:.3f}), as learn "
          f"reads ({tax_text}); the corrected ratio's 95 % interval from a bootstrap of {DRAWS} draws "
          "over the collector's intervals of each side, ints.: the explored side's intervals")  # fmt: skip
    head = ("bin", "run", "mode", "steps", "explored", "steady", "ratio", "corr.", "95 % interval", "ints.")
    widths = (4, -14, -8, 6, 9, 9, 6, 6, 13, 5)
    print(" ".join(f"{h:>{w}}" if w > 0 else f"{h:<{-w}}" for h, w in zip(head, widths, strict=True)))
    # a launch of eight runs over 20 bins is 160 cells, most of them empty (a bin the run never reached in
    # the mode it explores): only the cells with an explored rate print, and how many did not
    shown = [row for row in rows if args.all or row.get("explored_tok_s") is not None]
    for row in shown:
        values = [row["bin"], row["run"], row["mode"], row["steps"]]
        for key, fmt in FORMATS:
            values.append("-" if row.get(key) is None else format(row[key], fmt))
        values.append(f"{row['low']:.3f}-{row['high']:.3f}" if "low" in row else "-")
        values.append(row.get("intervals", "-"))
        print(" ".join(f"{v:>{w}}" if w > 0 else f"{v:<{-w}}" for v, w in zip(values, widths, strict=True)))
    if len(shown) < len(rows):
        print(f"  {len(rows) - len(shown)} of {len(rows)} cells not shown: fewer than {args.min_steps} "
              "explored steps, or the ceiling's own bin (mixed); --all prints them")  # fmt: skip
    served = served_table(totals, runs, steady["--steady-off"], args.min_steps)
    if served:
        print("served per bin (all a run's steps there, drafted and gated) against always off's gated rate")
        print(f"{'bin':>4} {'run':<14} {'drafted':>8} {'gated':>8} {'served':>8} {'off':>8} {'ratio':>6}")
        for row in served:
            off = "-" if row["off_tok_s"] is None else f"{row['off_tok_s']:.0f}"
            ratio = f"{row['ratio']:.3f}" if "ratio" in row else "-"
            print(f"{row['bin']:>4} {row['run']:<14} {row['drafted_steps']:>8} {row['gated_steps']:>8} "
                  f"{row['served_tok_s']:>8.0f} {off:>8} {ratio:>6}")  # fmt: skip
    costs = explore_cost(totals, runs, args.min_steps, covered)
    if args.load_logs is not None:
        try:
            add_client_rates(costs, args.load_logs, CLIENT_SKIP_S)
        except ValueError as exc:
            print(f"--load-logs: {exc}", file=sys.stderr)
            return 2
    if costs:
        # the decode steps' own output rate per run: where a policy lags always off with the same rate here
        # (the H100 replay of 2026-12-05c: learn at 16 3 120 tok/s of step time, always off 3 111), the
        # lag is outside the decode steps (prefill, the scheduler's own time: loop_phases.py)
        print("decode steps per run: step s (of the s its counter intervals cover: the rest is outside every "
              "step; from plugin 0.4.13 the step s hold the seconds outside the steps while the scheduler "
              "was busy), output tokens, tok/s of step time; drafting explored above the ceiling: explored s "
              "(share), extra s over gated (share)")  # fmt: skip
        for c in costs:
            print(f"{c['run']:<14} {c['step_s']:8.1f} ({c['covered_s']:6.1f}) {c['tokens']:>9.0f} "
                  f"{c['tok_s']:7.0f} "
                  f"{c['explored_s']:8.1f} ({c['explored_share']:.3f}) "
                  f"{c['extra_s']:8.1f} ({c['extra_share']:.3f})"
                  + (f"  client {c['client_tok_s']:7.0f} ({c['client_over_counted']:.3f})"
                     if "client_tok_s" in c else ""))  # fmt: skip
    if extend_rows:
        print("the kept extend per run and bin: steady gated steps that kept / skipped the draft extend, "
              "steps and tok/s of step time; the run's own tax where both sides have "
              f"{kept_extend.MIN_STEPS} steps")  # fmt: skip
        print(f"{'run':<16} {'bin':>4} {'kept':>7} {'tok/s':>7} {'skipped':>8} {'tok/s':>7} {'tax':>6}")
        for row in extend_rows:
            rates = ["-" if row.get(k) is None else f"{row[k]:.0f}" for k in ("kept_tok_s", "skipped_tok_s")]
            own_tax = "-" if row["tax"] is None else f"{100 * row['tax']:.1f}%"
            print(f"{row['run']:<16} {row['bin']:>4} {row.get('kept_steps', 0):>7} {rates[0]:>7} "
                  f"{row.get('skipped_steps', 0):>8} {rates[1]:>7} {own_tax:>6}")  # fmt: skip
    levelled_rows = prefill_table(totals, prefilled, rows, steady["--steady-on"], steady["--steady-off"], tax,
                                  per_interval)
    if levelled_rows:
        print("prefills in the steps (plugin 0.4.14): the share of the explored and the steady steps whose "
              "span held a prefill; pure: explored / steady tok/s of the steps without one; levelled as "
              "learn levels (control/prefilled.py): the explored steps without a prefill plus the steady "
              "runs' prefill ms per output token of the mode (ms/tok), against the steady rate; corrected: "
              f"the gated side / (1 - {tax:.3f}), its 95 % interval from the same bootstrap")  # fmt: skip
        print(f"{'bin':>4} {'run':<16} {'mode':<8} {'prefilled':>9} {'steady':>7} {'pure':>6} {'ms/tok':>7} "
              f"{'explored':>9} {'steady':>7} {'ratio':>6} {'corr.':>6} {'95 % interval':>13}")  # fmt: skip
        for row in levelled_rows:
            values = ["-" if row.get(k) is None else format(row[k] * m, f)
                      for k, f, m in (("pure", ".3f", 1), ("prefill_s_per_token", ".4f", 1000),
                                      ("explored_tok_s", ".0f", 1), ("steady_tok_s", ".0f", 1),
                                      ("ratio", ".3f", 1), ("corrected", ".3f", 1))]  # fmt: skip
            bounds = f"{row['low']:.3f}-{row['high']:.3f}" if "low" in row else "-"
            print(f"{row['bin']:>4} {row['run']:<16} {row['mode']:<8} {row['explored_prefilled']:>9.3f} "
                  f"{row['steady_prefilled']:>7.3f} {values[0]:>6} {values[1]:>7} {values[2]:>9} "
                  f"{values[3]:>7} {values[4]:>6} {values[5]:>6} {bounds:>13}")  # fmt: skip
    mix_rows = mix_table(found, runs, steady["--steady-on"], steady["--steady-off"], args.min_steps)
    print_mix(mix_rows)
    if args.json:
        args.json.write_text(json.dumps({"lean": rows, "served": served, "cost": costs, "extend": extend_rows,
                                         "prefilled": levelled_rows, "mix": mix_rows}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
