"""BatchWriter: batching, readers never blocked, busy/locked retry, the bound, rejected rows."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from spectower.storage import open_database
from spectower.storage.models import EngineSample, GpuSample
from sqlalchemy import text

BATCHES = 12


def test_concurrent_writer_and_reader_reader_never_blocked(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    sid = db.server_id("http://s")
    w = db.writer(batch_size=1000, max_delay_s=0.02)
    stop = threading.Event()
    reads: list[tuple[float, int]] = []
    errors: list[BaseException] = []

    def reader() -> None:
        # a reader on its own connection (like the console), reading continuously
        con = sqlite3.connect(tmp_path / "db.sqlite", timeout=0.001)  # would fail fast if blocked
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                n = con.execute("SELECT count(*) FROM engine_sample").fetchone()[0]
                reads.append((time.perf_counter() - t0, n))
        except BaseException as exc:
            errors.append(exc)
        finally:
            con.close()

    batches = [
        [EngineSample(server_id=sid, ts=k * 1000.0 + i, num_running_reqs=1.0) for i in range(1000)]
        for k in range(BATCHES)
    ]
    th = threading.Thread(target=reader)
    th.start()
    try:
        for rows in batches:
            w.put(*rows)
            time.sleep(0.01)
        assert w.flush(timeout=120)
    finally:
        stop.set()
        th.join(30)
    try:
        assert not errors, errors  # never "database is locked" with a 1 ms timeout: WAL readers don't wait
        counts = [n for _, n in reads]
        assert len(reads) > 10
        assert counts == sorted(counts)  # each read saw a consistent, growing snapshot
        assert counts[-1] <= BATCHES * 1000
        assert all(n % 1000 == 0 for n in counts)  # whole batches only, never part of one
        assert w.stats().written == BATCHES * 1000
        assert w.stats().batches >= 2
    finally:
        db.close()


def test_locked_database_is_retried_and_rows_kept(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = open_database(path, busy_timeout_ms=100)
    gid = db.gpu_id("h", 0, "U")
    w = db.writer(max_delay_s=0.01)
    blocker = sqlite3.connect(path, isolation_level=None)
    # another writer holds the write lock much longer than the busy timeout
    blocker.execute("BEGIN IMMEDIATE")
    try:
        # a reader is not blocked by the held write lock (WAL)
        reader = sqlite3.connect(path, timeout=0.001)
        assert reader.execute("SELECT count(*) FROM gpu").fetchone() == (1,)
        reader.close()
        w.put(*[GpuSample(gpu_id=gid, ts=float(i)) for i in range(100)])
        assert not w.flush(timeout=3)  # cannot finish while the lock is held
        assert w.stats().pending == 100
        assert w.stats().retries >= 1
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert w.flush(timeout=60)
    st = w.stats()
    assert (st.written, st.dropped, st.pending) == (100, 0, 0)
    db.close()


def test_bound_drops_oldest_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = open_database(path, busy_timeout_ms=100)
    gid = db.gpu_id("h", 0, "U")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    w = db.writer(batch_size=10, max_buffered=50, max_delay_s=0.0)
    try:
        for i in range(200):
            w.put(GpuSample(gpu_id=gid, ts=float(i)))
        st = w.stats()
        assert st.pending <= 50
        assert st.dropped >= 150
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert w.flush(timeout=60)
    st = w.stats()
    assert st.written + st.dropped == 200
    with db.engine.connect() as conn:
        newest = conn.execute(text("SELECT max(ts) FROM gpu_sample")).scalar()
    assert newest == 199.0  # the newest rows survive, the oldest were dropped
    db.close()


def test_rejected_row_does_not_sink_its_batch(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    gid = db.gpu_id("h", 0, "U")
    w = db.writer()
    w.put(GpuSample(gpu_id=gid, ts=1.0), GpuSample(gpu_id=gid + 100, ts=2.0), GpuSample(gpu_id=gid, ts=3.0))
    assert w.flush(30)
    st = w.stats()
    assert (st.written, st.rejected) == (2, 1)
    assert st.last_error is not None and "FOREIGN KEY" in st.last_error
    db.close()


def test_put_rejects_non_rows(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        w = db.writer()
        try:
            w.put({"ts": 1.0})  # type: ignore[arg-type]
        except TypeError as exc:
            assert "SQLModel" in str(exc)
        else:
            raise AssertionError("put accepted a dict")
    finally:
        db.close()
