"""A replay's per-request records: what `bench replay --json` keeps of every arrival, so a run can be scored
again later (benchmarks/gpu/replay_table.py pairs the requests of several runs of one trace and puts an
interval on their ratios).

The block is columnar (one list per field, one entry per arrival, in arrival order) so 1 738 requests stay
near 170 kB: ``index`` (the arrival's position in the schedule: one trace, speedup, rate scale, seed and
duration give the same schedule, so it pairs requests across runs), ``row`` (the trace row), ``scheduled_s``
and ``sent_s`` (seconds after the replay's start: when it was due, when it went out; null if shed),
``prompt_tokens`` (the prompt sent, after a cut; null if shed), ``output_tokens`` (received), ``ttft_s``,
``e2e_s``, ``itl_s`` (the mean inter-token latency after the first token: what the SLO checks,
storage.request_traces.RequestOutcome), ``status`` (``ok``, ``error``, ``shed`` or ``aborted``: cut short by
Ctrl-C, left out of the figures), ``error`` (the error's first characters) and ``slo_met``. Times are rounded
to the microsecond; ``slo_met`` is decided before the rounding, as the run's goodput was.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .replay import outcome_of

if TYPE_CHECKING:
    from .replay import ReplayResult

RECORDS_VERSION = 1
STATUSES = ("ok", "error", "shed", "aborted")
ERROR_CHARS = 160  # of an error's text: its kind and the start of its message
TIME_DIGITS = 6


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, TIME_DIGITS)


@dataclass(frozen=True)
class ReplayRecords:
    """The per-request columns of one replay, each as long as ``index``."""

    index: list[int]
    row: list[int]
    scheduled_s: list[float]
    sent_s: list[float | None]
    prompt_tokens: list[int | None]
    output_tokens: list[int]
    ttft_s: list[float | None]
    e2e_s: list[float | None]
    itl_s: list[float | None]
    status: list[str]
    error: list[str | None]
    slo_met: list[bool]

    def __len__(self) -> int:
        return len(self.index)

    def to_json(self) -> dict[str, Any]:
        return {"version": RECORDS_VERSION, **{name: list(getattr(self, name)) for name in COLUMNS}}


def replay_records(result: ReplayResult) -> ReplayRecords:
    """Every arrival the replay reached (sent or shed), in arrival order, scored against its SLO."""
    slo = result.config.slo
    shed = {"sent_s": None, "prompt_tokens": None, "output_tokens": 0, "ttft_s": None, "e2e_s": None,
            "itl_s": None, "status": "shed", "error": None, "slo_met": False}  # fmt: skip
    by_index: dict[int, dict[str, Any]] = dict.fromkeys(result.shed_indices, shed)
    for rec in result.records:
        outcome = outcome_of(rec)
        status = "aborted" if rec.aborted else "ok" if rec.success else "error"
        by_index[rec.index] = {
            "sent_s": _round(rec.start - result.clock_start),
            "prompt_tokens": result.prompt_tokens.get(rec.index),
            "output_tokens": rec.output_tokens,
            "ttft_s": _round(rec.ttft_s),
            "e2e_s": _round(rec.e2e_s),
            "itl_s": _round(outcome.itl_s),
            "status": status,
            "error": rec.error[:ERROR_CHARS] if rec.error else None,
            "slo_met": status == "ok" and outcome.meets(slo),
        }
    order = sorted(by_index)
    columns: dict[str, list[Any]] = {
        "index": order,
        "row": [result.schedule[i].row for i in order],
        "scheduled_s": [_round(result.schedule[i].t_s) for i in order],
    }
    for name in list(COLUMNS)[3:]:  # the columns after the schedule's
        columns[name] = [by_index[i][name] for i in order]
    return ReplayRecords(**columns)


# what each column holds, for reading a block back: a check that says whether a value fits, and its name
def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _or_null(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


Check = tuple[Callable[[Any], bool], str]
COLUMNS: dict[str, Check] = {
    "index": (_count, "a whole number >= 0"),
    "row": (_count, "a whole number >= 0"),
    "scheduled_s": (_seconds, "seconds (a finite number)"),
    "sent_s": (_or_null(_seconds), "seconds or null"),
    "prompt_tokens": (_or_null(_count), "a whole number >= 0 or null"),
    "output_tokens": (_count, "a whole number >= 0"),
    "ttft_s": (_or_null(_seconds), "seconds or null"),
    "e2e_s": (_or_null(_seconds), "seconds or null"),
    "itl_s": (_or_null(_seconds), "seconds or null"),
    "status": (lambda value: value in STATUSES, f"one of {', '.join(STATUSES)}"),
    "error": (_or_null(lambda value: isinstance(value, str)), "text or null"),
    "slo_met": (lambda value: isinstance(value, bool), "true or false"),
}


def read_replay_records(block: Any, source: str) -> ReplayRecords:
    """The ``records`` block of a `bench replay --json` result; a ``ValueError`` of one line naming
    ``source`` and the field (``records.ttft_s[12]``) when something is missing or of the wrong kind."""
    where = f"{source}: records"
    if not isinstance(block, Mapping):
        raise ValueError(f"{where}: expected an object of per-request columns, got {type(block).__name__}")
    if block.get("version") != RECORDS_VERSION:
        raise ValueError(f"{where}.version: expected {RECORDS_VERSION}, got {block.get('version')!r}")
    size = len(block["index"]) if isinstance(block.get("index"), list) else None
    for name, (fits, kind) in COLUMNS.items():
        column = block.get(name)
        if not isinstance(column, list) or (size is not None and len(column) != size):
            got = f"a list of {len(column)}" if isinstance(column, list) else repr(column)[:40]
            raise ValueError(f"{where}.{name}: expected a list of {size} entries ({kind}), got {got}")
        bad = next((i for i, value in enumerate(column) if not fits(value)), None)
        if bad is not None:
            raise ValueError(f"{where}.{name}[{bad}]: expected {kind}, got {column[bad]!r}")
    index = block["index"]
    out_of_order = next((i for i in range(1, len(index)) if index[i] <= index[i - 1]), None)
    if out_of_order is not None:
        raise ValueError(f"{where}.index[{out_of_order}]: arrivals must be in ascending order, each once")
    return ReplayRecords(**{name: list(block[name]) for name in COLUMNS})
