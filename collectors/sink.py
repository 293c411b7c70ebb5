"""Between the collectors and storage: ids, rows, gaps and health, buffered while the database is busy.

Producers (the asyncio source tasks) only append to an in-memory queue and never touch the database.
``drain`` (run in a worker thread by the daemon) resolves server/GPU ids, turns readings into rows and
hands them to storage's BatchWriter, and writes gaps and health. When the database is locked or down, the
item that failed goes back to the head of the queue and ``drain`` raises ``StorageBusyError``: nothing is
lost, order is kept, and the next drain picks up where this one stopped. The queue is bounded; past the
bound the oldest SAMPLE items are dropped (and counted), never gap or health records.

An item the database refuses for what it holds (a constraint, a value out of range, a bug in a parser)
is quarantined: counted per kind in ``quarantined``, logged once per kind, and the items after it go on.
``storage_problems`` says what the writer and the sink refused so far (the daemon records it as the
health of source ``storage``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from spectower.collectors.gpu.reading import SAMPLE_FIELDS, GpuFacts, GpuReading
from spectower.collectors.sglang.scraper import ScrapeResult
from spectower.storage import Database, queries
from spectower.storage.models import EngineSample, GpuProcessSample, GpuSample
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING = 200_000
# Health rows are upserted on every failure, but on success at most this often per source.
DEFAULT_HEALTH_EVERY_S = 5.0


class StorageBusyError(RuntimeError):
    """The database refused or timed out; the pending items stay queued."""


_STALE_NOTE = "collector stopped; closed at restart"
# The database is busy, locked, full or gone: the item is fine, try it again later.
TRANSIENT_ERRORS = (OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError)


@dataclass
class _Item:
    kind: str  # engine | gpu | gap_open | gap_close | health
    payload: dict[str, Any] = field(default_factory=dict)


class StorageSink:
    def __init__(
        self,
        db: Database,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        health_every_s: float = DEFAULT_HEALTH_EVERY_S,
    ) -> None:
        self.db = db
        self.writer = db.writer()
        self._q: collections.deque[_Item] = collections.deque()
        self._lock = threading.Lock()
        self._max_pending = max_pending
        self._health_every = health_every_s
        self._last_health_ok: dict[tuple[str, str], float] = {}
        self._server_ids: dict[str, int] = {}
        self._server_info_hash: dict[str, str] = {}
        self._gpu_ids: dict[tuple[str, str], int] = {}
        self._gpu_facts: dict[tuple[str, str], GpuFacts] = {}
        self._open_gaps: dict[tuple[str, str], int] = {}
        self.dropped = 0
        self.rows_put = 0
        self.quarantined: dict[str, int] = {}  # "<item kind>: <error type>" -> items refused
        self._lost_writer_rows = 0  # rows a writer that died took with it
        self._reported_problems = 0
        self._claim: Any = None
        self._retired = {"written": 0, "dropped": 0, "rejected": 0}  # counts of writers that died

    # -- ownership ------------------------------------------------------------------------------------
    def claim(self, sources: list[tuple[str, str]], ts: float) -> None:
        """Claim ``sources`` in the database (raises storage's ``CollectorConflictError`` when another
        collector holds them) and close the gaps a collector that stopped left open on them, so an
        outage of this run is never merged into one of an earlier run."""
        self._claim = self.db.claim_collector(sources)
        for source, target in sources:
            try:
                n = queries.close_stale_gaps(self.db, source, target, ts, _STALE_NOTE)
            except TRANSIENT_ERRORS:  # busy now: queued, applied before anything of this run
                self._push(_Item("close_stale", {"source": source, "target": target, "ts": ts}))
                continue
            if n:
                log.info("%s %s: closed %d gap(s) left open by a collector that stopped", source, target, n)

    def release(self) -> None:
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()

    # -- producer side (never blocks on the database) --------------------------------------------------
    def _push(self, item: _Item) -> None:
        with self._lock:
            self._q.append(item)
            excess = len(self._q) - self._max_pending
            if excess > 0:
                kept: collections.deque[_Item] = collections.deque()
                for it in self._q:
                    if excess > 0 and it.kind in ("engine", "gpu"):
                        excess -= 1
                        self.dropped += 1
                        continue
                    kept.append(it)
                self._q = kept

    def engine(self, url: str, result: ScrapeResult) -> None:
        self._push(_Item("engine", {"url": url, "result": result}))

    def gpus(self, readings: list[GpuReading], facts: list[GpuFacts]) -> None:
        self._push(_Item("gpu", {"readings": readings, "facts": facts}))

    def gap_open(self, source: str, target: str, ts: float, reason: str) -> None:
        self._push(_Item("gap_open", {"source": source, "target": target, "ts": ts, "reason": reason}))

    def gap_close(self, source: str, target: str, ts: float) -> None:
        self._push(_Item("gap_close", {"source": source, "target": target, "ts": ts}))

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
        self._push(
            _Item(
                "health",
                {"source": source, "target": target, "ok": ok, "ts": ts, "error": error, "lag": lag_s},
            )
        )

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._q)

    # -- consumer side (blocking: run in a thread) ------------------------------------------------------
    def drain(self, max_items: int | None = None) -> int:
        done = 0
        while max_items is None or done < max_items:
            with self._lock:
                if not self._q:
                    break
                item = self._q.popleft()
            try:
                self._apply(item)
            except TRANSIENT_ERRORS as exc:
                with self._lock:
                    self._q.appendleft(item)
                raise StorageBusyError(
                    f"database busy or unavailable: {type(exc).__name__}: {_first_line(exc)}"
                ) from None
            except Exception as exc:  # this item is at fault (constraint, range, parser bug): not the rest
                self._quarantine(item, exc)
            done += 1
        return done

    def _quarantine(self, item: _Item, exc: BaseException) -> None:
        orig = getattr(exc, "orig", None) if isinstance(exc, SQLAlchemyError) else None
        kind = f"{item.kind}: {type(orig or exc).__name__}"
        with self._lock:
            first = kind not in self.quarantined
            self.quarantined[kind] = self.quarantined.get(kind, 0) + 1
        if first:
            log.warning(
                "quarantined a %s item the database refused: %s (the rest goes on; further %s items "
                "are counted, not logged)",
                item.kind,
                _first_line(exc),
                kind,
            )

    def _writer(self) -> Any:
        """The live BatchWriter (a new one if the thread died: what it held is counted as lost)."""
        if not self.writer.alive:
            st = self.writer.stats()
            self._lost_writer_rows += st.pending + st.lost
            for k in self._retired:  # what the dead writer did still counts in the summary
                self._retired[k] += getattr(st, k)
            log.error("the database writer thread died; starting a new one (%d row(s) lost)", st.pending)
            self.writer = self.db.writer()
        return self.writer

    def storage_problems(self) -> tuple[int, str | None]:
        """(rows/items refused or lost so far, a one-line summary or None when there were none)."""
        st = self.writer.stats()
        kinds = dict(st.rejected_by_kind)
        with self._lock:
            for k, n in self.quarantined.items():
                kinds[k] = kinds.get(k, 0) + n
        unexplained = st.rejected - sum(st.rejected_by_kind.values())
        if unexplained > 0:
            kinds["rejected"] = kinds.get("rejected", 0) + unexplained
        lost = self._lost_writer_rows + st.lost
        if lost:
            kinds["lost with a dead writer"] = lost
        total = sum(kinds.values())
        if not total:
            return 0, None
        detail = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
        return total, f"{total} row(s)/item(s) quarantined or lost: {detail}; last: {st.last_error}"

    def note_storage_health(self, ts: float) -> None:
        """Queue a ``storage`` health record when the writer or the sink refused something new."""
        total, detail = self.storage_problems()
        if total and total != self._reported_problems:
            self._reported_problems = total
            target = self.db.engine.url.render_as_string(hide_password=True)
            self.health("storage", target, ok=False, ts=ts, error=detail)

    def summary(self) -> dict[str, int]:
        """The shutdown figures, every row accounted for."""
        st = self.writer.stats()
        with self._lock:
            quarantined_items = sum(self.quarantined.values())
            buffered = len(self._q)
        old = self._retired
        return {
            "written": old["written"] + st.written,
            "buffered": buffered,
            "pending": st.pending,
            "dropped": old["dropped"] + st.dropped + self.dropped,
            "rejected": old["rejected"] + st.rejected + quarantined_items,
            "lost": self._lost_writer_rows + st.lost,
        }

    def _apply(self, item: _Item) -> None:
        p = item.payload
        if item.kind == "engine":
            self._apply_engine(p["url"], p["result"])
        elif item.kind == "gpu":
            self._apply_gpu(p["readings"], p["facts"])
        elif item.kind == "gap_open":
            key = (p["source"], p["target"])
            self._open_gaps[key] = queries.open_gap(self.db, p["source"], p["target"], p["ts"], p["reason"])
        elif item.kind == "gap_close":
            key = (p["source"], p["target"])
            gap_id = self._open_gaps.pop(key, None)
            if gap_id is not None:
                queries.close_gap(self.db, gap_id, p["ts"])
        elif item.kind == "close_stale":
            queries.close_stale_gaps(self.db, p["source"], p["target"], p["ts"], _STALE_NOTE)
        elif item.kind == "health":
            queries.upsert_collector_health(
                self.db, p["source"], p["target"], ok=p["ok"], ts=p["ts"], error=p["error"], lag_s=p["lag"]
            )

    def _apply_engine(self, url: str, result: ScrapeResult) -> None:
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
        rows = [EngineSample(server_id=sid, **r.as_row()) for r in result.readings]
        self._writer().put(*rows)
        self.rows_put += len(rows)

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

    def _apply_gpu(self, readings: list[GpuReading], facts: list[GpuFacts]) -> None:
        by_key = {(f.host, f.uuid): f for f in facts}
        rows: list[Any] = []
        for r in readings:
            f = by_key.get((r.host, r.uuid)) or GpuFacts(r.host, r.index, r.uuid)
            gid = self._gpu_id(f)
            rows.append(GpuSample(gpu_id=gid, ts=r.ts, **{k: getattr(r, k) for k in SAMPLE_FIELDS}))
            for p in r.processes:
                rows.append(
                    GpuProcessSample(
                        gpu_id=gid,
                        ts=r.ts,
                        pid=p.pid,
                        process_name=p.process_name,
                        used_memory_mib=p.used_memory_mib,
                    )
                )
        self._writer().put(*rows)
        self.rows_put += len(rows)

    def close(self, timeout: float = 30.0) -> bool:
        """Drain what is left and flush the writer (the daemon's exit path)."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            try:
                self.drain()
            except StorageBusyError as exc:
                log.warning("%s; retrying before exit", exc)
                time.sleep(0.2)
        ok = self._writer().flush(timeout=max(0.1, deadline - time.monotonic()))
        return ok and not self.pending


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc) or type(exc).__name__
    return text.splitlines()[0][:300]
