"""The bookkeeping the collector, the policy and the console write and read besides samples: which servers and
GPUs are known, the audit of every knob change (control events), the policy's saved state, benchmark runs,
collection gaps and the collector's health. Read through ``storage.queries``, the one module callers use.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, insert, or_, update
from sqlalchemy import select as sa_select
from sqlmodel import col, select

from . import dialect, models

if TYPE_CHECKING:
    from .database import Database

DEFAULT_EVENT_LIMIT = 500


# --- inventories -------------------------------------------------------------------------------------
def servers(db: Database) -> list[models.Server]:
    with db.session() as s:
        return list(s.exec(select(models.Server).order_by(models.Server.url)))


def server_by_url(db: Database, url: str) -> models.Server:
    with db.session() as s:
        row = s.exec(select(models.Server).where(models.Server.url == url)).first()
    if row is None:
        raise LookupError(f"server: no server {url!r} in the database")
    return row


def gpus(db: Database, host: str | None = None) -> list[models.Gpu]:
    stmt = select(models.Gpu).order_by(col(models.Gpu.host), col(models.Gpu.index))
    if host is not None:
        stmt = stmt.where(models.Gpu.host == host)
    with db.session() as s:
        return list(s.exec(stmt))


def server_info_snapshots(db: Database, server_id: int, limit: int = 20) -> list[models.ServerInfoSnapshot]:
    snap = models.ServerInfoSnapshot
    with db.session() as s:
        stmt = select(snap).where(snap.server_id == server_id).order_by(col(snap.ts).desc()).limit(limit)
        return list(s.exec(stmt))


# --- audit ---------------------------------------------------------------------------------------------
def control_events(
    db: Database,
    *,
    server_url: str | None = None,
    actor: str | None = None,
    start: float | None = None,
    end: float | None = None,
    actor_prefix: str | None = None,
    action: str | None = None,
    confirmed: bool | None = None,
    request_id: int | None = None,
    limit: int = DEFAULT_EVENT_LIMIT,
) -> list[models.ControlEvent]:
    """Newest first. ``actor`` matches exactly or as a prefix before ':' ("policy" finds "policy:auto");
    ``actor_prefix`` is a plain string prefix; ``action`` is exact (set, pause, release, ...);
    ``confirmed``: only events the server confirmed (True) or did not (False); ``request_id``: the rows of
    that knob request."""
    ce = models.ControlEvent
    stmt = select(ce)
    if server_url is not None:
        stmt = stmt.where(ce.server_url == server_url)
    if actor is not None:
        stmt = stmt.where(or_(col(ce.actor) == actor, col(ce.actor).startswith(actor + ":", autoescape=True)))
    if actor_prefix is not None:
        stmt = stmt.where(col(ce.actor).startswith(actor_prefix, autoescape=True))
    if action is not None:
        stmt = stmt.where(ce.action == action)
    if confirmed is not None:
        stmt = stmt.where(ce.confirmed == confirmed)
    if request_id is not None:
        stmt = stmt.where(ce.request_id == request_id)
    if start is not None:
        stmt = stmt.where(ce.ts >= start)
    if end is not None:
        stmt = stmt.where(ce.ts <= end)
    stmt = stmt.order_by(col(ce.ts).desc(), col(ce.id).desc()).limit(limit)
    with db.session() as s:
        return list(s.exec(stmt))


def count_control_events(db: Database, *, server_url: str, actor: str, action: str, after: float) -> int:
    """How many audit rows of exactly this server, actor and action are newer than ``after`` (the policy
    runner's changes-per-hour rail)."""
    ce = models.ControlEvent
    stmt = (
        select(func.count())
        .select_from(ce)
        .where(ce.server_url == server_url, ce.actor == actor, ce.action == action, ce.ts > after)
    )
    with db.session() as s:
        return int(s.exec(stmt).one())


def add_control_event(db: Database, event: models.ControlEvent) -> models.ControlEvent:
    """Write one audit row in its own short transaction, now. Never through the ``BatchWriter``'s queue:
    an operator's set is on record before the command returns."""
    with db.session(write=True) as s:
        s.add(event)
    return event


# --- the policy's persisted state --------------------------------------------------------------------
def policy_state(db: Database, server_url: str) -> models.PolicyState | None:
    with db.session() as s:
        return s.get(models.PolicyState, server_url)


def save_policy_state(db: Database, server_url: str, *, mode: str, state_json: str, ts: float) -> None:
    """Create or replace what the policy for ``server_url`` learned (``paused_until`` is left as it is)."""
    with db.session(write=True) as s:
        row = s.get(models.PolicyState, server_url)
        if row is None:
            row = models.PolicyState(server_url=server_url, updated_ts=ts, mode=mode, state_json=state_json)
        else:
            row.updated_ts, row.mode, row.state_json = ts, mode, state_json
        s.add(row)


def save_policy_said(db: Database, server_url: str, *, said: str, ts: float) -> None:
    """What the policy for ``server_url`` says now (one line), since ``ts``; nothing where no policy state
    was saved yet (the runner saves it before it says anything)."""
    with db.session(write=True) as s:
        row = s.get(models.PolicyState, server_url)
        if row is not None:
            row.said, row.said_ts = said, ts
            s.add(row)


# --- benchmarks ----------------------------------------------------------------------------------------
def bench_runs(db: Database, limit: int | None = None) -> list[models.BenchRun]:
    """Newest first (all of them unless ``limit``)."""
    br = models.BenchRun
    with db.session() as s:
        return list(s.exec(select(br).order_by(col(br.created_at).desc(), col(br.id).desc()).limit(limit)))


def bench_point_counts(db: Database) -> dict[int, int]:
    """run id -> how many points it has (runs without points are absent)."""
    bp = models.BenchPoint
    stmt = sa_select(col(bp.run_id), func.count()).group_by(col(bp.run_id))
    with db.engine.connect() as conn:
        return {int(run_id): int(n) for run_id, n in conn.execute(stmt)}


def bench_run(db: Database, run_id: int) -> models.BenchRun:
    with db.session() as s:
        run = s.get(models.BenchRun, run_id)
    if run is None:
        raise LookupError(f"run id: no benchmark run {run_id} in the database")
    return run


def bench_points(db: Database, run_id: int) -> list[models.BenchPoint]:
    """Points of a run in the order they were stored (import order = file order)."""
    bp = models.BenchPoint
    with db.session() as s:
        return list(s.exec(select(bp).where(bp.run_id == run_id).order_by(col(bp.id))))


def bench_points_many(db: Database, run_ids: Sequence[int]) -> list[models.BenchPoint]:
    """Points of several runs, by run, concurrency, then spec off before on (a curve's order)."""
    ids = sorted({int(i) for i in run_ids})
    if not ids:
        return []
    bp = models.BenchPoint
    stmt = (
        select(bp)
        .where(col(bp.run_id).in_(ids))
        .order_by(col(bp.run_id), col(bp.concurrency), col(bp.spec_on), col(bp.id))
    )
    with db.session() as s:
        return list(s.exec(stmt))


# --- collection health ---------------------------------------------------------------------------------
def gaps(
    db: Database,
    *,
    source: str | None = None,
    target: str | None = None,
    start: float | None = None,
    end: float | None = None,
    open_only: bool = False,
) -> list[models.CollectionGap]:
    """Gaps overlapping [start, end], oldest first."""
    g = models.CollectionGap
    stmt = select(g)
    if source is not None:
        stmt = stmt.where(g.source == source)
    if target is not None:
        stmt = stmt.where(g.target == target)
    if end is not None:
        stmt = stmt.where(g.start_ts <= end)
    if start is not None:
        stmt = stmt.where(or_(col(g.end_ts).is_(None), col(g.end_ts) >= start))
    if open_only:
        stmt = stmt.where(col(g.end_ts).is_(None))
    with db.session() as s:
        return list(s.exec(stmt.order_by(col(g.start_ts))))


def open_gap(db: Database, source: str, target: str, start_ts: float, reason: str) -> int:
    """Record the start of an outage (or return the id of the one already open for source+target)."""
    g = models.CollectionGap
    with db.session(write=True) as s:
        existing = s.exec(
            select(g).where(g.source == source, g.target == target, col(g.end_ts).is_(None))
        ).first()
        if existing is not None and existing.id is not None:
            return existing.id
        gap = g(source=source, target=target, start_ts=start_ts, reason=reason)
        s.add(gap)
        s.flush()
        return int(gap.id)  # type: ignore[arg-type]


def close_stale_gaps(db: Database, source: str, target: str, end_ts: float, note: str) -> int:
    """Close the gaps of source+target that a collector which stopped (crashed) left open, at ``end_ts``
    (the restart: nothing was collected in between either), so the next outage is a gap of its own.
    Returns how many were closed."""
    g = models.CollectionGap
    with db.session(write=True) as s:
        stale = list(s.exec(select(g).where(g.source == source, g.target == target, col(g.end_ts).is_(None))))
        for gap in stale:
            gap.end_ts = max(end_ts, gap.start_ts)
            gap.reason = f"{gap.reason} [{note}]"
            s.add(gap)
        return len(stale)


def add_gap(db: Database, source: str, target: str, start_ts: float, end_ts: float, reason: str) -> int:
    """Record an outage already over (a collector's own downtime, found at its restart)."""
    with db.session(write=True) as s:
        gap = models.CollectionGap(
            source=source, target=target, start_ts=start_ts, end_ts=end_ts, reason=reason
        )
        s.add(gap)
        s.flush()
        return int(gap.id)  # type: ignore[arg-type]


# The collector sources whose samples name them (an SGLang server's URL, an NVML host's GPUs).
SOURCES_WITH_OWN_SAMPLES = ("sglang", "nvml")


def last_collected_ts(db: Database, source: str, target: str) -> float | None:
    """When ``source`` ``target`` was last collected, as the database holds it: its newest sample (an SGLang
    server's engine samples; the GPUs of an NVML host) or, for sources whose samples do not name them
    (a dcgm-exporter URL, Prometheus), its last success in ``collector_health`` (refreshed every few
    seconds, so up to that much early). None: never collected here."""
    h = models.CollectorHealth
    with db.session() as s:
        health = s.exec(select(h.last_success_ts).where(h.source == source, h.target == target)).first()
        sample: float | None = None
        if source == "sglang":
            e, srv = models.EngineSample, models.Server
            sample = s.exec(
                select(func.max(e.ts)).join(srv, col(srv.id) == col(e.server_id)).where(srv.url == target)
            ).one()
        elif source == "nvml":
            g, gpu = models.GpuSample, models.Gpu
            sample = s.exec(
                select(func.max(g.ts)).join(gpu, col(gpu.id) == col(g.gpu_id)).where(gpu.host == target)
            ).one()
    known = [t for t in (health, sample) if t is not None]
    return max(known) if known else None


def close_gap(db: Database, gap_id: int, end_ts: float) -> None:
    with db.session(write=True) as s:
        gap = s.get(models.CollectionGap, gap_id)
        if gap is None:
            raise LookupError(f"gap id: no collection gap {gap_id}")
        gap.end_ts = end_ts
        s.add(gap)


def upsert_collector_health(
    db: Database,
    source: str,
    target: str,
    *,
    ok: bool,
    ts: float | None = None,
    error: str | None = None,
    lag_s: float | None = None,
) -> None:
    """One collection attempt's outcome: success refreshes last_success_ts, failure counts an error.
    Plain statements, no ORM object: the collector writes one every few seconds per source (16 servers:
    several a second), and a session's select-load-flush cost ~3x the CPU."""
    now = time.time() if ts is None else ts
    params = {"k_source": source, "k_target": target, "v_ts": now, "v_error": error, "v_lag": lag_s}
    with dialect.write_transaction(db.engine) as conn:
        changed = conn.execute(_health_update(ok, lag_s is not None), params)
        if changed.rowcount == 0:
            conn.execute(_health_insert(ok, lag_s is not None), params)


def _health_table() -> Any:
    return models.CollectorHealth.__table__  # type: ignore[attr-defined]


def _health_values(ok: bool, lag: bool) -> dict[str, Any]:
    h = _health_table()
    values: dict[str, Any] = {"updated_ts": bindparam("v_ts")}
    if ok:
        values["last_success_ts"] = bindparam("v_ts")
    else:
        values["last_error"] = bindparam("v_error")
    if lag:
        values["lag_s"] = bindparam("v_lag")
    return values if ok else {**values, "errors_total": func.coalesce(h.c.errors_total, 0) + 1}


# The health statements, built once per kind of outcome (ok or not, with a lag or not) with the values as
# parameters: SQLAlchemy then finds their compiled form by identity, not by building and hashing a new
# statement at each of the several writes a second of 16 servers.
@functools.cache
def _health_update(ok: bool, lag: bool) -> Any:
    h = _health_table()
    where = (h.c.source == bindparam("k_source"), h.c.target == bindparam("k_target"))
    return update(h).where(*where).values(_health_values(ok, lag))


@functools.cache
def _health_insert(ok: bool, lag: bool) -> Any:
    values = {**_health_values(ok, lag), "source": bindparam("k_source"), "target": bindparam("k_target")}
    values["errors_total"] = 0 if ok else 1
    return insert(_health_table()).values(values)


def collector_health(db: Database) -> list[models.CollectorHealth]:
    h = models.CollectorHealth
    with db.session() as s:
        return list(s.exec(select(h).order_by(h.source, h.target)))
