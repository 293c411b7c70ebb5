"""BatchWriter: the one thread that writes samples, fed by one bounded in-memory queue.

It is the only buffer between a scrape and the disk. Collectors call ``put`` (rows) or ``put_job`` (rows
whose ids are resolved on the writer thread first, or a record such as a gap written there); neither ever
waits on the database. The writer thread groups what is queued into transactions of up to ``batch_size``
rows (or whatever arrived within ``max_delay_s``) and inserts each table's rows with one executemany.
Consequences:

- a crash loses at most what was queued or in flight (``max_delay_s`` worth of rows), never part of a
  committed batch, and never leaves a half-written transaction (SQLite rolls it back);
- a locked/busy/unreachable database (``TRANSIENT_ERRORS``: another writer, a long checkpoint, a full
  disk, a server gone) is retried with backoff while everything stays queued, in order; the queue is
  bounded (``max_buffered`` rows and records): past it the OLDEST rows are dropped and counted in
  ``stats().dropped`` so an outage of the database never exhausts memory. Records (``keep=True`` jobs:
  gaps, health) count towards the bound but are never dropped;
- a row the database rejects (NOT NULL, foreign key, an integer too large for the column, any other
  per-row error) is found by retrying its batch row by row; only that row is quarantined
  (``stats().rejected``, per kind in ``stats().rejected_by_kind``, logged once per kind,
  ``stats().last_error``), the rest are written. A job whose work the database refuses is quarantined
  the same way, with its rows;
- the thread never dies of an error: anything unexpected is logged, counted, and the loop goes on.
  ``stats().lost`` counts rows accepted that were neither written, dropped, rejected nor are still
  pending (rows a dead writer took with it; 0 in a healthy run).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, Table
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlmodel import SQLModel

from . import dialect

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 5_000
DEFAULT_MAX_DELAY_S = 0.5
DEFAULT_MAX_BUFFERED = 500_000
DEFAULT_MAINTENANCE_INTERVAL_S = 60.0
DEFAULT_RETRY_INITIAL_S = 0.05
DEFAULT_RETRY_MAX_S = 2.0
DEFAULT_CLOSE_TIMEOUT_S = 30.0

# The database is busy, locked, full or gone: what was being written is fine, try it again later.
TRANSIENT_ERRORS = (OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError)
_SHUTDOWN_KIND = "shutdown: database unavailable"


@dataclass(frozen=True)
class WriterStats:
    written: int  # rows committed
    dropped: int  # rows dropped because the queue bound was hit
    rejected: int  # rows the database refused (constraint errors)
    retries: int  # attempts retried because the database was busy/locked/unavailable
    batches: int  # transactions committed
    pending: int  # rows queued or in flight now
    last_error: str | None
    # refused rows (and records) per kind ("<table or job kind>: <error type>"), e.g.
    # {"engine_sample: OverflowError": 3}
    rejected_by_kind: dict[str, int] = field(default_factory=dict)
    accepted: int = 0  # rows ever accepted by put() / put_job()
    records_pending: int = 0  # records (gaps, health) queued or in flight now
    records_rejected: int = 0  # records whose write the database refused

    @property
    def lost(self) -> int:
        """Rows accepted but neither written, dropped, rejected nor pending (0 unless the thread died)."""
        return max(0, self.accepted - self.written - self.dropped - self.rejected - self.pending)


@dataclass(slots=True, eq=False)
class TableRow:
    """A row as its column values. What the collectors put at every scrape: building one costs a dict,
    where a SQLModel instance costs ~0.15 ms (SQLAlchemy instruments every attribute set), and the writer
    reads a SQLModel row back into these values anyway. Made by ``table_row``; a job's ``prepare`` fills
    in ids through ``values``."""

    table: Table
    values: dict[str, Any]


Row = SQLModel | TableRow


def table_row(model: type[SQLModel], **values: Any) -> TableRow:
    """A row of ``model``'s table: ``values`` over the model's defaults (an ``id`` of None is left to the
    database). A name that is not a column is a TypeError: a bug of the caller, not a row to quarantine."""
    defaults = _defaults(model)
    unknown = values.keys() - defaults.keys() - {"id"}
    if unknown:
        raise TypeError(f"{model.__name__} has no column {', '.join(sorted(unknown))}")
    row = {**defaults, **values}
    if row.get("id", 0) is None:
        del row["id"]
    return TableRow(model.__table__, row)  # type: ignore[attr-defined]


@functools.cache
def _defaults(model: type[SQLModel]) -> dict[str, Any]:
    """Column -> the value a new instance of ``model`` has when not given one (None where it has none)."""
    fields = model.model_fields
    return {
        name: None if name not in fields or fields[name].is_required() else fields[name].get_default()
        for name in _column_names(model.__table__)  # type: ignore[attr-defined]
        if name != "id"
    }


@dataclass(eq=False)
class _Job:
    """Work the writer thread does, in queue order, before inserting ``rows``: ``prepare`` resolves their
    ids (and may write what they refer to), or writes a record of its own (``keep``: never dropped)."""

    kind: str
    prepare: Callable[[], object]
    rows: list[Row]
    keep: bool


_Entry = Row | _Job


def _rows_of(entry: _Entry) -> int:
    return len(entry.rows) if isinstance(entry, _Job) else 1


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
        self._buf: collections.deque[_Entry] = collections.deque()  # rows and jobs, oldest first
        self._records: collections.deque[_Job] = collections.deque()  # keep=True jobs, never dropped
        self._buf_rows = 0  # rows in _buf (a job's count with it)
        self._cond = threading.Condition()
        self._put_seq = 0  # entries (rows, jobs) ever accepted
        self._done_seq = 0  # entries finished: written, dropped or refused
        self._inflight_rows = self._inflight_records = 0
        self._accepted = self._written = self._dropped = self._rejected = self._retries = self._batches = 0
        self._records_rejected = 0
        self._last_error: str | None = None
        self._rejected_by_kind: dict[str, int] = {}
        self._flush_waiters = 0
        self._maintenance_more = False  # the last maintenance had more to do: run it again after a batch
        self._stopping = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="spectower-db-writer", daemon=True)
        self._thread.start()

    # --- producer side -------------------------------------------------------------------------
    def put(self, *rows: Row) -> None:
        """Queue rows (SQLModel table instances or ``table_row``s) for insertion. Never waits on the
        database."""
        if rows:
            _check_rows(rows)
            self._enqueue(list(rows), rows=len(rows))

    def put_job(
        self, kind: str, prepare: Callable[[], object], rows: Sequence[Row] = (), *, keep: bool = False
    ) -> None:
        """Queue ``prepare`` to run on the writer thread, in queue order, then ``rows`` to be inserted
        (``prepare`` fills in their ids: a server's or a GPU's, which it may create). Never waits on the
        database. A busy database retries ``prepare`` like an insert; any other error quarantines the job
        and its rows under ``kind``. ``keep``: a record (a gap, a health row, no rows): never dropped by
        the bound."""
        _check_rows(rows)
        if keep and rows:
            raise ValueError("put_job: a record (keep=True) writes itself; it takes no rows")
        job = _Job(kind, prepare, list(rows), keep)
        self._enqueue([job], rows=len(job.rows))

    def _enqueue(self, entries: list[_Entry], *, rows: int) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("BatchWriter is closed")
            was_idle = not self._buf and not self._records
            done_before = self._done_seq
            for entry in entries:
                if isinstance(entry, _Job) and entry.keep:
                    self._records.append(entry)
                else:
                    self._buf.append(entry)
                    self._buf_rows += _rows_of(entry)
            self._put_seq += len(entries)
            self._accepted += rows
            self._drop_overflow()
            # The thread waits for a first entry, then up to max_delay_s for a full batch: only those two
            # wake it (16 sources put ~20 entries a second; each wake-up is a thread switch for nothing),
            # and a drop, which a flush may be waiting to see
            if was_idle or self._buf_rows >= self._batch_size or self._done_seq != done_before:
                self._cond.notify_all()

    def _drop_overflow(self) -> None:
        """Past the bound, drop the oldest droppable entries (whole: a job with all its rows)."""
        overflow = self._pending_rows() + self._pending_records() - self._max_buffered
        while overflow > 0 and self._buf:
            n = _rows_of(self._buf.popleft())
            self._buf_rows -= n
            self._dropped += n
            self._done_seq += 1
            overflow -= n

    def _pending_rows(self) -> int:
        return self._buf_rows + self._inflight_rows  # records carry no rows

    def _pending_records(self) -> int:
        return len(self._records) + self._inflight_records

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything put before this call is committed (or dropped/refused).
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
                pending=self._pending_rows(),
                last_error=self._last_error,
                rejected_by_kind=dict(self._rejected_by_kind),
                accepted=self._accepted,
                records_pending=self._pending_records(),
                records_rejected=self._records_rejected,
            )

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- writer thread -------------------------------------------------------------------------
    def _next_batch(self) -> list[_Entry]:
        with self._cond:
            next_maint = time.monotonic() + self._maintenance_interval_s
            while not self._buf and not self._records and not self._stopping:
                if self._maintenance is not None and (
                    self._maintenance_more or time.monotonic() >= next_maint
                ):
                    return []
                self._cond.wait(0.5)
            # Give a trickle of rows a moment to grow into a batch, unless someone waits on a flush.
            deadline = time.monotonic() + self._max_delay_s
            while (
                self._buf_rows < self._batch_size
                and not self._stopping
                and not self._flush_waiters
                and (left := deadline - time.monotonic()) > 0
            ):
                self._cond.wait(left)
            # records first: few and small, and a gap must not wait behind a backlog of samples
            batch: list[_Entry] = list(self._records)
            self._records.clear()
            rows = 0
            while self._buf and (rows < self._batch_size or not rows):
                entry = self._buf.popleft()
                rows += _rows_of(entry)
                batch.append(entry)
            self._buf_rows -= rows
            self._inflight_rows = sum(_rows_of(e) for e in batch)
            self._inflight_records = len(batch) - sum(1 for e in batch if not _is_record(e))
            return batch

    def _run(self) -> None:
        last_maint = time.monotonic()
        while True:
            batch = self._next_batch()
            if batch:
                try:
                    self._write_batch(batch)
                except Exception as exc:  # a bug of ours: it must not take the writer (and later rows) down
                    log.exception("writer: unexpected error on a batch of %d entries: %s", len(batch), exc)
                    self._count_refused(f"writer: {type(exc).__name__}", exc, rows=self._inflight_rows)
                    self._finish(batch, written=0, rejected=self._inflight_rows)
            more = self._maintenance_more and not self._stopping  # a long seal does not hold up a close
            due = more or time.monotonic() - last_maint >= self._maintenance_interval_s
            if self._maintenance is not None and due:
                last_maint = time.monotonic()
                self._maintenance_more = False
                try:
                    # True: it stopped at its step's bound with more to do; the next step comes after the
                    # next batch, so rows queued meanwhile are written between steps
                    self._maintenance_more = self._maintenance() is True
                except Exception as exc:  # the writer outlives a failed maintenance (retried later)
                    log.warning("storage maintenance failed: %s", exc)
            with self._cond:
                if self._stopping and not self._buf and not self._records:
                    return

    def _write_batch(self, batch: list[_Entry]) -> None:
        """Run the batch's jobs in order (a refused one is quarantined with its rows), then insert rows."""
        rows: list[Row] = []
        refused = 0
        for entry in batch:
            if not isinstance(entry, _Job):
                rows.append(entry)
                continue
            error, _ = self._attempt(entry.prepare)
            if error is None:
                rows.extend(entry.rows)
            else:
                refused += len(entry.rows)
                self._quarantine(entry.kind, error, rows=len(entry.rows), record=_is_record(entry))
        written, rejected = self._write_with_retry(rows)
        self._finish(batch, written=written, rejected=rejected + refused)

    def _attempt(self, work: Callable[[], object]) -> tuple[BaseException | None, bool]:
        """Run ``work``, retrying with backoff while the database is busy or gone. Returns (None, _) when
        it succeeded, (error, True) when the database stayed unavailable through shutdown, (error, False)
        when the database refused it (a constraint, a value out of range, a bug in what was given)."""
        delay = DEFAULT_RETRY_INITIAL_S
        while True:
            try:
                work()
            except TRANSIENT_ERRORS as exc:  # busy, locked, disk full, server gone: keep it, try again
                with self._cond:
                    self._retries += 1
                    self._last_error = dialect.error_line(exc)
                    stopping = self._stopping
                if stopping and delay >= DEFAULT_RETRY_MAX_S:
                    return exc, True
                time.sleep(delay)
                delay = min(delay * 2, DEFAULT_RETRY_MAX_S)
            except Exception as exc:
                return exc, False
            else:
                return None, False

    def _write_with_retry(self, rows: list[Row]) -> tuple[int, int]:
        """Insert ``rows`` in one transaction; when it is refused, row by row. Returns (written, rejected)."""
        if not rows:
            return 0, 0
        error, unavailable = self._attempt(functools.partial(_insert, self._engine, rows))
        if error is None:
            return len(rows), 0
        if unavailable:
            log.error("giving up on %d rows at shutdown: %s", len(rows), dialect.error_line(error))
            self._count_refused(_SHUTDOWN_KIND, error, rows=len(rows))
            return 0, len(rows)
        written = rejected = 0
        for row in rows:  # find the row(s) at fault; the others are written
            error, _ = self._attempt(functools.partial(_insert, self._engine, [row]))
            if error is None:
                written += 1
            else:
                rejected += 1
                self._quarantine(_table_of(row).name, error, rows=1)
        return written, rejected

    def _quarantine(self, what: str, exc: BaseException, *, rows: int, record: bool = False) -> None:
        """Count what the database would not take; log the first of each kind (what + error type)."""
        orig = getattr(exc, "orig", None) or exc
        kind = f"{what}: {type(orig).__name__}"
        first = self._count_refused(kind, exc, rows=rows, record=record)
        if first:
            log.warning(
                "%s quarantined (%s): %s; the rest goes on (further %s are counted, not logged)",
                "record" if record else "row(s)",
                kind,
                dialect.error_line(exc),
                kind,
            )

    def _count_refused(self, kind: str, exc: BaseException, *, rows: int, record: bool = False) -> bool:
        """Count ``rows`` refused as ``kind`` (a job without rows counts one, so its refusal shows);
        whether it is the first of its kind."""
        with self._cond:
            first = kind not in self._rejected_by_kind
            self._rejected_by_kind[kind] = self._rejected_by_kind.get(kind, 0) + max(rows, 1)
            self._records_rejected += int(record)
            self._last_error = f"{kind}: {dialect.error_line(exc)}"
        return first

    def _finish(self, batch: list[_Entry], *, written: int, rejected: int) -> None:
        with self._cond:
            self._written += written
            self._rejected += rejected
            self._batches += 1 if written else 0
            self._done_seq += len(batch)
            self._inflight_rows = self._inflight_records = 0
            self._cond.notify_all()


def _is_record(entry: _Entry) -> bool:
    return isinstance(entry, _Job) and entry.keep


def _check_rows(rows: Iterable[object]) -> None:
    for row in rows:
        if isinstance(row, TableRow):
            continue
        if not isinstance(row, SQLModel) or not hasattr(type(row), "__table__"):
            raise TypeError(
                f"BatchWriter.put takes SQLModel table rows or TableRows, not {type(row).__name__}"
            )


def _table_of(row: Row) -> Table:
    return row.table if isinstance(row, TableRow) else type(row).__table__  # type: ignore[attr-defined]


def rows_by_table(rows: Iterable[Row]) -> list[tuple[Table, list[dict[str, Any]]]]:
    """Group rows per (table, whether the id is given), keeping first-seen order so parents go first."""
    groups: dict[tuple[str, bool], tuple[Table, list[dict[str, Any]]]] = {}
    for row in rows:
        if isinstance(row, TableRow):
            table, values = row.table, row.values
            has_id = "id" in values
        else:
            table = type(row).__table__  # type: ignore[attr-defined]
            # plain attribute reads: several times faster than model_dump() on the writer's hot path
            values = {name: getattr(row, name, None) for name in _column_names(table)}
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


@functools.cache
def _insert_statement(table: Table, dialect_name: str) -> Any:
    """One INSERT per table (and dialect) for the process (SQLAlchemy then finds its compiled form by
    identity, not by building and hashing a new statement at every batch). A table whose ``info`` says
    ``on_duplicate: ignore`` (server pauses, read again at every scrape) skips a row its unique key already
    holds instead of refusing the batch."""
    if table.info.get("on_duplicate") == "ignore":
        return dialect.insert_ignoring_duplicates(dialect_name, table)
    return table.insert()


def _insert(engine: Engine, rows: list[Row]) -> None:
    with dialect.write_transaction(engine) as conn:
        for table, values in rows_by_table(rows):
            conn.execute(_insert_statement(table, engine.dialect.name), values)
