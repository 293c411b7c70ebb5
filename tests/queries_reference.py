"""The reference for storage's reads as they were before the console's refresh got faster: the decode
counters one interval at a time through ``plugin.engine_counters.rates`` (the one definition of a rate),
the newest engine samples as ORM models. Used by tests only, to show the new reads return exactly the same."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from spectower.plugin.engine_counters import MODES, rates, with_outside
from spectower.storage import Database, models, rollups
from spectower.storage.counter_modes import OUTSIDE_MODES
from spectower.storage.queries_counters import _tier
from sqlalchemy import and_
from sqlalchemy import select as sa_select
from sqlmodel import col, select

Cells = dict[float, dict[tuple[int, str], list[float]]]


def add_row(cells: Cells, ts: float, b: int, mode: str, values: Sequence[Any]) -> None:
    cell = cells.setdefault(float(ts), {}).setdefault((int(b), str(mode)), [0.0, 0.0, 0.0])
    for k, v in enumerate(values):
        cell[k] += float(v or 0)


def interval(ts: float, res_s: int, cells: dict[tuple[int, str], list[float]]) -> dict[str, Any]:
    """Stored (bin, mode) -> [steps, tokens, time_s] of one interval through ``rates(None, totals)``, each
    mode's seconds outside its steps (the ``OUTSIDE_MODES`` rows' time) folded in by ``with_outside``."""
    bins = sorted({b for b, _ in cells})
    totals: dict[str, Any] = {"bins": bins, "outside": {}}
    for mode in MODES:
        rows = [cells.get((b, mode), (0.0, 0.0, 0.0)) for b in bins]
        totals[mode] = {
            "steps": [int(steps) for steps, _, _ in rows],
            "tokens": [int(tokens) for _, tokens, _ in rows],
            "time_s": [seconds for _, _, seconds in rows],
        }
        totals["outside"][mode] = [cells.get((b, OUTSIDE_MODES[mode]), (0.0, 0.0, 0.0))[2] for b in bins]
    return {"ts": ts, "res_s": res_s, **with_outside(rates(None, totals))}


def intervals_of(cells: Cells, res_s: int) -> list[dict[str, Any]]:
    return [interval(ts, res_s, cells[ts]) for ts in sorted(cells)]


def counter_intervals(
    db: Database, server_id: int, start: float, end: float, max_intervals: int = 2000
) -> list[dict[str, Any]]:
    """storage.queries.counter_intervals as it was (same tier choice), row by row in Python."""
    tier = _tier(db, start, end, max_intervals)
    sample, roll = rollups.COUNTERS.sample, rollups.COUNTERS.rollup
    cells: Cells = {}
    raw_cols = (sample.c.batch_size, sample.c.mode, sample.c.steps, sample.c.tokens, sample.c.time_s)
    with db.engine.connect() as conn:
        if tier == 0:
            stmt = sa_select(sample.c.ts, *raw_cols).where(
                and_(sample.c.server_id == server_id, sample.c.ts >= start, sample.c.ts <= end)
            )
            for ts, b, mode, *values in conn.execute(stmt):
                add_row(cells, ts, b, mode, values)
        else:
            lo_ts = math.floor(start / tier) * tier
            stmt = sa_select(
                roll.c.bucket_ts, roll.c.batch_size, roll.c.mode,
                roll.c.steps_sum, roll.c.tokens_sum, roll.c.time_s_sum,
            ).where(
                and_(roll.c.res_s == tier, roll.c.server_id == server_id,
                     roll.c.bucket_ts >= lo_ts, roll.c.bucket_ts <= end)
            )  # fmt: skip
            for bucket_ts, b, mode, *values in conn.execute(stmt):
                add_row(cells, bucket_ts, b, mode, values)
            tail = sa_select(sample.c.ts, *raw_cols).where(
                and_(sample.c.id > rollups.watermark(conn, rollups.COUNTERS),
                     sample.c.server_id == server_id, sample.c.ts >= lo_ts, sample.c.ts <= end)
            )  # fmt: skip
            for ts, b, mode, *values in conn.execute(tail):
                add_row(cells, math.floor(ts / tier) * tier, b, mode, values)
    return intervals_of(cells, tier)


def latest_engine_samples(db: Database, server_id: int | None = None) -> list[models.EngineSample]:
    """storage.queries.latest_engine_samples as it was: ORM models of the newest 256 rows of each server."""
    es = models.EngineSample
    out: list[models.EngineSample] = []
    with db.session() as s:
        ids = [server_id] if server_id is not None else list(s.exec(select(models.Server.id)))
        for sid in ids:
            rows = s.exec(select(es).where(es.server_id == sid).order_by(col(es.ts).desc()).limit(256))
            seen: set[int] = set()
            for row in rows:
                if row.dp_rank not in seen:
                    seen.add(row.dp_rank)
                    out.append(row)
    return sorted(out, key=lambda r: (r.server_id, r.dp_rank))
