"""Sealed samples (storage/sealed.py): the writer's maintenance moves old head rows into chunks, and every
reader (series, latest values, the policy's recent samples, DP ranks, exports) gives the same answers
before and after, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from spectower.storage import SCHEMA_VERSION, Database, open_database, queries, sealed
from spectower.storage.export import export_samples
from spectower.storage.models import EngineSample, GpuSample
from sqlalchemy import text

T0 = 1_764_000_000.0
SECONDS = 1500  # 25 minutes at 1 Hz: enough for a few chunks, with the head's 2 minutes left over


def _engine(sid: int, rank: int, i: int) -> dict[str, Any]:
    return {
        "server_id": sid, "dp_rank": rank, "ts": T0 + i + 0.0007 * (i % 13),
        "num_running_reqs": float(i % 37), "gen_throughput": None if i % 11 == 0 else 900.5 + i % 7,
        "spec_accept_length": 2.0 + (i % 5) / 3, "spec_max_bs": 30 if i < 700 else None,
        "batches_drafted": 10 * i + rank, "token_usage": -0.0 if i % 2 else math.inf,
    }  # fmt: skip


def _gpu(gid: int, i: int) -> dict[str, Any]:
    return {
        "gpu_id": gid, "ts": T0 + i, "lost": i % 400 == 7, "gpu_util_pct": float((i * 7) % 101),
        "power_w": 300.0 + (i % 300) / 8, "memory_total_mib": 143_771.0, "throttle_reasons": (i // 100) % 4,
        "temperature_c": None if 200 <= i < 260 else 60.0 + i % 20,
    }  # fmt: skip


def _fill(db: Database) -> tuple[int, list[int]]:
    sid = db.server_id("http://127.0.0.1:30000", ts=T0)
    gids = [db.gpu_id("h", k, f"GPU-{k}", ts=T0) for k in range(2)]
    w = db.writer(maintenance=None, batch_size=5000)
    for i in range(SECONDS):
        w.put(*[EngineSample(**_engine(sid, r, i)) for r in (0, 1)], *[GpuSample(**_gpu(g, i)) for g in gids])
    assert w.flush(60)
    return sid, gids


@pytest.fixture(scope="module")
def filled_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, list[int]]:
    """A SQLite file ``_fill`` wrote once for the module (closed: nothing left in its WAL), with its
    server id and GPU ids; ``_filled`` copies it for a test to change (filling it took a second a test)."""
    path = tmp_path_factory.mktemp("sealed") / "filled.db"
    db = open_database(path)
    try:
        sid, gids = _fill(db)
    finally:
        db.close()
    return path, sid, gids


def _filled(template: tuple[Path, int, list[int]], path: Path) -> tuple[Database, int, list[int]]:
    """A copy of the module's filled file at ``path``, opened."""
    source, sid, gids = template
    shutil.copyfile(source, path)
    return open_database(path), sid, gids


def _everything(db: Database, sid: int, gids: list[int]) -> dict[str, Any]:
    """What the readers answer, to compare before and after sealing (ids aside: sealed rows have none)."""
    out: dict[str, Any] = {}
    for kind, ids in (("engine", [sid]), ("gpu", gids)):
        out[f"{kind} rows"] = [
            {k: v for k, v in r.items() if k != "id"} for r in queries.sample_rows(db, kind, ids)
        ]
    for metric in ("num_running_reqs", "gen_throughput", "spec_max_bs"):
        for rank in (None, 1):
            s = queries.series(db, "engine", sid, metric, T0 + 30.5, T0 + 1000, 400, dp_rank=rank)
            out[f"engine {metric} {rank}"] = (s.tier, s.rows_read, s.points)
    for metric in ("gpu_util_pct", "temperature_c", "memory_total_mib"):
        got = queries.series_many(db, "gpu", gids, [metric], T0 - 5, T0 + SECONDS, 300)
        out[f"gpu {metric}"] = {k: (v.tier, v.rows_read, v.points) for k, v in got.items()}
    out["latest"] = [(r.dp_rank, r.ts, r.num_running_reqs) for r in queries.latest_engine_samples(db)]
    out["latest gpus"] = [(g.id, s and s.ts) for g, s in queries.latest_gpus(db)]
    recent = queries.recent_engine_samples(db, ["http://127.0.0.1:30000"], since=T0 + 100)
    out["recent"] = [(r.ts, r.dp_rank, r.batches_drafted, r.spec_max_bs) for r in recent.rows]
    out["ranks"] = queries.dp_ranks(db, sid, T0, T0 + 50)
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal, a bucket's mean to the last few bits (numpy and the database sum in different orders)."""
    if isinstance(a, queries.Bucket) and isinstance(b, queries.Bucket):
        means = a.mean == b.mean or math.isclose(a.mean or 0, b.mean or 0, rel_tol=1e-12)
        return (a.ts, a.min, a.max, a.n) == (b.ts, b.min, b.max, b.n) and means
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def test_sealing_changes_no_answer(db_url: str, filled_file: tuple[Path, int, list[int]]) -> None:
    if db_url.startswith("sqlite:///"):  # the module's filled file, copied; PostgreSQL's is filled here
        db, sid, gids = _filled(filled_file, Path(db_url.removeprefix("sqlite:///")))
    else:
        db = open_database(db_url)
        sid, gids = _fill(db)
    try:
        assert db.update_rollups() == 4 * SECONDS
        before = _everything(db, sid, gids)
        sealed_rows = db.seal()
        with db.engine.connect() as conn:
            head = conn.execute(text("SELECT count(*), min(ts) FROM gpu_sample")).one()
            chunks = conn.execute(text("SELECT count(*), sum(n) FROM gpu_chunk")).one()
            engine_chunks = conn.execute(text("SELECT count(*) FROM engine_chunk")).scalar_one()
        # everything older than each series' newest sample less the head's 2 minutes is sealed
        keep = int(sealed.DEFAULT_KEEP_S)
        assert head == (2 * (keep + 1), T0 + SECONDS - 1 - keep)
        assert chunks[1] == 2 * (SECONDS - keep - 1) and chunks[0] >= 2 and engine_chunks >= 2
        assert sealed_rows == 2 * (SECONDS - keep - 1) + 2 * (SECONDS - keep)  # engine's ts jitter: one more
        after = _everything(db, sid, gids)
        assert after.keys() == before.keys()
        for key in before:
            assert _same(after[key], before[key]), key
        assert len(after["engine rows"]) == 2 * SECONDS and after["recent"][0][0] >= T0 + 100
        assert db.seal() == 0  # nothing more is due
        assert db.integrity_check() == "ok"
    finally:
        db.close()


def test_export_reads_sealed_samples(tmp_path: Path, filled_file: tuple[Path, int, list[int]]) -> None:
    db, _sid, _gids = _filled(filled_file, tmp_path / "x.db")
    try:
        db.update_rollups()
        out_before, out_after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
        assert (
            export_samples(db, "gpu", "jsonl", out_before, host="h", start=T0 + 10, end=T0 + 1400) == 2 * 1391
        )
        assert db.seal() > 0
        assert (
            export_samples(db, "gpu", "jsonl", out_after, host="h", start=T0 + 10, end=T0 + 1400) == 2 * 1391
        )

        def lines(p: Path) -> list[dict[str, Any]]:
            return [{k: v for k, v in json.loads(x).items() if k != "id"} for x in p.read_text().splitlines()]

        assert lines(out_after) == lines(out_before)
    finally:
        db.close()


def test_a_late_row_into_a_sealed_range_is_folded_with_the_rest(
    tmp_path: Path, filled_file: tuple[Path, int, list[int]]
) -> None:
    db, _sid, gids = _filled(filled_file, tmp_path / "x.db")
    try:
        db.update_rollups()
        db.seal()
        minute = math.floor((T0 + 300) / 60) * 60
        w = db.writer(maintenance=None)
        w.put(GpuSample(gpu_id=gids[0], ts=minute + 0.5, gpu_util_pct=1000.0))
        assert w.flush(30)
        db.update_rollups()
        s = queries.series(db, "gpu", gids[0], "gpu_util_pct", minute, minute + 59.9, max_points=2)
        assert s.tier == "1m"
        (bucket,) = [b for b in s.points if b.ts <= minute < b.ts + s.bucket_s]
        assert bucket.n == 61 and bucket.max == 1000.0  # the minute's 60 sealed samples and the late one
        db.seal()
        raw = queries.series(db, "gpu", gids[0], "gpu_util_pct", minute, minute + 59.9, max_points=120)
        assert raw.tier == "raw" and sum(b.n for b in raw.points) == 61
        assert db.integrity_check() == "ok"
    finally:
        db.close()


def _minute_counts(db: Database, sid: int) -> dict[float, int]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT bucket_ts, n FROM engine_rollup WHERE res_s = 60 AND server_id = :s"), {"s": sid}
        ).all()
    return {float(ts): int(n) for ts, n in rows}


def _put_seconds(db: Database, sid: int, seconds: range) -> None:
    w = db.writer(maintenance=None)
    w.put(*[EngineSample(server_id=sid, ts=T0 + i, num_running_reqs=1.0) for i in seconds])
    assert w.flush(30)


def test_one_collector_seals_another_collectors_series_mid_minute_and_no_row_is_lost(db_url: str) -> None:
    """Two collectors on one database, their transactions in the order that lost rows under load
    (tests/test_storage_faults.py's two-collector test, 2 981 of 3 000): A folds B's rows up to second 99,
    B inserts seconds 100-299, A seals B's folded rows (a chunk ending at second 99, mid-minute), B folds.
    The minute 60-119 must still count its 60 samples, not only the 20 left in the head."""
    a, b = open_database(db_url), open_database(db_url)
    try:
        sid = b.server_id("http://b")
        _put_seconds(b, sid, range(0, 100))
        assert a.update_rollups() == 100
        _put_seconds(b, sid, range(100, 300))
        assert a.seal(min_rows=1) == 100  # newest 299 less 120 s kept: the folded seconds 0-99
        assert b.update_rollups() == 200
        assert _minute_counts(b, sid) == {T0 + 60 * m: 60 for m in range(5)}
    finally:
        a.close()
        b.close()


def test_a_late_row_unseals_only_the_chunks_of_its_minute_and_keeps_the_minutes_around_it(
    db_url: str,
) -> None:
    """Chunks that end mid-minute (sealed in two steps): a late row into the second chunk's last minute
    must not leave the minute the two chunks share counting only the second chunk's part of it."""
    db = open_database(db_url)
    try:
        sid = db.server_id("http://a")
        _put_seconds(db, sid, range(0, 400))
        db.update_rollups()
        assert db.seal(min_rows=1, keep_s=309.5) == 90  # seconds 0-89: a chunk ending mid-minute 60-119
        assert db.seal(min_rows=1, keep_s=219.5) == 90  # seconds 90-179
        late = T0 + 170.5
        w = db.writer(maintenance=None)
        w.put(EngineSample(server_id=sid, ts=late, num_running_reqs=1.0))
        assert w.flush(30)
        assert db.update_rollups() == 1
        assert _minute_counts(db, sid) == {T0 + 60 * m: 61 if m == 2 else 60 for m in range(7)} | {
            T0 + 360: 40
        }
        with db.engine.connect() as conn:  # only the chunk holding minute 120-179 went back to the head
            assert conn.execute(text("SELECT count(*) FROM engine_chunk")).scalar_one() == 1
        assert db.integrity_check() == "ok"
    finally:
        db.close()


def test_a_failed_seal_leaves_the_rows_where_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filled_file: tuple[Path, int, list[int]]
) -> None:
    db, _sid, _gids = _filled(filled_file, tmp_path / "x.db")
    try:
        db.update_rollups()
        written = []

        def second_fails(conn: Any, spec: Any, source: Any, rows: Any) -> None:
            if written:
                raise OSError("disk full")
            written.append(1)
            real_write(conn, spec, source, rows)

        real_write = sealed._write_chunk
        monkeypatch.setattr(sealed, "_write_chunk", second_fails)
        with pytest.raises(OSError):
            db.seal(max_rows=100)
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM gpu_chunk")).scalar_one() == 0
            assert conn.execute(text("SELECT count(*) FROM engine_chunk")).scalar_one() == 0
            assert conn.execute(text("SELECT count(*) FROM engine_sample")).scalar_one() == 2 * SECONDS
    finally:
        db.close()


def test_retention_deletes_whole_chunks(tmp_path: Path, filled_file: tuple[Path, int, list[int]]) -> None:
    db, _sid, gids = _filled(filled_file, tmp_path / "x.db")
    try:
        db.update_rollups()
        db.seal(max_rows=300)
        with db.engine.connect() as conn:
            spans = conn.execute(
                text("SELECT start_ts, end_ts FROM gpu_chunk WHERE gpu_id = :g"), {"g": gids[0]}
            ).all()
        cut = T0 + 700  # inside a chunk: that chunk stays whole
        kept = [s for s in spans if s[1] >= cut]
        deleted = db.apply_retention(raw_days=1, now=cut + 86_400)
        assert deleted["gpu_chunk"] == 2 * (len(spans) - len(kept))
        rows = list(queries.sample_rows(db, "gpu", [gids[0]]))
        assert rows[0]["ts"] == min(s[0] for s in kept) < cut
    finally:
        db.close()


def test_a_v4_database_migrates_and_every_value_reads_back(
    tmp_path: Path, filled_file: tuple[Path, int, list[int]]
) -> None:
    """A database written by schema v4 (no chunk tables): opened, migrated, sealed by the writer's
    maintenance; every value of every sample reads back as written."""
    path = tmp_path / "v4.db"
    db, sid, gids = _filled(filled_file, path)
    want = {kind: [{k: v for k, v in r.items() if k != "id"} for r in queries.sample_rows(db, kind, ids)]
            for kind, ids in (("engine", [sid]), ("gpu", gids))}  # fmt: skip
    db.close()
    con = sqlite3.connect(path)
    con.executescript(
        "DROP TABLE engine_chunk; DROP TABLE gpu_chunk; DROP TABLE server_pause; "
        "UPDATE meta SET value='4' WHERE key='schema_version';"
    )
    con.commit()
    con.close()
    db = open_database(path)
    try:
        assert db.schema_version == SCHEMA_VERSION
        db.maintain()  # what the writer runs every minute: rollups, then sealing
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT sum(n) FROM gpu_chunk")).scalar_one() > 2000
        got = {kind: [{k: v for k, v in r.items() if k != "id"} for r in queries.sample_rows(db, kind, ids)]
               for kind, ids in (("engine", [sid]), ("gpu", gids))}  # fmt: skip
        assert _same(got, want)
        assert db.integrity_check() == "ok"
    finally:
        db.close()
    assert (tmp_path / "v4.db.schema-v4.bak").exists()


def test_the_sink_stamps_samples_to_the_millisecond_and_chunks_store_them_so(tmp_path: Path) -> None:
    from spectower.collectors.gpu.reading import GpuFacts, GpuReading
    from spectower.collectors.sink import StorageSink
    from spectower.storage import chunks as codec

    db = open_database(tmp_path / "x.db")
    try:
        sink = StorageSink(db)
        for i in range(400):
            ts = T0 + i + 0.0123456 * (i % 3)
            sink.gpus([GpuReading(host="h", index=0, uuid="GPU-0", ts=ts, gpu_util_pct=float(i % 9))],
                      [GpuFacts("h", 0, "GPU-0")])  # fmt: skip
        assert sink.writer.flush(30)
        db.update_rollups()
        assert db.seal(min_rows=1) > 0
        rows = list(queries.sample_rows(db, "gpu", [1]))
        assert [r["ts"] for r in rows] == [round(T0 + i + 0.0123456 * (i % 3), 3) for i in range(400)]
        with db.engine.connect() as conn:
            blob = conn.execute(text("SELECT data FROM gpu_chunk")).scalars().first()
        assert codec.Chunk.parse(blob).codes[0] == codec._MILLIS
    finally:
        db.close()


def test_the_writer_keeps_taking_rows_while_a_large_head_seals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database upgraded from v4 holds days of rows in its head; its first sealing once ran in one go on
    the writer thread (~93 s per day of 1 server + 8 GPUs) while the collector's rows queued. Now each
    maintenance step seals a bounded number of rows, and what was put meanwhile is written between steps."""
    monkeypatch.setattr(sealed, "DEFAULT_STEP_ROWS", sealed.DEFAULT_MAX_ROWS)  # one chunk a step
    db = open_database(tmp_path / "big.db")
    gids = [db.gpu_id("h", k, f"GPU-{k}", ts=T0) for k in range(4)]
    seconds = 3 * sealed.DEFAULT_MAX_ROWS  # three chunks per GPU: about 12 steps
    db.insert_many("gpu_sample", (_gpu(g, i) for g in gids for i in range(seconds)))
    db.update_rollups()
    step_started, sealing_done = threading.Event(), threading.Event()
    steps: list[int] = []

    def maintain() -> bool:
        steps.append(len(steps))
        step_started.set()
        more = db.maintain()
        if not more:
            sealing_done.set()
        return more

    w = db.writer(maintenance=maintain, maintenance_interval_s=0.05)
    try:
        assert step_started.wait(60)  # the first step is under way: a collector's row arrives now
        w.put(GpuSample(**_gpu(gids[0], seconds + 1)))
        assert w.flush(60)
        with db.engine.connect() as conn:
            unsealed = conn.execute(text("SELECT count(*) FROM gpu_sample WHERE ts < :t"), {"t": T0 + 3000})
            assert unsealed.scalar_one() > 0  # written while old rows were still waiting to be sealed
        assert sealing_done.wait(120)
    finally:
        w.close()
    assert len(steps) >= 8  # about one chunk a step
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT sum(n) FROM gpu_chunk")).scalar_one() > 4 * (seconds - 200)
    assert sum(1 for _ in queries.sample_rows(db, "gpu", gids)) == 4 * seconds + 1
    db.close()
