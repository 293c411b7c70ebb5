"""The engine's decode counters as ``control.speedup.estimate`` reads them: one interval per stored scrape
(raw) or per 1-minute / 1-hour rollup bucket, each in ``plugin.engine_counters.rates()``'s shape.

Read through ``storage.queries`` (``counter_intervals``, ``counter_samples``, ``has_counters``,
``extend_totals``). The stored rows are already per-interval deltas (the collector took
``rates()`` of consecutive snapshots, restarts included), so an interval's rates are ``rates(None, totals)``
of its summed cells. A 24-hour window is 1,440 intervals and a 1-hour one up to 3,600: ``_intervals`` computes
them for all intervals at once with numpy, and tests/test_queries_counters.py holds it equal to ``rates()``
itself, the one definition of what a rate is (the plugin's module is standard library only, so it cannot call
numpy).

The table holds the extend's rows too (modes ``counter_modes.EXTEND_MODES``: steady gated steps by whether
the draft extend ran, counted in their gated bin as well): every read here names the modes it reads in its
SQL, so the decode reads never see them and ``extend_totals`` sees only them. The decode reads do read the
rows of ``counter_modes.OUTSIDE_MODES`` (plugin 0.4.13: each mode's seconds outside its steps) and fold them
into their mode's step time as ``engine_counters.with_outside`` folds a live interval's, rounded the same
way, so a stored interval is ``with_outside(rates(None, totals))`` and carries no ``outside_s`` of its own.

``counter_intervals`` reads the rows of ``counter_modes.PREFILLED_MODES`` too (plugin 0.4.14 on: each mode's
steps whose span held a prefill), in the same query, and gives each interval their sums as ``rates()`` gives
a live interval its ``prefilled`` block (``_prefilled``), so learn's warm start levels the explored cells of
the stored intervals as learn levels its own (``control.prefilled.levelled_intervals``). Only a window that
holds such rows has the block: an older plugin's intervals keep the shape they always had. It reads the
rows of ``counter_modes.SLOTS_MODES`` and ``MIX_MODES`` (plugin 0.4.15 on: each mode's requests per step
summed, the exploring parts' request mix) in that query too, as each interval's ``slots`` and ``mix`` blocks
(``_lists``), so the warm start levels a gated bin's explored drafting for its requests' mix as learn does
(``control.mix_levelled.mix_levelled_intervals``). ``counter_samples`` (the estimate's grouping, the
console's live read) reads the same rows and gives each drafted sample's slots and the window's mix sums, so
the console levels the explored cells as learn does (``control.kept_extend.corrected_estimate``).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, and_, case, func, literal_column
from sqlalchemy import select as sa_select

from ..plugin.engine_counters import FIELDS, ExtendBlock
from . import dialect, rollups
from .counter_modes import DECODE_MODES as COUNTER_MODES
from .counter_modes import EXTEND_MODES, MIX_MODES, MIX_ROWS, OUTSIDE_MODES, PREFILLED_MODES, SLOTS_MODES
from .retention import horizons

if TYPE_CHECKING:
    from sqlalchemy import Select
    from sqlalchemy.engine import Connection

    from .database import Database

# The collector stores one counters interval per /server_info read (every 5 s by default).
COUNTER_RAW_RES_S = 5.0
# An estimate reads at most about this many intervals: raw ones for short windows, then 1-minute and
# 1-hour rollups, so a 30-day window costs what a few hours do.
DEFAULT_MAX_COUNTER_INTERVALS = 2000
# rates()'s step time is rounded to this many decimals (nanoseconds)
TIME_DECIMALS = 9
# kind (kept, skipped) -> field (steps, tokens, time_s) -> per bin: the counters' own extend block
ExtendTotals = ExtendBlock
# what a decode read reads: the decode modes, then each one's seconds outside its steps, in the same order
DECODE_READ: tuple[str, ...] = (*COUNTER_MODES, *(OUTSIDE_MODES[mode] for mode in COUNTER_MODES))
# each decode mode's prefilled steps (plugin 0.4.14)
PREFILLED_READ: tuple[str, ...] = tuple(PREFILLED_MODES[mode] for mode in COUNTER_MODES)
# each decode mode's slots, then the mix's rows (plugin 0.4.15)
BLOCKS_READ: tuple[str, ...] = (*(SLOTS_MODES[mode] for mode in COUNTER_MODES), *MIX_ROWS)
# what counter_intervals reads: the decode read, then the prefilled steps, then the slots and the mix, in one
# query (the (server_id, ts) index holds no mode: a second query of these rows would walk the window again)
INTERVALS_READ: tuple[str, ...] = (*DECODE_READ, *PREFILLED_READ, *BLOCKS_READ)


def _tier(db: Database, start: float, end: float, max_intervals: int) -> int:
    """0 (raw) or the rollup resolution that keeps the window under ``max_intervals`` intervals."""
    span = end - start
    hz = horizons(db.engine)
    for res in (0, rollups.MINUTE_S):
        covered = start >= hz.get("raw" if res == 0 else res, -math.inf)
        if covered and span / (res or COUNTER_RAW_RES_S) <= max_intervals:
            return res
    return rollups.HOUR_S


def counter_intervals(
    db: Database,
    server_id: int,
    start: float,
    end: float,
    *,
    max_intervals: int = DEFAULT_MAX_COUNTER_INTERVALS,
) -> list[dict[str, Any]]:
    """A server's decode-counter intervals in [start, end], oldest first, each shaped like
    ``plugin.engine_counters.rates()`` (``bins``, ``restarted``, per mode ``steps``, ``tokens``,
    ``time_s``, ``tok_s``, ``step_s``) plus ``ts`` (the interval's end, or its bucket's start) and
    ``res_s`` (0: one stored interval; 60 / 3600: a rollup bucket, whose sums make one interval), ready
    for ``control.speedup.estimate``. Rollup buckets overlapping the window are taken whole; raw rows not
    yet folded into them are added to their buckets, so the newest minutes are never missing.

    Where the window holds rows of the ``prefilled`` block (plugin 0.4.14 on), the intervals carry it as
    ``rates()`` gives it, what ``control.prefilled.levelled_intervals`` reads: ``"prefilled": {"drafted" |
    "gated": {"steps", "tokens", "time_s": [...]}}``, lists parallel to the interval's ``bins``, the sums of
    the interval's rows of that mode and bin (``time_s`` with the seconds outside those steps, as stored,
    rounded as ``rates()`` rounds it), zeros where a bin has none. The block starts at the first interval
    that has such a row: every interval from there on has it (the collector stores no row for a bin and
    interval without a prefilled step, so an interval without rows had none), the intervals before it have no
    ``prefilled`` key (an older plugin before an upgrade: not known), and a window without such rows reads
    exactly as before. A rollup bucket that holds the upgrade counts the prefilled steps after it only; a
    downgrade within the window reads as intervals without prefills. A prefilled row in a bin its interval
    has no decode row in (which a plugin cannot store: those steps count in their mode's bin as well) is
    left out.

    Where the window holds rows of the ``slots`` and ``mix`` blocks (plugin 0.4.15 on), the intervals carry
    them as ``rates()`` gives them, what ``control.mix_levelled.mix_levelled_intervals`` reads: ``"slots":
    {"drafted" | "gated": [...]}`` and ``"mix": {"parts", "requests", "accept_sum", "inverse_sum": [...]}``,
    floats parallel to the interval's ``bins``, the sums of its rows of each stored mode and column
    (``counter_modes.SLOTS_MODES`` / ``MIX_MODES``) rounded as ``rates()`` rounds them, zeros where a bin has
    none. Both start at the first interval with a row of either (the plugin publishes them together), the
    intervals before it have neither key, and a window without such rows reads exactly as before. A mix row
    counts in the bin of its part's first batch, which its interval may hold no decode row in (the part ran
    on across a scrape): that bin is among the interval's ``bins`` with zero decode counts, as in
    ``rates()``, so the block loses nothing."""
    cells, tier = _read(db, server_id, start, end, max_intervals, INTERVALS_READ)
    return _intervals_of(cells, tier)


def _intervals_of(cells: _Cells, res_s: int) -> list[dict[str, Any]]:
    """``counter_intervals`` of the rows it read (``INTERVALS_READ``'s modes): the decode rows' intervals,
    from the first interval with a prefilled row on each with its ``prefilled`` block (``_prefilled``), and
    from the first with a slots or mix row on each with its ``slots`` and ``mix`` blocks (``_lists``)."""
    entries, prefilled, lists = _entries_of(cells)
    intervals = _intervals(entries, res_s)
    if len(prefilled.ts):  # else an older plugin's window: the shape it always had
        first, blocks = _prefilled(entries, prefilled)
        for interval, (a, b) in zip(intervals[first:], entries.spans[first:], strict=True):
            interval["prefilled"] = {mode: {field: values[a:b] for field, values in block.items()}
                                     for mode, block in blocks.items()}  # fmt: skip
    if len(lists.ts):  # else a plugin before 0.4.15
        first, slots, mix = _lists(entries, lists)
        for interval, (a, b) in zip(intervals[first:], entries.spans[first:], strict=True):
            interval["slots"] = {mode: values[a:b] for mode, values in slots.items()}
            interval["mix"] = {field: values[a:b] for field, values in mix.items()}
    return intervals


def _entries_of(cells: _Cells) -> tuple[_Entries, _Cells, _Cells]:
    """The rows read with ``INTERVALS_READ``'s modes as the decode rows' entries, the prefilled rows (each
    mode its index in ``PREFILLED_READ``) and the slots and mix rows (in ``BLOCKS_READ``). The entries hold
    every (interval, bin) of a slots or mix row too, with zero decode counts where it has no decode row (a
    mix row's bin, its part's first batch's); a window without such rows has the entries it always had."""
    decode, rest = cells.split(len(DECODE_READ))
    prefilled, lists = rest.split(len(PREFILLED_READ))
    if len(lists.ts):
        decode = decode.then(_Cells(lists.ts, lists.bins, np.full(len(lists.ts), -1), lists.values))
    return _Entries.of(decode), prefilled, lists


Samples = dict[int, dict[str, list[tuple[float, float, int]]]]
# aligned with Samples: each sample's prefilled (steps, tokens, time_s), None where not known (the shape of
# control.prefilled.PrefilledSamples, which the control layer reads; storage imports nothing above it)
PrefilledSamples = dict[int, dict[str, list[tuple[float, float, float] | None]]]
# aligned with Samples' drafted samples: each one's slots, None where not known (control.mix_levelled's)
SlotSamples = dict[int, list[float | None]]


@dataclass(frozen=True)
class CounterSamples:
    """``counter_intervals`` as ``control.speedup.estimate_per_bin`` reads them (``per_bin``: what
    ``speedup.per_bin`` makes of the intervals), without a dict per interval: 3,600 intervals of an
    hour are 50,000 lists and dicts, and their garbage collections cost as much as building them."""

    intervals: int  # how many intervals went in
    per_bin: Samples  # bin -> mode -> [(tokens, time_s, steps) of each interval with steps there]
    # aligned with per_bin sample for sample: the prefilled steps, tokens and seconds of each (plugin 0.4.14;
    # None before the first interval with a prefilled row), as control.prefilled.prefilled_samples gives
    # them of counter_intervals; None where the window has no prefilled row
    prefilled: PrefilledSamples | None = None
    # aligned with per_bin's drafted samples: the slots of each (plugin 0.4.15; None before the first interval
    # with a slots or mix row), as control.mix_levelled.slot_samples gives them; None where the window has
    # no such row
    slots: SlotSamples | None = None
    # the window's mix block summed over every interval and bin (parts, requests, accept_sum, inverse_sum):
    # what control.mix_levelled.window_of reads; None where the window has no slots or mix row
    mix_sums: dict[str, float] | None = None
    # each interval's mix summed over its bins, (requests, inverse_sum), oldest first (intervals without
    # parts give zeros): what window_of reads H's draw from
    mix_intervals: list[tuple[float, float]] | None = None


def counter_samples(
    db: Database,
    server_id: int,
    start: float,
    end: float,
    *,
    max_intervals: int = DEFAULT_MAX_COUNTER_INTERVALS,
) -> CounterSamples:
    """The same intervals as ``counter_intervals`` (same tiers, same arguments), grouped per bin and mode,
    with their prefilled steps where the window holds them, and each drafted sample's slots and the window's
    mix where it holds those (plugin 0.4.15): what ``control.kept_extend.corrected_estimate`` levels the
    explored cells by, as learn levels them."""
    cells, _ = _read(db, server_id, start, end, max_intervals, INTERVALS_READ)
    entries, prefilled, lists = _entries_of(cells)
    per_bin, held = _per_bin(entries, _prefilled(entries, prefilled) if len(prefilled.ts) else None)
    if not len(lists.ts):  # a plugin before 0.4.15
        return CounterSamples(len(entries.stamps), per_bin, held)
    first, slots, mix = _lists(entries, lists)
    order = entries.orders[COUNTER_MODES.index("drafted")]
    drafted: SlotSamples = _aligned(entries, order, first, slots["drafted"])
    sums = {field: math.fsum(values) for field, values in mix.items()}
    n = len(entries.stamps)
    requests, inverse = (np.bincount(entries.interval_of, weights=mix[field], minlength=n).tolist()
                         for field in ("requests", "inverse_sum"))  # fmt: skip
    return CounterSamples(n, per_bin, held, drafted, sums, list(zip(requests, inverse, strict=True)))


def extend_totals(
    db: Database,
    server_id: int,
    start: float,
    end: float,
    *,
    max_intervals: int = DEFAULT_MAX_COUNTER_INTERVALS,
) -> tuple[list[int], ExtendTotals] | None:
    """The extend block's steady gated steps of a server in [start, end] summed per bin, by kind: ``(bins,
    {"kept" | "skipped": {"steps", "tokens", "time_s": [per bin]}})``, bins ascending (those with a row),
    what ``control.kept_extend.measure`` takes; None when the window has no extend row (a plugin before
    0.4.6). The same rows as ``counter_intervals`` reads with the same arguments (same tier, rollup buckets
    taken whole, the raw rows past the watermark added)."""
    return _block_totals(db, server_id, start, end, max_intervals, EXTEND_MODES)


def _block_totals(
    db: Database, server_id: int, start: float, end: float, max_intervals: int, modes: dict[str, str]
) -> tuple[list[int], ExtendTotals] | None:
    """The rows of ``modes`` (a block's kind -> its stored mode) summed per bin and kind."""
    cells, _ = _read(db, server_id, start, end, max_intervals, tuple(modes.values()))
    if not len(cells.ts):
        return None
    bins, index = np.unique(cells.bins, return_inverse=True)
    out: ExtendTotals = {}
    for code, kind in enumerate(modes):
        mine = cells.modes == code
        # bincount adds each bin's rows in order from 0.0, as counter_intervals sums an interval's cells
        steps, tokens, seconds = (np.bincount(index[mine], weights=cells.values[mine, k], minlength=len(bins))
                                  for k in range(3))  # fmt: skip
        out[kind] = {
            "steps": [int(v) for v in steps.tolist()],
            "tokens": [int(v) for v in tokens.tolist()],
            "time_s": [round(v, TIME_DECIMALS) for v in seconds.tolist()],
        }
    return [int(b) for b in bins.tolist()], out


def _read(
    db: Database,
    server_id: int,
    start: float,
    end: float,
    max_intervals: int,
    modes: tuple[str, ...] = DECODE_READ,
) -> tuple[_Cells, int]:
    """The stored rows of ``modes`` in the window's intervals (each row's mode its index in ``modes``), and
    the tier read (0: raw, else the rollup's seconds)."""
    if not (math.isfinite(start) and math.isfinite(end)) or end < start:
        raise ValueError(f"start/end: need finite start <= end, got {start!r}..{end!r}")
    if not (isinstance(max_intervals, int) and max_intervals >= 1):
        raise ValueError(f"max_intervals: must be a positive integer, got {max_intervals!r}")
    tier = _tier(db, start, end, max_intervals)
    sample, roll = rollups.COUNTERS.sample, rollups.COUNTERS.rollup

    def zero_if_null(c: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.coalesce(c, literal_column("0"))  # a NULL count adds nothing (not NaN)

    def coded(c: ColumnElement[Any]) -> ColumnElement[Any]:  # each mode as its index in ``modes``
        return case({mode: k for k, mode in enumerate(modes)}, value=c, else_=-1)

    raw_cols = (sample.c.batch_size, coded(sample.c.mode),
                *(zero_if_null(sample.c[f]) for f in ("steps", "tokens", "time_s")))  # fmt: skip
    with db.engine.connect() as conn:
        if tier == 0:
            stmt = sa_select(sample.c.ts, *raw_cols).where(
                and_(sample.c.server_id == server_id, sample.c.ts >= start, sample.c.ts <= end,
                     sample.c.mode.in_(modes))
            )  # fmt: skip
            return _Cells.of_numbers(_numbers(conn, stmt)), 0
        lo_ts = math.floor(start / tier) * tier
        stmt = sa_select(
            roll.c.bucket_ts, roll.c.batch_size, coded(roll.c.mode),
            *(zero_if_null(roll.c[f"{f}_sum"]) for f in ("steps", "tokens", "time_s")),
        ).where(
            and_(roll.c.res_s == tier, roll.c.server_id == server_id,
                 roll.c.bucket_ts >= lo_ts, roll.c.bucket_ts <= end, roll.c.mode.in_(modes))
        )  # fmt: skip
        rolled = _Cells.of_numbers(_numbers(conn, stmt))
        ts = dialect.off_index(sample.c.ts)  # found by primary key range past the watermark
        tail = sa_select(sample.c.ts, *raw_cols).where(
            and_(sample.c.id > rollups.watermark(conn, rollups.COUNTERS),
                 dialect.off_index(sample.c.server_id) == server_id, ts >= lo_ts, ts <= end,
                 sample.c.mode.in_(modes))
        )  # fmt: skip
        late = _Cells.of_numbers(_numbers(conn, tail))
    # raw rows past the watermark count in their bucket, after the bucket's rolled-up sums
    late.ts = np.floor(late.ts / tier) * tier
    return rolled.then(late), tier


def _numbers(conn: Connection, stmt: Select[Any]) -> npt.NDArray[np.float64]:
    """A statement's rows, every column a number, as one float array. The driver's own tuples: SQLAlchemy's
    rows would cost as much again as the query (numbers need none of its result processing), and numpy
    builds an array from rows that are not tuples many times slower."""
    result = conn.execute(stmt)
    try:
        rows = result.cursor.fetchall()
    finally:
        result.close()
    return np.array(rows, dtype=np.float64)  # no rows: shape (0,), which _Cells.of_numbers takes as none


class _Cells:
    """Stored counter rows as columns: the interval's ``ts``, ``batch_size``, mode (its index in the modes
    read, ``DECODE_READ`` unless told; -1 for another) and ``values`` (steps, tokens, time_s)."""

    def __init__(
        self,
        ts: npt.NDArray[np.float64],
        bins: npt.NDArray[np.int64],
        modes: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
    ) -> None:
        self.ts, self.bins, self.modes, self.values = ts, bins, modes, values

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]], modes: Sequence[str] = DECODE_READ) -> _Cells:
        """Rows of (ts, batch_size, mode, steps, tokens, time_s), in the order the database gave them."""
        code = {mode: k for k, mode in enumerate(modes)}
        return cls.of_numbers(
            np.array([(ts, b, code.get(str(m), -1), *values) for ts, b, m, *values in rows], dtype=np.float64)
        )

    @classmethod
    def of_numbers(cls, rows: npt.NDArray[np.float64]) -> _Cells:
        """Rows of (ts, batch_size, mode's index, steps, tokens, time_s) as one float array, in order."""
        if not len(rows):
            return cls(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3)))
        return cls(rows[:, 0].copy(), rows[:, 1].astype(np.int64), rows[:, 2].astype(np.int64), rows[:, 3:])

    def split(self, n: int) -> tuple[_Cells, _Cells]:
        """The rows of the first ``n`` modes read (an unknown mode's, -1, among them, as ``of`` gave them),
        and the others with their modes counted from ``n``: each in row order."""
        first = self.modes < n
        rest = ~first
        if not rest.any():  # an older plugin's window: no copy
            return self, _Cells.of([])
        return (
            _Cells(self.ts[first], self.bins[first], self.modes[first], self.values[first]),
            _Cells(self.ts[rest], self.bins[rest], self.modes[rest] - n, self.values[rest]),
        )

    def then(self, other: _Cells) -> _Cells:
        return _Cells(
            np.concatenate([self.ts, other.ts]),
            np.concatenate([self.bins, other.bins]),
            np.concatenate([self.modes, other.modes]),
            np.concatenate([self.values, other.values]),
        )


def _none_where(values: npt.NDArray[np.float64], keep: npt.NDArray[np.bool_]) -> list[float | None]:
    out = values.astype(object)
    out[~keep] = None
    return out.tolist()


@dataclass(frozen=True)
class _Entries:
    """Stored cells summed per (interval, bin, mode) as ``with_outside(rates(None, totals))`` sees them:
    one entry per (interval, bin) that has a cell, by interval then bin (the intervals' bins end to end),
    each mode's counts zero where it has no cell, its step time with its seconds outside the steps."""

    stamps: list[float]  # each interval's ts, ascending
    spans: list[tuple[int, int]]  # each interval's entries
    bins: list[int]  # each entry's bin
    steps: list[npt.NDArray[np.float64]]  # per mode: int() of the summed steps, as floats
    tokens: list[npt.NDArray[np.float64]]  # per mode: int() of the summed tokens, as floats
    time_s: list[list[float]]  # per mode: the summed step time rounded as rates() rounds it

    @functools.cached_property
    def bin_array(self) -> npt.NDArray[np.int64]:
        """``bins`` as an array."""
        return np.array(self.bins, dtype=np.int64)

    @functools.cached_property
    def interval_of(self) -> npt.NDArray[np.int64]:
        """Each entry's interval (its index in ``stamps``)."""
        return np.repeat(np.arange(len(self.spans), dtype=np.int64), [b - a for a, b in self.spans])

    @functools.cached_property
    def orders(self) -> list[npt.NDArray[np.int64]]:
        """Per mode (its index in ``COUNTER_MODES``), the entries in which it has steps, by bin, each bin's
        intervals in time order: the order of ``control.speedup.per_bin``'s samples of that mode."""
        ran = [np.flatnonzero(steps > 0) for steps in self.steps]
        return [r[np.argsort(self.bin_array[r], kind="stable")] for r in ran]

    @classmethod
    def of(cls, cells: _Cells) -> _Entries:
        if not len(cells.ts):
            modes = range(len(COUNTER_MODES))
            return cls(
                [], [], [], [np.zeros(0) for _ in modes], [np.zeros(0) for _ in modes], [[] for _ in modes]
            )
        stamps, ts_index = np.unique(cells.ts, return_inverse=True)
        bin_values, bin_index = np.unique(cells.bins, return_inverse=True)
        nb = len(bin_values)
        pair_keys, pair_index = np.unique(ts_index * nb + bin_index, return_inverse=True)
        ends = np.cumsum(np.bincount(pair_keys // nb, minlength=len(stamps))).tolist()
        steps, tokens, time_s = [], [], []

        def summed(code: int, k: int) -> npt.NDArray[Any]:  # float64: bincount with weights
            # bincount adds each entry's rows in order from 0.0: what summing them one by one does
            mine = cells.modes == code
            return np.bincount(pair_index[mine], weights=cells.values[mine, k], minlength=len(pair_keys))

        for code in range(len(COUNTER_MODES)):
            steps.append(np.trunc(summed(code, 0)))
            tokens.append(np.trunc(summed(code, 1)))
            # Python's rounding, each sum rounded as rates() rounds it, then their sum as with_outside does
            own = [round(t, TIME_DECIMALS) for t in summed(code, 2).tolist()]
            outside = [round(max(0.0, t), TIME_DECIMALS)
                       for t in summed(len(COUNTER_MODES) + code, 2).tolist()]  # fmt: skip
            time_s.append([round(t + o, TIME_DECIMALS) for t, o in zip(own, outside, strict=True)])
        return cls(stamps.tolist(), list(itertools.pairwise([0, *ends])),
                   bin_values[pair_keys % nb].tolist(), steps, tokens, time_s)  # fmt: skip


def _intervals(entries: _Entries, res_s: int) -> list[dict[str, Any]]:
    """One ``rates(None, totals)``-shaped interval per distinct ``ts``, oldest first, where ``totals`` sums
    the cells of each (bin, mode) in row order; ``bins`` are the interval's own. What ``rates()`` does per
    bin, here on every interval's bins at once."""
    spans = entries.spans
    per_mode: list[list[dict[str, list[Any]]]] = []  # per mode, each interval's block
    for steps, tokens, time_s in zip(entries.steps, entries.tokens, entries.time_s, strict=True):
        rounded = np.array(time_s, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            tok_s = _none_where(tokens / rounded, rounded > 0)
            step_s = _none_where(rounded / steps, (steps > 0) & (rounded > 0))
        steps_l, tokens_l = steps.astype(np.int64).tolist(), tokens.astype(np.int64).tolist()
        per_mode.append([
            {"steps": steps_l[a:b], "tokens": tokens_l[a:b], "time_s": time_s[a:b], "tok_s": tok_s[a:b],
             "step_s": step_s[a:b]}
            for a, b in spans
        ])  # fmt: skip
    return [
        {"ts": ts, "res_s": res_s, "bins": entries.bins[a:b], "restarted": False,
         **dict(zip(COUNTER_MODES, blocks, strict=True))}
        for ts, (a, b), *blocks in zip(entries.stamps, spans, *per_mode, strict=True)
    ]  # fmt: skip


def _prefilled(entries: _Entries, cells: _Cells) -> tuple[int, dict[str, dict[str, list[Any]]]]:
    """The ``prefilled`` block's rows (``cells``, each mode its index in ``COUNTER_MODES``) summed per
    entry of ``entries`` (an interval's bin), as ``rates()`` gives the block: per mode, ``steps`` and
    ``tokens`` as ints, ``time_s`` rounded as ``rates()``'s ``_deltas`` rounds it, each a list over all the
    entries end to end (zeros where an entry has no row); and the index of the first interval with a row
    (``len(entries.stamps)`` where none lands in one). A row outside every entry is left out."""
    if not entries.stamps:  # no decode row: no interval to carry a block
        return 0, {mode: {field: [] for field in ("steps", "tokens", "time_s")} for mode in COUNTER_MODES}
    first, summed = _placed(entries, cells)
    blocks: dict[str, dict[str, list[Any]]] = {}
    for code, mode in enumerate(COUNTER_MODES):
        steps, tokens, seconds = (summed(code, k) for k in range(3))
        blocks[mode] = {
            "steps": np.trunc(steps).astype(np.int64).tolist(),
            "tokens": np.trunc(tokens).astype(np.int64).tolist(),
            "time_s": [round(t, TIME_DECIMALS) for t in seconds.tolist()],
        }
    return first, blocks


def _placed(entries: _Entries,
            cells: _Cells) -> tuple[int, Callable[[int, int], npt.NDArray[np.float64]]]:  # fmt: skip
    """Where ``cells``' rows land among ``entries`` (at least one): each row in the interval whose decode
    rows have its ts (the same scrape, or the same bucket) and that interval's entry of its bin, else in
    none. Gives the index of the first interval a row lands in (``len(entries.stamps)`` where none does)
    and ``summed(mode, column)``: the rows of that mode (its index in the read) summed per entry, one column
    (its index in ``FIELDS``), over all the entries end to end."""
    stamps = np.array(entries.stamps, dtype=np.float64)
    entry_bins = entries.bin_array
    # each entry's key (interval, bin), ascending as the entries are (by interval, then bin)
    bin_values = np.unique(np.concatenate([entry_bins, cells.bins]))
    nb = len(bin_values)
    keys = entries.interval_of * nb + np.searchsorted(bin_values, entry_bins)
    at = np.minimum(np.searchsorted(stamps, cells.ts), len(stamps) - 1)
    row_keys = at * nb + np.searchsorted(bin_values, cells.bins)
    entry = np.minimum(np.searchsorted(keys, row_keys), len(keys) - 1)
    found = (stamps[at] == cells.ts) & (keys[entry] == row_keys)
    first = int(at[found].min()) if found.any() else len(stamps)

    def summed(mode: int, column: int) -> npt.NDArray[np.float64]:
        mine = found & (cells.modes == mode)
        # bincount adds each entry's rows in order from 0.0, as the decode cells are summed
        sums = np.bincount(entry[mine], weights=cells.values[mine, column], minlength=len(keys))
        return sums.astype(np.float64)  # no rows: int zeros

    return first, summed


def _lists(entries: _Entries, cells: _Cells) -> tuple[int, dict[str, list[float]], dict[str, list[float]]]:
    """The ``slots`` and ``mix`` blocks' rows (``cells``, each mode its index in ``BLOCKS_READ``) summed per
    entry of ``entries``, as ``rates()`` gives the blocks: ``slots`` per decode mode (its rows' ``tokens``),
    ``mix`` per field (its row's column, ``counter_modes.MIX_MODES``), each a list of floats rounded as
    ``rates()`` rounds them over all the entries end to end, zeros where an entry has no row; and the index
    of the first interval with a row. ``_entries_of`` gave every row an entry."""
    first, summed = _placed(entries, cells)

    def block(stored: str, column: str) -> list[float]:
        sums = summed(BLOCKS_READ.index(stored), FIELDS.index(column))
        return [round(v, TIME_DECIMALS) for v in sums.tolist()]

    slots = {mode: block(SLOTS_MODES[mode], "tokens") for mode in COUNTER_MODES}
    mix = {field: block(stored, column) for field, (stored, column) in MIX_MODES.items()}
    return first, slots, mix


def _per_bin(entries: _Entries, held: tuple[int, dict[str, dict[str, list[Any]]]] | None = None
             ) -> tuple[Samples, PrefilledSamples | None]:  # fmt: skip
    """bin -> mode -> [(tokens, time_s, steps) of each interval with steps there, oldest first]: what
    ``control.speedup.per_bin`` makes of ``_intervals(entries)``; and with ``held`` (``_prefilled``'s first
    interval and blocks) each sample's prefilled (steps, tokens, time_s) in the same order, None before that
    interval: what ``control.prefilled.prefilled_samples`` makes of the intervals."""
    out: Samples = {}
    bins = entries.bin_array
    for mode, order, steps, tokens, time_s in zip(COUNTER_MODES, entries.orders, entries.steps,
                                                  entries.tokens, entries.time_s, strict=True):  # fmt: skip
        seconds = [time_s[i] for i in order.tolist()]
        samples = zip(tokens[order].tolist(), seconds, steps[order].astype(np.int64).tolist(), strict=True)
        for b, group in itertools.groupby(
            zip(bins[order].tolist(), samples, strict=True), key=lambda x: x[0]
        ):
            out.setdefault(b, {m: [] for m in COUNTER_MODES})[mode] = [sample for _, sample in group]
    if held is None:  # an older plugin's window
        return out, None
    first, blocks = held
    found: PrefilledSamples = {}
    for mode, order in zip(COUNTER_MODES, entries.orders, strict=True):
        block = blocks[mode]
        rows = [(float(n), float(t), float(x)) for n, t, x in zip(block["steps"], block["tokens"],
                                                                  block["time_s"], strict=True)]  # fmt: skip
        # an interval before the first with a prefilled row: None, not known (an older plugin)
        for b, held_samples in _aligned(entries, order, first, rows).items():
            found.setdefault(b, {m: [] for m in COUNTER_MODES})[mode] = held_samples
    return out, found


def _aligned(entries: _Entries, order: npt.NDArray[np.int64], first: int,
             values: Sequence[Any]) -> dict[int, list[Any]]:  # fmt: skip
    """bin -> the ``values`` (one per entry) of the samples ``order`` gives (``_Entries.orders``), in that
    order, None for a sample in an interval before ``first`` (the first with a row of the block: an older
    plugin's)."""
    out: dict[int, list[Any]] = {}
    interval_of = entries.interval_of
    for i in order.tolist():
        out.setdefault(entries.bins[i], []).append(values[i] if interval_of[i] >= first else None)
    return out


def has_counters(db: Database, server_id: int) -> bool:
    """Whether the server ever had decode counters stored (raw or rolled up): False for a server whose
    plugin does not publish them. Its extend rows alone do not count (they sit beside gated ones)."""
    sample, roll = rollups.COUNTERS.sample, rollups.COUNTERS.rollup
    # each probe walks an index: (server_id, ts) of the samples, (res_s, server_id, ...) of the rollups; an
    # extend row sits beside a gated one of its interval, so the first row that matches comes within a few
    probes: list[tuple[Any, ColumnElement[bool]]] = [
        (sample, and_(sample.c.server_id == server_id, sample.c.mode.in_(COUNTER_MODES)))
    ]
    for res in rollups.ROLLUP_RESOLUTIONS_S:
        probes.append(
            (roll, and_(roll.c.res_s == res, roll.c.server_id == server_id, roll.c.mode.in_(COUNTER_MODES)))
        )
    with db.engine.connect() as conn:
        for table, where in probes:
            if conn.execute(sa_select(literal_column("1")).select_from(table).where(where).limit(1)).first():
                return True
    return False
