"""The engine's decode counters in /server_info -> per-interval rows for storage.

The spectower plugin (and the simulator) publish cumulative per-batch-size-bin counters of drafted and
gated decode steps at ``internal_states[i]["spectower"]["counters"]``, one block per DP rank
(plugin/engine_counters.py has the format). Here they are read from a /server_info document the scraper
already fetched, validated per rank, summed over ranks, and turned into deltas between consecutive
reads: one ``CounterRow`` per (bin, mode) that saw anything in the interval. A plugin that publishes the
``extend`` block (0.4.6 on: steady gated steps by whether the draft model's KV extend ran) adds rows of the
modes ``storage.counter_modes.EXTEND_MODES`` beside them, for the measured kept-extend tax
(control/kept_extend.py); every reader of the decode modes filters them out. A plugin that publishes the
``outside`` block (0.4.13 on: each mode's seconds outside its steps) adds rows of the modes
``storage.counter_modes.OUTSIDE_MODES``, 0 steps and 0 tokens, their seconds in ``time_s``, which the decode
reads fold into their mode's step time. One that publishes the ``prefilled`` block (0.4.14 on: each mode's
steps whose span held a prefill) adds rows of the modes ``storage.counter_modes.PREFILLED_MODES``, which
``storage.queries.counter_intervals`` reads back as each interval's ``prefilled`` block. One that publishes
the ``slots`` and ``mix`` blocks (0.4.15 on: each mode's requests per step summed, the exploring parts'
request mix) adds rows of the modes ``storage.counter_modes.SLOTS_MODES`` (the slots in ``tokens``) and
``MIX_MODES`` (two rows per bin), read back as each interval's ``slots`` and ``mix`` blocks.

A rank whose block is malformed is left out with one warning naming the field; the scrape goes on. A
server without counters (an older plugin, no plugin) gives no rows and no warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...plugin.engine_counters import FIELDS, MODES, rates, sum_ranks, validate
from ...storage.counter_modes import (
    EXTEND_MODES,
    MIX_MODES,
    MIX_ROWS,
    OUTSIDE_MODES,
    PREFILLED_MODES,
    SLOTS_MODES,
)


@dataclass(frozen=True)
class CounterRow:
    """The ``EngineCounterSample`` columns without ``server_id``: one bin and mode over one interval
    ending at ``ts``."""

    ts: float
    batch_size: int
    mode: str  # drafted | gated | extend_* | outside_* | prefilled_* | slots_* | mix_* (counter_modes)
    steps: int
    tokens: int
    time_s: float

    def as_row(self) -> dict[str, Any]:
        # every field is a plain value: a shallow copy is asdict's answer without its recursive deep copy
        return dict(vars(self))


@dataclass(frozen=True)
class CountersRead:
    blocks: list[dict[str, Any]]  # the valid counters blocks, one per DP rank that published one
    warnings: list[str]  # one line per rank left out, naming the field


def read_counters(doc: Any) -> CountersRead:
    """The counters blocks of a decoded /server_info document (a PD router's decode workers too)."""
    from ...storage.bench_serving import effective_server_info  # the database layer, once it is needed

    engine = effective_server_info(doc)
    states = engine.get("internal_states") if isinstance(engine, dict) else None
    if not isinstance(states, list):
        return CountersRead([], [])
    blocks: list[dict[str, Any]] = []
    warnings: list[str] = []
    for i, state in enumerate(states):
        plugin = state.get("spectower") if isinstance(state, dict) else None
        if not isinstance(plugin, dict) or "counters" not in plugin:
            continue  # no plugin or an older one: nothing to read, nothing wrong
        block = plugin["counters"]
        why = validate(block)
        if why is None and not isinstance(block.get("started_at", 0), int | float):
            why = "counters.started_at must be a number"
        if why is not None:
            warnings.append(f"/server_info: internal_states[{i}].spectower.{why} (rank left out)")
            continue
        blocks.append(block)
    return CountersRead(blocks, warnings)


class CounterDeltas:
    """The previous summed snapshot of one server; ``update`` turns the next one into rows."""

    def __init__(self) -> None:
        self._prev: dict[str, Any] | None = None
        self._prev_ranks = 0

    def forget(self) -> None:
        """Drop the baseline (after an outage: an interval across it would land in one timestamp)."""
        self._prev = None

    def update(self, ts: float, blocks: list[dict[str, Any]]) -> list[CounterRow]:
        """Rows for the interval since the previous read (none on the first read, with no blocks, or
        when the number of ranks changed: a different set of ranks is not the same counters)."""
        if not blocks:
            self._prev = None
            return []
        total = sum_ranks(blocks)
        prev, self._prev = self._prev, total
        same_ranks, self._prev_ranks = self._prev_ranks == len(blocks), len(blocks)
        if prev is None or not same_ranks:
            return []
        interval = rates(prev, total)
        rows: list[CounterRow] = []
        for mode in MODES:
            rows += _rows(ts, interval["bins"], mode, interval[mode], keep_negative=True)
        extend = interval.get("extend")
        if extend is not None:
            for kind, mode in EXTEND_MODES.items():
                rows += _rows(ts, interval["bins"], mode, extend[kind], keep_negative=False)
        for mode, stored in OUTSIDE_MODES.items():
            outside = interval[mode].get("outside_s")  # rates() gives none for an older plugin
            if outside is not None:
                rows += _held_rows(ts, interval["bins"], stored, {"time_s": outside})
        prefilled = interval.get("prefilled")  # none before plugin 0.4.14
        if prefilled is not None:
            for mode, stored in PREFILLED_MODES.items():
                rows += _rows(ts, interval["bins"], stored, prefilled[mode], keep_negative=False)
        slots = interval.get("slots")  # none before plugin 0.4.15
        if slots is not None:  # each mode's slots in tokens
            for mode, stored in SLOTS_MODES.items():
                rows += _held_rows(ts, interval["bins"], stored, {"tokens": slots[mode]})
        mix = interval.get("mix")  # none before plugin 0.4.15
        if mix is not None:  # two rows per bin, each field in its column (MIX_MODES)
            for stored in MIX_ROWS:
                held = {column: mix[field] for field, (mode, column) in MIX_MODES.items() if mode == stored}
                rows += _held_rows(ts, interval["bins"], stored, held)
        return rows


def _held_rows(ts: float, bins: list[int], mode: str, held: dict[str, list[Any]]) -> list[CounterRow]:
    """The rows of a block stored in some of the columns (``held``: column -> per bin), 0 in the others,
    none negative (``_rows``)."""
    zeros = [0] * len(bins)
    return _rows(ts, bins, mode, {column: held.get(column, zeros) for column in FIELDS}, keep_negative=False)


def _rows(
    ts: float, bins: list[int], mode: str, block: dict[str, list[Any]], keep_negative: bool
) -> list[CounterRow]:
    """One row per bin of ``block`` that saw anything. The extend's rows with a negative delta are left out
    (``keep_negative`` False): ``rates`` takes a decode counter that went down for a restart, but it does not
    check the extend block, which a rank whose block turned malformed (left out of ``sum_ranks``'s sum) can
    move down. The decode modes' rows are stored as they always were."""
    rows = []
    for i, b in enumerate(bins):
        steps, tokens, seconds = (block[field][i] for field in FIELDS)
        if (steps or tokens or seconds) and (keep_negative or min(steps, tokens, seconds) >= 0):
            rows.append(CounterRow(ts, int(b), mode, int(steps), int(tokens), float(seconds)))
    return rows
