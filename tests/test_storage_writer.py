"""BatchWriter: batching, readers never blocked, busy/locked retry, the bound, rejected rows, jobs."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from spectower.storage import BatchWriter, open_database
from spectower.storage.models import EngineSample, GpuSample
from spectower.storage.writer import table_row
from sqlalchemy import text

BATCHES = 12


@contextmanager
def _write_locked(path: Path) -> Iterator[None]:
    """Another connection holds SQLite's write lock through the block (far past the busy timeout)."""
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def _until_stuck(w: BatchWriter, retries: int = 1) -> None:
    """Until the writer has met the lock (its first retry; ``retries``: met it that many times): what is
    put from now on queues behind it."""
    deadline = time.monotonic() + 60  # a guard only: the wait ends on the writer's own count
    while w.stats().retries < retries:
        assert time.monotonic() < deadline, "the writer never met the lock"
        time.sleep(0.01)


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
    # another writer holds the write lock much longer than the busy timeout
    with _write_locked(path):
        # a reader is not blocked by the held write lock (WAL)
        reader = sqlite3.connect(path, timeout=0.001)
        assert reader.execute("SELECT count(*) FROM gpu").fetchone() == (1,)
        reader.close()
        w.put(*[GpuSample(gpu_id=gid, ts=float(i)) for i in range(100)])
        _until_stuck(w, retries=3)  # was: a 3 s flush that had to time out
        assert not w.flush(timeout=0.05)  # cannot finish while the lock is held
        assert w.stats().pending == 100
    assert w.flush(timeout=60)
    st = w.stats()
    assert (st.written, st.dropped, st.pending) == (100, 0, 0)
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


def test_a_table_row_is_stored_as_the_same_sqlmodel_row_would_be(tmp_path: Path) -> None:
    # the collectors put table_rows (a dict of column values) instead of SQLModel instances, which cost
    # ~0.15 ms each to build: defaults, ids and refusals must come out the same either way
    db = open_database(tmp_path / "db.sqlite")
    gid = db.gpu_id("h", 0, "U")
    w = db.writer()
    w.put(GpuSample(gpu_id=gid, ts=1.0, power_w=5.0), table_row(GpuSample, gpu_id=gid, ts=2.0, power_w=5.0))
    w.put(
        table_row(GpuSample, id=None, gpu_id=gid + 100, ts=3.0),
        table_row(GpuSample, id=77, gpu_id=gid, ts=4.0),
    )
    assert w.flush(30)
    st = w.stats()
    assert (st.written, st.rejected, st.rejected_by_kind) == (3, 1, {"gpu_sample: IntegrityError": 1})
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT id, ts, lost, power_w, gpu_util_pct FROM gpu_sample ORDER BY ts"))
        assert [tuple(r) for r in rows] == [
            (1, 1.0, 0, 5.0, None),
            (2, 2.0, 0, 5.0, None),
            (77, 4.0, 0, None, None),
        ]
    db.close()
    with pytest.raises(TypeError, match="GpuSample has no column power_mw"):
        table_row(GpuSample, gpu_id=1, ts=1.0, power_mw=5.0)


# -- jobs: ids resolved on the writer thread, records never dropped --------------------------------------
def test_a_job_fills_in_ids_on_the_writer_thread_before_its_rows(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    w = db.writer(max_delay_s=0.0)
    rows = [EngineSample(ts=float(i)) for i in range(3)]  # no server id yet
    threads: list[str] = []

    def resolve() -> None:
        threads.append(threading.current_thread().name)
        sid = db.server_id("http://new")  # creates the server: a write, on the writer thread
        for r in rows:
            r.server_id = sid

    w.put_job("engine", resolve, rows)
    assert w.flush(30)
    st = w.stats()
    assert (st.written, st.rejected, st.pending, st.accepted, st.lost) == (3, 0, 0, 3, 0)
    assert threads == ["spectower-db-writer"]
    with db.engine.connect() as conn:
        sql = "SELECT count(*) FROM engine_sample e JOIN server s ON s.id = e.server_id WHERE s.url = 'http://new'"
        assert conn.execute(text(sql)).scalar() == 3
    db.close()


def test_a_refused_job_is_quarantined_with_its_rows_and_the_rest_goes_on(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    sid = db.server_id("http://s")
    w = db.writer(max_delay_s=0.0)

    def refuse() -> None:
        db.server_id("")  # ValueError: what the job was given is wrong, not the database

    w.put_job("engine", refuse, [EngineSample(ts=1.0), EngineSample(ts=2.0)])
    w.put_job("gap_open", refuse, keep=True)
    w.put(EngineSample(server_id=sid, ts=3.0))
    assert w.flush(30) and w.alive
    st = w.stats()
    assert (st.written, st.rejected, st.records_rejected, st.lost) == (1, 2, 1, 0)
    assert st.rejected_by_kind == {"engine: ValueError": 2, "gap_open: ValueError": 1}
    db.close()


def test_a_locked_database_keeps_jobs_queued_in_order_then_runs_them(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = open_database(path, busy_timeout_ms=100)
    w = db.writer(max_delay_s=0.0)
    order: list[str] = []
    with _write_locked(path):
        for name in ("a", "b", "c"):
            w.put_job("gap_open", lambda n=name: (order.append(n), db.server_id(f"http://{n}")), keep=True)
        _until_stuck(w, retries=3)  # was: a 1 s flush that had to time out
        assert not w.flush(timeout=0.05)  # the lock holds: nothing can be written
        st = w.stats()
        assert st.records_pending == 3 and st.retries >= 1 and st.records_rejected == 0
    assert w.flush(timeout=60)
    assert [n for n in dict.fromkeys(order)] == ["a", "b", "c"] and w.stats().records_pending == 0
    db.close()


def test_the_bound_drops_the_oldest_samples_never_records(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = open_database(path, busy_timeout_ms=100)
    gid = db.gpu_id("h", 0, "U")
    w = db.writer(batch_size=10, max_delay_s=0.0, max_buffered=50)
    done: list[int] = []
    with _write_locked(path):
        w.put(GpuSample(gpu_id=gid, ts=-1.0))
        _until_stuck(w)
        for i in range(10):  # queued behind the stuck batch, then 200 samples push past the bound
            w.put_job("health", lambda i=i: done.append(i), keep=True)
        for i in range(200):
            w.put(GpuSample(gpu_id=gid, ts=float(i)))
        st = w.stats()
        assert st.pending + st.records_pending <= 50 and st.dropped >= 150
    assert w.flush(timeout=60)
    st = w.stats()
    assert st.written + st.dropped == 201 and done == list(range(10))
    with db.engine.connect() as conn:
        newest = conn.execute(text("SELECT max(ts) FROM gpu_sample")).scalar()
    assert newest == 199.0  # the newest rows survive, the oldest were dropped
    db.close()


def test_a_record_takes_no_rows(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db.sqlite")
    try:
        with pytest.raises(ValueError, match="keep=True"):
            db.writer().put_job("gap_open", lambda: None, [GpuSample(gpu_id=1, ts=1.0)], keep=True)
    finally:
        db.close()
