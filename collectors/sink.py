"""Between the collectors and storage: readings become rows on the database's one BatchWriter.

The sink keeps no queue of its own: storage's ``BatchWriter`` is the one buffer between a scrape and the
disk, with one bound, one retry rule and one drop count. What the sink adds is what a reading needs to
become rows: the server and GPU ids (created on first sight, facts from ``/server_info`` and the GPU
source), a ``/server_info`` snapshot when its stable part changed, and the collector's gaps and health.
Those run as jobs on the writer thread (``BatchWriter.put_job``), in order with the rows, so the asyncio
sources never wait on the database: while it is busy or down everything waits in the writer's queue and
is retried; past the bound the oldest samples are dropped (and counted), never a gap or a health record.

An item the database refuses for what it holds (a constraint, a value out of range, a bug in a parser)
is quarantined by the writer: counted per kind, logged once per kind, and the items after it go on.
``storage_problems`` says what was refused or lost so far (the daemon records it as the health of source
``storage``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from ..storage import BatchWriter, Database, queries
from ..storage.models import EngineCounterSample, EngineSample, GpuProcessSample, GpuSample, ServerPause
from ..storage.writer import TableRow, table_row
from .gpu.reading import SAMPLE_FIELDS, GpuFacts, GpuReading
from .sglang.scraper import ScrapeResult

log = logging.getLogger(__name__)

# Health rows are upserted on every failure, but on success at most this often per source.
DEFAULT_HEALTH_EVERY_S = 5.0

_STALE_NOTE = "collector stopped; closed at restart"
_DOWNTIME_REASON = "collector not running: nothing collected until it started again"
# The id a row carries until its job fills in the real one on the writer thread: ids start at 1, so a row
# that kept it would be refused by its foreign key (quarantined), never stored against another server.
UNRESOLVED_ID = 0
SAMPLE_TS_DECIMALS = 3


def stamp(ts: float) -> float:
    """A sample's time to the millisecond, as Prometheus keeps it: the chunks samples are sealed into
    (storage/chunks.py) then store a 1 Hz series' times in about half a byte each instead of two."""
    return round(ts, SAMPLE_TS_DECIMALS)


class StorageSink:
    def __init__(self, db: Database, *, health_every_s: float = DEFAULT_HEALTH_EVERY_S) -> None:
        self.db = db
        self.writer = db.writer()
        self._health_every = health_every_s
        self._last_health_ok: dict[tuple[str, str], float] = {}
        # Read and written by the writer thread only (the jobs below run there, one at a time).
        self._server_ids: dict[str, int] = {}
        self._server_info_hash: dict[str, str] = {}
        self._gpu_ids: dict[tuple[str, str], int] = {}
        self._gpu_facts: dict[tuple[str, str], GpuFacts] = {}
        self._open_gaps: dict[tuple[str, str], int] = {}
        self._lost_writer_rows = 0  # rows a writer that died took with it
        self._retired = {"written": 0, "dropped": 0, "rejected": 0}  # counts of writers that died
        self._reported_problems = 0
        self._seen_retries = 0
        self._claim: Any = None

    # -- ownership ------------------------------------------------------------------------------------
    def claim(
        self, sources: list[tuple[str, str]], ts: float, *, downtime_after_s: float | None = None
    ) -> None:
        """Claim ``sources`` in the database (raises storage's ``CollectorConflictError`` when another
        collector holds them) and close the gaps a collector that stopped left open on them (queued
        before anything of this run), so an outage of this run is never merged into one of an earlier run.
        With ``downtime_after_s``: a source whose last collection is older than that at ``ts`` (and no
        open gap covers it) gets a gap for the time no collector ran (a kill -9, a restart, a reboot)."""
        self._claim = self.db.claim_collector(sources)
        for source, target in sources:
            job = functools.partial(self._close_stale, source, target, ts, downtime_after_s)
            self._record("close_stale", job)

    def release(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()

    # -- producer side (never waits on the database) ---------------------------------------------------
    def engine(self, url: str, result: ScrapeResult) -> None:
        """One scrape of one SGLang server: its engine samples, decode-counter rows and reported pauses."""
        rows = [
            table_row(EngineSample, **{**r.as_row(), "server_id": UNRESOLVED_ID, "ts": stamp(r.ts)})
            for r in result.readings
        ]
        rows += [
            table_row(EngineCounterSample, **{**c.as_row(), "server_id": UNRESOLVED_ID, "ts": stamp(c.ts)})
            for c in result.counters
        ]
        # a pause's end as the plugin stamped it: the stored row's unique key, so one read again is skipped
        rows += [table_row(ServerPause, **p.as_row(), server_id=UNRESOLVED_ID) for p in result.pauses]
        self._writer().put_job("engine", functools.partial(self._resolve_server, url, result, rows), rows)

    def gpus(self, readings: list[GpuReading], facts: list[GpuFacts]) -> None:
        """One read of a GPU source: a sample per GPU and its per-process memory rows."""
        by_key = {(f.host, f.uuid): f for f in facts}
        rows: list[TableRow] = []
        owners: list[GpuFacts] = []  # the GPU of each row, in order
        for r in readings:
            f = by_key.get((r.host, r.uuid)) or GpuFacts(r.host, r.index, r.uuid)
            ts = stamp(r.ts)
            sample = {k: getattr(r, k) for k in SAMPLE_FIELDS}
            rows.append(table_row(GpuSample, gpu_id=UNRESOLVED_ID, ts=ts, **sample))
            owners.append(f)
            for p in r.processes:
                rows.append(table_row(GpuProcessSample, gpu_id=UNRESOLVED_ID, ts=ts, pid=p.pid,
                                      process_name=p.process_name,
                                      used_memory_mib=p.used_memory_mib))  # fmt: skip
                owners.append(f)
        self._writer().put_job("gpu", functools.partial(self._resolve_gpus, rows, owners), rows)

    def gap_open(self, source: str, target: str, ts: float, reason: str) -> None:
        self._record("gap_open", functools.partial(self._gap_open, source, target, ts, reason))

    def gap_close(self, source: str, target: str, ts: float) -> None:
        self._record("gap_close", functools.partial(self._gap_close, source, target, ts))

    def health(
        self,
        source: str,
        target: str,
        *,
        ok: bool,
        ts: float,
        error: str | None = None,
        lag_s: float | None = None,
        force: bool = False,
    ) -> None:
        key = (source, target)
        if ok and not force and ts - self._last_health_ok.get(key, -1e18) < self._health_every:
            return
        if ok:
            self._last_health_ok[key] = ts
        write = functools.partial(
            queries.upsert_collector_health, self.db, source, target, ok=ok, ts=ts, error=error, lag_s=lag_s
        )
        self._record("health", write)

    def _record(self, kind: str, write: Callable[[], object]) -> None:
        self._writer().put_job(kind, write, keep=True)

    # -- jobs (run on the writer thread) --------------------------------------------------------------
    def _resolve_server(self, url: str, result: ScrapeResult, rows: list[TableRow]) -> None:
        info = result.info
        sid = self._server_ids.get(url)
        if sid is None or info is not None:
            facts: dict[str, Any] = {}
            if info is not None:
                facts = {
                    "served_model_name": info.served_model_name,
                    "sglang_version": info.version,
                    "launch_command": info.launch_command,
                    "max_running_requests": info.max_running_requests,
                    "speculative_algorithm": info.speculative_algorithm,
                }
            sid = self.db.server_id(url, ts=result.ts, **facts)
            self._server_ids[url] = sid
        if info is not None and self._server_info_hash.get(url) != info.info_hash:
            self.db.record_server_info(sid, info.info, result.ts)
            self._server_info_hash[url] = info.info_hash
        for row in rows:
            row.values["server_id"] = sid

    def _resolve_gpus(self, rows: list[TableRow], owners: list[GpuFacts]) -> None:
        for row, facts in zip(rows, owners, strict=True):
            row.values["gpu_id"] = self._gpu_id(facts)

    def _gpu_id(self, facts: GpuFacts) -> int:
        key = (facts.host, facts.uuid)
        gid = self._gpu_ids.get(key)
        if gid is None or self._gpu_facts.get(key) != facts:
            gid = self.db.gpu_id(
                facts.host,
                facts.index,
                facts.uuid,
                name=facts.name,
                memory_total_mib=facts.memory_total_mib,
                power_limit_w=facts.power_limit_w,
                driver_version=facts.driver_version,
                cuda_version=facts.cuda_version,
                source=facts.source,
            )
            self._gpu_ids[key] = gid
            self._gpu_facts[key] = facts
        return gid

    def _gap_open(self, source: str, target: str, ts: float, reason: str) -> None:
        self._open_gaps[(source, target)] = queries.open_gap(self.db, source, target, ts, reason)

    def _gap_close(self, source: str, target: str, ts: float) -> None:
        gap_id = self._open_gaps.pop((source, target), None)
        if gap_id is not None:
            queries.close_gap(self.db, gap_id, ts)

    def _close_stale(self, source: str, target: str, ts: float, downtime_after_s: float | None) -> None:
        n = queries.close_stale_gaps(self.db, source, target, ts, _STALE_NOTE)
        if n:  # the open gap, closed now, already covers the time no collector ran
            log.info("%s %s: closed %d gap(s) left open by a collector that stopped", source, target, n)
            return
        if downtime_after_s is None:
            return
        last = queries.last_collected_ts(self.db, source, target)
        if source not in queries.SOURCES_WITH_OWN_SAMPLES:  # known from its health row: up to that early
            downtime_after_s += self._health_every
        if last is not None and ts - last > downtime_after_s:
            reason = f"{_DOWNTIME_REASON} ({ts - last:.1f} s without a collector)"
            queries.add_gap(self.db, source, target, last, ts, reason)
            log.info("%s %s: %.1f s since its last collection: recorded as a gap", source, target, ts - last)

    # -- the writer and what it did ---------------------------------------------------------------------
    def _writer(self) -> BatchWriter:
        """The live BatchWriter (a new one if the thread died: what it held is counted as lost)."""
        if not self.writer.alive:
            st = self.writer.stats()
            self._lost_writer_rows += st.pending + st.lost
            for k in self._retired:  # what the dead writer did still counts in the summary
                self._retired[k] += getattr(st, k)
            log.error("the database writer thread died; starting a new one (%d row(s) lost)", st.pending)
            self.writer = self.db.writer()
            self._seen_retries = 0
        return self.writer

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything handed over so far is stored (or dropped / refused); False when
        ``timeout`` seconds passed first (the database is busy or down)."""
        return self._writer().flush(timeout=timeout)

    def busy(self) -> str | None:
        """A line for the log when the database made the writer wait since the last call (rows are kept
        queued meanwhile), else None."""
        st = self._writer().stats()
        if st.retries == self._seen_retries:
            return None
        self._seen_retries = st.retries
        if not st.pending and not st.records_pending:
            return None
        return (
            f"database busy or unavailable: {st.last_error}; {st.pending} row(s) and "
            f"{st.records_pending} record(s) queued"
        )

    def storage_problems(self) -> tuple[int, str | None]:
        """(rows/records refused or lost so far, a one-line summary or None when there were none)."""
        st = self.writer.stats()
        kinds = dict(st.rejected_by_kind)
        lost = self._lost_writer_rows + st.lost
        if lost:
            kinds["lost with a dead writer"] = lost
        total = sum(kinds.values())
        if not total:
            return 0, None
        detail = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
        return total, f"{total} row(s)/item(s) quarantined or lost: {detail}; last: {st.last_error}"

    def note_storage_health(self, ts: float) -> None:
        """Record a ``storage`` health failure when the writer refused or lost something new."""
        total, detail = self.storage_problems()
        if total and total != self._reported_problems:
            self._reported_problems = total
            target = self.db.engine.url.render_as_string(hide_password=True)
            self.health("storage", target, ok=False, ts=ts, error=detail)

    def summary(self) -> dict[str, int]:
        """The shutdown figures, every row accounted for (records refused count as rejected)."""
        st = self.writer.stats()
        old = self._retired
        return {
            "written": old["written"] + st.written,
            "pending": st.pending + st.records_pending,
            "dropped": old["dropped"] + st.dropped,
            "rejected": old["rejected"] + st.rejected + st.records_rejected,
            "lost": self._lost_writer_rows + st.lost,
        }
