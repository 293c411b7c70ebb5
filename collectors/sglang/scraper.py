"""Scrape one SGLang server over HTTP: ``/metrics`` every time, ``/server_info`` every few seconds,
``/v1/loads`` when ``/metrics`` is off. Any failure (connection, timeout, HTTP error, a body that does not
parse) raises ``ScrapeError`` and nothing of that scrape is used. The engine's decode counters ride on
``/server_info`` (collectors/sglang/counters.py): each fresh read gives the interval since the last one.

A ``/server_info`` read is parsed whole (redacted, hashed, its facts validated) on the first read, then
once a minute, and at once when the server looks new (``/metrics`` shows a restart, or ``startup_time``
changed); the reads between refresh only what changes while a server runs: the ranks (knob, owner, lock,
active tier, accept length), the counters, and the pauses its processes report (collectors/sglang/pauses.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from ..auth import auth_headers
from ..http import (
    DEFAULT_MAX_BODY_BYTES,
    BoundedReadError,
    BoundedResponse,
    KeepAliveGets,
    ServerUnreachable,
    get_bounded,
)
from ..promtext import MetricsParseError
from .counters import CounterDeltas, CounterRow, read_counters
from .loads import Loads, LoadsError, parse_loads_json
from .metrics import MetricsSnapshot, parse_metrics
from .pauses import NewPauses, PauseRow, pause_rows
from .reading import EngineDeriver, EngineReading
from .server_info import ServerInfo, ServerInfoError, parse_server_info, refresh_ranks

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
# /server_info asks every scheduler for its internal state: cheap, but not free; the knob and accept
# length it carries change at most every decode_log_interval steps anyway.
DEFAULT_SERVER_INFO_EVERY_S = 5.0
# The whole document is parsed this often (its facts change at a restart, which is parsed at once): the
# simulator's 32 KB costs 1.0 ms of CPU decoded and parsed whole (2.8 ms on a loaded box), 0.24 ms decoded
# with its ranks alone (server_info.refresh_ranks): 16 servers read every 5 s spent up to ~1 % of a core.
DEFAULT_SERVER_INFO_FULL_EVERY_S = 60.0
T = TypeVar("T")


class ScrapeError(ServerUnreachable):
    """One scrape of one server failed (the collectors' "the server did not answer usefully"); the message
    says which endpoint and why (never the key)."""


@dataclass
class ScrapeResult:
    ts: float
    readings: list[EngineReading]
    # the whole /server_info when it was parsed this time (first read, every minute, a new launch), else
    # None: its facts and stored snapshot are only looked at then
    info: ServerInfo | None
    restarted: bool
    duration_s: float
    metrics_enabled: bool = True
    warnings: list[str] = field(default_factory=list)
    # the engine's decode counters over the interval since the previous fresh /server_info (empty when
    # there was none this time, on the first read, or when the server publishes no counters)
    counters: list[CounterRow] = field(default_factory=list)
    # the pauses the fresh /server_info reports that no earlier scrape of this server handed over (scheduler
    # stalls, long collections, the launcher's held Python: collectors/sglang/pauses.py)
    pauses: list[PauseRow] = field(default_factory=list)


class SglangScraper:
    """Stateful (rates need the previous scrape): one per server URL."""

    source = "sglang"

    def __init__(
        self,
        url: str,
        client: httpx.AsyncClient | KeepAliveGets,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        server_info_every_s: float = DEFAULT_SERVER_INFO_EVERY_S,
        server_info_full_every_s: float = DEFAULT_SERVER_INFO_FULL_EVERY_S,
        clock: Callable[[], float] = time.time,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.url = url.rstrip("/")
        self._client = client
        self._headers = auth_headers(api_key)
        self._timeout_s = timeout_s
        self._max_bytes = max_body_bytes
        self._info_every = server_info_every_s
        self._full_every = server_info_full_every_s
        self._clock = clock
        self.deriver = EngineDeriver()
        self.counters = CounterDeltas()
        self.pauses = NewPauses()
        self._warned: set[str] = set()
        self.info: ServerInfo | None = None  # the last full parse, with the latest read's ranks
        self._info_ts = -1e18  # the last /server_info read
        self._full_ts = -1e18  # the last full parse
        self._failed_since_last_ok = False

    async def _get(self, path: str) -> BoundedResponse:
        # one deadline for the whole read and a byte cap: a trickling or endless body cannot hold the
        # scrape (or memory) past timeout_s / max_body_bytes
        try:
            return await get_bounded(
                self._client,
                self.url + path,
                headers=self._headers,
                timeout_s=self._timeout_s,
                max_bytes=self._max_bytes,
            )
        except BoundedReadError as exc:
            raise ScrapeError(str(exc)) from None

    async def _metrics(self) -> MetricsSnapshot | None:
        resp = await self._get("/metrics")
        if resp.status_code == 404:
            return None  # launched without --enable-metrics: /v1/loads has to do
        snapshot = self._parsed("/metrics", resp, parse_metrics, MetricsParseError)
        if not snapshot.sample_count:
            # garbage that happens to parse, another engine (vLLM's vllm: series), an exporter: an
            # error of this source, never a successful scrape of an all-empty row
            raise ScrapeError(f"{self.url}/metrics: not an SGLang server / no sglang: series in the answer")
        return snapshot

    async def _server_info(self) -> Any:
        """The decoded /server_info document."""
        resp = await self._get("/server_info")
        if resp.status_code == 404:
            resp = await self._get("/get_server_info")  # releases before the rename
        if resp.status_code in (401, 403):
            raise ScrapeError(
                f"{self.url}/server_info: HTTP {resp.status_code} (set SPECTOWER_API_KEY or "
                "SPECTOWER_API_KEY_FILE for an --api-key server)"
            )
        return self._parsed("/server_info", resp, json.loads, ValueError)

    def _read_info(self, doc: Any, ts: float) -> ServerInfo | None:
        """The full parse of ``doc`` when it is due (returned, and kept in ``self.info``), else only
        ``self.info``'s ranks refreshed from it (None returned)."""
        if self.info is not None and ts - self._full_ts < self._full_every:
            refreshed = refresh_ranks(self.info, doc)
            if refreshed is not None:
                self.info = refreshed
                return None
        try:
            full = parse_server_info(doc)
        except ServerInfoError as exc:
            raise ScrapeError(f"{self.url}/server_info: {exc}") from None
        self.info, self._full_ts = full, ts
        return full

    async def _loads(self) -> Loads:
        resp = await self._get("/v1/loads?include=core,spec&format=json")
        return self._parsed(
            "/v1/loads", resp, lambda text: parse_loads_json(json.loads(text)), (ValueError, LoadsError)
        )

    def _parsed(
        self,
        endpoint: str,
        resp: BoundedResponse,
        parse: Callable[[str], T],
        errors: type[Exception] | tuple[type[Exception], ...],
    ) -> T:
        """``parse`` of a 200 answer; any other status, or a body ``parse`` refuses with one of ``errors``,
        is a ScrapeError naming the endpoint."""
        if resp.status_code != 200:
            raise ScrapeError(f"{self.url}{endpoint}: HTTP {resp.status_code}")
        try:
            return parse(resp.text)
        except errors as exc:
            raise ScrapeError(f"{self.url}{endpoint}: {exc}") from None

    async def scrape(self) -> ScrapeResult:
        t0 = time.monotonic()
        if self._failed_since_last_ok:
            # After an outage, rates across it would average over the gap (or over a restart we could
            # not see): start clean; the next scrape has rates again.
            self.deriver.rates.forget()
            self.deriver.prev_hist.clear()
            self.deriver.prev_counters.clear()
            self.counters.forget()
        restarts_before = self.deriver.restarts
        try:
            snapshot = await self._metrics()
            ts = self._clock()
            if snapshot is not None and self.deriver.note_metrics(snapshot):
                # a restart /metrics shows (baselines dropped there): /server_info read and parsed whole
                # now (or at the next scrape, if this one fails before)
                self._info_ts = self._full_ts = -1e18
            doc: Any = None
            fresh: ServerInfo | None = None
            if self.info is None or ts - self._info_ts >= self._info_every:
                doc = await self._server_info()
                self._info_ts = ts
                fresh = self._read_info(doc, ts)
            loads = await self._loads() if snapshot is None else None
        except ScrapeError:
            self._failed_since_last_ok = True
            raise
        if fresh is not None and fresh.startup_fingerprint is not None:
            self.deriver.note_fingerprint("server_info", fresh.startup_fingerprint)
        readings = self.deriver.derive(ts, snapshot, self.info, loads, noted=True)
        warnings: list[str] = []
        counter_rows: list[CounterRow] = []
        pauses: list[PauseRow] = []
        if doc is not None:
            pauses = self.pauses.new(pause_rows(doc))
            read = read_counters(doc)  # numbers only: the document needs no redaction for them
            warnings = read.warnings
            counter_rows = self.counters.update(ts, read.blocks)
            for w in warnings:
                if w not in self._warned:  # once per server and problem, not every few seconds
                    self._warned.add(w)
                    log.warning("%s: %s", self.url, w)
        self._failed_since_last_ok = False
        return ScrapeResult(
            ts=ts,
            readings=readings,
            info=fresh,
            restarted=self.deriver.restarts > restarts_before,
            duration_s=time.monotonic() - t0,
            metrics_enabled=snapshot is not None,
            warnings=warnings,
            counters=counter_rows,
            pauses=pauses,
        )
