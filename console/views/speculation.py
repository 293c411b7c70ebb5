"""Speculation: is it paying off at today's load? Live estimate vs benchmark curves, accept length, policy."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from ...storage import Database
from .. import charts, data, estimate, settings
from . import common

SPEC_MAX_POINTS = 400
NO_COUNTERS = (
    "No live curve: this server publishes no decode counters (a spectower plugin older than the counters, "
    "or none); the benchmark curves are what there is."
)
BENCH_RUNS_DEFAULT = 2  # benchmark curves drawn by default (the newest runs)


def render() -> None:
    st.title("Speculation")
    db = common.page_database()
    if db is None:
        return
    servers = data.servers(db)
    server = common.server_choice(servers, key="spec_server")
    runs = data.bench_runs(db)
    chosen = _bench_choice(runs, server)
    live = st.fragment(run_every=settings.refresh_s() * 5)(common.shows_database_errors(_live))
    live(int(server["id"]), tuple(chosen))


def _bench_choice(runs: pd.DataFrame, server: pd.Series) -> list[int]:
    if runs.empty:
        return []
    labels = {int(r.id): _run_label(r) for r in runs.itertuples()}
    same = runs[
        (runs["server_url"] == server["url"]) | (runs["served_model_name"] == server["served_model_name"])
    ]
    default = list((same if not same.empty else runs)["id"].astype(int))[:BENCH_RUNS_DEFAULT]
    return st.multiselect(
        "Benchmark curves", list(labels), default=default, format_func=lambda i: labels[i], key="spec_runs"
    )


def _run_label(r: object) -> str:
    tag = common.text_or(getattr(r, "tag", None), str(getattr(r, "source", "")))
    return f"#{getattr(r, 'id', '?')} {tag} ({common.clock(getattr(r, 'created_at', None))[:16]})"


@dataclass(frozen=True)
class _LiveData:
    """What the live part of the page shows, read from the database once per refresh; the layout
    functions below draw only this."""

    window: common.Window
    server_url: str
    max_running: int | None
    latest: dict[str, Any] | None
    stale: bool
    live: data.LiveSpeedup
    live_table: pd.DataFrame
    measured: pd.DataFrame
    curves: dict[str, pd.DataFrame]
    crossovers: dict[str, float | None]  # "live" first, then each benchmark curve's
    operating_point: tuple[float, float, str] | None
    verdict: tuple[str, str]
    series: pd.DataFrame  # the accept columns blanked where a bucket drafted nothing
    blank_buckets: int  # buckets that drafted nothing (idle or gated)
    x_range: tuple[float, float]
    events: pd.DataFrame
    setter: dict[str, Any] | None  # the newest confirmed set on this server
    three_curves: pd.DataFrame


def _live_data(db: Database, server_id: int, run_ids: tuple[int, ...], win: common.Window) -> _LiveData:
    servers = data.servers(db)
    server = servers[servers["id"] == server_id].iloc[0]
    max_running = None if pd.isna(server.get("max_running_requests")) else int(server["max_running_requests"])
    latest = data.latest_engine(db, server_id)
    live = data.live_speedup(db, server_id, win.t0, win.t1)
    measured = live.measured
    bench = _bench(db, run_ids)
    curves, crossovers = bench.curves, bench.crossovers
    op, verdict = _operating_point(latest, measured, curves, max_running)
    columns = ["spec_accept_length", "spec_accept_rate", "num_running_reqs", "spec_max_bs"]
    series = data.engine_series(db, server_id, win.t0, win.t1, columns, SPEC_MAX_POINTS)
    dp_ranks = int((latest or {}).get("dp_ranks") or 1)
    url = str(server["url"])
    return _LiveData(
        window=win,
        server_url=url,
        max_running=max_running,
        latest=latest,
        stale=latest is None or common.is_stale(latest["ts"]),
        live=live,
        live_table=live.table,
        measured=measured,
        curves=curves,
        crossovers={"live": live.estimate.crossover, **crossovers},
        operating_point=op,
        verdict=verdict,
        series=data.accept_while_drafting(series, dp_ranks),
        blank_buckets=int(data.drafted_nothing(series, dp_ranks).sum()),
        x_range=charts.data_window(win.t0, win.t1, server.get("first_seen"), series),
        events=data.control_events(db, server_url=url, t0=win.t0, actor_prefix="policy:"),
        setter=data.last_setter(db, url),
        three_curves=bench.three_curves,
    )


def _live(server_id: int, run_ids: tuple[int, ...]) -> None:
    view = _live_data(common.store(), server_id, run_ids, common.window())
    _headline(view)
    _speedup_chart(view)
    _accept_and_policy(view)
    _tables(view)


def _headline(view: _LiveData) -> None:
    """Speedup now, the live and benchmark crossovers, the knob; a banner when the samples are stale."""
    latest, est = view.latest, view.live.estimate
    cols = st.columns([2, 1, 1, 1])
    with cols[0]:
        if latest is None:
            common.big_number("Speedup now", "—", "no engine samples yet", stale=True)
        else:
            common.big_number(
                "Speedup now (spec on / off)",
                view.verdict[0],
                ("STALE — " if view.stale else "") + view.verdict[1],
                stale=view.stale,
            )
    crossover_value, crossover_note = (
        estimate.live_crossover_metric(est) if view.live.has_counters else ("—", "")
    )
    cols[1].metric(
        "Crossover (live)",
        crossover_value,
        help="the batch size where the live estimate falls through 1.0, with its 95 % interval ('< N': "
        "below 1.0 from the smallest batch size seen, N; '> N': above 1.0 up to the largest, N)",
    )
    if crossover_note:
        cols[1].caption(crossover_note)
    first_bench = next((x for k, x in view.crossovers.items() if k != "live" and x is not None), None)
    cols[2].metric("Crossover (benchmark)", common.fmt(first_bench, 1))
    knob = None if latest is None or latest["spec_max_bs"] is None else int(latest["spec_max_bs"])
    cols[3].metric(
        "Knob",
        estimate.knob_label(knob, view.max_running),
        help=f"spec_max_bs = {knob}. A policy's crossover counts what each choice served: a drafted bin's "
        "gated steps (the drain after a burst, explored batches) count against drafting, so it can sit "
        "below the live crossover, which compares drafted steps with gated ones.",
    )
    setter = estimate.knob_setter(view.setter, knob)
    if setter is not None and view.setter is not None:
        actor, policy_crossover = setter
        cols[3].caption(f"set by {actor} {common.ago(view.setter['ts'])}"
                        + (f"; its crossover {policy_crossover}" if policy_crossover else ""))  # fmt: skip
    if view.stale and latest is not None:
        common.stale_banner(view.server_url, latest["ts"])


def _speedup_chart(view: _LiveData) -> None:
    """The live speedup per batch size with its band, beside the benchmark curves, and how it was read."""
    est = view.live.estimate
    band = None
    if est.crossover_lo is not None and est.crossover_hi is not None:
        band = (est.crossover_lo, est.crossover_hi)
    st.plotly_chart(
        charts.speedup_chart(
            view.live_table, view.curves, view.crossovers, view.operating_point, view.max_running, band
        ),
        width="stretch",
        key="spec_speedup",
    )
    common.csv_button(view.live_table, "spec_speedup", "speedup-live-bins")
    if not view.live.has_counters:
        st.caption(NO_COUNTERS)
        return
    st.caption(
        f"Live estimate over the last {common.span_text(view.window.span_s)}: the engine's own decode "
        "counters, output tokens per second of step time of drafted vs gated steps per batch-size bin "
        f"({est.intervals} intervals, {est.seconds:.0f} s of step time); the band is its 95 % interval."
        + (
            ""
            if not view.measured.empty
            else " Not enough of both yet: a bin gets a speedup once batches of that size have run "
            "both drafted and gated (a threshold knob, or the learning policy)."
        )
    )


def _accept_and_policy(view: _LiveData) -> None:
    """Accept length and rate over time, then the policy's decisions on the knob."""
    series, span, stale = view.series, view.x_range, view.stale
    left, right = st.columns(2)
    with left:
        fig = charts.timeseries(series, {"spec_accept_length": "accept length"}, "Accept length",
                                "tokens/step", stale=stale, x_range=span)  # fmt: skip
        common.chart(fig, series.filter(regex="^(ts|spec_accept_length)"), "spec_al", "accept-length")
    with right:
        fig = charts.timeseries(series, {"spec_accept_rate": "accept rate"}, "Accept rate", "fraction",
                                stale=stale, x_range=span)  # fmt: skip
        common.chart(fig, series.filter(regex="^(ts|spec_accept_rate)"), "spec_ar", "accept-rate")
    if view.blank_buckets:
        st.caption(
            "Gaps: nothing drafted (the server idle, the knob at 0, or every batch above it), so nothing to "
            "accept. Where it drafted part of the time, SGLang's accept length counts each gated step as "
            "1.00 (its accept rate counts drafted steps only)."
        )
    events = view.events
    common.chart(charts.policy_timeline(series, events, view.max_running, x_range=span),
                 lambda: pd.concat([series, events], ignore_index=True), "spec_policy", "policy")  # fmt: skip
    if events.empty:
        st.caption("No policy decisions in this range (start one with `spectower control auto`).")


def _folded_table(title: str, table: pd.DataFrame, caption: str) -> None:
    with st.expander(title):
        st.dataframe(table, width="stretch", hide_index=True)
        st.caption(caption)


def _tables(view: _LiveData) -> None:
    """The live bins and the benchmark's three curves (on, knob off, plain) as tables, folded away."""
    if view.live.has_counters:
        _folded_table(
            "Live bins",
            view.live_table,
            "ran_mostly: the mode a bin's batches mostly ran; the other mode's rate there comes from "
            "the few batches that explored it, levelled as learn levels it. Where a bin ran mostly gated, "
            "its drafted tokens are set at what a drafting stream of the same requests commits (the "
            "exploring parts' harmonic mean accept: a part's batch is a gated stream's handful of requests, "
            "and a drafting stream holds more of those that accept less), then each minority mode's "
            "seconds carry its own stream's prefills, not the other stream's (docs/off-means-off.md). Where "
            "a bin ran mostly drafted, its gated rate comes from explored batches that kept the draft "
            "model's extend, which gating the bin would skip: it is scaled up by the extend's cost, as "
            f"learn does ({view.live.kept_extend}).",
        )
    if not view.three_curves.empty:
        _folded_table(
            "Benchmark throughput: knob on, knob off, plain server (no speculation)",
            view.three_curves,
            "knob off = spectower_spec_max_bs 0 (gated batches verified one token at a time); plain = a "
            "second server launched without speculation, measured in the same sweep (--plain-server). "
            "The speedup chart's 'vs plain' curve is on / plain.",
        )


@dataclass(frozen=True)
class _Bench:
    """The benchmark runs' side of the page: speedup curves, their crossovers, the three-curve table."""

    curves: dict[str, pd.DataFrame]
    crossovers: dict[str, float | None]
    three_curves: pd.DataFrame


def _bench(db: Database, run_ids: tuple[int, ...]) -> _Bench:
    """The chosen runs' curves, computed once per choice: a run is written once with all its points
    (storage/bench.py) and never changed, so its rows (id, time, tag, crossover) name its curves. Every
    refresh recomputed them from the points: 40 ms of pandas on 2 runs of 14 levels."""
    if not run_ids:
        return _Bench({}, {}, pd.DataFrame())
    runs = data.bench_runs(db).set_index("id")
    chosen = runs.loc[[rid for rid in run_ids if rid in runs.index], RUN_IDENTITY]
    return _bench_of_runs(db, run_ids, runs, f"{db.url!r} {chosen.to_records().tolist()!r}")


RUN_IDENTITY = ["created_at", "source", "tag", "crossover"]  # what a run's curves and labels depend on


@st.cache_resource(show_spinner=False, max_entries=32)
def _bench_of_runs(_db: Database, run_ids: tuple[int, ...], _runs: pd.DataFrame, identity: str) -> _Bench:
    """The chosen runs' points read once, each run's modes pivoted once, for the curves and the three-curve
    table both (cached by the database's URL and the runs' identity)."""
    runs, points = _runs, data.bench_points(_db, list(run_ids))
    per_run = {rid: points[points["run_id"] == rid] for rid in run_ids}
    by_mode = {rid: _by_mode(p) for rid, p in per_run.items()}
    curves, crossovers = _bench_curves(runs, per_run, by_mode)
    return _Bench(curves, crossovers, _three_curves(by_mode))


def _bench_curves(
    runs: pd.DataFrame, per_run: dict[int, pd.DataFrame], by_mode: dict[int, pd.DataFrame]
) -> tuple[dict[str, pd.DataFrame], dict[str, float | None]]:
    curves: dict[str, pd.DataFrame] = {}
    crossovers: dict[str, float | None] = {}
    for rid, points in per_run.items():
        curve = estimate.bench_speedup(points)
        label = (
            f"#{rid} {runs.loc[rid, 'tag'] or runs.loc[rid, 'source']}" if rid in runs.index else f"#{rid}"
        )
        curves[label] = curve
        stored = runs.loc[rid, "crossover"] if rid in runs.index else None
        crossovers[label] = (
            float(stored)
            if stored is not None and not pd.isna(stored)
            else estimate.crossover(list(curve["concurrency"]), list(curve["speedup"]))
            if not curve.empty
            else None
        )
        vs_plain = by_mode[rid]
        if {"on", "plain"} <= set(vs_plain.columns):
            both = vs_plain.dropna(subset=["on", "plain"])
            both = both[both["plain"] > 0]
            if not both.empty:
                curve = pd.DataFrame({"concurrency": both.index, "speedup": list(both["on"] / both["plain"])})
                curves[f"{label} on / plain"] = curve
                crossovers[f"{label} vs plain"] = estimate.crossover(
                    list(curve["concurrency"]), list(curve["speedup"])
                )
    return curves, crossovers


def _by_mode(points: pd.DataFrame) -> pd.DataFrame:
    """One run's output tok/s per concurrency (index) and mode (columns on, off, plain): a sweep's plain
    points (--plain-server) have spec_on NULL and ``mode: plain`` in extra_json. Empty (no columns) when no
    point says its mode, as a run without a plain server."""
    if points.empty or "extra_json" not in points:
        return pd.DataFrame()
    modes = points["extra_json"].map(lambda t: json.loads(t).get("mode") if isinstance(t, str) else None)
    p = points.assign(mode=modes).dropna(subset=["concurrency", "output_throughput", "mode"])
    if p.empty:  # pivot_table of nothing is nothing, at 7 ms a run
        return pd.DataFrame()
    return p.pivot_table(index="concurrency", columns="mode", values="output_throughput", aggfunc="mean")


def _three_curves(by_mode: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Runs measured with a plain server: on / knob off / plain tok/s and off/plain, on/plain per level."""
    rows = []
    for rid, t in by_mode.items():
        if "plain" not in t.columns:
            continue
        for c, r in t.iterrows():
            on, off, plain = (r.get(m) for m in ("on", "off", "plain"))
            rows.append({"run": f"#{rid}", "concurrency": c, "on tok/s": on, "knob off tok/s": off,
                         "plain tok/s": plain, "off / plain": off / plain if plain else None,
                         "on / plain": on / plain if plain else None})  # fmt: skip
    return pd.DataFrame(rows)


def _operating_point(
    latest: dict[str, object] | None,
    live: pd.DataFrame,
    curves: dict[str, pd.DataFrame],
    max_running: int | None,
) -> tuple[tuple[float, float, str] | None, tuple[str, str]]:
    """Where today's load sits on the speedup chart, and the verdict in words. ``live``: the measured
    bins of ``data.LiveSpeedup`` (per DP rank's batch size, so the load is read per rank too)."""
    c = data.running_per_rank(latest)
    if latest is None or c is None:
        return None, ("—", "no load reading")
    ranks = max(1, int(latest.get("dp_ranks") or 1))  # type: ignore[call-overload]
    knob = latest.get("spec_max_bs")
    knob_text = estimate.knob_label(None if knob is None else int(knob), max_running)  # type: ignore[call-overload]
    y, source, unsure = None, "", False
    if not live.empty:
        bs = list(live["batch_size"])
        y, source = estimate.interpolate(c, bs, list(live["speedup"])), "live estimate"
        with_ci = live.dropna(subset=["lo", "hi"])
        if y is not None and not with_ci.empty:
            lo = estimate.interpolate(c, list(with_ci["batch_size"]), list(with_ci["lo"]))
            hi = estimate.interpolate(c, list(with_ci["batch_size"]), list(with_ci["hi"]))
            if lo is not None and hi is not None:
                source += f", 95 % {estimate.ratio_interval_text(lo, hi)}"
                unsure = lo <= 1.0 <= hi
    if y is None:
        for label, curve in curves.items():
            if not curve.empty:
                y = estimate.interpolate(c, list(curve["concurrency"]), list(curve["speedup"]))
                if y is not None:
                    source = f"benchmark {label}"
                    break
    per = " per DP rank" if ranks > 1 else ""
    text = f"now: {c:.0f} running{per}, knob {knob_text}"
    if y is None:
        return None, ("?", f"at {c:.0f} running requests{per}: no estimate yet ({text})")
    word = "paying off" if y >= 1.0 else "costing throughput"
    # an interval that holds break-even cannot say which side the load is on: "is paying off" read as a
    # fact at 0.79-1.64 (the demo's first minutes)
    verdict = f"may be {word}: break-even lies inside its 95 % interval" if unsure else f"is {word}"
    return (c, y, text), (f"×{y:.2f}", f"at {c:.0f} running requests{per} speculation {verdict} ({source})")
