"""What the console reads from storage, shaped for its pages as pandas frames.

Reads only (the console never writes samples), and no SQL here: every query is storage's
(``spectower.storage.queries``, parameterised, one place for the console and control). Every time series is
downsampled by storage to at most ``max_points`` buckets (min / mean / max per bucket), so a page costs the
same over 15 minutes or 7 days of 1 Hz data. A database error is raised, not turned into an empty frame:
the page shows it as one line (``console.views.common.render_page``); "no rows" is an empty frame.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy.engine import make_url
from sqlmodel import SQLModel

from ..control import kept_extend, mix_levelled
from ..control.kept_extend import KeptExtendTax
from ..control.speedup import SpeedupEstimate
from ..storage import Database, models, open_database, queries, rollups

# The numeric sample columns storage keeps series (and rollups) of: one list, owned by storage.
ENGINE_COLUMNS = rollups.ENGINE.metrics
# Summed over DP ranks when a server has several; everything else is averaged.
ADDITIVE_ENGINE_COLUMNS = frozenset(
    {"num_running_reqs", "num_queue_reqs", "gen_throughput", "output_tok_s", "prefill_tok_s", "request_rate"}
)
GPU_COLUMNS = rollups.GPU.metrics
DEFAULT_AUDIT_LIMIT = 500
# The DP ranks of one server's newest sample: those that reported within this many seconds of it.
LATEST_RANKS_WINDOW_S = 5.0
# The rates an operator reads as "now" (output, prefill, requests) are their samples' rates over this many
# seconds before the newest, each weighted by the seconds it covers, not the newest sample's alone: at the
# collector's 1-s scrapes the demo's prefill rate read 0 and 3 116 tok/s a second apart, its output 870-1 250.
NOW_RATE_WINDOW_S = 10.0
NOW_RATE_COLUMNS = ("output_tok_s", "prefill_tok_s", "request_rate")


def open_store(url: str) -> Database | None:
    """The storage Database at ``url``, or None when a SQLite file does not exist yet (it is not created:
    a mistyped --db must not silently start an empty database)."""
    parsed = make_url(url)
    is_file_db = parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")
    if is_file_db and not Path(str(parsed.database)).is_file():
        return None
    return open_database(url, existing=True)  # any other file is refused, not made into a database


def _columns(model: type[SQLModel]) -> list[str]:
    return [c.key for c in model.__table__.columns]  # type: ignore[attr-defined]


def _frame(rows: Sequence[SQLModel], model: type[SQLModel]) -> pd.DataFrame:
    """Table rows as a frame with the table's columns (also when there are no rows)."""
    columns = _columns(model)
    return pd.DataFrame([[getattr(r, c) for c in columns] for r in rows], columns=columns)


# ---------------------------------------------------------------- inventory


def servers(db: Database) -> pd.DataFrame:
    return _frame(queries.servers(db), models.Server)


# ---------------------------------------------------------------- engine samples


def latest_engine(db: Database, server_id: int) -> dict[str, Any] | None:
    """The newest sample of a server, DP ranks combined (additive columns summed), or None. A rank
    counts when its newest sample is within ``LATEST_RANKS_WINDOW_S`` of the server's newest. Its rates
    (``NOW_RATE_COLUMNS``) are each rank's over the last ``NOW_RATE_WINDOW_S`` (``rate_window_s``)."""
    row = combine_ranks(_frame(queries.latest_engine_samples(db, server_id), models.EngineSample))
    if row is not None:
        _rates_over_window(db, server_id, row)
    return row


def _rates_over_window(db: Database, server_id: int, row: dict[str, Any]) -> None:
    """``row``'s rates (``NOW_RATE_COLUMNS``) as each rank's samples over the ``NOW_RATE_WINDOW_S`` before
    ``row["ts"]``, summed over the ranks that reported within ``LATEST_RANKS_WINDOW_S`` of it. A sample's
    rate covers the seconds since the rank's sample before it (the collector's ``CounterRates``), so each
    counts for the part of those seconds inside the window; a rank with no earlier sample gives its newest."""
    end = float(row["ts"])
    start = end - NOW_RATE_WINDOW_S
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for sample in queries.sample_rows(db, "engine", [server_id], start - NOW_RATE_WINDOW_S, end):
        by_rank.setdefault(int(sample["dp_rank"]), []).append(sample)
    ranks = [rows for rows in by_rank.values() if rows[-1]["ts"] >= end - LATEST_RANKS_WINDOW_S]
    for column in NOW_RATE_COLUMNS:
        values = [v for v in (_covered_mean(rows, column, start) for rows in ranks) if v is not None]
        if values:
            row[column] = float(math.fsum(values))
    row["rate_window_s"] = NOW_RATE_WINDOW_S


def _covered_mean(rows: Sequence[dict[str, Any]], column: str, start: float) -> float | None:
    """One rank's ``column`` over the seconds after ``start``, each sample weighted by the seconds it covers
    there (since the sample before it); the newest value where no sample has an earlier one; None where the
    rank's newest sample has no value (the server no longer reports it: "no data", not the seconds before)."""
    newest = rows[-1][column]
    if newest is None or not math.isfinite(newest):
        return None
    weighted = seconds = 0.0
    for before, sample in itertools.pairwise(rows):
        value = sample[column]
        if value is None or not math.isfinite(value) or sample["ts"] <= start:
            continue
        covered = sample["ts"] - max(before["ts"], start)
        weighted += value * covered
        seconds += covered
    return weighted / seconds if seconds > 0 else float(newest)


def combine_ranks(df: pd.DataFrame) -> dict[str, Any] | None:
    """``latest_engine`` of the newest sample of each DP rank (engine_sample columns), None when empty."""
    if df.empty:
        return None
    newest = df[df["ts"] >= df["ts"].max() - LATEST_RANKS_WINDOW_S]
    row: dict[str, Any] = {"ts": float(newest["ts"].max()), "dp_ranks": len(newest)}
    # each column's values as pandas holds them, missing ones dropped, summed by numpy as Series.sum and
    # Series.mean do (mean = sum / count): the same figures without 3 Series per column (25 columns)
    for col in (*ENGINE_COLUMNS, "batches_drafted", "batches_gated"):
        values = newest[col].to_numpy()
        values = values[~pd.isna(values)]
        if not len(values):
            row[col] = None
        elif col in ("batches_drafted", "batches_gated"):
            row[col] = int(values.sum())
        elif col in ADDITIVE_ENGINE_COLUMNS:
            row[col] = float(values.sum())
        else:
            row[col] = float(values.sum() / len(values))
    _weigh_accept(newest, row)
    return row


def _weigh_accept(newest: pd.DataFrame, row: dict[str, Any]) -> None:
    """Accept length and rate over DP ranks as the server's own: all tokens over all verify steps (a rank's
    steps: its output tok/s over its accept length), the rate weighted by those steps. An idle rank (no
    output) drafts nothing and leaves them as they are; a plain mean let it pull the figure toward 1. Where
    no rank has both a positive output and accept length, the plain mean stands."""
    out = newest["output_tok_s"].to_numpy(dtype=float, na_value=np.nan)
    accept = newest["spec_accept_length"].to_numpy(dtype=float, na_value=np.nan)
    usable = (out > 0) & (accept > 0)  # NaN compares False
    if not usable.any():
        return
    steps = np.where(usable, out / np.where(usable, accept, 1.0), 0.0)
    row["spec_accept_length"] = float(out[usable].sum() / steps.sum())
    rate = newest["spec_accept_rate"].to_numpy(dtype=float, na_value=np.nan)
    rated = usable & ~np.isnan(rate)
    if rated.any():
        row["spec_accept_rate"] = float((rate[rated] * steps[rated]).sum() / steps[rated].sum())


def running_per_rank(latest: dict[str, Any] | None) -> float | None:
    """The running requests of one DP rank's batch (the server's newest, summed over ranks, over its
    ranks): the batch the knob is compared with and the live speedup's bins are measured at."""
    if latest is None or latest.get("num_running_reqs") is None:
        return None
    return float(latest["num_running_reqs"]) / max(1, int(latest.get("dp_ranks") or 1))


def gated_reason(latest: dict[str, Any]) -> str | None:
    """Why speculation drafts nothing right now (accept length and rate do not apply), or None. The knob is
    compared with one DP rank's batch (``running_per_rank``): two ranks of 20 under a knob of 24 draft, where
    their summed 40 read as gated."""
    knob, running = _number(latest.get("spec_max_bs")), running_per_rank(latest)
    steps = _number(latest.get("spec_num_steps"))
    if knob is not None and knob <= 0:
        return "the knob is off (spec_max_bs = 0)"
    if knob is not None and running is not None and running > knob:
        per = " per DP rank" if int(latest.get("dp_ranks") or 1) > 1 else ""
        return f"{running:.0f} running requests{per} > knob {knob:.0f}, so batches run without drafting"
    if steps is not None and steps == 0:
        return "the engine reports 0 active draft steps"
    return None


ACCEPT_COLUMNS = ("spec_accept_length", "spec_accept_rate")


def drafted_nothing(series: pd.DataFrame, dp_ranks: int) -> pd.Series:
    """Which ``engine_series`` buckets drafted nothing in any sample: the server idle throughout (no running
    request: the gauge holds its start's 0 or the last batch's value), or gated throughout as
    ``gated_reason`` reads one sample (the knob at 0, or each DP rank's smallest batch above the knob's
    largest)."""
    if series.empty or "num_running_reqs_max" not in series.columns:
        return pd.Series(False, index=series.index)
    idle = series["num_running_reqs_max"] <= 0
    if "spec_max_bs_max" not in series.columns or "num_running_reqs_min" not in series.columns:
        return idle
    knob, smallest = series["spec_max_bs_max"], series["num_running_reqs_min"] / max(1, dp_ranks)
    return idle | (knob <= 0) | (smallest > knob)


def accept_while_drafting(series: pd.DataFrame, dp_ranks: int) -> pd.DataFrame:
    """``engine_series`` buckets with the accept columns (mean, min, max) blanked where the bucket drafted
    nothing (``drafted_nothing``): its gauge reads 1.00 and 0 while gated, which a chart drew as the draft's
    acceptance collapsing each time the load passed the knob, and 0 on an idle server from its start. A
    bucket that drafted in part of its samples keeps its value (the gauge's own mix)."""
    blank = drafted_nothing(series, dp_ranks)
    columns = [f"{c}{x}" for c in ACCEPT_COLUMNS for x in ("", "_min", "_max") if f"{c}{x}" in series]
    if not blank.any() or not columns:
        return series
    blanked = series.copy()
    blanked.loc[blank, columns] = float("nan")
    return blanked


def _number(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _series_frame(
    db: Database,
    kind: queries.SeriesKind,
    source_ids: Sequence[int],
    columns: Sequence[str],
    t0: float,
    t1: float,
    max_points: int,
    *,
    dp_rank: int | None = None,
) -> pd.DataFrame:
    """``source_id, ts, <col>, <col>_min, <col>_max``: storage.queries.series_many (raw or rollup tier,
    <= max_points buckets per source), one row per source and bucket."""
    names = ["source_id", "ts", *[f"{c}{x}" for c in columns for x in ("", "_min", "_max")]]
    got = queries.series_many(db, kind, source_ids, columns, t0, t1, max(2, max_points), dp_rank=dp_rank)
    rows: dict[tuple[int, float], dict[str, float | None]] = {}
    for (src, c), s in got.items():
        for p in s.points:
            row = rows.setdefault((src, p.ts), {"source_id": src, "ts": p.ts})
            row[c], row[f"{c}_min"], row[f"{c}_max"] = p.mean, p.min, p.max
    return pd.DataFrame([rows[k] for k in sorted(rows)], columns=names)


def to_ms(seconds: Any) -> float | None:
    """A stored latency (seconds) in milliseconds; None where missing."""
    return None if seconds is None or pd.isna(seconds) else float(seconds) * 1000.0


def in_ms(series: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``ts`` and each seconds column of ``series`` (``<col>_s`` with its ``_min`` and ``_max``, as
    ``engine_series`` gives them) in milliseconds, named ``<col>_ms``: a latency chart's axis."""
    out = series[["ts"]].copy()
    for col in columns:
        for x in ("", "_min", "_max"):
            if f"{col}{x}" in series:
                out[f"{col.removesuffix('_s')}_ms{x}"] = series[f"{col}{x}"] * 1000.0
    return out


def engine_series(
    db: Database,
    server_id: int,
    t0: float,
    t1: float,
    columns: Sequence[str],
    max_points: int,
) -> pd.DataFrame:
    """Bucketed engine samples: ``ts`` plus ``<col>`` (mean), ``<col>_min``, ``<col>_max`` per column,
    at most ``max_points`` rows (storage picks raw samples or the 1-minute / 1-hour rollups)."""
    cols = [c for c in columns if c in ENGINE_COLUMNS]
    ranks = _dp_ranks(db, server_id, t0, t1)
    if len(ranks) <= 1:
        return _series_frame(db, "engine", [server_id], cols, t0, t1, max_points).drop(columns="source_id")
    # Several DP ranks: each reports its own batch, so a server's tok/s or running requests is the sum
    # over ranks (pooling their samples would give the mean, 1/dp of it); the rest is averaged.
    # Summed min / max make a band that holds the sum (sum of the ranks' minima <= min of the sum).
    frames = [_series_frame(db, "engine", [server_id], cols, t0, t1, max_points, dp_rank=r) for r in ranks]
    stacked = pd.concat(frames, ignore_index=True).drop(columns="source_id")
    how = {
        f"{c}{x}": ("sum" if c in ADDITIVE_ENGINE_COLUMNS else "mean")
        for c in cols
        for x in ("", "_min", "_max")
    }
    return stacked.groupby("ts", as_index=False).agg(how) if how else stacked[["ts"]].drop_duplicates()


def _dp_ranks(db: Database, server_id: int, t0: float, t1: float) -> list[int]:
    """The DP ranks that reported in [t0, t1] (the newest hour of it: ranks are fixed per launch)."""
    return queries.dp_ranks(db, server_id, max(t0, t1 - 3600.0), t1)


PAUSE_COLUMNS = ["ts", "seconds", "kind", "process", "detail"]


def server_pauses(
    db: Database, server_id: int, t0: float, t1: float, min_seconds: float = 0.0
) -> pd.DataFrame:
    """The server's stored pauses (scheduler stalls, long collections, the launcher's held Python) that ended
    in [t0, t1] and lasted ``min_seconds`` or more: ``PAUSE_COLUMNS``, oldest first."""
    rows = queries.server_pauses(db, server_id, t0, t1, min_seconds=min_seconds)
    return pd.DataFrame([[getattr(r, c) for c in PAUSE_COLUMNS] for r in rows], columns=PAUSE_COLUMNS)


LIVE_TABLE_COLUMNS = (
    "batch_size", "speedup", "lo", "hi", "drafted_tok_s", "gated_tok_s", "drafted_steps", "gated_steps",
    "ran_mostly",
)  # fmt: skip


@dataclass(frozen=True)
class LiveSpeedup:
    """The live speedup of one server over one window: ``control.speedup.estimate`` over the engine's
    decode counters the collector stored (the one estimator the policy and ``control get`` use too)."""

    estimate: SpeedupEstimate
    has_counters: bool  # False: the server never published counters (an older plugin, or none)
    t0: float
    t1: float
    # the kept extend's tax the gated side of the bins that ran mostly drafted was corrected by, and how it is
    # known (``kept_extend.or_assumed``); what the stored extend rows measured (None: nothing); those bins
    kept_extend: str = ""
    tax_measured: KeptExtendTax | None = None
    corrected_bins: tuple[int, ...] = ()

    @functools.cached_property
    def table(self) -> pd.DataFrame:
        """Per batch-size bin: ``batch_size, speedup, lo, hi, drafted_tok_s, gated_tok_s, drafted_steps,
        gated_steps, ran_mostly`` (speedup None where a bin saw only one mode; lo/hi None until it has 2
        intervals; ran_mostly the mode its batches mostly ran: ``BinEstimate.ran_mostly``). Built once
        (a page reads it and ``measured`` several times a refresh); read it, never change it."""
        rows = [[getattr(b, c) for c in LIVE_TABLE_COLUMNS] for b in self.estimate.bins]
        return pd.DataFrame(rows, columns=list(LIVE_TABLE_COLUMNS)).astype(
            {c: float for c in ("speedup", "lo", "hi", "drafted_tok_s", "gated_tok_s")}
        )

    @property
    def measured(self) -> pd.DataFrame:
        """The bins measured in both modes (the curve)."""
        return self.table.dropna(subset=["speedup"])


def live_speedup(db: Database, server_id: int, t0: float, t1: float) -> LiveSpeedup:
    """The live estimate every page shows for ``server_id`` over [t0, t1]: the stored counter intervals
    (raw for short windows, rollups for long ones: storage.queries.counter_samples, the intervals of
    counter_intervals grouped per bin) through ``control.speedup.estimate_per_bin``, the gated side of the
    bins that ran mostly drafted corrected for the kept extend as learn corrects it (the tax the stored
    extend rows measure, else 7 %: ``control.kept_extend.corrected_estimate``), each bin's minority mode
    levelled as learn levels its explored cells: a gated bin's explored drafting for its requests' mix (plugin
    0.4.15 on), then for the prefills in its steps (plugin 0.4.14 on)."""
    samples = queries.counter_samples(db, server_id, t0, t1)
    has = samples.intervals > 0 or queries.has_counters(db, server_id)
    measured = kept_extend.from_totals(queries.extend_totals(db, server_id, t0, t1))
    tax, text = kept_extend.or_assumed(measured)
    mix = (None if samples.mix_sums is None
           else mix_levelled.window_of(samples.mix_sums, samples.mix_intervals or ()))  # fmt: skip
    est, corrected = kept_extend.corrected_estimate(
        samples.per_bin, samples.intervals, tax, samples.prefilled, samples.slots, mix
    )
    return LiveSpeedup(est, has, t0, t1, text, measured, corrected)


# ---------------------------------------------------------------- GPUs


def latest_gpu(db: Database) -> pd.DataFrame:
    """The newest sample of every GPU joined with its inventory row (one row per GPU; a GPU without a
    sample yet has empty sample columns)."""
    sample_cols = [c for c in _columns(models.GpuSample) if c != "gpu_id"]
    inventory = ["gpu_id", "host", "gpu_index", "name", "source", "uuid", "first_seen"]
    rows = [
        [gpu.id, gpu.host, gpu.index, gpu.name, gpu.source, gpu.uuid, gpu.first_seen]
        + [None if sample is None else getattr(sample, c) for c in sample_cols]
        for gpu, sample in queries.latest_gpus(db)
    ]
    return pd.DataFrame(rows, columns=inventory + sample_cols)


def gpu_series(
    db: Database,
    gpu_ids: Sequence[int],
    t0: float,
    t1: float,
    columns: Sequence[str],
    max_points: int,
) -> pd.DataFrame:
    """Bucketed GPU samples per GPU: ``gpu_id, ts, <col>, <col>_min, <col>_max`` (<= max_points per GPU)."""
    cols = [c for c in columns if c in GPU_COLUMNS]
    if not gpu_ids or not cols:
        return pd.DataFrame(columns=["gpu_id", "ts", *cols])
    frame = _series_frame(db, "gpu", [int(g) for g in gpu_ids], cols, t0, t1, max_points)
    return frame.rename(columns={"source_id": "gpu_id"})


def gpu_processes(db: Database, gpu_ids: Sequence[int], since: float) -> pd.DataFrame:
    """The newest per-process memory rows of each GPU (empty when the source has none)."""
    cols = ["gpu_id", "ts", "pid", "process_name", "used_memory_mib"]
    rows = queries.latest_gpu_processes(db, gpu_ids, since)
    return pd.DataFrame([[getattr(r, c) for c in cols] for r in rows], columns=cols)


# ---------------------------------------------------------------- control


def control_events(
    db: Database,
    server_url: str | None = None,
    t0: float | None = None,
    actor_prefix: str | None = None,
    limit: int = DEFAULT_AUDIT_LIMIT,
) -> pd.DataFrame:
    rows = queries.control_events(
        db, server_url=server_url or None, start=t0, actor_prefix=actor_prefix or None, limit=int(limit)
    )
    return _frame(rows, models.ControlEvent)


def policy_said(db: Database, server_url: str) -> dict[str, Any] | None:
    """What the policy on ``server_url`` said last (``mode``, ``said``, ``said_ts``: since when, and
    ``updated_ts``: its runner's last step), or None where no policy has said anything there."""
    row = queries.policy_state(db, server_url)
    if row is None or not row.said:
        return None
    return {"mode": row.mode, "said": row.said, "said_ts": row.said_ts, "updated_ts": row.updated_ts}


def last_setter(db: Database, server_url: str) -> dict[str, Any] | None:
    """The newest confirmed ``set`` on ``server_url``, or None."""
    rows = queries.control_events(db, server_url=server_url, action="set", confirmed=True, limit=1)
    return rows[0].model_dump() if rows else None


# ---------------------------------------------------------------- benchmarks


def bench_runs(db: Database) -> pd.DataFrame:
    """Every run, newest first, with ``points``: how many points it has."""
    counts = queries.bench_point_counts(db)
    runs = queries.bench_runs(db)
    return _frame(runs, models.BenchRun).assign(points=[counts.get(int(r.id or 0), 0) for r in runs])


def bench_points(db: Database, run_ids: Sequence[int]) -> pd.DataFrame:
    return _frame(queries.bench_points_many(db, run_ids), models.BenchPoint)


# ---------------------------------------------------------------- fleets

FLEET_SERIES = ("output_tok_s", "num_running_reqs", "spec_max_bs")


def fleet_totals(
    db: Database, server_ids: Sequence[int], t0: float, t1: float, max_points: int
) -> pd.DataFrame:
    """A fleet over time: ``ts, output_tok_s`` (summed over the replicas that reported in the bucket, and
    over each one's DP ranks), ``replicas_drafting`` (knob above 0 and one DP rank's running batch, the
    replica's over its ranks, within it: the replica drafts) and ``replicas_reporting``, in at most
    ``max_points`` buckets common to every replica."""
    columns = ["ts", "output_tok_s", "replicas_drafting", "replicas_reporting"]
    step = max((t1 - t0) / max(1, max_points), 1e-9)
    per_replica = []
    for server_id in server_ids:
        frame = engine_series(db, int(server_id), t0, t1, FLEET_SERIES, max_points)
        if frame.empty:
            continue
        bucket = ((frame["ts"] - t0) // step).astype(int)
        means = frame.assign(bucket=bucket).groupby("bucket")[list(FLEET_SERIES)].mean()
        # the knob gates each DP rank's own batch; engine_series sums the ranks' running requests
        ranks = max(1, len(_dp_ranks(db, int(server_id), t0, t1)))
        knob, running = means["spec_max_bs"], means["num_running_reqs"] / ranks
        per_replica.append(means.assign(drafting=((knob > 0) & (running <= knob)).astype(int), reporting=1))
    if not per_replica:
        return pd.DataFrame(columns=columns)
    summed = pd.concat(per_replica).groupby(level=0).agg(
        output_tok_s=("output_tok_s", "sum"), replicas_drafting=("drafting", "sum"),
        replicas_reporting=("reporting", "sum"),
    )  # fmt: skip
    summed["ts"] = t0 + (summed.index.to_numpy() + 0.5) * step
    return summed.reset_index(drop=True)[columns]


def speedup_at(live: LiveSpeedup, running: float | None) -> dict[str, Any] | None:
    """The live estimate's bin nearest the current running batch (``batch_size, speedup, lo, hi``), or None
    when nothing is measured in both modes yet (or the load is unknown)."""
    measured = live.measured
    if running is None or measured.empty:
        return None
    nearest = measured.iloc[int((measured["batch_size"] - running).abs().to_numpy().argmin())]
    lo, hi = nearest["lo"], nearest["hi"]
    return {"batch_size": int(nearest["batch_size"]), "speedup": float(nearest["speedup"]),
            "lo": None if pd.isna(lo) else float(lo), "hi": None if pd.isna(hi) else float(hi)}  # fmt: skip
