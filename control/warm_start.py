"""A warm start for ``control auto --policy learn``: what is already known about this server and its stack.

First, this server's own decode counters, as the collector stored them over the last ``COUNTERS_WINDOW_S``
(learn's own window): when they measure some batch-size bin in both modes with an interval (the gate explores
under any policy but an operator's lock), learn starts where its own rule would put the ceiling on them
(``policy.learn_counters.plan_ceilings``). They measured this server's traffic, where a sweep measured other
traffic: on the H200 under Azure's conversation prompts the fixed-share 0.5 pair's drafting lost from bin 32
on (0.84x, 95 % 0.78-0.91), where its sweep with 64-token prompts crossed at 47
(data/gpu-runs/h200-8b-pair-triton-replay-2026-12-04). The drafting bins' gated side is corrected by the
kept-extend tax the same counters measured in the bins the ceiling gated (``storage.queries.extend_totals``,
``control.kept_extend``; plugin 0.4.6 on), else by learn's constant, and the line says which.

Otherwise, what is known about the server's stack: the model, the draft, the SGLang version and the GPUs
(their names, one per GPU). What is known about one is a stored sweep (``bench sweep --save``: the run keeps
the server's ``/server_info`` and its GPU inventory, collectors/bench/persist.py) or a measured profile
(``bench sweep --profile-out``, which keeps the same identity). The newest whose stack matches the server's
gives the ceiling ``learn`` starts at: the sweep's crossover (a ceiling below every bin when drafting never
paid there, every bin when it always did). The policy's own counters decide from its first dwell on. Nothing
known: it starts from the ceiling the server holds now (where the launch or the last writer left it). Either
way one line says which.

The data flows the project's way: this module reads storage (``storage.queries.counter_intervals``,
``storage.queries.extend_totals``, ``storage.queries.bench_runs``), the command line reads the server and
passes its URL and stack in, and the policy gets only a number (``initial_ceiling``).
"""

from __future__ import annotations

import bisect
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..plugin.engine_counters import counter_bins
from ..storage import queries
from ..storage.bench_serving import effective_server_info
from ..storage.database import Database
from ..storage.models import BenchRun
from . import kept_extend, prefilled, speedup
from .policy import learn, learn_counters

STATUSES = ("found", "none_in_range", "below_range")  # collectors.bench.ratio.Crossover's
# How far back the server's own stored counters count: as much as learn keeps of its own.
COUNTERS_WINDOW_S = learn.DEFAULT_WINDOW_S
# How far before the window a stored knob reading still says what ceiling the window's first intervals ran
# under (the collector reads it every few seconds).
KNOB_LOOKBACK_S = 60.0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Stack:
    """What a stack is, as far as a source tells it (None: the source does not say)."""

    model: str | None
    draft: str | None
    sglang_version: str | None
    gpus: tuple[str, ...] | None  # one name per GPU, sorted; None: unknown

    @classmethod
    def of(cls, server_info: Mapping[str, Any], gpus: Sequence[Mapping[str, Any]] | None) -> Stack:
        """From a ``/server_info`` document (a PD router's: its decode workers') and a GPU inventory
        (collectors/bench/gpu_inventory.py's entries)."""
        facts = effective_server_info(dict(server_info))
        facts = facts if isinstance(facts, dict) else {}
        names = [_text(g.get("name")) for g in gpus or ()]
        return cls(
            model=_text(facts.get("model_path")) or _text(facts.get("served_model_name")),
            draft=_text(facts.get("speculative_draft_model_path")),
            sglang_version=_text(facts.get("version")),
            gpus=tuple(sorted(n for n in names if n)) if names and all(names) else None,
        )

    def describe(self) -> str:
        gpus = "GPU unknown" if self.gpus is None else _gpu_text(self.gpus)
        version = self.sglang_version or "?"
        return f"model {self.model or '?'}, draft {self.draft or 'none'}, SGLang {version}, {gpus}"

    def differences(self, other: Stack) -> list[str]:
        """What of ``other`` differs from this stack (this one is the server's). The GPUs are compared when
        both know them; a model or version the server does not report matches nothing."""
        out = []
        for what, mine, theirs in (
            ("model", self.model, other.model),
            ("draft", self.draft, other.draft),
            ("SGLang version", self.sglang_version, other.sglang_version),
        ):
            if mine != theirs or (mine is None and what != "draft"):
                out.append(f"{what} {theirs or '?'}")
        if self.gpus is not None and other.gpus is not None and self.gpus != other.gpus:
            out.append(_gpu_text(other.gpus))
        return out


def _gpu_text(gpus: tuple[str, ...]) -> str:
    names = sorted(set(gpus))
    return ", ".join(f"{gpus.count(n)}x {n}" for n in names) or "no GPU"


@dataclass(frozen=True)
class Known:
    """One thing known about a stack: its crossover, from a stored sweep or a measured profile."""

    source: str  # "sweep #12 'tag' of 2026-12-01 10:00 UTC", "profile /path/x.json"
    created_at: float
    stack: Stack
    status: str  # one of STATUSES
    crossover: float | None = None
    lo: float | None = None
    hi: float | None = None

    def ceiling(self, max_running_requests: int) -> int:
        """The knob that drafts where this source says drafting pays, on the counters' bins as learn keeps its
        ceilings (``ceiling_at_crossover``: a bin drafts when most of its batch sizes pay)."""
        if self.status == "none_in_range":
            return max_running_requests
        if self.status == "below_range" or self.crossover is None:
            return 0
        bins = counter_bins(max_running_requests)
        return max(0, min(max_running_requests, ceiling_at_crossover(self.crossover, bins)))

    def crossover_text(self) -> str:
        if self.status == "none_in_range":
            return "none: drafting paid at every level measured"
        if self.status == "below_range":
            return "none: drafting lost at every level measured"
        interval = f" ({self.lo:.1f}-{self.hi:.1f})" if self.lo is not None and self.hi is not None else ""
        return f"{self.crossover or 0:.1f}{interval}"


def ceiling_at_crossover(crossover: float, bins: list[int]) -> int:
    """The ceiling on a bin boundary for a crossover measured on the batch-size axis (a sweep's, a profile's).

    A counters' bin counts the batches above the bin before it up to its own size (bin 48: 33-48), and learn
    keeps its ceilings on bin boundaries so that each bin runs one mode. A bin drafts when most of its batch
    sizes lie below the crossover, i.e. the crossover is past the bin's middle: 46.3 (the triton pair's,
    2026-12-01) drafts bin 48, where the largest bin at or below it (32) would gate 33-46, where drafting
    pays."""
    ceiling, below = 0, 0
    for top in bins:
        if crossover < (below + 1 + top) / 2:
            break
        ceiling, below = top, top
    return ceiling


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def known_from_run(run: BenchRun) -> Known | None:
    """A stored run's crossover and stack (None: the run has no crossover, or no ``/server_info``)."""
    try:
        info = json.loads(run.server_info_json or "null")
        params = json.loads(run.params_json or "null")
        gpus = json.loads(run.gpu_inventory_json or "null")
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    status = params.get("crossover_status") if isinstance(params, dict) else None
    if status is None and run.crossover is not None:
        status = "found"
    if status not in STATUSES or (status == "found" and run.crossover is None):
        return None
    inventory = [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else None
    tag = f" {run.tag!r}" if run.tag else ""
    return Known(
        source=f"sweep #{run.id}{tag} of {_when(run.created_at)}",
        created_at=run.created_at,
        stack=Stack.of(info, inventory or None),
        status=status,
        crossover=run.crossover,
        lo=run.crossover_lo,
        hi=run.crossover_hi,
    )


def known_from_profile(doc: Mapping[str, Any], source: str, status: str, crossover: float | None) -> Known:
    """A measured profile (``bench sweep --profile-out``'s JSON) and its crossover, as its reader found it.
    A profile without the identity keys (the shipped ones) matches no server."""
    raw_gpus = doc.get("gpus")
    gpus: Mapping[str, Any] = raw_gpus if isinstance(raw_gpus, Mapping) else {}
    count, name = gpus.get("count"), _text(gpus.get("name"))
    inventory = [{"name": name}] * count if isinstance(count, int) and 0 < count <= 4096 and name else None
    info = {"model_path": doc.get("model_path"), "version": doc.get("sglang_version"),
            "speculative_draft_model_path": doc.get("speculative_draft_model_path")}  # fmt: skip
    measured = doc.get("measured_at")
    created = 0.0  # no time: older than any stored sweep
    if isinstance(measured, int | float) and not isinstance(measured, bool) and math.isfinite(measured):
        created = float(measured)
    return Known(source=f"profile {source}", created_at=created,
                 stack=Stack.of(info, inventory), status=status, crossover=crossover)  # fmt: skip


@dataclass(frozen=True)
class WarmStart:
    """Where ``learn`` starts (``ceiling`` None: the ceiling the server holds now) and the line saying why;
    from the server's own stored counters, also each mode's steady prefill cost they measured
    (``prefilled.steady_costs``), which learn levels its explored cells at until its own window measures it:
    a learn started under a load held above its ceiling has no drafting bin of its own to take it from."""

    ceiling: int | None
    line: str
    prefill_costs: Mapping[str, float] = field(default_factory=dict)
    # the server's stored intervals whose knob is known, each with it as learn's ceiling (``learn_history``):
    # learn's window starts with them, so a minute of always on before it is its drafting side at once
    history: tuple[dict[str, Any], ...] = ()


def choose(server: Stack, known: Iterable[Known], max_running_requests: int) -> WarmStart:
    """The newest source whose stack is the server's; the line names it and its crossover, or says that
    nothing matched (and what differed in the newest source checked)."""
    candidates = sorted(known, key=lambda k: k.created_at, reverse=True)
    for item in candidates:
        if not server.differences(item.stack):
            # on a bin boundary, as learn keeps its ceilings (each bin runs one mode)
            ceiling = item.ceiling(max_running_requests)
            unchecked = ""
            if server.gpus is None:
                unchecked = "; GPUs not compared: the server's are unknown (give --gpu-metrics)"
            elif item.stack.gpus is None:
                unchecked = "; GPUs not compared: the source does not name them"
            return WarmStart(
                ceiling,
                f"warm start: {item.source} matches this stack ({server.describe()}): crossover "
                f"{item.crossover_text()}; learn starts at ceiling {ceiling}{unchecked}",
            )
    if not candidates:
        checked = "no stored sweep or measured profile has a crossover"
    else:
        newest = candidates[0]
        checked = (f"{len(candidates)} stored sweep(s)/profile(s) checked, none matched (the newest, "
                   f"{newest.source}, differs: {'; '.join(server.differences(newest.stack))})")  # fmt: skip
    return WarmStart(
        None,
        f"warm start: nothing known for this stack ({server.describe()}): {checked}; learn starts from "
        "the ceiling the server holds now",
    )


def from_counters(
    intervals: list[dict[str, Any]],
    max_running_requests: int,
    window_s: float = COUNTERS_WINDOW_S,
    kept_extend_tax: float | kept_extend.KeptExtendTax | None = None,
    ceilings: Sequence[int | None] | None = None,
    current: int | None = None,
) -> WarmStart | None:
    """Where learn's own rule puts the ceiling on this server's stored counter intervals
    (``storage.queries.counter_intervals``), or None when no bin has an interval there yet.

    As learn reads its own counters: thin bins keep their side (``learn_counters.estimate_without_thin``),
    and the bins each interval's ceiling drafted (``ceilings``, one per interval, from the knob the collector
    stored beside it; None: not known) have their gated side, measured on batches that kept the draft extend
    (explored ones, and those draining after a burst), scaled by ``1 / (1 - kept_extend_tax)``: a
    ``kept_extend.KeptExtendTax`` the counters measured (the line says where), or a number taken as assumed
    (None: learn's constant).
    Where no ceiling is known, a bin that ran mostly drafted (``BinEstimate.ran_mostly``) is taken as
    drafted. ``current``: the knob now; where learn's rule keeps it (``learn_counters.keep_or_move``: within
    what the estimate allows), learn starts there, so bins the counters never measured keep their side."""
    if not intervals:
        return None
    if ceilings is not None and len(ceilings) != len(intervals):
        raise ValueError(f"ceilings: one per interval, got {len(ceilings)} for {len(intervals)}")
    tax, tax_text = kept_extend.or_assumed(kept_extend_tax)
    scale = 1.0 / (1.0 - tax)
    masks = _masks(intervals, ceilings)
    corrected = learn_counters.as_choices(intervals, masks, scale)
    est, _ = learn_counters.estimate_without_thin(corrected)
    if est.status == "no_data" or not any(b.lo is not None for b in est.bins):
        return None
    # the server's whole ladder of bins, as learn's counters have it (stored intervals hold only the bins
    # that saw steps: a ceiling between the stored ones must still land on a real boundary)
    bins = sorted({*counter_bins(max_running_requests), *(int(b) for b in intervals[-1]["bins"])})
    target, low, high = learn_counters.plan_ceilings(est, bins, max_running_requests)
    ceiling = learn_counters.keep_or_move(current, target, low, high, bins, max_running_requests)
    where = f"ceiling {ceiling}"
    if current is not None and ceiling == learn_counters.ceiling_of(current, max_running_requests):
        where += ", where the knob is: within what they allow"
    elif current is not None and ceiling != target:
        where += f", the bin boundary nearest the knob ({current}) within what they allow"
    return WarmStart(
        ceiling,
        f"warm start: this server's own counters of the last {window_s / 60:.0f} min ({len(intervals)} "
        f"intervals, {est.seconds:.0f} s of decode steps): crossover {est.label}; {tax_text}; "
        f"learn starts at {where}",
        prefilled.steady_costs(intervals, masks),
    )


def _masks(intervals: list[dict[str, Any]], ceilings: Sequence[int | None] | None) -> list[list[bool]]:
    """Per interval, per bin, whether its ceiling drafted the bin; where the ceiling is not known, whether
    the bin ran mostly drafted (``BinEstimate.ran_mostly``, estimated only then)."""
    known = list(ceilings) if ceilings is not None else [None] * len(intervals)
    mostly: set[int] = set()
    if None in known:
        mostly = {b.batch_size for b in speedup.estimate(intervals).bins if b.ran_mostly == "drafted"}
    return [learn_counters.drafted_by(interval["bins"], ceiling) if ceiling is not None
            else [int(b) in mostly for b in interval["bins"]]
            for interval, ceiling in zip(intervals, known, strict=True)]  # fmt: skip


def knob_at(knobs: Sequence[tuple[float, int]], ts: float) -> int | None:
    """The knob the newest of ``knobs`` ((time, spec_max_bs), oldest first) at or before ``ts`` read (None:
    none that old). A binary search on the pairs themselves: (ts, inf) sorts after every reading at ts."""
    i = bisect.bisect_right(knobs, (ts, math.inf))
    return knobs[i - 1][1] if i else None


@dataclass(frozen=True)
class StoredCounters:
    """What the collector stored for one server over the warm start's window: its counter intervals, the
    knob stored beside each (None: not known), the kept-extend tax its extend rows measure and its newest
    knob."""

    intervals: list[dict[str, Any]]
    ceilings: list[int | None]
    tax: kept_extend.KeptExtendTax | None
    newest_knob: int | None


def stored_counters(
    db: Database, server_url: str, now: float, window_s: float = COUNTERS_WINDOW_S
) -> StoredCounters | None:
    """The collector's counters of ``server_url`` over the last ``window_s`` (None: never collected, or no
    interval in the window)."""
    try:
        server_id = queries.server_by_url(db, server_url).id
    except LookupError:
        return None
    if server_id is None:
        return None
    intervals = queries.counter_intervals(db, server_id, now - window_s, now)
    if not intervals:
        return None
    # the knob as the collector read it (a scrape's /server_info), from a little before the window on
    rows = queries.sample_rows(db, "engine", [server_id], now - window_s - KNOB_LOOKBACK_S, now)
    knobs = [(float(r["ts"]), int(r["spec_max_bs"])) for r in rows if r.get("spec_max_bs") is not None]
    ceilings = [knob_at(knobs, float(interval["ts"])) for interval in intervals]
    tax = kept_extend.from_totals(queries.extend_totals(db, server_id, now - window_s, now))
    return StoredCounters(intervals, ceilings, tax, knobs[-1][1] if knobs else None)


def from_stored_counters(
    db: Database,
    server_url: str,
    max_running_requests: int,
    now: float,
    window_s: float = COUNTERS_WINDOW_S,
    current: int | None = None,
) -> WarmStart | None:
    """``from_counters`` over what the collector stored for ``server_url`` in the last ``window_s``
    (``stored_counters``), each interval with the knob it stored beside it, and the kept-extend tax its
    extend rows of the window measure (``kept_extend.measure``; learn's constant where they measure none),
    and the knob now (``current``, else the newest one stored) (None: the server was never collected, or
    its counters measure no bin in both modes yet)."""
    stored = stored_counters(db, server_url, now, window_s)
    return None if stored is None else from_stored(stored, max_running_requests, window_s, current)


def from_stored(
    stored: StoredCounters, max_running_requests: int, window_s: float = COUNTERS_WINDOW_S,
    current: int | None = None,
) -> WarmStart | None:
    """``from_counters`` over ``stored``, the knob now ``current`` (else the newest one stored)."""
    return from_counters(stored.intervals, max_running_requests, window_s, stored.tax,
                         ceilings=stored.ceilings,
                         current=current if current is not None else stored.newest_knob)  # fmt: skip


def find(
    db: Database,
    server: Stack,
    max_running_requests: int,
    profiles: Sequence[Known] = (),
    *,
    server_url: str | None = None,
    now: float | None = None,
    current: int | None = None,
) -> WarmStart:
    """This server's own stored counters (``server_url``; ``current``: its knob now) when they measure a bin
    in both modes, else ``choose`` over every stored run with a crossover and the given measured profiles,
    with the prefill costs the stored counters measured all the same: an operator's lock explores nothing,
    so always on's counters measure no bin in both modes, yet they say what a drafting stream's prefills
    cost (a rehearsal on `sim serve`, 2026-12-07: learn after a locked minute of always on got none)."""
    costs: dict[str, float] = {}
    history: tuple[dict[str, Any], ...] = ()
    if server_url is not None:
        stored = stored_counters(db, server_url, time.time() if now is None else now)
        if stored is not None:
            history = learn_history(stored)
            own = from_stored(stored, max_running_requests, current=current)
            if own is not None:
                return replace(own, line=own.line + _history_text(history), history=history)
            costs = prefilled.steady_costs(stored.intervals, _masks(stored.intervals, stored.ceilings))
    runs = [k for k in (known_from_run(run) for run in queries.bench_runs(db)) if k is not None]
    chosen = replace(choose(server, [*runs, *profiles], max_running_requests), history=history)
    if costs:
        said = ", ".join(f"{mode} {1e3 * cost:.4f} ms" for mode, cost in sorted(costs.items()))
        chosen = replace(chosen, line=f"{chosen.line}; prefills a token as this server's stored counters "
                                      f"measured them: {said}", prefill_costs=costs)  # fmt: skip
    return replace(chosen, line=chosen.line + _history_text(history))


def learn_history(stored: StoredCounters) -> tuple[dict[str, Any], ...]:
    """The stored intervals whose knob is known, each with that knob as the ceiling learn reads it ran under
    (``learn_counters.CEILING_KEY``): where learn's window starts. An interval whose knob is not known is
    left out: learn would read it as every bin drafted."""
    return tuple({**interval, learn_counters.CEILING_KEY: ceiling}
                 for interval, ceiling in zip(stored.intervals, stored.ceilings, strict=True)
                 if ceiling is not None)  # fmt: skip


def _history_text(history: Sequence[Mapping[str, Any]]) -> str:
    """What the warm start's line says of the history it hands learn (nothing where there is none)."""
    if not history:
        return ""
    first, last = (time.strftime("%H:%M:%S", time.gmtime(float(h["ts"]))) for h in (history[0], history[-1]))
    return (f"; learn's window starts with the {len(history)} stored interval"
            f"{'' if len(history) == 1 else 's'} of {first}-{last} UTC")  # fmt: skip
