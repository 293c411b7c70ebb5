"""The collection daemon: one asyncio process, one task per source, one storage task.

- A source that fails is retried with exponential backoff (capped at ``max_backoff_s``, by default two
  intervals, so a server that comes back is read again within two intervals); the outage is written as
  a ``CollectionGap`` (opened on the first failure, closed on recovery) and the other sources go on.
- Samples go to ``StorageSink``, which puts them on storage's one BatchWriter: queued in memory (bounded)
  while the database is busy, written by the writer's thread.
- SIGTERM/SIGINT (or ``duration_s``) stop the sources, flush the writer, and return.
- Health per source (last success, errors, lag = how late a cycle started against its schedule plus how
  long it took) goes to the log and to ``CollectorHealth``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .gpu.dcgm import DcgmScraper
from .gpu.nvml import DEFAULT_PCIE_POLL_S, NvmlSampler, NvmlUnavailableError
from .http import KeepAliveGets, check_http_url
from .sglang.scraper import DEFAULT_SERVER_INFO_EVERY_S, SglangScraper
from .sink import StorageSink
from .tasks import cancel_all

log = logging.getLogger("spectower.collect")

DEFAULT_INTERVAL_S = 1.0
# NVML utilisation and power are averages over up to ~1 s; SGLang's spec gauges and gen_throughput refresh
# every decode_log_interval (default 40) decode steps, i.e. roughly every 0.5-2 s under load.
NVML_REFRESH_S = 1.0
SGLANG_REFRESH_S = 1.0
DEFAULT_MAX_TIMEOUT_S = 5.0
# At start, a source last collected more than this many intervals ago gets a gap for the collector's own
# downtime: one interval is the next sample being due, the second absorbs scheduling jitter and the start.
DOWNTIME_GAP_INTERVALS = 2.0
DEFAULT_STORAGE_CHECK_EVERY_S = 0.5
DEFAULT_BUSY_WARN_EVERY_S = 10.0
DEFAULT_HEALTH_LOG_EVERY_S = 60.0


@dataclass
class DaemonConfig:
    servers: list[str] = field(default_factory=list)
    gpu: str = "none"  # nvml | dcgm=URL | none
    prometheus: str | None = None
    interval_s: float = DEFAULT_INTERVAL_S
    duration_s: float | None = None
    timeout_s: float | None = None  # per request; default min(5 s, 2 intervals), at least 0.5 s
    max_backoff_s: float | None = None  # default two intervals
    api_key: str | None = field(default=None, repr=False)
    server_info_every_s: float = DEFAULT_SERVER_INFO_EVERY_S

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"--interval must be > 0 seconds, got {self.interval_s}")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"--duration must be > 0 seconds, got {self.duration_s}")
        if self.gpu not in ("nvml", "none") and not self.gpu.startswith("dcgm="):
            raise ValueError(f"--gpu must be nvml, dcgm=URL or none, got {self.gpu!r}")
        if self.gpu.startswith("dcgm="):
            check_http_url(self.gpu[5:], "--gpu dcgm=URL")
        for url in self.servers:
            check_http_url(url, "--server")
        if self.prometheus is not None:
            check_http_url(self.prometheus, "--prometheus")
        if not self.servers and self.gpu == "none" and self.prometheus is None:
            raise ValueError("nothing to collect: give --server, --gpu nvml|dcgm=URL or --prometheus")

    @property
    def request_timeout_s(self) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return max(0.5, min(DEFAULT_MAX_TIMEOUT_S, 2 * self.interval_s))

    @property
    def backoff_cap_s(self) -> float:
        return self.max_backoff_s if self.max_backoff_s is not None else 2 * self.interval_s


@dataclass
class SourceHealth:
    source: str
    target: str
    last_success_ts: float | None = None
    errors_total: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    lag_s: float | None = None
    cycles: int = 0
    in_gap: bool = False


def interval_warnings(
    interval_s: float, *, nvml: bool = False, sglang: bool = False, decode_log_interval: int | None = None
) -> list[str]:
    """Intervals below what the sources refresh at are allowed; say what they will see."""
    out: list[str] = []
    if nvml and interval_s < NVML_REFRESH_S:
        out.append(
            f"--interval {interval_s:g}s is below NVML's own refresh: utilisation and power are "
            f"averaged over up to {NVML_REFRESH_S:g} s, so consecutive GPU samples repeat values"
        )
    if sglang and interval_s < SGLANG_REFRESH_S:
        dli = decode_log_interval or 40
        out.append(
            f"--interval {interval_s:g}s is below SGLang's refresh: spec_accept_length/rate and "
            f"gen_throughput change only every {dli} decode steps (--decode-log-interval), so consecutive "
            "samples repeat those gauges"
        )
    return out


class Collector:
    def __init__(
        self, config: DaemonConfig, sink: StorageSink, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.sink = sink
        self.clock = clock
        self.health: dict[tuple[str, str], SourceHealth] = {}
        self._stop = asyncio.Event()
        self.nvml: NvmlSampler | None = None
        self.scrapers: dict[str, SglangScraper] = {}

    def stop(self) -> None:
        self._stop.set()

    # -- one generic loop per source ------------------------------------------------------------------
    async def _source_loop(self, source: str, target: str, once: Callable[[], Awaitable[None]]) -> None:
        h = self.health.setdefault((source, target), SourceHealth(source, target))
        interval = self.config.interval_s
        backoff = interval
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        while not self._stop.is_set():
            scheduled = next_tick
            started = loop.time()
            attempt_ts = self.clock()  # gaps run from the first failed attempt to the first good one
            try:
                await once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                now = self.clock()
                reason = str(exc) or type(exc).__name__
                h.errors_total += 1
                h.consecutive_failures += 1
                h.last_error = reason
                if not h.in_gap:
                    h.in_gap = True
                    log.warning(
                        "%s %s failing: %s (gap opened; retrying with backoff)", source, target, reason
                    )
                    self.sink.gap_open(source, target, attempt_ts, reason)
                else:
                    log.debug("%s %s still failing: %s", source, target, reason)
                self.sink.health(source, target, ok=False, ts=now, error=reason)
                delay = min(backoff, self.config.backoff_cap_s)
                backoff = min(backoff * 2, self.config.backoff_cap_s)
                next_tick = loop.time() + delay
            else:
                now = self.clock()
                done = loop.time()
                h.lag_s = max(0.0, started - scheduled) + (done - started)
                h.last_success_ts = now
                h.consecutive_failures = 0
                h.cycles += 1
                if h.in_gap:
                    h.in_gap = False
                    log.info("%s %s recovered after %s", source, target, h.last_error)
                    self.sink.gap_close(source, target, attempt_ts)
                    self.sink.health(source, target, ok=True, ts=now, lag_s=h.lag_s, force=True)
                else:
                    self.sink.health(source, target, ok=True, ts=now, lag_s=h.lag_s)
                backoff = interval
                next_tick = scheduled + interval
                if next_tick < done:  # fell behind (slow source): skip the missed ticks, no burst
                    next_tick = done + (interval - (done - scheduled) % interval)
            # A plain sleep to the next tick: a stop cancels this task (``_run``), so the loop need not
            # also wait on the stop event (a task and a timer per tick per source).
            await asyncio.sleep(max(0.0, next_tick - loop.time()))

    # -- the sources ----------------------------------------------------------------------------------
    def _sglang_once(self, scraper: SglangScraper) -> Callable[[], Awaitable[None]]:
        warned: list[bool] = [False]

        async def once() -> None:
            result = await scraper.scrape()
            if result.restarted:
                log.warning(
                    "%s restarted (startup changed or counters went down): rates restart", scraper.url
                )
            if result.info is not None and not warned[0]:
                warned[0] = True
                for w in interval_warnings(
                    self.config.interval_s, sglang=True, decode_log_interval=result.info.decode_log_interval
                ):
                    log.warning(w)
            self.sink.engine(scraper.url, result)

        return once

    def _nvml_once(self, sampler: NvmlSampler) -> Callable[[], Awaitable[None]]:
        async def once() -> None:
            readings = await asyncio.to_thread(sampler.sample)
            self.sink.gpus(readings, sampler.facts())
            lost = [r.index for r in readings if r.lost]
            if lost and len(lost) == len(readings):
                raise RuntimeError(f"every GPU is lost ({lost})")

        return once

    def _dcgm_once(self, scraper: DcgmScraper) -> Callable[[], Awaitable[None]]:
        async def once() -> None:
            readings, facts = await scraper.scrape()
            if not readings:
                raise RuntimeError(f"{scraper.url}: no DCGM_FI_* GPU series in the answer")
            self.sink.gpus(readings, facts)

        return once

    async def _pcie_poll_loop(self, sampler: NvmlSampler) -> None:
        """Between samples, read the 32-bit PCIe byte counters often enough to see every wrap."""
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(sampler.poll_pcie)
            except Exception as exc:  # a poll never takes the NVML source down; the next sample reports it
                log.debug("PCIe poll failed: %s", exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=DEFAULT_PCIE_POLL_S)

    async def _storage_loop(self) -> None:
        """Say when the database keeps the writer waiting, and record what it refused as health."""
        last_warn = -DEFAULT_BUSY_WARN_EVERY_S
        while not self._stop.is_set():
            try:
                self.sink.note_storage_health(self.clock())
                busy = self.sink.busy()
                if busy and time.monotonic() - last_warn >= DEFAULT_BUSY_WARN_EVERY_S:
                    last_warn = time.monotonic()
                    log.warning("%s", busy)
            except Exception as exc:  # the storage loop outlives anything (the writer quarantines per row)
                log.exception("storage loop: %s", exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=DEFAULT_STORAGE_CHECK_EVERY_S)

    async def _health_log_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=DEFAULT_HEALTH_LOG_EVERY_S)
            try:
                self._log_health()
            except Exception as exc:  # the health lines go on: one failed summary is one missed line
                log.exception("health log: %s", exc)

    def _log_health(self) -> None:
        for h in self.health.values():
            log.info(
                "health %s %s: cycles=%d errors=%d lag=%.3fs last_success=%s%s",
                h.source,
                h.target,
                h.cycles,
                h.errors_total,
                h.lag_s or 0.0,
                f"{h.last_success_ts:.1f}" if h.last_success_ts else "never",
                f" last_error={h.last_error}" if h.in_gap else "",
            )
        c = self.sink.summary()
        log.info(
            "storage: written=%d pending=%d dropped=%d quarantined=%d lost=%d",
            c["written"],
            c["pending"],
            c["dropped"],
            c["rejected"],
            c["lost"],
        )

    # -- run ------------------------------------------------------------------------------------------
    def sources(self) -> list[tuple[str, str]]:
        """The (source, target) pairs this collector owns (as its gaps and health rows name them)."""
        cfg = self.config
        out = [("sglang", url.rstrip("/")) for url in cfg.servers]
        if cfg.gpu == "nvml":
            out.append(("nvml", socket.gethostname()))
        elif cfg.gpu.startswith("dcgm="):
            dcgm_url = cfg.gpu[5:].rstrip("/")
            out.append(("dcgm", dcgm_url if dcgm_url.endswith("/metrics") else dcgm_url + "/metrics"))
        if cfg.prometheus:
            out.append(("prometheus", cfg.prometheus.rstrip("/")))
        return out

    async def run(self) -> None:
        """Collect until stopped. Raises storage's ``CollectorConflictError`` at once when another
        collector already writes to the database (SQLite) or owns one of the sources (PostgreSQL)."""
        downtime_after_s = DOWNTIME_GAP_INTERVALS * self.config.interval_s
        self.sink.claim(self.sources(), self.clock(), downtime_after_s=downtime_after_s)
        try:
            await self._run()
        finally:
            self.sink.release()

    async def _run(self) -> None:
        cfg = self.config
        for w in interval_warnings(cfg.interval_s, nvml=cfg.gpu == "nvml"):
            log.warning(w)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self.stop)
        async with KeepAliveGets() as client:
            tasks: list[asyncio.Task[None]] = []
            for url in cfg.servers:
                scraper = SglangScraper(
                    url,
                    client,
                    api_key=cfg.api_key,
                    timeout_s=cfg.request_timeout_s,
                    server_info_every_s=cfg.server_info_every_s,
                    clock=self.clock,
                )
                self.scrapers[url] = scraper
                tasks.append(
                    asyncio.create_task(self._source_loop("sglang", scraper.url, self._sglang_once(scraper)))
                )
            if cfg.gpu == "nvml":
                sampler = NvmlSampler(clock=self.clock)
                try:
                    facts = await asyncio.to_thread(sampler.start)
                    self.nvml = sampler
                    log.info("NVML: %d GPU(s) on %s", len(facts), sampler.host)
                    tasks.append(
                        asyncio.create_task(self._source_loop("nvml", sampler.host, self._nvml_once(sampler)))
                    )
                    if cfg.interval_s > DEFAULT_PCIE_POLL_S:
                        tasks.append(asyncio.create_task(self._pcie_poll_loop(sampler)))
                except NvmlUnavailableError as exc:
                    log.error("%s", exc)
                    self.sink.health("nvml", sampler.host, ok=False, ts=self.clock(), error=str(exc))
            elif cfg.gpu.startswith("dcgm="):
                dcgm = DcgmScraper(cfg.gpu[5:], client, timeout_s=cfg.request_timeout_s, clock=self.clock)
                tasks.append(asyncio.create_task(self._source_loop("dcgm", dcgm.url, self._dcgm_once(dcgm))))
            if cfg.prometheus:
                from .prometheus import PrometheusSource

                prom = PrometheusSource(cfg.prometheus, timeout_s=cfg.request_timeout_s, clock=self.clock)
                tasks.append(
                    asyncio.create_task(self._source_loop("prometheus", prom.url, self._prom_once(prom)))
                )
            storage_task = asyncio.create_task(self._storage_loop())
            health_task = asyncio.create_task(self._health_log_loop())
            if cfg.duration_s is not None:
                loop.call_later(cfg.duration_s, self.stop)
            await self._stop.wait()
            await cancel_all(tasks)
            await asyncio.gather(storage_task, health_task, return_exceptions=True)
        if self.nvml is not None:
            self.nvml.close()
        for h in self.health.values():
            if h.in_gap:
                # The outage is still on at exit: leave the gap open (end unknown) but record the health.
                log.info("%s %s still failing at exit: %s", h.source, h.target, h.last_error)
        ok = await asyncio.to_thread(self.sink.flush)
        self.sink.note_storage_health(self.clock())  # what the last flush refused is recorded too
        ok = await asyncio.to_thread(self.sink.flush, 5.0) and ok
        c = self.sink.summary()
        log.info(
            "collector stopped: %d row(s) written, %d buffered left, %d dropped, %d quarantined, %d lost%s",
            c["written"],
            c["pending"],
            c["dropped"],
            c["rejected"],
            c["lost"],
            "" if ok else " (database did not take everything before the exit timeout)",
        )

    def _prom_once(self, prom: object) -> Callable[[], Awaitable[None]]:
        from .prometheus import PrometheusSource

        assert isinstance(prom, PrometheusSource)

        async def once() -> None:
            batch = await asyncio.to_thread(prom.collect_now)
            for url, result in batch.engine.items():
                self.sink.engine(url, result)
            if batch.gpu_readings:
                self.sink.gpus(batch.gpu_readings, batch.gpu_facts)

        return once
