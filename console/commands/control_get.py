"""What `spectower control get` adds to the server's own account from the database, and prints: the speedup
per batch size (the stored counters' estimate, else the counters since the server started), who holds a
manual lock, and what the running policy says now."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .rank_lines import when_text as _when

if TYPE_CHECKING:
    from rich.console import Console

    from ...control.knob_state import KnobState
    from ...storage import Database


def print_said(out: Console, said: dict[str, Any]) -> None:
    """What the running policy says now (its runner's newest line, as the database holds it), since when, and
    how long ago its runner last stepped."""
    import time

    from ..time_text import ago

    step = said.get("updated_ts")
    out.print(f"policy says      {said['mode']}, since {_when(said.get('said_ts'))} (its last step "
              f"{ago(step, time.time())}): {said['said']}", markup=False, soft_wrap=True)  # fmt: skip


def from_database(
    state: KnobState, db: str | None, window_s: float
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]:
    """What the database adds to the server's own account: the speedup (``speedup_of``), who holds a manual
    lock (``control.audit.lock_holder``: actor, since, reason; None when the database has no such row) and
    what the policy on it says now (``console.data.policy_said``; None: none said anything). A missing
    SQLite file is not created."""
    from ...control.audit import lock_holder
    from ...storage.database import default_db_url
    from .. import data

    store = data.open_store(default_db_url(db))
    if store is None:
        return speedup_of(state, None, window_s), None, None
    try:
        event = lock_holder(store, state)
        holder = None if event is None else {"actor": event.actor, "since": event.ts, "reason": event.reason}
        return speedup_of(state, store, window_s), holder, data.policy_said(store, state.server_url)
    finally:
        store.close()


def speedup_of(state: KnobState, store: Database | None, window_s: float) -> dict[str, Any]:
    """``control.speedup.estimate`` for this server: over the collector's stored counter intervals of the
    last ``window_s`` when the database has them (``console.data.live_speedup``, what the console shows),
    else over the counters since the server started (one read of /server_info)."""
    import time

    from ...collectors.sglang.counters import read_counters
    from ...control import kept_extend, mix_levelled, prefilled, speedup
    from ...plugin.engine_counters import rates, sum_ranks, with_outside
    from ...storage import queries
    from .. import data

    if store is not None:
        try:
            row = queries.server_by_url(store, state.server_url)
            now = time.time()
            live = data.live_speedup(store, int(row.id), now - window_s, now)  # type: ignore[arg-type]
            if live.estimate.intervals:
                return {"source": "stored", "window_s": window_s, **live.estimate.to_json(),
                        "kept_extend": _tax_json(live.tax_measured),
                        "corrected_bins": list(live.corrected_bins)}  # fmt: skip
        except LookupError:  # the collector never stored this server
            pass
    read = read_counters(state.info.info)
    if not read.blocks:
        why = (
            "; ".join(read.warnings) or "the server publishes no decode counters (an older spectower plugin)"
        )
        return {"source": None, "label": f"no estimate: {why}", "bins": []}
    since_start = with_outside(rates(None, sum_ranks(read.blocks)))  # as every estimate reads a mode's time
    found = kept_extend.from_intervals([since_start])
    tax, _ = kept_extend.or_assumed(found)
    estimate, corrected = kept_extend.corrected_estimate(
        speedup.per_bin([since_start]), 1, tax, prefilled.prefilled_samples([since_start]),
        mix_levelled.slot_samples([since_start]), mix_levelled.window_mix([since_start]))
    est = estimate.to_json()
    return {**est, "source": "since_start", "label": f"{est['label']}, since the server started",
            "kept_extend": _tax_json(found), "corrected_bins": list(corrected)}  # fmt: skip


def _tax_json(tax: Any) -> dict[str, Any] | None:
    """What the draft extend costs a steady gated step here (plugin 0.4.6, ``control.kept_extend``): the tax
    learn corrects a drafting bin's gated side by; None where nothing measured it."""
    if tax is None:
        return None
    return {"tax": tax.tax, "label": tax.label(),
            "bins": [{"batch_size": b.batch_size, "tax": b.tax, "kept_steps": b.kept_steps,
                      "skipped_steps": b.skipped_steps} for b in tax.bins]}  # fmt: skip


def print_speedup(out: Console, speed: dict[str, Any]) -> None:
    say = functools.partial(out.print, markup=False, soft_wrap=True)
    source = speed.get("source")
    where = {
        "stored": f" (stored counters, last {speed.get('window_s', 0) / 60:g} min: {speed.get('intervals')} "
        f"intervals, {speed.get('seconds', 0):.0f} s of step time)",
        "since_start": f" ({speed.get('seconds', 0):.0f} s of step time; no interval from one read: run "
        "`spectower collect` and pass --db)",
    }.get(source or "", "")
    say(f"crossover        {speed['label']}{where}")
    tax = speed.get("kept_extend")
    if source is not None:  # the gated side of a drafting bin is corrected by it (learn's reading)
        unmeasured = ("not measured (a plugin before 0.4.6, a lock, or too few steady gated steps of each "
                      "kind); learn assumes 7 %")  # fmt: skip
        say(f"kept extend      {tax['label'] if tax else unmeasured}")
    for b in speed.get("bins", []):
        if b["speedup"] is None:
            mode = "drafted" if b["drafted_tok_s"] is not None else "gated"
            say(f"  batch {b['batch_size']:>5}: {mode} only so far")
            continue
        ci = f" (95 % {b['lo']:.2f}-{b['hi']:.2f})" if b["lo"] is not None else ""
        # The minority mode was measured on explored batches inside the other one's stream (speedup.py
        # BinEstimate.ran_mostly: a gated stream's drafted rate reads high when requests accept differently).
        explored = {
            "gated": ", drafted side from exploration in a gated stream",
            "drafted": ", gated side from exploration in a drafting stream, corrected for the kept extend",
        }.get(b.get("ran_mostly") or "", "")
        say(
            f"  batch {b['batch_size']:>5}: speedup x{b['speedup']:.2f}{ci}, drafted "
            f"{b['drafted_tok_s']:.0f} tok/s, gated {b['gated_tok_s']:.0f} tok/s{explored}"
        )
