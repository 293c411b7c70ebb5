"""Fleets through Prometheus (prometheus-api-client): the same SGLang and DCGM series for many instances.

Instead of scraping each server, ask a Prometheus that already does: one instant query for the SGLang
series spectower uses (all instances at once) and one for the DCGM series. Each instance's samples go
through the same parser as a direct scrape (``snapshot_from_samples``, ``readings_from_samples``), so rank
grouping, counter rates, bucket-delta percentiles and restart detection behave exactly the same; the
samples' own Prometheus timestamps are the reading times. ``engine_history(start, end, step)`` does the
same over a range (``query_range``) for a backfill. Every request has an explicit timeout; retries are
the daemon's business (the client's own retry loop is switched off).
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests.exceptions import RequestException
from urllib3.util.retry import Retry

from .gpu.dcgm import readings_from_samples
from .gpu.reading import GpuFacts, GpuReading
from .http import DeadlineCalls
from .promtext import PromSample
from .sglang.metrics import (
    COUNTERS,
    GAUGES,
    HISTOGRAM_FALLBACKS,
    HISTOGRAMS,
    snapshot_from_samples,
)
from .sglang.reading import EngineDeriver
from .sglang.scraper import ScrapeResult

DEFAULT_TIMEOUT_S = 10.0
# An instant query over a fleet answers far less than this; a runaway answer is cut here.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


# Prometheus reads run here: the caller waits at most its deadline whatever the peer trickles. Their own
# slots: a Prometheus that stalls its reads cannot hold up the knob client's.
_READS = DeadlineCalls("prometheus", max_in_flight=4)


class BoundedSession(requests.Session):
    """requests' timeout is per network read: a server that trickles never times out, and the whole
    body is held in memory. This session reads every answer, headers and body, within one deadline (the
    read runs on a worker; past the deadline the caller gets a timeout and the worker's socket is shut
    down, which ends a read blocked on it) and stops past ``max_bytes``."""

    def __init__(self, deadline_s: float, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        super().__init__()
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["stream"] = True
        opened: list[requests.Response] = []

        def read() -> requests.Response:
            resp = super(BoundedSession, self).request(method, url, *args, **kwargs)
            opened.append(resp)
            chunks: list[bytes] = []
            size = 0
            try:
                for chunk in resp.iter_content(chunk_size=64 * 1024):
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise requests.exceptions.ContentDecodingError(
                            f"{url!s}: answer over the {self.max_bytes} byte limit"
                        )
                    chunks.append(chunk)
            finally:
                resp.close()
            resp._content = b"".join(chunks)
            return resp

        try:
            return _READS.call(self.deadline_s, read)
        except TimeoutError:
            for resp in opened:  # a body still arriving: end the read blocked on its socket
                _shut(resp)
            raise requests.exceptions.Timeout(
                f"{url!s}: timed out: no complete answer within {self.deadline_s:g}s"
            ) from None


def _shut(resp: requests.Response) -> None:
    """Shut the socket under a streamed answer down (shutdown, unlike close, wakes a read blocked in another
    thread)."""
    connection = getattr(resp.raw, "connection", None)  # urllib3 2: the HTTPConnection still reading
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _point(value: object) -> tuple[float, object] | None:
    """A ``[unix_time, "value"]`` pair of a query answer as (time, value), None when it is not one: one odd
    series is skipped, the rest of the answer is read."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    try:
        ts = float(value[0])
    except (TypeError, ValueError, OverflowError):
        return None
    return (ts, value[1]) if math.isfinite(ts) else None


def _by_instance(series_list: list[Any], require_instance: bool) -> dict[str, tuple[float, list[PromSample]]]:
    """Per instance label: (newest sample time, samples) of an instant query's series."""
    out: dict[str, tuple[float, list[PromSample]]] = {}
    for series in series_list:
        metric = series.get("metric") if isinstance(series, dict) else None
        if not isinstance(metric, dict):
            continue
        inst = metric.get("instance", "")
        at_value = _point(series.get("value"))
        if not isinstance(inst, str) or (require_instance and not inst) or at_value is None:
            continue
        s = _sample(metric, at_value[1])
        if s is None:
            continue
        ts, samples = out.get(inst, (0.0, []))
        samples.append(s)
        out[inst] = (max(ts, at_value[0]), samples)
    return out


# Labels Prometheus adds that are not SGLang's: they identify the target, not the rank.
TARGET_LABELS = ("instance", "job")


def sglang_selector() -> str:
    names = [f"sglang:{g}" for g in GAUGES] + [f"sglang:{c}" for c in COUNTERS]
    names += [f"sglang:{h}_bucket" for h in (*HISTOGRAMS, *HISTOGRAM_FALLBACKS)]
    names.append("sglang:startup_time_seconds")
    return '{__name__=~"' + "|".join(names) + '"}'


DCGM_SELECTOR = '{__name__=~"DCGM_FI_.*"}'


class PrometheusSourceError(ConnectionError):
    """Prometheus could not be queried (connection, timeout, HTTP error, unexpected answer)."""


def _type_of(name: str) -> str:
    short = name.removeprefix("sglang:")
    if short in GAUGES or short == "startup_time_seconds":
        return "gauge"
    if short.endswith("_bucket"):
        return "histogram"
    if short.endswith("_total"):
        return "counter"
    return "untyped"


def _sample(metric: dict[str, str], value: Any) -> PromSample | None:
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    name = metric.get("__name__", "")
    if not isinstance(name, str) or not all(isinstance(val, str) for val in metric.values()):
        return None  # Prometheus' labels are strings: anything else is not a series of its
    labels = {k: val for k, val in metric.items() if k != "__name__" and k not in TARGET_LABELS}
    return PromSample(name=name, family=name, type=_type_of(name), labels=labels, value=v)


@dataclass
class PromBatch:
    ts: float
    engine: dict[str, ScrapeResult] = field(default_factory=dict)  # server URL -> result
    gpu_readings: list[GpuReading] = field(default_factory=list)
    gpu_facts: list[GpuFacts] = field(default_factory=list)


def instance_url(instance: str) -> str:
    return instance if instance.startswith(("http://", "https://")) else f"http://{instance}"


class PrometheusSource:
    source = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._clock = clock
        self._prom = PrometheusConnect(
            url=self.url,
            headers=headers,
            retry=Retry(total=0),
            timeout=timeout_s,
            session=BoundedSession(deadline_s=timeout_s),
        )
        self._derivers: dict[str, EngineDeriver] = {}

    # -- raw queries ----------------------------------------------------------------------------------
    def _query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"timeout": f"{self.timeout_s:g}s"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        try:
            result = self._prom.custom_query(promql, params=params, timeout=self.timeout_s)
        except (PrometheusApiClientException, RequestException, ValueError) as exc:
            raise PrometheusSourceError(f"{self.url}: query failed: {type(exc).__name__}: {exc}") from None
        if not isinstance(result, list):
            raise PrometheusSourceError(f"{self.url}: unexpected answer to an instant query")
        return result

    def _query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        if not end > start or not step > 0:
            raise ValueError(f"range query needs end > start and step > 0 (got {start}, {end}, {step})")
        try:
            result = self._prom.custom_query_range(
                promql,
                start_time=datetime.fromtimestamp(start, UTC),
                end_time=datetime.fromtimestamp(end, UTC),
                step=f"{step:g}",
                params={"timeout": f"{self.timeout_s:g}s"},
                timeout=self.timeout_s,
            )
        except (PrometheusApiClientException, RequestException, ValueError) as exc:
            raise PrometheusSourceError(
                f"{self.url}: range query failed: {type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(result, list):
            raise PrometheusSourceError(f"{self.url}: unexpected answer to a range query")
        return result

    # -- SGLang ---------------------------------------------------------------------------------------
    def sglang_samples(self, at: float | None = None) -> dict[str, tuple[float, list[PromSample]]]:
        """Per instance: (newest sample timestamp, samples) of the SGLang series spectower reads."""
        return _by_instance(self._query(sglang_selector(), at), require_instance=True)

    def collect_now(self) -> PromBatch:
        batch = PromBatch(ts=self._clock())
        for inst, (ts, samples) in self.sglang_samples().items():
            url = instance_url(inst)
            deriver = self._derivers.setdefault(url, EngineDeriver())
            before = deriver.restarts
            snap = snapshot_from_samples(samples)
            readings = deriver.derive(ts, snap)
            batch.engine[url] = ScrapeResult(
                ts=ts, readings=readings, info=None, restarted=deriver.restarts > before, duration_s=0.0
            )
        batch.gpu_readings, batch.gpu_facts = self.dcgm(at=None)
        return batch

    def engine_history(self, start: float, end: float, step: float) -> dict[str, list[ScrapeResult]]:
        """Readings for every instance at each step of [start, end] (a fresh deriver per call)."""
        per_inst: dict[str, dict[float, list[PromSample]]] = {}
        for series in self._query_range(sglang_selector(), start, end, step):
            metric = series.get("metric") if isinstance(series, dict) else None
            inst = metric.get("instance") if isinstance(metric, dict) else None
            points = series.get("values") if isinstance(series, dict) else None
            if not isinstance(inst, str) or not inst or not isinstance(points, list):
                continue
            for point in points:
                at_value = _point(point)
                s = None if at_value is None else _sample(metric, at_value[1])  # type: ignore[arg-type]
                if s is not None and at_value is not None:
                    per_inst.setdefault(inst, {}).setdefault(at_value[0], []).append(s)
        out: dict[str, list[ScrapeResult]] = {}
        for inst, by_ts in per_inst.items():
            deriver = EngineDeriver()
            results: list[ScrapeResult] = []
            for ts in sorted(by_ts):
                before = deriver.restarts
                readings = deriver.derive(ts, snapshot_from_samples(by_ts[ts]))
                results.append(
                    ScrapeResult(
                        ts=ts,
                        readings=readings,
                        info=None,
                        restarted=deriver.restarts > before,
                        duration_s=0.0,
                    )
                )
            out[instance_url(inst)] = results
        return out

    # -- DCGM -----------------------------------------------------------------------------------------
    def dcgm(self, at: float | None = None) -> tuple[list[GpuReading], list[GpuFacts]]:
        per_inst = _by_instance(self._query(DCGM_SELECTOR, at), require_instance=False)
        readings: list[GpuReading] = []
        facts: list[GpuFacts] = []
        for inst, (ts, samples) in per_inst.items():
            r, f = readings_from_samples(samples, ts, inst)
            readings += r
            facts += f
        return readings, facts
