"""BatchWriter: the one thread that writes samples, fed by an in-memory queue.

Collectors call ``put`` (cheap, never blocks on the database); the writer thread groups what is
queued into transactions of up to ``batch_size`` rows (or whatever arrived within ``max_delay_s``)
and inserts each table's rows with one executemany. Consequences:

- a crash loses at most what was queued or in flight (``max_delay_s`` worth of rows), never part of a
  committed batch, and never leaves a half-written transaction (SQLite rolls it back);
- a locked/busy database (another writer, a long checkpoint) is retried with backoff while the rows
  stay queued; the queue is bounded (``max_buffered``): past it the OLDEST rows are dropped and counted
  in ``stats().dropped`` so an outage of the database never exhausts memory;
- a row the database rejects (NOT NULL, foreign key, an integer too large for the column, any other
  per-row error) is found by retrying its batch row by row; only that row is quarantined
  (``stats().rejected``, per kind in ``stats().rejected_by_kind``, logged once per kind,
  ``stats().last_error``), the rest are written;
- the thread never dies of an error: anything unexpected is logged, the batch is retried row by row,
  and the loop goes on. ``stats().lost`` counts rows accepted by ``put`` that were neither written,
  dropped, rejected nor are still pending (rows a dead writer took with it; 0 in a healthy run).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from spectower.storage import dialect
from sqlalchemy import Engine, Table
from sqlalchemy.exc import OperationalError
from sqlmodel import SQLModel

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 5_000
DEFAULT_MAX_DELAY_S = 0.5
DEFAULT_MAX_BUFFERED = 500_000
DEFAULT_MAINTENANCE_INTERVAL_S = 60.0
DEFAULT_RETRY_INITIAL_S = 0.05
DEFAULT_RETRY_MAX_S = 2.0
DEFAULT_CLOSE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class WriterStats:
    written: int  # rows committed
    dropped: int  # rows dropped because the queue bound was hit
    rejected: int  # rows the database refused (constraint errors)
    retries: int  # batch attempts retried because the database was busy/locked/unavailable
    batches: int  # transactions committed
    pending: int  # rows queued or in flight now
    last_error: str | None
    # rejected rows per kind ("<table>: <error type>"), e.g. {"engine_sample: OverflowError": 3}
    rejected_by_kind: dict[str, int] = field(default_factory=dict)
    accepted: int = 0  # rows ever accepted by put()

    @property
    def lost(self) -> int:
        """Rows accepted but neither written, dropped, rejected nor pending (0 unless the thread died)."""
        return max(0, self.accepted - self.written - self.dropped - self.rejected - self.pending)


class BatchWriter:
    def __init__(
        self,
        engine: Engine,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_delay_s: float = DEFAULT_MAX_DELAY_S,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        maintenance: Callable[[], Any] | None = None,
        maintenance_interval_s: float = DEFAULT_MAINTENANCE_INTERVAL_S,
    ) -> None:
        if batch_size < 1 or max_buffered < batch_size:
            raise ValueError("batch_size must be >= 1 and max_buffered >= batch_size")
        self._engine = engine
        self._batch_size = batch_size
        self._max_delay_s = max_delay_s
        self._max_buffered = max_buffered
        self._maintenance = maintenance
        self._maintenance_interval_s = maintenance_interval_s
        self._buf: collections.deque[SQLModel] = collections.deque()
        self._cond = threading.Condition()
        self._put_seq = 0  # rows ever accepted by put()
        self._done_seq = 0  # rows written, dropped or rejected
        self._inflight = 0
        self._written = self._dropped = self._rejected = self._retries = self._batches = 0
        self._last_error: str | None = None
        self._rejected_by_kind: dict[str, int] = {}
        self._flush_waiters = 0
        self._stopping = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="spectower-db-writer", daemon=True)
        self._thread.start()

    # --- producer side -------------------------------------------------------------------------
    def put(self, *rows: SQLModel) -> None:
        """Queue rows (SQLModel table instances) for insertion. Never waits on the database."""
        if not rows:
            return
        for row in rows:
            if not isinstance(row, SQLModel) or not hasattr(type(row), "__table__"):
                raise TypeError(f"BatchWriter.put takes SQLModel table rows, not {type(row).__name__}")
        with self._cond:
            if self._closed:
                raise RuntimeError("BatchWriter is closed")
            self._buf.extend(rows)
            self._put_seq += len(rows)
            overflow = len(self._buf) + self._inflight - self._max_buffered
            while overflow > 0 and self._buf:
                self._buf.popleft()
                self._dropped += 1
                self._done_seq += 1
                overflow -= 1
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every row put before this call is committed (or dropped/rejected).
        Returns False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._put_seq
            self._flush_waiters += 1
            self._cond.notify_all()
            try:
                while self._done_seq < target:
                    if not self._thread.is_alive():
                        return False
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(0.1 if remaining is None else min(remaining, 0.1))
                return True
            finally:
                self._flush_waiters -= 1

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> bool:
        """Flush what is queued (up to ``timeout`` s), then stop the thread.
        Returns whether everything was written."""
        with self._cond:
            if self._closed:
                return self._done_seq >= self._put_seq
        ok = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=max(1.0, timeout))
        return ok

    def stats(self) -> WriterStats:
        with self._cond:
            return WriterStats(
                written=self._written,
                dropped=self._dropped,
                rejected=self._rejected,
                retries=self._retries,
                batches=self._batches,
                pending=len(self._buf) + self._inflight,
                last_error=self._last_error,
                rejected_by_kind=dict(self._rejected_by_kind),
                accepted=self._put_seq,
            )

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- writer thread -------------------------------------------------------------------------
    def _next_batch(self) -> list[SQLModel]:
        with self._cond:
            next_maint = time.monotonic() + self._maintenance_interval_s
            while not self._buf and not self._stopping:
                if self._maintenance is not None and time.monotonic() >= next_maint:
                    return []
                self._cond.wait(0.5)
            # Give a trickle of rows a moment to grow into a batch, unless someone waits on a flush.
            deadline = time.monotonic() + self._max_delay_s
            while (
                len(self._buf) < self._batch_size
                and not self._stopping
                and not self._flush_waiters
                and (left := deadline - time.monotonic()) > 0
            ):
                self._cond.wait(left)
            n = min(self._batch_size, len(self._buf))
            batch = [self._buf.popleft() for _ in range(n)]
            self._inflight = n
            return batch

    def _run(self) -> None:
        last_maint = time.monotonic()
        while True:
            batch = self._next_batch()
            if batch:
                try:
                    self._write_with_retry(batch)
                except Exception as exc:  # never let one bad batch take the writer (and every later row) down
                    log.exception("writer: unexpected error on a batch of %d rows: %s", len(batch), exc)
                    written, rejected = self._write_one_by_one(batch)
                    self._finish(batch, written=written, rejected=rejected)
            due = time.monotonic() - last_maint >= self._maintenance_interval_s
            if self._maintenance is not None and due:
                last_maint = time.monotonic()
                try:
                    self._maintenance()
                except Exception as exc:  # the writer outlives a failed maintenance (retried later)
                    log.warning("storage maintenance failed: %s", exc)
            with self._cond:
                if self._stopping and not self._buf:
                    return

    def _write_with_retry(self, batch: list[SQLModel]) -> None:
        delay = DEFAULT_RETRY_INITIAL_S
        while True:
            try:
                _insert(self._engine, batch)
            except OperationalError as exc:  # busy, locked, disk full, server gone: keep the rows
                with self._cond:
                    self._retries += 1
                    self._last_error = _short(exc)
                    stopping = self._stopping
                if stopping and delay >= DEFAULT_RETRY_MAX_S:
                    log.error("giving up on %d rows at shutdown: %s", len(batch), _short(exc))
                    with self._cond:
                        kind = "shutdown: database unavailable"
                        self._rejected_by_kind[kind] = self._rejected_by_kind.get(kind, 0) + len(batch)
                    self._finish(batch, written=0, rejected=len(batch))
                    return
                time.sleep(delay)
                delay = min(delay * 2, DEFAULT_RETRY_MAX_S)
                continue
            except Exception:  # constraint, overflow, bad type, ...: find the row(s) at fault
                written, rejected = self._write_one_by_one(batch)
                self._finish(batch, written=written, rejected=rejected)
                return
            self._finish(batch, written=len(batch), rejected=0)
            return

    def _write_one_by_one(self, batch: list[SQLModel]) -> tuple[int, int]:
        written = rejected = 0
        for row in batch:
            delay = DEFAULT_RETRY_INITIAL_S
            while True:
                try:
                    _insert(self._engine, [row])
                    written += 1
                except OperationalError as exc:  # the database went busy/away mid-way: wait, keep the row
                    with self._cond:
                        self._retries += 1
                        self._last_error = _short(exc)
                        stopping = self._stopping
                    if not (stopping and delay >= DEFAULT_RETRY_MAX_S):
                        time.sleep(delay)
                        delay = min(delay * 2, DEFAULT_RETRY_MAX_S)
                        continue
                    rejected += 1
                    self._quarantine(row, exc)
                except Exception as exc:
                    rejected += 1
                    self._quarantine(row, exc)
                break
        return written, rejected

    def _quarantine(self, row: SQLModel, exc: BaseException) -> None:
        """Count a row the database would not take; log the first of each kind (table + error type)."""
        table = getattr(type(row), "__tablename__", type(row).__name__)
        orig = getattr(exc, "orig", None) or exc
        kind = f"{table}: {type(orig).__name__}"
        with self._cond:
            first = kind not in self._rejected_by_kind
            self._rejected_by_kind[kind] = self._rejected_by_kind.get(kind, 0) + 1
            self._last_error = f"{kind}: {_short(exc)}"
        if first:
            log.warning(
                "row quarantined (%s): %s; the other rows go on (further %s rows are counted, not logged)",
                kind,
                _short(exc),
                kind,
            )

    def _finish(self, batch: list[SQLModel], *, written: int, rejected: int) -> None:
        with self._cond:
            self._written += written
            self._rejected += rejected
            self._batches += 1 if written else 0
            self._done_seq += len(batch)
            self._inflight = 0
            self._cond.notify_all()


def _short(exc: BaseException) -> str:
    return str(getattr(exc, "orig", exc)).splitlines()[0][:300]


def rows_by_table(rows: Iterable[SQLModel]) -> list[tuple[Table, list[dict[str, Any]]]]:
    """Group rows per (table, whether the id is given), keeping first-seen order so parents go first."""
    groups: dict[tuple[str, bool], tuple[Table, list[dict[str, Any]]]] = {}
    for row in rows:
        table: Table = type(row).__table__  # type: ignore[attr-defined]
        names = _column_names(table)
        # plain attribute reads: several times faster than model_dump() on the writer's hot path
        values = {name: getattr(row, name, None) for name in names}
        has_id = values.get("id") is not None
        if not has_id:
            values.pop("id", None)
        key = (table.name, has_id)
        if key not in groups:
            groups[key] = (table, [])
        groups[key][1].append(values)
    return list(groups.values())


@functools.cache
def _column_names(table: Table) -> tuple[str, ...]:
    return tuple(c.key for c in table.columns)


def _insert(engine: Engine, rows: list[SQLModel]) -> None:
    with engine.connect().execution_options(**dialect.write_options(engine)) as conn, conn.begin():
        for table, values in rows_by_table(rows):
            conn.execute(table.insert(), values)
